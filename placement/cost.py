"""Cost model: ``C_t = lambda + E_t * Omega_t`` aggregate operations per time unit (DESIGN.md s. 3).

``Omega_t`` is the number of final-aggregation operations per edge for the tree's incremental
evaluation (IE) technique (dissertation Table 11), with ``nP_i = r_i * E_t`` partials in query
i's range. Choices where the text is loose (kept testable here):

- **Count windows** (``kind: count``; issue 16): ``E``, ``nP_i`` and Omega live on the tree's
  own axis, the tuple positions of its stream, where they are the same formulas (Omega is a
  number per edge, ``nP_i = r_i * E`` counts partials whatever the unit); the cost converts
  with the stream's rate: ``C_t = lambda + (E_t per tuple) * lambda * Omega_t`` operations per
  time unit (``tree_cost``'s ``scale``). Count and time windows never share a tree.

- Queries of a tree are counted once per distinct ``(range, slide)``: identical windows are
  computed once by the executor.
- SlickDeque Inv: ``Omega = 2 * |N_t|``, exact, where ``N_t`` is the set of distinct window
  lengths *in slices* over every window of the tree (``placement.slicing.window_lengths``). Why:
  the executor (``executors.slickdeque_inv``) keeps one running aggregate per distinct length and
  updates each with one combine (+ new partial) and one inverse (- expiring partial) per edge, so
  it performs exactly ``2 * |N_t|`` operations per edge, ``E_t * 2 * |N_t|`` per time unit (tests
  check it against measured counts on random woven trees). This departs from the dissertation's
  eq. 7.6 / Table 11 (``# of unique nP_i``, ``nP_i = r_i * E_t``) in two ways: (1) the factor 2,
  which the text's own derivation states ("multiply the number of running aggregates by 2") but
  the formula drops; (2) ``#unique nP_i`` is the text's *approximation* (it says the exact count
  needs iterating a composite slide and knows no faster way). It only ever undercounts: the
  windows starting at 0 already have pairwise different lengths for different ranges (the end
  edge ``r_i`` of the shorter one lies inside the longer one), so it is a certified lower bound;
  but one query's length varies from window to window in a woven tree (ranges 16/10/8, slides
  4/5/4: 5 lengths, not 3), and the same range with two slides can need two lengths. Sharing is
  real too (windows of different queries with equal lengths use one aggregate), which is why the
  set is taken over the whole tree. The exact scan costs O(edges in a composite slide + windows
  in it), independent of the ranges; above ``WINDOW_SCAN_LIMIT`` (composite slides of ~10^6 and
  more, e.g. coprime slides) the model falls back to the lower bound ``2 * #unique r_i`` (the
  dissertation's formula with the factor 2; ``running_aggregates`` says which) and the executor,
  whose once-per-tree budget is 4x larger, otherwise registers lengths lazily.
  Operations are counted per aggregate: an executor counts per primitive, so an ``avg`` tree
  (sum and count) measures ``2 * Omega``, ``stddev`` ``3 * Omega``.
- FlatFAT's per-query term ``floor(log2(nP-1)) + (nP-1)/2^floor(log2 nP)`` is undefined for
  ``nP < 2``; there we use ``max(nP - 1, 0) / 2`` (0 at one partial, 0.5 at two: continuous).
- SlickDeque Non-Inv: ``Omega = 2 - 2/nP_max`` (nP_max >= 1), the first part of the
  dissertation's eq. 7.7 / Table 11, which adds ``nQ + sum_{i=1..nP_max} 1/i!``. Why: those two
  terms count *position* comparisons of the answer traversal (one per query, plus the deque
  nodes walked), while every other technique's Omega, and the executors' counters
  (``executors/base.py``), count aggregate operations (here value comparisons) only. The insert
  pops on average one node per edge and stops with one more comparison, less the
  ``1/nP_max`` of edges where the head expires unpopped and the ``1/nP_max`` where the new
  partial empties the deque: ``2 - 2/nP_max``, which the executor measures within ~1 % on
  uniform input (``weaveplace bench omega``) and within 0.3 % on DEBS-style data (``bench e2e``).
  With eq. 7.7 the model priced a 4-query Non-Inv tree at ~4x its measured operations and
  made every merge of Non-Inv trees look costlier by the other tree's ``nQ``, although the
  answers (one per window whichever tree computes it) are the same work in any plan.
- ``slickdeque`` picks Inv when every aggregate of the tree is invertible, Non-Inv otherwise.

**Cutty slicing** (``slicing="cutty"``, ``executors.cutty``): edges are the window starts only,
classes ``(s, 0)``, so ``E`` is the density of their union (the edge engines, exact) and
``nP_i = r_i * E``.  A window is answered from its complete slices (final aggregation) plus,
when its end falls inside a slice, one combine with the open slice's partial.  Omega per edge
(= per Cutty slice), with ``F`` = open-partial combines and ``K`` = slices per composite slide
(``placement.slicing.cutty_profile``, one exact scan of a composite slide; ``F`` counts one
combine per distinct (end, complete slices), as the executor shares it):

- SlickDeque Inv: ``2 * |N_t| + F / K``, ``N_t`` = distinct numbers ``n >= 1`` of complete
  slices over the tree's windows (``n = 0``: the window lies inside one slice and is the open
  partial alone, no operation).  Exact, as under Pairs.  Over the scan budget: the certified
  lower bound ``2 * (distinct n >= 1 of the windows starting at 0)`` with ``F`` taken as 0
  (under Pairs, too, the fallback is a lower bound).
- Panes: ``sum r_i / s_i`` unchanged: per answer Table 11 charges ``nP`` combines, and under
  Cutty a window of about ``nP`` complete slices takes ``nP - 1`` combines plus the one with
  the open partial (under Pairs the same formula charges one combine per answer too many).
- FlatFAT, FlatFIT, SlickDeque Non-Inv: Table 11 with ``nP_i = r_i * E`` plus an estimate of
  ``F / K``: one combine per answer of a window with ``r > s`` and ``r mod s != 0`` whose end
  is no other query's start (``open_combines_estimate``: exact for lone queries).  Why not the exact scan: these
  formulas are approximations anyway (BENCHMARKS.md), and WeaveShare prices every merge
  candidate: with a scan each (~1 ms; 66 K candidates for FlatFIT at qnum 300, smax 100,
  Gen=Nrm) planning took tens of seconds, with the estimate 1.1 s of CPU (Pairs: 0.2 s).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from fractions import Fraction
from functools import lru_cache

from placement.queries import INVERTIBLE_AGGREGATES
from placement.slicing import (
    SLICINGS,
    cutty_lengths_at_zero,
    cutty_profile,
    distinct_window_lengths,
)

#: The IE techniques a plan may be priced with: the one list config validation
#: (``placement.ie``), ``weaveplace plan --ie`` and the live run share; every one of them is an
#: executor technique (``executors.tree.ALL_TECHNIQUES``, checked at import there).
TECHNIQUES = ("panes", "flatfat", "flatfit", "slickdeque", "slickdeque_inv", "slickdeque_noninv")
INVERTIBLE = INVERTIBLE_AGGREGATES


def resolve_technique(technique: str, aggregates: Iterable[str] = ()) -> str:
    """Map ``slickdeque`` to its Inv or Non-Inv form for the given aggregates."""
    if technique not in TECHNIQUES:
        raise ValueError(f"unknown IE technique {technique!r}; allowed: {', '.join(TECHNIQUES)}")
    if technique == "slickdeque":
        return "slickdeque_inv" if all(a in INVERTIBLE for a in aggregates) else "slickdeque_noninv"
    return technique


def _flatfat_term(np_i: float) -> float:
    if np_i < 2:
        return max(np_i - 1.0, 0.0) / 2.0
    return math.floor(math.log2(np_i - 1)) + (np_i - 1) / 2 ** math.floor(math.log2(np_i))


def check_slicing(slicing: str) -> str:
    if slicing not in SLICINGS:
        raise ValueError(f"unknown slicing {slicing!r}; allowed: {', '.join(SLICINGS)}")
    return slicing


def omega(
    technique: str,
    windows: Iterable[tuple[int, int]],
    edge_rate: Fraction | float,
    slicing: str = "pairs",
) -> float:
    """Final-aggregation operations per edge for distinct windows ``(range, slide)``;
    ``edge_rate`` is the tree's under ``slicing``."""
    wins = list(windows)
    if slicing != "pairs":
        return _omega_cutty(technique, frozenset(wins), Fraction(edge_rate))
    if technique == "panes":
        return math.fsum(r / s for r, s in wins)  # correctly rounded: independent of order
    if technique == "flatfit":
        return 3.0 * len(wins)
    if technique == "slickdeque_inv":
        return 2.0 * running_aggregates(frozenset(wins))[0]
    e = Fraction(edge_rate)
    if technique == "flatfat":
        return float(sum(_flatfat_term(float(r * e)) for r, _ in wins))
    if technique == "slickdeque_noninv":
        return _noninv(max(r for r, _ in wins), e)
    raise ValueError(f"omega needs a resolved technique, got {technique!r}")


