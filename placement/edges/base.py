"""The contract shared by the edge engines."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from math import lcm

from placement.slicing import ResidueClass


class EdgeCountLimit(RuntimeError):
    """An engine could not count exactly within its time/memory budget.

    Carries a certified interval ``[lower, upper]`` for the density so that a caller can decide
    to use a bound knowingly; it is never substituted silently.
    """

    def __init__(self, message: str, lower: Fraction, upper: Fraction):
        super().__init__(message)
        self.lower = lower
        self.upper = upper


@dataclass(frozen=True)
class EdgeCount:
    """Edges in one composite slide; ``rate`` is the exact edge rate E."""

    edges: int
    composite_slide: int

    @property
    def rate(self) -> Fraction:
        return Fraction(self.edges, self.composite_slide)


def trivial_bounds(classes: Iterable[ResidueClass]) -> tuple[Fraction, Fraction]:
    """Cheap certified bounds on the union density: the largest class and the union bound."""
    cls = list(classes)
    if not cls:
        return Fraction(0), Fraction(0)
    lower = max(Fraction(1, m) for m, _ in cls)
    upper = min(Fraction(1), sum((Fraction(1, m) for m, _ in set(cls)), Fraction(0)))
    return lower, upper


class Deadline:
    """A time budget checked cheaply inside hot loops."""

    __slots__ = ("limit", "start")

    def __init__(self, seconds: float | None):
        self.start = time.monotonic()
        self.limit = None if seconds is None else self.start + seconds

    def expired(self) -> bool:
        return self.limit is not None and time.monotonic() > self.limit


class EdgeEngine(ABC):
    """Computes the exact density of a union of residue classes."""

    name: str = "engine"

    @abstractmethod
    def density(self, classes: frozenset[ResidueClass]) -> Fraction:
        """Fraction of positions covered by at least one class (the edge rate)."""

    def merged_density(self, x: frozenset[ResidueClass], y: frozenset[ResidueClass]) -> Fraction:
        """Density of ``x | y``; engines may reuse what they cached for ``x`` and ``y``."""
        return self.density(x | y)

    def count(self, classes: frozenset[ResidueClass]) -> EdgeCount:
        """Integer edges per composite slide (lcm of the moduli)."""
        if not classes:
            return EdgeCount(0, 1)
        period = lcm(*(m for m, _ in classes))
        d = self.density(classes)
        edges = d * period
        assert edges.denominator == 1, "density denominators divide the composite slide"
        return EdgeCount(int(edges), period)
