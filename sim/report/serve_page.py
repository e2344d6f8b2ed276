"""The part of ``weaveplace report RUN_DIR`` for a deployment run by ``weaveplace serve``:
per-node load over time (busy share of each node between two samples of ``load.jsonl``, its
planned cost, and the node count) with every event of ``events.jsonl`` marked, plus the event log as a table.
"""

from __future__ import annotations

import json
from pathlib import Path

from sim.report.html import esc, html_table
from sim.report.plots import Plot, new_figure, png_bytes


def _jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a line cut by a crash
    return out


def load_series(rows: list[dict]) -> tuple[float, dict[str, list[tuple[float, float, float]]]]:
    """(t0, {node: [(seconds since t0, busy share over the interval, planned cost)]})."""
    if not rows:
        return 0.0, {}
    t0 = rows[0]["wall_time"]
    series: dict[str, list] = {}
    prev: dict[str, tuple[float, float]] = {}
    for r in rows:
        t = r["wall_time"]
        for nid, m in r["nodes"].items():
            if m.get("busy_s") is None:  # not answered since it (re)started
                continue
            p = prev.get(nid)
            if p is not None and t > p[0] and m["busy_s"] >= p[1]:
                series.setdefault(nid, []).append(
                    (t - t0, (m["busy_s"] - p[1]) / (t - p[0]), m.get("planned_cost") or 0.0)
                )
            prev[nid] = (t, m["busy_s"])
    return t0, series


def serve_section(run_dir: Path) -> tuple[list[str], list[Plot]]:
    rows = _jsonl(run_dir / "load.jsonl")
    events = _jsonl(run_dir / "events.jsonl")
    if not rows and not events:
        return [], []
    t0, series = load_series(rows)
    if not rows and events:
        t0 = events[0]["wall_time"]
    fig = new_figure(8.0, 5.0)
    ax1 = fig.add_subplot(211)
    ax2 = fig.add_subplot(212, sharex=ax1)
    for nid, pts in sorted(series.items()):
        xs = [p[0] for p in pts]
        ax1.plot(xs, [p[1] for p in pts], marker=".", lw=1, label=nid)
        ax2.step(xs, [p[2] for p in pts], where="post", lw=1.2, label=nid)
    if rows:  # how many nodes the deployment ran on (it changes with add/retire and autoscale)
        ax3 = ax2.twinx()
        ax3.step(
            [r["wall_time"] - t0 for r in rows],
            [len(r["nodes"]) for r in rows],
            where="post",
            color="black",
            lw=1.5,
            ls=":",
            label="nodes",
        )
        ax3.set_ylabel("nodes (dotted)")
        ax3.set_ylim(0, max(len(r["nodes"]) for r in rows) + 1)
    for e in events:
        x = e["wall_time"] - t0
        for ax in (ax1, ax2):
            ax.axvline(x, color="grey", lw=0.8, ls="--", alpha=0.7)
        ax1.annotate(
            e["command"],
            (x, 1.0),
            xycoords=("data", "axes fraction"),
            rotation=90,
            fontsize=7,
            va="top",
            ha="right",
            color="dimgrey",
        )
    ax1.set_ylabel("measured busy share")
    ax2.set_ylabel("planned cost")
    ax2.set_xlabel("wall-clock time since start (s)")
    title = "Load per node over time; dashed lines: events (events.jsonl)"
    ax1.set_title(title, fontsize=10)
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    if series:
        ax1.legend(fontsize=7, loc="upper left")
    plot = Plot("serve_load_over_time.png", title, png_bytes(fig))
    table = html_table(
        [
            "t (s)",
            "event time",
            "command / cause",
            "trees moved",
            "TotalCost before",
            "TotalCost after",
            "MaxCost before",
            "MaxCost after",
        ],
        [
            [
                e["wall_time"] - t0,
                e.get("event_time"),
                e["command"],
                e.get("trees_moved"),
                e.get("total_cost_before"),
                e.get("total_cost_after"),
                e.get("max_cost_before"),
                e.get("max_cost_after"),
            ]
            for e in events
        ],
        ["g", "int", "g", "int", "g", "g", "g", "g"],
        table_id="serve-events",
    )
    body = [
        "<h2>Deployment over time"
        + (" (weaveplace serve)</h2>" if rows else ": failures and recoveries</h2>"),
        plot.img(),
        f"<h3>Events ({len(events)})</h3>",
        table,
        f"<p>{esc(str(len(rows)))} load samples (load.jsonl).</p>",
    ]
    return body, [plot]
