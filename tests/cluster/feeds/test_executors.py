"""The executor route (cluster/feeds/executors.py) on files out of time order: Spark tasks push
pieces of the file, the nodes apply them in file order, and lateness is docs/DESIGN.md s. 1 over
the file order.  Oracles: the driver route with ``order="file"`` (answers and late tuples, row
for row) and the brute force per tree (``executors.oracle.brute_force`` over the stream in file
order with the allowed lateness).  Two small files: disorder within the lateness (nothing late,
answers those of the sorted file) and tuples later than the lateness (late on both routes); the
second also with a kill and a checkpoint mid-feed (replays read the file in the same order).
The node side under any disorder pattern and push interleaving is the property test in
tests/cluster/node/test_piece_order.py."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from support.cluster_oracles import assert_answers_close, file_order_oracle
from support.cluster_plans import make_plan, make_queries

from sim.debs import generate_debs

LATENESS = 300  # ms; the data is ~100 Hz, so ~30 tuples


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """``sorted``, ``bounded`` (each row moved back by at most 250 ms of event time) and
    ``late`` (``bounded`` plus 10 rows pushed 3-4.5 s later in the file)."""
    d = tmp_path_factory.mktemp("executors_disorder")
    generate_debs(d / "sorted.parquet", duration_s=12, rate_hz=100, seed=11)
    t = pq.read_table(d / "sorted.parquet")
    ts = t.column("ts_ms").to_numpy()
    rng = np.random.default_rng(4)
    # arrival key: the timestamp plus a delay of up to 250 ms (< LATENESS), rows stably sorted
    order = np.argsort(ts + rng.integers(0, 251, ts.shape[0]), kind="stable")
    bounded = t.take(pa.array(order))
    rows = list(range(bounded.num_rows))
    for i in sorted(rng.choice(np.arange(100, len(rows) - 500), 10, replace=False))[::-1]:
        rows.insert(i + int(rng.integers(300, 450)), rows.pop(i))
    late = bounded.take(pa.array(rows))
    out = {"dir": d, "sorted": d / "sorted.parquet"}
    for name, tbl in (("bounded", bounded), ("late", late)):
        pq.write_table(tbl, d / f"{name}.parquet", row_group_size=400)
        out[name] = d / f"{name}.parquet"
    queries = make_queries(n_time=12, seed=5)
    out["queries"], out["plan"] = queries, make_plan(queries)
    return out


def _run(plan, path, spark, route, **opts):
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.feeds.executors import feed_executors
    from cluster.feeds.parquet import feed_raw

    with Deployment(plan, DeploymentOptions(allowed_lateness=LATENESS, **opts)) as dep:
        if route == "executors":
            fs = feed_executors(dep, spark, str(path), batch_rows=90, piece_rows=200)
        else:
            fs = feed_raw(dep, spark, str(path), batch_rows=300, order=route)
        return fs, dep.finish()


def _time_only(t: pa.Table) -> pa.Table:
    """The answers of time-window queries (``make_queries``' count queries are c0, c1, ...)."""
    return t.filter(pc.invert(pc.starts_with(t.column("query_id"), "c")))


def _late_rows(t: pa.Table) -> list:
    return sorted(tuple(r.values()) for r in t.select(["tree_id", "ts_ms", "value"]).to_pylist())


@pytest.mark.scenario  # ~22 s here: make test-scenarios (make test stays under 8 min)
def test_disorder_within_the_lateness(files, ray_session, spark):
    """Nothing is late, the answers are the driver route's and the brute force's, and the
    time windows' are those of the sorted file (count windows follow the arrival order)."""
    plan = files["plan"]
    fs, ex = _run(plan, files["bounded"], spark, "executors")
    assert fs.pushed["disordered_pieces"] >= 4 and fs.pushed["pieces"] >= 6
    assert ex.metrics["rows_fed"] == 0  # the driver saw no tuple
    _, drv = _run(plan, files["bounded"], spark, "file")
    assert ex.answers.equals(drv.answers)
    assert ex.late.num_rows == drv.late.num_rows == 0
    want, late = file_order_oracle(plan, files["bounded"], LATENESS)
    assert not late
    assert_answers_close(ex.answers, want)
    in_time_order, _ = file_order_oracle(plan, files["sorted"], LATENESS)
    assert_answers_close(_time_only(ex.answers), _time_only(in_time_order))


@pytest.mark.scenario  # ~21 s here: make test-scenarios (make test stays under 8 min)
def test_tuples_later_than_the_lateness(files, ray_session, spark):
    """Late tuples on both routes, the same ones (and the brute force's), the same answers,
    also when a node is killed mid-feed and replays from its checkpoint (the file again)."""
    plan = files["plan"]
    _, drv = _run(plan, files["late"], spark, "file")
    want, late = file_order_oracle(plan, files["late"], LATENESS)
    assert late and _late_rows(drv.late) == late
    assert_answers_close(drv.answers, want)
    faults = [{"kind": "kill", "node": "node-1", "at_batch": 5}]
    fs, ex = _run(plan, files["late"], spark, "executors", checkpoint_every=3, faults=faults)
    assert ex.metrics["nodes"]["node-1"]["recoveries"] == 1 and fs.pushed["segments"] >= 3
    assert ex.answers.equals(drv.answers)
    assert _late_rows(ex.late) == late
    # the failure's event time: the newest timestamp of the pieces pushed before the kill
    # (5 pieces of 200 rows, in file order)
    fail = ex.metrics["fault_log"]["events"][0]
    ts = pq.read_table(files["late"], columns=["ts_ms"]).column("ts_ms").to_numpy()
    assert fail["command"] == "failure" and fail["event_time"] == int(ts[:1000].max()), fail
    # the late tuples count in no answer: with a lateness that keeps them, answers differ
    kept, none_late = file_order_oracle(plan, files["late"], 10**6)
    assert not none_late and _time_only(kept).to_pylist() != _time_only(ex.answers).to_pylist()
