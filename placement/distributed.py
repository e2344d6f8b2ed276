"""Distributed placement optimizers: the thirteen of dissertation Table 7 (chapter 6) and WG_LS.

A plan maps every query to one node and, within the node, to one execution tree. A node costs the
sum of its trees (``lambda + E * Omega`` each), TotalCost is the sum over nodes and MaxCost the
largest node (equations 6.1, 6.2). Splitting queries over more trees costs one extra ``lambda`` per
tree, which is what makes "Group" (several trees per node) and "Weave" (one shared tree) differ.

Entry point: ``optimize(name, queries, model, nodes, seed=0, preprocess=False) -> Plan``;
``OPTIMIZERS`` maps each of Table 7's thirteen names (``TABLE7``) to an ``OptimizerSpec``
(category and strategy); ``placement.optimizers`` registers them with our ``WG_LS`` and
``WG_PF``. ``nodes`` is a node count or a list of capacities
(operations per time unit, paper 003's feasibility: a node is feasible when its cost does not
exceed its capacity). Heuristics never refuse a plan for capacity (the dissertation's do not);
``infeasible_nodes(plan)`` reports overloaded nodes.

Decisions where the text is loose (each kept testable):

- **Units.** Every algorithm starts from "an execution tree per query". ``preprocess`` applies the
  note at the end of 6.5: ``False`` one tree per query; ``True`` / ``"classes"`` groups queries with
  the same stream, aggregate *and residue classes* (``initial_trees(preprocess=True)``: a perfect
  weave, always a cost win); ``"slides"`` is the literal note (same key and slide),
  which is not always a win when ``r mod s`` differ (a third edge class per slide). Every
  Table 7 optimizer places these units whole (WG_LS may move single queries out of them).
- **Keys.** Trees only hold one (stream, aggregate, window kind). "Weave Only" means one tree
  *per key* per node;
  a query whose key has no tree on the chosen node starts that tree.
- **findMinNode** is the node of smallest cost; with capacities, smallest utilization
  ``cost / capacity``; ties go to the larger capacity, then the lower index. This makes Algorithm
  4's "N most expensive trees to N nodes" the first steps of the same loop (node costs start at 0).
- **Sorting** (To Lowest): by cost, most expensive first; ties keep input order (stable sort).
- **Random / Round Robin (6.4).** RAND draws the node with ``random.Random(seed)``; RR takes node
  ``i mod N`` for the i-th unit in input order. WG_RAND / WG_RR first choose *whether* to weave
  (RAND: fair coin; RR: alternate per node, the first choice weaves) and then *which*
  same-key tree of the node (RAND: uniform; RR: cycling per node in creation order). A unit with
  no same-key tree on its node is always a separate tree.
- **To Nodes (Algorithm 5, followed literally).** The WeaveShare loop runs to its fixpoint (no
  early stop when the tree count first reaches N). Then W_TN forces further merges of the best
  (least harmful) same-key pair until at most N trees remain; WG_TN assigns the trees with G_TL.
  At most N trees: one per node, most expensive to the first node. If keys outnumber nodes, W_TN
  cannot reach N trees and places the rest with G_TL (documented exception to "one tree per node").
  ``stop_at_nodes=True`` gives the prose's alternative reading (stop weaving as soon as <= N trees).
- **Inserted (Algorithm 6 and its prose).** The first N units are chosen at random (seeded;
  ``init="first"`` takes the first N, as Algorithm 6 writes) and placed one per node; the rest are
  inserted in input order. W_I weaves the unit into the node whose *new node cost* is smallest
  (load balance first, as the Discussion says). WG_I finds, per node, the same-key tree whose weave
  gives the smallest new node cost; the weave option is the node with the smallest such new cost;
  the group option is a separate tree on the node with the smallest old cost; it takes the option
  with the smaller TotalCost increase, weaving on ties (Algorithm 6's ``else``).
- **To Lowest WG_TL**: weave into the cheapest same-key tree of MinNode unless grouping is strictly
  cheaper (Algorithm 4's ``if Cost1 < Cost2``).
"""

from __future__ import annotations

