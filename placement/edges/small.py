"""The union density of a handful of residue classes, compiled.

Why: the fast engine prices most merges of the optimizers (a tree of one or two queries woven
with another) through its small path: at most ``small_classes`` classes, inclusion-exclusion
over compatible groups (``f1.group_inclusion_exclusion``), ~18 us per call in Python and
~10^5 calls per large workload. ``union_edges`` runs the very same sums, group by group in
the same depth-first order, on int64: exact while the period stays below ``PERIOD_LIMIT`` and
every modulus below ``MODULUS_LIMIT`` (then no product overflows); beyond, the Python path.
"""

from __future__ import annotations

from fractions import Fraction
from math import lcm

import numpy as np
from numba import njit

from placement.edges.f1 import group_inclusion_exclusion
from placement.slicing import ResidueClass

PERIOD_LIMIT = 1 << 40  # period // m and the signed sum of at most 2^MAX_CLASSES terms
MODULUS_LIMIT = 1 << 21  # (d // g mod m2g) * inverse < 2^42; gm * k < the merged modulus
MAX_CLASSES = 12  # the stack holds at most 2^n groups


@njit(cache=True)
def _gcd(a, b):
    while b:
        a, b = b, a % b
    return a


@njit(cache=True)
def _inverse(a, m):
    """``a^-1 mod m`` for ``gcd(a, m) == 1`` (extended Euclid), like ``pow(a, -1, m)``."""
    if m == 1:
        return 0
    t, new_t, r, new_r = 0, 1, m, a % m
    while new_r != 0:
        q = r // new_r
        t, new_t = new_t, t - q * new_t
        r, new_r = new_r, r - q * new_r
    return t + m if t < 0 else t


@njit(cache=True)
def union_edges(ms, rs, period):
    """Edges per ``period`` of the union of classes ``(ms[i], rs[i])``: the signed sum of
    ``period / modulus`` over every compatible group (CRT merges as ``slicing.crt_merge``)."""
    n = ms.size
    cap = (1 << n) + 1
    s_start = np.empty(cap, np.int64)
    s_m = np.empty(cap, np.int64)
    s_r = np.empty(cap, np.int64)
    s_sign = np.empty(cap, np.int64)
    s_start[0], s_m[0], s_r[0], s_sign[0] = 0, 1, 0, 1
    top = 1
    total = 0
    while top > 0:
        top -= 1
        start, gm, gr, sign = s_start[top], s_m[top], s_r[top], s_sign[top]
        for i in range(start, n):
            m2, r2 = ms[i], rs[i]
            g = _gcd(gm, m2)
            d = r2 - gr
            if d % g != 0:
                continue
            if g == gm:
                m, r = m2, r2
            elif g == m2:
                m, r = gm, gr
            else:
                m2g = m2 // g
                k = ((d // g) % m2g) * _inverse((gm // g) % m2g, m2g) % m2g
                m = gm // g * m2
                r = (gr + gm * k) % m
            total += sign * (period // m)
            s_start[top], s_m[top], s_r[top], s_sign[top] = i + 1, m, r, -sign
            top += 1
    return total


def union_density(cls: list[ResidueClass]) -> Fraction:
    """``group_inclusion_exclusion(cls)``, compiled when the numbers allow (module doc)."""
    period = lcm(*(m for m, _ in cls))
    if (
        cls
        and period < PERIOD_LIMIT
        and len(cls) <= MAX_CLASSES
        and all(0 <= r < m < MODULUS_LIMIT for m, r in cls)
    ):
        ms = np.array([m for m, _ in cls], np.int64)
        rs = np.array([r for _, r in cls], np.int64)
        return Fraction(int(union_edges(ms, rs, period)), period)
    return group_inclusion_exclusion(cls)


def warm() -> None:
    """Load (or compile) the kernel with the types ``union_density`` passes."""
    union_edges(np.array([2, 3], np.int64), np.array([0, 1], np.int64), 6)
