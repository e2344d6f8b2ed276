"""``weaveplace serve CONFIG`` / ``serve --resume RUN_DIR`` and ``weaveplace ctl RUN_DIR CMD``:
the commands' checks, progress display and replies; the start-up itself is ``sim.serve_start``.

``serve`` plans the config's queries as ``weaveplace run`` does (one optimizer, one cluster
layout), starts Ray and Spark, and runs ``cluster.service.service.Service`` over ``data.directory``
until ``ctl ... stop`` (or Ctrl-C or SIGTERM; each keeps the state for ``--resume``, and so
does a second signal, which ends it at once).  ``ctl`` reads
``RUN_DIR/control.json`` and prints the JSON reply; a refused command prints its one-line reason
and exits 2.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import yaml

from placement.messages import one_line, short_repr
from sim.serve_start import ServeError, prepare, run_service

__all__ = ["COMMANDS", "ServeError", "ctl", "read_queries_file", "serve_command"]

COMMANDS = (
    "status",
    "add-queries",
    "remove-queries",
    "add-node",
    "retire-node",
    "rebalance",
    "autoscale",
    "stop",
)


def read_queries_file(path: Path) -> list[dict]:
    """A YAML file of queries: a list, ``{queries: [...]}`` or a config's
    ``{workload: {queries: [...]}}`` (``safe_load`` only)."""
    p = Path(path)
    if not p.is_file():
        raise ServeError(f"add-queries: file not found: {str(p)!r}")
    try:
        raw = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise ServeError(f"add-queries: {p}: invalid YAML ({one_line(str(e))})") from None
    if isinstance(raw, dict) and isinstance(raw.get("workload"), dict):
        raw = raw["workload"]
    if isinstance(raw, dict):
        raw = raw.get("queries")
    if not isinstance(raw, list) or not raw:
        raise ServeError(
            f"add-queries: {p}: expected a list of queries (or queries: [...]), "
            "the schema of config workload.queries"
        )
    return raw


def ctl(
    run_dir: Path,
    command: str,
    args: list[str],
    node_id: str | None = None,
    capacity: float | None = None,
    flush: bool = False,
    timeout: float = 60.0,
) -> Any:
    """Send one command; returns the reply (``ServeError`` with the one-line reason).
    ``timeout``: seconds to wait for the reply (the deployment answers a busy command with
    503 after its own wait, ``cluster.service.gate``; this bounds the rest)."""
    from functools import partial

    from cluster.service.control import ControlError
    from cluster.service.control import call as send

    call = partial(send, timeout=timeout)
    args = list(args or [])
    try:
        if command == "status":
            _no_args(command, args)
            return call(run_dir, "GET", "/status")
        if command == "add-queries":
            if len(args) != 1:
                raise ServeError("add-queries: give one FILE.yaml with the queries")
            return call(run_dir, "POST", "/add-queries", {"queries": read_queries_file(args[0])})
        if command == "remove-queries":
            if not args:
                raise ServeError("remove-queries: give the query ids to remove")
            return call(run_dir, "POST", "/remove-queries", {"ids": args})
        if command == "add-node":
            _no_args(command, args)
            return call(run_dir, "POST", "/add-node", {"id": node_id, "capacity": capacity})
        if command == "retire-node":
            if len(args) != 1:
                raise ServeError("retire-node: give the id of the node to retire")
            return call(run_dir, "POST", "/retire-node", {"id": args[0]})
        if command == "rebalance":
            _no_args(command, args)
            return call(run_dir, "POST", "/rebalance", {})
        if command == "autoscale":
            if args not in (["on"], ["off"]):
                raise ServeError("autoscale: give on or off")
            return call(run_dir, "POST", "/autoscale", {"on": args[0] == "on"})
        if command == "stop":
            _no_args(command, args)
            return call(run_dir, "POST", "/stop", {"flush": bool(flush)})
    except ControlError as e:  # the deployment's messages name the command already
        msg = str(e)
        raise ServeError(msg if msg.startswith(command) else f"{command}: {msg}") from None
    raise ServeError(f"unknown command {short_repr(command)}; allowed: {', '.join(COMMANDS)}")


def _no_args(command: str, args: list[str]) -> None:
    if args:
        raise ServeError(f"{command}: takes no arguments, got {args}")


def serve_command(config: Path | None, resume: Path | None, console, user_error) -> None:
    """The ``serve`` command: checks, a one-line progress display, a summary at the end."""
    from rich.markup import escape

    from cluster.deployment.specs import DeploymentError
    from cluster.errors import StreamError
    from cluster.runtime.signals import errors_after_a_stop_are_the_stop
    from sim.cli.base import status_line

    try:
        cfg, run_dir, state, text, base = prepare(config, resume)
    except ServeError as e:
        raise user_error(str(e)) from None
    bar = status_line()
    console.print(
        f"serving {escape(str(run_dir))}: control with `weaveplace ctl "
        f"{escape(str(run_dir))} status|add-queries FILE|remove-queries ID...|"
        "add-node|retire-node ID|rebalance|autoscale on|off|stop`",
        soft_wrap=True,
    )
    with bar:
        task = bar.add_task("starting Ray and Spark", total=None)
        try:
            with errors_after_a_stop_are_the_stop():
                stats = run_service(
                    cfg,
                    run_dir,
                    state,
                    text,
                    base,
                    progress=lambda st: bar.update(task, description=st.line()),
                    say=lambda line: console.print(escape(line), soft_wrap=True),
                )
        except ServeError as e:
            raise user_error(str(e)) from None
        except (DeploymentError, StreamError) as e:
            raise user_error(f"serve: {e}") from None
        except (OSError, ConnectionError) as e:  # e.g. Ray cannot start (socket path, ports)
            raise user_error(f"serve: cannot start: {one_line(str(e))}") from None
        except KeyboardInterrupt as e:  # while starting, or a second signal while stopping
            bar.stop()
            signum = getattr(e, "signum", signal.SIGINT)  # cluster.runtime.signals.Stopped
            name = signal.Signals(signum).name
            if (run_dir / "state" / "service.json").is_file():  # saved after every micro-batch
                console.print(
                    f"[red]stopped at once[/red] by {name}: the state saved after the last "
                    f"micro-batch is kept; resume with `weaveplace serve --resume "
                    f"{escape(str(run_dir))}`",
                    soft_wrap=True,
                )
            else:
                console.print(f"[red]interrupted[/red] by {name} while starting; nothing was fed")
            raise SystemExit(128 + signum) from None
    console.print(
        f"stopped ({stats.stop_reason}): {stats.files} files, {stats.rows:,} rows, "
        f"{stats.answers:,} answers, {stats.late:,} late; resume with `weaveplace "
        f"serve --resume {escape(str(run_dir))}`",
        soft_wrap=True,
    )
