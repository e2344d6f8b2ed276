"""``weaveplace bench overload``'s brute force: one numpy reduction per window, checked
against the exact section 9 oracle (``executors.churn_oracle``) on small random inputs."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from executors.churn_oracle import registered_answers
from sim.bench.overload import _window_answers


@settings(max_examples=examples(80))
@given(
    seed=st.integers(0, 10_000),
    r=st.integers(1, 40),
    s=st.integers(1, 15),
    agg=st.sampled_from(["sum", "max", "min", "avg", "count"]),
    n=st.integers(0, 60),
)
def test_window_answers_are_the_oracles(seed, r, s, agg, n):
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(-30, 200, n))
    vals = rng.normal(100, 30, n).round(3)
    q = {"id": "q", "stream": "x", "aggregate": agg, "range": r, "slide": s, "kind": "time"}
    got = _window_answers(q, ts, vals)
    want = registered_answers([(q, None, None)], ts, vals)
    assert [g[:3] for g in got] == [w[:3] for w in want]
    np.testing.assert_allclose([g[3] for g in got], [float(w[3]) for w in want], rtol=1e-12)


def test_cpu_seconds_reads_the_process_cpu_time():
    """The calibration's clock: a process's CPU time from /proc, against Python's own."""
    import os
    import time

    from sim.bench.node_cpu import cpu_seconds

    before, t0 = cpu_seconds(os.getpid()), time.process_time()
    x = 0
    while time.process_time() - t0 < 0.3:
        x += 1
    spent = cpu_seconds(os.getpid()) - before
    assert abs(spent - (time.process_time() - t0)) < 0.05, spent


def test_cores_are_cpu_seconds_per_wall_second_between_two_drops():
    from sim.bench.overload import _cores

    cpu_at = [{"a": 0.0, "b": 1.0}, {"a": 0.1, "b": 1.0}, {"a": 0.5, "b": 1.2}]
    got = _cores(cpu_at, 0, 2, 2.0)
    assert got == pytest.approx({"a": 0.125, "b": 0.05})


def test_renice_sets_every_thread():
    """Ray starts its workers at niceness 15; the bench puts a node actor's threads at 0."""
    import os
    import threading

    from sim.bench.node_cpu import renice

    if os.geteuid() != 0:
        pytest.skip("lowering a niceness needs root")
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        tids = [int(x) for x in os.listdir(f"/proc/{os.getpid()}/task")]
        before = {tid: os.getpriority(os.PRIO_PROCESS, tid) for tid in tids}
        renice(os.getpid(), 5)
        assert {os.getpriority(os.PRIO_PROCESS, tid) for tid in tids} == {5}
        for tid, ni in before.items():
            os.setpriority(os.PRIO_PROCESS, tid, ni)
    finally:
        stop.set()
        t.join()


def test_a_calibration_that_cannot_set_1x_is_a_user_error(monkeypatch, tmp_path):
    """One line and exit 2 (``sim.cli.main`` turns a ``UserError`` into both), no traceback."""
    from typer.testing import CliRunner

    import sim.bench.overload as ob
    from sim.cli import UserError, app

    def fail(*a, **k):
        raise ob.CalibrationError("calibration: node-0 uses 0.120 cores before its rows")

    monkeypatch.setattr(ob, "run_overload_bench", fail)
    res = CliRunner().invoke(app, ["bench", "overload", "--out", str(tmp_path)])
    assert isinstance(res.exception, UserError), res.output
    assert str(res.exception) == (
        "bench overload: calibration: node-0 uses 0.120 cores before its rows"
    )


def test_phases_report_the_latency_growth_per_file():
    from sim.bench.overload import OverloadBenchOptions, _phases

    opts = OverloadBenchOptions(warm_files=3, hot_files=4, cool_files=2)
    lat = [1.0, 1.1, 0.9] + [2.0, 2.5, 3.0, 3.5] + [1.0, 1.0]
    got = _phases([(i, x) for i, x in enumerate(lat)], opts)
    assert got["hot_3x"]["growth_s_per_file"] == pytest.approx(0.5)
    assert got["hot_3x"]["last_s"] == 3.5 and got["hot_3x"]["files"] == 4
    assert got["warm_1x"]["growth_s_per_file"] == pytest.approx(-0.05)
    assert got["cool_1x"]["growth_s_per_file"] == pytest.approx(0.0)
