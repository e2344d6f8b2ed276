"""Pinning plan nodes to Ray nodes (``Deployment(pin_nodes=...)``, ``add_node(ray_node=...)``).

Why a hard ``NodeAffinitySchedulingStrategy`` and not custom resources: it works on any cluster
as it is (custom resources must be declared at ``ray start`` on every machine) and names one
node, so placement is checkable; hard, because a plan node that silently ran elsewhere would
break the plan's per-node costs.  When a pinned Ray node is gone (``ray_node_gone``) the
deployment loses the plan node for good and re-places its trees.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from cluster.deployment.specs import DeploymentError


def ray_nodes_for_pinning() -> list[dict[str, Any]]:
    """Alive Ray nodes in pinning order: workers first (by address, then id), the head last.

    Why the head last: it also runs the GCS, the driver and Spark's driver, so with fewer plan
    nodes than Ray nodes it is the one left out, and with more it takes the remainder."""
    import ray

    alive = [n for n in ray.nodes() if n.get("Alive")]
    head = "node:__internal_head__"
    return sorted(
        alive,
        key=lambda n: (
            head in n.get("Resources", {}),
            n.get("NodeManagerAddress", ""),
            n["NodeID"],
        ),
    )


def pin_round_robin(plan_nodes, ray_nodes) -> dict[str, str]:
    """Plan node i -> Ray node ``i mod len(ray_nodes)`` (ids in the order given)."""
    ray_ids = [r["NodeID"] if isinstance(r, Mapping) else str(r) for r in ray_nodes]
    if not ray_ids:
        raise DeploymentError("no alive Ray node to pin plan nodes to")
    return {str(nid): ray_ids[i % len(ray_ids)] for i, nid in enumerate(plan_nodes)}


def resolve_pins(
    pin_nodes, node_ids: list[str], actor_options: Mapping[str, Any]
) -> dict[str, str]:
    """Plan node -> Ray node for ``Deployment(pin_nodes=...)``: ``True`` round robin, a
    mapping checked (every plan node named, every Ray node alive); ``{}`` for no pinning."""
    if not pin_nodes:
        return {}
    if "scheduling_strategy" in actor_options:
        raise DeploymentError(
            "pin_nodes and actor_options['scheduling_strategy'] both place the actors: give one"
        )
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


def pin_for_added_node(
    nid: str,
    ray_node: str | None,
    *,
    pinning: bool,
    actor_options: Mapping[str, Any],
    placed: Sequence[str | None],
) -> str | None:
    """The Ray node a node added while running is pinned to (None: Ray's choice): the one
    asked for, else with pinning the alive Ray node hosting the fewest plan nodes (``placed``:
    the Ray nodes of the running plan nodes), ties in ``ray_nodes_for_pinning`` order.

    Why the fewest and not plan node ``i mod R``: a node is added when the load grows, often
    right after Ray's autoscaler started Ray nodes for it (``cluster.runtime.resources``); the
    new plan nodes belong on those empty Ray nodes, not on one that already runs a plan node
    (``i mod R`` put a third plan node on the head beside the first and left a new worker
    empty, tests/cluster/service/test_ray_autoscaler.py)."""
    if ray_node is None and not pinning:
        return None
    if "scheduling_strategy" in actor_options:
        raise DeploymentError(
            "ray_node and actor_options['scheduling_strategy'] both place the actors: give one"
        )
    alive = [r["NodeID"] for r in ray_nodes_for_pinning()]
    if ray_node is not None:
        if str(ray_node) not in alive:
            raise DeploymentError(
                f"cannot add node {nid!r}: Ray node {ray_node!r} is not alive; alive: {alive}"
            )
        return str(ray_node)
    if not alive:
        raise DeploymentError(f"cannot add node {nid!r}: no alive Ray node to pin it to")
    return least_placed(alive, placed)


def least_placed(alive: Sequence[str], placed: Sequence[str | None]) -> str:
    """Of ``alive`` (in pinning order), the first hosting the fewest of ``placed``."""
    count = Counter(placed)
    return min(alive, key=lambda r: (count[r], alive.index(r)))


def keep_rank(pins: Mapping[str, str | None], head: str | None) -> dict[str, int]:
    """Plan node -> its rank for staying in a scale-in on an autoscaled Ray cluster (lower
    stays first): on the head (``head``, never removed by Ray's autoscaler), then on the Ray
    nodes hosting the most plan nodes.

    Why: Ray's autoscaler removes a Ray node only once it is idle, and a node running a plan
    node's actor is not (even with ``num_cpus=0``: measured, tests/cluster/service/
    test_ray_autoscaler.py).  A scale-in that kept a plan node on a worker and retired the
    head's would hold that worker for good while the head idles; keeping the plan nodes
    packed on the Ray nodes that stay anyway lets the emptied workers go."""
    count = Counter(pins.values())
    return {
        nid: (0 if r is not None and r == head else 1) * (len(pins) + 1) - count[r]
        for nid, r in pins.items()
    }


def head_ray_node() -> str | None:
    """The id of the connected cluster's head node (None if none is alive)."""
    import ray

    for n in ray.nodes():
        if n.get("Alive") and "node:__internal_head__" in n.get("Resources", {}):
            return n["NodeID"]
    return None


def ray_node_gone(pin: str | None) -> bool:
    """Whether the Ray node ``pin`` (a pinned actor's) is no longer alive."""
    import ray

    return pin is not None and pin not in {x["NodeID"] for x in ray.nodes() if x["Alive"]}


def with_node_affinity(actor_options: Mapping[str, Any], pin: str | None) -> dict[str, Any]:
    """Actor options that pin the actor to Ray node ``pin`` (hard); unchanged for ``None``."""
    opts = dict(actor_options)
    if pin is not None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(pin, soft=False)
    return opts
