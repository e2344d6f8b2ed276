"""What a deployment saw fail and how it recovered, as events an operator can read.

Why a record of its own: the checkpoint coordinator detects failures and recovers from them
(``recovery.py``), but without a record an operator cannot tell a healthy deployment from one
that lost a host a minute ago, nor how long its answers stalled.  ``FaultLog`` turns each
detected failure into two events in the ``events.jsonl`` layout (``wall_time``,
``event_time``, ``command``):

* ``failure`` at detection: the plan node and its Ray node, ``detected_by`` (how: ``actor
  died`` when a call failed because the actor's process died, ``node marked dead`` when Ray
  declared the actor's node dead (its health checks timed out: a crashed, hung or cut-off
  host), ``actor unavailable``, ``declared lost`` by a caller or drill, ``deadline`` when the
  health check found the actor silent for ``call_timeout_s`` and killed it: a stuck actor on a
  healthy host, ``cluster.deployment.liveness``; then ``call`` names the data call it was
  stuck in), the error's line and
  ``detect_s``: seconds from the fault to its detection when the fault time is known (a
  drill; ``detect_s_from: fault``), else from the node's last sign of life (its last call that
  returned; ``detect_s_from: last sign of life``);
* ``recovery`` when the first answer after it is committed: ``action`` (``restarted``: a new
  actor restored from the checkpoint; ``re-placed``: the node is gone, its trees moved to the
  survivors), the trees restarted or moved, ``batches_replayed``, ``recover_s`` (detection to
  the trees running again) and ``first_answer_s`` (detection to the first answer committed
  by a node now running those trees; at the end of input when none came earlier).

The deployment owns it (``Deployment.fault_log``); ``weaveplace serve`` appends ``take()``'s
new events to ``events.jsonl``, ``weaveplace run`` writes ``summary()`` into ``metrics.json``
and the same events to its own ``events.jsonl``.

``event_time`` (both events): the newest event time (``ts_ms``) the feed had handed to the
deployment when the event was recorded (``event_clock``: ``Deployment.event_time``), so an
operator can place a fault in the stream; ``None`` only before any row was fed.  On the
executor route the driver sees no tuple: it is the newest timestamp of the segments the
Spark tasks had pushed completely and of the rows the live nodes had applied when the fault
was found (``cluster.feeds.executors``).
"""

from __future__ import annotations

import threading
import time
from typing import Any

#: how a failure was detected (``detected_by``)
DETECTED_BY = ("actor died", "node marked dead", "actor unavailable", "declared lost", "deadline")


def detection(error: BaseException | None, node_gone: bool) -> str:
    """``detected_by`` of a failure: Ray's verdict on the node first, then the error's kind."""
    if node_gone:
        return "node marked dead"
    if error is None:
        return "actor died"
    if type(error).__name__ == "ActorUnavailableError":
        return "actor unavailable"
    text = str(error)
    if "node has died" in text or "node died" in text or "node is dead" in text:
        return "node marked dead"
    return "actor died"


def error_line(error: BaseException | None) -> str | None:
    """The one line of a Ray error that says why (Ray's messages run over several lines)."""
    if error is None:
        return None
    lines = [x.strip() for x in str(error).splitlines() if x.strip()]
    why = [x for x in lines if "because" in x or "died" in x or "dead" in x]
    line = (why or lines or [type(error).__name__])[-1]
    return f"{type(error).__name__}: {line}"[:240]