import heapq
import math
import random
import weakref
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from placement.cost import items_of
from placement.plan import Node, Plan
from placement.queries import Query, validate_unique
from placement.trees import CostModel, Tree
from placement.weaveshare import initial_trees, weave

NodesArg = int | Sequence[float | None]


# ---- shared helpers ---------------------------------------------------------------------------


def make_units(
    queries: Iterable[Query], model: CostModel, preprocess: bool | str = False
) -> list[Tree]:
    """The starting trees ("an execution tree per query", optionally preprocessed; see module)."""
    qs = list(queries)
    if preprocess in (False, None, "none"):
        return [model.tree([q]) for q in qs]
    if preprocess in (True, "classes"):
        return initial_trees(qs, model, preprocess=True)
    if preprocess == "slides":
        groups: dict[tuple, list[Query]] = defaultdict(list)
        for q in qs:
            groups[(*q.share_key, q.slide)].append(q)
        return [model.tree(g) for g in groups.values()]
    raise ValueError(f"preprocess: expected False, True, 'classes' or 'slides', got {preprocess!r}")


def node_capacities(nodes: NodesArg) -> list[float | None]:
    """``nodes`` as a list of capacities (``None``: unbounded / equal nodes)."""
    if isinstance(nodes, bool):
        raise ValueError("nodes: expected a node count or a list of capacities")
    if isinstance(nodes, int):
        if nodes < 1:
            raise ValueError(f"nodes: need at least one node, got {nodes}")
        return [None] * nodes
    caps = list(nodes)
    if not caps:
        raise ValueError("nodes: need at least one node")
    if any(c is None for c in caps) and not all(c is None for c in caps):
        raise ValueError("nodes: give a capacity for every node or for none")
    for c in caps:
        if c is not None and not (float(c) > 0):
            raise ValueError(f"nodes: capacities must be > 0, got {c!r}")
    return [None if c is None else float(c) for c in caps]


class NodeState:
    """Trees per node during construction.  Change them through ``add``, ``replace``,
    ``remove`` and ``reset``: each node also keeps its trees by key, in the node's order, for
    ``same_key`` (an add of 1,000 queries to 100,000 scanned 134 trees per unit: ~90,000 key
    comparisons)."""

    def __init__(self, caps: list[float | None]):
        self.caps = caps
        self.trees: list[list[Tree]] = [[] for _ in caps]
        self.load = [0.0] * len(caps)
        self._keyed: list[dict[tuple, list[Tree]]] = [{} for _ in caps]

    @property
    def n(self) -> int:
        return len(self.caps)

    def capacity(self, j: int) -> float:
        """Node ``j``'s capacity; 1 for a node without one, so its utilization is its load."""
        c = self.caps[j]
        return 1.0 if c is None else c

    def util_key(self, j: int, load: float | None = None) -> tuple:
        load = self.load[j] if load is None else load
        return (load / self.capacity(j), -self.capacity(j), j)

    def min_node(self) -> int:
        """findMinNode: smallest cost (utilization with capacities); ties larger capacity, index."""
        return min(range(self.n), key=self.util_key)

    def add(self, j: int, t: Tree) -> None:
        self.trees[j].append(t)
        self.load[j] += t.cost
        self._keyed[j].setdefault(t.key, []).append(t)

    def replace(self, j: int, old: Tree, new: Tree) -> None:
        ts = self.trees[j]
        ts[ts.index(old)] = new
        self.load[j] += new.cost - old.cost
        if new.key == old.key:
            same = self._keyed[j][old.key]
            same[same.index(old)] = new
        else:
            self._index(j)

    def remove(self, j: int, t: Tree) -> None:
        self.trees[j].remove(t)
        self.load[j] -= t.cost
        self._keyed[j][t.key].remove(t)

    def reset(self, trees: list[list[Tree]], load: list[float]) -> None:
        """Every node's trees and loads at once (a state kept earlier)."""
        self.trees, self.load = trees, load
        for j in range(self.n):
            self._index(j)

    def _index(self, j: int) -> None:
        keyed: dict[tuple, list[Tree]] = {}
        for t in self.trees[j]:
            keyed.setdefault(t.key, []).append(t)
        self._keyed[j] = keyed

    def same_key(self, j: int, key) -> list[Tree]:
        """Node ``j``'s trees of ``key``, in the node's order."""
        return list(self._keyed[j].get(key, ()))


