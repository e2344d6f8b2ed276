"""WG_LS: Weave-Group Local Search, our distributed optimizer (not in the dissertation).

Why: WG_TN has the best TotalCost and WG_I the best MaxCost (dissertation Table 9), never both.
WG_LS starts from both plans (and two more) and improves them by moving work between nodes.

**Objective** (precise): with references ``T* = min(TotalCost(WG_TN), TotalCost(WG_I))`` and
``M* = min(MaxCost(WG_TN), MaxCost(WG_I))``, minimise lexicographically
``(max(1, TotalCost / T*, MaxCost / M*), MaxCost, TotalCost)``. The first term is the worst
relative regret against the two references, clipped at 1: every plan that is at least as good as
WG_TN in TotalCost *and* as WG_I in MaxCost scores 1, and among those WG_LS prefers the smaller
MaxCost, then TotalCost. When no such plan is found (often impossible: WeaveShare may build one
tree that cannot be split without paying ``lambda`` per extra tree), WG_LS returns the best
compromise in that worst-ratio sense, which is never worse than the best of its starts
(WG_TN, WG_I, WG_TN that stops weaving at N trees, which escapes WeaveShare's few big trees,
and WG_TL's plan as it is). With capacities, MaxCost is read as the largest utilization
``cost / capacity``.

**Moves** (best improvement, ties to the earlier move in scan order, at most ``max_iters``
accepted moves): re-weave a node (WeaveShare on its trees: only lowers that node); move a tree to
another node, alone or woven into one of its trees; swap two trees between nodes; move one query
out of a tree on the most loaded node into another node, alone or woven into a tree there.

**Speed**: every candidate is keyed in numpy; a candidate whose price is unknown (a merge, a tree
minus a query) is keyed first with a certified lower bound on that price and priced only while
it could still beat the best exact candidate (``LocalSearch.best_move``; checked against an
exhaustive exactly-priced scan by a property test). Prices are cached by tree uid, and so is
what the merge bounds read of a tree; the shared items of a pair are summed by a compiled loop
(``placement.local_search.kernels``), and exact prices are keyed in chunks of ``CHUNK_MIN`` to
``CHUNK_MAX`` candidates (the move does not depend on the chunks: a property test). A second,
tighter bound on a tree minus a query only skips prices that cannot beat the best move found:
the first bound alone orders the candidates, so the move and its ties stay those of the first.
Candidates that would take a tree holding a pinned query (WG_PF's kicks) are never built.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from math import lcm
from typing import Any

import numpy as np

from placement.cost import items_of, tree_cost
from placement.distributed import build_plan, optimize
from placement.local_search.kernels import shared_by_sight
from placement.plan import Plan
from placement.queries import Query
from placement.trees import CostModel, Tree
from placement.weaveshare import weave

REL = 1e-9  # improvements smaller than this (relative) do not count: no cycling on rounding
#: exact keys are computed in chunks of CHUNK_MIN..CHUNK_MAX candidates (``best_move``): the
#: fixed numpy cost of a chunk outweighs the few prices a larger chunk computes past the stop
#: (measured: 16-candidate chunks made WG_LS ~20 % slower on Table 8's large instances)
CHUNK_MIN, CHUNK_MAX = 128, 2048
#: until some candidate beats the plan, chunks of at most FIRST: once one does, the tighter
#: bounds skip the prices that cannot beat it (a 128-candidate first chunk priced them all)
FIRST = 16


@functools.lru_cache(maxsize=4096)
def _divisors(m: int) -> tuple[int, ...]:
    """The proper divisors of ``m`` (``1 <= d < m``), found up to ``sqrt(m)`` (slides in
    milliseconds reach millions)."""
    low = [d for d in range(1, math.isqrt(m) + 1) if m % d == 0]
    return tuple(sorted({x for d in low for x in (d, m // d)} - {m}))


def _lex_lt(x, y) -> bool:
    """Lexicographic ``x < y`` of two short sequences of numbers."""
    for p, q in zip(x, y):
        if p != q:
            return p < q
    return False


def _lex_lt_arr(xs, y) -> np.ndarray:
    """Element-wise lexicographic ``x < y`` for key arrays ``xs`` (a list of columns)."""
    lt = np.zeros(xs[0].shape, bool)
    eq = np.ones(xs[0].shape, bool)
    for x, v in zip(xs, y):
        lt |= eq & (x < v)
        eq &= x == v
    return lt


class LocalSearch:
    def __init__(self, model: CostModel, caps: list, t_ref: float, m_ref: float):
        self.model = model
        self.caps = [1.0 if c is None else c for c in caps]
        self.t_ref, self.m_ref = t_ref, m_ref
        self._merged: dict[tuple[int, int], float] = {}
        self._single: dict[str, Tree] = {}
        self._without: dict[tuple[int, str], float] = {}
        self._counts: dict[int, tuple] = {}
        self._lbs: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        #: candidate moves keyed so far (bound or exact): the search's effort in units that do
        #: not depend on the machine (WG_PF budgets its own search by WG_LS's)
        self.work = 0
        #: queries whose trees no move may take (WG_PF's kicks keep the split they made)
        self.pinned: frozenset[str] = frozenset()
        self._rows: dict[tuple, tuple] = {}  # merge_lbs's view of a tree (by uid)
        self._items: dict[Any, tuple[dict, list[float]]] = {}  # item -> id, weights by id
        self._density: dict[frozenset, Any] = {}  # class set -> its edges per time unit
        self._pin_of: frozenset[str] | None = None  # the pinned set ``_pins`` answers for
        self._pins: dict[int, bool] = {}  # tree uid -> holds a pinned query
        self._facts: dict[int, tuple] = {}  # tree uid -> ``_query_facts``
        self._warr: dict[Any, np.ndarray] = {}  # item function -> ``_weights``

    def _item_of(self, technique: str):
        """The item weights of an additive Omega (``placement.cost.Pricing.items``), None if
        not additive under the model's slicing (Cutty: Panes only; FlatFIT adds the
        open-partial term)."""
        return items_of(technique, self.model.slicing)[0]

    def merged_cost(self, a: Tree, b: Tree) -> float:
        k = (a.uid, b.uid) if a.uid < b.uid else (b.uid, a.uid)
        v = self._merged.get(k)
        if v is None:
            v = self._merged[k] = self.model.merged_price(a, b)[2]
        return v

    def single(self, q: Query) -> Tree:
        t = self._single.get(q.id)
        if t is None:
            t = self._single[q.id] = self.model.tree([q])
        return t

    def _stats(self, t: Tree):
        st = self._counts.get(t.uid)
        if st is None:
            st = self._counts[t.uid] = (
                Counter(c for p in t.queries for c in self.model.query_classes(p)),
                Counter((p.range, p.slide) for p in t.queries),
                Counter(p.slide for p in t.queries),
            )
        return st

    def _without_parts(self, t: Tree, q: Query):
        """Classes, windows and composite slide of ``t`` minus ``q``, from the tree's multiset
        counts (re-deriving them from every query made this the search's hot spot)."""
        classes, windows, slides = self._stats(t)
        qc = self.model.query_classes(q)
        cls = frozenset(c for c, m in classes.items() if m - (c in qc) > 0)
        w = (q.range, q.slide)
        wins = frozenset(x for x, m in windows.items() if m - (x == w) > 0)
        cs = lcm(*(x for x, m in slides.items() if m - (x == q.slide) > 0))
        return cls, wins, cs

    def without_cost(self, t: Tree, q: Query) -> float:
        """Cost of ``t`` minus ``q`` (``t`` has at least two queries), priced like ``model.tree``."""
        k = (t.uid, q.id)
        v = self._without.get(k)
        if v is None:
            classes, windows, _ = self._stats(t)
            qc = self.model.query_classes(q)
            if self._lone_edges(t, q) == 0.0:
                # every class of q is another query's too, or lies in another query's class
                # (of a divisor of its modulus): the same positions, hence the same density
                cls = t.classes
            else:
                cls = frozenset(c for c, m in classes.items() if m - (c in qc) > 0)
            w = (q.range, q.slide)
            wins = frozenset(x for x, m in windows.items() if m - (x == w) > 0)
            e = self._density.get(cls)
            if e is None:  # an exact function of the set: the trees of a search share many
                e = self._density[cls] = self.model.engine.density(cls)
            tech = t.technique
            v = self._without[k] = tree_cost(
                self.model.rate(t.stream), e, self.model.omega(tech, wins, e), t.scale
            )
        return v

    def without(self, t: Tree, q: Query) -> Tree:
        cls, wins, cs = self._without_parts(t, q)
        rest = [p for p in t.queries if p.id != q.id]
        return self.model.tree_from_parts(
            t.stream, t.aggregate, rest, cls, wins, cs, self.model.engine.density(cls), t.kind
        )

    def key(self, loads: Sequence[float]) -> tuple[float, float, float]:
        total = sum(loads)
        mx = max(l / c for l, c in zip(loads, self.caps))
        return (max(1.0, total / self.t_ref, mx / self.m_ref), mx, total)

    @staticmethod
    def better(a, b) -> bool:
        """Lexicographically smaller by more than rounding noise."""
        for x, y in zip(a, b):
            tol = REL * max(1.0, abs(x), abs(y))
            if x < y - tol:
                return True
            if x > y + tol:
                return False
        return False

    def _is_pinned(self, t: Tree) -> bool:
        """Whether ``t`` holds a pinned query; cached per (tree, pinned set): a kick's descent
        asks again for every unchanged tree at each of its moves."""
        if self._pin_of is not self.pinned:
            self._pin_of, self._pins = self.pinned, {}
        v = self._pins.get(t.uid)
        if v is None:
            v = self._pins[t.uid] = not self._query_facts(t)[0].isdisjoint(self.pinned)
        return v

    def _query_facts(self, t: Tree) -> tuple[frozenset[str], list[Query]]:
        """The query ids of ``t`` and the queries a query move takes out of it (one per window,
        as scanning its queries gives them: same effect), cached by uid: every iteration of a
        descent asks again for trees that did not change."""
        v = self._facts.get(t.uid)
        if v is None:
            qs = list({(q.range, q.slide): q for q in reversed(t.queries)}.values())[::-1]
            v = self._facts[t.uid] = (frozenset(q.id for q in t.queries), qs)
        return v

    # -- one iteration: the best move ------------------------------------------------------
    def _keys(self, ctx, a, la, b, lb):
        """Key arrays (worst ratio, MaxCost, TotalCost) of plans that change nodes a and b."""
        loads, caps, util = ctx["loads"], ctx["caps"], ctx["util"]
        tot = ctx["total"] - loads[a] - loads[b] + la + lb
        if ctx["unit_caps"]:
            mx = np.maximum(la, lb)  # x / 1.0 is x
        else:
            mx = np.maximum(la / caps[a], lb / caps[b])
        # the largest utilization among the untouched nodes: that of the first of the three
        # most utilized nodes that is neither a nor b (a move touches two nodes)
        top = ctx["top"]
        others = np.full(a.shape, util[top[2]] if len(top) > 2 else -np.inf)
        for j in top[1::-1]:  # the first takes precedence
            others = np.where((a != j) & (b != j), util[j], others)
        mx = np.maximum(mx, others)
        k0 = np.maximum(1.0, np.maximum(tot / self.t_ref, mx / self.m_ref))
        return k0, mx, tot

    def _key1(self, ctx, a: int, la: float, b: int, lb: float) -> tuple[float, float, float]:
        """``_keys`` for one candidate, in plain floats."""
        loads, caps, util = ctx["loads"], ctx["caps"], ctx["util"]
        tot = ctx["total"] - float(loads[a]) - float(loads[b]) + la + lb
        mx = max(la / float(caps[a]), lb / float(caps[b]))
        for j in ctx["top"]:
            if j != a and j != b:
                mx = max(mx, float(util[j]))
                break
        return (max(1.0, tot / self.t_ref, mx / self.m_ref), mx, tot)

    @staticmethod
    def _quantized(cur, k0, mx, tot):
        """Keys on a grid of relative step REL centred on the current plan's key, so that numpy
        can order them lexicographically with rounding noise counted as a tie (``offer``
        quantizes single keys the same way). Centred, not floored: a component equal to the
        current one up to rounding (often exactly 1.0, the clamped ratio) must land in one
        bin, and ``floor(1.0 / step)`` sits on a bin edge."""
        return [np.round((x - c) / (REL * max(1.0, abs(c)))) for x, c in zip((k0, mx, tot), cur)]

    def _without_lbs(self, t: Tree, qs: list[Query]) -> tuple[np.ndarray, np.ndarray]:
        """Lower bounds on the cost of ``t`` minus each of ``qs``: its edges include every
        remaining query's own edges and every edge of ``t`` that is not the removed query's;
        Omega is exact for techniques whose Omega is a sum over items (``_ITEM_OMEGA``).

        Two bounds: the first orders the candidates (``best_move``'s scan and tie order), the
        second, tighter, only decides what is not priced: the edges the removed query alone
        brings lie in its classes that no other query of ``t`` has nor covers (a class of a
        divisor of the modulus with the same residue), at most ``1/m`` per class ``(m, r)``
        (``_lone_edges``)."""
        k = (t.uid, len(qs))
        v = self._lbs.get(k)
        if v is not None:
            return v
        es = np.array([float(self.single(p).edge_rate) for p in t.queries])
        pos = {p.id: n for n, p in enumerate(t.queries)}
        order = np.argsort(-es, kind="stable")
        i1, i2 = int(order[0]), int(order[1])
        qi = np.array([pos[q.id] for q in qs])
        best_other = np.where(qi == i1, es[i2], es[i1])
        e = np.maximum(best_other, float(t.edge_rate) - es[qi])
        lone = np.array([self._lone_edges(t, q) for q in qs])
        e2 = np.maximum(e, float(t.edge_rate) - np.minimum(es[qi], lone))
        item_of, floor_of = items_of(t.technique, self.model.slicing)
        if item_of is None and floor_of is not None:
            # a floor of distinct items (SlickDeque Inv: 2 x distinct ranges, cost.omega_floor)
            items = dict(floor_of(p.range, p.slide) for p in t.queries)
            count = Counter(floor_of(p.range, p.slide)[0] for p in t.queries)
            total = math.fsum(items.values())
            om = np.array(
                [
                    total - (w if count[it] == 1 else 0.0)
                    for it, w in (floor_of(q.range, q.slide) for q in qs)
                ]
            )
        elif item_of is None:
            om = np.zeros(len(qs))  # no floor known
        else:
            count = Counter(item_of(p.range, p.slide)[0] for p in t.queries)
            om = np.array(
                [
                    t.omega - (w if count[it] == 1 else 0.0)
                    for it, w in (item_of(q.range, q.slide) for q in qs)
                ]
            )
        lam = self.model.rate(t.stream)
        v = self._lbs[k] = (
            (lam + e * t.scale * om) * (1 - REL),
            (lam + e2 * t.scale * om) * (1 - REL),
        )
        return v

    def _lone_edges(self, t: Tree, q: Query) -> float:
        """An upper bound on the edges per axis unit that ``q`` alone brings to ``t`` (those
        ``t`` minus ``q`` lacks): ``sum(1/m)`` over the classes ``(m, r)`` of ``q`` that no
        other query of ``t`` has, nor covers with a class ``(d, r mod d)``, ``d`` a proper
        divisor of ``m`` (every position of the first is one of the second)."""
        classes = self._stats(t)[0]
        out = 0.0
        for m, r in self.model.query_classes(q):
            if classes[(m, r)] > 1:
                continue
            if any((d, r % d) in classes for d in _divisors(m)):
                continue
            out += 1.0 / m
        return out

    def _row(self, t: Tree, item_of) -> tuple:
        """``(item ids, lambda, E_time, Omega, set of the item ids)`` of ``t`` for
        ``merge_lbs``, cached by uid: the bounds of every pair are rebuilt each iteration from
        trees that mostly did not change. Item ids are numbered per item function in order of
        first sight (``None`` when Omega is not additive)."""
        k = (t.uid, item_of)
        r = self._rows.get(k)
        if r is None:
            ids = None
            if item_of is not None:
                known, weights = self._items.setdefault(item_of, ({}, []))
                seen = []
                for it, w in (item_of(a, b) for a, b in t.windows):
                    g = known.get(it)
                    if g is None:
                        g = known[it] = len(weights)
                        weights.append(w)
                    seen.append(g)
                ids = np.array(seen, dtype=np.intp)
            idset = None if ids is None else frozenset(seen)
            r = self._rows[k] = (ids, self.model.rate(t.stream), t.time_edge_rate, t.omega, idset)
        return r

    def _shared(self, rx: list[tuple], ry: list[tuple], item_of) -> np.ndarray:
        """``S[i, j]``: the summed weight of the items that ``xs[i]`` and ``ys[j]`` share.

        Summed like a 0/1 incidence product with items as columns in order of first sight
        over ``xs`` then ``ys`` (``kernels``): the order fixes the rounding of a sum of
        several weights, and the bounds, hence the order in which ``best_move`` prices its
        ties, must not depend on what was cached before. A single-item ``xs[i]`` (a
        one-query tree) shares its one weight or nothing: no sum, no order."""
        if all(len(r[0]) == 1 for r in rx):
            # one item per xs[i]: its weight where ys[j] holds it (a set lookup per pair:
            # numpy's fixed cost per call outweighed these few pairs)
            wl = self._items[item_of][1]
            sets = [r[4] for r in ry]
            return np.array(
                [
                    [w if i in s else 0.0 for s in sets]
                    for i, w in ((int(r[0][0]), wl[int(r[0][0])]) for r in rx)
                ],
                float,
            ).reshape(len(rx), len(ry))
        gx, gy = [r[0] for r in rx], [r[0] for r in ry]
        empty = np.zeros(0, np.intp)
        return shared_by_sight(
            np.concatenate(gx) if gx else empty,
            np.cumsum([0] + [len(g) for g in gx]),
            np.concatenate(gy) if gy else empty,
            np.cumsum([0] + [len(g) for g in gy]),
            self._weights(item_of),
        )

    def _weights(self, item_of) -> np.ndarray:
        """The item weights by id as an array, rebuilt only when items were added (a search
        meets its queries' few windows early; converting the list per call cost more than
        the sums)."""
        wl = self._items[item_of][1]
        arr = self._warr.get(item_of)
        if arr is None or arr.size != len(wl):
            arr = self._warr[item_of] = np.asarray(wl, float)
        return arr

    def merge_lbs(self, xs: list[Tree], ys: list[Tree]) -> np.ndarray:
        """Lower bounds ``M[i, j]`` on the cost per time unit of ``xs[i]`` woven with ``ys[j]``
        (pairs of one key; other pairs get a number that is never used).

        Why it holds for time and count trees alike: the cost is ``lambda + E_time * Omega``
        with ``E_time = E * scale`` (``tree_cost``; ``scale`` is 1 or, for a count tree, the
        stream's rate, equal for both parts of one key); the merge's edges include each part's,
        so its ``E_time`` is at least the larger part's, and its Omega is exact from the parts
        when Omega is a sum over distinct items (``_ITEM_OMEGA``: both parts' sums less the
        items they share), else at least each part's floor (``cost.omega_floor``). The factor
        ``1 - REL`` absorbs rounding (the exact price multiplies in another order).
        """
        item_of = self._item_of(xs[0].technique) if xs else None
        rx = [self._row(x, item_of) for x in xs]
        ry = [self._row(y, item_of) for y in ys]
        lam = np.array([r[1] for r in rx])[:, None]
        e = np.maximum(np.array([r[2] for r in rx])[:, None], np.array([r[2] for r in ry])[None, :])
        if item_of is not None:
            om = (
                np.array([r[3] for r in rx])[:, None]
                + np.array([r[3] for r in ry])[None, :]
                - self._shared(rx, ry, item_of)
            )
        else:
            om = np.maximum(
                np.array([self.model.omega_floor(x) for x in xs])[:, None],
                np.array([self.model.omega_floor(y) for y in ys])[None, :],
            )
        return (lam + e * om) * (1 - REL)

    def _exact_keys(self, ctx, part, flat, reps, kind, T, U, R, A, LA, B):
        """Exact key arrays of the bounded candidates ``part`` (kinds 2-4 of ``best_move``):
        the prices their optimistic keys stood in for."""
        ld, cost = ctx["loads"], ctx["tree_cost"]
        k, t, u, a, b = kind[part], T[part], U[part], A[part], B[part]
        # the caches are read inline (most prices were met in an earlier iteration); a miss
        # prices through ``merged_cost`` / ``without_cost``, which fill them
        merged, without, uids = self._merged, self._without, ctx["uids"]
        extra_a, extra_b = np.zeros(part.size), np.empty(part.size)
        # kinds 3 and 4: h's tree without the query, once per query (a query goes to every
        # other node: kind 3's candidates share it)
        iq = np.flatnonzero(k != 2)
        if iq.size:
            rs, inv = np.unique(R[part][iq], return_inverse=True)
            wa, wb = [], []
            for rn in rs.tolist():
                tn, q = reps[rn]
                w = without.get((uids[tn], q.id))
                wa.append(self.without_cost(flat[tn][2], q) if w is None else w)
                wb.append(self.single(q).cost)
            extra_a[iq] = np.array(wa)[inv]
            extra_b[iq] = np.array(wb)[inv]  # kind 3: the query alone
        # kinds 2 and 4: a merge per candidate
        im = np.flatnonzero(k != 3)
        xb: list[float] = []
        rm = R[part][im].tolist()
        for kn, tn, un, rn in zip(k[im].tolist(), t[im].tolist(), u[im].tolist(), rm):
            if kn == 2:
                x, y, xt = uids[tn], uids[un], flat[tn][2]
            else:
                xt = self.single(reps[rn][1])
                x, y = xt.uid, uids[un]
            v = merged.get((x, y) if x < y else (y, x))
            xb.append(self.merged_cost(xt, flat[un][2]) if v is None else v)
        if im.size:
            extra_b[im] = xb
        la = np.where(k == 2, LA[part], (ld[a] - cost[t]) + extra_a)
        lb = np.where(k == 3, ld[b], ld[b] - cost[u]) + extra_b
        return self._keys(ctx, a, la, b, lb)

    @staticmethod
    def _better_arr(ks, cur) -> np.ndarray:
        """``better(k, cur)`` for key arrays ``ks`` (a list of columns)."""
        out = np.zeros(ks[0].shape, bool)
        open_ = np.ones(ks[0].shape, bool)
        for x, y in zip(ks, cur):
            tol = REL * np.maximum(1.0, np.maximum(np.abs(x), abs(y)))
            lt, gt = x < y - tol, x > y + tol
            out |= open_ & lt
            open_ &= ~(lt | gt)
        return out

    def _query_moves(self, ctx, rt: np.ndarray, lhs: tuple, sqs: list[Tree], trees):
        """Columns ``(kind, t, u, rep, a, la, b, lb, la2)`` of kinds 3 and 4 for the taken-out
        queries ``rep = 0..`` (tree ``rt``, node h's load bounds ``lhs``: the ordering one and
        the tighter one, one-query tree ``sqs``), in the order of a kind 3 block (queries x
        other nodes) then a kind 4 block (queries x same-key trees off h) per tree."""
        lh, lh2 = lhs
        ld, cost, node, kid, h = ctx["loads"], ctx["tree_cost"], ctx["node"], ctx["kid"], ctx["h"]
        others = ctx["others"]
        nr, no = rt.size, others.size
        rep = np.arange(nr)
        qc = np.array([x.cost for x in sqs])
        parts = [
            (
                np.repeat(rt, no),
                np.full(nr * no, -1),
                np.repeat(rep, no),
                np.repeat(lh, no),
                np.tile(others, nr),
                (ld[others][None, :] + qc[:, None]).ravel(),
                np.full(nr * no, 3, np.int8),
                np.repeat(lh2, no),
            )
        ]
        for k in dict.fromkeys(kid[rt].tolist()):
            sel = np.flatnonzero(kid[rt] == k)
            us = np.flatnonzero((kid == k) & (node != h))
            if not us.size:
                continue
            mlb = self.merge_lbs([sqs[i] for i in sel.tolist()], [trees[u] for u in us])
            n = sel.size * us.size
            parts.append(
                (
                    np.repeat(rt[sel], us.size),
                    np.tile(us, sel.size),
                    np.repeat(sel, us.size),
                    np.repeat(lh[sel], us.size),
                    np.tile(node[us], sel.size),
                    (ld[node[us]][None, :] - cost[us][None, :] + mlb).ravel(),
                    np.full(n, 4, np.int8),
                    np.repeat(lh2[sel], us.size),
                )
            )
        t, u, r, la, b, lb, kind, la2 = (np.concatenate(c) for c in zip(*parts))
        order = np.argsort(2 * t + (kind == 4), kind="stable")
        a = np.full(t.size, h)
        return tuple(x[order] for x in (kind, t, u, r, a, la, b, lb, la2))

    def best_move(self, nodes: list[list[Tree]], loads: list[float]):
        """The move with the smallest key, or None when none beats the current plan.

        Candidates (the module's moves) are keyed in numpy. A candidate whose price is unknown
        (a tree or query woven into a tree of another node, a query taken out of a tree) is first
        keyed with lower bounds on those prices (``merge_lbs``, ``_without_lbs``), and priced
        exactly, best optimistic key first, only while that key could still beat the best
        exact key found: the best move of pricing everything, with far fewer prices. Ties within
        rounding go to the earlier candidate in scan order.
        """
        N = len(nodes)
        flat = [(j, i, t) for j, ts in enumerate(nodes) for i, t in enumerate(ts)]
        if N < 2 or not flat:
            return None
        caps = np.asarray(self.caps, float)
        ld = np.asarray(loads, float)
        util = ld / caps
        top = [int(j) for j in np.argsort(-util, kind="stable")[:3]]
        h = top[0]
        cur = self.key(loads)
        node = np.array([j for j, _, _ in flat])
        cost = np.array([t.cost for _, _, t in flat])
        ctx = {
            "loads": ld,
            "caps": caps,
            "util": util,
            "top": top,
            "unit_caps": bool(np.all(caps == 1.0)),
            "total": float(ld.sum()),
            "tree_cost": cost,
            "uids": [t.uid for _, _, t in flat],
        }
        keyid = {k: n for n, k in enumerate(dict.fromkeys(t.key for _, _, t in flat))}
        kid = np.array([keyid[t.key] for _, _, t in flat])
        trees = [t for _, _, t in flat]
        others = np.flatnonzero(np.arange(N) != h)
        ctx.update(node=node, kid=kid, h=h, others=others)
        on_h, off_h = np.flatnonzero(node == h), np.flatnonzero(node != h)
        # No move takes a tree holding a pinned query (a swap takes both trees): such
        # candidates are never built (WG_PF's kicks pin the split's trees, often all of the
        # busiest node's query moves). Dropping them keeps the others' scan order.
        free = None
        if self.pinned:
            free = ~np.array([self._is_pinned(t) for t in trees])
            on_h, off_h = on_h[free[on_h]], off_h[free[off_h]]
        reps: list[tuple[int, Query]] = []  # (flat index of a tree on h, query to take out)
        cols: list[tuple] = []  # blocks of (kind, t, u, rep, a, la, b, lb)

        def block(kind, t, u, rep, a, la, b, lb):
            n = t.size  # t is a column (a flat index per candidate); scalars are repeated
            if not n:
                return
            cols.append(
                tuple(
                    x if isinstance(x, np.ndarray) else np.full(n, x)
                    for x in (np.int8(kind), t, u, rep, a, la, b, lb, la)
                )
            )

        # Kinds 0/1 (exact): a whole tree to or from the most loaded node, a swap with it.
        # (Elsewhere a move keeps TotalCost and cannot lower the key.)
        if on_h.size:
            t_, b_ = np.repeat(on_h, others.size), np.tile(others, on_h.size)
            block(0, t_, -1, -1, h, ld[h] - cost[t_], b_, ld[b_] + cost[t_])
        if off_h.size:
            a_ = node[off_h]
            block(0, off_h, -1, -1, a_, ld[a_] - cost[off_h], h, ld[h] + cost[off_h])
        if on_h.size and off_h.size:
            t_, u_ = np.repeat(on_h, off_h.size), np.tile(off_h, on_h.size)
            block(
                1,
                t_,
                u_,
                -1,
                h,
                ld[h] - cost[t_] + cost[u_],
                node[u_],
                ld[node[u_]] + cost[t_] - cost[u_],
            )
        # Kind 2 (bounded): a tree woven into a same-key tree on another node.
        ti, ui = np.nonzero((kid[:, None] == kid[None, :]) & (node[:, None] != node[None, :]))
        if ti.size and free is not None:
            ti, ui = ti[free[ti]], ui[free[ti]]
        if ti.size:
            mlb = self.merge_lbs(trees, trees)[ti, ui]  # every tree: the same sums (_shared)
            block(
                2,
                ti,
                ui,
                -1,
                node[ti],
                ld[node[ti]] - cost[ti],
                node[ui],
                ld[node[ui]] - cost[ui] + mlb,
            )
        # Kinds 3/4 (bounded): one query out of a tree on the most loaded node, alone to
        # another node (3) or woven into a same-key tree there (4). Built for all the trees of
        # h at once (one bound call per key: a one-query tree's bounds do not depend on the
        # other rows), then put in scan order: per tree, its kind 3 block, then its kind 4.
        rt: list[int] = []  # per taken-out query: the flat index of its tree
        lhs: list[np.ndarray] = []  # lower bounds on h's load without it
        lhs2: list[np.ndarray] = []  # tighter ones (what is priced, never the order)
        sqs: list[Tree] = []  # its one-query tree
        for t in on_h:
            tree = flat[t][2]
            if len(tree.queries) < 2:
                continue  # a single-query tree moves as a tree above
            qs = self._query_facts(tree)[1]
            reps.extend((int(t), q) for q in qs)  # one query per window: same effect
            lb1, lb2 = self._without_lbs(tree, qs)
            lhs.append(ld[h] - cost[t] + lb1)
            lhs2.append(ld[h] - cost[t] + lb2)
            sqs += [self.single(q) for q in qs]
            rt += [int(t)] * len(qs)
        if reps:
            lh = np.concatenate(lhs), np.concatenate(lhs2)
            cols.append(self._query_moves(ctx, np.array(rt), lh, sqs, trees))
        if not cols:
            return None
        kind, T, U, R, A, LA, B, LB, LA2 = (np.concatenate(c) for c in zip(*cols))
        self.work += len(kind)
        qk = self._quantized(cur, *self._keys(ctx, A, LA, B, LB))
        best_q: list[float] | None = None  # quantized key of the best move offered so far
        best_i: int | None = None
        steps = [REL * max(1.0, abs(c)) for c in cur]

        def offer(k, i: int) -> None:
            nonlocal best_q, best_i
            kq = [round((x - c) / st) for x, c, st in zip(k, cur, steps)]
            if self.better(k, cur) if best_q is None else _lex_lt(kq, best_q):
                best_q, best_i = kq, i

        def move_of(i: int):
            k, t, u = int(kind[i]), int(T[i]), int(U[i])
            a, b = int(A[i]), int(B[i])
            if k == 0:
                return ("move", a, flat[t][1], b, None)
            if k == 1:
                return ("swap", a, flat[t][1], b, flat[u][1])
            if k == 2:
                return ("move", a, flat[t][1], b, flat[u][1])
            q = reps[int(R[i])][1]
            return ("query", a, flat[t][1], b, None if k == 3 else flat[u][1], q)

        ex = np.flatnonzero(kind <= 1)
        if ex.size:
            i = int(ex[np.lexsort([x[ex] for x in qk][::-1])[0]])
            offer(self._key1(ctx, int(A[i]), float(LA[i]), int(B[i]), float(LB[i])), i)
        cur_q = [x[0] for x in self._quantized(cur, *(np.array([c]) for c in cur))]
        bd = np.flatnonzero(kind >= 2)
        bd = bd[_lex_lt_arr([x[bd] for x in qk], best_q or cur_q)]
        order = bd[np.lexsort([x[bd] for x in qk][::-1])]
        # Price in chunks, best optimistic key first, until the next optimistic key cannot beat
        # the best exact one. The move taken is the one of offering the priced candidates one
        # by one: the first exact minimum from the first candidate that beats the plan (those
        # priced past that stop never win: their exact keys are at least their optimistic
        # ones, which are at least the best at the stop). Chunks stay small while they need new
        # prices (what is priced past the stop is wasted), and grow while prices are cached.
        pos, size = 0, CHUNK_MIN
        while pos < order.size:
            step = size if best_q is not None else min(size, FIRST)
            part = todo = order[pos : pos + step]
            if best_q is not None:
                n = int(np.count_nonzero(_lex_lt_arr([x[part] for x in qk], best_q)))
                part = part[:n]  # sorted keys: those still below the best are a prefix
                # not priced: those whose tighter key cannot beat the best either (their
                # exact keys cannot go below it, and a tie goes to the best, found earlier)
                k2 = self._quantized(cur, *self._keys(ctx, A[part], LA2[part], B[part], LB[part]))
                todo = part[_lex_lt_arr(k2, best_q)]
            known = len(self._merged) + len(self._without)
            if todo.size:
                ks = self._exact_keys(ctx, todo, flat, reps, kind, T, U, R, A, LA, B)
                kq = self._quantized(cur, *ks)
                start = 0
                if best_q is None:
                    good = self._better_arr(ks, cur)
                    start = int(np.argmax(good)) if good.any() else todo.size
                if start < todo.size:
                    j = start + int(np.lexsort([x[start:] for x in kq][::-1])[0])
                    kj = [float(x[j]) for x in kq]
                    if best_q is None or _lex_lt(kj, best_q):
                        best_q, best_i = kj, int(todo[j])
            if part.size < step:
                break
            fresh = len(self._merged) + len(self._without) > known
            pos, size = pos + step, max(CHUNK_MIN, size // 2) if fresh else min(2 * size, CHUNK_MAX)
        return None if best_i is None else move_of(best_i)

    def run(
        self, nodes: list[list[Tree]], max_iters: int, on_plan=None, work_limit: float = math.inf
    ) -> list[list[Tree]]:
        """Re-weave, then the best improving move, until none is left (or ``self.work`` has
        reached ``work_limit``); ``on_plan(nodes)`` sees every plan passed through (WG_PF
        archives them: ``placement.pareto``)."""
        nodes = [list(ts) for ts in nodes]
        N = len(nodes)
        loads = [sum(t.cost for t in ts) for ts in nodes]
        dirty = set(range(N))
        for _ in range(max_iters):
            if self.work >= work_limit:
                break
            # 1. Re-weave changed nodes: never raises any node cost.
            rewoven = False
            for j in sorted(dirty):
                if len(nodes[j]) > 1:
                    ts = weave(nodes[j], self.model)
                    c = sum(t.cost for t in ts)
                    if c < loads[j] - REL * max(1.0, loads[j]):
                        nodes[j], loads[j] = ts, c
                        rewoven = True
            if rewoven and on_plan is not None:
                on_plan(nodes)
            dirty.clear()
            move = self.best_move(nodes, loads)
            if move is None:
                if rewoven:
                    continue
                break
            self.apply(nodes, loads, move)
            if on_plan is not None:
                on_plan(nodes)
            dirty |= {move[1], move[3]}
        return nodes

    def apply(self, nodes, loads, move) -> None:
        kind, a, ti, b, ui = move[:5]
        t = nodes[a][ti]
        if kind == "swap":
            u = nodes[b][ui]
            nodes[a][ti], nodes[b][ui] = u, t
        elif kind == "move":
            nodes[a].pop(ti)
            if ui is None:
                nodes[b].append(t)
            else:
                nodes[b][ui] = self.model.merge(nodes[b][ui], t)
        else:
            q = move[5]
            rest = self.without(t, q)
            nodes[a][ti] = rest
            qt = self.single(q)
            if ui is None:
                nodes[b].append(qt)
                self._single.pop(q.id)  # a tree object lives in one place only
            else:
                nodes[b][ui] = self.model.merge(nodes[b][ui], qt)
        for j in (a, b):
            loads[j] = sum(x.cost for x in nodes[j])


#: the Table 7 plans WG_LS starts from (or keeps as a candidate), which ``wg_ls`` can be given
STARTS = ("WG_TN", "WG_I", "WG_TL")


def _layout(plan: Plan) -> tuple:
    return tuple(tuple(sorted(tuple(q.id for q in t.queries) for t in n.trees)) for n in plan.nodes)


def wg_ls(
    queries: Sequence[Query],
    model: CostModel,
    caps: list,
    seed: int = 0,
    preprocess: bool | str = False,
    max_iters: int = 100,
    starts: Mapping[str, Plan] | None = None,
) -> Plan:
    """WG_LS (see module docstring). Deterministic: no randomness beyond WG_I's seeded start.

    The search runs from WG_TN, WG_I and WG_TN-stopped-at-N (once when two are the same
    layout); WG_TL's plan is a candidate as it is: searching from it cost the most and never
    gave the best plan on a 24-configuration sample of the Table 8 grid. ``starts``: plans of
    ``STARTS`` already computed with the same arguments (a simulation has them; only their
    trees are read); the missing ones are computed here.
    """
    opt: dict[str, Any] = dict(seed=seed, preprocess=preprocess)
    given = dict(starts or {})

    def start_plan(name: str) -> Plan:
        p = given.get(name)
        return optimize(name, queries, model, caps, **opt) if p is None else p

    tn = start_plan("WG_TN")
    wi = start_plan("WG_I")

    def util(p: Plan) -> float:
        return max(n.cost / (1.0 if n.capacity is None else n.capacity) for n in p.nodes)

    search = LocalSearch(model, caps, min(tn.total_cost, wi.total_cost), min(util(tn), util(wi)))
    tl = start_plan("WG_TL")
    tn_stop = optimize("WG_TN", queries, model, caps, stop_at_nodes=True, **opt)
    best_nodes, best_key = [list(n.trees) for n in tl.nodes], search.key([n.cost for n in tl.nodes])
    seen = set()
    for start in (tn, wi, tn_stop):
        if _layout(start) in seen:
            continue
        seen.add(_layout(start))
        nodes = search.run([n.trees for n in start.nodes], max_iters)
        k = search.key([sum(t.cost for t in ts) for ts in nodes])
        if search.better(k, best_key):
            best_nodes, best_key = nodes, k
    plan = build_plan("WG_LS", model, best_nodes, caps, list(queries))
    plan.work = search.work
    return plan
