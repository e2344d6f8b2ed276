"""A normalised sliding-window query (ACQ) as the executors take it: id, aggregate, range,
slide, kind; ``normalize_query`` accepts the forms users and plans hand in (dicts, objects)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from operator import attrgetter

import numpy as np
import pydantic_core

from .aggregates import Aggregate, get_aggregate


@dataclass(frozen=True)
class QuerySpec:
    """A normalised ACQ: id, aggregate, range r, slide s, kind ('time' | 'count')."""

    id: str
    aggregate: Aggregate
    range: int
    slide: int
    kind: str = "time"

    def as_dict(self) -> dict:
        return {
            "id": self.id,
            "aggregate": self.aggregate.name,
            "range": self.range,
            "slide": self.slide,
            "kind": self.kind,
        }


_ID, _RANGE, _SLIDE = attrgetter("id"), attrgetter("range"), attrgetter("slide")
_AGG_NAME, _KIND = attrgetter("aggregate.name"), attrgetter("kind")


@dataclass(frozen=True)
class QueryColumns:
    """A list of ``QuerySpec`` s as columns, one entry per query in order: ``ids`` and
    ``aggregate`` names (object arrays), ``range`` and ``slide`` (int64), ``kind`` (object).

    Why: a churn tree starts a generation over every running query of a tree at each change
    (at 100,000 queries ~125 trees of ~730 queries a command).  With each generation reading
    its queries again, query by query, a node's change of 125 trees took 0.30-0.48 s; with the
    columns gathered from the lineage's (made once per query, ``executors.churn_tree``),
    0.15-0.26 s."""

    ids: np.ndarray
    range: np.ndarray
    slide: np.ndarray
    aggregate: np.ndarray
    kind: np.ndarray

    @classmethod
    def of(cls, queries: list[QuerySpec]) -> QueryColumns:
        n = len(queries)
        return cls(
            _objects(map(_ID, queries), n),
            np.fromiter(map(_RANGE, queries), np.int64, n),
            np.fromiter(map(_SLIDE, queries), np.int64, n),
            _objects(map(_AGG_NAME, queries), n),
            _objects(map(_KIND, queries), n),
        )

    def __len__(self) -> int:
        return int(self.range.shape[0])

    def first_of_each_aggregate(self) -> list[int]:
        """The index of the first query of each aggregate, in the order queries first use
        them (in C: a dict of the names read backwards keeps each name's first index)."""
        names = self.aggregate.tolist()
        first = dict(zip(reversed(names), range(len(names) - 1, -1, -1)))
        return sorted(first.values())

    def take(self, idx: np.ndarray) -> QueryColumns:
        """The columns of the queries at ``idx``, in that order."""
        return QueryColumns(*(getattr(self, f)[idx] for f in _COLUMNS))

    def concat(self, other: QueryColumns) -> QueryColumns:
        """These columns, then ``other`` 's."""
        return QueryColumns(
            *(np.concatenate([getattr(self, f), getattr(other, f)]) for f in _COLUMNS)
        )


_COLUMNS = ("ids", "range", "slide", "aggregate", "kind")


def _objects(items, n: int) -> np.ndarray:
    """``items`` (``n`` of them) as a one-dimensional object array (``np.array`` of a list of
    tuples or lists would make it two-dimensional; strings are never split)."""
    out = np.empty(n, dtype=object)
    out[:] = list(items)
    return out


def normalize_query(q) -> QuerySpec:
    """Accept a dict or any object with id/aggregate/range/slide[/kind] attributes."""
    if isinstance(q, QuerySpec):
        return q
    get = (
        (lambda k, d=None: q.get(k, d))
        if isinstance(q, dict)
        else (lambda k, d=None: getattr(q, k, d))
    )
    qid = get("id")
    if qid is None:
        raise ValueError(f"query {q!r} has no id")
    agg = get("aggregate")
    r, s = get("range"), get("slide")
    kind = get("kind", "time") or "time"
    for name, v in (("range", r), ("slide", s)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"query {qid!r}: {name} must be an integer >= 1, got {v!r}")
    kind = str(getattr(kind, "value", kind)).lower()
    if kind not in ("time", "count"):
        raise ValueError(f"query {qid!r}: kind must be 'time' or 'count', got {kind!r}")
    agg_name = getattr(agg, "value", agg)
    return QuerySpec(str(qid), get_aggregate(agg_name), int(r), int(s), kind)


def queries_json(queries: list[QuerySpec], cached: tuple[int, str] | None) -> tuple[int, str]:
    """``(len(queries), json.dumps([q.as_dict() for q in queries]))``, from ``cached`` (the
    same for a prefix of ``queries``, or None): a snapshot's query lists only grow by
    appending, so only the queries after the prefix are encoded.  Why: a node of 100,000
    queries spent ~0.6 s per checkpoint encoding them again."""
    n = len(queries)
    if cached is not None and cached[0] == n:
        return cached
    if cached is None or cached[0] == 0 or cached[0] > n:
        return n, json.dumps([q.as_dict() for q in queries])
    tail = json.dumps([q.as_dict() for q in queries[cached[0] :]])
    return n, cached[1][:-1] + ", " + tail[1:]


def meta_json(meta: dict, queries: list[QuerySpec], cached: tuple[int, str] | None):
    """``json.dumps({"queries": [q.as_dict() ...], **meta})`` (an equal JSON object) and the
    queries' encoding to keep for the next call (``queries_json``).  The rest (generations'
    domains: four integers per query) is encoded by pydantic-core's JSON writer, a few times
    faster than ``json`` on long integer lists (~0.1 s a checkpoint of 100,000 queries)."""
    cached = queries_json(queries, cached)
    rest = pydantic_core.to_json(meta, inf_nan_mode="constants").decode()
    return '{"queries": ' + cached[1] + (", " + rest[1:] if meta else "}"), cached
