"""Cluster layer end to end: plan -> Ray actors -> Spark feed, checked against Spark SQL itself.

The oracle is a real peer: Spark SQL's ``groupBy(window(t, "<r> milliseconds", "<s>
milliseconds"))`` on the same Parquet file computes every time-window answer independently of
our slicing and final aggregation; count windows (which Spark has no notion of) are checked
against a numpy brute force over stream positions.  The fault test kills actors mid-stream and
requires the recovered run to equal the fault-free run exactly.

One Ray and one Spark for the whole session (tests/conftest.py).
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.cluster_oracles import assert_answers_equal, count_oracle, spark_oracle
from support.cluster_plans import RATE_HZ, STREAMS, make_plan, make_queries

from sim.debs_generator import generate_debs  # noqa: E402

pytestmark = pytest.mark.cluster

DURATION_S = 90


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    d = tmp_path_factory.mktemp("cluster")
    path = d / "debs.parquet"
    n = generate_debs(path, duration_s=DURATION_S, rate_hz=RATE_HZ, seed=11)
    queries = make_queries()
    plan = make_plan(queries)
    (d / "plan.json").write_text(json.dumps(plan))
    return {"dir": d, "path": path, "rows": n, "queries": queries, "plan": plan}


@pytest.fixture(scope="module")
def live_result(workload, ray_session, spark):
    """One deployment fed by Spark (driver path, raw mode); shared by the checks below."""
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.feeds.parquet import feed_raw

    with Deployment(workload["plan"], DeploymentOptions(max_in_flight=3)) as dep:
        assert len(dep.nodes) == 2 and all(n.spec["trees"] for n in dep.nodes.values())
        fs = feed_raw(dep, spark, str(workload["path"]), batch_rows=1000)
        res = dep.finish()
    assert fs.rows == workload["rows"] and fs.sorted_chunks == 0  # file already in order
    return res


def test_ray_runtime_borrows_a_running_ray(ray_session):
    """A RayRuntime inside a process that already runs Ray neither restarts nor stops it."""
    import ray

    from cluster.runtime.ray_runtime import RayRuntime

    assert ray_session.owned
    with RayRuntime() as rt:
        assert not rt.owned and ray.is_initialized()
    assert ray.is_initialized()


def test_time_windows_equal_spark_sql(workload, live_result, spark):
    qs = [q for q in workload["queries"] if q.kind == "time"]
    assert any(q.range % q.slide for q in qs) and any(q.range == q.slide for q in qs)
    ref = spark_oracle(spark, workload["path"], qs)
    ours = live_result.answers.filter(
        pa.compute.is_in(
            live_result.answers.column("query_id"), value_set=pa.array([q.id for q in qs])
        )
    )
    assert ref.num_rows > 10_000
    assert set(ours.column("query_id").to_pylist()) == {q.id for q in qs}
    assert_answers_equal(ours, ref, {q.id for q in qs if q.aggregate == "avg"})


def test_count_windows_equal_numpy(workload, live_result):
    t = pq.read_table(workload["path"], columns=["ts_ms", "index", *STREAMS]).sort_by(
        [("ts_ms", "ascending"), ("index", "ascending")]
    )
    qs = [q for q in workload["queries"] if q.kind == "count"]
    rows = sorted(r for q in qs for r in count_oracle(t.column(q.stream).to_numpy(), q))
    ref = pa.table(
        {
            k: list(v)
            for k, v in zip(["query_id", "window_start", "window_end", "value"], zip(*rows))
        }
    )
    ours = live_result.answers.filter(
        pa.compute.is_in(
            live_result.answers.column("query_id"), value_set=pa.array([q.id for q in qs])
        )
    )
    assert_answers_equal(ours, ref, {q.id for q in qs if q.aggregate == "avg"})


def test_metrics_and_late(workload, live_result):
    m = live_result.metrics
    assert m["rows_fed"] == workload["rows"]
    assert sum(n["answers"] for n in m["nodes"].values()) == live_result.answers.num_rows
    for n in m["nodes"].values():
        assert n["tuples"] == workload["rows"] and n["late_tuples"] == 0
        assert n["busy_s"] > 0 and n["queue_depth"] == 0 and 1 <= n["max_queue_depth"] <= 3
    assert live_result.late.num_rows == 0  # DEBS timestamps are non-decreasing


def test_fault_recovery_equals_fault_free(workload, live_result, ray_session, spark):
    """Kill node-0 before any checkpoint (restored from the initial state, full replay) and
    node-1 after a checkpoint (restored from the snapshot, replay of the later batches)."""
    import ray

    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.feeds.parquet import ordered_arrow_batches, read_debs_df

    df = read_debs_df(spark, str(workload["path"]), list(STREAMS))
    batches = [b.select(["ts_ms", *STREAMS]) for b in ordered_arrow_batches(df, batch_rows=700)]
    assert len(batches) > 10

    with Deployment(workload["plan"], DeploymentOptions(max_in_flight=2)) as dep:
        for b in batches:
            dep.feed(None, b)
        clean = dep.finish()

    with Deployment(workload["plan"], DeploymentOptions(max_in_flight=2)) as dep:
        for i, b in enumerate(batches):
            if i == 3:
                ray.kill(dep.actor("node-0"), no_restart=True)
            if i == 6:
                dep.checkpoint()
            if i == 9:
                ray.kill(dep.actor("node-1"), no_restart=True)
            dep.feed(None, b)
        faulty = dep.finish()
    assert faulty.metrics["nodes"]["node-0"]["recoveries"] == 1
    assert faulty.metrics["nodes"]["node-1"]["recoveries"] == 1
    assert faulty.answers.equals(clean.answers)
    assert faulty.late.equals(clean.late)
    # the answers do not depend on the batch size either (700 here, 1000 in live_result)
    assert clean.answers.equals(live_result.answers)


def test_take_answers_and_late_exactly_once_across_recovery(workload, ray_session, spark):
    """What a live stream does after each micro-batch: ``take_answers`` (checkpoint + hand
    over) and ``take_late`` (new late tuples only).  With actors killed between takes, the
    pieces taken plus ``finish()`` still equal a clean batch run: nothing twice, nothing lost."""
    import ray

    from cluster.answers.blocks import concat_answers
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.feeds.parquet import ordered_arrow_batches, read_debs_df

    df = read_debs_df(spark, str(workload["path"]), list(STREAMS))
    batches = [b.select(["ts_ms", *STREAMS]) for b in ordered_arrow_batches(df, batch_rows=900)]
    batches[4], batches[5] = batches[5], batches[4]  # one batch reaching back: late tuples
    key = [
        ("node_id", "ascending"),
        ("tree_id", "ascending"),
        ("ts_ms", "ascending"),
        ("value", "ascending"),
    ]

    with Deployment(workload["plan"], DeploymentOptions(allowed_lateness=50)) as dep:
        for b in batches:
            dep.feed(None, b)
        clean = dep.finish()
    assert clean.late.num_rows > 0

    answers, late = [], []
    with Deployment(workload["plan"], DeploymentOptions(allowed_lateness=50)) as dep:
        for i, b in enumerate(batches):
            dep.feed(None, b)
            if i in (2, 6):
                ray.kill(dep.actor("node-1" if i == 2 else "node-0"), no_restart=True)
            if i % 3 == 0:
                answers.append(dep.take_answers())
                late.append(dep.take_late())
        late.append(dep.take_late())
        res = dep.finish()
    assert res.metrics["nodes"]["node-0"]["recoveries"] == 1
    assert res.metrics["nodes"]["node-1"]["recoveries"] == 1
    got = concat_answers([*answers, res.answers]).sort_by(
        [("query_id", "ascending"), ("window_start", "ascending")]
    )
    assert len([a for a in answers if a.num_rows]) >= 3 and got.equals(clean.answers)
    assert pa.concat_tables(late).sort_by(key).equals(clean.late.sort_by(key))


def _late_key(t: pa.Table) -> pa.Table:
    """Late tuples as rows (tree_id, stream, ts_ms, value) in a canonical order: what they are,
    not which node handed them over."""
    return t.select(["tree_id", "stream", "ts_ms", "value"]).sort_by(
        [("tree_id", "ascending"), ("ts_ms", "ascending"), ("value", "ascending")]
    )


def test_take_answers_and_late_exactly_once_across_node_loss(workload, ray_session, spark):
    """A live stream's takes (``take_answers`` + ``take_late`` every 3 batches) on 3 nodes,
    with three batches reaching back in time (late tuples before and after each loss):
    node-1 is lost for good between two takes with its late tuples of batch 4 not handed over
    yet (its trees restored on the survivors from the snapshot of the take at batch 2, the
    batches after replayed); node-2 is lost between two takes after its trees (moved ones
    too, maybe) had handed over late tuples, so node-0 now holds trees whose earlier late
    tuples were taken from other nodes; then node-0 is killed before a take.  Answers and late
    tuples taken plus ``finish()`` equal the fault-free run row for row: none twice (offsets
    are per tree, not per node), none lost.  A late tuple names the node hosting its tree
    when it was taken."""
    import ray

    from cluster.answers.blocks import concat_answers
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.feeds.parquet import ordered_arrow_batches, read_debs_df

    plan = make_plan(workload["queries"], n_nodes=3)
    df = read_debs_df(spark, str(workload["path"]), list(STREAMS))
    batches = [b.select(["ts_ms", *STREAMS]) for b in ordered_arrow_batches(df, batch_rows=500)]
    assert len(batches) >= 18
    for a in (3, 9, 14):  # batch a+1 before batch a: batch a is (mostly) late
        batches[a], batches[a + 1] = batches[a + 1], batches[a]

    with Deployment(plan, DeploymentOptions(allowed_lateness=50)) as dep:
        for b in batches:
            dep.feed(None, b)
        clean = dep.finish()
    moved = {t["id"] for n in plan["nodes"] if n["id"] != "node-0" for t in n["trees"]}
    assert clean.late.num_rows > 0
    assert set(clean.late.column("tree_id").to_pylist()) & moved

    answers, late, host_at_take = [], [], []

    def take(dep):
        answers.append(dep.take_answers())
        late.append(dep.take_late())
        host_at_take.append({t["id"]: nid for nid, n in dep.nodes.items() for t in n.spec["trees"]})

    with Deployment(plan, DeploymentOptions(allowed_lateness=50)) as dep:
        for i, b in enumerate(batches):
            if i == 5:  # late tuples of batch 4 are on node-1, not taken yet
                rec1 = dep.lose_node("node-1")
            if i == 13:  # batch 12 fed since the take at 11
                rec2 = dep.lose_node("node-2")
            if i == 16:
                ray.kill(dep.actor("node-0"), no_restart=True)
            dep.feed(None, b)
            if i % 3 == 2:
                take(dep)
        take(dep)
        res = dep.finish()
    assert rec1["snapshot_seq"] == 2 and rec1["replayed_batches"] >= 2
    assert rec2["snapshot_seq"] == 11 and rec2["replayed_batches"] >= 1
    assert set(res.metrics["lost_nodes"]) == {"node-1", "node-2"}
    assert res.metrics["nodes"]["node-0"]["recoveries"] == 1

    got = concat_answers([*answers, res.answers]).sort_by(
        [("query_id", "ascending"), ("window_start", "ascending")]
    )
    assert got.equals(clean.answers)
    taken = pa.concat_tables(late)
    assert taken.num_rows == clean.late.num_rows
    assert _late_key(taken).equals(_late_key(clean.late))
    # moved trees handed over late tuples both before and after their move
    by_node = {}
    for part, hosts in zip(late, host_at_take):
        for nid, tid in zip(part.column("node_id").to_pylist(), part.column("tree_id").to_pylist()):
            assert nid == hosts[tid]
            by_node.setdefault(tid, set()).add(nid)
    assert any(len(v) > 1 for tid, v in by_node.items() if tid in moved)


def test_run_file_writes_outputs(workload, live_result, ray_session, spark, tmp_path):
    from cluster.deployment.options import DeploymentOptions
    from cluster.runs.file_run import run_file
    from cluster.runs.options import FileFeedOptions, RuntimeOptions

    res = run_file(
        str(workload["dir"] / "plan.json"),
        workload["path"],
        tmp_path / "out",
        runtime=RuntimeOptions(spark=spark),
        deployment=DeploymentOptions(checkpoint_every=2),
        feed=FileFeedOptions(batch_rows=1024),
    )
    assert res.metrics["checkpoints"] >= 2
    assert res.metrics["startup"]["ray_owned"] is False  # borrowed the session's Ray
    ans = pq.read_table(tmp_path / "out" / "answers.parquet")
    assert ans.schema.names == ["query_id", "window_start", "window_end", "value"]
    assert ans.schema.field("window_start").type == pa.int64()
    assert ans.equals(live_result.answers)
    assert pq.read_table(tmp_path / "out" / "late.parquet").num_rows == 0
    m = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert m["feed"]["rows"] == workload["rows"] and set(m["nodes"]) == {"node-0", "node-1"}


def test_unordered_file_auto_sorts_and_file_mode_counts_late(
    workload, live_result, ray_session, spark, tmp_path
):
    """A file whose rows are out of time order: ``order="auto"`` detects it per chunk and sorts
    (same answers as the ordered file); ``order="file"`` feeds the disorder, and the late tuples
    and answers equal an ExecutionTree fed the same file order directly."""
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.feeds.parquet import feed_raw
    from executors import ExecutionTree

    t = pq.read_table(workload["path"])
    n = t.num_rows
    rng = np.random.default_rng(5)
    perm = np.arange(n)
    for a in rng.choice(n - 40, 60, replace=False):  # local swaps: a few ms out of order
        perm[a], perm[a + 30] = perm[a + 30], perm[a]
    bad = tmp_path / "unordered.parquet"
    pq.write_table(t.take(perm), bad, row_group_size=2000)

    with Deployment(workload["plan"]) as dep:
        fs = feed_raw(dep, spark, str(bad), batch_rows=1500, chunk_rows=3000, order="auto")
        auto = dep.finish()
    assert fs.chunks >= 3 and 0 < fs.sorted_chunks <= fs.chunks
    assert auto.answers.equals(live_result.answers)

    q = next(q for q in workload["queries"] if q.kind == "time" and q.aggregate == "max")
    plan = {
        "schema": "weaveplace.plan/1",
        "ie": "slickdeque",
        "streams": {},
        "queries": [q.to_dict()],
        "nodes": [{"id": "n0", "trees": [{"id": "t0", "stream": q.stream, "queries": [q.id]}]}],
    }
    with Deployment(plan, DeploymentOptions(allowed_lateness=100)) as dep:
        feed_raw(dep, spark, str(bad), batch_rows=1500, order="file")
        filed = dep.finish()
    shuffled = t.take(perm)
    tree = ExecutionTree([q.to_dict()], allowed_lateness=100)
    parts = [
        tree.process(shuffled.column("ts_ms").to_numpy(), shuffled.column(q.stream).to_numpy()),
        tree.flush(),
    ]
    ref = pa.concat_tables(parts).sort_by(
        [("query_id", "ascending"), ("window_start", "ascending")]
    )
    assert tree.late.count > 0 and filed.late.num_rows == tree.late.count
    assert filed.late.column("ts_ms").to_pylist() == tree.late.ts.tolist()
    assert filed.answers.equals(ref)


@pytest.fixture(scope="module")
def small_batches(workload, spark):
    """The workload file as 700-row Arrow batches in time order (13 batches)."""
    from cluster.feeds.parquet import ordered_arrow_batches, read_debs_df

    df = read_debs_df(spark, str(workload["path"]), list(STREAMS))
    return [b.select(["ts_ms", *STREAMS]) for b in ordered_arrow_batches(df, batch_rows=700)]


def _plan_nodes(plan) -> dict[str, list[str]]:
    return {n["id"]: sorted(q for t in n["trees"] for q in t["queries"]) for n in plan["nodes"]}


def test_lost_node_replaced_exactly_with_kills(workload, live_result, small_batches, ray_session):
    """Three nodes.  node-1 is lost for good after a checkpoint (its trees restored on the
    survivors from that snapshot, batches since replayed); then an adopting node is killed
    before the next checkpoint (restarted from its own snapshot + the adopted trees' one), and
    after a checkpoint node-2 is killed (its snapshot now holds moved trees).  The answers
    equal the fault-free run row for row, values bit for bit."""
    import ray

    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from placement.plan import verify_plan

    plan = make_plan(workload["queries"], n_nodes=3)
    before = _plan_nodes(plan)
    batches = small_batches
    assert len(batches) >= 12
    with Deployment(plan, DeploymentOptions(max_in_flight=2)) as dep:
        for i, b in enumerate(batches):
            if i == 3:
                dep.checkpoint()
            if i == 5:
                rec = dep.lose_node("node-1")
                adopter = sorted(set(rec["trees"].values()))[0]
            if i == 7:
                ray.kill(dep.actor(adopter), no_restart=True)
            if i == 9:
                dep.checkpoint()
            if i == 11:
                ray.kill(dep.actor("node-2"), no_restart=True)
            dep.feed(None, b)
        res = dep.finish()
        after = dep.plan
    assert res.answers.equals(live_result.answers)
    assert res.late.num_rows == 0 == live_result.late.num_rows

    # the record: every plan tree of node-1 moved, to survivors; snapshot at batch 2
    plan_trees_1 = {t["id"] for n in plan["nodes"] if n["id"] == "node-1" for t in n["trees"]}
    assert rec["node"] == "node-1" and rec["before_batch"] == 5 and rec["snapshot_seq"] == 2
    assert rec["moved"] == len(plan_trees_1) > 0 and set(rec["trees"]) == plan_trees_1
    assert set(rec["trees"].values()) <= {"node-0", "node-2"}
    assert rec["replayed_batches"] == 2 * len(set(rec["trees"].values()))  # batches 3, 4
    ex, pl = rec["executed"], rec["planned"]
    assert ex["total_before"] == pytest.approx(plan["total_cost"])
    assert ex["total_change"] == pytest.approx(0.0, abs=1e-9)  # trees move whole
    assert ex["max_after"] >= ex["max_before"] - 1e-9
    assert pl["total_change"] <= 1e-9  # weaving is only planned where it saves cost
    m = res.metrics
    assert m["replacements"] == res.replacements == [rec]
    assert set(m["nodes"]) == {"node-0", "node-2"} and set(m["lost_nodes"]) == {"node-1"}
    assert m["nodes"][adopter]["recoveries"] == 1 and m["nodes"]["node-2"]["recoveries"] == 1
    moved_exec = sum(
        1 for n in m["nodes"].values() for t in n["trees"] if t.split("~")[0] in plan_trees_1
    )
    assert sum(n["adopted_trees"] for n in m["nodes"].values()) == moved_exec > 0
    # the deployment's plan follows the layout, keeps the surviving trees where they were,
    # and still verifies
    assert verify_plan(after) == []
    now = _plan_nodes(after)
    assert set(now) == {"node-0", "node-2"}
    assert sorted(q for qs in now.values() for q in qs) == sorted(q.id for q in workload["queries"])
    for nid in now:
        assert set(before[nid]) <= set(now[nid])


def test_lose_node_before_any_checkpoint_and_refusals(
    workload, live_result, small_batches, ray_session
):
    """A fault drill kills node-0 and, before that is noticed, declares it lost (no checkpoint
    yet: its trees start from the initial state on node-1 and replay everything); losing the
    last node, an unknown node or a lost one is refused with a clear error."""
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.deployment.specs import DeploymentError

    faults = [
        {"kind": "kill", "node": "node-0", "at_batch": 2},
        {"kind": "lose", "node": "node-0", "at_batch": 4},
    ]
    with Deployment(workload["plan"], DeploymentOptions(max_in_flight=2, faults=faults)) as dep:
        for b in small_batches:
            dep.feed(None, b)
        with pytest.raises(DeploymentError, match="last node"):
            dep.lose_node("node-1")
        with pytest.raises(DeploymentError, match="already lost"):
            dep.lose_node("node-0")
        with pytest.raises(DeploymentError, match="unknown node 'nope'"):
            dep.lose_node("nope")
        res = dep.finish()
    assert res.answers.equals(live_result.answers)
    (rec,) = res.replacements
    assert rec["snapshot_seq"] == -1 and rec["replayed_batches"] == 4  # batches 0-3
    assert set(rec["trees"].values()) == {"node-1"}
    assert [f["fired"] for f in res.metrics["faults"]] == [True, True]
    assert res.metrics["nodes"]["node-1"]["tuples"] > 0
    with pytest.raises(DeploymentError, match=r"faults\[1\]: losing node 'node-1' loses every"):
        Deployment(
            workload["plan"],
            DeploymentOptions(
                faults=[
                    {"kind": "lose", "node": "node-0", "at_batch": 1},
                    {"kind": "lose", "node": "node-1", "at_batch": 2},
                ]
            ),
        )
    with pytest.raises(DeploymentError, match=r"faults\[0\]\.node: unknown node 'x'"):
        Deployment(
            workload["plan"],
            DeploymentOptions(faults=[{"kind": "kill", "node": "x", "at_batch": 1}]),
        )


def test_run_file_fault_drill_writes_final_plan(
    workload, live_result, ray_session, spark, tmp_path
):
    """The user path of a drill: ``run_file`` with ``DeploymentOptions(faults=...)`` on 3 nodes (node-2 killed, node-1
    lost for good): same answers.parquet, the re-placement in metrics.json, plan_final.json
    verifies, and the summary lines say what happened."""
    from cluster.deployment.options import DeploymentOptions
    from cluster.runs.file_run import run_file
    from cluster.runs.options import FileFeedOptions, RuntimeOptions
    from placement.plan import verify_plan
    from sim.cluster_run import drill_lines

    plan = make_plan(workload["queries"], n_nodes=3)
    faults = [
        {"kind": "kill", "node": "node-2", "at_batch": 2},
        {"kind": "lose", "node": "node-1", "at_batch": 5},
        {"kind": "kill", "node": "node-0", "at_batch": 99},
    ]
    res = run_file(
        plan,
        workload["path"],
        tmp_path / "out",
        runtime=RuntimeOptions(spark=spark),
        deployment=DeploymentOptions(checkpoint_every=3, faults=faults),
        feed=FileFeedOptions(batch_rows=1000),
    )
    out = tmp_path / "out"
    assert pq.read_table(out / "answers.parquet").equals(live_result.answers)
    m = json.loads((out / "metrics.json").read_text())
    (rec,) = m["replacements"]
    assert rec["node"] == "node-1" and rec["before_batch"] == 5 and rec["snapshot_seq"] == 2
    assert [f["fired"] for f in m["faults"]] == [True, True, False]
    assert m["nodes"]["node-2"]["recoveries"] == 1 and set(m["lost_nodes"]) == {"node-1"}
    final = json.loads((out / "plan_final.json").read_text())
    assert verify_plan(final) == [] and [n["id"] for n in final["nodes"]] == ["node-0", "node-2"]
    lines = drill_lines(res.metrics)
    assert lines[0].startswith(
        f"node node-1 lost before batch 5 (fault drill at batch 5): "
        f"{rec['moved']} tree(s) re-placed ("
    )
    assert "node node-2 restarted 1 time(s) from its checkpoint" in lines
    assert 5 < m["batches"] < 99
    assert lines[-1] == (
        f"fault drill: kill node-0 at batch 99 did not fire (the run fed "
        f"{m['batches']} batch(es); lower run.batch_rows)"
    )


def _exec_layout(dep) -> dict[str, list[str]]:
    """Plan node -> plan tree ids, from the running actors (what really runs where)."""
    m = dep.metrics()["nodes"]
    return {nid: sorted({t.split("~")[0] for t in m[nid]["trees"]}) for nid in m}


def test_add_node_mid_stream_exactly_once_with_kills_and_loss(
    workload, live_result, small_batches, ray_session
):
    """Scale out on 2 nodes (pinned): node-2 is added before batch 4 (trees move there from the
    checkpoint add_node takes), then, before the next checkpoint, the new node and an old host
    are killed (rebuilt from the move's snapshots + replay), after a checkpoint the new node is
    killed again and node-0 is lost for good.  The answers equal the fault-free run row for
    row; the plan after the add verifies, its node costs are replace.add_node's, and it
    matches what the actors run."""
    import ray

    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.deployment.pinning import ray_nodes_for_pinning
    from cluster.deployment.specs import DeploymentError
    from placement.plan import verify_plan

    plan = workload["plan"]
    with Deployment(plan, DeploymentOptions(max_in_flight=2, pin_nodes=True)) as dep:
        for i, b in enumerate(small_batches):
            if i == 4:
                rec = dep.add_node()
                after_add = dep.plan
                layout_after_add = _exec_layout(dep)
                placed = dep.placement()
                old_host = sorted(set(rec["trees"].values()))[0]
            if i == 6:
                ray.kill(dep.actor("node-2"), no_restart=True)
                ray.kill(dep.actor(old_host), no_restart=True)
            if i == 8:
                dep.checkpoint()
            if i == 9:
                ray.kill(dep.actor("node-2"), no_restart=True)
            if i == 10:
                lost = dep.lose_node("node-0")
            dep.feed(None, b)
        with pytest.raises(DeploymentError, match="'node-2': it already exists"):
            dep.add_node("node-2")
        with pytest.raises(DeploymentError, match="'node-0': it was lost"):
            dep.add_node("node-0")
        with pytest.raises(DeploymentError, match="give a capacity for the new node exactly"):
            dep.add_node(capacity=2.0)
        res = dep.finish()
        with pytest.raises(DeploymentError, match="already finished"):
            dep.add_node()
        final = dep.plan
    assert res.answers.equals(live_result.answers)
    assert res.late.num_rows == 0
    # the record: trees moved from the old nodes, planned by replace.add_node
    assert rec["node"] == "node-2" and rec["before_batch"] == 4 and rec["snapshot_seq"] == 3
    assert rec["moved"] == len(rec["trees"]) > 0
    assert set(rec["trees"].values()) <= {"node-0", "node-1"}
    pl = rec["planned"]
    assert pl["max_change"] < 0 and pl["total_change"] == pytest.approx(0.0, abs=1e-9)
    assert res.additions == res.metrics["additions"] == [rec]
    # pinned like the others: plan node 2 -> Ray node 2 mod R
    alive = [r["NodeID"] for r in ray_nodes_for_pinning()]
    assert rec["ray_node"] == alive[2 % len(alive)] == placed["node-2"]
    # the plan after the add: verifies, node costs as planned, equal to the running layout
    assert verify_plan(after_add) == []
    assert [n["id"] for n in after_add["nodes"]] == ["node-0", "node-1", "node-2"]
    for n in after_add["nodes"]:
        assert n["cost"] == pytest.approx(pl["node_costs"][n["id"]], rel=1e-9)
    assert after_add["max_cost"] == pytest.approx(pl["max_after"], rel=1e-9)
    moved = {t["id"] for t in after_add["nodes"][2]["trees"]}
    assert moved == set(rec["trees"])
    assert {
        n["id"]: sorted(t["id"] for t in n["trees"]) for n in after_add["nodes"]
    } == layout_after_add
    # kills and the loss: restarted once/twice, node-0's trees re-placed; the final plan
    # verifies and holds every query
    m = res.metrics
    assert m["nodes"]["node-2"]["recoveries"] == 2
    assert (m["nodes"].get(old_host) or m["lost_nodes"][old_host])["recoveries"] == 1
    assert m["nodes"]["node-2"]["added_trees"] == rec["executed_trees"] > 0
    assert lost["node"] == "node-0" and set(m["lost_nodes"]) == {"node-0"}
    assert verify_plan(final) == [] and [n["id"] for n in final["nodes"]] == ["node-1", "node-2"]
    assert sorted(q for n in final["nodes"] for t in n["trees"] for q in t["queries"]) == sorted(
        q.id for q in workload["queries"]
    )


def test_add_node_drill_then_lose_the_new_node(workload, live_result, small_batches, ray_session):
    """A drill adds a node before batch 2, kills node-0 at batch 3 (its snapshot still holds
    the moved trees: restored, then dropped) and loses the new node at batch 4, before any
    later checkpoint (its trees go back from the move's snapshots + replay): exactly once."""
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.deployment.specs import DeploymentError

    faults = [
        {"kind": "add", "at_batch": 2, "node": "extra"},
        {"kind": "kill", "node": "node-0", "at_batch": 3},
        {"kind": "lose", "node": "extra", "at_batch": 4},
    ]
    with Deployment(workload["plan"], DeploymentOptions(max_in_flight=2, faults=faults)) as dep:
        for b in small_batches:
            dep.feed(None, b)
        res = dep.finish()
    assert res.answers.equals(live_result.answers)
    (add,), (rep,) = res.additions, res.replacements
    assert add["node"] == "extra" and add["reason"] == "fault drill at batch 2"
    assert rep["node"] == "extra" and rep["snapshot_seq"] == 1 == add["snapshot_seq"]
    assert set(rep["trees"]) == set(add["trees"]) and rep["replayed_batches"] > 0
    assert [f["fired"] for f in res.metrics["faults"]] == [True, True, True]
    assert res.metrics["nodes"]["node-0"]["recoveries"] == 1
    for faults, msg in [
        (
            [
                {"kind": "kill", "node": "node-9", "at_batch": 1},
                {"kind": "add", "node": "node-9", "at_batch": 3},
            ],
            r"faults\[0\]: node 'node-9' is added only by faults\[1\] at batch 3",
        ),
        (
            [{"kind": "add", "node": "node-1", "at_batch": 1}],
            r"faults\[0\]\.node: node 'node-1' already exists",
        ),
        (
            [{"kind": "kill", "node": "node-1", "at_batch": 1, "capacity": 2}],
            r"faults\[0\]\.capacity: only a node added",
        ),
        ([{"kind": "add", "at_batch": 1, "capacity": 0}], r"faults\[0\]\.capacity"),
    ]:
        with pytest.raises(DeploymentError, match=msg):
            Deployment(workload["plan"], DeploymentOptions(faults=faults))


def test_run_file_add_drill_writes_final_plan(workload, live_result, ray_session, spark, tmp_path):
    """The user path of a scale-out drill: ``run_file`` with a drill adds a node before batch 2,
    kills it before batch 4 and loses node-0 before batch 6: same answers.parquet, the
    addition in metrics.json, plan_final.json verifies, the summary line says what moved."""
    from cluster.deployment.options import DeploymentOptions
    from cluster.runs.file_run import run_file
    from cluster.runs.options import FileFeedOptions, RuntimeOptions
    from placement.plan import verify_plan
    from sim.cluster_run import drill_lines

    faults = [
        {"kind": "add", "at_batch": 2},
        {"kind": "kill", "node": "node-2", "at_batch": 4},
        {"kind": "lose", "node": "node-0", "at_batch": 6},
    ]
    res = run_file(
        workload["plan"],
        workload["path"],
        tmp_path / "out",
        runtime=RuntimeOptions(spark=spark),
        deployment=DeploymentOptions(checkpoint_every=3, faults=faults),
        feed=FileFeedOptions(batch_rows=1000),
    )
    out = tmp_path / "out"
    assert pq.read_table(out / "answers.parquet").equals(live_result.answers)
    m = json.loads((out / "metrics.json").read_text())
    (add,) = m["additions"]
    assert add["node"] == "node-2" and add["before_batch"] == 2 and add["moved"] > 0
    assert [f["fired"] for f in m["faults"]] == [True, True, True]
    assert m["nodes"]["node-2"]["recoveries"] == 1 and set(m["lost_nodes"]) == {"node-0"}
    final = json.loads((out / "plan_final.json").read_text())
    assert verify_plan(final) == [] and [n["id"] for n in final["nodes"]] == ["node-1", "node-2"]
    lines = drill_lines(res.metrics)
    assert lines[0].startswith(
        f"node node-2 added before batch 2 (fault drill at batch 2): "
        f"{add['moved']} tree(s) moved to it (from node-"
    )
