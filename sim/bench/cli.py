"""``weaveplace bench ...``: one command per benchmark of ``sim.bench`` (figures go to BENCHMARKS.md).

Why apart from ``sim.cli``: the benchmarks are a tool of their own (they may import every
layer); each command checks its options, runs its module and writes its results under
``--out``. The option parsing they share (comma-separated lists checked against the allowed
values, the output directory, the results file) is written once here. One idea in ~650
lines: a short command per benchmark, glue only (the work is in the benchmark modules).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from sim.cli.base import UserError, console
from sim.cli.base import progress as _progress

bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks (figures go to BENCHMARKS.md).")


def out_option(default: str = "out/bench"):
    """The ``--out`` option every benchmark takes."""
    return typer.Option(Path(default), help="Output directory.")


def csv_items(text: str) -> list[str]:
    """The non-empty, stripped items of a comma-separated option value."""
    return [x.strip() for x in text.split(",") if x.strip()]


def choices(option: str, text: str, allowed) -> list[str]:
    """A comma-separated option whose items must be among ``allowed`` (at least one)."""
    items = csv_items(text)
    bad = [x for x in items if x not in allowed]
    if bad or not items:
        raise UserError(f"--{option}: unknown {bad or items}; allowed: {', '.join(allowed)}")
    return items


def int_items(option: str, text: str, minimum: int) -> list[int]:
    """A comma-separated option of integers >= ``minimum`` (at least one)."""
    try:
        vals = [int(x) for x in csv_items(text)]
    except ValueError:
        vals = []
    if not vals or min(vals) < minimum:
        raise UserError(f"--{option}: expected comma-separated integers >= {minimum}, got {text!r}")
    return vals


def write_results(out: Path, name: str, obj: Any) -> Path:
    """``out/name`` as indented JSON (numpy scalars as floats); prints and returns the path."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    path.write_text(json.dumps(obj, indent=1, default=float))
    console.print(f"results: {path}")
    return path


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
    out: Path = out_option(),
    quick: bool = typer.Option(False, help="Only the first two points of each experiment."),
):
    """Reproduce the dissertation's F1 experiments (Table 5) with every edge engine."""
    from sim.bench import f1 as b

    exps = int_items("experiments", experiments, 1)
    bad = [e for e in exps if e not in b.EXPERIMENTS]
    if bad:
        raise UserError(f"--experiments: unknown {bad}; allowed: 1..5")
    engs = choices("engines", engines, b.CONFIGS)
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
    out: Path = out_option(),
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
    out: Path = out_option(),
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
    out: Path = out_option(),
    front: bool = typer.Option(False, help="Also the exact Pareto front (same time limit)."),
):
    """The exact yardstick's reach: time to prove min TotalCost / min MaxCost (and with
    --front the Pareto front), share proven."""
    import pandas as pd

    from sim.bench import exact as b

    qs, ns = int_items("qnums", qnums, 1), int_items("nodes", nodes, 1)
    sd = int_items("seeds", seeds, 0)
    if max(qs) > 60:
        raise UserError(f"--qnums: at most 60 queries (exact search), got {max(qs)}")
    out.mkdir(parents=True, exist_ok=True)
    done: list[dict] = []

    def row_done(r: dict) -> None:  # the CSV grows row by row: a long run is never all lost
        done.append(r)
        pd.DataFrame(done).to_csv(out / "bench_exact.csv", index=False)
        bar.advance(task)

    with _progress() as bar:
        task = bar.add_task("exact", total=len(qs) * len(ns) * len(sd))
        opts = b.ExactBenchOptions(
            qnums=qs,
            nodes=ns,
            seeds=sd,
            rate=rate,
            smax=smax,
            omax=omax,
            gen="nrm",
            time_limit_s=time_limit,
            front=front,
        )
        rows = b.run(opts, on_row=row_done)
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
        5, min=0, max=13, help="Table 8 points (500 queries, 32 nodes) timed."
    ),
    seed: int = typer.Option(0, min=0, help="First workload seed."),
    run: Path | None = typer.Option(
        None, help="Instead: summarise a `simulate` output directory with WG_PF."
    ),
    out: Path = out_option(),
):
    """WG_PF: weak dominance of every Table 7 optimizer and WG_LS on a mixed grid, hypervolume
    against the exact front on small instances, runtime against WG_LS (sim.bench.pareto)."""
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
            task = bar.add_task("pareto: runtime", total=runtime_points)
            df = pd.DataFrame(
                b.runtime(b.RUNTIME_POINTS[:runtime_points], 32, on_row=lambda r: bar.advance(task))
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
    out: Path = out_option(),
):
    """Final-aggregation throughput, latency and memory (dissertation Figures 23-29)."""
    from sim.bench.executors import DEFAULT_TECHNIQUES, ExecutorBenchOptions, run_executor_bench

    aggs = choices("aggregates", aggregates, ("sum", "max"))
    mode_list = choices("modes", modes, ("single", "max-multi"))
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

        opts = ExecutorBenchOptions(
            techniques=DEFAULT_TECHNIQUES,
            aggregates=aggs,
            windows=windows,
            modes=tuple(mode_list),
            cell_seconds=cell_seconds,
        )
        rows = run_executor_bench(opts, progress=seen)
    write_results(out, "bench_executors.json", rows)


