"""The distributed optimizers' experiment grid: every workload x node count x optimizer.

Why in sim: it generates the workloads (``sim.workload``) and times the optimizers of
``placement.distributed``; the placement layer stays free of experiment code.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from typing import Any

from placement.exact.optimum import solve_exact
from placement.optimizers import DISTRIBUTED, optimize
from placement.trees import CostModel
from sim.workload import generate


def run_grid(
    specs: Iterable[Any],
    node_counts: Iterable[int],
    technique: str = "panes",
    optimizers: Sequence[str] | None = None,
    seed: int = 0,
    preprocess: bool | str = False,
    exact_max_queries: int = 0,
    engine: str = "fast",
) -> list[dict[str, Any]]:
    """Run optimizers on every WorkloadSpec x node count; one row per (config, optimizer).

    ``optimizers``: names from ``placement.optimizers.DISTRIBUTED`` (default: all of them).
    Rows: ``config`` (the spec's fields plus ``nodes``, ``technique``), ``optimizer``,
    ``total_cost``, ``max_cost``, ``node_costs``, ``runtime_s``, and, when the workload has at most
    ``exact_max_queries`` queries, ``exact_total`` / ``exact_max`` and the relative gaps
    ``gap_total`` / ``gap_max`` to the exact optima (``None`` otherwise).
    """
    optimizers = tuple(DISTRIBUTED) if optimizers is None else optimizers
    rows = []
    for spec in specs:
        queries = generate(spec)
        model = CostModel(technique, {spec.stream: spec.rate}, engine)
        for n in node_counts:
            config = {**asdict(spec), "nodes": n, "technique": technique, "preprocess": preprocess}
            ex = None
            if len(queries) <= exact_max_queries:
                ex = solve_exact(queries, model, n)
            for name in optimizers:
                t0 = time.perf_counter()
                plan = optimize(name, queries, model, n, seed=seed, preprocess=preprocess)
                dt = time.perf_counter() - t0
                row = {
                    "config": config,
                    "optimizer": name,
                    "total_cost": plan.total_cost,
                    "max_cost": plan.max_cost,
                    "node_costs": [nd.cost for nd in plan.nodes],
                    "runtime_s": dt,
                    "exact_total": None,
                    "exact_max": None,
                    "gap_total": None,
                    "gap_max": None,
                }
                if ex is not None:
                    row.update(
                        exact_total=ex.min_total.total_cost,
                        exact_max=ex.min_max.max_cost,
                        gap_total=plan.total_cost / ex.min_total.total_cost - 1,
                        gap_max=plan.max_cost / ex.min_max.max_cost - 1,
                    )
                rows.append(row)
    return rows
