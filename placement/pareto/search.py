"""WG_PF: a front of non-dominated plans (TotalCost vs MaxCost) and the rule that picks one.

Why: TotalCost and MaxCost pull apart (docs/DESIGN.md s. 10). Every Table 7 optimizer sits at one
point of the trade-off and WG_LS at one fixed compromise; WG_PF returns the whole front so the user
can choose ("the cheapest plan whose busiest node carries at most X", "the most balanced plan within
5 % of the cheapest total", "the cheapest plan that fits the capacities").

**Objectives.** A plan is the point ``(TotalCost, U)``, ``U`` the largest utilization (MaxCost
without capacities); the front holds the plans no other found plan weakly dominates
(``placement.pareto.front``).

**Search** (``wg_pf``):

1. *Seeds*: every Table 7 plan and WG_LS's (so the front weakly dominates each of them by
   construction, before truncation).
2. *Budget walks*: for budgets ``B_k`` spread between the cheapest and the most balanced seed's
   TotalCost, WG_LS's local search (``placement.local_search.search.LocalSearch``: move a
   tree, swap trees, weave a tree into a tree of another node, take a query out of a tree on the
   busiest node, re-weave a node; certified lower bounds prune the exact pricing) minimises
   ``(max(1, T/B_k), U, T)``, i.e. the smallest MaxCost whose TotalCost stays within ``B_k``. It
   starts from the archived plan best under that key; every plan it passes through is archived.
3. *Split walks*: from each front plan, split a tree on the busiest node into two trees on different
   nodes (a group of its queries, by slide, or the half of its queries with the largest slides,
   goes to one of the least loaded nodes, alone or woven into a tree there): it gives up some
   sharing to unload the busiest node, priced exactly with ``model.tree``. A walk takes the split
   with the largest MaxCost drop per TotalCost added while one lowers MaxCost; each plan is
   archived.
4. *Pareto local search* on small instances (at most ``pls_max_queries`` queries): every archived
   layout not yet explored is explored once, with every single-query move (to any node, alone or
   woven into any same-key tree there), query swaps between nodes, whole-tree weaves and swaps,
   slide-group splits to another node, and the same from each layout one tree move away (a
   plateau in both objectives that opens room for the next move). Its cost grows quickly with
   the number of queries, hence the limit.
5. *Kicks* (``_kicks``): from each front plan, every split of a tree on the busiest node to any
   other node, kept however much it raises MaxCost, followed by WG_LS's descent towards the
   smallest MaxCost with the split's two trees pinned where it put them: a compound move (a
   split and the re-balancing moves around it, evaluated as one) that reaches balanced plans
   when every single move raises MaxCost. Then the Pareto local search again from what the
   kicks found (small instances).

**Budget.** Steps 2, 3 and 5 together evaluate at most ``max(WORK_FLOOR, WORK_RATIO x W)``
candidate moves (``LocalSearch.work``: every move keyed; ``Splitter.work``: every split
priced), ``W`` the number WG_LS's own search evaluated on the instance (``Plan.work``). The unit
is machine-independent, so the front never depends on the machine's load, and it follows
WG_LS's effort: the same kind of scans on the same instance, so WG_PF's own search costs about
``WORK_RATIO`` x WG_LS's search, also where WG_LS converges after a few moves. The walks get up
to ``WALK_SHARE`` of it (shared evenly: what one leaves goes to the next), the split walks up to
``SPLIT_SHARE`` with what the walks left, the kicks what is left then: on Table 8's largest
instances the walks, which find most of the front there, use nearly all of it; on small ones
they converge early and the kicks run. The floor leaves small instances, where
WG_LS stops after a few scans, room to search (20,000 moves: a fraction of a second there). The
Pareto local search of small instances is bounded by its own ``pls_max_explored``.

Every archived plan is a layout of exactly priced trees (built by ``CostModel``); the returned
plans are ``Plan`` objects that ``verify_plan`` re-prices from their queries (the tests do).

The front and its truncation to ``front_size`` plans: ``placement.pareto.front``; the rule
that picks the plan to run: ``placement.pareto.choose``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from placement.distributed import TABLE7, build_plan, node_capacities, optimize
from placement.local_search.search import LocalSearch, wg_ls
from placement.pareto.choose import ChoiceRule, choose, default_choose, shedding_note
from placement.pareto.front import REL, Archive, TreesByNode, select_front, weakly_dominates
from placement.plan import Plan
from placement.queries import Query, validate_unique
from placement.trees import CostModel, Tree

DEFAULT_FRONT_SIZE = 8
#: WG_PF's own search (walks, split walks, kicks) evaluates at most max(WORK_FLOOR,
#: WORK_RATIO x the candidate moves WG_LS's search evaluated) candidate moves
WORK_RATIO = 1.0
WORK_FLOOR = 20_000
WALK_SHARE, SPLIT_SHARE = 0.8, 1.0  # the walks take up to 80 %, the split walks the rest
#: the optimizers whose plans seed the front, each ``(queries, model, caps, seed=, preprocess=)``
_SEEDS: dict[str, Callable[..., Any]] = {
    **{name: partial(optimize, name) for name in TABLE7},
    "WG_LS": wg_ls,
}
SEED_OPTIMIZERS = tuple(_SEEDS)


# ---- moves that split a tree -------------------------------------------------------------------


def _split_groups(t: Tree, max_groups: int) -> list[list[Query]]:
    """Query subsets of ``t`` to move out of it: one per slide (largest cost share first) and the
    half of its queries with the largest slides. Never the whole tree (that is a tree move)."""
    by_slide: dict[int, list[Query]] = {}
    for q in t.queries:
        by_slide.setdefault(q.slide, []).append(q)
    out: list[list[Query]] = []
    if len(by_slide) > 1:
        groups = sorted(
            by_slide.values(), key=lambda g: (-sum(q.range / q.slide for q in g), g[0].slide)
        )
        out += groups[:max_groups]
        ordered = sorted(t.queries, key=lambda q: (q.slide, q.range, q.id))
        half = ordered[len(ordered) // 2 :]
        if 0 < len(half) < len(ordered) and all(half != g for g in out):
            out.append(half)
    return out


class Splitter:
    """Split moves from the busiest node (module docstring, step 3), priced exactly."""

    def __init__(self, model: CostModel, caps: list[float], max_groups: int = 4, targets: int = 2):
        self.model, self.caps = model, caps
        self.max_groups, self.targets = max_groups, targets
        self._tree: dict[tuple, Tree] = {}
        self._merged: dict[tuple[int, int], Tree] = {}
        self.work = 0  # candidate splits priced (counted with LocalSearch.work in WG_PF's budget)

    def tree(self, queries: list[Query]) -> Tree:
        k = tuple(sorted(q.id for q in queries))
        t = self._tree.get(k)
        if t is None:
            t = self._tree[k] = self.model.tree(queries)
        return t

    def merged(self, a: Tree, b: Tree) -> Tree:
        k = (a.uid, b.uid)
        t = self._merged.get(k)
        if t is None:
            t = self._merged[k] = self.model.merge(a, b)
        return t

    def candidates(self, nodes, targets: int | None = None):
        """Every split of a tree on the busiest node to one of the ``targets`` (default
        ``self.targets``) least loaded other nodes, alone or woven: the new layouts."""
        loads = [sum(t.cost for t in ts) for ts in nodes]
        util = [l / c for l, c in zip(loads, self.caps)]
        N = len(nodes)
        h = max(range(N), key=lambda j: (util[j], -j))
        others = sorted((j for j in range(N) if j != h), key=lambda j: (util[j], j))
        out = []
        for ti, t in enumerate(nodes[h]):
            if len(t.queries) < 2:
                continue
            for g in _split_groups(t, self.max_groups):
                ids = {q.id for q in g}
                rest = self.tree([q for q in t.queries if q.id not in ids])
                part = self.tree(g)
                new_h = list(nodes[h])
                new_h[ti] = rest
                for b in others[: self.targets if targets is None else targets]:
                    options: list[tuple[int | None, Tree]] = [(None, part)]
                    options += [
                        (ui, self.merged(u, part))
                        for ui, u in enumerate(nodes[b])
                        if u.key == part.key
                    ]
                    for ui, placed in options:
                        new_b = list(nodes[b])
                        if ui is None:
                            new_b.append(placed)
                        else:
                            new_b[ui] = placed
                        new = list(nodes)
                        new[h], new[b] = new_h, new_b
                        out.append(new)
        self.work += len(out)
        return out


def _kicks(
    arch: Archive,
    splitter: Splitter,
    search: LocalSearch,
    max_iters: int,
    work_limit: Callable[[], float],
) -> bool:
    """From each front plan, every split of a tree on its busiest node to any other node, kept
    however much it raises MaxCost, then WG_LS's descent towards the smallest MaxCost (then
    TotalCost): a compound move (a split followed by the moves that re-balance around it) that
    reaches plans no single improving move does. Every plan passed through is archived; stops
    when ``search.work`` reaches ``work_limit()``. True when some plan entered the archive."""
    found = [False]

    def keep(ns) -> None:
        found[0] |= arch.add(ns, "kick")

    search.t_ref, search.m_ref = math.inf, math.inf  # key (1, U, T)
    for _, start, _ in list(arch.items):
        if search.work >= work_limit():
            break
        before = {t.uid for ts in start for t in ts}
        for cand in splitter.candidates([list(ts) for ts in start], targets=len(start)):
            if search.work >= work_limit():
                break
            keep(cand)
            # the two new trees stay where the split put them (else the descent's first move
            # is to weave them back together)
            search.pinned = frozenset(
                q.id for ts in cand for t in ts if t.uid not in before for q in t.queries
            )
            search.run(cand, max_iters, on_plan=keep, work_limit=work_limit())
    search.pinned = frozenset()
    return found[0]


# ---- Pareto local search (small instances) -----------------------------------------------------


class ParetoLocalSearch:
    """Pareto local search over single-query moves: every query of every tree, to every node,
    alone or woven into any same-key tree there (its own node included: re-partitioning a node).
    Each archived layout not yet explored is explored once; a neighbour is priced from the two
    changed trees (``model.tree`` of the query sets, cached) and built only when no archived
    layout weakly dominates it. Meant for small instances (``pls_max_queries``)."""

    def __init__(self, model: CostModel, arch: Archive):
        self.model, self.arch = model, arch
        self._tree: dict[frozenset, Tree] = {}
        self.explored: set = set()

    def tree(self, queries) -> Tree:
        k = frozenset(q.id for q in queries)
        t = self._tree.get(k)
        if t is None:
            t = self._tree[k] = self.model.tree(sorted(queries, key=lambda q: q.id))
        return t

    def explore(self, nodes: TreesByNode) -> None:
        arch, caps = self.arch, self.arch.caps
        loads = [sum(t.cost for t in ts) for ts in nodes]
        total = math.fsum(loads)
        N = len(nodes)
        for a in range(N):
            for ti, t in enumerate(nodes[a]):
                for q in t.queries:
                    rest = (
                        self.tree([p for p in t.queries if p.id != q.id])
                        if len(t.queries) > 1
                        else None
                    )
                    la = loads[a] - t.cost + (rest.cost if rest is not None else 0.0)
                    alone = self.tree([q])
                    for b in range(N):
                        opts: list[tuple[int | None, Tree]] = []
                        if b != a or rest is not None:
                            opts.append((None, alone))
                        for uk, u in enumerate(nodes[b]):
                            if u.key == t.key and not (b == a and uk == ti):
                                opts.append((uk, self.tree(list(u.queries) + [q])))
                        for ui, placed in opts:
                            base_b = la if b == a else loads[b]
                            lb = (
                                base_b
                                + placed.cost
                                - (nodes[b][ui].cost if ui is not None else 0.0)
                            )
                            new_loads = list(loads)
                            new_loads[a] = la
                            new_loads[b] = lb  # (b == a: the node's load after both steps)
                            p = (math.fsum(new_loads), max(l / c for l, c in zip(new_loads, caps)))
                            if any(weakly_dominates(it[0], p) for it in arch.items):
                                arch.seen += 1
                                continue
                            new: list[list[Tree | None]] = [list(ts) for ts in nodes]
                            if rest is None:
                                new[a][ti] = None
                            else:
                                new[a][ti] = rest
                            if ui is None:
                                new[b].append(placed)
                            else:
                                new[b][ui] = placed
                            arch.add([[x for x in ts if x is not None] for ts in new], "pls")
        self._swaps(nodes, loads, total)
        self._tree_moves(nodes)

    def _offer(self, new) -> None:
        if any(weakly_dominates(it[0], self.arch.point(new)) for it in self.arch.items):
            self.arch.seen += 1
            return
        self.arch.add(new, "pls")

    def _tree_moves(self, nodes: TreesByNode) -> None:
        """A whole tree woven into a tree of another node, two trees swapped between nodes,
        and a group of a tree's queries (``_split_groups``) to another node, alone or woven."""
        N = len(nodes)
        for a in range(N):
            for ti, t in enumerate(nodes[a]):
                parts: list[tuple[Tree | None, Tree]] = [(None, t)]
                for g in _split_groups(t, 4) if len(t.queries) > 2 else []:
                    ids = {q.id for q in g}
                    parts.append(
                        (self.tree([q for q in t.queries if q.id not in ids]), self.tree(g))
                    )
                for b in range(N):
                    if b == a:
                        continue
                    for rest, part in parts:
                        for ui, u in enumerate(nodes[b]):
                            new = [list(ts) for ts in nodes]
                            if rest is None:
                                new[a].pop(ti)
                            else:
                                new[a][ti] = rest
                            if u.key == part.key:
                                new[b][ui] = self.tree(list(u.queries) + list(part.queries))
                                self._offer(new)
                            if rest is None:  # swap t and u
                                sw = [list(ts) for ts in nodes]
                                sw[a][ti], sw[b][ui] = u, t
                                self._offer(sw)
                        if rest is not None:
                            new = [list(ts) for ts in nodes]
                            new[a][ti] = rest
                            new[b].append(part)
                            self._offer(new)

    def _swaps(self, nodes: TreesByNode, loads: list[float], total: float) -> None:
        """Exchange two same-key queries between trees of different nodes."""
        arch, caps = self.arch, self.arch.caps
        N = len(nodes)
        where = [(j, ti, q) for j in range(N) for ti, t in enumerate(nodes[j]) for q in t.queries]
        for x, (a, ti, q) in enumerate(where):
            t = nodes[a][ti]
            for b, ui, p in where[x + 1 :]:
                if b == a:
                    continue
                u = nodes[b][ui]
                if u.key != t.key:
                    continue
                t2 = self.tree([r for r in t.queries if r.id != q.id] + [p])
                u2 = self.tree([r for r in u.queries if r.id != p.id] + [q])
                new_loads = list(loads)
                new_loads[a] += t2.cost - t.cost
                new_loads[b] += u2.cost - u.cost
                pt = (math.fsum(new_loads), max(l / c for l, c in zip(new_loads, caps)))
                if any(weakly_dominates(it[0], pt) for it in arch.items):
                    arch.seen += 1
                    continue
                new = [list(ts) for ts in nodes]
                new[a][ti], new[b][ui] = t2, u2
                arch.add(new, "pls")

    def explore_with_plateau(self, nodes: TreesByNode) -> None:
        """``explore`` from ``nodes`` and from every layout one whole-tree move away (a tree
        alone to another node): such a move often keeps both objectives (a plateau the archive
        would refuse) but opens room for the next query move, e.g. a node emptied for a query
        that should run alone."""
        self.explore(nodes)
        N = len(nodes)
        for a in range(N):
            for ti in range(len(nodes[a])):
                for b in range(N):
                    if b == a:
                        continue
                    new = [list(ts) for ts in nodes]
                    new[b].append(new[a].pop(ti))
                    self.arch.add(new, "pls")
                    self.explore(new)

    def run(self, max_explored: int) -> int:
        """Explore archived layouts not explored yet (by this search, over all its runs)."""
        explored = self.explored
        count = 0
        while count < max_explored:
            todo = [it for it in self.arch.items if _layout_key(it[1]) not in explored]
            if not todo:
                break
            it = todo[0]
            explored.add(_layout_key(it[1]))
            self.explore_with_plateau(it[1])
            count += 1
        return count


