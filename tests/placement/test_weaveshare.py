"""WeaveShare and friends: Example 3, the naive reference, the 4-approximation, online variants."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from math import lcm

import pytest
from helpers import examples, set_partitions
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from placement.queries import Query
from placement.slicing import brute_force_edges, query_classes, tree_classes
from placement.trees import CostModel
from placement.weaveshare import (
    IncrementalWeaveShare,
    initial_trees,
    insert_then_weave,
    no_share,
    plan_cost,
    shared,
    weave,
    weaveshare,
)

TECHNIQUES = ("panes", "flatfit", "slickdeque", "flatfat")
TIE_TOL = 1e-9


def grouping(trees):
    return sorted(sorted(q.id for q in t.queries) for t in trees)


def assert_valid_plan(trees, model, queries):
    """Each query in exactly one tree; every stated number recomputes from the tree's queries."""
    ids = [q.id for t in trees for q in t.queries]
    assert sorted(ids) == sorted(q.id for q in queries)
    assert len(ids) == len(set(ids))
    total = 0.0
    for t in trees:
        assert len({(q.stream, q.aggregate) for q in t.queries}) == 1
        fresh = model.tree(t.queries)
        assert t.edge_rate == fresh.edge_rate
        assert t.composite_slide == lcm(*(q.slide for q in t.queries))
        assert math.isclose(t.cost, fresh.cost, rel_tol=1e-12)
        total += fresh.cost
    assert math.isclose(plan_cost(trees), total, rel_tol=1e-12, abs_tol=1e-12)


def assert_fixpoint(trees, model):
    """No two trees of one (stream, aggregate) can still be woven at a profit."""
    for x, y in itertools.combinations(trees, 2):
        if x.key == y.key:
            assert model.benefit(x, y) <= 1e-9, (grouping([x]), grouping([y]))


# ---- WeaveShare Example 3 (docs/DESIGN.md s. 3 correction) --------------------------------------

EXAMPLE3 = [Query("a", 16, 4), Query("b", 10, 5), Query("c", 8, 4)]


@pytest.mark.parametrize("engine", ["fast", "f1", "bitset"])
@pytest.mark.parametrize("preprocess", [True, False])
def test_weaveshare_example_3(engine, preprocess):
    model = CostModel("panes", 1.2, engine)
    ns = no_share(EXAMPLE3, model)
    assert [round(t.cost, 12) for t in ns] == [2.2, 1.6, 1.7]
    assert math.isclose(plan_cost(ns), 5.5)
    plan = weaveshare(EXAMPLE3, model, preprocess)
    assert grouping(plan) == [["a", "c"], ["b"]]
    assert math.isclose(plan_cost(plan), 4.3)
    ac = next(t for t in plan if len(t.queries) == 2)
    assert (ac.edge_rate, ac.omega, ac.composite_slide) == (Fraction(1, 4), 6.0, 4)
    sh = shared(EXAMPLE3, model)
    assert len(sh) == 1 and sh[0].edge_rate == Fraction(8, 20) and sh[0].omega == 8.0
    assert math.isclose(plan_cost(sh), 4.4)
    # Why WeaveShare stops: weaving b into {a, c} would raise the cost by 0.1.
    assert math.isclose(model.benefit(ac, next(t for t in plan if t is not ac)), -0.1)


# ---- the naive reference ------------------------------------------------------------------------


def naive_weaveshare(queries, model, preprocess):
    """Textbook WeaveShare: evaluate every pair, merge the best if its benefit > 1e-12.

    Trees are kept in creation order (merged trees are appended); ties go to the first pair in
    (i, j) order. Returns the plan and whether a near-tie ever decided a merge."""
    if preprocess:
        groups: dict = {}
        for q in queries:
            groups.setdefault((q.stream, q.aggregate, query_classes(q)), []).append(q)
        trees = [model.tree(g) for g in groups.values()]
    else:
        trees = [model.tree([q]) for q in queries]
    tie = False
    while True:
        benefits = {}
        for i, j in itertools.combinations(range(len(trees)), 2):
            if trees[i].key == trees[j].key:
                benefits[i, j] = model.benefit(trees[i], trees[j])
        best = None
        for pair, b in benefits.items():
            if b > 1e-12 and (best is None or b > benefits[best]):
                best = pair
        if best is None:
            return trees, tie
        top = benefits[best]
        if sum(1 for b in benefits.values() if abs(b - top) <= TIE_TOL * max(1.0, abs(top))) > 1:
            tie = True
        i, j = best
        merged = model.merge(trees[i], trees[j])
        trees = [t for k, t in enumerate(trees) if k not in (i, j)] + [merged]


