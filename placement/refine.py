"""Unit moves after a weave: our post-pass that makes a woven plan cheaper.

Why: WeaveShare's greedy never undoes a merge. A unit woven early into a tree is often better
off in a tree made later, whose classes cover its edges: one pass of single-unit moves takes
2.4 % off WeaveShare's plan of 10,000 queries of slides up to 10,000 and 2.3 % off banded
WeaveShare's of 30,000 (BENCHMARKS.md, "Unit moves"), which puts banded WeaveShare below
WeaveShare's own cost. No library does local search over residue-class trees; the prices are
the model's (``CostModel.tree`` / ``merge``), exact.

A **unit** is a tree's queries of one slide and one ``range mod slide``: equal residue classes,
the groups ``weaveshare.initial_trees`` starts from. They weave perfectly, so they move together.

One pass, trees in plan order, each tree's units in order of their first query (timeline of one
unit ``u`` of tree ``T``)::

    price T without u                    ->  gain_out = C(T) - C(T - u)
    alone: gain_out - C(u)               ->  the best so far
    candidates: trees of u's key with a class of modulus g * d, g | slide(u), d <= COFACTOR
    each: bound = gain_out - (lower bound of C(T' + u) - C(T'))
    best bound first: price C(T' + u) exactly while the bound can still beat the best
    move u where the plan's cost falls most, if by more than EPS

Why those candidates: a class of modulus ``m`` covers ``1 / (m / gcd(m, s))`` of a class of
slide ``s``; a tree without such a class covers little of the unit's edges and only adds them.
The bound (additive Omega only, else every candidate is priced): ``C(T' + u)`` is at least
``lambda + (E(T') + delta)(Omega(T') + Omega(u))`` with ``delta`` the unit's edges that no
class of ``T'`` covers by the union bound (``sum g / m`` over compatible classes, per class of
the unit); inflated by a relative 1e-9 against rounding. It only skips prices that could not
change the choice, so the moves are those of pricing every candidate (the property test's
reference). Ties go to staying alone, then to the lower tree index.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

import numpy as np

from placement.banded import banded_weaveshare
from placement.queries import Query
from placement.trees import CostModel, Tree
from placement.weaveshare import EPS, Progress

COFACTOR = 4  # a candidate holds a class of modulus g * d, g | slide, d <= this
INFLATE = 1e-9  # relative margin of a bound against float rounding


def units_of(tree: Tree) -> list[list[Query]]:
    """The tree's queries grouped by slide and ``range mod slide``, in order of first query."""
    groups: dict[tuple[int, int], list[Query]] = {}
    for q in tree.queries:
        groups.setdefault((q.slide, q.range % q.slide), []).append(q)
    return list(groups.values())


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


class _Plan:
    """Trees by index (None once emptied), their units, and an index modulus -> trees."""

    def __init__(self, model: CostModel, trees: Sequence[Tree]):
        self.model = model
        self.trees: list[Tree | None] = list(trees)
        self.units: list[list[list[Query]]] = [units_of(t) for t in trees]
        self.unit_tree: dict[int, Tree] = {}  # id of a unit's first query -> the unit alone
        self.by_mod: dict[tuple, dict[int, set[int]]] = defaultdict(lambda: defaultdict(set))
        self.arrays: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.skipped = 0  # units no move could pay for, by their bounds
        for i, t in enumerate(trees):
            self._index(i, t)

    def _index(self, i: int, t: Tree) -> None:
        """File tree ``i`` under its classes' moduli (entries of classes it loses stay: a
        stale candidate is only priced, never wrong)."""
        idx = self.by_mod[t.key]
        for m, _ in t.classes:
            idx[m].add(i)
        cls = sorted(t.classes)
        self.arrays[i] = (
            np.array([m for m, _ in cls], dtype=np.int64),
            np.array([r for _, r in cls], dtype=np.int64),
        )

    def set(self, i: int, t: Tree | None, units: list[list[Query]]) -> None:
        if i == len(self.trees):
            self.trees.append(None)
            self.units.append([])
        self.trees[i], self.units[i] = t, units
        if t is not None:
            self._index(i, t)

    def alone(self, unit: list[Query]) -> Tree:
        t = self.unit_tree.get(id(unit[0]))
        if t is None:
            t = self.unit_tree[id(unit[0])] = self.model.tree(
                unit, classes=self.model.query_classes(unit[0])
            )
        return t

    def candidates(self, i: int, u: Tree, cofactor: int) -> list[int]:
        """Trees of ``u``'s key other than ``i`` with a class of modulus ``g * d``, ``g``
        dividing ``u``'s slide, ``d <= cofactor`` (in index order)."""
        s = u.queries[0].slide
        idx = self.by_mod[u.key]
        out: set[int] = set()
        for g in _divisors(s):
            for d in range(1, cofactor + 1):
                out.update(idx.get(g * d, ()))
        out.discard(i)
        return sorted(j for j in out if self.trees[j] is not None)

    def added_lbs(self, cands: list[int], u: Tree) -> np.ndarray:
        """Lower bounds of ``C(T_j + u) - C(T_j)`` for the trees ``cands`` (Omega additive):
        ``E(T_j + u) >= E(T_j) + delta`` with ``delta`` the unit's edges that ``T_j``'s classes
        leave uncovered by the union bound (``sum g / m`` over compatible classes, per class
        of ``u``); deflated against rounding."""
        if not cands:
            return np.zeros(0)
        parts = [self.arrays[j] for j in cands]
        mods = np.concatenate([m for m, _ in parts])
        res = np.concatenate([r for _, r in parts])
        starts = np.cumsum([0] + [len(m) for m, _ in parts[:-1]])
        delta = np.zeros(len(cands))
        for s, a in u.classes:
            g = np.gcd(mods, s)
            cov = np.add.reduceat(np.where((a - res) % g == 0, g / mods, 0.0), starts)
            delta += np.maximum(0.0, 1.0 - cov) / s
        ts = [self.trees[j] for j in cands]
        e = np.array([float(t.edge_rate) for t in ts])  # type: ignore[union-attr]
        om = np.array([t.omega for t in ts])  # type: ignore[union-attr]
        cost = np.array([t.cost for t in ts])  # type: ignore[union-attr]
        scale = np.array([t.scale for t in ts])  # type: ignore[union-attr]
        added = scale * ((e + delta) * (om + u.omega) - e * om)
        return added - INFLATE * (np.abs(added) + cost + u.cost)


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
) -> list[Tree]:
    """One pass of unit moves (module docstring) over ``trees``; the plan's trees after it,
    the emptied ones dropped, new lone units last. Never dearer than ``trees``. ``progress``
    is ticked with each given tree's queries once its units were tried."""
    plan = _Plan(model, trees)
    additive = model.omega_is_additive()
    for i, given in enumerate(trees):
        for unit in list(plan.units[i]):
            _try_move(plan, i, unit, additive, cofactor)
        if progress:
            progress(len(given.queries))
    return [t for t in plan.trees if t is not None]


