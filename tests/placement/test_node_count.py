"""The node count a query set needs (``placement.node_count``) against a brute force over every
partition into trees and every assignment of the trees to nodes."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
from helpers import examples, random_queries, set_partitions
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.node_count import node_count, total_lower_bound
from placement.plan import verify_plan
from placement.queries import Query
from placement.trees import CostModel

MODEL = CostModel("panes", {"s0": 1.0, "s1": 2.0})


def brute_count(queries, model, limit, max_nodes):
    """The fewest nodes (<= max_nodes) of some plan with every node's cost <= limit, or None:
    every set partition into one-key trees, every tree-to-node map."""
    best = None
    for blocks in set_partitions(list(queries)):
        if any(len({q.share_key for q in b}) > 1 for b in blocks):
            continue
        costs = [model.tree(b).cost for b in blocks]
        if max(costs) > limit * (1 + 1e-9):
            continue
        for k in range(1, min(len(blocks), max_nodes) + 1):
            if best is not None and k >= best:
                break
            for where in itertools.product(range(k), repeat=len(blocks)):
                loads = [0.0] * k
                for c, j in zip(costs, where):
                    loads[j] += c
                if max(loads) <= limit * (1 + 1e-9):
                    best = k
                    break
    return best


def check_witness(res, queries, limit):
    assert res.plan is not None
    assert len(res.plan.nodes) == res.nodes
    assert Counter(q.id for q in res.plan.queries) == Counter(q.id for q in queries)
    assert res.plan.max_cost <= limit * (1 + 1e-9)
    verify_plan(res.plan.to_dict())


@settings(max_examples=examples(60), deadline=None)
@given(st.data())
def test_exact_count_is_the_brute_force_minimum(data):
    n = data.draw(st.integers(1, 5))
    qs = random_queries(data.draw, n, keys=2, streams=2)
    single = [MODEL.tree([q]).cost for q in qs]
    limit = data.draw(st.floats(0.5, 2.5)) * max(single)
    max_nodes = data.draw(st.integers(1, 5))
    min_nodes = data.draw(st.integers(1, max_nodes))
    res = node_count(qs, MODEL, limit, min_nodes=min_nodes, max_nodes=max_nodes)
    want = brute_count(qs, MODEL, limit, max_nodes)
    assert res.exact
    if want is None:
        assert not res.fits and res.nodes == max_nodes
    else:
        assert res.fits and res.nodes == max(want, min_nodes)
        check_witness(res, qs, limit)


@settings(max_examples=examples(25), deadline=None)
@given(st.data())
def test_heuristic_count_never_below_the_minimum_and_its_plan_fits(data):
    n = data.draw(st.integers(2, 5))
    qs = random_queries(data.draw, n, keys=2, streams=2)
    single = [MODEL.tree([q]).cost for q in qs]
    limit = data.draw(st.floats(1.0, 2.5)) * max(single)
    res = node_count(qs, MODEL, limit, max_nodes=5, exact_max_queries=0)
    want = brute_count(qs, MODEL, limit, 5)
    assert not res.exact
    assert want is not None  # every query fits alone (limit >= its own tree), n <= 5 nodes
    assert res.fits and res.nodes >= want
    check_witness(res, qs, limit)
    assert res.nodes >= total_lower_bound(qs, MODEL) / limit - 1e-9


def test_count_grows_with_the_load_and_a_tree_too_big_for_a_node_never_fits():
    qs = [Query(f"q{i}", 6 * (i + 1), 3 * (i + 1), "max", "s0") for i in range(6)]
    one = MODEL.tree(qs[:1]).cost
    counts = [node_count(qs[:k], MODEL, 1.01 * one).nodes for k in range(1, 7)]
    assert counts == sorted(counts) and counts[0] == 1
    res = node_count(qs, MODEL, 0.5 * one, max_nodes=4)
    assert (res.fits, res.nodes, res.plan) == (False, 4, None)
    with pytest.raises(ValueError, match="min_nodes"):
        node_count(qs, MODEL, 1.0, min_nodes=3, max_nodes=2)
    empty = node_count([], MODEL, 1.0, min_nodes=2)
    assert (empty.nodes, empty.fits) == (2, True)
