"""Plan-level simulation of a config: every configuration x optimizer, priced by the cost model.

Why plan level: the dissertation's chapter 6 compares optimizers by plan cost (aggregate operations
per time unit), not by running the plans, so this is what reproduces Table 9, Figure 40, Table 10
and Figure 41 on any machine. Live execution of a plan is ``cluster.runs.file_run``'s job.

Outputs under ``output_dir`` (``run.output_dir`` or the override):

- ``plans/c<config>_<optimizer>.json``: every plan (schema ``weaveplace.plan/1``; anyone can
  re-price it with ``weaveplace verify-plan``), plus ``..._EXACT_min_total`` / ``_EXACT_min_max``
  where the exact optimum was computed;
- ``results.csv`` / ``results.parquet``: one row per (configuration, optimizer) with the
  configuration's parameters, ``total_cost``, ``max_cost``, ``node_costs`` (JSON list, node order
  of the plan), ``runtime_s`` (optimizer only, not plan writing; WG_LS's and WG_PF's include
  the plans they start from, reused with their runtimes), the exact optima (with proven bounds
  ``exact_bound_*`` when not proven, and ``gap_*_hi = plan / bound - 1``) and relative gaps
  ``gap_total`` / ``gap_max`` (``plan / exact - 1``) where computed, and each plan's quality
  ``quality_total_pct`` / ``quality_max_pct`` (Figure 40: 0 % = the best plan of this
  configuration, 100 % = the worst; 0 when all plans tie);
- ``best_per_config.csv``: per configuration, the best optimizer(s) in TotalCost and MaxCost;
- ``table9_best.csv``: per optimizer and metric, how often it is best and, when not, how far from
  the best on average (Table 9's breakdown, for every optimizer);
- ``fig40_quality.csv``: per optimizer and metric, mean and standard deviation (population) of the
  normalised plan quality (Figure 40);
- ``table10_runtime.csv``: per optimizer, mean / std / min / max plan-generation time (Table 10);
- ``config.json``: the validated configuration, for provenance;
- with WG_PF: ``plans/c<config>_WG_PF_front.json`` (its front, a list of plans; the results row
  is the chosen plan), the columns and ``pareto_summary.csv`` of ``sim.pareto_sim``; with the
  exact optimum, ``plans/c<config>_EXACT_front.json`` (the exact Pareto front).

CSV floats are written with full precision; read them back exactly with
``pd.read_csv(..., float_precision="round_trip")`` (or use the Parquet file).
Ties: plans within a relative 1e-9 of the best count as best (costs are sums of floats).
Single-node optimizers (``weaveshare`` ...) ignore the cluster: all their trees go to the first node
and the other nodes stay idle, so their MaxCost equals their TotalCost; they keep their own
preprocessing default (identical-slicing grouping), ``placement.preprocess`` applies to the
distributed optimizers. The exact solver is run once per (workload, cluster) after the optimizers,
seeded with their plans (``_exact``).
"""

from __future__ import annotations

import copy
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from placement.distributed import build_plan
from placement.local_search.search import STARTS as LS_STARTS
from placement.optimizers import SINGLE_NODE, category, optimize, run_single_node
from placement.pareto.search import SEED_OPTIMIZERS, ParetoResult
from placement.plan import Plan
from placement.queries import Query
from placement.trees import CostModel
from sim import pareto_sim, workload_runners
from sim.compile_cache import warm_placement
from sim.config import Config, ConfigError
from sim.config.paths import make_output_dir
from sim.ray_address import check_attach
from sim.workload import WorkloadSpec, generate

if TYPE_CHECKING:
    import pandas as pd

Progress = Callable[[int, int, str], None]
REL_TIE = 1e-9
METRICS = (("total", "total_cost"), ("max", "max_cost"))


@dataclass
class SimulationSummary:
    """What ``simulate`` returns: where things are and the per-optimizer summary rows."""

    output_dir: Path
    configurations: int
    runs: int
    seconds: float
    files: dict[str, Path] = field(default_factory=dict)
    per_optimizer: list[dict[str, Any]] = field(default_factory=list)
    compile_s: float = 0.0  # one-off numba compile/cache load, outside every runtime_s


