"""Exactly-once recovery: checkpoints, the replay log, restarting a dead node's actor.

Why this way: ``checkpoint()`` takes, per actor and atomically, the snapshot and the answers
produced since the previous checkpoint; the driver *commits* those answers and keeps the refs
of batches fed after the snapshot (the replay log, kept by ``Deployment.feed``).
``recover(node_id)`` (called automatically when an actor dies, if ``auto_recover``) starts a new
actor, restores the snapshot and replays the log, so the final answers equal a fault-free run's
exactly.  Without checkpoints the snapshot is the initial (empty) state and the whole input is
replayed.  A node's state is a list of ``RestoreSource``s: its own snapshot, then the trees it
adopted since (from a lost node, or as an added node) with their own snapshots; the same
replay rebuilds them (``_adopt``), and trees skip a batch ``seq`` they already applied.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

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
    submitted_seq: int = -1  # last batch seq sent to this node (replay bound)
    flushed: bool = False
    max_depth: int = 0
    blocked_s: float = 0.0
    ray_node: str | None = None  # the Ray node it is pinned to (None: Ray's choice)
    adopted: int = 0  # executor trees taken over from lost nodes
    added: int = 0  # executor trees taken over as an added node (add_node)

    @property
    def snapshot(self) -> bytes | None:
        return self.sources[0].blob

    @property
    def snapshot_seq(self) -> int:
        return self.sources[0].seq


class RecoveryMixin:
    """``Deployment``'s checkpoints and recovery.  Uses the deployment's ``nodes``
    (``DriverNode`` by id), ``_log``, ``_checkpoint_call``/``_commit`` (the answer route),
    ``_rounds``, ``_wait``/``_wait_all``, ``_new_actor`` and ``lose_node`` (a node whose Ray
    node is gone is not restarted but lost)."""

    def _on_dead(self, nid: str) -> None:
        """A node's actor died: restart it from its checkpoint, unless its (pinned) Ray node is
        gone, then the node is lost for good and its trees move to the other nodes."""
        import ray

        if ray_node_gone(self.nodes[nid].ray_node):
            self.lose_node(nid, reason=f"Ray node {self.nodes[nid].ray_node} is gone")
            return
        try:
            self.recover(nid)
        except (ray.exceptions.RayError, DeploymentError) as e:
            # the Ray node may have died in between (a hard-pinned actor cannot start there)
            if nid in self.nodes and ray_node_gone(self.nodes[nid].ray_node):
                self.lose_node(nid, reason=f"Ray node {self.nodes[nid].ray_node} is gone")
                return
            raise DeploymentError(f"node {nid}: recovery failed: {e}") from e

    def checkpoint(self) -> None:
        """Snapshot every node and commit the answers produced up to the snapshot; the replay
        log is then cleared (its batches are no longer needed).  If a node is lost meanwhile,
        its trees' new hosts still need the log, so the round is repeated (the next snapshots
        hold the moved trees)."""
        import ray

        while True:
            self._wait_all()
            self._rounds += 1  # the actor route names its parts by round (answer_sink)
            refs = {}
            for nid, n in self.nodes.items():
                refs[nid] = (
                    self._checkpoint_call(n.actor),
                    list(n.spec["trees"]),
                    len(n.sources),
                )
            for nid, (ref, trees, k) in refs.items():
                if nid not in self.nodes:  # lost while we collected the others
                    continue
                try:
                    blob, answers, seq = ray.get(ref)
                except ray.exceptions.RayActorError:
                    if not self.auto_recover:
                        raise
                    self._on_dead(nid)
                    if nid not in self.nodes:
                        continue
                    n = self.nodes[nid]
                    trees, k = list(n.spec["trees"]), len(n.sources)
                    # the same round's name: a part the dead actor wrote is overwritten
                    blob, answers, seq = ray.get(self._checkpoint_call(n.actor))
                n = self.nodes[nid]
                # sources appended after the checkpoint call (adoptions) are not in the snapshot
                n.sources = [RestoreSource(trees, blob, seq, nid)] + n.sources[k:]
                self._commit(answers)
            if all(len(n.sources) == 1 for n in self.nodes.values()):
                break
        self._log.clear()
        self._log_bytes = 0
        self._since_ckpt = 0
        self.checkpoints += 1

    def _replay(self, nid: str, src: RestoreSource, *, base: bool):
        """The logged batches ``src``'s trees need after its snapshot, as ingest arguments."""
        n = self.nodes[nid]
        ids = None if base else [t["id"] for t in src.trees]
        streams = src.streams
        for seq, stream, ref, targets, bstreams in self._log:
            if seq <= src.seq:
                continue
            if base:
                if nid in targets and seq <= n.submitted_seq:
                    yield (stream, ref, seq)
            elif streams.intersection(bstreams):
                yield (stream, ref, seq, ids)

    def recover(self, node_id: str) -> None:
        """Replace node ``node_id`` by a new actor restored from its last checkpoint, and
        replay the batches it received after that checkpoint (from the object store); trees
        it adopted since are restored from their own snapshots and replayed the same way."""
        import ray

        if not self.auto_recover:
            raise DeploymentError(
                f"cannot recover node {node_id}: the replay log is kept only with auto_recover=True"
            )
        n = self.nodes[node_id]
        try:
            ray.kill(n.actor, no_restart=True)
        except Exception:  # already dead
            pass
        base, *adopted = n.sources
        n.actor = self._new_actor(node_id, base.trees + base.dropped)
        n.inflight.clear()
        n.recoveries += 1
        calls = []
        if base.blob is not None:
            calls.append(("restore", (base.blob,)))
        if base.dropped:  # trees moved to an added node since the snapshot
            calls.append(("drop_trees", ([t["id"] for t in base.dropped],)))
        calls += [("ingest", a) for a in self._replay(node_id, base, base=True)]
        for src in adopted:
            calls.append(("add_trees", (src.trees, src.blob)))
            calls += [("ingest", a) for a in self._replay(node_id, src, base=False)]
        if n.flushed:
            calls.append(("flush", ()))
        for name, args in calls:
            n.inflight.append(getattr(n.actor, name).remote(*args))
            if len(n.inflight) >= self.max_in_flight:
                ray.get(n.inflight.popleft())
        ray.get(list(n.inflight))  # a failure during replay is not retried: it raises
        n.inflight.clear()

    def _adopt(self, nid: str, src: RestoreSource) -> int:
        """Queue ``add_trees`` + the replay of ``src`` on node ``nid`` (with backpressure).
        Stops early if the node is recovered or lost meanwhile: that already rebuilt ``src``
        from ``n.sources``.  Returns the number of batches replayed."""
        n = self.nodes[nid]
        actor = n.actor
        ids = [t["id"] for t in src.trees]
        calls = [("add_trees", (src.trees, src.blob))]
        calls += [("ingest", a) for a in self._replay(nid, src, base=False)]
        if n.flushed:
            calls.append(("flush", (ids,)))
        for name, args in calls:
            self._wait(nid, self.max_in_flight - 1)
            if self.nodes.get(nid) is not n or n.actor is not actor:
                break
            n.inflight.append(getattr(actor, name).remote(*args))
        return sum(1 for name, _ in calls if name == "ingest")
