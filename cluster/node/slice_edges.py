"""Sliced mode at a node: a slice batch must not straddle an edge of any tree it feeds.

Why once per batch: the trees on a stream share one batch of slices, so the batch is checked
against the union of their edges (a slice inside that union's cells is inside every tree's)
instead of once per tree; the union is cached per set of trees until the trees change.
"""

from __future__ import annotations

from cluster.node.slice_churn import SlicedChurnTree, check_cuts, cut_plan, merge_plans
from executors.slice_input import SliceBatch, check_slice_edges
from executors.slicing import edge_classes


class SliceEdgeCheck:
    """The edge check of one node's slice batches, with the union of edges cached."""

    def __init__(self, node_id: str):
        self.node_id = node_id
        self.union_classes: dict[tuple, list] = {}  # tree ids -> union of their edges

    def check(self, sb: SliceBatch, stream: str, trees: dict) -> None:
        """Refuse ``sb`` (``ValueError``) if a slice crosses an edge of ``trees`` (by id);
        trees whose queries come and go are checked against their cut plans (their edges
        change with their generations, so nothing is cached for them)."""
        churn = [t for t in trees.values() if isinstance(t, SlicedChurnTree)]
        if churn:
            check_cuts(merge_plans(cut_plan(t) for t in churn), sb.start, sb.end)
            trees = {k: t for k, t in trees.items() if not isinstance(t, SlicedChurnTree)}
            if not trees:
                return
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
