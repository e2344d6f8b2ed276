"""TwoStacks (Tangwongsan et al.): a FIFO window as two stacks with running aggregates.

Insert pushes (val, agg_below (+) val) on the back stack (1 combine); evict pops
the front stack, first flipping the whole back stack onto it when it is empty
(one combine per moved element); a query combines the two stack tops (1 combine).
Amortised 3 operations per slice, worst case n.  Single window length (one
distinct (range, slide) per tree): the window is the last ``wsize`` partials.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .aggregates import combine2
from .base import FinalAggregator, register

# meta: the kernels' int64 state slots
_FS = 0  # front stack size
_BS = 1  # back stack size
_W = 2  # window length (slices)
_META_SLOTS = 3


@njit(cache=True)
def twostacks_kernel(
    op,
    new_hi,
    new_lo,
    due_ptr,
    due_n,
    out_hi,
    out_lo,
    ops,
    f_val_hi,
    f_val_lo,
    f_agg_hi,
    f_agg_lo,
    b_val_hi,
    b_val_lo,
    b_agg_hi,
    b_agg_lo,
    ident_hi,
    ident_lo,
    meta,
):
    W = meta[_W]
    fs = meta[_FS]
    bs = meta[_BS]
    ih = ident_hi[0]
    il = ident_lo[0]
    count = ops.shape[0] > 0
    for j in range(new_hi.shape[0]):
        c = 0
        # insert: agg = aggB (+) v
        if bs > 0:
            ph = b_agg_hi[bs - 1]
            pl = b_agg_lo[bs - 1]
        else:
            ph = ih
            pl = il
        h, l = combine2(op, ph, pl, new_hi[j], new_lo[j])
        c += 1
        b_val_hi[bs] = new_hi[j]
        b_val_lo[bs] = new_lo[j]
        b_agg_hi[bs] = h
        b_agg_lo[bs] = l
        bs += 1
        # evict while the window is too long
        if fs + bs > W:
            if fs == 0:
                # flip: move the back stack onto the front, newest first
                ah = ih
                al = il
                for i in range(bs - 1, -1, -1):
                    ah, al = combine2(op, b_val_hi[i], b_val_lo[i], ah, al)
                    c += 1
                    f_val_hi[fs] = b_val_hi[i]
                    f_val_lo[fs] = b_val_lo[i]
                    f_agg_hi[fs] = ah
                    f_agg_lo[fs] = al
                    fs += 1
                bs = 0
            fs -= 1
        # query: aggF (+) aggB
        if fs > 0:
            fh = f_agg_hi[fs - 1]
            fl = f_agg_lo[fs - 1]
        else:
            fh = ih
            fl = il
        if bs > 0:
            bh = b_agg_hi[bs - 1]
            bl = b_agg_lo[bs - 1]
        else:
            bh = ih
            bl = il
        if due_ptr[j + 1] > due_ptr[j]:
            ah, al = combine2(op, fh, fl, bh, bl)
            c += 1
            for q in range(due_ptr[j], due_ptr[j + 1]):
                out_hi[q] = ah
                out_lo[q] = al
        if count:
            ops[j] = c
    meta[_FS] = fs
    meta[_BS] = bs


@njit(cache=True)
def _twostacks_answer(
    op, out_hi, out_lo, f_agg_hi, f_agg_lo, b_agg_hi, b_agg_lo, ident_hi, ident_lo, meta
):
    """The query alone: aggF (+) aggB (1 combine)."""
    fs = meta[_FS]
    bs = meta[_BS]
    fh, fl = (f_agg_hi[fs - 1], f_agg_lo[fs - 1]) if fs > 0 else (ident_hi[0], ident_lo[0])
    bh, bl = (b_agg_hi[bs - 1], b_agg_lo[bs - 1]) if bs > 0 else (ident_hi[0], ident_lo[0])
    ah, al = combine2(op, fh, fl, bh, bl)
    out_hi[:] = ah
    out_lo[:] = al
    return 1


@register
class TwoStacks(FinalAggregator):
    name = "twostacks"
    multi_query = False

    def reset(self):
        W = self.wsize + 1
        arrs = {}
        for k in ("f_val", "f_agg", "b_val", "b_agg"):
            arrs[k + "_hi"], arrs[k + "_lo"] = self._ident_ring(W)
        arrs["ident_hi"], arrs["ident_lo"] = self._ident_ring(1)
        arrs["meta"] = np.zeros(_META_SLOTS, dtype=np.int64)
        arrs["meta"][_W] = self.wsize
        self.state = arrs

    def _kernel(self, new_hi, new_lo, due_ptr, due_n, out_hi, out_lo, ops):
        s = self.state
        twostacks_kernel(
            self.op,
            new_hi,
            new_lo,
            due_ptr,
            due_n,
            out_hi,
            out_lo,
            ops,
            s["f_val_hi"],
            s["f_val_lo"],
            s["f_agg_hi"],
            s["f_agg_lo"],
            s["b_val_hi"],
            s["b_val_lo"],
            s["b_agg_hi"],
            s["b_agg_lo"],
            s["ident_hi"],
            s["ident_lo"],
            s["meta"],
        )

    def _answer_kernel(self, due_n, out_hi, out_lo):
        s = self.state
        return _twostacks_answer(
            self.op,
            out_hi,
            out_lo,
            s["f_agg_hi"],
            s["f_agg_lo"],
            s["b_agg_hi"],
            s["b_agg_lo"],
            s["ident_hi"],
            s["ident_lo"],
            s["meta"],
        )
