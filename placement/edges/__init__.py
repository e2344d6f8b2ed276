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

from placement.edges.base import EdgeCount, EdgeCountLimit, EdgeEngine

ENGINES = ("fast", "f1", "bitset")


def get_engine(name: str = "fast", **options) -> EdgeEngine:
    """A new engine instance by name (each instance keeps its own caches)."""
    if name == "fast":
        from placement.edges.fast import FastEngine

        return FastEngine(**options)
    if name == "f1":
        from placement.edges.f1 import F1Engine

        return F1Engine(**options)
    if name == "bitset":
        from placement.edges.bitset import BitsetEngine

        return BitsetEngine(**options)
    raise ValueError(f"unknown edge engine {name!r}; allowed: {', '.join(ENGINES)}")


__all__ = ["ENGINES", "EdgeCount", "EdgeCountLimit", "EdgeEngine", "get_engine"]
