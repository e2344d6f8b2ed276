"""Compiled helper of WG_LS's merge bounds
(``placement.local_search.search.LocalSearch.merge_lbs``).

Why: every iteration bounds the weave of every pair of same-key trees, which needs the summed
weight of the Omega items each pair shares. As a 0/1 incidence product that is a BLAS call,
whose threads only contend with the other worker on a busy machine (tens of milliseconds per
iteration instead of one); a plain loop over each tree's few items does not.

The sum runs over the shared items in column order, one addition at a time from 0.0 (a BLAS
product may group the additions otherwise: then the two differ in the last bit, which the
bounds' factor ``1 - REL`` absorbs).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def shared_weights(
    ptr: np.ndarray, cols: np.ndarray, w: np.ndarray, member: np.ndarray
) -> np.ndarray:
    """``S[i, j]`` = sum of ``w[p]`` over ``p`` in ``ptr[i]:ptr[i+1]`` with
    ``member[j, cols[p]]``, in that order (each row's ``cols`` ascending: column order)."""
    nx, ny = ptr.size - 1, member.shape[0]
    out = np.zeros((nx, ny))
    for i in range(nx):
        for j in range(ny):
            s = 0.0
            for p in range(ptr[i], ptr[i + 1]):
                if member[j, cols[p]]:
                    s += w[p]
            out[i, j] = s
    return out


def warm() -> None:
    """Load (or compile) the kernel with the types ``merge_lbs`` passes."""
    shared_weights(
        np.zeros(2, np.intp), np.zeros(0, np.intp), np.zeros(0), np.zeros((1, 1), np.bool_)
    )