def _omega_cutty(technique: str, wins: frozenset, e: Fraction) -> float:
    if technique == "panes":
        return omega("panes", wins, e)
    if technique == "slickdeque_inv":  # over budget: a certified lower bound, as under Pairs
        n_ra, f_per_edge, _ = cutty_terms(wins)
        return 2.0 * n_ra + f_per_edge
    return omega(technique, wins, e) + open_combines_estimate(wins, e)


def cutty_terms(wins: frozenset) -> tuple[int, float, bool]:
    """``(|N_t|, F / K, exact)`` of a tree under Cutty slicing (module docstring): SlickDeque
    Inv's running aggregates and the open-partial combines per edge, exact within the scan
    budget; beyond it the lower bound ``(distinct n >= 1 of the windows at 0, 0)``."""
    prof = cutty_profile(wins)
    if prof is not None:
        return prof.lengths, prof.open_combines / prof.slices, True
    return cutty_lengths_at_zero(wins), 0.0, False


def open_combines_estimate(wins: Iterable[tuple[int, int]], edge_rate: Fraction | float) -> float:
    """Open-partial combines per edge, estimated in O(windows x slides) without a scan: each
    answer of a window with ``r > s`` and ``r mod s != 0`` combines once unless its end is
    another query's start.  The ends of ``(r, s)`` are ``r mod s`` modulo ``s``; a fraction
    ``f_j = g / s_j`` of them (``g = gcd(s, s_j)``) are multiples of ``s_j`` when ``g``
    divides ``r``, else none; the slides are taken as independent: combines per time unit
    ``sum 1/s * prod_j (1 - f_j)``, divided by ``E``.

    Exact for a lone query (its ends fall strictly between two of its starts; with ``r < s``
    the window lies inside one slice: ``n = 0``, no combine) and whenever the other slides
    that catch its ends divide ``s`` (then ``f_j = 1``: never a combine).  Otherwise off where
    the slides are not independent (inclusion-exclusion would be exact, at 2^slides), two
    queries with the same range end together (one shared combine: over), or a window with
    ``r < s`` holds another query's start (a combine: under).  ``weaveplace bench omega
    --slicing cutty`` reports it against the exact count (``placement.slicing.cutty_profile``).
    """
    e = Fraction(edge_rate)
    if not e:
        return 0.0
    ws = set(wins)
    slides = sorted({s for _, s in ws})
    total = []
    for r, s in ws:
        if r <= s or r % s == 0:
            continue
        keep = 1.0
        for sj in slides:
            if sj != s:
                g = math.gcd(s, sj)
                if r % g == 0:
                    keep *= 1.0 - g / sj
                    if keep == 0.0:
                        break
        total.append(keep / s)
    return math.fsum(total) / float(e)


