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
(WG_TN, WG_I, and two cheap extra starts: WG_TL, and WG_TN that stops weaving at N trees,
which escapes WeaveShare's few big trees). With capacities,
MaxCost is read as the largest utilization ``cost / capacity``.

**Moves** (best improvement, deterministic scan order, at most ``max_iters`` accepted moves):
re-weave a node (WeaveShare on its trees: only lowers that node); move a tree to another node,
alone or woven into one of its trees; swap two trees between nodes; move one query out of a tree on
the most loaded node into another node, alone or woven into a tree there. Merged prices are cached
by tree uid, so an iteration re-prices only trees created by the last move.
"""

from __future__ import annotations

from collections import Counter
from math import lcm
from typing import Sequence

from placement.cost import omega, tree_cost
from placement.distributed import build_plan, optimize
from placement.plan import Plan
from placement.queries import Query
from placement.slicing import query_classes
from placement.trees import CostModel, Tree
from placement.weaveshare import weave

REL = 1e-9  # improvements smaller than this (relative) do not count: no cycling on rounding


class _Search:
    def __init__(self, model: CostModel, caps: list, t_ref: float, m_ref: float):
        self.model = model
        self.caps = [1.0 if c is None else c for c in caps]
        self.t_ref, self.m_ref = t_ref, m_ref
        self._merged: dict[tuple[int, int], float] = {}
        self._single: dict[str, Tree] = {}
        self._without: dict[tuple[int, str], float] = {}
        self._counts: dict[int, tuple] = {}

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
                Counter(c for p in t.queries for c in query_classes(p)),
                Counter((p.range, p.slide) for p in t.queries),
                Counter(p.slide for p in t.queries))
        return st

    def _without_parts(self, t: Tree, q: Query):
        """Classes, windows and composite slide of ``t`` minus ``q``, from the tree's multiset
        counts (re-deriving them from every query made this the search's hot spot)."""
        classes, windows, slides = self._stats(t)
        qc = query_classes(q)
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
            cls, wins, cs = self._without_parts(t, q)
            e = self.model.engine.density(cls)
            tech = t.technique
            v = self._without[k] = tree_cost(self.model.rate(t.stream), e, omega(tech, wins, e))
        return v

    def without(self, t: Tree, q: Query) -> Tree:
        cls, wins, cs = self._without_parts(t, q)
        rest = [p for p in t.queries if p.id != q.id]
        return self.model._price(t.stream, t.aggregate, rest, cls, wins, cs,
                                 self.model.engine.density(cls))

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

    def run(self, nodes: list[list[Tree]], max_iters: int) -> list[list[Tree]]:
        nodes = [list(ts) for ts in nodes]
        N = len(nodes)
        caps = self.caps
        loads = [sum(t.cost for t in ts) for ts in nodes]
        dirty = set(range(N))
        for _ in range(max_iters):
            # 1. Re-weave changed nodes: never raises any node cost.
            rewoven = False
            for j in sorted(dirty):
                if len(nodes[j]) > 1:
                    ts = weave(nodes[j], self.model)
                    c = sum(t.cost for t in ts)
                    if c < loads[j] - REL * max(1.0, loads[j]):
                        nodes[j], loads[j] = ts, c
                        rewoven = True
            dirty.clear()
            best_key, best_move = self.key(loads), None
            total = sum(loads)
            top = sorted(((loads[j] / caps[j], j) for j in range(N)), reverse=True)[:3]

            def consider(a, la, b, lb, move):
                """Key of the plan with node a at load la and node b at lb (others unchanged)."""
                nonlocal best_key, best_move
                new_total = total - loads[a] - loads[b] + la + lb
                mx = max(la / caps[a], lb / caps[b])
                for u, j in top:
                    if j != a and j != b:
                        mx = max(mx, u)
                        break
                k = (max(1.0, new_total / self.t_ref, mx / self.m_ref), mx, new_total)
                if self.better(k, best_key):
                    best_key, best_move = k, move

            h = top[0][1]
            for a in range(N):
                for ti, t in enumerate(nodes[a]):
                    la = loads[a] - t.cost
                    for b in range(N):
                        if b == a:
                            continue
                        # Moves and swaps keep TotalCost: away from the most loaded node they
                        # cannot change the key, so only weaving moves are tried there.
                        with_h = h in (a, b)
                        if with_h:
                            consider(a, la, b, loads[b] + t.cost, ("move", a, ti, b, None))
                        for ui, u in enumerate(nodes[b]):
                            if u.key == t.key:
                                consider(a, la, b, loads[b] - u.cost + self.merged_cost(t, u),
                                         ("move", a, ti, b, ui))
                            if b > a and with_h:
                                consider(a, la + u.cost, b, loads[b] + t.cost - u.cost,
                                         ("swap", a, ti, b, ui))
            for ti, t in enumerate(nodes[h]):
                if len(t.queries) < 2:
                    continue  # a single-query tree moves as a tree above
                seen = set()
                for q in t.queries:
                    if (q.range, q.slide) in seen:
                        continue  # same window, same effect: try one representative
                    seen.add((q.range, q.slide))
                    lh = loads[h] + self.without_cost(t, q) - t.cost
                    qt = self.single(q)
                    for b in range(N):
                        if b == h:
                            continue
                        consider(h, lh, b, loads[b] + qt.cost, ("query", h, ti, b, None, q))
                        for ui, u in enumerate(nodes[b]):
                            if u.key == t.key:
                                consider(h, lh, b, loads[b] - u.cost + self.merged_cost(qt, u),
                                         ("query", h, ti, b, ui, q))
            if best_move is None:
                if rewoven:
                    continue
                break
            self.apply(nodes, loads, best_move)
            dirty |= {best_move[1], best_move[3]}
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


def wg_ls(queries: Sequence[Query], model: CostModel, caps: list, seed: int = 0,
          preprocess: bool | str = False, max_iters: int = 100) -> Plan:
    """WG_LS (see module docstring). Deterministic: no randomness beyond WG_I's seeded start."""
    tn = optimize("WG_TN", queries, model, caps, seed=seed, preprocess=preprocess)
    wi = optimize("WG_I", queries, model, caps, seed=seed, preprocess=preprocess)
    def util(p: Plan) -> float:
        return max(n.cost / (1.0 if n.capacity is None else n.capacity) for n in p.nodes)

    search = _Search(model, caps, min(tn.total_cost, wi.total_cost), min(util(tn), util(wi)))
    best_nodes, best_key = None, None
    tl = optimize("WG_TL", queries, model, caps, seed=seed, preprocess=preprocess)
    tn_stop = optimize("WG_TN", queries, model, caps, seed=seed, preprocess=preprocess,
                       stop_at_nodes=True)
    for start in (tn, wi, tl, tn_stop):
        nodes = search.run([n.trees for n in start.nodes], max_iters)
        k = search.key([sum(t.cost for t in ts) for ts in nodes])
        if best_key is None or search.better(k, best_key):
            best_nodes, best_key = nodes, k
    return build_plan("WG_LS", model, best_nodes, caps, list(queries))
