"""Sliced mode for trees whose queries come and go (``serve``): where a stream must be cut, and
a churn tree that folds slices instead of tuples.

Why cutting at the running trees' edges is not enough under churn: a ``ChurnTree`` routes each
tuple by time to its *generations* (a change at ``T`` starts a generation that takes
``ts >= T``, the old one keeps the windows starting before ``T``) and judges a tuple older than
every running generation by the retired generation that covered its time.  A slice is handled
as one item stamped with its ``ts_max``, so it is exact only if every tuple in it is routed the
same way and judged late the same way.  Hence the cut plan (``cut_plan``):

* the edges of every running generation from its start on (its windows' starts and ends);
* every generation's start ``T`` (a slice spanning ``T_reg`` of an added query is cut there);
* below the oldest running generation, each retired generation's edges over the span it owned
  (late tuples there are judged by its windows).

Within one such slice every tuple lies in the same windows of every generation that takes it,
so, the tuples of a file arriving in time order, the watermark a tuple meets can only make it
late through the windows containing the whole slice: the slice is late (or not) exactly when
each of its tuples would be in raw mode.  ``SlicedChurnTree`` then counts a late slice as its
``count`` tuples (``late_tuples``; its values are gone: ``late`` reports ``ts_max`` and the
slice's sum per slice).  Oracle: ``tests/cluster/node/test_slice_churn.py`` (sliced = raw = brute force).
"""

from __future__ import annotations

import numpy as np

from executors.churn_tree import ChurnTree
from executors.edges import INF, NEG_INF, edge_classes
from executors.slice_input import SliceBatch, SlicedExecutionTree, slice_aggregates, slice_dtype
from executors.tree import LateTuples

#: a cut plan: ``(lo, hi, classes)`` spans; inside ``[lo, hi)`` slices end at every edge of
#: ``classes`` (residue classes ``(s, c)``) and at ``lo`` and ``hi`` themselves
CutPlan = list


def _classes(queries) -> list[tuple[int, int]]:
    return edge_classes(sorted({(q.range, q.slide) for q in queries}))


def cut_plan(tree: ChurnTree) -> CutPlan:
    """Where the next tuples of ``tree``'s stream must be cut (module docstring)."""
    plan = []
    first = min((g.t_start for g in tree.gens), default=INF)
    for g in tree.gens:
        plan.append((int(g.t_start), INF, _classes(g.tree.queries)))
    starts = [int(t) for t, _ in tree.retired]
    for i, (t, rs) in enumerate(tree.retired):
        hi = starts[i + 1] if i + 1 < len(starts) else first
        if t < hi:
            plan.append((int(t), int(hi), edge_classes(sorted(set(rs)))))
    return plan


def lineage_plan(rs_pairs, points) -> CutPlan:
    """A superset of the cut plans of trees whose queries ever had windows ``rs_pairs``
    ``(range, slide)`` and changed (or started) at ``points``: what a driver can keep without
    asking the trees (cutting finer than a tree needs is exact: it folds the pieces)."""
    plan = [(NEG_INF, INF, edge_classes(sorted(set(rs_pairs))))]
    return plan + [(int(p), INF, []) for p in sorted(set(points))]


def merge_plans(plans) -> CutPlan:
    """The union of several trees' plans (the trees on one stream share its slices)."""
    return [span for p in plans for span in p]


def _segments(plan: CutPlan, t_lo: int, t_hi: int):
    """Elementary spans ``[a, b)`` covering ``[t_lo, t_hi]``, each with its union of classes."""
    pts = sorted({x for lo, hi, _ in plan for x in (lo, hi) if NEG_INF < x < INF})
    bounds = [NEG_INF, *pts, INF]
    for a, b in zip(bounds[:-1], bounds[1:]):
        if b <= t_lo or a > t_hi:
            continue
        cls = sorted({c for lo, hi, cs in plan if lo <= a and b <= hi for c in cs})
        yield a, b, cls


