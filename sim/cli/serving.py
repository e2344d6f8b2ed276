"""``weaveplace serve`` and ``ctl``: a deployment that runs until stopped, and one command sent
to it (the work is in ``sim.serve_cli`` and ``sim.serve_start``; these are the Typer
entries).
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from sim.cli.base import UserError, console


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


def ctl(
    run_dir: Path = typer.Argument(..., help="The deployment's run directory."),
    command: str = typer.Argument(
        ...,
        help="status | add-queries FILE.yaml | remove-queries "
        "ID... | add-node | retire-node ID | rebalance | "
        "autoscale on|off | stop",
    ),
    args: list[str] | None = typer.Argument(None, help="The command's arguments."),
    node_id: str | None = typer.Option(None, "--id", help="add-node: the new node's id."),
    capacity: float | None = typer.Option(None, "--capacity", help="add-node: capacity."),
    flush: bool = typer.Option(
        False,
        "--flush",
        help="stop: end of input for good (answer every pending window; no resume).",
    ),
    timeout: float = typer.Option(
        60.0, "--timeout", min=0.1, help="Seconds to wait for the deployment's reply."
    ),
):
    """Send one command to a running deployment and print its JSON reply."""
    from sim.serve_cli import ServeError
    from sim.serve_cli import ctl as send

    try:
        reply = send(run_dir, command, args or [], node_id, capacity, flush, timeout)
    except ServeError as exc:
        raise UserError(str(exc)) from None
    print(json.dumps(reply, indent=1))
