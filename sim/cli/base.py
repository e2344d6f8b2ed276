"""What every ``weaveplace`` command shares: the console, the user-mistake error, the progress
bar, and a config's one-line error with exit code 2.

Why its own module: the main commands (``sim.cli``) and the benchmark commands
(``sim.bench.cli``) both print through one console and turn a ``UserError`` into one line and
exit code 2 (``sim.cli.main``); here neither has to import the other.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Column

console = Console()


class UserError(Exception):
    """A mistake in the command's input: reported without a traceback, exit code 2."""


def progress() -> Progress:
    """The transient progress bar of long commands (description, bar, n/total, elapsed)."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )


def status_line() -> Progress:
    """The transient one-line status of commands that run until stopped (a spinner, elapsed
    time, and a description that folds rather than being cut)."""
    return Progress(
        SpinnerColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}", table_column=Column(overflow="fold")),
        console=console,
        transient=True,
    )


def config_error_exit(exc: Exception):
    """Print a ConfigError as one unwrapped line on stderr and exit with code 2.

    Why ``SystemExit`` and not ``typer.Exit(2)``: ``main`` runs the app with
    ``standalone_mode=False``, where click returns a ``typer.Exit`` code instead of exiting, so
    the code would be lost; ``SystemExit`` also gives exit code 2 under typer's CliRunner.
    """
    from rich.markup import escape

    from placement.messages import one_line

    Console(stderr=True).print(f"[red]error:[/red] {escape(one_line(exc))}", soft_wrap=True)
    raise SystemExit(2)


def load_config_or_exit(config: Path):
    """The config at ``config``, or its ``ConfigError`` as one line and exit code 2."""
    from sim.config import ConfigError, load_config

    try:
        return load_config(config)
    except ConfigError as exc:
        config_error_exit(exc)
