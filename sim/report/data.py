"""Loading a run directory for the report: plans, results, metrics, read as written.

Why apart from drawing: every number the report shows comes from here, read from the run's own
files and never re-priced (``sim.report`` describes the files of each run kind); the HTML pages
and the terminal summary only format what these loaders return, and disagreements between the
files are collected as warnings.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
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


def num(v: Any) -> float | None:
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


def read_answer_times(path: Path) -> pd.DataFrame:
    """What the report shows of the answers (their count, answers per query, window ends over
    event time): ``query_id`` (categorical) and ``window_end`` only.  Why not the whole table:
    34.9 M answers of 100,000 queries took 4.4 GB in pandas (an object per id and value), these
    two columns ~0.4 GB."""
    import pyarrow.parquet as pq

    t = pq.read_table(path, columns=["query_id", "window_end"], read_dictionary=["query_id"])
    return t.to_pandas()


def load_live(run_dir: Path, plan: str | Path | None = None) -> LiveRun:
    run_dir = Path(run_dir)
    warnings = []
    metrics: dict = {}
    if (run_dir / "metrics.json").exists():
        metrics = json.loads((run_dir / "metrics.json").read_text())
    else:
        warnings.append("metrics.json missing: no per-node metrics")
    answers = (
        read_answer_times(run_dir / "answers.parquet")
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


def load_run(run_dir: str | Path, plan: str | Path | None = None) -> SimRun | LiveRun:
    """The run in ``run_dir`` as the report reads it, read once for both the HTML page and the
    terminal summary (a grid's thousands of plan files take seconds to read): a simulation, or
    a live run with ``plan`` as its deployed plan (a served run's default: the plan running
    now, ``plan_current.json``)."""
    run_dir = Path(run_dir)
    if detect_kind(run_dir) == "simulation":
        return load_simulation(run_dir)
    served = (run_dir / "events.jsonl").exists()  # weaveplace serve: the running plan
    if served and plan is None and (run_dir / "plan_current.json").exists():
        plan = run_dir / "plan_current.json"
    return load_live(run_dir, plan)
