"""``weaveplace serve`` and ``ctl`` as real processes, for the tests that stop, kill and resume a
deployment: each serve runs in its own process group (what it leaves behind after a ``kill -9``,
Ray and the JVM, is ended by that group id) with a short ``RAY_TMPDIR`` of its test's own (Ray's
socket path limit; never the shared one, so nothing here touches another test's Ray)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def serve_env(ray_tmp: str) -> dict:
    """The environment of a serve or ctl process: this checkout first on ``PYTHONPATH``, its
    own ``RAY_TMPDIR``, the numba cache ``make`` filled."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["RAY_TMPDIR"] = ray_tmp
    env.setdefault("NUMBA_CACHE_DIR", str(ROOT / ".cache" / "numba"))
    return env


def start_serve(args, cwd: Path, ray_tmp: str) -> subprocess.Popen:
    """``weaveplace serve ARGS`` started in ``cwd``, its output in ``proc.log_path``."""
    path = cwd / f"serve-{int(time.time() * 1000)}.log"
    with open(path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sim.cli", "serve", *args],
            cwd=cwd,
            env=serve_env(ray_tmp),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    proc.log_path = path  # type: ignore[attr-defined]
    return proc


def serve_log(proc: subprocess.Popen) -> str:
    """What a serve started by ``start_serve`` printed so far."""
    return proc.log_path.read_text(errors="replace")  # type: ignore[attr-defined]


def ctl_started(run_dir: Path, cwd: Path, ray_tmp: str, *args) -> subprocess.Popen:
    """``weaveplace ctl`` started, not waited for: a command whose outcome does not depend on
    the feed (a refusal) runs while a file is fed (each CLI start costs 2-3 s here)."""
    return subprocess.Popen(
        [sys.executable, "-m", "sim.cli", "ctl", str(run_dir), *args],
        cwd=cwd,
        env=serve_env(ray_tmp),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finished(p: subprocess.Popen) -> subprocess.CompletedProcess:
    """A started ctl waited for (at most 120 s)."""
    try:
        out, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        raise
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def run_ctl(run_dir: Path, cwd: Path, ray_tmp: str, *args) -> subprocess.CompletedProcess:
    """``weaveplace ctl RUN_DIR ARGS`` to the end."""
    return finished(ctl_started(run_dir, cwd, ray_tmp, *args))


def end_group(proc: subprocess.Popen) -> None:
    """SIGKILL to what is left of a serve's process group (its Ray, its JVM)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
