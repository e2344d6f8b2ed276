"""``weaveplace quickstart`` and ``warmup``: the tour ``make run`` gives, and the one-off kernel
compile ``make`` runs first.

Why together: both are how a newcomer starts; the tour calls the ``simulate`` and ``run``
commands' own functions (``sim.cli.simulation``, ``sim.cli.runs``) with every option given.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import typer
from rich.markup import escape

from sim.cli import runs, simulation
from sim.cli.base import UserError, console
from sim.cli.base import progress as _progress


def warmup(
    spark: bool = typer.Option(
        True, help="Also build Spark's driver class archive (cluster.feeds.driver_jvm)."
    ),
):
    """Compile every numba kernel a plan or a run can use into the cache (NUMBA_CACHE_DIR,
    default .cache/numba) and build the class archive Spark's driver JVM starts from
    (.cache/spark); `make` runs it once, so no reported time includes compiling."""
    from placement.numba_cache import ensure_cache_dir
    from sim.compile_cache import executor_cases, warm_all

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
    if spark:
        _spark_archive()


def _spark_archive() -> None:
    """Build Spark's driver class archive; a failure is one line, not an error (runs then
    start Spark without it, only slower)."""
    from cluster.feeds.driver_jvm import ArchiveError, build

    start = time.perf_counter()
    with _progress() as bar:
        bar.add_task("Spark driver class archive", total=None)
        try:
            path = build()
        except (ArchiveError, OSError, subprocess.TimeoutExpired) as exc:
            console.print(f"[yellow]{escape(str(exc))}: Spark starts without it[/]", soft_wrap=True)
            return
    console.print(f"Spark class archive built in {time.perf_counter() - start:.1f} s -> {path}")


def quickstart(out: Path = typer.Option(Path("out/quickstart"), help="Output directory.")):
    """The tour `make run` gives: a small simulation across optimizers, a short live run on an
    embedded Ray with local Spark over generated DEBS-style data, and the report (the configs
    shipped with weaveplace: configs/ in a checkout, package data when installed)."""
    from sim.bundled import MissingConfig, bundled_config

    start = time.perf_counter()
    try:
        with (
            bundled_config("quickstart.yaml") as sim_config,
            bundled_config("live_quickstart.yaml") as live_config,
        ):
            console.rule("1/2 simulation: configs/quickstart.yaml")
            # the commands' own functions, every option given (their defaults are typer objects)
            sim_report = simulation.simulate(
                sim_config, out / "simulation", workers=None, ray_address=None
            )
            console.rule("2/2 live run: configs/live_quickstart.yaml")
            live_report = runs.run(
                live_config, out / "live", until_idle=None, max_files=None, timeout=None
            )
    except MissingConfig as e:
        raise UserError(str(e)) from None
    console.print(f"[bold green]quickstart done[/] in {time.perf_counter() - start:.0f} s")
    for line in cost_agreement(out / "live" / "metrics.json"):
        console.print(escape(line), soft_wrap=True)
    console.print(
        f"reports: {escape(str(sim_report))}\n         {escape(str(live_report))}", soft_wrap=True
    )


def cost_agreement(metrics_path: Path) -> list[str]:
    """The live run's estimated vs measured cost per node (``sim.cost_check``), as printed at
    the end of the tour: the first thing to trust or doubt about a placement."""
    import json

    from sim.cost_check import agreement_lines

    try:
        check = json.loads(metrics_path.read_text()).get("cost_check") or {}
    except (OSError, ValueError):
        return []
    if not check.get("nodes"):
        return []
    return [
        "estimated vs measured cost per node (the trees' own work: tuples folded + counted "
        "final-aggregation operations per ms of event time; per-batch overheads left out):"
    ] + [f"  {line}" for line in agreement_lines(check["nodes"])]
