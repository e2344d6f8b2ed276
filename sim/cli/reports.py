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
    if not run_dir.is_dir():
        raise UserError(f"run directory not found: {run_dir}")
    return RunReport(out).show_or_exit(run_dir)


class RunReport:
    """A run folder's report, made when called (``weaveplace run`` hands it to the run, which
    calls it while Ray and Spark stop: ``sim.cluster_run.run_on_cluster``'s ``then``), then
    shown: ``show_or_exit`` prints the terminal summary (made first if it was not called) and
    turns a folder that is not a run into a ``UserError``."""

    def __init__(self, out: Path | None = None):
        self.out = out
        self.run = None
        self.path: Path | None = None
        self.error: Exception | None = None

    def __call__(self, run_dir: Path) -> None:
        from sim.report import build_report
        from sim.report.data import ReportError, load_run

        try:
            self.run = load_run(run_dir)
            self.path = build_report(run_dir, self.out, run=self.run)
        except ReportError as exc:
            self.error = exc

    def show_or_exit(self, run_dir: Path) -> Path:
        from sim.report.terminal import print_summary

        if self.path is None and self.error is None:
            self(run_dir)
        if self.error is not None:
            raise UserError(str(self.error)) from self.error
        print_summary(run_dir, console, run=self.run)
        return self.path
