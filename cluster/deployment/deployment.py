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
  ``feed`` fills (and checkpoints when it exceeds ``max_log_bytes``, default 128 MiB, a quarter
  of RayRuntime's object store, or every ``checkpoint_every`` batches).
* **Nodes lost for good and added** (``membership.py``: ``lose_node``, ``add_node``):
  ``placement.replace`` decides which trees move, recovery's machinery moves them exactly once.
* **Pinning** (``DeploymentOptions.pin_nodes``, ``pinning.py``): plan node -> Ray node with a
  hard node affinity.
* **Results while the run goes on** (live streams): ``take_answers`` checkpoints and hands
  over the committed answers, so nothing handed over is ever regenerated (a restarted node, or
  a lost node's trees on their new hosts, start from that snapshot); ``take_late`` hands over
  the late tuples since its last call, counted per tree id (a tree takes its late tuples along
  when it moves).

The driver-side sorting in ``finish`` is by ``(query_id, window_start)``.  The plan's structure
is checked in ``specs.py`` (``node_specs``), fault drills in ``drills.py``, pins in
``pinning.py``.

Who owns what: ``Deployment`` is the driver's state of one run (the nodes and their actors,
in-flight calls, the batch clock) and the calls that move it (feed, take results, finish,
metrics).  Its collaborators own the rest: ``CheckpointCoordinator`` (``recovery.py``: rounds,
replay log, commits, recovery), ``Membership`` (``membership.py``: running plan and layout,
lost/added nodes), an ``AnswerRoute`` (``answer_routes.py``: driver or actors),
``LateHandover`` (``late_handover.py``: ``take_late``'s offsets).  The public methods delegate
to them, so callers see one object.  Why the file is still ~500 lines: about 100 of them are
those one-line delegations and their docstrings (the public API callers keep), the rest is the
feed path (routing, backpressure, the batch clock), one idea around the nodes' calls.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from cluster.deployment.answer_routes import answer_route, answer_value_type
from cluster.deployment.drills import check_faults, fire_due_faults
from cluster.deployment.late_handover import LateHandover
from cluster.deployment.liveness import Liveness
from cluster.deployment.membership import Membership
from cluster.deployment.options import DeploymentOptions
from cluster.deployment.pinning import resolve_pins, with_node_affinity
from cluster.deployment.recovery import (
    CheckpointCoordinator,
    DriverNode,
    LoggedBatch,
    RestoreSource,
)
from cluster.deployment.result import RunResult
from cluster.deployment.specs import DeploymentError, node_specs
from cluster.node.actor import NodeActor, shipped_executors

__all__ = ["Deployment"]


class Deployment:
    """A plan running on Ray: ``feed`` batches, ``checkpoint``, ``finish``.

    ``options`` (``DeploymentOptions``; default: all defaults) holds the settings:
    ``technique`` overrides the plan's ``ie``; ``allowed_lateness`` is in the streams' time unit.
    ``mode``: ``"raw"`` (actors take tuple batches, ``feed_raw``) or ``"sliced"`` (actors take
    per-stream batches of pre-aggregated slices cut at ``edge_classes(stream)``, the union of
    the edges of every tree on the stream: ``cluster.feeds.sliced.feed_sliced``; time windows
    only).  ``count_ops``: trees count their final-aggregation operations (``metrics()`` per
    tree: ``final_ops``, ``omega``), to set measured cost beside the plan's estimate.

    ``pin_nodes``: ``True`` pins plan node i to Ray node ``i mod R`` (``ray_nodes_for_pinning``
    order) with a hard ``NodeAffinitySchedulingStrategy``; a mapping gives plan node -> Ray node
    id explicitly; ``False`` (default) lets Ray choose (why hard node affinity: ``pinning.py``).
    When a pinned Ray node is gone the plan node is lost and its trees are re-placed on the
    surviving plan nodes (``lose_node``).  A restarted actor keeps its pin; a node added while
    running goes to the alive Ray node hosting the fewest plan nodes (``pin_for_added_node``).

    ``faults``: a fault drill, ``[{kind: kill|lose|add, node, at_batch}]`` (``check_faults``),
    fired just before batch ``at_batch`` (0-based) is fed; at the batch after the last one,
    at the very end of ``finish``.
    Use as a context manager (or call ``shutdown``) so actors are killed on errors too.

    Checkpoints and recovery are delegated to ``coordinator`` (``CheckpointCoordinator``),
    ``lose_node`` and ``add_node`` to ``membership`` (``Membership``), the answers' way out to
    ``answer_route`` (``AnswerRoute``).
    """

    def __init__(self, plan: Mapping[str, Any], options: DeploymentOptions | None = None):
        import ray

        if not ray.is_initialized():
            raise DeploymentError("Ray is not running: use cluster.runtime.ray_runtime.RayRuntime")
        opts = options if options is not None else DeploymentOptions()
        self.options = opts
        self.value_type: str | None = None  # actor route: fixed by the first batch fed
        self.answer_route = answer_route(opts)
        self.coordinator = CheckpointCoordinator(self, opts, self.answer_route)
        self.initial_plan = plan
        self.technique = opts.technique or plan.get("ie") or "slickdeque"
        self.nodes: dict[str, DriverNode] = {}
        specs = node_specs(plan)
        if opts.mode == "sliced":
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
        self.membership = Membership(self, plan, pinning=bool(opts.pin_nodes))
        # actors are named (in the driver's Ray namespace) so that Spark tasks attached to the
        # cluster find them (the executor route: cluster.feeds.executors)
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
            n.actor = self.start_actor(nid, spec["trees"])
        self.stream_nodes: dict[str, list[str]] = {}
        self.update_routes()
        self.late_handover = LateHandover(self)  # take_late's offsets, per tree id
        self._seq = -1
        # batches fed (driver route: ``feed`` calls, = _seq + 1; executor route: pieces): the
        # clock of fault drills and of ``before_batch`` in re-placement records
        self.batches_fed = 0
        self.rows_fed = 0
        self.bytes_fed = 0
        #: the newest event time (ms) handed to the deployment so far (``None``: none yet); the
        #: fault log's events carry it (``cluster.deployment.faults``)
        self.event_time: int | None = None
        self.t_start = time.perf_counter()
        #: ``perf_counter()`` when the first rows were handed over (``None``: none yet): a
        #: run's ``startup.first_row_s`` (``cluster.runs.startup``)
        self.first_row_at: float | None = None
        self._finished = False
        # actors start asynchronously; fail fast if one cannot be constructed
        ray.get([n.actor.ping.remote() for n in self.nodes.values()])
        #: the health check: silent nodes are not waited for, stuck ones killed and recovered
        self.liveness = Liveness(self, opts.call_timeout_s)
        self.liveness.start()

    def declare_input(self, schema: pa.Schema) -> str:
        """Fix the run's answer value type from the input's schema (the actor route writes
        every part with one schema): int64 iff every query's aggregate gives integers on its
        stream's type (sliced batches: the type of ``sum``), as the trees themselves decide.
        Called by ``feed`` on the first batch; executor feeds call it with the file's schema.
        Returns ``"int64"`` or ``"float64"``."""
        if self.value_type is None:
            trees = [t for n in self.nodes.values() for t in n.spec["trees"]]
            self.value_type = answer_value_type(schema, trees)
        return self.value_type

    # -- actors -----------------------------------------------------------------------------
    def start_actor(self, node_id: str, trees: list[dict]):
        """A new (named) actor for plan node ``node_id`` hosting ``trees``."""
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

    def update_routes(self) -> None:
        """Which nodes host which streams (batches go only there)."""
        self.stream_nodes = {}
        for nid, n in self.nodes.items():
            for t in n.spec["trees"]:
                hosts = self.stream_nodes.setdefault(t["stream"], [])
                if nid not in hosts:
                    hosts.append(nid)

    # -- the options, read where they are used --------------------------------------------------
    @property
    def mode(self) -> str:
        return self.options.mode

    @property
    def answers(self) -> str:
        return self.options.answers

    @property
    def count_ops(self) -> bool:
        return bool(self.options.count_ops)

    @property
    def allowed_lateness(self) -> int:
        return int(self.options.allowed_lateness)

    @property
    def max_in_flight(self) -> int:
        return int(self.options.max_in_flight)

    @property
    def checkpoint_every(self) -> int | None:
        return self.options.checkpoint_every

    @property
    def max_log_bytes(self) -> int | None:
        return self.options.max_log_bytes

    @property
    def auto_recover(self) -> bool:
        return self.options.auto_recover

    @property
    def actor_options(self) -> Mapping[str, Any]:
        return self.options.actor_options

    @property
    def last_seq(self) -> int:
        """The sequence number of the last batch fed (-1 before the first)."""
        return self._seq

    @property
    def late_seen(self) -> dict[str, int]:
        """Late tuples counted so far per tree id (a copy)."""
        return dict(self.late_handover.seen)

    def follow_plan(self, plan: Mapping[str, Any]) -> None:
        """Adopt ``plan`` as the running plan (a service re-planned between batches): later
        membership changes (``lose_node``, ``add_node``) start from it."""
        self.membership.follow_plan(plan)

    # -- what the collaborators own, as before ------------------------------------------------
    @property
    def plan(self) -> Mapping[str, Any]:
        """The running plan (follows nodes lost and added)."""
        return self.membership.plan

    @property
    def lost(self) -> dict[str, dict[str, Any]]:
        return self.membership.lost

    @property
    def replacements(self) -> list[dict[str, Any]]:
        return self.membership.replacements

    @property
    def additions(self) -> list[dict[str, Any]]:
        return self.membership.additions

    @property
    def checkpoints(self) -> int:
        return self.coordinator.checkpoints

    @property
    def checkpoint_rounds(self) -> int:
        """Checkpoint rounds so far (the actor route names its answer parts by round)."""
        return self.coordinator.rounds

    @property
    def finished(self) -> bool:
        return self._finished

    def checkpoint(self, may_skip: bool = False) -> None:
        """Snapshot every node and commit the answers up to the snapshot
        (``CheckpointCoordinator.checkpoint``; ``may_skip``: silent nodes keep their last
        snapshot, ``cluster.deployment.liveness``)."""
        self.coordinator.checkpoint(may_skip)

    def recover(self, node_id: str) -> None:
        """Restart node ``node_id``'s actor from its checkpoint and replay the log
        (``CheckpointCoordinator.recover``)."""
        self.coordinator.recover(node_id)

    def actor_died(self, node_id: str, error: BaseException | None = None) -> None:
        """Node ``node_id``'s actor died: restart it, or lose the node if its Ray node is gone
        (``CheckpointCoordinator.on_dead``; recorded in ``fault_log``)."""
        self.coordinator.on_dead(node_id, error)

    @property
    def fault_log(self):
        """The failures detected and the recoveries (``cluster.deployment.faults.FaultLog``)."""
        return self.coordinator.faults

    def lose_node(self, node_id: str, reason: str = "declared lost") -> dict[str, Any]:
        """Re-place node ``node_id``'s trees on the other nodes (``Membership.lose_node``)."""
        return self.membership.lose_node(node_id, reason)

    def add_node(
        self,
        node_id: str | None = None,
        *,
        capacity: float | None = None,
        ray_node: str | None = None,
        reason: str = "added",
    ) -> dict[str, Any]:
        """Scale out: a new node takes trees from the busiest (``Membership.add_node``)."""
        return self.membership.add_node(
            node_id, capacity=capacity, ray_node=ray_node, reason=reason
        )

    # -- the executor route feeds through these (``cluster.feeds.executors``) ---------------
    def log_for_replay(self, entry: LoggedBatch) -> None:
        """Keep a batch fed by other means than ``feed`` for replays (a ``PieceSource``)."""
        self.coordinator.log_batch(entry)

    def note_pushed(
        self, last_seq: int, batches_fed: int, batches: int, event_time: int | None = None
    ) -> bool:
        """``batches`` more were applied by every node up to ``last_seq`` (the drills' clock is
        now ``batches_fed``; ``event_time``: the newest timestamp among them); returns whether
        ``checkpoint_every`` says to checkpoint."""
        self.note_event_time(event_time)
        if batches and self.first_row_at is None:
            self.first_row_at = time.perf_counter()
        self._seq = int(last_seq)
        self.batches_fed = int(batches_fed)
        self.coordinator.count_fed(batches)
        return self.coordinator.due_by_count()

    @property
    def streams(self) -> list[str]:
        return sorted(self.stream_nodes)

    def edge_classes(self, stream: str) -> list[tuple[int, int]]:
        """Residue classes ``(s, c)`` of the union of the edges of every tree (on every node)
        on ``stream``: the slice boundaries of sliced mode (docs/DESIGN.md s. 2).  Moving trees
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
    def start_clock(self) -> None:
        """The data path's clock (``metrics()["wall_s"]``) starts now: a run calls it once Ray,
        Spark and the actors are up (``cluster.runs.startup``), so a Spark start that overlaps
        the actors' creation is counted in ``startup``, not in ``wall_s``."""
        self.t_start = time.perf_counter()

    def feed(self, stream: str | None, batch) -> int:
        """Send one Arrow batch (``ts_ms`` + stream column(s)) to every node hosting a stream in
        it (``stream=None``: all streams whose columns the batch has).  Blocks while a target
        actor has ``max_in_flight`` calls outstanding.  Returns the batch's sequence number."""
        import ray

        if self._finished:
            raise DeploymentError("deployment already finished")
        self.recover_declared()
        self.fire_faults(self.batches_fed)
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
        if batch.num_rows and self.first_row_at is None:
            self.first_row_at = time.perf_counter()
        tcol = next((c for c in ("ts_ms", "ts_max") if c in names), None)  # rows, or slices
        if tcol is not None and batch.num_rows:
            self.note_event_time(pc.max(batch.column(tcol)).as_py())
        if not targets:
            return seq
        ref = ray.put(batch)
        if self.auto_recover:  # the log pins batches in the object store until a checkpoint
            self.coordinator.log_batch(
                LoggedBatch(seq, stream, ref, tuple(targets), tuple(streams), batch.nbytes)
            )
        for nid in targets:
            # a node lost while this batch was being sent: its trees' new hosts took the batch
            # from the log when they adopted the trees
            if nid in self.nodes:
                self._submit(nid, stream, ref, seq)
        self.coordinator.count_fed()
        if self.coordinator.due():
            self.checkpoint(may_skip=True)
            if self.coordinator.over_budget():  # silent nodes hold the log: their verdict
                self.catch_up_all()
        return seq

    def fire_faults(self, batch_no: int) -> None:
        """Fire the drill's faults due before batch ``batch_no`` (0-based) is fed."""
        fire_due_faults(self, self.faults, batch_no)

    def note_event_time(self, ts: int | None) -> None:
        """Rows up to event time ``ts`` were handed to the deployment (feeds that bypass
        ``feed``: the executor route)."""
        if ts is not None and (self.event_time is None or ts > self.event_time):
            self.event_time = int(ts)

    def _submit(self, nid: str, stream, ref, seq: int) -> None:
        n = self.nodes[nid]
        if n.behind:  # silent: the batch waits in the replay log, unless it catches up now
            n.submitted_seq = seq
            self.catch_up(nid, block=False)
            return
        if not self.wait(nid, self.max_in_flight - 1, may_skip=True):
            n.submitted_seq = seq  # went silent now: the same
            return
        n = self.nodes.get(nid)
        if n is None:  # lost while we waited: the adopters replayed this batch from the log
            return
        n.inflight.append(n.actor.ingest.remote(stream, ref, seq))
        n.submitted_seq = n.sent_seq = seq
        n.max_depth = max(n.max_depth, len(n.inflight))

    def wait(self, nid: str, limit: int, may_skip: bool = False) -> bool:
        """Block until node ``nid`` has at most ``limit`` calls outstanding (oldest first) and
        surface errors of finished calls; a dead actor is recovered (or, if its Ray node is
        gone, the node is lost and re-placed) if ``auto_recover``.

        ``may_skip``: stop waiting if the node turns silent (``cluster.deployment.liveness``;
        only with a replay log): it is then ``behind`` and ``False`` is returned.  Otherwise
        the wait lasts until the calls return or fail, which the health check bounds: a node
        silent for ``call_timeout_s`` is killed, so its calls fail and it is recovered."""
        import ray

        n = self.nodes.get(nid)
        if n is None:
            return True
        skip = may_skip and self.auto_recover and self.liveness.enabled
        t0 = time.perf_counter()
        done = True
        while len(n.inflight) > limit:
            ref = n.inflight[0]
            if not ray.wait([ref], timeout=self.poll_s)[0]:
                if skip and self.liveness.silent(nid):
                    n.behind, done = True, False
                    break
                continue
            n.inflight.popleft()
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError as e:
                if not self.auto_recover:
                    raise DeploymentError(f"node {nid} died: {e}") from e
                self.coordinator.on_dead(nid, e)
                break  # recover() replayed the log and drained the node (or it was lost)
            n.last_seen = time.time()
        n.blocked_s += time.perf_counter() - t0
        return done

    #: seconds between looks at the health check while waiting on a node's call
    poll_s = 0.2

    def get_reply(self, nid: str, ref, may_skip: bool = True) -> tuple[bool, Any]:
        """``(True, reply)`` of node ``nid``'s call ``ref``, or with ``may_skip``
        ``(False, None)`` if the node turns silent first (with a replay log and a health
        check; else this waits as ``ray.get``).  A failed call raises as ``ray.get`` does."""
        import ray

        skip = may_skip and self.auto_recover and self.liveness.enabled
        while skip and not ray.wait([ref], timeout=self.poll_s)[0]:
            if self.liveness.silent(nid):
                return False, None
        return True, ray.get(ref)

    def wait_all(self, may_skip: bool = False) -> None:
        """Wait until no node has a call outstanding (errors surfaced, dead actors recovered);
        ``may_skip``: but silent nodes, left ``behind`` (``wait``).  Without it, nodes behind
        catch up first (``catch_up_all``)."""
        if not may_skip:
            self.catch_up_all()
        for nid in list(self.nodes):
            n = self.nodes.get(nid)
            if n is not None and not (may_skip and n.behind):
                self.wait(nid, 0, may_skip=may_skip)

    # -- silent nodes (``cluster.deployment.liveness``) ---------------------------------------
    @property
    def lagging(self) -> list[str]:
        """The nodes behind: silent, their batches waiting in the replay log."""
        return sorted(nid for nid, n in self.nodes.items() if n.behind)

    def catch_up(self, nid: str, block: bool = True) -> bool:
        """Bring node ``nid`` up to date if it is behind: its outstanding calls (a checkpoint
        it went silent in among them) answered, then the logged batches it owes sent in
        order.  ``block=False``: give up (``False``) while it is still silent; ``True`` waits
        until it answers or, stuck, is killed and recovered (``wait``)."""
        import ray

        n = self.nodes.get(nid)
        while n is not None and n.behind:
            if not block and self.liveness.silent(nid):
                return False
            try:
                if not self.wait(nid, 0, may_skip=not block):
                    return False
                if self.nodes.get(nid) is not n:  # lost meanwhile: re-placed
                    return True
                while not self.coordinator.settle(nid):
                    if not block and self.liveness.silent(nid):
                        return False
                    ray.wait([n.pending_checkpoint[0]], timeout=self.poll_s)
            except ray.exceptions.RayActorError as e:
                self.coordinator.on_dead(nid, e)  # recovery replays what it owes
                n = self.nodes.get(nid)
                continue
            if n.behind:
                n.behind = False
                actor = n.actor
                for b in list(self.coordinator.log):
                    if nid not in b.targets or not n.sent_seq < b.seq <= n.submitted_seq:
                        continue
                    if not self.wait(nid, self.max_in_flight - 1, may_skip=not block):
                        break  # silent again: behind, from the next one it owes
                    if self.nodes.get(nid) is not n or n.actor is not actor or n.behind:
                        break  # recovered or lost meanwhile: that replayed the rest
                    n.inflight.append(n.actor.ingest.remote(b.stream, b.source, b.seq))
                    n.sent_seq = b.seq
            n = self.nodes.get(nid)
        return True

    def owed(self, nid: str) -> int:
        """Batches node ``nid`` owes (behind: logged for it, not sent yet)."""
        n = self.nodes.get(nid)
        if n is None or not n.behind:
            return 0
        log = list(self.coordinator.log)
        return sum(1 for b in log if nid in b.targets and n.sent_seq < b.seq <= n.submitted_seq)

    def vitals(self) -> dict[str, dict[str, Any]]:
        """Per node, without asking any actor (a status that must never wait): its last
        health answer (``Liveness.report``: light counters, health, the call running), the
        calls outstanding (``queue_depth``), whether it is ``behind`` and the batches it
        ``owes``, and ``lag_ms``: the newest event time fed minus the newest it applied."""
        out = {}
        for nid, n in list(self.nodes.items()):
            r = self.liveness.report(nid)
            et = r.get("event_time")
            out[nid] = {
                **r,
                "queue_depth": len(n.inflight),
                "behind": n.behind,
                "owed_batches": self.owed(nid),
                "lag_ms": None
                if et is None or self.event_time is None
                else max(0, self.event_time - int(et)),
                "recoveries": n.recoveries,
            }
        return out

    def catch_up_all(self) -> None:
        """Every node behind caught up (blocking; bounded by the health check)."""
        for nid in self.lagging:
            self.catch_up(nid, block=True)

    def catch_up_answering(self) -> bool:
        """Every node behind that answers again caught up now, without waiting for one still
        silent (it stays behind); whether any was.  Between micro-batches: an idle stream
        sends no batch whose ``_submit`` would do it (``cluster.feeds.directory``, the
        service's commands)."""
        behind = self.lagging
        for nid in behind:
            self.catch_up(nid, block=False)
        return self.lagging != behind

    def recover_declared(self) -> None:
        """Recover now the nodes the health check declared stuck (and killed) or found gone
        since the last look, rather than at their next call (an idle deployment makes none)."""
        for nid, actor, error in self.liveness.take_pending():
            n = self.nodes.get(nid)
            if n is not None and n.actor is actor:  # not recovered or lost meanwhile
                self.coordinator.on_dead(nid, error)

    # -- incremental results (live streams) ---------------------------------------------------
    def take_answers(self, checkpoint: bool = True) -> pa.Table:
        """Checkpoint, then hand over (and forget) every answer committed so far, sorted by
        (query_id, window_start): a live stream's answers up to now, each exactly once.
        ``checkpoint=False``: the caller has just checkpointed every node and fed nothing
        since (a ``serve`` command that changed trees); the answers committed then are
        handed over.  A batch fed since the last checkpoint makes it take one anyway.

        Why through a checkpoint and not ``drain``: answers handed out are final only if a
        recovery can never produce them again; a recovered node replays just the batches after
        its last snapshot, and the snapshot and the answers are taken at the same point.  A
        silent node is not waited for (``checkpoint(may_skip=True)``): its answers come with
        a later call.
        ``finish()`` then returns only the answers produced after the last call."""
        if not checkpoint and self.coordinator.since_checkpoint == 0:
            return self.answer_route.take_answers(lambda: None)
        return self.answer_route.take_answers(lambda: self.checkpoint(may_skip=True))

    def take_late(self) -> pa.Table:
        """The late tuples recorded since the previous call (all of them the first time), in
        the ``RunResult.late`` layout (``node_id``: the node hosting the tree when the tuple
        is handed over): ``LateHandover.take``, offsets kept per tree id."""
        return self.late_handover.take()

    # -- results ----------------------------------------------------------------------------
    def finish(self) -> RunResult:
        """End of input: flush every node, collect all answers (sorted by query_id,
        window_start), late tuples and metrics.  The actors stay alive until ``shutdown``.

        A drill's fault at the batch after the last fires at the very end, in the answer
        route's ``finish``: after the flush (on the actor route after the last answer parts
        are committed), just before the last round collects late tuples and metrics (and, on
        the driver route, the last answers); a node that dies there is rebuilt as anywhere
        else (``answer_routes.ask_every_node``)."""

        t0 = time.perf_counter()
        self.wait_all()
        t1 = time.perf_counter()
        for _nid, n in self.nodes.items():  # flush goes through the same recovery path
            n.flushed = True
            n.inflight.append(n.actor.flush.remote())
        self.wait_all()
        t2 = time.perf_counter()
        self.coordinator.faults.close()  # recoveries still waiting: answered at the end
        result = self.answer_route.finish(self, (t0, t1, t2))
        self._finished = True
        return result

    def metrics(self, replies: Mapping[str, dict] | None = None) -> dict[str, Any]:
        """Per-node metrics (from the actors) plus driver-side queue depth, blocking time,
        recoveries and pins; nodes lost for good, their re-placements and the fault drill.

        ``replies``: node id -> its actor's ``metrics()`` reply, already fetched (the end of
        a run asks for them in the same round as the answers and late tuples: one wait, not
        one per kind); nodes without one are asked here."""

        nids = list(self.nodes)
        got = dict(replies or {})
        ask = {
            nid: self.nodes[nid].actor.metrics.remote()
            for nid in nids
            if nid not in got and not self.nodes[nid].behind
        }
        for nid, ref in ask.items():
            done, reply = self.get_reply(nid, ref)
            if done:
                got[nid] = reply
        for nid in nids:  # silent: what its last health answer said
            if nid not in got:
                got[nid] = {"busy_s": 0.0, **self.liveness.report(nid), "stale": True}
        per = [got[nid] for nid in nids]
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
            "fault_log": self.coordinator.faults.summary(),
        }
        for nid, m in zip(nids, per):
            n = self.nodes[nid]
            et = m.get("event_time")
            m.update(
                queue_depth=len(n.inflight) + self.owed(nid),
                behind=n.behind,
                lag_ms=None
                if et is None or self.event_time is None
                else max(0, self.event_time - int(et)),
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

        self.liveness.stop()
        if not ray.is_initialized():
            return
        for n in self.nodes.values():
            try:
                ray.kill(n.actor, no_restart=True)
            except Exception:
                pass
        self.coordinator.clear_log()

    def __enter__(self) -> Deployment:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.shutdown()
