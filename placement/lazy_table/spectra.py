"""Divisor spectra of a tree's residue classes: a bound on common edges without a gcd per pair.

Why (issue 34): the lazy table's class-pair bound (``kernels._bound``) sums ``g / (m_i m_j)``,
``g = gcd(m_i, m_j)``, over the compatible class pairs of two trees: one gcd per pair of
moduli, about a hundred per pair of merged trees at Smax 10,000, and most of a large plan's
time went into pairs that then stay behind their partner's cut. With ``g = sum over d | g of
phi(d)`` and the residue test dropped (it only removes terms),

    sum_(i,j) gcd(m_i, m_j) / (m_i m_j) = sum_d phi(d) F_x(d) F_y(d),
    F_x(d) = sum of 1/m_i over the classes of x with d | m_i,

a dot product of two sparse per-tree *spectra* that bounds the class-pair sum from above (so
it bounds ``C``, the density of common edges). ``kernels._screen`` uses it to drop such pairs
before their class-pair bound; ``tests/placement/test_spectra.py`` checks it against brute
force.

A spectrum is the sorted divisors ``d`` of the tree's moduli with ``F(d)`` and ``phi(d)``.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _factor(m, ps, es):
    """Prime factors of ``m`` into ``ps``, ``es`` (scratch of 64); returns how many."""
    n = 0
    x = m
    p = 2
    while p * p <= x:
        if x % p == 0:
            a = 0
            while x % p == 0:
                x //= p
                a += 1
            ps[n] = p
            es[n] = a
            n += 1
        p += 1 if p == 2 else 2
    if x > 1:
        ps[n] = x
        es[n] = 1
        n += 1
    return n


@njit(cache=True)
def divisors(m):
    """The divisors of ``m`` (unsorted) and Euler's phi of each."""
    ps = np.empty(64, np.int64)
    es = np.empty(64, np.int64)
    k = _factor(m, ps, es)
    count = 1
    for i in range(k):
        count *= es[i] + 1
    dv = np.empty(count, np.int64)
    ph = np.empty(count, np.int64)
    dv[0] = 1
    ph[0] = 1
    n = 1
    for i in range(k):
        p = ps[i]
        cur = n
        pk = 1
        phk = 1
        for a in range(1, es[i] + 1):
            pk *= p
            phk = p - 1 if a == 1 else phk * p
            for j in range(cur):
                dv[n] = dv[j] * pk
                ph[n] = ph[j] * phk
                n += 1
    return dv, ph


@njit(cache=True)
def build(mods, cstart, kcls):
    """Spectra of the trees whose classes are ``mods[cstart[t] : cstart[t] + kcls[t]]``
    (sorted by modulus): ``(size per tree, d, F, phi)``, the trees' segments one after the
    other, each sorted by ``d``."""
    nt = len(cstart)
    sizes = np.zeros(nt, np.int64)
    parts_d = []
    parts_f = []
    parts_p = []
    total = 0
    for t in range(nt):
        lo = cstart[t]
        hi = lo + kcls[t]
        # (d, weight, phi) of every distinct modulus, then sorted by d and summed per d
        cd = []
        cw = []
        cp = []
        i = lo
        while i < hi:
            m = mods[i]
            j = i
            while j < hi and mods[j] == m:
                j += 1
            w = (j - i) / np.float64(m)
            dv, ph = divisors(m)
            for q in range(len(dv)):
                cd.append(dv[q])
                cw.append(w)
                cp.append(ph[q])
            i = j
        d = np.array(cd, dtype=np.int64) if cd else np.zeros(0, np.int64)
        wv = np.array(cw, dtype=np.float64) if cw else np.zeros(0)
        pv = np.array(cp, dtype=np.int64) if cp else np.zeros(0, np.int64)
        order = np.argsort(d, kind="mergesort")
        od = np.empty(len(d), np.int64)
        of = np.empty(len(d), np.float64)
        op = np.empty(len(d), np.float64)
        n = 0
        for q in order:
            if n > 0 and od[n - 1] == d[q]:
                of[n - 1] += wv[q]
            else:
                od[n] = d[q]
                of[n] = wv[q]
                op[n] = pv[q]
                n += 1
        sizes[t] = n
        parts_d.append(od[:n])
        parts_f.append(of[:n])
        parts_p.append(op[:n])
        total += n
    out_d = np.empty(total, np.int64)
    out_f = np.empty(total, np.float64)
    out_p = np.empty(total, np.float64)
    at = 0
    for t in range(nt):
        n = sizes[t]
        out_d[at : at + n] = parts_d[t]
        out_f[at : at + n] = parts_f[t]
        out_p[at : at + n] = parts_p[t]
        at += n
    return sizes, out_d, out_f, out_p