def _rates(queries: Sequence[Query], model: CostModel) -> dict[str, float]:
    return {s: model.rate(s) for s in sorted({q.stream for q in queries})}


def build_plan(
    name: str,
    model: CostModel,
    node_trees: Sequence[Sequence[Tree]],
    caps: Sequence[float | None],
    queries: Sequence[Query],
) -> Plan:
    nodes = [Node(f"node-{j}", list(ts), caps[j]) for j, ts in enumerate(node_trees)]
    return Plan(name, model.technique, nodes, _rates(queries, model), model.slicing)


def infeasible_nodes(plan: Plan, rel_tol: float = 1e-12) -> list[str]:
    """Nodes whose cost exceeds their capacity (paper 003: such a plan cannot keep up)."""
    return [
        n.id for n in plan.nodes if n.capacity is not None and n.cost > n.capacity * (1 + rel_tol)
    ]


def group_to_lowest(trees: Sequence[Tree], st: NodeState) -> None:
    """Group To Lowest on given trees: most expensive first, each to findMinNode (stable ties)."""
    for t in sorted(trees, key=lambda t: -t.cost):
        st.add(st.min_node(), t)


# ---- non-cost-based (6.4) ---------------------------------------------------------------------


def _non_cost(
    units: list[Tree],
    model: CostModel,
    st: NodeState,
    category: str,
    pick_node: Callable[[int], int],
    pick_weave: Callable[[int], bool],
    pick_tree: Callable[[int, int], int],
) -> None:
    for i, u in enumerate(units):
        j = pick_node(i)
        same = st.same_key(j, u.key)
        if category == "G" or not same:
            st.add(j, u)
        elif category == "W":
            st.replace(j, same[0], model.merge(same[0], u))
        elif pick_weave(j):  # WG: weave into one of the node's same-key trees
            t = same[pick_tree(j, len(same))]
            st.replace(j, t, model.merge(t, u))
        else:
            st.add(j, u)


def random_placement(units, model, st, category, seed):
    """RAND: node uniformly at random; WG: a fair coin for weave vs separate, then a uniformly
    random same-key tree of the node."""
    rng = random.Random(seed)
    _non_cost(
        units,
        model,
        st,
        category,
        lambda i: rng.randrange(st.n),
        lambda j: rng.random() < 0.5,
        lambda j, k: rng.randrange(k),
    )


def round_robin_placement(units, model, st, category, seed):
    """RR: node ``i mod N``; WG: per node, decisions alternate weave / separate (a node's first
    unit is necessarily separate, its first choice weaves), and successive weaves on a node cycle through its same-key trees."""
    decision = [0] * st.n
    pointer = [0] * st.n

    def weave_now(j: int) -> bool:
        decision[j] += 1
        return decision[j] % 2 == 1

    def tree(j: int, k: int) -> int:
        pointer[j] += 1
        return (pointer[j] - 1) % k

    _non_cost(units, model, st, category, lambda i: i % st.n, weave_now, tree)


# ---- To Lowest (Algorithm 4) ------------------------------------------------------------------


def to_lowest(units, model, st, category, seed):
    for u in sorted(units, key=lambda t: -t.cost):
        j = st.min_node()
        same = st.same_key(j, u.key)
        if category == "G" or not same:
            st.add(j, u)
        elif category == "W":
            st.replace(j, same[0], model.merge(same[0], u))
        else:
            min_tree = min(same, key=lambda t: t.cost)  # first cheapest on ties
            cost1 = st.load[j] + u.cost
            cost2 = st.load[j] + model.merged_price(min_tree, u)[2] - min_tree.cost
            if cost1 < cost2:
                st.add(j, u)
            else:
                st.replace(j, min_tree, model.merge(min_tree, u))


# ---- To Nodes (Algorithm 5) -------------------------------------------------------------------


def forced_merge(trees: Sequence[Tree], model: CostModel, target: int) -> list[Tree]:
    """Keep merging the same-key pair with the largest benefit (possibly negative) until at most
    ``target`` trees remain or no same-key pair is left. Ties: lower creation uids first.

    WeaveShare's lazy table with no benefit floor: exact benefits only for pairs whose upper
    bound reaches the top, the same merges as pricing every pair."""
    return sorted(weave(trees, model, stop_at=target, floor=-math.inf), key=lambda t: t.uid)


