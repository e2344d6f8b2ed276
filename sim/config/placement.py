"""The ``placement`` section: optimizers, technique, slicing, engine, exact search, WG_PF rule.

Why a module: every name here is read from a registry at validation time (optimizers:
``placement.optimizers``; techniques: ``placement.cost``; engines: ``placement.edges``), so a
registered extension is accepted without touching the config code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Discriminator, Field, Tag, field_validator, model_validator

from placement.cost import TECHNIQUES
from placement.edges import ENGINES
from placement.messages import short_repr
from placement.optimizers import optimizer_names
from placement.slicing import SLICINGS
from sim.config.base import ConfigError, Strict, as_list, one_or_list

# One registry per kind, owned by the module that implements it (aggregates: placement.queries,
# checked by executors.aggregates; techniques: placement.cost, executors registered in
# executors.base; engines: placement.edges; optimizers: placement.optimizers).  Techniques,
# engines and optimizers are read at validation time, so later registrations are accepted.
OPTIMIZER_NAMES = optimizer_names()  # the built-in ones (``optimizer_names()``: all)
EXACT_LIMIT = 24  # beyond ~24 queries the exact search rarely proves within a minute
EXACT_DEFAULT = 12  # ``exact: true``: ~3 s per (workload, 4 nodes) with the exhaustive solver

OptimizerName = Annotated[str, Field(min_length=1)]


def _registered(names: Callable[[], Iterable[str]]) -> BeforeValidator:
    """A name from a registry read at validation time, refused with the message a ``Literal``
    gives (``expected 'a', 'b' or 'c'``)."""

    def check(v: Any) -> Any:
        allowed = tuple(names())
        if isinstance(v, str) and v in allowed:
            return v
        quoted = [repr(n) for n in allowed]
        listed = " or ".join([", ".join(quoted[:-1]), quoted[-1]] if len(quoted) > 1 else quoted)
        raise ValueError(f"Input should be {listed}")

    return BeforeValidator(check)


def _exact_tag(v: Any) -> str | None:
    return "__bool__" if isinstance(v, bool) else "__int__"


def _preprocess_tag(v: Any) -> str | None:
    return "__bool__" if isinstance(v, bool) else "__str__"


class Autoscale(Strict):
    """``placement.autoscale`` (``weaveplace serve``): the node count follows the load
    (``cluster.service.autoscale``; keys and defaults in configs/README.md)."""

    min_nodes: Annotated[int, Field(ge=1)] = 1
    max_nodes: Annotated[int, Field(ge=1, le=1024)] = 8
    high: Annotated[float, Field(gt=0, le=1)] = 0.9
    low: Annotated[float, Field(gt=0, lt=1)] = 0.6
    cooldown_s: Annotated[float, Field(ge=0)] = 30.0
    #: every node's capacity (null: the cluster.nodes' one capacity)
    capacity: Annotated[float, Field(gt=0)] | None = None
    busy_high: Annotated[float, Field(gt=0)] = 0.9
    sustain: Annotated[int, Field(ge=1)] = 3
    max_queue: Annotated[int, Field(ge=0)] = 8
    lag_high_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 30.0
    spare_nodes: Annotated[int, Field(ge=0)] = 1
    ray_wait_s: Annotated[float, Field(ge=0)] = 60.0
    optimizers: one_or_list(OptimizerName) = ["WG_TN", "WG_I", "WG_LS"]  # type: ignore[valid-type]
    exact_max_queries: Annotated[int, Field(ge=0, le=16)] = 10

    @model_validator(mode="after")
    def _bands(self) -> Autoscale:
        if self.min_nodes > self.max_nodes:
            raise ConfigError(
                f"placement.autoscale.min_nodes: {self.min_nodes} is above max_nodes "
                f"{self.max_nodes}"
            )
        if self.low >= self.high:
            raise ConfigError(
                f"placement.autoscale.low: {self.low} must be below high {self.high} "
                "(the band between them keeps decisions from flapping)"
            )
        from placement.optimizers import DISTRIBUTED

        for i, name in enumerate(as_list(self.optimizers)):
            if name not in DISTRIBUTED:
                raise ConfigError(
                    f"placement.autoscale.optimizers[{i}]: {name!r} is not a distributed "
                    f"optimizer; allowed: {', '.join(DISTRIBUTED)}"
                )
        return self


class Shedding(Strict):
    """``placement.shedding`` (``weaveplace serve``): drop boxes at the sources when the input
    outgrows the nodes (``cluster.service.load_shedding``; keys in configs/README.md)."""

    min_change: Annotated[float, Field(gt=0, le=1)] = 0.02
    rate_window_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 10.0


class Placement(Strict):
    optimizers: one_or_list(OptimizerName) = ["WG_TN", "WG_I"]  # type: ignore[valid-type]
    ie: Annotated[str, _registered(lambda: TECHNIQUES)] = "panes"
    #: pairs (edges at window starts and ends) or cutty (window starts only): how plans are
    #: priced and how live runs slice (``placement.cost``, ``executors.cutty``)
    slicing: Literal[SLICINGS] = "pairs"  # type: ignore[valid-type]
    engine: Annotated[str, _registered(lambda: ENGINES)] = "fast"
    preprocess: Annotated[
        Annotated[bool, Tag("__bool__")]
        | Annotated[Literal["none", "classes", "slides"], Tag("__str__")],
        Discriminator(_preprocess_tag),
    ] = False
    exact: Annotated[
        Annotated[bool, Tag("__bool__")]
        | Annotated[int, Field(ge=0, le=EXACT_LIMIT), Tag("__int__")],
        Discriminator(_exact_tag),
    ] = False
    #: seconds the exact solver may spend per workload and node layout before it reports its
    #: best plan (never worse than the run's heuristics) with a proven bound (placement.exact)
    exact_time_limit: Annotated[float, Field(gt=0, le=86400)] = 60.0

    #: WG_PF (placement.pareto): at most this many plans on the returned front
    front_size: Annotated[int, Field(ge=1, le=64)] = 8
    #: WG_PF's rule picking the plan to report and run (placement.pareto.choose.ChoiceRule); None:
    #: the default (capacities when the nodes have capacities, else total_cost_within: 5%)
    choose: Any = None

    @field_validator("choose", mode="after")
    @classmethod
    def _choose(cls, v: Any) -> Any:
        if v is None:
            return v
        from placement.pareto.choose import ChoiceRule, ChooseError

        try:
            ChoiceRule.parse(v)
        except ChooseError as exc:
            raise ConfigError(str(exc)) from None
        return v

    def choose_rule(self, capacities: list[float | None]):
        """The WG_PF rule for a cluster layout (``placement.pareto.choose.default_choose`` if
        unset)."""
        from placement.pareto.choose import ChoiceRule, default_choose

        return default_choose(capacities) if self.choose is None else ChoiceRule.parse(self.choose)

    #: weaveplace serve: re-plan when the running plan's TotalCost drifts more than this
    #: fraction above a fresh plan of the running queries; at most max_moves trees move then
    tolerance: Annotated[float, Field(ge=0)] = 0.25
    max_moves: Annotated[int, Field(ge=0)] = 8
    #: weaveplace serve: the node count follows the load (None: the operator's, as written)
    autoscale: Autoscale | None = None
    #: weaveplace serve: shed load at the sources past the nodes' capacities (None: never)
    shedding: Shedding | None = None

    @field_validator("optimizers", mode="after")
    @classmethod
    def _known(cls, v: Any) -> Any:
        names = as_list(v)
        for i, name in enumerate(names):
            if name not in optimizer_names():
                where = (
                    f"placement.optimizers[{i}]" if isinstance(v, list) else "placement.optimizers"
                )
                raise ConfigError(
                    f"{where}: unknown optimizer {short_repr(name)}; allowed: {', '.join(optimizer_names())}"
                )
            if name in names[:i]:
                raise ConfigError(f"placement.optimizers[{i}]: {short_repr(name)} is listed twice")
        return v

    @property
    def optimizer_list(self) -> list[str]:
        return as_list(self.optimizers)

    @property
    def exact_max_queries(self) -> int:
        """Largest workload (queries) for which the exact optimum is computed (0: never)."""
        if isinstance(self.exact, bool):
            return EXACT_DEFAULT if self.exact else 0
        return self.exact

    @property
    def preprocess_arg(self) -> bool | str:
        return False if self.preprocess == "none" else self.preprocess
