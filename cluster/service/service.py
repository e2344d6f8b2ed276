"""``weaveplace serve``: a deployment that lives until stopped while queries come and go.

Shape: the directory stream of ``cluster.feeds.directory`` (Spark Structured Streaming ->
``foreachBatch`` -> actors -> answer parts) over a ``ChurnDeployment`` (``cluster.deployment.churn``:
trees that gain and lose queries, "churn"), plus a control API (``cluster.service.control``:
HTTP/JSON on 127.0.0.1 with a bearer token) whose commands run *between* micro-batches: a
command holds off the stream's micro-batches (``DirectoryStream.between_batches``), so files are
fed whole before or after it, never across it.

Registration times (docs/DESIGN.md s. 9).  Every DEBS file feeds all streams at once (one
``ts_ms``), so one time serves every stream: ``T = newest timestamp fed + 1`` (``null`` in
replies before anything was fed: then a query answers every window).  ``add-queries`` replies
``accepted_at`` (T_reg per stream of the new queries), ``remove-queries`` ``removed_at``
(T_unreg); the trees change at T (``executors.churn_tree``: generations), so every other
query's answers are unchanged.  Count windows live on positions: their trees change at
``P = the tuples of each stream fed so far`` (every row carries every stream), replied as
``accepted_at_position`` / ``removed_at_position`` (P_reg, P_unreg per stream of the count
queries); such a query answers its windows with ``k*s >= P_reg`` and ``k*s + r <= P_unreg``.

Placement of new queries.  ``placement.replace.add_queries`` on the running plan re-priced from
its queries: each new query is woven into the existing same-key tree where that raises the
TotalCost least (Incremental WeaveShare's merge rule, priced by the cost model), or starts a
tree of its own on the least-loaded node (WG_I's insertion rule); no running tree moves.
A removal re-prices the trees that lose queries; a tree left without queries disappears from
the plan (its old generation still answers the removed queries' last windows, then is idle).

On disk (``RUN_DIR``): ``control.json`` (address + token, mode 0600), ``events.jsonl`` (one line
per change: wall time, event time, command or cause, trees moved, planned TotalCost/MaxCost
before and after), ``plan_current.json`` (the running plan; ``weaveplace verify-plan`` passes),
``answers.parquet/``, ``late.parquet/``, ``rejects/`` as in ``cluster.feeds.directory``.
Answers are float64 for the whole run (queries added later may need it).

Re-plans (``rebalance``, drift past ``placement.tolerance``) run the configured optimizer with
the initial plan's arguments; with WG_PF, the plan ``placement.choose`` picks from its front
(``cluster.service.planning``: the rule is part of the state, shown in ``status``).

Modules: this one is the running state's transaction (``transaction``: one command at a time,
between micro-batches, on a running deployment; costs before; the plan written, the answers
flushed and the state saved, the event logged after) and the commands on the queries and the
plan (add, remove, re-plan), which share the change points and the running trees.  Its
collaborators own the rest, each through the service's public methods: ``gate`` (who may
change the running state now: bounded waits, a status that never waits), ``node_commands``
(``add-node``, ``retire-node``), ``elastic`` (the autoscale policy at work).  Beside them,
what is not a command: ``state`` (the running plan's typed records),
``tree_changes`` (a fresh placement as changes of the running trees, pure), ``pricing`` (the
running plan priced, drift), ``events`` (``events.jsonl``), ``stream`` (the directory
stream), ``resume`` (what ``--resume`` continues from), ``status`` (the status reply and load
samples), ``control`` (the HTTP API and its request checks), ``options`` (what a service is
built from).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from cluster.deployment.churn import ChurnDeployment
from cluster.feeds.directory_options import StreamStats
from cluster.runtime import collector
from cluster.service import plan_file
from cluster.service import resume as service_resume
from cluster.service import status as service_status
from cluster.service.autoscale import Autoscaler
from cluster.service.control import one_line
from cluster.service.elastic import Elastic, no_policy
from cluster.service.events import Change, EventLog
from cluster.service.gate import Gate
from cluster.service.load_history import LoadHistory
from cluster.service.load_shedding import LoadShedder
from cluster.service.node_commands import NodeCommands
from cluster.service.options import ServiceOptions, ServiceStart
from cluster.service.plan_file import PreparedPlan
from cluster.service.planning import Planner
from cluster.service.pricing import PlanPricing
from cluster.service.query_log import QueryLog
from cluster.service.refusals import Conflict, InternalError, InvalidRequest, NotFound
from cluster.service.state import ServiceState, executor_query, query_mapping
from cluster.service.stream import ServiceStream
from cluster.service.tree_changes import MergedRunningTrees, replan, weave_in

#: ``at`` of a change made before any tuple was fed: before every possible timestamp
T_FIRST = -(1 << 62)


def _start_of(point: tuple[int, int | None]) -> int | None:
    """A new tree's ``t_start`` from a change point: none before anything was fed."""
    return None if point[1] is None else point[0]


