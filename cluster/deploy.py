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
* **A node lost for good** (``lose_node``: declared by the caller or a fault drill, or found
  when a dead actor's pinned Ray node is gone): ``placement.replace.remove_node`` decides which
  survivor takes each of its trees; each survivor adopts them restored from the lost node's
  last snapshot and replays the logged batches after it to those trees only (trees skip a
  batch ``seq`` they already applied, so the live feed and the replay never double-count).
  The answers the lost node committed stay, the rest are regenerated: still exactly-once.
  Until the next checkpoint a survivor's state is its own snapshot plus the adopted trees'
  (``_Node.sources``), so it can itself be killed and recovered, or lost, in between.
* **Scale out** (``add_node``): ``placement.replace.add_node`` picks the trees that move to the
  new node; after a checkpoint (nothing fed in between) the new actor adopts them from their
  hosts' snapshots and the hosts drop them; until the next checkpoint a recovery or a loss
  rebuilds both sides from those snapshots and the replay log, as above.
* **Pinning** (``pin_nodes``): plan node -> Ray node with a hard node affinity (see
  ``Deployment``).
* **Results while the run goes on** (live streams): ``take_answers`` checkpoints and hands
  over the committed answers, so nothing handed over is ever regenerated (a restarted node, or
  a lost node's trees on their new hosts, start from that snapshot); ``take_late`` hands over
  the late tuples since its last call, counted per tree id (a tree takes its late tuples along
  when it moves).

The driver-side sorting in ``finish`` is by ``(query_id, window_start)``.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from .node_actor import AnswerBlocks, NodeActor, empty_late, merge_blocks

PLAN_SCHEMA = "weaveplace.plan/1"


class DeploymentError(RuntimeError):
    """A plan that cannot be deployed, or a node that failed and could not be recovered."""


def node_specs(plan: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Structural check of a plan and the per-node tree specs the actors need.

    Costs are not re-priced here (``placement.plan.verify_plan`` does that and can be slow for
    large plans); we check only what execution relies on: every query in exactly one tree, and
    a tree's stream equal to its queries' stream.  A plan tree mixing time and count windows
    becomes two executor trees (``<id>`` and ``<id>~count``).  Each tree spec carries the
    plan's ``slicing`` (default ``"pairs"``).
    """
    if plan.get("schema") != PLAN_SCHEMA:
        raise DeploymentError(f"plan schema: expected {PLAN_SCHEMA!r}, got {plan.get('schema')!r}")
    slicing = plan.get("slicing", "pairs")
    if slicing not in ("pairs", "cutty"):
        raise DeploymentError(f"plan slicing: expected pairs or cutty, got {slicing!r}")
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
                trees.append({"id": tid, "stream": stream, "plan_tree": str(t["id"]),
                              "queries": [q for q in qs if q["kind"] == kind],
                              "slicing": slicing})
        specs.append({"node_id": str(n["id"]), "trees": trees})
    missing = sorted(set(queries) - set(seen))
    if missing:
        raise DeploymentError(f"queries not placed in any tree: {missing[:10]}"
                              f"{' ...' if len(missing) > 10 else ''}")
    if len({s["node_id"] for s in specs}) != len(specs):
        raise DeploymentError("duplicate node ids in plan")
    where: dict[str, str] = {}
    for s in specs:  # a tree can move to another node (lose_node): ids name it plan-wide
        for t in s["trees"]:
            if t["id"] in where:
                raise DeploymentError(f"tree id {t['id']!r} is used on nodes {where[t['id']]!r} "
                                      f"and {s['node_id']!r}: tree ids must be unique in a plan")
            where[t["id"]] = s["node_id"]
    return specs


@dataclass
class RunResult:
    """What a run produced: answers (query_id, window_start, window_end, value), late tuples
    (node_id, tree_id, stream, ts_ms, value), per-node metrics, the re-placements of nodes
    lost for good (also in ``metrics["replacements"]``) and the nodes added (``additions``)."""

    answers: pa.Table
    late: pa.Table
    metrics: dict[str, Any] = field(default_factory=dict)

    @property
    def replacements(self) -> list[dict[str, Any]]:
        return list(self.metrics.get("replacements", []))

    @property
    def additions(self) -> list[dict[str, Any]]:
        """Nodes added while the run went on (``Deployment.add_node``), with the trees moved."""
        return list(self.metrics.get("additions", []))


@dataclass
class _Source:
    """Where some trees' state is rebuilt from: a node snapshot that holds them (``None``: the
    initial state), taken after batch ``seq``; the batches after it come from the replay log.
    A node's sources are its own last snapshot, then the trees it adopted from lost nodes
    since (their snapshots are older than its own)."""

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
class _Node:
    spec: dict
    actor: Any
    sources: list[_Source]
    inflight: deque = field(default_factory=deque)
    recoveries: int = 0
    submitted_seq: int = -1         # last batch seq sent to this node (replay bound)
    flushed: bool = False
    max_depth: int = 0
    blocked_s: float = 0.0
    ray_node: str | None = None     # the Ray node it is pinned to (None: Ray's choice)
    adopted: int = 0                # executor trees taken over from lost nodes
    added: int = 0                  # executor trees taken over as an added node (add_node)

    @property
    def snapshot(self) -> bytes | None:
        return self.sources[0].blob

    @property
    def snapshot_seq(self) -> int:
        return self.sources[0].seq


def _plan_tree_id(tree: Mapping[str, Any]) -> str:
    """The plan tree an executor tree comes from (``t3~count`` -> ``t3``): the executor trees
    of one plan tree move together."""
    return str(tree.get("plan_tree", tree["id"]))


def next_node_id(taken) -> str:
    """The id ``add_node`` gives a new node by default: ``node-<k>``, the smallest k unused
    (ids of lost nodes stay used: metrics and records name nodes by id)."""
    taken = {str(x) for x in taken}
    k = 0
    while f"node-{k}" in taken:
        k += 1
    return f"node-{k}"


def check_faults(faults, node_ids) -> list[dict[str, Any]]:
    """Validate a fault drill: ``[{kind: kill|lose|add, node, at_batch}]``; returns it sorted
    by batch.  ``kill`` kills the node's actor before batch ``at_batch`` is fed (it is
    restarted from its checkpoint); ``lose`` declares the node lost for good (its trees are
    re-placed); ``add`` adds a node (``Deployment.add_node``: trees move to it) named ``node``
    (optional: default ``next_node_id``, resolved here so later faults can name it) with an
    optional ``capacity``.  A drill must leave one node, must not touch a node it already
    lost or before it is added, and must not add a node id that exists or existed."""
    ids = [str(x) for x in node_ids]
    out = []
    for i, f in enumerate(faults or []):
        if not isinstance(f, Mapping):
            raise DeploymentError(f"faults[{i}]: expected a mapping {{kind, node, at_batch}}")
        kind, node, at = f.get("kind"), f.get("node"), f.get("at_batch")
        cap = f.get("capacity")
        if kind not in ("kill", "lose", "add"):
            raise DeploymentError(f"faults[{i}].kind: {kind!r}; allowed: kill, lose, add")
        if isinstance(at, bool) or not isinstance(at, int) or at < 0:
            raise DeploymentError(f"faults[{i}].at_batch: {at!r}; expected an integer >= 0")
        if kind == "add":
            if node is not None and (not isinstance(node, str) or not node):
                raise DeploymentError(f"faults[{i}].node: {node!r}; expected the new node's "
                                      "id (a non-empty string) or nothing (node-<k>)")
            if cap is not None and (isinstance(cap, bool) or not isinstance(cap, (int, float))
                                    or not cap > 0 or cap == float("inf")):
                raise DeploymentError(f"faults[{i}].capacity: {cap!r}; expected a number > 0")
        elif cap is not None:
            raise DeploymentError(f"faults[{i}].capacity: only a node added (kind: add) "
                                  f"takes a capacity, not kind {kind}")
        out.append({"kind": kind, "node": None if node is None else str(node), "at_batch": at,
                    "capacity": None if cap is None else float(cap), "index": i})
    out.sort(key=lambda f: (f["at_batch"], f["index"]))
    added_by = {f["node"]: f for f in out if f["kind"] == "add" and f["node"] is not None}
    alive = set(ids)
    lost: dict[str, int] = {}
    added: dict[str, int] = {}
    for f in out:
        i = f["index"]
        if f["kind"] == "add":
            if f["node"] is None:
                f["node"] = next_node_id(set(ids) | set(added) | set(added_by))
            if f["node"] in ids or f["node"] in added:
                by = "the plan" if f["node"] in ids else f"faults[{added[f['node']]}]"
                raise DeploymentError(f"faults[{i}].node: node {f['node']!r} already exists "
                                      f"(in {by}); an added node needs a new id")
            added[f["node"]] = i
            alive.add(f["node"])
            continue
        if f["node"] not in ids and f["node"] not in added:
            if f["node"] in added_by:
                a = added_by[f["node"]]
                raise DeploymentError(f"faults[{i}]: node {f['node']!r} is added only by "
                                      f"faults[{a['index']}] at batch {a['at_batch']}, after "
                                      f"this fault (batch {f['at_batch']})")
            raise DeploymentError(f"faults[{i}].node: unknown node {f['node']!r}; nodes: "
                                  f"{', '.join(map(str, ids + list(added)))}")
        if f["node"] in lost:
            raise DeploymentError(f"faults[{i}]: node {f['node']!r} is already lost (by "
                                  f"faults[{lost[f['node']]}]); nothing to {f['kind']}")
        if f["kind"] == "lose":
            lost[f["node"]] = i
            alive.discard(f["node"])
            if not alive:
                raise DeploymentError(f"faults[{i}]: losing node {f['node']!r} loses every "
                                      "node; at least one must survive to run the queries")
    return [{k: f[k] for k in ("kind", "node", "at_batch")}
            | ({"capacity": f["capacity"]} if f["kind"] == "add" else {}) | {"fired": False}
            for f in out]


def ray_nodes_for_pinning() -> list[dict[str, Any]]:
    """Alive Ray nodes in pinning order: workers first (by address, then id), the head last.

    Why the head last: it also runs the GCS, the driver and Spark's driver, so with fewer plan
    nodes than Ray nodes it is the one left out, and with more it takes the remainder."""
    import ray

    alive = [n for n in ray.nodes() if n.get("Alive")]
    head = "node:__internal_head__"
    return sorted(alive, key=lambda n: (head in n.get("Resources", {}),
                                        n.get("NodeManagerAddress", ""), n["NodeID"]))


def pin_round_robin(plan_nodes, ray_nodes) -> dict[str, str]:
    """Plan node i -> Ray node ``i mod len(ray_nodes)`` (ids in the order given)."""
    ray_ids = [r["NodeID"] if isinstance(r, Mapping) else str(r) for r in ray_nodes]
    if not ray_ids:
        raise DeploymentError("no alive Ray node to pin plan nodes to")
    return {str(nid): ray_ids[i % len(ray_ids)] for i, nid in enumerate(plan_nodes)}


class _Layout:
    """The running plan as placement objects (trees re-priced from their queries), so that
    ``placement.replace.remove_node`` can decide where a lost node's trees go."""

    def __init__(self, plan: Mapping[str, Any]):
        from placement.plan import Node, Plan
        from placement.queries import query_from_mapping
        from placement.trees import CostModel

        streams = plan.get("streams") or {}
        queries = {str(q["id"]): query_from_mapping(q, i)
                   for i, q in enumerate(plan.get("queries", []))}
        used = sorted({queries[str(qid)].stream for n in plan["nodes"] for t in n["trees"]
                       for qid in t["queries"]})
        missing = [s for s in used if "rate" not in (streams.get(s) or {})]
        if missing:
            raise DeploymentError(f"the plan has no input rate for stream(s) {missing} "
                                  "(plan 'streams'); re-placement prices trees with them")
        rates = {s: float(streams[s]["rate"]) for s in used}
        ie = plan.get("ie") or "slickdeque"
        try:
            self.model = CostModel(ie, rates, slicing=plan.get("slicing", "pairs"))
        except (KeyError, ValueError) as e:
            raise DeploymentError(f"the plan's ie {ie!r} has no cost model for re-placement: "
                                  f"{e}") from None
        self.tree_id: dict[int, str] = {}     # id(Tree) -> plan tree id
        nodes = []
        for n in plan["nodes"]:
            trees = []
            for t in n["trees"]:
                if not t["queries"]:
                    continue
                try:
                    tree = self.model.tree([queries[str(q)] for q in t["queries"]])
                except ValueError as e:
                    raise DeploymentError(f"tree {t['id']!r} cannot be re-placed: {e}") from None
                self.tree_id[id(tree)] = str(t["id"])
                trees.append(tree)
            nodes.append(Node(str(n["id"]), trees, n.get("capacity")))
        self.plan = Plan(str(plan.get("optimizer", "")), ie, nodes, rates)

    def remove(self, node_id: str) -> tuple[dict[str, str], dict[str, Any]]:
        """Where each plan tree of ``node_id`` goes, and the record of the decision.

        ``remove_node`` may weave a moved tree into a survivor's tree when that is cheaper.
        A running tree cannot be woven into another without the raw tuples of its last range
        (neither snapshot holds them), so the move is executed as a separate tree on the node
        ``remove_node`` chose; the record gives both the planned costs (with weaving) and the
        executed ones (trees kept whole)."""
        from placement.plan import Node, Plan
        from placement.replace import remove_node

        before = self.plan
        gone = next(n for n in before.nodes if n.id == node_id)
        rep = remove_node(before, node_id, self.model)
        where = {q.id: n.id for n in rep.plan.nodes for t in n.trees for q in t.queries}
        target: dict[str, str] = {}
        woven = []
        moved_to: dict[str, list] = {}
        for t in gone.trees:
            tid = self.tree_id[id(t)]
            dest = where[t.queries[0].id]
            target[tid] = dest
            moved_to.setdefault(dest, []).append(t)
            host = next(n for n in rep.plan.nodes if n.id == dest)
            if not any(x is t for x in host.trees):
                woven.append(tid)
        nodes = [Node(n.id, list(n.trees) + moved_to.get(n.id, []), n.capacity)
                 for n in before.nodes if n.id != node_id]
        self.plan = Plan(before.optimizer, before.ie, nodes, before.rates)
        record = {"moved": len(target), "trees": dict(sorted(target.items())),
                  "woven_in_plan": sorted(woven),
                  "planned": {"total_before": rep.total_before, "max_before": rep.max_before,
                              "total_after": rep.plan.total_cost,
                              "max_after": rep.plan.max_cost,
                              "total_change": rep.total_change, "max_change": rep.max_change},
                  "executed": {"total_before": before.total_cost, "max_before": before.max_cost,
                               "total_after": self.plan.total_cost,
                               "max_after": self.plan.max_cost,
                               "total_change": self.plan.total_cost - before.total_cost,
                               "max_change": self.plan.max_cost - before.max_cost}}
        return target, record

    def add(self, node_id: str, capacity: float | None) -> tuple[dict[str, str], dict[str, Any]]:
        """Which plan trees move to a new node ``node_id`` (``placement.replace.add_node``:
        while one move lowers the MaxCost, or the nodes tied at it, the most utilised node's
        best tree moves), as
        ``{plan tree id: node it leaves}``, and the record of the decision.  Trees move whole,
        so the planned plan is the executed one."""
        from placement.replace import add_node

        before = self.plan
        try:
            rep = add_node(before, node_id, capacity)
        except ValueError as e:
            raise DeploymentError(f"cannot add node {node_id!r}: {e}") from None
        host = {id(t): n.id for n in before.nodes for t in n.trees}
        moves = {self.tree_id[id(t)]: host[id(t)] for t in rep.plan.nodes[-1].trees}
        self.plan = rep.plan
        record = {"moved": rep.moved, "trees": dict(sorted(moves.items())),
                  "capacity": capacity,
                  "planned": {"total_before": rep.total_before, "max_before": rep.max_before,
                              "total_after": rep.plan.total_cost,
                              "max_after": rep.plan.max_cost,
                              "total_change": rep.total_change, "max_change": rep.max_change,
                              "node_costs": {n.id: n.cost for n in rep.plan.nodes}}}
        return moves, record


class Deployment:
    """A plan running on Ray: ``feed`` batches, ``checkpoint``, ``finish``.

    ``technique`` overrides the plan's ``ie``; ``allowed_lateness`` is in the streams' time unit.
    ``mode``: ``"raw"`` (actors take tuple batches, ``feed_raw``) or ``"sliced"`` (actors take
    per-stream batches of pre-aggregated slices cut at ``edge_classes(stream)``, the union of
    the edges of every tree on the stream: ``spark_feed.feed_sliced``; time windows only).
    ``count_ops``: trees count their final-aggregation operations (``metrics()`` per tree:
    ``final_ops``, ``omega``), to set measured cost beside the plan's estimate.

    ``pin_nodes``: ``True`` pins plan node i to Ray node ``i mod R`` (``ray_nodes_for_pinning``
    order) with a hard ``NodeAffinitySchedulingStrategy``; a mapping gives plan node -> Ray node
    id explicitly; ``False`` (default) lets Ray choose.  Why node affinity and not custom
    resources: it works on any cluster as it is (custom resources must be declared at
    ``ray start`` on every machine), and it names one node, so placement is checkable.  Hard
    (``soft=False``), because a plan node that silently ran elsewhere would break the plan's
    per-node costs; when its Ray node is gone the plan node is lost and its trees are
    re-placed on the surviving plan nodes (``lose_node``).  A restarted actor keeps its pin.

    ``faults``: a fault drill, ``[{kind: kill|lose|add, node, at_batch}]`` (``check_faults``),
    fired just before batch ``at_batch`` (0-based) is fed.
    Use as a context manager (or call ``shutdown``) so actors are killed on errors too.
    """

    def __init__(self, plan: Mapping[str, Any], *, technique: str | None = None,
                 allowed_lateness: int = 0, max_in_flight: int = 4,
                 checkpoint_every: int | None = None, max_log_bytes: int | None = 128 << 20,
                 auto_recover: bool = True, actor_options: Mapping[str, Any] | None = None,
                 mode: str = "raw", count_ops: bool = False,
                 pin_nodes: bool | Mapping[str, str] = False,
                 faults: list[Mapping[str, Any]] | None = None):
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
        self.initial_plan = plan
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
        self.faults = check_faults(faults, [sp["node_id"] for sp in specs])
        pins = self._pins(pin_nodes, [sp["node_id"] for sp in specs])
        self._pinning = bool(pin_nodes)   # add_node pins a new node too
        self._created = len(specs)         # plan nodes started so far (add_node's pin index)
        for spec in specs:
            nid = spec["node_id"]
            n = _Node(spec, None, [_Source(list(spec["trees"]), None, -1, nid)],
                      ray_node=pins.get(nid))
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
        self._since_ckpt = 0
        self._log_bytes = 0
        self._layout: _Layout | None = None
        self.lost: dict[str, dict[str, Any]] = {}
        self.replacements: list[dict[str, Any]] = []
        self.additions: list[dict[str, Any]] = []
        self.checkpoints = 0
        self.rows_fed = 0
        self.bytes_fed = 0
        self.t_start = time.perf_counter()
        self._finished = False
        # actors start asynchronously; fail fast if one cannot be constructed
        ray.get([n.actor.ping.remote() for n in self.nodes.values()])

    # -- actors -----------------------------------------------------------------------------
    def _pins(self, pin_nodes, node_ids: list[str]) -> dict[str, str]:
        if not pin_nodes:
            return {}
        if "scheduling_strategy" in self.actor_options:
            raise DeploymentError("pin_nodes and actor_options['scheduling_strategy'] both "
                                  "place the actors: give one")
        alive = [r["NodeID"] for r in ray_nodes_for_pinning()]
        if pin_nodes is True:
            return pin_round_robin(node_ids, alive)
        pins = {str(k): str(v) for k, v in dict(pin_nodes).items()}
        unknown = sorted(set(pins) - set(node_ids))
        if unknown:
            raise DeploymentError(f"pin_nodes names unknown plan node(s) {unknown}")
        missing = [nid for nid in node_ids if nid not in pins]
        if missing:
            raise DeploymentError(f"pin_nodes: no Ray node for plan node(s) {missing}")
        dead = sorted({r for r in pins.values() if r not in alive})
        if dead:
            raise DeploymentError(f"pin_nodes: Ray node(s) {dead} are not alive; alive: {alive}")
        return pins

    def _new_actor(self, node_id: str, trees: list[dict]):
        opts = dict(self.actor_options)
        pin = self.nodes[node_id].ray_node
        if pin is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(pin, soft=False)
        cls = NodeActor.options(**opts) if opts else NodeActor
        return cls.remote(node_id, list(trees), self.technique, self.allowed_lateness,
                          "slices" if self.mode == "sliced" else "tuples", self.count_ops)

    def _route(self) -> None:
        """Which nodes host which streams (batches go only there)."""
        self.stream_nodes = {}
        for nid, n in self.nodes.items():
            for t in n.spec["trees"]:
                hosts = self.stream_nodes.setdefault(t["stream"], [])
                if nid not in hosts:
                    hosts.append(nid)

    @property
    def streams(self) -> list[str]:
        return sorted(self.stream_nodes)

    def edge_classes(self, stream: str) -> list[tuple[int, int]]:
        """Residue classes ``(s, c)`` of the union of the edges of every tree (on every node)
        on ``stream``: the slice boundaries of sliced mode (DESIGN.md s. 2).  Moving trees
        between nodes does not change it."""
        from executors.slicing import edge_classes

        rs = {(int(q["range"]), int(q["slide"])) for n in self.nodes.values()
              for t in n.spec["trees"] if t["stream"] == stream for q in t["queries"]}
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
        return dict(zip(nids, ray.get([self.nodes[n].actor.ray_node_id.remote()
                                       for n in nids])))

    # -- feeding ----------------------------------------------------------------------------
    def feed(self, stream: str | None, batch) -> int:
        """Send one Arrow batch (``ts_ms`` + stream column(s)) to every node hosting a stream in
        it (``stream=None``: all streams whose columns the batch has).  Blocks while a target
        actor has ``max_in_flight`` calls outstanding.  Returns the batch's sequence number."""
        import ray

        if self._finished:
            raise DeploymentError("deployment already finished")
        self._fire_faults(self._seq + 1)
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
            self._log.append((seq, stream, ref, tuple(targets), tuple(streams)))
            self._log_bytes += batch.nbytes
        for nid in targets:
            # a node lost while this batch was being sent: its trees' new hosts took the batch
            # from the log when they adopted the trees
            if nid in self.nodes:
                self._submit(nid, stream, ref, seq)
        self._since_ckpt += 1
        if (self.checkpoint_every and self._since_ckpt >= self.checkpoint_every) or \
                (self.auto_recover and self.max_log_bytes
                 and self._log_bytes >= self.max_log_bytes):
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
                self.add_node(f["node"], capacity=f.get("capacity"),
                              reason=f"fault drill at batch {f['at_batch']}")
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

    def _ray_node_gone(self, nid: str) -> bool:
        import ray

        pin = self.nodes[nid].ray_node
        return pin is not None and pin not in {x["NodeID"] for x in ray.nodes() if x["Alive"]}

    def _on_dead(self, nid: str) -> None:
        """A node's actor died: restart it from its checkpoint, unless its (pinned) Ray node is
        gone, then the node is lost for good and its trees move to the other nodes."""
        import ray

        if self._ray_node_gone(nid):
            self.lose_node(nid, reason=f"Ray node {self.nodes[nid].ray_node} is gone")
            return
        try:
            self.recover(nid)
        except (ray.exceptions.RayError, DeploymentError) as e:
            # the Ray node may have died in between (a hard-pinned actor cannot start there)
            if nid in self.nodes and self._ray_node_gone(nid):
                self.lose_node(nid, reason=f"Ray node {self.nodes[nid].ray_node} is gone")
                return
            raise DeploymentError(f"node {nid}: recovery failed: {e}") from e

    # -- checkpoints and recovery -------------------------------------------------------------
    def checkpoint(self) -> None:
        """Snapshot every node and commit the answers produced up to the snapshot; the replay
        log is then cleared (its batches are no longer needed).  If a node is lost meanwhile,
        its trees' new hosts still need the log, so the round is repeated (the next snapshots
        hold the moved trees)."""
        import ray

        while True:
            self._wait_all()
            refs = {}
            for nid, n in self.nodes.items():
                refs[nid] = (n.actor.checkpoint_blocks.remote(), list(n.spec["trees"]),
                             len(n.sources))
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
                    blob, answers, seq = ray.get(n.actor.checkpoint_blocks.remote())
                n = self.nodes[nid]
                # sources appended after the checkpoint call (adoptions) are not in the snapshot
                n.sources = [_Source(trees, blob, seq, nid)] + n.sources[k:]
                if answers.num_rows:
                    self._committed.append(answers)
            if all(len(n.sources) == 1 for n in self.nodes.values()):
                break
        self._log.clear()
        self._log_bytes = 0
        self._since_ckpt = 0
        self.checkpoints += 1

    def _replay(self, nid: str, src: _Source, *, base: bool):
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
            raise DeploymentError(f"cannot recover node {node_id}: the replay log is kept only "
                                  f"with auto_recover=True")
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

    def lose_node(self, node_id: str, reason: str = "declared lost") -> dict[str, Any]:
        """Node ``node_id`` is gone for good: re-place its trees on the other nodes.

        ``placement.replace.remove_node`` decides where each tree goes (moving only the lost
        node's trees).  Each moved tree is restored on its new actor from the lost node's
        last snapshot (or from scratch if it never checkpointed) and replayed, alone, the
        logged batches after it; routing then sends its stream to the new host.  Answers the
        lost node committed at checkpoints stay; the ones it produced since are regenerated by
        the replay, so answers stay exactly-once.  Returns (and records in ``metrics()``) the
        re-placement: moved trees, planned and executed cost change, batches replayed."""
        import ray

        t0 = time.perf_counter()
        if node_id in self.lost:
            raise DeploymentError(f"node {node_id!r} is already lost")
        if node_id not in self.nodes:
            raise DeploymentError(f"unknown node {node_id!r}; nodes: {', '.join(self.nodes)}")
        if len(self.nodes) == 1:
            raise DeploymentError(f"cannot lose node {node_id!r}: it is the last node, its "
                                  "queries would have nowhere to run")
        if not self.auto_recover:
            raise DeploymentError(f"cannot re-place node {node_id!r}: its state (checkpoints "
                                  "and replay log) is kept only with auto_recover=True")
        if self._layout is None:
            self._layout = _Layout(self.plan)
        target, record = self._layout.remove(node_id)  # decided before anything changes
        gone = self.nodes.pop(node_id)
        try:
            ray.kill(gone.actor, no_restart=True)
        except Exception:
            pass
        # every source of the lost node (its snapshot + trees it had adopted) splits by target
        adopt: list[tuple[str, _Source]] = []
        for src in gone.sources:
            groups: dict[str, list[dict]] = {}
            for t in src.trees:
                groups.setdefault(target[_plan_tree_id(t)], []).append(t)
            for dest, trees in sorted(groups.items()):
                adopt.append((dest, _Source(trees, src.blob, src.seq, src.origin)))
        for dest, src in adopt:
            n = self.nodes[dest]
            n.spec = {**n.spec, "trees": n.spec["trees"] + src.trees}
            n.sources.append(src)
            n.adopted += len(src.trees)
        self._route()
        self._update_plan(node_id, target)
        replayed = 0
        for dest, src in adopt:
            if dest in self.nodes:  # (a host lost during this adoption passed src on)
                replayed += self._adopt(dest, src)
        for dest in sorted({d for d, _ in adopt}):
            self._wait(dest, 0)  # surface failures of the adoption now
        record = {"node": node_id, "reason": reason, "before_batch": self._seq + 1,
                  "snapshot_seq": gone.snapshot_seq, **record,
                  "replayed_batches": replayed, "seconds": time.perf_counter() - t0}
        self.lost[node_id] = {"reason": reason, "before_batch": self._seq + 1,
                              "ray_node": gone.ray_node, "recoveries": gone.recoveries}
        self.replacements.append(record)
        return record

    def _adopt(self, nid: str, src: _Source) -> int:
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

    def _update_plan(self, node_id: str, target: dict[str, str]) -> None:
        """``self.plan`` follows the running layout: the lost node's tree entries move to their
        new nodes (as separate trees), node and plan costs are re-summed, so the plan still
        verifies (``placement.plan.verify_plan``)."""
        old = {str(n["id"]): n for n in self.plan["nodes"]}
        moving = old[node_id]["trees"]
        nodes = []
        for nid, n in old.items():
            if nid == node_id:
                continue
            trees = list(n["trees"]) + [dict(t, moved_from=node_id) for t in moving
                                        if target.get(str(t["id"])) == nid]
            nodes.append({**n, "trees": trees,
                          "cost": float(sum(float(t.get("cost", 0.0)) for t in trees))})
        costs = [n["cost"] for n in nodes]
        self.plan = {**self.plan, "nodes": nodes, "total_cost": float(sum(costs)),
                     "max_cost": max(costs, default=0.0)}

    def add_node(self, node_id: str | None = None, *, capacity: float | None = None,
                 ray_node: str | None = None, reason: str = "added") -> dict[str, Any]:
        """Scale out: start a new node and move trees to it, exactly once.

        ``placement.replace.add_node`` (on the running layout re-priced from its queries)
        decides which trees move: while moving one tree from the most utilised node lowers the
        MaxCost (or the number of nodes tied at it).  The move: a checkpoint of every node (answers committed, replay log empty),
        then the new actor ``add_trees`` the moved trees from their hosts' snapshots and the
        hosts ``drop_trees`` them; routing then sends their streams to the new node.  Nothing
        is fed in between, so no batch is lost or applied twice; until the next checkpoint the
        new node's state is those snapshots (``_Node.sources``) and each host's its snapshot
        minus the moved trees, which ``recover`` and ``lose_node`` use if an actor dies or a
        node is lost later (the replay log and per-tree ``seq`` keep that exactly-once).

        ``node_id``: default ``node-<k>``, the smallest k unused (lost nodes' ids stay used).
        ``capacity``: needed exactly when the plan's nodes have capacities (default then: their
        capacity, if they all have the same).  ``ray_node``: pin the new actor to this Ray node;
        default with pinning on: Ray node ``i mod R`` as ``pin_nodes=True`` would give plan node
        i (i = nodes started so far), else Ray's choice.  ``self.plan`` gains the node with
        the moved tree entries (``moved_from``), costs re-summed: it verifies.  Returns (and
        records in ``metrics()["additions"]``) the moved trees and the cost change.  A node
        that no move helps (e.g. a single tree) is still added, empty."""
        t0 = time.perf_counter()
        if self._finished:
            raise DeploymentError("deployment already finished: add nodes while it runs")
        nid = next_node_id(set(self.nodes) | set(self.lost)) if node_id is None \
            else str(node_id)
        if not nid:
            raise DeploymentError("add_node: the node id must be a non-empty string")
        if nid in self.nodes or nid in self.lost:
            raise DeploymentError(f"cannot add node {nid!r}: "
                                  + ("it already exists" if nid in self.nodes else
                                     "it was lost (ids of lost nodes are not reused)")
                                  + "; an added node needs a new id")
        caps = [n.get("capacity") for n in self.plan["nodes"]]
        if capacity is None and any(c is not None for c in caps):
            if len(set(caps)) != 1:
                raise DeploymentError(f"cannot add node {nid!r}: the plan's nodes have "
                                      f"different capacities {caps}; give capacity=")
            capacity = caps[0]
        if capacity is not None and (isinstance(capacity, bool) or not float(capacity) > 0):
            raise DeploymentError(f"cannot add node {nid!r}: capacity {capacity!r}; expected "
                                  "a number > 0")
        capacity = None if capacity is None else float(capacity)
        pin = self._pin_new(nid, ray_node)
        if self._layout is None:  # fails here (no input rates, ...) before anything changes
            self._layout = _Layout(self.plan)
        # the moved trees start from this snapshot of their hosts; nothing is fed until they
        # run on the new node.  (A node lost during the checkpoint is re-placed first.)
        self.checkpoint()
        if any(len(x.sources) != 1 for x in self.nodes.values()):  # checkpoint() ensures it
            raise DeploymentError("internal: a node still has adopted sources after a checkpoint")
        moves, record = self._layout.add(nid, capacity)
        n = _Node({"node_id": nid, "trees": []}, None, [_Source([], None, self._seq, nid)],
                  ray_node=pin)
        self.nodes[nid] = n
        self._created += 1
        n.actor = self._new_actor(nid, [])
        adopt: list[_Source] = []
        drops: list[tuple[str, _Node, Any, list[str]]] = []
        for hid, h in list(self.nodes.items()):
            mv = [t for t in h.spec["trees"] if moves.get(_plan_tree_id(t)) == hid]
            if hid == nid or not mv:
                continue
            ids = [t["id"] for t in mv]
            base = h.sources[0]  # the checkpoint left every node with its own snapshot only
            h.spec = {**h.spec, "trees": [t for t in h.spec["trees"] if t["id"] not in ids]}
            h.sources[0] = _Source([t for t in base.trees if t["id"] not in ids], base.blob,
                                   base.seq, base.origin, base.dropped + mv)
            src = _Source(mv, base.blob, base.seq, hid)
            n.spec = {**n.spec, "trees": n.spec["trees"] + mv}
            n.sources.append(src)
            n.added += len(mv)
            adopt.append(src)
            drops.append((hid, h, h.actor, ids))
        self._route()
        self._update_plan_added(nid, moves, capacity)
        actor = n.actor
        for src in adopt:  # a recovery (or loss) of the new node rebuilds all of them
            if self.nodes.get(nid) is not n or n.actor is not actor:
                break
            self._adopt(nid, src)
        for hid, h, old, ids in drops:
            self._wait(hid, self.max_in_flight - 1)
            if self.nodes.get(hid) is h and h.actor is old:  # else recover/lose_node did it
                h.inflight.append(h.actor.drop_trees.remote(ids))
        for x in [nid] + [d[0] for d in drops]:
            self._wait(x, 0)  # surface failures of the move now
        record = {"node": nid, "reason": reason, "before_batch": self._seq + 1,
                  "snapshot_seq": self._seq, "ray_node": pin, **record,
                  "executed_trees": n.added, "seconds": time.perf_counter() - t0}
        self.additions.append(record)
        return record

    def _pin_new(self, nid: str, ray_node: str | None) -> str | None:
        """The Ray node a new plan node is pinned to (None: Ray's choice)."""
        if ray_node is None and not self._pinning:
            return None
        if "scheduling_strategy" in self.actor_options:
            raise DeploymentError("ray_node and actor_options['scheduling_strategy'] both "
                                  "place the actors: give one")
        alive = [r["NodeID"] for r in ray_nodes_for_pinning()]
        if ray_node is not None:
            if str(ray_node) not in alive:
                raise DeploymentError(f"cannot add node {nid!r}: Ray node {ray_node!r} is not "
                                      f"alive; alive: {alive}")
            return str(ray_node)
        if not alive:
            raise DeploymentError(f"cannot add node {nid!r}: no alive Ray node to pin it to")
        return alive[self._created % len(alive)]

    def _update_plan_added(self, nid: str, moves: dict[str, str],
                           capacity: float | None) -> None:
        """``self.plan`` follows the running layout: the moved tree entries leave their nodes
        for the new node (last), node and plan costs are re-summed (it verifies)."""
        nodes, moved = [], []
        for n in self.plan["nodes"]:
            keep = []
            for t in n["trees"]:
                if moves.get(str(t["id"])) == str(n["id"]):
                    moved.append(dict(t, moved_from=str(n["id"])))
                else:
                    keep.append(t)
            nodes.append({**n, "trees": keep,
                          "cost": float(sum(float(t.get("cost", 0.0)) for t in keep))})
        nodes.append({"id": nid, "capacity": capacity,
                      "cost": float(sum(float(t.get("cost", 0.0)) for t in moved)),
                      "trees": moved})
        costs = [n["cost"] for n in nodes]
        self.plan = {**self.plan, "nodes": nodes, "total_cost": float(sum(costs)),
                     "max_cost": max(costs, default=0.0)}

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
                self._late_seen[vc["values"]] = self._late_seen.get(vc["values"], 0) \
                    + vc["counts"]
        return pa.concat_tables(parts) if parts else empty_late()

    # -- results ----------------------------------------------------------------------------
    def finish(self) -> RunResult:
        """End of input: flush every node, collect all answers (sorted by query_id,
        window_start), late tuples and metrics.  The actors stay alive until ``shutdown``."""
        import ray

        t0 = time.perf_counter()
        self._fire_faults(self._seq + 1)  # a drill "at" the batch after the last one
        self._wait_all()
        t1 = time.perf_counter()
        for nid, n in self.nodes.items():  # flush goes through the same recovery path
            n.flushed = True
            n.inflight.append(n.actor.flush.remote())
        self._wait_all()
        t2 = time.perf_counter()
        nids = list(self.nodes)
        answers = ray.get([self.nodes[nid].actor.drain_blocks.remote() for nid in nids])
        lates = ray.get([self.nodes[nid].actor.late.remote() for nid in nids])
        t3 = time.perf_counter()
        table = merge_blocks(self._committed + list(answers))
        t4 = time.perf_counter()
        late = pa.concat_tables([x for x in lates if x.num_rows]) if any(
            x.num_rows for x in lates) else empty_late()
        metrics = self.metrics()
        metrics["answers"] = table.num_rows
        # where finish spends its time: the nodes working off their queues, flushing, handing
        # over answers (drain + transfer), the driver merging them
        metrics["finish"] = {"queue_s": t1 - t0, "flush_s": t2 - t1, "collect_s": t3 - t2,
                             "merge_s": t4 - t3}
        self._finished = True
        return RunResult(table, late, metrics)

    def metrics(self) -> dict[str, Any]:
        """Per-node metrics (from the actors) plus driver-side queue depth, blocking time,
        recoveries and pins; nodes lost for good, their re-placements and the fault drill."""
        import ray

        nids = list(self.nodes)
        per = ray.get([self.nodes[nid].actor.metrics.remote() for nid in nids])
        wall = time.perf_counter() - self.t_start
        out = {"rows_fed": self.rows_fed, "bytes_fed": self.bytes_fed, "batches": self._seq + 1,
               "wall_s": wall, "technique": self.technique, "checkpoints": self.checkpoints,
               "nodes": {}, "lost_nodes": dict(self.lost),
               "replacements": list(self.replacements),
               "additions": list(self.additions),
               "faults": [dict(f) for f in self.faults]}
        for nid, m in zip(nids, per):
            n = self.nodes[nid]
            m.update(queue_depth=len(n.inflight), max_queue_depth=n.max_depth,
                     driver_blocked_s=n.blocked_s, recoveries=n.recoveries,
                     adopted_trees=n.adopted, added_trees=n.added, ray_node=n.ray_node,
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
