"""One-off numba compilation stays out of reported runtimes.

The warm-ups are replaced by recorders that take a known time, so the accounting is checked
without timing the machine: the one-off work runs before the timers and is reported apart
(``compile_s``), and the timed work does not contain it.
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pytest

from sim.config import config_from_mapping

TINY = {
    "workload": {"generator": {"qnum": 6, "smax": 10, "rate": 1.0, "omax": 4, "seed": [0, 1]}},
    "cluster": {"nodes": 2},
    "placement": {"optimizers": ["WG_TN", "weaveshare"], "ie": "panes"},
    "run": {"mode": "simulate"},
}


def test_simulation_runtimes_exclude_the_warm_up(tmp_path, monkeypatch):
    import sim.simulate as simmod

    events = []
    state = {"warm": False}
    real_warm = simmod.warm_placement

    def fake_warm():  # the real one (loads the kernels), made to take a known 0.4 s
        events.append("warm")
        if state["warm"]:
            return 0.0
        state["warm"] = True
        real_warm()
        time.sleep(0.4)
        return 0.4

    real_plan_for = simmod.plan_for

    def recording_plan_for(name, *a, **kw):
        events.append(name)
        assert state["warm"], "an optimizer ran before the kernels were loaded"
        return real_plan_for(name, *a, **kw)

    monkeypatch.setattr(simmod, "warm_placement", fake_warm)
    monkeypatch.setattr(simmod, "plan_for", recording_plan_for)
    summary = simmod.simulate(config_from_mapping(TINY), output_dir=tmp_path)
    assert events[0] == "warm" and events.count("WG_TN") == 2
    df = __import__("pandas").read_csv(tmp_path / "results.csv")
    assert df["compile_s"].tolist() == [0.4, 0.0, 0.0, 0.0]  # paid once, by the first row
    assert summary.compile_s == pytest.approx(0.4)
    assert (df["runtime_s"] < 0.4).all()  # tiny plans: the sleep is in none of them


LOAD_S = 2.5  # a simulated slow kernel load, well above any real busy time of the test's batches


def test_node_busy_time_excludes_kernel_loading(monkeypatch):
    from cluster.node.core import NodeCore

    trees = [
        {
            "id": "t0",
            "stream": "mf01",
            "queries": [
                {"id": "a", "aggregate": "max", "range": 10, "slide": 4, "kind": "time"},
                {"id": "b", "aggregate": "avg", "range": 7, "slide": 3, "kind": "time"},
            ],
        }
    ]
    import cluster.node.warmup as na

    node = NodeCore("n0", trees)
    real, real_empty_late = NodeCore.warmup, na.empty_late
    calls = []

    def recording_warmup(self, which=None):
        calls.append(sorted(which or []))
        return real(self, which)

    def slow_empty_late():  # runs inside warmup's timer: stands for a slow kernel load
        time.sleep(LOAD_S)
        return real_empty_late()

    monkeypatch.setattr(NodeCore, "warmup", recording_warmup)
    monkeypatch.setattr(na, "empty_late", slow_empty_late)
    ts = np.arange(0, 100, dtype=np.int64)
    batch = pa.table({"ts_ms": ts, "mf01": (ts % 5).astype(np.int64)})
    node.ingest(None, batch.slice(0, 50), seq=0)
    node.ingest(None, batch.slice(50), seq=1)  # warm already: no second load
    fbatch = pa.table({"ts_ms": ts + 100, "mf01": (ts % 5).astype(np.float64)})
    m = node.metrics()
    assert calls == [[("t0", "i")]]
    # the load is in compile_s, not in busy_s (whatever the real work costs on a cold or
    # loaded machine, it is far below LOAD_S for 100 tuples)
    assert m["compile_s"] >= LOAD_S and m["busy_s"] < LOAD_S
    node2 = NodeCore("n1", trees)
    node2.ingest(None, fbatch, seq=0)  # float values: their own kernels
    m2 = node2.metrics()
    assert calls[-1] == [("t0", "f")] and m2["compile_s"] >= LOAD_S and m2["busy_s"] < LOAD_S


def test_every_executor_case_warms(monkeypatch):
    """``weaveplace warmup`` (run by ``make``) covers every technique, slicing, value kind and
    input mode a run can use; each case runs (on the warm cache this is quick)."""
    from executors.tree import ALL_TECHNIQUES, SLICINGS
    from sim.compile_cache import executor_cases, warm_executor_case

    cases = executor_cases()
    assert {c[0] for c in cases} == set(ALL_TECHNIQUES)
    assert {(c[1], c[2], c[4]) for c in cases} == {
        (s, k, m) for s in SLICINGS for k in "if" for m in (False, True)
    }
    for case in cases[::7]:  # a spread of them here; `make` runs all
        warm_executor_case(*case)
