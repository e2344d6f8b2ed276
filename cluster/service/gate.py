"""Who may change a running service now, and what the control plane says while it waits.

Why a collaborator of its own: a service's commands and its micro-batches take turns on the
same running state (one command at a time, and only between micro-batches), and before this
gate a command simply waited for its turn, holding the command lock, and ``status`` waited
behind it: one stuck micro-batch froze the control API.  The gate bounds every wait:

* a command (``exclusive``) waits at most ``wait_s`` for the command lock and then for the
  micro-batch in progress, and is refused with ``Unavailable`` (HTTP 503, one line saying
  what it waited for) rather than hanging; a node the data path stopped waiting for
  (silent and behind, or stuck: ``cluster.deployment.liveness``) refuses commands at once,
  since changing trees needs every node's answer;
* ``status`` (``peek``) never waits more than ``peek_s``: without the lock it answers from the
  last status it could compute, with ``data_path`` (what holds it, for how long, which nodes
  are silent) always fresh.

Timeline of a command while a node is stuck::

    t=0   micro-batch starts; node-1 stops answering
    t=2   node-1 silent: the micro-batch stops waiting for it and ends; commands refused 503
    t=30  node-1 declared stuck (call_timeout_s), killed, recovered at the next micro-batch
    t=31  commands accepted again
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from cluster.service.refusals import Unavailable


class Gate:
    """The command lock with bounded waits, and what holds the data path (module docstring).
    ``stream``: the service's directory stream (its micro-batch lock); ``dep``: the
    deployment (its silent nodes)."""

    def __init__(self, stream, dep, wait_s: float = 10.0, peek_s: float = 0.5):
        self.stream = stream
        self.dep = dep
        self.wait_s = float(wait_s)
        self.peek_s = float(peek_s)
        self.lock = threading.Lock()  # one command at a time
        self.holder: tuple[str, float] | None = None  # the command running and since when

    @contextmanager
    def exclusive(self, command: str) -> Iterator[None]:
        """Hold the command lock and the stream between micro-batches for ``command``, or
        refuse it (``Unavailable``) after ``wait_s``, or at once while a node is silent."""
        t0 = time.monotonic()
        if not self.lock.acquire(timeout=self.wait_s):
            raise Unavailable(f"{command}: {self.busy_line('waited', time.monotonic() - t0)}")
        try:
            left = max(0.0, self.wait_s - (time.monotonic() - t0))
            with self.stream.between_batches(timeout=left) as got:
                if not got:
                    raise Unavailable(
                        f"{command}: {self.busy_line('waited', time.monotonic() - t0)}"
                    )
                self.dep.catch_up_answering()  # before the stream's idle tick does
                held = self.held_back()
                if held:
                    raise Unavailable(f"{command}: {self.silent_line(held)}; try again")
                self.holder = (command, time.monotonic())
                try:
                    yield
                finally:
                    self.holder = None
        finally:
            self.lock.release()

    @contextmanager
    def command(self, command: str) -> Iterator[None]:
        """The command lock alone (a command that does not touch the trees: ``stop``,
        ``autoscale``), refused (``Unavailable``) after ``wait_s``."""
        t0 = time.monotonic()
        if not self.lock.acquire(timeout=self.wait_s):
            raise Unavailable(f"{command}: {self.busy_line('waited', time.monotonic() - t0)}")
        try:
            yield
        finally:
            self.lock.release()

    @contextmanager
    def peek(self) -> Iterator[bool]:
        """The command lock for a read if it comes within ``peek_s``: yields whether it
        came (``False``: answer from what is known without it)."""
        got = self.lock.acquire(timeout=self.peek_s)
        try:
            yield got
        finally:
            if got:
                self.lock.release()

    @contextmanager
    def unless_busy(self) -> Iterator[bool]:
        """The command lock if free now (the autoscale policy between micro-batches: a
        command waiting evaluates after itself)."""
        got = self.lock.acquire(blocking=False)
        try:
            yield got
        finally:
            if got:
                self.lock.release()

    # -- what holds the data path -----------------------------------------------------------
    def silent_nodes(self) -> dict[str, dict[str, Any]]:
        """The nodes silent now or behind, with their health reports."""
        out = {}
        for nid, v in self.dep.vitals().items():
            if v.get("behind") or v.get("health") in ("silent", "stuck"):
                out[nid] = v
        return out

    def held_back(self) -> dict[str, dict[str, Any]]:
        """The nodes a command cannot change now: behind (the data path stopped waiting for
        them) or declared stuck (being recovered).  A node merely slow to answer its health
        check (loading kernels) is waited for, within the health check's deadline."""
        return {
            nid: v
            for nid, v in self.silent_nodes().items()
            if v.get("behind") or v.get("health") == "stuck"
        }

    def silent_line(self, silent: dict[str, dict[str, Any]]) -> str:
        t = self.dep.liveness.call_timeout_s
        parts = [
            f"{nid} silent for {float(v.get('silent_s') or 0.0):.1f} s"
            + (f" in {v['call']}" if v.get("call") else "")
            for nid, v in sorted(silent.items())
        ]
        return (
            f"{', '.join(parts)} (declared stuck and restarted at cluster.call_timeout_s: {t:g} s)"
        )

    def busy_line(self, verb: str, waited: float) -> str:
        """One line: what the data path is doing, after ``verb`` ``waited`` seconds."""
        d = self.describe()
        what = d["busy"] or "nothing"
        line = f"{verb} {waited:.1f} s for the data path (busy: {what}"
        if d["busy_s"] is not None:
            line += f" for {d['busy_s']:.1f} s"
        line += ")"
        silent = self.silent_nodes()
        if silent:
            line += f"; {self.silent_line(silent)}"
        return line + "; try again"

    def describe(self) -> dict[str, Any]:
        """``data_path`` of the status: what holds it (a command, a micro-batch) and since
        when, the nodes silent, stuck or behind."""
        now = time.monotonic()
        holder = self.holder
        batch = self.stream.batch_started
        if holder is not None:
            busy, since = holder
        elif batch is not None:
            busy, since = "micro-batch", batch
        else:
            busy, since = None, None
        silent = self.silent_nodes()
        return {
            "busy": busy,
            "busy_s": None if since is None else now - since,
            "silent": sorted(n for n, v in silent.items() if v.get("health") != "stuck"),
            "stuck": sorted(n for n, v in silent.items() if v.get("health") == "stuck"),
            "behind": sorted(n for n, v in silent.items() if v.get("behind")),
            "call_timeout_s": self.dep.liveness.call_timeout_s,
        }
