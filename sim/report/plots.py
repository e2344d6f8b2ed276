"""The report's figures (Figures 40-41, Table 10, live load and time series) as PNG bytes.

Why matplotlib's Agg canvas only: the report is written from CLI processes and Ray-free test
sessions; drawing on a private canvas never touches the global backend.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pandas as pd

from sim.report.data import PlanInfo
from sim.report.html import esc


def new_figure(w: float = 7.5, h: float = 4.0):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), dpi=100)
    FigureCanvasAgg(fig)
    return fig


@dataclass
class Plot:
    name: str  # file name (PNG)
    title: str
    png: bytes
    #: data points drawn (bars, markers, non-empty histogram bins): written as the image's
    #: ``data-points``, so a check of the page (headless Chromium) sees a plot is not one dot
    points: int | None = None

    def img(self) -> str:
        b64 = base64.b64encode(self.png).decode("ascii")
        pts = "" if self.points is None else f' data-points="{int(self.points)}"'
        return (
            f'<figure><img alt="{esc(self.title)}" data-file="{esc(self.name)}"{pts} '
            f'src="data:image/png;base64,{b64}"><figcaption>{esc(self.title)}'
            f"</figcaption></figure>"
        )


def png_bytes(fig) -> bytes:
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def _wrap(title: str, width: int = 80) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(title, width))


def _colors(n: int) -> list:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def plot_node_costs(plans: Sequence[PlanInfo], title: str, name: str) -> Plot:
    """Figure 41: per optimizer, one bar per node (plan node costs)."""
    n_nodes = max(len(p.node_costs) for p in plans)
    fig = new_figure(max(7.5, 0.9 * len(plans) + 2), 4.2)
    ax = fig.add_subplot(111)
    width = 0.8 / n_nodes
    colors = _colors(n_nodes)
    node_names = plans[0].node_ids
    for j in range(n_nodes):
        xs = [i - 0.4 + width * (j + 0.5) for i, p in enumerate(plans) if j < len(p.node_costs)]
        ys = [float(p.node_costs[j]) for p in plans if j < len(p.node_costs)]
        ax.bar(
            xs,
            ys,
            width,
            color=colors[j],
            label=node_names[j] if j < len(node_names) else f"node {j}",
        )
    for i, p in enumerate(plans):
        if p.exact:
            ax.axvspan(i - 0.45, i + 0.45, color="0.9", zorder=0)
    ax.set_xticks(range(len(plans)))
    ax.set_xticklabels([p.optimizer for p in plans], rotation=30, ha="right")
    ax.set_ylabel("node cost (aggregate ops / time unit)")
    ax.set_title(_wrap(title, 110), fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, ncol=min(n_nodes, 6))
    return Plot(name, title, png_bytes(fig), sum(len(p.node_costs) for p in plans))


def pareto_front(points: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Non-dominated (TotalCost, MaxCost) points, sorted by TotalCost."""
    pts = sorted(set(points))
    front: list[tuple[float, float]] = []
    for t, m in pts:
        if not front or m < front[-1][1]:
            front.append((t, m))
    return front


