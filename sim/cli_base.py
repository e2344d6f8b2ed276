"""What every ``weaveplace`` command shares: the console, the user-mistake error, the progress bar.

Why its own module: the main commands (``sim.cli``) and the benchmark commands
(``sim.bench.cli``) both print through one console and turn a ``UserError`` into one line and
exit code 2 (``sim.cli.main``); here neither has to import the other.
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

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
