"""Feasibility reports and load shedding (paper 003) checked against brute force."""

from __future__ import annotations

import itertools

import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.optimizers import optimize
from placement.plan import Node, Plan
from placement.queries import Query
from placement.shedding import InfeasibleEvenWhenShedding, overloads, shed_load
from placement.trees import CostModel


def _plan(caps, rates, seed):
    import random

    rng = random.Random(seed)
    qs = [
        Query(
            f"q{i}", rng.randint(4, 40), rng.choice([2, 3, 4, 6]), "sum", rng.choice(sorted(rates))
        )
        for i in range(rng.randint(3, 9))
    ]
    model = CostModel("panes", rates)
    return optimize("WG_TL", qs, model, caps, seed=seed)


def _capped(base, caps):
    """``base``'s trees on nodes of capacities ``caps``."""
    return Plan(
        base.optimizer,
        base.ie,
        [Node(n.id, n.trees, c) for n, c in zip(base.nodes, caps)],
        base.rates,
    )


def _node_cost_with(plan, node, keep):
    return sum(t.cost - plan.rates[t.stream] * (1 - keep[t.stream]) for t in node.trees)


@settings(max_examples=examples(60))
@given(seed=st.integers(0, 10_000), n_nodes=st.integers(1, 3), squeeze=st.floats(0.2, 1.2))
def test_shedding_is_feasible_and_optimal_on_a_grid(seed, n_nodes, squeeze):
    rates = {"a": 5.0, "b": 2.0, "c": 9.0}
    base = _plan([1e9] * n_nodes, rates, seed)
    caps = [max(n.cost, 1e-9) * squeeze for n in base.nodes]
    plan = _capped(base, caps)
    fixed_over = [
        n for n in plan.nodes if sum(t.cost - plan.rates[t.stream] for t in n.trees) > n.capacity
    ]
    if fixed_over:
        with pytest.raises(InfeasibleEvenWhenShedding, match="still needs"):
            shed_load(plan)
        return
    res = shed_load(plan)
    for n in plan.nodes:  # every node within capacity after shedding
        assert _node_cost_with(plan, n, res.keep) <= n.capacity * (1 + 1e-7) + 1e-9
    if not overloads(plan):
        assert all(x == 1.0 for x in res.keep.values())
    # No keep-vector on a 1/20 grid does better (the LP/knapsack optimum is at least as good).
    weight = {s: sum(q.stream == s for q in plan.queries) for s in rates}
    grid = [i / 20 for i in range(21)]
    for xs in itertools.product(grid, repeat=3):
        keep = dict(zip(sorted(rates), xs))
        if all(_node_cost_with(plan, n, keep) <= n.capacity for n in plan.nodes):
            assert sum(weight[s] * rates[s] * keep[s] for s in rates) <= res.kept_value + 1e-6


def test_overloads_report_excess():
    rates = {"a": 5.0}
    base = _plan([1e9, 1e9], rates, 3)
    plan = Plan(
        base.optimizer,
        base.ie,
        [Node(n.id, n.trees, n.cost / 2 if n.cost else 1.0) for n in base.nodes],
        base.rates,
    )
    over = overloads(plan)
    assert [o.node for o in over] == [n.id for n in base.nodes if n.cost > 0]
    for o, n in zip(over, [n for n in base.nodes if n.cost > 0]):
        assert o.excess == pytest.approx(n.cost / 2)


@settings(max_examples=examples(60))
@given(
    seed=st.integers(0, 10_000),
    n_nodes=st.integers(1, 3),
    grow=st.tuples(*[st.floats(0.5, 4.0)] * 3),
)
def test_measured_rates_shed_as_a_plan_priced_at_them(seed, n_nodes, grow):
    """``shed_load(plan, rates)`` (a live deployment's measured rates) equals shedding the
    same trees priced afresh by a cost model at those rates (the oracle: no re-pricing
    shortcut), and the plan at its own rates with ``rates=None``."""
    rates = {"a": 5.0, "b": 2.0, "c": 9.0}
    base = _plan([1e9] * n_nodes, rates, seed)
    caps = [max(n.cost, 1e-9) for n in base.nodes]  # fits at the planned rates, just
    plan = _capped(base, caps)
    measured = {s: r * g for (s, r), g in zip(sorted(base.rates.items()), grow)}
    model = CostModel("panes", measured)
    repriced = Plan(
        base.optimizer,
        base.ie,
        [
            Node(n.id, [model.tree(list(t.queries)) for t in n.trees], c)
            for n, c in zip(base.nodes, caps)
        ],
        measured,
    )
    try:
        want = shed_load(repriced)
    except InfeasibleEvenWhenShedding:
        with pytest.raises(InfeasibleEvenWhenShedding):
            shed_load(plan, measured)
        return
    got = shed_load(plan, measured)
    assert got.keep == pytest.approx(want.keep, abs=1e-9)
    assert got.kept_value == pytest.approx(want.kept_value, rel=1e-9)
    assert shed_load(plan, rates).keep == shed_load(plan).keep
    if all(g <= 1.0 for g in grow):  # slower input than planned: nothing to drop
        assert set(got.keep.values()) == {1.0}


@settings(max_examples=examples(40))
@given(seed=st.integers(0, 10_000), n_nodes=st.integers(1, 3), squeeze=st.floats(0.3, 1.0))
def test_whole_streams_are_never_shed(seed, n_nodes, squeeze):
    """A stream in ``whole`` keeps every tuple; the others shed so that every node fits with
    its cost counted whole, and no keep-vector on a 1/20 grid keeping it whole does better."""
    rates = {"a": 5.0, "b": 2.0, "c": 9.0}
    base = _plan([1e9] * n_nodes, rates, seed)
    caps = [max(n.cost, 1e-9) * squeeze for n in base.nodes]
    plan = _capped(base, caps)
    whole = {"a"}
    streams = sorted(plan.rates)

    def fits(keep):
        return all(_node_cost_with(plan, n, keep) <= n.capacity * (1 + 1e-7) for n in plan.nodes)

    try:
        res = shed_load(plan, whole=whole)
    except InfeasibleEvenWhenShedding:
        keep0 = {s: (1.0 if s in whole else 0.0) for s in streams}
        assert not fits(keep0)
        return
    assert all(res.keep[s] == 1.0 for s in whole & set(streams))
    assert fits(res.keep)
    weight = {s: sum(q.stream == s for q in plan.queries) for s in streams}
    free = [s for s in streams if s not in whole]
    for xs in itertools.product([i / 20 for i in range(21)], repeat=len(free)):
        keep = {**{s: 1.0 for s in streams}, **dict(zip(free, xs))}
        if fits(keep):
            assert sum(weight[s] * rates[s] * keep[s] for s in streams) <= res.kept_value + 1e-6
