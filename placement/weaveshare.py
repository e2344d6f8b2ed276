"""Single-node sharing optimizers: WeaveShare, Insert-then-Weave, No Share, Shared, and
Incremental WeaveShare (WeaveShare paper, sections 5-8).

WeaveShare starts from one tree per query (or per group of identical slicing, see
``initial_trees``) and repeatedly weaves the pair of trees with the largest cost reduction until no
merge reduces the cost. The paper's *cost lookup table* is a max-heap of pair benefits: only the
row of the newly merged tree is computed per iteration. Rows are pruned with a certified upper
bound on the benefit (never a heuristic), so the plan is exactly the naive algorithm's plan, with
ties broken by tree creation order; it does not depend on the edge engine. For Panes and FlatFIT
(additive Omega) the lazy table is ``placement.lazy_table.table`` (compiled rows, exact benefits of
single-modulus pairs); ``_Table`` here serves the eager strategy and the other techniques.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from placement.cost import items_of
from placement.lazy_table.table import KernelTable
from placement.queries import Query
from placement.trees import CostModel, Tree

#: ticked with counts of work done; a weave ticks its trees (one per merge, the trees left at
#: the end), ``weaveshare`` and ``insert_then_weave`` their queries, in total
Progress = Callable[[int], None] | None
TICK = 1024  # merges between two ticks of a weave's progress (a callback per merge costs)
EPS = 1e-12  # benefits within rounding noise of zero are not merges
PAD = 4  # trees with at most this many classes keep them in arrays for vectorised bounds
ITEMS = 8  # ... and with at most this many Omega items, those (``_Table._omega_bound``)


def unit_key(q: Query) -> tuple:
    """What a unit of perfectly woven queries shares: stream, aggregate, window kind, slide and
    ``range mod slide`` (one-to-one with its residue classes ``{(s, 0), (s, r mod s)}``)."""
    return (*q.share_key, q.slide, q.range % q.slide)


def initial_trees(
    queries: Iterable[Query], model: CostModel, preprocess: bool = True
) -> list[Tree]:
    """One tree per query, or with ``preprocess`` one per group of identical slicing.

    Queries with the same stream, aggregate, window kind and residue classes weave perfectly
    (no new edges, one tuple pass saved), so grouping them first is always a cost win
    (dissertation 6.5 note, applied to equal edge sets rather than equal slides, which is what
    makes it exact).
    """
    qs = list(queries)
    if not preprocess:
        return [model.tree([q]) for q in qs]
    # Keyed by ``unit_key``: the same groups in the same order as by classes, no frozenset each
    groups: dict[tuple, list[Query]] = defaultdict(list)
    for q in qs:
        groups[unit_key(q)].append(q)
    return [model.tree(g, classes=model.query_classes(g[0])) for g in groups.values()]


class _Table:
    """The cost lookup table: alive trees in slots, pair benefits in a lazy max-heap.

    Used for the paper's eager strategy (every technique) and for lazy WeaveShare when Omega is
    not additive (FlatFAT, SlickDeque); additive Omega's lazy table is
    ``placement.lazy_table.table.KernelTable``. Rows are pruned with certified upper bounds on the
    benefit: ``E_xy >= max(E_x, E_y)`` and ``Omega_xy >= max(floor_x, floor_y)`` with the
    model's ``omega_floor`` (Omega itself where it grows with the window set; ``2 * #unique
    ranges`` for SlickDeque Inv, whose exact Omega can shrink on a merge; 0 for FlatFAT), and
    the common-edge density bounded by pairs of classes (``1/lcm`` per compatible pair).
    """

    def __init__(
        self, model: CostModel, trees: Sequence[Tree], eager: bool = False, floor: float = EPS
    ):
        self.model = model
        self.floor = floor  # merges with a benefit <= floor are never candidates
        self.eager = eager
        cap = max(16, 2 * len(trees))
        self.trees: list[Tree | None] = []
        self.e = np.zeros(cap)
        self.om = np.zeros(cap)
        self.omf = np.zeros(cap)  # omega floors
        self.cost = np.zeros(cap)
        self.key = np.zeros(cap, dtype=np.int64)
        self.alive = np.zeros(cap, dtype=np.bool_)
        self.cm = np.zeros((cap, PAD), dtype=np.int64)  # classes of small trees, 0 = none
        self.cr = np.zeros((cap, PAD), dtype=np.int64)
        # Omega's items (``cost.Pricing.items``) of trees with at most ITEMS of them, as ids
        # (-1 = none; a first id of -2: too many, or Omega not a sum over items) and weights
        self.it = np.full((cap, ITEMS), -1, dtype=np.int64)
        self.iw = np.zeros((cap, ITEMS))
        self._item_ids: dict = {}
        self._keys: dict[tuple, int] = {}
        self.heap: list[tuple] = []  # exact benefits: (-benefit, uid lo, uid hi, slot, slot)
        # Lazy rows: per slot, its candidate partners sorted by (-bound, uid lo, uid hi), and a
        # heap holding each row's current head. One heap entry per row instead of per pair: the
        # pairs of dead trees are skipped by advancing a row, not popped one by one.
        self.rows: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
        self.pos: dict[int, int] = {}
        self.heads: list[tuple] = []  # (-bound, uid lo, uid hi, slot)
        self.uid = np.zeros(cap, dtype=np.int64)
        self.evaluations = 0
        self._pending = list(trees)

    def _add(self, t: Tree) -> int:
        slot = len(self.trees)
        if slot >= len(self.e):
            for name in ("e", "om", "omf", "cost", "key", "alive", "cm", "cr", "uid", "iw"):
                arr = getattr(self, name)
                setattr(self, name, np.concatenate([arr, np.zeros_like(arr)]))
            self.it = np.concatenate([self.it, np.full_like(self.it, -1)])
        self.trees.append(t)
        self.uid[slot] = t.uid
        self.e[slot] = float(t.edge_rate)
        # Omega and its floor times the tree's axis scale (lambda for count trees): with ``e``
        # on the axis (the common-edge bounds come from its classes) ``e * om`` is per time unit.
        self.om[slot] = t.omega * t.scale
        self.omf[slot] = self.model.omega_floor(t) * t.scale
        self.cost[slot] = t.cost
        self.key[slot] = self._keys.setdefault(t.key, len(self._keys))
        self.alive[slot] = True
        if len(t.classes) <= PAD:
            for i, (m, r) in enumerate(sorted(t.classes)):
                self.cm[slot, i], self.cr[slot, i] = m, r
        else:
            self.cm[slot, 0] = -1  # too many classes: no pairwise bound
        item_of = items_of(t.technique, self.model.slicing)[0]
        items = {} if item_of is None else dict(item_of(r, s) for r, s in t.windows)
        if item_of is None or len(items) > ITEMS:
            self.it[slot, 0] = -2
        else:
            for i, (it, w) in enumerate(items.items()):
                self.it[slot, i] = self._item_ids.setdefault(it, len(self._item_ids))
                self.iw[slot, i] = w * t.scale
        return slot

    def _omega_bound(self, idx: np.ndarray, slot: int) -> np.ndarray:
        """Lower bounds on Omega (times the axis scale) of ``slot`` woven with each tree in
        ``idx``: the parts' floors, and where Omega is a sum over distinct items the parts'
        Omegas less the items they share (exact; -inf where the items are not kept)."""
        om_lb = np.maximum(self.omf[idx], self.omf[slot])
        if self.it[slot, 0] == -2:
            return om_lb
        its = self.it[idx]
        shared = np.zeros(len(idx))
        for k in range(ITEMS):
            g = self.it[slot, k]
            if g < 0:
                break
            shared += np.where((its == g).any(axis=1), self.iw[slot, k], 0.0)
        exact = np.where(its[:, 0] == -2, -np.inf, self.om[idx] + self.om[slot] - shared)
        return np.maximum(om_lb, exact)

    def _common_bound(self, idx: np.ndarray, t: Tree) -> np.ndarray:
        """Upper bound on the common-edge density of ``t`` with each tree in ``idx``: the sum of
        ``1/lcm`` over compatible class pairs (inf where a tree has too many classes)."""
        out = np.zeros(len(idx))
        if len(t.classes) > 64:
            out[:] = np.inf
            return out
        cm, cr = self.cm[idx], self.cr[idx]
        valid = cm > 0
        safe = np.where(valid, cm, 1)
        for m, r in t.classes:
            g = np.gcd(safe, m)
            ok = valid & ((cr - r) % g == 0)
            out += np.where(ok, g / (safe.astype(np.float64) * m), 0.0).sum(axis=1)
        out[cm[:, 0] < 0] = np.inf
        return out

    def _candidates(self, slot: int) -> tuple[np.ndarray, np.ndarray]:
        """Alive slots that could weave with ``slot`` at a benefit above the floor, with
        certified upper bounds on those benefits."""
        t = self._alive_tree(slot)
        lam = self.model.rate(t.stream)
        ez = float(t.edge_rate)
        n = len(self.trees)
        idx = np.flatnonzero(self.alive[:n] & (self.key[:n] == self.key[slot]))
        idx = idx[idx != slot]
        om_lb = self._omega_bound(idx, slot)
        c = np.minimum(np.minimum(self.e[idx], ez), self._common_bound(idx, t))
        e_lb = np.maximum(np.maximum(self.e[idx], ez), self.e[idx] + ez - c)
        bound = self.cost[idx] + t.cost - lam - e_lb * om_lb
        keep = bound > self.floor
        return idx[keep], bound[keep]

    def row(self, slot: int) -> None:
        """Push upper bounds of the possibly-positive benefits of ``slot``, then file it.

        Exact benefits are computed lazily when a bound reaches the top of the heap (lazy
        greedy): an exact entry on top beats every bound below it, so the merge order is the
        eager algorithm's. Bounds are inflated by a relative 1e-9 against float rounding.
        """
        t = self._alive_tree(slot)
        uid = t.uid
        if self.eager:  # the paper's table: exact benefit of every pair, no bounds
            n = len(self.trees)
            idx = np.flatnonzero(self.alive[:n] & (self.key[:n] == self.key[slot]))
            for other in idx[idx != slot].tolist():
                self.evaluations += 1
                b = self.model.benefit(self._alive_tree(other), t)
                if b > self.floor:
                    other_uid = self._alive_tree(other).uid
                    lo, hi = (other, slot) if other_uid < uid else (slot, other)
                    heapq.heappush(
                        self.heap, (-b, min(other_uid, uid), max(other_uid, uid), lo, hi)
                    )
            return
        idx, bound = self._candidates(slot)
        bound = bound + 1e-9 * (np.abs(bound) + self.cost[idx] + t.cost)
        if idx.size:
            ou = self.uid[idx]
            u1, u2 = np.minimum(ou, uid), np.maximum(ou, uid)
            order = np.lexsort((u2, u1, -bound))
            self.rows[slot] = (idx[order], -bound[order], u1[order], u2[order])
            self.pos[slot] = 0
            self._push_head(slot)

    def _push_head(self, slot: int) -> None:
        """Push the row's first entry whose partner is alive (drop the row when none is)."""
        other, negb, u1, u2 = self.rows[slot]
        p = self.pos[slot]
        if p < len(other) and not self.alive[other[p]]:
            live = np.flatnonzero(self.alive[other[p:]])
            p = p + int(live[0]) if live.size else len(other)
            self.pos[slot] = p
        if p >= len(other):
            del self.rows[slot], self.pos[slot]
            return
        heapq.heappush(self.heads, (float(negb[p]), int(u1[p]), int(u2[p]), slot))

    def fill(self) -> None:
        for t in self._pending:
            self.row(self._add(t))
        self._pending = []

    def pop_best(self) -> tuple[int, int] | None:
        """The pair to merge next: the smallest key among exact benefits and row heads (bounds);
        a bound on top is replaced by its exact benefit (lazy greedy)."""
        heap, heads, alive = self.heap, self.heads, self.alive
        while True:
            while heap and not (alive[heap[0][3]] and alive[heap[0][4]]):
                heapq.heappop(heap)
            while heads:
                slot = heads[0][3]
                if not alive[slot]:
                    heapq.heappop(heads)
                    self.rows.pop(slot, None)
                    self.pos.pop(slot, None)
                    continue
                if alive[self.rows[slot][0][self.pos[slot]]]:
                    break
                heapq.heappop(heads)  # partner died: advance the row
                self._push_head(slot)
            if not heads:
                return heapq.heappop(heap)[3:] if heap else None
            if heap and heap[0][:3] <= heads[0][:3]:
                return heapq.heappop(heap)[3:]
            _, u1, u2, slot = heapq.heappop(heads)
            other = int(self.rows[slot][0][self.pos[slot]])
            self.pos[slot] += 1
            self._push_head(slot)
            a, b = (other, slot) if self.uid[other] < self.uid[slot] else (slot, other)
            self.evaluations += 1
            benefit = self.model.benefit(self._alive_tree(a), self._alive_tree(b))
            if benefit > self.floor:
                heapq.heappush(heap, (-benefit, u1, u2, a, b))

    def _alive_tree(self, slot: int) -> Tree:
        t = self.trees[slot]
        assert t is not None, f"slot {slot} holds a merged-away tree"
        return t

    def merge(self, a: int, b: int) -> int:
        merged = self.model.merge(self._alive_tree(a), self._alive_tree(b))
        self.alive[a] = self.alive[b] = False
        self.trees[a] = self.trees[b] = None  # free memory of dead trees
        return self._add(merged)

    def result(self) -> list[Tree]:
        return [t for t, ok in zip(self.trees, self.alive) if ok and t is not None]


