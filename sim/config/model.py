"""The whole configuration: its sections and the checks that span several of them.

Why a module: cross-section rules (a generator's grid size times the node counts, a drill that
needs a live run, a watched directory on the driver route, a rate for every stream) read
several sections at once; each section alone is validated in its own module.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, model_validator

from placement.messages import cut_value, short_repr
from sim.config.base import ConfigError, Strict
from sim.config.cluster import Cluster
from sim.config.data import Data
from sim.config.placement import Placement
from sim.config.run import Run
from sim.config.workload import GeneratorSpec, StreamSpec, Workload

MAX_GRID_POINTS = 100_000  # a typo like ``seed: [0, ..., 99999]`` x 13 optimizers is refused
SECTIONS = ("name", "workload", "streams", "cluster", "placement", "data", "run")


class Config(Strict):
    """One run. ``points()`` lists what to run: workload grid x cluster layouts."""

    name: Annotated[str, Field(min_length=1)] | None = None
    workload: Workload
    streams: dict[Annotated[str, Field(min_length=1)], StreamSpec] | None = None
    cluster: Cluster = Cluster()
    placement: Placement = Placement()
    data: Data = Data()
    run: Run = Run()

    @model_validator(mode="after")
    def _cross(self) -> Config:
        wl = self.workload
        if wl.generator is not None:
            if self.streams is not None:
                raise ConfigError(
                    "streams: only used with workload.queries; the generator's "
                    "input rate is workload.generator.rate"
                )
            n = wl.generator.size() * len(self.cluster.layouts())
            if n > MAX_GRID_POINTS:
                raise ConfigError(
                    f"workload.generator: the grid has {n} points (x node counts); "
                    f"allowed: at most {MAX_GRID_POINTS}"
                )
        if self.data.directory is not None:
            for key, route in (("answers", "actors"), ("feed", "executors")):
                if getattr(self.run, key) == route:
                    raise ConfigError(
                        f"run.{key}: {short_repr(route)} is for a file (data.path); a watched "
                        "directory runs on the driver route"
                    )
        if self.data.order == "time" and self.run.feed == "executors":
            raise ConfigError(
                "data.order: 'time' sorts the file on feed 'driver'; run.feed 'executors' "
                "reads its pieces in parallel in file order (data.order: file, the default)"
            )
        if self.run.feed_mode == "sliced":
            counts = [q.id for q in wl.queries or [] if q.kind == "count"]
            if counts:
                raise ConfigError(
                    f"run.feed_mode: 'sliced' runs time windows only (count windows need "
                    f"each tuple's position); count-window queries: {counts[:5]} "
                    "(feed_mode: raw runs them)"
                )
        if self.run.faults:
            if self.run.mode != "live":
                raise ConfigError("run.faults: a fault drill needs a live run (run.mode: live)")
            layouts = self.cluster.layouts()
            if len(layouts) == 1:  # (a live run refuses several layouts with its own message)
                self.run.check_faults(*layouts[0])
        if (
            self.placement.choose is not None
            and self.placement.choose_rule([None]).rule == "capacities"
            and all(c is None for _, caps in self.cluster.layouts() for c in caps)
        ):
            raise ConfigError(
                "placement.choose: 'capacities' needs node capacities "
                "(cluster.nodes: [{id, capacity}, ...]); allowed without them: "
                '{max_cost_at_most: N}, {max_cost_within: "p%"}, '
                '{total_cost_within: "p%"}'
            )
        a = self.placement.autoscale
        if a is not None and a.capacity is None:
            caps = {c for _, cs in self.cluster.layouts() for c in cs}
            if len(caps) != 1 or None in caps:
                raise ConfigError(
                    "placement.autoscale.capacity: missing; give the capacity of a node, or "
                    "cluster.nodes as [{id, capacity}, ...] all with one capacity"
                )
        if self.placement.shedding is not None and any(
            c is None for _, cs in self.cluster.layouts() for c in cs
        ):
            raise ConfigError(
                "placement.shedding: needs node capacities (cluster.nodes as "
                "[{id, capacity}, ...]): the drop fractions make every node fit its capacity"
            )
        if wl.generator is None:
            rates = self.streams or {}
            for i, q in enumerate(wl.queries or []):
                if q.stream not in rates:
                    raise ConfigError(
                        f"streams: no rate for stream {short_repr(q.stream)} used by "
                        f"workload.queries[{i}]; add streams: {{{cut_value(q.stream)}: "
                        "{rate: <tuples per time unit>}}"
                    )
        return self

    # ---- expansion ----
    def points(self) -> list[dict[str, Any]]:
        """Every configuration to run, as plain parameters (workload x cluster layout)."""
        layouts = self.cluster.layouts()
        wl = self.workload
        work = wl.generator.points() if wl.generator is not None else [None]
        out = []
        for w in work:
            for ids, caps in layouts:
                out.append({"workload": w, "node_ids": ids, "capacities": caps})
        return out

    def summary(self) -> str:
        """One short paragraph for ``weaveplace validate``."""
        wl = self.workload
        if wl.generator is not None:
            g = wl.generator
            axes = [
                f"{k}={getattr(g, k)}"
                for k in GeneratorSpec.GRID_KEYS
                if isinstance(getattr(g, k), list)
            ]
            work = f"generator, {g.size()} workload(s)" + (f" ({', '.join(axes)})" if axes else "")
        else:
            work = (
                f"{len(wl.queries or [])} explicit queries on {len(self.streams or {})} stream(s)"
            )
        layouts = self.cluster.layouts()
        nodes = ", ".join(str(len(ids)) for ids, _ in layouts)
        opts = self.placement.optimizer_list
        n = len(self.points())
        return (
            f"{work}; nodes: {nodes}; {n} configuration(s) x {len(opts)} optimizer(s) "
            f"[{', '.join(opts)}]; ie={self.placement.ie}; "
            f"slicing={self.placement.slicing}; "
            f"exact: {'qnum <= ' + str(self.placement.exact_max_queries) if self.placement.exact_max_queries else 'off'}; "
            f"mode={self.run.mode}; output_dir={self.run.output_dir}"
            + (f"; feed_mode={self.run.feed_mode}" if self.run.feed_mode != "raw" else "")
            + (f"; fault drill: {len(self.run.faults)} fault(s)" if self.run.faults else "")
        )
