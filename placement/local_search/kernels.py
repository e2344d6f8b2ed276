"""Compiled helper of WG_LS's merge bounds
(``placement.local_search.search.LocalSearch.merge_lbs``).

Why: every iteration bounds the weave of every pair of same-key trees, which needs the summed
weight of the Omega items each pair shares. As a 0/1 incidence product that is a BLAS call,
whose threads only contend with the other worker on a busy machine (tens of milliseconds per
iteration instead of one); a plain loop over each tree's few items does not.

The sum runs over the shared items in order of first sight, one addition at a time from 0.0
(a BLAS product may group the additions otherwise: then the two differ in the last bit, which
the bounds' factor ``1 - REL`` absorbs; the order is fixed so that the bounds, which order
``best_move``'s ties, never depend on what the search met before). One call does it all,
first sights included: building the inputs of a smaller kernel with numpy cost more than the
sums for the handful of trees of a plan.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def shared_by_sight(
    cat_x: np.ndarray, ptr_x: np.ndarray, cat_y: np.ndarray, ptr_y: np.ndarray, w: np.ndarray
) -> np.ndarray:
    """``S[i, j]``: the summed weight ``w[id]`` of the distinct item ids that tree ``i`` of
    ``xs`` (ids ``cat_x[ptr_x[i]:ptr_x[i+1]]``) and tree ``j`` of ``ys`` share, added in
    order of first sight over ``cat_x`` then ``cat_y``, one at a time from 0.0."""
    rank = np.full(w.size, -1, np.int64)
    cw = np.empty(cat_x.size + cat_y.size)
    n = 0
    for cat in (cat_x, cat_y):  # first sights: the columns
        for p in range(cat.size):
            g = cat[p]
            if rank[g] < 0:
                rank[g] = n
                cw[n] = w[g]
                n += 1
    nx, ny = ptr_x.size - 1, ptr_y.size - 1
    member = np.zeros((ny, n), np.bool_)
    for j in range(ny):
        for p in range(ptr_y[j], ptr_y[j + 1]):
            member[j, rank[cat_y[p]]] = True
    out = np.zeros((nx, ny))
    for i in range(nx):
        cols = np.unique(rank[cat_x[ptr_x[i] : ptr_x[i + 1]]])  # ascending, once each
        for j in range(ny):
            s = 0.0
            for c in cols:
                if member[j, c]:
                    s += cw[c]
            out[i, j] = s
    return out


def warm() -> None:
    """Load (or compile) the kernel with the types ``merge_lbs`` passes."""
    one = np.zeros(1, np.intp)
    shared_by_sight(one, np.array([0, 1]), one, np.array([0, 1]), np.ones(1))
