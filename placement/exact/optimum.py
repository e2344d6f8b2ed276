"""Exact optimum of the distributed placement problem for small instances (~12 queries, 4 nodes;
``placement.exact.sets`` reaches ~24 queries on 8 nodes and is what ``solve_exact`` uses there).

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

Seeding and bounds (why: the exact answer is the yardstick of every heuristic's gap, so it must
never be worse than a known plan, and an unproven answer must say how far it may be off):
``hints`` (heuristic plans) start CP-SAT from the best of them (solution hint + the hint's
objective as an upper bound), and ``seed_result`` swaps in a hint plan that beats the solver's
answer. ``ExactResult.bound_total`` / ``bound_max`` are *proven* lower bounds of the optimum
(equal to it when proven): CP-SAT's objective bound, less the worst integer rounding, and the
combinatorial bounds ``best(all queries)`` (min TotalCost without capacities, exact) and
``best(all) / N`` (some node carries the average).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from placement.distributed import NodesArg, build_plan, node_capacities
from placement.exact.common import (
    ExactResult,
    InfeasibleError,
    SubsetTable,
    front_points,
    plans_fitting,
    seed_result,
    subset_table,
)
from placement.exact.trees import INF
from placement.plan import Plan
from placement.queries import Query, validate_unique
from placement.trees import CostModel


def _plan(name, table: SubsetTable, model, caps, node_tree_masks) -> Plan:
    node_trees = [[model.tree(table.queries_of(m)) for m in masks] for masks in node_tree_masks]
    return build_plan(name, model, node_trees, caps, table.queries)


def exact_exhaustive(
    queries: Sequence[Query], model: CostModel, nodes: NodesArg, table: SubsetTable | None = None
) -> ExactResult:
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
    front = front_points(points)
    plans = [
        _plan("EXACT_PARETO", table, model, caps, [table.partition(m) for m in points[p]])
        for p in front
    ]
    lo_t, lo_m = plans[0], plans[-1]
    lo_t.optimizer, lo_m.optimizer = "EXACT_TOTAL", "EXACT_MAX"
    return ExactResult(lo_t, lo_m, plans, "exhaustive", True, 0.0, len(table.kept))


def exact_cpsat(
    queries: Sequence[Query],
    model: CostModel,
    nodes: NodesArg,
    table: SubsetTable | None = None,
    time_limit_s: float = 60.0,
    workers: int = 1,
    front: bool = True,
    hint: bool = True,
    hints: Sequence[Plan] = (),
) -> ExactResult:
    """Set partition + assignment in CP-SAT over the kept candidate trees (see module).

    ``hint``: also start from WG_LS's plan; ``hints``: further plans (e.g. every heuristic plan
    of a run). Per objective the best of them is the solver's solution hint (its node
    query-sets, each split into its cheapest kept trees) and its integer objective an upper
    bound: a good first incumbent shortens the search and the answer is never worse than it.
    ``time_limit_s`` is the budget of the whole call (every lexicographic step and the front
    share it); an objective not proven within it keeps its best plan and CP-SAT's proven bound
    (``ExactResult.bound_total`` / ``bound_max``). Single-worker CP-SAT with a fixed seed is
    deterministic for a given time limit unless the limit is hit."""
    from ortools.sat.python import cp_model

    deadline = time.perf_counter() + time_limit_s
    qs = validate_unique(queries)
    caps = node_capacities(nodes)
    table = table or subset_table(qs, model)
    n, N = len(qs), len(caps)
    trees = table.kept
    cmax = max(table.cost[m] for m in trees)
    scale = 1e7 / cmax
    w = {m: int(round(table.cost[m] * scale)) for m in trees}
    abs_tol = (n * 0.5 + 1) / scale
    slack = n * 0.5  # |integer cost - scale * cost| of a node or a plan (at most n trees)
    cap_int = [None if c is None else int(math.floor(c * scale + slack)) for c in caps]

    full = (1 << n) - 1
    lb_total = max(0, int(math.floor(table.best[full] * scale - slack - 1)))
    pos = {q.id: i for i, q in enumerate(qs)}
    plans = list(hints)
    if hint:
        from placement.local_search.search import wg_ls

        plans.append(wg_ls(qs, model, node_capacities(nodes)))

    def as_solution(plan: Plan):
        """A plan as the model's ``x`` (node query-sets split into kept trees), node order
        fitted to the symmetry breaking; None when it does not fit the model."""
        if len(plan.nodes) != N:
            return None
        try:
            node_masks = [
                sum(1 << pos[q.id] for t in nd.trees for q in t.queries) for nd in plan.nodes
            ]
        except KeyError:
            return None
        if sum(bin(m).count("1") for m in node_masks) != n or any(
            table.best[m] == INF for m in node_masks if m
        ):
            return None
        parts = [table.partition(m) if m else [] for m in node_masks]
        loads = [sum(w[t] for t in ps) for ps in parts]
        order = list(range(N))
        if len(set(caps)) == 1:
            order.sort(key=lambda j: -loads[j])
        sol = [parts[j] for j in order]
        ld = [loads[j] for j in order]
        if any(c is not None and l > c for l, c in zip(ld, cap_int)):
            return None
        if any(caps[j] == caps[j + 1] and ld[j] < ld[j + 1] for j in range(N - 1)):
            return None
        return sol, sum(ld), max(ld)

    sols = [s for s in map(as_solution, plans) if s is not None]

    solver = cp_model.CpSolver()
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = 0
    all_optimal = True
    proof = {"total": True, "max": True}
    bound = {"total": lb_total, "max": 0}

    def solve(primary: str, bounds: dict[str, int], steps_left: int):
        """Lexicographic solve: minimise ``primary`` ("total" or "max"), then the other one.
        A fresh model per step (they are small), with ``bounds`` as upper bounds."""
        nonlocal all_optimal
        result: dict[str, int] = {}
        sol = None
        key = {"total": 1, "max": 2}
        start = [s for s in sols if all(s[key[k]] <= b for k, b in bounds.items())]
        for step, objective in enumerate((primary, "max" if primary == "total" else "total")):
            mdl = cp_model.CpModel()
            x = {(m, j): mdl.new_bool_var(f"x{m}_{j}") for m in trees for j in range(N)}
            for i in range(n):
                mdl.add_exactly_one(x[m, j] for m in trees if m >> i & 1 for j in range(N))
            ub = sum(sorted(w.values())[-n:])
            load = [mdl.new_int_var(0, ub, f"load{j}") for j in range(N)]
            for j in range(N):
                mdl.add(load[j] == sum(w[m] * x[m, j] for m in trees))
                if cap_int[j] is not None:
                    mdl.add(load[j] <= cap_int[j])
            for j in range(N - 1):
                if caps[j] == caps[j + 1]:
                    mdl.add(load[j] >= load[j + 1])  # equal nodes are interchangeable
            var = {
                "total": mdl.new_int_var(0, ub * N, "total"),
                "max": mdl.new_int_var(0, ub, "max"),
            }
            mdl.add(var["total"] == sum(load))
            mdl.add_max_equality(var["max"], load)
            # Redundant bounds that the LP relaxation misses: no plan beats the cheapest
            # partition, and the largest node carries at least the average.
            mdl.add(var["total"] >= lb_total)
            mdl.add(N * var["max"] >= var["total"])
            for name, b in {**bounds, **result}.items():
                mdl.add(var[name] <= b)
            if step == 0 and start:
                best = min(start, key=lambda s: (s[key[objective]], s[3 - key[objective]]))
                mdl.add(var[objective] <= best[key[objective]])  # never worse than a hint
                hint_set = {(m, j) for j, ps in enumerate(best[0]) for m in ps}
            elif sol is not None:
                hint_set = {(m, j) for j, ps in enumerate(sol) for m in ps}
            else:
                hint_set = None
            if hint_set is not None:
                for k, v in x.items():
                    mdl.add_hint(v, k in hint_set)
            mdl.minimize(var[objective])
            left = deadline - time.perf_counter()
            solver.parameters.max_time_in_seconds = max(0.05, left / max(1, steps_left - step))
            st = solver.solve(mdl)
            if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                if st != cp_model.INFEASIBLE:  # time limit without a solution: not proven
                    all_optimal = False
                return None
            all_optimal &= st == cp_model.OPTIMAL
            if step == 0 and not bounds:
                proof[objective] = st == cp_model.OPTIMAL
                bound[objective] = max(
                    bound[objective], int(math.ceil(solver.best_objective_bound - 1e-6))
                )
            result[objective] = int(solver.value(var[objective]))
            sol = [[m for m in trees if solver.value(x[m, j])] for j in range(N)]
        return result["total"], result["max"], sol

    def fallback(objective: str):
        """Time ran out before CP-SAT found a plan: the best hint, unproven."""
        if not sols:
            return None
        k = {"total": 1, "max": 2}[objective]
        best = min(sols, key=lambda s: (s[k], s[3 - k]))
        return best[1], best[2], best[0]

    first = solve("total", {}, 4)
    if first is None and not all_optimal:
        proof["total"] = False
        first = fallback("total")
    if first is None:
        if all_optimal:
            raise InfeasibleError("no assignment of the queries fits the node capacities")
        raise InfeasibleError(
            "no plan found within the time limit (none fits the capacities "
            "or the limit is too short)"
        )
    pts = [first]
    last = solve("max", {}, 2)
    if last is None:  # time ran out before a plan: the best hint or the min-total plan
        proof["max"] = False
        last = fallback("max") or first
    if front:
        bound_m = first[1] - 1
        while bound_m >= last[1] and time.perf_counter() < deadline:
            got = solve("total", {"max": bound_m}, 2)
            if got is None:
                break
            pts.append(got)
            bound_m = got[1] - 1
        if bound_m >= last[1]:
            all_optimal = False  # the front was cut by the time limit
    if pts[-1][1] > last[1]:
        pts.append(last)
    plans = [_plan("EXACT_PARETO", table, model, caps, sol) for _, _, sol in pts]
    # Re-priced exactly; drop points that the integer scaling made look non-dominated.
    keep = front_points([(p.total_cost, p.max_cost) for p in plans])
    plans = [next(p for p in plans if (p.total_cost, p.max_cost) == k) for k in keep]
    lo_t = min(plans, key=lambda p: (p.total_cost, p.max_cost))
    lo_m = min(plans, key=lambda p: (p.max_cost, p.total_cost))
    lo_t.optimizer, lo_m.optimizer = "EXACT_TOTAL", "EXACT_MAX"
    # Proven lower bounds (module doc): integer bound less the rounding, and combinatorial ones.
    bt = max((bound["total"] - slack) / scale, table.best[full])
    bm = max((bound["max"] - slack) / scale, table.best[full] / N)
    res = ExactResult(
        lo_t,
        lo_m,
        plans,
        "cpsat",
        all_optimal and proof["total"] and proof["max"],
        abs_tol,
        len(trees),
        bound_total=bt,
        bound_max=bm,
        optimal_total=proof["total"],
        optimal_max=proof["max"],
    )
    return seed_result(res, plans_fitting(hints, caps), caps)


def exhaustive_leaves(n: int, caps: Sequence[float | None]) -> int:
    """Leaves of the exhaustive enumeration: sum of Stirling numbers S(n, k), k <= N, for equal
    nodes (restricted growth strings), ``N ** n`` otherwise."""
    N = len(caps)
    if len(set(caps)) > 1:
        return N**n
    s = [[0] * (N + 1) for _ in range(n + 1)]
    s[0][0] = 1
    for i in range(1, n + 1):
        for k in range(1, N + 1):
            s[i][k] = k * s[i - 1][k] + s[i - 1][k - 1]
    return sum(s[n][1:])


def solve_exact(
    queries: Sequence[Query],
    model: CostModel,
    nodes: NodesArg,
    method: str = "auto",
    hints: Sequence[Plan] = (),
    **options,
) -> ExactResult:
    """Exact optimum. ``auto``: exhaustive when it has at most 2 million leaves (12 queries on 4
    equal nodes: 0.7 M, ~3 s); otherwise ``sets`` (``placement.exact.sets``: branch and bound
    for TotalCost, node-set columns for MaxCost, with ``front=True`` and no capacities the
    exact Pareto front by epsilon constraint; reaches 20+ queries) when ``front=False`` is
    passed, there are no capacities or more than 16 queries; otherwise ``cpsat``, which
    also gives the exact Pareto front with capacities (``ExactResult.front_exact`` says whether the front is exact:
    not with ``sets`` under capacities, nor when the time ran out).

    ``hints``: known plans (e.g. the heuristics' of a run): the solvers start from them and the
    answer is never worse than the best of them (the exhaustive search is exact anyway).
    ``options``: ``time_limit_s`` (the whole call's budget), ``hint`` (also start from WG_LS),
    ``workers``; CP-SAT's ``front``; ``sets``' ``max_sets``."""
    qs = validate_unique(queries)
    n = len(qs)
    if method == "auto":
        leaves = exhaustive_leaves(n, node_capacities(nodes))
        caps = node_capacities(nodes)
        if n <= 16 and leaves <= 2_000_000:
            method = "exhaustive"
        elif n <= 16 and options.get("front", True) and any(c is not None for c in caps):
            method = "cpsat"  # the exact front under capacities (``sets``: uncapped only)
        else:
            method = "sets"
    if method == "exhaustive":
        return exact_exhaustive(qs, model, nodes, subset_table(qs, model))  # exact: no options
    if method == "cpsat":
        options.pop("max_sets", None)
        return exact_cpsat(qs, model, nodes, subset_table(qs, model), hints=hints, **options)
    if method == "sets":
        from placement.exact.sets import exact_sets

        return exact_sets(qs, model, nodes, hints=hints, **options)
    raise ValueError(f"method: expected 'auto', 'exhaustive', 'cpsat' or 'sets', got {method!r}")
