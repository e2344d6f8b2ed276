"""Distributed optimizers of dissertation Table 7 and WG_LS: hand-checked plans and invariants."""

from __future__ import annotations

import math
import random

import pytest
from helpers import all_moves_exact, examples, greedy_reference
from hypothesis import given, settings
from hypothesis import strategies as st

from placement import distributed as dist
from placement.distributed import (
    TABLE7,
    infeasible_nodes,
    make_units,
    woven,
)
from placement.local_search import search as ls_search
from placement.local_search.search import LocalSearch
from placement.optimizers import DISTRIBUTED as OPTIMIZERS
from placement.optimizers import optimize
from placement.plan import verify_plan
from placement.queries import Query
from placement.trees import CostModel
from placement.weaveshare import plan_cost, weave, weaveshare
from sim.distributed_grid import run_grid
from sim.workload import WorkloadSpec, generate

# ---- hand-checkable instance (Panes, lambda = 1) ------------------------------------------------
# a (r4, s2): E 1/2, Omega 2 -> cost 2        b (r8, s4): E 1/4, Omega 2 -> 1.5
# c (r3, s3): E 1/3, Omega 1 -> 4/3           d (r6, s3): E 1/3, Omega 2 -> 5/3
# Pairs: ab: E 1/2, Omega 4 -> 3 (benefit 0.5); cd: E 1/3, Omega 3 -> 2 (benefit 1);
#        ac: E 2/3, Omega 3 -> 3; bc: E 1/2, Omega 3 -> 2.5; bd: E 1/2, Omega 4 -> 3;
#        ad: E 2/3, Omega 4 -> 11/3.  Triples: bcd: E 1/2, Omega 5 -> 3.5; abcd: E 2/3, Omega 7 -> 17/3.
# WeaveShare: cd (benefit 1), then ab (0.5); {ab}+{cd} would cost 17/3 > 5: stops at {ab},{cd}.
A, B, C, D = Query("a", 4, 2), Query("b", 8, 4), Query("c", 3, 3), Query("d", 6, 3)
HAND = [A, B, C, D]


def model1():
    return CostModel("panes", 1.0)


def layout(plan):
    """Per node: sorted list of sorted query-id groups (one per tree)."""
    return [sorted("".join(sorted(q.id for q in t.queries)) for t in n.trees) for n in plan.nodes]


def loads(plan):
    return [round(n.cost, 9) for n in plan.nodes]


HAND_EXPECTED = {
    # name: (layout on 2 nodes, node costs)
    # G_RAND / W_RAND / WG_RAND are checked for validity and determinism only.
    "G_RR": ([["a", "c"], ["b", "d"]], [2 + 4 / 3, 1.5 + 5 / 3]),
    "W_RR": ([["ac"], ["bd"]], [3, 3]),
    # WG_RR: a, b open their nodes; c's first choice on node 0 weaves (into a), d's into b.
    "WG_RR": ([["ac"], ["bd"]], [3, 3]),
    # G_TL: order a 2, d 5/3, b 1.5, c 4/3: a->n0, d->n1, b->n1 (1.67 < 2), c->n0 (2 < 3.17).
    "G_TL": ([["a", "c"], ["b", "d"]], [2 + 4 / 3, 1.5 + 5 / 3]),
    # W_TL: a->n0, d->n1, b woven on n1 ({bd} = 3), c woven on n0 ({ac} = 3).
    "W_TL": ([["ac"], ["bd"]], [3, 3]),
    # WG_TL: b on n1: group 1.67+1.5 = 3.17 vs weave {bd} 3 -> weave; c on n0: 3.33 vs 3 -> weave.
    "WG_TL": ([["ac"], ["bd"]], [3, 3]),
    # To Nodes: WeaveShare ends with {ab}=3, {cd}=2: two trees on two nodes.
    "W_TN": ([["cd"], ["ab"]], [3, 2]),
    "WG_TN": ([["cd"], ["ab"]], [3, 2]),
}


@pytest.mark.parametrize("name", sorted(HAND_EXPECTED))
def test_hand_instance_two_nodes(name):
    plan = optimize(name, HAND, model1(), 2)
    want_layout, want_loads = HAND_EXPECTED[name]
    assert sorted(layout(plan)) == sorted(want_layout)
    assert sorted(loads(plan)) == pytest.approx(sorted(want_loads))
    assert verify_plan(plan.to_dict()) == []


@pytest.mark.parametrize("name", ["W_I", "WG_I"])
def test_hand_inserted_first_init(name):
    # a -> n0, b -> n1 (init "first"). c: weave on n0 -> 3, on n1 ({bc}) -> 2.5: n1 (WG_I: weave
    # increase 1.0 < group 4/3). d: n0 {ad} 11/3 vs n1 {bcd} 3.5: n1 (WG_I: increase 1.0 < 5/3).
    plan = optimize(name, HAND, model1(), 2, init="first")
    assert layout(plan) == [["a"], ["bcd"]]
    assert loads(plan) == pytest.approx([2, 3.5])


def test_to_nodes_one_node_and_three_nodes():
    m = model1()
    w1 = optimize("W_TN", HAND, m, 1)  # forced merge of {ab},{cd}: 17/3
    assert layout(w1) == [["abcd"]] and w1.total_cost == pytest.approx(17 / 3)
    wg1 = optimize("WG_TN", HAND, m, 1)  # G_TL of the two trees on one node
    assert layout(wg1) == [["ab", "cd"]] and wg1.total_cost == pytest.approx(5)
    wg3 = optimize("WG_TN", HAND, m, 3)
    assert loads(wg3) == pytest.approx([3, 2, 0])


