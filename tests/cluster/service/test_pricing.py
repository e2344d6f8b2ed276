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
from placement.optimizers import optimize
from placement.queries import Query
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
    by_id = sorted(qs, key=lambda q: q.id)
    assert cached.weaveshare_total(state) == pytest.approx(plan_cost(weaveshare(by_id, model)))
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
    assert fresh.weaveshare_total(state) == pytest.approx(
        plan_cost(weaveshare(sorted(qs + new, key=lambda q: q.id), model))
    )
