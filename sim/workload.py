"""Workload generators of the papers, seeded and reproducible.

Parameters (dissertation Table 5 / WeaveShare section 6): ``qnum`` queries on one stream of rate
``rate`` (lambda); slides drawn by a Zipf law over a candidate set, where a larger ``zskew`` favours
*larger* slides (rank 1 is the largest candidate; ``zskew = 0`` is uniform); the range is an
overlap factor drawn uniformly from ``[1.0, omax]`` times the slide, rounded to the nearest integer
(so ranges are multiples of the slide only by chance: queries usually have two fragments).

Candidate slides by ``gen``:
- ``nrm``: any slide in ``1..smax``;
- ``div``: prime slides only (their lcm is their product: the hardest case for sharing);
- ``factors``: the divisors of ``smax`` (dissertation chapter 7's variant).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from placement.messages import short_repr
from placement.queries import Query
from placement.slicing import divisors

GENERATORS = ("nrm", "div", "factors")


def primes_up_to(n: int) -> np.ndarray:
    """Sieve of Eratosthenes."""
    if n < 2:
        return np.zeros(0, dtype=np.int64)
    is_p = np.ones(n + 1, dtype=np.bool_)
    is_p[:2] = False
    for p in range(2, int(n**0.5) + 1):
        if is_p[p]:
            is_p[p * p :: p] = False
    return np.flatnonzero(is_p).astype(np.int64)


def candidate_slides(smax: int, gen: str) -> np.ndarray:
    if smax < 1:
        raise ValueError(f"smax must be >= 1, got {smax}")
    if gen == "nrm":
        return np.arange(1, smax + 1, dtype=np.int64)
    if gen == "div":
        primes = primes_up_to(smax)
        if len(primes) == 0:
            raise ValueError(f"gen 'div' needs smax >= 2 (a prime slide), got {smax}")
        return primes
    if gen == "factors":
        return np.array(divisors(smax), dtype=np.int64)
    raise ValueError(f"unknown generator {short_repr(gen)}; allowed: {', '.join(GENERATORS)}")


@dataclass(frozen=True)
class WorkloadSpec:
    qnum: int
    smax: int
    rate: float
    zskew: float = 0.0
    omax: float = 1.0
    gen: str = "nrm"
    seed: int = 0
    stream: str = "s0"
    aggregate: str = "sum"

    def __post_init__(self):
        for name in ("qnum", "smax", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise ValueError(f"{name} must be an integer, got {short_repr(value)}")
        for name in ("rate", "zskew", "omax"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float, np.number))
                or not np.isfinite(value)
            ):
                raise ValueError(f"{name} must be a finite number, got {short_repr(value)}")
        if self.gen not in GENERATORS:
            raise ValueError(
                f"unknown generator {short_repr(self.gen)}; allowed: {', '.join(GENERATORS)}"
            )
        if self.smax < 1:
            raise ValueError(f"smax must be >= 1, got {self.smax}")
        if self.qnum < 1:
            raise ValueError(f"qnum must be >= 1, got {self.qnum}")
        if self.omax < 1:
            raise ValueError(f"omax must be >= 1, got {self.omax}")
        if self.zskew < 0:
            raise ValueError(f"zskew must be >= 0, got {self.zskew}")
        if self.rate <= 0:
            raise ValueError(f"rate (lambda) must be > 0, got {self.rate}")


def generate_arrays(spec: WorkloadSpec) -> tuple[np.ndarray, np.ndarray]:
    """Ranges and slides as int64 arrays (fast path for very large workloads)."""
    rng = np.random.default_rng(spec.seed)
    cands = candidate_slides(spec.smax, spec.gen)
    ranks = np.arange(len(cands), 0, -1, dtype=np.float64)  # largest slide has rank 1
    weights = ranks ** (-float(spec.zskew))
    probs = weights / weights.sum()
    slides = rng.choice(cands, size=spec.qnum, p=probs)
    overlap = rng.uniform(1.0, float(spec.omax), size=spec.qnum)
    ranges = np.maximum(np.rint(overlap * slides), 1).astype(np.int64)
    return ranges, slides.astype(np.int64)


def generate(spec: WorkloadSpec) -> list[Query]:
    """The workload as Query objects with ids ``q0 .. q{n-1}``."""
    ranges, slides = generate_arrays(spec)
    return [
        Query(f"q{i}", int(r), int(s), spec.aggregate, spec.stream)
        for i, (r, s) in enumerate(zip(ranges.tolist(), slides.tolist()))
    ]
