"""``weaveplace validate`` and ``run``: a config checked before any work, and a config's live
run on Ray and Spark with its summary.

Why together: ``validate`` makes exactly the checks of the command that will run the config
(``sim.cluster_run.check_cluster_run`` for a live run), so the two stay side by side.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from sim.cli.base import UserError, config_error_exit, console, load_config_or_exit, status_line
from sim.cli.base import progress as _progress
from sim.cli.reports import RunReport


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


def validate(config: Path = typer.Argument(..., help="Run configuration (YAML).")):
    """Check a run configuration: prints OK and a summary, or the first problem (exit 2)."""
    from rich.markup import escape

    from sim.config import ConfigError

    cfg = load_config_or_exit(config)
    try:  # the checks of the command that will run it (run.mode), before any work
        if cfg.run.mode == "live":
            from sim.cluster_run import check_cluster_run

            check_cluster_run(cfg)
        else:
            from sim.simulate import check_simulatable

            check_simulatable(cfg)
    except ConfigError as exc:
        config_error_exit(exc)
    console.print(
        f"[green]OK[/green] {escape(str(config))}: {escape(cfg.summary())}", soft_wrap=True
    )


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

    from cluster.deployment.specs import DeploymentError
    from cluster.errors import StreamError
    from sim.cluster_run import check_cluster_run, drill_lines, run_on_cluster
    from sim.config import ConfigError

    cfg = load_config_or_exit(config)
    try:  # the same checks as `weaveplace validate` (sim.cluster_run.check_cluster_run)
        check_cluster_run(cfg, out)
    except ConfigError as exc:
        config_error_exit(exc)
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
    report = RunReport()  # made while Ray and Spark stop
    if cfg.data.directory is not None:  # a long one-line status instead of a bar
        bar = status_line()
    else:
        bar = _progress()
    with bar:
        task = bar.add_task("run", total=None)
        try:
            summary = run_on_cluster(
                cfg, out, progress=lambda stage: bar.update(task, description=stage), then=report
            )
        except ConfigError as exc:
            bar.stop()
            config_error_exit(exc)
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
    path = report.show_or_exit(summary.out_dir)
    console.print(f"report: {escape(str(path))}", soft_wrap=True)
    return path
