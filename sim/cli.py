"""The ``weaveplace`` command line (typer + rich).

User mistakes end with one clear message and exit code 2, never a traceback.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Column, Table

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Place and run shared sliding-window aggregate queries.",
)
bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks (figures go to BENCHMARKS.md).")
app.add_typer(bench_app, name="bench")
data_app = typer.Typer(no_args_is_help=True, help="DEBS data files: convert text to Parquet.")
app.add_typer(data_app, name="data")
console = Console()


class UserError(Exception):
    """A mistake in the command's input: reported without a traceback, exit code 2."""


def _progress() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )


def _run_single_node(name: str, queries, model, progress_cb=None):
    from placement.weaveshare import run_single_node

    return run_single_node(name, queries, model, progress_cb)


@app.command()
def plan(
    qnum: int = typer.Option(100, help="Number of queries (Qnum)."),
    smax: int = typer.Option(100, help="Largest slide (Smax)."),
    rate: float = typer.Option(1.0, help="Input rate lambda (tuples per time unit)."),
    zskew: float = typer.Option(0.5, help="Zipf skew; larger favours larger slides."),
    omax: float = typer.Option(10.0, help="Largest overlap factor (range = factor x slide)."),
    gen: str = typer.Option("nrm", help="Slide set: nrm, div (primes) or factors (of Smax)."),
    seed: int = typer.Option(0, help="Random seed."),
    optimizer: str = typer.Option(
        "weaveshare",
        help="A single-node optimizer: weaveshare "
        "(default), insert_then_weave, no_share or shared.",
    ),
    ie: str = typer.Option("panes", help="IE technique for the cost model."),
    engine: str = typer.Option("fast", help="Edge engine: fast, f1 or bitset."),
    slicing: str = typer.Option(
        "pairs", help="pairs or cutty: the slicing plans are priced (and later run) with."
    ),
    out: Path = typer.Option(Path("out/plan.json"), help="Where to write the plan JSON."),
):
    """Generate a workload and build a single-node sharing plan."""
    from placement.plan import single_node_plan
    from placement.trees import CostModel
    from placement.weaveshare import SINGLE_NODE_OPTIMIZERS
    from sim.workload import WorkloadSpec, generate

    if optimizer not in SINGLE_NODE_OPTIMIZERS:
        raise UserError(
            f"--optimizer: unknown optimizer {optimizer!r}; allowed: "
            f"{', '.join(SINGLE_NODE_OPTIMIZERS)}"
        )
    try:
        spec = WorkloadSpec(qnum, smax, rate, zskew, omax, gen, seed)
        queries = generate(spec)
        model = CostModel(ie, rate, engine, slicing)
    except ValueError as exc:
        raise UserError(str(exc)) from exc
    from sim.compile_cache import warm_placement

    compile_s = warm_placement()  # one-off numba compile/cache load, reported apart
    start = time.perf_counter()
    with _progress() as bar:
        task = bar.add_task(optimizer, total=len(queries))
        trees = _run_single_node(optimizer, queries, model, lambda k: bar.advance(task, k))
    seconds = time.perf_counter() - start
    p = single_node_plan(optimizer, trees, model, {spec.stream: rate})
    path = p.write(out)
    console.print(
        f"{optimizer}: {len(trees)} trees for {len(queries)} queries, "
        f"TotalCost {p.total_cost:.6g}, {seconds:.2f} s (+ {compile_s:.2f} s "
        f"numba compile/cache load, one-off) -> {path}",
        soft_wrap=True,
    )


@app.command()
def warmup():
    """Compile every numba kernel a plan or a run can use into the cache (NUMBA_CACHE_DIR,
    default .cache/numba); `make` runs it once, so no reported time includes compiling."""
    from sim.compile_cache import ensure_cache_dir, executor_cases, warm_all

    cache = ensure_cache_dir()
    start = time.perf_counter()
    with _progress() as bar:
        task = bar.add_task("compiling kernels", total=1 + len(executor_cases()))
        parts = warm_all(lambda label: (bar.update(task, description=label), bar.advance(task)))
    console.print(
        f"kernels compiled/loaded in {time.perf_counter() - start:.1f} s "
        f"(placement {parts['placement_s']:.1f} s, executors "
        f"{parts['executors_s']:.1f} s) -> {cache or 'numba default cache'}",
        soft_wrap=True,
    )


@app.command("verify-plan")
def verify_plan_cmd(path: Path):
    """Recompute every cost of a plan JSON from its queries and report differences (a front
    file, a JSON list of plans such as ``c0000_WG_PF_front.json``: every plan of it)."""
    from placement.plan import PlanError, verify_plan

    if not path.exists():
        raise UserError(f"plan file not found: {path}")
    try:
        data = json.loads(path.read_text())
        plans = data if isinstance(data, list) else [data]
        problems = [
            f"plan {i}: {p}" if isinstance(data, list) else p
            for i, d in enumerate(plans)
            for p in verify_plan(d)
        ]
    except (
        json.JSONDecodeError,
        KeyError,
        PlanError,
        ValueError,
        TypeError,
        AttributeError,
    ) as exc:
        raise UserError(f"{path}: not a valid weaveplace plan: {exc}") from exc
    if problems:
        for p in problems:
            console.print(f"[red]{p}")
        raise typer.Exit(1)
    console.print(f"[green]{path}: every cost recomputes from its queries")


@app.command()
def shed(path: Path = typer.Argument(..., help="A plan JSON whose nodes have capacities.")):
    """Feasibility of a plan on its node capacities, and source drop fractions when overloaded."""
    from placement.plan import PlanError, load_plan
    from placement.shedding import InfeasibleEvenWhenShedding, overloads, shed_load

    if not path.exists():
        raise UserError(f"plan file not found: {path}")
    try:
        plan = load_plan(path)
    except (json.JSONDecodeError, KeyError, PlanError, ValueError) as exc:
        raise UserError(f"{path}: not a valid weaveplace plan: {exc}") from exc
    over = overloads(plan)
    if not over:
        console.print("[green]feasible[/]: every node within its capacity (or unbounded)")
        return
    for o in over:
        console.print(
            f"[red]{o.node}[/]: cost {o.cost:.6g} > capacity {o.capacity:.6g} (+{o.excess:.6g})"
        )
    try:
        res = shed_load(plan)
    except InfeasibleEvenWhenShedding as exc:
        console.print(f"[red]infeasible:[/] {exc}")
        raise typer.Exit(1) from exc
    table = Table("stream", "keep", "drop")
    for s, x in sorted(res.keep.items()):
        table.add_row(s, f"{x:.4%}", f"{1 - x:.4%}")
    console.print(table)
    console.print(f"kept {res.kept_value / res.full_value:.2%} of (tuple x query) work")


