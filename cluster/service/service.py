"""``weaveplace serve``: a deployment that lives until stopped while queries come and go.

Shape: the directory stream of ``cluster.feeds.directory`` (Spark Structured Streaming ->
``foreachBatch`` -> actors -> answer parts) on a ``ChurnDeployment`` (``cluster.deployment.churn``:
trees that gain and lose queries), plus a control API (``cluster.service.control``: HTTP/JSON on
127.0.0.1 with a bearer token) whose commands run *between* micro-batches: a command takes the
stream's micro-batch lock, so files are fed whole before or after it, never across it.

Registration times (DESIGN.md s. 9).  Every DEBS file feeds all streams at once (one ``ts_ms``),
so one time serves every stream: ``T = newest timestamp fed + 1`` (``null`` in replies before
anything was fed: then a query answers every window).  ``add-queries`` replies ``accepted_at``
(T_reg per stream of the new queries), ``remove-queries`` ``removed_at`` (T_unreg); the trees
change at T (``executors.churn_tree``: generations), so every other query's answers are unchanged.

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

Modules: this one holds the commands and the running plan; ``cluster.service.stream`` the
directory stream, ``cluster.service.state`` what ``--resume`` continues from,
``cluster.service.status`` the status reply and load samples, ``cluster.answers.files`` the
crash-safe files of the run directory. The commands stay together (~750 lines) because each one
is the same transaction on the running plan: validate, take the lock, re-place, apply to the
trees, write the plan and the state, log the event.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cluster.answers.files import atomic_write, jsonable
from cluster.deployment.churn import ChurnDeployment
from cluster.feeds.directory_options import StreamOptions, StreamStats
from cluster.service import state as service_state
from cluster.service import status as service_status
from cluster.service.control import ServiceError, one_line
from cluster.service.planning import Planner
from cluster.service.stream import ServiceStream

#: ``at`` of a change made before any tuple was fed: before every possible timestamp
T_FIRST = -(1 << 62)


class Service:
    """A running deployment over a directory with its control commands (thread-safe).

    ``plan``: the initial plan (``weaveplace.plan/1``); ``model``: the cost model that priced
    it (``placement.trees.CostModel``: IE technique, stream rates, slicing), used to price
    changes; ``default_rate``: the input rate of a stream the plan did not have.
    """

    def __init__(
        self,
        dep: ChurnDeployment,
        spark,
        directory: str | Path,
        run_dir: str | Path,
        plan: dict,
        model,
        *,
        options: StreamOptions | None = None,
        default_rate: float = 0.1,
        progress: Callable[[StreamStats], None] | None = None,
        tolerance: float = 0.25,
        max_moves: int = 8,
        optimizer: str | None = None,
        planner: Planner | None = None,
        choice: dict | None = None,
        resume_state: dict | None = None,
    ):
        self.dep = dep
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.model = model
        self.default_rate = float(default_rate)
        self.tolerance = float(tolerance)
        self.max_moves = int(max_moves)
        self.optimizer = str(optimizer or plan.get("optimizer", ""))
        #: how re-plans plan (``cluster.service.planning``); default: the optimizer's defaults
        self.planner = planner or Planner(self.optimizer)
        #: how WG_PF chose the last plan it made (``service_plan.choice_record``), else None
        self.choice = choice
        self.resume_state = resume_state
        self.flush_on_stop = False
        self.stream = ServiceStream(dep, spark, directory, self.run_dir, options, progress)
        self.stream.service = self
        self._tree_cache: dict[tuple, Any] = {}
        self.events: list[dict] = []  # the latest (all are in events.jsonl)
        self.events_path = self.run_dir / "events.jsonl"
        self._cmd_lock = threading.Lock()  # one command at a time
        self.last_sample: dict[str, tuple[float, dict]] = {}
        self.state_gen = 0  # saved states so far (cluster.service.state)
        self.opt_factor = 1.0  # the optimizer over WeaveShare at the last re-plan (drift)
        self.file_latency: list[float] = []  # s from a file's arrival to its answers written
        self.state = "starting"
        self.control = None
        r = resume_state
        if r is None:
            self.queries: dict[str, dict] = {str(q["id"]): _qdict(q) for q in plan["queries"]}
            self.used_ids: set[str] = set(self.queries)
            self.trees: dict[str, dict] = {}
            for n in plan["nodes"]:
                for t in n["trees"]:
                    self.trees[str(t["id"])] = {
                        "node": str(n["id"]),
                        "stream": t["stream"],
                        "active": [str(q) for q in t["queries"]],
                    }
            self.capacity = {str(n["id"]): n.get("capacity") for n in plan["nodes"]}
            self.next_tree = 1 + max([int(t[1:]) for t in self.trees if t[1:].isdigit()] or [-1])
            self.fed_names: set[str] = set()
            for p in (self.events_path, self.run_dir / "load.jsonl"):
                if p.exists():
                    p.unlink()
        else:
            service_state.restore(self, r)

    # -- plan ---------------------------------------------------------------------------------
    def _tree(self, qids: list[str]):
        key = tuple(qids)
        t = self._tree_cache.get(key)
        if t is None:
            from placement.queries import query_from_mapping

            t = self.model.tree([query_from_mapping(self.queries[q]) for q in qids])
            self._tree_cache[key] = t
        return t

    def placement_plan(self):
        """The running plan as placement objects (trees priced from their queries), and the
        tree ids in the order of its trees."""
        from placement.plan import Node, Plan

        nodes, order = [], []
        for nid in self.dep.nodes:
            trees = []
            for tid, t in sorted(self.trees.items(), key=lambda x: _tree_key(x[0])):
                if t["node"] == nid and t["active"]:
                    trees.append(self._tree(t["active"]))
                    order.append(tid)
            nodes.append(Node(nid, trees, self.capacity.get(nid)))
        return Plan(
            self.optimizer, self.model.technique, nodes, self.rates(), self.model.slicing
        ), order

    def rates(self) -> dict[str, float]:
        rates = self.model.rates if isinstance(self.model.rates, dict) else {}
        for q in self.queries.values():
            rates.setdefault(q["stream"], self.default_rate)
        self.model.rates = rates
        return dict(rates)

    def plan_dict(self) -> dict:
        """The running plan, ``weaveplace.plan/1`` with this deployment's tree ids."""
        plan, order = self.placement_plan()
        d = plan.to_dict()
        ids = iter(order)
        for n in d["nodes"]:
            for t in n["trees"]:
                t["id"] = next(ids)
        if self.choice is not None:
            d["choose"] = self.choice
        return d

    def _costs(self) -> tuple[float, float]:
        plan, _ = self.placement_plan()
        return plan.total_cost, plan.max_cost

    def write_plan(self) -> dict:
        d = self.plan_dict()
        atomic_write(self.run_dir / "plan_current.json", json.dumps(d, indent=1))
        self.dep.follow_plan(d)  # membership changes (add_node, lose_node) follow it
        return d

    # -- events -------------------------------------------------------------------------------
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
        self.events.append(ev)
        with open(self.events_path, "a") as f:
            f.write(json.dumps(ev, default=jsonable) + "\n")
        self.sample_load()
        return ev

    def sample_load(self) -> None:
        """Append one line to ``RUN_DIR/load.jsonl`` (``cluster.service.status``)."""
        service_status.sample_load(self)

    # -- commands -----------------------------------------------------------------------------
    def _registration_time(self) -> tuple[int, int | None]:
        """(``at`` for the trees, the T reported): newest timestamp fed + 1."""
        mx = self.stream.stats.max_ts
        return (T_FIRST, None) if mx is None else (int(mx) + 1, int(mx) + 1)

    def _locked(self):
        """Commands run between micro-batches (the stream's lock) and one at a time."""
        return _Both(self._cmd_lock, self.stream._lock)

    def _check_running(self) -> None:
        if self.state != "running":
            raise ServiceError(409, f"the deployment is {self.state}; commands need it running")

    def add_queries(self, raw: Any) -> dict:
        """Register queries (a list of query mappings, the schema of config
        ``workload.queries``); see the module doc for where they go."""
        from cluster.debs.format import VALUE_COLUMNS
        from placement.queries import QueryError, query_from_mapping
        from placement.replace import add_queries

        if isinstance(raw, dict) and "queries" in raw:
            raw = raw["queries"]
        if not isinstance(raw, list) or not raw:
            raise ServiceError(
                400,
                "add-queries: expected a non-empty list of queries "
                "(the schema of config workload.queries)",
            )
        qs, seen = [], set()
        for i, r in enumerate(raw):
            try:
                q = query_from_mapping(r, i)
                from executors.aggregates import get_aggregate

                get_aggregate(q.aggregate)
            except (QueryError, ValueError, TypeError, KeyError) as e:
                raise ServiceError(400, f"add-queries: {one_line(e)}") from None
            if q.kind != "time":
                raise ServiceError(
                    400,
                    f"add-queries: queries[{i}] ({q.id!r}): kind "
                    f"{q.kind!r}; a running deployment adds time windows only",
                )
            if q.stream not in VALUE_COLUMNS or q.stream == "index":
                raise ServiceError(
                    400,
                    f"add-queries: queries[{i}] ({q.id!r}): stream "
                    f"{q.stream!r} is not a DEBS column (e.g. mf01, mf02)",
                )
            if q.id in seen:
                raise ServiceError(400, f"add-queries: duplicate query id {q.id!r} in the request")
            if q.id in self.queries:
                raise ServiceError(409, f"add-queries: query id {q.id!r} is already running")
            if q.id in self.used_ids:
                raise ServiceError(
                    409,
                    f"add-queries: query id {q.id!r} was used before in "
                    "this deployment (ids are never reused: answers are "
                    "keyed by query and window)",
                )
            seen.add(q.id)
            qs.append(q)
        with self._locked():
            self._check_running()
            before = self._costs()
            plan, order = self.placement_plan()
            for q in qs:
                self.queries[q.id] = _qdict(q.to_dict())
            self.rates()
            try:
                rep = add_queries(plan, qs, self.model)
            except (ValueError, KeyError) as e:
                for q in qs:
                    del self.queries[q.id]
                raise ServiceError(400, f"add-queries: {one_line(e)}") from None
            at, t_reg = self._registration_time()
            tree_of = {qid: tid for tid, t in self.trees.items() for qid in t["active"]}
            new_ids = {q.id for q in qs}
            changes, new_trees, where = [], [], {}
            for node in rep.plan.nodes:
                for t in node.trees:
                    old = [q.id for q in t.queries if q.id not in new_ids]
                    add = [q for q in t.queries if q.id in new_ids]
                    if not add:
                        continue
                    dicts = [_exec_query(self.queries[q.id]) for q in add]
                    if old:
                        tid = tree_of[old[0]]
                        if (
                            any(tree_of[o] != tid for o in old)
                            or self.trees[tid]["node"] != node.id
                        ):
                            raise ServiceError(500, "internal: placement merged running trees")
                        changes.append((node.id, tid, at, dicts, []))
                    else:
                        tid = f"t{self.next_tree}"
                        self.next_tree += 1
                        new_trees.append(
                            (
                                node.id,
                                {
                                    "id": tid,
                                    "stream": t.stream,
                                    "queries": dicts,
                                    "slicing": self.model.slicing,
                                },
                                None if t_reg is None else at,
                            )
                        )
                        self.trees[tid] = {"node": node.id, "stream": t.stream, "active": []}
                    self.trees[tid]["active"] += [q.id for q in add]
                    for q in add:
                        where[q.id] = {"tree": tid, "node": node.id, "woven": bool(old)}
            self.dep.apply_changes(changes, new_trees)
            self.used_ids |= new_ids
            self.write_plan()
            self.flush_outputs()
            streams = sorted({q.stream for q in qs})
            reply = {"accepted_at": {s: t_reg for s in streams}, "queries": where}
            self._event(
                "add-queries", before, queries=sorted(new_ids), accepted_at=t_reg, placement=where
            )
            self._check_drift()
            return reply

    def remove_queries(self, ids: Any) -> dict:
        """Unregister queries: windows ending at or before T_unreg are still answered."""
        if isinstance(ids, dict) and "ids" in ids:
            ids = ids["ids"]
        if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
            raise ServiceError(400, "remove-queries: expected a non-empty list of query ids")
        if len(set(ids)) != len(ids):
            raise ServiceError(400, f"remove-queries: duplicate ids in the request: {ids}")
        with self._locked():
            self._check_running()
            unknown = [i for i in ids if i not in self.queries]
            if unknown:
                raise ServiceError(
                    404, f"remove-queries: unknown query id(s) {unknown} (not running)"
                )
            before = self._costs()
            at, t_unreg = self._registration_time()
            by_tree: dict[str, list[str]] = {}
            for tid, t in self.trees.items():
                # the tree running the query, and any tree that handed it off and may still
                # answer its windows from before the hand-off (those get capped at T_unreg)
                gone = [q for q in t["active"] + t.get("handed", []) if q in set(ids)]
                if gone:
                    by_tree[tid] = gone
            changes = [
                (self.trees[tid]["node"], tid, at, [], gone)
                for tid, gone in sorted(by_tree.items())
            ]
            self.dep.apply_changes(changes, [])
            streams = sorted({self.queries[i]["stream"] for i in ids})
            for tid, gone in by_tree.items():
                t = self.trees[tid]
                t["active"] = [q for q in t["active"] if q not in gone]
                if t.get("handed"):
                    t["handed"] = [q for q in t["handed"] if q not in gone]
            for i in ids:
                del self.queries[i]
            self.write_plan()
            self.flush_outputs()
            self._event("remove-queries", before, queries=sorted(ids), removed_at=t_unreg)
            self._check_drift()
            return {"removed_at": {s: t_unreg for s in streams}}

    def add_node(self, body: Any) -> dict:
        """Scale out: a new node takes trees from the busiest nodes at a checkpoint
        (``Deployment.add_node``: ``placement.replace.add_node``'s moves, exactly once)."""
        from cluster.deployment.specs import DeploymentError

        nid, cap = _node_args(body, "add-node")
        with self._locked():
            self._check_running()
            before = self._costs()
            try:
                rec = self.dep.add_node(nid, capacity=cap, reason="add-node")
            except DeploymentError as e:
                raise ServiceError(409, f"add-node: {one_line(e)}") from None
            new = rec["node"]
            self.capacity[new] = rec.get("capacity")
            for tid in rec["trees"]:
                if tid in self.trees:
                    self.trees[tid]["node"] = new
            self.write_plan()
            self.flush_outputs()
            self._event("add-node", before, node=new, trees_moved=rec["moved"], trees=rec["trees"])
            return {"node": new, "moved": rec["trees"]}

    def retire_node(self, body: Any) -> dict:
        """Graceful scale-in (``ChurnDeployment.retire_node``): the node's trees go where
        ``placement.replace.remove_node`` puts them (run as separate trees where it would
        weave), at a checkpoint; the last node cannot be retired."""
        from cluster.deployment.specs import DeploymentError
        from placement.replace import remove_node

        nid, _ = _node_args(body, "retire-node", need_id=True)
        with self._locked():
            self._check_running()
            if nid not in self.dep.nodes:
                raise ServiceError(
                    404, f"retire-node: unknown node {nid!r}; nodes: {', '.join(self.dep.nodes)}"
                )
            if len(self.dep.nodes) == 1:
                raise ServiceError(
                    409,
                    f"retire-node: {nid!r} is the last node; its queries would have nowhere to run",
                )
            before = self._costs()
            plan, order = self.placement_plan()
            rep = remove_node(plan, nid, self.model)
            where = {q.id: n.id for n in rep.plan.nodes for t in n.trees for q in t.queries}
            load = {n.id: n.cost for n in rep.plan.nodes}
            targets = {}
            for t in self.dep.nodes[nid].spec["trees"]:
                tid = str(t["id"])
                active = self.trees.get(tid, {}).get("active") or []
                targets[tid] = where[active[0]] if active else min(load, key=load.get)
            try:
                rec = self.dep.retire_node(nid, targets, reason="retire-node")
            except DeploymentError as e:
                raise ServiceError(409, f"retire-node: {one_line(e)}") from None
            for tid, dest in targets.items():
                if tid in self.trees:
                    self.trees[tid]["node"] = dest
            self.capacity.pop(nid, None)
            self.write_plan()
            self.flush_outputs()
            self._event(
                "retire-node", before, node=nid, trees_moved=rec["moved"], trees=rec["trees"]
            )
            return {"retired": nid, "moved": rec["trees"]}

    # -- re-planning ----------------------------------------------------------------------
    def _reference_total(self) -> float:
        """TotalCost of offline WeaveShare over the running queries: trees only weave within
        one (stream, aggregate) key, so it is a sum over keys, each cached by its query set
        (a command touches one or two keys; no full re-plan per command)."""
        from placement.queries import query_from_mapping
        from placement.weaveshare import plan_cost, weaveshare

        by_key: dict[tuple, list[str]] = {}
        for qid, q in self.queries.items():
            by_key.setdefault((q["stream"], q["aggregate"]), []).append(qid)
        cache = getattr(self, "_ws_cache", {})
        total, fresh = 0.0, {}
        for key, ids in by_key.items():
            k = (key, tuple(sorted(ids)))
            if k not in cache:
                cache[k] = plan_cost(
                    weaveshare(
                        [query_from_mapping(self.queries[i]) for i in sorted(ids)], self.model
                    )
                )
            fresh[k] = cache[k]
            total += cache[k]
        self._ws_cache = fresh
        return total

    def drift(self) -> dict:
        """The running plan's TotalCost against a fresh plan's, estimated without re-planning:
        offline WeaveShare's TotalCost over the running queries times the configured
        optimizer's own factor over WeaveShare at the last re-plan (1 before any: an optimizer
        that weaves less than WeaveShare, e.g. to fill the nodes, would otherwise look like
        drift right after its own re-plan, and re-plan on every command).

        WG_PF keeps this reference (DESIGN.md s. 9-10 define no other): its factor is the
        chosen plan's, so a rule that trades TotalCost for balance is not drift after its own
        re-plan; the rule itself is applied at each re-plan, not watched between them (its
        caps are relative to a front that only a re-plan computes).  As for every optimizer,
        the factor is 1 until the first re-plan, so a balanced initial plan costlier than
        WeaveShare by more than the tolerance is re-planned (by the same rule) at the first
        add or remove."""
        running, _ = self._costs()
        ws = self._reference_total()
        ref = ws * self.opt_factor
        return {
            "running_total": running,
            "weaveshare_total": ws,
            "reference_total": ref,
            "drift": running / ref - 1.0 if ref > 0 else 0.0,
            "tolerance": self.tolerance,
        }

    def rebalance(self, body: Any = None, cause: str = "rebalance") -> dict:
        """Re-plan (the command, or a drift past ``placement.tolerance``): a fresh plan of the
        running queries by the configured optimizer (WeaveShare + placement; WG_PF: the plan
        ``placement.choose`` picks from its front, ``cluster.service.planning``), reached by
        re-weaving at T (queries handed between trees: the old tree keeps their windows that
        start before T, the new one takes them from T on, ``ChurnTree.change(handoff=)``) and by
        moving at most ``placement.max_moves`` running trees whose node changes (the costliest
        first; the others stay where they run).  New trees start on their planned node."""
        with self._locked():
            self._check_running()
            return self._rebalance(cause)

    def _rebalance(self, cause: str) -> dict:
        from placement.queries import query_from_mapping

        before = self._costs()
        if not self.queries:
            return {"moved": {}, "handoffs": {}, "note": "no queries running"}
        nids = list(self.dep.nodes)
        caps = [self.capacity.get(n) for n in nids]
        qs = [query_from_mapping(self.queries[i]) for i in sorted(self.queries)]
        try:
            fresh, choice = self.planner.plan(qs, self.model, caps)
        except (ValueError, KeyError) as e:
            raise ServiceError(
                409, f"{cause}: the optimizer {self.optimizer!r} cannot re-plan: {one_line(e)}"
            ) from None
        # fresh tree -> running tree of the same key with the largest overlap (greedy, the
        # costliest fresh trees first), else a new tree
        running = {tid: set(t["active"]) for tid, t in self.trees.items() if t["active"]}
        tree_of = {q: tid for tid, ids in running.items() for q in ids}
        taken: set[str] = set()
        assign, new_trees, moves = [], [], []
        fresh_trees = sorted(
            ((t, nids[j]) for j, ts in enumerate([n.trees for n in fresh.nodes]) for t in ts),
            key=lambda x: -x[0].cost,
        )
        for t, node in fresh_trees:
            ids = {q.id for q in t.queries}
            cand = {}
            for q in ids:
                r = tree_of[q]
                if r not in taken:
                    cand[r] = cand.get(r, 0) + 1
            if cand:
                r = max(sorted(cand), key=lambda x: cand[x])
                taken.add(r)
                assign.append((r, ids, node))
                if self.trees[r]["node"] != node:
                    moves.append((t.cost, r, node))
            else:
                tid = f"t{self.next_tree}"
                self.next_tree += 1
                new_trees.append((tid, t, node))
                assign.append((tid, ids, node))
        ws = self._reference_total()
        self.opt_factor = max(1.0, fresh.total_cost / ws) if ws > 0 else 1.0
        moves.sort(key=lambda x: -x[0])
        do_moves = {r: node for _, r, node in moves[: self.max_moves]}
        at, t_at = self._registration_time()
        changes: dict[str, dict] = {}
        target_of = {q: tid for tid, ids, _ in assign for q in ids}
        handoffs = {}
        for q, old in tree_of.items():
            new = target_of[q]
            if new != old:
                handoffs[q] = [old, new]
                changes.setdefault(old, {"add": [], "handoff": []})["handoff"].append(q)
                if new in self.trees:
                    changes.setdefault(new, {"add": [], "handoff": []})["add"].append(q)
        new_specs = []
        for tid, t, node in new_trees:
            new_specs.append(
                (
                    node,
                    {
                        "id": tid,
                        "stream": t.stream,
                        "slicing": self.model.slicing,
                        "queries": [_exec_query(self.queries[q.id]) for q in t.queries],
                    },
                    None if t_at is None else at,
                )
            )
        ch = [
            (
                self.trees[tid]["node"],
                tid,
                at,
                [_exec_query(self.queries[q]) for q in c["add"]],
                [],
                c["handoff"],
            )
            for tid, c in sorted(changes.items())
        ]
        self.dep.apply_changes(ch, new_specs)
        for tid, c in changes.items():
            t = self.trees[tid]
            t["active"] = [q for q in t["active"] if q not in c["handoff"]] + c["add"]
            t["handed"] = [q for q in t.get("handed", []) if q not in c["add"]] + c["handoff"]
        for tid, t, node in new_trees:
            self.trees[tid] = {
                "node": node,
                "stream": t.stream,
                "active": [q.id for q in t.queries],
            }
        moved = self.dep.move_trees(do_moves)
        for r, node in do_moves.items():
            self.trees[r]["node"] = node
        if choice is not None:
            self.choice = choice
        self.write_plan()
        self.flush_outputs()
        self._event(
            cause,
            before,
            trees_moved=moved,
            moves=do_moves,
            handoffs=len(handoffs),
            handed_at=t_at,
            moves_skipped=max(0, len(moves) - self.max_moves),
            fresh_total=fresh.total_cost,
            fresh_max=fresh.max_cost,
            **_choice_detail(choice),
        )
        return {
            "moved": do_moves,
            "handoffs": handoffs,
            "handed_at": t_at,
            "moves_skipped": max(0, len(moves) - self.max_moves),
            "total_cost": self._costs()[0],
            "max_cost": self._costs()[1],
            "fresh_total_cost": fresh.total_cost,
            "fresh_max_cost": fresh.max_cost,
            **({} if choice is None else {"choose": choice}),
        }

    def _check_drift(self) -> None:
        """After a change: re-plan when the running TotalCost is more than ``tolerance`` above
        offline WeaveShare's over the running queries (DESIGN.md s. 9, Incremental WeaveShare)."""
        d = self.drift()
        if d["drift"] > self.tolerance:
            try:
                self._rebalance("drift")
            except ServiceError as e:  # the change itself stands: record why no re-plan
                self._event(
                    "drift-not-replanned", self._costs(), reason=e.message, drift=d["drift"]
                )

    def request_stop(self, body: Any = None) -> dict:
        """Stop after the micro-batch in progress: answers the watermark released are written,
        the state checkpointed (``--resume`` continues); with ``{"flush": true}`` the input has
        ended for good: every pending window is answered and the deployment cannot resume."""
        flush = bool((body or {}).get("flush")) if isinstance(body, dict) else False
        with self._cmd_lock:
            if self.state != "running":
                raise ServiceError(409, f"the deployment is {self.state}")
            self.state = "stopping"
            self.flush_on_stop = flush
        self.stream.request_stop("stop")
        return {"stopping": True, "flush": flush, "event_time": self.event_time}

    # -- persistence (resume): cluster.service.state ------------------------------------------
    def flush_outputs(self) -> None:
        """Write the answers handed over through a checkpoint, then save the state."""
        service_state.flush_outputs(self)

    def persist(self, final: bool = False) -> None:
        """Save what ``serve --resume`` needs in ``RUN_DIR/state``."""
        service_state.save_state(self, final)

    # -- status: cluster.service.status -----------------------------------------------------
    def status(self) -> dict:
        """Nodes (trees, queries, planned cost, measured load over the last interval), queries,
        watermark per stream, backlog, late tuples, answers written, the last events and,
        with WG_PF, how the last plan was chosen (``choose``: ``cluster.service.planning``)."""
        with self._cmd_lock:  # not during a change (the plan is being rewritten)
            return service_status.status(self)

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
            self.stream._open_outputs(self.stream.out)  # commands may write parts at once
            self.write_plan()
            self.persist()
            self.control.write_file(self.run_dir / "control.json")
            self.state = "running"
            resumed = self.resume_state is not None
            self._event(
                "resume" if resumed else "start",
                self._costs(),
                nodes=sorted(self.dep.nodes),
                queries=len(self.queries),
            )
            stats = self.stream.run()
            self.state = "stopped"
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


