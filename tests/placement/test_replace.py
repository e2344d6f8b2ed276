"""Dynamic re-placement: valid plans, few moves, and the cost effects each rule promises."""

from __future__ import annotations

import math

import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.optimizers import optimize
from placement.plan import verify_plan
from placement.replace import add_node, add_queries, remove_node, remove_queries
from placement.trees import CostModel
from sim.workload import WorkloadSpec, generate


def _plan(qnum=40, nodes=3, seed=0, rate=5.0):
    qs = generate(WorkloadSpec(qnum, 24, rate, 1.0, 6, "nrm", seed))
    model = CostModel("panes", {"s0": rate})
    return optimize("WG_I", qs, model, nodes, seed=seed), model, qs


def _node_of(plan):
    return {q.id: n.id for n in plan.nodes for t in n.trees for q in t.queries}


def _valid(plan, query_ids):
    assert verify_plan(plan.to_dict()) == []
    assert sorted(q.id for q in plan.queries) == sorted(query_ids)


@settings(max_examples=examples(25))
@given(seed=st.integers(0, 1000), nodes=st.integers(2, 5))
def test_remove_node_moves_only_its_trees(seed, nodes):
    plan, model, qs = _plan(nodes=nodes, seed=seed)
    victim = plan.nodes[seed % nodes]
    before = _node_of(plan)
    r = remove_node(plan, victim.id, model)
    _valid(r.plan, [q.id for q in qs])
    assert victim.id not in [n.id for n in r.plan.nodes]
    assert r.moved == len(victim.trees)
    after = _node_of(r.plan)
    for qid, node in before.items():  # queries of surviving nodes stay where they were
        if node != victim.id:
            assert after[qid] == node
    # Weaving a moved tree is only chosen when it costs no more than keeping it separate.
    assert r.plan.total_cost <= plan.total_cost + 1e-9


@settings(max_examples=examples(25))
@given(seed=st.integers(0, 1000), nodes=st.integers(1, 4))
def test_add_node_lowers_max_cost_and_keeps_total(seed, nodes):
    plan, model, qs = _plan(nodes=nodes, seed=seed)
    r = add_node(plan, "fresh")
    _valid(r.plan, [q.id for q in qs])
    assert math.isclose(r.plan.total_cost, plan.total_cost, rel_tol=1e-12)  # trees move whole
    assert r.plan.max_cost <= plan.max_cost + 1e-12
    moved_trees = len(r.plan.nodes[-1].trees)
    assert r.moved == moved_trees
    if r.moved:
        assert r.plan.max_cost < plan.max_cost


def test_add_node_moves_nothing_when_it_cannot_help():
    plan, model, qs = _plan(qnum=1, nodes=1)
    r = add_node(plan, "fresh")
    assert r.moved == 0 and r.plan.nodes[-1].trees == []


def test_add_and_remove_queries_move_no_tree():
    plan, model, qs = _plan(qnum=30, nodes=3)
    extra = [
        q.__class__(f"new{i}", q.range, q.slide, q.aggregate, q.stream)
        for i, q in enumerate(generate(WorkloadSpec(10, 24, 5.0, 1.0, 6, "nrm", 9)))
    ]
    before = _node_of(plan)
    r = add_queries(plan, extra, model)
    _valid(r.plan, [q.id for q in qs + extra])
    after = _node_of(r.plan)
    assert all(after[qid] == node for qid, node in before.items())
    assert r.moved == 0
    gone = [q.id for q in qs[:7]]
    r2 = remove_queries(r.plan, gone, model)
    _valid(r2.plan, [q.id for q in qs[7:] + extra])
    assert r2.plan.total_cost <= r.plan.total_cost + 1e-9


def test_errors_name_the_problem():
    import pytest

    plan, model, qs = _plan(nodes=2)
    with pytest.raises(KeyError, match="unknown node"):
        remove_node(plan, "nope", model)
    with pytest.raises(ValueError, match="already exists"):
        add_node(plan, plan.nodes[0].id)
    with pytest.raises(KeyError, match="unknown query"):
        remove_queries(plan, ["nope"], model)
    with pytest.raises(ValueError, match="already in the plan"):
        add_queries(plan, qs[:1], model)


