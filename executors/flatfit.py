"""FlatFIT, dissertation Algorithm 1: a weighted jump table over a circular array.

``Partials[i]`` holds the aggregate of the slots ``i .. Pointers[i]-1`` (ring
order); answering a window walks the pointers from its start slot to ``currInd``,
then folds the visited slots back, rewriting each visited slot with the aggregate
up to ``currInd`` and pointing it at ``currInd``, so later queries jump further.
Amortised 3 operations per slice for one query (a ``wReset`` of wsize-1 operations
every wsize+1 slices), 3n for the max-multi-query case.

Deviation from the printed pseudocode: when the pointer walk visits a single slot
(the window is already one jump), the printed code would pop the stack twice; we
return that slot's partial with no operation.  Combines are written
``older (+) newer`` so the order is right for non-commutative operations too.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .aggregates import combine2
from .base import FinalAggregator, register

# meta: the kernels' int64 state slots
_CURR = 0  # the paper's currInd: slot of the next slice
_PREV = 1  # prevInd: slot of the last slice
_META_SLOTS = 2


@njit(cache=True)
def _query(op, part_hi, part_lo, pointers, stack, curr, n):
    """Lines 26-43: the window of the n slots before ``curr``; returns (h, l, ops)."""
    W = part_hi.shape[0]
    c = 0
    start = curr - n  # lines 26-29
    if start < 0:
        start += W
    sp = 0
    while True:  # lines 30-34
        stack[sp] = start
        sp += 1
        start = pointers[start]
        if start == curr:
            break
    sp -= 1
    top = stack[sp]
    ah = part_hi[top]  # line 35
    al = part_lo[top]
    while sp > 1:  # lines 36-41
        sp -= 1
        tmp = stack[sp]
        ah, al = combine2(op, part_hi[tmp], part_lo[tmp], ah, al)
        c += 1
        part_hi[tmp] = ah
        part_lo[tmp] = al
        pointers[tmp] = curr
    if sp == 1:  # lines 42-43
        tmp = stack[0]
        ah, al = combine2(op, part_hi[tmp], part_lo[tmp], ah, al)
        c += 1
    return ah, al, c


@njit(cache=True)
def _flatfit_answer(op, due_n, out_hi, out_lo, part_hi, part_lo, pointers, stack, meta):
    """Between inserts the state is the one the last insert's queries left, whose ``currInd``
    is now ``prevInd`` (``meta[_PREV]``): query with it as the end."""
    c = 0
    for q in range(due_n.shape[0]):
        ah, al, k = _query(op, part_hi, part_lo, pointers, stack, meta[_PREV], due_n[q])
        c += k
        out_hi[q] = ah
        out_lo[q] = al
    return c


@njit(cache=True)
def _flatfit_kernel(
    op, new_hi, new_lo, due_ptr, due_n, out_hi, out_lo, ops, part_hi, part_lo, pointers, stack, meta
):
    W = part_hi.shape[0]
    curr = meta[_CURR]
    prev = meta[_PREV]
    count = ops.shape[0] > 0
    for j in range(new_hi.shape[0]):
        c = 0
        part_hi[prev] = new_hi[j]  # line 22
        part_lo[prev] = new_lo[j]
        pointers[prev] = curr  # line 23
        for q in range(due_ptr[j], due_ptr[j + 1]):
            ah, al, k = _query(op, part_hi, part_lo, pointers, stack, curr, due_n[q])
            c += k
            out_hi[q] = ah
            out_lo[q] = al
        prev = curr  # lines 46-50
        curr += 1
        if curr == W:
            curr = 0
        if count:
            ops[j] = c
    meta[_CURR] = curr
    meta[_PREV] = prev


@register
class FlatFIT(FinalAggregator):
    name = "flatfit"

    def reset(self):
        W = self.wsize
        hi, lo = self._ident_ring(W)
        pointers = np.arange(1, W + 1, dtype=np.int64)
        pointers[W - 1] = 0
        meta = np.zeros(_META_SLOTS, dtype=np.int64)
        meta[_PREV] = W - 1
        self.state = {
            "part_hi": hi,
            "part_lo": lo,
            "pointers": pointers,
            "stack": np.zeros(W + 1, dtype=np.int64),
            "meta": meta,
        }

    def _kernel(self, new_hi, new_lo, due_ptr, due_n, out_hi, out_lo, ops):
        s = self.state
        _flatfit_kernel(
            self.op,
            new_hi,
            new_lo,
            due_ptr,
            due_n,
            out_hi,
            out_lo,
            ops,
            s["part_hi"],
            s["part_lo"],
            s["pointers"],
            s["stack"],
            s["meta"],
        )

    def _answer_kernel(self, due_n, out_hi, out_lo):
        s = self.state
        return _flatfit_answer(
            self.op,
            due_n,
            out_hi,
            out_lo,
            s["part_hi"],
            s["part_lo"],
            s["pointers"],
            s["stack"],
            s["meta"],
        )
