"""The report's body for a live run: estimated vs measured per-node load, answers, late tuples.

Why one module: it lays out one page kind from ``LiveRun`` (``sim.report.data``); the choice
of the measured load (operations when counted, else busy seconds) and the slice-operation
estimate are shared with the terminal summary (``sim.report.terminal``).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from sim.report.data import MEASURED_OPS_KEYS, LiveRun, num
from sim.report.html import esc, html_table, warnings_block
from sim.report.plots import Plot, plot_event_time, plot_live_load, plot_timeline

#: the note under the load plot when the run counted operations (``sim.cost_check``)
MEASURED_COST_NOTE = (
    " Measured cost = the tuples each tree folded into slices + the final-aggregation"
    " operations its executor counted (per primitive, divided by the aggregate's primitives),"
    " per ms of event time: exactly what the cost model prices, in its units. Left out, as the"
    " model leaves them out: fixed per-batch overheads (actor calls, Arrow columns, one kernel"
    " dispatch per tree and batch), which the busy seconds in the table below include."
)


def nodes_with_measured_cost(run: LiveRun) -> dict[str, dict]:
    """Per node its metrics, and with counted operations (``metrics.json`` ``cost_check``) its
    measured cost beside them: what the page and the terminal summary show."""
    check = (run.metrics.get("cost_check") or {}).get("nodes") or {}
    if not check:
        return run.nodes
    return {
        n: {**v, "measured_cost": (check.get(n) or {}).get("measured")}
        for n, v in run.nodes.items()
    }


def measured_load(nodes: dict[str, dict]) -> tuple[str, str]:
    """(metrics key, label) of the measured per-node load: the measured cost when the run
    counted operations (``measured_cost``, from ``metrics.json`` ``cost_check``), else
    operation counts, else busy seconds."""
    if nodes and all(num(m.get("measured_cost")) is not None for m in nodes.values()):
        return "measured_cost", "measured cost (the trees' own work, from counted operations)"
    for k in MEASURED_OPS_KEYS:
        if nodes and all(num(m.get(k)) is not None for m in nodes.values()):
            return k, f"measured operations ({k})"
    return "busy_s", "busy seconds (no measured operation counts in metrics.json)"


def model_slice_ops(run: LiveRun) -> dict[str, float] | None:
    """Per node: tree tuples + sum over trees of (counted slices x the plan tree's Omega), the
    cost model evaluated on what the executors really saw; None when the plan or per-tree slice
    counts are missing.  (Older runs, from before count windows, may name ``<id>~count`` trees: their plan
    tree's Omega.)
    """
    if run.plan_raw is None or not run.nodes:
        return None
    omega = {str(t["id"]): float(t["omega"]) for n in run.plan_raw["nodes"] for t in n["trees"]}
    out = {}
    for nid, m in run.nodes.items():
        trees = m.get("trees")
        if not isinstance(trees, dict) or "tree_tuples" not in m:
            return None
        ops = float(m["tree_tuples"])
        for tid, t in trees.items():
            base = str(tid).split("~")[0]
            if base not in omega or num(t.get("slices")) is None:
                return None
            ops += float(t["slices"]) * omega[base]
        out[nid] = ops
    return out


NODE_COLS = (
    ("tuples", "tuples", "int"),
    ("tree_tuples", "tree tuples", "int"),
    ("slices_in", "slices in (sliced feed)", "int"),
    ("answers", "answers", "int"),
    ("late_tuples", "late tuples", "int"),
    ("busy_s", "busy s", "s"),
    ("utilisation", "utilisation", "s"),
    ("batches", "batches", "int"),
    ("max_queue_depth", "max queue depth", "int"),
    ("driver_blocked_s", "driver blocked s", "s"),
    ("recoveries", "recoveries", "int"),
    ("adopted_trees", "trees adopted from lost nodes", "int"),
)


def _rejected(m: dict) -> int | None:
    vals = [num(v) for k, v in m.items() if "reject" in k.lower()]
    vals = [v for v in vals if v is not None]
    return int(sum(vals)) if vals else None


def _late_by_host(late: pd.DataFrame | None, nodes: dict[str, dict]) -> dict[str, int]:
    """late.parquet rows per node that hosts their tree at the end (per-node ``trees`` of
    metrics.json), else per ``node_id``.  Why: ``node_id`` is the host when a tuple was handed
    over; in live mode over a directory a re-placed tree's earlier late tuples name the lost
    node, while metrics count every late tuple of a tree on its final host."""
    if late is None or not len(late):
        return {}
    host = {str(tid): nid for nid, nm in nodes.items() for tid in (nm.get("trees") or {})}
    where = late["tree_id"].astype(str).map(host).fillna(late["node_id"])
    return where.value_counts().to_dict()


def live_body(run: LiveRun) -> tuple[list[str], list[Plot]]:
    body: list[str] = [warnings_block(run.warnings)]
    plots: list[Plot] = []
    m = run.metrics
    feed = m.get("feed", {}) or {}
    overview = [
        ("feed mode", feed.get("mode")),
        ("technique", m.get("technique")),
        ("rows fed", m.get("rows_fed")),
        ("batches", m.get("batches")),
        ("wall s", m.get("wall_s")),
        ("answers", m.get("answers")),
        ("checkpoints", m.get("checkpoints")),
        ("feed rows / s (mean)", feed.get("rows_per_s")),
        ("feed seconds", feed.get("seconds")),
        ("finish s", m.get("finish_s")),
        ("data path", m.get("data_path")),
    ]
    st = m.get("stream") or {}
    if st:  # live mode over a directory (cluster.feeds.directory): batches above are feed batches
        overview += [
            ("watched directory", st.get("directory")),
            ("files", st.get("files")),
            ("files rejected whole", st.get("files_rejected")),
            ("bad lines rejected", st.get("rows_rejected")),
            ("micro-batches", st.get("batches")),
            ("stop reason", st.get("stop_reason")),
        ]
    if m.get("replacements"):
        overview.append(("nodes lost and re-placed", len(m["replacements"])))
    if m.get("additions"):
        overview.append(("nodes added", len(m["additions"])))
    if run.answers is not None:
        overview.append(("answers.parquet rows", len(run.answers)))
    if run.late is not None:
        overview.append(("late.parquet rows", len(run.late)))
    if run.plan is not None:
        overview += [
            ("plan", run.plan.rel),
            ("plan optimizer", run.plan.optimizer),
            ("plan TotalCost", run.plan.total_cost),
            ("plan MaxCost", run.plan.max_cost),
        ]
    overview = [(k, v) for k, v in overview if v is not None]
    body.append(
        "<h2>Run</h2>"
        + html_table(
            ["", "value"],
            overview,
            table_id="live-overview",
            row_attrs=[{"data-key": k} for k, _ in overview],
        )
    )

    nodes = nodes_with_measured_cost(run)
    node_ids = list(run.plan.node_ids) if run.plan is not None else []
    node_ids += [n for n in nodes if n not in node_ids]
    est = None
    if run.plan is not None:
        by = dict(zip(run.plan.node_ids, run.plan.node_costs))
        est = [by.get(n, 0.0) for n in node_ids]
    key, label = measured_load(nodes)
    slice_ops = model_slice_ops(run)
    if nodes:
        series = [("estimated cost (plan)", est)] if est is not None else []
        if slice_ops is not None:
            series.append(
                ("model ops on counted slices", [slice_ops.get(n, 0.0) for n in node_ids])
            )
        series.append(
            (
                label.split(" (")[0] if key == "busy_s" else label,
                [float(num(nodes.get(n, {}).get(key)) or 0.0) for n in node_ids],
            )
        )
        p = plot_live_load(node_ids, series, "live_node_load.png")
        plots.append(p)
        body.append(
            "<h2>Estimated vs measured per-node cost</h2>"
            + p.img()
            + f'<p class="note">measured load: {esc(label)}.'
            + (
                " Busy seconds include one-time JIT compilation and per-batch overheads."
                if key == "busy_s"
                else MEASURED_COST_NOTE
                if key == "measured_cost"
                else ""
            )
            + (
                " Model ops on counted slices = tree tuples + Σ over the node's trees of"
                " (slices counted by the executor × the plan tree's Ω): the cost model"
                " applied to the slices that really occurred."
                if slice_ops is not None
                else ""
            )
            + "</p>"
        )
    late_by_node = _late_by_host(run.late, nodes)
    cols = [c for c in NODE_COLS if c[0] != key and any(c[0] in nodes.get(n, {}) for n in node_ids)]
    so = slice_ops is not None
    hdr = (
        ["node"]
        + (["estimated cost", "est. share %"] if est is not None else [])
        + (["model ops on counted slices", "share %"] if so else [])
        + ([f"{key}", f"{key} share %"] if nodes else [])
        + [c[1] for c in cols]
        + ["late.parquet rows", "rejected"]
    )
    kinds = (
        ["g"]
        + (["g", "pct"] if est is not None else [])
        + (["g", "pct"] if so else [])
        + (["g", "pct"] if nodes else [])
        + [c[2] for c in cols]
        + ["int", "int"]
    )
    fields = (
        ["node_id"]
        + (["est_cost", "est_share_pct"] if est is not None else [])
        + (["slice_ops", "slice_ops_share_pct"] if so else [])
        + (["measured", "measured_share_pct"] if nodes else [])
        + [c[0] for c in cols]
        + ["late_rows", "rejected"]
    )
    so_tot = sum(slice_ops.values()) if so else 0.0
    rows = []
    e_tot = sum(est) if est else 0.0
    m_vals = {n: float(num(nodes.get(n, {}).get(key)) or 0.0) for n in node_ids}
    m_tot = sum(m_vals.values())
    for i, n in enumerate(node_ids):
        nm = nodes.get(n, {})
        r: list[Any] = [n]
        if est is not None:
            r += [est[i], 100 * est[i] / e_tot if e_tot else None]
        if so:
            v = slice_ops.get(n)  # None: a node lost for good has no metrics
            r += [v, 100 * v / so_tot if so_tot and v is not None else None]
        if nodes:
            r += [nm.get(key), 100 * m_vals[n] / m_tot if m_tot else None]
        r += [nm.get(c[0]) for c in cols] + [int(late_by_node.get(n, 0)), _rejected(nm)]
        rows.append(r)
    body.append(
        "<h2>Per node</h2>"
        + html_table(
            hdr,
            rows,
            kinds,
            table_id="live-nodes",
            fields=fields,
            row_attrs=[{"data-node": n} for n in node_ids],
        )
    )
    reps = m.get("replacements") or []
    if reps:
        body.append(
            "<h2>Nodes lost and re-placed</h2>"
            '<p class="note">Each lost node\'s trees were restored on the nodes below from '
            "its last snapshot and replayed the batches after it (answers stay "
            "exactly-once). Executed: moved trees run as separate trees; planned: "
            "<code>placement.replace.remove_node</code>, which may weave them.</p>"
            + html_table(
                [
                    "node",
                    "before batch",
                    "reason",
                    "trees moved",
                    "to",
                    "snapshot after batch",
                    "batches replayed",
                    "TotalCost change",
                    "MaxCost change",
                    "planned TotalCost change",
                    "seconds",
                ],
                [
                    [
                        r.get("node"),
                        r.get("before_batch"),
                        r.get("reason"),
                        r.get("moved"),
                        ", ".join(f"{t}: {n}" for t, n in sorted((r.get("trees") or {}).items())),
                        r.get("snapshot_seq"),
                        r.get("replayed_batches"),
                        (r.get("executed") or {}).get("total_change"),
                        (r.get("executed") or {}).get("max_change"),
                        (r.get("planned") or {}).get("total_change"),
                        r.get("seconds"),
                    ]
                    for r in reps
                ],
                ["g", "int", "g", "int", "g", "int", "int", "g", "g", "g", "s"],
                table_id="live-replacements",
            )
        )
    adds = m.get("additions") or []
    if adds:
        body.append(
            "<h2>Nodes added</h2>"
            '<p class="note">Each added node took the trees below '
            "(<code>placement.replace.add_node</code>: while one move lowers the MaxCost), "
            "restored from their hosts' snapshots at a checkpoint; the hosts dropped "
            "them (answers stay exactly-once).</p>"
            + html_table(
                [
                    "node",
                    "before batch",
                    "reason",
                    "trees moved",
                    "from",
                    "snapshot after batch",
                    "TotalCost change",
                    "MaxCost change",
                    "seconds",
                ],
                [
                    [
                        a.get("node"),
                        a.get("before_batch"),
                        a.get("reason"),
                        a.get("moved"),
                        ", ".join(f"{t}: {n}" for t, n in sorted((a.get("trees") or {}).items())),
                        a.get("snapshot_seq"),
                        (a.get("planned") or {}).get("total_change"),
                        (a.get("planned") or {}).get("max_change"),
                        a.get("seconds"),
                    ]
                    for a in adds
                ],
                ["g", "int", "g", "int", "g", "int", "g", "g", "s"],
                table_id="live-additions",
            )
        )
    # late tuples
    late_total_metrics = sum(int(num(nm.get("late_tuples")) or 0) for nm in nodes.values())
    rej = [r for r in (_rejected(nm) for nm in nodes.values()) if r is not None]
    body.append(
        "<h2>Late and rejected tuples</h2>"
        + html_table(
            ["late tuples (metrics.json)", "late.parquet rows", "rejected (metrics.json)"],
            [
                [
                    late_total_metrics,
                    len(run.late) if run.late is not None else None,
                    sum(rej) if rej else None,
                ]
            ],
            ["int", "int", "int"],
            table_id="live-late",
            fields=["late_metrics", "late_rows", "rejected"],
        )
    )
    if run.late is not None and len(run.late):
        g = run.late.groupby(["node_id", "tree_id", "stream"]).size().reset_index(name="late")
        body.append(
            '<p class="note">A tuple late for two trees appears twice. node: the node '
            "hosting the tree when the tuple was written (in live mode over a directory, "
            "a re-placed tree's late tuples written before the loss name the lost node; "
            "the per-node table counts them on the tree's final node).</p>"
            + html_table(
                ["node", "tree", "stream", "late tuples"],
                g.itertuples(index=False),
                ["g", "g", "g", "int"],
                table_id="late-per-tree",
            )
        )
    # throughput
    tl = m.get("timeline") or feed.get("timeline")
    body.append("<h2>Throughput</h2>")
    if tl:
        t = [float(x["t_s"] if isinstance(x, dict) else x[0]) for x in tl]
        r = [float(x["rows"] if isinstance(x, dict) else x[1]) for x in tl]
        p = plot_timeline(t, r, "live_throughput.png")
        plots.append(p)
        body.append(p.img())
    else:
        body.append(
            '<p class="note">metrics.json records no wall-clock timeline: only the mean '
            "feed rate above. Below, answers and late tuples over event time.</p>"
        )
    answers = run.answers
    if answers is not None and run.plan_raw is not None:  # count windows: positions, not time
        count_q = {
            q["id"] for q in run.plan_raw.get("queries", []) if q.get("kind", "time") != "time"
        }
        if count_q:  # (a copy of every answer otherwise: 0.4 GB at 35 M answers)
            answers = answers[~answers["query_id"].isin(count_q)]
    p = plot_event_time(answers, run.late, "live_event_time.png")
    if p is not None:
        plots.append(p)
        body.append(p.img())
    if run.answers is not None and len(run.answers):
        a = run.answers.groupby("query_id", observed=True).size()
        body.append(
            f"<h3>Answers per query ({len(a)} queries)</h3>"
            + html_table(
                ["min", "mean", "max"],
                [[int(a.min()), float(a.mean()), int(a.max())]],
                ["int", "g", "int"],
                table_id="answers-per-query",
            )
        )
    return body, plots