def _windows_disjoint(trees: Sequence[Tree]) -> bool:
    seen: set = set()
    total = 0
    for t in trees:
        seen.update((t.key, w) for w in t.windows)
        total += len(t.windows)
    return len(seen) == total


STRATEGIES = ("lazy", "paper")


def weave(
    trees: Sequence[Tree],
    model: CostModel,
    progress: Progress = None,
    strategy: str = "lazy",
    stop_at: int = 0,
    floor: float = EPS,
    states: dict[int, list[Tree]] | None = None,
    states_max: int = 0,
) -> list[Tree]:
    """Greedy pairwise weaving until no merge reduces the total cost (the WeaveShare loop),
    or, with ``stop_at``, as soon as at most ``stop_at`` trees remain. ``floor``: merges whose
    benefit is not above it are never made (``-math.inf``: keep merging the best pair even at a
    loss, To Nodes' forced merge). ``states``: filled with the trees after each merge that
    leaves ``n <= states_max`` trees, by ``n``: what ``stop_at=n`` returns (the loop is the
    same up to there), so one weave answers every small ``stop_at``. ``progress`` is ticked
    once per merge (in steps of ``TICK``) and with the trees left at the end: ``len(trees)`` in
    all.

    ``strategy="lazy"`` (default) uses certified bounds and exact benefits on demand;
    ``"paper"`` is the paper's cost lookup table (every pair priced exactly up front, then the
    merged tree's row each iteration). Both give the same plan.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; allowed: {', '.join(STRATEGIES)}")
    additive = model.omega_is_additive() and _windows_disjoint(trees)
    table: KernelTable | _Table
    if additive and strategy == "lazy":
        table = KernelTable(model, trees, floor)
    else:
        table = _Table(model, trees, eager=strategy == "paper", floor=floor)
    table.fill()
    alive = ticked = len(trees)
    while alive > stop_at:
        pair = table.pop_best()
        if pair is None:
            break
        table.row(table.merge(*pair))
        alive -= 1
        if states is not None and alive <= states_max:
            states[alive] = table.result()
        if progress and ticked - alive >= TICK:
            progress(ticked - alive)
            ticked = alive
    if progress:
        progress(ticked)  # the merges since the last tick and the trees left
    weave.last_evaluations = table.evaluations  # type: ignore[attr-defined]
    return table.result()


def weaveshare(
    queries: Iterable[Query],
    model: CostModel,
    preprocess: bool = True,
    progress: Progress = None,
    strategy: str = "lazy",
) -> list[Tree]:
    """WeaveShare: weave from no sharing (optionally after identical-slicing grouping).
    ``progress`` ticks ``len(queries)`` in all: the queries grouped into another's tree first,
    then the weave's trees."""
    qs = list(queries)
    trees = initial_trees(qs, model, preprocess)
    if progress:
        progress(len(qs) - len(trees))
    return weave(trees, model, progress, strategy)


