"""``cluster.service.tree_changes`` against an oracle, without Ray: whatever the running trees,
applying the changes to them must give the fresh plan's trees (query sets on their nodes),
every query must keep exactly one tree answering it, and queries that change tree must be
handed over (kept by the old tree for their windows from before T)."""

from __future__ import annotations

from collections import Counter

from helpers import examples, random_queries
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.service.state import RunningTree
from cluster.service.tree_changes import replan, weave_in
from placement.plan import Node, Plan
from placement.replace import add_queries
from placement.trees import CostModel
from placement.weaveshare import weaveshare

NODES = ["n0", "n1", "n2"]
MODEL = CostModel("slickdeque", {"s0": 0.2, "s1": 0.05})


@st.composite
def running_trees(draw, queries):
    """The queries split into running trees (one key per tree) on random nodes, with ids
    ``t0..`` in an order unrelated to the queries', and the next free tree number."""
    groups: dict[tuple, list[list]] = {}
    for q in queries:
        key = (q.stream, q.aggregate)
        trees = groups.setdefault(key, [])
        k = draw(st.integers(0, len(trees)))
        if k == len(trees):
            trees.append([])
        trees[k].append(q)
    all_trees = [t for ts in groups.values() for t in ts]
    order = draw(st.permutations(range(len(all_trees))))
    trees = {}
    for i, j in enumerate(order):
        node = draw(st.sampled_from(NODES))
        trees[f"t{i}"] = RunningTree(node, all_trees[j][0].stream, [q.id for q in all_trees[j]])
    return trees, len(all_trees)


def snapshot(trees):
    return {
        tid: (t.node, list(t.active), None if t.handed is None else list(t.handed))
        for tid, t in trees.items()
    }


def placed(trees, by_id):
    """The running trees as a placement plan (as the service prices it)."""
    nodes = [
        Node(
            n,
            [
                MODEL.tree([by_id[q] for q in t.active])
                for t in trees.values()
                if t.node == n and t.active
            ],
        )
        for n in NODES
    ]
    return Plan("WG_TN", MODEL.technique, nodes, dict(MODEL.rates), MODEL.slicing)


@st.composite
def replan_case(draw):
    qs = random_queries(draw, draw(st.integers(1, 8)), keys=2, streams=2)
    trees, next_tree = draw(running_trees(qs))
    fresh_trees = weaveshare(qs, MODEL)
    nodes = [Node(n) for n in NODES]
    for t in fresh_trees:
        nodes[draw(st.integers(0, len(NODES) - 1))].trees.append(t)
    fresh = Plan("WG_X", MODEL.technique, nodes, dict(MODEL.rates), MODEL.slicing)
    return trees, next_tree, fresh, draw(st.integers(0, 4))


@settings(max_examples=examples(300), deadline=None)
@given(replan_case())
def test_replan_reaches_the_fresh_plan(case):
    trees, next_tree, fresh, max_moves = case
    before = snapshot(trees)
    r = replan(fresh, NODES, trees, next_tree)
    assert snapshot(trees) == before  # pure: the running trees are not changed

    want = Counter(
        (frozenset(q.id for q in t.queries), n)
        for n, node in zip(NODES, fresh.nodes)
        for t in node.trees
    )
    after = r.applied_to(trees, r.moves_within(len(r.moves)))
    got = Counter((frozenset(t.active), t.node) for t in after.values() if t.active)
    assert got == want
    # each query runs in exactly one tree afterwards
    actives = [q for t in after.values() for q in t.active]
    assert len(actives) == len(set(actives))

    # new trees: fresh ids from next_tree on; moves: running trees whose node changes
    new_ids = [n.tree_id for n in r.new_trees]
    assert new_ids == [f"t{next_tree + i}" for i in range(len(new_ids))]
    assert r.next_tree == next_tree + len(new_ids)
    assert all(m.tree_id in trees and trees[m.tree_id].node != m.node for m in r.moves)
    assert [m.cost for m in r.moves] == sorted((m.cost for m in r.moves), reverse=True)

    # hand-offs: a query whose tree changed, and only those; the old tree keeps it as handed
    old_of = {q: tid for tid, t in trees.items() for q in t.active}
    new_of = {q: tid for tid, t in after.items() for q in t.active}
    assert r.handoffs == {q: [old_of[q], new_of[q]] for q in old_of if old_of[q] != new_of[q]}
    for q, (old, _) in r.handoffs.items():
        assert q in after[old].handed and q not in after[old].active

    # with at most max_moves moves: the costliest are made, every other tree stays put
    limited = r.applied_to(trees, r.moves_within(max_moves))
    made = {m.tree_id for m in r.moves[:max_moves]}
    assert len(made) == min(max_moves, len(r.moves))
    assert r.moves_skipped(max_moves) == len(r.moves) - len(made)
    for tid, t in trees.items():
        assert limited[tid].node == (after[tid].node if tid in made else t.node)
    assert Counter(frozenset(t.active) for t in limited.values() if t.active) == Counter(
        s for s, _ in want.elements()
    )


