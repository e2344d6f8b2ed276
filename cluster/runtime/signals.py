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
        _stops[0] += 1
        _stops[1] = signum


_stops: list = [0, None]  # Stopped raised in this process so far, the last one's signal


def stopped_by() -> int | None:
    """The signal of the last ``Stopped`` raised in this process (None: none was): typer turns
    every KeyboardInterrupt into exit code 130, the command line says which signal it was."""
    return _stops[1]


@contextmanager
def errors_after_a_stop_are_the_stop() -> Iterator[None]:
    """An error escaping the block after a stop signal aborted it (a ``Stopped`` raised
    inside the block) is raised as that ``Stopped``, chained: e.g. py4j's "Answer from Java
    side is empty" from a cleanup's call to a JVM the interrupted call left going away.  The
    abort was asked for; what broke on its way out is its consequence, not a new error."""
    seen = _stops[0]
    try:
        yield
    except Exception as exc:
        if _stops[0] == seen:
            raise
        raise Stopped(_stops[1]) from exc


def stop_in(exc: BaseException | None) -> Stopped | None:
    """The ``Stopped`` that ``exc`` is, or was raised while handling (a broken pipe py4j
    meets when it closes the connection the interrupt left half-used); None if neither."""
    seen = 0
    while exc is not None and seen < 16:
        if isinstance(exc, Stopped):
            return exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


class _QuietStops(logging.Filter):
    """Drops log records of a ``Stopped`` on its way out: py4j logs "KeyboardInterrupt while
    sending command", or the broken pipe it then meets shutting the connection down, with
    its traceback when a second signal lands in one of its calls; that stop was asked for,
    not an error."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and stop_in(record.exc_info[1]) is not None)


# A logger's filters see only what is logged on that logger, not what its children propagate:
# py4j's records are quietened on the loggers that log them.
_QUIET_LOGGERS = ("", "py4j", "py4j.java_gateway", "py4j.clientserver")


_QUIET = _QuietStops()
_quiet_depth = [0]  # blocks that want it (they nest: a stream inside a run)


@contextmanager
def _quiet_stops() -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in _QUIET_LOGGERS]
    _quiet_depth[0] += 1
    for log in loggers:
        log.addFilter(_QUIET)  # added once however deep (Filterer keeps one of each)
    try:
        yield
    finally:
        _quiet_depth[0] -= 1
        if not _quiet_depth[0]:
            for log in loggers:
                log.removeFilter(_QUIET)


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
