"""Run configuration (DESIGN.md s. 5): one YAML file describes one run, validated by pydantic.

Why a strict schema: a typo in a long experiment file should stop the run before it starts, with
one line that names the key path, the bad value and what is allowed, never a pydantic dump.
Every model forbids unknown keys and uses strict types (``qnum: "100"`` is refused rather than
silently coerced; YAML already gives numbers as numbers). YAML is read with ``yaml.safe_load``.

Sections (defaults and meaning in ``configs/README.md``):

- ``workload``: explicit ``queries`` or a ``generator`` whose parameters may each be a list; the
  run is the cartesian product of the lists (the dissertation's Table 8 grid).
- ``streams``: input rate per stream; only with explicit queries (the generator has ``rate``).
- ``cluster``: ``nodes`` is a count, a list of counts (one more grid axis: Table 8's N_num) or a
  list of ``{id, capacity}``; ``ray.address`` (``null``: embedded local Ray, used by live runs).
- ``placement``: optimizer name(s) (Table 7's thirteen, ``WG_LS``, ``WG_PF`` with its
  ``front_size`` and ``choose`` rule, and the single-node ones), IE
  technique, ``slicing`` (pairs or cutty: how plans are priced and live runs slice), edge
  engine, preprocessing and ``exact`` (compute the exact optimum on small runs).
- ``data``: a synthetic DEBS-style feed ``{duration_s, rate_hz, seed}``, a ``path`` or a watched
  ``directory`` of arriving files (live runs).
- ``run``: ``mode``, ``allowed_lateness``, ``output_dir``, ``seed`` (the optimizers' seed);
  live runs also ``batch_rows``, ``checkpoint_every``, ``answers`` (``driver``: merged on the
  driver, the default, faster on one machine; ``actors``: each node actor writes its Parquet
  parts), ``feed`` (``driver``: Spark -> driver -> actors, the default; ``executors``: Spark
  tasks push to the actors) and ``faults`` (a fault drill: kill a
  node's actor, lose a node for good, or add a node, before a given feed batch; with
  ``data.directory`` the batches are the ``batch_rows`` chunks of the files, in arrival order).

Relative paths: ``data.path`` and ``data.directory.path`` are relative to the config file (inputs
travel with the config); ``run.output_dir`` is relative to the working directory (outputs go
where the user runs).
"""

from __future__ import annotations

import difflib
import itertools
import math
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from placement.cost import TECHNIQUES
from placement.edges import ENGINES
from placement.optimizers import optimizer_names
from placement.queries import AGGREGATES, KINDS
from placement.slicing import SLICINGS
from sim.workload import GENERATORS

# One registry per kind, owned by the module that implements it (aggregates: placement.queries,
# checked by executors.aggregates; techniques: placement.cost, executors registered in
# executors.base; engines: placement.edges; optimizers: placement.optimizers).  Techniques,
# engines and optimizers are read at validation time, so later registrations are accepted.
OPTIMIZER_NAMES = optimizer_names()  # the built-in ones (``optimizer_names()``: all)
EXACT_LIMIT = 24  # beyond ~24 queries the exact search rarely proves within a minute
EXACT_DEFAULT = 12  # ``exact: true``: ~3 s per (workload, 4 nodes) with the exhaustive solver
MAX_GRID_POINTS = 100_000  # a typo like ``seed: [0, ..., 99999]`` x 13 optimizers is refused
MAX_QNUM = 10_000_000
MAX_SMAX = 10_000_000  # the generator materialises the candidate slides 1..Smax
SECTIONS = ("name", "workload", "streams", "cluster", "placement", "data", "run")


class ConfigError(ValueError):
    """A configuration mistake. The message is one line: ``key.path: problem (got value)``."""


# ---- helpers ----------------------------------------------------------------------------------


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _one_or_list(item: Any) -> Any:
    """``x`` or a non-empty list of ``x``; a discriminator keeps errors to the branch used
    (a plain Union would report every branch's complaint)."""
    return Annotated[
        Annotated[item, Tag("__one__")]
        | Annotated[list[item], Field(min_length=1), Tag("__many__")],
        Discriminator(lambda v: "__many__" if isinstance(v, list) else "__one__"),
    ]


