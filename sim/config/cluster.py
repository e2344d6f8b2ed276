"""The ``cluster`` section: node counts (a grid axis) or nodes with capacities; Ray, Spark.

Why a module: the node layouts a run plans for (``Cluster.layouts``) are one idea, read by
simulation, live runs and the fault drill checks alike.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Discriminator, Field, Tag, model_validator

from placement.messages import short_repr
from sim.config.base import ConfigError, Strict, id_to_str


class NodeSpec(Strict):
    """One node; ``capacity`` in aggregate operations per time unit (``null``: unbounded)."""

    id: Annotated[str, BeforeValidator(id_to_str), Field(min_length=1)] | None = None
    capacity: Annotated[float, Field(gt=0)] | None = None


def _nodes_tag(v: Any) -> str | None:
    if isinstance(v, int) and not isinstance(v, bool):
        return "__count__"
    if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
        return "__specs__"
    if isinstance(v, list):
        return "__counts__"
    return None


NodesField = Annotated[
    Annotated[Annotated[int, Field(ge=1, le=100000)], Tag("__count__")]
    | Annotated[
        list[Annotated[int, Field(ge=1, le=100000)]], Field(min_length=1), Tag("__counts__")
    ]
    | Annotated[list[NodeSpec], Field(min_length=1), Tag("__specs__")],
    Discriminator(
        _nodes_tag,
        custom_error_type="nodes_shape",
        custom_error_message="expected a node count (>= 1), a list of counts (a grid "
        "axis) or a list of {id, capacity} mappings",
    ),
]


class RaySpec(Strict):
    address: str | None = None  # None: start an embedded local Ray (live runs only)


class SparkSpec(Strict):
    master: Annotated[str, Field(min_length=1)] = "local[*]"  # e.g. spark://host:7077


class Cluster(Strict):
    nodes: NodesField = 1
    # seconds a silent (crashed, hung, cut-off) host may stay silent before it is declared
    # lost: Ray's health checks of an embedded Ray (cluster.runtime.ray_runtime)
    failure_timeout_s: Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False)] = 30.0
    # seconds a node actor may answer nothing (its health check unanswered, or its data call
    # without progress) before it is declared stuck, killed and recovered; silent for 2 s (or a
    # fifth of this) the other nodes stop waiting for it (cluster.deployment.liveness)
    call_timeout_s: Annotated[float, Field(ge=1, le=3600, allow_inf_nan=False)] = 30.0
    ray: RaySpec = RaySpec()
    spark: SparkSpec = SparkSpec()

    @model_validator(mode="after")
    def _capacities(self) -> Cluster:
        if isinstance(self.nodes, list) and self.nodes and isinstance(self.nodes[0], NodeSpec):
            caps = [n.capacity for n in self.nodes]
            if any(c is None for c in caps) and not all(c is None for c in caps):
                i = caps.index(None)
                raise ConfigError(
                    f"cluster.nodes[{i}].capacity: missing; give a capacity for "
                    "every node or for none"
                )
            seen: dict[str, int] = {}
            for i, n in enumerate(self.nodes):
                if n.id is not None:
                    if n.id in seen:
                        raise ConfigError(
                            f"cluster.nodes[{i}].id: duplicate node id {short_repr(n.id)} "
                            f"(also cluster.nodes[{seen[n.id]}])"
                        )
                    seen[n.id] = i
        return self

    def layouts(self) -> list[tuple[list[str], list[float | None]]]:
        """Each cluster to run: (node ids, capacities). A list of counts is a grid axis."""
        if isinstance(self.nodes, int):
            counts = [self.nodes]
        elif isinstance(self.nodes[0], NodeSpec):
            ids = [n.id or f"node-{j}" for j, n in enumerate(self.nodes)]
            return [(ids, [n.capacity for n in self.nodes])]
        else:
            counts = list(self.nodes)
        return [([f"node-{j}" for j in range(n)], [None] * n) for n in counts]
