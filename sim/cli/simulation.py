"""``weaveplace simulate``: every configuration x optimizer of a config priced, with a table of
how each optimizer did.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from sim.cli.base import config_error_exit, console, load_config_or_exit
from sim.cli.base import progress as _progress
from sim.cli.reports import build_report_or_exit


def simulate(
    config: Path = typer.Argument(..., help="Run configuration (YAML)."),
    out: Path | None = typer.Option(None, help="Output directory (default: run.output_dir)."),
    workers: int | None = typer.Option(
        None, min=1, max=64, help="Processes, each taking whole workloads (default: run.workers)."
    ),
    ray_address: str | None = typer.Option(
        None,
        "--ray-address",
        help="Run whole workloads as Ray tasks on this cluster (host:port, ray://host:port, "
        "auto; local: an embedded Ray with --workers CPUs). Default: cluster.ray.address; "
        "neither: local processes.",
    ),
):
    """Price every configuration x optimizer of a config; write plans, results and summaries."""
    from rich.markup import escape

    from sim.config import ConfigError
    from sim.simulate import check_simulatable
    from sim.simulate import simulate as run_simulation

    cfg = load_config_or_exit(config)
    try:
        check_simulatable(cfg)
    except ConfigError as exc:
        config_error_exit(exc)
    with _progress() as bar:
        task = bar.add_task("simulate", total=None)

        def step(done: int, total: int, label: str) -> None:
            bar.update(task, completed=done, total=total, description=label)

        try:
            summary = run_simulation(
                cfg, progress=step, output_dir=out, workers=workers, ray_address=ray_address
            )
        except ConfigError as exc:
            bar.stop()
            config_error_exit(exc)

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
    path = build_report_or_exit(summary.files["results_csv"].parent)
    console.print(f"report: {escape(str(path))}", soft_wrap=True)
    return path
