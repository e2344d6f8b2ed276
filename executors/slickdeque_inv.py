"""SlickDeque (Inv), dissertation Algorithm 2: one running aggregate per distinct range.

State: a circular array of the last ``wsize`` partials and a map
``n -> running aggregate over the last n partials`` (arrays ``key_n`` / ``key_hi`` /
``key_lo`` plus a dense lookup ``key_of_n``).  Per new partial every running
aggregate does ``ans = ans (+) new (-) partials[currPos - n]``: exactly **2
operations per distinct n per slice** (one combine, one inverse).  The cost model
prices exactly that: Omega(SlickDeque Inv) = 2 x the distinct window lengths of the
tree (``placement.slicing.window_lengths``, the same set as ``known_ns`` here), not
the dissertation's ``#unique nP_i`` (see ``placement/cost.py``;
``tests/test_executors_omega.py`` checks model = measured on random woven trees).

Window lengths known up front (``known_ns``) are registered at reset, like the
paper's preparation phase.  A length first seen at run time (possible when the
tree's edge period is too long to enumerate) is registered lazily by folding the
last n partials once (n-1 combines, counted).

Drift: int64 sums are exact; float sums are double-double (see ``aggregates``).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .aggregates import combine2, fold_back, inverse2
from .base import FinalAggregator, register


@njit(cache=True)
def _sdi_kernel(op, new_hi, new_lo, due_ptr, due_n, out_hi, out_lo, ops,
                ring_hi, ring_lo, key_n, key_hi, key_lo, key_of_n, meta):
    W = ring_hi.shape[0]
    cur = meta[0]
    nkeys = meta[1]
    count = ops.shape[0] > 0
    for j in range(new_hi.shape[0]):
        nh = new_hi[j]
        nl = new_lo[j]
        c = 0
        # lines 19-25: update every running answer
        for k in range(nkeys):
            start = cur - key_n[k]
            if start < 0:
                start += W
            ah, al = combine2(op, key_hi[k], key_lo[k], nh, nl)
            ah, al = inverse2(ah, al, ring_hi[start], ring_lo[start])
            key_hi[k] = ah
            key_lo[k] = al
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
                key_of_n[n] = k
                nkeys += 1
            out_hi[q] = key_hi[k]
            out_lo[q] = key_lo[k]
        # lines 30-34
        ring_hi[cur] = nh
        ring_lo[cur] = nl
        cur += 1
        if cur == W:
            cur = 0
        if count:
            ops[j] = c
    meta[0] = cur
    meta[1] = nkeys


@njit(cache=True)
def _sdi_answer(op, due_n, out_hi, out_lo, ring_hi, ring_lo, key_n, key_hi, key_lo, key_of_n,
                meta):
    W = ring_hi.shape[0]
    last = meta[0] - 1
    if last < 0:
        last += W
    nkeys = meta[1]
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
            key_of_n[n] = k
            nkeys += 1
        out_hi[q] = key_hi[k]
        out_lo[q] = key_lo[k]
    meta[1] = nkeys
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
        meta = np.array([0, len(ns)], dtype=np.int64)
        self.state = {"ring_hi": hi, "ring_lo": lo, "key_n": key_n, "key_hi": kh,
                      "key_lo": kl, "key_of_n": key_of_n, "meta": meta}

    def _grow_keys(self, due_n):
        """Room for the lengths in ``due_n`` not registered yet (lazy registration)."""
        s = self.state
        if due_n.shape[0]:
            unknown = due_n[s["key_of_n"][due_n] < 0]
            if unknown.shape[0]:
                need = int(s["meta"][1]) + int(np.unique(unknown).shape[0])
                cap = s["key_n"].shape[0]
                if need > cap:
                    grow = max(need, 2 * cap) - cap
                    ih, il = self._ident_ring(grow)
                    s["key_n"] = np.concatenate([s["key_n"], np.zeros(grow, np.int64)])
                    s["key_hi"] = np.concatenate([s["key_hi"], ih])
                    s["key_lo"] = np.concatenate([s["key_lo"], il])

    def _answer_kernel(self, due_n, out_hi, out_lo):
        self._grow_keys(due_n)
        s = self.state
        return _sdi_answer(self.op, due_n, out_hi, out_lo, s["ring_hi"], s["ring_lo"],
                           s["key_n"], s["key_hi"], s["key_lo"], s["key_of_n"], s["meta"])

    def _kernel(self, new_hi, new_lo, due_ptr, due_n, out_hi, out_lo, ops):
        self._grow_keys(due_n)
        s = self.state
        _sdi_kernel(self.op, new_hi, new_lo, due_ptr, due_n, out_hi, out_lo, ops,
                    s["ring_hi"], s["ring_lo"], s["key_n"], s["key_hi"], s["key_lo"],
                    s["key_of_n"], s["meta"])

    def load_state_dict(self, state):
        # key arrays may have grown: take their sizes from the snapshot
        for k in ("key_n", "key_hi", "key_lo"):
            self.state[k] = np.zeros(state[k].shape[0], dtype=self.state[k].dtype)
        super().load_state_dict(state)

    @property
    def n_keys(self) -> int:
        return int(self.state["meta"][1])
