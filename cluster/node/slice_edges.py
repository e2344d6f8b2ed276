"""Sliced mode at a node: a slice batch must not straddle an edge of any tree it feeds.

Why once per batch: the trees on a stream share one batch of slices, so the batch is checked
against the union of their edges (a slice inside that union's cells is inside every tree's)
instead of once per tree; the union is cached per set of trees until the trees change.
"""

from __future__ import annotations

from executors.slice_input import SliceBatch, check_slice_edges
from executors.slicing import edge_classes


class SliceEdgeCheck:
    """The edge check of one node's slice batches, with the union of edges cached."""

    def __init__(self, node_id: str):
        self.node_id = node_id
        self.union_classes: dict[tuple, list] = {}  # tree ids -> union of their edges

    def check(self, sb: SliceBatch, stream: str, trees: dict) -> None:
        """Refuse ``sb`` (``ValueError``) if a slice crosses an edge of ``trees`` (by id)."""
        key = tuple(trees)
        if key not in self.union_classes:
            self.union_classes[key] = edge_classes(
                sorted({rs for t in trees.values() for rs in t.slicer.rs})
            )
        check_slice_edges(
            self.union_classes[key],
            sb.start,
            sb.end,
            sb.ts,
            f"a tree of node {self.node_id} on {stream!r}",
        )

    def reset(self) -> None:
        """The hosted trees changed."""
        self.union_classes = {}
