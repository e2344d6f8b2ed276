"""Unit moves after a weave: our post-pass that makes a woven plan cheaper.

Why: WeaveShare's greedy never undoes a merge. A unit woven early into a tree is often better
off in a tree made later, whose classes cover its edges: one pass of single-unit moves takes
2.2 % off WeaveShare's plan of 10,000 queries of slides up to 10,000, and 2.0 % off banded
WeaveShare's of 30,000, which puts banded WeaveShare 1.1-1.5 % below WeaveShare's own cost at
30,000-300,000 queries, in a fraction of its time (BENCHMARKS.md, "Scaling with the query
count"). No library does local search over residue-class trees; the prices are
the model's (``CostModel.tree`` / ``merge``), exact.

A **unit** is a tree's queries of one slide and one ``range mod slide``: equal residue classes,
the groups ``weaveshare.initial_trees`` starts from. They weave perfectly, so they move together.

One pass, trees in plan order, each tree's units in order of their first query (timeline of one
unit ``u`` of tree ``T``)::

    candidates: trees of u's key with a class of modulus g * d, g | slide(u), d <= COFACTOR
    bound every move (u alone, u into each candidate)  ->  none above the floor: next unit
    price T without u                    ->  gain_out = C(T) - C(T - u)
    alone: gain_out - C(u)               ->  the best so far
    each candidate: bound = gain_out - (lower bound of C(T' + u) - C(T'))
    best bound first: price C(T' + u) exactly while the bound can still beat the best
    move u where the plan's cost falls most, if by more than the floor

Why those candidates: a class of modulus ``m`` covers ``1 / (m / gcd(m, s))`` of a class of
slide ``s``; a tree without such a class covers little of the unit's edges and only adds them.
The bounds (additive Omega only, else every candidate is priced): ``C(T) - C(T - u)`` is at
most ``(Omega(T) - Omega(u)) delta + Omega(u) E(T)`` with ``delta`` the edges only ``u`` holds,
bounded per class of ``u`` by the single class of the rest that covers most of it; ``C(T' + u)``
is at least
``lambda + (E(T') + delta)(Omega(T') + Omega(u))`` with ``delta`` the unit's edges that no
class of ``T'`` covers by the union bound (``sum g / m`` over compatible classes, per class of
the unit); both loosened by a relative 1e-9 against rounding. They only skip prices that could not
change the choice, so the moves are those of pricing every candidate (the property test's
reference). Ties go to staying alone, then to the lower tree index. The floor: a quarter of
the given plan's edge work per unit (``MIN_GAIN``); a unit whose bounds show no move above it
is not priced at all, which is where the time goes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from functools import cache

import numpy as np

from placement.banded import banded_weaveshare
from placement.queries import Query
from placement.trees import CostModel, Tree
from placement.weaveshare import EPS, Progress, unit_key

COFACTOR = 4  # a candidate holds a class of modulus g * d, g | slide, d <= this
#: a move must save more than this share of the given plan's edge work per unit (its cost less
#: one tuple pass per tree, over its units): the many small moves cost as much time as the
#: few large ones and save little (BENCHMARKS.md, "Unit moves: what the floor trades")
MIN_GAIN = 0.25
INFLATE = 1e-9  # relative margin of a bound against float rounding


def units_of(tree: Tree) -> list[list[Query]]:
    """The tree's queries grouped by slide and ``range mod slide``, in order of first query."""
    groups: dict[tuple, list[Query]] = {}
    for q in tree.queries:
        groups.setdefault(unit_key(q), []).append(q)
    return list(groups.values())


