"""The driver out of the data path: actors write their answers, Spark executors push the rows.

Oracles: the driver route (itself checked against Spark SQL and numpy in
tests/cluster/test_e2e.py), Spark SQL's ``window()`` directly, and the count-window numpy
brute force; exactly-once under kills, node loss and addition is checked row for row against
the fault-free run, with a part written by an actor whose reply never came (an orphan) in the
mix.  The datasets are read back as one table by pyarrow and by Spark.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.cluster_oracles import assert_answers_equal, count_oracle, spark_oracle
from support.cluster_plans import STREAMS, make_plan, make_queries

from cluster.answers.sink import AnswerCommits, read_answers, write_part
from sim.debs import generate_debs


# ----------------------------------------------------------------------------- no Ray
def _rows(qids, starts, value):
    return pa.table(
        {
            "query_id": pa.array(qids, pa.string()),
            "window_start": pa.array(starts, pa.int64()),
            "window_end": pa.array([s + 10 for s in starts], pa.int64()),
            "value": pa.array([value] * len(qids), pa.int64()),
        }
    )


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["n0", "n1", "n2"]),
            st.integers(0, 3),  # round
            st.integers(0, 4),  # rows
            st.sampled_from(["commit", "orphan", "retry"]),
        ),
        max_size=12,
    )
)
def test_commit_protocol_keeps_exactly_the_committed_parts(tmp_path_factory, ops):
    """Writes of parts by node and round, some never acknowledged (orphans), some retried
    under the same name with other content (the restored actor's): after ``finalize`` the
    dataset is exactly the last acknowledged write of every committed name."""
    root = tmp_path_factory.mktemp("sink") / "answers.parquet"
    commits = AnswerCommits(root)
    commits.reset()
    want: dict[str, pa.Table] = {}
    for k, (node, rnd, rows, what) in enumerate(ops):
        t = _rows([f"q{node}{rnd}"] * rows, list(range(rows)), k)
        part = write_part(root, node, f"{rnd:06d}", t)
        if what == "orphan":  # written, never acknowledged: must not survive unless re-committed
            if part.path not in want:
                continue
            # an overwrite of a committed name is a retry (acknowledged): fall through
        commits.commit(part)
        if rows:
            want[part.path] = t
        else:
            want.pop(part.path, None)
    commits.finalize()
    got = read_answers(root)
    exp = (
        pa.concat_tables(list(want.values())).sort_by(
            [("query_id", "ascending"), ("window_start", "ascending")]
        )
        if want
        else got.slice(0, 0)
    )
    assert got.num_rows == commits.num_rows == sum(t.num_rows for t in want.values())
    assert got.select(["query_id", "window_start"]).equals(exp.select(["query_id", "window_start"]))
    assert sorted(got.column("value").to_pylist()) == sorted(exp.column("value").to_pylist())


def test_node_core_writes_parts_with_one_schema(tmp_path):
    """A node writes its answers at a checkpoint; the value type is the run's (float64 here
    for an int-only node), and a checkpoint with nothing new removes a stale part of that
    name (a retry that has nothing to write)."""
    from cluster.node.core import NodeCore

    trees = [
        {
            "id": "t0",
            "stream": "mf01",
            "queries": [
                {"id": "a", "aggregate": "sum", "range": 500, "slide": 100, "kind": "time"},
                {"id": "b", "aggregate": "max", "range": 300, "slide": 300, "kind": "time"},
            ],
        }
    ]
    ts = np.arange(0, 5000, 7, dtype=np.int64)
    v = (ts * 31 % 97).astype(np.int64)
    ref = NodeCore("n", trees)
    ref.ingest(None, pa.table({"ts_ms": ts, "mf01": v}))
    ref.flush()
    want = ref.drain()
    node = NodeCore("n", trees)
    node.ingest(None, pa.table({"ts_ms": ts[:300], "mf01": v[:300]}), seq=0)
    blob, part, seq = node.checkpoint_write(str(tmp_path), "000001", "float64")
    assert seq == 0 and part.path == "node=n/part-000001.parquet" and part.num_rows > 0
    node.ingest(None, pa.table({"ts_ms": ts[300:], "mf01": v[300:]}), seq=1)
    node.flush()
    node.checkpoint_write(str(tmp_path), "000002", "float64")
    got = read_answers(tmp_path)
    assert got.schema.field("value").type == pa.float64()
    assert got.column("value").to_pylist() == [float(x) for x in want.column("value").to_pylist()]
    assert got.select(["query_id", "window_start", "window_end"]).equals(
        want.select(["query_id", "window_start", "window_end"])
    )
    # a restored node re-running round 2 with nothing pending: the part goes away
    again = NodeCore.from_snapshot(node.snapshot())
    assert again.checkpoint_write(str(tmp_path), "000002", "float64")[1].num_rows == 0
    assert not (tmp_path / "node=n" / "part-000002.parquet").exists()
    with pytest.raises(ValueError, match="declared int64"):
        bad = NodeCore(
            "m", [{**trees[0], "queries": [{**trees[0]["queries"][0], "aggregate": "avg"}]}]
        )
        bad.ingest(None, pa.table({"ts_ms": ts, "mf01": v}))
        bad.flush()
        bad.checkpoint_write(str(tmp_path), "x", "int64")


# ----------------------------------------------------------------------------- Ray + Spark
@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    d = tmp_path_factory.mktemp("driver_out")
    path = d / "debs.parquet"
    n = generate_debs(path, duration_s=60, rate_hz=100, seed=5)
    queries = make_queries(n_time=30, seed=7)
    return {"dir": d, "path": path, "rows": n, "queries": queries, "plan": make_plan(queries)}


@pytest.fixture(scope="module")
def batches(workload, spark):
    from cluster.feeds.parquet import ordered_arrow_batches, read_debs_df

    df = read_debs_df(spark, str(workload["path"]), list(STREAMS))
    return [b.select(["ts_ms", *STREAMS]) for b in ordered_arrow_batches(df, batch_rows=600)]


@pytest.fixture(scope="module")
def driver_route(workload, batches, ray_session):
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions

    with Deployment(workload["plan"], DeploymentOptions(max_in_flight=2)) as dep:
        for b in batches:
            dep.feed(None, b)
        return dep.finish()


def _only(t: pa.Table, ids) -> pa.Table:
    return t.filter(pc.is_in(t.column("query_id"), value_set=pa.array(sorted(ids))))


def test_actor_route_equals_driver_route_and_oracles(
    workload, batches, driver_route, ray_session, spark, tmp_path
):
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions

    with Deployment(
        workload["plan"], DeploymentOptions(max_in_flight=2, answers="actors", out_dir=tmp_path)
    ) as dep:
        for i, b in enumerate(batches):
            if i == 4:
                dep.checkpoint()
            dep.feed(None, b)
        res = dep.finish()
    m = res.metrics
    assert m["answers_route"] == "actors" and m["answer_bytes_to_driver"] == 0
    assert driver_route.metrics["answer_bytes_to_driver"] >= 16 * driver_route.answers.num_rows
    # the parts: per node, one per checkpoint round with answers, one schema
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("part-*.parquet"))
    assert files and all(f.startswith("answers.parquet/node=node-") for f in files)
    assert m["answer_parts"] == len(files) and m["answers"] == driver_route.answers.num_rows
    assert res.answers.equals(driver_route.answers)
    assert res.late.num_rows == 0 == driver_route.late.num_rows
    # pyarrow reads the directory as one table (plus the ``node`` directory column)
    t = pq.read_table(tmp_path / "answers.parquet")
    assert t.num_rows == m["answers"] and "node" in t.column_names
    assert t.schema.field("value").type == pa.float64()  # avg queries: float64, one schema
    # Spark reads it as one table too
    sdf = spark.read.parquet(str(tmp_path / "answers.parquet"))
    assert sdf.count() == m["answers"]
    got = (
        sdf.select("query_id", "window_start", "window_end", "value")
        .toArrow()
        .sort_by([("query_id", "ascending"), ("window_start", "ascending")])
    )
    assert got.equals(driver_route.answers)
    # oracles: Spark SQL windows for the time queries, numpy for the count ones
    tq = [q for q in workload["queries"] if q.kind == "time"]
    avg = {q.id for q in workload["queries"] if q.aggregate == "avg"}
    ref = spark_oracle(spark, workload["path"], tq)
    assert_answers_equal(_only(res.answers, {q.id for q in tq}), ref, avg)
    data = pq.read_table(workload["path"], columns=["ts_ms", "index", *STREAMS]).sort_by(
        [("ts_ms", "ascending"), ("index", "ascending")]
    )
    cq = [q for q in workload["queries"] if q.kind == "count"]
    rows = sorted(r for q in cq for r in count_oracle(data.column(q.stream).to_numpy(), q))
    cref = pa.table(
        {
            k: list(v)
            for k, v in zip(["query_id", "window_start", "window_end", "value"], zip(*rows))
        }
    )
    assert_answers_equal(_only(res.answers, {q.id for q in cq}), cref, avg)


def test_actor_route_exactly_once_with_kills_loss_add_and_an_orphan(
    workload, batches, driver_route, ray_session, tmp_path
):
    """Three nodes; a kill before any checkpoint, a checkpoint, node-1 writes a part of the
    next round and is then lost before its reply (an orphan: its trees are restored elsewhere
    from the committed snapshot), an adopting node is killed, a node is added, a kill after
    that.  The dataset equals the fault-free driver route row for row."""
    import ray

    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions

    plan = make_plan(workload["queries"], n_nodes=3)
    out = tmp_path / "run"
    with Deployment(plan, DeploymentOptions(max_in_flight=2, answers="actors", out_dir=out)) as dep:
        for i, b in enumerate(batches):
            if i == 1:
                ray.kill(dep.actor("node-0"), no_restart=True)
            if i == 3:
                dep.checkpoint()
            if i == 5:
                orphan = ray.get(
                    dep.actor("node-1").checkpoint_write.remote(
                        str(out / "answers.parquet"),
                        f"{dep.checkpoint_rounds + 1:06d}",
                        dep.value_type,
                    )
                )[1]
                assert orphan.num_rows > 0
                rec = dep.lose_node("node-1")
                adopter = sorted(set(rec["trees"].values()))[0]
            if i == 7:
                ray.kill(dep.actor(adopter), no_restart=True)
            if i == 8:
                dep.add_node()
            if i == 10:
                ray.kill(dep.actor("node-2"), no_restart=True)
            dep.feed(None, b)
        res = dep.finish()
    assert orphan.path in res.metrics["orphan_parts_removed"]
    assert not (out / "answers.parquet" / orphan.path).exists()
    assert res.metrics["additions"] and res.metrics["replacements"]
    assert res.answers.equals(driver_route.answers)


def test_actor_route_refusals(workload, ray_session, tmp_path):
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.deployment.specs import DeploymentError

    with pytest.raises(ValueError, match="needs out_dir"):
        Deployment(workload["plan"], DeploymentOptions(answers="actors"))
    with pytest.raises(ValueError, match="answers must be"):
        Deployment(workload["plan"], DeploymentOptions(answers="both", out_dir=tmp_path))
    with Deployment(workload["plan"], DeploymentOptions(answers="actors", out_dir=tmp_path)) as dep:
        with pytest.raises(DeploymentError, match="write the answers themselves"):
            dep.take_answers()


# ----------------------------------------------------------------------------- executors push
@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=6), st.integers(1, 3), st.randoms())
def test_piece_order_applies_in_order_whatever_the_arrival(subs, max_ahead, rnd):
    """Tasks push sub-batches in any interleaving (each task's own in order, as a task
    sends them; retries of refused or repeated offers): the items come out exactly in
    (piece, sub-batch) order, each once, with seq numbers increasing, and never more than
    ``max_ahead`` pieces are held."""
    from cluster.node.piece_order import PieceOrder

    po = PieceOrder(base_seq=7, max_ahead=max_ahead)
    queues = [[(p, j, j == n - 1) for j in range(n)] for p, n in enumerate(subs)]
    out = []
    while any(queues):
        p = rnd.choice([i for i, q in enumerate(queues) if q])
        piece, j, last = queues[p][0]
        got = po.offer(piece, j, last, (piece, j))
        if got is None:
            assert piece >= po.next_piece + max_ahead
            continue
        queues[p].pop(0)
        out += got
        if rnd.random() < 0.2:  # a repeated offer is ignored
            assert po.offer(piece, j, last, (piece, j)) == []
        assert all(k[0] < po.next_piece + max_ahead for k in po.buffer)
    assert [it for _, it in out] == [(p, j) for p, n in enumerate(subs) for j in range(n)]
    seqs = [s for s, _ in out]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs) and seqs[0] == 7
    assert po.done(len(subs))


@pytest.mark.parametrize("answers", ["actors", "driver"])
def test_executor_feed_equals_driver_route(
    workload, driver_route, ray_session, spark, tmp_path, answers
):
    """Spark tasks (local[2]) push pieces straight to the actors: no tuple crosses the
    driver, answers equal the driver route's row for row (answers written by the actors or
    merged on the driver)."""
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.feeds.executors import feed_executors

    with Deployment(
        workload["plan"], DeploymentOptions(max_in_flight=2, answers=answers, out_dir=tmp_path)
    ) as dep:
        fs = feed_executors(
            dep, spark, str(workload["path"]), batch_rows=500, piece_rows=1300, max_ahead=2
        )
        res = dep.finish()
    assert fs.rows == workload["rows"] and fs.chunks == -(-workload["rows"] // 1300)
    m = res.metrics
    assert m["rows_fed"] == 0 and m["bytes_fed"] == 0  # nothing through the driver
    assert fs.pushed["bytes_pushed"] > 16 * workload["rows"]
    for n in m["nodes"].values():
        assert n["tuples"] == workload["rows"]
    assert res.answers.equals(driver_route.answers)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 50),
    st.integers(1, 400),
    st.integers(1, 130),
    st.integers(0, 40),
    st.one_of(st.none(), st.integers(1, 9)),
    st.lists(st.integers(-3, 45), max_size=5),
)
def test_sub_batches_and_segments_cover_the_piece(a, n, batch_rows, pieces, ckpt, faults):
    """A piece's sub-batches (``sub_batches``, what the task pushes and the replay log holds)
    re-read from a real file give its rows exactly, in order, at most ``batch_rows`` each,
    numbered 0, 1, ...; in sliced mode each stream's chunks of slices, numbered from the
    stream's slot, give its slices; the segments cover every piece once, cut at checkpoints
    and drills."""
    import tempfile

    from cluster.feeds.executors import segment_cuts
    from cluster.node.piece_order import Slicing, sub_batches

    ts = np.arange(a + n, dtype=np.int64) * 7
    t = pa.table({"ts_ms": ts, "mf01": ts % 13, "mf02": ts % 5})
    with tempfile.TemporaryDirectory() as d:
        path = f"{d}/f.parquet"
        pq.write_table(t, path, row_group_size=a + n)
        subs = sub_batches(path, 0, a, a + n, batch_rows, ["ts_ms", "mf01", "mf02"])
        assert [j for j, _ in subs] == list(range(max(1, -(-n // batch_rows))))
        got = [src.read() for _, src in subs]
        assert all(g.num_rows <= batch_rows for g in got)
        assert pa.concat_tables(got).equals(t.slice(a, n))
        sl = Slicing(("mf01", "mf02"), (((21, 0),), ((35, 0), (14, 0))), False)
        piece = t.slice(a, n)
        cut = {s: sl.cut(piece, s) for s in sl.streams}
        chunks = {s: max(1, -(-x.num_rows // batch_rows)) for s, x in cut.items()}
        subs = sub_batches(path, 0, a, a + n, batch_rows, t.column_names, sl, chunks)
        assert [j for j, _ in subs] == sorted({j for j, _ in subs})
        for s in sl.streams:
            mine = [(j, src) for j, src in subs if src.stream == s]
            assert [j for j, _ in mine] == [sl.first_sub(s) + c for c in range(chunks[s])]
            assert pa.concat_tables([src.read() for _, src in mine]).equals(cut[s])
    cuts = segment_cuts(pieces, ckpt, faults)
    assert cuts[0] == 0 and cuts[-1] == pieces and cuts == sorted(set(cuts))
    want = {0, pieces} | ({k for k in range(0, pieces, ckpt)} if ckpt else set())
    want |= {f for f in faults if 0 < f < pieces}
    assert set(cuts) == want


@pytest.mark.parametrize("answers", ["driver", "actors"])
def test_executor_feed_exactly_once_through_fault_drills(
    workload, driver_route, ray_session, spark, tmp_path, answers
):
    """The executor route under a drill on three nodes: a kill before any checkpoint (the
    restored actor replays by reading the file itself), node-1 lost for good (its trees
    adopted and replayed from the file), a node added, the adopting node killed, with
    checkpoints every 4 pieces.  No tuple crosses the driver; the answers equal the fault-free
    driver route's row for row."""
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.feeds.executors import feed_executors, plan_pieces, segment_cuts
    from cluster.feeds.time_chunks import parquet_row_groups

    plan = make_plan(workload["queries"], n_nodes=3)
    n = len(plan_pieces(parquet_row_groups(str(workload["path"])), 500))
    faults = [
        {"kind": "kill", "node": "node-0", "at_batch": 2},
        {"kind": "lose", "node": "node-1", "at_batch": 5},
        {"kind": "add", "node": "node-9", "at_batch": 7},
        {"kind": "kill", "node": "node-2", "at_batch": 9},
        {"kind": "kill", "node": "node-0", "at_batch": n},  # after the last piece: at finish
    ]
    out = tmp_path / "run"
    with Deployment(
        plan,
        DeploymentOptions(
            max_in_flight=2, checkpoint_every=4, faults=faults, answers=answers, out_dir=out
        ),
    ) as dep:
        fs = feed_executors(
            dep, spark, str(workload["path"]), batch_rows=300, piece_rows=500, max_ahead=2
        )
        res = dep.finish()
    m = res.metrics
    assert fs.chunks == n >= 12 and fs.rows == workload["rows"]
    # cut at 2, 4, 5, 7, 8, 9, 12 (4, 8, 12: checkpoints)
    assert fs.pushed["segments"] == len(segment_cuts(n, 4, [2, 5, 7, 9, n])) - 1 >= 7
    assert m["rows_fed"] == 0 and m["bytes_fed"] == 0
    assert all(f["fired"] for f in dep.faults)
    assert [r["node"] for r in m["replacements"]] == ["node-1"]
    assert [a["node"] for a in m["additions"]] == ["node-9"]
    assert m["nodes"]["node-0"]["recoveries"] == 2 and m["nodes"]["node-2"]["recoveries"] == 1
    assert res.answers.equals(driver_route.answers)


