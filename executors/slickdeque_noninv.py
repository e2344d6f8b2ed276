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
from numba import literally, njit

from .aggregates import OP_MAX, OP_MIN, select
from .base import FinalAggregator, register

# meta: the kernels' int64 state slots
_T = 0  # absolute number of the slice being inserted
_HEAD = 1  # ring index of the deque head
_SIZE = 2  # deque nodes
_W = 3  # window length (slices)
_META_SLOTS = 4

#: ring indices are ``x & mask`` with this bit clear, so numba knows they are >= 0 and
#: drops its negative-index fix-up from every deque access
_NONNEG = 0x3FFFFFFFFFFFFFFF


@njit(cache=True)
def _beats(op, b, v):
    """The new partial ``v`` pops node value ``b`` (compiled once per op: ``op`` is a literal)."""
    if op == OP_MAX:
        return b <= v
    return b >= v


@njit(cache=True)
def _sdn_kernel(new_hi, due_ptr, due_n, out_hi, out_lo, ops, dq_pos, dq_val, meta, op):
    """Entry points: pick the op's compiled kernel (a ``literally`` argument at the Python
    boundary would be re-typed on every call, ~50 ms)."""
    if op == OP_MAX:
        return _sdn_impl(
            new_hi, due_ptr, due_n, out_hi, out_lo, ops, dq_pos, dq_val, meta, OP_MAX, 0
        )
    return _sdn_impl(new_hi, due_ptr, due_n, out_hi, out_lo, ops, dq_pos, dq_val, meta, OP_MIN, 0)


@njit(cache=True)
def _sdn_single(new_hi, due_ptr, due_n, out_hi, out_lo, ops, dq_pos, dq_val, meta, op):
    if op == OP_MAX:
        return _sdn_impl(
            new_hi, due_ptr, due_n, out_hi, out_lo, ops, dq_pos, dq_val, meta, OP_MAX, 1
        )
    return _sdn_impl(new_hi, due_ptr, due_n, out_hi, out_lo, ops, dq_pos, dq_val, meta, OP_MIN, 1)


@njit(cache=True)
def _sdn_impl(new_hi, due_ptr, due_n, out_hi, out_lo, ops, dq_pos, dq_val, meta, op, single):
    """Insert + answer; returns the number of slices done.

    ``op`` and ``single`` are compile-time literals.  ``single == 1`` is the fast path
    for a single query over the whole ring (every due window spans ``wsize`` partials,
    at most one per slice): its answer is the head (no walk) and operations are not
    counted; it stops before the first slice asking anything else.  Both variants run
    the same insert code, so state and answers are the same.

    Why the insert looks the way it does (each cut the time per slice):

    * min and max get their own machine code (``op`` literal);
    * the deque is a power-of-two ring (``& mask``, no wrap branches), ``T`` the tail's
      ring index;
    * the three tail values live in registers ``r0..r2``, and the pop test on them is
      branch-free (a prefix AND of three comparisons): whether a random partial pops
      0, 1, 2... nodes (probability 1/2, 1/4, 1/8...) cannot be predicted.  Only a
      fourth pop (1/8) falls back to a loop over the ring.  The next register window
      is picked with selects, so the loop-carried path never waits on a load (a
      four-register window measured no faster: more selects, fewer fallbacks);
    * the head's expiry slice ``E`` is kept in a register: the head expires rarely,
      so a branch beats loading its position every slice;
    * the two rare cases (head expiry, a fourth pop) share one branch, taken when either
      holds (+0-5%, within the noise of the shared VM; two separate branches were slower).
      Measured without a consistent gain: no per-slice reads of ``due_ptr``/``due_n`` when a
      vectorised pre-pass finds one window of wsize per slice (the pre-pass costs what it
      saves), ``out_lo`` zeroed by one memset, the head value in a register, (pos, val)
      interleaved in one ring, unrolling by 2, float keys mapped to ordered int64.
    """
    op = literally(op)
    single = literally(single)
    mask = (dq_pos.shape[0] - 1) & _NONNEG
    t = meta[_T]
    head = meta[_HEAD]
    size = meta[_SIZE]
    W = meta[_W]
    T = head + size - 1  # ring index of the tail
    E = dq_pos[head & mask] + W  # slice at which the head expires (if size > 0)
    r0 = dq_val[T & mask]
    r1 = dq_val[(T - 1) & mask]
    r2 = dq_val[(T - 2) & mask]
    count = ops.shape[0] > 0
    k = new_hi.shape[0]
    j = 0
    while j < k:
        q0 = due_ptr[j] & _NONNEG
        q1 = due_ptr[j + 1] & _NONNEG
        if single == 1:
            if q1 > q0 + 1 or (q1 == q0 + 1 and due_n[q0] != W):
                break
        v = new_hi[j]
        m3 = dq_val[(T - 3) & mask]
        # line 16: pop every tail node v beats; registers beyond `size` are stale (clamped
        # by min below).  Prefix AND: a node is popped only if every node after it was.
        b0 = _beats(op, r0, v)
        b1 = b0 & _beats(op, r1, v)
        b2 = b1 & _beats(op, r2, v)
        cnt = b0 + b1 + b2
        n1 = select(b1, r2, select(b0, r1, r0))
        n2 = select(b1, m3, select(b0, r2, r1))
        # one rarely taken branch for the two rare cases (separate branches measured slower)
        if (t >= E) | (cnt == 3):
            # line 13: expire the head (before the pops: it can change size)
            if t >= E and size > 0:
                head += 1
                size -= 1
                E = dq_pos[head & mask] + W
            c = min(cnt, size)
            if c == 3:  # a 4th pop or more: walk the ring, refill the registers from it
                while c < size and _beats(op, dq_val[(T - c) & mask], v):
                    c += 1
                n1 = dq_val[(T - c) & mask]
                n2 = dq_val[(T - c - 1) & mask]
        else:
            c = min(cnt, size)
        size -= c
        E = select(size == 0, t + W, E)  # v becomes the head
        # line 19
        T = T - c + 1
        dq_pos[T & mask] = t
        dq_val[T & mask] = v
        size += 1
        r0 = v
        r1 = n1
        r2 = n2
        if single == 1:
            if q1 > q0:
                out_hi[q0] = dq_val[head & mask]
                out_lo[q0] = 0  # min/max answers have lo == 0
        else:
            if count:  # one comparison per pop, plus the one that stopped (if a node was left)
                ops[j] = c + (size > 1)
            # lines 21-41: answers, one pass from the head (due n sorted descending)
            if q1 > q0:
                idx = head
                p = dq_pos[idx & mask]
                a = dq_val[idx & mask]
                prev_n = W + 1
                for q in range(q0, q1):
                    n = due_n[q]
                    if n > prev_n:  # defensive: not sorted descending, restart from the head
                        idx = head
                        p = dq_pos[idx & mask]
                        a = dq_val[idx & mask]
                    prev_n = n
                    while p <= t - n:
                        idx += 1
                        p = dq_pos[idx & mask]
                        a = dq_val[idx & mask]
                    out_hi[q] = a
                    out_lo[q] = 0
        t += 1
        j += 1
    meta[_T] = t
    meta[_HEAD] = head & mask
    meta[_SIZE] = size
    return j