_WOVEN: weakref.WeakKeyDictionary[CostModel, dict] = weakref.WeakKeyDictionary()
#: the full weave keeps its trees at every count up to this: To Nodes' ``stop_at_nodes`` (WG_LS's
#: third start) reads them for any node count up to it instead of weaving again
STATES_MAX = 64


def woven(units: Sequence[Tree], model: CostModel, stop_at: int = 0) -> list[Tree]:
    """``weave(units, model, stop_at=stop_at)``, computed once per (model, units' queries).

    Why: W_TN, WG_TN and WG_LS's starts weave the very same units, for every node count of a
    workload; WeaveShare is their dominant cost. Trees are never mutated, so sharing is safe.
    A ``stop_at`` weave is the full one's loop up to ``stop_at`` trees: the full weave's
    state there (``weave``'s ``states``).
    """
    memo = _WOVEN.setdefault(model, {})
    units_key = tuple(tuple(t.queries) for t in units)
    full = memo.get((0, units_key))
    if full is None:
        states: dict[int, list[Tree]] = {}
        full = memo[(0, units_key)] = weave(units, model, states=states, states_max=STATES_MAX)
        memo[("states", units_key)] = states
    if len(full) >= stop_at:
        return list(full)  # the full weave never got down to stop_at trees: same merges
    state = memo[("states", units_key)].get(stop_at)
    if state is not None:
        return list(state)
    key = (stop_at, units_key)
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = weave(units, model, stop_at=stop_at)
    return list(hit)


def to_nodes(units, model, st, category, seed, stop_at_nodes: bool = False):
    trees = woven(units, model, st.n if stop_at_nodes else 0)
    if len(trees) > st.n and category == "W":
        trees = forced_merge(trees, model, st.n)
    # <= N trees: one per node; otherwise G_TL (WG_TN, or keys > N for W_TN)
    group_to_lowest(trees, st)


# ---- Inserted (Algorithm 6) -------------------------------------------------------------------


def _seed_units(units: list[Tree], st: NodeState, seed: int, init: str) -> list[Tree]:
    """Place one unit per node (random choice, or the first N); return the rest in input order."""
    if init == "none":  # nodes already hold trees (re-placement): insert everything
        return units
    n = min(st.n, len(units))
    if init == "random":
        chosen = sorted(random.Random(seed).sample(range(len(units)), n))
    elif init == "first":
        chosen = list(range(n))
    else:
        raise ValueError(f"init: expected 'random', 'first' or 'none', got {init!r}")
    for j, i in enumerate(chosen):
        st.add(j, units[i])
    taken = set(chosen)
    return [u for i, u in enumerate(units) if i not in taken]


