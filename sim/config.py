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

Modules: one per section (``sim.config_workload``, ``config_cluster``, ``config_placement``,
``config_data``) on a shared base (``sim.config_base``); this one holds the run section, the
whole ``Config`` with its cross-section checks, and loading with its one-line error messages.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, Field, ValidationError, model_validator

from sim.config_base import ConfigError, Rate, Strict, id_to_str, short
from sim.config_cluster import Cluster
from sim.config_data import Data
from sim.config_placement import Placement
from sim.config_workload import GeneratorSpec, StreamSpec, Workload

MAX_GRID_POINTS = 100_000  # a typo like ``seed: [0, ..., 99999]`` x 13 optimizers is refused
SECTIONS = ("name", "workload", "streams", "cluster", "placement", "data", "run")


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
    return f"{path}[{short(key, 40)}]"


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
    return f"{path}: {msg} (got {short(err.get('input'))})"


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
                raise ConfigError(f"{path or 'config'}: keys must be strings, got key {short(k)}")
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
            f"got {type(raw).__name__} {short(raw)}"
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
        raise ConfigError(f"{source}: invalid YAML: {short(str(exc), 120)}") from None
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
