"""Membership (cluster/deployment/membership.py): a plan node lost (``lose_node``) or added
(``add_node``) mid-stream, also with actor kills; its trees re-placed on the other nodes must
give, row for row, the answers and late tuples of the fault-free run, exactly once.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from support.cluster_plans import STREAMS, make_plan

pytestmark = pytest.mark.cluster


def _late_key(t: pa.Table) -> pa.Table:
    """Late tuples as rows (tree_id, stream, ts_ms, value) in a canonical order: what they are,
    not which node handed them over."""
    return t.select(["tree_id", "stream", "ts_ms", "value"]).sort_by(
        [("tree_id", "ascending"), ("ts_ms", "ascending"), ("value", "ascending")]
    )


@pytest.mark.scenario  # two losses and a kill, 11-22 s: make test-scenarios (make test < 8 min)
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


def _plan_nodes(plan) -> dict[str, list[str]]:
    return {n["id"]: sorted(q for t in n["trees"] for q in t["queries"]) for n in plan["nodes"]}


@pytest.mark.scenario  # ~21 s: make test-scenarios (make test stays under 8 min)
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


def _exec_layout(dep) -> dict[str, list[str]]:
    """Plan node -> plan tree ids, from the running actors (what really runs where)."""
    m = dep.metrics()["nodes"]
    return {nid: sorted({t.split("~")[0] for t in m[nid]["trees"]}) for nid in m}


@pytest.mark.scenario  # ~20 s: make test-scenarios (make test stays under 8 min)
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


@pytest.mark.scenario  # ~17 s here: make test-scenarios (make test stays under 8 min)
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
