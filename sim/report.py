"""``weaveplace report RUN_DIR``: a self-contained HTML report (+ PNGs) of a simulation or live run.

Why: the tables ``simulate`` and ``run_live`` write are exact but hard to read; the dissertation
reads its results from a few figures (Figure 40: plan quality, Figure 41: per-node costs,
Table 10: optimizer runtimes).  This module draws them from the run's own files.

No re-computation drift: every number shown is read from the run's files, never re-priced.  Plan
costs (per node, TotalCost, MaxCost) come from the plan JSON files; runtimes, exact optima and gaps
from the results table (``results.parquet``, else ``results.csv`` read with round-trip floats);
plan quality (Figure 40) and runtime statistics (Table 10) from ``fig40_quality.csv`` /
``table10_runtime.csv`` when present (computed from the results table only when they are
missing).  Every numeric table cell carries the exact value in ``data-value`` (Python ``repr``,
which round-trips) and a ``title`` tooltip; the "Plans (full precision)" table shows the plan JSON
values at full precision.  Disagreements between the results table and the plan files are listed
at the top of the report as warnings, never silently fixed.

Run directories:

* simulation (``sim.simulate``): ``plans/c<config>_<optimizer>.json`` (schema
  ``weaveplace.plan/1``), ``results.{parquet,csv}``, ``fig40_quality.csv``, ``table9_best.csv``,
  ``table10_runtime.csv``, ``best_per_config.csv``.  A folder with only ``plans/*.json`` works too
  (plans named ``c<N>_<name>.json`` are grouped by configuration ``N``).  Fronts
  (``c<N>_WG_PF_front.json``, ``c<N>_EXACT_front.json``: lists of plans, ``sim.pareto_sim``) are
  drawn on the configuration's TotalCost-vs-MaxCost scatter with WG_PF's chosen plan marked, and
  ``pareto_summary.csv`` is shown as a table.
* live (``cluster.live.run_live``; or ``cluster.streaming.run_stream``, whose
  ``answers.parquet``/``late.parquet`` are directories of parts and whose metrics add
  ``stream``): ``metrics.json``, ``answers.parquet``, ``late.parquet`` and,
  if present, the deployed plan (``plan.json``, any ``*.json`` in the folder with the plan schema,
  or the single plan in ``plans/``).  Per node, the plan's estimated cost is compared, as shares of
  the cluster total, with measured operations when ``metrics.json`` carries them (a node key among
  ``MEASURED_OPS_KEYS``), otherwise with busy seconds, and with "model ops on counted slices"
  (tree tuples + executor slice counts x the plan tree's Omega) when per-tree slice counts exist.  ``metrics.json`` has no wall-clock
  timeline today; when it has one (``timeline``: list of ``{"t_s": ..., "rows": ...}``) it is
  plotted as throughput over time, otherwise answers and late tuples are plotted over event time.

Output (``out_dir``, default ``RUN_DIR/report``): ``report.html`` (plots embedded as base64 PNG,
inline CSS, no scripts, no URLs) and the same plots as PNG files next to it.  Matplotlib is used
through the Agg canvas only (the global backend is not touched).
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from placement.plan import SCHEMA as PLAN_SCHEMA

MEASURED_OPS_KEYS = ("measured_ops", "operations", "ops")
PLAN_NAME = re.compile(r"^c(\d+)_(.+)\.json$")
EXACT_PREFIX = "EXACT_"
DEFAULT_MAX_CONFIG_FIGURES = 12


class ReportError(ValueError):
    """A run directory the report cannot read (missing, or neither a simulation nor a live run)."""


# ------------------------------------------------------------------------------------------------
# loading
# ------------------------------------------------------------------------------------------------


@dataclass
class PlanInfo:
    """The numbers of one plan JSON, exactly as written."""

    rel: str  # path relative to the run dir ("plans/c0000_W_TN.json")
    optimizer: str
    config_id: int | None
    node_ids: list[str]
    node_costs: list[float]
    total_cost: float
    max_cost: float
    n_trees: int
    ie: str

    @property
    def exact(self) -> bool:
        return self.optimizer.startswith(EXACT_PREFIX)


def read_plan(path: Path, run_dir: Path) -> PlanInfo:
    data = json.loads(path.read_text())
    if data.get("schema") != PLAN_SCHEMA:
        raise ReportError(f"{path}: schema {data.get('schema')!r}, expected {PLAN_SCHEMA!r}")
    m = PLAN_NAME.match(path.name)
    try:
        rel = path.relative_to(run_dir).as_posix()
    except ValueError:
        rel = str(path)
    return PlanInfo(
        rel,
        str(data["optimizer"]),
        int(m.group(1)) if m else None,
        [str(n["id"]) for n in data["nodes"]],
        [n["cost"] for n in data["nodes"]],
        data["total_cost"],
        data["max_cost"],
        sum(len(n.get("trees", [])) for n in data["nodes"]),
        str(data.get("ie", "")),
    )


def _read_results(run_dir: Path) -> pd.DataFrame | None:
    pq_path, csv_path = run_dir / "results.parquet", run_dir / "results.csv"
    if pq_path.exists():
        return pd.read_parquet(pq_path)
    if csv_path.exists():
        return pd.read_csv(csv_path, float_precision="round_trip")
    return None


def _read_csv(path: Path) -> pd.DataFrame | None:
    return pd.read_csv(path, float_precision="round_trip") if path.exists() else None


@dataclass
class SimRun:
    run_dir: Path
    plans: list[PlanInfo]
    results: pd.DataFrame | None
    fig40: pd.DataFrame  # optimizer, metric (MaxCost/TotalCost), quality_mean_pct, std
    fig40_source: str
    runtime: pd.DataFrame | None  # optimizer, runs, mean_s, std_s, min_s, max_s
    runtime_source: str
    table9: pd.DataFrame | None
    best_per_config: pd.DataFrame | None
    config: dict | None
    warnings: list[str] = field(default_factory=list)
    #: per configuration, ``{"WG_PF": [(total, max), ...], "EXACT": [...]}`` from the
    #: ``plans/c<N>_<name>_front.json`` files (lists of plans)
    fronts: dict[int, dict[str, list[tuple[float, float]]]] = field(default_factory=dict)
    pareto_summary: pd.DataFrame | None = None

    @property
    def config_ids(self) -> list[int | None]:
        ids = {p.config_id for p in self.plans}
        return sorted(ids, key=lambda c: (c is None, c if c is not None else 0))

    def plans_of(self, config_id: int | None) -> list[PlanInfo]:
        return [p for p in self.plans if p.config_id == config_id]

    def row_of(self, plan: PlanInfo) -> dict[str, Any] | None:
        if self.results is None or "plan" not in self.results:
            return None
        hit = self.results[self.results["plan"] == plan.rel]
        return hit.iloc[0].to_dict() if len(hit) else None

    @property
    def optimizers(self) -> list[str]:
        seen: dict[str, None] = {}
        if self.results is not None:
            seen.update((str(o), None) for o in self.results["optimizer"])
        seen.update((p.optimizer, None) for p in self.plans if not p.exact)
        return list(seen)


@dataclass
class LiveRun:
    run_dir: Path
    metrics: dict
    answers: pd.DataFrame | None
    late: pd.DataFrame | None
    plan: PlanInfo | None
    plan_raw: dict | None
    warnings: list[str] = field(default_factory=list)

    @property
    def nodes(self) -> dict[str, dict]:
        return self.metrics.get("nodes", {}) or {}


def detect_kind(run_dir: Path) -> str:
    """``"live"`` if the folder holds ``metrics.json`` or ``answers.parquet``, ``"simulation"`` if
    it holds a results table or ``plans/*.json``."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ReportError(f"run directory not found: {run_dir}")
    if (run_dir / "metrics.json").exists() or (run_dir / "answers.parquet").exists():
        return "live"
    if (
        (run_dir / "results.parquet").exists()
        or (run_dir / "results.csv").exists()
        or any((run_dir / "plans").glob("*.json"))
    ):
        return "simulation"
    raise ReportError(
        f"{run_dir}: neither a simulation run (results.csv / plans/*.json) nor a "
        "live run (metrics.json / answers.parquet)"
    )


def _num(v: Any) -> float | None:
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def _quality_from_results(df: pd.DataFrame) -> pd.DataFrame:
    """Figure 40 numbers when ``fig40_quality.csv`` is missing: per configuration 0 % = best
    plan, 100 % = worst (0 when all tie), then mean / population std per optimizer."""
    rows = []
    for metric, col in (("MaxCost", "max_cost"), ("TotalCost", "total_cost")):
        short = "max" if metric == "MaxCost" else "total"
        if f"quality_{short}_pct" in df:
            q = df[f"quality_{short}_pct"].astype(float)
        else:
            g = df.groupby("config_id")[col]
            best, worst = g.transform("min"), g.transform("max")
            span = worst - best
            q = (((df[col] - best) / span.where(span > best.abs() * 1e-9)).fillna(0.0) * 100).clip(
                0, 100
            )
        for name, qq in q.groupby(df["optimizer"], sort=False):
            rows.append(
                {
                    "optimizer": name,
                    "metric": metric,
                    "quality_mean_pct": float(qq.mean()),
                    "quality_std_pct": float(qq.std(ddof=0)),
                }
            )
    return pd.DataFrame(rows)


def _runtime_from_results(df: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for name, g in df.groupby("optimizer", sort=False):
        rt = g["runtime_s"].astype(float)
        rows.append(
            {
                "optimizer": name,
                "runs": len(rt),
                "mean_s": float(rt.mean()),
                "std_s": float(rt.std(ddof=0)),
                "min_s": float(rt.min()),
                "max_s": float(rt.max()),
            }
        )
    return pd.DataFrame(rows)


def load_simulation(run_dir: Path) -> SimRun:
    run_dir = Path(run_dir)
    results = _read_results(run_dir)
    warnings: list[str] = []
    plans: list[PlanInfo] = []
    fronts: dict[int, dict[str, list[tuple[float, float]]]] = {}
    for p in sorted((run_dir / "plans").glob("*.json")):
        if p.name.endswith("_front.json"):  # a front: a list of plans (sim.pareto_sim)
            m = PLAN_NAME.match(p.name)
            try:
                pts = [
                    (float(d["total_cost"]), float(d["max_cost"]))
                    for d in json.loads(p.read_text())
                ]
            except (KeyError, TypeError, ValueError, json.JSONDecodeError) as exc:
                warnings.append(f"skipped {p.name}: {exc}")
                continue
            if m:
                fronts.setdefault(int(m.group(1)), {})[m.group(2)[: -len("_front")]] = pts
            continue
        try:
            plans.append(read_plan(p, run_dir))
        except (ReportError, KeyError, json.JSONDecodeError) as exc:
            warnings.append(f"skipped {p.name}: {exc}")
    by_rel = {p.rel: p for p in plans}
    if results is not None and "plan" in results:
        for _, row in results.iterrows():
            rel = str(row["plan"])
            plan = by_rel.get(rel)
            if plan is None:
                warnings.append(
                    f"results row c{row['config_id']} {row['optimizer']}: plan file {rel} missing"
                )
                continue
            plan.config_id = int(row["config_id"])
            if row["optimizer"] != plan.optimizer:
                warnings.append(
                    f"{rel}: optimizer {plan.optimizer!r} in the plan, "
                    f"{row['optimizer']!r} in the results table"
                )
            for col, val in (("total_cost", plan.total_cost), ("max_cost", plan.max_cost)):
                if float(row[col]) != float(val):
                    warnings.append(
                        f"{rel}: {col} {val!r} in the plan, {row[col]!r} in the results table"
                    )
            if "node_costs" in row and isinstance(row["node_costs"], str):
                if [float(x) for x in json.loads(row["node_costs"])] != [
                    float(x) for x in plan.node_costs
                ]:
                    warnings.append(
                        f"{rel}: node costs differ between the plan and the results table"
                    )
    if results is None and not plans:
        raise ReportError(f"{run_dir}: no results table and no plans/*.json")
    if results is None:  # plans only: a results-like table from the plans
        results = pd.DataFrame(
            [
                {
                    "config_id": p.config_id if p.config_id is not None else 0,
                    "optimizer": p.optimizer,
                    "total_cost": p.total_cost,
                    "max_cost": p.max_cost,
                    "plan": p.rel,
                }
                for p in plans
                if not p.exact
            ]
        )
        for p in plans:
            if p.config_id is None:
                p.config_id = 0
    fig40 = _read_csv(run_dir / "fig40_quality.csv")
    fig40_source = "fig40_quality.csv"
    if fig40 is None:
        fig40, fig40_source = _quality_from_results(results), "computed from the results table"
    runtime = _read_csv(run_dir / "table10_runtime.csv")
    runtime_source = "table10_runtime.csv"
    if runtime is None and "runtime_s" in results:
        runtime, runtime_source = _runtime_from_results(results), "computed from the results table"
    config = None
    if (run_dir / "config.json").exists():
        try:
            config = json.loads((run_dir / "config.json").read_text())
        except json.JSONDecodeError:
            warnings.append("config.json: not valid JSON")
    return SimRun(
        run_dir,
        plans,
        results,
        fig40,
        fig40_source,
        runtime,
        runtime_source,
        _read_csv(run_dir / "table9_best.csv"),
        _read_csv(run_dir / "best_per_config.csv"),
        config,
        warnings,
        fronts,
        _read_csv(run_dir / "pareto_summary.csv"),
    )


def _find_live_plan(run_dir: Path, plan: str | Path | None) -> Path | None:
    if plan is not None:
        return Path(plan)
    if (run_dir / "plan.json").exists():
        return run_dir / "plan.json"
    for p in sorted(run_dir.glob("*.json")):
        if p.name == "metrics.json":
            continue
        try:
            if json.loads(p.read_text()).get("schema") == PLAN_SCHEMA:
                return p
        except (json.JSONDecodeError, AttributeError, UnicodeDecodeError):
            continue
    cands = sorted((run_dir / "plans").glob("*.json"))
    return cands[0] if len(cands) == 1 else None


def load_live(run_dir: Path, plan: str | Path | None = None) -> LiveRun:
    run_dir = Path(run_dir)
    warnings = []
    metrics: dict = {}
    if (run_dir / "metrics.json").exists():
        metrics = json.loads((run_dir / "metrics.json").read_text())
    else:
        warnings.append("metrics.json missing: no per-node metrics")
    answers = (
        pd.read_parquet(run_dir / "answers.parquet")
        if (run_dir / "answers.parquet").exists()
        else None
    )
    late = (
        pd.read_parquet(run_dir / "late.parquet") if (run_dir / "late.parquet").exists() else None
    )
    plan_path = _find_live_plan(run_dir, plan)
    info = raw = None
    if plan_path is not None:
        raw = json.loads(plan_path.read_text())
        info = read_plan(plan_path, run_dir)
        lost = set(metrics.get("lost_nodes") or {})  # re-placed: no metrics of their own
        missing = (set(info.node_ids) - lost) ^ set(metrics.get("nodes", {}) or {})
        if metrics.get("nodes") and missing:
            warnings.append(f"plan nodes and metrics nodes differ: {sorted(missing)}")
    else:
        warnings.append("no plan JSON in the run directory: estimated costs not shown")
    return LiveRun(run_dir, metrics, answers, late, info, raw, warnings)


# ------------------------------------------------------------------------------------------------
# plots (Agg canvas only)
# ------------------------------------------------------------------------------------------------


def _figure(w: float = 7.5, h: float = 4.0):
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

    def img(self) -> str:
        b64 = base64.b64encode(self.png).decode("ascii")
        return (
            f'<figure><img alt="{_e(self.title)}" data-file="{_e(self.name)}" '
            f'src="data:image/png;base64,{b64}"><figcaption>{_e(self.title)}'
            f"</figcaption></figure>"
        )


def _png(fig) -> bytes:
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
    fig = _figure(max(7.5, 0.9 * len(plans) + 2), 4.2)
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
    return Plot(name, title, _png(fig))


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
    fig = _figure(10.0, 4.8)
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
    return Plot(name, title, _png(fig))


def plot_quality(fig40: pd.DataFrame, optimizers: Sequence[str], title: str, name: str) -> Plot:
    """Figure 40: mean normalised plan quality per optimizer with std error bars."""
    fig = _figure(max(8.0, 0.55 * len(optimizers) * 2 + 2), 4.0)
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
    return Plot(name, title, _png(fig))


def plot_runtime(rt: pd.DataFrame, title: str, name: str) -> Plot:
    """Table 10: mean plan-generation time per optimizer (error bars: std)."""
    fig = _figure(max(7.0, 0.6 * len(rt) + 2), 3.8)
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
    return Plot(name, title, _png(fig))


def plot_live_load(
    node_ids: Sequence[str], series: Sequence[tuple[str, Sequence[float]]], name: str
) -> Plot:
    """Per node: each series (estimated cost, measured load ...) as a share of its total."""
    fig = _figure(max(6.5, 1.1 * len(node_ids) + 2), 4.0)
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
    return Plot(name, title, _png(fig))


def plot_timeline(t: Sequence[float], rows: Sequence[float], name: str) -> Plot:
    fig = _figure(7.5, 3.5)
    ax = fig.add_subplot(111)
    ax.plot(t, rows, marker=".", lw=1)
    ax.set_xlabel("wall-clock time (s)")
    ax.set_ylabel("rows / s")
    title = "Feed throughput over time"
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    return Plot(name, title, _png(fig))


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
    fig = _figure(7.5, 2.6 * len(series) + 0.8)
    for k, (label, v) in enumerate(series):
        ax = fig.add_subplot(len(series), 1, k + 1)
        ax.hist(v, bins=bins, color="tab:blue" if k == 0 else "tab:red")
        ax.set_ylabel("count")
        ax.set_title(label, fontsize=9)
        ax.grid(alpha=0.3)
    fig.axes[-1].set_xlabel("event time (s after the first window end / late tuple; ms timestamps)")
    title = "Answers and late tuples over event time"
    return Plot(name, title, _png(fig))


# ------------------------------------------------------------------------------------------------
# HTML
# ------------------------------------------------------------------------------------------------

CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#222;
max-width:1200px}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:32px}
h3{font-size:15px}
table{border-collapse:collapse;margin:8px 0 16px;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 7px}th{background:#f0f0f0;text-align:left}
td.num{text-align:right;font-variant-numeric:tabular-nums}
figure{margin:8px 0 20px}figure img{max-width:100%;border:1px solid #ddd}
figcaption{font-size:12px;color:#555}
.warn{background:#fff3cd;border:1px solid #e0c060;padding:8px 12px}
.note{color:#555;font-size:12px}
"""


def _e(s: Any) -> str:
    return html.escape(str(s), quote=True)


def _isnum(v: Any) -> bool:
    return (
        isinstance(v, (int, float))
        and not isinstance(v, bool)
        or type(v).__module__ == "numpy"
        and hasattr(v, "dtype")
        and v.dtype.kind in "iuf"
    )


def fmt(v: Any, kind: str = "g") -> str:
    """Display text of a value: costs ``,.6g``, percentages ``.1f``, seconds ``.4g``."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if not _isnum(v):
        return str(v)
    f = float(v)
    if math.isnan(f):
        return "–"
    if float(f).is_integer() and kind in ("g", "int") and abs(f) < 1e15:
        return f"{int(f):,}"
    if kind == "pct":
        return f"{f:.1f}"
    if kind == "s":
        return f"{f:.4g}"
    if kind == "s2":  # Table 10 style
        return f"{f:.2f}" if f >= 0.01 or f == 0 else f"{f:.1e}"
    if kind == "full":
        return repr(f)
    return f"{f:,.6g}"


def _cell(v: Any, kind: str = "g", field_name: str | None = None) -> str:
    attrs = f' data-field="{_e(field_name)}"' if field_name else ""
    if _isnum(v) and not (isinstance(v, float) and math.isnan(v)):
        f = float(v)
        if not math.isnan(f):
            r = (
                repr(int(v))
                if isinstance(v, int) or (hasattr(v, "dtype") and v.dtype.kind in "iu")
                else repr(f)
            )
            return f'<td class="num" data-value="{r}" title="{r}"{attrs}>{_e(fmt(v, kind))}</td>'
    return f"<td{attrs}>{_e(fmt(v, kind))}</td>"


def html_table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Any]],
    kinds: Sequence[str] | None = None,
    table_id: str | None = None,
    fields: Sequence[str | None] | None = None,
    row_attrs: Sequence[dict[str, str]] | None = None,
) -> str:
    kinds = kinds or ["g"] * len(headers)
    fields = fields or [None] * len(headers)
    out = [f"<table{f' id={chr(34)}{_e(table_id)}{chr(34)}' if table_id else ''}><thead><tr>"]
    out += [f"<th>{_e(h)}</th>" for h in headers]
    out.append("</tr></thead><tbody>")
    for i, r in enumerate(rows):
        attrs = "".join(f' {k}="{_e(v)}"' for k, v in (row_attrs[i] if row_attrs else {}).items())
        out.append(
            f"<tr{attrs}>" + "".join(_cell(v, k, f) for v, k, f in zip(r, kinds, fields)) + "</tr>"
        )
    out.append("</tbody></table>")
    return "".join(out)


def _page(title: str, body: list[str]) -> str:
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{CSS}</style></head><body>"
        f'<h1>{_e(title)}</h1><p class="note">generated {stamp} by weaveplace report</p>'
        + "\n".join(body)
        + "</body></html>\n"
    )


def _warnings(ws: list[str]) -> str:
    if not ws:
        return ""
    items = "".join(f"<li>{_e(w)}</li>" for w in ws[:200])
    more = f"<li>… {len(ws) - 200} more</li>" if len(ws) > 200 else ""
    return f'<div class="warn"><b>Warnings</b><ul>{items}{more}</ul></div>'


# ------------------------------------------------------------------------------------------------
# simulation report
# ------------------------------------------------------------------------------------------------

PARAMS = ("qnum", "smax", "rate", "zskew", "omax", "gen", "workload_seed", "nodes", "capacities")


def _config_label(run: SimRun, cid: int | None) -> str:
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
                and _num(g.iloc[0][k]) is not None
                or (k in g and isinstance(g.iloc[0][k], str) and g.iloc[0][k])
            ]
            return f"config {cid}: " + ", ".join(parts)
    return f"config {cid}"


def _exact_of(run: SimRun, cid: int | None) -> tuple[float | None, float | None]:
    r = run.results
    if r is not None and "exact_total" in r and "config_id" in r:
        g = r[r["config_id"] == cid]
        if len(g):
            return _num(g.iloc[0]["exact_total"]), _num(g.iloc[0]["exact_max"])
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


def _ordered_plans(run: SimRun, cid: int | None) -> list[PlanInfo]:
    order = {o: i for i, o in enumerate(run.optimizers)}
    ps = run.plans_of(cid)
    return sorted(ps, key=lambda p: (p.exact, order.get(p.optimizer, len(order)), p.optimizer))


def _sim_body(run: SimRun, max_config_figures: int) -> tuple[list[str], list[Plot]]:
    body: list[str] = [_warnings(run.warnings)]
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
            f'<p class="note">source: {_e(run.fig40_source)}</p>'
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
            + f'<p class="note">source: {_e(run.runtime_source)}; optimizer time only'
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
        ps = _ordered_plans(run, cid)
        if not ps:
            continue
        label = _config_label(run, cid)
        tag = f"c{cid:04d}" if cid is not None else "plans"
        body.append(f'<h3 id="{tag}">{_e(label)}</h3>')
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
            body.append(f'<p class="note">{_e(unproven)}</p>')
        for p in ps:
            row = run.row_of(p) or {}
            gt, gm = _num(row.get("gap_total")), _num(row.get("gap_max"))
            gth, gmh = _num(row.get("gap_total_hi")), _num(row.get("gap_max_hi"))
            rows.append(
                [p.optimizer, p.total_cost, p.max_cost]
                + [p.node_costs[j] if j < len(p.node_costs) else None for j in range(n_nodes)]
                + [
                    _num(row.get("runtime_s")),
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
        for p in _ordered_plans(run, cid):
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


# ------------------------------------------------------------------------------------------------
# live report
# ------------------------------------------------------------------------------------------------


def _measured(nodes: dict[str, dict]) -> tuple[str, str]:
    """(metrics key, label) of the measured per-node load."""
    for k in MEASURED_OPS_KEYS:
        if nodes and all(_num(m.get(k)) is not None for m in nodes.values()):
            return k, f"measured operations ({k})"
    return "busy_s", "busy seconds (no measured operation counts in metrics.json)"


def _slice_ops(run: LiveRun) -> dict[str, float] | None:
    """Per node: tree tuples + sum over trees of (counted slices x the plan tree's Omega), the
    cost model evaluated on what the executors really saw; None when the plan or per-tree slice
    counts are missing.  (Runs from before issue 16 may name ``<id>~count`` trees: their plan
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
            if base not in omega or _num(t.get("slices")) is None:
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
    vals = [_num(v) for k, v in m.items() if "reject" in k.lower()]
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


def _live_body(run: LiveRun) -> tuple[list[str], list[Plot]]:
    body: list[str] = [_warnings(run.warnings)]
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
    if st:  # live mode over a directory (cluster.streaming): batches above are feed batches
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

    nodes = run.nodes
    node_ids = list(run.plan.node_ids) if run.plan is not None else []
    node_ids += [n for n in nodes if n not in node_ids]
    est = None
    if run.plan is not None:
        by = dict(zip(run.plan.node_ids, run.plan.node_costs))
        est = [by.get(n, 0.0) for n in node_ids]
    key, label = _measured(nodes)
    slice_ops = _slice_ops(run)
    if nodes:
        series = [("estimated cost (plan)", est)] if est is not None else []
        if slice_ops is not None:
            series.append(
                ("model ops on counted slices", [slice_ops.get(n, 0.0) for n in node_ids])
            )
        series.append(
            (
                label.split(" (")[0] if key == "busy_s" else label,
                [float(_num(nodes.get(n, {}).get(key)) or 0.0) for n in node_ids],
            )
        )
        p = plot_live_load(node_ids, series, "live_node_load.png")
        plots.append(p)
        body.append(
            "<h2>Estimated vs measured per-node cost</h2>"
            + p.img()
            + f'<p class="note">measured load: {_e(label)}.'
            + (
                " Busy seconds include one-time JIT compilation and per-batch overheads."
                if key == "busy_s"
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
    m_vals = {n: float(_num(nodes.get(n, {}).get(key)) or 0.0) for n in node_ids}
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
    late_total_metrics = sum(int(_num(nm.get("late_tuples")) or 0) for nm in nodes.values())
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
        answers = answers[~answers["query_id"].isin(count_q)]
    p = plot_event_time(answers, run.late, "live_event_time.png")
    if p is not None:
        plots.append(p)
        body.append(p.img())
    if run.answers is not None and len(run.answers):
        a = run.answers.groupby("query_id").size()
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


# ------------------------------------------------------------------------------------------------
# entry points
# ------------------------------------------------------------------------------------------------


def build_report(
    run_dir: str | Path,
    out_dir: str | Path | None = None,
    *,
    plan: str | Path | None = None,
    max_config_figures: int = DEFAULT_MAX_CONFIG_FIGURES,
) -> Path:
    """Write ``report.html`` and its PNGs for a simulation or live run; return the HTML path.

    ``out_dir`` defaults to ``RUN_DIR/report``; ``plan`` names the deployed plan of a live run
    when it is not in the run directory.
    """
    run_dir = Path(run_dir)
    kind = detect_kind(run_dir)
    out = Path(out_dir) if out_dir is not None else run_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    if kind == "simulation":
        run = load_simulation(run_dir)
        body, plots = _sim_body(run, max_config_figures)
        title = f"weaveplace simulation report — {(run.config or {}).get('name') or run_dir.name}"
    else:
        served = (run_dir / "events.jsonl").exists()  # weaveplace serve: the running plan
        if served and plan is None and (run_dir / "plan_current.json").exists():
            plan = run_dir / "plan_current.json"
        live = load_live(run_dir, plan)
        body, plots = _live_body(live)
        title = f"weaveplace live run report — {run_dir.name}"
        if served:
            from sim.serve_report import serve_section

            more, more_plots = serve_section(run_dir)
            body, plots = body + more, plots + more_plots
    for p in plots:
        (out / p.name).write_bytes(p.png)
    path = out / "report.html"
    path.write_text(_page(title, body), encoding="utf-8")
    return path


def print_summary(
    run_dir: str | Path, console=None, *, plan: str | Path | None = None, max_configs: int = 4
) -> None:
    """The report's main tables on the terminal (rich)."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    run_dir = Path(run_dir)
    if detect_kind(run_dir) == "simulation":
        run = load_simulation(run_dir)
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
            ps = _ordered_plans(run, cid)
            t = Table(title=_config_label(run, cid))
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
    live = load_live(run_dir, plan)
    for w in live.warnings:
        console.print(f"[yellow]warning:[/yellow] {w}")
    m = live.metrics
    key, label = _measured(live.nodes)
    t = Table(
        title=f"live run: {fmt(m.get('rows_fed'))} rows, {fmt(m.get('answers'))} answers, "
        f"{fmt(m.get('wall_s'), 's')} s wall"
    )
    so = _slice_ops(live) or {}
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
    for n in list(est) + [n for n in live.nodes if n not in est]:
        nm = live.nodes.get(n, {})
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


def report_command(run_dir: Path, out: Path | None = None) -> None:
    """Write an HTML report (plots embedded, no network needed) of a simulation or live run.

    Draft for ``sim.cli``: ``app.command("report")(report_command)``.
    """
    from rich.console import Console

    console = Console()
    try:
        print_summary(run_dir, console)
        path = build_report(run_dir, out)
    except (ReportError, json.JSONDecodeError, KeyError) as exc:
        from sim.cli import UserError

        raise UserError(f"report: {exc}") from exc
    console.print(f"report: {path} (+ PNGs in {path.parent})")