@lru_cache(maxsize=1 << 16)
def running_aggregates(windows: frozenset) -> tuple[int, bool]:
    """``(|N_t|, exact)``: SlickDeque Inv's running aggregates for a tree's distinct windows.

    Exact (distinct window lengths in slices) when the composite slide is within the scan
    budget; otherwise the certified lower bound ``#unique ranges`` and ``exact=False``.
    Cached: WeaveShare prices the same unions repeatedly.
    """
    n = distinct_window_lengths(windows)
    if n is None:
        return len({r for r, _ in windows}), False
    return n, True


def omega_floor(
    technique: str, windows: Iterable[tuple[int, int]], omega_value: float, slicing: str = "pairs"
) -> float:
    """A lower bound of Omega for any tree whose windows include ``windows`` (0 if none known).

    WeaveShare prunes merges with it. Panes, FlatFIT and SlickDeque Non-Inv grow with the window
    set, so their Omega is its own floor; FlatFAT's can shrink (more edges, other log terms);
    SlickDeque Inv's exact Omega can shrink too (a slide-1 query makes every length equal to its
    range), but never below ``2 * #unique ranges``.

    Under Cutty the open-partial term shrinks when a merge raises ``E``, so FlatFIT's floor is
    ``3 * nQ`` and SlickDeque Non-Inv's 0 (its ``2 - 2/nP_max`` part grows with ``E``, but
    the sum can still shrink);
    SlickDeque Inv's lengths can merge into fewer (``n`` counts starts, and two ranges can
    span the same starts): floor 0.
    """
    if technique == "flatfat":
        return 0.0
    if slicing != "pairs":
        wins = list(windows)
        if technique == "flatfit":
            return 3.0 * len(set(wins))
        if technique == "slickdeque_noninv":
            return 0.0
        if technique == "slickdeque_inv":
            return 0.0
        return omega_value
    if technique == "slickdeque_inv":
        return 2.0 * len({r for r, _ in windows})
    return omega_value


