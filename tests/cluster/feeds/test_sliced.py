"""Sliced feed mode end to end: Spark pre-aggregates slices at the union of every tree's edges
per stream, actors fold them into their trees (``Deployment(mode="sliced")`` +
``feed_sliced``), and the answers must equal Spark SQL's own ``window()`` answers and raw
mode's answers exactly.

Small data (40 s at 100 Hz) and small chunks/batches, so slices are cut by chunk, partition and
batch boundaries too.  One Ray and one Spark for the session (tests/conftest.py).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.cluster_oracles import assert_answers_equal, spark_oracle
from support.cluster_plans import STREAMS, make_plan, make_queries

from sim.debs_generator import generate_debs


@pytest.fixture(scope="module")
def sliced_workload(tmp_path_factory):
    d = tmp_path_factory.mktemp("sliced")
    path = d / "debs.parquet"
    n = generate_debs(path, duration_s=40, rate_hz=100, seed=21)
    queries = [q for q in make_queries(n_time=18, seed=8) if q.kind == "time"]
    plan = make_plan(queries)
    return {"dir": d, "path": path, "rows": n, "queries": queries, "plan": plan}


@pytest.fixture(scope="module")
def sliced_result(sliced_workload, ray_session, spark):
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.feeds.sliced import feed_sliced

    with Deployment(
        sliced_workload["plan"], DeploymentOptions(mode="sliced", max_in_flight=3)
    ) as dep:
        fs = feed_sliced(dep, spark, str(sliced_workload["path"]), batch_rows=300, chunk_rows=1500)
        res = dep.finish()
    return fs, res


@pytest.mark.scenario  # ~12 s here: make test-scenarios (make test stays under 8 min)
def test_sliced_equals_spark_sql(sliced_workload, sliced_result, spark):
    fs, res = sliced_result
    qs = sliced_workload["queries"]
    assert any(q.range % q.slide for q in qs) and any(q.range == q.slide for q in qs)
    assert fs.rows == sliced_workload["rows"] and fs.chunks >= 3
    # slices, not tuples, travelled: fewer rows than tuples x streams
    assert 0 < fs.slices < fs.rows * len(STREAMS)
    ref = spark_oracle(spark, sliced_workload["path"], qs)
    assert ref.num_rows > 2_000
    assert_answers_equal(res.answers, ref, {q.id for q in qs if q.aggregate == "avg"})
    m = res.metrics
    for n in m["nodes"].values():
        assert n["late_tuples"] == 0 and n["slices_in"] > 0
        # every tuple of every hosted stream is accounted for by the slices' counts
        assert all(v == sliced_workload["rows"] for v in n["stream_tuples"].values())


def test_sliced_equals_raw_mode_exactly(sliced_workload, sliced_result, ray_session, spark):
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.feeds.parquet import feed_raw

    with Deployment(sliced_workload["plan"], DeploymentOptions(max_in_flight=3)) as dep:
        feed_raw(dep, spark, str(sliced_workload["path"]), batch_rows=700)
        raw = dep.finish()
    assert raw.answers.equals(sliced_result[1].answers)


@pytest.mark.scenario  # fault drills end to end, ~24 s: make test-scenarios
def test_sliced_fault_recovery_and_float_stream(
    sliced_workload, sliced_result, ray_session, spark, tmp_path
):
    """(a) actors killed mid-stream in sliced mode are recovered exactly (slice batches are
    replayed from the log); (b) a float stream (double-double slice sums) agrees with raw mode
    to 1e-12 (min/max/count exactly)."""
    import ray

    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.feeds.parquet import feed_raw, read_debs_df
    from cluster.feeds.sliced import feed_sliced, sliced_arrow_tables

    plan = sliced_workload["plan"]
    with Deployment(plan, DeploymentOptions(mode="sliced", max_in_flight=2)) as dep:
        streams = dep.streams
        df = read_debs_df(spark, str(sliced_workload["path"]), streams)
        tables = list(
            sliced_arrow_tables(
                df, streams, {s: dep.edge_classes(s) for s in streams}, chunk_rows=2500
            )
        )
        i = 0
        for tbl in tables:
            sid = tbl.column("sid").to_numpy()
            for k, s in enumerate(streams):
                part = tbl.filter(pa.array(sid == k)).drop_columns(["sid"])
                for b in part.to_batches(max_chunksize=150):
                    if i == 2:
                        ray.kill(dep.actor("node-0"), no_restart=True)
                    if i == 5:
                        dep.checkpoint()
                    if i == 8:
                        ray.kill(dep.actor("node-1"), no_restart=True)
                    dep.feed(s, b)
                    i += 1
        faulty = dep.finish()
    assert i > 9
    assert faulty.metrics["nodes"]["node-0"]["recoveries"] == 1
    assert faulty.metrics["nodes"]["node-1"]["recoveries"] == 1
    assert faulty.answers.equals(sliced_result[1].answers)

    # float stream: mf01 + a fractional part
    t = pq.read_table(sliced_workload["path"], columns=["ts_ms", "mf01"])
    rng = np.random.default_rng(3)
    fv = t.column("mf01").to_numpy().astype(np.float64) + rng.normal(0, 0.37, t.num_rows)
    fpath = tmp_path / "float.parquet"
    pq.write_table(pa.table({"ts_ms": t.column("ts_ms"), "mf01": fv}), fpath, row_group_size=1000)
    fq = [q for q in sliced_workload["queries"] if q.stream == "mf01"]
    fplan = make_plan(fq, n_nodes=1)
    with Deployment(fplan, DeploymentOptions(mode="sliced")) as dep:
        feed_sliced(dep, spark, str(fpath), batch_rows=400, chunk_rows=2000)
        sl = dep.finish().answers
    with Deployment(fplan) as dep:
        feed_raw(dep, spark, str(fpath), batch_rows=400)
        raw = dep.finish().answers
    assert sl.num_rows == raw.num_rows > 300
    for c in ("query_id", "window_start", "window_end"):
        assert sl.column(c).equals(raw.column(c))
    qid = np.array(sl.column("query_id").to_pylist(), dtype=object)
    exact = np.isin(qid, [q.id for q in fq if q.aggregate in ("min", "max", "count")])
    a, b = sl.column("value").to_numpy(), raw.column("value").to_numpy()
    np.testing.assert_array_equal(a[exact], b[exact])
    np.testing.assert_allclose(a[~exact], b[~exact], rtol=1e-12, atol=0)


@pytest.mark.scenario  # ~9 s here: make test-scenarios (make test stays under 8 min)
def test_sliced_lost_node_replaced_exactly(sliced_workload, sliced_result, ray_session, spark):
    """Sliced mode, 3 nodes, 9 slice batches, a checkpoint every 3: node-1 is lost for good
    after the first checkpoint (its trees adopt slice batches by replay), node-0 one batch
    later, before the next checkpoint (node-2 then holds everything, including trees node-0
    had just adopted, restored from node-1's snapshot): answers equal the fault-free run."""
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.feeds.sliced import feed_sliced

    plan = make_plan(sliced_workload["queries"], n_nodes=3)
    faults = [
        {"kind": "lose", "node": "node-1", "at_batch": 4},
        {"kind": "lose", "node": "node-0", "at_batch": 5},
    ]
    with Deployment(
        plan, DeploymentOptions(mode="sliced", max_in_flight=2, checkpoint_every=3, faults=faults)
    ) as dep:
        feed_sliced(dep, spark, str(sliced_workload["path"]), batch_rows=300, chunk_rows=1500)
        res = dep.finish()
    assert res.answers.equals(sliced_result[1].answers)
    assert res.metrics["batches"] == 9
    first, second = res.replacements
    assert (first["node"], second["node"]) == ("node-1", "node-0")
    assert first["snapshot_seq"] >= 0 and first["replayed_batches"] > 0
    via0 = {t for t, n in first["trees"].items() if n == "node-0"}
    assert via0 and via0 < set(second["trees"])
    assert set(res.metrics["nodes"]) == {"node-2"}
    assert res.metrics["nodes"]["node-2"]["trees"].keys() == {
        t["id"] for n in plan["nodes"] for t in n["trees"]
    }


def test_sliced_mode_refusals(sliced_workload, ray_session, spark):
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.deployment.specs import DeploymentError
    from cluster.feeds.sliced import feed_sliced

    with Deployment(sliced_workload["plan"], DeploymentOptions(mode="sliced")) as dep:
        with pytest.raises(ValueError, match="order='file'"):
            feed_sliced(dep, spark, str(sliced_workload["path"]), order="file")
    with pytest.raises(DeploymentError, match="count-window"):
        Deployment(make_plan(make_queries(n_time=3)), DeploymentOptions(mode="sliced"))


def test_node_core_slices_mode_without_ray(sliced_workload):
    """NodeCore in ``slices`` mode: warmup leaves no trace, snapshots restore in slices mode,
    a tuple batch is refused, and the answers equal a tuples-mode node's."""
    from cluster.node.core import NodeCore
    from executors.slice_input import slice_aggregates
    from executors.slicing import edge_classes

    t = pq.read_table(sliced_workload["path"], columns=["ts_ms", "mf02"])
    node = next(n for n in sliced_workload["plan"]["nodes"] if n["trees"])
    qmap = {q["id"]: q for q in sliced_workload["plan"]["queries"]}
    trees = [
        {
            "id": tr["id"],
            "stream": "mf02",
            "queries": [qmap[q] for q in tr["queries"] if qmap[q]["stream"] == "mf02"],
        }
        for tr in node["trees"]
    ]
    trees = [tr for tr in trees if tr["queries"]]
    assert trees
    rs = [(q["range"], q["slide"]) for tr in trees for q in tr["queries"]]
    cols = slice_aggregates(
        t.column("ts_ms").to_numpy(), t.column("mf02").to_numpy(), edge_classes(rs + [(7000, 3000)])
    )
    sl = pa.table(cols)
    a = NodeCore("n", trees, input_mode="slices")
    a.warmup()
    assert a.metrics()["tuples"] == 0 and a.drain().num_rows == 0
    a.ingest("mf02", sl.slice(0, sl.num_rows // 2), seq=0)
    first = a.drain()  # answers up to the snapshot point
    b = NodeCore.from_snapshot(a.snapshot())
    assert b.input_mode == "slices" and b.last_seq == 0
    with pytest.raises(ValueError, match="tuple batch"):
        b.ingest(None, t)
    b.ingest("mf02", sl.slice(sl.num_rows // 2), seq=1)
    b.flush()
    raw = NodeCore("n", trees)
    raw.ingest(None, t)
    raw.flush()
    key = [("query_id", "ascending"), ("window_start", "ascending")]
    got = pa.concat_tables([first, b.drain()]).sort_by(key)
    want = raw.drain().sort_by(key)
    assert want.num_rows > 100 and got.equals(want)
    assert b.metrics()["tuples"] == t.num_rows


@pytest.mark.scenario  # ~18 s: make test-scenarios (make test stays under 8 min)
def test_arrow_and_spark_readers_agree(
    sliced_workload, sliced_result, ray_session, spark, tmp_path
):
    """The ``arrow`` reader (Spark tasks read their piece of the Parquet file with pyarrow;
    the default for a local file) and the ``spark`` reader (``mapInArrow`` over Spark's own
    reader) give the same answers; so does the ``arrow`` reader on a file whose row groups
    are out of time order (each time-range chunk filters every overlapping row group)."""
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.feeds.sliced import feed_sliced

    fs, res = sliced_result
    assert fs.reader == "arrow"
    plan = sliced_workload["plan"]
    with Deployment(plan, DeploymentOptions(mode="sliced", max_in_flight=3)) as dep:
        fs2 = feed_sliced(
            dep,
            spark,
            str(sliced_workload["path"]),
            batch_rows=300,
            chunk_rows=1500,
            reader="spark",
        )
        res2 = dep.finish()
    assert fs2.reader == "spark" and fs2.rows == fs.rows and fs2.chunks == fs.chunks
    assert res2.answers.equals(res.answers)
    t = pq.read_table(sliced_workload["path"])
    groups = [t.slice(i, 500) for i in range(0, t.num_rows, 500)]
    shuffled = tmp_path / "shuffled.parquet"
    pq.write_table(pa.concat_tables(groups[::-1]), shuffled, row_group_size=500)
    with Deployment(plan, DeploymentOptions(mode="sliced", max_in_flight=3)) as dep:
        fs3 = feed_sliced(
            dep, spark, str(shuffled), batch_rows=300, chunk_rows=1500, reader="arrow"
        )
        res3 = dep.finish()
    assert fs3.reader == "arrow" and fs3.rows == fs.rows
    assert res3.answers.equals(res.answers)
    with pytest.raises(ValueError, match="reader 'arrow' needs"):
        with Deployment(plan, DeploymentOptions(mode="sliced")) as dep:
            feed_sliced(dep, spark, str(tmp_path), reader="arrow")


@pytest.mark.scenario  # ~17 s here: make test-scenarios (make test stays under 8 min)
def test_sliced_add_node_exactly_once(sliced_workload, sliced_result, ray_session, spark):
    """Sliced mode, 2 nodes, 9 slice batches, a checkpoint every 3: a drill adds node-2 before
    batch 2 (trees move there at add_node's checkpoint), kills it before batch 3 (rebuilt from
    the move's snapshots + replayed slice batches) and loses node-0 before batch 5: answers
    equal the fault-free run; the final plan verifies."""
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.feeds.sliced import feed_sliced
    from placement.plan import verify_plan

    faults = [
        {"kind": "add", "at_batch": 2},
        {"kind": "kill", "node": "node-2", "at_batch": 3},
        {"kind": "lose", "node": "node-0", "at_batch": 5},
    ]
    with Deployment(
        sliced_workload["plan"],
        DeploymentOptions(mode="sliced", max_in_flight=2, checkpoint_every=3, faults=faults),
    ) as dep:
        feed_sliced(dep, spark, str(sliced_workload["path"]), batch_rows=300, chunk_rows=1500)
        res = dep.finish()
        final = dep.plan
    assert res.answers.equals(sliced_result[1].answers)
    (add,) = res.additions
    assert add["node"] == "node-2" and add["moved"] > 0 and add["snapshot_seq"] == 1
    assert res.metrics["nodes"]["node-2"]["recoveries"] == 1
    assert [f["fired"] for f in res.metrics["faults"]] == [True, True, True]
    assert verify_plan(final) == [] and [n["id"] for n in final["nodes"]] == ["node-1", "node-2"]


@pytest.mark.scenario  # ~12 s here: make test-scenarios (make test stays under 8 min)
def test_cutty_plan_equals_pairs_sliced_and_raw(sliced_workload, sliced_result, ray_session, spark):
    """A plan priced under Cutty (``slicing: cutty``; its trees differ from the Pairs plan's)
    runs Cutty trees on the actors, in sliced mode (the union of Pairs edges, unchanged) and
    in raw mode: both answer exactly as the Pairs plan's sliced run, row for row (int data)."""
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.feeds.parquet import feed_raw
    from cluster.feeds.sliced import feed_sliced
    from executors.slicing import edge_classes

    plan = make_plan(sliced_workload["queries"], slicing="cutty")
    assert plan["slicing"] == "cutty"
    pairs_plan = sliced_workload["plan"]
    assert [t["edges"] for n in plan["nodes"] for t in n["trees"]] != [
        t["edges"] for n in pairs_plan["nodes"] for t in n["trees"]
    ]
    with Deployment(plan, DeploymentOptions(mode="sliced", max_in_flight=3)) as dep:
        for s in dep.streams:  # the sliced feed still cuts at the union of Pairs edges
            assert dep.edge_classes(s) == edge_classes(
                sorted({(q.range, q.slide) for q in sliced_workload["queries"] if q.stream == s})
            )
        feed_sliced(dep, spark, str(sliced_workload["path"]), batch_rows=300, chunk_rows=1500)
        sliced = dep.finish()
    with Deployment(plan, DeploymentOptions(max_in_flight=3)) as dep:
        feed_raw(dep, spark, str(sliced_workload["path"]), batch_rows=700)
        raw = dep.finish()
    for res in (sliced, raw):
        trees = [t for n in res.metrics["nodes"].values() for t in n["trees"].values()]
        assert trees and all(t["slicing"] == "cutty" for t in trees)
        assert res.answers.equals(sliced_result[1].answers)
