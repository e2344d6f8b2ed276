"""SlickDeque (Non-Inv), dissertation Algorithm 3: a monotone deque of partials.

For a *selective* operation (combine(a, b) is a or b: min, max) the deque holds
(pos, val) nodes whose values are strictly "better" from tail to head; a new
partial pops every tail node it beats (one comparison each, plus the one that
stops the loop), then is appended.  The head expires when it is ``wsize`` slices
old.  The answer for a window of n partials is the first node (from the head)
whose position lies inside the window; due windows of one slice arrive sorted by
n descending, so one pass over the deque answers them all.

Deviation from the printed pseudocode (kept equivalent on Example 6): positions
are absolute slice numbers instead of ``currPos`` modulo ``wSize``, which replaces
the two "Answer Loops" (boundary crossed or not) by one test ``pos > t - n``.  The
printed loops also treat ``startPos`` as inclusive, which contradicts Example 6
(step 4 answers Q1 = 5, i.e. the window is (t - n, t]); we follow the example.

Amortised < 2 comparisons per slice; worst case n (probability ~ 1/n!).
Non-selective aggregates are refused with a ValueError naming the aggregate
(``aggregates.require_selective``).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .aggregates import OP_MAX
from .base import FinalAggregator, register


@njit(cache=True)
def _sdn_kernel(op, new_hi, new_lo, due_ptr, due_n, out_hi, out_lo, ops,
                dq_pos, dq_val, meta):
    cap = dq_pos.shape[0]
    W = meta[3]
    t = meta[0]       # absolute number of the slice being inserted
    head = meta[1]    # ring index of the deque head
    size = meta[2]
    count = ops.shape[0] > 0
    is_max = op == OP_MAX
    for j in range(new_hi.shape[0]):
        v = new_hi[j]
        c = 0
        # line 13: expire the head
        if size > 0 and dq_pos[head] <= t - W:
            head += 1
            if head == cap:
                head = 0
            size -= 1
        # line 16: pop every tail node the new partial beats
        while size > 0:
            tail = head + size - 1
            if tail >= cap:
                tail -= cap
            c += 1
            b = dq_val[tail]
            if (is_max and b <= v) or ((not is_max) and b >= v):
                size -= 1
            else:
                break
        # line 19
        tail = head + size
        if tail >= cap:
            tail -= cap
        dq_pos[tail] = t
        dq_val[tail] = v
        size += 1
        # lines 21-41: answers, one pass from the head
        i = 0
        prev_n = W + 1
        for q in range(due_ptr[j], due_ptr[j + 1]):
            n = due_n[q]
            if n > prev_n:
                i = 0  # defensive: not sorted descending, restart from the head
            prev_n = n
            while True:
                idx = head + i
                if idx >= cap:
                    idx -= cap
                if dq_pos[idx] > t - n:
                    break
                i += 1
            out_hi[q] = dq_val[idx]
        if count:
            ops[j] = c
        t += 1
    meta[0] = t
    meta[1] = head
    meta[2] = size


@njit(cache=True)
def _sdn_answer(due_n, out_hi, dq_pos, dq_val, ident, meta):
    """One pass from the head, as in the kernel; the last inserted slice is t - 1.  An empty
    deque (nothing inserted since reset) answers the identity; no operation is counted
    (position comparisons only)."""
    cap = dq_pos.shape[0]
    t = meta[0] - 1
    head = meta[1]
    size = meta[2]
    i = 0
    prev_n = meta[3] + 1
    for q in range(due_n.shape[0]):
        n = due_n[q]
        if n > prev_n:
            i = 0
        prev_n = n
        while i < size:
            idx = head + i
            if idx >= cap:
                idx -= cap
            if dq_pos[idx] > t - n:
                break
            i += 1
        if i < size:
            idx = head + i
            if idx >= cap:
                idx -= cap
            out_hi[q] = dq_val[idx]
        else:
            out_hi[q] = ident
    return 0


@register
class SlickDequeNonInv(FinalAggregator):
    name = "slickdeque_noninv"
    requires_selective = True

    def reset(self):
        cap = self.wsize + 1
        self.state = {
            "dq_pos": np.zeros(cap, dtype=np.int64),
            "dq_val": np.zeros(cap, dtype=self.prim.np_dtype),
            # t, head, size, wsize
            "meta": np.array([0, 0, 0, self.wsize], dtype=np.int64),
        }

    def _kernel(self, new_hi, new_lo, due_ptr, due_n, out_hi, out_lo, ops):
        s = self.state
        _sdn_kernel(self.op, new_hi, new_lo, due_ptr, due_n, out_hi, out_lo, ops,
                    s["dq_pos"], s["dq_val"], s["meta"])

    def _answer_kernel(self, due_n, out_hi, out_lo):
        s = self.state
        ident = self.prim.identity_arrays(1)[0][0]
        return _sdn_answer(due_n, out_hi, s["dq_pos"], s["dq_val"], ident, s["meta"])

    def deque(self):
        """(pos, val) nodes head to tail, for inspection and the worked examples."""
        s = self.state
        t, head, size = (int(x) for x in s["meta"][:3])
        cap = s["dq_pos"].shape[0]
        idx = [(head + i) % cap for i in range(size)]
        return [(int(s["dq_pos"][i]), s["dq_val"][i].item()) for i in idx]
