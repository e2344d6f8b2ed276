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
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Column, Table

from sim.bench.cli import bench_app
from sim.cli_base import UserError, console
from sim.cli_base import progress as _progress
from sim.data_cli import data_app

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Place and run shared sliding-window aggregate queries.",
)
app.add_typer(bench_app, name="bench")
app.add_typer(data_app, name="data")


def _run_single_node(name: str, queries, model, progress_cb=None):
    from placement.optimizers import run_single_node

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
        help="A single-node optimizer (placement.optimizers.SINGLE_NODE): weaveshare "
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
    from placement.optimizers import SINGLE_NODE
    from placement.plan import single_node_plan
    from placement.trees import CostModel
    from sim.workload import WorkloadSpec, generate

    if optimizer not in SINGLE_NODE:
        raise UserError(
            f"--optimizer: unknown optimizer {optimizer!r}; allowed: {', '.join(SINGLE_NODE)}"
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
    from sim.report import build_report
    from sim.report.data import ReportError
    from sim.report.terminal import print_summary

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
            from sim.cluster_run import check_cluster_run

            check_cluster_run(cfg)
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

    from cluster.deployment.deployment import DeploymentError
    from cluster.feeds.directory_options import StreamError
    from sim.cluster_run import check_cluster_run, drill_lines, run_on_cluster
    from sim.config import ConfigError

    cfg = _load_config_or_exit(config)
    try:  # the same checks as `weaveplace validate` (sim.cluster_run.check_cluster_run)
        check_cluster_run(cfg, out)
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
            summary = run_on_cluster(
                cfg, out, progress=lambda stage: bar.update(task, description=stage)
            )
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
    if auth:  # which token the Ray connection used (cluster.runtime.ray_runtime.attach_auth)
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
    from placement.numba_cache import ensure_cache_dir

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
