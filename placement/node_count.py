"""How many equal nodes a query set needs: the smallest count whose best plan fits.

A node fits when its planned cost is at most ``limit`` (an autoscaling policy's ``high`` x the
node capacity).  Why the placement decides it: a query may cost almost nothing when it weaves
into a running tree, or a whole tree when it cannot, so the count follows from the priced plan,
not from a per-query rate; and a count with a plan that fits is also the plan to run on it.

Two ways, one answer type (``NodeCount``):

- **exact** (at most ``exact_max_queries`` queries): the exact yardstick's subset table
  (``placement.exact.common.subset_table``: the cheapest partition into trees of every query
  subset, ``best(S)``) and a subset dynamic program over it: the fewest node sets, each with
  ``best(S) <= limit``, that partition the queries.  Exact because a node holding ``S`` best
  runs ``S``'s cheapest partition (the yardstick's argument, ``placement.exact.optimum``), and
  more nodes never hurt (a node may stay empty), so the fewest fitting sets is the count.
- **heuristic** (larger sets): for k = ``min_nodes``, ``min_nodes`` + 1, ... the distributed
  optimizers of ``optimizers`` plan the queries on k nodes of capacity ``limit``; the first k
  with a plan whose MaxCost fits is the count (the plan is its witness; the true smallest count
  may be lower, never higher).  The scan starts at the proven lower bound
  ``ceil(TotalCost lower bound / limit)`` (every tree costs at least its stream's rate, one
  tree per sharing key at least) when that is higher.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from placement.distributed import build_plan
from placement.plan import Plan
from placement.queries import Query, validate_unique
from placement.trees import CostModel

#: the optimizers the heuristic way tries, fastest first (WG_LS last: its local search is the
#: slowest and only runs when the greedy plans do not fit)
DEFAULT_OPTIMIZERS = ("WG_TN", "WG_I", "WG_LS")
#: exact up to this many queries (the subset table prices 2^n subsets: 10 queries ~ 1 K trees)
EXACT_MAX_QUERIES = 10
REL = 1e-9  # relative slack of "fits" (costs are float sums)


@dataclass(frozen=True)
class NodeCount:
    """``nodes``: the smallest count found whose plan fits (``max_nodes`` when none does);
    ``fits``: a plan on ``nodes`` nodes fits (False: not even ``max_nodes`` suffice, e.g. one
    tree alone costs more than ``limit``); ``plan``: that plan (the best MaxCost tried at
    ``max_nodes`` when none fits; None without queries); ``exact``: ``nodes`` is proven the
    smallest; ``method``: ``exact`` or the optimizer whose plan fitted; ``max_cost``: the best
    MaxCost found per node count tried."""

    nodes: int
    fits: bool
    plan: Plan | None
    exact: bool
    limit: float
    method: str
    max_cost: dict[int, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """JSON-ready, without the plan (events and status carry this)."""
        return {
            "nodes": self.nodes,
            "fits": self.fits,
            "exact": self.exact,
            "limit": self.limit,
            "method": self.method,
            "max_cost": {str(k): v for k, v in sorted(self.max_cost.items())},
        }


def fits(cost: float, limit: float) -> bool:
    return cost <= limit * (1 + REL)


def node_count(
    queries: Sequence[Query],
    model: CostModel,
    limit: float,
    min_nodes: int = 1,
    max_nodes: int = 64,
    optimizers: Sequence[str] = DEFAULT_OPTIMIZERS,
    exact_max_queries: int = EXACT_MAX_QUERIES,
) -> NodeCount:
    """The smallest node count in ``[min_nodes, max_nodes]`` whose plan of ``queries`` has
    every node's cost <= ``limit`` (module doc)."""
    if not limit > 0:
        raise ValueError(f"limit must be > 0, got {limit!r}")
    if not 1 <= min_nodes <= max_nodes:
        raise ValueError(f"need 1 <= min_nodes <= max_nodes, got {min_nodes}, {max_nodes}")
    qs = validate_unique(queries)
    if not qs:
        return NodeCount(min_nodes, True, None, True, limit, "exact")
    if len(qs) <= exact_max_queries:
        return _exact(qs, model, limit, min_nodes, max_nodes)
    return _heuristic(qs, model, limit, min_nodes, max_nodes, optimizers)


def total_lower_bound(queries: Sequence[Query], model: CostModel) -> float:
    """A proven lower bound of any plan's TotalCost: one tree per sharing key at least, and a
    tree costs at least its stream's rate (``cost = lambda + E * Omega``, both terms >= 0)."""
    keys = {q.share_key: q.stream for q in queries}
    return math.fsum(model.rate(s) for s in keys.values())


def _exact(qs: list[Query], model: CostModel, limit, min_nodes, max_nodes) -> NodeCount:
    from placement.exact.common import subset_table

    table = subset_table(qs, model, max_queries=len(qs))
    full = (1 << len(qs)) - 1
    none = len(qs) + 1  # more sets than queries: no partition fits
    fewest = [0] + [none] * full  # fewest fitting node sets partitioning each subset
    first = [0] * (full + 1)  # one node set of such a partition (with the lowest query)
    for m in range(1, full + 1):
        low = m & -m
        rest = m ^ low
        s = rest
        while True:  # node sets holding m's lowest query
            part = s | low
            if fits(table.best[part], limit) and fewest[m ^ part] + 1 < fewest[m]:
                fewest[m], first[m] = fewest[m ^ part] + 1, part
            if s == 0:
                break
            s = (s - 1) & rest
    need = fewest[full]
    if need == none or need > max_nodes:  # a query alone does not fit, or too many nodes
        return NodeCount(max_nodes, False, None, True, limit, "exact")
    sets, m = [], full
    while m:
        sets.append(first[m])
        m ^= first[m]
    k = max(need, min_nodes)
    node_trees = [[model.tree(table.queries_of(t)) for t in table.partition(s)] for s in sets]
    node_trees += [[] for _ in range(k - len(sets))]
    plan = build_plan("exact", model, node_trees, [limit] * k, qs)
    return NodeCount(k, True, plan, True, limit, "exact", {k: plan.max_cost})


def _heuristic(qs, model, limit, min_nodes, max_nodes, optimizers) -> NodeCount:
    from placement.optimizers import optimize

    if not optimizers:
        raise ValueError("optimizers: give at least one distributed optimizer")
    lo = max(min_nodes, math.ceil(total_lower_bound(qs, model) / limit * (1 - REL)))
    tried: dict[int, float] = {}
    best_plan, best_name = None, ""
    for k in range(min(lo, max_nodes), max_nodes + 1):
        best_plan = None
        for name in optimizers:
            plan = optimize(name, qs, model, [limit] * k)
            if best_plan is None or plan.max_cost < best_plan.max_cost:
                best_plan, best_name = plan, name
            if fits(plan.max_cost, limit):
                tried[k] = plan.max_cost
                return NodeCount(k, True, plan, False, limit, name, tried)
        tried[k] = best_plan.max_cost if best_plan is not None else math.inf
    return NodeCount(max_nodes, False, best_plan, False, limit, best_name, tried)
