"""The rule that picks one plan of a WG_PF front (``placement.choose`` in a config).

Why one module: the rule is what the user writes and reads (parsing, one-line errors, the
note when no plan meets it, the load-shedding proposal); the search (``placement.pareto``)
only hands it the front.

**The choice rule** (``ChoiceRule``, applied to the full front before truncation):
``max_cost_at_most: N`` the cheapest plan with MaxCost <= N; ``max_cost_within: "p%"`` the cheapest
plan with MaxCost within p % of the front's smallest; ``total_cost_within: "p%"`` the smallest
MaxCost with TotalCost within p % of the front's cheapest (default without capacities, 5 %);
``capacities`` the cheapest plan whose every node is within its capacity (default with
capacities). When no plan meets the rule, the most balanced plan (cap rules) or the plan needing
the least load shedding (capacities) is chosen and ``note`` says so in one line, with a shedding
proposal (``placement.shedding``) for capacities.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from placement.pareto.front import REL, at_most
from placement.plan import Plan

_PCT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")


class ChooseError(ValueError):
    """A malformed ``placement.choose`` (the message names the key and what is allowed)."""


@dataclass(frozen=True)
class ChoiceRule:
    """One rule (module docstring). ``value``: the cap for ``max_cost_at_most``, a fraction
    (0.05 for "5%") for the ``_within`` rules, None for ``capacities``."""

    rule: str
    value: float | None = None

    @property
    def amount(self) -> float:
        """``value`` of a rule that has one (every rule but ``capacities``)."""
        if self.value is None:
            raise ValueError(f"{self.rule}: has no value")
        return self.value

    @staticmethod
    def parse(raw: Any, where: str = "placement.choose") -> ChoiceRule:
        """``"capacities"``, ``{max_cost_at_most: N}``, ``{max_cost_within: "10%"}`` or
        ``{total_cost_within: "5%"}``; a one-line ``ChooseError`` otherwise."""
        allowed = (
            'capacities, {max_cost_at_most: N}, {max_cost_within: "p%"} or '
            '{total_cost_within: "p%"}'
        )
        if isinstance(raw, ChoiceRule):
            return raw
        if raw == "capacities" or raw == {"capacities": True}:
            return ChoiceRule("capacities")
        if not isinstance(raw, dict) or len(raw) != 1:
            raise ChooseError(f"{where}: expected {allowed}, got {raw!r}")
        ((k, v),) = raw.items()
        if k == "max_cost_at_most":
            if (
                isinstance(v, bool)
                or not isinstance(v, (int, float))
                or not v > 0
                or not math.isfinite(v)
            ):
                raise ChooseError(
                    f"{where}.max_cost_at_most: expected a number > 0 "
                    f"(operations per time unit), got {v!r}"
                )
            return ChoiceRule(k, float(v))
        if k in ("max_cost_within", "total_cost_within"):
            m = _PCT.match(v) if isinstance(v, str) else None
            if m is None:
                raise ChooseError(f'{where}.{k}: expected a percentage such as "5%", got {v!r}')
            return ChoiceRule(k, float(m.group(1)) / 100.0)
        raise ChooseError(f"{where}: unknown rule {k!r}; expected {allowed}")

    def to_dict(self) -> Any:
        if self.rule == "capacities":
            return "capacities"
        if self.rule == "max_cost_at_most":
            return {self.rule: self.value}
        return {self.rule: f"{self.amount * 100:g}%"}

    def __str__(self) -> str:
        d = self.to_dict()
        return d if isinstance(d, str) else f"{self.rule}: {next(iter(d.values()))}"


def default_choose(caps: Sequence[float | None]) -> ChoiceRule:
    """``capacities`` when the nodes have capacities, else ``total_cost_within: 5%``."""
    if any(c is not None for c in caps):
        return ChoiceRule("capacities")
    return ChoiceRule("total_cost_within", 0.05)


def _fits(plan: Plan) -> bool:
    return all(n.capacity is None or n.cost <= n.capacity * (1 + 1e-12) for n in plan.nodes)


def shedding_note(plans: Sequence[Plan]) -> str:
    """One line: no plan fits the capacities, and the load-shedding proposal
    (``placement.shedding.shed_load``) of the plan that keeps the most (tuple x query) pairs."""
    from placement.shedding import InfeasibleEvenWhenShedding, overloads, shed_load

    best = None
    for i, p in enumerate(plans):
        try:
            s = shed_load(p)
        except InfeasibleEvenWhenShedding:
            continue
        if best is None or s.kept_value > best[1].kept_value * (1 + REL):
            best = (i, s)
    worst = min(plans, key=lambda p: sum(o.excess for o in overloads(p)))
    over = ", ".join(f"{o.node} {o.cost:.6g} > {o.capacity:.6g}" for o in overloads(worst))
    head = f"no plan of the WG_PF front fits the node capacities (closest: {over})"
    if best is None:
        return head + "; no load shedding helps (edges alone exceed a capacity): add capacity"
    i, s = best
    drops = ", ".join(f"{st} {100 * d:.3g} %" for st, d in sorted(s.drop.items()) if d > 1e-12)
    lost = 100 * (1 - s.kept_value / s.full_value) if s.full_value else 0.0
    return (
        head + f"; proposal: shed at the sources of front plan {i} (TotalCost "
        f"{plans[i].total_cost:.6g}) the input fraction {drops}, losing {lost:.3g} % of "
        "the (tuple x query) pairs the answers aggregate (`weaveplace shed` on the plan)"
    )


def choose(plans: Sequence[Plan], rule: ChoiceRule) -> tuple[int, bool, str]:
    """``(index, met, note)``: the plan of ``plans`` (a front) that ``rule`` picks, whether it
    meets the rule and, when not, one line saying what was chosen instead and why."""
    if not plans:
        raise ValueError("choose: empty front")
    T = [p.total_cost for p in plans]
    M = [p.max_cost for p in plans]
    idx = range(len(plans))
    cheapest = lambda ok: min(ok, key=lambda i: (T[i], M[i], i))  # noqa: E731
    balanced = min(idx, key=lambda i: (M[i], T[i], i))
    if rule.rule == "capacities":
        ok = [i for i in idx if _fits(plans[i])]
        if ok:
            return cheapest(ok), True, ""
        return _least_overload(plans), False, shedding_note(plans)
    if rule.rule == "max_cost_at_most":
        ok = [i for i in idx if at_most(M[i], rule.amount)]
        if ok:
            return cheapest(ok), True, ""
        return (
            balanced,
            False,
            (
                f"placement.choose: no plan of the WG_PF front has MaxCost <= "
                f"{rule.value:g} (smallest: {M[balanced]:.6g}); chose the most "
                "balanced plan"
            ),
        )
    if rule.rule == "max_cost_within":
        cap = min(M) * (1 + rule.amount)
        return cheapest([i for i in idx if at_most(M[i], cap)]), True, ""
    if rule.rule == "total_cost_within":
        cap = min(T) * (1 + rule.amount)
        ok = [i for i in idx if at_most(T[i], cap)]
        return min(ok, key=lambda i: (M[i], T[i], i)), True, ""
    raise ValueError(f"unknown rule {rule.rule!r}")


def _least_overload(plans: Sequence[Plan]) -> int:
    from placement.shedding import overloads

    return min(
        range(len(plans)),
        key=lambda i: (sum(o.excess for o in overloads(plans[i])), plans[i].total_cost, i),
    )