def test_to_nodes_stop_at_nodes_reading():
    # Prose reading: stop weaving once <= N trees. With N = 3 it stops after merging {cd}.
    plan = optimize("WG_TN", HAND, model1(), 3, stop_at_nodes=True)
    assert sorted(sum(layout(plan), [])) == ["a", "b", "cd"]


def test_wg_ls_hand_instance_is_optimal():
    # Optimum (see test_distributed_exact): {ab} | {cd}, total 5, max 3 (a node with a and b
    # costs >= 3; putting a alone leaves {b,c,d} >= 3.5).
    plan = optimize("WG_LS", HAND, model1(), 2)
    assert plan.total_cost == pytest.approx(5) and plan.max_cost == pytest.approx(3)


# ---- invariants on generated workloads ------------------------------------------------------------


def mixed_workload(n, seed):
    """Two streams and two aggregates: keys that cannot share a tree."""
    qs = []
    for i, q in enumerate(generate(WorkloadSpec(qnum=n, smax=12, rate=5, omax=4, seed=seed))):
        stream = "s0" if i % 3 else "s1"
        agg = "max" if i % 4 == 1 else "sum"
        qs.append(Query(q.id, q.range, q.slide, agg, stream))
    return qs


def assert_valid(plan, queries, n_nodes):
    assert len(plan.nodes) == n_nodes
    ids = [q.id for q in plan.queries]
    assert sorted(ids) == sorted(q.id for q in queries) and len(set(ids)) == len(ids)
    assert verify_plan(plan.to_dict()) == []
    assert math.isclose(plan.total_cost, sum(n.cost for n in plan.nodes))


@pytest.mark.parametrize("name", tuple(OPTIMIZERS))
@pytest.mark.parametrize("preprocess", [False, True, "slides"])
def test_every_optimizer_valid_and_deterministic(name, preprocess):
    rates = {"s0": 3.0, "s1": 0.5}
    model = CostModel("slickdeque", rates)
    qs = mixed_workload(40, seed=3)
    for n_nodes in (1, 3, 5):
        p1 = optimize(name, qs, model, n_nodes, seed=7, preprocess=preprocess)
        assert_valid(p1, qs, n_nodes)
        p2 = optimize(
            name, qs, CostModel("slickdeque", rates), n_nodes, seed=7, preprocess=preprocess
        )
        assert layout(p1) == layout(p2) and p1.to_dict()["nodes"] == p2.to_dict()["nodes"]


def test_category_structure():
    model = CostModel("panes", 2.0)
    qs = generate(WorkloadSpec(qnum=30, smax=20, rate=2, omax=5, seed=4))
    for name in TABLE7:
        plan = optimize(name, qs, model, 4)
        per_node = [len(n.trees) for n in plan.nodes]
        if OPTIMIZERS[name].category == "G":
            assert all(len(t.queries) == 1 for t in plan.trees)  # no sharing at all
        if OPTIMIZERS[name].category == "W":
            assert max(per_node) <= 1  # one key: one tree per node
    ws = weaveshare(qs, model, preprocess=False)
    assert optimize("WG_TN", qs, model, 4).total_cost == pytest.approx(plan_cost(ws))
    assert len(optimize("W_TN", qs, model, 4).trees) <= 4


def test_random_seed_changes_random_optimizers_only():
    model = CostModel("panes", 1.0)
    qs = generate(WorkloadSpec(qnum=25, smax=15, rate=1, omax=3, seed=2))
    differs = {
        name: layout(optimize(name, qs, model, 3, seed=0))
        != layout(optimize(name, qs, model, 3, seed=1))
        for name in TABLE7
    }
    assert differs["G_RAND"] and differs["WG_I"]
    for name in ("G_RR", "W_RR", "WG_RR", "G_TL", "W_TL", "WG_TL", "W_TN", "WG_TN"):
        assert not differs[name], name


def test_capacities_balance_utilization():
    model = CostModel("panes", 1.0)
    qs = generate(WorkloadSpec(qnum=30, smax=10, rate=1, seed=5))
    plan = optimize("G_TL", qs, model, [30.0, 10.0])
    util = [n.cost / n.capacity for n in plan.nodes]
    assert plan.nodes[0].cost > plan.nodes[1].cost  # the bigger node carries more
    assert max(util) - min(util) < 0.2
    assert [n.capacity for n in plan.nodes] == [30.0, 10.0]
    tight = optimize("G_TL", qs, model, [1.0, 1.0])
    assert infeasible_nodes(tight) == ["node-0", "node-1"]
    with pytest.raises(ValueError, match="capacity for every node"):
        optimize("G_TL", qs, model, [1.0, None])


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="unknown optimizer"):
        optimize("W_XX", HAND, model1(), 2)
    with pytest.raises(ValueError, match="at least one node"):
        optimize("G_TL", HAND, model1(), 0)
    with pytest.raises(ValueError, match="preprocess"):
        make_units(HAND, model1(), "bogus")