def test_executor_feed_sliced_mode_exactly_once_through_fault_drills(
    workload, driver_route, ray_session, spark, tmp_path
):
    """Sliced mode on the executor route: the tasks cut their piece into each stream's slices
    (the deployment's edge union) and push them to the nodes hosting the stream; a slice cut
    by a piece boundary arrives as two rows, which the trees fold.  Under a kill, a loss and
    an addition (replays re-slice the piece from the file), the answers equal the raw driver
    route's for every (time-window) query."""
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.feeds.executors import feed_executors

    tq = [q for q in workload["queries"] if q.kind == "time"]
    plan = make_plan(tq, n_nodes=3)
    faults = [
        {"kind": "kill", "node": "node-2", "at_batch": 1},
        {"kind": "lose", "node": "node-1", "at_batch": 3},
        {"kind": "add", "at_batch": 5},
        {"kind": "kill", "node": "node-0", "at_batch": 6},
    ]
    with Deployment(
        plan,
        DeploymentOptions(
            mode="sliced", checkpoint_every=2, faults=faults, answers="actors", out_dir=tmp_path
        ),
    ) as dep:
        fs = feed_executors(
            dep, spark, str(workload["path"]), batch_rows=40, piece_rows=700, max_ahead=2
        )
        res = dep.finish()
    m = res.metrics
    assert fs.rows == workload["rows"] and 0 < fs.slices < fs.rows
    assert m["rows_fed"] == 0 and all(f["fired"] for f in dep.faults)
    assert m["nodes"]["node-0"]["recoveries"] == 1 and m["nodes"]["node-2"]["recoveries"] == 1
    assert m["replacements"] and m["additions"]
    want = _only(driver_route.answers, {q.id for q in tq})
    avg = {q.id for q in tq if q.aggregate == "avg"}
    assert res.answers.num_rows == want.num_rows
    assert_answers_equal(res.answers, want, avg)