@bench_app.command("f1")
def bench_f1(
    experiments: str = typer.Option("1,2,3,4,5", help="Comma-separated experiment numbers."),
    engines: str = typer.Option(
        "fast,f1,f1/paper,bitset/paper",
        help="Comma-separated configurations: fast, f1, bitset (our lazy WeaveShare) or "
        "f1/paper, bitset/paper (the paper's eager cost lookup table).",
    ),
    cap: float = typer.Option(60.0, help="Time cap (s) per plan for BitSet and F1."),
    fast_cap: float = typer.Option(1800.0, help="Time cap (s) per plan for fast."),
    mem_gb: float = typer.Option(8.0, help="Memory cap (GiB) per plan run."),
    out: Path = typer.Option(Path("out/bench"), help="Output directory."),
    quick: bool = typer.Option(False, help="Only the first two points of each experiment."),
):
    """Reproduce the dissertation's F1 experiments (Table 5) with every edge engine."""
    from sim.bench import f1 as b

    try:
        exps = [int(x) for x in experiments.split(",") if x.strip()]
        bad = [e for e in exps if e not in b.EXPERIMENTS]
        engs = [e.strip() for e in engines.split(",") if e.strip()]
        bad_eng = [e for e in engs if e not in b.CONFIGS]
    except ValueError as exc:
        raise UserError(f"--experiments: {exc}") from exc
    if bad:
        raise UserError(f"--experiments: unknown {bad}; allowed: 1..5")
    if bad_eng:
        raise UserError(f"--engines: unknown {bad_eng}; allowed: {', '.join(b.CONFIGS)}")
    values = {e: b.EXPERIMENTS[e][1][:2] for e in exps} if quick else None
    total = sum(len((values or {}).get(e, b.EXPERIMENTS[e][1])) for e in exps) * len(engs)
    results = []
    with _progress() as bar:
        task = bar.add_task("bench f1", total=total)

        def done(r):
            results.append(r)
            bar.console.print(
                f"exp {r.experiment} {r.param}={r.value:g} {r.engine}: {r.status}"
                + (f" {r.seconds:.3f}s {r.peak_mb:.0f}MB" if r.seconds else "")
            )
            bar.advance(task)

        b.run(exps, engs, cap, fast_cap, mem_gb, on_result=done, values=values)
    path = b.save(results, out)
    table = Table("exp", "param", "value", "engine", "status", "seconds", "peak MB", "trees")
    for r in results:
        table.add_row(
            str(r.experiment),
            r.param,
            f"{r.value:g}",
            r.engine,
            r.status,
            f"{r.seconds:.3f}" if r.seconds is not None else "-",
            f"{r.peak_mb:.0f}" if r.peak_mb is not None else "-",
            str(r.trees) if r.trees is not None else "-",
        )
    console.print(table)
    mismatches = b.check_identical(results)
    console.print(
        "identical plans wherever engines finish: "
        + ("[green]yes" if not mismatches else f"[red]NO: {mismatches}")
    )
    for base in [e for e in engs if e != "fast"]:
        for exp, s in b.speedups_over(results, base).items():
            if s.get("f1_largest") is None:
                console.print(f"exp {exp}: {base} finished no point")
            else:
                sp = s.get("speedup")
                console.print(
                    f"exp {exp}: largest {base} point {s['f1_largest']:g}, "
                    "fast speed-up " + (f"{sp:.1f}x" if sp else "n/a")
                )
    console.print(f"results: {path}")
    if mismatches:
        raise typer.Exit(1)


@bench_app.command("engines")
def bench_engines(
    budget: float = typer.Option(20.0, help="Time budget (s) per engine call."),
    out: Path = typer.Option(Path("out/bench"), help="Output directory."),
):
    """Engine-only: the edge rate of one large tree with each engine (cold caches)."""
    from sim.bench import f1 as b

    table = Table("Smax", "queries", "classes", "fast (s)", "f1 (s)", "bitset (s)", "agree")
    fmt = lambda v: "DNF" if v is None else f"{v:.4f}"  # noqa: E731
    rows = b.engine_micro(
        budget_s=budget,
        on_row=lambda r: console.print(
            f"Smax {r['smax']} n={r['queries']}: fast {fmt(r['fast'])} f1 {fmt(r['f1'])} "
            f"bitset {fmt(r['bitset'])}"
        ),
    )
    for r in rows:
        table.add_row(
            str(r["smax"]),
            str(r["queries"]),
            str(r["classes"]),
            fmt(r["fast"]),
            fmt(r["f1"]),
            fmt(r["bitset"]),
            "yes" if r["agree"] else "NO",
        )
    console.print(table)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_engines.json").write_text(json.dumps(rows, indent=1))
    if not all(r["agree"] for r in rows):
        raise typer.Exit(1)


@bench_app.command("exact-gap")
def bench_exact_gap(
    instances: int = typer.Option(200, min=1, help="Small random instances."),
    seed: int = typer.Option(0, min=0, help="First workload seed."),
    out: Path = typer.Option(Path("out/bench"), help="Output directory."),
):
    """WG_LS vs the exact optimum of its own objective (and of TotalCost / MaxCost alone)."""
    import pandas as pd

    from sim.bench import exact_gap as b

    with _progress() as bar:
        task = bar.add_task("exact gap", total=instances)
        rows = b.run(instances, seed, on_row=lambda r: bar.advance(task))
    df = pd.DataFrame(rows)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "bench_exact_gap.csv", index=False)
    table = Table(
        "instances",
        "WG_LS objective gap % (mean)",
        "objective optimal %",
        "both-as-good plan exists %",
        "WG_LS finds it %",
        "gap TotalCost % (mean)",
        "gap MaxCost % (mean)",
        "WG_LS s (mean)",
    )
    table.add_row(
        str(len(df)),
        f"{df.objective_gap_pct.mean():.3f}",
        f"{100 * df.objective_optimal.mean():.1f}",
        f"{100 * df.both_exists.mean():.1f}",
        f"{100 * (df.both_found.sum() / max(1, df.both_exists.sum())):.1f}",
        f"{df.gap_total_pct.mean():.2f}",
        f"{df.gap_max_pct.mean():.2f}",
        f"{df.wgls_s.mean():.3f}",
    )
    console.print(table)
    console.print(f"results: {out / 'bench_exact_gap.csv'}")