def _single_node(name: str, queries: list[Query], model: CostModel):
    return run_single_node(name, queries, model)


def workload_point(
    config: Config, w: dict[str, Any] | None
) -> tuple[list[Query], dict[str, float], dict[str, Any]]:
    """Queries, stream rates and the parameter columns of one workload point."""
    if w is not None:
        g = config.workload.generator
        assert g is not None  # a grid point comes from the generator
        spec = WorkloadSpec(
            w["qnum"],
            w["smax"],
            float(w["rate"]),
            float(w["zskew"]),
            float(w["omax"]),
            w["gen"],
            w["seed"],
            g.stream,
            g.aggregate,
        )
        params = {
            **{k: w[k] for k in ("qnum", "smax", "rate", "zskew", "omax", "gen")},
            "workload_seed": w["seed"],
        }
        return generate(spec), {spec.stream: float(spec.rate)}, params
    queries = [
        Query(q.id, q.range, q.slide, q.aggregate, q.stream, q.kind)
        for q in config.workload.queries or []
    ]
    rates = {
        s: v.rate for s, v in (config.streams or {}).items() if s in {q.stream for q in queries}
    }
    params = {
        "qnum": len(queries),
        "smax": max(q.slide for q in queries),
        "rate": None,
        "zskew": None,
        "omax": None,
        "gen": "explicit",
        "workload_seed": None,
    }
    return queries, rates, params


def _name_nodes(plan: Plan, ids: list[str]) -> Plan:
    for node, node_id in zip(plan.nodes, ids):
        node.id = node_id
    return plan


def plan_for(
    name: str, queries, model, caps, config: Config, strict: bool = False, **options: Any
) -> Plan:
    """One optimizer's plan. WG_PF: the plan its ``placement.choose`` rule picks; ``strict``
    (live runs): a rule that no plan meets is a ``ConfigError`` (its one-line note, with a
    load-shedding proposal when no plan fits the capacities) instead of a fallback plan.
    ``options`` go to a distributed optimizer (WG_LS's ``starts``)."""
    if name == "WG_PF":
        res = pareto_sim.pareto_for(queries, model, caps, config)
        if strict and not res.met:
            raise ConfigError(res.note)
        return res.plan
    if name in SINGLE_NODE:
        trees = _single_node(name, queries, model)
        return build_plan(name, model, [trees] + [[] for _ in caps[1:]], caps, queries)
    return optimize(
        name,
        queries,
        model,
        caps,
        seed=config.run.seed,
        preprocess=config.placement.preprocess_arg,
        **options,
    )


def _category(name: str) -> str:
    return category(name)


def check_simulatable(config: Config) -> None:
    """``simulate`` prices plans; a ``live`` config asks for execution, which is not done here.
    A configured Ray address (whole workloads as Ray tasks) must be reachable, and accept our
    token, before any work (``weaveplace validate`` runs this too)."""
    if config.run.mode != "simulate":
        raise ConfigError(
            "run.mode: 'live' executes plans on a cluster; `simulate` only prices "
            "plans (set run.mode: simulate)"
        )
    check_attach(config.cluster.ray.address)