@bench_app.command("slicing")
def bench_slicing(
    techniques: str = typer.Option(
        "slickdeque,panes,flatfat,flatfit", help="Comma-separated techniques."
    ),
    queries: int = typer.Option(20, help="Queries in the tree (sum, r mod s != 0)."),
    tuples: int = typer.Option(1_000_000, help="Tuples (one per time unit)."),
    repeats: int = typer.Option(3, help="Timed runs per slicing (best is kept)."),
    out: Path = out_option(),
):
    """Pairs vs Cutty slicing side by side: tuples/s, slices, operations."""
    from executors.tree import ALL_TECHNIQUES
    from sim.bench.executors import run_slicing_bench, slicing_workload

    techs = choices("techniques", techniques, ALL_TECHNIQUES)
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
    write_results(out, "bench_slicing.json", rows)


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
    out: Path = out_option(),
):
    """Model Omega vs measured final-aggregation operations per edge on planned trees."""
    from dataclasses import asdict

    from sim.bench import omega as oc
    from sim.workload import WorkloadSpec

    techs = choices("techniques", techniques, oc.TECHNIQUES)
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
    write_results(
        out,
        "bench_omega.json" if slicing == "pairs" else f"bench_omega_{slicing}.json",
        {
            "workload": asdict(spec),
            "slicing": slicing,
            "summary": rows,
            "slickdeque_inv_on_panes_plan": other,
            "trees": {t: [asdict(x) for x in v] for t, v in res.items()},
        },
    )


@bench_app.command("count")
def bench_count(
    qnum: int = typer.Option(40, help="Queries (every other one a count window)."),
    smax: int = typer.Option(50, help="Max slide (ms or tuples)."),
    omax: float = typer.Option(20.0, help="Max overlap factor (range / slide)."),
    rate: float = typer.Option(0.5, help="Tuples per ms on each of the two streams."),
    tuples: int = typer.Option(1_000_000, help="Tuples per stream."),
    nodes: int = typer.Option(2, help="Plan nodes (Ray actors)."),
    live: bool = typer.Option(True, help="Run on Ray actors (--no-live: NodeCore in process)."),
    out: Path = out_option(),
):
    """Count-window plans: planned vs measured edges and operations per ms (the count cost
    model checked on running trees)."""
    from sim.bench.count import CountCheckOptions, format_count_check, run_count_check

    if qnum < 1 or smax < 1 or omax < 1 or not rate > 0 or tuples < 10_000 or nodes < 1:
        raise UserError(
            "--qnum, --smax, --nodes >= 1, --omax >= 1, --rate > 0 and "
            "--tuples >= 10000 are required"
        )
    res = run_count_check(
        CountCheckOptions(
            qnum=qnum, smax=smax, omax=omax, rate=rate, tuples=tuples, nodes=nodes, live=live
        ),
        log=lambda m: console.print(m, markup=False),
    )
    console.print(format_count_check(res), markup=False)
    write_results(out, "bench_count.json", res)