@cache
def _divisors(n: int) -> tuple[int, ...]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return tuple(sorted({*small, *(n // d for d in small)}))


class _Plan:
    """Trees by index (a move never empties one: it leaves a tree of two units or more), their
    units, per tree the number of its units that hold each class, its classes and prices as
    arrays, and an index modulus -> trees."""

    def __init__(self, model: CostModel, trees: Sequence[Tree]):
        self.model = model
        self.trees: list[Tree] = []
        self.units: list[list[list[Query]]] = []
        self.holders: list[dict[tuple[int, int], int]] = []  # class -> units holding it
        self.unit_tree: dict[int, Tree] = {}  # id of a unit's first query -> the unit alone
        self.by_mod: dict[tuple, dict[int, set[int]]] = defaultdict(lambda: defaultdict(set))
        self.arrays: list[tuple[np.ndarray, np.ndarray]] = []
        cap = max(16, 2 * len(trees))
        self.e, self.om = np.zeros(cap), np.zeros(cap)  # E (float) and Omega x axis scale
        self.cost = np.zeros(cap)
        for t in trees:
            self.set(len(self.trees), t, units_of(t))

    def set(self, i: int, t: Tree, units: list[list[Query]]) -> None:
        """Tree ``i`` is now ``t`` of ``units`` (``i == len(trees)``: a new one). Its old
        moduli stay in the index: a stale candidate is only priced, never wrong."""
        if i == len(self.trees):
            self.trees.append(t)
            self.units.append(units)
            self.holders.append({})
            self.arrays.append((np.zeros(0, np.int64), np.zeros(0, np.int64)))
            if i == len(self.e):
                self.e, self.om, self.cost = (
                    np.concatenate([a, np.zeros_like(a)]) for a in (self.e, self.om, self.cost)
                )
        self.trees[i], self.units[i] = t, units
        holders: dict[tuple[int, int], int] = {}
        for v in units:
            for c in self.alone(v).classes:
                holders[c] = holders.get(c, 0) + 1
        self.holders[i] = holders
        idx = self.by_mod[t.key]
        for m, _ in t.classes:
            idx[m].add(i)
        cls = sorted(t.classes)
        self.arrays[i] = (
            np.array([m for m, _ in cls], dtype=np.int64),
            np.array([r for _, r in cls], dtype=np.int64),
        )
        self.e[i], self.om[i], self.cost[i] = float(t.edge_rate), t.omega * t.scale, t.cost

    def alone(self, unit: list[Query]) -> Tree:
        t = self.unit_tree.get(id(unit[0]))
        if t is None:
            t = self.unit_tree[id(unit[0])] = self.model.tree(
                unit, classes=self.model.query_classes(unit[0])
            )
        return t

    def candidates(self, i: int, u: Tree, cofactor: int) -> np.ndarray:
        """Trees of ``u``'s key other than ``i`` with a class of modulus ``g * d``, ``g``
        dividing ``u``'s slide, ``d <= cofactor`` (in index order)."""
        idx = self.by_mod[u.key]
        out: set[int] = set()
        for g in _divisors(u.queries[0].slide):
            for d in range(1, cofactor + 1):
                out.update(idx.get(g * d, ()))
        out.discard(i)
        return np.array(sorted(out), dtype=np.int64)

    def added_lbs(self, cands: np.ndarray, u: Tree) -> np.ndarray:
        """Lower bounds of ``C(T_j + u) - C(T_j)`` for the trees ``cands`` (Omega additive):
        ``E(T_j + u) >= E(T_j) + delta`` with ``delta`` the unit's edges that ``T_j``'s classes
        leave uncovered by the union bound (``sum g / m`` over compatible classes, per class
        of ``u``); deflated against rounding."""
        if not len(cands):
            return np.zeros(0)
        parts = [self.arrays[j] for j in cands.tolist()]
        mods = np.concatenate([m for m, _ in parts])
        res = np.concatenate([r for _, r in parts])
        starts = np.cumsum([0] + [len(m) for m, _ in parts[:-1]])
        delta = np.zeros(len(cands))
        for s, a in u.classes:
            g = np.gcd(mods, s)
            cov = np.add.reduceat(np.where((a - res) % g == 0, g / mods, 0.0), starts)
            delta += np.maximum(0.0, 1.0 - cov) / s
        return self.added_lb(cands, u, delta)

    def added_lb(self, cands: np.ndarray, u: Tree, delta: np.ndarray | float) -> np.ndarray:
        """``C(T_j + u) - C(T_j)`` at least, given at least ``delta`` new edges, deflated."""
        e, om, omu = self.e[cands], self.om[cands], u.omega * u.scale
        added = (e + delta) * (om + omu) - e * om
        return added - INFLATE * (np.abs(added) + self.cost[cands] + u.cost)

    def gain_out_ub(self, i: int, u: Tree) -> float:
        """An upper bound of ``C(T_i) - C(T_i - u)`` (Omega additive): ``(Omega_T - Omega_u)
        delta + Omega_u E_T`` with ``delta`` (the edges only ``u`` holds) bounded per class of
        ``u`` by what the single best class of the rest covers; inflated against rounding."""
        mods, res = self.arrays[i]
        holders = self.holders[i]
        mine = np.zeros(len(mods), dtype=np.bool_)  # u's classes no other unit holds
        only = [c for c in u.classes if holders[c] == 1]
        for s, a in only:
            mine |= (mods == s) & (res == a)
        delta = 0.0
        for s, a in only:
            g = np.gcd(mods, s)
            cov = np.where(~mine & ((a - res) % g == 0), g / mods, 0.0)
            delta += (1.0 - float(cov.max(initial=0.0))) / s
        omu = u.omega * u.scale
        b = (self.om[i] - omu) * delta + omu * self.e[i]
        return float(b + INFLATE * (abs(b) + self.cost[i]))


def banded_refined(
    queries: Iterable[Query], model: CostModel, progress: Progress = None
) -> list[Tree]:
    """Banded WeaveShare (``placement.banded``), then one pass of unit moves: cheaper than
    WeaveShare's plan where both were measured (BENCHMARKS.md). ``progress`` ticks the
    queries in all, half for each phase."""
    qs = list(queries)
    woven = banded_weaveshare(qs, model, _half(progress, 0))
    return refine(woven, model, _half(progress, 1))


def _half(progress: Progress, part: int) -> Progress:
    """``progress`` scaled by one half: the first part forwards ``floor(k / 2)`` of ``k``
    ticks, the second ``ceil(k / 2)``, so two phases of ``k`` each tick ``k`` in all."""
    if not progress:
        return None
    state = [0, 0]  # ticks in, ticks forwarded

    def tick(k: int) -> None:
        state[0] += k
        out = (state[0] + part) // 2
        if out > state[1]:
            progress(out - state[1])
            state[1] = out

    return tick


def refine(
    trees: Sequence[Tree],
    model: CostModel,
    progress: Progress = None,
    cofactor: int = COFACTOR,
    min_gain: float = MIN_GAIN,
) -> list[Tree]:
    """One pass of unit moves (module docstring) over ``trees``: the trees after it, in their
    order, then the units that went alone. Never dearer than ``trees``. ``progress`` is ticked
    with each given tree's queries once its units were tried."""
    plan = _Plan(model, trees)
    additive = model.omega_is_additive()
    units = sum(map(len, plan.units))
    work = sum(t.cost - model.rate(t.stream) for t in trees)
    floor = max(EPS, min_gain * work / units) if units else EPS
    for i, given in enumerate(trees):
        for unit in list(plan.units[i]):
            _try_move(plan, i, unit, additive, cofactor, floor)
        if progress:
            progress(len(given.queries))
    return list(plan.trees)


def _try_move(
    plan: _Plan, i: int, unit: list[Query], additive: bool, cofactor: int, floor: float
) -> None:
    """Move ``unit`` out of tree ``i`` where the plan's cost falls most, by more than
    ``floor`` (module docstring)."""
    model = plan.model
    tree, units = plan.trees[i], plan.units[i]
    if len(units) < 2:
        return
    u = plan.alone(unit)
    cands = plan.candidates(i, u, cofactor)
    if additive:  # bounds first: price nothing where no move can pay
        out_ub = plan.gain_out_ub(i, u)
        if out_ub - min(u.cost, float(plan.added_lb(cands, u, 0.0).min(initial=np.inf))) <= floor:
            return  # not even with every edge of u covered
        lbs = plan.added_lbs(cands, u)
        if out_ub - min(u.cost, float(lbs.min(initial=np.inf))) <= floor:
            return
    else:
        lbs = np.full(len(cands), -np.inf)
    rest = [v for v in units if v is not unit]
    holders = plan.holders[i]
    rest_classes = frozenset(c for c, n in holders.items() if n > (c in u.classes))
    rest_tree = model.tree([q for v in rest for q in v], classes=rest_classes)
    gain_out = tree.cost - rest_tree.cost
    best, best_j, best_tree = gain_out - u.cost, -1, u
    bound = gain_out - lbs
    bound += INFLATE * (np.abs(bound) + abs(gain_out))
    for k in np.lexsort((cands, -bound)).tolist():
        if bound[k] < best:
            break
        j = int(cands[k])
        t = plan.trees[j]
        merged = model.merge(t, u)
        g = gain_out - (merged.cost - t.cost)
        if g > best or (g == best and best_j >= 0 and j < best_j):
            best, best_j, best_tree = g, j, merged
    if best <= floor:
        return
    plan.set(i, rest_tree, rest)
    if best_j < 0:
        plan.set(len(plan.trees), best_tree, [unit])
    else:
        plan.set(best_j, best_tree, [*plan.units[best_j], unit])
