"""FlatFAT: a pointer-less complete binary tree over a circular array of leaves.

``2P`` cells for ``P`` = next power of two >= wsize leaves (cell 0 unused).  An
insert overwrites the next leaf and recomputes its ancestors: log2(P) combines.
A window of the last n leaves is the standard bottom-up range query (two ranges
when it wraps around the ring); the root answers a window spanning all P leaves
with no operation.  Counted operations: combines between two tree cells; the
first cell taken on each side is a copy, not an operation.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .aggregates import combine2
from .base import FinalAggregator, register

# meta: the kernels' int64 state slots
_CUR = 0  # leaf position of the next slice
_META_SLOTS = 1


@njit(cache=True)
def _range(op, tree_hi, tree_lo, P, lo_leaf, hi_leaf):
    """Aggregate of leaves lo_leaf..hi_leaf inclusive; returns (h, l, ops, empty)."""
    l = lo_leaf + P
    r = hi_leaf + P + 1
    lh = tree_hi[0]
    ll = tree_lo[0]
    rh = tree_hi[0]
    rl = tree_lo[0]
    has_l = False
    has_r = False
    c = 0
    while l < r:
        if l & 1:
            if has_l:
                lh, ll = combine2(op, lh, ll, tree_hi[l], tree_lo[l])
                c += 1
            else:
                lh = tree_hi[l]
                ll = tree_lo[l]
                has_l = True
            l += 1
        if r & 1:
            r -= 1
            if has_r:
                rh, rl = combine2(op, tree_hi[r], tree_lo[r], rh, rl)
                c += 1
            else:
                rh = tree_hi[r]
                rl = tree_lo[r]
                has_r = True
        l >>= 1
        r >>= 1
    if has_l and has_r:
        lh, ll = combine2(op, lh, ll, rh, rl)
        c += 1
    elif has_r:
        lh = rh
        ll = rl
    return lh, ll, c


@njit(cache=True)
def _last_n(op, tree_hi, tree_lo, P, cur, n):
    """Aggregate of the n leaves ending at leaf ``cur`` (ring order); returns (h, l, ops)."""
    if n == P:
        # the whole ring: the root (all our primitives are commutative,
        # so the ring's rotation does not matter)
        return tree_hi[1], tree_lo[1], 0
    start = cur - n + 1
    if start >= 0:
        return _range(op, tree_hi, tree_lo, P, start, cur)
    h1, l1, k1 = _range(op, tree_hi, tree_lo, P, start + P, P - 1)
    h2, l2, k2 = _range(op, tree_hi, tree_lo, P, 0, cur)
    h, l = combine2(op, h1, l1, h2, l2)
    return h, l, k1 + k2 + 1


@njit(cache=True)
def _flatfat_answer(op, due_n, out_hi, out_lo, tree_hi, tree_lo, meta):
    P = tree_hi.shape[0] // 2
    last = meta[_CUR] - 1
    if last < 0:
        last += P
    c = 0
    for q in range(due_n.shape[0]):
        h, l, k = _last_n(op, tree_hi, tree_lo, P, last, due_n[q])
        c += k
        out_hi[q] = h
        out_lo[q] = l
    return c


@njit(cache=True)
def _flatfat_kernel(
    op, new_hi, new_lo, due_ptr, due_n, out_hi, out_lo, ops, tree_hi, tree_lo, meta
):
    P = tree_hi.shape[0] // 2
    cur = meta[_CUR]
    count = ops.shape[0] > 0
    for j in range(new_hi.shape[0]):
        c = 0
        i = P + cur
        tree_hi[i] = new_hi[j]
        tree_lo[i] = new_lo[j]
        i >>= 1
        while i >= 1:
            h, l = combine2(
                op, tree_hi[2 * i], tree_lo[2 * i], tree_hi[2 * i + 1], tree_lo[2 * i + 1]
            )
            tree_hi[i] = h
            tree_lo[i] = l
            c += 1
            i >>= 1
        for q in range(due_ptr[j], due_ptr[j + 1]):
            h, l, k = _last_n(op, tree_hi, tree_lo, P, cur, due_n[q])
            c += k
            out_hi[q] = h
            out_lo[q] = l
        cur += 1
        if cur == P:
            cur = 0
        if count:
            ops[j] = c
    meta[_CUR] = cur


@register
class FlatFAT(FinalAggregator):
    name = "flatfat"

    def reset(self):
        P = 1
        while P < self.wsize:
            P *= 2
        self.P = P
        hi, lo = self._ident_ring(2 * P)
        self.state = {"tree_hi": hi, "tree_lo": lo, "meta": np.zeros(_META_SLOTS, dtype=np.int64)}

    def _kernel(self, new_hi, new_lo, due_ptr, due_n, out_hi, out_lo, ops):
        s = self.state
        _flatfat_kernel(
            self.op,
            new_hi,
            new_lo,
            due_ptr,
            due_n,
            out_hi,
            out_lo,
            ops,
            s["tree_hi"],
            s["tree_lo"],
            s["meta"],
        )

    def _answer_kernel(self, due_n, out_hi, out_lo):
        s = self.state
        return _flatfat_answer(
            self.op, due_n, out_hi, out_lo, s["tree_hi"], s["tree_lo"], s["meta"]
        )
