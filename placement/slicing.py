"""Slicing a query into edges, as residue classes (docs/DESIGN.md s. 2).

Query ``(r, s)`` needs an edge at every ``t`` with ``t mod s == 0`` (window starts) and
``t mod s == r mod s`` (window ends), i.e. the residue classes ``(s, 0)`` and ``(s, r mod s)``.
An execution tree's edges are the union of its queries' classes; its composite slide is the
``lcm`` of the slides, and its edge rate ``E`` is the density of that union (edges per time unit).
Everything here is exact integer arithmetic.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from math import gcd, lcm

import numpy as np

from placement.queries import Query

ResidueClass = tuple[int, int]  # (modulus, residue) with 0 <= residue < modulus
Window = tuple[int, int]  # (range, slide)

SLICINGS = ("pairs", "cutty")
#: work budget of one exact window-length scan (edges of one composite slide + windows in it)
WINDOW_SCAN_LIMIT = 1 << 20


def query_classes(query: Query) -> frozenset[ResidueClass]:
    """The one or two residue classes a query needs (Pairs slicing)."""
    s = query.slide
    return frozenset({(s, 0), (s, query.range % s)})


def tree_classes(queries: Iterable[Query]) -> frozenset[ResidueClass]:
    """Union of the classes of a tree's queries."""
    out: set[ResidueClass] = set()
    for q in queries:
        out |= query_classes(q)
    return frozenset(out)


def composite_slide(slides: Iterable[int]) -> int:
    """``lcm`` of the slides: the period after which a tree's edge pattern repeats."""
    return lcm(*slides)


def compatible(a: ResidueClass, b: ResidueClass) -> bool:
    """Whether two classes share any position: the GCD overlap check of dissertation ch. 5."""
    return (a[1] - b[1]) % gcd(a[0], b[0]) == 0


