"""Exact optimum (exhaustive and CP-SAT) and paper 000's special cases, against brute force."""

from __future__ import annotations

import itertools
import math

import pytest
from helpers import examples, random_queries, set_partitions
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.exact.optimum import (
    InfeasibleError,
    exact_cpsat,
    exact_exhaustive,
    exhaustive_leaves,
    solve_exact,
    subset_table,
)
from placement.optimizers import DISTRIBUTED as ALL_OPTIMIZERS
from placement.optimizers import optimize
from placement.plan import verify_plan
from placement.queries import Query
from placement.special import contiguous_optimum, pairing_optimum
from placement.trees import CostModel

HAND = [Query("a", 4, 2), Query("b", 8, 4), Query("c", 3, 3), Query("d", 6, 3)]
TOL = 1e-9


def partition_cost(model, blocks):
    if any(len({(q.stream, q.aggregate) for q in b}) > 1 for b in blocks):
        return math.inf
    return sum(model.tree(b).cost for b in blocks)


def brute_front(queries, model, n_nodes):
    """Pareto front by enumerating set partitions x tree-to-node assignments (tiny sizes)."""
    pts = set()
    for blocks in set_partitions(list(queries)):
        costs = []
        for b in blocks:
            if len({(q.stream, q.aggregate) for q in b}) > 1:
                break
            costs.append(model.tree(b).cost)
        else:
            for assign in itertools.product(range(n_nodes), repeat=len(costs)):
                loads = [0.0] * n_nodes
                for c, j in zip(costs, assign):
                    loads[j] += c
                pts.add((sum(loads), max(loads)))
    front = []
    for t, m in sorted(pts):
        if front and abs(t - front[-1][0]) <= 1e-9 * max(1, t):
            front[-1] = (front[-1][0], min(m, front[-1][1]))
        elif not front or m < front[-1][1] - 1e-9 * max(1, m):
            front.append((t, m))
    return front


def points(res):
    return [(p.total_cost, p.max_cost) for p in res.front]


def close_fronts(a, b):
    return len(a) == len(b) and all(
        math.isclose(x[0], y[0], rel_tol=1e-7) and math.isclose(x[1], y[1], rel_tol=1e-7)
        for x, y in zip(a, b)
    )


# ---- exact ----------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["exhaustive", "cpsat"])
def test_exact_hand_instance(method):
    # {ab}=3 | {cd}=2 is optimal for both objectives (see test_distributed's hand instance).
    res = solve_exact(HAND, CostModel("panes", 1.0), 2, method=method)
    assert points(res) == [pytest.approx((5, 3))]
    assert res.min_total is res.min_max or points(res)[0] == points(res)[-1]
    assert verify_plan(res.min_total.to_dict()) == []
    assert sorted(
        sorted("".join(sorted(q.id for q in t.queries)) for t in n.trees)
        for n in res.min_total.nodes
    ) == [["ab"], ["cd"]]


@settings(max_examples=examples(25))
@given(
    data=st.data(),
    n=st.integers(1, 6),
    technique=st.sampled_from(["panes", "flatfit", "slickdeque", "flatfat"]),
    lam=st.sampled_from([0.2, 1.0, 5.0]),
    keys=st.integers(1, 2),
)
def test_subset_dp_is_the_best_partition(data, n, technique, lam, keys):
    qs = random_queries(data.draw, n, keys, max_slide=8)
    model = CostModel(technique, lam)
    tab = subset_table(qs, model)
    full = (1 << n) - 1
    want = min(partition_cost(model, p) for p in set_partitions(qs))
    assert math.isclose(tab.best[full], want, rel_tol=1e-9)
    got = sum(model.tree(tab.queries_of(m)).cost for m in tab.partition(full))
    assert math.isclose(got, want, rel_tol=1e-9)


