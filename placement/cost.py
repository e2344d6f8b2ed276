"""Cost model: ``C_t = lambda + E_t * Omega_t`` aggregate operations per time unit (DESIGN.md s. 3).

``Omega_t`` is the number of final-aggregation operations per edge for the tree's incremental
evaluation (IE) technique (dissertation Table 11), with ``nP_i = r_i * E_t`` partials in query
i's range. Choices where the text is loose (kept testable here):

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
- SlickDeque Non-Inv's ``sum_{i=1..nP_max} 1/i!`` runs to ``floor(nP_max)``, with nP_max >= 1.
- ``slickdeque`` picks Inv when every aggregate of the tree is invertible, Non-Inv otherwise.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache
from typing import Iterable

from placement.slicing import distinct_window_lengths

TECHNIQUES = ("panes", "flatfat", "flatfit", "slickdeque", "slickdeque_inv", "slickdeque_noninv")
INVERTIBLE = frozenset({"sum", "count", "avg", "stddev", "product"})

_INV_FACT = [1.0 / math.factorial(i) for i in range(1, 40)]


def _inv_factorial_sum(n: int) -> float:
    return sum(_INV_FACT[: max(0, min(n, len(_INV_FACT)))])


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


def omega(technique: str, windows: Iterable[tuple[int, int]], edge_rate: Fraction | float) -> float:
    """Final-aggregation operations per edge for distinct windows ``(range, slide)``."""
    wins = list(windows)
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
        np_max = max(1.0, float(max(r for r, _ in wins) * e))
        return 2.0 - 2.0 / np_max + len(wins) + _inv_factorial_sum(math.floor(np_max))
    raise ValueError(f"omega needs a resolved technique, got {technique!r}")


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


def omega_floor(technique: str, windows: Iterable[tuple[int, int]], omega_value: float) -> float:
    """A lower bound of Omega for any tree whose windows include ``windows`` (0 if none known).

    WeaveShare prunes merges with it. Panes, FlatFIT and SlickDeque Non-Inv grow with the window
    set, so their Omega is its own floor; FlatFAT's can shrink (more edges, other log terms);
    SlickDeque Inv's exact Omega can shrink too (a slide-1 query makes every length equal to its
    range), but never below ``2 * #unique ranges``.
    """
    if technique == "flatfat":
        return 0.0
    if technique == "slickdeque_inv":
        return 2.0 * len({r for r, _ in windows})
    return omega_value


def merged_omega(technique: str, x_windows: frozenset, x_omega: float, y_windows: frozenset,
                 y_omega: float, edge_rate: Fraction) -> float:
    """Omega of the union of two window sets, reusing the parts' Omegas where it is additive."""
    if technique in ("panes", "flatfit") and x_windows.isdisjoint(y_windows):
        return x_omega + y_omega
    if technique == "slickdeque_noninv":
        n_windows = len(x_windows) + len(y_windows) - len(x_windows & y_windows)
        np_max = max(1.0, float(max(max(x_windows)[0], max(y_windows)[0]) * Fraction(edge_rate)))
        return 2.0 - 2.0 / np_max + n_windows + _inv_factorial_sum(math.floor(np_max))
    return omega(technique, x_windows | y_windows, edge_rate)


def tree_cost(rate: float, edge_rate: Fraction | float, omega_value: float) -> float:
    """``lambda + E * Omega``."""
    return float(rate) + float(edge_rate) * omega_value
