"""``weaveplace bench exact``: how far the exact yardstick reaches.

Why: every plan-quality claim (heuristics' gaps, the Pareto front) is measured against the exact
optimum, so its reach has to be measured too: instance size (queries x nodes) against the time
to prove min TotalCost and min MaxCost, and the share proven within the time limit.

Instances: the papers' generator (default: Smax 20, rate 20, Omax 5, Gen nrm; a
second regime with a small rate, where sharing pays less and optimal plans have many trees,
is selectable). The heuristics (Table 7's thirteen, without W_TN whose WeaveShare is the same
as WG_TN's here) run first, untimed, and seed the solver, as in ``simulate``. Compilation (numba)
is done by a warm-up before the first timed instance.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from placement.exact.optimum import solve_exact
from placement.optimizers import DISTRIBUTED, optimize
from placement.queries import Query
from placement.trees import CostModel
from sim.workload import WorkloadSpec, generate

HEURISTICS = tuple(n for n in DISTRIBUTED if n not in ("W_TN", "WG_LS"))


def warm_up() -> None:
    """Compile the numba kernels the solver uses (never inside a reported time)."""
    qs = [Query(f"q{i}", 3 + i, 2 + i % 3) for i in range(5)]
    solve_exact(qs, CostModel("panes", 1.0), 2, method="sets", hint=False, time_limit_s=10)


@dataclass(frozen=True)
class ExactBenchOptions:
    """The instances of ``run``: every (qnum, seed) workload of the generator (``rate``,
    ``smax``, ``omax``, ``gen``) on every node count, ``time_limit_s`` per instance;
    ``front``: also the exact Pareto front (within the same time limit)."""

    qnums: Sequence[int] = (8, 12, 16, 20, 24)
    nodes: Sequence[int] = (2, 4, 8)
    seeds: Sequence[int] = (0,)
    rate: float = 20.0
    smax: int = 20
    omax: float = 5.0
    gen: str = "nrm"
    time_limit_s: float = 60.0
    front: bool = False


def run(
    opts: ExactBenchOptions = ExactBenchOptions(),
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """One row per (qnum, seed, nodes), each handed to ``on_row`` as soon as it is done."""
    warm_up()
    rows = []
    for qnum in opts.qnums:
        for seed in opts.seeds:
            spec = WorkloadSpec(
                qnum=qnum, smax=opts.smax, rate=opts.rate, omax=opts.omax, gen=opts.gen, seed=seed
            )
            qs = generate(spec)
            model = CostModel("panes", opts.rate)
            for n_nodes in opts.nodes:
                t0 = time.perf_counter()
                plans = [optimize(h, qs, model, n_nodes) for h in HEURISTICS]
                heur_s = time.perf_counter() - t0
                t0 = time.perf_counter()
                res = solve_exact(
                    qs,
                    model,
                    n_nodes,
                    hints=plans,
                    hint=False,
                    time_limit_s=opts.time_limit_s,
                    front=opts.front,
                )
                wall = time.perf_counter() - t0
                st = res.stats
                exhaustive = res.method == "exhaustive"
                t_total = wall if exhaustive else st.get("t_total")
                t_max = wall if exhaustive else st.get("t_cover", st.get("t_all"))
                best_t = min(p.total_cost for p in plans)
                best_m = min(p.max_cost for p in plans)
                rows.append(
                    {
                        "qnum": qnum,
                        "nodes": n_nodes,
                        "seed": seed,
                        "rate": opts.rate,
                        "smax": opts.smax,
                        "omax": opts.omax,
                        "gen": opts.gen,
                        "method": res.method,
                        "proven_total": bool(res.optimal_total),
                        "proven_max": bool(res.optimal_max),
                        "proven_both": bool(res.optimal_total and res.optimal_max),
                        "time_s": wall,
                        "time_total_s": t_total,
                        "time_max_s": t_max,
                        "heuristics_s": heur_s,
                        "exact_total": res.min_total.total_cost,
                        "bound_total": res.bound_total,
                        "exact_max": res.min_max.max_cost,
                        "bound_max": res.bound_max,
                        "rel_gap_total": res.gap_total,
                        "rel_gap_max": res.gap_max,
                        "best_heuristic_total": best_t,
                        "best_heuristic_max": best_m,
                        "heuristic_gap_max_pct": 100 * (best_m / res.min_max.max_cost - 1),
                        "node_sets": st.get("sets"),
                        "bb_nodes": st.get("bb_nodes"),
                        "trees_priced": st.get("priced"),
                        "front_exact": bool(opts.front and res.front_exact),
                        "front_points": len(res.front) if opts.front else None,
                        # the front comes last: the whole call is the time to the front
                        "time_front_s": wall if opts.front else None,
                        "time_front_phase_s": st.get("t_front") if opts.front else None,
                    }
                )
                if on_row:
                    on_row(rows[-1])
    return rows
