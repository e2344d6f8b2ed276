"""B-Int (base intervals): dyadic intervals of the slice sequence, level by level.

Level k stores the aggregates of the aligned intervals [m*2^k, (m+1)*2^k) of the
(absolute) slice numbers, in a small ring per level.  Unlike FlatFAT, an insert
only builds the intervals that *end* with the new slice (one combine per level
whose boundary it completes: amortised < 1 per slice); a window is answered by
greedily taking, from its right end, the largest aligned interval that fits:
O(log n) combines, slower look-ups than FlatFAT by a constant factor as the
dissertation reports.  Counted operations: every combine (interval builds, and
joining the intervals of an answer).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .aggregates import combine2
from .base import FinalAggregator, register

# meta: the kernels' int64 state slots
_G = 0  # number of slices inserted so far (the next slice's global index)
_META_SLOTS = 1


@njit(cache=True)
def _last_n(op, lv_hi, lv_lo, off, cap, end, n):
    """Aggregate of the n slices before absolute slice number ``end`` (exclusive): greedy
    largest aligned intervals from the right end; returns (h, l, ops)."""
    K = off.shape[0]
    c = 0
    start = end - n
    if start < 0:
        start = 0  # before the first slice: identities
    has = False
    ah = lv_hi[0]
    al = lv_lo[0]
    while end > start:
        k = K - 1
        while k > 0 and ((end & ((1 << k) - 1)) != 0 or end - (1 << k) < start):
            k -= 1
        m = (end >> k) - 1
        d = off[k] + m % cap[k]
        if has:
            ah, al = combine2(op, lv_hi[d], lv_lo[d], ah, al)
            c += 1
        else:
            ah = lv_hi[d]
            al = lv_lo[d]
            has = True
        end -= 1 << k
    if not has:
        # window entirely before the first slice since reset
        ah = lv_hi[lv_hi.shape[0] - 1]
        al = lv_lo[lv_lo.shape[0] - 1]
    return ah, al, c


@njit(cache=True)
def _bint_answer(op, due_n, out_hi, out_lo, lv_hi, lv_lo, off, cap, meta):
    c = 0
    for q in range(due_n.shape[0]):
        ah, al, k = _last_n(op, lv_hi, lv_lo, off, cap, meta[_G], due_n[q])
        c += k
        out_hi[q] = ah
        out_lo[q] = al
    return c


@njit(cache=True)
def _bint_kernel(
    op, new_hi, new_lo, due_ptr, due_n, out_hi, out_lo, ops, lv_hi, lv_lo, off, cap, meta
):
    K = off.shape[0]
    g = meta[_G]
    count = ops.shape[0] > 0
    for j in range(new_hi.shape[0]):
        c = 0
        p = off[0] + g % cap[0]
        lv_hi[p] = new_hi[j]
        lv_lo[p] = new_lo[j]
        e = g + 1
        for k in range(1, K):
            if e & ((1 << k) - 1):
                break
            m = (e >> k) - 1
            a = off[k - 1] + (2 * m) % cap[k - 1]
            b = off[k - 1] + (2 * m + 1) % cap[k - 1]
            h, l = combine2(op, lv_hi[a], lv_lo[a], lv_hi[b], lv_lo[b])
            c += 1
            d = off[k] + m % cap[k]
            lv_hi[d] = h
            lv_lo[d] = l
        for q in range(due_ptr[j], due_ptr[j + 1]):
            ah, al, k = _last_n(op, lv_hi, lv_lo, off, cap, g + 1, due_n[q])
            c += k
            out_hi[q] = ah
            out_lo[q] = al
        g += 1
        if count:
            ops[j] = c
    meta[_G] = g


@register
class BInt(FinalAggregator):
    name = "bint"

    def reset(self):
        W = self.wsize
        K = W.bit_length()  # levels 0..K-1, 2^(K-1) <= W
        cap = np.array([(W >> k) + 2 for k in range(K)], dtype=np.int64)
        off = np.zeros(K, dtype=np.int64)
        off[1:] = np.cumsum(cap)[:-1]
        total = int(cap.sum()) + 1  # last cell: a permanent identity
        hi, lo = self._ident_ring(total)
        self.state = {
            "lv_hi": hi,
            "lv_lo": lo,
            "off": off,
            "cap": cap,
            "meta": np.zeros(_META_SLOTS, dtype=np.int64),
        }

    def _kernel(self, new_hi, new_lo, due_ptr, due_n, out_hi, out_lo, ops):
        s = self.state
        _bint_kernel(
            self.op,
            new_hi,
            new_lo,
            due_ptr,
            due_n,
            out_hi,
            out_lo,
            ops,
            s["lv_hi"],
            s["lv_lo"],
            s["off"],
            s["cap"],
            s["meta"],
        )

    def _answer_kernel(self, due_n, out_hi, out_lo):
        s = self.state
        return _bint_answer(
            self.op, due_n, out_hi, out_lo, s["lv_hi"], s["lv_lo"], s["off"], s["cap"], s["meta"]
        )
