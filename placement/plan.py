"""Plans: trees assigned to nodes, serialised as JSON schema ``weaveplace.plan/1``
(docs/DESIGN.md s. 4).

Every cost in a plan is recomputable from its queries and stream rates alone: ``verify_plan``
re-prices each tree from scratch (with the brute-force-checked edge engine) and compares.

``slicing`` (optional top-level field, ``"pairs"`` or ``"cutty"``; absent means ``"pairs"``,
so plans written before it load unchanged): the slicing every tree of the plan is priced and
executed with (``placement.trees.CostModel``, ``executors.ExecutionTree``).  One per plan, as
``ie`` is: a plan is priced by one cost model.  Written always, so a plan says how it runs.

``axis`` (per tree, ``"time"`` or ``"count"``): the axis its windows share, the
queries' ``kind``. ``composite_slide`` and ``edges`` are on that axis (milliseconds or tuple
positions); ``edge_rate`` is always edges per *time unit* (for a count tree: edges per tuple x
the stream's rate), so ``cost = lambda + edge_rate * omega`` holds for every tree.  Plans
written before it have no ``axis``: it is taken from the tree's queries, and such a plan
verifies when its numbers match the current model.  An old tree that mixes count and time
windows is refused (``PlanError``, one line): no slicing serves both, so its price was wrong;
re-plan it.  An old count tree priced per tuple reports an ``edge_rate``/``cost`` mismatch.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from math import isclose
from operator import attrgetter
from pathlib import Path
from typing import Any

from placement.queries import KINDS, Query, query_from_mapping, validate_unique
from placement.slicing import SLICINGS
from placement.trees import CostModel, Tree

SCHEMA = "weaveplace.plan/1"
_ID = attrgetter("id")


@dataclass
class Node:
    id: str
    trees: list[Tree] = field(default_factory=list)
    capacity: float | None = None

    @property
    def cost(self) -> float:
        return float(sum(t.cost for t in self.trees))


@dataclass
class Plan:
    """``slicing``: None takes the trees' (all trees of a plan share one; ``"pairs"`` when the
    plan has no tree), so plans built from a model's trees need not repeat it."""

    optimizer: str
    ie: str
    nodes: list[Node]
    rates: dict[str, float]
    slicing: str | None = None
    #: the optimizer's search effort in machine-independent units, when it reports one (WG_LS:
    #: candidate moves keyed); not serialised. WG_PF budgets its own search by it.
    work: int | None = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        found = {t.slicing for n in self.nodes for t in n.trees}
        if len(found) > 1:
            raise ValueError(f"a plan's trees share one slicing; got {sorted(found)}")
        if self.slicing is None:
            self.slicing = found.pop() if found else "pairs"
        elif found and found != {self.slicing}:
            raise ValueError(
                f"plan slicing {self.slicing!r} but its trees are priced under {sorted(found)}"
            )

    @property
    def trees(self) -> list[Tree]:
        return [t for n in self.nodes for t in n.trees]

    @property
    def queries(self) -> list[Query]:
        return [q for t in self.trees for q in t.queries]

    @property
    def total_cost(self) -> float:
        return float(sum(n.cost for n in self.nodes))

    @property
    def max_cost(self) -> float:
        return max((n.cost for n in self.nodes), default=0.0)

    def to_dict(
        self,
        query_dict: Callable[[Query], Mapping[str, Any]] = Query.to_dict,
        entries: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """The ``weaveplace.plan/1`` dict; ``query_dict``: each query's entry, or ``entries``:
        the entries by query id (a caller that keeps them already, such as a service, hands
        them over instead of making them)."""
        tree_ids = iter(range(10**12))
        if entries is not None:
            queries = list(map(entries.__getitem__, map(_ID, self.queries)))
        else:
            queries = list(map(query_dict, self.queries))
        return {
            "schema": SCHEMA,
            "optimizer": self.optimizer,
            "ie": self.ie,
            "slicing": self.slicing,
            "queries": queries,
            "streams": {s: {"rate": r} for s, r in sorted(self.rates.items())},
            "nodes": [
                {
                    "id": n.id,
                    "capacity": n.capacity,
                    "cost": n.cost,
                    "trees": [
                        {
                            "id": f"t{next(tree_ids)}",
                            "stream": t.stream,
                            "aggregate": t.aggregate,
                            "axis": t.kind,
                            "queries": list(map(_ID, t.queries)),
                            "composite_slide": t.composite_slide,
                            "edges": t.edges,
                            "edge_rate": t.time_edge_rate,
                            "omega": t.omega,
                            "cost": t.cost,
                        }
                        for t in n.trees
                    ],
                }
                for n in self.nodes
            ],
            "total_cost": self.total_cost,
            "max_cost": self.max_cost,
        }

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=1))
        return path


