"""Feasibility and load shedding for plans on nodes with capacities (paper 003).

A node is feasible when its cost (aggregate operations per time unit) does not exceed its
capacity. When a plan is infeasible, paper 003 shows that tuples should be dropped at the sources,
before any operator, and that choosing the drop fractions is a continuous knapsack. In our cost
model a tree costs ``lambda_s * x_s + E_t * Omega_t`` when a fraction ``x_s`` of stream ``s`` is
kept: shedding reduces the per-tuple work, not the per-edge final aggregation of time windows,
which stays due. A count-window tree's edges are tuple positions of the kept stream, so its whole
cost ``lambda_s x_s (1 + E_t Omega_t)`` (``E_t`` per tuple) scales with ``x_s``.

We keep as many (stream tuple x query) pairs as possible: maximise ``sum_s w_s lambda_s x_s`` with
``w_s`` the number of queries reading ``s``, subject to one capacity constraint per node and
``0 <= x_s <= 1``. With one node this is the paper's continuous knapsack, solved greedily by the
ratio of value to weight (``w_s / (trees of s on the node)``); with several nodes sharing streams it
is a linear program, solved exactly with OR-Tools' GLOP. When even dropping every tuple leaves a
node over capacity (its edges alone cost too much), no shedding helps: we say so and by how much.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from placement.plan import Plan


@dataclass(frozen=True)
class Overload:
    node: str
    cost: float
    capacity: float

    @property
    def excess(self) -> float:
        return self.cost - self.capacity


def overloads(plan: Plan, rel_tol: float = 1e-12) -> list[Overload]:
    """Nodes whose cost exceeds their capacity, with the excess (empty: the plan is feasible)."""
    return [
        Overload(n.id, n.cost, n.capacity)
        for n in plan.nodes
        if n.capacity is not None and n.cost > n.capacity * (1 + rel_tol)
    ]


class InfeasibleEvenWhenShedding(ValueError):
    """Dropping every tuple still leaves nodes over capacity (their edges alone cost too much)."""


@dataclass
class SheddingPlan:
    keep: dict[str, float]  # stream -> fraction of tuples kept (1 = no shedding)
    kept_value: float  # sum_s w_s lambda_s x_s
    full_value: float  # the same with nothing dropped

    @property
    def drop(self) -> dict[str, float]:
        return {s: 1.0 - x for s, x in self.keep.items()}


def _node_terms(plan: Plan, rates: Mapping[str, float]):
    """Per node: fixed cost (edges), per-stream tuple cost coefficients at ``rates``, capacity.
    A time tree's edges do not depend on the rate (``C = lambda + E Omega``); a count tree's
    whole cost scales with it."""
    out = []
    for n in plan.nodes:
        fixed = 0.0
        coef: defaultdict[str, float] = defaultdict(float)
        for t in n.trees:
            lam, now = plan.rates[t.stream], rates[t.stream]
            if t.kind == "count":  # edges per tuple: every term scales with the kept tuples
                coef[t.stream] += t.cost * (now / lam if lam else 0.0)
                continue
            fixed += t.cost - lam
            coef[t.stream] += now
        out.append((n, fixed, coef))
    return out


def shed_load(
    plan: Plan, rates: Mapping[str, float] | None = None, whole: Collection[str] = ()
) -> SheddingPlan:
    """Source drop fractions that make every node feasible while keeping the most tuples.
    ``rates``: the streams' rates to price at (measured ones, for a live deployment whose
    input outgrew the plan's rates; a stream of the plan missing there keeps its planned
    rate); default: the plan's own.  ``whole``: streams never shed (kept fraction 1, their
    cost fixed), e.g. those count windows read, whose positions count every tuple."""
    rates = {s: float((rates or plan.rates).get(s, r)) for s, r in plan.rates.items()}
    streams = sorted(rates)
    weight = Counter(q.stream for q in plan.queries)
    value = {s: weight[s] * rates[s] for s in streams}
    full = sum(value.values())
    terms = []
    for n, fixed, coef in _node_terms(plan, rates):
        if n.capacity is not None:
            fixed += sum(coef.pop(s) for s in list(coef) if s in whole)
            terms.append((n, fixed, coef))
    hopeless = [
        Overload(n.id, fixed, n.capacity)
        for n, fixed, _ in terms
        if fixed > n.capacity * (1 + 1e-12)
    ]
    if hopeless:
        raise InfeasibleEvenWhenShedding(
            "no shedding makes the plan feasible: with every tuple dropped, "
            + ", ".join(
                f"{o.node} still needs {o.cost:.6g} > capacity {o.capacity:.6g} (+{o.excess:.6g})"
                for o in hopeless
            )
            + "; add capacity or re-place trees"
        )
    if not any(fixed + sum(coef.values()) > n.capacity * (1 + 1e-12) for n, fixed, coef in terms):
        return SheddingPlan({s: 1.0 for s in streams}, full, full)
    if len(terms) == 1:
        keep = _knapsack(terms[0], streams, value)
    else:
        keep = _linear_program(terms, streams, value)
    return SheddingPlan(keep, sum(value[s] * keep[s] for s in streams), full)


def _knapsack(term, streams, value) -> dict[str, float]:
    """Paper 003's continuous knapsack: fill by value per unit of capacity, best ratio first."""
    node, fixed, coef = term
    room = node.capacity - fixed
    keep = {s: (1.0 if coef[s] == 0 else 0.0) for s in streams}
    for s in sorted((s for s in streams if coef[s] > 0), key=lambda s: -value[s] / coef[s]):
        keep[s] = min(1.0, room / coef[s])
        room -= keep[s] * coef[s]
        if room <= 0:
            break
    return keep


def _linear_program(terms, streams, value) -> dict[str, float]:
    from ortools.linear_solver import pywraplp

    solver = pywraplp.Solver.CreateSolver("GLOP")
    x = {s: solver.NumVar(0.0, 1.0, f"x_{s}") for s in streams}
    for n, fixed, coef in terms:
        solver.Add(sum(coef[s] * x[s] for s in streams if coef[s]) <= n.capacity - fixed)
    solver.Maximize(sum(value[s] * x[s] for s in streams))
    status = solver.Solve()
    if status != pywraplp.Solver.OPTIMAL:
        raise RuntimeError(f"load-shedding LP ended with status {status}")
    return {s: min(1.0, max(0.0, x[s].solution_value())) for s in streams}
