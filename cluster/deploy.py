"""Deploy a plan (``weaveplace.plan/1`` dict) as one Ray actor per plan node, feed it, collect.

Why this shape:

* **One actor per plan node**: the plan's unit of placement is the node; the node's trees run
  in one process, so the plan's per-node cost is what each actor pays.
* **Batches go to the object store once** (``ray.put``) and every actor hosting a stream of the
  batch gets the same ref: no per-actor re-serialisation of the (large) batch.
* **Backpressure**: at most ``max_in_flight`` calls outstanding per actor; when an actor is at
  the limit the driver blocks in ``ray.wait`` on that actor's oldest calls.  This bounds memory
  (object store + actor mailboxes) and makes ``queue_depth`` meaningful.  Errors of completed
  calls are raised at the next feed, not at ``finish`` only.
* **Exactly-once recovery**: ``checkpoint()`` takes, per actor and atomically, the snapshot and
  the answers produced since the previous checkpoint; the driver *commits* those answers and
  keeps the refs of batches fed after the snapshot (the replay log).  ``recover(node_id)``
  (called automatically when an actor dies, if ``auto_recover``) starts a new actor, restores
  the snapshot and replays the log, so the final answers equal a fault-free run's exactly.
  Without checkpoints the snapshot is the initial (empty) state and the whole input is replayed.
  The log pins its batches in the object store, so a checkpoint is also taken whenever the log
  exceeds ``max_log_bytes`` (default 128 MiB, a quarter of RayRuntime's object store) or every
  ``checkpoint_every`` batches.

The driver-side sorting in ``finish`` is by ``(query_id, window_start)``.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from .node_actor import NodeActor, concat_answers, empty_late

PLAN_SCHEMA = "weaveplace.plan/1"


class DeploymentError(RuntimeError):
    """A plan that cannot be deployed, or a node that failed and could not be recovered."""


def node_specs(plan: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Structural check of a plan and the per-node tree specs the actors need.

    Costs are not re-priced here (``placement.plan.verify_plan`` does that and can be slow for
    large plans); we check only what execution relies on: every query in exactly one tree, and
    a tree's stream equal to its queries' stream.  A plan tree mixing time and count windows
    becomes two executor trees (``<id>`` and ``<id>~count``).
    """
    if plan.get("schema") != PLAN_SCHEMA:
        raise DeploymentError(f"plan schema: expected {PLAN_SCHEMA!r}, got {plan.get('schema')!r}")
    queries = {}
    for i, q in enumerate(plan.get("queries", [])):
        if q.get("id") in queries:
            raise DeploymentError(f"plan queries[{i}]: duplicate id {q.get('id')!r}")
        queries[q["id"]] = q
    seen: dict[str, str] = {}
    specs = []
    for n in plan.get("nodes", []):
        trees = []
        for t in n.get("trees", []):
            qs = []
            for qid in t["queries"]:
                if qid not in queries:
                    raise DeploymentError(f"tree {t.get('id')!r} names unknown query {qid!r}")
                if qid in seen:
                    raise DeploymentError(f"query {qid!r} is in trees {seen[qid]!r} and "
                                          f"{t.get('id')!r}: each query runs once")
                seen[qid] = t.get("id")
                q = queries[qid]
                stream = q.get("stream", "s0")
                if t.get("stream", stream) != stream:
                    raise DeploymentError(f"tree {t.get('id')!r} (stream {t.get('stream')!r}) "
                                          f"holds query {qid!r} on stream {stream!r}")
                qs.append({"id": qid, "aggregate": q.get("aggregate", "sum"),
                           "range": q["range"], "slide": q["slide"],
                           "kind": q.get("kind", "time")})
            if not qs:
                continue
            stream = str(t.get("stream") or queries[t["queries"][0]].get("stream", "s0"))
            # placement prices edges regardless of kind, so a plan tree may mix time and count
            # windows; they cannot share a slicing, so each kind gets its own executor tree.
            kinds = sorted({q["kind"] for q in qs})
            for kind in kinds:
                tid = str(t["id"]) if len(kinds) == 1 or kind == "time" else f"{t['id']}~{kind}"
                trees.append({"id": tid, "stream": stream,
                              "queries": [q for q in qs if q["kind"] == kind]})
        specs.append({"node_id": str(n["id"]), "trees": trees})
    missing = sorted(set(queries) - set(seen))
    if missing:
        raise DeploymentError(f"queries not placed in any tree: {missing[:10]}"
                              f"{' ...' if len(missing) > 10 else ''}")
    if len({s["node_id"] for s in specs}) != len(specs):
        raise DeploymentError("duplicate node ids in plan")
    return specs


