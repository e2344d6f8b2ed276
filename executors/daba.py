"""DABA (De-Amortized Banker's Aggregator, Tangwongsan et al.): TwoStacks without spikes.

One queue of (val, agg) items split by four pointers l <= r <= a <= b into the
regions the published invariants name (L, R, A of the front part; B the back
part).  After every insert and evict a constant-time ``fixup`` either flips,
shifts or shrinks (3 combines), so every slice costs at most 8 operations
(amortised 5).  Written from the algorithm's published invariants; positions are
absolute counters over a circular buffer.  Single window length only.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .aggregates import combine2
from .base import FinalAggregator, register

# meta: the kernels' int64 state slots (front, end, the pointers l, r, a, b, window length)
_F, _E, _L, _R, _A, _B, _W = range(7)
_META_SLOTS = 7


@njit(cache=True)
def _fixup(op, val_hi, val_lo, agg_hi, agg_lo, ih, il, m):
    cap = val_hi.shape[0]
    F = m[_F]
    E = m[_E]
    c = 0
    if m[_B] == F:
        m[_L] = E
        m[_R] = E
        m[_A] = E
        m[_B] = E
        return c
    if m[_L] == m[_B]:  # flip
        m[_L] = F
        m[_A] = E
        m[_B] = E
    l = m[_L]
    r = m[_R]
    a = m[_A]
    b = m[_B]
    if l == r:  # shift
        m[_A] = a + 1
        m[_R] = r + 1
        m[_L] = l + 1
        return c
    # shrink
    if a != b:
        xa_h = agg_hi[a % cap]
        xa_l = agg_lo[a % cap]
    else:
        xa_h = ih
        xa_l = il
    xl_h = agg_hi[l % cap]  # l != r here
    xl_l = agg_lo[l % cap]
    if r != a:
        xr_h = agg_hi[(a - 1) % cap]
        xr_l = agg_lo[(a - 1) % cap]
    else:
        xr_h = ih
        xr_l = il
    h, lo = combine2(op, xl_h, xl_l, xr_h, xr_l)
    h, lo = combine2(op, h, lo, xa_h, xa_l)
    agg_hi[l % cap] = h
    agg_lo[l % cap] = lo
    m[_L] = l + 1
    p = (a - 1) % cap
    h, lo = combine2(op, val_hi[p], val_lo[p], xa_h, xa_l)
    agg_hi[p] = h
    agg_lo[p] = lo
    m[_A] = a - 1
    return 3


@njit(cache=True)
def _daba_kernel(
    op,
    new_hi,
    new_lo,
    due_ptr,
    due_n,
    out_hi,
    out_lo,
    ops,
    val_hi,
    val_lo,
    agg_hi,
    agg_lo,
    ident_hi,
    ident_lo,
    m,
):
    cap = val_hi.shape[0]
    W = m[_W]
    ih = ident_hi[0]
    il = ident_lo[0]
    count = ops.shape[0] > 0
    for j in range(new_hi.shape[0]):
        c = 0
        # insert: agg = aggB (+) v
        E = m[_E]
        if m[_B] == E:
            bh = ih
            bl = il
        else:
            bh = agg_hi[(E - 1) % cap]
            bl = agg_lo[(E - 1) % cap]
        h, lo = combine2(op, bh, bl, new_hi[j], new_lo[j])
        c += 1
        val_hi[E % cap] = new_hi[j]
        val_lo[E % cap] = new_lo[j]
        agg_hi[E % cap] = h
        agg_lo[E % cap] = lo
        m[_E] = E + 1
        c += _fixup(op, val_hi, val_lo, agg_hi, agg_lo, ih, il, m)
        # evict
        if m[_E] - m[_F] > W:
            m[_F] += 1
            c += _fixup(op, val_hi, val_lo, agg_hi, agg_lo, ih, il, m)
        if due_ptr[j + 1] > due_ptr[j]:
            F = m[_F]
            E = m[_E]
            if E > F:
                fh = agg_hi[F % cap]
                fl = agg_lo[F % cap]
            else:
                fh = ih
                fl = il
            if m[_B] == E:
                bh = ih
                bl = il
            else:
                bh = agg_hi[(E - 1) % cap]
                bl = agg_lo[(E - 1) % cap]
            ah, al = combine2(op, fh, fl, bh, bl)
            c += 1
            for q in range(due_ptr[j], due_ptr[j + 1]):
                out_hi[q] = ah
                out_lo[q] = al
        if count:
            ops[j] = c


@njit(cache=True)
def _daba_answer(op, out_hi, out_lo, agg_hi, agg_lo, ident_hi, ident_lo, m):
    """The query alone: front agg (+) back agg (1 combine)."""
    cap = agg_hi.shape[0]
    F = m[_F]
    E = m[_E]
    if E > F:
        fh = agg_hi[F % cap]
        fl = agg_lo[F % cap]
    else:
        fh = ident_hi[0]
        fl = ident_lo[0]
    if m[_B] == E:
        bh = ident_hi[0]
        bl = ident_lo[0]
    else:
        bh = agg_hi[(E - 1) % cap]
        bl = agg_lo[(E - 1) % cap]
    ah, al = combine2(op, fh, fl, bh, bl)
    out_hi[:] = ah
    out_lo[:] = al
    return 1


@register
class DABA(FinalAggregator):
    name = "daba"
    multi_query = False

    def reset(self):
        cap = self.wsize + 2
        vh, vl = self._ident_ring(cap)
        ah, al = self._ident_ring(cap)
        ih, il = self._ident_ring(1)
        meta = np.zeros(_META_SLOTS, dtype=np.int64)
        meta[_W] = self.wsize
        self.state = {
            "val_hi": vh,
            "val_lo": vl,
            "agg_hi": ah,
            "agg_lo": al,
            "ident_hi": ih,
            "ident_lo": il,
            "meta": meta,
        }

    def _kernel(self, new_hi, new_lo, due_ptr, due_n, out_hi, out_lo, ops):
        s = self.state
        _daba_kernel(
            self.op,
            new_hi,
            new_lo,
            due_ptr,
            due_n,
            out_hi,
            out_lo,
            ops,
            s["val_hi"],
            s["val_lo"],
            s["agg_hi"],
            s["agg_lo"],
            s["ident_hi"],
            s["ident_lo"],
            s["meta"],
        )

    def _answer_kernel(self, due_n, out_hi, out_lo):
        s = self.state
        return _daba_answer(
            self.op,
            out_hi,
            out_lo,
            s["agg_hi"],
            s["agg_lo"],
            s["ident_hi"],
            s["ident_lo"],
            s["meta"],
        )
