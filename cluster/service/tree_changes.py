"""From a fresh placement to changes of the running trees: pure, no Ray, no I/O.

Why its own module: how a plan computed from scratch (or by ``placement.replace``) maps onto
the trees that already run is the heart of the service's correctness (every query keeps
exactly one tree answering it from T on; no running tree is merged or lost), and a pure
function of (fresh plan, running trees) can be tested against an oracle on small inputs
without a cluster (``tests/cluster/service/test_tree_changes.py``).  ``cluster.service.service``
applies the result to the deployment and to its ``ServiceState``.

Two mappings:

* ``weave_in`` (``add-queries``): ``placement.replace.add_queries`` wove the new queries into
  running trees or put them in new ones; every other query stays where it is.
* ``replan`` (``rebalance``, drift): each fresh tree, the costliest first, takes the running
  tree of the same key with which it shares the most queries (ties: the smallest tree id) and
  that handed none of its queries off before, or becomes a new tree; queries whose tree changes are handed over at T (the old tree keeps
  their windows that start before T).  Running trees whose node changes are moves, the
  costliest first (the service makes at most ``placement.max_moves`` of them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

from cluster.service.state import RunningTree
from placement.plan import Plan


class MergedRunningTrees(RuntimeError):
    """The placement put queries of two running trees (or of a tree on another node) into one
    tree: it must only add queries, so this is a bug, not a user error."""


@dataclass(frozen=True)
class NewTree:
    """A tree to start at T on ``node`` with ``queries`` (in the fresh tree's order)."""

    tree_id: str
    node: str
    stream: str
    queries: tuple[str, ...]


@dataclass
class TreeChange:
    """What a running tree does at T: ``add`` queries it takes over, ``handoff`` queries it
    hands to another tree (it still answers their windows that start before T)."""

    add: list[str] = field(default_factory=list)
    handoff: list[str] = field(default_factory=list)

    def applied_to(self, tree: RunningTree) -> RunningTree:
        t = tree.copy()
        t.active = [q for q in t.active if q not in self.handoff] + self.add
        t.handed = [q for q in (t.handed or []) if q not in self.add] + self.handoff
        return t


@dataclass(frozen=True)
class GrownTree:
    """A running tree that ``add-queries`` wove new queries into."""

    tree_id: str
    node: str
    queries: tuple[str, ...]


@dataclass
class Additions:
    """``weave_in``'s result: trees grown, trees started, where each new query went
    (``{"tree", "node", "woven"}``, the reply's ``queries``) and the next tree number."""

    grown: list[GrownTree]
    new_trees: list[NewTree]
    where: dict[str, dict]
    next_tree: int

    def applied_to(self, trees: Mapping[str, RunningTree]) -> dict[str, RunningTree]:
        """The running trees with the additions made (a new dict; ``trees`` is unchanged)."""
        out = {tid: t.copy() for tid, t in trees.items()}
        for g in self.grown:
            out[g.tree_id].active += list(g.queries)
        for n in self.new_trees:
            out[n.tree_id] = RunningTree(n.node, n.stream, list(n.queries))
        return out


def weave_in(
    placed: Plan, new_ids: set[str], trees: Mapping[str, RunningTree], next_tree: int
) -> Additions:
    """Where ``placement.replace.add_queries`` put the queries ``new_ids`` (``placed``: the
    running plan with them added), as changes of the running ``trees``.

    A grown tree's other queries are one running tree's, in its order (a merge appends: the
    placement's trees were made from the running ones): found by their first query; the map
    of every running query to its tree (100,000 entries) is built only when that fails."""
    first = {t.active[0]: tid for tid, t in trees.items() if t.active}
    tree_of: dict[str, str] | None = None
    grown, new_trees, where = [], [], {}
    for node in placed.nodes:
        for t in node.trees:
            ids = list(map(attrgetter("id"), t.queries))
            if new_ids.isdisjoint(ids):
                continue
            add = tuple(q for q in ids if q in new_ids)
            old = [q for q in ids if q not in new_ids]
            if old:
                tid = first.get(old[0])
                if tid is None or old != trees[tid].active:
                    if tree_of is None:
                        tree_of = {}
                        for rid, rt in trees.items():
                            tree_of.update(dict.fromkeys(rt.active, rid))
                    tid = tree_of[old[0]]
                    if set(map(tree_of.__getitem__, old)) != {tid}:
                        raise MergedRunningTrees("internal: placement merged running trees")
                if trees[tid].node != node.id:
                    raise MergedRunningTrees("internal: placement merged running trees")
                grown.append(GrownTree(tid, node.id, add))
            else:
                tid = f"t{next_tree}"
                next_tree += 1
                new_trees.append(NewTree(tid, node.id, t.stream, add))
            for q in add:
                where[q] = {"tree": tid, "node": node.id, "woven": bool(old)}
    return Additions(grown, new_trees, where, next_tree)


@dataclass(frozen=True)
class Move:
    """A running tree whose node changes in the fresh plan; ``cost``: its fresh tree's."""

    tree_id: str
    node: str
    cost: float


@dataclass
class Replan:
    """``replan``'s result (see module doc).  ``handoffs``: query -> [old tree, new tree];
    ``changes``: per running tree that takes or hands off queries; ``moves``: the costliest
    first."""

    handoffs: dict[str, list[str]]
    changes: dict[str, TreeChange]
    new_trees: list[NewTree]
    moves: list[Move]
    next_tree: int

    def moves_within(self, max_moves: int) -> dict[str, str]:
        """The moves made with at most ``max_moves`` (tree id -> node): the costliest."""
        return {m.tree_id: m.node for m in self.moves[:max_moves]}

    def moves_skipped(self, max_moves: int) -> int:
        return max(0, len(self.moves) - max_moves)

    def applied_to(
        self, trees: Mapping[str, RunningTree], moves: Mapping[str, str]
    ) -> dict[str, RunningTree]:
        """The running trees after the re-plan with the ``moves`` made (a new dict; ``trees``
        is unchanged): hand-offs and take-overs, new trees (after the running ones), moves."""
        out = {tid: t.copy() for tid, t in trees.items()}
        for tid, change in self.changes.items():
            out[tid] = change.applied_to(out[tid])
        for n in self.new_trees:
            out[n.tree_id] = RunningTree(n.node, n.stream, list(n.queries))
        for tid, node in moves.items():
            out[tid].node = node
        return out


def replan(
    fresh: Plan, node_ids: Sequence[str], trees: Mapping[str, RunningTree], next_tree: int
) -> Replan:
    """Match ``fresh`` (its j-th node runs on ``node_ids[j]``) to the running ``trees``; every
    query of ``fresh`` must be active in one running tree."""
    running = {tid: set(t.active) for tid, t in trees.items() if t.active}
    tree_of = {q: tid for tid, ids in running.items() for q in ids}
    taken: set[str] = set()
    target_of: dict[str, str] = {}
    new_trees: list[NewTree] = []
    moves: list[Move] = []
    fresh_trees = sorted(
        ((t, node_ids[j]) for j, n in enumerate(fresh.nodes) for t in n.trees),
        key=lambda x: -x[0].cost,
    )
    for t, node in fresh_trees:
        ids = {q.id for q in t.queries}
        shared: dict[str, int] = {}
        for q in ids:
            r = tree_of[q]
            # a running tree cannot take back a query it handed off (a query id is used once
            # per tree: its old windows are still that tree's), so it cannot take this tree
            if r not in taken and not ids & set(trees[r].handed or ()):
                shared[r] = shared.get(r, 0) + 1
        if shared:
            tid = max(sorted(shared), key=lambda x: shared[x])
            taken.add(tid)
            if trees[tid].node != node:
                moves.append(Move(tid, node, t.cost))
        else:
            tid = f"t{next_tree}"
            next_tree += 1
            new_trees.append(NewTree(tid, node, t.stream, tuple(q.id for q in t.queries)))
        for q in ids:
            target_of[q] = tid
    handoffs: dict[str, list[str]] = {}
    changes: dict[str, TreeChange] = {}
    for q, old in tree_of.items():
        new = target_of[q]
        if new != old:
            handoffs[q] = [old, new]
            changes.setdefault(old, TreeChange()).handoff.append(q)
            if new in trees:
                changes.setdefault(new, TreeChange()).add.append(q)
    moves.sort(key=lambda m: -m.cost)
    return Replan(handoffs, changes, new_trees, moves, next_tree)