def _point_rows(
    config: Config,
    i: int,
    point: dict[str, Any],
    work: tuple,
    out: Path,
    tick: Callable[[str], None],
) -> list[dict[str, Any]]:
    """Every optimizer of ``config`` on configuration ``i`` (plans written under ``out``)."""
    queries, rates, params, model = work
    pl = config.placement
    ids, caps = point["node_ids"], point["capacities"]
    base = {
        "config_id": i,
        **params,
        "nodes": len(ids),
        "capacities": None if all(c is None for c in caps) else json.dumps(caps),
        "ie": pl.ie,
        "slicing": pl.slicing,
        "engine": pl.engine,
        "preprocess": str(pl.preprocess_arg),
    }
    # numba's one-off kernel compile/load (first call in this process) before any timer:
    # reported as compile_s (on the first row that paid it), never inside runtime_s (Table 10)
    compile_s = warm_placement()
    rows: list[dict[str, Any]] = []
    dicts: list[dict[str, Any]] = []
    plans: list[Plan] = []
    pf_points = None
    done: dict[str, tuple[Plan, float]] = {}
    pf_res: ParetoResult | None = None
    for name in pl.optimizer_list:
        t0 = time.perf_counter()
        if name == "WG_PF":  # the chosen plan of its front (sim.pareto_sim)
            reused = {k: v for k, v in done.items() if k in SEED_OPTIMIZERS}
            pf_res = pareto_sim.pareto_for(
                queries, model, caps, config, {k: p for k, (p, _) in reused.items()}
            )
            plan = pf_res.plan
            # WG_PF's time includes its seeds': reused plans count with their own runtimes
            runtime = time.perf_counter() - t0 + sum(t for _, t in reused.values())
            plans += list(pf_res.front)
        elif name == "WG_LS":  # its starts are plans of this configuration already made
            reused = {k: v for k, v in done.items() if k in LS_STARTS}
            plan = plan_for(
                name, queries, model, caps, config, starts={k: p for k, (p, _) in reused.items()}
            )
            own = time.perf_counter() - t0
            done[name] = (plan, own)  # WG_PF adds each seed's own time once
            # like WG_PF's: WG_LS's time includes its starts', reused ones with their runtimes
            runtime = own + sum(t for _, t in reused.values())
        else:
            plan = plan_for(name, queries, model, caps, config)
            runtime = time.perf_counter() - t0
            done[name] = (plan, runtime)
        plans.append(plan)
        d = _name_nodes(plan, ids).to_dict()
        dicts.append(d)
        rel = Path("plans") / f"c{i:04d}_{name}.json"
        (out / rel).write_text(json.dumps(d, indent=1))
        rows.append(
            {
                **base,
                "optimizer": name,
                "category": _category(name),
                "n_queries": len(queries),
                "n_trees": sum(len(n["trees"]) for n in d["nodes"]),
                "total_cost": d["total_cost"],
                "max_cost": d["max_cost"],
                "node_costs": json.dumps([n["cost"] for n in d["nodes"]]),
                "runtime_s": runtime,
                "compile_s": 0.0 if rows else compile_s,
                "plan": str(rel),
            }
        )
        tick(f"c{i} {name}")
    # After the heuristics: their plans (WG_PF's whole front too) seed the exact solvers, so
    # the exact answer is never worse than a known plan; the exact front only for WG_PF.
    instance = ExactInstance(queries, model, caps, ids, out / "plans", i)
    exact, exact_front = _exact(instance, plans, pl, front=pf_res is not None)
    for row in rows:
        row.update(exact)
        row.update(_gaps(row, exact))
        if row["optimizer"] == "WG_PF" and pf_res is not None:
            row.update(pareto_sim.front_rows(pf_res, out, i, ids, exact_front))
            pf_points = [pareto_sim.plan_point(p.to_dict()) for p in pf_res.front]
        row["plan"] = row.pop("plan")  # keep the plan path the last column
    pareto_sim.annotate(rows, pf_points, exact_front, dicts)
    return rows


def group_rows(config: Config, group: list[int], out: Path, tick) -> list[dict[str, Any]]:
    """The configurations of one workload (its node layouts): one workload, one cost model.
    What a runner (``sim.workload_runners``) calls per workload, wherever it runs."""
    points = config.points()
    pl = config.placement
    queries, rates, params = workload_point(config, points[group[0]]["workload"])
    work = (queries, rates, params, CostModel(pl.ie, rates, pl.engine, pl.slicing))
    return [r for i in group for r in _point_rows(config, i, points[i], work, out, tick)]


def _workload_groups(points: list[dict[str, Any]]) -> list[list[int]]:
    groups: dict[int, list[int]] = {}
    for i, point in enumerate(points):
        groups.setdefault(id(point["workload"]), []).append(i)
    return list(groups.values())


