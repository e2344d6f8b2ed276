"""The running plan while nodes come and go: as placement objects and as the plan dict.

Why both: ``placement.replace`` decides moves on ``placement.plan.Plan`` objects whose trees are
re-priced from their queries (``Layout``), while ``Deployment.plan`` stays a plan dict that
follows the running layout and still verifies (``plan_after_loss``, ``plan_after_addition``).
Nothing here touches actors: these only decide and describe.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cluster.deployment.specs import DeploymentError


class Layout:
    """The running plan as placement objects (trees re-priced from their queries), so that
    ``placement.replace.remove_node`` can decide where a lost node's trees go and
    ``placement.replace.add_node`` which trees move to a new node."""

    def __init__(self, plan: Mapping[str, Any]):
        from placement.plan import Node, Plan
        from placement.queries import query_from_mapping
        from placement.trees import CostModel

        streams = plan.get("streams") or {}
        queries = {
            str(q["id"]): query_from_mapping(q, i) for i, q in enumerate(plan.get("queries", []))
        }
        used = sorted(
            {
                queries[str(qid)].stream
                for n in plan["nodes"]
                for t in n["trees"]
                for qid in t["queries"]
            }
        )
        missing = [s for s in used if "rate" not in (streams.get(s) or {})]
        if missing:
            raise DeploymentError(
                f"the plan has no input rate for stream(s) {missing} "
                "(plan 'streams'); re-placement prices trees with them"
            )
        rates = {s: float(streams[s]["rate"]) for s in used}
        ie = plan.get("ie") or "slickdeque"
        try:
            self.model = CostModel(ie, rates, slicing=plan.get("slicing", "pairs"))
        except (KeyError, ValueError) as e:
            raise DeploymentError(
                f"the plan's ie {ie!r} has no cost model for re-placement: {e}"
            ) from None
        self.tree_id: dict[int, str] = {}  # id(Tree) -> plan tree id
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
        nodes = [
            Node(n.id, list(n.trees) + moved_to.get(n.id, []), n.capacity)
            for n in before.nodes
            if n.id != node_id
        ]
        self.plan = Plan(before.optimizer, before.ie, nodes, before.rates)
        record = {
            "moved": len(target),
            "trees": dict(sorted(target.items())),
            "woven_in_plan": sorted(woven),
            "planned": {
                "total_before": rep.total_before,
                "max_before": rep.max_before,
                "total_after": rep.plan.total_cost,
                "max_after": rep.plan.max_cost,
                "total_change": rep.total_change,
                "max_change": rep.max_change,
            },
            "executed": {
                "total_before": before.total_cost,
                "max_before": before.max_cost,
                "total_after": self.plan.total_cost,
                "max_after": self.plan.max_cost,
                "total_change": self.plan.total_cost - before.total_cost,
                "max_change": self.plan.max_cost - before.max_cost,
            },
        }
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
        record = {
            "moved": rep.moved,
            "trees": dict(sorted(moves.items())),
            "capacity": capacity,
            "planned": {
                "total_before": rep.total_before,
                "max_before": rep.max_before,
                "total_after": rep.plan.total_cost,
                "max_after": rep.plan.max_cost,
                "total_change": rep.total_change,
                "max_change": rep.max_change,
                "node_costs": {n.id: n.cost for n in rep.plan.nodes},
            },
        }
        return moves, record


def _trees_cost(trees) -> float:
    return float(sum(float(t.get("cost", 0.0)) for t in trees))


def _with_nodes(plan: Mapping[str, Any], nodes: list[dict]) -> dict[str, Any]:
    """``plan`` with these nodes, plan costs re-summed."""
    costs = [n["cost"] for n in nodes]
    return {
        **plan,
        "nodes": nodes,
        "total_cost": float(sum(costs)),
        "max_cost": max(costs, default=0.0),
    }


def plan_after_loss(
    plan: Mapping[str, Any], node_id: str, target: dict[str, str]
) -> dict[str, Any]:
    """The plan without lost node ``node_id``: its tree entries move to their new nodes
    (``target``: plan tree id -> node; as separate trees), node and plan costs are re-summed,
    so the plan still verifies (``placement.plan.verify_plan``)."""
    old = {str(n["id"]): n for n in plan["nodes"]}
    moving = old[node_id]["trees"]
    nodes = []
    for nid, n in old.items():
        if nid == node_id:
            continue
        trees = list(n["trees"]) + [
            dict(t, moved_from=node_id) for t in moving if target.get(str(t["id"])) == nid
        ]
        nodes.append({**n, "trees": trees, "cost": _trees_cost(trees)})
    return _with_nodes(plan, nodes)


def plan_after_addition(
    plan: Mapping[str, Any], nid: str, moves: dict[str, str], capacity: float | None
) -> dict[str, Any]:
    """The plan with added node ``nid`` (last): the moved tree entries (``moves``: plan tree
    id -> node it leaves) leave their nodes for it, node and plan costs are re-summed (it
    verifies)."""
    nodes, moved = [], []
    for n in plan["nodes"]:
        keep = []
        for t in n["trees"]:
            if moves.get(str(t["id"])) == str(n["id"]):
                moved.append(dict(t, moved_from=str(n["id"])))
            else:
                keep.append(t)
        nodes.append({**n, "trees": keep, "cost": _trees_cost(keep)})
    nodes.append({"id": nid, "capacity": capacity, "cost": _trees_cost(moved), "trees": moved})
    return _with_nodes(plan, nodes)
