"""``add-node`` and ``retire-node``: a running service's nodes come and go.

Why a collaborator of its own: the node commands are one idea (a node joins or leaves at a
checkpoint, its trees moved exactly once by the deployment: ``Deployment.add_node``,
``ChurnDeployment.retire_node``) used by the operator's commands and by the autoscale policy
(``cluster.service.elastic``), which calls the bodies ``add`` and ``retire`` inside its own
change.  Each command is the service's transaction (``Service.transaction``: exclusive, on a
running deployment, the plan written, answers flushed and the event logged after).
"""

from __future__ import annotations

from typing import Any

from cluster.service.control import one_line
from cluster.service.refusals import Conflict, NotFound


class NodeCommands:
    """The node commands of ``svc`` (a ``cluster.service.service.Service``)."""

    def __init__(self, svc: Any):
        self.svc = svc

    def add_node(self, nid: str | None = None, capacity: float | None = None) -> dict:
        """Scale out: a new node takes trees from the busiest nodes at a checkpoint
        (``Deployment.add_node``: ``placement.replace.add_node``'s moves, exactly once)."""
        from cluster.deployment.specs import DeploymentError

        with self.svc.transaction("add-node") as change:
            try:
                rec = self.add(nid, capacity, "add-node")
            except DeploymentError as e:
                raise Conflict(f"add-node: {one_line(e)}") from None
            change.detail.update(node=rec["node"], trees_moved=rec["moved"], trees=rec["trees"])
            return {"node": rec["node"], "moved": rec["trees"]}

    def add(self, nid: str | None, capacity: float | None, reason: str) -> dict:
        """``add-node``'s body (inside a transaction): the deployment's record of the move."""
        running = self.svc.running
        rec = self.svc.dep.add_node(nid, capacity=capacity, reason=reason)
        new = rec["node"]
        running.capacity[new] = rec.get("capacity")
        for tid in rec["trees"]:
            if tid in running.trees:
                running.trees[tid].node = new
        return rec

    def retire_node(self, nid: str) -> dict:
        """Graceful scale-in (``ChurnDeployment.retire_node``): the node's trees go where
        ``placement.replace.remove_node`` puts them (run as separate trees where it would
        weave), at a checkpoint; the last node cannot be retired."""
        from cluster.deployment.specs import DeploymentError
        from placement.replace import remove_node

        svc = self.svc
        with svc.transaction("retire-node") as change:
            nodes = svc.dep.nodes
            if nid not in nodes:
                raise NotFound(f"retire-node: unknown node {nid!r}; nodes: {', '.join(nodes)}")
            if len(nodes) == 1:
                raise Conflict(
                    f"retire-node: {nid!r} is the last node; its queries would have nowhere to run"
                )
            plan, _ = svc.placement_plan()
            rep = remove_node(plan, nid, svc.model)
            where = {q.id: n.id for n in rep.plan.nodes for t in n.trees for q in t.queries}
            try:
                rec = self.retire(nid, where, "retire-node")
            except DeploymentError as e:
                raise Conflict(f"retire-node: {one_line(e)}") from None
            change.detail.update(node=nid, trees_moved=rec["moved"], trees=rec["trees"])
            return {"retired": nid, "moved": rec["trees"]}

    def retire(self, nid: str, where: dict[str, str], reason: str) -> dict:
        """``retire-node``'s body (inside a transaction): node ``nid``'s trees go to the node
        ``where`` names for their first active query (a tree without one, or whose query has
        no place there, to the least loaded other node)."""
        svc = self.svc
        running = svc.running
        plan, _ = svc.placement_plan()
        load = {n.id: n.cost for n in plan.nodes if n.id != nid}
        targets = {}
        for t in svc.dep.nodes[nid].spec["trees"]:
            tid = str(t["id"])
            tree = running.trees.get(tid)
            active = tree.active if tree is not None else []
            dest = where.get(active[0]) if active else None
            targets[tid] = dest if dest in load else min(load, key=load.get)
        rec = svc.dep.retire_node(nid, targets, reason=reason)
        for tid, dest in targets.items():
            if tid in running.trees:
                running.trees[tid].node = dest
        running.capacity.pop(nid, None)
        return rec