@njit(cache=True)
def _sdn_answer(due_n, out_hi, out_lo, dq_pos, dq_val, ident, meta):
    """One pass from the head, as in the kernel; the last inserted slice is t - 1.  An empty
    deque (nothing inserted since reset) answers the identity; no operation is counted
    (position comparisons only)."""
    cap = dq_pos.shape[0]
    t = meta[_T] - 1
    head = meta[_HEAD]
    size = meta[_SIZE]
    i = 0
    prev_n = meta[_W] + 1
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
        out_lo[q] = 0
    return 0


@register
class SlickDequeNonInv(FinalAggregator):
    name = "slickdeque_noninv"
    requires_selective = True

    def reset(self):
        cap = 1 << int(self.wsize).bit_length()  # power of two > wsize (a deque holds <= wsize)
        meta = np.zeros(_META_SLOTS, dtype=np.int64)
        meta[_W] = self.wsize
        self.state = {
            "dq_pos": np.zeros(cap, dtype=np.int64),
            "dq_val": np.zeros(cap, dtype=self.prim.np_dtype),
            "meta": meta,
        }

    def _kernel(self, new_hi, new_lo, due_ptr, due_n, out_hi, out_lo, ops):
        s = self.state
        if not ops.shape[0]:
            done = _sdn_single(
                new_hi,
                due_ptr,
                due_n,
                out_hi,
                out_lo,
                ops,
                s["dq_pos"],
                s["dq_val"],
                s["meta"],
                self.op,
            )
            if done == new_hi.shape[0]:
                return
            new_hi, due_ptr = new_hi[done:], due_ptr[done:]
        _sdn_kernel(
            new_hi,
            due_ptr,
            due_n,
            out_hi,
            out_lo,
            ops,
            s["dq_pos"],
            s["dq_val"],
            s["meta"],
            self.op,
        )

    def _answer_kernel(self, due_n, out_hi, out_lo):
        s = self.state
        ident = self.prim.identity_arrays(1)[0][0]
        return _sdn_answer(due_n, out_hi, out_lo, s["dq_pos"], s["dq_val"], ident, s["meta"])

    def load_state_dict(self, state):
        cap = self.state["dq_pos"].shape[0]
        pos = np.asarray(state["dq_pos"])
        if pos.shape[0] != cap:
            # snapshot from the (wsize + 1)-slot ring: lay its nodes out from slot 0
            val = np.asarray(state["dq_val"])
            meta = np.array(state["meta"], dtype=np.int64)
            head, size = int(meta[_HEAD]), int(meta[_SIZE])
            idx = (head + np.arange(size)) % pos.shape[0]
            npos = np.zeros(cap, np.int64)
            nval = np.zeros(cap, val.dtype)
            npos[:size] = pos[idx]
            nval[:size] = val[idx]
            meta[_HEAD] = 0
            state = dict(state, dq_pos=npos, dq_val=nval, meta=meta)
        super().load_state_dict(state)

    def deque(self):
        """(pos, val) nodes head to tail, for inspection and the worked examples."""
        s = self.state
        head, size = int(s["meta"][_HEAD]), int(s["meta"][_SIZE])
        cap = s["dq_pos"].shape[0]
        idx = [(head + i) % cap for i in range(size)]
        return [(int(s["dq_pos"][i]), s["dq_val"][i].item()) for i in idx]