@settings(max_examples=examples(15))
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(2, 30),
    nodes=st.integers(1, 6),
    lam=st.sampled_from([0.5, 10.0, 100.0]),
)
def test_wg_ls_never_worse_than_its_starts(seed, n, nodes, lam):
    """WG_LS's objective (worst ratio to the references, then MaxCost, then TotalCost) is at most
    that of each of its starting plans."""
    model = CostModel("panes", lam)
    qs = generate(WorkloadSpec(qnum=n, smax=20, rate=lam, omax=5, zskew=1, seed=seed))
    tn, wi = (optimize(x, qs, model, nodes, seed=seed) for x in ("WG_TN", "WG_I"))
    ls = optimize("WG_LS", qs, model, nodes, seed=seed)
    assert_valid(ls, qs, nodes)
    s = LocalSearch(
        model, [None] * nodes, min(tn.total_cost, wi.total_cost), min(tn.max_cost, wi.max_cost)
    )
    k = s.key([x.cost for x in ls.nodes])
    for start in (
        tn,
        wi,
        optimize("WG_TL", qs, model, nodes, seed=seed),
        optimize("WG_TN", qs, model, nodes, seed=seed, stop_at_nodes=True),
    ):
        assert not s.better(s.key([x.cost for x in start.nodes]), k)


def test_run_grid_rows():
    specs = [WorkloadSpec(qnum=8, smax=10, rate=10, omax=3, seed=1)]
    rows = run_grid(specs, [2, 3], optimizers=("G_TL", "WG_TN", "WG_I"), exact_max_queries=8)
    assert len(rows) == 6
    for r in rows:
        assert r["config"]["nodes"] in (2, 3) and r["runtime_s"] >= 0
        assert len(r["node_costs"]) == r["config"]["nodes"]
        assert r["gap_total"] >= -1e-9 and r["gap_max"] >= -1e-9


def test_weave_only_with_more_keys_than_nodes():
    """W_* keep one tree per key per node; W_TN cannot weave keys together, so with more keys than
    nodes it ends with one tree per key, placed by G_TL."""
    model = CostModel("panes", {"s0": 1.0, "s1": 1.0})
    qs = [
        Query(f"q{i}", 2 * (i % 3 + 1), i % 3 + 1, ("sum", "max", "min")[i % 3], "s0")
        for i in range(9)
    ]
    plan = optimize("W_TN", qs, model, 2)
    assert len(plan.trees) == 3
    assert sorted(len(n.trees) for n in plan.nodes) == [1, 2]
    for name in ("W_RAND", "W_RR", "W_TL", "W_I"):
        for n in optimize(name, qs, model, 2).nodes:
            keys = [t.key for t in n.trees]
            assert len(keys) == len(set(keys)), name


def test_preprocess_variants_group_units():
    model = CostModel("panes", 1.0)
    qs = [Query("a", 4, 2), Query("b", 6, 2), Query("c", 5, 2), Query("d", 3, 3)]
    # classes: a, b: {(2,0)}; c: {(2,0),(2,1)}; d: {(3,0)}
    assert sorted(len(u.queries) for u in make_units(qs, model, True)) == [1, 1, 2]
    assert sorted(len(u.queries) for u in make_units(qs, model, "slides")) == [1, 3]
    assert len(make_units(qs, model, False)) == 4
    ws = weaveshare(qs, model, preprocess=True)
    assert optimize("WG_TN", qs, model, 1, preprocess=True).total_cost == pytest.approx(
        plan_cost(ws)
    )


_WINDOW = st.tuples(st.integers(1, 12), st.integers(1, 4)).map(lambda w: (w[0] * w[1], w[1]))
_TREE = st.lists(_WINDOW, min_size=1, max_size=5)


@settings(max_examples=examples(60))
@given(
    xs=st.lists(_TREE, min_size=1, max_size=5),
    ys=st.lists(_TREE, min_size=1, max_size=5),
    tech=st.sampled_from(["panes", "flatfit"]),
    lam=st.sampled_from([0.5, 10.0]),
)
def test_wg_ls_merge_bounds_sum_the_shared_items(xs, ys, tech, lam):
    """``merge_lbs`` with an additive Omega is ``(lambda + max(E_x, E_y) * (Omega_x + Omega_y -
    shared items' weight)) * (1 - REL)`` (oracle: the weights of the shared windows summed with
    ``math.fsum``), one-query trees on the left (kind 4) as well, and does not depend on what
    the search has seen before."""
    from placement.cost import items_of
    from placement.local_search.search import REL

    model = CostModel(tech, lam)
    n = iter(range(10**6))

    def trees(spec):
        return [model.tree([Query(f"q{next(n)}", r, s) for r, s in ws]) for ws in spec]

    tx, ty = trees(xs), trees(ys)
    singles = trees([[ws[0]] for ws in xs])
    item = items_of(tx[0].technique, model.slicing)[0]
    for left in (tx, singles):
        fresh = LocalSearch(model, [None, None], 1.0, 1.0)
        used = LocalSearch(model, [None, None], 1.0, 1.0)
        used.merge_lbs(ty[::-1], tx[::-1] + singles)  # other items seen first
        got = fresh.merge_lbs(left, ty)
        assert got.tobytes() == used.merge_lbs(left, ty).tobytes()
        for i, x in enumerate(left):
            for j, y in enumerate(ty):
                shared = math.fsum(item(r, s)[1] for r, s in x.windows & y.windows)
                om = x.omega + y.omega - shared
                want = (lam + max(x.time_edge_rate, y.time_edge_rate) * om) * (1 - REL)
                assert got[i, j] == pytest.approx(want, rel=1e-12, abs=1e-12)


