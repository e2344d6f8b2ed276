"""What a node actor tells the driver's health check: which call it runs, and whether it moves.

Why a record of its own: Ray has no per-actor liveness check (a ``ray.get`` timeout only stops
waiting), and a stuck actor on a healthy host (SIGSTOP, a deadlock, a GC storm) is not dead to
Ray.  The driver therefore asks each actor ``health()`` on a concurrency group of its own (a
second thread in the actor, ``cluster.node.actor``), so the answer never waits behind the data
path; the answer says which data call runs, since when, and when it last made progress (a
tree folded a batch, a tree was snapshotted or restored).  A call that is slow but working (a
big snapshot, a re-plan's many trees) keeps moving; a deadlocked one does not; a stopped
process does not answer at all.  The driver side is ``cluster.deployment.liveness``.

Timeline of one data call, as the health thread sees it::

    begin("ingest") -- step() -- step() -- ... -- end()
    call="ingest", call_s grows; since_progress_s resets at each step; after end: call=None

The fields are plain attributes written by the data thread and read by the health thread:
each read is atomic under the GIL, and a report mixing two moments of one call is harmless
(it only ever decides how long the node was quiet).
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: methods of a node class that are not data calls: the health call itself, and the cheap
#: questions a driver asks at any time
UNTRACKED = frozenset({"health", "ping", "ray_node_id", "vitals"})


class CallTracker:
    """The data call a node runs now and its last progress (module docstring)."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.call: str | None = None
        self.started = 0.0
        self.progressed = 0.0
        self.done = 0  # data calls finished
        self.depth = 0  # a data method calling another (ingest -> warmup) is one call
        self.exempt = 0  # inside ``compiling()``: progress is not measured

    def begin(self, name: str) -> None:
        self.depth += 1
        if self.depth == 1:
            now = self.clock()
            self.call, self.started, self.progressed = name, now, now
        else:
            self.step()

    def step(self) -> None:
        """The running call made progress (one tree did its part)."""
        self.progressed = self.clock()

    @contextmanager
    def compiling(self) -> Iterator[None]:
        """A stretch whose progress cannot be seen (numba compiling or loading a tree's
        kernels: seconds, a minute without a warm cache): not taken for a stall.  A stopped
        process still shows, by not answering at all."""
        self.exempt += 1
        try:
            yield
        finally:
            self.exempt -= 1
            self.step()

    def end(self) -> None:
        self.depth -= 1
        if self.depth == 0:
            self.call = None
            self.done += 1

    def report(self) -> dict[str, Any]:
        """``call`` (None when idle), ``call_s`` (how long it runs), ``since_progress_s``
        (0 when idle) and ``calls_done``."""
        now = self.clock()
        call, started, progressed = self.call, self.started, self.progressed
        busy = call is not None
        return {
            "call": call,
            "call_s": now - started if busy else 0.0,
            "since_progress_s": max(0.0, now - progressed) if busy and not self.exempt else 0.0,
            "calls_done": self.done,
        }


def tracked_method(name: str, fn):
    """``fn`` wrapped so that ``self.calls`` (a ``CallTracker``) sees it begin and end."""

    @functools.wraps(fn)
    def call(self, *args, **kwargs):
        self.calls.begin(name)
        try:
            return fn(self, *args, **kwargs)
        finally:
            self.calls.end()

    return call


def data_methods(core: type) -> dict[str, Any]:
    """The public plain methods of a node class that are data calls (everything but
    ``UNTRACKED``), wrapped by ``tracked_method``: what ``cluster.node.actor`` overrides in
    the actor class."""
    out = {}
    for name in dir(core):
        if name.startswith("_") or name in UNTRACKED:
            continue
        attr = inspect.getattr_static(core, name)
        if inspect.isfunction(attr):
            out[name] = tracked_method(name, attr)
    return out
