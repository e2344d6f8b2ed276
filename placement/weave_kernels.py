"""Compiled rows of WeaveShare's lazy table when Omega is additive (Panes, FlatFIT).

Why: with ~10^3 trees the table's time went to Python overhead, per pair and per row. These
numba kernels price a whole row (one tree against every alive tree of its key) in one call.

For additive Omega the benefit of weaving x and y is ``lambda + Ox (C - Ey) + Oy (C - Ex)``
with ``C`` the density of common edges. Per pair the kernel gives either

- the **exact benefit**, when both trees are *single-modulus* (every class has one modulus
  ``m``: ``k`` pairwise disjoint classes, density ``k/m``). Classes ``(m1, r1)`` and
  ``(m2, r2)`` meet iff ``r1 = r2 (mod g)``, ``g = gcd(m1, m2)``, in one class mod
  ``L = lcm(m1, m2)`` (CRT), and the meets of distinct pairs are disjoint (their parents are),
  so ``C = cnt / L`` exactly and ``E_xy = (k1 L/m1 + k2 L/m2 - cnt) / L``. Numerator and ``L``
  are integers below 2^53, so one float division is the correctly rounded value that
  ``float(Fraction)`` gives, and the benefit is computed with the very float operations of
  ``CostModel.benefit``: bit for bit the same number, hence the same plans;
- otherwise a **certified upper bound**: ``C`` is at most ``min(Ex, Ey)`` and, per class ``a``
  of either tree, at most ``min(1/m_a, sum over compatible classes b of the other tree of
  1/lcm(a, b))`` (union bound), summed over the classes. The bound is inflated by a relative
  1e-9 against float rounding; the table prices it exactly with the engine when it reaches the
  top (lazy greedy).

Buckets: trees are linked (``nxt``) into buckets ``(key, modulus)`` for single-modulus trees
and ``(key, 0)`` for the others. A row first bounds a whole single-modulus bucket from its
extremes (fewest/most classes, smallest Omega, all ever filed: conservative) and skips it when
no member can reach a positive benefit; dead trees are unlinked on the way. A fill (many rows
at once) first bounds bucket *pairs* the same way (``bucket_pairs``), so that 10^5..10^6 initial
trees only visit the buckets that can hold a merge.
"""

from __future__ import annotations

import numpy as np
from numba import njit

EXACT_LIMIT = 1 << 50  # lcm up to which single-modulus pairs are priced exactly in floats
WORK_LIMIT = 1 << 12  # class pairs per tree pair for the per-class bound (else min(Ex, Ey))
INFLATE = 1e-9
HIST = 1 << 16  # residue histogram size for single-modulus rows


@njit(cache=True, inline="always")
def _gcd(a, b):
    while b:
        a, b = b, a % b
    return a


@njit(cache=True, inline="always")
def _count(z, s, kcls, cstart, pr, g, mb, hist, use_hist):
    """Compatible class pairs of two single-modulus slots (``s`` of modulus ``mb``):
    ``r_z = r_s (mod g)``. ``hist``: z's residues mod ``g`` counted (when ``use_hist``)."""
    ss = cstart[s]
    sn = kcls[s]
    if g == 1:
        return kcls[z] * sn
    cnt = 0
    if use_hist:
        if g == mb:  # residues of s are below g already
            for j in range(ss, ss + sn):
                cnt += hist[pr[j]]
        else:
            for j in range(ss, ss + sn):
                cnt += hist[pr[j] % g]
        return cnt
    zs = cstart[z]
    for i in range(zs, zs + kcls[z]):
        for j in range(ss, ss + sn):
            if (pr[i] - pr[j]) % g == 0:
                cnt += 1
    return cnt


@njit(cache=True, inline="always")
def _exact(z, s, lam, om, cost, kcls, cnt, lz, ls, big):
    """Exact benefit from the compatible pair count ``cnt`` (``lz = L/m_z``, ``ls = L/m_s``)."""
    num = kcls[z] * lz + kcls[s] * ls - cnt
    exy = np.float64(num) / np.float64(big)
    return (cost[s] + cost[z]) - (lam + exy * (om[s] + om[z]))


@njit(cache=True, inline="always")
def _bound(z, s, lam, e, om, cost, kcls, cstart, pm, pr, colsum):
    """Certified upper bound of the benefit (per-class union bounds on C, both ways)."""
    zs = cstart[z]
    zn = kcls[z]
    ss = cstart[s]
    sn = kcls[s]
    ez = e[z]
    es = e[s]
    c = min(ez, es)
    if zn * sn <= WORK_LIMIT:
        for j in range(sn):
            colsum[j] = 0.0
        cz = 0.0
        for i in range(zs, zs + zn):
            mi = pm[i]
            ri = pr[i]
            rowsum = 0.0
            for j in range(sn):
                mj = pm[ss + j]
                g = _gcd(mi, mj)
                if (ri - pr[ss + j]) % g == 0:
                    t = g / (np.float64(mi) * np.float64(mj))
                    rowsum += t
                    colsum[j] += t
            cz += min(1.0 / mi, rowsum)
        cs = 0.0
        for j in range(sn):
            cs += min(1.0 / pm[ss + j], colsum[j])
        c = min(c, cz, cs)
    bound = lam + om[z] * (c - es) + om[s] * (c - ez)
    return bound + INFLATE * (abs(bound) + cost[s] + cost[z])


