"""Execution trees and the cost model that prices them.

A tree groups queries of one stream, one aggregate and one window kind that share a slicing.
Its windows share one *axis*: time (``kind: time``) or the 0-based tuple positions of its
stream (``kind: count``); a count window and a time window can never share a slicing, so they
are never woven (``Tree.key``). Edges, composite slide, ``E`` and Omega (``nP_i = r_i * E``)
are computed on the tree's axis, which keeps them exact integers/fractions; the cost is in
operations per time unit: ``lambda + E * scale * Omega`` with ``scale`` the axis units per time
unit (1 for time, the stream's rate lambda for count: ``E`` edges per tuple times lambda tuples
per time unit). The model caches nothing itself: the engine caches per class set, so
re-pricing a merge reuses its parts.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from math import lcm

from placement.cost import (
    check_slicing,
    is_additive,
    merged_omega,
    omega,
    omega_floor,
    resolve_technique,
    tree_cost,
)
from placement.edges import EdgeEngine, get_engine
from placement.queries import Query
from placement.slicing import ResidueClass, query_classes

_uids = itertools.count()


@dataclass(eq=False)
class Tree:
    """One execution tree. ``uid`` orders trees deterministically (creation order)."""

    stream: str
    aggregate: str
    queries: list[Query]
    classes: frozenset[ResidueClass]
    windows: frozenset[tuple[int, int]]
    composite_slide: int
    edge_rate: Fraction
    omega: float
    cost: float
    technique: str
    slicing: str = "pairs"
    kind: str = "time"  # the axis of its windows: "time" or "count" (tuple positions)
    scale: float = 1.0  # axis units per time unit: 1 (time), the stream's rate (count)
    uid: int = field(default_factory=lambda: next(_uids))

    @property
    def key(self) -> tuple[str, str, str]:
        """Trees can only be woven with trees of the same key (stream, aggregate, kind)."""
        return (self.stream, self.aggregate, self.kind)

    @property
    def time_edge_rate(self) -> float:
        """Edges per time unit (``edge_rate`` is per unit of the tree's axis)."""
        return float(self.edge_rate) * self.scale

    @property
    def edges(self) -> int:
        """Edges in one composite slide (an exact integer)."""
        return int(self.edge_rate * self.composite_slide)


class CostModel:
    """Prices trees for one IE technique, stream rates, edge engine and slicing.

    ``slicing``: ``"pairs"`` (default; edges at window starts and ends) or ``"cutty"`` (edges at
    window starts only; ``placement.cost`` says how Omega counts the open-partial combines).
    A tree's ``classes`` are the classes of its slicing, so merges and engines need no change.
    """

    def __init__(
        self,
        technique: str = "panes",
        rates: Mapping[str, float] | float = 1.0,
        engine: EdgeEngine | str = "fast",
        slicing: str = "pairs",
    ):
        resolve_technique(technique)  # validates the name
        self.technique = technique
        self.rates = rates
        self.engine = get_engine(engine) if isinstance(engine, str) else engine
        self.slicing = check_slicing(slicing)
        self._units: dict[tuple[Query, float], Tree] = {}  # ``tree([q])``'s priced parts

    def query_classes(self, q: Query) -> frozenset[ResidueClass]:
        """The residue classes one query contributes under this model's slicing."""
        if self.slicing == "pairs":
            return query_classes(q)
        return frozenset({(q.slide, 0)})

    def omega(self, technique: str, windows, edge_rate) -> float:
        """``placement.cost.omega`` under this model's slicing."""
        return omega(technique, windows, edge_rate, self.slicing)

    def rate(self, stream: str) -> float:
        # ``type(...) is dict`` first: the ABC check alone was a tenth of pricing a merge
        if type(self.rates) is dict or isinstance(self.rates, Mapping):
            if stream not in self.rates:
                raise KeyError(f"no input rate given for stream {stream!r}")
            return float(self.rates[stream])
        return float(self.rates)

    def scale(self, stream: str, kind: str) -> float:
        """Axis units per time unit of a tree of ``kind`` on ``stream``: 1 for time windows,
        the stream's rate for count windows (their axis is the tuple positions)."""
        return self.rate(stream) if kind == "count" else 1.0

    def tree_from_parts(
        self, stream, aggregate, queries, classes, windows, cs, e, kind: str = "time"
    ) -> Tree:
        """The priced tree of ``queries`` from slicing parts the caller already has (their
        residue ``classes``, ``windows``, composite slide ``cs`` and edges per time unit
        ``e``), so a search that derives them incrementally does not slice the queries again."""
        tech = resolve_technique(self.technique, [aggregate])
        om = omega(tech, windows, e, self.slicing)
        sc = self.scale(stream, kind)
        return Tree(
            stream,
            aggregate,
            queries,
            classes,
            windows,
            cs,
            e,
            om,
            tree_cost(self.rate(stream), e, om, sc),
            tech,
            self.slicing,
            kind,
            sc,
        )

    def tree(
        self, queries: Iterable[Query], classes: frozenset[ResidueClass] | None = None
    ) -> Tree:
        """The tree of ``queries``; ``classes``: the union of their residue classes when the
        caller already has it (``initial_trees`` groups queries by it)."""
        qs = list(queries)
        if len(qs) == 1 and classes is None:
            return self._unit(qs[0])
        return self._tree(qs, classes)

    def _unit(self, q: Query) -> Tree:
        """``tree([q])``: its parts are priced once per query and stream rate (every optimizer
        of a workload starts from one tree per query, for each node layout); the tree is a new
        one each time (its own uid: creation order breaks ties)."""
        k = (q, self.rate(q.stream))
        t = self._units.get(k)
        if t is None:
            t = self._units[k] = self._tree([q], None)
            return t
        return Tree(
            t.stream,
            t.aggregate,
            [q],
            t.classes,
            t.windows,
            t.composite_slide,
            t.edge_rate,
            t.omega,
            t.cost,
            t.technique,
            t.slicing,
            t.kind,
            t.scale,
        )

    def _tree(self, qs: list[Query], classes: frozenset[ResidueClass] | None) -> Tree:
        if not qs:
            raise ValueError("a tree needs at least one query")
        stream, aggregate, kind = qs[0].share_key
        for q in qs:
            if q.share_key != (stream, aggregate, kind):
                raise ValueError(
                    f"query {q.id!r} ({q.stream}/{q.aggregate}/{q.kind}) cannot share a tree "
                    f"with {stream}/{aggregate}/{kind}: trees hold one stream, one aggregate "
                    f"and one window kind"
                )
        if classes is None:
            union: set[ResidueClass] = set()
            for q in qs:
                union |= self.query_classes(q)
            classes = frozenset(union)
        cls = classes
        e = self.engine.density(cls)
        windows = frozenset((q.range, q.slide) for q in qs)
        cs = lcm(*(q.slide for q in qs))
        return self.tree_from_parts(stream, aggregate, qs, cls, windows, cs, e, kind)

    def merged_price(self, x: Tree, y: Tree) -> tuple[Fraction, float, float]:
        """``(E, Omega, cost)`` of weaving x and y, without building the merged tree."""
        if x.key != y.key:
            raise ValueError(f"cannot weave trees of {x.key} and {y.key}")
        if x.slicing != self.slicing or y.slicing != self.slicing:
            raise ValueError(
                f"cannot weave {x.slicing} and {y.slicing} trees with a {self.slicing} cost model"
            )
        e = self.engine.merged_density(x.classes, y.classes)
        om = merged_omega(x.technique, x.windows, x.omega, y.windows, y.omega, e, self.slicing)
        return e, om, tree_cost(self.rate(x.stream), e, om, x.scale)

    def merge(self, x: Tree, y: Tree) -> Tree:
        e, om, cost = self.merged_price(x, y)
        return Tree(
            x.stream,
            x.aggregate,
            x.queries + y.queries,
            x.classes | y.classes,
            x.windows | y.windows,
            lcm(x.composite_slide, y.composite_slide),
            e,
            om,
            cost,
            x.technique,
            self.slicing,
            x.kind,
            x.scale,
        )

    def benefit(self, x: Tree, y: Tree) -> float:
        """Cost saved by weaving x and y (negative: weaving costs more)."""
        return x.cost + y.cost - self.merged_price(x, y)[2]

    def omega_floor(self, t: Tree) -> float:
        """A lower bound of Omega for any merge containing ``t`` (``cost.omega_floor``)."""
        return omega_floor(t.technique, t.windows, t.omega, t.slicing)

    def omega_is_additive(self) -> bool:
        """Whether Omega of a merge is the sum of its parts' Omegas for disjoint windows
        (``placement.cost.Pricing.items``; under Cutty FlatFIT's open-partial term is not)."""
        return is_additive(self.technique, self.slicing)
