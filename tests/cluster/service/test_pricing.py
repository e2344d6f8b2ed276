"""``cluster.service.pricing.PlanPricing``: the running plan priced from its queries, with its
caches (trees per query set, Query objects per id, WeaveShare per key), equal to pricing it
afresh after the queries changed; no Ray."""

from __future__ import annotations

import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.service.pricing import PlanPricing
from cluster.service.state import ServiceState, query_mapping
from cluster.service.tree_changes import weave_in
from placement.optimizers import optimize
from placement.queries import Query
from placement.replace import add_queries
from placement.trees import CostModel
from placement.weaveshare import plan_cost, weaveshare
from sim.workload import WorkloadSpec, generate_arrays


def _queries(n, seed, prefix):
    r, s = generate_arrays(WorkloadSpec(n, 12, 2.0, 0.0, 4, "nrm", seed))
    aggs = ("sum", "max")
    return [
        Query(f"{prefix}{i}", int(a), int(b), aggs[i % 2], "s0")
        for i, (a, b) in enumerate(zip(r.tolist(), s.tolist()))
    ]


def _total(qs, model):
    """WeaveShare's TotalCost of ``qs`` in their order, to the last bits of a sum over keys
    in another order (an other order of weaving differs by whole merges: ~1 %)."""
    return pytest.approx(plan_cost(weaveshare(qs, model)), rel=1e-12, abs=0)


def _window_order(qs):
    """The queries in the order the drift reference weaves them: by window, then id."""
    return sorted(qs, key=lambda q: (q.kind, q.range, q.slide, q.id))


@settings(max_examples=examples(20), deadline=None)
@given(seed=st.integers(0, 500), nodes=st.integers(1, 3), added=st.integers(1, 6))
def test_cached_pricing_equals_fresh_pricing_after_queries_join_trees(seed, nodes, added):
    model = CostModel("panes", {"s0": 2.0})
    qs = _queries(12, seed, "q")
    plan = optimize("WG_I", qs, model, nodes, seed=seed)
    state = ServiceState.from_plan(plan.to_dict())
    ids = [n.id for n in plan.nodes]
    cached = PlanPricing(model, "WG_I", 2.0)
    assert cached.costs(state, ids) == pytest.approx((plan.total_cost, plan.max_cost))
    assert cached.weaveshare_total(state) == _total(_window_order(qs), model)
    # new queries join the first tree of their key (or the first tree), as add-queries does
    new = _queries(added, seed + 1, "n")
    for q in new:
        state.queries[q.id] = query_mapping(q.to_dict())
        tid = next(
            (
                t
                for t, rt in state.trees.items()
                if state.queries[rt.active[0]]["aggregate"] == q.aggregate
            ),
            next(iter(state.trees)),
        )
        state.trees[tid].active.append(q.id)
    fresh = PlanPricing(model, "WG_I", 2.0)
    assert cached.costs(state, ids) == fresh.costs(state, ids)
    assert cached.plan_dict(state, ids, None) == fresh.plan_dict(state, ids, None)
    assert cached.weaveshare_total(state) == fresh.weaveshare_total(state)
    assert fresh.weaveshare_total(state) == _total(_window_order(qs + new), model)


@settings(max_examples=examples(20), deadline=None)
@given(seed=st.integers(0, 500), nodes=st.integers(1, 3), added=st.integers(1, 6))
def test_trees_the_placement_priced_are_the_fresh_prices(seed, nodes, added):
    """``seed``: the trees ``add_queries``' placement priced stand for the running trees with
    the same queries (in the running order), so the plan costs what a fresh pricing says and
    lists each tree's queries as the running tree does."""
    model = CostModel("panes", {"s0": 2.0})
    plan = optimize("WG_I", _queries(12, seed, "q"), model, nodes, seed=seed)
    state = ServiceState.from_plan(plan.to_dict())
    ids = [n.id for n in plan.nodes]
    seeded = PlanPricing(model, "WG_I", 2.0)
    running, _ = seeded.placement_plan(state, ids)
    new = _queries(added, seed + 1, "n")
    for q in new:
        state.queries[q.id] = query_mapping(q.to_dict())
    placed = add_queries(running, new, model)
    additions = weave_in(placed.plan, {q.id for q in new}, state.trees, state.next_tree)
    state.trees = additions.applied_to(state.trees)
    seeded.seed(placed.plan, state.trees)
    grown = {g.tree_id for g in additions.grown} | {n.tree_id for n in additions.new_trees}
    assert grown and all(tuple(state.trees[t].active) in seeded._trees for t in grown)
    fresh = PlanPricing(model, "WG_I", 2.0)
    assert seeded.costs(state, ids) == pytest.approx(fresh.costs(state, ids), rel=1e-12)
    got, want = seeded.plan_dict(state, ids, None), fresh.plan_dict(state, ids, None)
    for gn, wn in zip(got["nodes"], want["nodes"], strict=True):
        for gt, wt in zip(gn["trees"], wn["trees"], strict=True):
            assert gt["queries"] == wt["queries"] and gt["edges"] == wt["edges"]
            assert gt["cost"] == pytest.approx(wt["cost"], rel=1e-12)
    # the commit forgets the trees (and queries) no longer running: the grown trees' old
    # query sets go, the prices stay those of a fresh pricing
    gone = new[0].id
    state.queries.pop(gone)
    for t in state.trees.values():
        if gone in t.active:
            t.active.remove(gone)
    seeded.costs(state, ids)
    seeded.retain(state)
    assert set(seeded._trees) == {tuple(t.active) for t in state.trees.values() if t.active}
    assert set(seeded._queries) <= set(state.queries) and gone not in seeded._queries
    assert seeded.costs(state, ids) == pytest.approx(fresh.costs(state, ids), rel=1e-12)


