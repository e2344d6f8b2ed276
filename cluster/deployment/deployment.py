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
* **Exactly-once recovery** (``recovery.py``): checkpoints commit answers with snapshots, and a
  dead actor is restarted from its snapshot plus the replay log of batches fed since, which
  ``feed`` keeps (and checkpoints when it exceeds ``max_log_bytes``, default 128 MiB, a quarter
  of RayRuntime's object store, or every ``checkpoint_every`` batches).
* **Nodes lost for good and added** (``membership.py``: ``lose_node``, ``add_node``):
  ``placement.replace`` decides which trees move, recovery's machinery moves them exactly once.
* **Pinning** (``pin_nodes``, ``pinning.py``): plan node -> Ray node with a hard node affinity.
* **Results while the run goes on** (live streams): ``take_answers`` checkpoints and hands
  over the committed answers, so nothing handed over is ever regenerated (a restarted node, or
  a lost node's trees on their new hosts, start from that snapshot); ``take_late`` hands over
  the late tuples since its last call, counted per tree id (a tree takes its late tuples along
  when it moves).

The driver-side sorting in ``finish`` is by ``(query_id, window_start)``.  The plan's structure
is checked in ``plan_specs.py`` (``node_specs``), fault drills in ``fault_drills.py``, pins in
``pinning.py``.

One idea at ~650 lines: ``Deployment`` is the driver's state of one run (actors, in-flight
calls, replay log, commits) and the calls that move it (feed, take results, finish, metrics);
what can live apart already does (recovery, membership, pinning, plan checks, answer merge and
sink), and cutting the class further would only scatter that shared state over mixins.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from cluster.answers.blocks import AnswerBlocks, empty_late, merge_blocks
from cluster.answers.sink import AnswerCommits, WrittenPart, read_answers, read_late
from cluster.deployment.drills import check_faults
from cluster.deployment.membership import MembershipMixin
from cluster.deployment.options import DeploymentOptions
from cluster.deployment.pinning import resolve_pins, with_node_affinity
from cluster.deployment.recovery import DriverNode, RecoveryMixin, RestoreSource
from cluster.deployment.running_plan import Layout
from cluster.deployment.specs import DeploymentError, node_specs
from cluster.node.actor import NodeActor, shipped_executors

__all__ = ["Deployment", "RunResult"]


class RunResult:
    """What a run produced: answers (query_id, window_start, window_end, value), late tuples
    (node_id, tree_id, stream, ts_ms, value), per-node metrics, the re-placements of nodes
    lost for good (also in ``metrics["replacements"]``) and the nodes added (``additions``).

    On the actor route (``Deployment(answers="actors")``) the answers and late tuples are the
    datasets the actors wrote (``answers_dir``, ``late_dir``); ``answers``/``late`` read them
    on first access (one table each, sorted as on the driver route): the run itself never
    brings them to the driver."""

    def __init__(
        self,
        answers: pa.Table | None,
        late: pa.Table | None,
        metrics: dict[str, Any] | None = None,
        *,
        answers_dir: str | None = None,
        late_dir: str | None = None,
    ):
        self._answers, self._late = answers, late
        self.metrics: dict[str, Any] = metrics if metrics is not None else {}
        self.answers_dir, self.late_dir = answers_dir, late_dir

    @property
    def answers(self) -> pa.Table:
        if self._answers is None:
            self._answers = read_answers(self.answers_dir) if self.answers_dir else None
        return self._answers

    @property
    def late(self) -> pa.Table:
        if self._late is None:
            self._late = read_late(self.late_dir) if self.late_dir else None
        return self._late

    @property
    def replacements(self) -> list[dict[str, Any]]:
        return list(self.metrics.get("replacements", []))

    @property
    def additions(self) -> list[dict[str, Any]]:
        """Nodes added while the run went on (``Deployment.add_node``), with the trees moved."""
        return list(self.metrics.get("additions", []))


class Deployment(RecoveryMixin, MembershipMixin):
    """A plan running on Ray: ``feed`` batches, ``checkpoint``, ``finish``.

    ``technique`` overrides the plan's ``ie``; ``allowed_lateness`` is in the streams' time unit.
    ``mode``: ``"raw"`` (actors take tuple batches, ``feed_raw``) or ``"sliced"`` (actors take
    per-stream batches of pre-aggregated slices cut at ``edge_classes(stream)``, the union of
    the edges of every tree on the stream: ``spark_slices.feed_sliced``; time windows only).
    ``count_ops``: trees count their final-aggregation operations (``metrics()`` per tree:
    ``final_ops``, ``omega``), to set measured cost beside the plan's estimate.

    ``pin_nodes``: ``True`` pins plan node i to Ray node ``i mod R`` (``ray_nodes_for_pinning``
    order) with a hard ``NodeAffinitySchedulingStrategy``; a mapping gives plan node -> Ray node
    id explicitly; ``False`` (default) lets Ray choose (why hard node affinity: ``pinning.py``).
    When a pinned Ray node is gone the plan node is lost and its trees are re-placed on the
    surviving plan nodes (``lose_node``).  A restarted actor keeps its pin.

    ``faults``: a fault drill, ``[{kind: kill|lose|add, node, at_batch}]`` (``check_faults``),
    fired just before batch ``at_batch`` (0-based) is fed.
    Use as a context manager (or call ``shutdown``) so actors are killed on errors too.

    Checkpoints and recovery come from ``RecoveryMixin`` (``recovery.py``), ``lose_node`` and
    ``add_node`` from ``MembershipMixin`` (``membership.py``).
    """

    def __init__(self, plan: Mapping[str, Any], options: DeploymentOptions | None = None):
        import ray

        if not ray.is_initialized():
            raise DeploymentError("Ray is not running: use cluster.runtime.ray_runtime.RayRuntime")
        opts = options if options is not None else DeploymentOptions()
        self.options = opts
        answers, mode, out_dir = opts.answers, opts.mode, opts.out_dir
        self.answers = answers
        self.value_type: str | None = None  # actor route: fixed by the first batch fed
        self._answer_commits: AnswerCommits | None = None
        self._late_commits: AnswerCommits | None = None
        if answers == "actors":
            self._answer_commits = AnswerCommits(Path(str(out_dir)) / "answers.parquet")
            self._late_commits = AnswerCommits(Path(str(out_dir)) / "late.parquet")
            self._answer_commits.reset()
            self._late_commits.reset()
        self.mode = mode
        self.count_ops = bool(opts.count_ops)
        self.plan = plan
        self.initial_plan = plan
        self.technique = opts.technique or plan.get("ie") or "slickdeque"
        self.allowed_lateness = int(opts.allowed_lateness)
        self.max_in_flight = int(opts.max_in_flight)
        self.checkpoint_every = opts.checkpoint_every
        self.max_log_bytes = opts.max_log_bytes
        self.auto_recover = opts.auto_recover
        self.actor_options = dict(opts.actor_options)
        self.nodes: dict[str, DriverNode] = {}
        specs = node_specs(plan)
        if mode == "sliced":
            cq = [
                q["id"]
                for sp in specs
                for t in sp["trees"]
                for q in t["queries"]
                if q["kind"] != "time"
            ]
            if cq:
                raise DeploymentError(
                    f"sliced mode runs time windows only; count-window queries: {cq[:10]}"
                )
        self.faults = check_faults(list(opts.faults), [sp["node_id"] for sp in specs])
        pins = resolve_pins(opts.pin_nodes, [sp["node_id"] for sp in specs], self.actor_options)
        self._pinning = bool(opts.pin_nodes)  # add_node pins a new node too
        self._created = len(specs)  # plan nodes started so far (add_node's pin index)
        # actors are named (in the driver's Ray namespace) so that Spark tasks attached to the
        # cluster find them (the executor route: executor_feed)
        self._run_id = uuid.uuid4().hex[:10]
        self._spawned = 0
        self.actor_names: dict[str, str] = {}
        for spec in specs:
            nid = spec["node_id"]
            n = DriverNode(
                spec,
                None,
                [RestoreSource(list(spec["trees"]), None, -1, nid)],
                ray_node=pins.get(nid),
            )
            self.nodes[nid] = n
            n.actor = self._new_actor(nid, spec["trees"])
        self.stream_nodes: dict[str, list[str]] = {}
        self._route()
        self._committed: list[AnswerBlocks] = []
        # take_late: late tuples already handed over, per tree id (tree ids are unique in a
        # plan, and a tree keeps its late tuples when it moves to another node)
        self._late_seen: dict[str, int] = {}
        # replay log: (seq, stream, batch ref, target nodes, streams in the batch)
        self._log: list[tuple[int, str | None, Any, tuple[str, ...], tuple[str, ...]]] = []
        self._seq = -1
        # batches fed (driver route: ``feed`` calls, = _seq + 1; executor route: pieces): the
        # clock of fault drills and of ``before_batch`` in re-placement records
        self.batches_fed = 0
        self._since_ckpt = 0
        self._log_bytes = 0
        self._layout: Layout | None = None
        self.lost: dict[str, dict[str, Any]] = {}
        self.replacements: list[dict[str, Any]] = []
        self.additions: list[dict[str, Any]] = []
        self.checkpoints = 0
        self._rounds = 0  # checkpoint rounds (a round repeated after a loss counts again)
        self.rows_fed = 0
        self.bytes_fed = 0
        self.t_start = time.perf_counter()
        self._finished = False
        # actors start asynchronously; fail fast if one cannot be constructed
        ray.get([n.actor.ping.remote() for n in self.nodes.values()])

    # -- answers ----------------------------------------------------------------------------
    def _checkpoint_call(self, actor):
        """The checkpoint call of the answer route: answers back as blocks (driver route) or
        written by the actor as this round's part (actor route)."""
        if self.answers == "actors":
            assert self._answer_commits is not None
            return actor.checkpoint_write.remote(
                str(self._answer_commits.root), f"{self._rounds:06d}", self.value_type
            )
        return actor.checkpoint_blocks.remote()

    def _commit(self, answers: AnswerBlocks | WrittenPart) -> None:
        if isinstance(answers, WrittenPart):
            assert self._answer_commits is not None
            self._answer_commits.commit(answers)
        elif answers.num_rows:
            self._committed.append(answers)

    def declare_input(self, schema: pa.Schema) -> str:
        """Fix the run's answer value type from the input's schema (the actor route writes
        every part with one schema): int64 iff every query's aggregate gives integers on its
        stream's type (sliced batches: the type of ``sum``), as the trees themselves decide.
        Called by ``feed`` on the first batch; executor feeds call it with the file's schema.
        Returns ``"int64"`` or ``"float64"``."""
        from executors.aggregates import get_aggregate

        if self.value_type is not None:
            return self.value_type
        names = set(schema.names)

        def is_int(stream: str) -> bool:
            col = "sum" if "slice_start" in names else stream
            return col not in names or pa.types.is_integer(schema.field(col).type)

        ok = all(
            get_aggregate(q["aggregate"]).output_is_int(is_int(t["stream"]))
            for n in self.nodes.values()
            for t in n.spec["trees"]
            for q in t["queries"]
        )
        self.value_type = "int64" if ok else "float64"
        return self.value_type

    # -- actors -----------------------------------------------------------------------------
    def _new_actor(self, node_id: str, trees: list[dict]):
        import ray

        opts = with_node_affinity(self.actor_options, self.nodes[node_id].ray_node)
        self._spawned += 1
        name = f"weaveplace-{self._run_id}-{node_id}-{self._spawned}"
        self.actor_names[node_id] = name
        opts = {"name": name, "namespace": ray.get_runtime_context().namespace, **opts}
        cls = NodeActor.options(**opts)
        return cls.remote(
            node_id,
            list(trees),
            self.technique,
            self.allowed_lateness,
            "slices" if self.mode == "sliced" else "tuples",
            self.count_ops,
            executors=shipped_executors(),
        )

    def _route(self) -> None:
        """Which nodes host which streams (batches go only there)."""
        self.stream_nodes = {}
        for nid, n in self.nodes.items():
            for t in n.spec["trees"]:
                hosts = self.stream_nodes.setdefault(t["stream"], [])
                if nid not in hosts:
                    hosts.append(nid)

    @property
    def last_seq(self) -> int:
        """The sequence number of the last batch fed (-1 before the first)."""
        return self._seq

    @property
    def late_seen(self) -> dict[str, int]:
        """Late tuples counted so far per tree id (a copy)."""
        return dict(self._late_seen)

    def follow_plan(self, plan: Mapping[str, Any]) -> None:
        """Adopt ``plan`` as the running plan (a service re-planned between batches): later
        membership changes (``lose_node``, ``add_node``) start from it."""
        self.plan = plan
        self._layout = None

    @property
    def streams(self) -> list[str]:
        return sorted(self.stream_nodes)

    def edge_classes(self, stream: str) -> list[tuple[int, int]]:
        """Residue classes ``(s, c)`` of the union of the edges of every tree (on every node)
        on ``stream``: the slice boundaries of sliced mode (DESIGN.md s. 2).  Moving trees
        between nodes does not change it."""
        from executors.slicing import edge_classes

        rs = {
            (int(q["range"]), int(q["slide"]))
            for n in self.nodes.values()
            for t in n.spec["trees"]
            if t["stream"] == stream
            for q in t["queries"]
        }
        return edge_classes(sorted(rs))

    def actor(self, node_id: str):
        """The live actor of a node (e.g. to ``ray.kill`` it in a fault test)."""
        if node_id in self.lost:
            raise DeploymentError(f"node {node_id!r} was lost: it has no actor")
        return self.nodes[node_id].actor

    def placement(self) -> dict[str, str | None]:
        """Plan node -> the Ray node its actor runs on (asked from the actors)."""
        import ray

        nids = list(self.nodes)
        return dict(zip(nids, ray.get([self.nodes[n].actor.ray_node_id.remote() for n in nids])))

    # -- feeding ----------------------------------------------------------------------------
    def feed(self, stream: str | None, batch) -> int:
        """Send one Arrow batch (``ts_ms`` + stream column(s)) to every node hosting a stream in
        it (``stream=None``: all streams whose columns the batch has).  Blocks while a target
        actor has ``max_in_flight`` calls outstanding.  Returns the batch's sequence number."""
        import ray

        if self._finished:
            raise DeploymentError("deployment already finished")
        self._fire_faults(self.batches_fed)
        if isinstance(batch, pa.Table):
            batch = (
                batch.combine_chunks().to_batches()[0]
                if batch.num_rows
                else pa.RecordBatch.from_pylist([], schema=batch.schema)
            )
        if self.value_type is None:
            self.declare_input(batch.schema)
        names = set(batch.schema.names)
        streams = [stream] if stream is not None else [s for s in self.streams if s in names]
        targets = sorted({nid for s in streams for nid in self.stream_nodes.get(s, [])})
        self._seq += 1
        self.batches_fed += 1
        seq = self._seq
        self.rows_fed += batch.num_rows
        self.bytes_fed += batch.nbytes
        if not targets:
            return seq
        ref = ray.put(batch)
        if self.auto_recover:  # the log pins batches in the object store until a checkpoint
            self._log.append((seq, stream, ref, tuple(targets), tuple(streams)))
            self._log_bytes += batch.nbytes
        for nid in targets:
            # a node lost while this batch was being sent: its trees' new hosts took the batch
            # from the log when they adopted the trees
            if nid in self.nodes:
                self._submit(nid, stream, ref, seq)
        self._since_ckpt += 1
        if (self.checkpoint_every and self._since_ckpt >= self.checkpoint_every) or (
            self.auto_recover and self.max_log_bytes and self._log_bytes >= self.max_log_bytes
        ):
            self.checkpoint()
        return seq

    def _fire_faults(self, batch_no: int) -> None:
        import ray

        for f in self.faults:
            if f["fired"] or f["at_batch"] > batch_no:
                continue
            f["fired"] = True
            if f["kind"] == "lose":
                self.lose_node(f["node"], reason=f"fault drill at batch {f['at_batch']}")
            elif f["kind"] == "add":
                self.add_node(
                    f["node"],
                    capacity=f.get("capacity"),
                    reason=f"fault drill at batch {f['at_batch']}",
                )
            elif f["node"] in self.nodes:
                ray.kill(self.nodes[f["node"]].actor, no_restart=True)

    def _submit(self, nid: str, stream, ref, seq: int) -> None:
        self._wait(nid, self.max_in_flight - 1)
        n = self.nodes.get(nid)
        if n is None:  # lost while we waited: the adopters replayed this batch from the log
            return
        n.inflight.append(n.actor.ingest.remote(stream, ref, seq))
        n.submitted_seq = seq
        n.max_depth = max(n.max_depth, len(n.inflight))

    def _wait(self, nid: str, limit: int) -> None:
        """Block until node ``nid`` has at most ``limit`` calls outstanding (oldest first) and
        surface errors of finished calls; a dead actor is recovered (or, if its Ray node is
        gone, the node is lost and re-placed) if ``auto_recover``."""
        import ray

        n = self.nodes.get(nid)
        if n is None:
            return
        t0 = time.perf_counter()
        while len(n.inflight) > limit:
            ref = n.inflight.popleft()
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError as e:
                if not self.auto_recover:
                    raise DeploymentError(f"node {nid} died: {e}") from e
                self._on_dead(nid)
                break  # recover() replayed the log and drained the node (or it was lost)
        n.blocked_s += time.perf_counter() - t0

    def _wait_all(self) -> None:
        for nid in list(self.nodes):
            self._wait(nid, 0)

    # -- incremental results (live streams) ---------------------------------------------------
    def take_answers(self) -> pa.Table:
        """Checkpoint, then hand over (and forget) every answer committed so far, sorted by
        (query_id, window_start): a live stream's answers up to now, each exactly once.

        Why through a checkpoint and not ``drain``: answers handed out are final only if a
        recovery can never produce them again; a recovered node replays just the batches after
        its last snapshot, and the snapshot and the answers are taken at the same point.
        ``finish()`` then returns only the answers produced after the last call."""
        if self.answers == "actors":
            raise DeploymentError(
                "take_answers: the actors write the answers themselves (answers='actors'); "
                "use the driver route for answers handed over as they come"
            )
        self.checkpoint()
        parts, self._committed = self._committed, []
        return merge_blocks(parts)

    def take_late(self) -> pa.Table:
        """The late tuples recorded since the previous call (all of them the first time), in
        the ``RunResult.late`` layout (``node_id``: the node hosting the tree when the tuple
        is handed over).

        Offsets are kept per tree id, not per node: tree ids are unique plan-wide and a tree's
        late tuples live in its state (snapshots), in arrival order.  A recovered node, and a
        tree restored on another node after ``lose_node`` (from the lost node's snapshot plus
        the replayed batches), hold the same late tuples in the same order, so the offset
        stays valid wherever the tree now runs: nothing repeated, nothing dropped.  If a node
        is lost while the nodes are asked, the round is asked again (offsets move only once a
        round saw every tree on its current host)."""
        import ray

        while True:
            self._wait_all()
            lost = len(self.lost)
            since = dict(self._late_seen)
            parts = []
            for nid in list(self.nodes):
                if nid not in self.nodes:  # lost meanwhile: this round is repeated
                    break
                try:
                    t = ray.get(self.nodes[nid].actor.late.remote(since))
                except ray.exceptions.RayActorError:
                    if not self.auto_recover:
                        raise
                    self._on_dead(nid)  # restarted, or lost for good (then repeat the round)
                    if nid not in self.nodes:
                        break
                    t = ray.get(self.nodes[nid].actor.late.remote(since))
                if t.num_rows:
                    parts.append(t)
            if len(self.lost) == lost:
                break
        for t in parts:
            for vc in pc.value_counts(t.column("tree_id")).to_pylist():
                self._late_seen[vc["values"]] = self._late_seen.get(vc["values"], 0) + vc["counts"]
        return pa.concat_tables(parts) if parts else empty_late()

    # -- results ----------------------------------------------------------------------------
    def finish(self) -> RunResult:
        """End of input: flush every node, collect all answers (sorted by query_id,
        window_start), late tuples and metrics.  The actors stay alive until ``shutdown``."""
        import ray

        t0 = time.perf_counter()
        self._fire_faults(self.batches_fed)  # a drill "at" the batch after the last one
        self._wait_all()
        t1 = time.perf_counter()
        for _nid, n in self.nodes.items():  # flush goes through the same recovery path
            n.flushed = True
            n.inflight.append(n.actor.flush.remote())
        self._wait_all()
        t2 = time.perf_counter()
        if self.answers == "actors":
            return self._finish_actor_route(t0, t1, t2)
        nids = list(self.nodes)
        answers = ray.get([self.nodes[nid].actor.drain_blocks.remote() for nid in nids])
        lates = ray.get([self.nodes[nid].actor.late.remote() for nid in nids])
        t3 = time.perf_counter()
        table = merge_blocks(self._committed + list(answers))
        t4 = time.perf_counter()
        late = (
            pa.concat_tables([x for x in lates if x.num_rows])
            if any(x.num_rows for x in lates)
            else empty_late()
        )
        metrics = self.metrics()
        metrics["answers"] = table.num_rows
        metrics["answers_route"] = "driver"
        # what crossed into the driver: answer blocks travel as window_start + value
        metrics["answer_bytes_to_driver"] = int(
            sum(
                p.starts[i].nbytes + p.values[i].nbytes
                for p in self._committed + list(answers)
                for i in range(len(p.qids))
            )
            + sum(x.nbytes for x in lates)
        )
        # where finish spends its time: the nodes working off their queues, flushing, handing
        # over answers (drain + transfer), the driver merging them
        metrics["finish"] = {
            "queue_s": t1 - t0,
            "flush_s": t2 - t1,
            "collect_s": t3 - t2,
            "merge_s": t4 - t3,
        }
        self._finished = True
        return RunResult(table, late, metrics)

    def _finish_actor_route(self, t0: float, t1: float, t2: float) -> RunResult:
        """``finish`` when the actors write the answers: a last checkpoint round writes (and
        commits) every node's remaining answers, each node writes its late tuples, and
        uncommitted parts are deleted (``answer_sink``'s protocol).  Only part names and
        counts reach the driver."""
        import ray

        assert self._answer_commits is not None and self._late_commits is not None
        self.checkpoint()
        root = str(self._late_commits.root)
        for part in ray.get([n.actor.write_late.remote(root) for n in self.nodes.values()]):
            self._late_commits.commit(part)
        t3 = time.perf_counter()
        orphans = self._answer_commits.finalize() + self._late_commits.finalize()
        t4 = time.perf_counter()
        metrics = self.metrics()
        metrics["answers"] = self._answer_commits.num_rows
        metrics["answers_route"] = "actors"
        metrics["answer_bytes_to_driver"] = 0
        metrics["answer_parts"] = len(self._answer_commits.parts)
        metrics["answer_bytes_written"] = self._answer_commits.nbytes
        metrics["late_tuples"] = self._late_commits.num_rows
        metrics["orphan_parts_removed"] = orphans
        metrics["finish"] = {
            "queue_s": t1 - t0,
            "flush_s": t2 - t1,
            "collect_s": t3 - t2,  # the last round of writes
            "merge_s": t4 - t3,  # the commit (orphans removed, manifest)
        }
        self._finished = True
        return RunResult(
            None,
            None,
            metrics,
            answers_dir=str(self._answer_commits.root),
            late_dir=str(self._late_commits.root),
        )

    def metrics(self) -> dict[str, Any]:
        """Per-node metrics (from the actors) plus driver-side queue depth, blocking time,
        recoveries and pins; nodes lost for good, their re-placements and the fault drill."""
        import ray

        nids = list(self.nodes)
        per = ray.get([self.nodes[nid].actor.metrics.remote() for nid in nids])
        wall = time.perf_counter() - self.t_start
        out = {
            "rows_fed": self.rows_fed,
            "bytes_fed": self.bytes_fed,
            "batches": self.batches_fed,
            "wall_s": wall,
            "technique": self.technique,
            "checkpoints": self.checkpoints,
            "nodes": {},
            "lost_nodes": dict(self.lost),
            "replacements": list(self.replacements),
            "additions": list(self.additions),
            "faults": [dict(f) for f in self.faults],
        }
        for nid, m in zip(nids, per):
            n = self.nodes[nid]
            m.update(
                queue_depth=len(n.inflight),
                max_queue_depth=n.max_depth,
                driver_blocked_s=n.blocked_s,
                recoveries=n.recoveries,
                adopted_trees=n.adopted,
                added_trees=n.added,
                ray_node=n.ray_node,
                utilisation=m["busy_s"] / wall if wall > 0 else 0.0,
            )
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

    def __enter__(self) -> Deployment:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.shutdown()
