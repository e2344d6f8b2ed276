"""What the service keeps of the running plan: its queries, its trees and their nodes, the
capacities, the query ids used and the files fed (``ServiceState``, one ``RunningTree`` per tree).

Why typed records: every command reads and rewrites them, and ``serve --resume`` saves and
restores them field by field (``cluster.service.resume``); their JSON form (``to_saved`` /
``from_saved``) is the state file's and must not change.  Queries stay JSON-ready mappings (the
schema of config ``workload.queries``, normalised by ``query_mapping``): the state file names
them by id, their definitions are in the query log (``cluster.service.query_log``), and they
are read back by ``placement.queries.query_from_mapping``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any


@dataclass
class RunningTree:
    """One running tree: its node, its stream, the queries it answers from now on (``active``)
    and, once a re-plan handed queries to other trees, those it still answers windows of
    from before the hand-off (``handed``; None: it never handed any, absent from the file)."""

    node: str
    stream: str
    active: list[str]
    handed: list[str] | None = None

    def to_saved(self) -> dict:
        d: dict[str, Any] = {"node": self.node, "stream": self.stream, "active": self.active}
        if self.handed is not None:
            d["handed"] = self.handed
        return d

    @classmethod
    def from_saved(cls, d: Mapping[str, Any]) -> RunningTree:
        handed = d.get("handed")
        return cls(
            str(d["node"]),
            d["stream"],
            list(d["active"]),
            None if handed is None else list(handed),
        )

    def copy(self) -> RunningTree:
        return replace(
            self,
            active=list(self.active),
            handed=None if self.handed is None else list(self.handed),
        )


@dataclass
class ServiceState:
    """The running plan's bookkeeping (see module doc); ``next_tree`` numbers new trees
    (``t<n>``: ids are never reused, answers and late tuples are keyed by them)."""

    queries: dict[str, dict]
    trees: dict[str, RunningTree]
    capacity: dict[str, float | None]
    next_tree: int
    used_ids: set[str] = field(default_factory=set)
    fed_names: set[str] = field(default_factory=set)

    @classmethod
    def from_plan(cls, plan: Mapping[str, Any]) -> ServiceState:
        """A fresh deployment of ``plan`` (``weaveplace.plan/1``)."""
        queries = {str(q["id"]): query_mapping(q) for q in plan["queries"]}
        trees = {
            str(t["id"]): RunningTree(str(n["id"]), t["stream"], [str(q) for q in t["queries"]])
            for n in plan["nodes"]
            for t in n["trees"]
        }
        numbered = [int(t[1:]) for t in trees if t[1:].isdigit()]
        return cls(
            queries=queries,
            trees=trees,
            capacity={str(n["id"]): n.get("capacity") for n in plan["nodes"]},
            next_tree=1 + max(numbered or [-1]),
            used_ids=set(queries),
        )

    @classmethod
    def from_saved(cls, r: Mapping[str, Any]) -> ServiceState:
        """The state ``to_saved`` wrote (``RUN_DIR/state/service.json``), its queries and ids
        used filled in from the query log (``query_log.load``)."""
        return cls(
            queries=r["queries"],
            trees={tid: RunningTree.from_saved(t) for tid, t in r["trees"].items()},
            capacity=r["capacity"],
            next_tree=int(r["next_tree"]),
            used_ids=set(r["used_ids"]),
            fed_names=set(r["fed"]),
        )

    def to_saved(self) -> dict:
        """The state file's fields for the running plan, in the file's order: the running
        queries by id, in their order (their definitions and the ids used are the query
        log's)."""
        return {
            "queries": list(self.queries),
            "trees": {tid: t.to_saved() for tid, t in self.trees.items()},
            "capacity": self.capacity,
            "next_tree": self.next_tree,
            "fed": sorted(self.fed_names),
        }

    def tree_of(self) -> dict[str, str]:
        """Query id -> the tree that answers it from now on."""
        return {q: tid for tid, t in self.trees.items() for q in t.active}

    def trees_in_order(self) -> list[tuple[str, RunningTree]]:
        """The trees by id (``t2`` before ``t10``; ids not of that form after them)."""
        return sorted(self.trees.items(), key=lambda x: tree_order(x[0]))

    def streams_of(self, ids: list[str]) -> list[str]:
        return sorted({self.queries[i]["stream"] for i in ids})


def tree_order(tid: str) -> tuple:
    """Sort key of tree ids: ``t<n>`` by number first, other ids after them by name."""
    return (0, int(tid[1:]), "") if tid[1:].isdigit() else (1, 0, tid)


def query_mapping(q: Mapping[str, Any]) -> dict:
    """A query as the service keeps and saves it (defaults filled in, fixed key order)."""
    return {
        "id": str(q["id"]),
        "stream": q.get("stream", "s0"),
        "aggregate": q.get("aggregate", "sum"),
        "range": int(q["range"]),
        "slide": int(q["slide"]),
        "kind": q.get("kind", "time"),
    }


def executor_query(q: Mapping[str, Any]) -> dict:
    """A query as a tree's spec takes it (the executor needs no stream: the tree has one)."""
    return {k: q[k] for k in ("id", "aggregate", "range", "slide", "kind")}
