"""Panes (naive final aggregation): recompute every answer from the stored partials.

The baseline of the dissertation (section 2.3.2): a circular array of ``wsize``
partials initialised with the identity; a window of n partials costs n-1 combines.
Multi-query: any n <= wsize.  Kept deliberately simple: it is also the reference
the other techniques are checked against.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .aggregates import fold_back
from .base import FinalAggregator, register

# meta: the kernels' int64 state slots
_CUR = 0  # ring position of the next slice
_META_SLOTS = 1


@njit(cache=True)
def _panes_kernel(op, new_hi, new_lo, due_ptr, due_n, out_hi, out_lo, ops, ring_hi, ring_lo, meta):
    W = ring_hi.shape[0]
    cur = meta[_CUR]
    count = ops.shape[0] > 0
    for j in range(new_hi.shape[0]):
        ring_hi[cur] = new_hi[j]
        ring_lo[cur] = new_lo[j]
        c = 0
        for q in range(due_ptr[j], due_ptr[j + 1]):
            n = due_n[q]
            ah, al = fold_back(op, ring_hi, ring_lo, cur, n, ring_hi[cur], ring_lo[cur])
            c += n - 1
            out_hi[q] = ah
            out_lo[q] = al
        if count:
            ops[j] = c
        cur += 1
        if cur == W:
            cur = 0
    meta[_CUR] = cur


@njit(cache=True)
def _panes_answer(op, due_n, out_hi, out_lo, ring_hi, ring_lo, meta):
    W = ring_hi.shape[0]
    last = meta[_CUR] - 1
    if last < 0:
        last += W
    c = 0
    for q in range(due_n.shape[0]):
        n = due_n[q]
        ah, al = fold_back(op, ring_hi, ring_lo, last, n, ring_hi[last], ring_lo[last])
        c += n - 1
        out_hi[q] = ah
        out_lo[q] = al
    return c


@register
class Panes(FinalAggregator):
    name = "panes"

    def reset(self):
        hi, lo = self._ident_ring(self.wsize)
        self.state = {"ring_hi": hi, "ring_lo": lo, "meta": np.zeros(_META_SLOTS, dtype=np.int64)}

    def _kernel(self, new_hi, new_lo, due_ptr, due_n, out_hi, out_lo, ops):
        s = self.state
        _panes_kernel(
            self.op,
            new_hi,
            new_lo,
            due_ptr,
            due_n,
            out_hi,
            out_lo,
            ops,
            s["ring_hi"],
            s["ring_lo"],
            s["meta"],
        )

    def _answer_kernel(self, due_n, out_hi, out_lo):
        s = self.state
        return _panes_answer(self.op, due_n, out_hi, out_lo, s["ring_hi"], s["ring_lo"], s["meta"])