class FaultLog:
    """The failures a deployment detected and its recoveries (module docstring).  ``clock``:
    wall time in seconds (``time.time``; a test may pass its own); ``event_clock``: the newest
    event time fed so far (``None``: none yet)."""

    def __init__(self, clock=time.time, event_clock=lambda: None):
        self.clock = clock
        self.event_clock = event_clock
        self.events: list[dict[str, Any]] = []
        #: recoveries done whose first new answer is not committed yet
        self.pending: list[dict[str, Any]] = []
        self.injected: dict[str, float] = {}  # node -> when a fault was injected (drills)
        self.taken = 0  # events handed out by ``take``
        self.take_lock = threading.Lock()  # serve takes from its stream and its status thread

    def note_injected(self, node: str) -> None:
        """A fault is being injected into ``node`` now (a drill): detection counts from here."""
        self.injected[node] = self.clock()

    def failure(
        self,
        node: str,
        *,
        ray_node: str | None,
        detected_by: str,
        last_seen: float | None,
        batch: int,
        error: BaseException | None = None,
        detected_at: float | None = None,
        detail: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Record a failure of ``node`` detected now (``detected_at``: earlier, by the health
        check); returns its event (pass it to ``recovered``).  ``last_seen``: wall time of the
        node's last sign of life.  ``detail``: more fields (a deadline's call and pid)."""
        now = self.clock() if detected_at is None else detected_at
        fault_at = self.injected.pop(node, None)
        since = fault_at if fault_at is not None else last_seen
        ev = {
            "wall_time": now,
            "event_time": self.event_clock(),
            "command": "failure",
            "node": node,
            "ray_node": ray_node,
            "detected_by": detected_by,
            "error": error_line(error),
            "detect_s": None if since is None else max(0.0, now - since),
            "detect_s_from": "fault" if fault_at is not None else "last sign of life",
            "batch": batch,
            **(detail or {}),
        }
        self.events.append(ev)
        return ev

    def discard(self, failure: dict[str, Any]) -> None:
        """Forget ``failure``: what it announced was refused (losing the last node, ...)."""
        self.events = [e for e in self.events if e is not failure]

    def recovered(
        self,
        failure: dict[str, Any],
        *,
        action: str,
        trees: dict[str, str],
        replayed: int,
    ) -> dict[str, Any]:
        """The failed node's trees run again: ``action`` ``restarted`` or ``re-placed``,
        ``trees`` tree id -> the node now running it, ``replayed`` batches.  The ``recovery``
        event is emitted when one of those nodes commits its first answer
        (``answers_committed``)."""
        now = self.clock()
        moved = sum(1 for dest in trees.values() if dest != failure["node"])
        rec = {
            "wall_time": None,
            "event_time": None,
            "command": "recovery",
            "node": failure["node"],
            "ray_node": failure["ray_node"],
            "action": action,
            "detected_by": failure["detected_by"],
            "trees": dict(sorted(trees.items())),
            "trees_moved": moved,
            "trees_restarted": len(trees) - moved,
            "batches_replayed": int(replayed),
            "detect_s": failure["detect_s"],
            "recover_s": max(0.0, now - failure["wall_time"]),
            "first_answer_s": None,
            "first_answer": None,
            "detected_at": failure["wall_time"],
        }
        self.pending.append(rec)
        return rec

    def answers_committed(self, node: str, rows: int) -> None:
        """Node ``node`` committed ``rows`` answers: recoveries waiting on it are complete."""
        if rows <= 0 or not self.pending:
            return
        for rec in [r for r in self.pending if node in r["trees"].values()]:
            self._complete(rec, f"answers committed by {node}")

    def close(self) -> None:
        """End of input: recoveries still waiting complete with the final answers."""
        for rec in list(self.pending):
            self._complete(rec, "end of input")

    def _complete(self, rec: dict[str, Any], how: str) -> None:
        now = self.clock()
        rec.update(
            wall_time=now,
            event_time=self.event_clock(),
            first_answer_s=max(0.0, now - rec["detected_at"]),
            first_answer=how,
        )
        self.pending.remove(rec)
        self.events.append(rec)

    def take(self) -> list[dict[str, Any]]:
        """The events recorded since the previous call (all of them the first time), each
        handed out once even when two threads ask."""
        with self.take_lock:
            new = self.events[self.taken :]
            self.taken += len(new)
            return new

    def summary(self) -> dict[str, Any]:
        """Counts, the nodes still recovering and every event (``metrics.json``, status)."""
        return {
            "failures": sum(1 for e in self.events if e["command"] == "failure"),
            "recoveries": sum(1 for e in self.events if e["command"] == "recovery"),
            "recovering": [r["node"] for r in self.pending],
            "events": [dict(e) for e in self.events],
        }
