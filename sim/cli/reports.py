"""``weaveplace report``: the HTML report of a simulation or a live run, and the report every
``simulate`` and ``run`` ends with.
"""

from __future__ import annotations

from pathlib import Path

import typer

from sim.cli.base import UserError, console


def report(
    run_dir: Path = typer.Argument(..., help="A simulate or run output directory."),
    out: Path | None = typer.Option(None, help="Report directory (default RUN_DIR/report)."),
):
    """Self-contained HTML report (plots embedded) and PNGs for a simulation or live run."""
    from rich.markup import escape

    path = build_report_or_exit(run_dir, out)
    console.print(f"report: {escape(str(path))}", soft_wrap=True)


def build_report_or_exit(run_dir: Path, out: Path | None = None) -> Path:
    """The report of ``run_dir`` and its terminal summary; a folder that is not a run is a
    ``UserError``."""
    from sim.report import build_report
    from sim.report.data import ReportError, load_run
    from sim.report.terminal import print_summary

    if not run_dir.is_dir():
        raise UserError(f"run directory not found: {run_dir}")
    try:
        run = load_run(run_dir)
        path = build_report(run_dir, out, run=run)
        print_summary(run_dir, console, run=run)
    except ReportError as exc:
        raise UserError(str(exc)) from exc
    return path
