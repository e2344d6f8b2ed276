"""SIGTERM does what Ctrl-C does (cluster/runtime/signals.py), in this process, without Ray:
handed to the SIGINT handler in force, an interrupt naming SIGTERM, both signals to one
handler while a stream runs, and every handler found put back afterwards.  (That it wins over
Ray's own SIGTERM handler is checked on a real ``weaveplace serve``:
tests/cluster/service/test_sigterm.py.)"""

from __future__ import annotations

import signal
import threading

import pytest

from cluster.runtime.signals import (
    Stopped,
    on_stop_signals,
    reinstall_sigterm_as_sigint,
    signal_name,
    sigterm_as_sigint,
)


@pytest.fixture(autouse=True)
def _main_thread_and_handlers_back():
    assert threading.current_thread() is threading.main_thread()
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, h in before.items():
        signal.signal(s, h)


def test_sigterm_is_an_interrupt_naming_it_and_the_handler_goes_back():
    before = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with sigterm_as_sigint():
        with pytest.raises(Stopped) as err:
            signal.raise_signal(signal.SIGTERM)
        assert err.value.signum == signal.SIGTERM and str(err.value) == "SIGTERM"
        assert isinstance(err.value, KeyboardInterrupt)  # every finally on the way out runs
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as ray.init does (it calls sys.exit)
        reinstall_sigterm_as_sigint()
        with pytest.raises(Stopped):
            signal.raise_signal(signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is before


def test_sigterm_follows_the_sigint_handler_in_force():
    got = []
    with sigterm_as_sigint():
        signal.signal(signal.SIGINT, lambda s, f: got.append(s))  # a graceful stop
        signal.raise_signal(signal.SIGTERM)
        assert got == [signal.SIGTERM]
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a teardown that must complete
        signal.raise_signal(signal.SIGTERM)
        assert got == [signal.SIGTERM]

        def pyspark_like(signum, frame):  # PySpark's: cancel jobs, then KeyboardInterrupt
            got.append("cancelled")
            raise KeyboardInterrupt

        signal.signal(signal.SIGINT, pyspark_like)
        with pytest.raises(Stopped) as err:
            signal.raise_signal(signal.SIGTERM)
        assert got[-1] == "cancelled" and err.value.signum == signal.SIGTERM


def test_one_handler_for_both_stop_signals_while_the_block_runs():
    got = []
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with on_stop_signals(lambda s, f: got.append(signal_name(s))):
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGINT)
    assert got == ["SIGTERM", "SIGINT"]
    assert {s: signal.getsignal(s) for s in before} == before


def test_directory_stream_stops_on_the_first_signal_and_aborts_on_the_second():
    """``DirectoryStream``'s handler: the first signal asks for a graceful stop naming it (the
    stop reason in metrics.json and serve's stop event), the second aborts at once."""
    from cluster.feeds.directory import DirectoryStream

    stream = DirectoryStream.__new__(DirectoryStream)  # the handler's state only
    stream._stop_reason, stream._interrupts = None, 0
    with stream._signal_stops():
        signal.raise_signal(signal.SIGTERM)
        assert stream._stop_reason == "SIGTERM"
        with pytest.raises(Stopped) as err:
            signal.raise_signal(signal.SIGINT)
        assert err.value.signum == signal.SIGINT
    assert stream._stop_reason == "SIGTERM"


def test_a_stop_is_not_logged_as_an_error(caplog):
    """py4j logs a KeyboardInterrupt in one of its calls with its traceback (root logger); a
    stop by a signal is asked for, not an error: not logged while the handlers are in place.
    Other errors still are, and afterwards everything is."""
    import logging

    def log_stop():
        try:
            raise Stopped(signal.SIGTERM)
        except KeyboardInterrupt:
            logging.exception("KeyboardInterrupt while sending command.")

    def log_broken_pipe(logger):
        """py4j's shutdown of the connection the interrupt left half-used (its own logger)."""
        try:
            try:
                raise Stopped(signal.SIGTERM)
            except KeyboardInterrupt:
                raise BrokenPipeError(32, "Broken pipe")  # noqa: B904 (chained implicitly)
        except OSError:
            logger.exception("Exception occurred while shutting down connection")

    clientserver = logging.getLogger("py4j.clientserver")
    with sigterm_as_sigint(), on_stop_signals(lambda s, f: None):
        log_stop()
        log_broken_pipe(clientserver)
        logging.error("a real error")
        clientserver.error("a real py4j error")
    assert [r.getMessage() for r in caplog.records] == ["a real error", "a real py4j error"]
    log_stop()
    assert caplog.records[-1].getMessage() == "KeyboardInterrupt while sending command."
    log_broken_pipe(clientserver)
    assert caplog.records[-1].getMessage() == "Exception occurred while shutting down connection"


def test_an_error_on_the_way_out_of_an_abort_is_the_abort():
    """After a stop signal aborted the block, an error its cleanup meets (py4j's "Answer from
    Java side is empty") is raised as the ``Stopped``, naming the signal; an error in a block
    where no abort happened is itself, whatever aborted earlier in the process (a stale stop
    must not turn a later run's error into an abort: the CLI and its tests share a process)."""
    from cluster.runtime.signals import errors_after_a_stop_are_the_stop, stop_in

    with pytest.raises(Stopped) as got:
        with errors_after_a_stop_are_the_stop():
            try:
                raise Stopped(signal.SIGTERM)
            finally:
                raise RuntimeError("Answer from Java side is empty")  # noqa: B012
    assert got.value.signum == signal.SIGTERM
    assert str(got.value.__cause__) == "Answer from Java side is empty"
    with pytest.raises(RuntimeError, match="a real error"):  # the stop above is stale here
        with errors_after_a_stop_are_the_stop():
            raise RuntimeError("a real error")
    try:
        try:
            raise Stopped(signal.SIGINT)
        except KeyboardInterrupt:
            raise BrokenPipeError(32, "Broken pipe")  # noqa: B904 (chained implicitly)
    except OSError as e:
        assert stop_in(e).signum == signal.SIGINT
    assert stop_in(RuntimeError("alone")) is None