def simulate(
    config: Config,
    progress: Progress | None = None,
    output_dir: str | Path | None = None,
    workers: int | None = None,
    ray_address: str | None = None,
) -> SimulationSummary:
    """Run every configuration x optimizer of ``config``, write plans and tables (module doc).

    Whole workloads (all node layouts of one generated workload share its queries, cost model
    and WeaveShare result) go to ``workers`` (default ``run.workers``) local processes; with
    one worker everything runs in this process. With a Ray address (``ray_address``, default
    ``cluster.ray.address``; ``local``: an embedded Ray with ``workers`` CPUs) each workload is
    a Ray task on that cluster instead (``sim.workload_runners``). Rows and files depend on
    neither.
    """
    check_simulatable(config)
    start = time.perf_counter()
    out = Path(output_dir if output_dir is not None else config.run.output_dir)
    make_output_dir("--out" if output_dir is not None else "run.output_dir", out)
    (out / "plans").mkdir(exist_ok=True)
    points = config.points()
    groups = _workload_groups(points)
    total = len(points) * len(config.placement.optimizer_list)
    address = ray_address if ray_address is not None else config.cluster.ray.address
    workers = max(1, min(workers or config.run.workers, len(groups)))
    done = 0

    def tick(label: str) -> None:
        nonlocal done
        done += 1
        if progress:
            progress(done, total, label)

    if progress:
        progress(0, total, "simulate")
    rows: list[dict[str, Any]] = []
    # longest first, so that no worker is left alone with a big workload at the end
    order = sorted(groups, key=lambda g: _group_weight(config, points, g), reverse=True)
    if address is not None:
        rows = workload_runners.on_ray(group_rows, config, order, out, address, workers, tick)
    elif workers == 1:
        for g in groups:
            rows += group_rows(config, g, out, tick)
    else:
        rows = workload_runners.in_processes(group_rows, config, order, out, workers, tick)
    rows.sort(key=lambda r: r["config_id"])  # stable: optimizer order within a configuration
    import pandas as pd  # here: a live run's start-up needs this module, not pandas (0.35 s)

    results = _with_quality(pd.DataFrame(rows))
    files = _write_tables(results, out, config)
    per_opt = _per_optimizer(results)
    return SimulationSummary(
        out,
        len(points),
        len(rows),
        time.perf_counter() - start,
        files,
        per_opt,
        float(results["compile_s"].sum()),
    )


def _group_weight(config: Config, points: list[dict[str, Any]], group: list[int]) -> float:
    """An a-priori estimate of a workload's work, to submit the largest first: its query count
    squared (WG_LS and WeaveShare price pairs of trees) times its node layouts and, for a
    generated workload, what made Table 8's workloads slow to place (measured: per axis, WG_PF's
    time with its seeds on the whole grid): Nrm slides (more distinct moduli: costlier edge
    densities) 2x, Omax 10 (more distinct windows per slide) 1.7x, Smax as is, rate 100 1.6x."""
    w = points[group[0]]["workload"]
    if w is None:
        qnum = len(config.workload.queries or [])
        return float(qnum * qnum * len(group))
    scale = w["smax"] * (2.0 if w["gen"] == "nrm" else 1.0)
    scale *= (1.7 if w["omax"] <= 10 else 1.0) * (1.6 if w["rate"] >= 100 else 1.0)
    return float(w["qnum"] * w["qnum"] * len(group)) * scale


EXACT_COLUMNS = (
    "exact_total",
    "exact_max",
    "exact_method",
    "exact_proven_total",
    "exact_proven_max",
    "exact_bound_total",
    "exact_bound_max",
    "exact_rel_gap_total",
    "exact_rel_gap_max",
)


@dataclass(frozen=True)
class ExactInstance:
    """One configuration to solve exactly: its queries priced by ``model`` on nodes ``ids``
    with capacities ``caps``, and where its plans are written (``c<index>_EXACT_*.json`` in
    ``plans_dir``)."""

    queries: list[Query]
    model: CostModel
    caps: list[float | None]
    ids: list[str]
    plans_dir: Path
    index: int