@settings(max_examples=examples(40))
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(2, 14),
    nodes=st.integers(2, 4),
    tech=st.sampled_from(["panes", "flatfit", "slickdeque_inv", "flatfat", "slickdeque_noninv"]),
    init=st.sampled_from(["WG_TN", "WG_I", "G_RR"]),
)
def test_wg_ls_best_move_equals_exhaustive_scan(seed, n, nodes, tech, init):
    """The bounded search (price a merge only while its optimistic key can still win) finds a
    move as good as the best of every move priced exactly, and finds none only when no move
    improves the plan."""
    model = CostModel(tech, 10.0)
    agg = "sum" if tech == "slickdeque_inv" else "max"
    qs = [
        Query(q.id, q.range, q.slide, agg)
        for q in generate(WorkloadSpec(qnum=n, smax=12, rate=10, omax=4, zskew=1, seed=seed))
    ]
    start = optimize(init, qs, model, nodes, seed=seed)
    tn, wi = (optimize(x, qs, model, nodes, seed=seed) for x in ("WG_TN", "WG_I"))
    s = LocalSearch(
        model, [None] * nodes, min(tn.total_cost, wi.total_cost), min(tn.max_cost, wi.max_cost)
    )
    ns = [list(x.trees) for x in start.nodes]
    ls = [sum(t.cost for t in ts) for ts in ns]
    cur = s.key(ls)
    oracle = all_moves_exact(s, ns, ls)
    move = s.best_move(ns, ls)
    improving = [k for k in oracle if s.better(k, cur)]
    if move is None:
        assert not improving
        return
    got_n, got_l = [list(x) for x in ns], list(ls)
    s.apply(got_n, got_l, move)
    got = s.key(got_l)
    assert s.better(got, cur)
    assert not any(s.better(k, got) for k in improving), (got, min(improving))


def scanned_moves(nodes, loads, pinned):
    """The moves ``best_move`` keys (module docstring of ``placement.local_search.search``: a
    tree to or from the busiest node, a swap with it, a tree woven into a same-key tree on
    another node, a query out of a tree on the busiest node, one per window), without those
    that take a tree holding a pinned query: the oracle of its scan and of its ``work``."""
    N = len(nodes)
    h = max(range(N), key=lambda j: (loads[j], -j))  # no capacities: utilization = load
    free = [[not any(q.id in pinned for q in t.queries) for t in ts] for ts in nodes]
    out = []
    for a in range(N):
        for ti, t in enumerate(nodes[a]):
            if not free[a][ti]:
                continue
            for b in range(N):
                if b == a:
                    continue
                if h in (a, b):
                    out.append(("move", a, ti, b, None))
                for ui, u in enumerate(nodes[b]):
                    if u.key == t.key:
                        out.append(("move", a, ti, b, ui))
                    if a == h and free[b][ui]:
                        out.append(("swap", a, ti, b, ui))
            if a == h and len(t.queries) > 1:
                for q in {(q.range, q.slide): q for q in t.queries}.values():
                    for b in range(N):
                        if b != a:
                            out.append(("query", a, ti, b, None, q))
                            out += [
                                ("query", a, ti, b, ui, q)
                                for ui, u in enumerate(nodes[b])
                                if u.key == t.key
                            ]
    return out


@settings(max_examples=examples(40))
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(2, 14),
    nodes=st.integers(2, 4),
    tech=st.sampled_from(["panes", "flatfit", "slickdeque_inv"]),
    init=st.sampled_from(["WG_TN", "WG_I", "G_RR"]),
    pins=st.lists(st.integers(0, 13), max_size=4),
)
def test_wg_ls_best_move_with_pinned_queries_equals_exhaustive_scan(
    seed, n, nodes, tech, init, pins
):
    """With pinned queries (WG_PF's kicks), ``best_move`` keys exactly the moves that leave
    every tree holding one in place (``work`` counts them) and returns one as good as the best
    of them priced exactly, or none when none improves the plan."""
    model = CostModel(tech, 10.0)
    agg = "sum" if tech == "slickdeque_inv" else "max"
    qs = [
        Query(q.id, q.range, q.slide, agg)
        for q in generate(WorkloadSpec(qnum=n, smax=12, rate=10, omax=4, zskew=1, seed=seed))
    ]
    start = optimize(init, qs, model, nodes, seed=seed)
    s = LocalSearch(model, [None] * nodes, start.total_cost, start.max_cost * 0.7)
    s.pinned = frozenset(qs[i % n].id for i in pins)
    ns = [list(x.trees) for x in start.nodes]
    ls = [sum(t.cost for t in ts) for ts in ns]
    cur = s.key(ls)
    moves = scanned_moves(ns, ls, s.pinned)
    keys = []
    for mv in moves:
        got_n, got_l = [list(x) for x in ns], list(ls)
        s.apply(got_n, got_l, mv)
        keys.append(s.key(got_l))
        s._single.clear()  # apply may hand out the cached single-query tree
    move = s.best_move(ns, ls)
    assert s.work == len(moves)
    improving = [k for k in keys if s.better(k, cur)]
    if move is None:
        assert not improving
        return
    assert move[:5] in [mv[:5] for mv in moves]
    got_n, got_l = [list(x) for x in ns], list(ls)
    s.apply(got_n, got_l, move)
    got = s.key(got_l)
    assert s.better(got, cur)
    assert not any(s.better(k, got) for k in improving), (got, min(improving))


