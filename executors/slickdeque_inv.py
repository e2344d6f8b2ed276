"""SlickDeque (Inv), dissertation Algorithm 2: one running aggregate per distinct range.

State: a circular array of the last ``wsize`` partials and a map
``n -> running aggregate over the last n partials`` (arrays ``key_n`` / ``key_hi`` /
``key_lo`` plus a dense lookup ``key_of_n``).  Per new partial every running
aggregate does ``ans = ans (+) new (-) partials[currPos - n]``: exactly **2
operations per distinct n per slice** (one combine, one inverse).  The cost model
prices exactly that: Omega(SlickDeque Inv) = 2 x the distinct window lengths of the
tree (``placement.slicing.window_lengths``, the same set as ``known_ns`` here), not
the dissertation's ``#unique nP_i`` (see ``placement/cost.py``;
``tests/executors/test_omega.py`` checks model = measured on random woven trees).

Window lengths known up front (``known_ns``) are registered at reset, like the
paper's preparation phase.  A length first seen at run time (possible when the
tree's edge period is too long to enumerate) is registered lazily by folding the
last n partials once (n-1 combines, counted).

Drift: int64 sums are exact; a float running sum is an unevaluated triple
``key_hi + key_lo + key_x`` updated with error-free two_sums and renormalised without
error every 64 slices, at least as exact as double-double (``aggregates``, "running
sums"); answers are rounded to double-double (hi, lo).

Speed: one registered length (a single query) takes ``_sdi_single``, which keeps the
running sum in registers for the whole batch; the arithmetic is the generic kernel's, so
both give the same bits (``tests/executors/test_kernels.py``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .aggregates import RENORM_EVERY, fold_back, run_renorm, run_slide, run_value
from .base import FinalAggregator, register

# meta: the kernels' int64 state slots
_CUR = 0  # ring position of the next slice
_NKEYS = 1  # registered window lengths (running sums)
_META_SLOTS = 2

_RMASK = RENORM_EVERY - 1
_NONNEG = 0x3FFFFFFFFFFFFFFF


@njit(cache=True)
def _sdi_kernel(
    new_hi,
    new_lo,
    due_ptr,
    due_n,
    out_hi,
    out_lo,
    ops,
    ring_hi,
    ring_lo,
    key_n,
    key_hi,
    key_lo,
    key_x,
    key_of_n,
    meta,
    op,
):
    """Any number of window lengths; running sums in (key_hi, key_lo, key_x)."""
    W = ring_hi.shape[0]
    cur = meta[_CUR]
    nkeys = meta[_NKEYS]
    count = ops.shape[0] > 0
    for j in range(new_hi.shape[0]):
        nh = new_hi[j]
        nl = new_lo[j]
        c = 0
        renorm = (cur & _RMASK) == 0
        # lines 19-25: update every running answer (one combine + one inverse each)
        for k in range(nkeys):
            start = cur - key_n[k]
            if start < 0:
                start += W
            S, C, D = run_slide(
                key_hi[k], key_lo[k], key_x[k], nh, nl, ring_hi[start], ring_lo[start]
            )
            if renorm:
                S, C, D = run_renorm(S, C, D)
            key_hi[k] = S
            key_lo[k] = C
            key_x[k] = D
        c += 2 * nkeys
        # lines 26-29: send the answers due now
        for q in range(due_ptr[j], due_ptr[j + 1]):
            n = due_n[q]
            k = key_of_n[n]
            if k < 0:
                # lazy registration of a new range: fold the last n partials once
                ah, al = fold_back(op, ring_hi, ring_lo, cur, n, nh, nl)
                c += n - 1
                k = nkeys
                key_n[k] = n
                key_hi[k] = ah
                key_lo[k] = al
                key_x[k] = 0
                key_of_n[n] = k
                nkeys += 1
            out_hi[q], out_lo[q] = run_value(key_hi[k], key_lo[k], key_x[k])
        # lines 30-34
        ring_hi[cur] = nh
        ring_lo[cur] = nl
        cur += 1
        if cur == W:
            cur = 0
        if count:
            ops[j] = c
    meta[_CUR] = cur
    meta[_NKEYS] = nkeys


@njit(cache=True)
def _sdi_single(
    new_hi,
    new_lo,
    due_ptr,
    due_n,
    out_hi,
    out_lo,
    ops,
    ring_hi,
    ring_lo,
    key_n,
    key_hi,
    key_lo,
    key_x,
    meta,
):
    """Fast path for exactly one registered length n (a single query): the running sum
    stays in registers for the whole batch instead of a store/load per slice, and the
    evicted slot is found without the key loop.  The arithmetic is ``_sdi_kernel``'s,
    operation for operation (same answers, bit for bit).  Stops before the first slice
    asking for anything but one window of n partials; returns the number of slices done.
    (Indices are masked with ``_NONNEG``, a no-op that lets numba drop its negative-index
    fix-ups.)"""
    W = ring_hi.shape[0]
    cur = meta[_CUR]
    n = key_n[0]
    S = key_hi[0]
    C = key_lo[0]
    D = key_x[0]
    count = ops.shape[0] > 0
    k = new_hi.shape[0]
    j = 0
    while j < k:
        q0 = due_ptr[j] & _NONNEG
        q1 = due_ptr[j + 1] & _NONNEG
        if q1 > q0 + 1 or (q1 == q0 + 1 and due_n[q0] != n):
            break
        nh = new_hi[j]
        nl = new_lo[j]
        start = cur - n
        if start < 0:
            start += W
        start &= _NONNEG
        S, C, D = run_slide(S, C, D, nh, nl, ring_hi[start], ring_lo[start])
        if (cur & _RMASK) == 0:
            S, C, D = run_renorm(S, C, D)
        if q1 > q0:
            out_hi[q0], out_lo[q0] = run_value(S, C, D)
        ring_hi[cur] = nh
        ring_lo[cur] = nl
        cur += 1
        if cur == W:
            cur = 0
        cur &= _NONNEG
        if count:
            ops[j] = 2
        j += 1
    key_hi[0] = S
    key_lo[0] = C
    key_x[0] = D
    meta[_CUR] = cur
    return j


@njit(cache=True)
def _any_unknown(key_of_n, due_n):
    for q in range(due_n.shape[0]):
        if key_of_n[due_n[q]] < 0:
            return True
    return False


@njit(cache=True)
def _sdi_answer(
    op, due_n, out_hi, out_lo, ring_hi, ring_lo, key_n, key_hi, key_lo, key_x, key_of_n, meta
):
    W = ring_hi.shape[0]
    last = meta[_CUR] - 1
    if last < 0:
        last += W
    nkeys = meta[_NKEYS]
    c = 0
    for q in range(due_n.shape[0]):
        n = due_n[q]
        k = key_of_n[n]
        if k < 0:  # lazy registration, as in the kernel
            ah, al = fold_back(op, ring_hi, ring_lo, last, n, ring_hi[last], ring_lo[last])
            c += n - 1
            k = nkeys
            key_n[k] = n
            key_hi[k] = ah
            key_lo[k] = al
            key_x[k] = 0
            key_of_n[n] = k
            nkeys += 1
        out_hi[q], out_lo[q] = run_value(key_hi[k], key_lo[k], key_x[k])
    meta[_NKEYS] = nkeys
    return c


@register
class SlickDequeInv(FinalAggregator):
    name = "slickdeque_inv"
    requires_inverse = True

    def reset(self):
        W = self.wsize
        hi, lo = self._ident_ring(W)
        ns = [n for n in self.known_ns if 1 <= n <= W]
        cap = max(1, len(ns))  # grown on demand by _kernel when a new length shows up
        kh, kl = self._ident_ring(cap)
        key_n = np.zeros(cap, dtype=np.int64)
        key_of_n = np.full(W + 1, -1, dtype=np.int64)
        for i, n in enumerate(ns):
            key_n[i] = n
            key_of_n[n] = i
        meta = np.zeros(_META_SLOTS, dtype=np.int64)
        meta[_NKEYS] = len(ns)
        # a running sum is the unevaluated triple key_hi + key_lo + key_x (aggregates.py)
        self.state = {
            "ring_hi": hi,
            "ring_lo": lo,
            "key_n": key_n,
            "key_hi": kh,
            "key_lo": kl,
            "key_x": np.zeros_like(kl),
            "key_of_n": key_of_n,
            "meta": meta,
        }

    def _grow_keys(self, due_n):
        """Room for the lengths in ``due_n`` not registered yet (lazy registration)."""
        s = self.state
        if due_n.shape[0] and _any_unknown(s["key_of_n"], due_n):
            unknown = due_n[s["key_of_n"][due_n] < 0]
            need = int(s["meta"][_NKEYS]) + int(np.unique(unknown).shape[0])
            cap = s["key_n"].shape[0]
            if need > cap:
                grow = max(need, 2 * cap) - cap
                ih, il = self._ident_ring(grow)
                s["key_n"] = np.concatenate([s["key_n"], np.zeros(grow, np.int64)])
                s["key_hi"] = np.concatenate([s["key_hi"], ih])
                s["key_lo"] = np.concatenate([s["key_lo"], il])
                s["key_x"] = np.concatenate([s["key_x"], np.zeros_like(il)])

    def _answer_kernel(self, due_n, out_hi, out_lo):
        self._grow_keys(due_n)
        s = self.state
        return _sdi_answer(
            self.op,
            due_n,
            out_hi,
            out_lo,
            s["ring_hi"],
            s["ring_lo"],
            s["key_n"],
            s["key_hi"],
            s["key_lo"],
            s["key_x"],
            s["key_of_n"],
            s["meta"],
        )

    def _kernel(self, new_hi, new_lo, due_ptr, due_n, out_hi, out_lo, ops):
        s = self.state
        done = 0
        if s["meta"][_NKEYS] == 1:
            done = _sdi_single(
                new_hi,
                new_lo,
                due_ptr,
                due_n,
                out_hi,
                out_lo,
                ops,
                s["ring_hi"],
                s["ring_lo"],
                s["key_n"],
                s["key_hi"],
                s["key_lo"],
                s["key_x"],
                s["meta"],
            )
            if done == new_hi.shape[0]:
                return
            # another length is asked from slice `done` on: the generic kernel goes on
            new_hi, new_lo, due_ptr = new_hi[done:], new_lo[done:], due_ptr[done:]
            if ops.shape[0]:
                ops = ops[done:]
        self._grow_keys(due_n[due_ptr[0] : due_ptr[-1]])
        s = self.state
        _sdi_kernel(
            new_hi,
            new_lo,
            due_ptr,
            due_n,
            out_hi,
            out_lo,
            ops,
            s["ring_hi"],
            s["ring_lo"],
            s["key_n"],
            s["key_hi"],
            s["key_lo"],
            s["key_x"],
            s["key_of_n"],
            s["meta"],
            self.op,
        )

    def load_state_dict(self, state):
        # key arrays may have grown: take their sizes from the snapshot
        state = dict(state)
        if "key_x" not in state:  # snapshot from before the triple: its sums are (hi, lo)
            state["key_x"] = np.zeros_like(np.asarray(state["key_lo"]))
        for k in ("key_n", "key_hi", "key_lo", "key_x"):
            self.state[k] = np.zeros(state[k].shape[0], dtype=self.state[k].dtype)
        super().load_state_dict(state)

    @property
    def n_keys(self) -> int:
        return int(self.state["meta"][_NKEYS])