@bench_app.command("e2e")
def bench_e2e(
    queries: str = typer.Option("1,10,100,1000", help="Comma-separated query counts."),
    modes: str = typer.Option("raw,sliced", help="raw and/or sliced."),
    duration_s: float = typer.Option(2000, help="DEBS-style data: seconds of events."),
    rate_hz: float = typer.Option(100, help="DEBS-style data: events per second."),
    nodes: int = typer.Option(2, help="Plan nodes (Ray actors)."),
    routes: str = typer.Option(
        "driver",
        help="Data paths: driver, actors (actors write answers), executors (Spark tasks "
        "push to the actors; raw mode).",
    ),
    spark_sql: bool = typer.Option(True, help="Also time Spark SQL's window() jobs."),
    check_max_queries: int = typer.Option(100, help="Check all answers up to this many queries."),
    check_sample: int = typer.Option(30, help="Above that, check this many random queries."),
    repeat: int = typer.Option(
        2,
        help="Runs per mode; the best wall time counts (Spark SQL: "
        "only while a run takes under 60 s).",
    ),
    early_read: bool = typer.Option(
        False,
        help="Raw mode through the driver: open the file and pull its first chunk before the "
        "clock starts, as weaveplace run does during its start-up (early_s).",
    ),
    out: Path = out_option(),
):
    """End to end (Spark -> Ray actors) tuples/s: raw vs sliced feed vs Spark SQL windows."""
    from sim.bench.e2e import E2eOptions, format_table, run_e2e_bench

    qlist = int_items("queries", queries, 1)
    mode_list = choices("modes", modes, ("raw", "sliced"))
    route_list = choices("routes", routes, ("driver", "actors", "executors"))
    opts = E2eOptions(
        queries_list=qlist,
        modes=tuple(mode_list),
        duration_s=duration_s,
        rate_hz=rate_hz,
        routes=tuple(route_list),
        nodes=nodes,
        spark_sql=spark_sql,
        check_max_queries=check_max_queries,
        check_sample=check_sample,
        repeat=max(1, repeat),
        early_read=early_read,
    )
    rows = run_e2e_bench(opts, log=lambda s: console.print(s, soft_wrap=True, markup=False))
    console.print(format_table(rows), markup=False)
    write_results(out, "bench_e2e.json", rows)
    if any(
        r.get("equal_to_spark_sql") is False or r.get("raw_equals_sliced") is False for r in rows
    ):
        raise typer.Exit(1)


def _feed_bench(run, format_table, name: str, sizes: tuple[int, int, int, int], out: Path):
    """A live-feed comparison (``bench text``, ``bench order``): ``sizes`` = rows, queries,
    nodes, repeat (checked), the table printed, ``<name>.json`` written, exit 1 unless every
    pair of runs answered alike."""
    rows, queries, nodes, repeat = sizes
    if rows < 1000 or queries < 1 or nodes < 1 or repeat < 1:
        raise UserError(
            "--rows >= 1000, --queries >= 1, --nodes >= 1 and --repeat >= 1 are required"
        )
    res = run(
        rows,
        queries,
        nodes=nodes,
        repeat=repeat,
        log=lambda s: console.print(s, soft_wrap=True, markup=False),
    )
    console.print(format_table(res), markup=False)
    write_results(out, f"{name}.json", res)
    if not all(r["answers_equal"] for r in res):
        raise typer.Exit(1)


