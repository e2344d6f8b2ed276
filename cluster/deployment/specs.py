"""Plan -> per-node tree specs: what the actors need from a ``weaveplace.plan/1`` dict.

Why a module of its own: every other part of the deployment (actors, recovery, re-placement,
fault drills, pinning) raises ``DeploymentError`` and names trees the way the specs do, so
this sits at the bottom of the imports and depends on nothing else in ``cluster``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PLAN_SCHEMA = "weaveplace.plan/1"


class DeploymentError(RuntimeError):
    """A plan that cannot be deployed, or a node that failed and could not be recovered."""


def node_specs(plan: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Structural check of a plan and the per-node tree specs the actors need.

    Costs are not re-priced here (``placement.plan.verify_plan`` does that and can be slow for
    large plans); we check only what execution relies on: every query in exactly one tree, and
    a tree's stream equal to its queries' stream, and one window kind per tree (placement
    never weaves count with time windows: no slicing serves both; a plan from before that
    rule with such a tree is refused, to be re-planned).  Each tree spec carries the plan's
    ``slicing`` (default ``"pairs"``).
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
                    raise DeploymentError(
                        f"query {qid!r} is in trees {seen[qid]!r} and "
                        f"{t.get('id')!r}: each query runs once"
                    )
                seen[qid] = t.get("id")
                q = queries[qid]
                stream = q.get("stream", "s0")
                if t.get("stream", stream) != stream:
                    raise DeploymentError(
                        f"tree {t.get('id')!r} (stream {t.get('stream')!r}) "
                        f"holds query {qid!r} on stream {stream!r}"
                    )
                qs.append(
                    {
                        "id": qid,
                        "aggregate": q.get("aggregate", "sum"),
                        "range": q["range"],
                        "slide": q["slide"],
                        "kind": q.get("kind", "time"),
                    }
                )
            if not qs:
                continue
            stream = str(t.get("stream") or queries[t["queries"][0]].get("stream", "s0"))
            if len({q["kind"] for q in qs}) > 1:
                raise DeploymentError(
                    f"tree {t.get('id')!r} mixes count and time windows, "
                    f"which cannot share a slicing: re-plan it"
                )
            trees.append(
                {
                    "id": str(t["id"]),
                    "stream": stream,
                    "plan_tree": str(t["id"]),
                    "queries": qs,
                    "slicing": slicing,
                }
            )
        specs.append({"node_id": str(n["id"]), "trees": trees})
    missing = sorted(set(queries) - set(seen))
    if missing:
        raise DeploymentError(
            f"queries not placed in any tree: {missing[:10]}{' ...' if len(missing) > 10 else ''}"
        )
    if len({s["node_id"] for s in specs}) != len(specs):
        raise DeploymentError("duplicate node ids in plan")
    where: dict[str, str] = {}
    for s in specs:  # a tree can move to another node (lose_node): ids name it plan-wide
        for t in s["trees"]:
            if t["id"] in where:
                raise DeploymentError(
                    f"tree id {t['id']!r} is used on nodes {where[t['id']]!r} "
                    f"and {s['node_id']!r}: tree ids must be unique in a plan"
                )
            where[t["id"]] = s["node_id"]
    return specs


def plan_tree_id(tree: Mapping[str, Any]) -> str:
    """The plan tree an executor tree comes from (one executor tree per plan tree; specs
    restored from checkpoints written before may still name a ``plan_tree``)."""
    return str(tree.get("plan_tree", tree["id"]))
