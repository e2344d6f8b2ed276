"""The cheapest partition of a query set from a subset DP's split table.

Why a module of its own: both exact solvers keep ``best(S)`` (cheapest partition of query set ``S``
into trees) with ``split[S]`` = one part of a best split (0: ``S`` is one tree), the subset table of
``placement.exact.optimum`` as a list, the node-set family of ``placement.exact.sets`` as a dict;
both unfold it the same way, and neither may import the other at module level.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def unfold(split: Sequence[int] | Mapping[int, int], mask: int) -> list[int]:
    """The tree masks of the best partition of ``mask`` (sorted; empty for ``mask == 0``)."""
    out, stack = [], [mask]
    while stack:
        m = stack.pop()
        if m == 0:
            continue
        s = split[m]
        if s == 0:
            out.append(m)
        else:
            stack += [s, m ^ s]
    return sorted(out)
