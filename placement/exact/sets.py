"""Exact optimum beyond 16 queries: tree branch-and-bound for TotalCost, node-set columns for
MaxCost (the ``sets`` method of ``placement.exact.optimum``). The tree search is
``placement.exact.trees``, the node sets ``placement.exact.node_sets``, the front
``placement.exact.front``; this module is the solver that combines them.

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
  ``placement.exact.lp``) usually meets the best plan and proves it.
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

from placement.distributed import build_plan
from placement.exact.front import front_point, pareto_front
from placement.exact.node_sets import (
    SetSolve,
    min_max_capped,
    min_max_cover,
    node_set_family,
    plan_from_sets,
    schedule_trees,
    solve_sets,
)
from placement.exact.trees import (
    INF,
    REL,
    SUBSET_TABLE_MAX,
    FamilyTooLarge,
    Pricer,
    TotalResult,
    min_total_partition,
)
from placement.plan import Plan
from placement.queries import Query
from placement.trees import CostModel

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
    from placement.distributed import node_capacities
    from placement.exact.common import ExactResult, InfeasibleError, plans_fitting, seed_result
    from placement.local_search.search import wg_ls
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
            # placement.exact.lp) is far tighter than the tree branch and bound's relaxation.
            from placement.exact.lp import total_lower_bound

            cols = [m for part in tr.partitions[:1] for m in part]
            cols += [m for p in pool for m in tree_masks(p)]
            lpb = total_lower_bound(pr, cols, start + 0.45 * time_limit_s)
            stats.update(lp_bound=lpb.bound, lp_optimal=lpb.lp_optimal, lp_rounds=lpb.rounds)
            if lpb.bound > tr.bound:
                proven = tr.total <= lpb.bound * (1 + REL)
                bound = tr.total if proven else lpb.bound  # proven within rounding: the optimum
                tr = TotalResult(tr.total, bound, proven, tr.partitions, tr.nodes)
        if not tr.proven and len(qs) <= SUBSET_TABLE_MAX and time.perf_counter() < deadline:
            # Few queries: price every subset instead (placement.exact.common.subset_table, exact;
            # 16 queries ~5 s) rather than give up the proof.
            from placement.exact.common import subset_table

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
            got = min_max_capped(pr, fam, caps, ub_m, deadline, hint_sets, workers, stats)
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
            front_point(plan_t, pos),
            front_point(plan_m, pos),
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
