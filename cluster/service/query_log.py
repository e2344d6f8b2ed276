"""Each query a deployment ever registered, written once: ``RUN_DIR/state/queries.jsonl``.

Why a log: the service saves its state after every micro-batch and every command
(``cluster.service.resume``), and at 100,000 queries their definitions were 20 of the state
file's 21 MB (the running queries, then every node's trees again), written whole each time.
Ids are never reused and a definition never changes, so each is appended here once, the first
time a state that uses it is saved, and the state file names queries by id.

The state records the log's size when it was saved (``size``): lines appended after it (a
crash between the append and the state's write) are cut off when the state is loaded, so the
queries of a command that never committed are not remembered as used.  A line is a query as
the service keeps it (``query_mapping``), or just ``{"id": ...}`` for an id used before a
state without the log was resumed, whose definition that state no longer had.

Timeline of one ``add-queries`` (state generation g to g+1)::

    queries.jsonl  [... size_g][1,000 new lines]            append + fsync
    service.json   {..., "query_log": size_g}  ->  {..., "query_log": size_g+1}   atomic
"""

from __future__ import annotations

import json
import operator
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from cluster.service.state import executor_query, query_mapping

NAME = "queries.jsonl"


class QueryLogError(ValueError):
    """The log does not hold what the state file says it does."""


class QueryLog:
    """The log of one deployment's ``state`` directory: the ids it holds and its size (see
    module doc).  ``write`` appends what a state about to be saved uses and the log lacks;
    ``refer`` names a node's trees' queries by id."""

    def __init__(self, state_dir: Path, logged: dict[str, dict | None], size: int):
        self.path = Path(state_dir) / NAME
        #: id -> its definition as logged (None: logged by id only)
        self.logged = logged
        self.size = size
        # tree id -> (the spec dict last referred, its form with ids): a tree's spec is
        # replaced, never changed in place, when the tree changes
        self._trees: dict[str, tuple[dict, dict]] = {}

    @classmethod
    def start(cls, state_dir: Path, saved: Mapping[str, Any] | None = None) -> QueryLog:
        """The log a deployment saves into: empty for a new one (``saved`` None) or one resumed
        from a state without a log; else the log ``saved`` (``load``'s form) was written with,
        cut to the size it recorded."""
        Path(state_dir).mkdir(parents=True, exist_ok=True)
        size = 0 if saved is None else int(saved.get("query_log", 0))
        logged: dict[str, dict | None] = {}
        if size:  # the definitions ``refer`` compares with: the running queries and the trees'
            assert saved is not None
            logged = dict.fromkeys(saved["used_ids"])
            for v in saved["nodes"].values():
                for t in v["trees"]:
                    logged.update((q["id"], _mapping(q, t)) for q in t["queries"])
            logged.update(saved["queries"])
        log = cls(state_dir, logged, size)
        log._cut()
        return log

    def _cut(self) -> None:
        if not self.size:
            self.path.unlink(missing_ok=True)
            return
        with open(self.path, "r+b") as f:
            f.truncate(self.size)

    def write(
        self,
        used_ids: set[str],
        queries: Mapping[str, dict],
        trees: Iterable[Mapping[str, Any]] = (),
    ) -> int:
        """Append the ids of ``used_ids`` the log lacks, each with its definition (from the
        running ``queries``, else from the node ``trees`` that still hold it), fsync, and
        return the log's size: the state about to be saved records it."""
        if len(used_ids) == len(self.logged):  # the log holds every id used, and only those
            return self.size
        new = used_ids - self.logged.keys()
        held: dict[str, dict] = {}
        if any(q not in queries for q in new):  # an id no running query has: a tree's
            held = {
                q["id"]: _mapping(q, t)
                for t in trees
                for q in t["queries"]
                if not isinstance(q, str)
            }
        defs = {q: queries.get(q) or held.get(q) for q in sorted(new)}
        lines = [json.dumps(d or {"id": q}, separators=(",", ":")) for q, d in defs.items()]
        data = ("\n".join(lines) + "\n").encode()
        with open(self.path, "ab") as f:
            f.seek(self.size)
            f.truncate()
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        self.size += len(data)
        self.logged.update(defs)
        return self.size

    def refer(self, trees: list[dict]) -> list[dict]:
        """``trees`` (a node's tree specs) with each query that equals its logged definition
        named by its id; others stay whole.  A tree whose spec was referred before only
        converts the queries it gained since (specs only ever grow at the end)."""
        out = []
        for t in trees:
            tid = str(t["id"])
            old = self._trees.get(tid)
            if old is not None and old[0] is t:
                out.append(old[1])
                continue
            qs = t["queries"]
            k = 0
            if old is not None and _extends(old[0]["queries"], qs):
                k = len(old[0]["queries"])
            head = old[1]["queries"][:k] if k else []
            form = dict(t, queries=head + [self._name(q) for q in qs[k:]])
            self._trees[tid] = (t, form)
            out.append(form)
        return out

    def _name(self, q: dict) -> str | dict:
        d = self.logged.get(q["id"])
        return q["id"] if d is not None and executor_query(d) == q else q


def _extends(old: list, new: list) -> bool:
    """``new`` begins with the very objects of ``old``."""
    return len(new) >= len(old) and all(map(operator.is_, old, new))


def load(state_dir: Path, state: dict) -> dict:
    """``state`` (``service.json`` as read) with what it names by id filled in from the log:
    the running ``queries`` as a dict, ``used_ids`` and each node's trees' queries whole, the
    form every state had before the log (a state without it is returned as it is).  Raises
    ``QueryLogError`` when the log is shorter than the state says or names an unknown id."""
    size = state.get("query_log")
    if size is None:
        return state
    path = Path(state_dir) / NAME
    try:
        with open(path, "rb") as f:
            data = f.read(int(size))
    except OSError as e:
        raise QueryLogError(f"{path}: cannot read the query log ({e.strerror})") from None
    if len(data) < int(size):
        raise QueryLogError(
            f"{path}: {len(data)} bytes, but the saved state needs {size}: the state "
            "directory is incomplete"
        )
    defs = {}
    for line in data.splitlines():
        q = json.loads(line)
        defs[q["id"]] = q
    try:
        queries = {i: defs[i] for i in state["queries"]}
        execs: dict[str, dict] = {}

        def whole(x):
            if not isinstance(x, str):
                return x
            e = execs.get(x)
            if e is None:
                e = execs[x] = executor_query(defs[x])
            return e

        nodes = {
            nid: {
                **v,
                "trees": [dict(t, queries=[whole(x) for x in t["queries"]]) for t in v["trees"]],
            }
            for nid, v in state["nodes"].items()
        }
    except KeyError as e:
        raise QueryLogError(f"{path}: query {e.args[0]!r} is not in the log") from None
    return {**state, "queries": queries, "used_ids": list(defs), "nodes": nodes}


def _mapping(q: Mapping[str, Any], tree: Mapping[str, Any]) -> dict:
    """A tree's query (no stream: the tree has one) as the service keeps it."""
    return query_mapping({**q, "stream": tree["stream"]})