@bench_app.command("text")
def bench_text(
    rows: int = typer.Option(1_000_000, help="Generated DEBS events (100 Hz)."),
    queries: int = typer.Option(100, help="Queries (raw mode)."),
    nodes: int = typer.Option(2, help="Plan nodes (Ray actors)."),
    repeat: int = typer.Option(2, help="Runs per input, alternating; the best counts."),
    out: Path = out_option(),
):
    """Live feed rows/s over DEBS text vs the same data as Parquet (raw mode)."""
    from sim.bench.text import format_table, run_text_bench

    _feed_bench(run_text_bench, format_table, "bench_text", (rows, queries, nodes, repeat), out)


@bench_app.command("order")
def bench_order(
    rows: int = typer.Option(1_000_000, help="Generated DEBS events (100 Hz)."),
    queries: int = typer.Option(100, help="Queries (raw mode)."),
    nodes: int = typer.Option(2, help="Plan nodes (Ray actors)."),
    repeat: int = typer.Option(2, help="Runs per file and order, alternating; the best counts."),
    out: Path = out_option(),
):
    """Driver feed wall time in data.order file vs time, on a sorted and a disordered file."""
    from sim.bench.order import format_table, run_order_bench

    _feed_bench(run_order_bench, format_table, "bench_order", (rows, queries, nodes, repeat), out)


@bench_app.command("startup")
def bench_startup(
    config: Path = typer.Option(
        None, help="A live config (default: the shipped live_quickstart.yaml)."
    ),
    runs: int = typer.Option(3, min=1, help="Runs, one after the other, each its own process."),
    alone: bool = typer.Option(
        False, help="After each run, time Ray + actors and Spark + first read each alone."
    ),
    out: Path = out_option("out/bench_startup"),
):
    """Time to the first row of a live run beside Ray's and Spark's start (started at the same
    time), each run in a process of its own; goal: the first row within 1 s of the slower."""
    from sim.bench.startup import format_table, run_startup_bench
    from sim.bundled import bundled_config

    def bench(path: Path) -> list[dict]:
        from sim.cli.base import config_error_exit, load_config_or_exit
        from sim.cluster_run import check_cluster_run
        from sim.config import ConfigError

        try:  # the runs' own checks, here: a mistake is one line, not a child's traceback
            check_cluster_run(load_config_or_exit(path), out / "run1")
        except ConfigError as exc:
            config_error_exit(exc)
        say = lambda s: console.print(s, markup=False)  # noqa: E731
        return run_startup_bench(path, runs, out, say=say, with_alone=alone)

    if config is None:
        with bundled_config("live_quickstart.yaml") as path:
            rows = bench(path)
    else:
        rows = bench(config)
    console.print(format_table(rows))
    write_results(out, "bench_startup.json", rows)


@bench_app.command("serve")
def bench_serve(
    queries: int = typer.Option(300, min=1, help="Queries added, one at a time."),
    add_every: float = typer.Option(1.0, help="Seconds between two add-queries."),
    speed: float = typer.Option(10.0, help="Files dropped at this many x real time."),
    resume: bool = typer.Option(True, help="Also time serve --resume to the first answer."),
    out: Path = out_option("out/bench_serve"),
):
    """A deployment under query churn: answer latency, plan cost vs fresh, control and resume
    latency, memory (``sim/bench/serve.py``; run it under the bench lock)."""
    from sim.bench.serve import ServeBenchOptions, run_serve_bench

    if not add_every > 0 or not speed > 0:
        raise UserError("--add-every and --speed: numbers > 0")
    res = run_serve_bench(
        out,
        ServeBenchOptions(queries=queries, add_every_s=add_every, speed=speed, resume=resume),
        say=lambda s: console.print(s, soft_wrap=True, markup=False),
    )
    console.print(json.dumps(res, indent=1), markup=False)
    console.print(f"results: {out / 'bench_serve.json'}")