@st.composite
def workloads(draw, max_q=8, slides=st.integers(1, 20), two_streams=True):
    n = draw(st.integers(1, max_q))
    qs = []
    for i in range(n):
        s = draw(slides)
        r = draw(st.one_of(st.integers(1, 60), st.sampled_from([s, 2 * s, 3 * s])))
        qs.append(
            Query(
                f"q{i}",
                r,
                s,
                draw(st.sampled_from(["sum", "max"])),
                draw(st.sampled_from(["s0", "s1"])) if two_streams else "s0",
            )
        )
    lam = st.sampled_from([0.01, 0.05, 0.2, 0.5, 1.0, 3.0]) | st.floats(0.001, 5.0)
    rates = {"s0": draw(lam), "s1": draw(lam)}
    return qs, rates


def compare_with_naive(qs, rates, tech, preprocess, engine="fast"):
    model = CostModel(tech, rates, engine)
    ref, tie = naive_weaveshare(qs, model, preprocess)
    got = weaveshare(qs, model, preprocess)
    assert_valid_plan(got, model, qs)
    assert_fixpoint(got, model)
    assert math.isclose(plan_cost(got), plan_cost(ref), rel_tol=1e-9, abs_tol=1e-12), (
        grouping(got),
        grouping(ref),
    )
    if not tie:
        assert grouping(got) == grouping(ref)


# Two queries with the same classes {(5, 0), (5, 2)}: weaving them saves exactly lambda.
DUPLICATE_CLASSES = ([Query("q0", 7, 5), Query("q1", 12, 5)], {"s0": 0.1, "s1": 0.1}, "panes")


@pytest.mark.parametrize("preprocess", [True, False])
@settings(max_examples=examples(200))
@example(wl=DUPLICATE_CLASSES[:2], tech=DUPLICATE_CLASSES[2])
@given(wl=workloads(), tech=st.sampled_from(TECHNIQUES))
def test_weaveshare_equals_naive_reference(preprocess, wl, tech):
    qs, rates = wl
    compare_with_naive(qs, rates, tech, preprocess)


def test_weaveshare_weaves_identical_slicing_without_preprocess():
    """Regression: two single-query trees with the same classes {(5, 0), (5, 2)} weave for a
    saving of exactly lambda. An earlier pruning bound ('distinct class sets of one modulus
    share at most (s, 0)') ignored that the tree being rowed could duplicate a filed one and
    left them apart (seen before commit 305b06b)."""
    qs = [Query("q0", 7, 5), Query("q1", 12, 5)]
    for tech in ("panes", "flatfit"):
        model = CostModel(tech, 0.1)
        a, b = model.tree(qs[:1]), model.tree(qs[1:])
        assert math.isclose(model.benefit(a, b), 0.1)
        for preprocess in (True, False):
            plan = weaveshare(qs, model, preprocess=preprocess)
            assert grouping(plan) == [["q0", "q1"]]
            assert math.isclose(plan_cost(plan), a.cost + b.cost - 0.1)
    assert math.isclose(plan_cost(weaveshare(qs, CostModel("panes", 0.1), preprocess=False)), 1.62)


@st.composite
def small_lcm_workloads(draw):
    """Workloads whose total composite slide is small enough for the bitset engine."""
    slides = st.sampled_from([1, 2, 3, 4, 5, 6, 8, 9, 10, 12, 15, 18, 20, 24, 30, 36, 40])
    qs, rates = draw(workloads(slides=slides))
    assume(lcm(*(q.slide for q in qs)) <= 5000)
    return qs, rates