def _layout_key(nodes: TreesByNode) -> tuple:
    return tuple(tuple(sorted(tuple(sorted(q.id for q in t.queries)) for t in ts)) for ts in nodes)


# ---- WG_PF -------------------------------------------------------------------------------------


@dataclass
class ParetoResult:
    """The returned front (sorted by TotalCost), the chosen plan and how it was chosen."""

    front: list[Plan]
    chosen: int
    rule: ChoiceRule
    met: bool
    note: str
    seeds: dict[str, Plan] = field(default_factory=dict)
    archived: int = 0  # non-dominated layouts found before truncation
    visited: int = 0  # layouts offered to the archive
    work: int = 0  # candidate moves the walks, split walks and kicks evaluated
    budget: float = 0.0  # the most they were allowed (wg_pf)

    @property
    def plan(self) -> Plan:
        return self.front[self.chosen]

    def front_dicts(self, node_ids: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """The front as JSON-ready plans (``weaveplace.plan/1`` each, plus ``chosen``)."""
        out = []
        for i, p in enumerate(self.front):
            if node_ids is not None:
                for n, nid in zip(p.nodes, node_ids):
                    n.id = nid
            d = p.to_dict()
            d["chosen"] = i == self.chosen
            d["choose"] = self.rule.to_dict()
            out.append(d)
        return out


def budgets(t_lo: float, t_hi: float, count: int) -> list[float]:
    """``count`` TotalCost budgets strictly between the cheapest and the most balanced plan's,
    denser near the cheap end (where the front usually bends)."""
    if count < 1 or not t_hi > t_lo * (1 + REL):
        return []
    return [t_lo + (t_hi - t_lo) * ((i + 1) / (count + 1)) ** 2 for i in range(count)]


def wg_pf(
    queries: Sequence[Query],
    model: CostModel,
    nodes,
    seed: int = 0,
    preprocess: bool | str = False,
    front_size: int = DEFAULT_FRONT_SIZE,
    rule: ChoiceRule | Any | None = None,
    walks: int | None = None,
    max_iters: int = 40,
    split_rounds: int | None = None,
    pls_max_queries: int = 24,
    pls_max_explored: int = 400,
    seeds: dict[str, Plan] | None = None,
    work_ratio: float = WORK_RATIO,
    work_floor: int = WORK_FLOOR,
) -> ParetoResult:
    """The WG_PF front and chosen plan (module docstring). Deterministic.

    ``walks``: budget walks (default 2 x front_size for up to 64 queries, else 3);
    ``max_iters``: moves per walk; ``split_rounds``: split steps per walk (default 8 up to 64
    queries, else 3). The walks, split walks and kicks together evaluate at most
    ``max(work_floor, work_ratio x W)`` candidate moves, ``W`` the number WG_LS's own search
    evaluated on the same instance (``Plan.work``): a budget in machine-independent units, so
    the plans do not depend on the machine's load (module docstring, "Budget").
    ``seeds``: plans of ``SEED_OPTIMIZERS`` already computed with the same arguments (a
    simulation has them); the missing ones are computed here, and so is WG_LS's when the
    given plan does not carry its work. Small instances (at most ``pls_max_queries`` queries)
    finish with a Pareto local search of at most ``pls_max_explored`` explored layouts."""
    qs = validate_unique(queries)
    caps = node_capacities(nodes)
    if front_size < 1:
        raise ValueError(f"front_size: expected an integer >= 1, got {front_size}")
    rule = default_choose(caps) if rule is None else ChoiceRule.parse(rule)
    small = len(qs) <= 64
    walks = (2 * front_size if small else 3) if walks is None else walks
    split_rounds = (8 if small else 3) if split_rounds is None else split_rounds
    arch = Archive(caps)
    given, seeds = dict(seeds or {}), {}
    for name in SEED_OPTIMIZERS:
        p = given.get(name)
        if p is None or (name == "WG_LS" and p.work is None):
            p = _SEEDS[name](qs, model, caps, seed=seed, preprocess=preprocess)
        seeds[name] = p
        arch.add([n.trees for n in p.nodes], name)
    capv = arch.caps
    N = len(caps)
    budget = max(float(work_floor), work_ratio * float(seeds["WG_LS"].work or 0))
    search = LocalSearch(model, caps, 1.0, math.inf)
    splitter = Splitter(model, capv)

    def spent() -> int:
        return search.work + splitter.work

    if N > 1:
        # 1. budget walks: up to WALK_SHARE of the budget, shared evenly (what one leaves, the
        # next gets)
        lo, hi = arch.items[0][0][0], arch.items[-1][0][0]
        bs = budgets(lo, hi, walks)
        for k, b in enumerate(bs):
            limit = spent() + (WALK_SHARE * budget - spent()) / (len(bs) - k)
            search.t_ref, search.m_ref = b, math.inf
            start = min(
                arch.items, key=lambda it: search.key([sum(t.cost for t in ts) for ts in it[1]])
            )[1]
            search.run(
                [list(ts) for ts in start],
                max_iters,
                on_plan=lambda ns, tag=f"budget{k}": arch.add(ns, tag),
                work_limit=limit,
            )
        # 2. split walks from every front plan, up to SPLIT_SHARE of the budget in all
        for _, start, _ in list(arch.items):
            cur = [list(ts) for ts in start]
            for _ in range(split_rounds):
                if spent() >= SPLIT_SHARE * budget:
                    break
                cur_p = arch.point(cur)
                best = None
                for cand in splitter.candidates(cur):
                    pt = arch.point(cand)
                    arch.add(cand, "split")
                    if pt[1] < cur_p[1] * (1 - REL):
                        ratio = (cur_p[1] - pt[1]) / max(pt[0] - cur_p[0], REL * cur_p[0])
                        if best is None or ratio > best[0]:
                            best = (ratio, cand)
                if best is None:
                    break
                cur = best[1]
        pls = ParetoLocalSearch(model, arch) if len(qs) <= pls_max_queries else None
        if pls is not None:
            pls.run(pls_max_explored)
        # 3. kicks: a split however much it raises MaxCost, then a descent (the rest of the
        # budget), from each front plan; then the Pareto local search again from what they found
        found = _kicks(arch, splitter, search, max_iters, lambda: budget - splitter.work)
        if found and pls is not None:
            pls.run(pls_max_explored)
    pts = [it[0] for it in arch.items]
    plans_all = [
        build_plan("WG_PF", model, [list(ts) for ts in it[1]], caps, qs) for it in arch.items
    ]
    ci, met, note = choose(plans_all, rule)
    seed_pts = [arch.point([n.trees for n in p.nodes]) for p in seeds.values()]
    keep = select_front(pts, front_size, [ci], seed_pts)
    front = [plans_all[i] for i in keep]
    chosen = keep.index(ci)
    if rule.rule == "capacities" and not met:
        note = shedding_note(front) if front else note
    return ParetoResult(
        front, chosen, rule, met, note, seeds, len(arch.items), arch.seen, spent(), budget
    )