def _node_args(body: Any, cmd: str, need_id: bool = False) -> tuple[str | None, float | None]:
    if not isinstance(body, dict):
        raise ServiceError(400, f"{cmd}: expected a JSON object")
    nid, cap = body.get("id"), body.get("capacity")
    if nid is not None and (not isinstance(nid, str) or not nid):
        raise ServiceError(400, f"{cmd}: id {nid!r}; expected a non-empty string")
    if need_id and nid is None:
        raise ServiceError(400, f"{cmd}: the node id is required")
    if cap is not None and (
        isinstance(cap, bool) or not isinstance(cap, (int, float)) or not cap > 0
    ):
        raise ServiceError(400, f"{cmd}: capacity {cap!r}; expected a number > 0")
    return nid, (None if cap is None else float(cap))


class _Both:
    def __init__(self, *locks):
        self.locks = locks

    def __enter__(self):
        for lk in self.locks:
            lk.acquire()

    def __exit__(self, *exc):
        for lk in reversed(self.locks):
            lk.release()


def _qdict(q) -> dict:
    return {
        "id": str(q["id"]),
        "stream": q.get("stream", "s0"),
        "aggregate": q.get("aggregate", "sum"),
        "range": int(q["range"]),
        "slide": int(q["slide"]),
        "kind": q.get("kind", "time"),
    }


def _exec_query(q: dict) -> dict:
    return {k: q[k] for k in ("id", "aggregate", "range", "slide", "kind")}


def _tree_key(tid: str):
    return (0, int(tid[1:]), "") if tid[1:].isdigit() else (1, 0, tid)
