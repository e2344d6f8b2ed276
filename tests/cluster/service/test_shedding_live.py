"""Live load shedding (``placement.shedding``, ``cluster.service.load_shedding``): ``weaveplace
serve`` on two nodes whose capacities fit the configured rate, fed files at 3x that rate, then
at 1x.

Oracle: the brute force (``executors.churn_oracle.registered_answers``) over the *kept*
tuples: each file's rows of a stream masked by the drop box's definition
(``cluster.feeds.drop_box.keep_one``, tuple by tuple) under the fractions the ``shed`` events
put in force before that file.  Checked besides: the fractions are the LP's
(``placement.shedding.shed_load``) of the running plan at the measured rate, the drops are
lifted when the rate falls back, each answer's ``kept`` is the smallest fraction in force over
its window, status counts every row kept or dropped, and a stop and ``serve --resume`` while
shedding goes on with the drops in force."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml
from support.service import drop, serve_config, serve_in_thread, serve_running
from support.waiting import wait_for

from cluster.feeds.drop_box import keep_one
from cluster.service.control import ControlError, call
from executors.churn_oracle import registered_answers
from sim.debs_generator import generate_debs

# ~40 s: make test-scenarios (make test stays under 8 min)
pytestmark = [pytest.mark.cluster, pytest.mark.scenario]

FILE_S, HOT, COOL, RATE = 2, 5, 5, 0.05  # s per file, files at 3x then at 1x, planned rate


def _q(qid, stream, agg, r, s):
    return {"id": qid, "stream": stream, "aggregate": agg, "range": r, "slide": s, "kind": "time"}


QUERIES = [
    _q("a0", "mf01", "sum", 2000, 500),
    _q("a1", "mf01", "max", 1500, 300),
    _q("a2", "mf01", "count", 1000, 1000),
    _q("b0", "mf02", "sum", 1500, 700),
    _q("b1", "mf02", "avg", 3000, 1000),
]


def _files(d) -> list[pa.Table]:
    """HOT files of 150 rows/s (3x the planned 50), then COOL of 50 (every third row)."""
    generate_debs(d / "all.parquet", duration_s=FILE_S * (HOT + COOL), rate_hz=150, seed=3)
    t = pq.read_table(d / "all.parquet")
    rel = pc.subtract(t.column("ts_ms"), t.column("ts_ms")[0])
    out = []
    for k in range(HOT + COOL):
        f = t.filter(
            pc.and_(pc.greater_equal(rel, k * FILE_S * 1000), pc.less(rel, (k + 1) * FILE_S * 1000))
        )
        if k >= HOT:
            f = f.take(pa.array(np.arange(0, f.num_rows, 3)))
        out.append(f)
    return out


def _scrape(run_dir) -> str:
    import urllib.request

    from cluster.service.control import read_control

    c = read_control(run_dir)
    req = urllib.request.Request(
        c["url"] + "/metrics", headers={"Authorization": f"Bearer {c['token']}"}
    )
    with urllib.request.urlopen(req, timeout=5) as r:
        return r.read().decode()


def _in_force(steps, i):
    """The fractions in force for the file fed ``i``-th (0-based) after the ``steps``."""
    keep: dict = {}
    for s in steps:
        if s["after_files"] <= i:
            keep = s["keep"]
    return keep


def test_serve_sheds_at_3x_and_lifts_at_1x(ray_session, spark, tmp_path):
    from placement.plan import load_plan
    from placement.shedding import shed_load

    files = _files(tmp_path)
    incoming, run_dir = tmp_path / "in", tmp_path / "run"
    incoming.mkdir()
    cfg = serve_config(QUERIES, incoming, run_dir)
    cfg["streams"] = {s: {"rate": RATE} for s in ("mf01", "mf02", "mf03")}
    cfg["cluster"] = {"nodes": [{"id": f"node-{i}", "capacity": 0.2} for i in range(2)]}
    cfg["placement"]["shedding"] = {"rate_window_s": 3, "min_change": 0.02}
    cfg["data"]["directory"]["files_per_batch"] = 1
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(cfg))

    _, th, box = serve_in_thread(path, None, spark)
    wait_for(lambda: serve_running(run_dir, box), "serve to start")
    plan = json.loads((run_dir / "plan_current.json").read_text())
    costs = [n["cost"] for n in plan["nodes"]]
    assert max(costs) <= 0.2 < 3 * max(costs) * 0.9  # fits at 1x, not at 3x (the premise)
    for k, f in enumerate(files):
        drop(incoming, f"f{k:02d}.parquet", f)
        wait_for(lambda k=k: call(run_dir, "GET", "/status")["files"] >= k + 1, f"file {k}")
        if k == HOT - 1:  # shedding in force: status and /metrics show it
            hot = call(run_dir, "GET", "/status")["shedding"]
            assert min(hot["keep"].values()) < 0.9
            metrics = _scrape(run_dir)
            assert 'weaveplace_shed_kept_fraction{stream="mf02"}' in metrics
            assert 'weaveplace_shed_dropped_rows_total{stream="mf02"}' in metrics
            count_q = {**_q("c0", "mf02", "sum", 9, 3), "kind": "count"}
            with pytest.raises(ControlError, match="'mf02' has been shed"):
                call(run_dir, "POST", "/add-queries", {"queries": [count_q]})
            # a stop and serve --resume while shedding: the drops in force go on
            call(run_dir, "POST", "/stop", {})
            th.join(120)
            assert not th.is_alive() and "error" not in box
            _, th, box = serve_in_thread(None, run_dir, spark)
            wait_for(lambda b=box: serve_running(run_dir, b), "serve --resume to start")
            assert call(run_dir, "GET", "/status")["shedding"]["keep"] == hot["keep"]
    st = call(run_dir, "GET", "/status")
    call(run_dir, "POST", "/stop", {"flush": True})
    th.join(120)
    assert not th.is_alive() and "error" not in box

    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    sheds = [e for e in events if e["command"] == "shed"]
    resumed = next(e for e in events if e["command"] == "resume")
    before = [e for e in sheds if e["wall_time"] < resumed["wall_time"]]
    assert [(x["after_files"], x["keep"]) for x in resumed["shedding"]["steps"]] == [
        (e["after_files"], e["keep"]) for e in before
    ]
    assert sheds and sheds[0]["action"] == "shed" and sheds[-1]["action"] == "lift"
    assert all(x == 1.0 for x in sheds[-1]["keep"].values())
    # each shed's fractions are the LP's at the rate it measured, on the running plan
    placement_plan = load_plan(plan)
    for e in sheds[:-1]:
        want = shed_load(placement_plan, e["rates_per_ms"]).keep
        want = {s: 1.0 if x >= 1 - 0.02 else x for s, x in want.items()}  # min_change's band
        assert e["keep"] == pytest.approx(want, abs=1e-9)
        assert min(e["keep"].values()) < 1.0
    assert sheds[0]["rates_per_ms"]["mf01"] > 2.5 * RATE  # measured: about 3x
    assert min(sheds[0]["keep"].values()) < 0.9
    # status: every row of every file either kept or dropped, per stream
    n_rows = sum(f.num_rows for f in files)
    sh = st["shedding"]
    for s in ("mf01", "mf02"):
        assert sh["kept_rows"][s] + sh["dropped_rows"].get(s, 0) == n_rows
        assert sh["dropped_rows"][s] > 0

    # the oracle: the brute force over the tuples the drop boxes' definition keeps
    steps = [{"after_files": e["after_files"], "keep": e["keep"]} for e in sheds]
    got = pq.read_table(run_dir / "answers.parquet").sort_by(
        [("query_id", "ascending"), ("window_start", "ascending")]
    )
    d = got.to_pydict()
    want = []
    for q in QUERIES:
        s = q["stream"]
        ts, vals = [], []
        for i, f in enumerate(files):
            x = _in_force(steps, i).get(s, 1.0)
            for t, idx, v in zip(
                f.column("ts_ms").to_pylist(),
                f.column("index").to_pylist(),
                f.column(s).to_pylist(),
            ):
                if keep_one(t, idx, x):
                    ts.append(t)
                    vals.append(v)
        want += registered_answers([(q, None, None)], np.array(ts), np.array(vals))
    want.sort(key=lambda w: (w[0], w[1]))
    assert list(zip(d["query_id"], d["window_start"], d["window_end"])) == [w[:3] for w in want]
    np.testing.assert_allclose(d["value"], [float(w[3]) for w in want], rtol=1e-9)

    # kept: the smallest fraction in force over the window's event time
    bounds = [(e["after_ts"], e["keep"]) for e in sheds]
    qstream = {q["id"]: q["stream"] for q in QUERIES}
    for qid, ws, we, k in zip(d["query_id"], d["window_start"], d["window_end"], d["kept"]):
        s = qstream[qid]
        f_at = [1.0] + [kp.get(s, 1.0) for b, kp in bounds if b < ws]
        inside = [kp.get(s, 1.0) for b, kp in bounds if ws <= b < we - 1]
        assert k == min([f_at[-1], *inside]), (qid, ws, we)
    assert min(d["kept"]) < 0.9 and max(d["kept"]) == 1.0
