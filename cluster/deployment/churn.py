"""Node actors and a deployment whose trees gain and lose queries while they run.

``LiveNodeCore`` is ``NodeCore`` hosting ``executors.live_tree.LiveTree`` s (raw tuple input),
plus ``change_tree`` (a tree gains/loses queries at event time ``T``: a new generation, see
``executors/live_tree.py``) and ``host_tree`` (a tree started for queries added to the running
deployment, answering windows from ``T_reg`` on).  ``LiveDeployment`` is ``Deployment`` with
these actors and the matching driver-side bookkeeping: after a change the node is checkpointed at
once, so its recovery source (snapshot) already holds the change and the replay log is empty
(a restarted actor never replays batches into a tree that has not seen the change).

Tree specs on the driver list a tree's *lineage*: every query it answered or answers (a removed
query's last windows may still come out of an old generation), which is what a restored
``LiveTree`` reports as ``queries`` (``NodeCore.add_trees`` checks it).
"""

from __future__ import annotations

import os
import time
from typing import Any

from cluster.deployment.deployment import Deployment
from cluster.deployment.options import DeploymentOptions
from cluster.deployment.specs import DeploymentError
from cluster.node.actor import ActorCore, shipped_executors
from cluster.node.core import pick_technique
from executors.live_tree import LiveTree


class LiveNodeCore(ActorCore):
    """A node whose trees are ``LiveTree`` s (tuple input only)."""

    def __init__(
        self,
        node_id,
        trees,
        technique="slickdeque",
        allowed_lateness=0,
        input_mode="tuples",
        count_ops=False,
        executors=None,
    ):
        if input_mode != "tuples":
            raise ValueError("live trees take tuple input (raw mode) only")
        super().__init__(
            node_id, trees, technique, allowed_lateness, input_mode, count_ops, executors
        )

    @property
    def _tree_cls(self):
        return LiveTree

    def change_tree(
        self, tid: str, at: int, add: list[dict], remove: list[str], handoff: list[str] = ()
    ) -> list[dict]:
        """Add/remove/hand off queries of tree ``tid`` at event time ``at``
        (``LiveTree.change``); returns its lineage."""
        tree = self.trees[tid]
        tree.change(at, add=add, remove=remove, handoff=handoff)
        lineage = [q.as_dict() for q in tree.queries]
        for t in self.spec["trees"]:
            if str(t["id"]) == tid:
                t["queries"] = lineage
        self._ranks = None
        return lineage

    def host_tree(self, spec: dict[str, Any], t_start: int | None, seq: int) -> str:
        """Start a new tree for queries registered at ``t_start`` (windows from it on); it
        takes the batches after ``seq``."""
        tech = pick_technique(self.spec["technique"], [q["aggregate"] for q in spec["queries"]])
        tree = LiveTree(
            spec["queries"],
            technique=tech,
            allowed_lateness=self.spec["allowed_lateness"],
            count_ops=self.spec["count_ops"],
            slicing=spec.get("slicing", "pairs"),
            t_start=t_start,
        )
        self._host(spec, tree, seq)
        self.spec["trees"].append(spec)
        return str(spec["id"])

    def metrics(self) -> dict[str, Any]:
        """``NodeCore.metrics`` plus this process's resident memory (``rss_bytes``)."""
        m = super().metrics()
        m["rss_bytes"] = rss_bytes()
        m["generations"] = sum(len(t.gens) for t in self.trees.values())
        return m

    def tree_state(self) -> dict[str, dict]:
        """Per tree: active queries, generations, newest timestamp seen (status, tests)."""
        return {
            tid: {
                "active": list(t.active),
                "generations": len(t.gens),
                "max_ts": int(t.max_ts),
                "lineage": [q.id for q in t.queries],
            }
            for tid, t in self.trees.items()
        }


