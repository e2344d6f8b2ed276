"""The exact Pareto front of TotalCost vs MaxCost without capacities: epsilon constraint over
tree partitions (``placement.exact.sets``, module doc there).

Why its own module: the front is a loop over the tree search (``placement.exact.trees``) with
its own leaf check and scheduling; the solver calls it only when asked for a front.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from placement.exact.node_sets import schedule_trees
from placement.exact.trees import INF, REL, Pricer, min_total_partition, packs
from placement.plan import Plan

# ---- the exact Pareto front without capacities: epsilon constraint over tree partitions ----


@dataclass
class FrontPoint:
    total: float
    max: float
    parts: list[int]  # tree masks
    where: list[int]  # node of each tree


def schedule_point(
    pr: Pricer, partitions, n_nodes: int, deadline: float, max_ties: int, cap: float = INF
):
    """The tied partitions' best schedule (least MaxCost, then TotalCost) as a ``FrontPoint``
    (None when there is none); a schedule above ``cap`` (CP-SAT out of time) is replaced by an
    exact packing within it (``packs``), when there is one."""
    best = None
    for parts in partitions[:max_ties]:
        costs = [pr.price(m)[0] for m in parts]
        left = max(0.2, (deadline - time.perf_counter()) * 0.1)
        where, _ = schedule_trees(costs, [None] * n_nodes, left)
        loads = [0.0] * n_nodes
        for c, j in zip(costs, where):
            loads[j] += c
        if max(loads) > cap:
            packed = packs(costs, n_nodes, cap)
            if packed is None:
                continue
            where, loads = packed, [0.0] * n_nodes
            for c, j in zip(costs, where):
                loads[j] += c
        pt = FrontPoint(math.fsum(loads), max(loads), list(parts), list(where))
        if best is None or (pt.max, pt.total) < (best.max, best.total):
            best = pt
    return best


def pareto_front(
    pr: Pricer,
    n_nodes: int,
    top: FrontPoint,
    low: FrontPoint,
    low_proven: bool,
    deadline: float,
    max_ties: int = 16,
) -> tuple[list[FrontPoint], bool]:
    """The exact Pareto front (TotalCost, MaxCost) on equal nodes without capacities.

    Why this way: the node-set family behind min MaxCost would have to hold every set up to
    the min-TotalCost plan's MaxCost, which at a high rate (one big tree is the cheapest plan)
    is nearly every subset. Instead, from ``top`` (a min-TotalCost plan, proven), each step
    asks the tree branch and bound for the least TotalCost with every node strictly below the
    previous point's MaxCost (``min_total_partition``'s ``max_cost``: trees pack onto the
    nodes within it), then schedules its tied partitions for the least MaxCost. Each step
    proven, the points are the front; the steps stop below ``low``'s MaxCost when that is the
    proven min MaxCost (else when no plan is left). A step at least as good in TotalCost as
    the previous one only lowers that point's MaxCost (the front keeps the better).
    Returns the points (sorted by TotalCost, non-dominated) and whether the front is exact.
    """
    pts = [top]
    exact = True
    while True:
        m_prev = min(p.max for p in pts)
        cap = m_prev - REL * max(1.0, abs(m_prev))
        if low_proven and cap < low.max * (1 - REL):
            break
        use_low = low.max <= cap
        ub = low.total * (1 + REL) if use_low else INF
        tr = min_total_partition(
            pr, ub, deadline, [*low.parts] if use_low else None, max_cost=cap, n_nodes=n_nodes
        )
        if not tr.proven:
            exact = False
            break
        pt = schedule_point(pr, tr.partitions, n_nodes, deadline, max_ties, cap)
        if pt is None:
            if tr.total == INF:
                break  # proven: no plan below m_prev
            pt = low  # only the bound's own plan was kept: it fits (low.max <= cap)
        pts.append(pt)
    if low_proven or not exact:
        pts.append(low)
    keep: list[FrontPoint] = []
    for p in sorted(pts, key=lambda p: (p.total, p.max)):
        if keep and p.total <= keep[-1].total * (1 + 1e-12):
            if p.max < keep[-1].max:
                keep[-1] = p
            continue
        if not keep or p.max < keep[-1].max * (1 - 1e-12):
            keep.append(p)
    return keep, exact


def front_point(plan: Plan, pos: dict[str, int]) -> FrontPoint:
    parts, where = [], []
    for j, nd in enumerate(plan.nodes):
        for t in nd.trees:
            parts.append(sum(1 << pos[q.id] for q in t.queries))
            where.append(j)
    return FrontPoint(plan.total_cost, plan.max_cost, parts, where)
