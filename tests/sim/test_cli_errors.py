"""User mistakes on the command line end in one clear line and exit code 2, never a traceback."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

REPO = Path(__file__).resolve().parents[2]
LIVE = (REPO / "configs" / "live_quickstart.yaml").read_text()


def _cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "sim.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )


def _cli_here(monkeypatch, capsys, *args) -> tuple[int, str]:
    """``weaveplace ARGS`` in this process through the same entry point (``sim.cli.main``,
    which turns user errors into one line and exit code 2): ``(exit code, stdout + stderr)``.
    For checks the command makes before any work, without a Python start-up each; every
    command keeps at least one check through ``_cli`` (a real process)."""
    import sim.cli

    monkeypatch.setattr(sys, "argv", ["weaveplace", *args])
    capsys.readouterr()  # only this command's output
    try:
        sim.cli.main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    return code, out.out + out.err


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the socket is: nothing listens there


def test_unreachable_ray_address(tmp_path):
    cfg = tmp_path / "live.yaml"
    cfg.write_text(
        LIVE.replace("cluster:\n", f"cluster:\n  ray: {{address: '127.0.0.1:{_closed_port()}'}}\n")
    )
    res = _cli("run", str(cfg), "--out", str(tmp_path / "out"))
    assert res.returncode == 2
    assert "cluster.ray.address" in res.stderr + res.stdout
    assert "Traceback" not in res.stderr + res.stdout


def test_java_missing(tmp_path):
    env = dict(os.environ, PATH=str(tmp_path))  # no java on this PATH
    res = _cli(
        "run",
        str(REPO / "configs" / "live_quickstart.yaml"),
        "--out",
        str(tmp_path / "out"),
        env=env,
    )
    assert res.returncode == 2
    assert "Java" in res.stdout + res.stderr
    assert "Traceback" not in res.stderr + res.stdout


BAD_ARGUMENTS = [
    # in this process where another test runs the command as a process: simulate just
    # below, report in tests/sim/test_report.py, plan here with --qnum
    (["simulate", "no/such/config.yaml"], "no/such/config.yaml", False),
    (["verify-plan", "no/such/plan.json"], "plan file not found", True),
    (["report", "no/such/run"], "run directory not found", False),
    (["plan", "--qnum", "0"], "qnum", True),
    (["plan", "--gen", "weird"], "generator", False),
    (["bench", "f1", "--experiments", "9"], "experiments", True),
    (["bench", "text", "--rows", "10"], "--rows >= 1000", False),
    (["bench", "order", "--repeat", "0"], "--repeat >= 1", False),
    (["bench", "startup", "--config", "no/such/live.yaml"], "no/such/live.yaml", False),
    (
        ["bench", "startup", "--config", str(REPO / "configs" / "quickstart.yaml")],
        "run.mode",
        False,
    ),
]


@pytest.mark.parametrize(
    "args, needle, process",
    BAD_ARGUMENTS,
    ids=[f"args{i}-{needle}" for i, (_, needle, _) in enumerate(BAD_ARGUMENTS)],
)
def test_bad_arguments(args, needle, process, monkeypatch, capsys):
    if process:
        res = _cli(*args)
        code, out = res.returncode, res.stdout + res.stderr
    else:
        code, out = _cli_here(monkeypatch, capsys, *args)
    assert code == 2, out
    assert needle in out
    assert "Traceback" not in out


def test_live_config_refused_by_simulate(tmp_path):
    res = _cli("simulate", str(REPO / "configs" / "live_quickstart.yaml"))
    assert res.returncode == 2
    assert "run.mode" in res.stdout + res.stderr


def test_stream_output_into_the_watched_directory(tmp_path):
    """Outputs written into the watched directory would be read back as input: refused with
    one line before Ray or Spark start."""
    (tmp_path / "in").mkdir()
    cfg = tmp_path / "live.yaml"
    cfg.write_text(
        LIVE.replace(
            "data:\n  duration_s: 300\n  rate_hz: 100\n  seed: 0\n",
            "data:\n  directory: {path: in}\n",
        )
    )
    res = _cli("run", str(cfg), "--out", str(tmp_path / "in"))
    assert res.returncode == 2, res.stdout + res.stderr
    assert "run.output_dir" in res.stderr and "watched directory" in res.stderr
    assert "Traceback" not in res.stderr + res.stdout


@pytest.mark.parametrize(
    "flag, value, needle",
    [
        ("--until-idle", "5", "only for a watched directory"),  # live_quickstart generates data
        ("--max-files", "0", "expected a number > 0"),
    ],
)
def test_stream_limits_on_the_command_line(tmp_path, flag, value, needle):
    cfg = tmp_path / "live.yaml"
    if value == "0":
        (tmp_path / "in").mkdir()
        cfg.write_text(
            LIVE.replace(
                "data:\n  duration_s: 300\n  rate_hz: 100\n  seed: 0\n",
                "data:\n  directory: {path: in}\n",
            )
        )
    else:
        cfg.write_text(LIVE)
    res = _cli("run", str(cfg), flag, value, "--out", str(tmp_path / "out"))
    assert res.returncode == 2, res.stdout + res.stderr
    assert flag in res.stdout + res.stderr and needle in res.stdout + res.stderr
    assert "Traceback" not in res.stderr + res.stdout


@pytest.mark.parametrize("error, code", [("deployment", 2), ("stream", 1)])
def test_run_failures_are_one_line(tmp_path, monkeypatch, capsys, error, code):
    """``weaveplace run``: a DeploymentError (a drill or plan that cannot run, a failed
    recovery) is a user error, exit 2; a StreamError (Spark cannot watch the directory) exit
    1; both one line, no traceback (run_on_cluster replaced, so no Ray or Spark starts)."""
    import shutil

    import sim.cli
    import sim.cluster_run
    from cluster.deployment.specs import DeploymentError
    from cluster.errors import StreamError

    if shutil.which("java") is None:
        pytest.skip("weaveplace run checks for Java first")
    exc = (
        DeploymentError("faults[0]: node 'node-9' is unknown")
        if error == "deployment"
        else StreamError("Spark cannot watch /x: refused")
    )

    def failing(*args, **kwargs):
        raise exc

    monkeypatch.setattr(sim.cluster_run, "run_on_cluster", failing)
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "weaveplace",
            "run",
            str(REPO / "configs" / "live_quickstart.yaml"),
            "--out",
            str(tmp_path / "out"),
        ],
    )
    with pytest.raises(SystemExit) as ex:
        sim.cli.main()
    assert ex.value.code == code
    out = capsys.readouterr()
    text = out.out + out.err
    assert str(exc) in text and "Traceback" not in text
    assert len([ln for ln in text.splitlines() if ln.strip()]) == 1


def test_quickstart_calls_its_commands_with_every_option(tmp_path, monkeypatch):
    """`make run` = `weaveplace quickstart`: the simulation really runs, and the live step gets
    plain values for every option (a typer default object there crashed the quickstart)."""
    import inspect

    import sim.cli as cli
    import sim.cli.runs as runs

    seen = {}
    params = inspect.signature(runs.run).parameters

    def fake_run(config, out, **kw):
        seen.update(kw)
        assert set(params) == {"config", "out", *kw}
        return tmp_path / "live" / "report.html"

    monkeypatch.setattr(runs, "run", fake_run)
    res = CliRunner().invoke(cli.app, ["quickstart", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "simulation" / "results.csv").is_file()
    assert all(v is None for v in seen.values())


def test_data_convert(tmp_path, monkeypatch, capsys):
    """``weaveplace data convert``: a summary line, rejects next to OUT, Parquet equal to
    the reader's rows; mistakes are one line with exit code 2."""
    import pyarrow.parquet as pq

    from cluster.debs.text import read_debs_tsv
    from sim.debs_generator import generate_debs

    src = tmp_path / "in.txt"
    generate_debs(src, duration_s=3, seed=2, fmt="tsv")
    lines = src.read_bytes()[:-2].split(b"\r\n")
    lines[5] += lines[6]  # glued
    del lines[6]
    lines[9] += b"\tmachine-1"
    src.write_bytes(b"\r\n".join(lines) + b"\r\nbad line\r\n")
    out = tmp_path / "out.parquet"
    res = _cli("data", "convert", str(src), str(out))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "rejected" in res.stdout and "1 glued lines split" in res.stdout
    rows = (tmp_path / "out.rejects.tsv").read_text().splitlines()
    assert [r.split("\t")[0] for r in rows[1:]] == ["10", str(len(lines) + 1)]
    assert pq.read_table(out).equals(read_debs_tsv(src).read_all())
    # the rest in this process (the command ran as a process above)
    code, text = _cli_here(
        monkeypatch, capsys, "data", "convert", str(src), str(out), "--extra-columns", "ignore"
    )
    assert code == 0 and "1 extra columns dropped" in text
    assert pq.read_table(out).equals(read_debs_tsv(src, extra_columns="ignore").read_all())
    for args, needle in (
        (["nope.txt", str(out)], "IN: file not found"),
        ([str(src), str(tmp_path / "o.csv")], "OUT:"),
        ([str(out), str(tmp_path / "o.parquet")], "already Parquet"),
        ([str(src), str(out), "--extra-columns", "x"], "--extra-columns"),
    ):
        code, text = _cli_here(monkeypatch, capsys, "data", "convert", *args)
        assert code == 2 and needle in text, args
        assert "Traceback" not in text