@bench_app.command("exact")
def bench_exact(
    qnums: str = typer.Option("8,12,16,20,24", help="Comma-separated Q_num values."),
    nodes: str = typer.Option("2,4,8", help="Comma-separated node counts."),
    seeds: str = typer.Option("0", help="Comma-separated workload seeds."),
    rate: float = typer.Option(20.0, min=1e-9, help="lambda of the generator."),
    smax: int = typer.Option(20, min=1, help="S_max of the generator."),
    omax: float = typer.Option(5.0, min=1.0, help="O_max of the generator."),
    time_limit: float = typer.Option(60.0, min=0.1, help="Seconds per instance (both optima)."),
    out: Path = typer.Option(Path("out/bench"), help="Output directory."),
    front: bool = typer.Option(False, help="Also the exact Pareto front (same time limit)."),
):
    """The exact yardstick's reach: time to prove min TotalCost / min MaxCost (and with
    --front the Pareto front), share proven."""
    import pandas as pd

    from sim.bench import exact as b

    def ints(name: str, text: str) -> list[int]:
        try:
            vals = [int(x) for x in text.split(",") if x.strip()]
        except ValueError:
            vals = []
        if not vals or min(vals) < 1:
            console.print(f"error: --{name}: expected comma-separated integers >= 1, got {text!r}")
            raise typer.Exit(2)
        return vals

    qs, ns = ints("qnums", qnums), ints("nodes", nodes)
    sd = [int(x) for x in seeds.split(",") if x.strip().isdigit()]
    if not sd or len(sd) != len([x for x in seeds.split(",") if x.strip()]):
        console.print(f"error: --seeds: expected comma-separated integers >= 0, got {seeds!r}")
        raise typer.Exit(2)
    if max(qs) > 60:
        console.print(f"error: --qnums: at most 60 queries (exact search), got {max(qs)}")
        raise typer.Exit(2)
    out.mkdir(parents=True, exist_ok=True)
    done: list[dict] = []

    def row_done(r: dict) -> None:  # the CSV grows row by row: a long run is never all lost
        done.append(r)
        pd.DataFrame(done).to_csv(out / "bench_exact.csv", index=False)
        bar.advance(task)

    with _progress() as bar:
        task = bar.add_task("exact", total=len(qs) * len(ns) * len(sd))
        rows = b.run(qs, ns, sd, rate, smax, omax, "nrm", time_limit, on_row=row_done, front=front)
    df = pd.DataFrame(rows)
    table = Table(
        "queries",
        "nodes",
        "method",
        "proven",
        "time s",
        "to proof T s",
        "to proof M s",
        "gap T %",
        "gap M %",
        "heur. gap M %",
        "node sets",
        *(["front"] if front else []),
    )
    pct = lambda v: "inf" if v == float("inf") else f"{100 * v:.2f}"  # noqa: E731
    for r in rows:
        table.add_row(
            str(r["qnum"]),
            str(r["nodes"]),
            r["method"],
            "+".join(x for x, ok in (("T", r["proven_total"]), ("M", r["proven_max"])) if ok)
            or "–",
            f"{r['time_s']:.1f}",
            f"{r['time_total_s']:.1f}" if r["proven_total"] else "–",
            f"{r['time_max_s']:.1f}" if r["proven_max"] else "–",
            pct(r["rel_gap_total"]),
            pct(r["rel_gap_max"]),
            f"{r['heuristic_gap_max_pct']:.2f}",
            "–" if r["node_sets"] is None else str(r["node_sets"]),
            *(
                [
                    f"{r['front_points']} pts, "
                    + (f"exact, {r['time_front_s']:.1f} s" if r["front_exact"] else "not proven")
                ]
                if front
                else []
            ),
        )
    console.print(table)
    g = df.groupby(["qnum", "nodes"])["proven_both"].mean().mul(100).round(1)
    console.print(
        f"proven within {time_limit:g} s: {100 * df.proven_both.mean():.1f} % of "
        f"{len(df)} instances; per size: "
        + ", ".join(f"{q}x{n}: {v:g} %" for (q, n), v in g.items())
    )
    console.print(f"results: {out / 'bench_exact.csv'}")


@bench_app.command("pareto")
def bench_pareto(
    instances: int = typer.Option(
        72, min=0, help="Mixed-grid instances (two streams, prime slides, r < s)."
    ),
    small: int = typer.Option(48, min=0, help="Small instances vs the exact front."),
    runtime_points: int = typer.Option(
        4, min=0, max=16, help="Table 8 points (500 queries, 32 nodes) timed."
    ),
    seed: int = typer.Option(0, min=0, help="First workload seed."),
    run: Path | None = typer.Option(
        None, help="Instead: summarise a `simulate` output directory with WG_PF."
    ),
    out: Path = typer.Option(Path("out/bench"), help="Output directory."),
):
    """WG_PF: weak dominance of every Table 7 optimizer and WG_LS on a mixed grid, hypervolume
    against the exact front on small instances, runtime against WG_LS (sim.bench.pareto)."""
    import itertools

    import pandas as pd

    from sim.bench import pareto as b

    if run is not None:
        if not (run / "results.csv").exists():
            raise UserError(f"--run {run}: no results.csv (a `weaveplace simulate` output)")
        try:
            summ = b.run_summary(run)
        except (KeyError, IndexError, AttributeError) as exc:
            raise UserError(f"--run {run}: not a simulation with WG_PF ({exc})") from exc
        t = Table("measure", "value")
        for k, v in summ.items():
            t.add_row(k, f"{v:.6g}" if isinstance(v, float) else str(v))
        console.print(t)
        return

    out.mkdir(parents=True, exist_ok=True)
    table = Table("measure", "instances", "value")
    with _progress() as bar:
        if instances:
            task = bar.add_task("pareto: mixed grid", total=instances)
            df = pd.DataFrame(
                b.dominance(b.mixed_instances(instances, seed), on_row=lambda r: bar.advance(task))
            )
            df.to_csv(out / "bench_pareto_dominance.csv", index=False)
            table.add_row(
                "front weakly dominates each optimizer's plan (%)",
                str(instances),
                f"{100 * df.weakly_dominated.mean():.2f}",
            )
            for name, g in df.groupby("optimizer", sort=False):
                if not g.weakly_dominated.all():
                    table.add_row(
                        f"  {name} (%)", str(len(g)), f"{100 * g.weakly_dominated.mean():.2f}"
                    )
        if small:
            task = bar.add_task("pareto: vs exact", total=small)
            df = pd.DataFrame(
                b.hv_vs_exact(
                    b.mixed_instances(small, seed, sizes=(8, 10)),
                    on_row=lambda r: bar.advance(task),
                )
            )
            df.to_csv(out / "bench_pareto_hv.csv", index=False)
            table.add_row(
                "hypervolume / exact front (mean)", str(small), f"{df.hv_ratio.mean():.5f}"
            )
            table.add_row("hypervolume / exact front (min)", str(small), f"{df.hv_ratio.min():.5f}")
            table.add_row(
                "instances within 1 % (%)", str(small), f"{100 * (df.hv_ratio >= 0.99).mean():.1f}"
            )
        if runtime_points:
            pts = [
                dict(qnum=500, smax=50, rate=rate, zskew=1.0, omax=100.0, gen=gen, seed=0)
                for gen, rate in itertools.product(("nrm", "div"), (10.0, 100.0))
            ]
            pts += [
                dict(qnum=500, smax=50, rate=rate, zskew=0.0, omax=omax, gen=gen, seed=0)
                for gen, rate, omax in itertools.product(
                    ("nrm", "div"), (10.0, 100.0), (10.0, 100.0)
                )
            ]
            task = bar.add_task("pareto: runtime", total=runtime_points)
            df = pd.DataFrame(
                b.runtime(pts[:runtime_points], 32, on_row=lambda r: bar.advance(task))
            )
            df.to_csv(out / "bench_pareto_runtime.csv", index=False)
            table.add_row("WG_PF / WG_LS time (max)", str(len(df)), f"{df.ratio.max():.2f}")
            table.add_row("WG_LS s (mean)", str(len(df)), f"{df.wg_ls_s.mean():.2f}")
            table.add_row("WG_PF s (mean)", str(len(df)), f"{df.wg_pf_s.mean():.2f}")
    console.print(table)
    console.print(f"results: {out}/bench_pareto_*.csv")


