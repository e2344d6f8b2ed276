"""A node whose trees gain and lose queries while they run (the churn of a long-lived service).

``ChurnNodeCore`` is ``NodeCore`` hosting ``executors.churn_tree.ChurnTree`` s (raw tuple input;
``cluster.node.slice_churn.SlicedChurnTree`` s in sliced mode),
plus ``change_tree`` (a tree gains/loses queries at event time ``T``: a new generation, see
``executors/churn_tree.py``) and ``host_tree`` (a tree started for queries added to the running
deployment, answering windows from ``T_reg`` on).  The driver side is
``cluster.deployment.churn.ChurnDeployment``.

A restored ``ChurnTree`` reports its *lineage* as ``queries``: every query it answered or
answers (a removed query's last windows may still come out of an old generation), which is
what the driver's tree specs list (``NodeCore.add_trees`` checks it).
"""

from __future__ import annotations

import os
from typing import Any

from cluster.node.actor import ActorCore, LazyActorClass
from cluster.node.core import pick_technique
from cluster.node.slice_churn import SlicedChurnTree, cut_plan
from executors.churn_tree import ChurnTree


class ChurnNodeCore(ActorCore):
    """A node whose trees are ``ChurnTree`` s (tuple input only)."""

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
        if input_mode not in ("tuples", "slices"):
            raise ValueError(f"live trees take tuples or slices, not {input_mode!r}")
        super().__init__(
            node_id, trees, technique, allowed_lateness, input_mode, count_ops, executors
        )

    @classmethod
    def tree_class(cls, input_mode: str):
        return SlicedChurnTree if input_mode == "slices" else ChurnTree

    def change_tree(
        self, tid: str, at: int, add: list[dict], remove: list[str], handoff: list[str] = ()
    ) -> list[dict]:
        """Add/remove/hand off queries of tree ``tid`` at event time ``at``
        (``ChurnTree.change``); returns what its lineage gained, in order (a lineage only
        grows at its end: the spec's queries plus these are the whole of it; not the whole
        returned, ~1,000 queries a tree at 100,000)."""
        tree = self.trees[tid]
        before = len(tree.queries)
        tree.change(at, add=add, remove=remove, handoff=handoff)
        gained = [q.as_dict() for q in tree.queries[before:]]
        for t in self.spec["trees"]:
            if str(t["id"]) == tid:
                t["queries"] = [*t["queries"], *gained]
        self.pending.trees_changed()
        return gained

    def change_trees(self, changes: list[tuple]) -> list[list[dict]]:
        """``change_tree(*c)`` for each ``c`` of ``changes`` in order, in one call (a command
        changes ~100 trees of a node at 100,000 queries, and each call is a round trip);
        returns what each lineage gained."""
        return [self.change_tree(*c) for c in changes]

    def host_tree(self, spec: dict[str, Any], t_start: int | None, seq: int) -> str:
        """Start a new tree for queries registered at ``t_start`` (windows from it on); it
        takes the batches after ``seq``."""
        tech = pick_technique(self.spec["technique"], [q["aggregate"] for q in spec["queries"]])
        tree = self._tree_cls(
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

    def cut_plans(self) -> dict[str, list]:
        """Sliced mode: per stream, the union of its trees' cut plans (where the next slices
        must end; ``cluster.node.slice_churn``)."""
        out: dict[str, list] = {}
        for tid, t in self.trees.items():
            if isinstance(t, SlicedChurnTree):
                out.setdefault(self.tree_stream[tid], []).extend(cut_plan(t))
        return out

    def metrics(self) -> dict[str, Any]:
        """``NodeCore.metrics`` plus this process's resident memory (``rss_bytes``)."""
        m = super().metrics()
        m["rss_bytes"] = rss_bytes()
        m["generations"] = sum(len(t.gens) for t in self.trees.values())
        return m

    def vitals(self) -> dict[str, Any]:
        """``NodeCore.vitals`` plus ``rss_bytes`` and ``generations``, as ``metrics``."""
        v = super().vitals()
        v["rss_bytes"] = rss_bytes()
        v["generations"] = sum(len(t.gens) for t in list(self.trees.values()))
        return v

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


#: ``ChurnNodeCore`` as a Ray actor (made on first use)
ChurnNodeActor = LazyActorClass(ChurnNodeCore)
