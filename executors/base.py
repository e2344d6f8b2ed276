"""The one small interface every final-aggregation technique implements.

A final aggregator owns the partial aggregates ("partials", one per slice) of one
*primitive* (see ``aggregates.Primitive``) of one execution tree.  It is driven in
batches, because the per-slice work runs in a compiled numba kernel and per-slice
Python would dominate otherwise:

``run(new_hi, new_lo, due_ptr, due_n)``
    insert k new partials in stream order; after inserting partial j, answer the
    windows due at the end of slice j: ``due_n[due_ptr[j]:due_ptr[j+1]]`` gives, for
    each due window, the number of most recent partials it spans (``n`` <= ``wsize``).
    Within one slice the due entries are sorted by ``n`` descending (SlickDeque
    Non-Inv's single pass over its deque relies on this).  Returns the answers as
    (hi, lo) arrays aligned with ``due_n`` and, if asked, the exact number of
    combine/inverse operations spent per slice.

Eviction is implicit: a partial older than ``wsize`` slices can no longer be asked
for, so every technique forgets it (ring overwrite, deque pop, TwoStacks evict...).

``answer(due_n)``
    answer windows of the ``n`` most recent partials from the current state, without
    inserting anything (sorted by ``n`` descending).  Cutty slicing needs it: a window
    that ends inside the open slice combines the complete slices inserted so far with
    the open slice's partial, between two inserts.  Same operation counting as ``run``.

``reset()`` puts the aggregator in the state "every earlier partial is the
identity"; the tree uses it to fast-forward over long empty stretches of the stream.

State lives in numpy arrays only (``state_dict`` / ``load_state_dict``), so a tree
snapshot is a handful of arrays: no pickling of code.

Operation counting convention: every call of combine (and inverse) that the
published algorithm makes is counted, including calls whose operand is the
identity (the dissertation counts Panes this way: 4 Max operations per step in
Example 3 even before the window fills).  Position/pointer arithmetic and deque
index comparisons are not aggregate operations and are not counted.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import ClassVar

import numpy as np
from numba import njit

from .aggregates import Primitive

_EMPTY_OPS = np.zeros(0, dtype=np.int64)


@njit(cache=True)
def _due_range(due_n):
    """(min, max) of ``due_n`` in one pass (numpy's min + max + ``!=`` were three, ~0.5 ns
    per slice of the single-query benchmark)."""
    lo = due_n[0]
    hi = due_n[0]
    for q in range(1, due_n.shape[0]):
        x = due_n[q]
        lo = min(lo, x)
        hi = max(hi, x)
    return lo, hi


class FinalAggregator(ABC):
    """Base class: holds the primitive, the window size and the state arrays."""

    name: ClassVar[str] = "?"
    #: supports due windows with different n (several ranges over the same slices)
    multi_query: ClassVar[bool] = True
    requires_inverse: ClassVar[bool] = False
    requires_selective: ClassVar[bool] = False

    def __init__(self, prim: Primitive, wsize: int, known_ns=None):
        if wsize < 1:
            raise ValueError(f"wsize must be >= 1, got {wsize}")
        if self.requires_inverse and not prim.invertible:
            raise ValueError(f"{self.name} needs an invertible primitive, got {prim}")
        if self.requires_selective and not prim.selective:
            raise ValueError(f"{self.name} needs a selective (min/max) primitive, got {prim}")
        self.prim = prim
        self.op = prim.op
        self.wsize = int(wsize)
        self.known_ns = sorted({int(n) for n in known_ns}) if known_ns else []
        self.state: dict[str, np.ndarray] = {}
        self.reset()

    # -- to implement ---------------------------------------------------------
    @abstractmethod
    def reset(self) -> None:
        """(Re)allocate state meaning 'all earlier partials are the identity'."""

    @abstractmethod
    def _kernel(self, new_hi, new_lo, due_ptr, due_n, out_hi, out_lo, ops) -> None:
        """Call the compiled kernel on self.state."""

    # -- shared ---------------------------------------------------------------
    def check_due(self, due_n: np.ndarray) -> None:
        if not due_n.shape[0]:
            return
        lo, hi = _due_range(due_n)
        if hi > self.wsize or lo < 1:
            raise ValueError(
                f"{self.name}: window spans {lo}..{hi} partials, outside 1..wsize={self.wsize}"
            )
        if not self.multi_query and (lo != self.wsize or hi != self.wsize):
            raise ValueError(
                f"{self.name} answers a single window length ({self.wsize} partials) "
                f"and cannot answer windows of {sorted(set(due_n.tolist()))} partials"
            )

    def run(self, new_hi, new_lo, due_ptr, due_n, count_ops: bool = False, out=None):
        """Insert and answer (see the module docstring).  ``out``: optional (hi, lo) arrays of
        the primitive's dtype with room for ``len(due_n)`` answers, written (every kernel
        writes both) and returned as views; a caller that reuses them across calls saves
        the page faults of fresh arrays (~2 us per 4 KiB page on a VM, more than the
        kernels' work per slice)."""
        new_hi = np.ascontiguousarray(new_hi, dtype=self.prim.np_dtype)
        new_lo = np.ascontiguousarray(new_lo, dtype=self.prim.np_dtype)
        due_ptr = np.ascontiguousarray(due_ptr, dtype=np.int64)
        due_n = np.ascontiguousarray(due_n, dtype=np.int64)
        if due_ptr.shape[0] != new_hi.shape[0] + 1:
            raise ValueError("due_ptr must have one entry more than the new partials")
        self.check_due(due_n)
        m = due_n.shape[0]
        if out is None:
            out_hi = np.empty(m, dtype=self.prim.np_dtype)
            out_lo = np.zeros(m, dtype=self.prim.np_dtype)
        else:
            out_hi, out_lo = out
            for a in (out_hi, out_lo):
                if (
                    not isinstance(a, np.ndarray)
                    or a.dtype != self.prim.np_dtype
                    or a.ndim != 1
                    or a.shape[0] < m
                    or not a.flags.c_contiguous
                ):
                    raise ValueError(
                        f"out: two contiguous {self.prim.np_dtype} arrays of length >= {m} expected"
                    )
            out_hi = out_hi[:m]
            out_lo = out_lo[:m]
        ops = np.zeros(new_hi.shape[0], dtype=np.int64) if count_ops else _EMPTY_OPS
        if new_hi.shape[0]:
            self._kernel(new_hi, new_lo, due_ptr, due_n, out_hi, out_lo, ops)
        return out_hi, out_lo, (ops if count_ops else None)

    def answer(self, due_n, count_ops: bool = False):
        """Answers (hi, lo) for windows of ``due_n`` most recent partials, from the current
        state (nothing inserted); with ``count_ops`` also the number of operations spent."""
        due_n = np.ascontiguousarray(due_n, dtype=np.int64)
        self.check_due(due_n)
        m = due_n.shape[0]
        out_hi = np.empty(m, dtype=self.prim.np_dtype)
        out_lo = np.zeros(m, dtype=self.prim.np_dtype)
        ops = int(self._answer_kernel(due_n, out_hi, out_lo)) if m else 0
        return out_hi, out_lo, (ops if count_ops else None)

    @abstractmethod
    def _answer_kernel(self, due_n, out_hi, out_lo) -> int:
        """Answer from the current state (compiled); returns the operations spent."""

    def state_dict(self) -> dict[str, np.ndarray]:
        return {k: v.copy() for k, v in self.state.items()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        missing = set(self.state) - set(state)
        if missing:
            raise ValueError(f"{self.name}: snapshot lacks state arrays {sorted(missing)}")
        for k in self.state:
            self.state[k] = np.array(state[k], dtype=self.state[k].dtype, copy=True)

    def memory_bytes(self) -> int:
        return int(sum(v.nbytes for v in self.state.values()))

    def _ident_ring(self, n: int):
        return self.prim.identity_arrays(n)


#: The executor of every final-aggregation technique, by name: the one registry the execution
#: tree, node actors and benchmarks read.  A priced technique registers here under the name of
#: its pricing (``placement.cost.TECHNIQUES``); executor-only ones (``panes_inv``, ``twostacks``,
#: ``daba``, ``bint``) only here.  The class flags say what it runs: ``requires_inverse``,
#: ``requires_selective``, ``multi_query``.
TECHNIQUES: dict[str, type[FinalAggregator]] = {}
#: Families: one name standing for a member technique per primitive (``slickdeque``: Inv for
#: sums, Non-Inv for min/max); a family runs any aggregate.
FAMILIES: dict[str, Callable[[Primitive], str]] = {}


def register(cls: type[FinalAggregator]) -> type[FinalAggregator]:
    """Class decorator: make ``cls`` the executor of technique ``cls.name``."""
    TECHNIQUES[cls.name] = cls
    return cls


def register_family(name: str, member: Callable[[Primitive], str]) -> None:
    FAMILIES[name] = member


def unregister(name: str) -> None:
    TECHNIQUES.pop(name, None)
    FAMILIES.pop(name, None)


def extensions() -> dict[str, type[FinalAggregator]]:
    """Executors registered from outside this package (a plugin, a test): a process that runs
    trees elsewhere (a node actor) needs them shipped along (``cluster.node.actor``)."""
    return {n: c for n, c in TECHNIQUES.items() if not c.__module__.startswith("executors.")}


def technique_class(technique: str, prim: Primitive) -> type[FinalAggregator]:
    """The executor class that runs ``prim`` for ``technique`` (a family picks its member)."""
    member = FAMILIES.get(technique)
    return TECHNIQUES[member(prim) if member is not None else technique]