def test_executor_feed_exact_when_an_actor_dies_during_a_job(
    workload, driver_route, ray_session, spark
):
    """An actor killed while Spark tasks are pushing (not at a drill's cut): the job fails,
    the node is restored and replays from the file, the segment is pushed again under a new
    epoch (the dead job's lingering pushes are dropped); answers equal the fault-free run's."""
    import threading
    import time

    import ray

    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.feeds.executors import feed_executors

    with Deployment(workload["plan"], DeploymentOptions(max_in_flight=2)) as dep:
        victim = dep.actor("node-1")
        killed = threading.Event()

        def kill_when_busy():
            deadline = time.time() + 60
            while time.time() < deadline:
                if ray.get(victim.metrics.remote())["tuples"] >= 1000:
                    ray.kill(victim, no_restart=True)
                    killed.set()
                    return
                time.sleep(0.01)

        th = threading.Thread(target=kill_when_busy, daemon=True)
        th.start()
        fs = feed_executors(
            dep, spark, str(workload["path"]), batch_rows=200, piece_rows=200, max_ahead=1
        )
        th.join()
        res = dep.finish()
    assert killed.is_set()
    assert res.metrics["nodes"]["node-1"]["recoveries"] == 1
    # one segment (no checkpoints, no drill); the kill came a sixth of the way through it (the
    # metrics call queues behind the pushes), so the job failed and was pushed again
    assert fs.pushed["segments"] == 1 and fs.pushed["attempts"] == 2
    assert res.answers.equals(driver_route.answers)