@bench_app.command("executors")
def bench_executors(
    aggregates: str = typer.Option("sum,max", help="Comma-separated: sum, max."),
    max_log2_window: int = typer.Option(22, help="Windows 1, 2, 4, ... 2^this (tuple-based)."),
    modes: str = typer.Option("single,max-multi", help="single and/or max-multi."),
    cell_seconds: float = typer.Option(0.5, help="Time budget per (technique, window) cell."),
    out: Path = typer.Option(Path("out/bench"), help="Output directory."),
):
    """Final-aggregation throughput, latency and memory (dissertation Figures 23-29)."""
    from sim.bench.executors import DEFAULT_TECHNIQUES, run_executor_bench

    aggs = [a.strip() for a in aggregates.split(",") if a.strip()]
    bad = [a for a in aggs if a not in ("sum", "max")]
    if bad:
        raise UserError(f"--aggregates: unknown {bad}; allowed: sum, max")
    mode_list = [m.strip() for m in modes.split(",") if m.strip()]
    if any(m not in ("single", "max-multi") for m in mode_list):
        raise UserError(f"--modes: {mode_list}; allowed: single, max-multi")
    if not 0 <= max_log2_window <= 26:
        raise UserError(f"--max-log2-window: {max_log2_window}; allowed: 0..26")
    windows = [1 << k for k in range(max_log2_window + 1)]
    with _progress() as bar:
        task = bar.add_task("bench executors", total=None)

        def seen(row):
            bar.advance(task)
            cpu = row.get("throughput_cpu")
            bar.console.print(
                f"{row['aggregate']} {row['mode']} w={row['window']} "
                f"{row['technique']}: {row['throughput'] / 1e6:.2f} M slides/s"
                + (f" (cpu time: {cpu / 1e6:.2f})" if cpu else "")
            )

        rows = run_executor_bench(
            DEFAULT_TECHNIQUES,
            aggs,
            windows,
            tuple(mode_list),
            cell_seconds=cell_seconds,
            progress=seen,
        )
    out.mkdir(parents=True, exist_ok=True)
    path = out / "bench_executors.json"
    path.write_text(json.dumps(rows, indent=1, default=float))
    console.print(f"results: {path}")


@bench_app.command("slicing")
def bench_slicing(
    techniques: str = typer.Option(
        "slickdeque,panes,flatfat,flatfit", help="Comma-separated techniques."
    ),
    queries: int = typer.Option(20, help="Queries in the tree (sum, r mod s != 0)."),
    tuples: int = typer.Option(1_000_000, help="Tuples (one per time unit)."),
    repeats: int = typer.Option(3, help="Timed runs per slicing (best is kept)."),
    out: Path = typer.Option(Path("out/bench"), help="Output directory."),
):
    """Pairs vs Cutty slicing side by side: tuples/s, slices, operations."""
    from executors.tree import ALL_TECHNIQUES
    from sim.bench.executors import run_slicing_bench, slicing_workload

    techs = [t.strip() for t in techniques.split(",") if t.strip()]
    bad = [t for t in techs if t not in ALL_TECHNIQUES]
    if bad or not techs:
        raise UserError(
            f"--techniques: unknown {bad or techs}; allowed: {', '.join(ALL_TECHNIQUES)}"
        )
    if queries < 1 or tuples < 10_000 or repeats < 1:
        raise UserError("--queries >= 1, --tuples >= 10000 and --repeats >= 1 are required")
    rows = run_slicing_bench(
        slicing_workload(queries), tuple(techs), n_tuples=tuples, repeats=repeats
    )
    table = Table("technique", "slicing", "M tuples/s", "slices", "ops/slice", "ops/tuple")
    for r in rows:
        table.add_row(
            r["technique"],
            r["slicing"],
            f"{r['throughput'] / 1e6:.3f}",
            str(r["slices"]),
            f"{r['ops_per_slice']:.2f}",
            f"{r['ops_per_tuple']:.2f}",
        )
    console.print(table)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "bench_slicing.json"
    path.write_text(json.dumps(rows, indent=1, default=float))
    console.print(f"results: {path}")


