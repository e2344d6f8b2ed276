"""Formula F1 (dissertation ch. 5): inclusion-exclusion over groups of classes ("shifts").

``edges = sum over non-empty compatible groups G of (-1)^(|G|+1) * LCM_n / lcm(G)``, where a group
is kept only if every pair passes the GCD overlap check (pairwise compatible residue classes are
jointly compatible, by the Chinese remainder theorem, so the check is applied incrementally as a
depth-first search extends a group). Exponential (2^n) in the number of distinct classes after the
dissertation's pre-processing (duplicates and multiples removed): a baseline.
"""

from __future__ import annotations

from fractions import Fraction
from math import lcm

from placement.edges.base import Deadline, EdgeCountLimit, EdgeEngine, trivial_bounds
from placement.slicing import ResidueClass, crt_merge


def remove_covered(classes: frozenset[ResidueClass]) -> list[ResidueClass]:
    """Dissertation pre-processing: drop duplicates and classes whose edges another class makes."""
    cls = sorted(classes)
    kept: list[ResidueClass] = []
    for m, r in cls:  # sorted by modulus, so coverers come first
        if not any(m % m2 == 0 and r % m2 == r2 for m2, r2 in kept):
            kept.append((m, r))
    return kept


class F1Engine(EdgeEngine):
    name = "f1"

    def __init__(self, time_budget_s: float | None = None, check_every: int = 4096):
        self.time_budget_s = time_budget_s
        self.check_every = check_every

    def density(self, classes: frozenset[ResidueClass]) -> Fraction:
        if not classes:
            return Fraction(0)
        cls = remove_covered(classes)
        deadline = Deadline(self.time_budget_s)

        def check(steps: int) -> None:
            if steps % self.check_every == 0 and deadline.expired():
                lo, hi = trivial_bounds(cls)
                raise EdgeCountLimit(
                    f"f1: time budget of {self.time_budget_s}s exceeded "
                    f"({len(cls)} classes, {steps} groups)",
                    lo,
                    hi,
                )

        return group_inclusion_exclusion(cls, check)


def group_inclusion_exclusion(cls: list[ResidueClass], check=None) -> Fraction:
    """Union density by signed sums over compatible groups, extended depth-first: a group is
    extended only while the GCD overlap check passes (CRT merge of the group's classes).
    ``check(steps)`` is called after every group (for budgets)."""
    period = lcm(*(m for m, _ in cls))
    total = 0
    steps = 0
    n = len(cls)
    stack = [(0, 1, 0, 1)]  # (next index, group modulus, group residue, sign)
    while stack:
        start, gm, gr, sign = stack.pop()
        for i in range(start, n):
            merged = crt_merge((gm, gr), cls[i])
            if merged is None:  # overlap check fails: the group has no common edge
                continue
            total += sign * (period // merged[0])
            stack.append((i + 1, merged[0], merged[1], -sign))
            steps += 1
            if check is not None:
                check(steps)
    return Fraction(total, period)