def pair_value(z, s, lam, e, om, cost, smod, kcls, cstart, pm, pr):
    """``(value, exact)`` for slots ``z`` and ``s`` (reference entry point for tests)."""
    colsum = np.zeros(max(1, int(kcls[s])))
    mz, ms = int(smod[z]), int(smod[s])
    if mz > 0 and ms > 0:
        g = int(np.gcd(mz, ms))
        big = mz // g * ms
        if big <= EXACT_LIMIT:
            cnt = _count(z, s, kcls, cstart, pr, g, ms, np.zeros(1, np.int64), False)
            return _exact(z, s, lam, om, cost, kcls, cnt, big // mz, big // ms, big), True
    return _bound(z, s, lam, e, om, cost, kcls, cstart, pm, pr, colsum), False


@njit(cache=True, inline="always")
def bucket_bound(z, lam, e, om, cost, kcls, cstart, pm, mb, kmin, kmax, ommin):
    """Upper bound of the benefit of ``z`` with any tree of a single-modulus bucket."""
    zs = cstart[z]
    zn = kcls[z]
    cub = 0.0
    for i in range(zs, zs + zn):
        mi = pm[i]
        g = _gcd(mi, mb)
        cub += min(kmax, mb // g) * g / (np.float64(mi) * np.float64(mb))
    ez = e[z]
    c = min(cub, kmax / mb, ez)
    bound = lam + om[z] * min(c - kmin / mb, 0.0) + ommin * (c - ez)
    return bound + INFLATE * (abs(bound) + 2.0 * cost[z])


@njit(cache=True)
def bucket_pairs(nb, b_key, b_mod, b_kmin, b_kmax, b_om, lam, floor):
    """``open[a, b]``: whether a tree of bucket ``a`` may weave at a benefit above ``floor``
    with a tree of bucket ``b`` (always for the multi-modulus buckets, modulus 0). From the
    bucket extremes: ``C <= cmax`` (pair counts, ``k/m``), ``C <= E`` of either side, so
    ``benefit <= lambda + Om_a min(cmax - kmin_b/m_b, 0) + Om_b min(cmax - kmin_a/m_a, 0)``."""
    out = np.zeros((nb, nb), np.bool_)
    for a in range(nb):
        for b in range(a, nb):
            if b_key[a] != b_key[b]:
                continue
            ma = b_mod[a]
            mb = b_mod[b]
            if ma == 0 or mb == 0:
                out[a, b] = out[b, a] = True
                continue
            g = _gcd(ma, mb)
            den = np.float64(ma) * np.float64(mb)
            cmax = min(b_kmax[a] * min(b_kmax[b], mb // g) * g / den,
                       b_kmax[b] * min(b_kmax[a], ma // g) * g / den,
                       b_kmax[a] / ma, b_kmax[b] / mb)
            bound = (lam + b_om[a] * min(cmax - b_kmin[b] / mb, 0.0)
                     + b_om[b] * min(cmax - b_kmin[a] / ma, 0.0))
            scale = abs(bound) + lam + b_om[a] * b_kmax[a] / ma + b_om[b] * b_kmax[b] / mb
            if bound + INFLATE * scale > floor:
                out[a, b] = out[b, a] = True
    return out


@njit(cache=True)
def _grow(a, n):
    b = np.empty(max(2 * len(a), n), a.dtype)
    b[:len(a)] = a
    return b


@njit(cache=True)
def _sort_head(out_j, out_v, out_x, uid, n0, n, k):
    """Order the segment ``[n0, n)`` so that its entries with the ``k`` smallest ``-value`` (and
    all ties of the k-th) come first, sorted by ``(-value, partner uid)``; returns the end of
    that sorted head. The rest stays unsorted (``head_more`` sorts the next part on demand)."""
    m = n - n0
    end = n
    if m > k:
        thr = np.partition(out_v[n0:n].copy(), k - 1)[k - 1]
        end = n0
        for i in range(n0, n):  # stable enough: the head is sorted below anyway
            if out_v[i] <= thr:
                out_j[i], out_j[end] = out_j[end], out_j[i]
                out_v[i], out_v[end] = out_v[end], out_v[i]
                out_x[i], out_x[end] = out_x[end], out_x[i]
                end += 1
    if end - n0 > 1:
        seg = np.arange(n0, end)
        o1 = seg[np.argsort(uid[out_j[n0:end]], kind="mergesort")]
        o2 = o1[np.argsort(out_v[o1], kind="mergesort")]
        out_j[n0:end] = out_j[o2]
        out_v[n0:end] = out_v[o2]
        out_x[n0:end] = out_x[o2]
    return end


@njit(cache=True)
def head_more(out_j, out_v, out_x, uid, alive, n0, n1, k):
    """Drop dead partners from ``[n0, n1)`` of a row (compacting it in place), then sort its
    next head (see ``_sort_head``). Returns ``(new end of the row, end of the sorted head)``."""
    n = n0
    for i in range(n0, n1):
        if alive[out_j[i]]:
            out_j[n] = out_j[i]
            out_v[n] = out_v[i]
            out_x[n] = out_x[i]
            n += 1
    return n, _sort_head(out_j, out_v, out_x, uid, n0, n, k)


@njit(cache=True)
def rows(zs_, floor, lam, alive, key, uid, e, om, cost, smod, kcls, cstart, pm, pr, slot_bucket,
         nxt, b_key, b_mod, b_kmin, b_kmax, b_om, b_head, nb, file_after, wmax, open_, use_open,
         hist, head):
    """Rows of the slots ``zs_`` (in order): for each, the alive filed partners whose value
    (exact benefit or bound) is above ``floor``. With ``file_after`` each slot is filed into its
    bucket after its row, so a fill of many slots prices every pair once; with ``use_open`` only
    the buckets that ``open_`` (``bucket_pairs``) allows for the slot's bucket are visited.
    ``wmax``: the most classes of any alive tree; ``hist``: ``HIST`` zeros (scratch, left
    zeroed). Each row's best ``head`` entries (with ties) come first, sorted by ``(-value,
    partner uid)``: the eager table's order within a row.

    Returns ``(partner, -value, exact, row start, sorted head end)``: rows as segments of flat
    arrays, ``row start`` has ``len(zs_) + 1`` entries.
    """
    cap = 1024
    out_j = np.empty(cap, np.int64)
    out_v = np.empty(cap, np.float64)
    out_x = np.empty(cap, np.bool_)
    starts = np.empty(len(zs_) + 1, np.int64)
    ends = np.empty(len(zs_), np.int64)
    n = 0
    colsum = np.empty(wmax, np.float64)
    for zi in range(len(zs_)):
        z = zs_[zi]
        kz = key[z]
        mz = smod[z]
        zs = cstart[z]
        zn = kcls[z]
        bz = slot_bucket[z]
        n0 = n
        starts[zi] = n0
        for b in range(nb):
            if b_key[b] != kz or b_head[b] < 0:
                continue
            if use_open and not open_[bz, b]:
                continue
            mb = b_mod[b]
            if mb > 0:
                if bucket_bound(z, lam, e, om, cost, kcls, cstart, pm, mb, b_kmin[b],
                                b_kmax[b], b_om[b]) <= floor:
                    continue
            g = 1
            big = 0
            exact = mz > 0 and mb > 0
            if exact:
                g = _gcd(mz, mb)
                big = mz // g * mb
                exact = big <= EXACT_LIMIT
            lz = big // mz if exact else 0
            ls = big // mb if exact else 0
            use_hist = exact and 1 < g <= HIST
            if use_hist:
                for i in range(zs, zs + zn):
                    hist[pr[i] % g] += 1
            prev = -1
            s = b_head[b]
            while s >= 0:
                nx = nxt[s]
                if not alive[s]:  # unlink
                    if prev < 0:
                        b_head[b] = nx
                    else:
                        nxt[prev] = nx
                    s = nx
                    continue
                if s != z:
                    if exact:
                        cnt = _count(z, s, kcls, cstart, pr, g, mb, hist, use_hist)
                        v = _exact(z, s, lam, om, cost, kcls, cnt, lz, ls, big)
                    else:
                        v = _bound(z, s, lam, e, om, cost, kcls, cstart, pm, pr, colsum)
                    if v > floor:
                        if n == len(out_j):
                            out_j = _grow(out_j, n + 1)
                            out_v = _grow(out_v, n + 1)
                            out_x = _grow(out_x, n + 1)
                        out_j[n] = s
                        out_v[n] = -v
                        out_x[n] = exact
                        n += 1
                prev = s
                s = nx
            if use_hist:
                for i in range(zs, zs + zn):
                    hist[pr[i] % g] = 0
        ends[zi] = _sort_head(out_j, out_v, out_x, uid, n0, n, head)
        if file_after:
            nxt[z] = b_head[bz]
            b_head[bz] = z
    starts[len(zs_)] = n
    return out_j[:n], out_v[:n], out_x[:n], starts, ends