@settings(max_examples=examples(25))
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(2, 24),
    nodes=st.integers(2, 5),
    tech=st.sampled_from(["panes", "flatfit", "slickdeque_inv"]),
    init=st.sampled_from(["WG_TN", "WG_I", "G_RR"]),
)
def test_wg_ls_best_move_does_not_depend_on_chunks(seed, n, nodes, tech, init):
    """``best_move`` prices its bounded candidates in chunks; the move it returns (ties
    included) is the one of offering them one by one, whatever the chunk sizes (``FIRST``
    included: the size of the chunks until one candidate beats the plan)."""
    model = CostModel(tech, 10.0)
    agg = "sum" if tech == "slickdeque_inv" else "max"
    qs = [
        Query(q.id, q.range, q.slide, agg)
        for q in generate(WorkloadSpec(qnum=n, smax=12, rate=10, omax=4, zskew=1, seed=seed))
    ]
    start = optimize(init, qs, model, nodes, seed=seed)
    moves = []
    ours = (ls_search.CHUNK_MIN, ls_search.CHUNK_MAX, ls_search.FIRST)
    for chunks in ((1, 1, 1), (1, 2, 5), (3, 7, 2), (5, 9, 200), ours):
        saved = ls_search.CHUNK_MIN, ls_search.CHUNK_MAX, ls_search.FIRST
        ls_search.CHUNK_MIN, ls_search.CHUNK_MAX, ls_search.FIRST = chunks
        try:
            s = LocalSearch(model, [None] * nodes, start.total_cost, start.max_cost * 0.7)
            ns = [list(x.trees) for x in start.nodes]
            ls = [sum(t.cost for t in ts) for ts in ns]
            move = s.best_move(ns, ls)
            moves.append((move, s.work))
        finally:
            ls_search.CHUNK_MIN, ls_search.CHUNK_MAX, ls_search.FIRST = saved
    assert all(m == moves[0] for m in moves[1:]), moves


@settings(max_examples=examples(15))
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(2, 30),
    nodes=st.integers(2, 6),
)
def test_wg_ls_with_given_starts_is_wg_ls(seed, n, nodes):
    """WG_LS given its start plans (a simulation has them) returns the plan it computes
    without them: the same trees on the same nodes, the same work."""
    model = CostModel("panes", 10.0)
    qs = generate(WorkloadSpec(qnum=n, smax=20, rate=10, omax=5, zskew=1, seed=seed))
    starts = {x: optimize(x, qs, model, nodes, seed=seed) for x in ls_search.STARTS}
    given_ = optimize("WG_LS", qs, model, nodes, seed=seed, starts=starts)
    alone = optimize("WG_LS", qs, model, nodes, seed=seed)
    assert ls_search._layout(given_) == ls_search._layout(alone)
    assert [x.cost for x in given_.nodes] == [x.cost for x in alone.nodes]
    assert given_.work == alone.work > 0


@settings(max_examples=examples(25))
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(1, 40),
    stops=st.lists(st.integers(0, 45), min_size=1, max_size=4),
    tech=st.sampled_from(["panes", "flatfit", "slickdeque_inv"]),
)
def test_woven_stop_at_is_weave_stop_at(seed, n, stops, tech):
    """``woven`` answers a ``stop_at`` weave from the full weave's states: the same trees (the
    same queries, in the same order, at the same cost) as weaving the units with ``stop_at``."""
    model = CostModel(tech, 10.0)
    agg = "sum" if tech == "slickdeque_inv" else "max"
    qs = [
        Query(q.id, q.range, q.slide, agg)
        for q in generate(WorkloadSpec(qnum=n, smax=12, rate=10, omax=4, zskew=1, seed=seed))
    ]
    units = make_units(qs, model)
    for stop_at in stops:
        got = woven(units, model, stop_at)
        want = weave(make_units(qs, model), model, stop_at=stop_at)
        assert [[q.id for q in t.queries] for t in got] == [[q.id for q in t.queries] for t in want]
        assert [t.cost for t in got] == [t.cost for t in want]


def _inserted_naive(units, model, st, category, seed, init="random"):
    """Algorithm 6 pricing every same-key tree of every node (``inserted`` before its bounds)."""
    for u in dist._seed_units(list(units), st, seed, init):
        best = None
        for j in range(st.n):
            same = st.same_key(j, u.key)
            if category == "W":
                if same:
                    t = same[0]
                    new = st.load[j] - t.cost + model.merged_price(t, u)[2]
                else:
                    t, new = None, st.load[j] + u.cost
            else:
                if not same:
                    continue
                t, new = None, None
                for cand in same:
                    c = st.load[j] - cand.cost + model.merged_price(cand, u)[2]
                    if new is None or c < new:
                        t, new = cand, c
            key = st.util_key(j, new)
            if best is None or key < best[0]:
                best = (key, j, t, new)
        if category == "W":
            _, j, t, _ = best
            if t is None:
                st.add(j, u)
            else:
                st.replace(j, t, model.merge(t, u))
            continue
        g = st.min_node()
        if best is None or u.cost < best[3] - st.load[best[1]]:
            st.add(g, u)
        else:
            _, j, t, _ = best
            st.replace(j, t, model.merge(t, u))