def merged_omega(
    technique: str,
    x_windows: frozenset,
    x_omega: float,
    y_windows: frozenset,
    y_omega: float,
    edge_rate: Fraction,
    slicing: str = "pairs",
) -> float:
    """Omega of the union of two window sets, reusing the parts' Omegas where it is additive."""
    if slicing != "pairs":
        if technique == "panes" and x_windows.isdisjoint(y_windows):
            return x_omega + y_omega
        return omega(technique, x_windows | y_windows, edge_rate, slicing)
    if technique in ("panes", "flatfit") and x_windows.isdisjoint(y_windows):
        return x_omega + y_omega
    if technique == "slickdeque_noninv":
        return _noninv(max(max(x_windows)[0], max(y_windows)[0]), Fraction(edge_rate))
    return omega(technique, x_windows | y_windows, edge_rate)


def _noninv(r_max: int, edge_rate: Fraction) -> float:
    """SlickDeque Non-Inv's value comparisons per edge, ``2 - 2/nP_max`` (module docstring)."""
    return 2.0 - 2.0 / max(1.0, float(r_max * edge_rate))


def tree_cost(
    rate: float, edge_rate: Fraction | float, omega_value: float, scale: float = 1.0
) -> float:
    """``lambda + E * scale * Omega``: ``E`` per unit of the tree's axis, ``scale`` axis units
    per time unit (1 for time windows, lambda for count windows: ``placement.trees``)."""
    if scale == 1.0:
        return float(rate) + float(edge_rate) * omega_value
    return float(rate) + float(edge_rate) * scale * omega_value
