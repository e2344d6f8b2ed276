"""The report's main tables on the terminal (rich), printed by ``weaveplace report``.

Why apart from the HTML pages: the same loaders and labels, a different medium; it reads
nothing the HTML report does not show.
"""

from __future__ import annotations

from pathlib import Path

from sim.report.data import LiveRun, SimRun, load_run
from sim.report.html import fmt
from sim.report.live_page import measured_load, model_slice_ops, nodes_with_measured_cost
from sim.report.sim_page import config_label, ordered_plans


def print_summary(
    run_dir: str | Path,
    console=None,
    *,
    plan: str | Path | None = None,
    max_configs: int = 4,
    run: SimRun | LiveRun | None = None,
) -> None:
    """The report's main tables on the terminal (rich); ``run``, the run already read
    (``load_run``)."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    run = run if run is not None else load_run(run_dir, plan)
    if isinstance(run, SimRun):
        for w in run.warnings[:20]:
            console.print(f"[yellow]warning:[/yellow] {w}")
        q = run.fig40.set_index(["optimizer", "metric"]) if len(run.fig40) else None
        rt = run.runtime.set_index("optimizer") if run.runtime is not None else None
        t = Table(
            title=f"{len(run.config_ids)} configuration(s): plan quality (0 % = best, "
            "100 % = worst) and runtime"
        )
        for h in ("optimizer", "quality Total %", "± std", "quality Max %", "± std", "mean s"):
            t.add_column(h, justify="left" if h == "optimizer" else "right")
        for o in run.optimizers:

            def qv(metric, col, o=o):
                if q is None or (o, metric) not in q.index:
                    return "–"
                return fmt(q.loc[(o, metric), col], "pct")

            t.add_row(
                o,
                qv("TotalCost", "quality_mean_pct"),
                qv("TotalCost", "quality_std_pct"),
                qv("MaxCost", "quality_mean_pct"),
                qv("MaxCost", "quality_std_pct"),
                fmt(rt.loc[o, "mean_s"], "s") if rt is not None and o in rt.index else "–",
            )
        console.print(t)
        for cid in run.config_ids[:max_configs]:
            ps = ordered_plans(run, cid)
            t = Table(title=config_label(run, cid))
            for h in ("optimizer", "TotalCost", "MaxCost", "node costs"):
                t.add_column(h, justify="left" if h in ("optimizer", "node costs") else "right")
            for p in ps:
                t.add_row(
                    p.optimizer,
                    fmt(p.total_cost),
                    fmt(p.max_cost),
                    " ".join(fmt(c) for c in p.node_costs),
                )
            console.print(t)
        if len(run.config_ids) > max_configs:
            console.print(
                f"… {len(run.config_ids) - max_configs} more configuration(s) in the HTML report"
            )
        return
    live = run
    for w in live.warnings:
        console.print(f"[yellow]warning:[/yellow] {w}")
    m = live.metrics
    nodes = nodes_with_measured_cost(live)
    key, label = measured_load(nodes)
    t = Table(
        title=f"live run: {fmt(m.get('rows_fed'))} rows, {fmt(m.get('answers'))} answers, "
        f"{fmt(m.get('wall_s'), 's')} s wall"
    )
    so = model_slice_ops(live) or {}
    for h in (
        "node",
        "estimated cost",
        "slice ops",
        key,
        "tuples",
        "answers",
        "late",
        "utilisation",
    ):
        t.add_column(h, justify="left" if h == "node" else "right")
    est = dict(zip(live.plan.node_ids, live.plan.node_costs)) if live.plan else {}
    for n in list(est) + [n for n in nodes if n not in est]:
        nm = nodes.get(n, {})
        t.add_row(
            n,
            fmt(est.get(n)),
            fmt(so.get(n)),
            fmt(nm.get(key), "s" if key == "busy_s" else "g"),
            fmt(nm.get("tuples")),
            fmt(nm.get("answers")),
            fmt(nm.get("late_tuples")),
            fmt(nm.get("utilisation"), "s"),
        )
    console.print(t)
    console.print(
        f"measured load: {label}"
        + ("; slice ops: tree tuples + counted slices x plan Omega" if so else "")
    )
