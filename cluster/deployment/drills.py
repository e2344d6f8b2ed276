"""Fault drills: a scripted list of kills, losses and additions fired during a run.

Why checked up front (``check_faults``): a drill that names an unknown node, or loses every
node, should fail before any data is fed, not halfway through a long run.  ``Deployment``
fires each fault just before batch ``at_batch`` is fed; a fault at the batch after the last
one fires at the very end of ``Deployment.finish``: after the flush (on the actor route after
the last answer parts are committed), just before the last round collects the late tuples and
metrics, so a drill can hit a node whose answers are all written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cluster.deployment.membership import next_node_id
from cluster.deployment.specs import DeploymentError


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
                raise DeploymentError(
                    f"faults[{i}].node: {node!r}; expected the new node's "
                    "id (a non-empty string) or nothing (node-<k>)"
                )
            if cap is not None and (
                isinstance(cap, bool)
                or not isinstance(cap, (int, float))
                or not cap > 0
                or cap == float("inf")
            ):
                raise DeploymentError(f"faults[{i}].capacity: {cap!r}; expected a number > 0")
        elif cap is not None:
            raise DeploymentError(
                f"faults[{i}].capacity: only a node added (kind: add) "
                f"takes a capacity, not kind {kind}"
            )
        out.append(
            {
                "kind": kind,
                "node": None if node is None else str(node),
                "at_batch": at,
                "capacity": None if cap is None else float(cap),
                "index": i,
            }
        )
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
                raise DeploymentError(
                    f"faults[{i}].node: node {f['node']!r} already exists "
                    f"(in {by}); an added node needs a new id"
                )
            added[f["node"]] = i
            alive.add(f["node"])
            continue
        if f["node"] not in ids and f["node"] not in added:
            if f["node"] in added_by:
                a = added_by[f["node"]]
                raise DeploymentError(
                    f"faults[{i}]: node {f['node']!r} is added only by "
                    f"faults[{a['index']}] at batch {a['at_batch']}, after "
                    f"this fault (batch {f['at_batch']})"
                )
            raise DeploymentError(
                f"faults[{i}].node: unknown node {f['node']!r}; nodes: "
                f"{', '.join(map(str, ids + list(added)))}"
            )
        if f["node"] in lost:
            raise DeploymentError(
                f"faults[{i}]: node {f['node']!r} is already lost (by "
                f"faults[{lost[f['node']]}]); nothing to {f['kind']}"
            )
        if f["kind"] == "lose":
            lost[f["node"]] = i
            alive.discard(f["node"])
            if not alive:
                raise DeploymentError(
                    f"faults[{i}]: losing node {f['node']!r} loses every "
                    "node; at least one must survive to run the queries"
                )
    return [
        {k: f[k] for k in ("kind", "node", "at_batch")}
        | ({"capacity": f["capacity"]} if f["kind"] == "add" else {})
        | {"fired": False}
        for f in out
    ]


def fire_due_faults(dep, faults: list[dict[str, Any]], batch_no: int) -> None:
    """Fire the faults of ``faults`` (``check_faults``' output, marked ``fired`` here) due
    before batch ``batch_no`` is fed, on the deployment ``dep``: ``lose`` -> ``lose_node`` (through
    the coordinator's ``declare_lost``, so the fault log records it),
    ``add`` -> ``add_node``, ``kill`` -> the node's actor killed (recovered when found dead)."""
    import ray

    for f in faults:
        if f["fired"] or f["at_batch"] > batch_no:
            continue
        f["fired"] = True
        if f["kind"] == "lose":
            dep.coordinator.declare_lost(f["node"], reason=f"fault drill at batch {f['at_batch']}")
        elif f["kind"] == "add":
            dep.add_node(
                f["node"],
                capacity=f.get("capacity"),
                reason=f"fault drill at batch {f['at_batch']}",
            )
        elif f["node"] in dep.nodes:
            dep.fault_log.note_injected(f["node"])  # detection is timed from the kill
            ray.kill(dep.nodes[f["node"]].actor, no_restart=True)