def _as_list(value: Any) -> list:
    return list(value) if isinstance(value, list) else [value]


class Strict(BaseModel):
    """Base: unknown keys refused, no type coercion, no NaN/inf, assignments re-validated."""

    model_config = ConfigDict(
        extra="forbid", strict=True, allow_inf_nan=False, validate_default=True
    )


PosInt = Annotated[int, Field(ge=1)]
Rate = Annotated[float, Field(gt=0)]


def _id_to_str(v: Any) -> Any:
    """YAML reads ``id: 7`` as an int; ids are strings everywhere else, so accept integers."""
    return str(v) if isinstance(v, int) and not isinstance(v, bool) else v


# ---- workload ---------------------------------------------------------------------------------


class QuerySpec(Strict):
    """One explicit ACQ (DESIGN.md s. 1)."""

    id: Annotated[str, BeforeValidator(_id_to_str), Field(min_length=1)]
    stream: Annotated[str, Field(min_length=1)] = "s0"
    aggregate: Literal[AGGREGATES] = "sum"  # type: ignore[valid-type]
    range: PosInt
    slide: PosInt
    kind: Literal[KINDS] = "time"  # type: ignore[valid-type]


class GeneratorSpec(Strict):
    """The papers' workload generator (``sim.workload``); any parameter may be a list (grid)."""

    qnum: _one_or_list(Annotated[int, Field(ge=1, le=MAX_QNUM)])  # type: ignore[valid-type]
    smax: _one_or_list(Annotated[int, Field(ge=1, le=MAX_SMAX)])  # type: ignore[valid-type]
    rate: _one_or_list(Rate) = 1.0  # type: ignore[valid-type]
    zskew: _one_or_list(Annotated[float, Field(ge=0)]) = 0.0  # type: ignore[valid-type]
    omax: _one_or_list(Annotated[float, Field(ge=1)]) = 1.0  # type: ignore[valid-type]
    gen: _one_or_list(Literal[GENERATORS]) = "nrm"  # type: ignore[valid-type]
    seed: _one_or_list(Annotated[int, Field(ge=0)]) = 0  # type: ignore[valid-type]
    stream: Annotated[str, Field(min_length=1)] = "s0"
    aggregate: Literal[AGGREGATES] = "sum"  # type: ignore[valid-type]

    GRID_KEYS: ClassVar[tuple[str, ...]] = ("qnum", "smax", "rate", "zskew", "omax", "gen", "seed")

    def points(self) -> list[dict[str, Any]]:
        """The cartesian product of the list-valued parameters, in file order (last varies
        fastest)."""
        axes = [_as_list(getattr(self, k)) for k in self.GRID_KEYS]
        return [dict(zip(self.GRID_KEYS, combo)) for combo in itertools.product(*axes)]

    def size(self) -> int:
        return math.prod(len(_as_list(getattr(self, k))) for k in self.GRID_KEYS)


class Workload(Strict):
    queries: Annotated[list[QuerySpec], Field(min_length=1)] | None = None
    generator: GeneratorSpec | None = None

    @model_validator(mode="after")
    def _one_source(self) -> Workload:
        if (self.queries is None) == (self.generator is None):
            raise ConfigError(
                "workload: give exactly one of 'queries' (explicit list) or "
                "'generator' (qnum, smax, rate, zskew, omax, gen, seed)"
            )
        if self.queries is not None:
            first: dict[str, int] = {}
            for i, q in enumerate(self.queries):
                if q.id in first:
                    raise ConfigError(
                        f"workload.queries[{i}].id: duplicate query id {q.id!r} "
                        f"(also workload.queries[{first[q.id]}]); ids must be unique"
                    )
                first[q.id] = i
        if self.generator is not None:
            g = self.generator
            if "div" in _as_list(g.gen) and min(_as_list(g.smax)) < 2:
                raise ConfigError(
                    f"workload.generator.smax: gen 'div' draws prime slides and "
                    f"needs smax >= 2 (got {min(_as_list(g.smax))})"
                )
        return self


