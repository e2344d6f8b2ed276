"""Exact optimum beyond 16 queries: tree branch-and-bound for TotalCost, node-set columns for
MaxCost (the ``sets`` method of ``placement.exact``).

Why not the subset table: it prices all ``2^n`` query subsets (20 queries: 1 M trees at ~65 us
each) and its CP-SAT model has one variable per (tree, node). Two observations avoid both:

- **Certified floors.** A tree's price ``lambda + E * Omega`` has a floor for *every tree that
  contains it*: ``E`` only grows when classes are added, and ``placement.cost.omega_floor``
  bounds Omega from below (Panes, FlatFIT, SlickDeque Non-Inv: Omega itself). So the sum of
  the floors of the partial trees bounds every completion of a partial plan, and a node set
  whose cheapest partition into floors (``bestfloor``) exceeds a bound can be dropped with all
  its supersets. For additive Omega (Panes, FlatFIT) a query joining a tree adds at least
  ``max(E_tree, E_query) * omega(query)`` (distinct window), which bounds what the queries not
  yet placed will add.
- **Min TotalCost** (no capacities) does not depend on the nodes: it is the cheapest partition
  of the queries into trees, found by depth-first branch and bound (each query joins an open
  tree of its key or opens one; open trees in creation order, so no partition is visited
  twice), started from the best hint. Its MaxCost is then minimised by scheduling the optimal
  trees on the nodes (CP-SAT, trees as items).
- **Min MaxCost** is a set partition over *node sets*: a node holding ``S`` costs ``best(S)``
  (its cheapest partition into trees); only sets with ``best(S) <= U`` (``U``: best known
  MaxCost) can appear in a better plan, and they are enumerated level by level as a
  downward-closed family (``bestfloor(S) <= U`` for ``S`` and all its subsets). CP-SAT then picks
  at most N disjoint sets covering every query (nodes of equal capacity are interchangeable,
  so sets carry no node index: no symmetry to break), minimising the largest, then the sum.
  With capacities, every objective uses this model (sets within the largest capacity, one
  count per capacity class).

- **Low rates** (many small trees): when the branch and bound does not finish, the set
  partition's LP bound over all trees (column generation with an exact pricing search,
  ``placement.exact_lp``) usually meets the best plan and proves it.
- **The Pareto front** (no capacities; ``front=True``) by epsilon constraint over tree
  partitions, from the min-TotalCost plan down to the min-MaxCost one: each step is the tree
  branch and bound under "every node strictly below the last point's MaxCost" (trees above it
  cut by their floors, leaves packed onto the nodes exactly), see ``pareto_front``.

Proof and bounds: the branch and bound's bound when it stops early is the least floor of the
subtrees it did not explore (rigorous); CP-SAT's objective bound on integer-scaled set costs is
corrected by the rounding (at most 0.5 unit per set). A family larger than ``max_sets`` is not
built (``FamilyTooLarge``): the caller keeps its best plan and a weaker bound.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numba import njit, types
from numba.typed import Dict

from placement.distributed import build_plan
from placement.plan import Plan
from placement.queries import Query
from placement.subset_split import unfold
from placement.trees import CostModel

INF = math.inf
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


# ---- node-set family ------------------------------------------------------------------------


@dataclass
class Family:
    """Node sets ``S`` (bitmasks) with ``bestfloor(S) <= limit`` whose subsets all qualify:
    ``best[S]`` (cheapest partition into trees, exact) and ``split[S]`` (0: one tree)."""

    best: dict[int, float] = field(default_factory=dict)
    floor: dict[int, float] = field(default_factory=dict)
    split: dict[int, int] = field(default_factory=dict)

    def partition(self, mask: int) -> list[int]:
        """The cheapest partition of ``mask`` into tree masks."""
        return unfold(self.split, mask)


def node_set_family(
    pr: Pricer, limit: float, max_sets: int = 400_000, deadline: float = INF
) -> Family:
    """Level-wise enumeration of the downward-closed family (module doc)."""
    n = len(pr.qs)
    fam = Family()
    lim = limit * (1 + REL)
    level = []
    for i in range(n):
        c, f, _ = pr.price(1 << i)
        if f <= lim:
            m = 1 << i
            fam.best[m], fam.floor[m], fam.split[m] = c, f, 0
            level.append(m)
    checks = 0
    while level:
        nxt = []
        for s in level:
            top = s.bit_length()  # extend by queries above the highest one: each set once
            for j in range(top, n):
                m = s | 1 << j
                # every subset one query smaller must be in the family (downward closed)
                ok = True
                r = s
                while r:
                    low = r & -r
                    if (m ^ low) not in fam.best:
                        ok = False
                        break
                    r ^= low
                if not ok:
                    continue
                checks += 1
                if checks % 512 == 0 and time.perf_counter() > deadline:
                    raise FamilyTooLarge(f"node-set family: time ran out at {len(fam.best)} sets")
                one_key = any(m & km == m for km in pr.key_mask)
                if one_key:
                    c, f, _ = pr.price(m)
                else:
                    c = f = INF
                b, bf, arg = c, f, 0
                low = m & -m
                rest = m ^ low
                sub = (rest - 1) & rest
                while True:  # proper submasks containing the lowest query
                    part = sub | low
                    if part != m:
                        v = fam.best[part] + fam.best[m ^ part]
                        if v < b and (b == INF or v < b - 1e-12 * b):  # ties: one tree
                            b, arg = v, part
                        vf = fam.floor[part] + fam.floor[m ^ part]
                        if vf < bf:
                            bf = vf
                    if sub == 0:
                        break
                    sub = (sub - 1) & rest
                if bf > lim:
                    continue
                fam.best[m], fam.floor[m], fam.split[m] = b, bf, arg
                nxt.append(m)
                if len(fam.best) > max_sets:
                    raise FamilyTooLarge(
                        f"node-set family over {max_sets} sets (limit {limit:.6g})"
                    )
        level = nxt
    return fam


# ---- CP-SAT over node sets -------------------------------------------------------------------


@dataclass
class SetSolve:
    sets: list[int]  # the chosen node sets (may be fewer than N: empty nodes)
    classes: list[int]  # capacity class of each set
    total: float
    max: float
    proven: bool  # the primary objective proven optimal
    bound: float  # proven lower bound of the primary objective


def solve_sets(
    pr: Pricer,
    fam: Family,
    caps: Sequence[float | None],
    primary: str,
    limit: float,
    time_limit_s: float,
    hint: list[int] | None = None,
    workers: int = 1,
    lexicographic: bool = True,
) -> SetSolve | None:
    """At most N disjoint node sets (``best <= limit`` and within a capacity) covering all
    queries; lexicographic min of ``primary`` ("max" or "total") then the other. None when
    infeasible within the family; ``proven`` False when the time ran out.
    ``lexicographic=False``: the primary objective only."""
    from ortools.sat.python import cp_model

    n = len(pr.qs)
    N = len(caps)
    cls_caps = sorted({c for c in caps}, key=lambda c: (c is None, c or 0.0))
    cls_count = [sum(1 for c in caps if c == cc) for cc in cls_caps]
    lim = limit * (1 + REL)
    cols = [(m, v) for m, v in fam.best.items() if v <= lim]
    if not cols:
        return None
    vmax = max(v for _, v in cols)
    scale = 1e7 / max(vmax, 1e-300)
    start = time.perf_counter()
    result: dict[str, int] = {}
    proven = True
    bound_int: float = 0  # the solver's objective bound (integer units), from the first step
    chosen: list[int] | None = None
    if primary == "feasible":  # any cover within ``limit``: no objective
        objectives: tuple = ("feasible",)
    else:
        objectives = (primary, "total" if primary == "max" else "max")[: 2 if lexicographic else 1]
    for step, obj in enumerate(objectives):
        mdl = cp_model.CpModel()
        y = {}
        for m, v in cols:
            for k, cc in enumerate(cls_caps):
                if cc is None or v <= cc * (1 + 1e-12):
                    y[m, k] = mdl.new_bool_var(f"y{m}_{k}")
        by_q: list[list[cp_model.IntVar]] = [[] for _ in range(n)]
        for (m, _k), yv in y.items():
            r = m
            while r:
                low = r & -r
                by_q[low.bit_length() - 1].append(yv)
                r ^= low
        if any(not vs for vs in by_q):
            return None
        for vs in by_q:
            mdl.add_exactly_one(vs)
        for k in range(len(cls_caps)):
            mdl.add(sum(v for (m, kk), v in y.items() if kk == k) <= cls_count[k])
        w = {m: int(round(v * scale)) for m, v in cols}
        top = max(w.values())
        var = {"max": mdl.new_int_var(0, top, "max"), "total": mdl.new_int_var(0, top * N, "total")}
        for (m, _k), yv in y.items():
            mdl.add(var["max"] >= w[m]).only_enforce_if(yv)
        mdl.add(var["total"] == sum(w[m] * yv for (m, k), yv in y.items()))
        mdl.add(N * var["max"] >= var["total"])
        for name, b in result.items():
            mdl.add(var[name] <= b)
        hs = chosen if chosen is not None else hint
        if hs is not None and all(any((m, k) in y for k in range(len(cls_caps))) for m in hs):
            hset = set(hs)
            for (m, _k), yv in y.items():
                mdl.add_hint(yv, m in hset)
        if obj != "feasible":
            mdl.minimize(var[obj])
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = workers
        solver.parameters.random_seed = 0
        left = time_limit_s - (time.perf_counter() - start)
        # the second (tie-breaking) objective gets at most a quarter of the budget
        share = left / (len(objectives) - step) if step == 0 else min(left, 0.25 * time_limit_s)
        solver.parameters.max_time_in_seconds = max(0.05, share)
        st = solver.solve(mdl)
        if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            if step == 0:
                if st == cp_model.INFEASIBLE:
                    return None
                return SetSolve(
                    [],
                    [],
                    INF,
                    INF,
                    False,
                    max(0.0, (solver.best_objective_bound - _slack(obj, N)) / scale),
                )
            break
        if obj == "feasible":
            chosen = [m for (m, k), v in y.items() if solver.value(v)]
            chosen_cls = [k for (m, k), v in y.items() if solver.value(v)]
            break
        if step == 0:
            proven = st == cp_model.OPTIMAL
            bound_int = solver.best_objective_bound
        result[obj] = int(solver.value(var[obj]))
        chosen = [m for (m, k), v in y.items() if solver.value(v)]
        chosen_cls = [k for (m, k), v in y.items() if solver.value(v)]
    assert chosen is not None  # the first step either solved or returned
    vals = [fam.best[m] for m in chosen]
    total, mx = math.fsum(vals), max(vals)
    if primary == "feasible":
        return SetSolve(chosen, chosen_cls, total, mx, True, 0.0)
    bound = max(0.0, (bound_int - _slack(primary, N)) / scale)
    return SetSolve(
        chosen, chosen_cls, total, mx, proven, min(bound, total if primary == "total" else mx)
    )


def _slack(obj: str, n_nodes: int) -> float:
    """Integer rounding of the objective: 0.5 unit per set (the max is one set's)."""
    return 0.5 if obj == "max" else 0.5 * n_nodes


def schedule_trees(
    costs: Sequence[float], caps: Sequence[float | None], time_limit_s: float = 10.0
) -> tuple[list[int], bool]:
    """Trees (costs) to nodes minimising the largest node cost (CP-SAT; trees as items).
    Returns the node of each tree and whether the assignment is proven optimal."""
    from ortools.sat.python import cp_model

    N, T = len(caps), len(costs)
    if T == 0:
        return [], True
    scale = 1e7 / max(max(costs), 1e-300)
    w = [int(round(c * scale)) for c in costs]
    mdl = cp_model.CpModel()
    x = [[mdl.new_bool_var(f"x{t}_{j}") for j in range(N)] for t in range(T)]
    for t in range(T):
        mdl.add_exactly_one(x[t])
    load = [sum(w[t] * x[t][j] for t in range(T)) for j in range(N)]
    mx = mdl.new_int_var(0, sum(w), "max")
    for j in range(N):
        mdl.add(mx >= load[j])
        cap = caps[j]
        if cap is not None:
            mdl.add(load[j] <= int(math.floor(cap * scale - 0.5 * T)))
    if len(set(caps)) == 1:
        mdl.add(x[0][0] == 1)  # equal nodes: the first tree on the first node
    mdl.minimize(mx)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    solver.parameters.max_time_in_seconds = time_limit_s
    st = solver.solve(mdl)
    if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        if any(c is not None for c in caps):
            raise RuntimeError("no schedule of the trees fits the node capacities")
        # no time to find one: largest tree first to the least loaded node (LPT)
        loads, where = [0.0] * N, [0] * T
        for t in sorted(range(T), key=lambda t: -costs[t]):
            j = min(range(N), key=lambda j: (loads[j], j))
            where[t] = j
            loads[j] += costs[t]
        return where, False
    return [
        next(j for j in range(N) if solver.value(x[t][j])) for t in range(T)
    ], st == cp_model.OPTIMAL


def plan_from_sets(
    name: str,
    pr: Pricer,
    fam_partition,
    sets: Sequence[int],
    classes: Sequence[int],
    caps: Sequence[float | None],
) -> Plan:
    """Node sets -> a plan: each set on a node of its capacity class (larger sets first)."""
    cls_caps = sorted({c for c in caps}, key=lambda c: (c is None, c or 0.0))
    free = {k: [j for j, c in enumerate(caps) if c == cc] for k, cc in enumerate(cls_caps)}
    node_trees: list[list] = [[] for _ in caps]
    for m, k in sorted(zip(sets, classes), key=lambda x: -bin(x[0]).count("1")):
        j = free[k].pop(0)
        node_trees[j] = [pr.model.tree(pr.queries_of(t)) for t in fam_partition(m)]
    return build_plan(name, pr.model, node_trees, caps, pr.qs)


# ---- min MaxCost without capacities: exact cover by bisection --------------------------------


@dataclass
class MaxResult:
    max: float
    bound: float
    proven: bool
    sets: list[int]
    checks: int = 0


@njit(cache=True)
def _popcount(x):
    c = 0
    while x:
        x &= x - 1
        c += 1
    return c


@njit(cache=True)
def _cover_steps(cols, start, end, n, kmax, big, state, masks, pos, lowq, chosen, dead, max_steps):
    """Resumable exact-cover search (``min_max_cover``): at most ``max_steps`` expansions.
    ``state[0]``: depth (-1: exhausted). Returns 1 (covered: ``chosen[:state[0]]``), 0 (no
    cover), -1 (step budget used up; call again with the same arrays)."""
    full = (np.int64(1) << n) - 1
    d = state[0]
    steps = 0
    while d >= 0:
        m = masks[d]
        if pos[d] == -1:
            if m == full:
                state[0] = d
                return 1
            left = kmax - d
            if left == 0 or n - _popcount(m) > left * big or dead.get(m, -1) >= left:
                d -= 1
                continue
            steps += 1
            if steps > max_steps:
                state[0] = d
                return -1
            free = ~m & full
            low = 0
            while not (free >> low) & 1:
                low += 1
            lowq[d] = low
            pos[d] = start[low]
        e = end[lowq[d]]
        p = pos[d]
        while p < e and (cols[p] & m) != 0:
            p += 1
        steps += (p - pos[d]) >> 4  # scanning counts too: a chunk stays short
        if p < e:
            pos[d] = p + 1
            chosen[d] = cols[p]
            masks[d + 1] = m | cols[p]
            pos[d + 1] = -1
            d += 1
        else:
            dead[m] = kmax - d
            d -= 1
    state[0] = -1
    return 0


def min_max_cover(
    fam: Family, n: int, n_nodes: int, ub: float, ub_sets: list[int] | None, deadline: float = INF
) -> MaxResult:
    """Smallest ``M`` such that at most ``n_nodes`` disjoint sets of the family with
    ``best <= M`` cover all queries (equal nodes): bisection over the sets' costs, each step an
    exact-cover search (the lowest uncovered query picks its set; failed (covered, nodes left)
    states are remembered; compiled with numba, resumable in chunks so the deadline holds;
    ``checks`` counts chunks of at most 200,000 expansions). Why not CP-SAT: its LP bound of a min-max set partition is weak
    (20 queries, 8 nodes: not proven in minutes); the search proves it in seconds."""
    cols = sorted((v, m) for m, v in fam.best.items() if v <= ub * (1 + REL))
    values = sorted({v for v, _ in cols})
    checks = [0]

    def cover(limit: float) -> list[int] | None:
        """At most ``n_nodes`` disjoint sets with ``best <= limit`` covering all queries
        (compiled search; a set is picked by its lowest query, larger sets first)."""
        sel = [m for v, m in cols if v <= limit]
        if not sel:
            return None
        # Static "fewest options first": relabel the queries so that the one in the fewest
        # sets is bit 0; a set is then tried when its most constrained query is the lowest
        # uncovered one.
        freq = [0] * n
        for m in sel:
            r = m
            while r:
                low = r & -r
                freq[low.bit_length() - 1] += 1
                r ^= low
        rank = sorted(range(n), key=lambda i: (freq[i], i))
        new_of = {old: new for new, old in enumerate(rank)}

        def relabel(m: int, table=new_of) -> int:
            out, r = 0, m
            while r:
                low = r & -r
                out |= 1 << table[low.bit_length() - 1]
                r ^= low
            return out

        back = {relabel(m): m for m in sel}
        sel = list(back)
        sel.sort(key=lambda m: ((m & -m).bit_length(), -bin(m).count("1"), m))
        arr = np.array(sel, dtype=np.int64)
        lows = np.array([(m & -m).bit_length() - 1 for m in sel], dtype=np.int64)
        start = np.searchsorted(lows, np.arange(n), "left").astype(np.int64)
        end = np.searchsorted(lows, np.arange(n), "right").astype(np.int64)
        big = max(bin(m).count("1") for m in sel)
        k = n_nodes
        state = np.zeros(1, dtype=np.int64)
        masks = np.zeros(k + 2, dtype=np.int64)
        pos = np.full(k + 2, -1, dtype=np.int64)
        lowq = np.zeros(k + 2, dtype=np.int64)
        chosen = np.zeros(k + 2, dtype=np.int64)
        dead = Dict.empty(key_type=types.int64, value_type=types.int64)
        while True:
            r = _cover_steps(
                arr, start, end, n, k, big, state, masks, pos, lowq, chosen, dead, 200_000
            )
            checks[0] += 1
            if r == 1:
                return [back[int(c)] for c in chosen[: state[0]]]
            if r == 0:
                return None
            if time.perf_counter() > deadline:
                raise OutOfTime

    # values[hi] is feasible (the known plan), values[:lo] are not
    hi = len(values) - 1
    best_sets = ub_sets
    lo = 0
    try:
        while lo < hi:
            mid = (lo + hi) // 2
            got = cover(values[mid])
            if got is None:
                lo = mid + 1
            else:
                hi, best_sets = mid, got
                # the cover's own max may be below values[mid]
                hi = min(hi, values.index(max(fam.best[m] for m in got)))
        if best_sets is None or max(fam.best[m] for m in best_sets) > values[hi]:
            best_sets = cover(values[hi]) if values else None
        proven = True
    except OutOfTime:
        proven = False
    mx = max(fam.best[m] for m in best_sets) if best_sets else INF
    bound = values[lo] if values else 0.0
    return MaxResult(mx, min(bound, mx), proven, best_sets or [], checks[0])


def _min_max_capped(
    pr: Pricer, fam: Family, caps, ub: float, deadline: float, hint, workers: int, stats: dict
) -> SetSolve | None:
    """Min MaxCost with capacities: bisection over the sets' costs, each step a CP-SAT
    feasibility check (fast, unlike CP-SAT's min-max objective whose LP bound is weak), then
    the least TotalCost within the found MaxCost."""
    values = sorted({v for v in fam.best.values() if v <= ub * (1 + REL)})
    if not values:
        return None
    lo, hi = 0, len(values) - 1
    best = None
    proven = True
    checks = 0
    while lo <= hi:
        left = deadline - time.perf_counter()
        if left <= 0:
            proven = False
            break
        mid = (lo + hi) // 2
        checks += 1
        got = solve_sets(pr, fam, caps, "feasible", values[mid], left, hint, workers)
        if got is None:  # proven: no cover within values[mid]
            lo = mid + 1
        elif not got.sets:  # time ran out
            proven = False
            break
        else:
            best = got
            # the cover may use a set up to REL above values[mid] (a later index): search
            # strictly below mid either way, or equal-within-REL values would loop forever
            hi = min(values.index(got.max), mid) - 1
    stats["capped_checks"] = checks
    if best is None:
        return (
            None
            if proven
            else SetSolve([], [], INF, INF, False, values[lo] if lo < len(values) else 0.0)
        )
    bound = values[lo] if lo < len(values) else best.max
    left = deadline - time.perf_counter()
    tie = (
        solve_sets(
            pr,
            fam,
            caps,
            "total",
            best.max,
            max(0.1, left),
            best.sets,
            workers,
            lexicographic=False,
        )
        if left > 0
        else None
    )
    if tie is not None and tie.sets and tie.max <= best.max * (1 + REL):
        best = tie
    return SetSolve(
        best.sets,
        best.classes,
        best.total,
        best.max,
        proven and bound >= best.max * (1 - REL),
        min(bound, best.max),
    )


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


def _front_point(plan: Plan, pos: dict[str, int]) -> FrontPoint:
    parts, where = [], []
    for j, nd in enumerate(plan.nodes):
        for t in nd.trees:
            parts.append(sum(1 << pos[q.id] for q in t.queries))
            where.append(j)
    return FrontPoint(plan.total_cost, plan.max_cost, parts, where)


# ---- the solver -----------------------------------------------------------------------------


def exact_sets(
    queries: Sequence[Query],
    model: CostModel,
    nodes,
    hints: Sequence[Plan] = (),
    time_limit_s: float = 60.0,
    hint: bool = True,
    max_sets: int = 400_000,
    workers: int = 1,
    max_ties: int = 16,
    front: bool = False,
):
    """Min TotalCost and min MaxCost (module doc) within ``time_limit_s`` for the whole call;
    an objective not proven keeps its best plan (never worse than ``hints``) and a proven
    bound. ``front`` of the result: with ``front`` and no capacities, the exact Pareto front
    (``pareto_front``, in the time left; ``ExactResult.front_exact`` says whether it was
    proven); otherwise the two plans and the hints' non-dominated ones (``front_exact``
    False)."""
    from placement.dist_local_search import wg_ls
    from placement.distributed import node_capacities
    from placement.exact_common import ExactResult, InfeasibleError, plans_fitting, seed_result
    from placement.queries import validate_unique

    start = time.perf_counter()
    deadline = start + time_limit_s
    qs = validate_unique(queries)
    if len(qs) > 60:
        raise ValueError(
            f"exact search is for small instances: {len(qs)} queries > 60 "
            "(node sets are 64-bit masks)"
        )
    caps = node_capacities(nodes)
    N = len(caps)
    pr = Pricer(qs, model)
    pos = {q.id: i for i, q in enumerate(qs)}
    pool = list(hints)
    if hint:
        pool.append(wg_ls(qs, model, caps))
    pool = plans_fitting(pool, caps)

    def node_masks(p: Plan) -> list[int]:
        return [sum(1 << pos[q.id] for t in nd.trees for q in t.queries) for nd in p.nodes]

    def tree_masks(p: Plan) -> list[int]:
        return [sum(1 << pos[q.id] for q in t.queries) for t in p.trees]

    stats: dict = {"t_hints": time.perf_counter() - start}
    ht = min(pool, key=lambda p: (p.total_cost, p.max_cost), default=None)
    hm = min(pool, key=lambda p: (p.max_cost, p.total_cost), default=None)
    single_floor = max(pr.price(1 << i)[1] for i in range(len(qs)))  # some node holds q
    uncapped = all(c is None for c in caps)
    stats.update(priced=0, bb_nodes=0, sets=0)

    # -- min TotalCost
    plan_t = None
    if uncapped:
        tr = min_total_partition(
            pr,
            ht.total_cost if ht else INF,
            start + 0.15 * time_limit_s,
            tree_masks(ht) if ht else None,
        )
        stats["bb_nodes"] = tr.nodes
        if not tr.proven and time.perf_counter() < deadline:
            # Many small trees (low rate): the set partition's LP bound (column generation,
            # placement.exact_lp) is far tighter than the tree branch and bound's relaxation.
            from placement.exact_lp import total_lower_bound

            cols = [m for part in tr.partitions[:1] for m in part]
            cols += [m for p in pool for m in tree_masks(p)]
            lpb = total_lower_bound(pr, cols, start + 0.45 * time_limit_s)
            stats.update(lp_bound=lpb.bound, lp_optimal=lpb.lp_optimal, lp_rounds=lpb.rounds)
            if lpb.bound > tr.bound:
                proven = tr.total <= lpb.bound * (1 + REL)
                bound = tr.total if proven else lpb.bound  # proven within rounding: the optimum
                tr = TotalResult(tr.total, bound, proven, tr.partitions, tr.nodes)
        if not tr.proven and len(qs) <= SUBSET_TABLE_MAX and time.perf_counter() < deadline:
            # Few queries: price every subset instead (placement.exact.subset_table, exact;
            # 16 queries ~5 s) rather than give up the proof.
            from placement.exact_common import subset_table

            table = subset_table(qs, model)
            full = (1 << len(qs)) - 1
            if table.best[full] <= tr.total * (1 + REL):
                tr = TotalResult(
                    table.best[full], table.best[full], True, [table.partition(full)], tr.nodes
                )
            else:
                tr = TotalResult(tr.total, tr.total, True, tr.partitions, tr.nodes)
            stats["subset_table"] = True
        proven_t, bound_t = tr.proven, tr.bound
        best_sched = None
        for parts in tr.partitions[:max_ties]:
            costs = [pr.price(m)[0] for m in parts]
            left = max(0.2, (deadline - time.perf_counter()) * 0.1)
            where, _ = schedule_trees(costs, caps, left)
            loads = [0.0] * N
            for c, j in zip(costs, where):
                loads[j] += c
            key = (math.fsum(loads), max(loads))
            if best_sched is None or key < best_sched[0]:
                best_sched = (key, parts, where)
        if best_sched is not None:
            _, parts, where = best_sched
            node_trees = [
                [pr.model.tree(pr.queries_of(m)) for m, j in zip(parts, where) if j == jj]
                for jj in range(N)
            ]
            plan_t = build_plan("EXACT_TOTAL", model, node_trees, caps, qs)
    else:
        # capped: every node has a capacity (node_capacities: all or none)
        cap_max = max(c for c in caps if c is not None)
        try:
            fam = node_set_family(pr, cap_max, max_sets, start + 0.45 * time_limit_s)
            got = solve_sets(
                pr,
                fam,
                caps,
                "total",
                cap_max,
                max(0.1, start + 0.45 * time_limit_s - time.perf_counter()),
                None,
                workers,
            )
            if got is None:
                raise InfeasibleError("no assignment of the queries fits the node capacities")
            proven_t, bound_t = got.proven, got.bound
            if got.sets:
                plan_t = plan_from_sets(
                    "EXACT_TOTAL", pr, fam.partition, got.sets, got.classes, caps
                )
        except FamilyTooLarge:
            proven_t, bound_t = False, 0.0
    if plan_t is None:
        if ht is None:
            raise InfeasibleError("no plan found within the time limit")
        plan_t = copy.deepcopy(ht)
        proven_t = proven_t and ht.total_cost <= bound_t

    # -- min MaxCost
    ub_m = min(plan_t.max_cost, hm.max_cost if hm else INF)
    plan_m, proven_m = None, False
    bound_m = max(bound_t / N, single_floor)
    try:
        stats["t_total"] = time.perf_counter() - start
        fam = node_set_family(pr, ub_m, max_sets, deadline)
        stats["sets"] = len(fam.best)
        stats["t_family"] = time.perf_counter() - start
        hint_sets = None
        src = hm if hm is not None and hm.max_cost <= plan_t.max_cost else plan_t
        hs = [m for m in node_masks(src) if m]
        if all(m in fam.best for m in hs):
            hint_sets = hs
        if uncapped:
            cov = min_max_cover(fam, len(qs), N, ub_m, hint_sets, deadline)
            stats["cover_checks"] = cov.checks
            bound_m = max(bound_m, cov.bound)
            # MaxCost settled: the least TotalCost among covers within it (CP-SAT, hinted)
            stats["t_cover"] = time.perf_counter() - start
            left = deadline - time.perf_counter()
            got = solve_sets(
                pr,
                fam,
                caps,
                "total",
                cov.max,
                # a front to follow settles this tie-break exactly: a short look only
                max(0.1, min(left, (0.02 if front and proven_t else 0.25) * time_limit_s)),
                cov.sets,
                workers,
                lexicographic=False,
            )
            stats["secondary_proven"] = bool(got is not None and got.proven)
            if not cov.sets:
                raise FamilyTooLarge("no cover of the queries within the best known MaxCost")
            if got is None or not got.sets or got.max > cov.max * (1 + REL):
                got = SetSolve(
                    cov.sets,
                    [0] * len(cov.sets),
                    math.fsum(fam.best[m] for m in cov.sets),
                    cov.max,
                    cov.proven,
                    cov.bound,
                )
            got.proven, got.bound = cov.proven, cov.bound
        else:
            got = _min_max_capped(pr, fam, caps, ub_m, deadline, hint_sets, workers, stats)
        if got is not None:
            proven_m = got.proven
            bound_m = max(bound_m, got.bound)
            if got.sets:
                plan_m = plan_from_sets("EXACT_MAX", pr, fam.partition, got.sets, got.classes, caps)
    except FamilyTooLarge:
        pass
    if plan_m is None:
        plan_m = copy.deepcopy(
            min([plan_t] + ([hm] if hm else []), key=lambda p: (p.max_cost, p.total_cost))
        )
    front_plans, front_exact = [plan_t, plan_m], False
    if front and uncapped and proven_t:
        t_front = time.perf_counter()
        pts, front_exact = pareto_front(
            pr,
            N,
            _front_point(plan_t, pos),
            _front_point(plan_m, pos),
            proven_m,
            deadline,
            max_ties,
        )
        front_plans = [
            build_plan(
                "EXACT_PARETO",
                model,
                [
                    [pr.model.tree(pr.queries_of(m)) for m, j in zip(p.parts, p.where) if j == jj]
                    for jj in range(N)
                ],
                caps,
                qs,
            )
            for p in pts
        ]
        stats.update(front_points=len(pts), t_front=time.perf_counter() - t_front)
        # the front's ends are the lexicographic optima (least MaxCost at min TotalCost and
        # least TotalCost at min MaxCost) when it is exact
        if front_exact or front_plans[0].total_cost <= plan_t.total_cost:
            plan_t = copy.deepcopy(min(front_plans, key=lambda p: (p.total_cost, p.max_cost)))
        lo = min(front_plans, key=lambda p: (p.max_cost, p.total_cost))
        if lo.max_cost <= plan_m.max_cost and (front_exact or lo.total_cost <= plan_m.total_cost):
            plan_m = copy.deepcopy(lo)
        if front_exact and not proven_m:  # the front ran down to "no plan below": min MaxCost
            proven_m, bound_m = True, plan_m.max_cost
    stats["priced"] = pr.priced
    stats["t_all"] = time.perf_counter() - start
    plan_t.optimizer, plan_m.optimizer = "EXACT_TOTAL", "EXACT_MAX"
    res = ExactResult(
        plan_t,
        plan_m,
        front_plans,
        "sets",
        proven_t and proven_m,
        0.0,
        pr.priced,
        bound_total=bound_t,
        bound_max=bound_m,
        optimal_total=proven_t,
        optimal_max=proven_m,
    )
    res.front_exact = front_exact
    res.stats.update(stats)
    return seed_result(res, pool, caps)