class MergeBound:
    """Certified lower bounds on the cost of weaving two same-key trees
    (``model.merged_price(x, y)[2]``), far cheaper than the price: Inserted skips pricing a
    merge that cannot win.

    Why they hold: the merged tree's Omega is exact from the parts where Omega is a sum over
    distinct items (``placement.cost.Pricing.items``: both parts' sums less the items they
    share), else at least each part's floor (``cost.omega_floor``). Its edges per time unit are
    ``E_x + E_y - E(x and y)``: ``cost`` takes only ``E >= max(E_x, E_y)`` (O(1) per pair), and
    ``tight_cost`` also bounds the shared edges by a union bound over class pairs
    (``shared_density_bound``, O(classes)). ``1 - BOUND_REL`` absorbs rounding."""

    def __init__(self, model: CostModel):
        self.model = model
        self._items: dict[int, dict] = {}  # tree uid -> its items and their weights
        self._moduli: weakref.WeakKeyDictionary[Tree, dict] = weakref.WeakKeyDictionary()

    def _items_of(self, t: Tree, item_of) -> dict:
        d = self._items.get(t.uid)
        if d is None:
            d = self._items[t.uid] = dict(item_of(r, s) for r, s in t.windows)
        return d

    def merged(self, x: Tree, y: Tree, m: Tree) -> Tree:
        """``m``, the weave of ``x`` and ``y``, its items the union of theirs when both are
        known (its windows are the union of theirs): not read again from its windows, one
        dict per merge of a new query into a tree of thousands of windows."""
        ix, iy = self._items.get(x.uid), self._items.get(y.uid)
        if ix is not None and iy is not None:
            self._items[m.uid] = {**ix, **iy}
        return m

    def _omega(self, x: Tree, y: Tree) -> float:
        """A lower bound on the merged tree's Omega (exact where Omega sums items)."""
        item_of = items_of(x.technique, self.model.slicing)[0]
        if item_of is None:
            return max(self.model.omega_floor(x), self.model.omega_floor(y))
        ix, iy = self._items_of(x, item_of), self._items_of(y, item_of)
        if len(iy) > len(ix):
            ix, iy = iy, ix
        return x.omega + y.omega - math.fsum(w for it, w in iy.items() if it in ix)

    def cost(self, x: Tree, y: Tree) -> float:
        e = max(x.time_edge_rate, y.time_edge_rate)
        return (self.model.rate(x.stream) + e * self._omega(x, y)) * (1 - BOUND_REL)

    def tight_cost(self, x: Tree, y: Tree) -> float:
        """``cost`` with the merged edges bounded by ``E_x + E_y - (shared edges bound)``."""
        ex, ey = float(x.edge_rate), float(y.edge_rate)
        if len(y.classes) > len(x.classes):
            x, y = y, x
        shared = shared_density_bound(self._by_modulus(x), y.classes)
        e = max(ex, ey, ex + ey - min(shared, ex, ey)) * x.scale
        return (self.model.rate(x.stream) + e * self._omega(x, y)) * (1 - BOUND_REL)

    def _by_modulus(self, t: Tree) -> dict[int, list[int]]:
        d = self._moduli.get(t)
        if d is None:
            d = self._moduli[t] = residues_by_modulus(t.classes)
        return d


def residues_by_modulus(classes: Iterable[tuple[int, int]]) -> dict[int, list[int]]:
    """Residue classes ``(m, r)`` grouped by modulus: one ``gcd`` per modulus, not per class."""
    out: dict[int, list[int]] = defaultdict(list)
    for m, r in classes:
        out[m].append(r)
    return dict(out)


def shared_density_bound(x_by_modulus: dict[int, list[int]], y_classes) -> float:
    """An upper bound on the density of positions in both class unions: for each class ``a``
    of y, ``min(1/M_a, sum over classes b of x of density(a and b))`` (a union bound; two
    classes meet iff their residues agree modulo ``g = gcd`` of the moduli, in a class of
    density ``g / (m M)``)."""
    total = 0.0
    for big_m, big_r in y_classes:
        s = 0.0
        for m, rs in x_by_modulus.items():
            g = math.gcd(m, big_m)
            k = len(rs) if g == 1 else sum(1 for r in rs if (r - big_r) % g == 0)
            if k:
                s += k * g / (m * big_m)
        total += min(s, 1.0 / big_m)
    return total


BOUND_REL = 1e-9


def _best_weave(u: Tree, model: CostModel, st: NodeState, category: str, bound: MergeBound):
    """Inserted's weave option for ``u``: ``(order key, node, tree or None, new node cost)``
    of the smallest new node cost (``W``: a node without a same-key tree takes ``u`` as a new
    tree), or None when no node has a same-key tree.

    Options are ordered by ``(util key of new node cost, new node cost, tree's index on its
    node)``: across nodes the util key decides (it holds the node index), within a node the
    smaller new cost, then the first tree, which is the order of pricing every option. Each
    option enters a heap keyed by the same tuple of a lower bound (``MergeBound.cost``), is
    bounded again tighter (``tight_cost``) when it reaches the top, and priced when it reaches
    the top once more; the search stops when the top's bound is no better than the best price.
    Floating-point addition is monotone, so a bound below the price gives a key below the key.
    """
    heap: list = []
    for j in range(st.n):
        same = st.same_key(j, u.key)
        if category == "W":
            if not same:
                new = st.load[j] + u.cost  # exact: a new tree
                heap.append(((st.util_key(j, new), new, 0), 2, j, None))
                continue
            same = same[:1]
        for i, t in enumerate(same):
            new = st.load[j] - t.cost + bound.cost(t, u)
            heap.append(((st.util_key(j, new), new, i), 0, j, t))
    heapq.heapify(heap)
    best = None
    while heap:
        key, tier, j, t = heapq.heappop(heap)
        if best is not None and not key < best[0]:
            break  # every option left is at least the best
        if tier == 0:
            new = st.load[j] - t.cost + bound.tight_cost(t, u)
            heapq.heappush(heap, ((st.util_key(j, new), new, key[2]), 1, j, t))
            continue
        new = key[1] if t is None else st.load[j] - t.cost + model.merged_price(t, u)[2]
        exact = (st.util_key(j, new), new, key[2])
        if best is None or exact < best[0]:
            best = (exact, j, t, new)
    return best


