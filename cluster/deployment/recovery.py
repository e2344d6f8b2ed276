"""Exactly-once recovery: checkpoint rounds, the replay log, restarting a dead node's actor.

Why this way (in the spirit of Flink's checkpoint coordinator): ``CheckpointCoordinator.
checkpoint()`` takes, per actor and atomically, the snapshot and the answers produced since the
previous checkpoint; the driver *commits* those answers (through the deployment's answer route)
and keeps the batches fed after the snapshot (the replay log: refs in the object store on the
driver route, file addresses on the executor route).  ``recover(node_id)`` (called
automatically when an actor dies, if ``auto_recover``) starts a new actor, restores the
snapshot and replays the log, so the final answers equal a fault-free run's exactly.  Without
checkpoints the snapshot is the initial (empty) state and the whole input is replayed.  A
node's state is a list of ``RestoreSource``s: its own snapshot, then the trees it adopted since
(from a lost node, or as an added node) with their own snapshots; the same replay rebuilds them
(``adopt``), and trees skip a batch ``seq`` they already applied.

The coordinator owns the rounds, the log and the commits; the deployment owns the nodes and
their in-flight calls, which the coordinator uses through the deployment's public methods
(``nodes``, ``wait``, ``wait_all``, ``start_actor``, ``lose_node``).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from cluster.deployment.answer_routes import AnswerRoute
from cluster.deployment.faults import FaultLog, detection
from cluster.deployment.options import DeploymentOptions
from cluster.deployment.pinning import ray_node_gone
from cluster.deployment.specs import DeploymentError


@dataclass
class RestoreSource:
    """Where some trees' state is rebuilt from: a node snapshot that holds them (``None``: the
    initial state), taken after batch ``seq``; the batches after it come from the replay log.
    A node's sources are its own last snapshot, then the trees it adopted since, from lost
    nodes or as an added node (their snapshots are older than its own)."""

    trees: list[dict]
    blob: bytes | None
    seq: int
    origin: str
    # trees the snapshot holds that moved to an added node since (``add_node``): a restore
    # takes them too (``restore`` wants the snapshot's tree set) and drops them at once
    dropped: list[dict] = field(default_factory=list)

    @property
    def streams(self) -> set[str]:
        return {t["stream"] for t in self.trees}


@dataclass
class DriverNode:
    """The driver's record of one plan node: its actor, the calls in flight (backpressure),
    where its state is rebuilt from (``sources``) and the counters ``metrics()`` reports."""

    spec: dict
    actor: Any
    sources: list[RestoreSource]
    inflight: deque = field(default_factory=deque)
    recoveries: int = 0
    submitted_seq: int = -1  # last batch seq handed to this node, sent or owed (replay bound)
    sent_seq: int = -1  # last batch seq actually sent (driver feed; owed: the log's after it)
    # silent (``cluster.deployment.liveness``): the feed stopped waiting for it; its batches
    # since ``sent_seq`` wait in the replay log and it skips checkpoints until it catches up
    behind: bool = False
    # a checkpoint call the node went silent in: (ref, trees, sources at the call), settled
    # when it answers (``Deployment.catch_up``) or dropped with its actor
    pending_checkpoint: tuple | None = None
    flushed: bool = False
    max_depth: int = 0
    blocked_s: float = 0.0
    ray_node: str | None = None  # the Ray node it is pinned to (None: Ray's choice)
    adopted: int = 0  # executor trees taken over from lost nodes
    added: int = 0  # executor trees taken over as an added node (add_node)
    # wall time of the node's last sign of life (a call that returned): a failure's detection
    # time is counted from it when the fault's own time is unknown (``FaultLog``)
    last_seen: float = field(default_factory=time.time)

    @property
    def snapshot(self) -> bytes | None:
        return self.sources[0].blob

    @property
    def snapshot_seq(self) -> int:
        return self.sources[0].seq


@dataclass(frozen=True)
class LoggedBatch:
    """One entry of the replay log: batch ``seq`` (of ``stream``, or ``None``: every stream it
    carries), its ``source`` (an object-store ref, or a ``PieceSource`` the actor reads), the
    nodes it was sent to and the streams in it."""

    seq: int
    stream: str | None
    source: Any
    targets: tuple[str, ...]
    streams: tuple[str, ...]
    nbytes: int = 0  # what it pins in the object store (towards ``max_log_bytes``)


class CheckpointCoordinator:
    """A deployment's checkpoint rounds, replay log and answer commits, and the recovery of
    its dead actors from them (module docstring)."""

    def __init__(self, dep, options: DeploymentOptions, route: AnswerRoute):
        self.dep = dep
        self.route = route
        self.auto_recover = options.auto_recover
        self.max_in_flight = int(options.max_in_flight)
        self.checkpoint_every = options.checkpoint_every
        self.max_log_bytes = options.max_log_bytes
        self.log: list[LoggedBatch] = []
        self.log_bytes = 0
        self.since_checkpoint = 0  # batches (or pieces) fed since the last checkpoint
        self.rounds = 0  # checkpoint rounds (a round repeated after a loss counts again)
        self.checkpoints = 0
        # failures detected and recoveries (``faults.py``), at the deployment's event time
        self.faults = FaultLog(event_clock=lambda: dep.event_time)

    # -- the replay log -------------------------------------------------------------------
    def log_batch(self, entry: LoggedBatch) -> None:
        """Keep ``entry`` for replays until every node's checkpoint holds it (its ``nbytes``
        count towards ``max_log_bytes``)."""
        self.log.append(entry)
        self.log_bytes += entry.nbytes

    def count_fed(self, batches: int = 1) -> None:
        self.since_checkpoint += batches

    def due_by_count(self) -> bool:
        """``checkpoint_every`` batches fed since the last checkpoint."""
        return bool(self.checkpoint_every and self.since_checkpoint >= self.checkpoint_every)

    def due(self) -> bool:
        """A checkpoint is due: by count, or the replay log holds ``max_log_bytes``."""
        return self.due_by_count() or self.over_budget()

    def clear_log(self) -> None:
        self.log.clear()
        self.log_bytes = 0

    def over_budget(self) -> bool:
        """The log holds ``max_log_bytes`` or more (after a checkpoint: what silent nodes
        still need)."""
        return bool(
            self.auto_recover and self.max_log_bytes and self.log_bytes >= self.max_log_bytes
        )

    # -- checkpoints ----------------------------------------------------------------------
    def checkpoint(self, may_skip: bool = False) -> None:
        """Snapshot every node and commit the answers produced up to the snapshot; the replay
        log then keeps only what some node may still need (its batches after the oldest
        snapshot).  If a node is lost meanwhile, its trees' new hosts still need the log, so
        the round is repeated (the next snapshots hold the moved trees).

        ``may_skip`` (the feed's checkpoints, a live stream's ``take_answers``): a node that
        is silent (``cluster.deployment.liveness``) is not waited for: it keeps its last
        snapshot, the log keeps its batches since, and a checkpoint call it went silent in is
        settled when it answers (``settle``) or dropped with its actor.  Without it (moving
        trees, the end of a run) every node takes part: those behind catch up first."""
        import ray

        nodes = self.dep.nodes
        while True:
            self.dep.wait_all(may_skip=may_skip)
            self.rounds += 1  # the actor route names its parts by round (cluster.answers.sink)
            refs = {}
            for nid, n in nodes.items():
                if not n.behind:
                    refs[nid] = (self._call(n.actor), list(n.spec["trees"]), len(n.sources))
            for nid, (ref, trees, k) in refs.items():
                if nid not in nodes:  # lost while we collected the others
                    continue
                try:
                    done, reply = self.dep.get_reply(nid, ref, may_skip)
                    if not done:  # silent: settled when it answers
                        nodes[nid].behind = True
                        nodes[nid].pending_checkpoint = (ref, trees, k)
                        continue
                except ray.exceptions.RayActorError as e:
                    if not self.auto_recover:
                        raise
                    self.on_dead(nid, e)
                    if nid not in nodes:
                        continue
                    n = nodes[nid]
                    trees, k = list(n.spec["trees"]), len(n.sources)
                    # the same round's name: a part the dead actor wrote is overwritten
                    reply = ray.get(self._call(n.actor))
                self.take_reply(nid, reply, trees, k)
            if all(len(n.sources) == 1 for n in nodes.values() if not n.behind):
                break
        self.prune_log()
        self.since_checkpoint = 0
        self.checkpoints += 1

    def take_reply(self, nid: str, reply, trees: list[dict], k: int) -> None:
        """Node ``nid``'s checkpoint reply ``(snapshot, answers, seq)`` to a call made when it
        had ``trees`` and ``k`` sources: the snapshot is its state now, the answers are
        committed."""
        blob, answers, seq = reply
        n = self.dep.nodes[nid]
        n.last_seen = time.time()
        # sources appended after the checkpoint call (adoptions) are not in the snapshot
        n.sources = [RestoreSource(trees, blob, seq, nid)] + n.sources[k:]
        self.route.commit(answers)
        self.faults.answers_committed(nid, int(answers.num_rows))

    def settle(self, nid: str) -> bool:
        """A checkpoint call node ``nid`` went silent in: taken if its reply came (``True``;
        also when there is none), ``False`` while it is still outstanding.  A failed reply
        raises (``RayActorError``): the node's recovery starts from its previous snapshot."""
        import ray

        n = self.dep.nodes[nid]
        if n.pending_checkpoint is None:
            return True
        ref, trees, k = n.pending_checkpoint
        if not ray.wait([ref], timeout=0)[0]:
            return False
        n.pending_checkpoint = None
        self.take_reply(nid, ray.get(ref), trees, k)
        return True

    def prune_log(self) -> None:
        """After a checkpoint: drop the logged batches no node needs any more.  A node that
        took the checkpoint needs none; a silent node (``behind``) needs those after its
        oldest snapshot, for its catch-up or its recovery."""
        need = [src.seq for n in self.dep.nodes.values() if n.behind for src in n.sources]
        if not need:
            self.clear_log()
            return
        oldest = min(need)
        self.log = [b for b in self.log if b.seq > oldest]
        self.log_bytes = sum(b.nbytes for b in self.log)

    def _call(self, actor):
        return self.route.checkpoint_call(actor, self.rounds, self.dep.value_type)

    # -- recovery -------------------------------------------------------------------------
    def on_dead(self, nid: str, error: BaseException | None = None) -> None:
        """A node's actor died (``error``: the failed call's, when known): restart it from its
        checkpoint, unless its (pinned) Ray node is gone, then the node is lost for good and
        its trees move to the other nodes.  Both are recorded in ``faults``."""
        import ray

        nodes = self.dep.nodes
        n = nodes[nid]
        gone = ray_node_gone(n.ray_node)
        # killed by the health check (``liveness``): a deadline, counted from its last sign
        stuck = self.dep.liveness.verdict(nid, n.actor)
        self.dep.liveness.discharge(nid)
        failure = self.faults.failure(
            nid,
            ray_node=n.ray_node or (stuck or {}).get("ray_node"),
            detected_by="deadline" if stuck and not gone else detection(error, gone),
            last_seen=stuck["last_sign"] if stuck else n.last_seen,
            batch=self.dep.batches_fed,
            error=None if stuck else error,
            detected_at=stuck["detected_at"] if stuck else None,
            detail={"call": stuck["call"], "pid": stuck["pid"]} if stuck else None,
        )
        if gone:
            self.lose_for_good(nid, failure)
            return
        trees = {str(t["id"]): nid for t in n.spec["trees"]}
        try:
            replayed = self.recover(nid)
        except (ray.exceptions.RayError, DeploymentError) as e:
            # the Ray node may have died in between (a hard-pinned actor cannot start there)
            if nid in nodes and ray_node_gone(nodes[nid].ray_node):
                failure["detected_by"] = "node marked dead"
                self.lose_for_good(nid, failure)
                return
            raise DeploymentError(f"node {nid}: recovery failed: {e}") from e
        self.faults.recovered(failure, action="restarted", trees=trees, replayed=replayed)

    def declare_lost(self, nid: str, reason: str) -> dict:
        """Node ``nid`` is declared lost for good (a drill, an operator): re-place its trees,
        recorded in ``faults`` as a failure ``declared lost`` and its recovery."""
        if nid not in self.dep.nodes:  # lose_node says why in one line
            return self.dep.lose_node(nid, reason=reason)
        n = self.dep.nodes[nid]
        self.faults.note_injected(nid)
        failure = self.faults.failure(
            nid,
            ray_node=n.ray_node,
            detected_by="declared lost",
            last_seen=n.last_seen,
            batch=self.dep.batches_fed,
        )
        try:
            return self.lose_for_good(nid, failure, reason)
        except DeploymentError:  # refused (the last node, ...): nothing failed
            self.faults.discard(failure)
            raise

    def lose_for_good(self, nid: str, failure: dict, reason: str | None = None) -> dict:
        """Node ``nid`` is gone (its Ray node, unless ``reason`` says otherwise): re-place its
        trees, recorded as ``failure``'s recovery."""
        ray_node = self.dep.nodes[nid].ray_node
        rec = self.dep.lose_node(nid, reason=reason or f"Ray node {ray_node} is gone")
        self.faults.recovered(
            failure,
            action="re-placed",
            trees={str(k): str(v) for k, v in rec["trees"].items()},
            replayed=rec["replayed_batches"],
        )
        return rec

    def replay(self, nid: str, src: RestoreSource, *, base: bool):
        """The logged batches ``src``'s trees need after its snapshot, as ingest arguments."""
        n = self.dep.nodes[nid]
        ids = None if base else [t["id"] for t in src.trees]
        streams = src.streams
        for b in self.log:
            if b.seq <= src.seq:
                continue
            if base:
                if nid in b.targets and b.seq <= n.submitted_seq:
                    yield (b.stream, b.source, b.seq)
            elif streams.intersection(b.streams):
                yield (b.stream, b.source, b.seq, ids)

    def recover(self, node_id: str) -> int:
        """Replace node ``node_id`` by a new actor restored from its last checkpoint, and
        replay the batches it received after that checkpoint (from the object store); trees
        it adopted since are restored from their own snapshots and replayed the same way.
        Returns the number of batches replayed."""
        import ray

        if not self.auto_recover:
            raise DeploymentError(
                f"cannot recover node {node_id}: the replay log is kept only with auto_recover=True"
            )
        n = self.dep.nodes[node_id]
        try:
            ray.kill(n.actor, no_restart=True)
        except Exception:  # already dead
            pass
        base, *adopted = n.sources
        n.actor = self.dep.start_actor(node_id, base.trees + base.dropped)
        n.inflight.clear()
        n.pending_checkpoint = None  # its answers are regenerated from the snapshot
        n.recoveries += 1
        calls = []
        if base.blob is not None:
            calls.append(("restore", (base.blob,)))
        if base.dropped:  # trees moved to an added node since the snapshot
            calls.append(("drop_trees", ([t["id"] for t in base.dropped],)))
        calls += [("ingest", a) for a in self.replay(node_id, base, base=True)]
        for src in adopted:
            calls.append(("add_trees", (src.trees, src.blob)))
            calls += [("ingest", a) for a in self.replay(node_id, src, base=False)]
        if n.flushed:
            calls.append(("flush", ()))
        for name, args in calls:
            n.inflight.append(getattr(n.actor, name).remote(*args))
            if len(n.inflight) >= self.max_in_flight:
                ray.get(n.inflight.popleft())
        ray.get(list(n.inflight))  # a failure during replay is not retried: it raises
        n.inflight.clear()
        n.sent_seq = n.submitted_seq  # the owed batches of a silent node were replayed too
        n.behind = False
        n.last_seen = time.time()
        return sum(1 for name, _ in calls if name == "ingest")

    def adopt(self, nid: str, src: RestoreSource) -> int:
        """Queue ``add_trees`` + the replay of ``src`` on node ``nid`` (with backpressure).
        Stops early if the node is recovered or lost meanwhile: that already rebuilt ``src``
        from ``n.sources``.  Returns the number of batches replayed."""
        nodes = self.dep.nodes
        n = nodes[nid]
        actor = n.actor
        ids = [t["id"] for t in src.trees]
        calls = [("add_trees", (src.trees, src.blob))]
        calls += [("ingest", a) for a in self.replay(nid, src, base=False)]
        if n.flushed:
            calls.append(("flush", (ids,)))
        for name, args in calls:
            self.dep.wait(nid, self.max_in_flight - 1)
            if nodes.get(nid) is not n or n.actor is not actor:
                break
            n.inflight.append(getattr(actor, name).remote(*args))
        return sum(1 for name, _ in calls if name == "ingest")
