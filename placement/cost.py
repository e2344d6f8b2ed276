"""Cost model: ``C_t = lambda + E_t * Omega_t`` aggregate operations per time unit
(docs/DESIGN.md s. 3).

``Omega_t`` is the number of final-aggregation operations per edge for the tree's incremental
evaluation (IE) technique (dissertation Table 11), with ``nP_i = r_i * E_t`` partials in query
i's range. Choices where the text is loose (kept testable here):

- **Count windows** (``kind: count``): ``E``, ``nP_i`` and Omega live on the tree's
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
import operator
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from itertools import starmap

from placement.queries import INVERTIBLE_AGGREGATES
from placement.slicing import (
    SLICINGS,
    cutty_lengths_at_zero,
    cutty_profile,
    distinct_window_lengths,
)

Windows = Iterable[tuple[int, int]]
#: ``(range, slide) -> (item, weight)``: one term of an Omega that is a sum over distinct items
ItemWeight = Callable[[int, int], tuple[Hashable, float]]


@dataclass(frozen=True)
class Pricing:
    """How one technique's Omega is priced under one slicing.

    Why each field: ``omega`` prices a tree; WeaveShare prunes merges with ``floor`` and reuses
    the parts' Omegas where ``items`` (or ``merged``) says how; WG_LS bounds the cost of a tree
    minus one query with ``items`` (exact) or ``floor_items`` (a lower bound).
    """

    #: Omega per edge of a tree's distinct windows ``(range, slide)`` at edge rate ``E``
    omega: Callable[[Windows, Fraction], float]
    #: a lower bound of Omega for any tree whose windows include these, given their Omega
    floor: Callable[[Windows, float], float]
    #: Omega is the sum of one weight per distinct item (so disjoint window sets add up)
    items: ItemWeight | None = None
    #: Omega is at least the sum of one weight per distinct item
    floor_items: ItemWeight | None = None
    #: Omega of a union from the parts ``(x_windows, x_omega, y_windows, y_omega, E)``, when
    #: cheaper than pricing the union (``items`` already covers disjoint additive unions)
    merged: Callable[[frozenset, float, frozenset, float, Fraction], float] | None = None


@dataclass(frozen=True)
class Technique:
    """A final-aggregation (IE) technique as the cost model sees it: one ``Pricing`` per
    slicing it supports, or ``resolve``, for a family (``slickdeque``) that stands for one
    member per tree, chosen from the tree's aggregates.  Its executor registers against the
    same name (``executors.base.register``)."""

    name: str
    pairs: Pricing | None = None
    cutty: Pricing | None = None
    resolve: Callable[[Iterable[str]], str] | None = None
    doc: str = ""

    def pricing(self, slicing: str) -> Pricing:
        p = self.pairs if slicing == "pairs" else self.cutty if slicing == "cutty" else None
        if p is None:
            raise ValueError(f"omega needs a resolved technique, got {self.name!r}")
        return p


#: The IE techniques a plan may be priced with, by name: the one registry config validation
#: (``placement.ie``), ``weaveplace plan --ie``, pricing and the live run read (every one has an
#: executor: ``executors.tree`` checks the built-in ones at import).
TECHNIQUES: dict[str, Technique] = {}
INVERTIBLE = INVERTIBLE_AGGREGATES


def register_technique(t: Technique) -> Technique:
    """Add a priced technique (its executor registers separately, in ``executors.base``)."""
    if t.name in TECHNIQUES:
        raise ValueError(f"IE technique {t.name!r} is already registered")
    TECHNIQUES[t.name] = t
    return t


def unregister_technique(name: str) -> None:
    TECHNIQUES.pop(name, None)


def get_technique(technique: str) -> Technique:
    t = TECHNIQUES.get(technique)
    if t is None:
        raise ValueError(f"unknown IE technique {technique!r}; allowed: {', '.join(TECHNIQUES)}")
    return t


def resolve_technique(technique: str, aggregates: Iterable[str] = ()) -> str:
    """The technique that prices a tree of these aggregates (``slickdeque``: Inv or Non-Inv)."""
    t = get_technique(technique)
    return t.resolve(aggregates) if t.resolve is not None else technique


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
    t = TECHNIQUES.get(technique)
    if t is None:
        raise ValueError(f"omega needs a resolved technique, got {technique!r}")
    wins = list(windows) if slicing == "pairs" else frozenset(windows)
    return t.pricing(slicing).omega(wins, Fraction(edge_rate))


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
    return get_technique(technique).pricing(slicing).floor(windows, omega_value)


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
    p = get_technique(technique).pricing(slicing)
    if p.items is not None and x_windows.isdisjoint(y_windows):
        return x_omega + y_omega
    if p.merged is not None:
        return p.merged(x_windows, x_omega, y_windows, y_omega, Fraction(edge_rate))
    return omega(technique, x_windows | y_windows, edge_rate, slicing)


def is_additive(technique: str, slicing: str) -> bool:
    """Whether Omega of a merge is the sum of its parts' Omegas for disjoint windows (a family
    such as ``slickdeque`` is not: its trees may resolve to different members)."""
    t = get_technique(technique)
    p = t.pairs if slicing == "pairs" else t.cutty
    return p is not None and p.items is not None


def items_of(technique: str, slicing: str) -> tuple[ItemWeight | None, ItemWeight | None]:
    """``(items, floor_items)`` of a resolved technique under ``slicing`` (``Pricing``)."""
    p = get_technique(technique).pricing(slicing)
    return p.items, p.floor_items


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


# ---- the built-in techniques (module docstring: why each formula) ----------------------------


def _own_floor(windows: Windows, omega_value: float) -> float:
    return omega_value


def _zero_floor(windows: Windows, omega_value: float) -> float:
    return 0.0


def _panes(wins: Windows, e: Fraction) -> float:
    return math.fsum(starmap(operator.truediv, wins))  # correctly rounded: order-free


def _flatfit(wins: Windows, e: Fraction) -> float:
    return 3.0 * len(list(wins))


def _flatfat(wins: Windows, e: Fraction) -> float:
    return float(sum(_flatfat_term(float(r * e)) for r, _ in wins))


def _sd_inv(wins: Windows, e: Fraction) -> float:
    return 2.0 * running_aggregates(frozenset(wins))[0]


def _sd_noninv(wins: Windows, e: Fraction) -> float:
    return _noninv(max(r for r, _ in wins), e)


def _plus_open(pairs_omega: Callable[[Windows, Fraction], float]):
    """Cutty Omega of a Table 11 formula: the formula plus the open-partial estimate."""

    def omega_cutty(wins: Windows, e: Fraction) -> float:
        return pairs_omega(wins, e) + open_combines_estimate(wins, e)

    return omega_cutty


def _sd_inv_cutty(wins: Windows, e: Fraction) -> float:
    n_ra, f_per_edge, _ = cutty_terms(frozenset(wins))  # over budget: a lower bound
    return 2.0 * n_ra + f_per_edge


def _slickdeque(aggregates: Iterable[str]) -> str:
    return "slickdeque_inv" if all(a in INVERTIBLE for a in aggregates) else "slickdeque_noninv"


_PANES_ITEM: ItemWeight = lambda r, s: ((r, s), r / s)  # noqa: E731
_FLATFIT_ITEM: ItemWeight = lambda r, s: ((r, s), 3.0)  # noqa: E731
_RANGE_ITEM: ItemWeight = lambda r, s: (r, 2.0)  # noqa: E731

for _t in (
    Technique(
        "panes",
        Pricing(_panes, _own_floor, items=_PANES_ITEM),
        Pricing(_panes, _own_floor, items=_PANES_ITEM),
        doc="sum r_i / s_i",
    ),
    Technique(
        "flatfat",
        Pricing(_flatfat, _zero_floor),
        Pricing(_plus_open(_flatfat), _zero_floor),
        doc="Table 11 (FlatFAT's log terms)",
    ),
    Technique(
        "flatfit",
        Pricing(_flatfit, _own_floor, items=_FLATFIT_ITEM),
        Pricing(_plus_open(_flatfit), lambda w, o: 3.0 * len(set(w))),
        doc="3 nQ",
    ),
    Technique("slickdeque", resolve=_slickdeque, doc="Inv for invertible trees, else Non-Inv"),
    Technique(
        "slickdeque_inv",
        Pricing(
            _sd_inv,
            lambda w, o: 2.0 * len({r for r, _ in w}),
            floor_items=_RANGE_ITEM,
        ),
        Pricing(_sd_inv_cutty, _zero_floor),
        doc="2 |N_t| (exact)",
    ),
    Technique(
        "slickdeque_noninv",
        Pricing(
            _sd_noninv,
            _own_floor,
            merged=lambda xw, xo, yw, yo, e: _noninv(max(max(xw)[0], max(yw)[0]), e),
        ),
        Pricing(_plus_open(_sd_noninv), _zero_floor),
        doc="2 - 2 / nP_max",
    ),
):
    register_technique(_t)