@settings(max_examples=examples(30))
@given(
    data=st.data(),
    n=st.integers(1, 5),
    n_nodes=st.integers(1, 3),
    lam=st.sampled_from([0.3, 2.0, 20.0]),
    keys=st.integers(1, 2),
)
def test_exhaustive_front_matches_brute_force(data, n, n_nodes, lam, keys):
    qs = random_queries(data.draw, n, keys, max_slide=8)
    model = CostModel("panes", lam)
    res = exact_exhaustive(qs, model, n_nodes)
    assert close_fronts(points(res), brute_front(qs, model, n_nodes))
    for p in res.front:
        assert verify_plan(p.to_dict()) == []


@pytest.mark.parametrize("seed", range(4))
def test_cpsat_matches_exhaustive(seed):
    import random

    rng = random.Random(seed)
    qs = []
    for i in range(6):
        s = rng.randint(1, 9)
        qs.append(Query(f"q{i}", rng.randint(1, 3 * s), s))
    model = CostModel("panes", rng.choice([0.5, 3.0]))
    n_nodes = 2 + seed % 2
    ex = exact_exhaustive(qs, model, n_nodes)
    cp = exact_cpsat(qs, model, n_nodes)
    assert cp.optimal
    assert close_fronts(points(ex), points(cp))


def test_capacities():
    model = CostModel("panes", 1.0)
    # Node 1 can hold at most 2.5: {cd} (2) or {b} fits, {ab} (3) does not.
    for method in ("exhaustive", "cpsat"):
        res = solve_exact(HAND, model, [10.0, 2.5], method=method)
        for p in res.front:
            assert p.nodes[1].cost <= 2.5 + 1e-9
        assert res.min_total.total_cost == pytest.approx(5)
        with pytest.raises(InfeasibleError):
            solve_exact(HAND, model, [1.0, 1.0], method=method)


def test_leaf_counts():
    assert exhaustive_leaves(12, [None] * 4) == 1 + 2047 + 86526 + 611501
    assert exhaustive_leaves(5, [1.0, 2.0]) == 32


@settings(max_examples=examples(30))
@given(
    data=st.data(),
    n=st.integers(2, 8),
    n_nodes=st.integers(1, 4),
    lam=st.sampled_from([0.5, 5.0, 50.0]),
    seed=st.integers(0, 99),
)
def test_exact_bounds_every_heuristic(data, n, n_nodes, lam, seed):
    """No heuristic beats the exact optima, and none dominates a point of the exact front."""
    qs = random_queries(data.draw, n, keys=2, max_slide=8)
    model = CostModel("panes", lam)
    res = solve_exact(qs, model, n_nodes)
    front = points(res)
    for name in ALL_OPTIMIZERS:
        p = optimize(name, qs, model, n_nodes, seed=seed)
        t, m = p.total_cost, p.max_cost
        assert res.min_total.total_cost <= t * (1 + TOL), name
        assert res.min_max.max_cost <= m * (1 + TOL), name
        assert any(ft <= t * (1 + TOL) and fm <= m * (1 + TOL) for ft, fm in front), name


# ---- special cases (paper 000, Appendix) ----------------------------------------------------


@settings(max_examples=examples(30))
@given(
    data=st.data(),
    n=st.integers(1, 7),
    lam=st.sampled_from([0.2, 1.0, 4.0]),
    technique=st.sampled_from(["panes", "slickdeque", "flatfat"]),
    keys=st.integers(1, 2),
)
def test_pairing_matches_exhaustive(data, n, lam, technique, keys):
    qs = random_queries(data.draw, n, keys, max_slide=8)
    model = CostModel(technique, lam)
    trees = pairing_optimum(qs, model)
    assert sorted(q.id for t in trees for q in t.queries) == sorted(q.id for q in qs)
    assert all(len(t.queries) <= 2 for t in trees)
    want = min(partition_cost(model, p) for p in set_partitions(qs) if all(len(b) <= 2 for b in p))
    assert math.isclose(sum(t.cost for t in trees), want, rel_tol=1e-9)


