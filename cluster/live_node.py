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

from typing import Any

from executors.live_tree import LiveTree

from .deploy import Deployment
from .node_actor import _ActorCore, pick_technique
from .plan_specs import DeploymentError


class LiveNodeCore(_ActorCore):
    """A node whose trees are ``LiveTree`` s (tuple input only)."""

    def __init__(self, node_id, trees, technique="slickdeque", allowed_lateness=0,
                 input_mode="tuples", count_ops=False):
        if input_mode != "tuples":
            raise ValueError("live trees take tuple input (raw mode) only")
        super().__init__(node_id, trees, technique, allowed_lateness, input_mode, count_ops)

    @property
    def _tree_cls(self):
        return LiveTree

    def change_tree(self, tid: str, at: int, add: list[dict], remove: list[str]) -> list[dict]:
        """Add/remove queries of tree ``tid`` at event time ``at``; returns its lineage."""
        tree = self.trees[tid]
        tree.change(at, add=add, remove=remove)
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
        tree = LiveTree(spec["queries"], technique=tech,
                        allowed_lateness=self.spec["allowed_lateness"],
                        count_ops=self.spec["count_ops"], slicing=spec.get("slicing", "pairs"),
                        t_start=t_start)
        self._host(spec, tree, seq)
        self.spec["trees"].append(spec)
        return str(spec["id"])

    def tree_state(self) -> dict[str, dict]:
        """Per tree: active queries, generations, newest timestamp seen (status, tests)."""
        return {tid: {"active": list(t.active), "generations": len(t.gens),
                      "max_ts": int(t.max_ts), "lineage": [q.id for q in t.queries]}
                for tid, t in self.trees.items()}


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

    def __init__(self, plan, **kw):
        if kw.get("mode", "raw") != "raw":
            raise DeploymentError("a live deployment runs raw mode (tuple input) only")
        super().__init__(plan, **kw)

    def _new_actor(self, node_id: str, trees: list[dict]):
        from .pinning import with_node_affinity

        opts = with_node_affinity(self.actor_options, self.nodes[node_id].ray_node)
        cls = LiveNodeActor.options(**opts) if opts else LiveNodeActor
        return cls.remote(node_id, list(trees), self.technique, self.allowed_lateness,
                          "tuples", self.count_ops)

    def apply_changes(self, changes: list[tuple[str, str, int, list[dict], list[str]]],
                      new_trees: list[tuple[str, dict, int | None]]) -> None:
        """Apply tree changes ``(node, tree id, at, add, remove)`` and start new trees
        ``(node, spec, t_start)`` between two batches, then checkpoint (see module doc)."""
        import ray

        self._wait_all()
        refs = []
        for nid, tid, at, add, remove in changes:
            refs.append((nid, tid, self.nodes[nid].actor.change_tree.remote(tid, at, add,
                                                                             remove)))
        for nid, spec, t0 in new_trees:
            refs.append((nid, None, self.nodes[nid].actor.host_tree.remote(spec, t0,
                                                                           self._seq)))
        for nid, tid, ref in refs:
            out = ray.get(ref)
            n = self.nodes[nid]
            if tid is None:
                n.spec = {**n.spec, "trees": n.spec["trees"] + [spec_of(new_trees, out)]}
            else:
                n.spec = {**n.spec, "trees": [dict(t, queries=out) if str(t["id"]) == tid
                                              else t for t in n.spec["trees"]]}
        self._route()
        self.checkpoint()

    def tree_state(self) -> dict[str, dict[str, dict]]:
        import ray

        nids = list(self.nodes)
        return dict(zip(nids, ray.get([self.nodes[n].actor.tree_state.remote() for n in nids])))


def spec_of(new_trees, tid: str) -> dict:
    for _, spec, _ in new_trees:
        if str(spec["id"]) == tid:
            return spec
    raise KeyError(tid)