LONG = "X" * 5000
SPACED = "a b " * 1250


@pytest.mark.parametrize(
    "config, args, needles",
    [
        (  # the 5,000-character optimizer name of the issue
            f"placement:\n  optimizers: [{LONG}]\n",
            [],
            ["unknown optimizer 'XXXX", "(5,000 characters)", "allowed: G_RAND"],
        ),
        (  # a value with spaces, echoed twice (the key and the fix)
            LIVE.replace("stream: mf01", f"stream: '{SPACED}'"),
            [],
            ["no rate for stream 'a b a b", "(5,000 characters)"],
        ),
        (None, ["plan", "--gen", LONG], ["unknown generator", "(5,000 characters)"]),
        (None, ["plan", "--qnum", LONG], ["'--qnum'", "valid integer"]),
        (None, ["ctl", "no-run-dir", LONG], ["unknown command 'XXX", "(5,000 characters)"]),
    ],
)
def test_long_values_are_cut_in_one_line_errors(
    tmp_path, monkeypatch, capsys, config, args, needles
):
    """A user's long value is shown by its start and its length: one short line, exit code 2
    (in process: ``sim.cli.main`` as the ``weaveplace`` script runs it)."""
    import sim.cli

    if config is not None:
        (tmp_path / "c.yaml").write_text(config)
        args = ["validate", str(tmp_path / "c.yaml")]
    monkeypatch.setattr(sys, "argv", ["weaveplace", *args])
    with pytest.raises(SystemExit) as ex:
        sim.cli.main()
    assert ex.value.code == 2
    out = capsys.readouterr()
    text = out.out + out.err
    errors = [ln for ln in text.splitlines() if "rror" in ln]
    assert len(errors) == 1 and len(errors[0]) < 400, text[:1000]
    assert all(n in text for n in needles), text[:1000]
    assert "Traceback" not in text and LONG[:200] not in text and SPACED[:400] not in text


