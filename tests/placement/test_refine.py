"""Unit moves after a weave (placement.refine) against a reference that prices every move."""

from __future__ import annotations

import math
from math import gcd

import numpy as np
import pytest
from helpers import examples, random_queries
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.banded import banded_weave
from placement.distributed import make_units
from placement.optimizers import run_single_node
from placement.refine import COFACTOR, MIN_GAIN, _Plan, banded_refined, refine, units_of
from placement.trees import CostModel
from placement.weaveshare import EPS, initial_trees, plan_cost, weave, weaveshare


def groups(trees):
    """Each tree's query ids, in tree order (refine keeps the order: the plan is the same)."""
    return [sorted(q.id for q in t.queries) for t in trees]


def reference(trees, model, cofactor=COFACTOR, min_gain=MIN_GAIN):
    """The pass ``refine`` makes, pricing every move: each given tree in order, each of its
    units; the unit alone and in every other tree of its key that ever held a class of modulus
    ``m`` with ``m / gcd(m, slide) <= cofactor``; the best move if it saves more than EPS and
    ``min_gain`` times the given plan's edge work per unit (ties: alone, then the lower
    index)."""
    trees = list(trees)
    units = [units_of(t) for t in trees]
    ever = [{m for m, _ in t.classes} for t in trees]
    work = sum(t.cost - model.rate(t.stream) for t in trees) / sum(map(len, units))
    for i in range(len(trees)):
        for unit in list(units[i]):
            if len(units[i]) < 2:
                continue
            rest = [v for v in units[i] if v is not unit]
            rest_tree = model.tree([q for v in rest for q in v])
            gain_out = trees[i].cost - rest_tree.cost
            u = model.tree(unit, classes=model.query_classes(unit[0]))
            s = unit[0].slide
            best, best_j, best_tree = gain_out - u.cost, -1, u
            for j, t in enumerate(trees):
                if j == i or t.key != u.key or all(m // gcd(m, s) > cofactor for m in ever[j]):
                    continue
                merged = model.merge(t, u)
                g = gain_out - (merged.cost - t.cost)
                if g > best:
                    best, best_j, best_tree = g, j, merged
            if best <= max(EPS, min_gain * work):
                continue
            trees[i], units[i] = rest_tree, rest
            mods = {m for m, _ in u.classes}
            if best_j < 0:
                trees.append(u)
                units.append([unit])
                ever.append(mods)
            else:
                trees[best_j] = best_tree
                units[best_j].append(unit)
                ever[best_j] |= mods
    return trees


@st.composite
def cases(draw):
    n = draw(st.integers(2, 30))
    qs = random_queries(draw, n, keys=2, max_slide=12, kinds=("time", "count"))
    tech = draw(st.sampled_from(["panes", "flatfit", "flatfat"]))
    rate = draw(st.sampled_from([1.0, 3.0]))
    band = draw(st.integers(1, 4))
    min_gain = draw(st.sampled_from([0.0, 0.0, 0.2, 1.0]))
    return qs, CostModel(tech, rate), band, draw(st.integers(1, 6)), min_gain


@settings(max_examples=examples(60), deadline=None)
@given(cases())
def test_refine_makes_the_moves_of_pricing_every_move(case):
    qs, model, band, cofactor, min_gain = case
    woven = banded_weave(initial_trees(qs, model), model, band)
    got = refine(woven, model, cofactor=cofactor, min_gain=min_gain)
    want = reference(woven, model, cofactor, min_gain)
    assert groups(got) == groups(want)
    assert plan_cost(got) == plan_cost(want)
    assert plan_cost(got) <= plan_cost(woven)  # never dearer
    assert sorted(q.id for t in got for q in t.queries) == sorted(q.id for q in qs)
    for t in got:  # priced as from its queries (Omega up to a merge's float sum), units whole
        assert t.edge_rate == model.tree(t.queries).edge_rate
        assert math.isclose(t.cost, model.tree(t.queries).cost, rel_tol=1e-12)
        assert len({q.share_key for q in t.queries}) == 1
    unit_of = {q.id: i for i, u in enumerate(initial_trees(qs, model)) for q in u.queries}
    tree_of = {q.id: i for i, t in enumerate(got) for q in t.queries}
    assert all(
        tree_of[a] == tree_of[b] for a in unit_of for b in unit_of if unit_of[a] == unit_of[b]
    )


@settings(max_examples=examples(60), deadline=None)
@given(cases(), st.data())
def test_bounds_hold_for_every_unit_and_tree(case, data):
    """The bounds that skip prices are certified: a removal saves at most ``gain_out_ub``,
    an insertion costs at least ``added_lbs``."""
    qs, model, band, _, _ = case
    if not model.omega_is_additive():
        return  # refine prices every candidate then
    trees = banded_weave(initial_trees(qs, model), model, band)
    plan = _Plan(model, trees)
    for i, t in enumerate(trees):
        for unit in units_of(t):
            u = plan.alone(unit)
            rest = [v for v in units_of(t) if v is not unit]
            if rest:
                out = t.cost - model.tree([q for v in rest for q in v]).cost
                assert out <= plan.gain_out_ub(i, u)
            others = np.array([j for j, o in enumerate(trees) if j != i and o.key == t.key])
            for j, lb in zip(others.tolist(), plan.added_lbs(others, u)):
                assert lb <= model.merge(trees[j], u).cost - trees[j].cost


def test_a_unit_moves_to_the_tree_that_covers_its_edges():
    """Woven alone in pairs, slide 6 sits with slide 5 although slide 3 holds all its edges:
    the move takes it there, and the plan is cheaper by exactly the reference's saving."""
    from placement.queries import Query

    model = CostModel("panes", 1.0)
    q6, q5, q3, q3b = Query("a", 6, 6), Query("b", 5, 5), Query("c", 3, 3), Query("d", 9, 3)
    woven = [model.tree([q6, q5]), model.tree([q3, q3b])]
    got = refine(woven, model, min_gain=0)
    assert groups(got) == [["b"], ["a", "c", "d"]]
    assert plan_cost(got) < plan_cost(woven) - 0.1
    assert groups(reference(woven, model, min_gain=0)) == groups(got)


@pytest.mark.parametrize("tech", ["panes", "flatfat"])  # with bounds, and pricing every move
def test_min_gain_keeps_only_the_moves_that_save_more(tech):
    from placement.queries import Query

    model = CostModel(tech, 1.0)
    woven = [model.tree([Query("a", 6, 6), Query("b", 5, 5)]), model.tree([Query("c", 3, 3)])]
    moved = refine(woven, model, min_gain=0)
    saving = plan_cost(woven) - plan_cost(moved)
    assert saving > 0.01 and groups(moved) == [["b"], ["a", "c"]]
    share = saving / ((plan_cost(woven) - 2.0) / 3)  # of the edge work per unit (3 units)
    assert groups(refine(woven, model, min_gain=share * 1.01)) == groups(woven)
    assert groups(refine(woven, model, min_gain=share * 0.99)) == groups(moved)


def test_refine_beats_weaveshare_on_a_generated_workload():
    """On ``weaveplace plan``'s workload WeaveShare's plan is not a fixpoint of the moves."""
    from sim.workload import WorkloadSpec, generate

    qs = generate(WorkloadSpec(qnum=400, smax=200, rate=1, seed=3))
    model = CostModel("panes", 1.0)
    ws = weaveshare(qs, model)
    got = refine(ws, model)
    assert plan_cost(got) < plan_cost(ws) * 0.995
    assert groups(got) == groups(reference(ws, model))


def test_banded_refined_ticks_every_query_once_per_half():
    from sim.workload import WorkloadSpec, generate

    qs = generate(WorkloadSpec(qnum=301, smax=60, rate=1, seed=1))
    model = CostModel("panes", 1.0)
    ticks: list[int] = []
    got = run_single_node("banded_refined", qs, model, ticks.append)
    assert sum(ticks) == len(qs) and all(k > 0 for k in ticks)
    assert groups(got) == groups(banded_refined(qs, model))
    want = refine(weave(make_units(qs, model, "classes"), model), model)
    assert groups(got) == groups(want)  # one band: WeaveShare's trees, refined
