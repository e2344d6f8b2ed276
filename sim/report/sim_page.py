"""The report's body for a simulation run: configurations, plan quality, runtimes, fronts.

Why one module: it lays out one page kind from ``SimRun`` (``sim.report.data``), the
figures (``sim.report.plots``) and tables (``sim.report.html``); the labels it gives plans and
configurations are shared with the terminal summary (``sim.report.terminal``).
"""

from __future__ import annotations

import pandas as pd

from sim.report.data import PlanInfo, SimRun, num
from sim.report.html import esc, fmt, html_table, warnings_block
from sim.report.plots import Plot, plot_node_costs, plot_quality, plot_runtime, plot_total_vs_max

PARAMS = ("qnum", "smax", "rate", "zskew", "omax", "gen", "workload_seed", "nodes", "capacities")


def config_label(run: SimRun, cid: int | None) -> str:
    if cid is None:
        return "plans"
    r = run.results
    if r is not None and "config_id" in r:
        g = r[r["config_id"] == cid]
        if len(g):
            parts = [
                f"{k}={fmt(g.iloc[0][k])}"
                for k in PARAMS
                if k in g
                and num(g.iloc[0][k]) is not None
                or (k in g and isinstance(g.iloc[0][k], str) and g.iloc[0][k])
            ]
            return f"config {cid}: " + ", ".join(parts)
    return f"config {cid}"


def _exact_of(run: SimRun, cid: int | None) -> tuple[float | None, float | None]:
    r = run.results
    if r is not None and "exact_total" in r and "config_id" in r:
        g = r[r["config_id"] == cid]
        if len(g):
            return num(g.iloc[0]["exact_total"]), num(g.iloc[0]["exact_max"])
    et = [p for p in run.plans_of(cid) if p.optimizer == "EXACT_min_total"]
    em = [p for p in run.plans_of(cid) if p.optimizer == "EXACT_min_max"]
    return (et[0].total_cost if et else None), (em[0].max_cost if em else None)


def _unproven_exact(run: SimRun, cid: int | None) -> str | None:
    """A note when the exact optimum of a configuration was not proven: the optimum lies
    between the proven bound and the best plan, so a plan's gap is an interval (the two gap
    columns; equal when proven)."""
    r = run.results
    if r is None or "exact_proven_total" not in r or "config_id" not in r:
        return None
    g = r[r["config_id"] == cid]
    if not len(g):
        return None
    x = g.iloc[0]
    parts = []
    for short, label in (("total", "TotalCost"), ("max", "MaxCost")):
        proven = x.get(f"exact_proven_{short}")
        if proven is not None and not pd.isna(proven) and not bool(proven):
            parts.append(
                f"min {label} not proven: optimum in [{x[f'exact_bound_{short}']:.6g}, "
                f"{x[f'exact_{short}']:.6g}]"
            )
    if not parts:
        return None
    return (
        "Exact solver stopped at its time limit: "
        + "; ".join(parts)
        + " (a plan's gap lies between 'gap to exact' and 'gap to bound')."
    )


def ordered_plans(run: SimRun, cid: int | None) -> list[PlanInfo]:
    order = {o: i for i, o in enumerate(run.optimizers)}
    ps = run.plans_of(cid)
    return sorted(ps, key=lambda p: (p.exact, order.get(p.optimizer, len(order)), p.optimizer))