def plot_total_vs_max(
    plans: Sequence[PlanInfo],
    exact_total: float | None,
    exact_max: float | None,
    title: str,
    name: str,
    fronts: dict[str, list[tuple[float, float]]] | None = None,
) -> Plot:
    """TotalCost vs MaxCost of every plan (one legend entry per distinct point: plans with equal
    costs share it), the exact optima and the non-dominated plans (ringed, joined by a step
    line); with ``fronts``, WG_PF's front as a solid line, the exact front as a dotted one and
    WG_PF's chosen plan (its plan file) marked by a large square."""
    fig = new_figure(10.0, 4.8)
    ax = fig.add_subplot(111)
    groups: dict[tuple[float, float], list[PlanInfo]] = {}
    for p in plans:
        groups.setdefault((float(p.total_cost), float(p.max_cost)), []).append(p)
    front = pareto_front(groups)
    markers = "osD^vPX<>ph"
    colors = _colors(max(len(groups), 11))
    for i, (k, ps) in enumerate(groups.items()):
        is_exact = all(p.exact for p in ps)
        ax.scatter(
            [k[0]],
            [k[1]],
            s=140 if is_exact else 50,
            zorder=4,
            marker="*" if is_exact else markers[i % len(markers)],
            color="tab:red" if is_exact else colors[i],
            edgecolors="black" if k in front else "none",
            linewidths=1.2,
            label=", ".join(p.optimizer for p in ps),
        )
    if len(front) > 1:
        ax.plot(
            [f[0] for f in front],
            [f[1] for f in front],
            "--",
            color="0.4",
            lw=1,
            drawstyle="steps-post",
            label="non-dominated (ringed)",
            zorder=2,
        )
    for key, style in (
        ("WG_PF", dict(color="tab:green", ls="-", marker=".", lw=1.5)),
        ("EXACT", dict(color="tab:red", ls=":", marker="x", lw=1.2)),
    ):
        pts = sorted((fronts or {}).get(key) or [])
        if pts:
            ax.plot(
                [p[0] for p in pts],
                [p[1] for p in pts],
                drawstyle="steps-post",
                zorder=3,
                label=f"{'WG_PF' if key == 'WG_PF' else 'exact'} front ({len(pts)} plans)",
                **style,
            )
    chosen = [p for p in plans if p.optimizer == "WG_PF"]
    if chosen and fronts:
        ax.scatter(
            [chosen[0].total_cost],
            [chosen[0].max_cost],
            s=260,
            marker="s",
            facecolors="none",
            edgecolors="tab:green",
            linewidths=2,
            zorder=5,
            label="WG_PF chosen plan",
        )
    if exact_total is not None:
        ax.axvline(
            exact_total,
            color="tab:red",
            ls=":",
            lw=1,
            label=f"min TotalCost (exact) = {exact_total:.6g}",
        )
    if exact_max is not None:
        ax.axhline(
            exact_max,
            color="tab:purple",
            ls=":",
            lw=1,
            label=f"min MaxCost (exact) = {exact_max:.6g}",
        )
    ax.set_xlabel("TotalCost")
    ax.set_ylabel("MaxCost")
    ax.set_title(_wrap(title), fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return Plot(name, title, png_bytes(fig), len(groups))


def plot_quality(fig40: pd.DataFrame, optimizers: Sequence[str], title: str, name: str) -> Plot:
    """Figure 40: mean normalised plan quality per optimizer with std error bars."""
    fig = new_figure(max(8.0, 0.55 * len(optimizers) * 2 + 2), 4.0)
    for k, metric in enumerate(("MaxCost", "TotalCost")):
        ax = fig.add_subplot(1, 2, k + 1)
        sub = fig40[fig40["metric"] == metric].set_index("optimizer")
        names = [o for o in optimizers if o in sub.index]
        means = [float(sub.loc[o, "quality_mean_pct"]) for o in names]
        stds = [float(sub.loc[o, "quality_std_pct"]) for o in names]
        ax.bar(
            range(len(names)),
            means,
            yerr=stds,
            capsize=3,
            color="tab:orange" if metric == "MaxCost" else "tab:blue",
        )
        for i, (v, sd) in enumerate(zip(means, stds)):
            ax.text(i, v + sd + 1, f"{v:.1f}", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=40, ha="right", fontsize=8)
        ax.set_ylim(0, max([110.0] + [m + s + 8 for m, s in zip(means, stds)]))
        ax.set_ylabel("plan quality (0 % = best, 100 % = worst)")
        ax.set_title(f"({'ab'[k]}) {metric}", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title, fontsize=10)
    return Plot(name, title, png_bytes(fig), len(fig40))


def plot_runtime(rt: pd.DataFrame, title: str, name: str) -> Plot:
    """Table 10: mean plan-generation time per optimizer (error bars: std)."""
    fig = new_figure(max(7.0, 0.6 * len(rt) + 2), 3.8)
    ax = fig.add_subplot(111)
    means = rt["mean_s"].astype(float).tolist()
    stds = rt["std_s"].astype(float).tolist()
    ax.bar(range(len(rt)), means, yerr=stds, capsize=3, color="tab:green")
    ax.set_xticks(range(len(rt)))
    ax.set_xticklabels(rt["optimizer"].tolist(), rotation=40, ha="right", fontsize=8)
    pos = [m for m in means if m > 0]
    if pos and max(pos) / min(pos) > 100:
        ax.set_yscale("log")
    ax.set_ylabel("plan generation time (s)")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    return Plot(name, title, png_bytes(fig), len(rt))


def plot_live_load(
    node_ids: Sequence[str], series: Sequence[tuple[str, Sequence[float]]], name: str
) -> Plot:
    """Per node: each series (estimated cost, measured load ...) as a share of its total."""
    fig = new_figure(max(6.5, 1.1 * len(node_ids) + 2), 4.0)
    ax = fig.add_subplot(111)
    k = len(series)
    width = 0.8 / k
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red"]
    for j, (label, vals) in enumerate(series):
        tot = sum(vals) or 1.0
        ax.bar(
            [i - 0.4 + width * (j + 0.5) for i in range(len(node_ids))],
            [100 * v / tot for v in vals],
            width,
            label=label,
            color=colors[j % 4],
        )
    ax.set_xticks(list(range(len(node_ids))))
    ax.set_xticklabels(node_ids, rotation=20, ha="right")
    ax.set_ylabel("share of the cluster total (%)")
    title = "Estimated vs measured load per node (shares of the cluster total)"
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return Plot(name, title, png_bytes(fig), len(node_ids))


def plot_timeline(t: Sequence[float], rows: Sequence[float], name: str) -> Plot:
    fig = new_figure(7.5, 3.5)
    ax = fig.add_subplot(111)
    ax.plot(t, rows, marker=".", lw=1)
    ax.set_xlabel("wall-clock time (s)")
    ax.set_ylabel("rows / s")
    title = "Feed throughput over time"
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    return Plot(name, title, png_bytes(fig), len(t))


def plot_event_time(
    answers: pd.DataFrame | None, late: pd.DataFrame | None, name: str, bins: int = 50
) -> Plot | None:
    """Answers (by window end) and late tuples (by timestamp) per event-time bucket."""
    series = []
    if answers is not None and len(answers):
        series.append(("answers of time windows (by window_end)", answers["window_end"].to_numpy()))
    if late is not None and len(late):
        series.append(("late tuples (by ts_ms)", late["ts_ms"].to_numpy()))
    if not series:
        return None
    origin = min(int(v.min()) for _, v in series)
    series = [(label, (v - origin) / 1000.0) for label, v in series]
    fig = new_figure(7.5, 2.6 * len(series) + 0.8)
    filled = 0
    for k, (label, v) in enumerate(series):
        ax = fig.add_subplot(len(series), 1, k + 1)
        counts, _, _ = ax.hist(v, bins=bins, color="tab:blue" if k == 0 else "tab:red")
        filled = filled or int((counts > 0).sum())  # the first series' non-empty bins
        ax.set_ylabel("count")
        ax.set_title(label, fontsize=9)
        ax.grid(alpha=0.3)
    fig.axes[-1].set_xlabel("event time (s after the first window end / late tuple; ms timestamps)")
    title = "Answers and late tuples over event time"
    return Plot(name, title, png_bytes(fig), filled)