def test_add_node_breaks_ties_at_the_peak():
    """Two nodes with three equal trees each: no single move lowers the MaxCost (the other
    node stays at the peak), two moves do (3-3-0 -> 2-2-2).  Ties on one tree per node: no
    sequence helps, nothing moves."""
    from placement.plan import Node, Plan
    from placement.queries import Query

    rates = {f"s{i}": 5.0 for i in range(6)}
    model = CostModel("panes", rates)
    trees = [model.tree([Query(f"q{i}", 12, 4, "sum", f"s{i}")]) for i in range(6)]
    assert len({t.cost for t in trees}) == 1
    plan = Plan("x", "panes", [Node("a", trees[:3]), Node("b", trees[3:])], rates)
    r = add_node(plan, "c")
    _valid(r.plan, [f"q{i}" for i in range(6)])
    assert r.moved == 2 and [len(n.trees) for n in r.plan.nodes] == [2, 2, 2]
    assert r.plan.max_cost == pytest.approx(plan.max_cost * 2 / 3)
    one = Plan("x", "panes", [Node("a", trees[:1]), Node("b", trees[1:2])], rates)
    r1 = add_node(one, "c")
    assert r1.moved == 0 and [len(n.trees) for n in r1.plan.nodes] == [1, 1, 0]
    two = Plan("x", "panes", [Node("a", trees[:2]), Node("b", trees[2:4])], rates)
    r2 = add_node(two, "c")  # 2-2-0 -> 1-2-1 keeps the peak: undone
    assert r2.moved == 0 and r2.plan.max_cost == two.max_cost


def _add_one_unit_at_a_time(plan, queries, model):
    """``add_queries`` as it was: each unit inserted by a call of its own (a fresh merge bound
    per unit), the oracle of the one-call insertion."""
    from placement.distributed import inserted, make_units
    from placement.replace import _plan as plan_of
    from placement.replace import _state

    st_ = _state(plan)
    for u in make_units(list(queries), model, preprocess=True):
        inserted([u], model, st_, "WG", seed=0, init="none")
    return plan_of(plan, st_, [n.id for n in plan.nodes])


@settings(max_examples=examples(25))
@given(
    seed=st.integers(0, 1000),
    nodes=st.integers(1, 4),
    added=st.integers(1, 25),
    technique=st.sampled_from(["panes", "slickdeque", "flatfat"]),
)
def test_adding_queries_in_one_call_places_them_as_one_at_a_time(seed, nodes, added, technique):
    qs = generate(WorkloadSpec(30, 24, 5.0, 1.0, 6, "nrm", seed))
    model = CostModel(technique, {"s0": 5.0})
    plan = optimize("WG_I", qs, model, nodes, seed=seed)
    extra = [
        q.__class__(f"new{i}", q.range, q.slide, q.aggregate, q.stream)
        for i, q in enumerate(generate(WorkloadSpec(added, 24, 5.0, 1.0, 6, "nrm", seed + 1)))
    ]
    got = add_queries(plan, extra, model).plan
    want = _add_one_unit_at_a_time(plan, extra, model)

    def layout(p):
        return [sorted(sorted(q.id for q in t.queries) for t in n.trees) for n in p.nodes]

    assert layout(got) == layout(want)
    assert (got.total_cost, got.max_cost) == (want.total_cost, want.max_cost)


@settings(max_examples=examples(25))
@given(seed=st.integers(0, 1000), technique=st.sampled_from(["panes", "flatfit", "slickdeque"]))
def test_a_merged_trees_seeded_items_are_those_of_its_windows(seed, technique):
    """``MergeBound.merged``: the union of the parts' items is what the merged tree's windows
    give."""
    from placement.distributed import MergeBound
    from placement.weaveshare import initial_trees

    model = CostModel(technique, {"s0": 5.0})
    units = initial_trees(generate(WorkloadSpec(8, 24, 5.0, 1.0, 6, "nrm", seed)), model)
    same = [u for u in units if u.key == units[0].key]
    bound = MergeBound(model)
    x = same[0]
    for y in same[1:]:
        bound.cost(x, y)  # reads both parts' items
        x = bound.merged(x, y, model.merge(x, y))
    seeded = bound._items.get(x.uid)
    fresh = MergeBound(model)
    fresh.cost(x, x)
    assert seeded == fresh._items.get(x.uid)
