"""What the exact solvers share: exact subset prices, the result with its proven bounds, and the
seeding by heuristic plans.

Why its own module: ``placement.exact.optimum`` (exhaustive search, CP-SAT) and
``placement.exact.sets`` (branch-and-bound, node-set columns) both build on these, and ``optimum``
also dispatches to ``sets``; keeping the shared pieces here keeps the imports one way.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from placement.exact.subset_split import unfold
from placement.exact.trees import INF
from placement.plan import Plan
from placement.queries import Query
from placement.trees import CostModel


class InfeasibleError(ValueError):
    """No plan fits the node capacities."""


@dataclass
class SubsetTable:
    """Exact prices of every single-key subset (bitmask over ``queries``) and best partitions."""

    queries: list[Query]
    cost: list[float]  # cost of the subset as ONE tree (inf: mixed keys)
    best: list[float]  # cheapest partition of the subset into trees
    split: list[int]  # 0: the subset itself is the best tree; else one part of a best split
    kept: list[int] = field(default_factory=list)  # candidate trees (not beaten by a split)

    def partition(self, mask: int) -> list[int]:
        """The cheapest partition of ``mask`` into tree masks."""
        return unfold(self.split, mask)

    def queries_of(self, mask: int) -> list[Query]:
        return [q for i, q in enumerate(self.queries) if mask >> i & 1]


def subset_table(queries: Sequence[Query], model: CostModel, max_queries: int = 16) -> SubsetTable:
    """Price every subset as a tree and run the subset DP (why: node cost = best(S))."""
    qs = list(queries)
    n = len(qs)
    if n > max_queries:
        raise ValueError(f"exact search is for small instances: {n} queries > {max_queries}")
    size = 1 << n
    cost = [INF] * size
    keys = [q.share_key for q in qs]  # one stream, aggregate and window kind per tree
    for m in range(1, size):
        idx = [i for i in range(n) if m >> i & 1]
        if len({keys[i] for i in idx}) == 1:
            cost[m] = model.tree([qs[i] for i in idx]).cost
    best = [0.0] * size
    split = [0] * size
    kept = []
    for m in range(1, size):
        low = m & -m
        rest = m ^ low
        b, arg = INF, 0
        s = rest
        while True:  # submasks containing the lowest bit, excluding m itself
            part = s | low
            if part != m:
                v = best[part] + best[m ^ part]
                if v < b:
                    b, arg = v, part
            if s == 0:
                break
            s = (s - 1) & rest
        if cost[m] < b - 1e-12 * abs(b) or (arg == 0):
            best[m], split[m] = cost[m], 0
            if cost[m] < INF:
                kept.append(m)
        else:
            best[m], split[m] = b, arg
    return SubsetTable(qs, cost, best, split, kept)


@dataclass
class ExactResult:
    min_total: Plan
    min_max: Plan
    front: list[Plan]
    method: str
    optimal: bool  # proven optimal (always True for exhaustive)
    abs_tol: float  # cost differences below this may be misranked (integer scaling)
    candidate_trees: int
    # Proven lower bounds of min TotalCost / min MaxCost; NaN (unset): the optimum when proven,
    # else 0 (``__post_init__`` fills them, so they are always numbers afterwards).
    bound_total: float = math.nan
    bound_max: float = math.nan
    optimal_total: bool | None = None  # min TotalCost proven (None: as ``optimal``)
    optimal_max: bool | None = None  # min MaxCost proven (None: as ``optimal``)
    seeded: list[str] = field(default_factory=list)  # hint plans that beat the solver's answer
    front_exact: bool = True  # ``front`` is the exact Pareto front (``exact_sets``: see there)
    stats: dict = field(default_factory=dict)  # solver statistics (method ``sets``)

    def __post_init__(self):
        if self.optimal_total is None:
            self.optimal_total = self.optimal
        if self.optimal_max is None:
            self.optimal_max = self.optimal
        if math.isnan(self.bound_total):
            self.bound_total = self.min_total.total_cost if self.optimal_total else 0.0
        if math.isnan(self.bound_max):
            self.bound_max = self.min_max.max_cost if self.optimal_max else 0.0
        self.settle()

    def settle(self) -> None:
        """A bound never exceeds the best known plan (it bounds the optimum from below); a plan
        that meets its bound is proven optimal."""
        self.bound_total = min(self.bound_total, self.min_total.total_cost)
        self.bound_max = min(self.bound_max, self.min_max.max_cost)
        self.optimal_total = bool(
            self.optimal_total or self.min_total.total_cost <= self.bound_total
        )
        self.optimal_max = bool(self.optimal_max or self.min_max.max_cost <= self.bound_max)

    @property
    def gap_total(self) -> float:
        """``min_total / bound - 1``: how far the reported min TotalCost may be from optimal."""
        return rel_gap(self.min_total.total_cost, self.bound_total)

    @property
    def gap_max(self) -> float:
        return rel_gap(self.min_max.max_cost, self.bound_max)


def rel_gap(value: float, bound: float) -> float:
    if value <= bound:
        return 0.0
    return math.inf if bound <= 0 else value / bound - 1


def fits_capacities(plan: Plan, caps: Sequence[float | None]) -> bool:
    return len(plan.nodes) == len(caps) and all(
        c is None or nd.cost <= c * (1 + 1e-12) for nd, c in zip(plan.nodes, caps)
    )


def lex_better(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """``a`` strictly better than ``b`` (lexicographic, beyond a 1e-12 relative rounding)."""
    tol = 1e-12 * max(1.0, abs(b[0]))
    if a[0] < b[0] - tol:
        return True
    return abs(a[0] - b[0]) <= tol and a[1] < b[1] - 1e-12 * max(1.0, abs(b[1]))


def seed_result(
    res: ExactResult, hints: Sequence[Plan], caps: Sequence[float | None]
) -> ExactResult:
    """Never worse than a known plan: a hint that fits the capacities and beats the solver's
    min-TotalCost (or min-MaxCost) plan lexicographically replaces it, and joins the front.
    Hint plans are taken as given (their costs are their trees' exact prices)."""
    ok = [h for h in hints if fits_capacities(h, caps)]
    if not ok:
        return res
    bt = min(ok, key=lambda p: (p.total_cost, p.max_cost))
    bm = min(ok, key=lambda p: (p.max_cost, p.total_cost))
    if lex_better((bt.total_cost, bt.max_cost), (res.min_total.total_cost, res.min_total.max_cost)):
        res.seeded.append(f"min_total:{bt.optimizer}")
        res.min_total = copy.deepcopy(bt)
    if lex_better((bm.max_cost, bm.total_cost), (res.min_max.max_cost, res.min_max.total_cost)):
        res.seeded.append(f"min_max:{bm.optimizer}")
        res.min_max = copy.deepcopy(bm)
    pool = [res.min_total] + list(res.front) + [res.min_max] + ok
    keep = front_points([(p.total_cost, p.max_cost) for p in pool])
    res.front = [next(p for p in pool if (p.total_cost, p.max_cost) == k) for k in keep]
    res.front = [
        p
        if any(p is r for r in (res.min_total, res.min_max)) or not any(p is h for h in ok)
        else copy.deepcopy(p)
        for p in res.front
    ]
    res.settle()
    return res


def front_points(points):
    """Non-dominated (total, max) points, sorted by total. Totals equal to rounding (1e-12
    relative) count as equal: the point with the smaller max represents them."""
    out: list[tuple[float, float]] = []
    for p in sorted(points, key=lambda p: (p[0], p[1])):
        if out and abs(p[0] - out[-1][0]) <= 1e-12 * max(1.0, abs(p[0])):
            if p[1] < out[-1][1]:
                out[-1] = p
            continue
        if not out or p[1] < out[-1][1] - 1e-12 * max(1.0, abs(p[1])):
            out.append(p)
    return out


def plans_fitting(plans: Sequence[Plan], caps: Sequence[float | None]) -> list[Plan]:
    return [p for p in plans if fits_capacities(p, caps)]