def generated_case(seed: int, n: int, tech: str, slicing: str):
    """The cost model and ``n`` generated queries (an aggregate the technique takes) of one
    property case, or None for a technique Cutty does not slice."""
    if slicing == "cutty" and tech not in ("panes", "flatfit", "slickdeque_noninv"):
        return None
    model = CostModel(tech, 10.0, slicing=slicing)
    agg = "sum" if tech == "slickdeque_inv" else "max"
    qs = [
        Query(q.id, q.range, q.slide, agg)
        for q in generate(WorkloadSpec(qnum=n, smax=12, rate=10, omax=4, zskew=1, seed=seed))
    ]
    return model, qs


#: the bound-below-the-price properties' cases
bound_cases = given(
    seed=st.integers(0, 10_000),
    n=st.integers(2, 30),
    nodes=st.integers(1, 4),
    tech=st.sampled_from(["panes", "flatfit", "slickdeque_inv", "flatfat", "slickdeque_noninv"]),
    slicing=st.sampled_from(["pairs", "cutty"]),
)


@settings(max_examples=examples(40))
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(1, 40),
    caps=st.one_of(
        st.integers(1, 8).map(lambda k: [None] * k),
        st.lists(st.sampled_from([1.0, 2.0, 5.0]), min_size=1, max_size=6),
    ),
    tech=st.sampled_from(["panes", "flatfit", "slickdeque_inv", "flatfat", "slickdeque_noninv"]),
    slicing=st.sampled_from(["pairs", "cutty"]),
    category=st.sampled_from(["W", "WG"]),
    preprocess=st.sampled_from([False, "slides"]),
)
def test_inserted_equals_pricing_every_tree(seed, n, caps, tech, slicing, category, preprocess):
    """Inserted with its merge bounds places every unit where pricing every same-key tree of
    every node does: the same trees (queries, costs) on the same nodes."""
    case = generated_case(seed, n, tech, slicing)
    if case is None:
        return
    model, qs = case
    units = make_units(qs, model, preprocess)
    got, want = dist.NodeState(caps), dist.NodeState(caps)
    dist.inserted(units, model, got, category, seed)
    _inserted_naive(units, model, want, category, seed)
    ids = [[[q.id for q in t.queries] for t in ts] for ts in got.trees]
    assert ids == [[[q.id for q in t.queries] for t in ts] for ts in want.trees]
    assert got.load == want.load


def bound_pairs(case, nodes, seed, same_key=False):
    """``(model, MergeBound, ordered pairs of distinct trees)`` for a generated ``case`` (none
    when it is None): trees of one or many windows as the optimizers build them, WG_RR's and
    one unit per query group; ``same_key``: only pairs of one key."""
    if case is None:
        return None, None, []
    model, qs = case
    trees = [t for n_ in optimize("WG_RR", qs, model, nodes, seed=seed).nodes for t in n_.trees]
    trees += make_units(qs, model)
    pairs = [
        (x, y) for x in trees for y in trees if x is not y and (not same_key or x.key == y.key)
    ]
    return model, dist.MergeBound(model), pairs


@settings(max_examples=examples(40))
@bound_cases
def test_merge_bound_is_below_the_merge_price(seed, n, nodes, tech, slicing):
    """``MergeBound.cost`` never exceeds the exact price of the merge, for the trees (one or
    many windows) the optimizers build."""
    model, bound, pairs = bound_pairs(generated_case(seed, n, tech, slicing), nodes, seed)
    for x, y in pairs:
        assert bound.cost(x, y) <= model.merged_price(x, y)[2]


@settings(max_examples=examples(30))
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(2, 16),
    target=st.integers(1, 5),
    tech=st.sampled_from(["panes", "flatfit", "slickdeque_inv", "flatfat"]),
    lam=st.sampled_from([0.1, 10.0]),
)
def test_forced_merge_equals_naive(seed, n, target, tech, lam):
    from placement.distributed import forced_merge

    model = CostModel(tech, lam)
    agg = "sum" if tech == "slickdeque_inv" else "max"
    qs = [
        Query(q.id, q.range, q.slide, agg, stream=("a", "b")[i % 2])
        for i, q in enumerate(generate(WorkloadSpec(qnum=n, smax=12, rate=lam, omax=4, seed=seed)))
    ]
    units = make_units(qs, model)
    got = forced_merge(units, model, target)
    want = greedy_reference(units, model, -math.inf, target)
    assert sorted(sorted(q.id for q in t.queries) for t in got) == sorted(
        sorted(q.id for q in t.queries) for t in want
    )


@settings(max_examples=examples(40))
@bound_cases
def test_wg_ls_without_bounds_are_below_the_price(seed, n, nodes, tech, slicing):
    """Both lower bounds on a tree minus one query (the ordering one and the tighter one that
    only skips prices) never exceed its price (oracle: ``model.tree`` of the other queries),
    and the tighter is never below the first."""
    case = generated_case(seed, n, tech, slicing)
    if case is None:
        return
    model, qs = case
    s = LocalSearch(model, [None] * nodes, 1.0, 1.0)
    for node in optimize("WG_TN", qs, model, nodes, seed=seed).nodes:
        for t in node.trees:
            if len(t.queries) < 2:
                continue
            lb1, lb2 = s._without_lbs(t, t.queries)
            for q, b1, b2 in zip(t.queries, lb1, lb2):
                price = model.tree([p for p in t.queries if p.id != q.id]).cost
                assert b1 <= b2 <= price, (q, b1, b2, price)