@bench_app.command("live-scale")
def bench_live_scale(
    queries: int = typer.Option(100_000, min=1, help="Queries of the run and the deployment."),
    rows: int = typer.Option(1_000_000, min=1000, help="Generated DEBS-style rows (100 Hz)."),
    check: int = typer.Option(200, min=0, help="Random queries checked against the brute force."),
    add: int = typer.Option(1_000, min=1, help="Queries added to the deployment in one command."),
    nodes: int = typer.Option(1, min=1, help="Plan nodes (Ray actors)."),
    optimizer: str = typer.Option("weaveshare", help="The optimizer of the plan."),
    run: bool = typer.Option(True, help="Time a weaveplace run (part a)."),
    serve: bool = typer.Option(True, help="Time the add to a running deployment (part b)."),
    out: Path = out_option("out/bench_live_scale"),
):
    """The live path at a large query count: a `weaveplace run` (wall, answers/s, peak memory,
    answers vs the brute force) and one add-queries to a `serve` deployment running the same
    queries, timed (``sim/bench/live_scale.py``; run it under the bench lock)."""
    from placement.optimizers import optimizer_names
    from sim.bench.live_scale import LiveScaleOptions, run_live_scale

    if optimizer not in optimizer_names():
        raise UserError(f"--optimizer: unknown {optimizer!r}; allowed: {optimizer_names()}")
    res = run_live_scale(
        out,
        LiveScaleOptions(
            queries=queries,
            rows=rows,
            check=check,
            add=add,
            nodes=nodes,
            optimizer=optimizer,
            run=run,
            serve=serve,
        ),
        say=lambda s: console.print(s, soft_wrap=True, markup=False),
    )
    console.print(json.dumps(res, indent=1), markup=False)
    console.print(f"results: {out / 'bench_live_scale.json'}")
    if run and not res["run"]["check"]["equal"]:
        raise typer.Exit(1)


@bench_app.command("autoscale")
def bench_autoscale(
    peak: int = typer.Option(300, min=1, help="Queries at the top of the ramp."),
    step: int = typer.Option(50, min=1, help="Queries added (then removed) per step."),
    step_s: float = typer.Option(15.0, help="Wall seconds between two steps."),
    speed: float = typer.Option(10.0, help="Files dropped at this many x real time."),
    cooldown: float = typer.Option(10.0, help="The policy's cooldown_s."),
    out: Path = out_option("out/bench_autoscale"),
):
    """An elastic deployment under a query ramp up and down: node count vs the smallest
    feasible count, steps to converge, node-seconds over the minimum, flapping, answer
    latency, answers vs the brute force (``sim/bench/autoscale.py``; run it under the bench
    lock)."""
    from sim.bench.autoscale import AutoscaleBenchOptions, run_autoscale_bench

    if not step_s > 0 or not speed > 0 or not cooldown >= 0:
        raise UserError("--step-s and --speed: numbers > 0; --cooldown: a number >= 0")
    res = run_autoscale_bench(
        out,
        AutoscaleBenchOptions(
            peak=peak, step=step, step_s=step_s, speed=speed, cooldown_s=cooldown
        ),
        say=lambda s: console.print(s, soft_wrap=True, markup=False),
    )
    show = {k: v for k, v in res.items() if k != "timeline"}
    console.print(json.dumps(show, indent=1), markup=False)
    console.print(f"results: {out / 'bench_autoscale.json'}")
    if not res["answers_equal_brute_force"] or res["windows_written_twice"]:
        raise typer.Exit(1)


@bench_app.command("stall")
def bench_stall(
    nodes: int = typer.Option(3, min=2, help="Plan nodes (node-1's actor is stopped)."),
    queries: int = typer.Option(30, min=1, help="Queries."),
    call_timeout: float = typer.Option(10.0, min=1, help="cluster.call_timeout_s."),
    files: int = typer.Option(30, min=8, help="Files dropped, one every --every seconds."),
    every: float = typer.Option(1.0, min=0.1, help="Wall seconds between two files."),
    out: Path = out_option("out/bench_stall"),
):
    """A node actor stopped (SIGSTOP) on a healthy host while files arrive: detection time,
    the other nodes' answers during the silence, status latency, recovery, answers vs the
    brute force (``sim/bench/stall.py``)."""
    from sim.bench.stall import StallBenchOptions, run_stall_bench

    res = run_stall_bench(
        out,
        StallBenchOptions(
            nodes=nodes,
            queries=queries,
            call_timeout_s=call_timeout,
            files=files,
            drop_every_s=every,
        ),
        say=lambda s: console.print(s, soft_wrap=True, markup=False),
    )
    console.print(json.dumps(res, indent=1), markup=False)
    console.print(f"results: {out / 'bench_stall.json'}")
    if not res["answers_equal_brute_force"] or res["windows_written_twice"]:
        raise typer.Exit(1)