def inserted(units, model, st, category, seed, init: str = "random"):
    """Algorithm 6 (module docstring); the weave option is ``_best_weave``'s."""
    bound = MergeBound(model)
    for u in _seed_units(list(units), st, seed, init):
        best = _best_weave(u, model, st, category, bound)
        if category == "W":
            assert best is not None  # every unit finds a node
            _, j, t, _ = best
            if t is None:
                st.add(j, u)
            else:
                st.replace(j, t, bound.merged(t, u, model.merge(t, u)))
            continue
        g = st.min_node()
        if best is None or u.cost < best[3] - st.load[best[1]]:
            st.add(g, u)  # grouping increases TotalCost by the unit's own cost
        else:
            _, j, t, _ = best
            st.replace(j, t, bound.merged(t, u, model.merge(t, u)))


# ---- registry ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class OptimizerSpec:
    name: str
    category: str  # "G", "W" or "WG"
    strategy: Callable
    doc: str


OPTIMIZERS: dict[str, OptimizerSpec] = {}
for _cat in ("G", "W", "WG"):
    OPTIMIZERS[f"{_cat}_RAND"] = OptimizerSpec(
        f"{_cat}_RAND", _cat, random_placement, "random node per query (6.4)"
    )
    OPTIMIZERS[f"{_cat}_RR"] = OptimizerSpec(
        f"{_cat}_RR", _cat, round_robin_placement, "round-robin node per query (6.4)"
    )
    OPTIMIZERS[f"{_cat}_TL"] = OptimizerSpec(
        f"{_cat}_TL", _cat, to_lowest, "To Lowest, Algorithm 4"
    )
for _cat in ("W", "WG"):
    OPTIMIZERS[f"{_cat}_TN"] = OptimizerSpec(f"{_cat}_TN", _cat, to_nodes, "To Nodes, Algorithm 5")
    OPTIMIZERS[f"{_cat}_I"] = OptimizerSpec(f"{_cat}_I", _cat, inserted, "Inserted, Algorithm 6")
TABLE7 = tuple(OPTIMIZERS)  # the thirteen of Table 7 (all optimizers: placement.optimizers)


def place(
    name: str,
    queries: Sequence[Query],
    model: CostModel,
    caps: list[float | None],
    seed: int = 0,
    preprocess: bool | str = False,
    **options: Any,
) -> Plan:
    """Run one Table 7 optimizer on validated queries and node capacities."""
    spec = OPTIMIZERS[name]
    st = NodeState(caps)
    spec.strategy(make_units(queries, model, preprocess), model, st, spec.category, seed, **options)
    return build_plan(name, model, st.trees, caps, queries)


def optimize(
    name: str,
    queries: Iterable[Query],
    model: CostModel,
    nodes: NodesArg,
    seed: int = 0,
    preprocess: bool | str = False,
    **options: Any,
) -> Plan:
    """Run one Table 7 optimizer by name (a key of ``OPTIMIZERS``; every optimizer, WG_LS and
    WG_PF included: ``placement.optimizers.optimize``).

    ``options`` go to the strategy: ``stop_at_nodes`` (W_TN/WG_TN), ``init`` (W_I/WG_I).
    """
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; allowed: {', '.join(TABLE7)}")
    return place(
        name, validate_unique(queries), model, node_capacities(nodes), seed, preprocess, **options
    )