class StreamSpec(Strict):
    rate: Rate


# ---- cluster ----------------------------------------------------------------------------------


class NodeSpec(Strict):
    """One node; ``capacity`` in aggregate operations per time unit (``null``: unbounded)."""

    id: Annotated[str, BeforeValidator(_id_to_str), Field(min_length=1)] | None = None
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
                            f"cluster.nodes[{i}].id: duplicate node id {n.id!r} "
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


# ---- placement, data, run ---------------------------------------------------------------------

OptimizerName = Annotated[str, Field(min_length=1)]


def _registered(names: Callable[[], Iterable[str]]) -> BeforeValidator:
    """A name from a registry read at validation time, refused with the message a ``Literal``
    gives (``expected 'a', 'b' or 'c'``)."""

    def check(v: Any) -> Any:
        allowed = tuple(names())
        if isinstance(v, str) and v in allowed:
            return v
        quoted = [repr(n) for n in allowed]
        listed = " or ".join([", ".join(quoted[:-1]), quoted[-1]] if len(quoted) > 1 else quoted)
        raise ValueError(f"Input should be {listed}")

    return BeforeValidator(check)


def _exact_tag(v: Any) -> str | None:
    return "__bool__" if isinstance(v, bool) else "__int__"


def _preprocess_tag(v: Any) -> str | None:
    return "__bool__" if isinstance(v, bool) else "__str__"


class Placement(Strict):
    optimizers: _one_or_list(OptimizerName) = ["WG_TN", "WG_I"]  # type: ignore[valid-type]
    ie: Annotated[str, _registered(lambda: TECHNIQUES)] = "panes"
    #: pairs (edges at window starts and ends) or cutty (window starts only): how plans are
    #: priced and how live runs slice (``placement.cost``, ``executors.cutty``)
    slicing: Literal[SLICINGS] = "pairs"  # type: ignore[valid-type]
    engine: Annotated[str, _registered(lambda: ENGINES)] = "fast"
    preprocess: Annotated[
        Annotated[bool, Tag("__bool__")]
        | Annotated[Literal["none", "classes", "slides"], Tag("__str__")],
        Discriminator(_preprocess_tag),
    ] = False
    exact: Annotated[
        Annotated[bool, Tag("__bool__")]
        | Annotated[int, Field(ge=0, le=EXACT_LIMIT), Tag("__int__")],
        Discriminator(_exact_tag),
    ] = False
    #: seconds the exact solver may spend per workload and node layout before it reports its
    #: best plan (never worse than the run's heuristics) with a proven bound (placement.exact)
    exact_time_limit: Annotated[float, Field(gt=0, le=86400)] = 60.0

    #: WG_PF (placement.pareto): at most this many plans on the returned front
    front_size: Annotated[int, Field(ge=1, le=64)] = 8
    #: WG_PF's rule picking the plan to report and run (placement.pareto.Choose); None: the
    #: default (capacities when the nodes have capacities, else total_cost_within: 5%)
    choose: Any = None

    @field_validator("choose", mode="after")
    @classmethod
    def _choose(cls, v: Any) -> Any:
        if v is None:
            return v
        from placement.pareto import Choose, ChooseError

        try:
            Choose.parse(v)
        except ChooseError as exc:
            raise ConfigError(str(exc)) from None
        return v

    def choose_rule(self, capacities: list[float | None]):
        """The WG_PF rule for a cluster layout (``placement.pareto.default_choose`` if unset)."""
        from placement.pareto import Choose, default_choose

        return default_choose(capacities) if self.choose is None else Choose.parse(self.choose)

    #: weaveplace serve: re-plan when the running plan's TotalCost drifts more than this
    #: fraction above a fresh plan of the running queries; at most max_moves trees move then
    tolerance: Annotated[float, Field(ge=0)] = 0.25
    max_moves: Annotated[int, Field(ge=0)] = 8

    @field_validator("optimizers", mode="after")
    @classmethod
    def _known(cls, v: Any) -> Any:
        names = _as_list(v)
        for i, name in enumerate(names):
            if name not in optimizer_names():
                where = (
                    f"placement.optimizers[{i}]" if isinstance(v, list) else "placement.optimizers"
                )
                raise ConfigError(
                    f"{where}: unknown optimizer {name!r}; allowed: {', '.join(optimizer_names())}"
                )
            if name in names[:i]:
                raise ConfigError(f"placement.optimizers[{i}]: {name!r} is listed twice")
        return v

    @property
    def optimizer_list(self) -> list[str]:
        return _as_list(self.optimizers)

    @property
    def exact_max_queries(self) -> int:
        """Largest workload (queries) for which the exact optimum is computed (0: never)."""
        if isinstance(self.exact, bool):
            return EXACT_DEFAULT if self.exact else 0
        return self.exact

    @property
    def preprocess_arg(self) -> bool | str:
        return False if self.preprocess == "none" else self.preprocess


