"""The driver's health check of its node actors: silent nodes, stuck nodes, their deadline.

Why a thread of its own: Ray declares a node dead when its host stops answering, but an actor
stuck on a healthy host (SIGSTOP, a deadlock, a paused container) is alive to Ray, and a
``ray.get`` on its calls waits forever.  ``Liveness`` asks every actor ``health()`` about once
a second (``interval_s``), on the actor's own health thread (``cluster.node.liveness``), and
keeps the last answer: it never waits on a data call, so it sees a stuck node while the data
path is blocked on it.

A node's *silence* is the longer of (a) how long its current health call has gone unanswered
(*quiet*: a stopped process, a hung host, a native call holding the GIL) and (b) how long, by
its last answer, the data call it runs has made no progress (*stalled*: a deadlock).
Thresholds, all derived from ``call_timeout_s`` (``cluster.call_timeout_s``):

* the node is *silent* when quiet for ``silent_after_s`` (the smaller of 2 s and a fifth of
  it) or stalled for half of ``call_timeout_s`` (a call between two steps may take seconds:
  loading a tree's kernels); the deployment stops waiting for it (its batches go to the
  replay log, it skips checkpoints, ``Deployment.wait(..., may_skip=True)``) and the other
  nodes go on.  Silence is soft: a node that answers again catches up from the log;
* silent either way for ``call_timeout_s``, the node is declared *stuck*: its actor is
  killed (``ray.kill``), which fails its outstanding calls at once, and the deployment's
  recovery restarts it from its checkpoint and replays the log (a ``failure`` event
  ``detected_by: deadline``).

A call that is slow but working (a big snapshot, a restore of many trees) makes progress at
each tree, so only a tree that does not finish one step within ``call_timeout_s`` is taken for
stuck.  An actor that has never answered (still starting: a new process importing numba) is
never declared stuck, only silent: a constructor that fails surfaces as the data path's error.

Thread safety: the health thread reads the deployment's nodes (a copy of the dict, retried if
it changed meanwhile) and writes only its own records; the data path reads ``silent`` and
``take_pending`` (a lock around the hand-over).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any


@dataclass
class NodeHealth:
    """The health check's record of one node's current actor."""

    actor: Any
    started: float  # monotonic: when this actor was first watched
    ref: Any = None  # the health call outstanding
    sent: float = 0.0  # monotonic: when it was sent
    reply: dict[str, Any] | None = None  # the last answer
    replied: float | None = None  # monotonic: when it came
    replied_wall: float | None = None
    dead: bool = False  # a health call failed: the actor is gone (the data path recovers)
    declared: dict[str, Any] | None = None  # the verdict, once declared stuck

    def quiet(self, now: float) -> float:
        """Seconds the current health call has gone unanswered."""
        return now - self.sent if self.ref is not None else 0.0

    def stalled(self) -> float:
        """Seconds, by the last answer, the data call running has made no progress."""
        return float((self.reply or {}).get("since_progress_s") or 0.0)

    def silence(self, now: float) -> float:
        """Seconds the node has been quiet either way (module docstring)."""
        return max(self.quiet(now), self.stalled())


class Liveness:
    """The health check of ``dep``'s node actors (module docstring).  ``call_timeout_s``:
    ``None`` switches it off (every wait then blocks as Ray's ``ray.get`` does)."""

    def __init__(
        self,
        dep,
        call_timeout_s: float | None,
        *,
        clock=time.monotonic,
        wall=time.time,
    ):
        self.dep = dep
        self.call_timeout_s = None if call_timeout_s is None else float(call_timeout_s)
        t = self.call_timeout_s or 0.0
        self.interval_s = min(1.0, t / 10) if t else 1.0
        self.silent_after_s = min(2.0, t / 5) if t else float("inf")
        self.clock, self.wall = clock, wall
        self.nodes: dict[str, NodeHealth] = {}
        self.declared: dict[str, dict[str, Any]] = {}  # verdicts the data path has not taken
        #: nodes whose actor the health check found gone (its health call failed: a crashed
        #: process or a node Ray declared dead) and the error, until the data path takes them
        #: (``take_pending``): an idle deployment recovers them without waiting for a call
        self.gone: dict[str, tuple[Any, BaseException]] = {}
        #: per node, the largest event-time lag (ms) its health answers showed since
        #: ``take_lag_peaks`` (a node that falls behind and catches up between two samples
        #: of the autoscale policy still shows)
        self.lag_peaks: dict[str, int] = {}
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        return self.call_timeout_s is not None

    # -- the thread ---------------------------------------------------------------------------
    def start(self) -> None:
        if not self.enabled or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="weaveplace-health", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except Exception:  # Ray going down at the end: the next turn, or the stop, decides
                pass
            self._stop.wait(self.interval_s)

    def poll(self) -> None:
        """One round: collect the health answers that came, send new health calls, declare
        the nodes silent past ``call_timeout_s`` stuck."""
        import ray

        try:
            current = [(nid, n.actor) for nid, n in list(self.dep.nodes.items())]
        except RuntimeError:  # the nodes changed while copied: next round
            return
        now = self.clock()
        for nid, actor in current:
            h = self.nodes.get(nid)
            if h is None or h.actor is not actor:  # a new node, or a new actor after recovery
                h = self.nodes[nid] = NodeHealth(actor, now)
            if h.declared is not None or h.dead:
                continue
            if h.ref is not None:
                ready, _ = ray.wait([h.ref], timeout=0)
                if ready:
                    try:
                        h.reply = ray.get(ready[0])
                        h.replied, h.replied_wall = self.clock(), self.wall()
                        self._note_lag(nid, h.reply.get("event_time"))
                    except ray.exceptions.RayError as e:
                        h.dead = True  # the data path recovers it (take_pending)
                        with self.lock:
                            self.gone[nid] = (actor, e)
                    h.ref = None
            if h.ref is None and not h.dead:
                h.ref, h.sent = actor.health.remote(), self.clock()
            silence = h.silence(self.clock())
            if (
                self.call_timeout_s is not None
                and h.replied is not None
                and silence >= self.call_timeout_s
            ):
                self._declare(nid, h, silence)
        for nid in [x for x in self.nodes if x not in dict(current)]:
            del self.nodes[nid]

    def _note_lag(self, nid: str, applied: int | None) -> None:
        fed = self.dep.event_time
        if fed is not None and applied is not None:
            lag = max(0, int(fed) - int(applied))
            with self.lock:
                self.lag_peaks[nid] = max(self.lag_peaks.get(nid, 0), lag)

    def take_lag_peaks(self) -> dict[str, int]:
        """Per node, the largest event-time lag (ms) seen since the last call."""
        with self.lock:
            out, self.lag_peaks = self.lag_peaks, {}
        return out

    def _declare(self, nid: str, h: NodeHealth, silence: float) -> None:
        import ray

        reply = h.reply or {}
        wall = self.wall()
        h.declared = {
            "node": nid,
            "ray_node": reply.get("ray_node"),
            "detected_at": wall,
            "last_sign": wall - silence,
            "detect_s": silence,
            "call": reply.get("call"),
            "pid": reply.get("pid"),
        }
        with self.lock:
            self.declared[nid] = h.declared
        try:
            ray.kill(h.actor, no_restart=True)  # its outstanding calls fail at once
        except Exception:
            pass

    # -- what the data path and the status ask -----------------------------------------------
    def silent(self, nid: str) -> bool:
        """The node has been quiet for ``silent_after_s`` (or was declared stuck)."""
        import ray

        h = self.nodes.get(nid)
        if h is None or not self.enabled:
            return False
        if h.declared is not None:
            return True
        if not self._silent(h, self.clock()):
            return False
        # the answer may have come while this (driver) process was too busy to collect it
        ref = h.ref
        return ref is None or not ray.wait([ref], timeout=0)[0]

    def _silent(self, h: NodeHealth, now: float) -> bool:
        return (
            h.quiet(now) >= self.silent_after_s or h.stalled() >= (self.call_timeout_s or 0.0) / 2
        )

    def needs_attention(self) -> bool:
        """Some node was declared stuck or found gone and the data path has not taken it."""
        return bool(self.declared or self.gone)

    def take_pending(self) -> list[tuple[str, Any, BaseException | None]]:
        """``(node, actor, error)`` of the nodes declared stuck (``error`` None) or found gone
        since the last call: the data path recovers each whose actor is still that one."""
        with self.lock:
            declared, self.declared = self.declared, {}
            gone, self.gone = self.gone, {}
        out = [(nid, self.nodes[nid].actor, None) for nid in declared if nid in self.nodes]
        out += [(nid, actor, err) for nid, (actor, err) in gone.items() if nid not in declared]
        return out

    def discharge(self, nid: str) -> None:
        """The data path took node ``nid``'s failure in hand (its recovery starts now)."""
        with self.lock:
            self.declared.pop(nid, None)
            self.gone.pop(nid, None)

    def verdict(self, nid: str, actor) -> dict[str, Any] | None:
        """The stuck verdict of ``nid``'s actor ``actor`` (``None``: not declared)."""
        h = self.nodes.get(nid)
        return h.declared if h is not None and h.actor is actor else None

    def report(self, nid: str) -> dict[str, Any]:
        """What the status shows of a node: ``health`` (``ok``, ``silent``, ``stuck``,
        ``starting``), ``silent_s``, the data call running and for how long, and the node's
        last light counters (``cluster.node.core.NodeCore.vitals``)."""
        h = self.nodes.get(nid)
        if h is None:
            return {"health": "starting" if self.enabled else None}
        now = self.clock()
        silence = h.silence(now)
        reply = dict(h.reply or {})
        if h.declared is not None:
            state = "stuck"
        elif h.replied is None:
            state = "starting"
        elif self.enabled and self._silent(h, now):
            state = "silent"
        else:
            state = "ok"
        return {
            **reply,
            "health": state,
            "silent_s": silence,
            "answered_s_ago": None if h.replied is None else now - h.replied,
        }
