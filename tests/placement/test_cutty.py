"""The cost model under Cutty slicing (``CostModel(..., slicing="cutty")``).

Edge rates are checked against brute-force counts of window starts; SlickDeque Inv's Omega
against the executor's measured operations per Cutty slice *and* against the running
aggregates and open-partial combines counted here from the window definition alone (no shared
helper), so a wrong helper cannot make model and executor agree.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from executors import ExecutionTree
from placement.cost import cutty_terms, omega, open_combines_estimate
from placement.edges import ENGINES
from placement.queries import Query
from placement.slicing import brute_force_edges, cutty_profile
from placement.trees import CostModel
from placement.weaveshare import weaveshare

EXAMPLES = examples(60)
TECHS = ["panes", "flatfat", "flatfit", "slickdeque_inv", "slickdeque_noninv"]


def brute_profile(windows):
    """(starts per period, distinct n >= 1, open combines per period) from the definition:
    a window [x, x + r) (x a multiple of s) has n = #starts in (x, x + r] complete slices and
    takes the open partial when x + r is not a start; combines are shared per (end, n)."""
    period = math.lcm(*(s for _, s in windows))
    slides = {s for _, s in windows}

    def start(t):
        return any(t % s == 0 for s in slides)

    ns, combines = set(), set()
    for r, s in windows:
        for x in range(0, period, s):
            n = sum(1 for t in range(x + 1, x + r + 1) if start(t))
            if n >= 1:
                ns.add(n)
                if not start(x + r):
                    combines.add(((x + r) % period, n))
    return sum(1 for t in range(period) if start(t)), len(ns), len(combines)


def qs_of(wins, agg="sum"):
    return [Query(f"q{i}", r, s, agg) for i, (r, s) in enumerate(wins)]


def test_edge_rate_counts_window_starts_only():
    """docs/DESIGN.md s. 2 vector 2 (slides 3, 4, 6, 9; r mod 4 == 3, r mod 6 == 2): 27 edges in 36
    under Pairs, 18 under Cutty (the multiples of 3 or 4); every engine agrees."""
    wins = [(9, 3), (7, 4), (8, 6), (18, 9)]
    for eng in ENGINES:
        pairs = CostModel("panes", 1.0, eng).tree(qs_of(wins))
        cutty = CostModel("panes", 1.0, eng, slicing="cutty").tree(qs_of(wins))
        assert (pairs.composite_slide, pairs.edges, cutty.edges) == (36, 27, 18)
        assert cutty.edge_rate == Fraction(18, 36) and cutty.slicing == "cutty"
        assert cutty.classes == {(3, 0), (4, 0), (6, 0), (9, 0)}
    assert brute_force_edges({(3, 0), (4, 0), (6, 0), (9, 0)}) == 18


def test_pairs_default_unchanged_and_bad_slicing_refused():
    wins = [(16, 4), (10, 5), (8, 4)]
    a = CostModel("slickdeque_inv", 1.2).tree(qs_of(wins))
    b = CostModel("slickdeque_inv", 1.2, slicing="pairs").tree(qs_of(wins))
    assert (a.edge_rate, a.omega, a.cost, a.slicing) == (b.edge_rate, b.omega, b.cost, "pairs")
    with pytest.raises(ValueError, match="unknown slicing 'cuty'; allowed: pairs, cutty"):
        CostModel("panes", 1.0, slicing="cuty")
    with pytest.raises(ValueError, match="cannot weave"):
        m = CostModel("panes", 1.0, slicing="cutty")
        m.merged_price(m.tree(qs_of([(5, 3)])), CostModel("panes", 1.0).tree(qs_of([(4, 2)])))


def test_woven_example_10_3_and_7_2():
    """(10, 3) + (7, 2) (``test_executors_cutty``): 4 slices per 6, lengths {6, 7} and {4, 5},
    3 open-partial combines per 6: SlickDeque Inv Omega 8 + 3/4 = 35/4 (Pairs: 4)."""
    assert cutty_profile(frozenset({(10, 3), (7, 2)})).__dict__ == dict(
        period=6, slices=4, lengths=4, open_combines=3
    )
    t = CostModel("slickdeque_inv", 1.0, slicing="cutty").tree(qs_of([(10, 3), (7, 2)]))
    assert (t.edge_rate, t.omega) == (Fraction(4, 6), 35 / 4)
    assert CostModel("slickdeque_inv", 1.0).tree(qs_of([(10, 3), (7, 2)])).omega == 4.0


@settings(max_examples=EXAMPLES)
@given(wins=st.lists(st.tuples(st.integers(1, 40), st.integers(1, 10)), min_size=1, max_size=4))
def test_slickdeque_inv_cutty_omega_is_exact(wins):
    """Model == definition == measured ops per Cutty slice over whole composite slides."""
    wins = sorted(set(wins))
    k, n_lengths, combines = brute_profile(wins)
    t = CostModel("slickdeque_inv", 1.0, slicing="cutty").tree(qs_of(wins))
    assert t.edges == k
    assert t.omega == pytest.approx(2 * n_lengths + combines / k, abs=1e-12)
    assert cutty_terms(frozenset(wins)) == (n_lengths, combines / k, True)
    period = t.composite_slide
    ex = ExecutionTree(
        [dict(id=q.id, aggregate="sum", range=q.range, slide=q.slide) for q in t.queries],
        technique="slickdeque_inv",
        count_ops=True,
        slicing="cutty",
    )
    ts = np.arange(8 * period + 2 * max(r for r, _ in wins) + 20, dtype=np.int64)
    ex.process(ts, ts % 5)
    per = ex.op_counts()["per_slice"]
    a = k * (per.shape[0] // (2 * k))  # whole composite slides, past the start-up
    seg = per[a : a + 2 * k]
    assert seg.shape[0] == 2 * k
    assert seg.sum() == 2 * (2 * n_lengths * k + combines)


@settings(max_examples=EXAMPLES)
@given(
    wins=st.lists(st.tuples(st.integers(1, 40), st.integers(1, 10)), min_size=1, max_size=4),
    tech=st.sampled_from(TECHS),
)
def test_other_techniques_are_table11_at_cutty_e_plus_open_combines(wins, tech):
    """FlatFAT, FlatFIT, Non-Inv: Table 11 at E_cutty + the open-partial estimate, which is
    exact (= the brute-force F / K) for a lone query; Panes: sum r/s (its nP-th combine per
    answer is the open-partial one)."""
    wins = sorted(set(wins))
    agg = "max" if tech == "slickdeque_noninv" else "sum"
    t = CostModel(tech, 1.0, slicing="cutty").tree(qs_of(wins, agg))
    table11 = omega(tech, wins, t.edge_rate)  # the Pairs formula, at Cutty's E
    est = open_combines_estimate(wins, t.edge_rate)
    if tech == "panes":
        assert t.omega == table11
    elif tech != "slickdeque_inv":
        assert t.omega == pytest.approx(table11 + est, rel=1e-12)
    r, s = wins[0]
    k, _, combines = brute_profile([(r, s)])
    lone = CostModel(tech, 1.0, slicing="cutty").tree(qs_of([(r, s)], agg))
    assert open_combines_estimate([(r, s)], lone.edge_rate) == pytest.approx(combines / k)


@settings(max_examples=EXAMPLES)
@given(
    x=st.lists(st.tuples(st.integers(1, 50), st.integers(1, 12)), min_size=1, max_size=4),
    y=st.lists(st.tuples(st.integers(1, 50), st.integers(1, 12)), min_size=1, max_size=4),
    tech=st.sampled_from(TECHS),
)
def test_cutty_merges_price_as_fresh_trees_and_floors_hold(x, y, tech):
    """merged_price == pricing the union from scratch; omega_floor bounds every merge."""
    agg = "max" if tech == "slickdeque_noninv" else "sum"
    m = CostModel(tech, 1.0, slicing="cutty")
    tx = m.tree([Query(f"x{i}", r, s, agg) for i, (r, s) in enumerate(x)])
    ty = m.tree([Query(f"y{i}", r, s, agg) for i, (r, s) in enumerate(y)])
    e, om, cost = m.merged_price(tx, ty)
    fresh = m.tree(tx.queries + ty.queries)
    assert e == fresh.edge_rate and om == pytest.approx(fresh.omega, rel=1e-12)
    assert om >= max(m.omega_floor(tx), m.omega_floor(ty)) - 1e-12
    assert m.merge(tx, ty).slicing == "cutty"


def test_beyond_the_scan_budget_slickdeque_inv_is_a_lower_bound():
    """Coprime slides (composite slide ~10^12): no scan; the model is a lower bound of what
    the executor (registering lengths lazily) measures; FlatFIT needs no scan."""
    wins = [(2500, 997), (1500, 991), (2949, 983)]
    assert cutty_profile(frozenset(wins)) is None
    t = CostModel("slickdeque_inv", 1.0, slicing="cutty").tree(qs_of(wins))
    n, f, exact = cutty_terms(frozenset(wins))
    assert not exact and f == 0.0 and t.omega == 2.0 * n and n >= 1
    ex = ExecutionTree(
        [dict(id=q.id, aggregate="sum", range=q.range, slide=q.slide) for q in t.queries],
        technique="slickdeque_inv",
        count_ops=True,
        slicing="cutty",
    )
    ts = np.arange(0, 60_000, 7, dtype=np.int64)
    ex.process(ts, np.ones(ts.shape[0], dtype=np.int64))
    per = ex.op_counts()["per_slice"]
    assert per[per.shape[0] // 2 :].mean() >= t.omega
    ff = CostModel("flatfit", 1.0, slicing="cutty").tree(qs_of(wins))
    # (2949, 983) ends on its own starts (2949 = 3 x 983): no combine; the others' ends hit
    # a start of each coprime slide s_j with frequency 1/s_j
    a = (1 - 1 / 991) * (1 - 1 / 983) / 997 + (1 - 1 / 997) * (1 - 1 / 983) / 991
    assert ff.omega == pytest.approx(9.0 + a / float(t.edge_rate))


def test_weaveshare_and_wg_ls_plan_under_cutty():
    """Plans under Cutty price every tree as a fresh Cutty tree (WeaveShare and WG_LS use the
    model's classes and Omega, not Pairs shortcuts)."""
    from placement.optimizers import optimize
    from sim.workload import WorkloadSpec, generate

    qs = generate(WorkloadSpec(qnum=30, smax=24, rate=1.0, omax=5, gen="factors", seed=2))
    for tech in ("panes", "flatfit", "slickdeque_inv"):
        m = CostModel(tech, 1.0, slicing="cutty")
        for trees in (
            weaveshare(qs, m),
            [t for n in optimize("WG_LS", qs, m, [None] * 3).nodes for t in n.trees],
        ):
            assert sorted(q.id for t in trees for q in t.queries) == sorted(q.id for q in qs)
            for t in trees:
                fresh = m.tree(t.queries)
                assert t.slicing == "cutty" and t.classes == fresh.classes
                assert t.cost == pytest.approx(fresh.cost, rel=1e-9)


def test_open_combines_estimate_cases():
    """Exact where the ends' fate is certain: (14, 8) with slide 2 (2 | 8 and 2 | 14: every
    end is a start) makes no combine; with slide 3 a third of its ends are starts."""
    for wins in ([(14, 8), (4, 2)], [(14, 8), (6, 3)], [(14, 8)], [(3, 8)], [(16, 8)]):
        k, _, combines = brute_profile(wins)
        e = Fraction(k, math.lcm(*(s for _, s in wins)))
        assert open_combines_estimate(wins, e) == pytest.approx(combines / k), wins
    assert brute_profile([(14, 8), (4, 2)])[2] == 0
