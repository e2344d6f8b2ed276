"""Min TotalCost exactly: depth-first branch and bound over partitions of the queries into
trees, with certified floors (the ``placement.exact.sets`` method, module doc there), and the
exact bin-packing check of trees onto nodes.

Why its own module: the tree search is one algorithm, used alone for min TotalCost and as the
inner search of the Pareto front (``placement.exact.front``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from placement.queries import Query
from placement.trees import CostModel

INF = math.inf  # the price of what cannot be placed; the one INF of the exact solvers
SUBSET_TABLE_MAX = 16  # min TotalCost falls back to pricing all subsets up to this many queries
REL = 1e-9  # relative slack of every comparison of float costs (sums of a few float terms)


class FamilyTooLarge(RuntimeError):
    """The node-set family exceeds its budget (sets or time)."""


class OutOfTime(RuntimeError):
    """The deadline passed. ``bound`` (set on the way up, when known): a lower bound of what
    was left unexplored."""

    bound: float


class Pricer:
    """Exact prices (``model.tree``) and certified floors of one-key query subsets, cached."""

    def __init__(self, queries: Sequence[Query], model: CostModel):
        self.qs = list(queries)
        self.model = model
        keys = sorted({q.share_key for q in self.qs})  # one stream, aggregate and window kind
        self.key = [keys.index(q.share_key) for q in self.qs]
        self.key_mask = [
            sum(1 << i for i, k in enumerate(self.key) if k == kk) for kk in range(len(keys))
        ]
        self.lam = [model.rate(q.stream) for q in self.qs]
        self.additive = model.omega_is_additive()
        self._cache: dict[int, tuple[float, float, float]] = {}
        self.priced = 0
        single = [self.price(1 << i) for i in range(len(self.qs))]
        self.e1 = [s[2] for s in single]
        # omega of the query alone (additive techniques: what it adds to any tree)
        self.om1 = [(c - lam) / e if e > 0 else 0.0 for (c, _, e), lam in zip(single, self.lam)]
        self.windows = [(q.range, q.slide) for q in self.qs]

    def price(self, mask: int) -> tuple[float, float, float]:
        """``(cost, floor, E)`` of ``mask`` as one tree (one key)."""
        got = self._cache.get(mask)
        if got is None:
            t = self.model.tree([q for i, q in enumerate(self.qs) if mask >> i & 1])
            e = float(t.edge_rate)
            floor = min(t.cost, float(self.model.rate(t.stream)) + e * self.model.omega_floor(t))
            got = (t.cost, floor, e)
            self._cache[mask] = got
            self.priced += 1
        return got

    def queries_of(self, mask: int) -> list[Query]:
        return [q for i, q in enumerate(self.qs) if mask >> i & 1]


# ---- min TotalCost: branch and bound over partitions into trees ---------------------------


@dataclass
class TotalResult:
    total: float  # best total found
    bound: float  # proven lower bound (== total when proven)
    proven: bool
    partitions: list[list[int]]  # optimal (or best) partitions into tree masks, ties kept
    nodes: int = 0


@dataclass
class _Incumbent:
    """The best total found so far and its partitions (ties within ``REL`` kept)."""

    total: float
    parts: list[list[int]]


def min_total_partition(
    pr: Pricer,
    ub: float = INF,
    deadline: float = INF,
    ub_partition: list[int] | None = None,
    max_cost: float = INF,
    n_nodes: int = 0,
) -> TotalResult:
    """Cheapest partition of all queries into one-key trees (depth-first branch and bound).

    ``ub``: a known total (e.g. the best hint's); partitions within ``REL`` of the best are all
    kept (ties: the caller picks the one with the smallest MaxCost). ``max_cost`` and
    ``n_nodes``: only partitions whose trees pack onto ``n_nodes`` equal nodes with no node
    above ``max_cost`` (the Pareto front's epsilon constraint): a tree whose floor exceeds it
    is cut with every tree that contains it, and each leaf is packed exactly
    (``packs``). ``ub_partition`` must satisfy the constraint."""
    n = len(pr.qs)
    cap = max_cost  # as given: the caller's strict constraint carries its own rounding margin
    # Big omegas first: open trees get their E early, so the bounds bite early.
    order = sorted(range(n), key=lambda i: (pr.key[i], -(pr.e1[i] * pr.om1[i]), i))
    best = _Incumbent(ub, [list(ub_partition)] if ub_partition else [])
    count = [0]

    def rest_bound(k: int, blocks: list[list]) -> float:
        """At least what the queries ``order[k:]`` add to the open trees ``blocks``.

        Relaxation, per key, over the distinct windows left (a repeated window costs once):
        a window joining an open tree adds at least ``max(E_tree, e) * omega``; windows in new
        trees pay ``lambda`` per tree and ``max e of the tree * omega`` each (additive Omega;
        otherwise nothing). With the windows sorted by ``e``, some optimal grouping of the
        relaxation is contiguous (a window moves to the group of the smallest max >= its e
        without raising any cost), so a DP over the sorted windows solves it exactly."""
        if k == n:
            return 0.0
        items: dict[tuple, tuple] = {}
        for i in order[k:]:
            kw = (pr.key[i], pr.windows[i])
            if kw in items:
                continue
            join = INF
            for bl in blocks:
                if bl[0] == pr.key[i]:
                    if not pr.additive or pr.windows[i] in bl[5]:
                        inc = 0.0
                    else:
                        inc = max(bl[4], pr.e1[i]) * pr.om1[i]
                    if inc < join:
                        join = inc
            items[kw] = (pr.e1[i], pr.om1[i] if pr.additive else 0.0, join, pr.lam[i])
        total = 0.0
        for key in {kw[0] for kw in items}:
            its = sorted(v for kw, v in items.items() if kw[0] == key)
            lam = its[0][3]
            g = [0.0] * (len(its) + 1)
            for j in range(1, len(its) + 1):
                e_top = its[j - 1][0]
                best_j = g[j - 1] + its[j - 1][2]  # the window joins an open tree
                acc = e_top * its[j - 1][1]
                for i in range(j - 1, -1, -1):  # a new tree of windows i..j-1 (some join)
                    v = g[i] + lam + acc
                    if v < best_j:
                        best_j = v
                    if i:
                        e_i, om_i, join_i, _ = its[i - 1]
                        acc += min(e_top * om_i, join_i)
                g[j] = best_j
            total += g[-1]
        return total

    def rec(k: int, blocks: list[list], base: float) -> float:
        """Explore; returns a lower bound of what this subtree could not rule out (INF when
        fully explored). ``base``: sum of the open trees' floors."""
        count[0] += 1
        if count[0] % 256 == 0 and time.perf_counter() > deadline:
            raise OutOfTime
        if k == n:
            total = math.fsum(b[2] for b in blocks)
            tol = REL * max(1.0, abs(total))
            if total > best.total + tol:
                return INF
            if cap < INF and packs([b[2] for b in blocks], n_nodes, cap) is None:
                return INF
            if total < best.total - tol:
                best.total, best.parts = total, [[b[1] for b in blocks]]
            elif total <= best.total + tol:
                best.parts.append([b[1] for b in blocks])
            return INF
        i = order[k]
        kids = []
        for bi, b in enumerate(blocks):
            if b[0] != pr.key[i]:
                continue
            m = b[1] | 1 << i
            cost, floor, e = pr.price(m)
            if floor > cap:  # this tree, and every tree containing it, is above max_cost
                continue
            nb = list(blocks)
            nb[bi] = [b[0], m, cost, floor, e, b[5] | {pr.windows[i]}]
            kids.append((base - b[3] + floor, nb))
        cost, floor, e = pr.price(1 << i)
        if floor <= cap:
            nb = blocks + [[pr.key[i], 1 << i, cost, floor, e, frozenset({pr.windows[i]})]]
            kids.append((base + floor, nb))
        scored = sorted(
            ((b + rest_bound(k + 1, nb), j, b, nb) for j, (b, nb) in enumerate(kids)),
            key=lambda x: (x[0], x[1]),
        )
        for pos, (lb, _, b, nb) in enumerate(scored):
            if lb > best.total * (1 + REL) + 1e-300:
                break
            try:
                rec(k + 1, nb, b)
            except OutOfTime as stop:
                # Everything not explored below this frame is bounded by its children's floors.
                pending = [getattr(stop, "bound", lb)] + [x[0] for x in scored[pos + 1 :]]
                stop.bound = min(pending)
                raise
        return INF

    try:
        rec(0, [], 0.0)
        proven = True
        bound = best.total
    except OutOfTime as stop:
        proven = False
        bound = min(getattr(stop, "bound", 0.0), best.total)
    return TotalResult(best.total, bound, proven, best.parts, count[0])


def packs(costs: Sequence[float], n_nodes: int, cap: float) -> list[int] | None:
    """A node for each item of ``costs`` on ``n_nodes`` nodes with no load above ``cap``, None
    when there is none (exact: depth-first, largest item first, nodes of equal load tried
    once)."""
    order = sorted(range(len(costs)), key=lambda i: -costs[i])
    if not order:
        return []
    if costs[order[0]] > cap or math.fsum(costs) > n_nodes * cap:
        return None
    loads = [0.0] * n_nodes
    where = [0] * len(costs)

    def rec(k: int) -> bool:
        if k == len(order):
            return True
        c = costs[order[k]]
        seen = set()
        for j in range(n_nodes):
            lj = loads[j]
            if lj in seen or lj + c > cap:
                continue
            seen.add(lj)
            loads[j], where[order[k]] = lj + c, j
            if rec(k + 1):
                return True
            loads[j] = lj
        return False

    return where if rec(0) else None