@bench_app.command("overload")
def bench_overload(
    queries: int = typer.Option(200, min=1, help="Queries (over ten DEBS streams)."),
    nodes: int = typer.Option(2, min=1, help="Plan nodes (no more can be added)."),
    hot: int = typer.Option(30, min=3, help="Files at 3x, one per --file-s."),
    file_s: float = typer.Option(2.0, min=0.2, help="Seconds of data per file (and between two)."),
    node_cpu: float = typer.Option(
        0.1, min=0.001, help="Each node actor's share of a core (a CPU cgroup; needs root)."
    ),
    load: float = typer.Option(
        0.6,
        min=0.05,
        max=0.95,
        help="1x: the rate at which the busiest node uses this share of its --node-cpu.",
    ),
    out: Path = out_option("out/bench_overload"),
):
    """Input at 3x what the nodes can carry, then 1x, with load shedding and without, one
    after the other: answer latency per phase, the fractions against the LP's, answers vs the
    brute force over the kept tuples (``sim/bench/overload.py``; run it under the bench
    lock)."""
    from sim.bench.node_cpu import CpuLimitError
    from sim.bench.overload import CalibrationError, OverloadBenchOptions, run_overload_bench

    try:
        res = run_overload_bench(
            out,
            OverloadBenchOptions(
                queries=queries,
                nodes=nodes,
                hot_files=hot,
                file_s=file_s,
                node_cpu=node_cpu,
                target_busy=load,
            ),
            say=lambda s: console.print(s, soft_wrap=True, markup=False),
        )
    except (CpuLimitError, CalibrationError) as e:
        raise UserError(f"bench overload: {e}") from None
    console.print(json.dumps(res, indent=1, default=str), markup=False)
    console.print(f"results: {out / 'bench_overload.json'}")
    runs = res["runs"].values()
    if not all(r["answers_equal_brute_force"] and not r["windows_written_twice"] for r in runs):
        raise typer.Exit(1)


@bench_app.command("scale")
def bench_scale(
    qnums: str = typer.Option(
        "1000,3000,10000,30000,100000,300000,1000000", help="Comma-separated query counts N."
    ),
    smaxes: str = typer.Option("100,1000,10000", help="Comma-separated largest slides Smax."),
    nodes: str = typer.Option(
        "1,16,64", help="Comma-separated node counts (1: --single; more: --distributed)."
    ),
    single: str = typer.Option(
        "weaveshare",
        help="Comma-separated single-node optimizers for one node (e.g. "
        "weaveshare,banded_weaveshare).",
    ),
    distributed: str = typer.Option(
        "WG_TN,WG_BAND", help="Comma-separated distributed optimizers for node counts above 1."
    ),
    preprocess: str = typer.Option(
        "none",
        help="The distributed optimizers' units: none (one per query, their default) or "
        "classes (equal residue classes grouped first: placement.preprocess true).",
    ),
    limit: float = typer.Option(
        300.0, help="Per-cell time limit (s): a cell over it is stopped and reported as such."
    ),
    verify: bool = typer.Option(True, help="Check every plan with verify-plan (not timed)."),
    out: Path = out_option("out/bench_scale"),
):
    """Plan time and peak memory against N over a grid of N x Smax x nodes, each cell a child
    process stopped at --limit; a table, a log-log plot and the fitted growth exponents
    (``sim/bench/scale.py``)."""
    from placement.optimizers import DISTRIBUTED, SINGLE_NODE
    from sim.bench import scale as b

    if not limit > 0:
        raise UserError(f"--limit: a number of seconds > 0, got {limit}")
    if preprocess not in ("none", "classes"):
        raise UserError(f"--preprocess: none or classes, got {preprocess!r}")
    cells = b.grid(
        int_items("qnums", qnums, 1),
        int_items("smaxes", smaxes, 1),
        int_items("nodes", nodes, 1),
        choices("distributed", distributed, tuple(DISTRIBUTED)),
        preprocess,
        choices("single", single, tuple(SINGLE_NODE)),
    )
    with _progress() as bar:
        task = bar.add_task("bench scale", total=len(cells))

        def done(c):
            bar.console.print(
                f"N={c.qnum} S={c.smax} nodes={c.nodes} {c.label}: {c.status}"
                + (f" {c.seconds:.2f}s {c.peak_mb:.0f}MB" if c.seconds is not None else "")
            )
            bar.advance(task)

        b.run(cells, limit, plan_dir=out / "plans", verify=verify, on_cell=done)
    paths = b.save(cells, out)
    console.print(paths["md"].read_text(), markup=False, soft_wrap=True)
    for k, p in paths.items():
        console.print(f"{k}: {p}")
    if any(c.verified is False for c in cells):
        console.print("[red]some plan does not recompute (verify-plan)")
        raise typer.Exit(1)


