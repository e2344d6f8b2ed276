"""Exact optimum of the distributed placement problem for small instances (~12 queries, 4 nodes).

Why this is tractable: within one node the trees are free to choose, and a node's cost is the sum of
its trees, so a node holding query set ``S`` should always use the cheapest partition of ``S``
into trees, ``best(S)``. The cheapest partition of every subset comes from a subset dynamic
program over the exactly priced candidate trees (``O(3^n)``). A subset whose own tree costs at
least its best split can never be needed (replacing it by the split on the same node lowers or
keeps every node cost), so it is pruned from the candidate trees.

Two solvers, cross-checked in the tests:

- ``exhaustive``: enumerate the partitions of the queries into at most N node-sets (restricted
  growth strings: identical nodes are interchangeable) with node cost ``best(S)``.
- ``cpsat``: set partition + assignment in OR-Tools CP-SAT over the kept candidate trees, with
  integer-scaled costs (largest tree ~1e7 units), node-load symmetry breaking for equal nodes and
  capacity constraints. Rounding can misrank plans whose costs differ by less than ``abs_tol``.

Objectives: ``min_total`` minimises TotalCost then MaxCost (lexicographic); ``min_max`` minimises
MaxCost then TotalCost; ``front`` is the Pareto front between them (epsilon-constraint on MaxCost),
sorted by TotalCost. Every returned plan is re-priced from its queries with ``model.tree``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

from placement.distributed import NodesArg, build_plan, node_capacities
from placement.plan import Plan
from placement.queries import Query, validate_unique
from placement.trees import CostModel

INF = math.inf


class InfeasibleError(ValueError):
    """No plan fits the node capacities."""


@dataclass
class SubsetTable:
    """Exact prices of every single-key subset (bitmask over ``queries``) and best partitions."""

    queries: list[Query]
    cost: list[float]        # cost of the subset as ONE tree (inf: mixed keys)
    best: list[float]        # cheapest partition of the subset into trees
    split: list[int]         # 0: the subset itself is the best tree; else one part of a best split
    kept: list[int] = field(default_factory=list)  # candidate trees (not beaten by a split)

    def partition(self, mask: int) -> list[int]:
        """The cheapest partition of ``mask`` into tree masks."""
        out, stack = [], [mask]
        while stack:
            m = stack.pop()
            if m == 0:
                continue
            s = self.split[m]
            if s == 0:
                out.append(m)
            else:
                stack += [s, m ^ s]
        return sorted(out)

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
    optimal: bool          # proven optimal (always True for exhaustive)
    abs_tol: float         # cost differences below this may be misranked (integer scaling)
    candidate_trees: int


def _plan(name, table: SubsetTable, model, caps, node_tree_masks) -> Plan:
    node_trees = [[model.tree(table.queries_of(m)) for m in masks] for masks in node_tree_masks]
    return build_plan(name, model, node_trees, caps, table.queries)


def _front_points(points):
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


def exact_exhaustive(queries: Sequence[Query], model: CostModel, nodes: NodesArg,
                     table: SubsetTable | None = None) -> ExactResult:
    """Enumerate node-set partitions (symmetry-broken when all capacities are equal)."""
    qs = validate_unique(queries)
    caps = node_capacities(nodes)
    table = table or subset_table(qs, model)
    n, N = len(qs), len(caps)
    best = table.best
    identical = len(set(caps)) == 1
    capv = [INF if c is None else c * (1 + 1e-12) for c in caps]
    masks = [0] * N
    points: dict[tuple[float, float], tuple[int, ...]] = {}

    def rec(i: int, used: int) -> None:
        if i == n:
            loads = [best[m] for m in masks]
            if any(l > c for l, c in zip(loads, capv)):
                return
            key = (math.fsum(loads), max(loads))
            if key not in points:
                points[key] = tuple(masks)
            return
        limit = min(used + 1, N) if identical else N
        for j in range(limit):
            masks[j] |= 1 << i
            rec(i + 1, max(used, j + 1))
            masks[j] &= ~(1 << i)

    rec(0, 0)
    if not points:
        raise InfeasibleError("no assignment of the queries fits the node capacities")
    front = _front_points(points)
    plans = [_plan("EXACT_PARETO", table, model, caps, [table.partition(m) for m in points[p]])
             for p in front]
    lo_t, lo_m = plans[0], plans[-1]
    lo_t.optimizer, lo_m.optimizer = "EXACT_TOTAL", "EXACT_MAX"
    return ExactResult(lo_t, lo_m, plans, "exhaustive", True, 0.0, len(table.kept))


def exact_cpsat(queries: Sequence[Query], model: CostModel, nodes: NodesArg,
                table: SubsetTable | None = None, time_limit_s: float = 60.0, workers: int = 1,
                front: bool = True, hint: bool = True) -> ExactResult:
    """Set partition + assignment in CP-SAT over the kept candidate trees (see module).

    ``hint``: start the solver from WG_LS's plan (its node query-sets, each split into its
    cheapest kept trees): a good first incumbent shortens the search; it never changes the
    optimum. Single-worker CP-SAT with a fixed seed is deterministic."""
    from ortools.sat.python import cp_model

    qs = validate_unique(queries)
    caps = node_capacities(nodes)
    table = table or subset_table(qs, model)
    n, N = len(qs), len(caps)
    trees = table.kept
    cmax = max(table.cost[m] for m in trees)
    scale = 1e7 / cmax
    w = {m: int(round(table.cost[m] * scale)) for m in trees}
    abs_tol = (n * 0.5 + 1) / scale

    full = (1 << n) - 1
    lb_total = max(0, int(math.floor(table.best[full] * scale - n * 0.5 - 1)))
    hint_x: set[tuple[int, int]] = set()
    if hint:
        from placement.distributed import optimize

        pos = {q.id: i for i, q in enumerate(qs)}
        hp = optimize("WG_LS", qs, model, nodes)
        node_masks = [sum(1 << pos[q.id] for t in nd.trees for q in t.queries) for nd in hp.nodes]
        order = sorted(range(N), key=lambda j: -table.best[node_masks[j]])
        if len(set(caps)) > 1:
            order = list(range(N))  # unequal nodes: keep the heuristic's node identities
        hint_x = {(m, j) for j, src in enumerate(order) for m in table.partition(node_masks[src])
                  if node_masks[src]}

    solver = cp_model.CpSolver()
    solver.parameters.num_workers = workers
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.random_seed = 0
    all_optimal = True

    def solve(primary: str, bounds: dict[str, int]):
        """Lexicographic solve: minimise ``primary`` ("total" or "max"), then the other one.
        A fresh model per step (they are small), with ``bounds`` as upper bounds."""
        nonlocal all_optimal
        result = {}
        for objective in (primary, "max" if primary == "total" else "total"):
            mdl = cp_model.CpModel()
            x = {(m, j): mdl.new_bool_var(f"x{m}_{j}") for m in trees for j in range(N)}
            for i in range(n):
                mdl.add_exactly_one(x[m, j] for m in trees if m >> i & 1 for j in range(N))
            ub = sum(sorted(w.values())[-n:])
            load = [mdl.new_int_var(0, ub, f"load{j}") for j in range(N)]
            for j in range(N):
                mdl.add(load[j] == sum(w[m] * x[m, j] for m in trees))
                if caps[j] is not None:
                    mdl.add(load[j] <= int(math.floor(caps[j] * scale + n * 0.5)))
            for j in range(N - 1):
                if caps[j] == caps[j + 1]:
                    mdl.add(load[j] >= load[j + 1])  # equal nodes are interchangeable
            var = {"total": mdl.new_int_var(0, ub * N, "total"),
                   "max": mdl.new_int_var(0, ub, "max")}
            mdl.add(var["total"] == sum(load))
            mdl.add_max_equality(var["max"], load)
            # Redundant bounds that the LP relaxation misses: no plan beats the cheapest
            # partition, and the largest node carries at least the average.
            mdl.add(var["total"] >= lb_total)
            mdl.add(N * var["max"] >= var["total"])
            for name, b in {**bounds, **result}.items():
                mdl.add(var[name] <= b)
            mdl.minimize(var[objective])
            for key, v in x.items():
                mdl.add_hint(v, key in hint_x)
            st = solver.solve(mdl)
            if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                if st != cp_model.INFEASIBLE:  # time limit without a solution: not proven
                    all_optimal = False
                return None
            all_optimal &= st == cp_model.OPTIMAL
            result[objective] = int(solver.value(var[objective]))
            sol = [[m for m in trees if solver.value(x[m, j])] for j in range(N)]
        return result["total"], result["max"], sol

    first = solve("total", {})
    if first is None:
        raise InfeasibleError("no assignment of the queries fits the node capacities")
    pts = [first]
    last = solve("max", {})
    if front:
        bound = first[1] - 1
        while bound >= last[1]:
            got = solve("total", {"max": bound})
            if got is None:
                break
            pts.append(got)
            bound = got[1] - 1
    if pts[-1][1] > last[1]:
        pts.append(last)
    plans = [_plan("EXACT_PARETO", table, model, caps, sol) for _, _, sol in pts]
    # Re-priced exactly; drop points that the integer scaling made look non-dominated.
    keep = _front_points([(p.total_cost, p.max_cost) for p in plans])
    plans = [next(p for p in plans if (p.total_cost, p.max_cost) == k) for k in keep]
    plans[0].optimizer, plans[-1].optimizer = "EXACT_TOTAL", "EXACT_MAX"
    return ExactResult(plans[0], plans[-1], plans, "cpsat", all_optimal, abs_tol, len(trees))


def exhaustive_leaves(n: int, caps: Sequence[float | None]) -> int:
    """Leaves of the exhaustive enumeration: sum of Stirling numbers S(n, k), k <= N, for equal
    nodes (restricted growth strings), ``N ** n`` otherwise."""
    N = len(caps)
    if len(set(caps)) > 1:
        return N ** n
    s = [[0] * (N + 1) for _ in range(n + 1)]
    s[0][0] = 1
    for i in range(1, n + 1):
        for k in range(1, N + 1):
            s[i][k] = k * s[i - 1][k] + s[i - 1][k - 1]
    return sum(s[n][1:])


def solve_exact(queries: Sequence[Query], model: CostModel, nodes: NodesArg,
                method: str = "auto", **options) -> ExactResult:
    """Exact optimum. ``auto``: exhaustive when it has at most 2 million leaves (12 queries on 4
    equal nodes: 0.7 M, ~3 s), CP-SAT otherwise. Measured: CP-SAT is far slower on these
    instances (12 queries, 4 nodes: minutes for the whole front), mostly proving optimality."""
    qs = validate_unique(queries)
    table = subset_table(qs, model)
    if method == "auto":
        leaves = exhaustive_leaves(len(qs), node_capacities(nodes))
        method = "exhaustive" if leaves <= 2_000_000 else "cpsat"
    if method == "exhaustive":
        return exact_exhaustive(qs, model, nodes, table)  # options are CP-SAT's: ignored
    if method == "cpsat":
        return exact_cpsat(qs, model, nodes, table, **options)
    raise ValueError(f"method: expected 'auto', 'exhaustive' or 'cpsat', got {method!r}")
