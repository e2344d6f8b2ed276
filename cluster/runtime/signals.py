"""The stop signals: SIGTERM means what Ctrl-C (SIGINT) means, in every phase of a run.

Why a module: ``kill PID`` (what systemd, Kubernetes and Docker send) must stop a run as Ctrl-C
does, but Ray takes SIGTERM over in the driver at ``ray.init``: a Python handler that calls
``sys.exit``, then the core worker's C++ handler on top of it, which prints a stack
(``*** SIGTERM received ...``) and ends the process with no flush and no saved state.  A
handler installed after ``ray.init`` wins (``signal.signal`` puts Python's own C handler back),
so ``sigterm_as_sigint`` is entered once Ray runs (``cluster.runs.startup.started_runtimes``)
and hands SIGTERM to whatever handles SIGINT at that moment: the default (``KeyboardInterrupt``),
PySpark's, a directory stream's graceful stop (``cluster.feeds.directory``) or a run's guard
(``cluster.runs.directory_run``).  Those that stop on a signal install theirs for both signals
(``on_stop_signals``) and name the signal they got (``signal_name``).

An abort by a stop signal raises ``Stopped`` (a ``KeyboardInterrupt`` naming the signal), so
the command line can say which signal ended the run and exit with 128 + its number; while the
handlers are in place such a stop is not logged as an error (py4j logs an interrupt that lands
in one of its calls, with its traceback).
Signal handlers can only be set in the main thread: elsewhere all of this does nothing.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def signal_name(signum: int) -> str:
    """``SIGINT``, ``SIGTERM``, ... for a signal number."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class Stopped(KeyboardInterrupt):
    """A run ended at once by a stop signal (``signum``): a ``KeyboardInterrupt``, so every
    ``finally`` and context manager on the way out runs, naming the signal."""

    def __init__(self, signum: int):
        super().__init__(signal_name(signum))
        self.signum = signum
        _last_stop[0] = signum


_last_stop: list[int | None] = [None]


def stopped_by() -> int | None:
    """The signal of the last ``Stopped`` raised in this process (None: none was): typer turns
    every KeyboardInterrupt into exit code 130, the command line says which signal it was."""
    return _last_stop[0]


class _QuietStops(logging.Filter):
    """Drops log records of a ``Stopped`` on its way out, or of an error raised while handling
    one: py4j logs "KeyboardInterrupt while sending command" with its traceback on the root
    logger when a second signal lands in one of its calls, and, closing the interrupted
    connection, a broken pipe to a JVM already going away; that stop was asked for, not an
    error."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        seen = 0
        while exc is not None and seen < 8:  # the exception, then what it was handling
            if isinstance(exc, Stopped):
                return False
            exc, seen = exc.__cause__ or exc.__context__, seen + 1
        return True


_QUIET = _QuietStops()
_quiet_depth = [0]  # blocks that want it (they nest: a stream inside a run)


@contextmanager
def _quiet_stops() -> Iterator[None]:
    root = logging.getLogger()
    _quiet_depth[0] += 1
    root.addFilter(_QUIET)  # added once however deep (Filterer keeps one of each)
    try:
        yield
    finally:
        _quiet_depth[0] -= 1
        if not _quiet_depth[0]:
            root.removeFilter(_QUIET)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def on_stop_signals(handler: Callable[[int, object], None]) -> Iterator[None]:
    """``handler(signum, frame)`` for SIGINT and SIGTERM while the block runs, the handlers
    found restored after it (in the main thread; elsewhere nothing is installed)."""
    if not _main_thread():
        yield
        return
    previous = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        with _quiet_stops():
            yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)


def _terminate_as_interrupt(signum: int, frame) -> None:
    """SIGTERM handed to the SIGINT handler in force; an interrupt it raises names SIGTERM."""
    h = signal.getsignal(signal.SIGINT)
    if h == signal.SIG_IGN:
        return
    if not callable(h):  # SIG_DFL, or a handler set outside Python
        raise Stopped(signum)
    try:
        h(signum, frame)
    except Stopped:
        raise
    except KeyboardInterrupt as e:  # the default handler's, PySpark's: say it was SIGTERM
        raise Stopped(signum) from e


@contextmanager
def sigterm_as_sigint() -> Iterator[None]:
    """While the block runs, SIGTERM does what SIGINT does (see the module doc).  Enter it
    after ``ray.init`` (Ray replaces the SIGTERM handler there) and before anything else is
    started; the handler found before is put back at the end (main thread only)."""
    if not _main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, _terminate_as_interrupt)
    try:
        with _quiet_stops():
            yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def reinstall_sigterm_as_sigint() -> None:
    """Put SIGTERM's hand-over back after something replaced it (``ray.init`` on a Ray this
    process did not start before: the run owns SIGTERM's meaning while it runs)."""
    if _main_thread():
        signal.signal(signal.SIGTERM, _terminate_as_interrupt)