class DirectorySpec(Strict):
    """A directory watched by Spark Structured Streaming: DEBS files (text or Parquet) are fed
    as they arrive, answers written as they come out (``cluster.streaming``).  At least
    Ctrl-C stops it; ``idle_timeout_s``, ``max_files`` and ``timeout_s`` stop it by themselves."""

    path: Annotated[str, Field(min_length=1)]
    pattern: Annotated[str, Field(min_length=1)] = "*"
    files_per_batch: Annotated[int, Field(ge=1, le=100_000)] = 8
    poll_s: Annotated[float, Field(gt=0, le=3600)] = 1.0
    idle_timeout_s: Annotated[float, Field(gt=0)] | None = None
    max_files: PosInt | None = None
    timeout_s: Annotated[float, Field(gt=0)] | None = None

    @field_validator("pattern", mode="after")
    @classmethod
    def _file_glob(cls, v: str) -> str:
        if "/" in v:
            raise ConfigError(
                f"data.directory.pattern: {v!r} is a path; expected a glob over "
                "file names such as '*.tsv' (the directory is data.directory.path)"
            )
        return v

    @model_validator(mode="after")
    def _idle_after_poll(self) -> DirectorySpec:
        if self.idle_timeout_s is not None and self.idle_timeout_s <= self.poll_s:
            raise ConfigError(
                f"data.directory.idle_timeout_s: {self.idle_timeout_s:g} must "
                f"exceed poll_s ({self.poll_s:g}): Spark looks for new files once "
                "per poll"
            )
        return self


