"""Attaching to a token-protected Ray cluster started with ``ray start --head``: ``weaveplace
run`` and ``weaveplace serve`` attached by address.

A real head node runs in its own process group (``ray start --head --block`` with token
authentication, its own RAY_TMPDIR and free ports) and is killed by process group at the end.
``weaveplace run`` attaches to it by explicit address in a subprocess (a clean environment:
no ``RAY_AUTH_MODE``), with the token found through ``RAY_AUTH_TOKEN_PATH``, and its answers are
checked against the brute-force oracle; a wrong token and no token give one line with the
``InvalidAuthToken`` hint, exit code 2, within seconds (Ray alone retries for minutes).
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from datetime import UTC
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from support.ray_ports import free_port, port_flags
from support.waiting import wait_for

from cluster.runtime.ray_runtime import LOOPBACK_ENV, token_source
from executors.oracle import brute_force

REPO = Path(__file__).resolve().parents[3]
RAY = Path(sys.executable).with_name("ray")


def _clean_env(**extra) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("RAY_AUTH") and k not in ("RAY_ADDRESS", LOOPBACK_ENV)
    }  # (set while the session's Ray runs)
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    """(address, token, tmpdir) of a token-protected head started by ``ray start``."""
    tmp = Path(tempfile_dir := tmp_path_factory.mktemp("rayhead"))
    raytmp = Path(f"/tmp/ray-wp-{os.getpid()}")  # short: Ray's unix socket paths are limited
    token = secrets.token_hex(32)
    port = free_port()
    cmd = [
        str(RAY),
        "start",
        "--head",
        "--block",
        "--port",
        str(port),
        "--num-cpus",
        "2",
        "--include-dashboard",
        "false",
        "--disable-usage-stats",
        "--temp-dir",
        str(raytmp),
        *port_flags(),
    ]
    env = _clean_env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token, RAY_TMPDIR=str(raytmp))
    log = open(tmp / "head.log", "wb")
    proc = subprocess.Popen(
        cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=tempfile_dir
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"ray start exited: {(tmp / 'head.log').read_text()[-2000:]}")
            if b"Ray runtime started" in (tmp / "head.log").read_bytes():
                break
            time.sleep(0.5)
        else:
            pytest.fail("ray start --head did not come up in 120 s")
        yield f"127.0.0.1:{port}", token, tmp
    finally:
        # a throwaway head: a short grace for ``ray start`` to stop its processes, then the
        # whole group is killed (it ignored SIGTERM for 10 s and more on a loaded machine)
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=3)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # anything of the group still alive
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)
        log.close()
        subprocess.run(["rm", "-rf", str(raytmp)], check=False)


def _config(tmp: Path, address: str) -> Path:
    cfg = {
        "workload": {
            "queries": [
                {"id": "mx", "stream": "mf01", "aggregate": "max", "range": 1000, "slide": 400},
                {"id": "av", "stream": "mf01", "aggregate": "avg", "range": 700, "slide": 300},
                {"id": "sm", "stream": "mf02", "aggregate": "sum", "range": 500, "slide": 500},
            ]
        },
        "streams": {"mf01": {"rate": 0.1}, "mf02": {"rate": 0.1}},
        "cluster": {"nodes": 2, "ray": {"address": address}, "spark": {"master": "local[1]"}},
        "placement": {"optimizers": "WG_TN", "ie": "slickdeque"},
        "data": {"duration_s": 5, "rate_hz": 100, "seed": 1},
        "run": {"mode": "live", "output_dir": str(tmp / "out"), "batch_rows": 200},
    }
    path = tmp / "attach.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _run(args, env, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "sim.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=timeout,
    )


def _start(args, env) -> subprocess.Popen:
    """``weaveplace ARGS`` started, not waited for (``_finish`` waits)."""
    return subprocess.Popen(
        [sys.executable, "-m", "sim.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=env,
    )


def _finish(proc: subprocess.Popen, timeout: float) -> subprocess.CompletedProcess:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_token_source_order(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    for k in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(k, raising=False)
    assert token_source()[0] is None and "none" in token_source()[1]
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("home-token\n")
    assert token_source() == ("home-token", "~/.ray/auth_token")
    (tmp_path / "t").write_text("file-token")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "t"))
    assert token_source() == ("file-token", f"RAY_AUTH_TOKEN_PATH ({tmp_path / 't'})")
    monkeypatch.setenv("RAY_AUTH_TOKEN", "env-token")
    assert token_source() == ("env-token", "the RAY_AUTH_TOKEN environment variable")


@pytest.mark.scenario  # its own `ray start` head, ~26 s: make test-scenarios
@pytest.mark.cluster
def test_attach_by_address_with_token_file(ray_head, tmp_path):
    address, token, _ = ray_head
    (tmp_path / "tok").write_text(token)
    env = _clean_env(
        RAY_AUTH_TOKEN_PATH=str(tmp_path / "tok"),
        HOME=str(tmp_path),
        RAY_TMPDIR=str(tmp_path / "rt"),
        COLUMNS="200",
    )
    res = _run(["run", str(_config(tmp_path, address))], env)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    assert f"Ray: token from RAY_AUTH_TOKEN_PATH ({tmp_path / 'tok'})" in out
    data = pq.read_table(tmp_path / "out" / "data.parquet")
    got = pq.read_table(tmp_path / "out" / "answers.parquet").to_pylist()
    assert got
    for qid, agg, r, s, col in (
        ("mx", "max", 1000, 400, "mf01"),
        ("av", "avg", 700, 300, "mf01"),
        ("sm", "sum", 500, 500, "mf02"),
    ):
        want, _ = brute_force(
            [{"id": qid, "aggregate": agg, "range": r, "slide": s}],
            data["ts_ms"].to_numpy(),
            data[col].to_numpy(),
        )
        mine = sorted(
            (a["window_start"], a["window_end"], a["value"]) for a in got if a["query_id"] == qid
        )
        assert [m[:2] for m in mine] == [(st, en) for _, st, en, _ in want]
        np.testing.assert_allclose([m[2] for m in mine], [w[3] for w in want], rtol=1e-9)


@pytest.mark.scenario  # the module's `ray start` head, ~13 s, then ~2 s: make test-scenarios
@pytest.mark.cluster
@pytest.mark.parametrize("token", ["wrong", None])
def test_refused_token_is_one_line_with_hint(ray_head, tmp_path, token):
    address, _, _ = ray_head
    env = _clean_env(
        HOME=str(tmp_path),
        RAY_TMPDIR=str(tmp_path / "rt"),
        COLUMNS="300",
        **({"RAY_AUTH_TOKEN": secrets.token_hex(32)} if token else {}),
    )
    seen = []
    # validate makes run's check, with the same line; the two run side by side (each mostly
    # waits on the refused connection), each timed from the common start
    t0 = time.monotonic()
    cfg = str(_config(tmp_path, address))
    procs = [_start([cmd, cfg], env) for cmd in ("validate", "run")]
    try:
        for proc in procs:
            res = _finish(proc, timeout=120)
            assert res.returncode == 2
            out = res.stdout + res.stderr
            assert "Traceback" not in out
            lines = [ln for ln in out.splitlines() if ln.startswith("error:")]
            assert len(lines) == 1 and "InvalidAuthToken" in lines[0]
            assert "RAY_AUTH_TOKEN" in lines[0] and "~/.ray/auth_token" in lines[0]
            assert (
                "token from the RAY_AUTH_TOKEN environment variable" if token else "no token"
            ) in lines[0]
            assert time.monotonic() - t0 < 60  # not Ray's minutes of retries
            seen.append(lines[0])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert seen[0] == seen[1]


@pytest.mark.scenario
@pytest.mark.cluster
def test_serve_attached_answers_equal_the_oracle(ray_head, tmp_path):
    """``weaveplace serve`` on the token-protected head (a subprocess, the token through
    ``RAY_AUTH_TOKEN_PATH``): two files dropped, a query added between them, ``stop --flush``;
    it names the token it attached with, and every query's answers equal the brute force over
    the files (the added query's from its ``accepted_at``)."""
    from datetime import datetime, timedelta

    from sim.debs_generator import generate_debs

    address, token, _ = ray_head
    (tmp_path / "tok").write_text(token)
    incoming, run_dir = tmp_path / "incoming", tmp_path / "run"
    incoming.mkdir()
    cfg = yaml.safe_load(_config(tmp_path, address).read_text())
    cfg["data"] = {"directory": {"path": str(incoming), "poll_s": 0.25}}
    cfg["run"] = {"mode": "live", "output_dir": str(run_dir), "allowed_lateness": 0}
    (tmp_path / "serve.yaml").write_text(yaml.safe_dump(cfg))
    env = _clean_env(
        RAY_AUTH_TOKEN_PATH=str(tmp_path / "tok"),
        HOME=str(tmp_path),
        RAY_TMPDIR=str(tmp_path / "rt"),
        COLUMNS="200",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "sim.cli", "serve", str(tmp_path / "serve.yaml")],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )

    def ctl(*args):
        res = _run(["ctl", str(run_dir), *args], env, timeout=60)
        assert res.returncode == 0, res.stdout + res.stderr
        return yaml.safe_load(res.stdout)

    def drop(k: int) -> None:
        tmp = incoming / f".f{k}.parquet"
        t0 = datetime(2012, 2, 22, 16, 46, 28, tzinfo=UTC) + timedelta(seconds=5 * k)
        generate_debs(tmp, duration_s=5, rate_hz=100, seed=k, start=t0)
        tmp.rename(incoming / f"f{k}.parquet")

    def fed(n: int) -> None:
        # polled with ctl's own client in this process (``ctl status`` as a command is run
        # once below): a subprocess per poll would cost a Python start-up each
        from sim.serve_cli import ctl as send

        wait_for(
            lambda: send(run_dir, "status", [])["files"] >= n,
            f"{n} files fed",
            120,
            interval=0.2,
            proc=proc,
        )

    try:
        deadline = time.monotonic() + 180
        while not (run_dir / "control.json").exists():
            assert proc.poll() is None, proc.stdout.read()[-3000:]
            assert time.monotonic() < deadline, "serve did not start in 180 s"
            time.sleep(0.1)
        drop(0)
        fed(1)
        assert ctl("status")["files"] >= 1  # the command itself, attached
        (tmp_path / "more.yaml").write_text(
            "queries:\n  - {id: mn, stream: mf02, aggregate: min, range: 900, slide: 300}\n"
        )
        t_reg = ctl("add-queries", str(tmp_path / "more.yaml"))["accepted_at"]["mf02"]
        drop(1)
        fed(2)
        ctl("stop", "--flush")
        out, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-3000:]
    assert f"Ray: token from RAY_AUTH_TOKEN_PATH ({tmp_path / 'tok'})" in out
    data = pq.read_table([str(incoming / f"f{k}.parquet") for k in (0, 1)]).to_pandas()
    got = pq.read_table(run_dir / "answers.parquet").to_pylist()
    for qid, agg, r, s, col, t0 in (
        ("mx", "max", 1000, 400, "mf01", None),
        ("av", "avg", 700, 300, "mf01", None),
        ("sm", "sum", 500, 500, "mf02", None),
        ("mn", "min", 900, 300, "mf02", t_reg),
    ):
        want, _ = brute_force(
            [{"id": qid, "aggregate": agg, "range": r, "slide": s}],
            data["ts_ms"].to_numpy(),
            data[col].to_numpy(),
        )
        want = [w for w in want if t0 is None or w[1] >= t0]
        mine = sorted(
            (a["window_start"], a["window_end"], a["value"]) for a in got if a["query_id"] == qid
        )
        assert mine and [m[:2] for m in mine] == [(st, en) for _, st, en, _ in want]
        np.testing.assert_allclose([m[2] for m in mine], [w[3] for w in want], rtol=1e-9)