def test_executor_feed_refusals(workload, ray_session, spark, tmp_path):
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.deployment.specs import DeploymentError
    from cluster.feeds.executors import feed_executors

    # a file out of time order: refused in one line (feed 'driver' sorts it)
    t = pq.read_table(workload["path"])
    bad = tmp_path / "shuffled.parquet"
    pq.write_table(t.take(np.random.default_rng(0).permutation(t.num_rows)), bad)
    with Deployment(workload["plan"]) as dep:
        with pytest.raises(DeploymentError, match="not in time order"):
            feed_executors(dep, spark, str(bad))
    with Deployment(workload["plan"]) as dep:
        with pytest.raises(DeploymentError, match="local Parquet file"):
            feed_executors(dep, spark, str(tmp_path / "nope.parquet"))
    # an actor lost without auto_recover: refused in one line
    import ray

    with Deployment(workload["plan"], DeploymentOptions(auto_recover=False)) as dep:
        ray.kill(dep.actor("node-1"), no_restart=True)
        with pytest.raises(DeploymentError, match="auto_recover is off") as ei:
            feed_executors(dep, spark, str(workload["path"]))
        assert "\n" not in str(ei.value)


def test_run_file_with_the_driver_out(workload, driver_route, ray_session, spark, tmp_path):
    """``run_file`` with answers by the actors and the executors' feed route: answers.parquet and late.parquet are
    the datasets the actors wrote (directories, one table each), metrics.json says so."""
    import json

    from cluster.answers.sink import read_answers
    from cluster.deployment.options import DeploymentOptions
    from cluster.runs.file_run import run_file
    from cluster.runs.options import FileFeedOptions, RuntimeOptions

    out = tmp_path / "run"
    out.mkdir()
    (out / "answers.parquet").write_bytes(b"a previous run's file")  # replaced
    res = run_file(
        workload["plan"],
        workload["path"],
        out,
        runtime=RuntimeOptions(spark=spark),
        deployment=DeploymentOptions(answers="actors", out_dir=out),
        feed=FileFeedOptions(batch_rows=800, route="executors"),
    )
    assert (out / "answers.parquet").is_dir() and (out / "late.parquet").is_dir()
    assert read_answers(out / "answers.parquet").equals(driver_route.answers)
    m = json.loads((out / "metrics.json").read_text())
    assert m["answers_route"] == "actors" and m["feed"]["route"] == "executors"
    assert m["rows_fed"] == 0 and m["answers"] == driver_route.answers.num_rows
    assert res.answers.num_rows == m["answers"]
    with pytest.raises(ValueError, match="answers.csv needs"):
        run_file(
            workload["plan"],
            workload["path"],
            out,
            runtime=RuntimeOptions(spark=spark),
            deployment=DeploymentOptions(answers="actors", out_dir=out),
            feed=FileFeedOptions(csv=True),
        )


def test_config_routes(tmp_path):
    import yaml
    from support.configs import EXPLICIT

    from sim.config import ConfigError, load_config

    (tmp_path / "in").mkdir()

    def load(run, data):
        (tmp_path / "c.yaml").write_text(yaml.safe_dump({**EXPLICIT, "data": data, "run": run}))
        return load_config(tmp_path / "c.yaml")

    for key, val in (("answers", "actors"), ("feed", "executors")):
        with pytest.raises(ConfigError, match=f"run.{key}: '{val}' is for a file"):
            load({"mode": "live", key: val}, {"directory": {"path": "in"}})
    cfg = load({"mode": "live", "answers": "actors", "feed": "executors"}, {"duration_s": 5})
    assert (cfg.run.answers, cfg.run.feed) == ("actors", "executors")
    cfg = load({"mode": "live"}, {"duration_s": 5})
    assert (cfg.run.answers, cfg.run.feed) == ("driver", "driver")
