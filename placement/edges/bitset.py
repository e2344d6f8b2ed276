"""BitSet counting (WeaveShare paper, section 8): mark every edge of the composite slide.

Linear in the composite slide, which grows like the lcm of the slides: the baseline that runs out
of memory first. Merges use the paper's probe optimisation: the tree with fewer edges enumerates
its edges in the new composite slide and probes the replicated bitmap of the other tree.
"""

from __future__ import annotations

from collections import OrderedDict
from fractions import Fraction
from math import lcm

import numpy as np

from placement.edges.base import Deadline, EdgeCountLimit, EdgeEngine, trivial_bounds
from placement.slicing import ResidueClass


class BitsetEngine(EdgeEngine):
    name = "bitset"

    def __init__(
        self,
        max_bytes: int = 1 << 30,
        time_budget_s: float | None = None,
        cache_bytes: int = 1 << 28,
    ):
        self.max_bytes = max_bytes
        self.time_budget_s = time_budget_s
        self.cache_bytes = cache_bytes
        self._cache: OrderedDict[frozenset, np.ndarray] = OrderedDict()
        self._cached_bytes = 0

    def _check(self, classes, period: int, deadline: Deadline | None = None) -> None:
        if period > self.max_bytes:
            lo, hi = trivial_bounds(classes)
            raise EdgeCountLimit(
                f"bitset: composite slide {period} exceeds the memory cap of {self.max_bytes} bytes",
                lo,
                hi,
            )
        if deadline is not None and deadline.expired():
            lo, hi = trivial_bounds(classes)
            raise EdgeCountLimit("bitset: time budget exceeded", lo, hi)

    def bitmap(self, classes: frozenset[ResidueClass]) -> np.ndarray:
        """The marked composite slide of a class set (cached, least recently used evicted)."""
        hit = self._cache.get(classes)
        if hit is not None:
            self._cache.move_to_end(classes)
            return hit
        period = lcm(*(m for m, _ in classes)) if classes else 1
        deadline = Deadline(self.time_budget_s)
        self._check(classes, period, deadline)
        bits = np.zeros(period, dtype=np.bool_)
        for m, r in classes:
            bits[r::m] = True
            self._check(classes, period, deadline)
        self._remember(classes, bits)
        return bits

    def _remember(self, key: frozenset, bits: np.ndarray) -> None:
        if bits.nbytes > self.cache_bytes:
            return
        self._cache[key] = bits
        self._cached_bytes += bits.nbytes
        while self._cached_bytes > self.cache_bytes:
            _, old = self._cache.popitem(last=False)
            self._cached_bytes -= old.nbytes

    def density(self, classes: frozenset[ResidueClass]) -> Fraction:
        if not classes:
            return Fraction(0)
        bits = self.bitmap(classes)
        return Fraction(int(np.count_nonzero(bits)), len(bits))

    def merged_density(self, x: frozenset[ResidueClass], y: frozenset[ResidueClass]) -> Fraction:
        if not x or not y:
            return self.density(x | y)
        bx, by = self.bitmap(x), self.bitmap(y)
        period = lcm(len(bx), len(by))
        self._check(x | y, period)
        nx = int(np.count_nonzero(bx)) * (period // len(bx))
        ny = int(np.count_nonzero(by)) * (period // len(by))
        # Probe: the tree with fewer edges lists its edges; the other is replicated and probed.
        (probe, probed) = (bx, by) if nx <= ny else (by, bx)
        probed_full = np.tile(probed, period // len(probed))
        edges = np.flatnonzero(probe)
        positions = (edges[None, :] + len(probe) * np.arange(period // len(probe))[:, None]).ravel()
        common = int(np.count_nonzero(probed_full[positions]))
        return Fraction(nx + ny - common, period)