def no_share(queries: Iterable[Query], model: CostModel) -> list[Tree]:
    """Every query alone: the baseline."""
    return [model.tree([q]) for q in queries]


def shared(queries: Iterable[Query], model: CostModel) -> list[Tree]:
    """Everything that can share (same stream, aggregate and window kind) in one tree."""
    groups: dict[tuple, list[Query]] = defaultdict(list)
    for q in queries:
        groups[q.share_key].append(q)
    return [model.tree(g) for g in groups.values()]


def insert_then_weave(
    queries: Iterable[Query], model: CostModel, preprocess: bool = True, progress: Progress = None
) -> list[Tree]:
    """Insert queries one at a time (input order) into the tree they weave best with (a new tree
    when no insertion reduces cost), then run the weaving phase (WeaveShare paper, section 6).
    ``progress`` is ticked with each unit's queries as it is inserted."""
    trees: list[Tree] = []
    for unit in initial_trees(queries, model, preprocess):
        best, best_b = None, EPS
        for i, t in enumerate(trees):
            if t.key != unit.key:
                continue
            b = model.benefit(t, unit)
            if b > best_b:
                best, best_b = i, b
        if best is None:
            trees.append(unit)
        else:
            trees[best] = model.merge(trees[best], unit)
        if progress:
            progress(len(unit.queries))
    return weave(trees, model)


