"""Loading a node's numba kernels before its first batch, outside the busy timer.

Why its own module: the first batch a tree sees would otherwise carry seconds of numba
compiling (or cache loading) in the node's ``busy_s``, and the busy time would then measure
the compiler instead of the trees' work.  Which kernel sets a node has loaded, which ones a
batch needs, and how throwaway trees on synthetic data load them, is one concern apart from
routing columns to trees; ``NodeCore.warmup`` adds the seconds to the
``compile_s`` counter.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import numpy as np
import pyarrow as pa

from cluster.answers.blocks import empty_late
from executors import ExecutionTree, answer_order
from executors.slice_input import SlicedExecutionTree, slice_aggregates


def prims_of(queries) -> set:
    """The aggregation primitives ``queries`` need (part of a kernel set's key)."""
    return {p for q in queries for p in q.aggregate.primitives(True)}


class KernelWarmup:
    """What one node has warmed: (tree id, value kind) pairs and the kernel sets behind them
    (technique, slicing, count_ops, value kind, primitives), so a set is loaded once."""

    def __init__(self, input_mode: str):
        self.input_mode = input_mode
        self.tids: set[tuple[str, str]] = set()
        self.keys: set[tuple] = set()

    def needed(
        self, batch, by_stream: dict[str, list[str]], only: Iterable[str] | None
    ) -> list[tuple[str, str]]:
        """The (tree id, kind) pairs ``batch`` reaches that are not warm yet: value kind
        ``"i"`` or ``"f"`` by the stream column's type (slices: always ``"i"``)."""
        names = batch.schema.names
        todo = []
        for s, tids in by_stream.items():
            if self.input_mode == "tuples" and s not in names:
                continue
            kind = "i"
            if self.input_mode == "tuples" and pa.types.is_floating(batch.schema.field(s).type):
                kind = "f"
            todo += [
                (tid, kind)
                for tid in tids
                if (tid, kind) not in self.tids and (only is None or tid in only)
            ]
        return todo

    def warm(
        self,
        trees: dict,
        techniques: dict[str, str],
        which: Iterable[tuple[str, str]],
        on_step=None,
    ) -> float:
        """Run throwaway copies of the ``which`` trees on a little synthetic data (and
        pyarrow's lazy imports, once); a kernel set already loaded is skipped.  The hosted
        trees are untouched.  Returns the seconds spent.  ``on_step()``: called after each
        tree (the health check's sign of progress, ``cluster.node.liveness``)."""
        t0 = time.perf_counter()
        if not self.keys:
            empty_late()  # pyarrow imports pandas on the first table built (~0.3 s)
            answer_order.warm()  # the kernel grouping answers by query (node.answers)
        tree_cls = SlicedExecutionTree if self.input_mode == "slices" else ExecutionTree
        for tid, kind in which:
            if on_step is not None:
                on_step()
            self.tids.add((tid, kind))
            t = trees[tid]
            key = (
                techniques[tid],
                t.slicing,
                t.count_ops,
                kind,
                tuple(sorted(str(p) for p in prims_of(t.queries))),
            )
            if key in self.keys:
                continue
            self.keys.add(key)
            qs = [q.as_dict() for q in t.queries]
            tmp = tree_cls(qs, technique=techniques[tid], count_ops=t.count_ops, slicing=t.slicing)
            mr = max(q["range"] for q in qs)
            ts = np.arange(0, 3 * mr, max(1, mr // 32), dtype=np.int64)
            v = (ts % 7).astype(np.float64 if kind == "f" else np.int64)
            if self.input_mode == "slices":
                tmp.process_slices(slice_aggregates(ts, v, tmp.slicer.classes))
            else:
                tmp.process(ts, v)
            tmp.flush()
        return time.perf_counter() - t0