def _try_move(plan: _Plan, i: int, unit: list[Query], additive: bool, cofactor: int) -> None:
    """Move ``unit`` out of tree ``i`` where the plan's cost falls most (module docstring)."""
    model = plan.model
    tree, units = plan.trees[i], plan.units[i]
    if tree is None or len(units) < 2:
        return
    rest = [v for v in units if v is not unit]
    rest_classes = frozenset().union(*(plan.alone(v).classes for v in rest))
    u = plan.alone(unit)
    cands = plan.candidates(i, u, cofactor)
    if additive:  # bounds first: price nothing where no move can pay
        lbs = plan.added_lbs(cands, u)
        added = list(zip(cands, lbs.tolist()))
        out_ub = _gain_out_ub(plan, i, u, rest_classes)
        if out_ub - min(u.cost, float(lbs.min(initial=np.inf))) <= EPS:
            plan.skipped += 1
            return
    else:
        added = [(j, -float("inf")) for j in cands]
    rest_tree = model.tree([q for v in rest for q in v], classes=rest_classes)
    gain_out = tree.cost - rest_tree.cost
    best, best_j, best_tree = gain_out - u.cost, -1, u
    bounded = []
    for j, a in added:
        t = plan.trees[j]
        assert t is not None
        bound = gain_out - a
        bound += INFLATE * (abs(bound) + abs(gain_out) + t.cost + u.cost)
        bounded.append((-bound, j))
    bounded.sort()
    for negb, j in bounded:
        if -negb < best:
            break
        t = plan.trees[j]
        assert t is not None
        merged = model.merge(t, u)
        g = gain_out - (merged.cost - t.cost)
        if g > best or (g == best and best_j >= 0 and j < best_j):
            best, best_j, best_tree = g, j, merged
    if best <= EPS:
        return
    plan.set(i, rest_tree, rest)
    if best_j < 0:
        plan.set(len(plan.trees), best_tree, [unit])
    else:
        plan.set(best_j, best_tree, [*plan.units[best_j], unit])


def _gain_out_ub(plan: _Plan, i: int, u: Tree, rest_classes: frozenset) -> float:
    """An upper bound of ``C(T_i) - C(T_i - u)`` (Omega additive): ``(Omega_T - Omega_u)
    delta + Omega_u E_T`` with ``delta`` (the edges only ``u`` holds) bounded per class of
    ``u`` by what the single best class of the rest covers; inflated against rounding."""
    t = plan.trees[i]
    assert t is not None
    cls = sorted(rest_classes)
    mods = np.array([m for m, _ in cls], dtype=np.int64)
    res = np.array([r for _, r in cls], dtype=np.int64)
    delta = 0.0
    for s, a in u.classes:
        if (s, a) in rest_classes:
            continue
        g = np.gcd(mods, s)
        cov = np.where((a - res) % g == 0, g / mods, 0.0)
        delta += (1.0 - float(cov.max(initial=0.0))) / s
    b = t.scale * ((t.omega - u.omega) * delta + u.omega * float(t.edge_rate))
    return b + INFLATE * (abs(b) + t.cost)
