"""Late tuples handed over while a run goes on (``Deployment.take_late``), each exactly once.

Why offsets per tree id, not per node: tree ids are unique plan-wide and a tree's late tuples
live in its state (snapshots), in arrival order.  A recovered node, and a tree restored on
another node after ``lose_node`` (from the lost node's snapshot plus the replayed batches),
hold the same late tuples in the same order, so the offset stays valid wherever the tree now
runs: nothing repeated, nothing dropped.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from cluster.answers.blocks import empty_late


class LateHandover:
    """How many late tuples of each tree were handed over so far (``seen``)."""

    def __init__(self, dep):
        self.dep = dep
        self.seen: dict[str, int] = {}

    def restore(self, seen: dict[str, int]) -> None:
        """Continue from saved offsets (a service resumed from its state)."""
        self.seen = {k: int(v) for k, v in seen.items()}

    def take(self) -> pa.Table:
        """The late tuples recorded since the previous call, in the ``RunResult.late`` layout.
        If a node is lost while the nodes are asked, the round is asked again (offsets move
        only once a round saw every tree on its current host).  A silent node is not waited
        for (``cluster.deployment.liveness``): its late tuples come at a later call."""
        import ray

        dep = self.dep
        while True:
            dep.wait_all(may_skip=True)
            lost = len(dep.lost)
            since = dict(self.seen)
            parts = []
            for nid in list(dep.nodes):
                if nid not in dep.nodes:  # lost meanwhile: this round is repeated
                    break
                if dep.nodes[nid].behind:
                    continue
                try:
                    done, t = dep.get_reply(nid, dep.nodes[nid].actor.late.remote(since))
                    if not done:
                        continue
                except ray.exceptions.RayActorError:
                    if not dep.auto_recover:
                        raise
                    dep.actor_died(nid)  # restarted, or lost for good (then repeat the round)
                    if nid not in dep.nodes:
                        break
                    t = ray.get(dep.nodes[nid].actor.late.remote(since))
                if t.num_rows:
                    parts.append(t)
            if len(dep.lost) == lost:
                break
        for t in parts:
            for vc in pc.value_counts(t.column("tree_id")).to_pylist():
                self.seen[vc["values"]] = self.seen.get(vc["values"], 0) + vc["counts"]
        return pa.concat_tables(parts) if parts else empty_late()