@settings(max_examples=examples(30), deadline=None)
@given(seed=st.integers(0, 500), copies=st.integers(1, 3))
def test_the_drift_reference_reads_windows_not_ids_nor_copies(seed, copies):
    """Offline WeaveShare's TotalCost of the running queries (``weaveshare_total``) is that of
    every query, duplicates of a window included, woven in window order; renamed queries and
    more queries of windows already running change nothing and price nothing."""
    model = CostModel("panes", {"s0": 2.0})
    qs = _queries(10, seed, "q")
    dup = [
        Query(f"d{c}_{q.id}", q.range, q.slide, q.aggregate, q.stream)
        for c in range(copies)
        for q in qs[::2]
    ]
    pricing = PlanPricing(model, "WG_I", 2.0)

    def state_of(queries):
        return ServiceState({q.id: query_mapping(q.to_dict()) for q in queries}, {}, {}, 0)

    base = pricing.weaveshare_total(state_of(qs))
    assert base == _total(_window_order(qs), model)
    assert base == _total(_window_order(qs + dup), model)  # copies: no cost
    cached = dict(pricing._weaveshare)
    assert pricing.weaveshare_total(state_of(qs + dup)) == base
    assert pricing._weaveshare == cached  # the same keys: nothing priced again
    renamed = [Query("z" + q.id, q.range, q.slide, q.aggregate, q.stream) for q in qs]
    assert PlanPricing(model, "WG_I", 2.0).weaveshare_total(state_of(renamed)) == base


@settings(max_examples=examples(10), deadline=None)
@given(seed=st.integers(0, 500), removed=st.integers(0, 4))
def test_the_work_done_while_the_actors_change_prices_the_state_after_the_command(seed, removed):
    """``Service.while_changing`` on ``apply_changes``' thread (``Meanwhile``): offline
    WeaveShare's TotalCost of the queries running after the command, which ``drift`` takes as
    its reference as it is, and the plan file of the trees after it, encoded, which the commit
    writes only while those trees and nodes still run (``PreparedPlan.fits``)."""
    import json
    from dataclasses import replace
    from types import SimpleNamespace

    from cluster.deployment.churn import Meanwhile
    from cluster.service.service import Service

    model = CostModel("panes", {"s0": 2.0})
    qs = _queries(12, seed, "q")
    plan = optimize("WG_I", qs, model, 2, seed=seed)
    state = ServiceState.from_plan(plan.to_dict())
    ids = [n.id for n in plan.nodes]
    pricing = PlanPricing(model, "WG_I", 2.0)
    gone = {q.id for q in qs[:removed]}
    left = {k: v for k, v in state.queries.items() if k not in gone}
    trees = {
        k: replace(t, active=[q for q in t.active if q not in gone]) for k, t in state.trees.items()
    }
    after = replace(state, queries=left, trees=trees)
    svc = SimpleNamespace(
        dep=SimpleNamespace(nodes=dict.fromkeys(ids)), pricing=pricing, choice=None
    )
    ref, prepared = Meanwhile(Service.while_changing(svc, after, True)).join()  # type: ignore[arg-type, misc]
    assert ref == _total(_window_order(qs[removed:]), model)
    fresh = PlanPricing(model, "WG_I", 2.0)
    assert prepared.plan == fresh.plan_dict(after, ids, None)
    assert json.loads(prepared.data) == json.loads(json.dumps(prepared.plan))
    assert prepared.fits(after.trees, ids)
    assert not prepared.fits(dict(after.trees), ids)  # other trees installed meanwhile
    assert not prepared.fits(after.trees, ids[:1])  # a node lost meanwhile
    d = pricing.drift(after, ids, 1.5, 0.25, ref)
    assert d["weaveshare_total"] == ref and d["reference_total"] == ref * 1.5
    assert d == fresh.drift(after, ids, 1.5, 0.25)
    assert pricing.drift(after, ids, 1.0, 0.25, 123.0)["weaveshare_total"] == 123.0  # not again
    assert Service.while_changing(svc, after, False)() == (ref, None)  # type: ignore[arg-type]


def test_a_warm_up_that_fails_gives_no_reference():
    from cluster.deployment.churn import Meanwhile
    from cluster.service.events import Change

    def fails():
        raise RuntimeError("boom")

    assert Meanwhile(fails).join() is None
    change = Change("add-queries", (1.0, 1.0))
    change.warmed(Meanwhile(fails).join())
    assert change.reference is None and change.plan is None
    change.warmed(Meanwhile(lambda: (2.5, None)).join())
    assert change.reference == 2.5 and change.plan is None