@settings(max_examples=examples(300), deadline=None)
@given(replan_case())
def test_a_second_replan_never_gives_a_tree_back_a_query_it_handed_off(case):
    """Re-plan to a fresh plan, then back to the running trees' own plan (two re-plans that
    disagree, e.g. an autoscale decision then a drift re-plan): no tree takes back a query it
    handed off (a running tree refuses a query id it used), and the second plan is reached."""
    trees, next_tree, fresh, _ = case
    by_id = {q.id: q for t in fresh.trees for q in t.queries}
    back = placed(trees, by_id)
    r1 = replan(fresh, NODES, trees, next_tree)
    after1 = r1.applied_to(trees, r1.moves_within(len(r1.moves)))
    r2 = replan(back, NODES, after1, r1.next_tree)
    for tid, c in r2.changes.items():
        assert not set(c.add) & set(after1[tid].handed or [])
    after2 = r2.applied_to(after1, r2.moves_within(len(r2.moves)))
    want = Counter(
        (frozenset(q.id for q in t.queries), n)
        for n, node in zip(NODES, back.nodes)
        for t in node.trees
    )
    assert Counter((frozenset(t.active), t.node) for t in after2.values() if t.active) == want


@st.composite
def additions_case(draw):
    qs = random_queries(draw, draw(st.integers(1, 7)), keys=2, streams=2)
    n_new = draw(st.integers(1, len(qs)))
    running_qs, new_qs = qs[: len(qs) - n_new], qs[len(qs) - n_new :]
    trees, next_tree = draw(running_trees(running_qs))
    return trees, next_tree, qs, new_qs


@settings(max_examples=examples(300), deadline=None)
@given(additions_case())
def test_weave_in_reaches_the_placed_plan(case):
    trees, next_tree, qs, new_qs = case
    by_id = {q.id: q for q in qs}
    rep = add_queries(placed(trees, by_id), new_qs, MODEL)
    before = snapshot(trees)
    new_ids = {q.id for q in new_qs}
    a = weave_in(rep.plan, new_ids, trees, next_tree)
    assert snapshot(trees) == before

    after = a.applied_to(trees)
    want = Counter(
        (frozenset(q.id for q in t.queries), n.id) for n in rep.plan.nodes for t in n.trees
    )
    assert Counter((frozenset(t.active), t.node) for t in after.values() if t.active) == want
    # running queries stay in their tree on its node; new ones are where the reply says
    for tid, t in trees.items():
        assert after[tid].node == t.node and after[tid].active[: len(t.active)] == t.active
    assert set(a.where) == new_ids
    for q, w in a.where.items():
        assert q in after[w["tree"]].active and after[w["tree"]].node == w["node"]
        assert w["woven"] == (w["tree"] in trees)
    assert [n.tree_id for n in a.new_trees] == [
        f"t{next_tree + i}" for i in range(a.next_tree - next_tree)
    ]


def test_weave_in_finds_a_grown_tree_whatever_the_order_and_refuses_merged_ones():
    """A grown tree's old queries in another order than the running tree's still map to it
    (the map of every running query); old queries of two running trees, or a running tree
    placed on another node, are refused."""
    import pytest

    from cluster.service.tree_changes import MergedRunningTrees
    from placement.queries import Query

    q = {i: Query(i, 6, 2, "sum", "s0") for i in ("a", "b", "c", "new")}
    trees = {"t0": RunningTree("n0", "s0", ["a", "b"]), "t1": RunningTree("n0", "s0", ["c"])}

    def plan_of(*groups, node="n0"):
        nodes = [Node(n) for n in NODES]
        for g in groups:
            nodes[NODES.index(node)].trees.append(MODEL.tree([q[i] for i in g]))
        return Plan("WG_TN", MODEL.technique, nodes, dict(MODEL.rates), MODEL.slicing)

    for order in (["a", "b", "new"], ["new", "b", "a"], ["b", "new", "a"]):
        a = weave_in(plan_of(order, ["c"]), {"new"}, trees, 2)
        assert [(g.tree_id, g.queries) for g in a.grown] == [("t0", ("new",))]
    for bad, node in (((["a", "c", "new"], ["b"]), "n0"), ((["a", "b", "new"], ["c"]), "n1")):
        with pytest.raises(MergedRunningTrees):
            weave_in(plan_of(*bad, node=node), {"new"}, trees, 2)
