"""``cluster.runtime.collector``: the cyclic collector off while any pause lasts, back on after
the last one only if it was on before the first; ``freeze_start`` freezes what exists, and
``frozen`` only until the outermost one ends."""

from __future__ import annotations

import gc
import threading

import pytest

from cluster.runtime import collector


@pytest.fixture(autouse=True)
def _collector_left_on():
    yield
    gc.enable()
    gc.unfreeze()


def test_nested_and_failing_pauses_turn_it_back_on_once():
    gc.enable()
    with collector.paused():
        assert not gc.isenabled()
        with pytest.raises(RuntimeError):
            with collector.paused():
                raise RuntimeError("a refused command")
        assert not gc.isenabled()  # the outer pause still holds
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off():
    gc.disable()
    with collector.paused():
        pass
    assert not gc.isenabled()


def test_overlapping_pauses_on_two_threads():
    """A long command and a short status-like request overlapping: the collector comes back
    only when the long one ends."""
    gc.enable()
    entered, release = threading.Event(), threading.Event()
    seen = []

    def long_command():
        with collector.paused():
            entered.set()
            release.wait(10)

    t = threading.Thread(target=long_command)
    t.start()
    entered.wait(10)
    with collector.paused():
        pass
    seen.append(gc.isenabled())  # the short one ended first
    release.set()
    t.join(10)
    assert seen == [False] and gc.isenabled()


def test_freeze_start_freezes_what_exists():
    gc.unfreeze()
    kept = [[i] for i in range(1000)]
    n = collector.freeze_start()
    assert n >= len(kept) and gc.get_freeze_count() > 0  # frees may lower the count since


def test_frozen_holds_until_the_outermost_ends():
    gc.unfreeze()
    with collector.frozen() as n:
        assert n > 0 and gc.get_freeze_count() > 0
        with collector.frozen():
            pass
        assert gc.get_freeze_count() > 0  # the inner one left the outer's frozen
        with pytest.raises(RuntimeError):
            with collector.frozen():
                raise RuntimeError("a run that failed")
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0