def test_wg_ls_tighter_without_bound_by_hand():
    """Panes, lambda 10: a (r3, s6), b (r2, s6), c (r5, s6) share the class (6, 0); a alone
    brings (6, 3). Without a: E = 3/6 (classes (6, 0), (6, 2), (6, 5)), Omega 7/6 (Panes of
    the windows (2, 6) and (5, 6)), cost 10 + 7/12. The first bound takes E >= max(E_b, E_t -
    E_a) = 1/3 (cost 10 + 7/18); the tighter one E >= E_t - 1/6 = 1/2: the exact cost."""
    from placement.local_search.search import REL

    model = CostModel("panes", 10.0)
    a, b, c = Query("a", 3, 6), Query("b", 2, 6), Query("c", 5, 6)
    t = model.tree([a, b, c])
    s = LocalSearch(model, [None, None], 1.0, 1.0)
    (lb1,), (lb2,) = s._without_lbs(t, [a])
    assert model.tree([b, c]).cost == pytest.approx(10 + 7 / 12, rel=1e-12)
    assert lb1 == pytest.approx((10 + 7 / 18) * (1 - REL), rel=1e-12)
    assert lb2 == pytest.approx((10 + 7 / 12) * (1 - REL), rel=1e-12)


@settings(max_examples=examples(60))
@given(
    xs=st.lists(st.lists(st.integers(0, 20), min_size=1, max_size=8), min_size=1, max_size=6),
    ys=st.lists(st.lists(st.integers(0, 20), min_size=0, max_size=8), min_size=0, max_size=6),
    w=st.lists(st.floats(0.01, 100.0), min_size=21, max_size=21),
)
def test_shared_by_sight_sums_in_order_of_first_sight(xs, ys, w):
    """The compiled sums of shared item weights equal, to the bit, a plain loop adding the
    weights of the shared items in order of first sight over xs then ys (the order that fixes
    the bounds' rounding), each item once per tree."""
    import numpy as np

    from placement.local_search.kernels import shared_by_sight

    sight: dict[int, int] = {}
    for ids in xs + ys:
        for g in ids:
            sight.setdefault(g, len(sight))

    def cat(trees):
        flat = [g for ids in trees for g in ids]
        return np.array(flat, np.intp), np.cumsum([0] + [len(ids) for ids in trees])

    got = shared_by_sight(*cat(xs), *cat(ys), np.array(w))
    assert got.shape == (len(xs), len(ys))
    for i, x in enumerate(xs):
        for j, y in enumerate(ys):
            want = 0.0
            for g in sorted(set(x) & set(y), key=sight.__getitem__):
                want += w[g]
            assert got[i, j] == want


def test_divisors_are_the_proper_divisors():
    """The divisor classes that may cover a query's class: every proper divisor, none else
    (oracle: trial division by every smaller number)."""
    for m in range(1, 400):
        assert ls_search._divisors(m) == tuple(d for d in range(1, m) if m % d == 0)
    assert ls_search._divisors(3_600_000)[-1] == 1_800_000


def wide_case(seed: int, n: int, smax: int, tech: str, slicing: str, mixed: bool):
    """A cost model and ``n`` generated queries with slides up to ``smax`` (Smax 10,000 makes
    trees of mostly coprime slides, where the shared-edges bound matters); ``mixed``: two
    streams of different rates and every third query a count window. None for a technique
    Cutty does not slice."""
    if slicing == "cutty" and tech not in ("panes", "flatfit", "slickdeque_noninv"):
        return None
    model = CostModel(tech, {"a": 10.0, "b": 0.5}, slicing=slicing)
    agg = "sum" if tech == "slickdeque_inv" else "max"
    spec = WorkloadSpec(qnum=n, smax=smax, rate=10, omax=10, zskew=0.5, seed=seed)
    qs = [
        Query(
            q.id,
            q.range,
            q.slide,
            agg,
            stream="ab"[i % 2] if mixed else "a",
            kind="count" if mixed and i % 3 == 0 else "time",
        )
        for i, q in enumerate(generate(spec))
    ]
    return model, qs


#: ``wide_case``'s arguments
WIDE = dict(
    seed=st.integers(0, 10_000),
    n=st.integers(1, 36),
    smax=st.sampled_from([12, 300, 10_000]),
    tech=st.sampled_from(["panes", "flatfit", "slickdeque_inv", "flatfat", "slickdeque_noninv"]),
    slicing=st.sampled_from(["pairs", "cutty"]),
    mixed=st.booleans(),
)


@settings(max_examples=examples(200))
@given(
    **WIDE,
    caps=st.one_of(
        st.integers(1, 8).map(lambda k: [None] * k),
        st.lists(st.sampled_from([1.0, 2.0, 5.0]), min_size=1, max_size=6),
    ),
    category=st.sampled_from(["W", "WG"]),
    init=st.sampled_from(["random", "first"]),
)
def test_inserted_equals_pricing_every_tree_wide_slides(
    seed, n, smax, tech, slicing, mixed, caps, category, init
):
    """Inserted with both merge bounds and its pricing heap places every unit where pricing
    every same-key tree of every node does, on wide slide menus and mixed keys: the same trees
    (queries, costs) on the same nodes, the same node costs."""
    case = wide_case(seed, n, smax, tech, slicing, mixed)
    if case is None:
        return
    model, qs = case
    units = make_units(qs, model)
    got, want = dist.NodeState(caps), dist.NodeState(caps)
    dist.inserted(units, model, got, category, seed, init=init)
    _inserted_naive(units, model, want, category, seed, init=init)
    ids = [[[q.id for q in t.queries] for t in ts] for ts in got.trees]
    assert ids == [[[q.id for q in t.queries] for t in ts] for ts in want.trees]
    assert [[t.cost for t in ts] for ts in got.trees] == [[t.cost for t in ts] for ts in want.trees]
    assert got.load == want.load


