"""Exact edge-rate engines: the density of a union of residue classes.

Every engine answers the same question: given the residue classes of an execution tree, what
fraction of time positions are edges? That fraction is the tree's edge rate ``E`` (edges per time
unit); ``E * composite_slide`` is the integer edge count of one composite slide. Engines:

- ``bitset``: the WeaveShare paper's counting over the composite slide (with bitmap probing).
- ``f1``: the dissertation's Formula F1 (inclusion-exclusion with shifts and the GCD overlap check).
- ``fast`` (default): reductions, CRT components, sieves, merged inclusion-exclusion and
  conditioning on primes; exact, and honest (``EdgeCountLimit``) where its budget runs out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fractions import Fraction

from placement.edges.base import EdgeCount, EdgeCountLimit, EdgeEngine
from placement.queries import Query
from placement.slicing import composite_slide, tree_classes


def _fast(**options) -> EdgeEngine:
    from placement.edges.fast import FastEngine

    return FastEngine(**options)


def _f1(**options) -> EdgeEngine:
    from placement.edges.f1 import F1Engine

    return F1Engine(**options)


def _bitset(**options) -> EdgeEngine:
    from placement.edges.bitset import BitsetEngine

    return BitsetEngine(**options)


#: The edge engines by name, each a factory of new instances: the one registry config
#: validation (``placement.engine``), ``weaveplace plan --engine``, pricing and the benchmarks
#: read.  Why factories that import on call: ``fast`` loads numba kernels.
ENGINES: dict[str, Callable[..., EdgeEngine]] = {"fast": _fast, "f1": _f1, "bitset": _bitset}


def register_engine(name: str, factory: Callable[..., EdgeEngine]) -> None:
    if name in ENGINES:
        raise ValueError(f"edge engine {name!r} is already registered")
    ENGINES[name] = factory


def unregister_engine(name: str) -> None:
    ENGINES.pop(name, None)


def get_engine(name: str = "fast", **options) -> EdgeEngine:
    """A new engine instance by name (each instance keeps its own caches)."""
    factory = ENGINES.get(name)
    if factory is None:
        raise ValueError(f"unknown edge engine {name!r}; allowed: {', '.join(ENGINES)}")
    return factory(**options)


@dataclass(frozen=True)
class Weaveability:
    """How two trees' edges overlap in their joint composite slide."""

    composite_slide: int
    edges_x: int
    edges_y: int
    common: int

    @property
    def distinct(self) -> int:
        return self.edges_x + self.edges_y - self.common

    @property
    def value(self) -> Fraction:
        """Common edges over distinct edges (1 = perfect weave, 0 = nothing shared)."""
        return Fraction(self.common, self.distinct) if self.distinct else Fraction(1)


def weaveability(x: Iterable[Query], y: Iterable[Query], engine=None) -> Weaveability:
    """Weaveability of two trees, counted exactly with the given edge engine (default: fast)."""
    eng = engine or get_engine("fast")
    xs, ys = list(x), list(y)
    cs = composite_slide([q.slide for q in xs + ys])
    cx, cy = tree_classes(xs), tree_classes(ys)
    ex = eng.density(cx) * cs
    ey = eng.density(cy) * cs
    exy = eng.density(cx | cy) * cs
    return Weaveability(cs, int(ex), int(ey), int(ex + ey - exy))


__all__ = [
    "ENGINES",
    "EdgeCount",
    "EdgeCountLimit",
    "EdgeEngine",
    "Weaveability",
    "get_engine",
    "register_engine",
    "unregister_engine",
    "weaveability",
]
