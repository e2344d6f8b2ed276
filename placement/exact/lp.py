"""A proven lower bound on min TotalCost by column generation (``placement.exact.sets``).

Why: min TotalCost is the cheapest partition of the queries into one-key trees. The tree branch and
bound (``placement.exact.trees.min_total_partition``) proves it fast when sharing pays a lot (few
big trees), but at a low rate optimal plans have many small trees and its relaxation is weak. The
linear relaxation of the set partition over *all* trees is much tighter there, and it needs no list
of all trees: for any duals ``pi`` (one per query) every partition ``P`` costs

    sum_S c(S) = sum_i pi_i + sum_{S in P} (c(S) - pi(S)) >= sum_i pi_i + n * min(0, rc_min)

(``|P| <= n`` trees; ``rc_min`` the least reduced cost ``c(S) - pi(S)`` over every tree). So the
bound is rigorous whatever the LP solver's accuracy, as long as ``rc_min`` is exact or a lower
bound of it: the pricing is a depth-first search over trees with a certified bound (additive
Omega only: Panes, FlatFIT under Pairs; otherwise no bound is given). Duals come from GLOP on
the trees found so far (column generation); the loop stops when no tree has a negative reduced
cost (the LP optimum) or at the deadline (the best bound so far stands).

Pricing bound: a tree ``S`` grown by queries ``T`` keeps its classes, so ``E`` only grows, and
additive Omega adds each new distinct window's weight: ``c(S u T) >= c(S) + E(S) * sum of the new
windows' weights`` (``Pricer.om1`` holds ``weight * scale`` per query; a repeated window adds
nothing), while ``pi(T)`` is subtracted in full.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from placement.exact.trees import INF


@dataclass
class LpBound:
    bound: float  # proven lower bound of min TotalCost (-inf: none)
    lp_optimal: bool  # the LP relaxation was solved to optimality (no negative reduced cost)
    rounds: int
    columns: int


def _duals(pr, cols: list[int]):
    """GLOP on the restricted master: min sum c x, each query covered exactly once, x >= 0."""
    from ortools.linear_solver import pywraplp

    n = len(pr.qs)
    lp = pywraplp.Solver.CreateSolver("GLOP")
    xs = [lp.NumVar(0.0, lp.infinity(), "") for _ in cols]
    rows = []
    for i in range(n):
        ct = lp.Constraint(1.0, 1.0)
        for m, x in zip(cols, xs):
            if m >> i & 1:
                ct.SetCoefficient(x, 1.0)
        rows.append(ct)
    obj = lp.Objective()
    for m, x in zip(cols, xs):
        obj.SetCoefficient(x, pr.price(m)[0])
    obj.SetMinimization()
    if lp.Solve() != pywraplp.Solver.OPTIMAL:
        return None
    return [ct.dual_value() for ct in rows]


def _price(pr, pi: list[float], deadline: float, keep: int = 8):
    """(a lower bound of the least reduced cost over all trees, up to ``keep`` trees with a
    negative reduced cost). Exact unless the deadline stops it (then the least bound of the
    unexplored subtrees)."""
    n = len(pr.qs)
    found: list[tuple[float, int]] = []
    best = [INF]
    pending = [INF]
    count = [0]

    class Stop(Exception):
        pass

    for key_mask in pr.key_mask:
        qs = [i for i in range(n) if key_mask >> i & 1]
        qs.sort(key=lambda i: (pr.windows[i], i))

        def bound(m: int, cost: float, e: float, k: int, wins: frozenset, qs=qs) -> float:
            """Least reduced cost of any ``m u T``, ``T`` within ``qs[k:]`` (module doc)."""
            rc = cost - sum(pi[i] for i in range(n) if m >> i & 1)
            gain: dict = {}
            for i in qs[k:]:
                w = pr.windows[i]
                if w in wins:
                    rc += min(0.0, -pi[i])
                else:
                    gain[w] = gain.get(w, 0.0) + pi[i]
            for w, g in gain.items():
                om = next(pr.om1[i] for i in qs if pr.windows[i] == w)
                rc += min(0.0, e * om - g)
            return rc

        def rec(m: int, k: int, wins: frozenset, qs=qs) -> None:
            count[0] += 1
            if count[0] % 256 == 0 and time.perf_counter() > deadline:
                raise Stop
            cost, _, e = pr.price(m)
            rc = cost - sum(pi[i] for i in range(n) if m >> i & 1)
            if rc < best[0]:
                best[0] = rc
            if rc < -1e-9 * max(1.0, cost):
                found.append((rc, m))
            for j in range(k, len(qs)):
                i = qs[j]
                m2 = m | 1 << i
                c2, _, e2 = pr.price(m2)
                w2 = wins | {pr.windows[i]}
                if bound(m2, c2, e2, j + 1, w2) >= min(best[0], 0.0):
                    continue
                rec(m2, j + 1, w2)

        try:
            for j, i in enumerate(qs):
                c, _, e = pr.price(1 << i)
                w = frozenset({pr.windows[i]})
                if bound(1 << i, c, e, j + 1, w) < min(best[0], 0.0):
                    rec(1 << i, j + 1, w)
        except Stop:
            # unexplored trees: at least the bound of the subtree being searched; the search
            # restarts nowhere, so the rest counts as unbounded
            pending[0] = -INF
            break
    found.sort()
    return min(best[0], pending[0]), [m for _, m in found[:keep]]


def total_lower_bound(pr, start_columns, deadline: float, max_rounds: int = 200) -> LpBound:
    """Column generation from ``start_columns`` (tree masks, e.g. the best plans' trees) plus
    every single-query tree; returns the best Lagrangian bound seen (module doc)."""
    if not pr.additive:
        return LpBound(-INF, False, 0, 0)
    n = len(pr.qs)
    cols = list(dict.fromkeys([1 << i for i in range(n)] + list(start_columns)))
    best = -INF
    rounds = 0
    optimal = False
    while rounds < max_rounds and time.perf_counter() < deadline:
        rounds += 1
        pi = _duals(pr, cols)
        if pi is None:
            break
        rc_min, new = _price(pr, pi, deadline)
        if rc_min == -INF:
            break
        lb = math.fsum(pi) + n * min(0.0, rc_min)
        best = max(best, lb - 1e-11 * abs(lb))  # float rounding of the prices and duals
        new = [m for m in new if m not in set(cols)]
        if not new:
            optimal = rc_min >= -1e-9 * max(1.0, abs(best))
            break
        cols += new
    return LpBound(best, optimal, rounds, len(cols))