@bench_app.command("omega")
def bench_omega(
    techniques: str = typer.Option(
        ",".join(("panes", "flatfat", "flatfit", "slickdeque_inv", "slickdeque_noninv")),
        help="Comma-separated IE techniques.",
    ),
    qnum: int = typer.Option(100, help="Workload: number of queries (Table 13: 100)."),
    smax: int = typer.Option(1000, help="Workload: max slide (Table 13: 1000)."),
    omax: float = typer.Option(10_000, help="Workload: max overlap factor (Table 13: 10,000)."),
    rate: float = typer.Option(1.0, help="Workload: lambda (Table 13: 1)."),
    zskew: float = typer.Option(0.0, help="Workload: Zipf skew (Table 13: 0)."),
    gen: str = typer.Option("factors", help="Workload: nrm, div or factors (chapter 7)."),
    seed: int = typer.Option(0, help="Workload seed."),
    max_ops: float = typer.Option(2e8, help="Cap of counted Panes operations per tree."),
    slicing: str = typer.Option(
        "pairs", help="pairs or cutty: the slicing the trees are priced and run with."
    ),
    out: Path = typer.Option(Path("out/bench"), help="Output directory."),
):
    """Model Omega vs measured final-aggregation operations per edge on planned trees."""
    from dataclasses import asdict

    from sim.bench import omega as oc
    from sim.workload import WorkloadSpec

    techs = [t.strip() for t in techniques.split(",") if t.strip()]
    bad = [t for t in techs if t not in oc.TECHNIQUES]
    if bad or not techs:
        raise UserError(
            f"--techniques: unknown {bad or techs}; allowed: {', '.join(oc.TECHNIQUES)}"
        )
    if slicing not in ("pairs", "cutty"):
        raise UserError(f"--slicing: unknown {slicing!r}; allowed: pairs, cutty")
    try:
        spec = WorkloadSpec(
            qnum=qnum, smax=smax, rate=rate, zskew=zskew, omax=omax, gen=gen, seed=seed
        )
    except ValueError as exc:
        raise UserError(f"workload: {exc}") from None
    t0 = time.perf_counter()
    res = oc.run_omega_check(
        spec,
        techs,
        progress=lambda r: isinstance(r, str) and console.print(r, markup=False),
        max_ops=max_ops,
        slicing=slicing,
    )
    rows = oc.summarize(res)
    console.print(oc.format_summary(rows), markup=False)
    other = None
    if "slickdeque_inv" in techs:
        other = oc.slickdeque_inv_on_plan(spec, "panes", slicing)
        old = (
            ""
            if slicing != "pairs"
            else (
                f", old formula {other['old_formula']:.6g} ({other['old_diff_pct']:+.2f}%, wrong "
                f"on {other['trees_old_wrong']} trees)"
            )
        )
        console.print(
            f"SlickDeque Inv on the Panes plan's {other['trees']} trees: model "
            f"{other['model']:.6g}, measured {other['measured']:.6g}{old}",
            markup=False,
        )
    console.print(f"{time.perf_counter() - t0:.1f} s")
    out.mkdir(parents=True, exist_ok=True)
    path = out / ("bench_omega.json" if slicing == "pairs" else f"bench_omega_{slicing}.json")
    path.write_text(
        json.dumps(
            {
                "workload": asdict(spec),
                "slicing": slicing,
                "summary": rows,
                "slickdeque_inv_on_panes_plan": other,
                "trees": {t: [asdict(x) for x in v] for t, v in res.items()},
            },
            indent=1,
            default=float,
        )
    )
    console.print(f"results: {path}")


@bench_app.command("count")
def bench_count(
    qnum: int = typer.Option(40, help="Queries (every other one a count window)."),
    smax: int = typer.Option(50, help="Max slide (ms or tuples)."),
    omax: float = typer.Option(20.0, help="Max overlap factor (range / slide)."),
    rate: float = typer.Option(0.5, help="Tuples per ms on each of the two streams."),
    tuples: int = typer.Option(1_000_000, help="Tuples per stream."),
    nodes: int = typer.Option(2, help="Plan nodes (Ray actors)."),
    live: bool = typer.Option(True, help="Run on Ray actors (--no-live: NodeCore in process)."),
    out: Path = typer.Option(Path("out/bench"), help="Output directory."),
):
    """Count-window plans: planned vs measured edges and operations per ms (issue 16)."""
    from sim.bench.count import format_count_check, run_count_check

    if qnum < 1 or smax < 1 or omax < 1 or not rate > 0 or tuples < 10_000 or nodes < 1:
        raise UserError(
            "--qnum, --smax, --nodes >= 1, --omax >= 1, --rate > 0 and "
            "--tuples >= 10000 are required"
        )
    res = run_count_check(
        qnum,
        smax,
        omax,
        rate,
        tuples,
        nodes,
        live=live,
        log=lambda m: console.print(m, markup=False),
    )
    console.print(format_count_check(res), markup=False)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "bench_count.json"
    path.write_text(json.dumps(res, indent=1, default=float))
    console.print(f"results: {path}")


