"""The ``run`` section: what a run does (simulate or live), its outputs, the live feed's
settings, the fault drill and ``serve``'s control API.

Why a module: the fault drill's rules (``Run.check_faults``) are checked here against the
cluster's nodes without importing the cluster, so a bad drill stops the run before Ray starts.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from placement.messages import short_repr
from sim.config.base import ConfigError, Rate, Strict, id_to_str
from sim.config.paths import check_path


class FaultSpec(Strict):
    """One fault of a drill: before batch ``at_batch`` (0-based) is fed, ``kill`` the node's
    actor (it is restarted from its checkpoint), ``lose`` the node for good (its trees are
    re-placed on the other nodes) or ``add`` a node (``node``: its id, default ``node-<k>``
    with the smallest unused k; ``capacity``: when the cluster's nodes have capacities; trees
    move to it by ``placement.replace.add_node``).  Answers stay exactly those of a
    fault-free run.  Batches are the feed's ``run.batch_rows``-row batches, 0-based; with
    ``data.directory`` each file is cut into such batches, files in arrival order, so
    ``at_batch`` does not depend on how Spark groups files into micro-batches."""

    kind: Literal["kill", "lose", "add"]
    node: Annotated[str, BeforeValidator(id_to_str), Field(min_length=1)] | None = None
    at_batch: Annotated[int, Field(ge=0)]
    capacity: Rate | None = None


class ControlSpec(Strict):
    """``weaveplace serve``'s control API: HTTP on 127.0.0.1:port (0: any free port)."""

    port: Annotated[int, Field(ge=0, le=65535)] = 0


class Run(Strict):
    mode: Literal["simulate", "live"] = "simulate"
    allowed_lateness: Annotated[int, Field(ge=0)] = 0
    output_dir: Annotated[str, Field(min_length=1)] = "out/run"
    seed: Annotated[int, Field(ge=0)] = 0
    # simulate: processes, each taking whole workloads (default 1: in this process)
    workers: Annotated[int, Field(ge=1, le=64)] = 1
    batch_rows: Annotated[int, Field(ge=1, le=1 << 24)] = 1 << 18  # live feed batch size
    checkpoint_every: Annotated[int, Field(ge=1)] | None = None  # batches; null: by log size
    # live runs: who writes the answers (driver: merged on the driver, the faster route on one
    # machine; actors: each node actor writes its own Parquet parts) and who pushes the
    # tuples to the actors (driver: Spark -> driver -> actors; executors: Spark tasks)
    answers: Literal["driver", "actors"] = "driver"
    feed: Literal["driver", "executors"] = "driver"
    # live file runs: what travels from Spark to the actors (raw: tuples; sliced: each
    # stream's slices at the union of its trees' edges, pre-aggregated by Spark)
    feed_mode: Literal["raw", "sliced"] = "raw"
    faults: list[FaultSpec] = []
    control: ControlSpec = ControlSpec()
    # live runs: the trees count their operations, and metrics.json compares each node's
    # measured cost with the plan's (sim.cost_check); counting costs a few percent of actor time
    count_ops: bool = False

    @field_validator("output_dir", mode="after")
    @classmethod
    def _os_path(cls, v: str) -> str:
        check_path("run.output_dir", v)  # relative to the working directory
        return v

    @model_validator(mode="after")
    def _fault_fields(self) -> Run:
        for i, f in enumerate(self.faults):
            if f.kind != "add" and f.node is None:
                raise ConfigError(
                    f"run.faults[{i}].node: required for kind {f.kind} (the node to act on)"
                )
            if f.kind != "add" and f.capacity is not None:
                raise ConfigError(
                    f"run.faults[{i}].capacity: only a node added (kind: add) "
                    f"takes a capacity, not kind {f.kind}"
                )
        return self

    def check_faults(
        self, node_ids: list[str], capacities: list[float | None] | None = None
    ) -> None:
        """A drill names known nodes (or nodes it added earlier), touches no node after losing
        it, adds no existing id and leaves one node; an added node has a capacity exactly when
        the cluster's nodes do (the same rules as ``cluster.deployment.drills.check_faults`` and
        ``Deployment.add_node``, without importing the cluster)."""
        order = sorted(range(len(self.faults)), key=lambda i: (self.faults[i].at_batch, i))
        explicit = {
            f.node: i for i, f in enumerate(self.faults) if f.kind == "add" and f.node is not None
        }
        caps = capacities or [None] * len(node_ids)
        lost: dict[str, int] = {}
        added: dict[str, int] = {}
        alive = set(node_ids)
        for i in order:
            f = self.faults[i]
            if f.kind == "add":
                node = f.node
                if node is None:
                    k = 0
                    while f"node-{k}" in set(node_ids) | set(added) | set(explicit):
                        k += 1
                    node = f"node-{k}"
                if node in node_ids or node in added:
                    by = "cluster.nodes" if node in node_ids else f"run.faults[{added[node]}]"
                    raise ConfigError(
                        f"run.faults[{i}].node: node {short_repr(node)} already exists (in "
                        f"{by}); an added node needs a new id"
                    )
                if f.capacity is None and any(c is not None for c in caps) and len(set(caps)) != 1:
                    raise ConfigError(
                        f"run.faults[{i}].capacity: required: the cluster's "
                        "nodes have different capacities"
                    )
                if f.capacity is not None and all(c is None for c in caps):
                    raise ConfigError(
                        f"run.faults[{i}].capacity: the cluster's nodes have no "
                        "capacity, so an added node takes none"
                    )
                added[node] = i
                alive.add(node)
                continue
            if f.node not in node_ids and f.node not in added:
                if f.node in explicit:
                    j = explicit[f.node]
                    raise ConfigError(
                        f"run.faults[{i}]: node {short_repr(f.node)} is added only by "
                        f"run.faults[{j}] at batch {self.faults[j].at_batch}, "
                        f"after this fault (batch {f.at_batch})"
                    )
                raise ConfigError(
                    f"run.faults[{i}].node: unknown node {short_repr(f.node)}; nodes: "
                    f"{', '.join(list(node_ids) + list(added))}"
                )
            if f.node in lost:
                raise ConfigError(
                    f"run.faults[{i}]: node {short_repr(f.node)} is already lost (by "
                    f"run.faults[{lost[f.node]}]); nothing to {f.kind}"
                )
            if f.kind == "lose":
                lost[f.node] = i
                alive.discard(f.node)
                if not alive:
                    raise ConfigError(
                        f"run.faults[{i}]: losing node {short_repr(f.node)} loses every "
                        "node; at least one must survive to run the queries"
                    )
