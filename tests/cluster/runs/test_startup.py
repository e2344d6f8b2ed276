"""The start-up path (cluster/runs/startup.py): Ray and Spark start at the same time, Ray on the
calling thread (SIGTERM's hand-over to SIGINT put back after it), Spark on a thread of its own;
whatever started is stopped, Spark first, also when the other failed; and a real run's
``metrics.json`` ``startup`` shows the overlap.

The overlap is checked without timing: the stand-in starts meet at a barrier that only two
starts running at once can pass (one after the other, the first waits alone until the
barrier's timeout breaks it).  How much sooner the first row comes is a benchmark's figure
(BENCHMARKS.md, "Start-up"), not a test's.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from cluster.runs.options import RuntimeOptions
from cluster.runs.startup import started_runtimes

REPO = Path(__file__).resolve().parents[3]
MEET_S = 20.0  # how long one start waits for the other at the barrier (only reached on failure)


def _ray_handler(signum, frame):  # what ray.init installs for SIGTERM, as far as we care
    raise AssertionError("Ray's SIGTERM handler ran")


class StandInRay:
    """A ``RayRuntime`` stand-in: takes SIGTERM over as ``ray.init`` does."""

    def __init__(self, log: list, meet: threading.Barrier | None = None, fail: bool = False):
        self.log, self.meet, self.fail = log, meet, fail
        self.owned, self.auth, self.failure_detection_s = True, "stand-in", 30.0

    def __call__(self, runtime: RuntimeOptions) -> StandInRay:
        return self

    def __enter__(self) -> StandInRay:
        self.log.append(("ray starts", threading.current_thread()))
        if self.meet is not None:
            self.meet.wait()
        if self.fail:
            raise RuntimeError("ray would not start")
        signal.signal(signal.SIGTERM, _ray_handler)
        return self

    def __exit__(self, *exc) -> None:
        self.log.append(("ray down", None))


class StandInSession:
    def __init__(self, log: list):
        self.log = log

    def stop(self) -> None:
        self.log.append(("spark down", None))


def _spark(log: list, meet: threading.Barrier | None = None, fail: bool = False):
    def start(runtime: RuntimeOptions) -> StandInSession:
        log.append(("spark starts", threading.current_thread()))
        if meet is not None:
            meet.wait()
        if fail:
            raise RuntimeError("no Java")
        return StandInSession(log)

    return start


def _events(log: list) -> list[str]:
    return [e for e, _ in log]


def test_ray_and_spark_start_at_the_same_time_and_sigterm_stays_handed_over():
    log: list = []
    meet = threading.Barrier(2, timeout=MEET_S)  # passed only by two starts at once
    new_spark = []
    before = signal.getsignal(signal.SIGTERM)
    with started_runtimes(
        RuntimeOptions(),
        on_new_spark=lambda: new_spark.append(threading.current_thread()),
        start_ray=StandInRay(log, meet),
        start_spark=_spark(log, meet),
    ) as rts:
        h = signal.getsignal(signal.SIGTERM)
        assert h is not _ray_handler and h is not before  # the hand-over, after "ray.init"
        assert not new_spark  # nobody waited for Spark yet
        session = rts.spark()
        assert isinstance(session, StandInSession) and rts.spark() is session
        assert new_spark == [threading.main_thread()]  # on the calling thread, once
        assert rts.startup["spark_s"] >= 0 and rts.startup["ray_owned"] is True
        assert rts.startup["ray_auth"] == "stand-in"
    assert signal.getsignal(signal.SIGTERM) is before
    threads = dict(log)
    assert threads["ray starts"] is threading.main_thread()
    assert threads["spark starts"] is not threading.main_thread()
    assert _events(log)[2:] == ["spark down", "ray down"]  # Spark first, as ever


def test_ray_failing_to_start_still_stops_the_spark_it_overlapped():
    log: list = []
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(RuntimeError, match="ray would not start"):
        with started_runtimes(
            RuntimeOptions(), start_ray=StandInRay(log, fail=True), start_spark=_spark(log)
        ):
            pytest.fail("yielded without Ray")
    assert "spark down" in _events(log) and "ray down" not in _events(log)
    assert signal.getsignal(signal.SIGTERM) is before


def test_spark_failing_to_start_is_raised_where_the_session_is_needed_and_ray_stops():
    log: list = []
    with pytest.raises(RuntimeError, match="no Java"):
        with started_runtimes(
            RuntimeOptions(), start_ray=StandInRay(log), start_spark=_spark(log, fail=True)
        ) as rts:
            rts.spark()
    assert _events(log)[-1] == "ray down" and "spark down" not in _events(log)


def test_a_session_passed_in_is_neither_started_nor_stopped():
    log: list = []
    given = StandInSession(log)

    def never(runtime):
        raise AssertionError("a session was started")

    with started_runtimes(
        RuntimeOptions(spark=given), start_ray=StandInRay(log), start_spark=never
    ) as rts:
        assert rts.spark() is given and rts.startup["spark_s"] == 0.0
    assert _events(log) == ["ray starts", "ray down"]


def test_the_first_read_runs_on_sparks_thread_while_ray_starts():
    """``prepare`` gets the new session on Spark's thread and overlaps Ray's start (a barrier
    that only the first read and Ray's start together pass); its result is waited for where
    the feed reads it."""
    log: list = []
    meet = threading.Barrier(2, timeout=MEET_S)

    def prepare(session):
        log.append(("first read", threading.current_thread()))
        meet.wait()
        return ("opened", session)

    with started_runtimes(
        RuntimeOptions(), start_ray=StandInRay(log, meet), start_spark=_spark(log), prepare=prepare
    ) as rts:
        got = rts.prepared()
        assert got == ("opened", rts.spark())
    threads = dict(log)
    assert threads["first read"] is threads["spark starts"] is not threading.main_thread()
    assert _events(log)[-2:] == ["spark down", "ray down"]


def test_a_failed_first_read_is_raised_where_it_is_read_and_everything_stops():
    log: list = []

    def prepare(session):
        raise KeyError("no column mf99")

    with pytest.raises(KeyError, match="mf99"):
        with started_runtimes(
            RuntimeOptions(), start_ray=StandInRay(log), start_spark=_spark(log), prepare=prepare
        ) as rts:
            assert isinstance(rts.spark(), StandInSession)  # the session itself is fine
            rts.prepared()
    assert _events(log)[-2:] == ["spark down", "ray down"]


def test_a_session_passed_in_gets_its_first_read_early_and_is_not_stopped():
    log: list = []
    given = StandInSession(log)
    meet = threading.Barrier(2, timeout=MEET_S)

    def prepare(session):
        meet.wait()
        return session

    with started_runtimes(
        RuntimeOptions(spark=given), start_ray=StandInRay(log, meet), prepare=prepare
    ) as rts:
        assert rts.prepared() is given and rts.spark() is given
        assert rts.startup["spark_s"] == 0.0
    assert "spark down" not in _events(log)


RUN = """
import sys
from sim.cluster_run import run_on_cluster
from sim.config import load_config
run_on_cluster(load_config(sys.argv[1]), sys.argv[2])
"""


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.scenario  # a whole run (Ray, Spark, actors): make test-scenarios
def test_a_real_run_reports_its_start_up_overlapped(tmp_path):
    """``configs/live_quickstart.yaml`` in a process of its own (its own Ray and Spark: a test
    session's would be borrowed): ``startup`` has every part, Ray, the actors and Spark were up
    sooner than one after the other would allow, and the first row came after them."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env["RAY_TMPDIR"] = ray_tmp = tempfile.mkdtemp(prefix="wp-start-", dir="/tmp")
    try:
        r = subprocess.run(
            [sys.executable, "-c", RUN, str(REPO / "configs" / "live_quickstart.yaml"), "out"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=600,
        )
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    st = json.loads((tmp_path / "out" / "metrics.json").read_text())["startup"]
    assert st["ray_owned"] is True
    ray_s, spark_s, dep_s = st["ray_s"], st["spark_s"], st["deployment_s"]
    assert min(ray_s, spark_s, dep_s) > 0
    # one after the other, everything would be up only after ray_s + spark_s + deployment_s
    assert max(ray_s + dep_s, spark_s) <= st["ready_s"] < ray_s + spark_s + dep_s
    assert st["ready_s"] <= st["first_row_s"]


def test_work_while_stopping_runs_beside_the_caller_and_its_error_is_raised_at_join():
    """``WhileStopping``: the work runs on a thread of its own, at the same time as the
    caller (a barrier only two running at once can pass); ``join`` waits for it and raises
    what it raised, once; ``raise_error=False`` only waits (the run's own error wins)."""
    from cluster.runs.startup import WhileStopping

    meet = threading.Barrier(2, timeout=MEET_S)
    seen = []
    after = WhileStopping()
    after.start(lambda: seen.append((meet.wait(), threading.current_thread())))
    meet.wait()  # the caller "stops the runtimes" meanwhile
    after.join()
    assert len(seen) == 1 and seen[0][1] is not threading.current_thread()
    after.join()  # nothing started: nothing to wait for

    def broken():
        raise ValueError("the report failed")

    after.start(broken)
    with pytest.raises(ValueError, match="the report failed"):
        after.join()
    after.join()  # raised once
    after.start(broken)
    after.join(raise_error=False)
    after.join()  # not kept for later either


def test_preload_imports_on_a_daemon_thread_and_leaves_errors_to_the_real_import(tmp_path):
    """``preload``: the module is imported on a daemon thread (the deployment's modules while
    Ray starts); a module that fails to import fails there silently and again where it is
    imported for real."""
    import sys

    from cluster.runs.startup import preload

    (tmp_path / "wp_preload_ok.py").write_text(
        "import threading\nBY = threading.current_thread()\n"
    )
    (tmp_path / "wp_preload_bad.py").write_text("raise RuntimeError('broken module')\n")
    sys.path.insert(0, str(tmp_path))
    try:
        thread = preload("wp_preload_ok")
        assert thread.daemon
        thread.join(timeout=MEET_S)
        assert sys.modules["wp_preload_ok"].BY is thread
        preload("wp_preload_bad").join(timeout=MEET_S)
        with pytest.raises(RuntimeError, match="broken module"):
            __import__("wp_preload_bad")
    finally:
        sys.path.remove(str(tmp_path))
        for name in ("wp_preload_ok", "wp_preload_bad"):
            sys.modules.pop(name, None)