@bench_app.command("e2e")
def bench_e2e(
    queries: str = typer.Option("1,10,100,1000", help="Comma-separated query counts."),
    modes: str = typer.Option("raw,sliced", help="raw and/or sliced."),
    duration_s: float = typer.Option(2000, help="DEBS-style data: seconds of events."),
    rate_hz: float = typer.Option(100, help="DEBS-style data: events per second."),
    nodes: int = typer.Option(2, help="Plan nodes (Ray actors)."),
    spark_sql: bool = typer.Option(True, help="Also time Spark SQL's window() jobs."),
    check_max_queries: int = typer.Option(100, help="Check all answers up to this many queries."),
    check_sample: int = typer.Option(30, help="Above that, check this many random queries."),
    repeat: int = typer.Option(
        2,
        help="Runs per mode; the best wall time counts (Spark SQL: "
        "only while a run takes under 60 s).",
    ),
    out: Path = typer.Option(Path("out/bench"), help="Output directory."),
):
    """End to end (Spark -> Ray actors) tuples/s: raw vs sliced feed vs Spark SQL windows."""
    from sim.bench.e2e import format_table, run_e2e_bench

    try:
        qlist = [int(x) for x in queries.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--queries: {queries!r}; expected comma-separated integers") from None
    mode_list = [m.strip() for m in modes.split(",") if m.strip()]
    if not mode_list or any(m not in ("raw", "sliced") for m in mode_list):
        raise UserError(f"--modes: {mode_list}; allowed: raw, sliced")
    if not qlist or min(qlist) < 1:
        raise UserError(f"--queries: {qlist}; allowed: integers >= 1")
    rows = run_e2e_bench(
        qlist,
        tuple(mode_list),
        duration_s,
        rate_hz,
        nodes=nodes,
        spark_sql=spark_sql,
        check_max_queries=check_max_queries,
        check_sample=check_sample,
        repeat=max(1, repeat),
        log=lambda s: console.print(s, soft_wrap=True, markup=False),
    )
    console.print(format_table(rows), markup=False)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "bench_e2e.json"
    path.write_text(json.dumps(rows, indent=1, default=float))
    console.print(f"results: {path}")
    if any(
        r.get("equal_to_spark_sql") is False or r.get("raw_equals_sliced") is False for r in rows
    ):
        raise typer.Exit(1)


@bench_app.command("text")
def bench_text(
    rows: int = typer.Option(1_000_000, help="Generated DEBS events (100 Hz)."),
    queries: int = typer.Option(100, help="Queries (raw mode)."),
    nodes: int = typer.Option(2, help="Plan nodes (Ray actors)."),
    repeat: int = typer.Option(2, help="Runs per input, alternating; the best counts."),
    out: Path = typer.Option(Path("out/bench"), help="Output directory."),
):
    """Live feed rows/s over DEBS text vs the same data as Parquet (raw mode)."""
    from sim.bench.text import format_table, run_text_bench

    if rows < 1000 or queries < 1 or nodes < 1 or repeat < 1:
        raise UserError(
            "--rows >= 1000, --queries >= 1, --nodes >= 1 and --repeat >= 1 are required"
        )
    res = run_text_bench(
        rows,
        queries,
        nodes=nodes,
        repeat=repeat,
        log=lambda s: console.print(s, soft_wrap=True, markup=False),
    )
    console.print(format_table(res), markup=False)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "bench_text.json"
    path.write_text(json.dumps(res, indent=1, default=float))
    console.print(f"results: {path}")
    if not all(r["answers_equal"] for r in res):
        raise typer.Exit(1)


@bench_app.command("serve")
def bench_serve(
    queries: int = typer.Option(300, min=1, help="Queries added, one at a time."),
    add_every: float = typer.Option(1.0, help="Seconds between two add-queries."),
    speed: float = typer.Option(10.0, help="Files dropped at this many x real time."),
    resume: bool = typer.Option(True, help="Also time serve --resume to the first answer."),
    out: Path = typer.Option(Path("out/bench_serve"), help="Output directory."),
):
    """A deployment under query churn: answer latency, plan cost vs fresh, control and resume
    latency, memory (``sim/bench/serve.py``; run it under the bench lock)."""
    from sim.bench.serve import run_serve_bench

    if not add_every > 0 or not speed > 0:
        raise UserError("--add-every and --speed: numbers > 0")
    res = run_serve_bench(
        out,
        queries,
        add_every,
        speed,
        resume=resume,
        say=lambda s: console.print(s, soft_wrap=True, markup=False),
    )
    console.print(json.dumps(res, indent=1), markup=False)
    console.print(f"results: {out / 'bench_serve.json'}")


@app.command("report")
def report(
    run_dir: Path = typer.Argument(..., help="A simulate or run output directory."),
    out: Path | None = typer.Option(None, help="Report directory (default RUN_DIR/report)."),
):
    """Self-contained HTML report (plots embedded) and PNGs for a simulation or live run."""
    from rich.markup import escape

    path = _build_report(run_dir, out)
    console.print(f"report: {escape(str(path))}", soft_wrap=True)


def _build_report(run_dir: Path, out: Path | None = None) -> Path:
    from sim.report import ReportError, build_report, print_summary

    if not run_dir.is_dir():
        raise UserError(f"run directory not found: {run_dir}")
    try:
        path = build_report(run_dir, out)
        print_summary(run_dir, console)
    except ReportError as exc:
        raise UserError(str(exc)) from exc
    return path


CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"


@app.command()
def quickstart(out: Path = typer.Option(Path("out/quickstart"), help="Output directory.")):
    """The tour `make run` gives: a small simulation across optimizers, a short live run on an
    embedded Ray with local Spark over generated DEBS-style data, and the report."""
    from rich.markup import escape

    for name in ("quickstart.yaml", "live_quickstart.yaml"):
        if not (CONFIG_DIR / name).is_file():
            raise UserError(f"missing {CONFIG_DIR / name}: run from a checkout of weaveplace")
    start = time.perf_counter()
    console.rule("1/2 simulation: configs/quickstart.yaml")
    # the commands' own functions, every option given (their defaults are typer objects)
    sim_report = simulate(CONFIG_DIR / "quickstart.yaml", out / "simulation", workers=None)
    console.rule("2/2 live run: configs/live_quickstart.yaml")
    live_report = run(
        CONFIG_DIR / "live_quickstart.yaml",
        out / "live",
        until_idle=None,
        max_files=None,
        timeout=None,
    )
    console.print(f"[bold green]quickstart done[/] in {time.perf_counter() - start:.0f} s")
    console.print(
        f"reports: {escape(str(sim_report))}\n         {escape(str(live_report))}", soft_wrap=True
    )


def text_summary_line(text: dict) -> str:
    """One line on a text input of a live run (``metrics["text"]``)."""
    from rich.markup import escape

    line = (
        f"text input: {text['lines']:,} lines in {text['ranges']} Spark ranges, "
        f"{text['rows_read']:,} rows, {text['rows_rejected']:,} rejected"
    )
    if text["rows_rejected"]:
        line += f" ({text['rejects']})"
    if text.get("glued_lines"):
        line += f", {text['glued_lines']:,} glued lines split"
    if text.get("extra_column_lines"):
        line += f", {text['extra_column_lines']:,} extra columns dropped"
    return escape(line)


def _config_error_exit(exc: Exception):
    """Print a ConfigError as one unwrapped line on stderr and exit with code 2.

    Why ``SystemExit`` and not ``typer.Exit(2)``: ``main`` runs the app with
    ``standalone_mode=False``, where click returns a ``typer.Exit`` code instead of exiting, so
    the code would be lost; ``SystemExit`` also gives exit code 2 under typer's CliRunner.
    """
    from rich.markup import escape

    Console(stderr=True).print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
    raise SystemExit(2)


def _load_config_or_exit(config: Path):
    from sim.config import ConfigError, load_config

    try:
        return load_config(config)
    except ConfigError as exc:
        _config_error_exit(exc)


@app.command()
def validate(config: Path = typer.Argument(..., help="Run configuration (YAML).")):
    """Check a run configuration: prints OK and a summary, or the first problem (exit 2)."""
    from rich.markup import escape

    from sim.config import ConfigError

    cfg = _load_config_or_exit(config)
    try:  # the checks of the command that will run it (run.mode), before any work
        if cfg.run.mode == "live":
            from sim.live import check_live

            check_live(cfg)
        else:
            from sim.simulate import check_simulatable

            check_simulatable(cfg)
    except ConfigError as exc:
        _config_error_exit(exc)
    console.print(
        f"[green]OK[/green] {escape(str(config))}: {escape(cfg.summary())}", soft_wrap=True
    )


@app.command()
def run(
    config: Path = typer.Argument(..., help="Run configuration (YAML) with run.mode: live."),
    out: Path | None = typer.Option(None, help="Output directory (default: run.output_dir)."),
    until_idle: float | None = typer.Option(
        None,
        "--until-idle",
        metavar="SECONDS",
        help="data.directory: stop this long after the last file (overrides idle_timeout_s).",
    ),
    max_files: int | None = typer.Option(
        None, "--max-files", help="data.directory: stop after this many files."
    ),
    timeout: float | None = typer.Option(
        None,
        "--timeout",
        metavar="SECONDS",
        help="data.directory: stop after this many seconds of streaming.",
    ),
):
    """Live run: plan, deploy on Ray, feed DEBS-style data through Spark, write answers.

    With ``data.directory`` the run watches a directory (Spark Structured Streaming) and
    writes answers as files arrive, until its idle timeout / max files / timeout or Ctrl-C
    (which stops cleanly: the last windows are flushed and written; a second Ctrl-C aborts)."""
    from rich.markup import escape

    from cluster.deploy import DeploymentError
    from cluster.streaming import StreamError
    from sim.config import ConfigError
    from sim.live import check_live, drill_lines, live_run

    cfg = _load_config_or_exit(config)
    try:  # the same checks as `weaveplace validate` (sim.live.check_live)
        check_live(cfg, out)
    except ConfigError as exc:
        _config_error_exit(exc)
    limits = {
        "idle_timeout_s": ("--until-idle", until_idle),
        "max_files": ("--max-files", max_files),
        "timeout_s": ("--timeout", timeout),
    }
    for key, (flag, value) in limits.items():
        if value is None:
            continue
        if cfg.data.directory is None:
            raise UserError(
                f"{flag}: only for a watched directory (data.directory in the "
                f"config); {config} reads a file or generated data"
            )
        if not value > 0:
            raise UserError(f"{flag}: {value}; expected a number > 0")
        if key == "idle_timeout_s" and value <= cfg.data.directory.poll_s:
            raise UserError(
                f"{flag}: {value}; must exceed data.directory.poll_s "
                f"({cfg.data.directory.poll_s:g})"
            )
        cfg.data.directory = cfg.data.directory.model_copy(update={key: value})
    if cfg.data.directory is not None:  # a long one-line status instead of a bar
        bar = Progress(
            SpinnerColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}", table_column=Column(overflow="fold")),
            console=console,
            transient=True,
        )
    else:
        bar = _progress()
    with bar:
        task = bar.add_task("run", total=None)
        try:
            summary = live_run(cfg, out, progress=lambda stage: bar.update(task, description=stage))
        except ConfigError as exc:
            bar.stop()
            _config_error_exit(exc)
        except ConnectionError as exc:
            raise UserError(
                f"cluster.ray.address {cfg.cluster.ray.address!r}: cannot connect to Ray ({exc})"
            ) from exc
        except DeploymentError as exc:  # a plan or drill that cannot run, a failed recovery
            raise UserError(f"live run: {exc}") from exc
        except StreamError as exc:  # the watched directory cannot be streamed (Spark)
            bar.stop()
            Console(stderr=True).print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
            raise typer.Exit(1) from None
    table = Table("node", "tuples", "answers", "late", "busy s", "compile s", title="per node")
    for node_id, m in sorted((summary.metrics.get("nodes") or {}).items()):
        table.add_row(
            node_id,
            str(m.get("tuples", "-")),
            str(m.get("answers", "-")),
            str(m.get("late_tuples", "-")),
            f"{m.get('busy_s', 0.0):.2f}",
            f"{m.get('compile_s', 0.0):.2f}",
        )
    console.print(table)
    auth = (summary.metrics.get("startup") or {}).get("ray_auth")
    if auth:  # which token the Ray connection used (cluster.ray_runtime.attach_auth)
        console.print(f"Ray: {escape(auth)}", soft_wrap=True)
    for line in drill_lines(summary.metrics):
        console.print(escape(line), soft_wrap=True)
    console.print(
        f"{summary.optimizer}: {summary.queries} queries on {summary.nodes} nodes, "
        f"{summary.tuples} tuples -> {summary.answers} answers, {summary.late} late, "
        f"{summary.seconds:.1f} s; estimated TotalCost {summary.estimated_total_cost:.4g}"
        f", MaxCost {summary.estimated_max_cost:.4g}"
    )
    final = (
        ", plan_final.json"
        if summary.metrics.get("replacements") or summary.metrics.get("additions")
        else ""
    )
    stream = summary.metrics.get("stream")
    if stream:
        rej = (
            (
                f"; files rejected whole: {stream['files_rejected']}, bad lines rejected: "
                f"{stream['rows_rejected']} (see rejects/)"
            )
            if stream["files_rejected"] or stream["rows_rejected"]
            else ""
        )
        console.print(
            f"stream: {stream['files']} files in {stream['batches']} micro-batches "
            f"({summary.metrics.get('batches', 0)} feed batches), stopped by "
            f"{stream['stop_reason']}{rej}",
            soft_wrap=True,
        )
        console.print(
            f"outputs: {escape(str(summary.out_dir))}/ (plan.json{final}, "
            "answers.parquet/ and late.parquet/ with one part per micro-batch, "
            "metrics.json)",
            soft_wrap=True,
        )
    else:
        text = summary.metrics.get("text")
        if text:
            console.print(text_summary_line(text), soft_wrap=True)
        console.print(
            f"outputs: {escape(str(summary.out_dir))}/ (plan.json{final}, "
            "answers.parquet, late.parquet, metrics.json" + (", rejects/" if text else "") + ")",
            soft_wrap=True,
        )
    path = _build_report(summary.out_dir)
    console.print(f"report: {escape(str(path))}", soft_wrap=True)
    return path