@dataclass
class RunResult:
    """What a run produced: answers (query_id, window_start, window_end, value), late tuples
    (node_id, tree_id, stream, ts_ms, value) and per-node metrics."""

    answers: pa.Table
    late: pa.Table
    metrics: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Node:
    spec: dict
    actor: Any
    inflight: deque = field(default_factory=deque)
    snapshot: bytes | None = None   # None: the initial state
    snapshot_seq: int = -1
    recoveries: int = 0
    submitted_seq: int = -1         # last batch seq sent to this node (replay bound)
    flushed: bool = False
    max_depth: int = 0
    blocked_s: float = 0.0


class Deployment:
    """A plan running on Ray: ``feed`` batches, ``checkpoint``, ``finish``.

    ``technique`` overrides the plan's ``ie``; ``allowed_lateness`` is in the streams' time unit.
    ``mode``: ``"raw"`` (actors take tuple batches, ``feed_raw``) or ``"sliced"`` (actors take
    per-stream batches of pre-aggregated slices cut at ``edge_classes(stream)``, the union of
    the edges of every tree on the stream: ``spark_feed.feed_sliced``; time windows only).
    ``count_ops``: trees count their final-aggregation operations (``metrics()`` per tree:
    ``final_ops``, ``omega``), to set measured cost beside the plan's estimate.
    Use as a context manager (or call ``shutdown``) so actors are killed on errors too.
    """

    def __init__(self, plan: Mapping[str, Any], *, technique: str | None = None,
                 allowed_lateness: int = 0, max_in_flight: int = 4,
                 checkpoint_every: int | None = None, max_log_bytes: int | None = 128 << 20,
                 auto_recover: bool = True, actor_options: Mapping[str, Any] | None = None,
                 mode: str = "raw", count_ops: bool = False):
        import ray

        if not ray.is_initialized():
            raise DeploymentError("Ray is not running: use cluster.ray_runtime.RayRuntime")
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1")
        if mode not in ("raw", "sliced"):
            raise ValueError(f"mode must be 'raw' or 'sliced', got {mode!r}")
        self.mode = mode
        self.count_ops = bool(count_ops)
        self.plan = plan
        self.technique = technique or plan.get("ie") or "slickdeque"
        self.allowed_lateness = int(allowed_lateness)
        self.max_in_flight = int(max_in_flight)
        self.checkpoint_every = checkpoint_every
        self.max_log_bytes = max_log_bytes
        self.auto_recover = auto_recover
        self.actor_options = dict(actor_options or {})
        self.nodes: dict[str, _Node] = {}
        specs = node_specs(plan)
        if mode == "sliced":
            cq = [q["id"] for sp in specs for t in sp["trees"] for q in t["queries"]
                  if q["kind"] != "time"]
            if cq:
                raise DeploymentError(f"sliced mode runs time windows only; count-window "
                                      f"queries: {cq[:10]}")
        for spec in specs:
            self.nodes[spec["node_id"]] = _Node(spec, self._new_actor(spec))
        self.stream_nodes: dict[str, list[str]] = {}
        for nid, n in self.nodes.items():
            for t in n.spec["trees"]:
                self.stream_nodes.setdefault(t["stream"], [])
                if nid not in self.stream_nodes[t["stream"]]:
                    self.stream_nodes[t["stream"]].append(nid)
        self._committed: list[pa.Table] = []
        self._late_seen: dict[str, dict[str, int]] = {}  # take_late: node -> tree -> count
        self._log: list[tuple[int, str | None, Any, tuple[str, ...]]] = []
        self._seq = -1
        self._since_ckpt = 0
        self._log_bytes = 0
        self.checkpoints = 0
        self.rows_fed = 0
        self.bytes_fed = 0
        self.t_start = time.perf_counter()
        self._finished = False
        # actors start asynchronously; fail fast if one cannot be constructed
        ray.get([n.actor.ping.remote() for n in self.nodes.values()])

    # -- actors -----------------------------------------------------------------------------
    def _new_actor(self, spec):
        opts = self.actor_options
        cls = NodeActor.options(**opts) if opts else NodeActor
        return cls.remote(spec["node_id"], spec["trees"], self.technique, self.allowed_lateness,
                          "slices" if self.mode == "sliced" else "tuples", self.count_ops)

    @property
    def streams(self) -> list[str]:
        return sorted(self.stream_nodes)

    def edge_classes(self, stream: str) -> list[tuple[int, int]]:
        """Residue classes ``(s, c)`` of the union of the edges of every tree (on every node)
        on ``stream``: the slice boundaries of sliced mode (DESIGN.md s. 2)."""
        from executors.slicing import edge_classes

        rs = {(int(q["range"]), int(q["slide"])) for n in self.nodes.values()
              for t in n.spec["trees"] if t["stream"] == stream for q in t["queries"]}
        return edge_classes(sorted(rs))

    def actor(self, node_id: str):
        """The live actor of a node (e.g. to ``ray.kill`` it in a fault test)."""
        return self.nodes[node_id].actor

    # -- feeding ----------------------------------------------------------------------------
    def feed(self, stream: str | None, batch) -> int:
        """Send one Arrow batch (``ts_ms`` + stream column(s)) to every node hosting a stream in
        it (``stream=None``: all streams whose columns the batch has).  Blocks while a target
        actor has ``max_in_flight`` calls outstanding.  Returns the batch's sequence number."""
        import ray

        if self._finished:
            raise DeploymentError("deployment already finished")
        if isinstance(batch, pa.Table):
            batch = batch.combine_chunks().to_batches()[0] if batch.num_rows else \
                pa.RecordBatch.from_pylist([], schema=batch.schema)
        names = set(batch.schema.names)
        streams = [stream] if stream is not None else [s for s in self.streams if s in names]
        targets = sorted({nid for s in streams for nid in self.stream_nodes.get(s, [])})
        self._seq += 1
        seq = self._seq
        self.rows_fed += batch.num_rows
        self.bytes_fed += batch.nbytes
        if not targets:
            return seq
        ref = ray.put(batch)
        if self.auto_recover:  # the log pins batches in the object store until a checkpoint
            self._log.append((seq, stream, ref, tuple(targets)))
            self._log_bytes += batch.nbytes
        for nid in targets:
            self._submit(nid, stream, ref, seq)
        self._since_ckpt += 1
        if (self.checkpoint_every and self._since_ckpt >= self.checkpoint_every) or \
                (self.auto_recover and self.max_log_bytes
                 and self._log_bytes >= self.max_log_bytes):
            self.checkpoint()
        return seq

    def _submit(self, nid: str, stream, ref, seq: int) -> None:
        n = self.nodes[nid]
        self._wait(nid, self.max_in_flight - 1)
        n.inflight.append(n.actor.ingest.remote(stream, ref, seq))
        n.submitted_seq = seq
        n.max_depth = max(n.max_depth, len(n.inflight))

    def _wait(self, nid: str, limit: int) -> None:
        """Block until node ``nid`` has at most ``limit`` calls outstanding (oldest first) and
        surface errors of finished calls; a dead actor is recovered if ``auto_recover``."""
        import ray

        n = self.nodes[nid]
        t0 = time.perf_counter()
        while len(n.inflight) > limit:
            ref = n.inflight.popleft()
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError as e:
                if not self.auto_recover:
                    raise DeploymentError(f"node {nid} died: {e}") from e
                self.recover(nid)
                break  # recover() replayed the log and drained the node
        n.blocked_s += time.perf_counter() - t0

    def _wait_all(self) -> None:
        for nid in self.nodes:
            self._wait(nid, 0)

    # -- checkpoints and recovery -------------------------------------------------------------
    def checkpoint(self) -> None:
        """Snapshot every node and commit the answers produced up to the snapshot; the replay
        log is then cleared (its batches are no longer needed)."""
        import ray

        self._wait_all()
        refs = {nid: n.actor.checkpoint.remote() for nid, n in self.nodes.items()}
        for nid, ref in refs.items():
            try:
                blob, answers, seq = ray.get(ref)
            except ray.exceptions.RayActorError:
                if not self.auto_recover:
                    raise
                self.recover(nid)
                blob, answers, seq = ray.get(self.nodes[nid].actor.checkpoint.remote())
            n = self.nodes[nid]
            n.snapshot, n.snapshot_seq = blob, seq
            if answers.num_rows:
                self._committed.append(answers)
        self._log.clear()
        self._log_bytes = 0
        self._since_ckpt = 0
        self.checkpoints += 1

    def recover(self, node_id: str) -> None:
        """Replace node ``node_id`` by a new actor restored from its last checkpoint, and
        replay the batches it received after that checkpoint (from the object store)."""
        import ray

        if not self.auto_recover:
            raise DeploymentError(f"cannot recover node {node_id}: the replay log is kept only "
                                  f"with auto_recover=True")
        n = self.nodes[node_id]
        try:
            ray.kill(n.actor, no_restart=True)
        except Exception:  # already dead
            pass
        n.actor = self._new_actor(n.spec)
        n.inflight.clear()
        n.recoveries += 1
        if n.snapshot is not None:
            ray.get(n.actor.restore.remote(n.snapshot))
        for seq, stream, ref, targets in self._log:
            if node_id in targets and n.snapshot_seq < seq <= n.submitted_seq:
                n.inflight.append(n.actor.ingest.remote(stream, ref, seq))
                if len(n.inflight) >= self.max_in_flight:
                    ray.get(n.inflight.popleft())
        if n.flushed:
            n.inflight.append(n.actor.flush.remote())
        ray.get(list(n.inflight))  # a failure during replay is not retried: it raises
        n.inflight.clear()

    # -- incremental results (live streams) ---------------------------------------------------
    def take_answers(self) -> pa.Table:
        """Checkpoint, then hand over (and forget) every answer committed so far, sorted by
        (query_id, window_start): a live stream's answers up to now, each exactly once.

        Why through a checkpoint and not ``drain``: answers handed out are final only if a
        recovery can never produce them again; a recovered node replays just the batches after
        its last snapshot, and the snapshot and the answers are taken at the same point.
        ``finish()`` then returns only the answers produced after the last call."""
        self.checkpoint()
        parts, self._committed = self._committed, []
        table = concat_answers(parts)
        if table.num_rows:
            table = table.sort_by([("query_id", "ascending"), ("window_start", "ascending")])
        return table

    def take_late(self) -> pa.Table:
        """The late tuples recorded since the previous call (all of them the first time), in
        the ``RunResult.late`` layout.  Late tuples live in the trees' state (snapshots), so a
        recovered node reports the same ones and the per-tree offsets stay valid."""
        import ray

        self._wait_all()
        out = []
        for nid, n in self.nodes.items():
            since = self._late_seen.setdefault(nid, {})
            try:
                t = ray.get(n.actor.late.remote(since))
            except ray.exceptions.RayActorError:
                if not self.auto_recover:
                    raise
                self.recover(nid)
                t = ray.get(self.nodes[nid].actor.late.remote(since))
            if t.num_rows:
                for vc in pc.value_counts(t.column("tree_id")).to_pylist():
                    since[vc["values"]] = since.get(vc["values"], 0) + vc["counts"]
                out.append(t)
        return pa.concat_tables(out) if out else empty_late()

    # -- results ----------------------------------------------------------------------------
    def finish(self) -> RunResult:
        """End of input: flush every node, collect all answers (sorted by query_id,
        window_start), late tuples and metrics.  The actors stay alive until ``shutdown``."""
        import ray

        self._wait_all()
        for nid, n in self.nodes.items():  # flush goes through the same recovery path
            n.flushed = True
            n.inflight.append(n.actor.flush.remote())
        self._wait_all()
        nids = list(self.nodes)
        answers = ray.get([self.nodes[nid].actor.drain.remote() for nid in nids])
        lates = ray.get([self.nodes[nid].actor.late.remote() for nid in nids])
        table = concat_answers(self._committed + list(answers))
        if table.num_rows:
            table = table.sort_by([("query_id", "ascending"), ("window_start", "ascending")])
        late = pa.concat_tables([x for x in lates if x.num_rows]) if any(
            x.num_rows for x in lates) else empty_late()
        metrics = self.metrics()
        metrics["answers"] = table.num_rows
        self._finished = True
        return RunResult(table, late, metrics)

    def metrics(self) -> dict[str, Any]:
        """Per-node metrics (from the actors) plus driver-side queue depth and blocking time."""
        import ray

        nids = list(self.nodes)
        per = ray.get([self.nodes[nid].actor.metrics.remote() for nid in nids])
        wall = time.perf_counter() - self.t_start
        out = {"rows_fed": self.rows_fed, "bytes_fed": self.bytes_fed, "batches": self._seq + 1,
               "wall_s": wall, "technique": self.technique, "checkpoints": self.checkpoints,
               "nodes": {}}
        for nid, m in zip(nids, per):
            n = self.nodes[nid]
            m.update(queue_depth=len(n.inflight), max_queue_depth=n.max_depth,
                     driver_blocked_s=n.blocked_s, recoveries=n.recoveries,
                     utilisation=m["busy_s"] / wall if wall > 0 else 0.0)
            out["nodes"][nid] = m
        return out

    def shutdown(self) -> None:
        """Kill the actors (idempotent)."""
        import ray

        if not ray.is_initialized():
            return
        for n in self.nodes.values():
            try:
                ray.kill(n.actor, no_restart=True)
            except Exception:
                pass
        self._log.clear()

    def __enter__(self) -> "Deployment":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.shutdown()
