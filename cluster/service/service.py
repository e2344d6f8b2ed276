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

Modules: this one is the commands (~550 lines, one idea: each command is the same transaction
on the same running state, ``_transaction``: one command at a time, between micro-batches, on
a running deployment; costs before; the plan written, the answers flushed and the state saved,
the event logged after; splitting the commands apart would split that state and its lock).
Beside it, what is not a command: ``state`` (the running plan's typed records),
``tree_changes`` (a fresh placement as changes of the running trees, pure), ``pricing`` (the
running plan priced, drift), ``events`` (``events.jsonl``), ``stream`` (the directory
stream), ``resume`` (what ``--resume`` continues from), ``status`` (the status reply and load
samples), ``control`` (the HTTP API and its request checks), ``options`` (what a service is
built from).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from cluster.deployment.churn import ChurnDeployment
from cluster.feeds.directory_options import StreamStats
from cluster.service import resume as service_resume
from cluster.service import status as service_status
from cluster.service.autoscale import Autoscaler, keep_nodes, match_nodes
from cluster.service.control import one_line
from cluster.service.events import EventLog
from cluster.service.gate import Gate
from cluster.service.load_history import LoadHistory
from cluster.service.options import ServiceOptions, ServiceStart
from cluster.service.planning import Planner
from cluster.service.pricing import PlanPricing
from cluster.service.refusals import Conflict, InternalError, InvalidRequest, NotFound
from cluster.service.state import ServiceState, executor_query, query_mapping
from cluster.service.stream import ServiceStream
from cluster.service.tree_changes import MergedRunningTrees, replan, weave_in

#: ``at`` of a change made before any tuple was fed: before every possible timestamp
T_FIRST = -(1 << 62)


def _start_of(point: tuple[int, int | None]) -> int | None:
    """A new tree's ``t_start`` from a change point: none before anything was fed."""
    return None if point[1] is None else point[0]


@dataclass
class Change:
    """One command's transaction: its event's name, the planned (TotalCost, MaxCost) before
    it and the event's details (filled in by the command)."""

    command: str
    before: tuple[float, float]
    detail: dict = field(default_factory=dict)


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
        self.state = "starting"
        self.control = None
        #: the elastic policy (``placement.autoscale``; None: the node count is the operator's)
        self.autoscaler = Autoscaler(o.autoscale) if o.autoscale is not None else None
        #: Ray's autoscaler on an attached cluster (``cluster.runtime.resources``), else None
        self.resources = o.resources
        if start.resume_state is None:
            #: the running plan's queries, trees, capacities, ids used and files fed
            self.running = ServiceState.from_plan(start.plan)
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

    def _costs(self) -> tuple[float, float]:
        return self.pricing.costs(self.running, list(self.dep.nodes))

    def write_plan(self) -> dict:
        from cluster.answers.files import atomic_write

        d = self.plan_dict()
        atomic_write(self.run_dir / "plan_current.json", json.dumps(d, indent=1))
        self.dep.follow_plan(d)  # membership changes (add_node, lose_node) follow it
        return d

    # -- events -------------------------------------------------------------------------------
    @property
    def events(self) -> list[dict]:
        """The latest events (all are in ``events.jsonl``)."""
        return self.event_log.latest

    @property
    def event_time(self) -> int | None:
        return self.stream.stats.max_ts

    def _event(self, command: str, before: tuple[float, float], **detail) -> dict:
        after = self._costs()
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
        with self.gate.exclusive(command):
            yield

    def _check_running(self) -> None:
        if self.state != "running":
            raise Conflict(f"the deployment is {self.state}; commands need it running")

    @contextmanager
    def _transaction(self, command: str, check_drift: bool = False) -> Iterator[Change]:
        """Run a command's body exclusively on a running deployment, with the costs before it;
        when the body returns: write the plan, flush the answers (and save the state), log
        the event, and with ``check_drift`` re-plan if the change drifted too far.  A body
        that raises has changed nothing, and none of this happens."""
        with self._exclusive(command):
            self._check_running()
            change = Change(command, self._costs())
            yield change
            self._commit(change)
            if check_drift:
                self._check_drift()
                self._autoscale(f"after {command}")

    def _commit(self, change: Change) -> None:
        self.write_plan()
        self.flush_outputs()
        self.log_faults()
        self._event(change.command, change.before, **change.detail)

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

        with self._transaction("add-queries", check_drift=True) as change:
            for q in queries:
                self.check_new_query_id(q.id)
                if q.kind == "count" and getattr(self.dep, "mode", "raw") == "sliced":
                    raise InvalidRequest(
                        f"add-queries: query {q.id!r}: count windows need each tuple's "
                        "position, which sliced mode (run.feed_mode: sliced) does not ship"
                    )
            running = self.running
            plan, _ = self.placement_plan()
            for q in queries:
                running.queries[q.id] = query_mapping(q.to_dict())
            self.rates()
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
            self.dep.apply_changes(grown, started)
            running.trees = additions.applied_to(running.trees)
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
        with self._transaction("remove-queries", check_drift=True) as change:
            running = self.running
            unknown = [i for i in ids if i not in running.queries]
            if unknown:
                raise NotFound(f"remove-queries: unknown query id(s) {unknown} (not running)")
            pts = self._change_points()
            t_unreg, p_unreg = pts["time"][1], pts["count"][1]
            counted = self._count_streams(ids)
            gone_from: dict[str, list[str]] = {}
            for tid, t in running.trees.items():
                # the tree running the query, and any tree that handed it off and may still
                # answer its windows from before the hand-off (those get capped at T_unreg)
                gone = [q for q in t.active + (t.handed or []) if q in set(ids)]
                if gone:
                    gone_from[tid] = gone
            self.dep.apply_changes(
                [
                    (running.trees[tid].node, tid, pts[self._kind(gone)][0], [], gone)
                    for tid, gone in sorted(gone_from.items())
                ],
                [],
            )
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

    def add_node(self, nid: str | None = None, capacity: float | None = None) -> dict:
        """Scale out: a new node takes trees from the busiest nodes at a checkpoint
        (``Deployment.add_node``: ``placement.replace.add_node``'s moves, exactly once)."""
        from cluster.deployment.specs import DeploymentError

        with self._transaction("add-node") as change:
            try:
                rec = self._add_node(nid, capacity, "add-node")
            except DeploymentError as e:
                raise Conflict(f"add-node: {one_line(e)}") from None
            change.detail.update(node=rec["node"], trees_moved=rec["moved"], trees=rec["trees"])
            return {"node": rec["node"], "moved": rec["trees"]}

    def _add_node(self, nid: str | None, capacity: float | None, reason: str) -> dict:
        """``add-node``'s body (inside a transaction): the deployment's record of the move."""
        rec = self.dep.add_node(nid, capacity=capacity, reason=reason)
        new = rec["node"]
        self.running.capacity[new] = rec.get("capacity")
        for tid in rec["trees"]:
            if tid in self.running.trees:
                self.running.trees[tid].node = new
        return rec

    def retire_node(self, nid: str) -> dict:
        """Graceful scale-in (``ChurnDeployment.retire_node``): the node's trees go where
        ``placement.replace.remove_node`` puts them (run as separate trees where it would
        weave), at a checkpoint; the last node cannot be retired."""
        from cluster.deployment.specs import DeploymentError
        from placement.replace import remove_node

        with self._transaction("retire-node") as change:
            nodes = self.dep.nodes
            if nid not in nodes:
                raise NotFound(f"retire-node: unknown node {nid!r}; nodes: {', '.join(nodes)}")
            if len(nodes) == 1:
                raise Conflict(
                    f"retire-node: {nid!r} is the last node; its queries would have nowhere to run"
                )
            plan, _ = self.placement_plan()
            rep = remove_node(plan, nid, self.model)
            where = {q.id: n.id for n in rep.plan.nodes for t in n.trees for q in t.queries}
            try:
                rec = self._retire_node(nid, where, "retire-node")
            except DeploymentError as e:
                raise Conflict(f"retire-node: {one_line(e)}") from None
            change.detail.update(node=nid, trees_moved=rec["moved"], trees=rec["trees"])
            return {"retired": nid, "moved": rec["trees"]}

    def _retire_node(self, nid: str, where: dict[str, str], reason: str) -> dict:
        """``retire-node``'s body (inside a transaction): node ``nid``'s trees go to the node
        ``where`` names for their first active query (a tree without one, or whose query has
        no place there, to the least loaded other node)."""
        plan, _ = self.placement_plan()
        load = {n.id: n.cost for n in plan.nodes if n.id != nid}
        targets = {}
        for t in self.dep.nodes[nid].spec["trees"]:
            tid = str(t["id"])
            tree = self.running.trees.get(tid)
            active = tree.active if tree is not None else []
            dest = where.get(active[0]) if active else None
            targets[tid] = dest if dest in load else min(load, key=load.get)
        rec = self.dep.retire_node(nid, targets, reason=reason)
        for tid, dest in targets.items():
            if tid in self.running.trees:
                self.running.trees[tid].node = dest
        self.running.capacity.pop(nid, None)
        return rec

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
    def drift(self) -> dict:
        """The running plan's TotalCost against a fresh plan's (``PlanPricing.drift``)."""
        return self.pricing.drift(
            self.running, list(self.dep.nodes), self.opt_factor, self.tolerance
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

        change = Change(cause, self._costs())
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
        reply = self._replan_to(fresh, nids, change, choice)
        self._commit(change)
        return reply

    def _replan_to(self, fresh, nids: list[str], change: Change, choice: dict | None) -> dict:
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
            "total_cost": self._costs()[0],
            "max_cost": self._costs()[1],
            "fresh_total_cost": fresh.total_cost,
            "fresh_max_cost": fresh.max_cost,
            **({} if choice is None else {"choose": choice}),
        }

    def _check_drift(self) -> None:
        """After a change: re-plan when the running TotalCost is more than ``tolerance`` above
        offline WeaveShare's over the running queries (docs/DESIGN.md s. 9, Incremental
        WeaveShare)."""
        d = self.drift()
        if d["drift"] > self.tolerance:
            try:
                self._rebalance("drift")
            except Conflict as e:  # the change itself stands: record why no re-plan
                self._event(
                    "drift-not-replanned", self._costs(), reason=e.message, drift=d["drift"]
                )

    # -- elastic deployments: cluster.service.autoscale -----------------------------------------
    def after_batch(self) -> None:
        """After a micro-batch (the stream calls it, holding off the next one): evaluate the
        autoscale policy, unless a command is waiting (it evaluates after itself)."""
        if self.autoscaler is None:
            return
        with self.gate.unless_busy() as free:
            if free and self.state == "running":
                self._autoscale("micro-batch")

    def set_autoscale(self, on: bool) -> dict:
        """``ctl autoscale on|off``: override the policy at run time."""
        if self.autoscaler is None:
            raise Conflict("autoscale: no placement.autoscale policy in this deployment's config")
        with self.gate.command("autoscale"):
            self.autoscaler.set_enabled(on)
            self._event("autoscale", self._costs(), **self._autoscale_fields("switched", on))
            return self.autoscaler.status(time.monotonic())

    def _autoscale_fields(self, why: str, on: bool) -> dict:
        n = len(self.dep.nodes)
        return {
            "action": "on" if on else "off",
            "reason": {"why": why},
            "nodes_before": n,
            "nodes_after": n,
        }

    def _autoscale(self, cause: str) -> None:
        """One evaluation of the policy (inside a command or between micro-batches) and, when
        it decides, the decision carried out as one change: nodes added (``add-node``'s path,
        Ray's autoscaler asked first on an attached cluster) or retired (``retire-node``'s
        path), then the model's plan reached by ``rebalance``'s re-weaving and moves."""
        from placement.queries import query_from_mapping

        a = self.autoscaler
        if a is None:
            return
        now = time.monotonic()
        try:
            metrics = self.dep.metrics()["nodes"]
        except Exception:  # a node being recovered: measure next time
            return
        for nid, peak in self.dep.liveness.take_lag_peaks().items():
            if nid in metrics:  # the lag between samples counts, not only at the sample
                metrics[nid]["lag_ms"] = max(metrics[nid].get("lag_ms") or 0, peak)
        busy, queue, lag = a.measure(metrics, now)
        if not a.memory.enabled:
            return
        qs = [query_from_mapping(self.running.queries[i]) for i in sorted(self.running.queries)]
        plan, _ = self.placement_plan()
        planned = {n.id: n.cost for n in plan.nodes}
        obs = a.observe(planned, qs, self.model, busy, queue, now, lag)
        d = a.decide(obs)
        if self.dep.lagging and d.action not in ("replace", "vetoed"):
            return  # a node silent: nothing but the slow node's replacement moves meanwhile
        if d.action == "vetoed":
            last = a.last or {}
            if (last.get("action"), last.get("nodes_after")) != ("vetoed", d.nodes_after):
                a.record(d, now, time.time())
                self._event("autoscale", self._costs(), **self._decision_fields(d, cause))
            return
        if not d.acts:
            return
        change = Change("autoscale", self._costs())
        fresh = obs.need.plan if d.nodes_after == obs.need.nodes else None
        if d.action == "replace":  # the slow node's trees move whole: no re-plan
            fresh = None
        if fresh is None and d.action in ("replan", "in"):  # a plan on exactly that many nodes
            fresh = a.plan_on(qs, self.model, d.nodes_after)
            if fresh is None:  # none fits there (e.g. above max_nodes): nothing to reach
                return
        extra = self._scale(d, fresh, change)
        a.record(d, now, time.time())
        change.detail.update(**self._decision_fields(d, cause), **extra)
        change.detail["nodes_after"] = len(self.dep.nodes)
        self._commit(change)

    def _decision_fields(self, d, cause: str) -> dict:
        return {
            "action": d.action,
            "cause": cause,
            "reason": d.reason,
            "nodes_before": d.nodes_before,
            "nodes_after": d.nodes_after,
        }

    def _scale(self, d, fresh, change: Change) -> dict:
        """Carry out ``d``: add or retire nodes, then reach ``fresh`` (the model's plan on
        ``d.nodes_after`` nodes; None for a measured scale-out: the added node takes trees
        from the busiest as ``add-node`` does)."""
        hosted = {
            nid: {q for t in self.running.trees.values() if t.node == nid for q in t.active}
            for nid in self.dep.nodes
        }
        extra: dict = {}
        if d.action == "replace":
            return self._replace_node(d.reason["slow_node"])
        if d.nodes_after > d.nodes_before:
            k = d.nodes_after - d.nodes_before
            if self.resources is not None:
                extra["resources"] = self.resources.scale_to(d.nodes_after)
            # the nodes' capacity when they have one (a re-plan needs all or none)
            has = any(c is not None for c in self.running.capacity.values())
            cap = self.autoscaler.policy.capacity if has else None
            extra["added"] = [self._add_node(None, cap, "autoscale")["node"] for _ in range(k)]
        elif d.nodes_after < d.nodes_before and fresh is not None:
            keep = keep_nodes(fresh, hosted, list(self.dep.nodes))
            ids = match_nodes(fresh, hosted, keep)
            where = {
                q.id: ids[j] for j, n in enumerate(fresh.nodes) for t in n.trees for q in t.queries
            }
            extra["retired"] = []
            for nid in [n for n in list(self.dep.nodes) if n not in keep]:
                self._retire_node(nid, where, "autoscale")
                extra["retired"].append(nid)
            if self.resources is not None:
                extra["resources"] = self.resources.release_to(d.nodes_after)
        if fresh is not None and len(fresh.nodes) == len(self.dep.nodes):
            hosted = {
                nid: {q for t in self.running.trees.values() if t.node == nid for q in t.active}
                for nid in self.dep.nodes
            }
            ids = match_nodes(fresh, hosted, list(self.dep.nodes))
            reply = self._replan_to(fresh, ids, change, None)
            extra["replan"] = {k: reply[k] for k in ("moved", "moves_skipped")}
        return extra

    def _replace_node(self, slow: str) -> dict:
        """A slow node replaced: a new node is added (``add-node``'s path) and ``slow``
        retired (``retire-node``'s path), its trees going to the new node."""
        extra: dict = {}
        n = len(self.dep.nodes)
        if self.resources is not None:
            extra["resources"] = self.resources.scale_to(n + 1)
        has = any(c is not None for c in self.running.capacity.values())
        cap = self.autoscaler.policy.capacity if has else None
        new = self._add_node(None, cap, "autoscale")["node"]
        where = {q: new for t in self.running.trees.values() if t.node == slow for q in t.active}
        self._retire_node(slow, where, "autoscale")
        if self.resources is not None:
            extra["resources"] = self.resources.release_to(n)
        return {**extra, "added": [new], "retired": [slow]}

    # -- persistence (resume): cluster.service.resume -----------------------------------------
    def flush_outputs(self) -> None:
        """Write the answers handed over through a checkpoint, then save the state."""
        service_resume.flush_outputs(self)

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
            self._event(
                "resume" if resumed else "start",
                self._costs(),
                nodes=sorted(self.dep.nodes),
                queries=len(self.running.queries),
            )
            stats = self.stream.run()
            self.state = "stopped"
            self.log_faults()
            service_status.write_metrics(self, stats)
            self._event(
                "stop",
                self._costs(),
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
