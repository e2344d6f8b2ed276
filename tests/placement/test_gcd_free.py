"""The gcd-free screen of single-modulus rows (``kernels.row_split``, ``gcd_table``,
``gcd_free_bound``) against brute force: the moduli whose gcd with the row's is above ``Dz``
are exactly those sharing a divisor above ``Dz`` with it, every other one has a gcd with it of
at most ``alpha m / k``, and for those the screen is never below the bucket bound with its
margin, nor below a member's pair value or benefit."""

from __future__ import annotations

import math

from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.lazy_table import kernels as wk
from placement.lazy_table.table import KernelTable
from placement.queries import Query
from placement.trees import CostModel

# Composites with divisors above DLOW (64) and moduli above 32 * 2 * 64 (the ALPHA_DIV branch).
SLIDES = st.sampled_from(
    [1, 6, 12, 30, 64, 65, 96, 128, 130, 192, 195, 260, 390, 520, 780, 1040, 4160, 8320, 12480]
)


@st.composite
def tables(draw):
    """Groups of 1..4 queries of one slide (single-modulus trees of 1..several classes)."""
    used: set = set()
    groups, qid = [], 0
    for _ in range(draw(st.integers(2, 8))):
        s = draw(SLIDES)
        qs = []
        for _ in range(draw(st.integers(1, 4))):
            r = draw(st.integers(1, 3 * s))
            if (r, s) not in used:
                used.add((r, s))
                qs.append(Query(f"q{qid}", r, s))
                qid += 1
        if qs:
            groups.append(qs)
    return groups, draw(st.sampled_from([0.01, 0.3, 1.0, 7.0]))


def _table(case):
    groups, lam = case
    model = CostModel("panes", lam, "fast")
    ts = [model.tree(g) for g in groups]
    t = KernelTable(model, ts, 1e-12)
    return model, t, ts, t._add_many(ts)


@settings(max_examples=examples(80))
@given(case=tables())
def test_gcds_and_split_match_brute_force(case):
    _, t, ts, slots = _table(case)
    sl, sp = t.slots, t.spec
    top = int(sl.smod[slots].max()) + 1
    for z in slots:
        mz, kz = int(sl.smod[z]), int(sl.kcls[z])
        if mz == 0:
            continue
        dz, alpha = wk.row_split(mz, kz, sp, int(sl.bucket[z]))
        wk.gcd_table(mz, sp, int(sl.bucket[z]), top)
        high_divs = [d for d in range(dz + 1, mz + 1) if mz % d == 0]
        for m in range(1, top):
            g = math.gcd(mz, m)
            assert sp.gcds[m] == g
            assert (g > dz) == any(m % d == 0 for d in high_divs)
            if g <= dz:
                assert kz * g / mz <= alpha


@settings(max_examples=examples(200))
@given(case=tables())
def test_gcd_free_bound_bounds_the_bucket_bound_and_the_values(case):
    model, t, ts, slots = _table(case)
    lam = case[1]
    sl, bk, sp = t.slots, t.buckets, t.spec
    top = int(sl.smod[slots].max()) + 1
    for i, z in enumerate(slots):
        mz, kz = int(sl.smod[z]), int(sl.kcls[z])
        if mz == 0:
            continue
        dz, alpha = wk.row_split(mz, kz, sp, int(sl.bucket[z]))
        wk.gcd_table(mz, sp, int(sl.bucket[z]), top)
        for j, s in enumerate(slots):
            b = int(sl.bucket[s])
            mb = int(bk.mod[b])
            if i == j or mb == 0 or sp.gcds[mb] > dz:
                continue
            args = (lam, sl.e, sl.om, sl.cost)
            kmin, kmax, om_b, cmax = bk.kmin[b], bk.kmax[b], bk.om[b], bk.costmax[b]
            bb = wk.bucket_bound(z, *args, sl.kcls, sl.cstart, t.classes.mod, mb, kmin, kmax, om_b)
            bm = wk.bucket_margin(bb, sl.cost[z], cmax)
            pb = wk.gcd_free_bound(
                lam, sl.om[z], sl.e[z], sl.cost[z], alpha, kmin / mb, kmax / mb, om_b, cmax
            )
            value, exact = wk.pair_value(
                z, s, *args, sl.smod, sl.kcls, sl.cstart, t.classes.mod, t.classes.res
            )
            assert exact
            assert pb >= bm >= value
            assert value == model.benefit(ts[i], ts[j])