@data_app.command("convert")
def data_convert(
    src: Path = typer.Argument(..., metavar="IN", help="DEBS 2012 text file (TSV, CRLF)."),
    dest: Path = typer.Argument(..., metavar="OUT.parquet", help="DEBS Parquet to write."),
    rejects: Path | None = typer.Option(
        None, help="Malformed lines (line, reason, raw); default: OUT.rejects.tsv."
    ),
    extra_columns: str = typer.Option(
        "reject",
        "--extra-columns",
        help="A trailing 57th field: reject (the line) or ignore "
        "(drop the field), as data.extra_columns.",
    ),
):
    """Convert a DEBS text file to DEBS Parquet once (same rules as a live run's reader)."""
    from rich.markup import escape
    from rich.progress import DownloadColumn, TransferSpeedColumn

    from sim.debs import EXTRA_COLUMNS_CHOICES, convert_debs, is_parquet_name

    if extra_columns not in EXTRA_COLUMNS_CHOICES:
        raise UserError(
            f"--extra-columns: {extra_columns!r}; allowed: {', '.join(EXTRA_COLUMNS_CHOICES)}"
        )
    if not src.is_file():
        raise UserError(f"IN: file not found: {src}")
    if is_parquet_name(src.name):
        raise UserError(f"IN: {src} is already Parquet (.parquet/.pq); convert reads DEBS text")
    if not is_parquet_name(dest.name):
        raise UserError(f"OUT: {dest}: the output name must end in .parquet or .pq")
    if dest.resolve() == src.resolve():
        raise UserError("OUT: the same file as IN")
    if not dest.parent.is_dir():
        raise UserError(f"OUT: directory not found: {dest.parent}")
    rejects = rejects or dest.with_name(dest.name.rsplit(".", 1)[0] + ".rejects.tsv")
    size = src.stat().st_size
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task(f"converting {src.name}", total=size)
        stats = convert_debs(
            src,
            dest,
            rejects_path=rejects,
            extra_columns=extra_columns,
            progress=lambda done: bar.update(task, completed=done),
        )
    extra = []
    if stats.glued_lines:
        extra.append(f"{stats.glued_lines:,} glued lines split")
    if stats.extra_column_lines:
        extra.append(f"{stats.extra_column_lines:,} extra columns dropped")
    if stats.header_lines:
        extra.append(f"{stats.header_lines} header line skipped")
    console.print(
        f"{escape(str(dest))}: {stats.rows_read:,} rows from {stats.lines:,} lines, "
        f"{stats.rows_rejected:,} rejected ({escape(str(rejects))})"
        + (f"; {', '.join(extra)}" if extra else "")
        + f" in {stats.seconds:.1f} s",
        soft_wrap=True,
    )


