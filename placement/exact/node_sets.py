"""Min MaxCost exactly: the downward-closed family of node sets, CP-SAT over them (set
partition, capacities as count classes), scheduling trees onto nodes, and the exact cover by
bisection when nodes have no capacities (``placement.exact.sets``, module doc there).

Why its own module: node sets are the second formulation of the problem; they share only the
pricing (``placement.exact.trees``) with the tree search.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numba import njit, types
from numba.typed import Dict

from placement.distributed import build_plan
from placement.exact.subset_split import unfold
from placement.exact.trees import INF, REL, FamilyTooLarge, OutOfTime, Pricer
from placement.plan import Plan

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


def min_max_capped(
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
