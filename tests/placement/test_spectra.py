"""Divisor spectra (``placement.lazy_table.spectra``) and the lazy table's spectral screen
(``kernels._screen``) against brute force: the spectral sum is the residue-free class-pair sum
``sum gcd(m_i, m_j) / (m_i m_j)``, at least the compatible pairs' sum and the density of common
edges counted position by position, and the screen is never below the class-pair bound."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.lazy_table import kernels as wk
from placement.lazy_table import spectra
from placement.lazy_table.table import KernelTable
from placement.queries import Query
from placement.trees import CostModel

SLIDES = st.sampled_from([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 14, 15, 18, 20, 21, 24, 30, 35])


def test_divisors_and_phi_match_brute_force():
    for m in [1, 2, 12, 97, 360, 720, 1001, 4096, 9973, 9999, 10000, 65536, 55440]:
        dv, ph = spectra.divisors(m)
        got = sorted(zip(dv.tolist(), ph.tolist()))
        divs = [d for d in range(1, m + 1) if m % d == 0]
        assert got == [(d, sum(math.gcd(k, d) == 1 for k in range(1, d + 1))) for d in divs]


def test_spectrum_of_a_small_tree():
    # classes of moduli 6, 6, 7 and 4: F(1) = 2/6 + 1/7 + 1/4, F(2) = 2/6 + 1/4, F(7) = 1/7, ...
    sizes, d, f, phi = spectra.build(np.array([4, 6, 6, 7]), np.array([0]), np.array([4]))
    assert sizes.tolist() == [6]
    assert d.tolist() == [1, 2, 3, 4, 6, 7]
    assert phi.tolist() == [1.0, 1.0, 2.0, 2.0, 2.0, 6.0]
    want = [2 / 6 + 1 / 7 + 1 / 4, 2 / 6 + 1 / 4, 2 / 6, 1 / 4, 2 / 6, 1 / 7]
    assert np.allclose(f, want, rtol=1e-15, atol=0)


@st.composite
def trees(draw):
    """Disjoint windows of one stream grouped into 2..6 trees (mixed slides, so multi-modulus
    trees), some woven further."""
    n = draw(st.integers(2, 6))
    used: set = set()
    groups, qid = [], 0
    for _ in range(n):
        qs = []
        for _ in range(draw(st.integers(1, 4))):
            s = draw(SLIDES)
            r = draw(st.integers(1, 4 * s))
            if (r, s) not in used:
                used.add((r, s))
                qs.append(Query(f"q{qid}", r, s))
                qid += 1
        if qs:
            groups.append(qs)
    lam = draw(st.sampled_from([0.01, 0.3, 1.0, 7.0]))
    return groups, lam, draw(st.integers(0, 3)), draw(st.integers(0, 1000))


def _common_density(x, y):
    """Brute force: positions of one hyper-period where both trees have an edge."""
    period = math.lcm(*(m for m, _ in x.classes), *(m for m, _ in y.classes))
    pos = np.arange(period)
    ex = np.zeros(period, bool)
    ey = np.zeros(period, bool)
    for m, r in x.classes:
        ex |= pos % m == r
    for m, r in y.classes:
        ey |= pos % m == r
    return Fraction(int((ex & ey).sum()), period)


def _merged_table(case):
    """The case's trees, some merged at random, in a ``KernelTable``: (model, table, trees,
    slots)."""
    groups, lam, merges, seed = case
    model = CostModel("panes", lam, "fast")
    ts = [model.tree(g) for g in groups]
    rng = np.random.default_rng(seed)
    for _ in range(merges):
        if len(ts) < 3:
            break
        i, j = sorted(rng.choice(len(ts), 2, replace=False).tolist())
        y, x = ts.pop(j), ts.pop(i)
        ts.append(model.merge(x, y))
    t = KernelTable(model, ts, 1e-12)
    return model, t, ts, t._add_many(ts)


@settings(max_examples=examples(200))
@given(case=trees())
def test_spectral_sum_bounds_common_edges_and_screen_bounds_the_pair_bound(case):
    model, t, ts, slots = _merged_table(case)
    lam = case[1]
    sl, sp = t.slots, t.spec
    wmax = int(sl.kcls[: len(slots)].max())
    scratch = np.zeros(wmax), np.zeros(wmax, np.int64), np.zeros(wmax)
    for i, z in enumerate(slots):
        assert wk._scatter(z, sp)
        for j, s in enumerate(slots):
            if i == j:
                continue
            x, y = ts[i], ts[j]
            free = sum(
                Fraction(math.gcd(mi, mj), mi * mj) for mi, _ in x.classes for mj, _ in y.classes
            )
            compatible = sum(
                Fraction(math.gcd(mi, mj), mi * mj)
                for mi, ri in x.classes
                for mj, rj in y.classes
                if (ri - rj) % math.gcd(mi, mj) == 0
            )
            common = _common_density(x, y)
            assert common <= compatible <= free
            dense = wk._spec_dot(z, s, sp, True)
            merged = wk._spec_dot(z, s, sp, False)
            # the spectral sum is the residue-free class-pair sum (rounding only)
            assert abs(dense - float(free)) <= 1e-12 * float(free)
            assert abs(merged - float(free)) <= 1e-12 * float(free)
            bound = wk._bound(
                z,
                s,
                lam,
                sl.e,
                sl.om,
                sl.cost,
                sl.kcls,
                sl.cstart,
                t.classes.mod,
                t.classes.res,
                *scratch,
            )
            screen = wk._screen(z, s, lam, sl.e, sl.om, sl.cost, sl.kcls, sp, True)
            assert screen == wk._screen(z, s, lam, sl.e, sl.om, sl.cost, sl.kcls, sp, False)
            assert screen >= bound >= model.benefit(x, y)
            assert screen <= wk._loose(z, s, lam, sl.e, sl.om, sl.cost)
            # the screen's C is the spectral sum where that is below min(Ex, Ey)
            c = min(float(x.edge_rate), float(y.edge_rate), float(free))
            om_z, om_s = float(sl.om[z]), float(sl.om[s])
            want = lam + om_z * (c - float(sl.e[s])) + om_s * (c - float(sl.e[z]))
            assert abs(screen - want) <= 1e-8 * (abs(want) + sl.cost[z] + sl.cost[s])
        wk._unscatter(z, sp)
        assert not sp.dense.any()


@settings(max_examples=examples(200))
@given(case=trees())
def test_bucket_screen_bounds_the_bucket_bound(case):
    """``bucket_screen``'s gcd sum is ``sum over classes of gcd(m_i, m_b) / m_i`` (brute force)
    and it is never below the bucket bound with its margin, nor below a member's pair value."""
    model, t, ts, slots = _merged_table(case)
    lam = case[1]
    sl, sp, bk = t.slots, t.spec, t.buckets
    wmax = int(sl.kcls[: len(slots)].max())
    scratch = np.zeros(wmax), np.zeros(wmax, np.int64), np.zeros(wmax)
    for i, z in enumerate(slots):
        assert wk._scatter(z, sp)
        for j, s in enumerate(slots):
            b = int(sl.bucket[s])
            mb = int(bk.mod[b])
            if i == j or mb == 0:
                continue
            x = ts[i]
            divs = sp.bd[sp.bstart[b] : sp.bstart[b] + sp.bsize[b]]
            assert sorted(divs.tolist()) == [d for d in range(1, mb + 1) if mb % d == 0]
            gsum = sum(Fraction(math.gcd(mi, mb), mi) for mi, _ in x.classes)
            h = sum(sp.dense[d] for d in divs.tolist())
            assert abs(h - float(gsum)) <= 1e-12 * float(gsum)
            args = (lam, sl.e, sl.om, sl.cost)
            kmin, kmax, om_b = bk.kmin[b], bk.kmax[b], bk.om[b]
            bb = wk.bucket_bound(z, *args, sl.kcls, sl.cstart, t.classes.mod, mb, kmin, kmax, om_b)
            bm = wk.bucket_margin(bb, sl.cost[z], bk.costmax[b])
            pb = wk.bucket_screen(z, *args, b, mb, kmin, kmax, om_b, bk.costmax[b], sp)
            value = wk._bound(
                z, s, *args, sl.kcls, sl.cstart, t.classes.mod, t.classes.res, *scratch
            )
            assert pb >= bm >= value >= model.benefit(x, ts[j])
        wk._unscatter(z, sp)
