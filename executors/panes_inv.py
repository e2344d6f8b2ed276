"""Panes (Inv) / subtract-on-evict: one running aggregate, + new, - expiring.

Exactly 2 operations per slice (one combine, one inverse).  Single window length
only (the dissertation: "does not allow MQ processing"); SlickDeque Inv is its
multi-query generalisation.  Float drift is guarded by the double-double sums of
``aggregates`` (int64 sums are exact).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .aggregates import combine2, inverse2
from .base import FinalAggregator, register

# meta: the kernels' int64 state slots
_CUR = 0  # ring position of the next slice
_META_SLOTS = 1


@njit(cache=True)
def _panes_inv_kernel(
    op, new_hi, new_lo, due_ptr, due_n, out_hi, out_lo, ops, ring_hi, ring_lo, run_hi, run_lo, meta
):
    W = ring_hi.shape[0]
    cur = meta[_CUR]
    rh = run_hi[0]
    rl = run_lo[0]
    count = ops.shape[0] > 0
    for j in range(new_hi.shape[0]):
        rh, rl = combine2(op, rh, rl, new_hi[j], new_lo[j])
        rh, rl = inverse2(rh, rl, ring_hi[cur], ring_lo[cur])
        ring_hi[cur] = new_hi[j]
        ring_lo[cur] = new_lo[j]
        for q in range(due_ptr[j], due_ptr[j + 1]):
            out_hi[q] = rh
            out_lo[q] = rl
        if count:
            ops[j] = 2
        cur += 1
        if cur == W:
            cur = 0
    meta[_CUR] = cur
    run_hi[0] = rh
    run_lo[0] = rl


@register
class PanesInv(FinalAggregator):
    name = "panes_inv"
    multi_query = False
    requires_inverse = True

    def reset(self):
        hi, lo = self._ident_ring(self.wsize)
        rh, rl = self._ident_ring(1)
        self.state = {
            "ring_hi": hi,
            "ring_lo": lo,
            "run_hi": rh,
            "run_lo": rl,
            "meta": np.zeros(_META_SLOTS, dtype=np.int64),
        }

    def _kernel(self, new_hi, new_lo, due_ptr, due_n, out_hi, out_lo, ops):
        s = self.state
        _panes_inv_kernel(
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
            s["run_hi"],
            s["run_lo"],
            s["meta"],
        )

    def _answer_kernel(self, due_n, out_hi, out_lo):
        out_hi[:] = self.state["run_hi"][0]
        out_lo[:] = self.state["run_lo"][0]
        return 0