def rss_bytes() -> int | None:
    """Resident memory of this process (Linux /proc; None elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _make_live_actor():
    import ray

    return ray.remote(num_cpus=0, max_restarts=0, max_task_retries=0)(LiveNodeCore)


class _LazyLiveActor:
    _cls = None

    def __getattr__(self, name):
        if _LazyLiveActor._cls is None:
            _LazyLiveActor._cls = _make_live_actor()
        return getattr(_LazyLiveActor._cls, name)


LiveNodeActor = _LazyLiveActor()


class LiveDeployment(Deployment):
    """``Deployment`` on ``LiveNodeActor`` s, with ``change_tree`` / ``host_tree``."""

    def __init__(self, plan, options: DeploymentOptions | None = None):
        if options is not None and options.mode != "raw":
            raise DeploymentError("a live deployment runs raw mode (tuple input) only")
        super().__init__(plan, options)

    def _new_actor(self, node_id: str, trees: list[dict]):
        from cluster.deployment.pinning import with_node_affinity

        opts = with_node_affinity(self.actor_options, self.nodes[node_id].ray_node)
        cls = LiveNodeActor.options(**opts) if opts else LiveNodeActor
        return cls.remote(
            node_id,
            list(trees),
            self.technique,
            self.allowed_lateness,
            "tuples",
            self.count_ops,
            executors=shipped_executors(),
        )

    def apply_changes(
        self,
        changes: list[tuple[str, str, int, list[dict], list[str]]],
        new_trees: list[tuple[str, dict, int | None]],
    ) -> None:
        """Apply tree changes ``(node, tree id, at, add, remove)`` and start new trees
        ``(node, spec, t_start)`` between two batches, then checkpoint (see module doc)."""
        import ray

        self._wait_all()
        refs = []
        for nid, tid, at, add, remove, *rest in changes:
            refs.append(
                (
                    nid,
                    tid,
                    self.nodes[nid].actor.change_tree.remote(
                        tid, at, add, remove, rest[0] if rest else []
                    ),
                )
            )
        for nid, spec, t0 in new_trees:
            refs.append((nid, None, self.nodes[nid].actor.host_tree.remote(spec, t0, self._seq)))
        for nid, tid, ref in refs:
            out = ray.get(ref)
            n = self.nodes[nid]
            if tid is None:
                n.spec = {**n.spec, "trees": n.spec["trees"] + [spec_of(new_trees, out)]}
            else:
                n.spec = {
                    **n.spec,
                    "trees": [
                        dict(t, queries=out) if str(t["id"]) == tid else t for t in n.spec["trees"]
                    ],
                }
        self._route()
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
        self.lost[nid] = {
            "reason": reason,
            "before_batch": self.batches_fed,
            "ray_node": gone.ray_node,
            "recoveries": gone.recoveries,
        }
        self._route()
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

        from cluster.deployment.recovery import RestoreSource

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

        from cluster.deployment.recovery import RestoreSource

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
        self._route()
        self.checkpoint()
        return moved

    def restore_state(self, nodes: dict, blobs: dict, seq: int, late_seen: dict) -> None:
        """Put every node back to its saved checkpoint: the actor is rebuilt from the saved tree
        specs and restored from the snapshot; the batch sequence and late-tuple offsets continue."""
        import ray

        from cluster.deployment.recovery import RestoreSource

        for nid, saved in nodes.items():
            n = self.nodes[nid]
            trees = [dict(t) for t in saved["trees"]]
            try:
                ray.kill(n.actor, no_restart=True)
            except Exception:
                pass
            n.spec = {**n.spec, "trees": trees}
            n.actor = self._new_actor(nid, trees)
            if blobs.get(nid) is not None:
                ray.get(n.actor.restore.remote(blobs[nid]))
            n.sources = [RestoreSource(trees, blobs.get(nid), int(saved["seq"]), nid)]
        self._route()
        self._seq = int(seq)
        self.batches_fed = int(seq) + 1  # the driver route (serve): one seq per batch
        self._late_seen = {k: int(v) for k, v in late_seen.items()}

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
    state with its lineage, so ``LiveDeployment`` starts one actor per saved node; the actors
    are then restored from their snapshots (``LiveDeployment.restore_state``)."""
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
