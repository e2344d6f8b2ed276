"""The ``weaveplace`` command line (typer + rich): ``app`` with every command, and ``main``.

User mistakes end with one clear message and exit code 2, never a traceback.  One module per
command group: ``plans`` (plan, verify-plan, shed), ``simulation`` (simulate), ``runs``
(validate, run), ``serving`` (serve, ctl), ``reports`` (report), ``tour`` (quickstart,
warmup), ``data`` (data convert); ``sim.bench.cli`` adds ``bench``.
"""

from __future__ import annotations

import errno
import sys

import typer

from sim.cli.base import UserError, console

__all__ = ["UserError", "app", "main"]


def __getattr__(name: str):
    """``app``, with every command registered, built on first use.

    Why lazily: ``sim.bench.cli`` (the app's ``bench`` group) imports ``sim.cli.base``, which
    runs this package first; importing every command here would import ``sim.bench.cli`` again
    half-way through its own import."""
    if name != "app":
        raise AttributeError(f"module 'sim.cli' has no attribute {name!r}")
    from sim.cli.commands import app

    return app


def main() -> None:
    """Entry point: run the app and turn user errors into one line and exit code 2."""
    from placement.numba_cache import ensure_cache_dir

    ensure_cache_dir()  # before numba is imported: the cache `make` filled (weaveplace warmup)
    app = __getattr__("app")  # every command registered
    try:
        rc = app(standalone_mode=False)
        if rc == 130:  # typer's code for a KeyboardInterrupt: Ctrl-C, or a stop signal
            _exit_if_stopped_by_a_signal()
        if isinstance(rc, int) and rc:
            sys.exit(rc)
    except UserError as exc:  # one line, unwrapped, long values cut (placement.messages)
        from rich.markup import escape

        from placement.messages import one_line

        console.print(f"[red]error:[/red] {escape(one_line(exc))}", soft_wrap=True)
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except OSError as exc:
        if exc.errno != errno.ENAMETOOLONG:
            raise
        # a path argument the OS refuses (a config's paths are checked with their key,
        # sim.config.paths): one line naming it
        from rich.markup import escape

        from placement.messages import short_repr

        console.print(
            f"[red]error:[/red] {escape(short_repr(str(exc.filename)))}: {exc.strerror}",
            soft_wrap=True,
        )
        sys.exit(2)
    except typer.Abort:
        console.print("[red]aborted")
        sys.exit(130)
    except Exception as exc:  # click usage errors carry their own message
        import click

        _exit_if_an_abort_caused(exc)  # an error on the way out of an abort: the abort

        # typer raises its own copy of click's exceptions (a wrong option type: BadParameter)
        usage = (click.ClickException, typer.TyperException)
        if isinstance(exc, usage) and hasattr(exc, "show"):
            from placement.messages import one_line

            exc.message = one_line(exc.message)  # an option's long value: its start and length
            exc.show()
            sys.exit(2)
        raise


def _exit_if_an_abort_caused(exc: BaseException) -> None:
    """``exc`` was raised while a stop signal's abort (``Stopped``) went out: say which
    signal, exit 128 + its number, as for the abort itself."""
    signals = sys.modules.get("cluster.runtime.signals")  # not imported: no run, no Stopped
    stop = signals.stop_in(exc) if signals is not None else None
    if stop is not None:
        import signal

        console.print(f"[red]aborted[/red] by {signal.Signals(stop.signum).name}")
        sys.exit(128 + stop.signum)


def _exit_if_stopped_by_a_signal() -> None:
    """A run ended at once by SIGTERM (``cluster.runtime.signals.Stopped``): say so, exit 128 +
    the signal's number (typer turns every KeyboardInterrupt into 130)."""
    signals = sys.modules.get("cluster.runtime.signals")  # not imported: no run, no Stopped
    signum = signals.stopped_by() if signals is not None else None
    if signum:
        import signal

        console.print(f"[red]aborted[/red] by {signal.Signals(signum).name}")
        sys.exit(128 + signum)
