"""Dynamic re-placement: adapt a running plan to a changed cluster or workload, moving few trees.

Moving a tree between nodes costs state transfer and a pause, so every change here keeps the
trees that need not move where they are and reports how many moved. Rules (each a local, greedy
step in the spirit of To Lowest / Inserted):

- **remove a node**: its trees go, most expensive first, to the least-utilised survivor, woven into
  that node's best same-key tree when that costs less than keeping it separate (WG_TL's rule).
  Moves = the removed node's trees.
- **add a node**: repeatedly move the tree from the most utilised node to the new node that lowers
  the MaxCost the most; stop when no single move lowers it (nodes tied at the peak: a move that
  leaves fewer of them there counts, undone if no later move lowers the MaxCost). Moves = trees
  moved.
- **add queries**: each new query's tree is inserted with WG_I's rule (weave into the node whose
  new cost is smallest, or a separate tree on the least-loaded node, whichever raises TotalCost
  less). No existing tree moves.
- **remove queries**: re-price the trees that lose queries, drop empty ones. No tree moves.

Utilisation is cost / capacity with capacities, cost otherwise (as ``placement.distributed``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from operator import attrgetter

from placement.distributed import NodeState, inserted, make_units
from placement.plan import Node, Plan
from placement.queries import Query
from placement.trees import CostModel, Tree


@dataclass
class Replacement:
    """A new plan, how many trees changed node, and the cost change it brought."""

    plan: Plan
    moved: int
    total_before: float
    max_before: float

    @property
    def total_change(self) -> float:
        return self.plan.total_cost - self.total_before

    @property
    def max_change(self) -> float:
        return self.plan.max_cost - self.max_before


def _state(plan: Plan) -> NodeState:
    st = NodeState([n.capacity for n in plan.nodes])
    for j, n in enumerate(plan.nodes):
        for t in n.trees:
            st.add(j, t)
    return st


def _plan(old: Plan, st: NodeState, ids: list[str]) -> Plan:
    nodes = [Node(ids[j], list(st.trees[j]), st.caps[j]) for j in range(st.n)]
    rates = dict(old.rates)
    return Plan(old.optimizer, old.ie, nodes, rates)


def remove_node(plan: Plan, node_id: str, model: CostModel) -> Replacement:
    """Re-place the trees of a lost node on the survivors."""
    ids = [n.id for n in plan.nodes]
    if node_id not in ids:
        raise KeyError(f"unknown node {node_id!r}; nodes: {ids}")
    if len(ids) == 1:
        raise ValueError("cannot remove the only node of a plan")
    gone = plan.nodes[ids.index(node_id)]
    survivors = Plan(
        plan.optimizer, plan.ie, [n for n in plan.nodes if n.id != node_id], plan.rates
    )
    st = _state(survivors)
    for u in sorted(gone.trees, key=lambda t: -t.cost):
        j = st.min_node()
        same = st.same_key(j, u.key)
        if same:
            t = min(same, key=lambda x: x.cost)
            woven = model.merge(t, u)
            if woven.cost - t.cost <= u.cost:
                st.replace(j, t, woven)
                continue
        st.add(j, u)
    return Replacement(
        _plan(plan, st, [n.id for n in survivors.nodes]),
        len(gone.trees),
        plan.total_cost,
        plan.max_cost,
    )


def add_node(plan: Plan, node_id: str, capacity: float | None = None) -> Replacement:
    """Offload trees to a new node while single moves lower the MaxCost.

    Each step moves the tree of the most utilised node whose move gives the lowest peak
    utilisation.  When nodes tie at the peak no single move can lower it (the other tied nodes
    stay there), so a move that keeps the peak but leaves fewer nodes at it is taken too; the
    moves after the last one that lowered the MaxCost are undone (a move that does not lower
    it only costs a state transfer).  Trees move whole: TotalCost does not change."""
    ids = [n.id for n in plan.nodes]
    if node_id in ids:
        raise ValueError(f"node {node_id!r} already exists")
    caps = [n.capacity for n in plan.nodes]
    if (capacity is None) != all(c is None for c in caps):
        raise ValueError("give a capacity for the new node exactly when the others have one")
    grown = Plan(
        plan.optimizer, plan.ie, list(plan.nodes) + [Node(node_id, [], capacity)], plan.rates
    )
    st = _state(grown)
    new = st.n - 1
    eps = 1e-12

    def key(util: list[float]) -> tuple[float, int]:
        peak = max(util)
        return peak, sum(1 for u in util if u >= peak - eps)

    def better(a: tuple[float, int], b: tuple[float, int]) -> bool:
        return a[0] < b[0] - eps or (a[0] <= b[0] + eps and a[1] < b[1])

    moved = 0
    best = (
        max(st.util_key(j)[0] for j in range(st.n)),
        0,
        [list(ts) for ts in st.trees],
        list(st.load),
    )
    for _ in range(len(grown.trees) * st.n):  # each move lowers key(); a cap all the same
        util = [st.util_key(j)[0] for j in range(st.n)]
        src = max(range(st.n - 1), key=lambda j: (util[j], -j))
        current = key(util)
        pick = None
        for t in st.trees[src]:
            after = list(util)
            after[src] = (st.load[src] - t.cost) / st.capacity(src)
            after[new] = (st.load[new] + t.cost) / st.capacity(new)
            k = key(after)
            if better(k, current) and (pick is None or better(k, pick[0])):
                pick = (k, t)
        if pick is None:
            break
        t = pick[1]
        st.remove(src, t)
        st.add(new, t)
        moved += 1
        if pick[0][0] < best[0] - eps:
            best = (pick[0][0], moved, [list(ts) for ts in st.trees], list(st.load))
    _, moved, trees, load = best
    st.reset(trees, load)
    return Replacement(_plan(grown, st, ids + [node_id]), moved, plan.total_cost, plan.max_cost)


def add_queries(plan: Plan, queries: Iterable[Query], model: CostModel) -> Replacement:
    """Insert new queries without moving any existing tree (WG_I's insertion rule)."""
    new = list(queries)
    dup = sorted({q.id for q in new}.intersection(map(attrgetter("id"), plan.queries)))
    if dup:
        raise ValueError(f"query ids already in the plan: {dup}")
    st = _state(plan)
    units = make_units(new, model, preprocess=True)
    # Existing nodes are already seeded, so every unit goes through the insertion rule, in
    # one call: its merge bounds keep each tree's items between units (a new bound per unit
    # re-read every same-key tree's windows: ~1.5 s of 1,000 queries added to 100,000).
    inserted(units, model, st, "WG", seed=0, init="none")
    return Replacement(
        _plan(plan, st, [n.id for n in plan.nodes]), 0, plan.total_cost, plan.max_cost
    )


def remove_queries(plan: Plan, ids: Iterable[str], model: CostModel) -> Replacement:
    """Drop queries; re-price the trees that lost some; no tree changes node."""
    gone = set(ids)
    missing = gone - {q.id for q in plan.queries}
    if missing:
        raise KeyError(f"unknown query id(s): {sorted(missing)}")
    nodes = []
    for n in plan.nodes:
        trees: list[Tree] = []
        for t in n.trees:
            rest = [q for q in t.queries if q.id not in gone]
            if len(rest) == len(t.queries):
                trees.append(t)
            elif rest:
                trees.append(model.tree(rest))
        nodes.append(Node(n.id, trees, n.capacity))
    return Replacement(
        Plan(plan.optimizer, plan.ie, nodes, dict(plan.rates)), 0, plan.total_cost, plan.max_cost
    )