def _exact(instance: ExactInstance, hints, placement, front: bool = False):
    """Exact optima (placement.exact) when the workload has at most
    ``placement.exact_max_queries`` queries; plans are written.

    Seeded with the run's plans (``hints``), so ``exact_total`` / ``exact_max`` are never worse
    than a heuristic's; when optimality is not proven within ``placement.exact_time_limit``
    seconds the proven lower bounds ``exact_bound_*`` and the relative gap
    ``exact_rel_gap_* = exact / bound - 1`` say how far off they may be (``exact_proven_*``: proven optimal). Returns the columns and,
    with ``front``, the exact Pareto front (written as ``c<NNNN>_EXACT_front.json``)."""
    res: dict[str, Any] = dict.fromkeys(EXACT_COLUMNS)
    queries, ids = instance.queries, instance.ids
    plans_dir, i = instance.plans_dir, instance.index
    if len(queries) > placement.exact_max_queries:
        return res, None
    from placement.exact.optimum import InfeasibleError, solve_exact

    try:
        ex = solve_exact(
            queries,
            instance.model,
            instance.caps,
            hints=list(hints),
            time_limit_s=placement.exact_time_limit,
            front=front,
        )
    except InfeasibleError:
        res["exact_method"] = "infeasible"
        return res, None
    if front and ex.front_exact and ex.front:  # the exact Pareto front, written like WG_PF's
        for plan in ex.front:
            plan.optimizer = "EXACT_PARETO"
            _name_nodes(plan, ids)
        pareto_sim.write_front(
            plans_dir / f"c{i:04d}_EXACT_front.json", [p.to_dict() for p in ex.front]
        )
    for tag, plan in (("min_total", ex.min_total), ("min_max", ex.min_max)):
        plan = copy.deepcopy(plan)
        plan.optimizer = f"EXACT_{tag}"
        d = _name_nodes(plan, ids).to_dict()
        d["exact"] = {
            "objective": tag,
            "method": ex.method,
            "proven": ex.optimal_total if tag == "min_total" else ex.optimal_max,
            "bound_total": ex.bound_total,
            "bound_max": ex.bound_max,
            "seeded_from": ex.seeded,
        }
        (plans_dir / f"c{i:04d}_EXACT_{tag}.json").write_text(json.dumps(d, indent=1))
    res.update(
        exact_total=ex.min_total.total_cost,
        exact_max=ex.min_max.max_cost,
        exact_method=ex.method
        + ("" if ex.optimal_total and ex.optimal_max else " (not proven optimal)"),
        exact_proven_total=ex.optimal_total,
        exact_proven_max=ex.optimal_max,
        exact_bound_total=ex.bound_total,
        exact_bound_max=ex.bound_max,
        exact_rel_gap_total=ex.gap_total,
        exact_rel_gap_max=ex.gap_max,
    )
    return res, (ex.front if front and ex.front_exact and ex.front else None)


def _gaps(row: dict[str, Any], exact: dict[str, Any]) -> dict[str, Any]:
    """A plan's gap to the optimum as an interval: ``gap_* = plan / exact - 1`` (the optimum
    is at most ``exact``: a lower end, >= 0 since the exact answer is seeded with every plan)
    and ``gap_*_hi = plan / bound - 1`` (the optimum is at least the proven bound); equal
    when the exact answer is proven optimal (up to CP-SAT's integer rounding, ~1e-6). Only a
    plan over the node capacities (heuristics do not refuse those) can have a negative gap."""
    out: dict[str, Any] = {
        "gap_total": None,
        "gap_max": None,
        "gap_total_hi": None,
        "gap_max_hi": None,
    }
    if exact["exact_total"] is None:
        return out
    for short in ("total", "max"):
        v, best, lb = row[f"{short}_cost"], exact[f"exact_{short}"], exact[f"exact_bound_{short}"]
        out[f"gap_{short}"] = v / best - 1
        out[f"gap_{short}_hi"] = v / lb - 1 if lb > 0 else math.inf
    return out


def _with_quality(df: pd.DataFrame) -> pd.DataFrame:
    """Per configuration: best/worst per metric, normalised quality and distance to the best."""
    if df.empty:
        return df
    for short, col in METRICS:
        g = df.groupby("config_id")[col]
        best, worst = g.transform("min"), g.transform("max")
        span = worst - best
        tie = best.abs() * REL_TIE
        df[f"best_{short}"] = df[col] <= best + tie
        q = ((df[col] - best) / span.where(span > tie)).fillna(0.0) * 100
        df[f"quality_{short}_pct"] = q.clip(0, 100)
        df[f"to_best_{short}_pct"] = (df[col] / best - 1) * 100
    return df