def crt_merge(a: ResidueClass, b: ResidueClass) -> ResidueClass | None:
    """Intersection of two residue classes (Chinese remainder theorem), or None if disjoint."""
    (m1, r1), (m2, r2) = a, b
    g = gcd(m1, m2)
    if (r2 - r1) % g:
        return None
    m = m1 // g * m2
    if g == m1:
        return (m2, r2)
    if g == m2:
        return (m1, r1)
    # Solve r1 + m1*k == r2 (mod m2): k == (r2 - r1)/g * inv(m1/g) (mod m2/g).
    m2g = m2 // g
    k = ((r2 - r1) // g * pow(m1 // g, -1, m2g)) % m2g
    return (m, (r1 + m1 * k) % m)


@lru_cache(maxsize=200_000)
def prime_factors(n: int) -> tuple[tuple[int, int], ...]:
    """``((p, e), ...)`` with ``n == prod p**e``; trial division, cached (moduli are small)."""
    out = []
    d = 2
    while d * d <= n:
        if n % d == 0:
            e = 0
            while n % d == 0:
                n //= d
                e += 1
            out.append((d, e))
        d += 1 if d == 2 else 2
    if n > 1:
        out.append((n, 1))
    return tuple(out)


@lru_cache(maxsize=200_000)
def divisors(n: int) -> tuple[int, ...]:
    """All divisors of ``n`` in increasing order."""
    divs = [1]
    for p, e in prime_factors(n):
        divs = [d * p**k for d in divs for k in range(e + 1)]
    return tuple(sorted(divs))


def brute_force_edges(classes: Iterable[ResidueClass], period: int | None = None) -> int:
    """Count edges in one period by checking every position: the oracle for the engines."""
    cls = list(classes)
    if not cls:
        return 0
    period = period or lcm(*(m for m, _ in cls))
    return sum(1 for t in range(period) if any(t % m == r for m, r in cls))


def slicing_classes(windows: Iterable[Window], slicing: str = "pairs") -> frozenset[ResidueClass]:
    """The residue classes that cut a tree's slices: Pairs cuts at window starts and ends
    (``(s, 0)``, ``(s, r mod s)``), Cutty only at window starts (``(s, 0)``)."""
    if slicing not in SLICINGS:
        raise ValueError(f"unknown slicing {slicing!r}; allowed: {', '.join(SLICINGS)}")
    out: set[ResidueClass] = set()
    for r, s in windows:
        out.add((s, 0))
        if slicing == "pairs":
            out.add((s, r % s))
    return frozenset(out)


def window_lengths(
    windows: Iterable[Window], slicing: str = "pairs", limit: int = WINDOW_SCAN_LIMIT
) -> dict[Window, tuple[int, ...]] | None:
    """Every number of slices a window spans, per distinct ``(r, s)``: exact, or None over budget.

    Why it matters: SlickDeque Inv keeps one running aggregate per distinct length, and in a woven
    tree a query's length varies from window to window (ranges 16/10/8, slides 4/5/4: 5 lengths,
    not 3) while different queries can share one. Shared by the cost model (``placement.cost``)
    and the executors (``executors.slicing``), so both see the same set.

    A window ``[x, x + r)`` (``x`` a multiple of ``s``) spans, under Pairs, the cuts in
    ``[x, x + r)``; under Cutty, ``ceil``-style, the complete slices before its end: the starts in
    ``(x, x + r]`` (the rest of the window is the open slice's partial). The cut pattern repeats
    every composite slide ``L``, so with ``N(y)`` = cuts in ``[0, y)`` = ``(y // L) * K +
    cuts of one period below y mod L`` each window costs O(1): the scan is
    O(cuts in L + sum L / s), independent of the ranges. Beyond ``limit`` that work is refused.
    """
    got = _lengths(windows, slicing, limit)
    if got is None:
        return None
    wins, idx, n = got
    width = int(n.max()) + 1
    keys = np.unique(idx * width + n)  # sorted: by window, then length
    out: dict[Window, tuple[int, ...]] = {w: () for w in wins}
    wi, ni = np.divmod(keys, width)
    bounds = np.searchsorted(wi, np.arange(len(wins) + 1))
    for j, w in enumerate(wins):
        out[w] = tuple(ni[bounds[j] : bounds[j + 1]].tolist())
    return out


def _lengths(windows: Iterable[Window], slicing: str, limit: int, ends: bool = False):
    """``(sorted distinct windows, window index, slices)`` for every window of one composite
    slide, all windows at once (one vectorised pass), or None over budget.  ``ends``: also
    ``(window end mod period, whether the end is a cut, cuts per period, period)``."""
    wins = sorted({(int(r), int(s)) for r, s in _checked(windows)})
    classes = sorted(slicing_classes(wins, slicing))
    period = lcm(*(s for _, s in wins))
    work = sum(period // m for m, _ in classes) + sum(period // s for _, s in wins)
    if work > limit:
        return None
    per = np.array([period // s for _, s in wins], dtype=np.int64)
    idx = np.repeat(np.arange(len(wins), dtype=np.int64), per)
    first = np.zeros(len(wins), dtype=np.int64)
    np.cumsum(per[:-1], out=first[1:])
    sl = np.array([s for _, s in wins], dtype=np.int64)
    x = (np.arange(idx.shape[0], dtype=np.int64) - first[idx]) * sl[idx]
    if slicing == "cutty":
        x += 1
    y = x + np.array([r for r, _ in wins], dtype=np.int64)[idx]
    if period <= 8 * work + 1024:
        # prefix counts of a bitmap: cuts in [0, t) = below[t] for 0 <= t <= period
        mark = np.zeros(period, dtype=np.int64)
        for m, c in classes:
            mark[c::m] = 1
        below = np.zeros(period + 1, dtype=np.int64)
        np.cumsum(mark, out=below[1:])
        k = int(below[-1])

        def cuts_below(t):  # cuts in [0, t), t >= 0
            return (t // period) * k + below[t % period]

        def is_cut(t):
            return mark[t % period] > 0
    else:
        cuts = np.unique(
            np.concatenate([np.arange(c, period, m, dtype=np.int64) for m, c in classes])
        )
        k = cuts.shape[0]

        def cuts_below(t):
            return (t // period) * k + np.searchsorted(cuts, t % period)

        def is_cut(t):
            tm = t % period
            return cuts[np.minimum(np.searchsorted(cuts, tm), k - 1)] == tm

    n = cuts_below(y) - cuts_below(x)
    if not ends:
        return wins, idx, n
    e = x + np.array([r for r, _ in wins], dtype=np.int64)[idx] - (1 if slicing == "cutty" else 0)
    return wins, idx, n, (e % period, is_cut(e), k, period)


def _checked(windows: Iterable[Window]) -> list[Window]:
    wins = list(windows)
    if not wins:
        raise ValueError("window_lengths needs at least one (range, slide)")
    if all(type(r) is int and type(s) is int and r >= 1 and s >= 1 for r, s in wins):
        return wins
    for r, s in wins:
        if not (
            isinstance(r, (int, np.integer))
            and isinstance(s, (int, np.integer))
            and not isinstance(r, bool)
            and not isinstance(s, bool)
            and r >= 1
            and s >= 1
        ):
            raise ValueError(f"window (range {r!r}, slide {s!r}): both must be integers >= 1")
    return wins


def distinct_window_lengths(
    windows: Iterable[Window], slicing: str = "pairs", limit: int = WINDOW_SCAN_LIMIT
) -> int | None:
    """How many distinct window lengths (in slices) a tree has over all its windows, or None."""
    got = _lengths(windows, slicing, limit)
    return None if got is None else int(np.unique(got[2]).shape[0])


@dataclass(frozen=True)
class CuttyProfile:
    """What final aggregation does per composite slide under Cutty slicing (exact).

    ``slices``: Cutty slices (= edges: window starts) per composite slide ``period``;
    ``lengths``: distinct numbers ``n >= 1`` of complete slices over the tree's windows
    (SlickDeque Inv's running aggregates; a window inside one slice, ``n = 0``, asks none);
    ``open_combines``: combines with the open slice's partial per composite slide: one per
    distinct ``(window end, n)`` with ``n >= 1`` whose end falls inside a slice (windows of
    different queries with the same end and ``n`` share it, as in the executor).
    """

    period: int
    slices: int
    lengths: int
    open_combines: int


@lru_cache(maxsize=1 << 15)
def cutty_profile(windows: frozenset, limit: int = WINDOW_SCAN_LIMIT) -> CuttyProfile | None:
    """``CuttyProfile`` of a tree's distinct windows, or None over the scan budget (the same
    one-composite-slide scan as ``window_lengths``).  Cached: WeaveShare re-prices unions."""
    got = _lengths(windows, "cutty", limit, ends=True)
    if got is None:
        return None
    wins, idx, n, (end, on_cut, k, period) = got
    pos = n >= 1
    lengths = int(np.count_nonzero(np.bincount(n[pos]))) if pos.any() else 0
    open_ = pos & ~on_cut
    # Equal (end, n) means equal start (n counts the starts in (x, end], and a later start x'
    # lies in that span), hence equal range: only windows of one range with several slides
    # can share a combine.  Count the rest directly (no hashing: this runs per merge).
    rs = [r for r, _ in wins]
    many = {r for r in rs if rs.count(r) > 1} if len(set(rs)) < len(rs) else ()
    combines = int(np.count_nonzero(open_))
    if many:
        ranges = np.array(rs, dtype=np.int64)
        sh = open_ & np.array([r in many for r in rs])[idx]
        keys = end[sh] * (int(ranges.max()) + 1) + ranges[idx[sh]]
        combines -= int(keys.shape[0]) - int(np.unique(keys).shape[0])
    return CuttyProfile(period, int(k), lengths, combines)


def cutty_lengths_at_zero(windows: Iterable[Window], limit: int = WINDOW_SCAN_LIMIT) -> int:
    """A lower bound of ``CuttyProfile.lengths`` without the composite-slide scan: the distinct
    ``n >= 1`` of the windows starting at 0 (starts in ``(0, r]``), counted on a bitmap of
    ``[0, max r]`` when that fits ``limit``; otherwise 1 if some window spans a slide
    (``r >= s``: the start ``s`` lies in ``(0, r]``), else 0."""
    wins = sorted({(int(r), int(s)) for r, s in windows})
    top = max(r for r, _ in wins)
    if top + 1 > limit:
        return int(any(r >= s for r, s in wins))
    mark = np.zeros(top + 1, dtype=np.int64)
    for s in {s for _, s in wins}:
        mark[s::s] = 1
    below = np.cumsum(mark)  # starts in (0, t] = below[t]
    ns = {int(below[r]) for r, _ in wins}
    ns.discard(0)
    return len(ns)