@app.command()
def simulate(
    config: Path = typer.Argument(..., help="Run configuration (YAML)."),
    out: Path | None = typer.Option(None, help="Output directory (default: run.output_dir)."),
    workers: int | None = typer.Option(
        None, min=1, max=64, help="Processes, each taking whole workloads (default: run.workers)."
    ),
):
    """Price every configuration x optimizer of a config; write plans, results and summaries."""
    from rich.markup import escape

    from sim.config import ConfigError
    from sim.simulate import check_simulatable
    from sim.simulate import simulate as run_simulation

    cfg = _load_config_or_exit(config)
    try:
        check_simulatable(cfg)
    except ConfigError as exc:
        _config_error_exit(exc)
    with _progress() as bar:
        task = bar.add_task("simulate", total=None)

        def step(done: int, total: int, label: str) -> None:
            bar.update(task, completed=done, total=total, description=label)

        try:
            summary = run_simulation(cfg, progress=step, output_dir=out, workers=workers)
        except ConfigError as exc:
            bar.stop()
            _config_error_exit(exc)

    def pct(v):
        return "-" if v is None else f"{v:.1f}"

    with_exact = any(r["exact_gap_total_mean_pct"] is not None for r in summary.per_optimizer)
    table = Table(
        title=f"{summary.configurations} configuration(s), {summary.runs} plans "
        "(quality: 0 % = best plan of a configuration, 100 % = worst)"
    )
    table.add_column("optimizer", no_wrap=True)
    heads = ["best Total %", "best Max %", "quality Total %", "quality Max %"]
    heads += ["exact gap Total %", "exact gap Max %"] if with_exact else []
    for h in heads + ["mean s"]:
        table.add_column(h, justify="right")
    for r in summary.per_optimizer:
        cells = [
            pct(r["best_total_pct"]),
            pct(r["best_max_pct"]),
            pct(r["quality_total_mean_pct"]),
            pct(r["quality_max_mean_pct"]),
        ]
        if with_exact:
            cells += [pct(r["exact_gap_total_mean_pct"]), pct(r["exact_gap_max_mean_pct"])]
        table.add_row(r["optimizer"], *cells, f"{r['runtime_mean_s']:.3f}")
    console.print(table)
    if summary.compile_s:
        console.print(
            f"one-off kernel compile/load: {summary.compile_s:.2f} s (not in the "
            "optimizers' runtimes)"
        )
    console.print(
        f"results: {escape(str(summary.files['results_csv']))} "
        f"(+ .parquet, plans/, table9_best.csv, fig40_quality.csv, "
        f"table10_runtime.csv) in {summary.seconds:.1f} s",
        soft_wrap=True,
    )
    path = _build_report(summary.files["results_csv"].parent)
    console.print(f"report: {escape(str(path))}", soft_wrap=True)
    return path


@app.command()
def serve(
    config: Path | None = typer.Argument(
        None, help="Run configuration (YAML) with data.directory."
    ),
    resume: Path | None = typer.Option(
        None, "--resume", metavar="RUN_DIR", help="Continue a stopped or crashed deployment."
    ),
):
    """A deployment that runs until stopped: queries, nodes and files come and go (control it
    with `weaveplace ctl RUN_DIR ...`; RUN_DIR/control.json holds its address and token)."""
    from sim.serve_cli import serve_command

    return serve_command(config, resume, console, UserError)


@app.command()
def ctl(
    run_dir: Path = typer.Argument(..., help="The deployment's run directory."),
    command: str = typer.Argument(
        ...,
        help="status | add-queries FILE.yaml | remove-queries "
        "ID... | add-node | retire-node ID | rebalance | "
        "stop",
    ),
    args: list[str] | None = typer.Argument(None, help="The command's arguments."),
    node_id: str | None = typer.Option(None, "--id", help="add-node: the new node's id."),
    capacity: float | None = typer.Option(None, "--capacity", help="add-node: capacity."),
    flush: bool = typer.Option(
        False,
        "--flush",
        help="stop: end of input for good (answer every pending window; no resume).",
    ),
):
    """Send one command to a running deployment and print its JSON reply."""
    from sim.serve_cli import ServeError
    from sim.serve_cli import ctl as send

    try:
        reply = send(run_dir, command, args or [], node_id, capacity, flush)
    except ServeError as exc:
        raise UserError(str(exc)) from None
    print(json.dumps(reply, indent=1))


def main() -> None:
    """Entry point: run the app and turn user errors into one line and exit code 2."""
    from sim.compile_cache import ensure_cache_dir

    ensure_cache_dir()  # before numba is imported: the cache `make` filled (weaveplace warmup)
    try:
        rc = app(standalone_mode=False)
        if isinstance(rc, int) and rc:
            sys.exit(rc)
    except UserError as exc:
        console.print(f"[red]error:[/red] {exc}", soft_wrap=True)  # one line, unwrapped
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        console.print("[red]aborted")
        sys.exit(130)
    except Exception as exc:  # click usage errors carry their own message
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(2)
        raise


if __name__ == "__main__":
    main()