def single_node_plan(
    optimizer: str, trees: Iterable[Tree], model: CostModel, rates: Mapping[str, float]
) -> Plan:
    return Plan(
        optimizer, model.technique, [Node("node-0", list(trees))], dict(rates), model.slicing
    )


class PlanError(ValueError):
    """A plan file that is malformed or whose numbers do not match its queries."""


def plan_slicing(data: Mapping[str, Any]) -> str:
    """The plan's ``slicing`` (default ``"pairs"``), or ``PlanError`` naming what is allowed."""
    v = data.get("slicing", "pairs")
    if v not in SLICINGS:
        raise PlanError(
            f"slicing: expected one of {', '.join(SLICINGS)} (default pairs), got {v!r}"
        )
    return v


def load_plan(data: Mapping[str, Any] | str | Path, engine: str = "fast") -> Plan:
    """Rebuild a plan from JSON, re-pricing every tree from its queries (nothing is trusted)."""
    raw: Mapping[str, Any] = (
        json.loads(Path(data).read_text()) if isinstance(data, (str, Path)) else data
    )
    if raw.get("schema") != SCHEMA:
        raise PlanError(f"schema: expected {SCHEMA!r}, got {raw.get('schema')!r}")
    queries = validate_unique(query_from_mapping(q, i) for i, q in enumerate(raw["queries"]))
    by_id = {q.id: q for q in queries}
    rates = {s: float(v["rate"]) for s, v in raw["streams"].items()}
    slicing = plan_slicing(raw)
    model = CostModel(raw["ie"], rates, engine, slicing)
    nodes = []
    for n in raw["nodes"]:
        trees = []
        for t in n["trees"]:
            missing = [qid for qid in t["queries"] if qid not in by_id]
            if missing:
                raise PlanError(f"tree {t.get('id')!r} names unknown queries {missing}")
            qs = [by_id[qid] for qid in t["queries"]]
            if t.get("axis", "time") not in KINDS:
                raise PlanError(
                    f"tree {t.get('id')!r}: axis: expected one of "
                    f"{', '.join(KINDS)}, got {t.get('axis')!r}"
                )
            kinds = sorted({q.kind for q in qs})
            if len(kinds) > 1:
                raise PlanError(
                    f"tree {t.get('id')!r} mixes count and time windows, which "
                    f"cannot share a slicing (older plans allowed it): "
                    f"re-plan its queries"
                )
            trees.append(model.tree(qs))
        nodes.append(Node(n["id"], trees, n.get("capacity")))
    return Plan(raw["optimizer"], raw["ie"], nodes, rates, slicing)


def verify_plan(data: Mapping[str, Any], rel_tol: float = 1e-9) -> list[str]:
    """Differences between a plan's stated numbers and numbers recomputed from its queries."""
    rebuilt = load_plan(data)
    problems = []
    for n_raw, n in zip(data["nodes"], rebuilt.nodes):
        for t_raw, t in zip(n_raw["trees"], n.trees):
            if t_raw.get("axis", t.kind) != t.kind:  # absent: a plan from before the axis
                problems.append(f"{t_raw['id']}: axis {t_raw['axis']} != {t.kind}")
            for name, value in (("edges", t.edges), ("composite_slide", t.composite_slide)):
                if t_raw[name] != value:
                    problems.append(f"{t_raw['id']}: {name} {t_raw[name]} != {value}")
            for name, number in (
                ("edge_rate", t.time_edge_rate),
                ("omega", t.omega),
                ("cost", t.cost),
            ):
                if not isclose(t_raw[name], number, rel_tol=rel_tol):
                    problems.append(f"{t_raw['id']}: {name} {t_raw[name]} != {number}")
        if not isclose(n_raw["cost"], n.cost, rel_tol=rel_tol):
            problems.append(f"{n_raw['id']}: cost {n_raw['cost']} != {n.cost}")
    for name, number in (("total_cost", rebuilt.total_cost), ("max_cost", rebuilt.max_cost)):
        if not isclose(data[name], number, rel_tol=rel_tol):
            problems.append(f"{name} {data[name]} != {number}")
    queries_in_trees = [q for n in data["nodes"] for t in n["trees"] for q in t["queries"]]
    if sorted(queries_in_trees) != sorted(q["id"] for q in data["queries"]):
        problems.append("every query must be in exactly one tree")
    return problems