@settings(max_examples=examples(80))
@given(wl=small_lcm_workloads(), tech=st.sampled_from(TECHNIQUES), preprocess=st.booleans())
def test_plans_identical_across_engines(wl, tech, preprocess):
    qs, rates = wl
    plans = [
        weaveshare(qs, CostModel(tech, rates, engine), preprocess)
        for engine in ("fast", "f1", "bitset")
    ]
    assert grouping(plans[0]) == grouping(plans[1]) == grouping(plans[2])
    assert plan_cost(plans[0]) == plan_cost(plans[1]) == plan_cost(plans[2])
    for p in plans[1:]:
        assert sorted(t.edge_rate for t in p) == sorted(t.edge_rate for t in plans[0])


# ---- the Chung et al. 4-approximation ----------------------------------------------------------


def test_set_partitions_counts_bell_numbers():
    assert [sum(1 for _ in set_partitions(list(range(n)))) for n in range(8)] == [
        1,
        1,
        2,
        5,
        15,
        52,
        203,
        877,
    ]


@given(
    slides=st.lists(st.integers(1, 30), min_size=2, max_size=7, unique=True),
    factor=st.sampled_from([1.0, 1.5, 3.0]) | st.floats(1.0, 10.0),
)
def test_weaveshare_savings_at_least_a_quarter_of_optimal(slides, factor):
    """Chung, Guirguis, Kurdia, Theorem 1: R(WS) >= R(OPT) / 4, with R(X) = C(NoShare) - C(X),
    under the paper's three conditions:

    1. every query tumbles: range == slide (so Panes' Omega is 1 per query);
    2. lambda >= 2 * E_[qi,qj] for every pair of queries (edge rate of the two-query tree);
    3. WeaveShare makes at least half as many merges as the optimum: mu >= mu* / 2, where
       mu = n - (#WS trees) and mu* = n - (#OPT trees).

    Queries are on one stream, with distinct slides (each window counted once, as in the paper's
    cost model), and OPT is found by exhaustive search over all set partitions (n <= 7)."""
    qs = [Query(f"q{i}", s, s) for i, s in enumerate(slides)]
    max_pair = max(
        Fraction(brute_force_edges(tree_classes([a, b])), lcm(a.slide, b.slide))
        for a, b in itertools.combinations(qs, 2)
    )
    lam = float(2 * max_pair) * factor
    assert lam >= 2 * float(max_pair)  # condition 2
    model = CostModel("panes", lam)
    n = len(qs)
    cost = {
        sub: model.tree([qs[i] for i in sub]).cost
        for k in range(1, n + 1)
        for sub in itertools.combinations(range(n), k)
    }
    opt_cost, opt = min(
        (sum(cost[tuple(sorted(b))] for b in p), p) for p in set_partitions(list(range(n)))
    )
    ws = weaveshare(qs, model)
    mu, mu_star = n - len(ws), n - len(opt)
    assume(mu >= mu_star / 2)  # condition 3
    base = plan_cost(no_share(qs, model))
    r_ws, r_opt = base - plan_cost(ws), base - opt_cost
    assert plan_cost(ws) >= opt_cost - 1e-9  # the exhaustive search really is optimal
    assert r_ws >= -1e-12
    assert r_ws >= r_opt / 4 - 1e-9


