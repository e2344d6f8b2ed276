"""The slicer's compiled inner loops: fold sorted items into slice partials, find each
slice's tuple range, and list the windows due in a chunk of closed slices.

``fold_runs``/``fold_runs_v`` follow the combine sequence of ``aggregates.reduce_slices``
(double-double float sums): bit-identical partials, without a per-item slice index.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .aggregates import combine2


@njit(cache=True)
def fold_runs(op, bounds, hi, lo, out_hi, out_lo):
    """Partial aggregation of items sorted by slice: slice j folds items
    ``bounds[j] .. bounds[j + 1] - 1`` in order.  The same ``combine2`` sequence as
    ``aggregates.reduce_slices`` (bit-identical results) without a per-item slice index."""
    for j in range(out_hi.shape[0]):
        h = out_hi[j]
        l = out_lo[j]
        for i in range(bounds[j], bounds[j + 1]):
            h, l = combine2(op, h, l, hi[i], lo[i])
        out_hi[j] = h
        out_lo[j] = l


@njit(cache=True)
def fold_runs_v(op, bounds, v, zero, out_hi, out_lo):
    """``fold_runs`` of the lifted values ``(v[i], 0)`` without materialising the lift
    (``zero``: 0 of ``v``'s dtype, as ``Primitive.lift`` would put in ``lo``)."""
    for j in range(out_hi.shape[0]):
        h = out_hi[j]
        l = out_lo[j]
        for i in range(bounds[j], bounds[j + 1]):
            h, l = combine2(op, h, l, v[i], zero)
        out_hi[j] = h
        out_lo[j] = l


@njit(cache=True)
def gallop(a, x, lo):
    """First index >= lo with a[index] >= x (a sorted): ``searchsorted(a, x, 'left')`` for x
    at or after a[lo - 1], by exponential then binary search from ``lo`` (cheap when
    successive x are close)."""
    n = a.shape[0]
    if lo >= n or a[lo] >= x:
        return lo
    step = 1
    hi = lo + 1
    while hi < n and a[hi] < x:
        lo = hi
        step *= 2
        hi = lo + step
    if hi > n:
        hi = n
    lo += 1  # a[lo] < x: the answer lies in (lo, hi]
    while lo < hi:
        mid = (lo + hi) // 2
        if a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True)
def run_bounds(ts, ends, out):
    """``out[1:] = searchsorted(ts, ends, 'left')`` for sorted ``ts`` and ``ends`` (galloping
    from the previous bound: a slice's tuples follow the previous slice's), ``out[0] = 0``."""
    out[0] = 0
    i = 0
    for j in range(ends.shape[0]):
        i = gallop(ts, ends[j], i)
        out[j + 1] = i


@njit(cache=True)
def due_entries(ends, allv, h, g_r, g_s, first, cnt, M):
    """Per (r, s) group, its windows ending in this chunk: the index of each end in ``ends``
    and the slices it spans (``h`` + end index - index of its start in ``allv``), group after
    group (ends in order within a group); both found by galloping from the previous one."""
    due = np.empty(M, np.int64)
    nn = np.empty(M, np.int64)
    ge = np.empty(M, np.int64)
    w = 0
    for g in range(g_r.shape[0]):
        i = 0
        j = 0
        p = first[g]
        for _ in range(cnt[g]):
            i = gallop(ends, p, i)
            j = gallop(allv, p - g_r[g], j)
            due[w] = i
            nn[w] = h + i - j
            ge[w] = g
            w += 1
            p += g_s[g]
    return due, nn, ge


@njit(cache=True)
def due_rows(due, nn, ge, k, g_nq, g_off, g_q):
    """The (slice, group) entries sorted by slice, then n descending, then group (a counting
    sort by slice, then an insertion sort inside each slice's few entries), expanded to one
    row per query of the group: ``(due_slice, due_query, due_n)``."""
    M = due.shape[0]
    start = np.zeros(k + 1, np.int64)
    for w in range(M):
        start[due[w] + 1] += 1
    for j in range(k):
        start[j + 1] += start[j]
    fill = start[:k].copy()
    order = np.empty(M, np.int64)
    for w in range(M):  # groups in order: ties in n keep group order
        d = due[w]
        x = fill[d]
        fill[d] = x + 1
        while x > start[d] and nn[order[x - 1]] < nn[w]:
            order[x] = order[x - 1]
            x -= 1
        order[x] = w
    D = 0
    for w in range(M):
        D += g_nq[ge[w]]
    ds = np.empty(D, np.int64)
    dq = np.empty(D, np.int64)
    dn = np.empty(D, np.int64)
    r = 0
    for x in range(M):
        w = order[x]
        g = ge[w]
        for i in range(g_off[g], g_off[g] + g_nq[g]):
            ds[r] = due[w]
            dq[r] = g_q[i]
            dn[r] = nn[w]
            r += 1
    return ds, dq, dn
