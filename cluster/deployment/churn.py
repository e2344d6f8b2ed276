"""A deployment whose trees gain and lose queries while they run (``weaveplace serve``).

``ChurnDeployment`` is ``Deployment`` on ``ChurnNodeActor`` s (``cluster.node.churn``) with the
matching driver-side bookkeeping: after a change the node is checkpointed at once, so its
recovery source (snapshot) already holds the change and the replay log is empty (a restarted
actor never replays batches into a tree that has not seen the change).

Tree specs on the driver list a tree's *lineage*: every query it answered or answers, which is
what a restored ``ChurnTree`` reports as ``queries`` (``NodeCore.add_trees`` checks it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from cluster.deployment.deployment import Deployment
from cluster.deployment.options import DeploymentOptions
from cluster.deployment.recovery import RestoreSource
from cluster.deployment.specs import DeploymentError
from cluster.node.actor import shipped_executors
from cluster.node.churn import ChurnNodeActor


class ChurnDeployment(Deployment):
    """``Deployment`` on ``ChurnNodeActor`` s, with ``change_tree`` / ``host_tree``."""

    def __init__(self, plan, options: DeploymentOptions | None = None):
        super().__init__(plan, options)
        # sliced mode: per stream, every change point so far (``slice_plan``)
        self.cut_points: dict[str, set[int]] = {}

    def start_actor(self, node_id: str, trees: list[dict]):
        from cluster.deployment.pinning import with_node_affinity

        opts = with_node_affinity(self.actor_options, self.nodes[node_id].ray_node)
        cls = ChurnNodeActor.options(**opts) if opts else ChurnNodeActor
        return cls.remote(
            node_id,
            list(trees),
            self.technique,
            self.allowed_lateness,
            "slices" if self.mode == "sliced" else "tuples",
            self.count_ops,
            executors=shipped_executors(),
        )

    def slice_plan(self, stream: str) -> list:
        """Sliced mode: where ``stream``'s next slices must end (``cluster.node.slice_churn``):
        a superset of every tree's cut plan, kept on the driver so feeding never waits for the
        actors: the edges of every query the trees on ``stream`` ever ran (their lineage) and
        every change point.  Cutting finer than a tree needs is exact (it folds the pieces)."""
        from cluster.node.slice_churn import lineage_plan

        rs = {
            (int(q["range"]), int(q["slide"]))
            for n in self.nodes.values()
            for t in n.spec["trees"]
            if t["stream"] == stream
            for q in t["queries"]
        }
        return lineage_plan(rs, self.cut_points.get(stream, ()))

    def _stream_of(self, nid: str, tid: str) -> str:
        return next(str(t["stream"]) for t in self.nodes[nid].spec["trees"] if str(t["id"]) == tid)

    def apply_changes(
        self,
        changes: list[tuple[str, str, int, list[dict], list[str]]],
        new_trees: list[tuple[str, dict, int | None]],
        meanwhile: Callable[[], object] | None = None,
    ) -> object:
        """Apply tree changes ``(node, tree id, at, add, remove)`` and start new trees
        ``(node, spec, t_start)`` between two batches, then checkpoint (see module doc).

        ``meanwhile()``: the driver's own work, run on a thread while the actors change their
        trees and take the checkpoint (a command's next steps warmed up: ``serve`` prices its
        drift reference, offline WeaveShare over the keys whose windows changed, and encodes
        the plan file, ``Service.while_changing``: up to ~1 s at 100,000 queries).
        It must touch nothing the deployment does; returns what it returned (None without
        one, or when it raised: the error is dropped here, the step it warmed raises it
        again)."""
        warm = None if meanwhile is None else Meanwhile(meanwhile)
        try:
            self._apply_changes(changes, new_trees)
        finally:
            result = None if warm is None else warm.join()
        return result

    def _apply_changes(
        self,
        changes: list[tuple[str, str, int, list[dict], list[str]]],
        new_trees: list[tuple[str, dict, int | None]],
    ) -> None:
        import ray

        self.wait_all()
        refs = []
        for nid, tid, at, *_ in changes:
            self.cut_points.setdefault(self._stream_of(nid, tid), set()).add(int(at))
        for _, spec, t0 in new_trees:
            if t0 is not None:
                self.cut_points.setdefault(str(spec["stream"]), set()).add(int(t0))
        per_node: dict[str, list[tuple]] = {}  # one call per node: ~100 trees change at once
        for nid, tid, at, add, remove, *rest in changes:
            per_node.setdefault(nid, []).append((tid, at, add, remove, rest[0] if rest else []))
        for nid, cs in per_node.items():
            refs.append((nid, [c[0] for c in cs], self.nodes[nid].actor.change_trees.remote(cs)))
        for nid, spec, t0 in new_trees:
            refs.append((nid, None, self.nodes[nid].actor.host_tree.remote(spec, t0, self._seq)))
        for nid, tids, ref in refs:
            out = ray.get(ref)
            n = self.nodes[nid]
            if tids is None:
                n.spec = {**n.spec, "trees": n.spec["trees"] + [spec_of(new_trees, out)]}
            else:
                gained: dict[str, list[dict]] = {}  # a tree changed twice: both, in order
                for tid, g in zip(tids, out):
                    gained.setdefault(tid, []).extend(g)
                n.spec = {
                    **n.spec,
                    "trees": [
                        dict(t, queries=[*t["queries"], *gained[str(t["id"])]])
                        if str(t["id"]) in gained
                        else t
                        for t in n.spec["trees"]
                    ],
                }
        self.update_routes()
        self.checkpoint()

    def retire_node(self, nid: str, targets: dict[str, str], reason: str = "retired") -> dict:
        """Graceful scale-in: node ``nid``'s trees move to ``targets`` (tree id -> node) at a
        checkpoint.  Every node is checkpointed first (answers committed, replay log empty), the
        survivors ``add_trees`` the moved trees from the retiring node's snapshot, its actor is
        stopped, and every node is checkpointed again.  Nothing is fed in between, so no batch
        is replayed twice or lost (``lose_node``, for a node that is gone, replays instead)."""
        import ray

        t0 = time.perf_counter()
        if nid not in self.nodes:
            raise DeploymentError(f"unknown node {nid!r}; nodes: {', '.join(self.nodes)}")
        if len(self.nodes) == 1:
            raise DeploymentError(
                f"cannot retire node {nid!r}: it is the last node, its "
                "queries would have nowhere to run"
            )
        self.checkpoint()
        gone = self.nodes[nid]
        src = gone.sources[0]
        groups: dict[str, list[dict]] = {}
        for t in gone.spec["trees"]:
            dest = targets[str(t["id"])]
            if dest == nid or dest not in self.nodes:
                raise DeploymentError(f"tree {t['id']!r} cannot move to {dest!r}")
            groups.setdefault(dest, []).append(t)
        for dest, trees in sorted(groups.items()):
            self._restore_trees_on(dest, trees, src, nid)
        try:
            ray.kill(gone.actor, no_restart=True)
        except Exception:
            pass
        del self.nodes[nid]
        self.membership.record_gone(nid, gone, reason)
        self.update_routes()
        self.checkpoint()
        return {
            "node": nid,
            "trees": {str(t["id"]): d for d, ts in groups.items() for t in ts},
            "moved": sum(len(ts) for ts in groups.values()),
            "seconds": time.perf_counter() - t0,
        }

    def _restore_trees_on(self, dest: str, trees: list[dict], src, origin: str) -> None:
        """Node ``dest`` restores ``trees`` from ``src`` (the host's last snapshot, a
        ``RestoreSource``) and keeps that source for its own recovery."""
        import ray

        n = self.nodes[dest]
        ray.get(n.actor.add_trees.remote(trees, src.blob))
        n.spec = {**n.spec, "trees": n.spec["trees"] + trees}
        n.sources.append(RestoreSource(trees, src.blob, src.seq, origin))
        n.added += len(trees)

    def move_trees(self, moves: dict[str, str]) -> int:
        """Move whole trees (tree id -> destination node) at a checkpoint: every node is
        checkpointed (answers committed, log empty), the destinations ``add_trees`` them from
        their hosts' snapshots, the hosts ``drop_trees`` them, and every node is checkpointed
        again; nothing is fed in between (as ``add_node``'s moves).  Returns trees moved."""
        import ray

        moves = {t: d for t, d in moves.items()}
        if not moves:
            return 0
        self.checkpoint()
        moved = 0
        for hid, h in list(self.nodes.items()):
            mv = [
                t for t in h.spec["trees"] if str(t["id"]) in moves and moves[str(t["id"])] != hid
            ]
            if not mv:
                continue
            base = h.sources[0]
            groups: dict[str, list[dict]] = {}
            for t in mv:
                groups.setdefault(moves[str(t["id"])], []).append(t)
            for dest, trees in sorted(groups.items()):
                self._restore_trees_on(dest, trees, base, hid)
            ids = [str(t["id"]) for t in mv]
            ray.get(h.actor.drop_trees.remote(ids))
            h.spec = {**h.spec, "trees": [t for t in h.spec["trees"] if str(t["id"]) not in ids]}
            h.sources[0] = RestoreSource(
                [t for t in base.trees if str(t["id"]) not in ids],
                base.blob,
                base.seq,
                base.origin,
                base.dropped + mv,
            )
            moved += len(mv)
        self.update_routes()
        self.checkpoint()
        return moved

    def restore_state(self, nodes: dict, blobs: dict, seq: int, late_seen: dict) -> None:
        """Put every node back to its saved checkpoint: the actor is rebuilt from the saved tree
        specs and restored from the snapshot; the batch sequence and late-tuple offsets continue."""
        import ray

        for nid, saved in nodes.items():
            n = self.nodes[nid]
            trees = [dict(t) for t in saved["trees"]]
            try:
                ray.kill(n.actor, no_restart=True)
            except Exception:
                pass
            n.spec = {**n.spec, "trees": trees}
            n.actor = self.start_actor(nid, trees)
            if blobs.get(nid) is not None:
                ray.get(n.actor.restore.remote(blobs[nid]))
            n.sources = [RestoreSource(trees, blobs.get(nid), int(saved["seq"]), nid)]
        self.update_routes()
        if self.mode == "sliced":  # the restored trees' change points
            from executors.edges import INF, NEG_INF

            plans = ray.get([n.actor.cut_plans.remote() for n in self.nodes.values()])
            for per_stream in plans:
                for stream, plan in per_stream.items():
                    pts = {int(x) for lo, hi, _ in plan for x in (lo, hi)}
                    self.cut_points.setdefault(stream, set()).update(
                        x for x in pts if NEG_INF < x < INF
                    )
        self._seq = int(seq)
        self.batches_fed = int(seq) + 1  # the driver route (serve): one seq per batch
        self.late_handover.restore(late_seen)

    def tree_state(self) -> dict[str, dict[str, dict]]:
        import ray

        nids = list(self.nodes)
        return dict(zip(nids, ray.get([self.nodes[n].actor.tree_state.remote() for n in nids])))


def spec_of(new_trees, tid: str) -> dict:
    for _, spec, _ in new_trees:
        if str(spec["id"]) == tid:
            return spec
    raise KeyError(tid)


def plan_from_state(nodes: dict, model: dict, capacity: dict) -> dict:
    """A structural plan (``node_specs`` accepts it) holding every tree of a saved service
    state with its lineage, so ``ChurnDeployment`` starts one actor per saved node; the actors
    are then restored from their snapshots (``ChurnDeployment.restore_state``)."""
    queries, pnodes, seen = [], [], set()
    for nid, saved in nodes.items():
        trees = []
        for t in saved["trees"]:
            own = [q for q in t["queries"] if q["id"] not in seen]  # handed-off: listed once
            seen |= {q["id"] for q in own}
            queries += [{**q, "stream": t["stream"]} for q in own]
            trees.append(
                {"id": str(t["id"]), "stream": t["stream"], "queries": [q["id"] for q in own]}
            )
        pnodes.append({"id": nid, "capacity": capacity.get(nid), "trees": trees})
    return {
        "schema": "weaveplace.plan/1",
        "optimizer": "resume",
        "ie": model["ie"],
        "slicing": model["slicing"],
        "queries": queries,
        "streams": {s: {"rate": r} for s, r in model["rates"].items()},
        "nodes": pnodes,
    }


class Meanwhile:
    """``fn()`` on a thread of its own from now until ``join``, which returns its result; what
    it raises is dropped and ``join`` returns None (a warm-up: the step it prepares raises it
    again when it runs)."""

    def __init__(self, fn: Callable[[], object]):
        self.result: object = None

        def work() -> None:
            try:
                self.result = fn()
            except Exception:  # noqa: BLE001, S110
                pass

        self._thread = threading.Thread(target=work, name="weaveplace-meanwhile", daemon=True)
        self._thread.start()

    def join(self) -> object:
        self._thread.join()
        return self.result