#: exact merge prices a wide-slide bound test computes per example (the pairs drawn by its seed)
MAX_PRICED = 200


@settings(max_examples=examples(12))
@given(**WIDE, nodes=st.integers(1, 4))
def test_tight_merge_bound_is_between_the_cheap_bound_and_the_price(
    seed, n, smax, tech, slicing, mixed, nodes
):
    """``MergeBound.tight_cost`` is at least ``cost`` and never exceeds the exact price of the
    merge, for same-key pairs of the trees (one or many windows) the optimizers build: at most
    ``MAX_PRICED`` of them, drawn by the example's seed (~30 queries of slides up to 300 with
    an invertible aggregate make ~2,000 pairs at ~10 ms a price: draws like that made this
    test take 29-43 s of `make test`, against ~0.5 s for most)."""
    case = wide_case(seed, n, smax, tech, slicing, mixed)
    model, bound, pairs = bound_pairs(case, nodes, seed, same_key=True)
    if len(pairs) > MAX_PRICED:
        pairs = random.Random(seed).sample(pairs, MAX_PRICED)
    for x, y in pairs:
        price = model.merged_price(x, y)[2]
        assert bound.cost(x, y) <= bound.tight_cost(x, y) <= price, (x.uid, y.uid)


def _positions(classes, period):
    return {t for t in range(period) for m, r in classes if t % m == r}


residue_classes = st.lists(
    st.integers(1, 12).flatmap(lambda m: st.tuples(st.just(m), st.integers(0, m - 1))),
    min_size=1,
    max_size=6,
)


@settings(max_examples=examples(200))
@given(x=residue_classes, y=residue_classes)
def test_shared_density_bound_is_above_the_shared_density(x, y):
    """The shared-edges bound is at least the density of positions in both unions (counted
    over one common period), and at most the smaller union's density of y's classes."""
    period = math.lcm(*(m for m, _ in x + y))
    shared = len(_positions(x, period) & _positions(y, period)) / period
    got = dist.shared_density_bound(dist.residues_by_modulus(x), y)
    assert got >= shared * (1 - 1e-12)
    assert got <= sum(1 / m for m, _ in y) * (1 + 1e-12)


@settings(max_examples=examples(200))
@given(
    m=st.integers(1, 30),
    data=st.data(),
    big=st.integers(1, 30).flatmap(lambda m: st.tuples(st.just(m), st.integers(0, m - 1))),
)
def test_shared_density_bound_is_exact_for_disjoint_classes(m, data, big):
    """Classes of one modulus are disjoint, so against one class the union bound is exact:
    the bound must equal the shared density (this catches a wrong meeting rule or density)."""
    rs = data.draw(st.lists(st.integers(0, m - 1), min_size=1, max_size=m, unique=True))
    x = [(m, r) for r in rs]
    period = math.lcm(m, big[0])
    shared = len(_positions(x, period) & _positions([big], period)) / period
    assert dist.shared_density_bound(dist.residues_by_modulus(x), [big]) == pytest.approx(
        shared, rel=1e-12, abs=1e-15
    )


def test_shared_density_bound_by_hand():
    """(4, 1) and (6, 3) meet (3 - 1 is even) in (12, 9): density 1/12; (4, 0) and (6, 3) never
    meet; against (6, 3) a union of (2, 1) and (3, 0) counts its positions 3 (mod 6) twice, the
    cap at 1/6 keeps it."""
    by = dist.residues_by_modulus
    assert dist.shared_density_bound(by([(4, 1)]), [(6, 3)]) == pytest.approx(1 / 12)
    assert dist.shared_density_bound(by([(4, 0)]), [(6, 3)]) == 0.0
    assert dist.shared_density_bound(by([(2, 1), (3, 0)]), [(6, 3)]) == pytest.approx(1 / 6)
    assert dist.shared_density_bound(by([(2, 1), (3, 0)]), [(6, 1)]) == pytest.approx(1 / 6)
    assert dist.shared_density_bound(by([(2, 1), (3, 0)]), [(6, 2)]) == 0.0


@pytest.mark.parametrize("category", ["W", "WG"])
def test_inserted_ties_go_to_the_first_tree_of_a_node(category):
    """Two trees with the same windows on one node price a unit's weave the same: the first
    tree in the node's order takes it (W: the node's first tree is its only option). Panes,
    lambda 1: x + u (r6, s2) is E 1/2, Omega 5, cost 3.5: node 0 at 5.5, an increase of 1.5
    below u's own 2.5."""
    model = model1()
    st_ = dist.NodeState([None, None])
    first, second = model.tree([Query("x", 4, 2)]), model.tree([Query("y", 4, 2)])
    st_.add(0, first)
    st_.add(0, second)
    st_.add(1, model.tree([Query("z", 50, 1)]))  # E 1, Omega 50: cost 51, never the best
    dist.inserted([model.tree([Query("u", 6, 2)])], model, st_, category, 0, init="none")
    assert [[sorted(q.id for q in t.queries) for t in ts] for ts in st_.trees] == [
        [["u", "x"], ["y"]],
        [["z"]],
    ]
