"""The Pareto front of plans: dominance, hypervolume, the archive of layouts, truncation.

Why one module: what "non-dominated" and "a good small front" mean is independent of how
plans are searched (``placement.pareto``) and of the rule that picks one
(``placement.pareto.choose``); benchmarks and the simulation's front columns use it alone.

**Objectives.** A plan is the point ``(TotalCost, U)`` with ``U = max_j cost_j / capacity_j``
(capacity 1 when nodes have none, so ``U`` is MaxCost; with capacities it is the largest
utilization, as WG_LS reads MaxCost). Plan a *weakly dominates* plan b when it is no worse in both
(within a relative ``REL`` of rounding); the front holds the plans no other found plan dominates.

**Front size.** At most ``front_size`` plans are returned: the two ends, the chosen plan, then
(greedily) plans that weakly dominate seed plans not yet covered, then the plans adding the most
hypervolume (reference point: 1.1 x the front's worst TotalCost and MaxCost). So the returned front
still weakly dominates every seed unless more than ``front_size`` plans are needed to cover them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from placement.trees import Tree

REL = 1e-9  # relative rounding tolerance for comparing costs


def at_most(x: float, y: float) -> bool:
    """``x <= y`` within the rounding tolerance ``REL``."""
    return x <= y + REL * max(1.0, abs(x), abs(y))


def weakly_dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """``a`` no worse than ``b`` in both objectives (within rounding)."""
    return at_most(a[0], b[0]) and at_most(a[1], b[1])


def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """``a`` weakly dominates ``b`` and is better in one objective by more than rounding."""
    return weakly_dominates(a, b) and not weakly_dominates(b, a)


def nondominated(points: Sequence[Sequence[float]]) -> list[int]:
    """Indices of the non-dominated points, sorted by the first objective; of points equal
    within rounding the first one is kept."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], points[i][1], i))
    keep: list[int] = []
    for i in order:
        if not any(weakly_dominates(points[k], points[i]) for k in keep):
            keep = [k for k in keep if not weakly_dominates(points[i], points[k])]
            keep.append(i)
    return sorted(keep, key=lambda i: (points[i][0], points[i][1]))


def hypervolume(points: Sequence[Sequence[float]], ref: Sequence[float]) -> float:
    """Area dominated by ``points`` and bounded by ``ref`` (minimisation of both objectives);
    points outside the reference box add nothing."""
    pts = sorted((p[0], p[1]) for p in points if p[0] < ref[0] and p[1] < ref[1])
    area, best_y = 0.0, ref[1]
    for x, y in pts:  # by x ascending: each point adds the strip below the best y so far
        if y < best_y:
            area += (ref[0] - x) * (best_y - y)
            best_y = y
    return area


def front_distance(point: Sequence[float], front: Sequence[Sequence[float]]) -> float:
    """Multiplicative epsilon distance of ``point`` to ``front``: the smallest ``e >= 0`` such
    that ``point`` is within a factor ``1 + e`` of some front point in both objectives, i.e.
    ``min_f max_i point_i / f_i - 1`` (0: on the front or better)."""

    def ratio(p: float, f: float) -> float:
        return p / f if f > 0 else (1.0 if p <= 0 else math.inf)

    return max(0.0, min(max(ratio(point[0], f[0]), ratio(point[1], f[1])) for f in front) - 1)


# ---- the archive of layouts --------------------------------------------------------------------

TreesByNode = Sequence[Sequence[Tree]]  # per node, its trees (the archive keeps tuples of tuples)


class Archive:
    """Non-dominated layouts found so far, with the source that first reached each."""

    def __init__(self, caps: Sequence[float | None]):
        self.caps = [1.0 if c is None else float(c) for c in caps]
        self.items: list[tuple[tuple[float, float], TreesByNode, str]] = []
        self.seen = 0

    def point(self, nodes) -> tuple[float, float]:
        loads = [sum(t.cost for t in ts) for ts in nodes]
        return (math.fsum(loads), max(l / c for l, c in zip(loads, self.caps)))

    def add(self, nodes, source: str) -> bool:
        """Archive ``nodes`` unless a kept layout weakly dominates it; True when kept."""
        self.seen += 1
        p = self.point(nodes)
        if any(weakly_dominates(q, p) for q, _, _ in self.items):
            return False
        self.items = [it for it in self.items if not weakly_dominates(p, it[0])]
        self.items.append((p, tuple(tuple(ts) for ts in nodes), source))
        self.items.sort(key=lambda it: it[0])
        return True


def select_front(
    points: list[tuple[float, float]], k: int, must: list[int], seeds: list[tuple[float, float]]
) -> list[int]:
    """Up to ``k`` indices of ``points`` (a front sorted by TotalCost): ``must`` first (the
    chosen plan survives even ``k = 1``), the ends, then cover of ``seeds`` (greedy), then the
    largest hypervolume gain (module docstring)."""
    n = len(points)
    if n <= k:
        return list(range(n))
    chosen: list[int] = []
    for i in [*must, 0, n - 1]:
        if i not in chosen:
            chosen.append(i)
    uncovered = [s for s in seeds if not any(weakly_dominates(points[i], s) for i in chosen)]
    while uncovered and len(chosen) < k:
        gain = [
            (sum(weakly_dominates(points[i], s) for s in uncovered), -i)
            for i in range(n)
            if i not in chosen
        ]
        g, neg_i = max(gain)
        if g == 0:
            break
        chosen.append(-neg_i)
        uncovered = [s for s in uncovered if not weakly_dominates(points[-neg_i], s)]
    ref = (1.1 * max(p[0] for p in points), 1.1 * max(p[1] for p in points))
    while len(chosen) < k:
        base = hypervolume([points[i] for i in chosen], ref)
        i = max(
            (i for i in range(n) if i not in chosen),
            key=lambda i: (hypervolume([points[j] for j in chosen] + [points[i]], ref) - base, -i),
        )
        chosen.append(i)
    return sorted(chosen[:k])
