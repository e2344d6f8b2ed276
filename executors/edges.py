"""Edges of a tree's queries at run time: residue classes, the edges in a span, the window that
first covers a position, and the slices per window (docs/DESIGN.md s. 1-2).

Edges of a query ``(r, s)`` are the positions ``t`` with ``t mod s == 0`` (starts) or
``t mod s == r mod s`` (ends): the residue classes ``(s, 0)`` and ``(s, r mod s)`` (Pairs). The
period of the pattern is ``placement.slicing.composite_slide``.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from placement.slicing import window_lengths as _shared_window_lengths

#: int64 sentinels of an open end (no window end, every tuple): the executors' one INF/NEG_INF
INF = np.iinfo(np.int64).max
NEG_INF = np.iinfo(np.int64).min
#: max work (edges of one composite slide + windows in it) for the exact window lengths
EXACT_SCAN_LIMIT = 4_000_000


def edge_classes(rs_pairs) -> list[tuple[int, int]]:
    """Residue classes (s, c) of the union of the queries' edges (Pairs)."""
    out = set()
    for r, s in rs_pairs:
        out.add((s, 0))
        out.add((s, r % s))
    return sorted(out)


def edges_between(classes, a: int, b: int) -> np.ndarray:
    """Sorted distinct edges t with a <= t < b (one arange per residue class).

    The union is taken with a bitmap over [a, b) when that span is short compared
    with the number of generated edges (the common case), else by sorting.
    """
    if b <= a:
        return np.zeros(0, dtype=np.int64)
    parts = []
    for s, c in classes:
        first = a + ((c - a) % s)
        if first < b:
            parts.append(np.arange(first, b, s, dtype=np.int64))
    if not parts:
        return np.zeros(0, dtype=np.int64)
    if len(parts) == 1:
        return parts[0]
    allp = np.concatenate(parts)
    span = b - a
    if span <= 8 * allp.shape[0] + 1024:
        mark = np.zeros(span, dtype=np.bool_)
        mark[allp - a] = True
        return np.flatnonzero(mark).astype(np.int64) + a
    allp.sort(kind="stable")  # timsort: the concatenated aranges are sorted runs
    keep = np.ones(allp.shape[0], dtype=np.bool_)
    keep[1:] = allp[1:] != allp[:-1]
    return allp[keep]


def floor_edge(classes, t: int) -> int:
    """Largest edge <= t."""
    return max(t - ((t - c) % s) for s, c in classes)


def next_edge(classes, t: int) -> int:
    """Smallest edge > t."""
    return min(t + 1 + ((c - t - 1) % s) for s, c in classes)


def edge_rate_bound(classes) -> float:
    """Upper bound of edges per time unit (sum over classes of 1/s)."""
    return sum(1.0 / s for s, _ in classes)


def estimate_edges(classes, a: int, b: int) -> int:
    """Upper bound of the number of edges in [a, b)."""
    if b <= a:
        return 0
    return sum((b - a) // s + 1 for s, _ in classes)


def first_cover_end(rs_pairs, t: np.ndarray) -> np.ndarray:
    """Earliest end of a window containing t (over all queries); INF if none."""
    t = np.asarray(t, dtype=np.int64)
    out = np.full(t.shape, INF, dtype=np.int64)
    for r, s in rs_pairs:
        start = ((t - r) // s + 1) * s
        end = start + r
        cov = start <= t
        np.minimum(out, np.where(cov, end, INF), out=out)
    return out


def cover_slide(rs_pairs) -> int | None:
    """The smallest slide of a query with ``r >= s``, or None if there is none.

    Such a query's windows cover every position, and the earliest of its windows containing
    ``t`` ends in ``(t, t + s]``: so with it no tuple is outside every window, and
    ``first_cover_end(t) <= t + cover_slide``.  The slicer uses both to skip the per-tuple and
    per-slice cover computation where its outcome is known."""
    ss = [s for r, s in rs_pairs if r >= s]
    return min(ss) if ss else None


def window_lengths(rs_pairs, classes, slicing: str = "pairs"):
    """Number of slices ("partials") per window, per distinct (r, s).

    Returns ``(wsize, {(r, s): sorted distinct n (a tuple)}, exact)``.  The exact set comes from
    ``placement.slicing.window_lengths`` (shared with the cost model, so the model's Omega
    and the executor's running aggregates agree); it scans one composite slide in
    O(edges + windows) and is exact when that work is at most EXACT_SCAN_LIMIT.
    Otherwise an upper bound (edges of each class in a span of r) and no distinct
    lengths: SlickDeque Inv then registers lengths lazily.  ``classes`` are the
    classes that cut the slices (Pairs: starts and ends; Cutty: starts only), used for
    the bound.  Under Cutty n counts the complete slices before a window's end (the open
    slice's partial is added apart) and can be 0; ``wsize`` is at least 1.
    """
    wsize, lengths, exact = _lengths(
        tuple(map(tuple, rs_pairs)), tuple(map(tuple, classes)), slicing
    )
    # the caller's own dict (SlickDeque Inv registers lengths in an inexact one's lists);
    # the exact tuples are shared with the cache
    return wsize, {k: v if exact else [] for k, v in lengths.items()}, exact


@lru_cache(maxsize=512)
def _lengths(rs: tuple, classes: tuple, slicing: str):
    """``window_lengths`` of a window set, kept: every generation of a churn tree (a query
    added to a running tree) has the window set of the one before when the query's window was
    there already; the exact scan took ~8 ms a tree of 166 windows, and the bound of a set too
    large to scan is made again otherwise too."""
    ns = _shared_window_lengths(list(rs), slicing, EXACT_SCAN_LIMIT)
    if ns is not None:
        return max(1, max(max(v) for v in ns.values())), ns, True
    bounds = dict(zip(rs, length_bounds(rs, classes)))
    return max(1, max(bounds.values())), bounds, False


def length_bounds(rs_pairs, classes, cells: int = 1 << 20) -> list[int]:
    """Per window ``(r, s)``: ``min(r, sum over the classes (s2, o) of ceil(r / s2))``, at most
    that many edges fall in a span of ``r``.  In numpy over the distinct class slides, windows
    in blocks (a Python double loop took ~25 ms a churn generation of 500 windows and 2,000
    classes, and a tree changes a generation per command); ``cells``: numbers held at once."""
    r = np.array([int(r) for r, _ in rs_pairs], dtype=np.int64)
    slides, counts = np.unique(
        np.array([int(c[0]) for c in classes], dtype=np.int64), return_counts=True
    )
    out = np.empty(len(r), dtype=np.int64)
    step = max(1, cells // max(1, len(slides)))
    for i in range(0, len(r), step):
        block = r[i : i + step, None]
        out[i : i + step] = ((-(-block // slides)) * counts).sum(axis=1)
    return np.minimum(r, out).tolist()


def pairs_partials(r: int, s: int) -> int:
    """Partials per window of a lone query under Pairs (dissertation Table 1)."""
    return r // s if r % s == 0 else 2 * (r // s) + 1
