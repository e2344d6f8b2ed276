"""How ``weaveplace serve`` plans: the configured optimizer, with the initial plan's arguments.

Why a module: the initial plan (``sim.serve_start.initial_plan``) and every re-plan
(``Service._rebalance``: the ``rebalance`` command, or drift past ``placement.tolerance`` after
add/remove churn) must be the same computation with the same arguments, and those arguments are
part of what ``serve --resume`` continues from (``cluster.service.resume``), so a resumed
deployment re-plans as the one it continues (even if the config file changed since).

**WG_PF.** The plan is the one ``placement.choose`` picks from WG_PF's front
(``placement.pareto.search.wg_pf`` with ``front_size`` and the rule, as ``simulate`` and
``weaveplace run`` do).  Unset, the rule is ``placement.pareto.choose.default_choose`` of the layout at
the time of the plan (``capacities`` once any node has a capacity, else
``total_cost_within: 5%``): nodes come and go with ``add-node`` / ``retire-node``, and the
config's "default" means "by the layout".  The initial plan must meet the rule (as
``weaveplace run``: the caller stops with the rule's one-line note).  A re-plan whose rule no
front plan meets runs the plan the rule falls back to (the most balanced plan, or the least
overloaded one for ``capacities``), and the note (with the load-shedding proposal for
capacities) goes to the reply, the event and ``status``: refusing would leave the deployment on
the running plan, which the re-plan was asked to improve.

**Choice record** (``Choice``, in ``status``, ``plan_current.json``, the events of re-plans and
the state): the rule, whether it is the default, whether it was met, the note when not, the
front's (TotalCost, MaxCost) points and the chosen index.  It describes the last plan the
optimizer chose: add/remove commands between re-plans change the running plan by Incremental
WeaveShare without re-running the rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from placement.pareto.choose import ChoiceRule, default_choose
from placement.pareto.search import DEFAULT_FRONT_SIZE, ParetoResult, wg_pf
from placement.plan import Plan
from placement.queries import Query
from placement.trees import CostModel


@dataclass(frozen=True)
class Planner:
    """The optimizer and its arguments (``run.seed``, ``placement.preprocess``; for WG_PF
    ``placement.front_size`` and ``placement.choose`` as written, None: the default)."""

    optimizer: str
    seed: int = 0
    preprocess: bool | str = False
    front_size: int = DEFAULT_FRONT_SIZE
    choose: Any = None

    @classmethod
    def from_config(cls, cfg: Any) -> Planner:
        """The config's planner (its one optimizer: the caller checked there is one)."""
        pl = cfg.placement
        return cls(
            pl.optimizer_list[0],
            int(cfg.run.seed),
            pl.preprocess_arg,
            int(pl.front_size),
            pl.choose,
        )

    def rule(self, caps: Sequence[float | None]) -> ChoiceRule | None:
        """WG_PF's rule for a layout with these capacities (None for other optimizers)."""
        if self.optimizer != "WG_PF":
            return None
        return default_choose(list(caps)) if self.choose is None else ChoiceRule.parse(self.choose)

    def plan(
        self, queries: Sequence[Query], model: CostModel, caps: Sequence[float | None]
    ) -> tuple[Plan, dict | None]:
        """``(plan, choice)``: the optimizer's plan of ``queries`` on nodes with capacities
        ``caps`` (None: no capacity) and, for WG_PF, its ``Choice`` record (else None).
        ``ValueError`` / ``KeyError`` when the optimizer cannot plan (e.g. a single-node
        optimizer, which only plans the initial layout)."""
        from placement.optimizers import optimize

        nodes: Any = list(caps) if any(c is not None for c in caps) else len(caps)
        rule = self.rule(caps)
        if rule is None:
            plan = optimize(
                self.optimizer, queries, model, nodes, seed=self.seed, preprocess=self.preprocess
            )
            return plan, None
        res = wg_pf(
            queries,
            model,
            nodes,
            seed=self.seed,
            preprocess=self.preprocess,
            front_size=self.front_size,
            rule=rule,
        )
        return res.plan, choice_record(res, default=self.choose is None)

    def to_state(self) -> dict:
        return asdict(self)

    @classmethod
    def from_state(cls, d: dict) -> Planner:
        return cls(
            str(d["optimizer"]),
            int(d.get("seed", 0)),
            d.get("preprocess", False),
            int(d.get("front_size", DEFAULT_FRONT_SIZE)),
            d.get("choose"),
        )


def choice_record(res: ParetoResult, default: bool) -> dict:
    """How WG_PF's plan was chosen (module docstring), JSON-ready."""
    return {
        "optimizer": "WG_PF",
        "rule": str(res.rule),
        "choose": res.rule.to_dict(),
        "default": default,
        "met": bool(res.met),
        "note": res.note or None,
        "front": [[p.total_cost, p.max_cost] for p in res.front],
        "chosen": res.chosen,
    }