class Service:
    """A running deployment over a directory with its control commands (thread-safe).

    ``start``: the plan, its cost model, WG_PF's choice, the saved state of a resume
    (``cluster.service.options.ServiceStart``); ``options``: the stream's options and the
    re-plan policy (``ServiceOptions``)."""

    def __init__(
        self,
        dep: ChurnDeployment,
        spark,
        directory: str | Path,
        run_dir: str | Path,
        start: ServiceStart,
        options: ServiceOptions | None = None,
    ):
        o = options or ServiceOptions()
        self.dep = dep
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.model = start.model
        self.default_rate = float(o.default_rate)
        self.tolerance = float(o.tolerance)
        self.max_moves = int(o.max_moves)
        self.optimizer = str(o.optimizer or start.plan.get("optimizer", ""))
        self.pricing = PlanPricing(self.model, self.optimizer, self.default_rate)
        #: how re-plans plan (``cluster.service.planning``); default: the optimizer's defaults
        self.planner = o.planner or Planner(self.optimizer)
        #: how WG_PF chose the last plan it made (``planning.choice_record``), else None
        self.choice = start.choice
        self.resume_state = start.resume_state
        self.flush_on_stop = False
        self.stream = ServiceStream(dep, spark, directory, self.run_dir, o.stream, o.progress)
        self.announce = o.announce
        self.stream.service = self
        self.event_log = EventLog(self.run_dir / "events.jsonl")
        #: one command at a time, between micro-batches, with bounded waits (``gate``)
        self.gate = Gate(self.stream, dep, wait_s=o.command_wait_s)
        self.last_status: dict | None = None  # the last status computed (``status``)
        self.last_sample: dict[str, tuple[float, dict]] = {}
        self.state_gen = 0  # saved states so far (cluster.service.resume)
        self.opt_factor = 1.0  # the optimizer over WeaveShare at the last re-plan (drift)
        self.file_latency: list[float] = []  # s from a file's arrival to its answers written
        #: (wall time, that latency) of the latest files, for metrics.json's timeline
        self.latency_timeline: deque[tuple[float, float]] = deque(maxlen=100_000)
        self.state = "starting"
        self.control = None
        #: ``add-node`` and ``retire-node`` (``cluster.service.node_commands``)
        self.node_commands = NodeCommands(self)
        #: the elastic policy at work (``placement.autoscale``, ``cluster.service.elastic``;
        #: None: the node count is the operator's); with Ray's autoscaler on an attached
        #: cluster (``cluster.runtime.resources``)
        self.elastic = (
            Elastic(self, Autoscaler(o.autoscale), o.resources) if o.autoscale is not None else None
        )
        #: the drop boxes at the sources (``placement.shedding``,
        #: ``cluster.service.load_shedding``; None: nothing is ever dropped)
        self.shedding = LoadShedder(self, o.shedding) if o.shedding is not None else None
        if start.resume_state is None:
            #: the running plan's queries, trees, capacities, ids used and files fed
            self.running = ServiceState.from_plan(start.plan)
            #: each query's definition, once (``cluster.service.query_log``)
            self.query_log = QueryLog.start(self.run_dir / "state")
            self.event_log.clear()
            if (self.run_dir / "load.jsonl").exists():
                (self.run_dir / "load.jsonl").unlink()
        else:
            service_resume.restore(self, start.resume_state)
        #: the last minutes of load samples, for the load page (a resume continues them)
        self.load_history = LoadHistory.from_file(self.run_dir / "load.jsonl")

    # -- the running plan (cluster.service.pricing) ---------------------------------------------
    def placement_plan(self):
        """The running plan as placement objects, and the tree ids in the order of its trees."""
        return self.pricing.placement_plan(self.running, list(self.dep.nodes))

    def rates(self) -> dict[str, float]:
        return self.pricing.rates(self.running)

    def plan_dict(self) -> dict:
        """The running plan, ``weaveplace.plan/1`` with this deployment's tree ids."""
        return self.pricing.plan_dict(self.running, list(self.dep.nodes), self.choice)

    def costs(self) -> tuple[float, float]:
        return self.pricing.costs(self.running, list(self.dep.nodes))

    def write_plan(self, prepared: PreparedPlan | None = None) -> dict:
        """Write ``plan_current.json`` (``prepared``: encoded while the actors changed, used if
        it is still the running plan, ``cluster.service.plan_file``)."""
        nodes = list(self.dep.nodes)
        if prepared is not None and prepared.fits(self.running.trees, nodes):
            d, data = prepared.plan, prepared.data
        else:
            d, data = self.plan_dict(), None
        plan_file.write(self.run_dir, d, data)
        self.dep.follow_plan(d)  # membership changes (add_node, lose_node) follow it
        return d

    def while_changing(
        self, after: ServiceState, with_plan: bool
    ) -> Callable[[], tuple[float, PreparedPlan | None]]:
        """What a command does while the actors change its trees (``apply_changes``'
        ``meanwhile``; nothing else prices then): offline WeaveShare's TotalCost of the state
        ``after`` it, for the drift check, and with ``with_plan`` its plan file encoded
        (``plan_file.prepare``; ``after.trees`` must be the mapping the command installs)."""
        nodes = list(self.dep.nodes)

        def work() -> tuple[float, PreparedPlan | None]:
            ref = self.pricing.weaveshare_total(after)
            if not with_plan:
                return ref, None
            d = self.pricing.plan_dict(after, nodes, self.choice)
            return ref, plan_file.prepare(d, after.trees, nodes)

        return work

    # -- events -------------------------------------------------------------------------------
    @property
    def events(self) -> list[dict]:
        """The latest events (all are in ``events.jsonl``)."""
        return self.event_log.latest

    @property
    def event_time(self) -> int | None:
        return self.stream.stats.max_ts

    def record_event(self, command: str, before: tuple[float, float], **detail) -> dict:
        after = self.costs()
        ev = {
            "wall_time": time.time(),
            "event_time": self.event_time,
            "command": command,
            "trees_moved": int(detail.pop("trees_moved", 0)),
            "total_cost_before": before[0],
            "max_cost_before": before[1],
            "total_cost_after": after[0],
            "max_cost_after": after[1],
            **detail,
        }
        self.event_log.append(ev)
        self.sample_load()
        return ev

    def log_faults(self) -> None:
        """Append the failures and recoveries the deployment recorded since the last call
        (``cluster.deployment.faults``) to ``events.jsonl``, at the current event time.  Trees
        the deployment moved off a node lost for good are recorded where they run now (and
        the running plan rewritten), so later commands and the state saved see them there."""
        events = self.dep.fault_log.take()
        if not events:
            return
        nodes = self.dep.nodes
        where = {str(t["id"]): nid for nid, n in nodes.items() for t in n.spec["trees"]}
        moved = False
        for tid, t in self.running.trees.items():
            if t.node not in nodes and tid in where:
                t.node, moved = where[tid], True
        for nid in [x for x in self.running.capacity if x not in nodes]:
            del self.running.capacity[nid]
        if moved:
            self.write_plan()
        for ev in events:
            self.event_log.append({**ev, "event_time": self.event_time})

    def sample_load(self) -> None:
        """Append one line to ``RUN_DIR/load.jsonl`` (``cluster.service.status``)."""
        service_status.sample_load(self)

    # -- the transaction every command is -----------------------------------------------------
    @contextmanager
    def _exclusive(self, command: str) -> Iterator[None]:
        """One command at a time, and only between micro-batches; refused (503) when that
        does not come within the gate's wait, or while a node is silent (``gate``)."""
        with self.gate.exclusive(command), collector.paused():
            yield

    def _check_running(self) -> None:
        if self.state != "running":
            raise Conflict(f"the deployment is {self.state}; commands need it running")

    @contextmanager
    def transaction(self, command: str, check_drift: bool = False) -> Iterator[Change]:
        """Run a command's body exclusively on a running deployment, with the costs before it;
        when the body returns: write the plan, flush the answers (and save the state), log
        the event, and with ``check_drift`` re-plan if the change drifted too far.  A body
        that raises has changed nothing, and none of this happens."""
        with self._exclusive(command):
            self._check_running()
            change = Change(command, self.costs())
            yield change
            self.commit(change)
            if check_drift:
                self._check_drift(change.reference)
                if self.elastic is not None:
                    self.elastic.evaluate(f"after {command}")

    def commit(self, change: Change) -> None:
        self.write_plan(change.plan)
        self.flush_outputs(checkpoint=not change.checkpointed)
        self.log_faults()
        self.record_event(change.command, change.before, **change.detail)
        self.pricing.retain(self.running)

    def _change_points(self) -> dict[str, tuple[int, int | None]]:
        """Per window kind, (``at`` for the trees, the value reported) of a change now: time
        windows at T = the newest timestamp fed + 1; count windows at P = the tuples of each
        stream fed so far (every DEBS row carries every stream, so one P serves them all, and
        the trees on a stream have each taken all of them).  Before anything was fed both are
        ``T_FIRST`` (reported ``None``): the queries answer every window."""
        mx, rows = self.stream.stats.max_ts, int(self.stream.stats.rows)
        return {
            "time": (T_FIRST, None) if mx is None else (int(mx) + 1, int(mx) + 1),
            "count": (T_FIRST, None) if not rows else (rows, rows),
        }

    def _position_detail(self, key: str, pts) -> dict:
        """``{key: P}`` when count-window queries run (their trees changed at P), else ``{}``."""
        counted = self._count_streams(list(self.running.queries))
        return {key: pts["count"][1]} if counted else {}

    def _kind(self, ids) -> str:
        """The window kind of the tree that queries ``ids`` run in (one kind per tree)."""
        return next(iter({self.running.queries[q]["kind"] for q in ids}), "time")

    def _count_streams(self, ids) -> list[str]:
        """The streams of the count-window queries among ``ids``."""
        qs = [self.running.queries[q] for q in ids]
        return sorted({q["stream"] for q in qs if q["kind"] == "count"})

    # -- commands -----------------------------------------------------------------------------
    def check_new_query_id(self, qid: str) -> None:
        """Refuse (``Conflict``) an id that runs or ran in this deployment: ids are never
        reused (answers are keyed by query and window)."""
        if qid in self.running.queries:
            raise Conflict(f"add-queries: query id {qid!r} is already running")
        if qid in self.running.used_ids:
            raise Conflict(
                f"add-queries: query id {qid!r} was used before in "
                "this deployment (ids are never reused: answers are "
                "keyed by query and window)"
            )

    def add_queries(self, queries: list) -> dict:
        """Register ``queries`` (``placement.queries.Query``, checked by
        ``control.parse_new_queries``); see the module doc for where they go."""
        from placement.replace import add_queries

        with self.transaction("add-queries", check_drift=True) as change:
            for q in queries:
                self.check_new_query_id(q.id)
                if q.kind == "count" and getattr(self.dep, "mode", "raw") == "sliced":
                    raise InvalidRequest(
                        f"add-queries: query {q.id!r}: count windows need each tuple's "
                        "position, which sliced mode (run.feed_mode: sliced) does not ship"
                    )
                shed = self.shedding
                if q.kind == "count" and shed is not None and shed.dropped_rows.get(q.stream):
                    raise InvalidRequest(
                        f"add-queries: query {q.id!r}: count windows count every tuple of "
                        f"their stream, and {q.stream!r} has been shed "
                        f"({shed.dropped_rows[q.stream]} rows dropped)"
                    )
            running = self.running
            plan, _ = self.placement_plan()
            for q in queries:
                running.queries[q.id] = query_mapping(q.to_dict())
            self.pricing.rates(running, [running.queries[q.id] for q in queries])
            new_ids = {q.id for q in queries}
            try:
                placed = add_queries(plan, queries, self.model)
            except (ValueError, KeyError) as e:
                self._forget(queries)
                raise InvalidRequest(f"add-queries: {one_line(e)}") from None
            try:
                additions = weave_in(placed.plan, new_ids, running.trees, running.next_tree)
            except MergedRunningTrees as e:
                self._forget(queries)
                raise InternalError(str(e)) from None
            after = additions.applied_to(running.trees)
            self.pricing.seed(placed.plan, after)
            pts = self._change_points()
            t_reg, p_reg = pts["time"][1], pts["count"][1]
            grown = [
                (
                    g.node,
                    g.tree_id,
                    pts[self._kind(g.queries)][0],
                    self._executor_queries(g.queries),
                    [],
                )
                for g in additions.grown
            ]
            started = [
                (
                    n.node,
                    {
                        "id": n.tree_id,
                        "stream": n.stream,
                        "queries": self._executor_queries(n.queries),
                        "slicing": self.model.slicing,
                    },
                    _start_of(pts[self._kind(n.queries)]),
                )
                for n in additions.new_trees
            ]
            change.warmed(
                self.dep.apply_changes(
                    grown,
                    started,
                    meanwhile=self.while_changing(replace(running, trees=after), True),
                )
            )
            change.checkpointed = True
            running.trees = after
            running.next_tree = additions.next_tree
            running.used_ids |= new_ids
            streams = sorted({q.stream for q in queries})
            counted = self._count_streams(sorted(new_ids))
            change.detail.update(
                queries=sorted(new_ids), accepted_at=t_reg, placement=additions.where
            )
            reply = {"accepted_at": {s: t_reg for s in streams}, "queries": additions.where}
            if counted:  # count windows: registered at the position P_reg of their stream
                change.detail["accepted_at_position"] = p_reg
                reply["accepted_at_position"] = {s: p_reg for s in counted}
            return reply

    def remove_queries(self, ids: list[str]) -> dict:
        """Unregister queries (distinct ids, ``control.parse_query_ids``): windows ending at
        or before T_unreg are still answered."""
        with self.transaction("remove-queries", check_drift=True) as change:
            running = self.running
            unknown = [i for i in ids if i not in running.queries]
            if unknown:
                raise NotFound(f"remove-queries: unknown query id(s) {unknown} (not running)")
            pts = self._change_points()
            t_unreg, p_unreg = pts["time"][1], pts["count"][1]
            counted = self._count_streams(ids)
            gone_from: dict[str, list[str]] = {}
            removed = set(ids)
            for tid, t in running.trees.items():
                # the tree running the query, and any tree that handed it off and may still
                # answer its windows from before the hand-off (those get capped at T_unreg)
                gone = [q for q in t.active + (t.handed or []) if q in removed]
                if gone:
                    gone_from[tid] = gone
            left = {q: m for q, m in running.queries.items() if q not in removed}
            change.warmed(
                self.dep.apply_changes(
                    [
                        (running.trees[tid].node, tid, pts[self._kind(gone)][0], [], gone)
                        for tid, gone in sorted(gone_from.items())
                    ],
                    [],
                    meanwhile=self.while_changing(replace(running, queries=left), False),
                )
            )
            change.checkpointed = True
            streams = running.streams_of(ids)
            for tid, gone in gone_from.items():
                t = running.trees[tid]
                t.active = [q for q in t.active if q not in gone]
                if t.handed:
                    t.handed = [q for q in t.handed if q not in gone]
            for i in ids:
                del running.queries[i]
            change.detail.update(queries=sorted(ids), removed_at=t_unreg)
            reply = {"removed_at": {s: t_unreg for s in streams}}
            if counted:  # count windows: unregistered at the position P_unreg
                change.detail["removed_at_position"] = p_unreg
                reply["removed_at_position"] = {s: p_unreg for s in counted}
            return reply

    # -- nodes: cluster.service.node_commands ---------------------------------------------------
    def add_node(self, nid: str | None = None, capacity: float | None = None) -> dict:
        """``add-node`` (``NodeCommands.add_node``)."""
        return self.node_commands.add_node(nid, capacity)

    def retire_node(self, nid: str) -> dict:
        """``retire-node`` (``NodeCommands.retire_node``)."""
        return self.node_commands.retire_node(nid)

    def request_stop(self, flush: bool = False) -> dict:
        """Stop after the micro-batch in progress: answers the watermark released are written,
        the state checkpointed (``--resume`` continues); with ``flush`` the input has ended
        for good: every pending window is answered and the deployment cannot resume."""
        with self.gate.command("stop"):
            if self.state != "running":
                raise Conflict(f"the deployment is {self.state}")
            self.state = "stopping"
            self.flush_on_stop = flush
        self.stream.request_stop("stop")
        return {"stopping": True, "flush": flush, "event_time": self.event_time}

    def _forget(self, queries: list) -> None:
        """Undo ``add-queries``' registration of ``queries`` (the command was refused)."""
        for q in queries:
            del self.running.queries[q.id]

    def _executor_queries(self, ids) -> list[dict]:
        return [executor_query(self.running.queries[q]) for q in ids]

    # -- re-planning ----------------------------------------------------------------------
    def drift(self, reference: float | None = None) -> dict:
        """The running plan's TotalCost against a fresh plan's (``PlanPricing.drift``)."""
        return self.pricing.drift(
            self.running, list(self.dep.nodes), self.opt_factor, self.tolerance, reference
        )

    def rebalance(self, cause: str = "rebalance") -> dict:
        """Re-plan (the command, or a drift past ``placement.tolerance``): a fresh plan of the
        running queries by the configured optimizer (WeaveShare + placement; WG_PF: the plan
        ``placement.choose`` picks from its front, ``cluster.service.planning``), reached by
        re-weaving at T (queries handed between trees: the old tree keeps their windows that
        start before T, the new one takes them from T on, ``ChurnTree.change(handoff=)``) and by
        moving at most ``placement.max_moves`` running trees whose node changes (the costliest
        first; the others stay where they run).  New trees start on their planned node."""
        with self._exclusive(cause):
            self._check_running()
            return self._rebalance(cause)

    def _rebalance(self, cause: str) -> dict:
        """``rebalance`` inside a transaction already exclusive (a command's drift check)."""
        from placement.queries import query_from_mapping

        change = Change(cause, self.costs())
        running = self.running
        if not running.queries:
            return {"moved": {}, "handoffs": {}, "note": "no queries running"}
        nids = list(self.dep.nodes)
        caps = [running.capacity.get(n) for n in nids]
        qs = [query_from_mapping(running.queries[i]) for i in sorted(running.queries)]
        try:
            fresh, choice = self.planner.plan(qs, self.model, caps)
        except (ValueError, KeyError) as e:
            raise Conflict(
                f"{cause}: the optimizer {self.optimizer!r} cannot re-plan: {one_line(e)}"
            ) from None
        reply = self.replan_to(fresh, nids, change, choice)
        self.commit(change)
        return reply

    def replan_to(self, fresh, nids: list[str], change: Change, choice: dict | None) -> dict:
        """Reach ``fresh`` (its j-th node on ``nids[j]``) from the running trees (``rebalance``'s
        re-weaving and moves), inside a transaction; ``change`` gets the details."""
        running = self.running
        changes = replan(fresh, nids, running.trees, running.next_tree)
        ws = self.pricing.weaveshare_total(running)
        self.opt_factor = max(1.0, fresh.total_cost / ws) if ws > 0 else 1.0
        do_moves = changes.moves_within(self.max_moves)
        skipped = changes.moves_skipped(self.max_moves)
        pts = self._change_points()
        t_at = pts["time"][1]
        started = [
            (
                n.node,
                {
                    "id": n.tree_id,
                    "stream": n.stream,
                    "slicing": self.model.slicing,
                    "queries": self._executor_queries(n.queries),
                },
                _start_of(pts[self._kind(n.queries)]),
            )
            for n in changes.new_trees
        ]
        rewoven = [
            (
                running.trees[tid].node,
                tid,
                pts[self._kind(list(c.add) + list(c.handoff))][0],
                self._executor_queries(c.add),
                [],
                c.handoff,
            )
            for tid, c in sorted(changes.changes.items())
        ]
        self.dep.apply_changes(rewoven, started)
        running.trees = changes.applied_to(running.trees, {})
        running.next_tree = changes.next_tree
        moved = self.dep.move_trees(do_moves)
        for tid, node in do_moves.items():
            running.trees[tid].node = node
        if choice is not None:
            self.choice = choice
        change.detail.update(
            trees_moved=moved,
            moves=do_moves,
            handoffs=len(changes.handoffs),
            handed_at=t_at,
            **self._position_detail("handed_at_position", pts),
            moves_skipped=skipped,
            fresh_total=fresh.total_cost,
            fresh_max=fresh.max_cost,
            **_choice_detail(choice),
        )
        return {
            "moved": do_moves,
            "handoffs": changes.handoffs,
            "handed_at": t_at,
            **self._position_detail("handed_at_position", pts),
            "moves_skipped": skipped,
            "total_cost": self.costs()[0],
            "max_cost": self.costs()[1],
            "fresh_total_cost": fresh.total_cost,
            "fresh_max_cost": fresh.max_cost,
            **({} if choice is None else {"choose": choice}),
        }

    def _check_drift(self, reference: float | None = None) -> None:
        """After a change: re-plan when the running TotalCost is more than ``tolerance`` above
        offline WeaveShare's over the running queries (docs/DESIGN.md s. 9, Incremental
        WeaveShare; ``reference``: that TotalCost, when the command priced it already)."""
        d = self.drift(reference)
        if d["drift"] > self.tolerance:
            try:
                self._rebalance("drift")
            except Conflict as e:  # the change itself stands: record why no re-plan
                self.record_event(
                    "drift-not-replanned", self.costs(), reason=e.message, drift=d["drift"]
                )

    # -- elastic deployments: cluster.service.elastic -------------------------------------------
    @property
    def autoscaler(self):
        """The autoscale policy and its memory (None without ``placement.autoscale``)."""
        return None if self.elastic is None else self.elastic.autoscaler

    def after_batch(self) -> None:
        """After a micro-batch: the autoscale policy (``Elastic.after_batch``)."""
        if self.elastic is not None:
            self.elastic.after_batch()

    def set_autoscale(self, on: bool) -> dict:
        """``ctl autoscale on|off`` (``Elastic.set_enabled``)."""
        if self.elastic is None:
            raise no_policy()
        return self.elastic.set_enabled(on)

    # -- persistence (resume): cluster.service.resume -----------------------------------------
    def flush_outputs(self, checkpoint: bool = True) -> None:
        """Write the answers handed over through a checkpoint, then save the state
        (``checkpoint=False``: the command just took one, ``resume.flush_outputs``)."""
        service_resume.flush_outputs(self, checkpoint)

    def persist(self, final: bool = False) -> None:
        """Save what ``serve --resume`` needs in ``RUN_DIR/state``."""
        service_resume.save_state(self, final)

    # -- status: cluster.service.status -----------------------------------------------------
    def status(self) -> dict:
        """Nodes (trees, queries, planned cost, measured load over the last interval), queries,
        watermark per stream, backlog, late tuples, answers written, the last events and,
        with WG_PF, how the last plan was chosen (``choose``: ``cluster.service.planning``)."""
        return service_status.current(self)

    def backlog(self) -> dict:
        """Files in the watched directory not fed yet (and their bytes)."""
        return service_status.backlog(self)

    # -- run ----------------------------------------------------------------------------------
    def run(self, port: int = 0, token: str | None = None) -> StreamStats:
        """Serve the control API, write control.json and run the stream until ``stop`` (or
        another stop condition); the deployment is flushed when it ends."""
        from cluster.service.control import ControlServer

        self.control = ControlServer(self, port=port, token=token)
        self.control.start()
        try:
            self.stream.out.mkdir(parents=True, exist_ok=True)
            self.stream.open_outputs()  # commands may write parts at once
            self.write_plan()
            self.persist()
            self.control.write_file(self.run_dir / "control.json")
            if self.announce is not None:  # the token URL: the operator's way in
                url = self.control.url
                self.announce(
                    f"load page: {url}/?token={self.control.token} "
                    f"(Prometheus: {url}/metrics with the bearer token of control.json)"
                )
            self.state = "running"
            resumed = self.resume_state is not None
            self.record_event(
                "resume" if resumed else "start",
                self.costs(),
                nodes=sorted(self.dep.nodes),
                queries=len(self.running.queries),
                # the drops in force from here on (shed events written after the saved
                # state, before a crash, are superseded: their files are fed again)
                **({} if self.shedding is None else {"shedding": self.shedding.to_state()}),
            )
            with collector.frozen():  # the start's objects: not traversed while it serves
                stats = self.stream.run()
            self.state = "stopped"
            self.log_faults()
            service_status.write_metrics(self, stats)
            self.record_event(
                "stop",
                self.costs(),
                reason=stats.stop_reason,
                answers=stats.answers,
                late=stats.late,
            )
            return stats
        finally:
            self.state = "stopped" if self.state != "running" else "failed"
            self.control.stop()


def _choice_detail(choice: dict | None) -> dict:
    """The choice fields of a re-plan's event (the front's points stay in status)."""
    if choice is None:
        return {}
    return {"choose": choice["rule"], "choose_met": choice["met"], "choose_note": choice["note"]}
