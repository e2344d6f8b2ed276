"""The running plan priced from its queries: placement objects, ``plan_current.json``'s dict,
(TotalCost, MaxCost), offline WeaveShare's TotalCost over the running queries and the drift
between the two.

Why its own module: every command prices the plan before and after it (the event's costs),
``status`` and the load samples read it, and the trees' cost-model objects are cached per
query set so a command does not re-price trees it did not touch; none of that is a command.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from itertools import filterfalse
from operator import attrgetter, itemgetter
from typing import Any

from cluster.service.state import RunningTree, ServiceState

_ID = attrgetter("id")
_WINDOW = itemgetter("stream", "aggregate", "kind", "range", "slide")


class PlanPricing:
    """Prices a ``ServiceState``'s trees with ``model`` (``placement.trees.CostModel``: IE
    technique, stream rates, slicing); ``default_rate``: the rate of a stream the model has
    none for (a query added on a new stream); ``optimizer``: the plan's optimizer label."""

    def __init__(self, model, optimizer: str, default_rate: float):
        self.model = model
        self.optimizer = optimizer
        self.default_rate = float(default_rate)
        self._trees: dict[tuple, Any] = {}
        self._weaveshare: dict[tuple, float] = {}
        self._queries: dict[str, Any] = {}  # id -> placement Query (ids are never reused)

    def rates(
        self, state: ServiceState, adding: Iterable[Mapping[str, Any]] = ()
    ) -> dict[str, float]:
        """The model's stream rates, with ``default_rate`` for every stream of a running tree
        or of a query being added (``adding``) it had none for (kept in the model from then
        on).  Read from the trees: every running query is in one, and a command prices the
        plan several times (the queries themselves, 100,000 here, took ~0.1 s a time)."""
        rates = self.model.rates if isinstance(self.model.rates, dict) else {}
        for t in state.trees.values():
            rates.setdefault(t.stream, self.default_rate)
        for q in adding:
            rates.setdefault(q["stream"], self.default_rate)
        self.model.rates = rates
        return dict(rates)

    def _query(self, state: ServiceState, qid: str):
        """Query ``qid`` as a placement ``Query``, made once per id (a command re-prices every
        tree it touched: made again, 100,000 of them took ~0.4 s)."""
        q = self._queries.get(qid)
        if q is None:
            from placement.queries import query_from_mapping

            q = self._queries[qid] = query_from_mapping(state.queries[qid])
        return q

    def _tree(self, state: ServiceState, qids: list[str]):
        key = tuple(qids)
        t = self._trees.get(key)
        if t is None:
            t = self.model.tree([self._query(state, q) for q in qids])
            self._trees[key] = t
        return t

    def seed(self, plan, trees: Mapping[str, RunningTree]) -> None:
        """Keep the trees that ``plan`` (a placement's result) priced as the prices of the
        running ``trees`` with the same queries: a command then does not price again what its
        placement just priced (an add grows ~100 trees of ~1,000 queries at 100,000 queries:
        ~0.6 s of edge rates).

        A query runs in one tree, so the plan tree holding a running tree's queries is the
        one whose first query it runs: found by a scan of the running tree's ids, for the
        trees not priced yet only (not a set of each of the plan's trees, 100,000 ids a command)."""
        by_first = {t.queries[0].id: t for n in plan.nodes for t in n.trees if t.queries}
        for rt in trees.values():
            key = tuple(rt.active)
            if not key or key in self._trees:
                continue
            t = next((by_first[q] for q in key if q in by_first), None)
            if t is None or len(t.queries) != len(key):
                continue
            of = dict(zip(map(_ID, t.queries), t.queries))
            try:  # the same ids (as many, distinct, each in ``of``), in the running order
                self._trees[key] = replace(t, queries=list(map(of.__getitem__, key)))
            except KeyError:
                continue

    def retain(self, state: ServiceState) -> None:
        """Forget the priced trees and the queries ``state`` no longer runs (a command's
        commit): every add or remove makes new query sets, and at 100,000 queries each add
        left ~100 trees of ~1,000 queries behind, for the life of the deployment."""
        keys = {tuple(t.active) for t in state.trees.values() if t.active}
        self._trees = {k: t for k, t in self._trees.items() if k in keys}
        for q in list(filterfalse(state.queries.__contains__, self._queries)):  # in C
            del self._queries[q]

    def placement_plan(self, state: ServiceState, node_ids: list[str]):
        """The running plan as placement objects (trees priced from their queries) on the
        nodes ``node_ids``, and the tree ids in the order of its trees."""
        from placement.plan import Node, Plan

        nodes, order = [], []
        in_order = state.trees_in_order()
        for nid in node_ids:
            trees = []
            for tid, t in in_order:
                if t.node == nid and t.active:
                    trees.append(self._tree(state, t.active))
                    order.append(tid)
            nodes.append(Node(nid, trees, state.capacity.get(nid)))
        plan = Plan(
            self.optimizer, self.model.technique, nodes, self.rates(state), self.model.slicing
        )
        return plan, order

    def plan_dict(self, state: ServiceState, node_ids: list[str], choice: dict | None) -> dict:
        """The running plan, ``weaveplace.plan/1`` with the deployment's tree ids (and WG_PF's
        choice record, ``cluster.service.planning``)."""
        plan, order = self.placement_plan(state, node_ids)
        kept = state.queries
        d = plan.to_dict(entries=kept)  # the same entries, kept (query_mapping)
        ids = iter(order)
        for n in d["nodes"]:
            for t in n["trees"]:
                t["id"] = next(ids)
        if choice is not None:
            d["choose"] = choice
        return d

    def costs(self, state: ServiceState, node_ids: list[str]) -> tuple[float, float]:
        plan, _ = self.placement_plan(state, node_ids)
        return plan.total_cost, plan.max_cost

    def weaveshare_total(self, state: ServiceState) -> float:
        """TotalCost of offline WeaveShare over the running queries.

        A tree's cost depends on its queries' distinct windows only (its residue classes,
        windows and composite slide are sets: ``placement.trees``), and trees weave only
        within one (stream, aggregate) key: so this is a sum over keys of WeaveShare over one
        query per distinct window ``(kind, range, slide)``, in that order, cached by the
        key's window set.  A command whose queries' windows all run already prices nothing
        (at 100,000 queries a fresh WeaveShare of every key took ~1 s a command)."""
        from placement.queries import Query
        from placement.weaveshare import plan_cost, weaveshare

        by_key: dict[tuple, set[tuple[str, int, int]]] = {}
        for stream, agg, *window in set(map(_WINDOW, state.queries.values())):
            by_key.setdefault((stream, agg), set()).add(tuple(window))
        cache = self._weaveshare
        total, fresh = 0.0, {}
        for (stream, agg), windows in by_key.items():
            k = (stream, agg, frozenset(windows))
            if k not in cache:
                one_each = [
                    Query(f"w{i}", r, s, agg, stream, kind)
                    for i, (kind, r, s) in enumerate(sorted(windows))
                ]
                cache[k] = plan_cost(weaveshare(one_each, self.model))
            fresh[k] = cache[k]
            total += cache[k]
        self._weaveshare = fresh
        return total

    def drift(
        self,
        state: ServiceState,
        node_ids: list[str],
        opt_factor: float,
        tolerance: float,
        weaveshare: float | None = None,
    ) -> dict:
        """The running plan's TotalCost against a fresh plan's, estimated without re-planning:
        offline WeaveShare's TotalCost over the running queries times the configured
        optimizer's own factor over WeaveShare at the last re-plan (``opt_factor``, 1 before
        any: an optimizer that weaves less than WeaveShare, e.g. to fill the nodes, would
        otherwise look like drift right after its own re-plan, and re-plan on every command).

        WG_PF keeps this reference (docs/DESIGN.md s. 9-10 define no other): its factor is the
        chosen plan's, so a rule that trades TotalCost for balance is not drift after its own
        re-plan; the rule itself is applied at each re-plan, not watched between them (its
        caps are relative to a front that only a re-plan computes).  As for every optimizer,
        the factor is 1 until the first re-plan, so a balanced initial plan costlier than
        WeaveShare by more than the tolerance is re-planned (by the same rule) at the first
        add or remove.  ``weaveshare``: ``weaveshare_total(state)`` when the caller has it
        (priced while the actors changed, ``Service.while_changing``)."""
        running, _ = self.costs(state, node_ids)
        ws = self.weaveshare_total(state) if weaveshare is None else weaveshare
        ref = ws * opt_factor
        return {
            "running_total": running,
            "weaveshare_total": ws,
            "reference_total": ref,
            "drift": running / ref - 1.0 if ref > 0 else 0.0,
            "tolerance": tolerance,
        }