class Data(Strict):
    """Input tuples for live runs: a file, a directory of arriving files, or a synthetic
    DEBS-style feed (``cluster.debs_format``)."""

    path: Annotated[str, Field(min_length=1)] | None = None
    directory: DirectorySpec | None = None
    # a trailing 57th field on a DEBS text line (e.g. a machine id): drop it or reject the line
    extra_columns: Literal["reject", "ignore"] = "reject"
    duration_s: Annotated[float, Field(gt=0)] = 60.0
    rate_hz: Annotated[float, Field(gt=0)] = 100.0
    seed: Annotated[int, Field(ge=0)] = 0

    @model_validator(mode="after")
    def _resolve(self, info: ValidationInfo) -> Data:
        if self.path is None and self.directory is None:
            if "extra_columns" in self.model_fields_set:
                raise ConfigError(
                    "data.extra_columns: applies to DEBS text input; give "
                    "data.path or data.directory (generated data has no "
                    "extra columns)"
                )
            return self
        if self.path is not None and self.directory is not None:
            raise ConfigError(
                "data.directory: next to data.path; give one input: a file "
                "(data.path) or a directory of arriving files (data.directory)"
            )
        key = "data.path" if self.path is not None else "data.directory"
        synthetic = self.model_fields_set & {"duration_s", "rate_hz", "seed"}
        if synthetic:
            raise ConfigError(
                f"data.{sorted(synthetic)[0]}: a synthetic-feed parameter next to "
                f"{key}; give either {key} or {{duration_s, rate_hz, seed}}"
            )
        base = Path((info.context or {}).get("base_dir", "."))
        if self.directory is not None:
            p = Path(self.directory.path).expanduser()
            p = (p if p.is_absolute() else base / p).resolve()
            if p.is_file():
                raise ConfigError(
                    f"data.directory.path: {str(p)!r} is a file; a directory is "
                    "watched for arriving files (one file: data.path)"
                )
            if not p.is_dir():
                raise ConfigError(
                    f"data.directory.path: directory not found: {str(p)!r} "
                    "(create it first; relative paths are relative to the "
                    "config file)"
                )
            object.__setattr__(self.directory, "path", str(p))
            return self
        assert self.path is not None  # neither or both were handled above
        p = Path(self.path).expanduser()
        p = p if p.is_absolute() else base / p
        if not p.is_file():
            raise ConfigError(
                f"data.path: file not found: {str(p)!r} (relative paths are "
                "relative to the config file)"
            )
        object.__setattr__(self, "path", str(p.resolve()))
        return self


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
    node: Annotated[str, BeforeValidator(_id_to_str), Field(min_length=1)] | None = None
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
    faults: list[FaultSpec] = []
    control: ControlSpec = ControlSpec()

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
        the cluster's nodes do (the same rules as ``cluster.fault_drills.check_faults`` and
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
                        f"run.faults[{i}].node: node {node!r} already exists (in "
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
                        f"run.faults[{i}]: node {f.node!r} is added only by "
                        f"run.faults[{j}] at batch {self.faults[j].at_batch}, "
                        f"after this fault (batch {f.at_batch})"
                    )
                raise ConfigError(
                    f"run.faults[{i}].node: unknown node {f.node!r}; nodes: "
                    f"{', '.join(list(node_ids) + list(added))}"
                )
            if f.node in lost:
                raise ConfigError(
                    f"run.faults[{i}]: node {f.node!r} is already lost (by "
                    f"run.faults[{lost[f.node]}]); nothing to {f.kind}"
                )
            if f.kind == "lose":
                lost[f.node] = i
                alive.discard(f.node)
                if not alive:
                    raise ConfigError(
                        f"run.faults[{i}]: losing node {f.node!r} loses every "
                        "node; at least one must survive to run the queries"
                    )


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
                        f"run.{key}: {route!r} is for a file (data.path); a watched "
                        "directory runs on the driver route"
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
        if wl.generator is None:
            rates = self.streams or {}
            for i, q in enumerate(wl.queries or []):
                if q.stream not in rates:
                    raise ConfigError(
                        f"streams: no rate for stream {q.stream!r} used by "
                        f"workload.queries[{i}]; add streams: {{{q.stream}: "
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
            + (f"; fault drill: {len(self.run.faults)} fault(s)" if self.run.faults else "")
        )


# ---- loading and error messages ---------------------------------------------------------------

_PLAIN_KEY = re.compile(r"[A-Za-z_][\w-]*")