@pytest.mark.parametrize("tick", [1, 3, 1024])
@settings(max_examples=examples(60))
@given(
    wl=workloads(max_q=12),
    tech=st.sampled_from(TECHNIQUES),
    strategy=st.sampled_from(["lazy", "paper"]),
    preprocess=st.booleans(),
)
def test_progress_ticks_every_query_once_and_leaves_the_plan_alone(
    tick, wl, tech, strategy, preprocess
):
    """``weaveplace plan``'s bar: the queries grouped first, then one tick per merge (in steps
    of ``TICK``), then the trees left; ``len(queries)`` in all, whichever table weaves."""
    import placement.weaveshare as ws

    qs, rates = wl
    model = CostModel(tech, rates)
    ticks: list[int] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ws, "TICK", tick)
        got = weaveshare(qs, model, preprocess, ticks.append, strategy)
    assert grouping(got) == grouping(weaveshare(qs, CostModel(tech, rates), preprocess))
    start = len(initial_trees(qs, model, preprocess))
    merges = start - len(got)
    steps = [tick] * (merges // tick)
    assert ticks == [len(qs) - start, *steps, merges - sum(steps) + len(got)]


# ---- Insert-then-Weave -------------------------------------------------------------------------


@given(wl=workloads(), tech=st.sampled_from(TECHNIQUES))
def test_insert_then_weave_valid_and_locally_optimal(wl, tech):
    qs, rates = wl
    model = CostModel(tech, rates)
    ticks: list[int] = []
    plan = insert_then_weave(qs, model, progress=ticks.append)
    assert_valid_plan(plan, model, qs)
    assert_fixpoint(plan, model)  # its weaving phase runs to a fixpoint
    assert sum(ticks) == len(qs)  # each unit's queries as it is inserted
    assert plan_cost(plan) <= plan_cost(no_share(qs, model)) + 1e-9


def test_insert_then_weave_example_3():
    model = CostModel("panes", 1.2)
    plan = insert_then_weave(EXAMPLE3, model)
    assert grouping(plan) == [["a", "c"], ["b"]]
    assert math.isclose(plan_cost(plan), 4.3)


# ---- Incremental WeaveShare --------------------------------------------------------------------


@st.composite
def batched(draw):
    qs, rates = draw(workloads(max_q=10, two_streams=False))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(qs) - 1)), max_size=4)))
    bounds = [0] + [c for c in cuts if c < len(qs)] + [len(qs)]
    return qs, rates, [qs[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]


@given(
    data=batched(),
    tech=st.sampled_from(TECHNIQUES),
    tolerance=st.sampled_from([0.0, 0.2, math.inf]),
)
def test_incremental_batches_give_valid_plans(data, tech, tolerance):
    """After every batch: a valid plan, and either a rebuild (then the offline WeaveShare plan,
    compared when no tie made the greedy order-dependent) or a cost within the tolerance of the
    cost extrapolated from the plan-cost curve as it was before the batch."""
    qs, rates, batches = data
    model = CostModel(tech, rates)
    inc = IncrementalWeaveShare(model, tolerance=tolerance)
    added = []
    for batch in batches:
        curve_before, rebuilds_before = list(inc._curve), inc.rebuilds
        inc.add(batch)
        added += batch
        assert_valid_plan(inc.trees, model, added)
        assert_fixpoint(inc.trees, model)
        expected = IncrementalWeaveShare(model, _curve=curve_before).extrapolated_cost(len(added))
        if expected is None:
            assert inc.rebuilds == rebuilds_before + 1  # nothing to extrapolate from: rebuild
        if inc.rebuilds > rebuilds_before:
            assert inc._curve[-1] == (len(added), inc.cost)
            ref, tie = naive_weaveshare(added, model, True)
            if not tie:
                assert math.isclose(inc.cost, plan_cost(ref), rel_tol=1e-9)
                assert grouping(inc.trees) == grouping(ref)
        else:
            assert tolerance > 0
            assert abs(inc.cost - expected) <= tolerance * expected + 1e-9
    assert inc.rebuilds >= 1
    if tolerance == math.inf:
        assert inc.rebuilds == 1  # one point on the curve: c0 * n / n0 > 0, never exceeded


def test_incremental_tolerance_zero_equals_offline():
    qs = [Query("q0", 7, 5), Query("q1", 14, 5), Query("q2", 14, 7)]
    model = CostModel("panes", 1.0)
    inc = IncrementalWeaveShare(model, tolerance=0.0)
    inc.add(qs[:2])
    inc.add(qs[2:])
    assert math.isclose(inc.cost, plan_cost(weaveshare(qs, model)), rel_tol=1e-9)


@settings(max_examples=examples(30))
@given(wl=workloads(max_q=8, two_streams=False), tech=st.sampled_from(TECHNIQUES))
def test_incremental_single_batch_is_offline_weaveshare(wl, tech):
    """The first batch is always rebuilt offline, reading the queries in submission order."""
    qs, rates = wl
    model = CostModel(tech, rates)
    inc = IncrementalWeaveShare(model, tolerance=0.0)
    inc.add(qs)
    assert inc.rebuilds == 1
    ref, tie = naive_weaveshare(qs, model, True)
    assume(not tie)
    assert math.isclose(inc.cost, plan_cost(ref), rel_tol=1e-9)
    assert grouping(inc.trees) == grouping(ref) == grouping(weaveshare(qs, model))


def test_incremental_add_weaves_identical_slicing():
    """A new query whose classes equal an existing tree's is woven in (saving lambda) even when
    no rebuild happens (tolerance = inf): the weaving loop runs to a fixpoint."""
    model = CostModel("panes", 0.1)
    inc = IncrementalWeaveShare(model, tolerance=math.inf)
    inc.add([Query("q0", 7, 5)])
    inc.add([Query("q1", 12, 5)])
    assert inc.rebuilds == 1
    assert grouping(inc.trees) == [["q0", "q1"]]
    assert math.isclose(inc.cost, 1.62)


@settings(max_examples=examples(60))
@given(data=batched(), tech=st.sampled_from(TECHNIQUES), st_data=st.data())
def test_incremental_remove(data, tech, st_data):
    qs, rates, batches = data
    model = CostModel(tech, rates)
    inc = IncrementalWeaveShare(model, tolerance=0.2)
    for batch in batches:
        inc.add(batch)
    gone = st_data.draw(st.sets(st.sampled_from([q.id for q in qs])))
    inc.remove(gone)
    rest = [q for q in qs if q.id not in gone]
    assert_valid_plan(inc.trees, model, rest)
    assert_fixpoint(inc.trees, model)
    if not rest:
        assert inc.trees == [] and inc.cost == 0.0


def test_incremental_unknown_and_duplicate_ids():
    model = CostModel("panes", 1.2)
    inc = IncrementalWeaveShare(model)
    inc.add(EXAMPLE3)
    before = (grouping(inc.trees), inc.cost)
    with pytest.raises(KeyError, match="nope"):
        inc.remove(["nope"])
    with pytest.raises(KeyError, match="zzz"):
        inc.remove(["a", "zzz"])  # atomic: 'a' is not removed either
    assert (grouping(inc.trees), inc.cost) == before
    with pytest.raises(ValueError, match="duplicate query id 'b'"):
        inc.add([Query("b", 5, 5)])
    with pytest.raises(ValueError, match="duplicate query id 'x'"):
        inc.add([Query("x", 5, 5), Query("x", 6, 5)])
    assert (grouping(inc.trees), inc.cost) == before
    inc.remove(["b"])
    assert grouping(inc.trees) == [["a", "c"]]
    assert math.isclose(inc.cost, 2.7)


def test_initial_trees_grouping_and_tree_key_checks():
    qs = [Query("a", 7, 5), Query("b", 12, 5), Query("c", 12, 5, "max"), Query("d", 10, 5)]
    model = CostModel("panes", 1.0)
    assert grouping(initial_trees(qs, model)) == [["a", "b"], ["c"], ["d"]]
    assert grouping(initial_trees(qs, model, preprocess=False)) == [["a"], ["b"], ["c"], ["d"]]
    with pytest.raises(ValueError, match="cannot share a tree"):
        model.tree(qs[1:3])
    with pytest.raises(ValueError, match="cannot weave"):
        model.merge(model.tree([qs[0]]), model.tree([qs[2]]))
    with pytest.raises(KeyError, match="s9"):
        CostModel("panes", {"s0": 1.0}).tree([Query("z", 5, 5, stream="s9")])
    assert weave([], model) == []


# ---- the cost model behind the plans -----------------------------------------------------------


@settings(max_examples=examples(60))
@given(
    x=st.lists(st.tuples(st.integers(1, 60), st.integers(1, 20)), min_size=1, max_size=4),
    y=st.lists(st.tuples(st.integers(1, 60), st.integers(1, 20)), min_size=1, max_size=4),
    tech=st.sampled_from(TECHNIQUES + ("slickdeque_inv", "slickdeque_noninv")),
    aggregate=st.sampled_from(["sum", "max"]),
    lam=st.floats(0.01, 5.0),
)
def test_merged_tree_prices_like_a_fresh_tree(x, y, tech, aggregate, lam):
    """model.merge (incremental E and Omega) agrees with pricing the union from scratch."""
    qx = [Query(f"x{i}", r, s, aggregate) for i, (r, s) in enumerate(x)]
    qy = [Query(f"y{i}", r, s, aggregate) for i, (r, s) in enumerate(y)]
    model = CostModel(tech, lam)
    tx, ty = model.tree(qx), model.tree(qy)
    merged, fresh = model.merge(tx, ty), model.tree(qx + qy)
    assert merged.edge_rate == fresh.edge_rate
    assert merged.classes == fresh.classes and merged.windows == fresh.windows
    assert merged.composite_slide == fresh.composite_slide
    assert math.isclose(merged.omega, fresh.omega, rel_tol=1e-12)
    assert math.isclose(merged.cost, fresh.cost, rel_tol=1e-12)
    assert math.isclose(
        model.benefit(tx, ty), tx.cost + ty.cost - fresh.cost, rel_tol=1e-9, abs_tol=1e-12
    )


def test_omega_formulas_by_hand():
    """docs/DESIGN.md s. 3 (Table 11) on one tree: (r 16, s 4) and (r 10, s 4), E = 2/4."""
    qs = [Query("a", 16, 4), Query("b", 10, 4)]  # classes (4, 0), (4, 2): E = 1/2
    e = Fraction(1, 2)
    expect = {
        "panes": 16 / 4 + 10 / 4,
        "flatfit": 3.0 * 2,
        "slickdeque_inv": 2.0 * 2,  # 2 per unique nP_i (documented choice)
        # nP = 8 and 5: floor(log2(nP-1)) + (nP-1)/2^floor(log2 nP)
        "flatfat": (2 + 7 / 8) + (2 + 4 / 4),
        # nP_max = 8: 2 - 2/8 value comparisons (eq. 7.7 without its position comparisons)
        "slickdeque_noninv": 2 - 2 / 8,
    }
    for tech, om in expect.items():
        t = CostModel(tech, 0.5).tree(qs)
        assert t.edge_rate == e
        assert math.isclose(t.omega, om, rel_tol=1e-12), tech
        assert math.isclose(t.cost, 0.5 + float(e) * om, rel_tol=1e-12), tech
    assert CostModel("slickdeque", 1.0).tree(qs).technique == "slickdeque_inv"
    assert (
        CostModel("slickdeque", 1.0).tree([Query("m", 16, 4, "max")]).technique
        == "slickdeque_noninv"
    )
    with pytest.raises(ValueError, match="unknown IE technique 'fifo'"):
        CostModel("fifo", 1.0)


@pytest.mark.parametrize("tech", ["panes", "flatfat", "slickdeque_inv"])
def test_one_query_trees_are_new_trees_priced_as_before(tech):
    """``tree([q])`` reuses its priced parts per query and rate, but each call is a new tree
    (a later uid) priced as a fresh model prices it; a new rate prices it anew."""
    qs = [Query("a", 12, 4), Query("b", 30, 6), Query("c", 7, 7, kind="count")]
    rates = {"s0": 3.0}
    model = CostModel(tech, rates)
    first = [model.tree([q]) for q in qs]
    again = [model.tree([q]) for q in qs]
    fresh = [CostModel(tech, {"s0": 3.0}).tree([q]) for q in qs]
    for x, y, z in zip(first, again, fresh):
        assert y is not x and y.uid > x.uid and y.queries is not x.queries
        assert (y.cost, y.omega, y.edge_rate, y.windows, y.classes) == (
            z.cost,
            z.omega,
            z.edge_rate,
            z.windows,
            z.classes,
        )
    rates["s0"] = 5.0
    assert [model.tree([q]).cost for q in qs] == [
        CostModel(tech, {"s0": 5.0}).tree([q]).cost for q in qs
    ]