def _per_optimizer(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Table 9 / Figure 40 / Table 10 numbers per optimizer, in config order."""
    out = []
    for name, g in df.groupby("optimizer", sort=False):
        row: dict[str, Any] = {
            "optimizer": name,
            "category": g["category"].iloc[0],
            "configs": len(g),
        }
        for short, _ in METRICS:
            best = g[f"best_{short}"]
            row[f"best_{short}_pct"] = float(100.0 * best.mean())
            losers = g.loc[~best, f"to_best_{short}_pct"]
            row[f"not_best_{short}_mean_gap_pct"] = float(losers.mean()) if len(losers) else None
            row[f"quality_{short}_mean_pct"] = float(g[f"quality_{short}_pct"].mean())
            row[f"quality_{short}_std_pct"] = float(g[f"quality_{short}_pct"].std(ddof=0))
            gaps = g[f"gap_{short}"].dropna()
            row[f"exact_gap_{short}_mean_pct"] = (
                float(gaps.astype(float).mean() * 100) if len(gaps) else None
            )
        rt = g["runtime_s"]
        row.update(
            runtime_mean_s=float(rt.mean()),
            runtime_std_s=float(rt.std(ddof=0)),
            runtime_min_s=float(rt.min()),
            runtime_max_s=float(rt.max()),
        )
        out.append(row)
    return out


def _write_tables(df: pd.DataFrame, out: Path, config: Config) -> dict[str, Path]:
    import pandas as pd

    files = {"results_csv": out / "results.csv", "results_parquet": out / "results.parquet"}
    df.to_csv(files["results_csv"], index=False)
    df.to_parquet(files["results_parquet"], index=False)
    params = [
        "config_id",
        "qnum",
        "smax",
        "rate",
        "zskew",
        "omax",
        "gen",
        "workload_seed",
        "nodes",
        "capacities",
    ]
    best_rows = []
    for _cid, g in df.groupby("config_id", sort=True):
        r = {k: g[k].iloc[0] for k in params}
        for short, col in METRICS:
            r[f"best_{short}_optimizers"] = "|".join(g.loc[g[f"best_{short}"], "optimizer"])
            r[f"best_{short}"] = g[col].min()
            r[f"worst_{short}"] = g[col].max()
        best_rows.append(r)
    files["best_per_config"] = out / "best_per_config.csv"
    pd.DataFrame(best_rows).to_csv(files["best_per_config"], index=False)

    per = _per_optimizer(df)
    t9 = [
        {
            "optimizer": p["optimizer"],
            "metric": metric,
            "configs": p["configs"],
            "best_pct": p[f"best_{s}_pct"],
            "not_best_pct": 100 - p[f"best_{s}_pct"],
            "not_best_mean_gap_pct": p[f"not_best_{s}_mean_gap_pct"],
        }
        for s, metric in (("max", "MaxCost"), ("total", "TotalCost"))
        for p in per
    ]
    f40 = [
        {
            "optimizer": p["optimizer"],
            "metric": metric,
            "quality_mean_pct": p[f"quality_{s}_mean_pct"],
            "quality_std_pct": p[f"quality_{s}_std_pct"],
            "exact_gap_mean_pct": p[f"exact_gap_{s}_mean_pct"],
        }
        for s, metric in (("max", "MaxCost"), ("total", "TotalCost"))
        for p in per
    ]
    t10 = [
        {
            "optimizer": p["optimizer"],
            "runs": p["configs"],
            "mean_s": p["runtime_mean_s"],
            "std_s": p["runtime_std_s"],
            "min_s": p["runtime_min_s"],
            "max_s": p["runtime_max_s"],
        }
        for p in per
    ]
    for key, rows in (("table9_best", t9), ("fig40_quality", f40), ("table10_runtime", t10)):
        files[key] = out / f"{key}.csv"
        pd.DataFrame(rows).to_csv(files[key], index=False)
    ps = pareto_sim.summary(df)
    if len(ps):
        files["pareto_summary"] = out / "pareto_summary.csv"
        ps.to_csv(files["pareto_summary"], index=False)
    files["config"] = out / "config.json"
    files["config"].write_text(json.dumps(config.model_dump(mode="json", warnings=False), indent=1))
    return files
