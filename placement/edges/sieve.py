"""The sieve of the fast engine, compiled: positions of one period that no residue class covers.

Why a kernel: a component's sieve (lcm of its moduli up to 2^21) was a numpy byte map with one
strided assignment per class, and at periods of 2^17-2^21 those passes over the period's memory
were most of the sieve's time. Here the map is one bit per position, in 64-bit words: the bits of
a modulus ``m`` repeat every ``m`` words, so each modulus builds its ``m``-word pattern (all its
residues at once) and ORs it over the map, one word operation per 64 positions; moduli whose
joint pattern (lcm words) is short share one pass over the map.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True)
def _popcount(x):
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return (x * np.uint64(0x0101010101010101)) >> np.uint64(56)


@njit(cache=True)
def uncovered_positions(ms, rs, period):
    """How many ``t`` in ``[0, period)`` satisfy ``t % ms[i] != rs[i]`` for every ``i``
    (``0 <= rs[i] < ms[i]``, every ``ms[i]`` divides ``period``).

    The word patterns of small moduli are first ORed into one pattern whose length is their
    lcm (in words) while it stays at most half the map: a component's moduli share primes, so
    several of them usually cost one pass over the map instead of one pass each."""
    order = np.argsort(ms, kind="mergesort")  # the classes of one modulus together
    ms = ms[order]
    rs = rs[order]
    nwords = (period + 63) // 64
    bits = np.zeros(nwords, np.uint64)
    one = np.uint64(1)
    group = np.zeros(max(nwords // 2, 1), np.uint64)  # the OR of some moduli's patterns
    glen = 0  # its period in words (0: empty)
    i = 0
    n = len(ms)
    while i < n:
        m = ms[i]
        if m < nwords:  # one m-word pattern for every residue of m
            pat = np.zeros(m, np.uint64)
            while i < n and ms[i] == m:
                t = rs[i]
                while t < 64 * m:
                    pat[t >> 6] |= one << np.uint64(t & 63)
                    t += m
                i += 1
            if m > len(group):  # longer than half the map: straight over it
                _or_repeated(bits, pat, m)
                continue
            joint = m if glen == 0 else glen // math.gcd(glen, m) * m
            if joint > len(group):  # too long to share: this group goes over the map
                _or_repeated(bits, group, glen)
                glen = 0
                joint = m
            for w in range(glen, joint):  # extend the group's pattern to the joint period
                group[w] = group[w - glen] if glen else np.uint64(0)
            j = 0
            for w in range(joint):
                group[w] |= pat[j]
                j += 1
                if j == m:
                    j = 0
            glen = joint
        else:
            t = rs[i]
            while t < period:
                bits[t >> 6] |= one << np.uint64(t & 63)
                t += m
            i += 1
    _or_repeated(bits, group, glen)
    tail = period - 64 * (nwords - 1)  # positions of the last word inside the period
    if tail < 64:
        bits[nwords - 1] &= (one << np.uint64(tail)) - one
    covered = 0
    for w in range(nwords):
        covered += _popcount(bits[w])
    return period - covered


@njit(cache=True)
def _or_repeated(bits, pattern, length):
    """``bits |= pattern[:length]`` repeated over the whole map (nothing when ``length`` is 0)."""
    if length == 0:
        return
    j = 0
    for w in range(len(bits)):
        bits[w] |= pattern[j]
        j += 1
        if j == length:
            j = 0


def uncovered_count(classes, period: int) -> int:
    """``uncovered_positions`` of a set of ``(m, r)`` classes with ``0 <= r < m``, ``m | period``."""
    ms, rs = [], []
    for m, r in classes:  # one pass (``zip(*classes)`` builds two tuples first)
        ms.append(m)
        rs.append(r)
    return int(uncovered_positions(np.array(ms, np.int64), np.array(rs, np.int64), period))


def warm() -> None:
    """Load (or compile) the kernel."""
    uncovered_count([(2, 0), (3, 1)], 6)