#: paths the OS refuses (sim.config.paths) and what the one line says about each
OS_REFUSED = {
    "long name": ("x" * 5000, r"is a name of 5,000 bytes; the file system allows at most \d+"),
    "long path": ("/".join(["y" * 200] * 25), r"bytes long as an absolute path; the system"),
    "NUL byte": ("in\0put", r"contains a NUL byte"),
}


@pytest.mark.parametrize("command", ["validate", "run", "serve", "simulate"])
@pytest.mark.parametrize("key", ["data.path", "data.directory.path", "run.output_dir"])
@pytest.mark.parametrize("bad", sorted(OS_REFUSED))
def test_config_paths_the_os_refuses(tmp_path, monkeypatch, capsys, command, key, bad):
    """A config path the OS refuses for its length or characters (issue 36: a 5,000-character
    ``data.path`` was a traceback ending in ``OSError: [Errno 36] File name too long``): one
    line naming the key, exit code 2, in every command that reads a config."""
    import yaml

    value, said = OS_REFUSED[bad]
    cfg = yaml.safe_load(LIVE)
    if key == "run.output_dir":
        cfg["run"]["output_dir"] = value
    else:
        cfg["data"] = {"path": value} if key == "data.path" else {"directory": {"path": value}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    code, out = _cli_here(monkeypatch, capsys, command, str(tmp_path / "c.yaml"))
    assert code == 2, out
    lines = out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {key}: "), out[:500]
    assert re.search(said, lines[0]), lines[0]
    assert len(lines[0]) < 300 and "Traceback" not in out


@pytest.mark.parametrize(
    "args, said",
    [
        (["run", "CONFIG", "--out", "x" * 5000], "error: --out: 'xxx"),
        (["simulate", "SIM", "--out", "o/" + "x" * 300], "error: --out: 'o/xxx"),
        (["serve", "--resume", "x" * 5000], "error: --resume: 'xxx"),
        (["validate", "x" * 5000], "error: config file: 'xxx"),
        (["ctl", "x" * 5000, "status"], "error: 'xxx"),  # the safety net in sim.cli.main
        (["report", "x" * 5000], "error: 'xxx"),
    ],
)
def test_path_arguments_the_os_refuses(tmp_path, monkeypatch, capsys, args, said):
    """A path on the command line that is too long: one line naming it, exit code 2."""
    configs = {"CONFIG": REPO / "configs" / "live_quickstart.yaml"}
    configs["SIM"] = REPO / "configs" / "quickstart.yaml"
    args = [str(configs.get(a, a)) for a in args]
    monkeypatch.chdir(tmp_path)
    code, out = _cli_here(monkeypatch, capsys, *args)
    assert code == 2, out[:500]
    lines = out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(said), out[:500]
    assert re.search(r"name of [\d,]+ bytes|File name too long", lines[0]), lines[0]
    assert len(lines[0]) < 300 and "Traceback" not in out


@pytest.mark.parametrize("signum, said", [(15, "aborted by SIGTERM"), (2, "aborted by SIGINT")])
def test_a_run_aborted_by_a_signal_says_which(monkeypatch, capsys, signum, said):
    """A run ended at once by a stop signal (a file run's SIGTERM, as its Ctrl-C; the second
    signal of a directory run): ``aborted by SIG...`` and exit code 128 + the signal's number,
    where typer alone would exit 130 for either, silently."""
    import sim.cluster_run
    from cluster.runtime.signals import Stopped

    def stopped(*args, **kwargs):
        raise Stopped(signum)

    monkeypatch.setattr(sim.cluster_run, "check_cluster_run", stopped)
    code, out = _cli_here(
        monkeypatch, capsys, "validate", str(REPO / "configs" / "live_quickstart.yaml")
    )
    assert code == 128 + signum, out
    assert out.strip().splitlines()[-1] == said and "Traceback" not in out