@bench_app.command("flink")
def bench_flink(
    rows: int = typer.Option(100_000, help="Generated DEBS-style events (100 Hz)."),
    queries: int = typer.Option(
        85, help="Queries generated (bench e2e's generator); those Flink SQL can run are kept."
    ),
    nodes: int = typer.Option(3, help="weaveplace: plan nodes (Ray actors)."),
    optimizer: str = typer.Option("WG_LS", help="weaveplace: the distributed optimizer."),
    parallelism: int = typer.Option(2, help="Flink: parallelism."),
    compare: bool = typer.Option(
        True, help="Run Flink a second time with file sinks and compare every window."
    ),
    flink_python: str = typer.Option(
        None,
        help="A Python with apache-flink (default: $WEAVEPLACE_FLINK_PYTHON, this one, or "
        ".venv-flink beside the checkout).",
    ),
    data_dir: Path = typer.Option(
        Path("/tmp/weaveplace-bench-flink"), help="Where the generated data is kept."
    ),
    out: Path = out_option("out/bench_flink"),
):
    """weaveplace beside Apache Flink SQL (window TVFs) on the same data and queries, one after
    the other: both times (whole process, data path) and every window's answer compared
    (``sim/bench/flink.py``; run it under the bench lock)."""
    from rich.markup import escape

    from placement.optimizers import DISTRIBUTED
    from sim.bench.flink import (
        ChildFailed,
        FlinkBenchOptions,
        FlinkUnavailable,
        format_table,
        run_flink_bench,
    )

    if rows < 1000 or queries < 1 or nodes < 1 or parallelism < 1:
        raise UserError("--rows >= 1000, --queries, --nodes and --parallelism >= 1 are required")
    if optimizer not in DISTRIBUTED:
        raise UserError(f"--optimizer: unknown {optimizer!r}; allowed: {', '.join(DISTRIBUTED)}")
    opts = FlinkBenchOptions(
        rows=rows,
        queries=queries,
        nodes=nodes,
        optimizer=optimizer,
        parallelism=parallelism,
        compare=compare,
        data_dir=str(data_dir),
        flink_python=flink_python,
    )
    try:
        res = run_flink_bench(
            opts, out, log=lambda s: console.print(s, soft_wrap=True, markup=False)
        )
    except FlinkUnavailable as exc:
        raise UserError(str(exc)) from None
    except ChildFailed as exc:  # not the user's mistake: exit 1, still one line
        console.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(1) from None
    console.print(format_table(res), markup=False, soft_wrap=True)
    write_results(out, "bench_flink.json", res)
    if res.get("answers") is not None and not res["answers"]["equal"]:
        raise typer.Exit(1)