def slice_file(ts, values, plan: CutPlan) -> dict[str, np.ndarray]:
    """One file's tuples (in time order) -> slice columns (``SLICE_COLUMNS``) cut by ``plan``.

    Pure numpy on the driver: a watched directory's file holds a few thousand rows, which numpy
    slices in well under a millisecond, while a Spark job per file costs tens of milliseconds of
    scheduling and moves the same rows to a Python worker anyway."""
    ts = np.asarray(ts, dtype=np.int64)
    values = np.asarray(values)
    if ts.shape[0] and np.any(np.diff(ts) < 0):
        raise ValueError("a file's tuples must be in time order to be sliced")
    parts = []
    if ts.shape[0]:
        for a, b, cls in _segments(plan, int(ts[0]), int(ts[-1])):
            i, j = np.searchsorted(ts, [a, b], side="left")
            if i == j:
                continue
            # no class: no window covers this span (outside every window), any cut is exact
            o = slice_aggregates(ts[i:j], values[i:j], cls or [(1, 0)])
            o["slice_start"] = np.maximum(o["slice_start"], a)
            o["slice_end"] = np.minimum(o["slice_end"], b)
            parts.append(o)
    if not parts:
        return slice_aggregates(ts, values, [(1, 0)])
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def check_cuts(plan: CutPlan, start: np.ndarray, end: np.ndarray) -> None:
    """Refuse (``ValueError``) slices that straddle a span boundary or an edge of the plan."""
    if not start.shape[0]:
        return
    for a, b, cls in _segments(plan, int(start.min()), int(end.max())):
        m = (end > a) & (start < b)
        if not m.any():
            continue
        if np.any(start[m] < a) or np.any(end[m] > b):
            raise ValueError(f"a slice straddles the change point or span edge {a} / {b}")
        for s, c in cls:
            nxt = start[m] + ((c - start[m]) % s)  # first edge of class (s, c) >= start
            nxt = np.where(nxt == start[m], nxt + s, nxt)
            if np.any(nxt < end[m]):
                raise ValueError(f"a slice straddles an edge of class ({s}, {c})")


class _SliceGenTree(SlicedExecutionTree):
    """A generation fed slices: the churn tree checks the cuts once for all generations."""

    def __init__(self, queries, **kw):
        super().__init__(queries, check_edges=False, **kw)


class SlicedChurnTree(ChurnTree):
    """``ChurnTree`` whose input is slices cut by its ``cut_plan`` (time windows only)."""

    gen_tree_cls = _SliceGenTree

    def process_slice_batch(
        self, sb: SliceBatch, *, ordered: bool = False, edges_checked: bool = False
    ):
        """Fold one batch of slices (in time order); answers as ``process_columns``.
        ``edges_checked``: the caller checked the cuts (a node, once for all its trees)."""
        if self.kind != "time":
            raise ValueError("sliced mode runs time windows only (count windows need positions)")
        if sb.n == 0:
            return None
        if not edges_checked:
            check_cuts(cut_plan(self), sb.start, sb.end)
        return self.process_columns(sb.ts, sb.rec, ordered=ordered, copy=sb.copy)

    def _take_late(self, g) -> None:
        lb = g.tree.slicer.late  # late slice records of this generation
        if lb.count > g.late_seen:
            ts = np.concatenate(lb.ts)[g.late_seen :]
            rec = np.concatenate(lb.values)[g.late_seen :]
            self._late_ts.append(ts)
            self._late_v.append(rec)
            self._late_count += lb.count - g.late_seen
            g.late_seen = lb.count

    def _late_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Late slices' ``ts_max`` and records (what a snapshot keeps)."""
        recs = [r for r in self._late_v if r.shape[0]]
        if not recs:
            return np.zeros(0, np.int64), np.zeros(0, slice_dtype(self._dtype() is not np.float64))
        return np.concatenate([t for t in self._late_ts if t.shape[0]]), np.concatenate(recs)

    @property
    def late(self) -> LateTuples:
        """Late slices, one item each (as ``SlicedExecutionTree.late``: the node's late offsets
        count items): ``ts`` their ``ts_max``, ``values`` their sums (float64)."""
        ts, rec = self._late_arrays()
        return LateTuples(int(rec.shape[0]), ts, rec["s"].astype(np.float64))

    @property
    def late_tuples(self) -> int:
        """The tuples in the late slices: raw mode's late count."""
        return int(self._late_arrays()[1]["c"].sum())

    def stats(self) -> dict:
        st = super().stats()
        st["late"] = self.late_tuples
        return st