def _join(path: str, key: Any) -> str:
    """``a.b`` for plain keys, ``a[3]`` for list positions, ``a['odd key']`` otherwise."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    if isinstance(key, str) and _PLAIN_KEY.fullmatch(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{_short(key, 40)}]"


def _loc_path(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, str) and part.startswith("__") and part.endswith("__"):
            continue  # union tags
        out = _join(out, part)
    return out or "config"


def _unwrap_model(annotation: Any) -> list[type[BaseModel]]:
    """Models reachable from a field annotation (through Annotated, Union, list, dict)."""
    found: list[type[BaseModel]] = []
    stack = [annotation]
    while stack:
        a = stack.pop()
        if isinstance(a, type) and issubclass(a, BaseModel):
            found.append(a)
            continue
        for arg in getattr(a, "__args__", ()) or ():
            stack.append(arg)
        meta = getattr(a, "__metadata__", None)
        origin = getattr(a, "__origin__", None)
        if meta is not None and origin is not None:
            stack.append(origin)
    return found


def _allowed_keys(loc: tuple) -> list[str]:
    """Field names of the model at ``loc`` (for 'unknown key' messages)."""
    models: list[type[BaseModel]] = [Config]
    for part in loc:
        if isinstance(part, int) or (isinstance(part, str) and part.startswith("__")):
            continue
        nxt: list[type[BaseModel]] = []
        for m in models:
            f = m.model_fields.get(part)
            if f is not None:
                nxt += _unwrap_model(f.annotation)
        if not nxt:
            # dict values (streams.<name>) keep the dict's value model
            continue
        models = nxt
    keys: list[str] = []
    for m in models:
        keys += [k for k in m.model_fields if k not in keys]
    return keys


def _message(err: dict[str, Any]) -> str:
    loc = tuple(err.get("loc", ()))
    typ = err.get("type", "")
    path = _loc_path(loc)
    if typ == "extra_forbidden":
        allowed = _allowed_keys(loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"{path}: unknown key{hint}; allowed keys here: {', '.join(allowed)}"
    if typ == "missing":
        return f"{path}: required key is missing"
    msg = err.get("msg", "invalid value")
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    msg = msg.replace("Input should be", "expected").replace("Input", "value")
    if typ == "too_short":
        msg = "expected a non-empty list"
    elif typ == "string_too_short":
        msg = "expected a non-empty string"
    msg = re.sub(r"a valid dictionary or instance of \w+", "a mapping", msg)
    return f"{path}: {msg} (got {_short(err.get('input'))})"


def _from_validation(exc: ValidationError) -> ConfigError:
    errors = exc.errors()
    for e in errors:  # our own cross-field checks already carry a full message
        inner = (e.get("ctx") or {}).get("error")
        if isinstance(inner, ConfigError):
            return inner
    # An unknown key is usually a typo that also causes a "missing" error: report it first.
    errors.sort(key=lambda e: e.get("type") != "extra_forbidden")
    first = _message(dict(errors[0]))
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    return ConfigError(first + more)


def _check_keys(node: Any, path: str = "", seen: set[int] | None = None) -> None:
    """Refuse non-string keys (YAML allows ``1: x`` or ``null: x``) with their path, and walk
    shared/recursive YAML aliases only once."""
    seen = set() if seen is None else seen
    if id(node) in seen:
        return
    if isinstance(node, (dict, list)):
        seen.add(id(node))
    if isinstance(node, dict):
        for k, v in node.items():
            if not isinstance(k, str):
                raise ConfigError(f"{path or 'config'}: keys must be strings, got key {_short(k)}")
            _check_keys(v, _join(path, k), seen)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _check_keys(v, _join(path, i), seen)


def config_from_mapping(raw: Any, base_dir: str | Path = ".") -> Config:
    """Validate an already-parsed mapping; ``base_dir`` resolves ``data.path``."""
    if raw is None:
        raise ConfigError(
            "config: the file is empty; expected a mapping with sections " + ", ".join(SECTIONS)
        )
    if not isinstance(raw, dict):
        raise ConfigError(
            f"config: expected a mapping with sections {', '.join(SECTIONS)}; "
            f"got {type(raw).__name__} {_short(raw)}"
        )
    _check_keys(raw)
    try:
        return Config.model_validate(raw, context={"base_dir": str(base_dir)})
    except ValidationError as exc:
        raise _from_validation(exc) from None
    except RecursionError:
        raise ConfigError("config: nesting too deep (recursive YAML aliases?)") from None


def load_config_text(text: str, base_dir: str | Path = ".", source: str = "config") -> Config:
    """Parse YAML text (``safe_load`` only) and validate it."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{source}: invalid YAML{where}: {problem}") from None
    except (RecursionError, ValueError, TypeError) as exc:  # e.g. absurd !!int or nesting
        raise ConfigError(f"{source}: invalid YAML: {_short(str(exc), 120)}") from None
    return config_from_mapping(raw, base_dir)


def load_config(path: str | Path) -> Config:
    """Load and validate a YAML config file; every problem is a one-line ``ConfigError``."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file not found: {str(p)!r}")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: cannot read config: {exc}") from None
    return load_config_text(text, p.parent, str(p))
