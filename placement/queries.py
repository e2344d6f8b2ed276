"""Aggregate Continuous Queries (ACQs) and their validation.

An ACQ is ``(id, stream, aggregate, range r, slide s, kind)`` (docs/DESIGN.md s. 1). Queries are
small frozen value objects; a workload of a million of them is still cheap because slicing and
placement work on their residue classes, not on the objects.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: The aggregates a query may ask for: the one list that config validation (``sim.config``),
#: query construction, pricing (``placement.cost``) and execution (``executors.aggregates``
#: registers exactly these, checked at import; ``cluster.node.core``) share.
#: ``product`` (docs/DESIGN.md lists it as optional) is refused: as a monoid it would need a fourth
#: kernel op in every final-aggregation technique, it has no safe inverse (a zero in the window
#: makes division undefined, so neither subtract-on-evict nor SlickDeque Inv could run it) and
#: int64 products overflow after a few DEBS readings.  Until it is executed it is not accepted.
AGGREGATES = ("sum", "count", "min", "max", "avg", "stddev", "range")
#: Aggregates with an inverse (subtract-on-evict, SlickDeque Inv, Panes-Inv can run them).
INVERTIBLE_AGGREGATES = frozenset({"sum", "count", "avg", "stddev"})
#: Aggregates whose combine returns one of its arguments (SlickDeque Non-Inv can run them).
SELECTIVE_AGGREGATES = frozenset({"min", "max", "range"})
KINDS = ("time", "count")


class QueryError(ValueError):
    """A user mistake in a query definition; the message names the field and the value."""


@dataclass(frozen=True, slots=True)
class Query:
    """One ACQ. ``range`` and ``slide`` are integers in the stream's unit (ms or tuples)."""

    id: str
    range: int
    slide: int
    aggregate: str = "sum"
    stream: str = "s0"
    kind: str = "time"

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise QueryError(f"query id: must be a non-empty string, got {self.id!r}")
        for name in ("range", "slide"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise QueryError(
                    f"query {self.id!r}: {name} must be an integer >= 1, got {value!r}"
                )
        if self.aggregate not in AGGREGATES:
            raise QueryError(
                f"query {self.id!r}: unknown aggregate {self.aggregate!r}; "
                f"allowed: {', '.join(AGGREGATES)}"
            )
        if self.kind not in KINDS:
            raise QueryError(
                f"query {self.id!r}: unknown kind {self.kind!r}; allowed: {', '.join(KINDS)}"
            )
        if not isinstance(self.stream, str) or not self.stream:
            raise QueryError(f"query {self.id!r}: stream must be a non-empty string")

    @property
    def share_key(self) -> tuple[str, str, str]:
        """``(stream, aggregate, kind)``: only queries with equal keys can share a tree. Why
        the kind: a count window slices the tuple axis (positions), a time window the time
        axis; no slicing serves both."""
        return (self.stream, self.aggregate, self.kind)

    @property
    def fragment(self) -> int:
        """``r mod s``: the first Pairs fragment g1 (0 when the range is a multiple of the slide)."""
        return self.range % self.slide

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "stream": self.stream,
            "aggregate": self.aggregate,
            "range": self.range,
            "slide": self.slide,
            "kind": self.kind,
        }


def query_from_mapping(raw: Mapping[str, Any], position: int | None = None) -> Query:
    """Build a Query from a dict (YAML/JSON), with errors that say which entry is wrong."""
    where = f"queries[{position}]" if position is not None else "query"
    if not isinstance(raw, Mapping):
        raise QueryError(f"{where}: expected a mapping, got {type(raw).__name__}")
    if "id" not in raw or raw["id"] in (None, ""):
        raise QueryError(f"{where}: missing id")
    known = {"id", "stream", "aggregate", "range", "slide", "kind"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise QueryError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(known)}")
    for name in ("range", "slide"):
        if name not in raw:
            raise QueryError(f"{where} ({raw['id']!r}): missing {name}")
    return Query(
        id=str(raw["id"]),
        range=raw["range"],
        slide=raw["slide"],
        aggregate=raw.get("aggregate", "sum"),
        stream=raw.get("stream", "s0"),
        kind=raw.get("kind", "time"),
    )


def validate_unique(queries: Iterable[Query]) -> list[Query]:
    """Return the queries as a list, refusing duplicate ids (they would make answers ambiguous)."""
    out = list(queries)
    seen: set[str] = set()
    for q in out:
        if q.id in seen:
            raise QueryError(f"duplicate query id {q.id!r}: ids must be unique")
        seen.add(q.id)
    return out
