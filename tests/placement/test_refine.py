"""Unit moves after a weave (placement.refine) against a reference that prices every move."""

from __future__ import annotations

from math import gcd

from helpers import examples, random_queries
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.banded import banded_weave
from placement.distributed import make_units
from placement.optimizers import run_single_node
from placement.refine import COFACTOR, _gain_out_ub, _Plan, banded_refined, refine, units_of
from placement.trees import CostModel
from placement.weaveshare import EPS, initial_trees, plan_cost, weave, weaveshare


def groups(trees):
    """Each tree's query ids, in tree order (refine keeps the order: the plan is the same)."""
    return [sorted(q.id for q in t.queries) for t in trees]


def reference(trees, model, cofactor=COFACTOR):
    """The pass ``refine`` makes, pricing every move: each given tree in order, each of its
    units; the unit alone and in every other tree of its key that ever held a class of modulus
    ``m`` with ``m / gcd(m, slide) <= cofactor``; the best move if it saves more than EPS
    (ties: alone, then the lower index)."""
    trees = list(trees)
    units = [units_of(t) for t in trees]
    ever = [{m for m, _ in t.classes} for t in trees]
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
            if best <= EPS:
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
    return qs, CostModel(tech, rate), band, draw(st.integers(1, 6))


@settings(max_examples=examples(60), deadline=None)
@given(cases())
def test_refine_makes_the_moves_of_pricing_every_move(case):
    qs, model, band, cofactor = case
    woven = banded_weave(initial_trees(qs, model), model, band)
    got = refine(woven, model, cofactor=cofactor)
    want = reference(woven, model, cofactor)
    assert groups(got) == groups(want)
    assert plan_cost(got) == plan_cost(want)
    assert plan_cost(got) <= plan_cost(woven)  # never dearer
    assert sorted(q.id for t in got for q in t.queries) == sorted(q.id for q in qs)
    for t in got:  # every tree priced exactly, and units never split
        assert t.cost == model.tree(t.queries).cost
        assert len({q.share_key for q in t.queries}) == 1
    unit_of = {q.id: i for i, u in enumerate(initial_trees(qs, model)) for q in u.queries}
    tree_of = {q.id: i for i, t in enumerate(got) for q in t.queries}
    assert all(
        tree_of[a] == tree_of[b] for a in unit_of for b in unit_of if unit_of[a] == unit_of[b]
    )


@settings(max_examples=examples(60), deadline=None)
@given(cases(), st.data())
def test_bounds_hold_for_every_unit_and_tree(case, data):
    """The bounds that skip prices are certified: a removal saves at most ``_gain_out_ub``,
    an insertion costs at least ``added_lbs``."""
    qs, model, band, _ = case
    if not model.omega_is_additive():
        return  # refine prices every candidate then
    trees = banded_weave(initial_trees(qs, model), model, band)
    plan = _Plan(model, trees)
    for i, t in enumerate(trees):
        for unit in units_of(t):
            u = plan.alone(unit)
            rest = [v for v in units_of(t) if v is not unit]
            if rest:
                rest_classes = frozenset().union(*(plan.alone(v).classes for v in rest))
                out = t.cost - model.tree([q for v in rest for q in v]).cost
                assert out <= _gain_out_ub(plan, i, u, rest_classes)
            others = [j for j, o in enumerate(trees) if j != i and o.key == t.key]
            for j, lb in zip(others, plan.added_lbs(others, u)):
                assert lb <= model.merge(trees[j], u).cost - trees[j].cost


def test_a_unit_moves_to_the_tree_that_covers_its_edges():
    """Woven alone in pairs, slide 6 sits with slide 5 although slide 3 holds all its edges:
    the move takes it there, and the plan is cheaper by exactly the reference's saving."""
    from placement.queries import Query

    model = CostModel("panes", 1.0)
    q6, q5, q3, q3b = Query("a", 6, 6), Query("b", 5, 5), Query("c", 3, 3), Query("d", 9, 3)
    woven = [model.tree([q6, q5]), model.tree([q3, q3b])]
    got = refine(woven, model)
    assert groups(got) == [["b"], ["a", "c", "d"]]
    assert plan_cost(got) < plan_cost(woven) - 0.1
    assert groups(reference(woven, model)) == groups(got)


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