def plan_cost(trees: Iterable[Tree]) -> float:
    return float(sum(t.cost for t in trees))


@dataclass
class IncrementalWeaveShare:
    """Online WeaveShare: weave new queries into the current plan; rebuild from scratch when the
    plan's cost drifts more than ``tolerance`` above the cost extrapolated from the offline
    plan-cost curve (cost per query at the last rebuilds: the *performance slope*)."""

    model: CostModel
    tolerance: float = 0.2
    preprocess: bool = True
    trees: list[Tree] = field(default_factory=list)
    rebuilds: int = 0
    _curve: list[tuple[int, float]] = field(default_factory=list)
    _order: list[str] = field(default_factory=list)

    @property
    def queries(self) -> list[Query]:
        return [q for t in self.trees for q in t.queries]

    @property
    def cost(self) -> float:
        return plan_cost(self.trees)

    def extrapolated_cost(self, n: int) -> float | None:
        if not self._curve:
            return None
        if len(self._curve) == 1:
            n0, c0 = self._curve[0]
            return c0 * n / n0
        (n0, c0), (n1, c1) = self._curve[-2], self._curve[-1]
        slope = (c1 - c0) / (n1 - n0) if n1 != n0 else c1 / n1
        return c1 + slope * (n - n1)

    def rebuild(self) -> None:
        """Offline WeaveShare over all current queries, in submission order."""
        rank = {qid: i for i, qid in enumerate(self._order)}
        qs = sorted(self.queries, key=lambda q: rank[q.id])
        self.trees = weaveshare(qs, self.model, self.preprocess)
        self.rebuilds += 1
        if qs:
            if self._curve and self._curve[-1][0] == len(qs):
                self._curve[-1] = (len(qs), self.cost)
            else:
                self._curve.append((len(qs), self.cost))

    def _check_drift(self) -> None:
        """Rebuild when the plan deviates from the extrapolated cost by more than the tolerance
        (either way: an extrapolation that overshoots says nothing about the plan's quality);
        tolerance 0 rebuilds on every change, as in the paper."""
        n = len(self.queries)
        expected = self.extrapolated_cost(n)
        if (
            self.tolerance <= 0
            or expected is None
            or expected <= 0
            or abs(self.cost / expected - 1) > self.tolerance
        ):
            self.rebuild()

    def add(self, queries: Iterable[Query]) -> None:
        """Weave each new query's tree into the plan with WeaveShare's merge loop."""
        new = list(queries)
        ids = {q.id for q in self.queries}
        for q in new:
            if q.id in ids:
                raise ValueError(f"duplicate query id {q.id!r}")
            ids.add(q.id)
        self._order.extend(q.id for q in new)
        self.trees = weave(self.trees + initial_trees(new, self.model, self.preprocess), self.model)
        self._check_drift()

    def remove(self, ids: Iterable[str]) -> None:
        """Remove queries; re-price their trees and re-weave them with the rest."""
        gone = set(ids)
        known = {q.id for q in self.queries}
        missing = gone - known
        if missing:
            raise KeyError(f"unknown query id(s): {sorted(missing)}")
        self._order = [qid for qid in self._order if qid not in gone]
        kept: list[Tree] = []
        for t in self.trees:
            if any(q.id in gone for q in t.queries):
                rest = [q for q in t.queries if q.id not in gone]
                if rest:
                    kept.append(self.model.tree(rest))
            else:
                kept.append(t)
        self.trees = weave(kept, self.model)
        self._check_drift()