@settings(max_examples=examples(30))
@given(
    data=st.data(),
    n=st.integers(1, 8),
    lam=st.sampled_from([0.2, 1.0, 4.0]),
    keys=st.integers(1, 2),
)
def test_contiguous_matches_exhaustive(data, n, lam, keys):
    qs = random_queries(data.draw, n, keys, max_slide=8)
    model = CostModel("panes", lam)
    plan = contiguous_optimum(qs, model)

    def best_runs(seq):
        best = math.inf
        for cuts in itertools.product([False, True], repeat=max(0, len(seq) - 1)):
            blocks, cur = [], [seq[0]]
            for q, cut in zip(seq[1:], cuts):
                if cut:
                    blocks.append(cur)
                    cur = [q]
                else:
                    cur.append(q)
            blocks.append(cur)
            best = min(best, partition_cost(model, blocks))
        return best

    assert math.isclose(plan.cost[0], best_runs(qs), rel_tol=1e-9)
    assert math.isclose(sum(t.cost for t in plan.trees(model)), plan.cost[0], rel_tol=1e-9)
    # Expiration: the stored suffix optimum equals re-solving without the expired queries.
    for k in range(1, n):
        assert math.isclose(plan.cost[k], best_runs(qs[k:]), rel_tol=1e-9)
        assert [[q.id for q in g] for g in plan.groups(k)] == [
            [q.id for q in g] for g in contiguous_optimum(qs[k:], model).groups()
        ]


def test_pairing_hand_instance():
    # Benefits (lambda 1): cd 1, ab 0.5, bc 1/3, ac 1/3, bd 1/6, ad 0: matching {cd, ab} = 1.5.
    trees = pairing_optimum(HAND, CostModel("panes", 1.0))
    assert sorted("".join(sorted(q.id for q in t.queries)) for t in trees) == ["ab", "cd"]
    assert sum(t.cost for t in trees) == pytest.approx(2 + 1.5 + 4 / 3 + 5 / 3 - 1.5)


@pytest.mark.parametrize("seed", range(3))
def test_cpsat_matches_exhaustive_with_unequal_capacities(seed):
    import random

    rng = random.Random(100 + seed)
    qs = [Query(f"q{i}", rng.randint(1, 12), rng.randint(1, 6)) for i in range(6)]
    model = CostModel("panes", 1.0)
    single = sum(model.tree([q]).cost for q in qs)
    caps = [single * 0.6, single * 0.45, single * 0.3]
    try:
        ex = exact_exhaustive(qs, model, caps)
    except InfeasibleError:
        with pytest.raises(InfeasibleError):
            exact_cpsat(qs, model, caps)
        return
    cp = exact_cpsat(qs, model, caps)
    assert close_fronts(points(ex), points(cp))
    for p in ex.front:
        assert all(n.cost <= n.capacity * (1 + 1e-9) for n in p.nodes)


def test_exact_ten_queries_four_nodes_bounds_heuristics():
    from sim.workload import WorkloadSpec, generate

    qs = generate(WorkloadSpec(qnum=10, smax=25, rate=10, zskew=1, omax=10, seed=1))
    model = CostModel("panes", 10.0)
    res = solve_exact(qs, model, 4)
    assert res.method == "exhaustive" and len(res.front) >= 2
    for name in ALL_OPTIMIZERS:
        p = optimize(name, qs, model, 4)
        assert res.min_total.total_cost <= p.total_cost * (1 + TOL)
        assert res.min_max.max_cost <= p.max_cost * (1 + TOL)


def test_bench_exact_gap_rows_are_consistent():
    """The WG_LS-vs-exact benchmark: the front's best point is never beaten by WG_LS, a plan
    found 'as good as both references' exists, and the single-metric gaps are >= 0."""
    from sim.bench.exact_gap import run

    rows = run(4, seed=11)
    assert len(rows) == 4
    for r in rows:
        assert r["objective_gap_pct"] >= -1e-7
        assert r["gap_total_pct"] >= -1e-7 and r["gap_max_pct"] >= -1e-7
        assert not r["both_found"] or r["both_exists"]
        if r["objective_optimal"]:  # the first component (worst ratio) then ties too
            assert r["objective_gap_pct"] <= 1e-7