def sim_body(run: SimRun, max_config_figures: int) -> tuple[list[str], list[Plot]]:
    body: list[str] = [warnings_block(run.warnings)]
    plots: list[Plot] = []
    cids = run.config_ids
    name = (run.config or {}).get("name")
    body.append(
        "<h2>Run</h2>"
        + html_table(
            ["run directory", "config name", "configurations", "optimizers", "plans"],
            [[str(run.run_dir), name or "–", len(cids), len(run.optimizers), len(run.plans)]],
        )
    )
    if run.best_per_config is not None:
        b = run.best_per_config
        cols = [c for c in b.columns]
        body.append(
            "<h3>Best plans per configuration (best_per_config.csv)</h3>"
            + html_table(cols, b.itertuples(index=False), table_id="best-per-config")
        )

    # Figure 40 + Table 9
    if run.fig40 is not None and len(run.fig40):
        p = plot_quality(
            run.fig40,
            run.optimizers,
            f"Average plan quality over {len(cids)} configuration(s) "
            "(0 % = best plan of a configuration, 100 % = worst)",
            "fig40_quality.png",
        )
        plots.append(p)
        body.append("<h2>Plan quality across the grid (Figure 40)</h2>" + p.img())
        f = run.fig40
        cols = [
            c
            for c in (
                "optimizer",
                "metric",
                "quality_mean_pct",
                "quality_std_pct",
                "exact_gap_mean_pct",
            )
            if c in f
        ]
        body.append(
            f'<p class="note">source: {esc(run.fig40_source)}</p>'
            + html_table(
                cols,
                f[cols].itertuples(index=False),
                ["g", "g"] + ["pct"] * (len(cols) - 2),
                table_id="fig40",
                fields=cols,
            )
        )
    if run.table9 is not None:
        t = run.table9
        body.append(
            "<h3>How often each optimizer is best (Table 9 breakdown, table9_best.csv)"
            "</h3>"
            + html_table(
                list(t.columns),
                t.itertuples(index=False),
                ["g", "g", "g", "pct", "pct", "pct"][: len(t.columns)],
                table_id="table9",
                fields=list(t.columns),
            )
        )
    if run.pareto_summary is not None and len(run.pareto_summary):
        t = run.pareto_summary
        body.append(
            "<h3>WG_PF's front against every optimizer (pareto_summary.csv)</h3>"
            '<p class="note">pf_weakly_dominates_pct: configurations where a plan of '
            "the WG_PF front is at least as good in TotalCost and MaxCost; "
            "exact_front_gap: multiplicative distance to the exact Pareto front; "
            "hv_ratio: WG_PF front hypervolume / exact front hypervolume</p>"
            + html_table(
                list(t.columns),
                t.itertuples(index=False),
                table_id="pareto-summary",
                fields=list(t.columns),
            )
        )
    # Table 10
    if run.runtime is not None and len(run.runtime):
        p = plot_runtime(
            run.runtime, "Plan generation time per optimizer (mean ± std)", "table10_runtime.png"
        )
        plots.append(p)
        rt = run.runtime
        compact = html_table(
            ["Optimizer"] + [str(o) for o in rt["optimizer"]],
            [["Time (sec)"] + [float(v) for v in rt["mean_s"]]],
            ["g"] + ["s2"] * len(rt),
            table_id="table10-compact",
        )
        body.append(
            "<h2>Optimizer runtimes (Table 10)</h2>"
            + compact
            + p.img()
            + f'<p class="note">source: {esc(run.runtime_source)}; optimizer time only'
            " (not plan writing)</p>"
            + html_table(
                list(rt.columns),
                rt.itertuples(index=False),
                ["g", "int"] + ["s"] * (len(rt.columns) - 2),
                table_id="table10",
                fields=list(rt.columns),
            )
        )

    # per configuration: Figure 41 bars + TotalCost/MaxCost scatter + table
    body.append("<h2>Per configuration: node costs (Figure 41) and TotalCost vs MaxCost</h2>")
    if len(cids) > max_config_figures:
        body.append(
            f'<p class="note">{len(cids)} configurations: figures for the first '
            f"{max_config_figures} only; every plan is in the full-precision table."
            "</p>"
        )
    for cid in cids[:max_config_figures]:
        ps = ordered_plans(run, cid)
        if not ps:
            continue
        label = config_label(run, cid)
        tag = f"c{cid:04d}" if cid is not None else "plans"
        body.append(f'<h3 id="{tag}">{esc(label)}</h3>')
        p1 = plot_node_costs(ps, f"Costs per node — {label}", f"fig41_nodes_{tag}.png")
        et, em = _exact_of(run, cid)
        p2 = plot_total_vs_max(
            ps,
            et,
            em,
            f"TotalCost vs MaxCost — {label}",
            f"total_vs_max_{tag}.png",
            run.fronts.get(cid),
        )
        plots += [p1, p2]
        body.append(p1.img() + p2.img())
        n_nodes = max(len(p.node_costs) for p in ps)
        node_ids = ps[0].node_ids
        hdr = (
            ["optimizer", "TotalCost", "MaxCost"]
            + [node_ids[j] if j < len(node_ids) else f"node {j}" for j in range(n_nodes)]
            + [
                "runtime s",
                "gap to exact Total %",
                "gap to exact Max %",
                "gap to bound Total %",
                "gap to bound Max %",
            ]
        )
        rows, attrs = [], []
        unproven = _unproven_exact(run, cid)
        if unproven:
            body.append(f'<p class="note">{esc(unproven)}</p>')
        for p in ps:
            row = run.row_of(p) or {}
            gt, gm = num(row.get("gap_total")), num(row.get("gap_max"))
            gth, gmh = num(row.get("gap_total_hi")), num(row.get("gap_max_hi"))
            rows.append(
                [p.optimizer, p.total_cost, p.max_cost]
                + [p.node_costs[j] if j < len(p.node_costs) else None for j in range(n_nodes)]
                + [
                    num(row.get("runtime_s")),
                    None if gt is None else gt * 100,
                    None if gm is None else gm * 100,
                    None if gth is None else gth * 100,
                    None if gmh is None else gmh * 100,
                ]
            )
            attrs.append({"data-plan": p.rel})
        fields = (
            ["optimizer", "total_cost", "max_cost"]
            + [f"node_cost_{j}" for j in range(n_nodes)]
            + ["runtime_s", "gap_total_pct", "gap_max_pct", "gap_total_hi_pct", "gap_max_hi_pct"]
        )
        kinds = ["g", "g", "g"] + ["g"] * n_nodes + ["s", "pct", "pct", "pct", "pct"]
        body.append(
            html_table(hdr, rows, kinds, table_id=f"plans-{tag}", fields=fields, row_attrs=attrs)
        )
    # full precision
    rows, attrs = [], []
    for cid in cids:
        for p in ordered_plans(run, cid):
            rows.append(
                [
                    cid,
                    p.optimizer,
                    p.rel,
                    p.n_trees,
                    p.total_cost,
                    p.max_cost,
                    ", ".join(f"{n}: {c!r}" for n, c in zip(p.node_ids, p.node_costs)),
                ]
            )
            attrs.append({"data-plan": p.rel})
    body.append(
        "<h2>Plans (full precision, from the plan JSON files)</h2><details open>"
        "<summary>all plans</summary>"
        + html_table(
            ["config", "optimizer", "plan", "trees", "TotalCost", "MaxCost", "node costs"],
            rows,
            ["int", "g", "g", "int", "full", "full", "g"],
            table_id="plans-full",
            fields=[
                "config_id",
                "optimizer",
                "plan",
                "n_trees",
                "total_cost",
                "max_cost",
                "node_costs",
            ],
            row_attrs=attrs,
        )
        + "</details>"
    )
    return body, plots
