"""Exact polynomial special cases of single-node sharing (paper 000, Appendix).

Both minimise the TotalCost of a single-node plan (a partition of the queries into trees, cost
``sum lambda + E_t Omega_t``) under a structural restriction:

- ``pairing_optimum``: **trees of at most two queries.** A plan is a matching; its cost is the
  no-share cost minus the summed benefits of the matched pairs, so the optimum is a maximum-weight
  matching on the graph with an edge per pair of positive benefit (paper: Gabow, O(n^3); here
  networkx ``max_weight_matching``). Pairs of different (stream, aggregate, kind) cannot share.
- ``contiguous_optimum``: **trees are contiguous runs of an ordered sequence** (e.g. ordered by
  expiration date). Right-to-left DP ``c_i = min_{i <= j <= n} cost(q_i..q_j) + c_{j+1}`` with
  ``c_{n+1} = 0``; ``pi_i`` stores the argmin right boundary, so after the first k queries expire
  the optimal plan of the rest is ``c_{k+1}`` read back through ``pi`` without recomputation.
  O(n^2) tree pricings. Runs mixing keys are not trees (infinite cost).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import networkx as nx

from placement.queries import Query, validate_unique
from placement.trees import CostModel, Tree

EPS = 1e-12


def pairing_optimum(queries: Sequence[Query], model: CostModel) -> list[Tree]:
    """Minimum-cost plan whose trees hold at most two queries (maximum-weight matching)."""
    qs = validate_unique(queries)
    singles = [model.tree([q]) for q in qs]
    g = nx.Graph()
    g.add_nodes_from(range(len(qs)))
    for i in range(len(qs)):
        for j in range(i + 1, len(qs)):
            if singles[i].key == singles[j].key:
                b = model.benefit(singles[i], singles[j])
                if b > EPS:
                    g.add_edge(i, j, weight=b)
    matching = nx.max_weight_matching(g, maxcardinality=False)
    paired = set()
    trees = []
    for i, j in sorted(tuple(sorted(e)) for e in matching):
        trees.append(model.merge(singles[i], singles[j]))
        paired |= {i, j}
    trees += [singles[i] for i in range(len(qs)) if i not in paired]
    return trees


@dataclass
class ContiguousPlan:
    """``cost[i]``: optimal cost of queries ``i..n-1``; ``right[i]``: last index of the tree that
    starts at ``i`` in that optimum (the paper's pi, 0-based)."""

    queries: list[Query]
    cost: list[float]
    right: list[int]

    def groups(self, start: int = 0) -> list[list[Query]]:
        """Optimal contiguous trees of the suffix ``start..`` (after ``start`` queries expired)."""
        out, i = [], start
        while i < len(self.queries):
            j = self.right[i]
            out.append(self.queries[i : j + 1])
            i = j + 1
        return out

    def trees(self, model: CostModel, start: int = 0) -> list[Tree]:
        return [model.tree(g) for g in self.groups(start)]


def contiguous_optimum(queries: Sequence[Query], model: CostModel) -> ContiguousPlan:
    """Minimum-cost plan in which every tree is a contiguous run of the given order (DP above)."""
    qs = validate_unique(queries)
    n = len(qs)
    cost = [0.0] * (n + 1)
    right = [0] * n
    for i in range(n - 1, -1, -1):
        best, arg = math.inf, i
        tree = None
        for j in range(i, n):
            if qs[j].share_key != qs[i].share_key:
                break  # a run cannot cross a key change
            tree = model.tree([qs[j]]) if tree is None else model.merge(tree, model.tree([qs[j]]))
            v = tree.cost + cost[j + 1]
            if v < best - EPS * max(1.0, abs(v)):
                best, arg = v, j
        cost[i], right[i] = best, arg
    return ContiguousPlan(qs, cost[:n] + [0.0], right)
