"""The ``workload`` and ``streams`` sections: explicit queries or the generator's grid.

Why a module: what to run (queries, or the papers' generator whose list-valued parameters make
the Table 8 grid) is validated apart from where and how it runs.
"""

from __future__ import annotations

import itertools
import math
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, Field, model_validator

from placement.messages import short_repr
from placement.queries import AGGREGATES, KINDS
from sim.config.base import ConfigError, PosInt, Rate, Strict, as_list, id_to_str, one_or_list
from sim.workload import GENERATORS

MAX_QNUM = 10_000_000
MAX_SMAX = 10_000_000  # the generator materialises the candidate slides 1..Smax


class QuerySpec(Strict):
    """One explicit ACQ (docs/DESIGN.md s. 1)."""

    id: Annotated[str, BeforeValidator(id_to_str), Field(min_length=1)]
    stream: Annotated[str, Field(min_length=1)] = "s0"
    aggregate: Literal[AGGREGATES] = "sum"  # type: ignore[valid-type]
    range: PosInt
    slide: PosInt
    kind: Literal[KINDS] = "time"  # type: ignore[valid-type]


class GeneratorSpec(Strict):
    """The papers' workload generator (``sim.workload``); any parameter may be a list (grid)."""

    qnum: one_or_list(Annotated[int, Field(ge=1, le=MAX_QNUM)])  # type: ignore[valid-type]
    smax: one_or_list(Annotated[int, Field(ge=1, le=MAX_SMAX)])  # type: ignore[valid-type]
    rate: one_or_list(Rate) = 1.0  # type: ignore[valid-type]
    zskew: one_or_list(Annotated[float, Field(ge=0)]) = 0.0  # type: ignore[valid-type]
    omax: one_or_list(Annotated[float, Field(ge=1)]) = 1.0  # type: ignore[valid-type]
    gen: one_or_list(Literal[GENERATORS]) = "nrm"  # type: ignore[valid-type]
    seed: one_or_list(Annotated[int, Field(ge=0)]) = 0  # type: ignore[valid-type]
    stream: Annotated[str, Field(min_length=1)] = "s0"
    aggregate: Literal[AGGREGATES] = "sum"  # type: ignore[valid-type]

    GRID_KEYS: ClassVar[tuple[str, ...]] = ("qnum", "smax", "rate", "zskew", "omax", "gen", "seed")

    def points(self) -> list[dict[str, Any]]:
        """The cartesian product of the list-valued parameters, in file order (last varies
        fastest)."""
        axes = [as_list(getattr(self, k)) for k in self.GRID_KEYS]
        return [dict(zip(self.GRID_KEYS, combo)) for combo in itertools.product(*axes)]

    def size(self) -> int:
        return math.prod(len(as_list(getattr(self, k))) for k in self.GRID_KEYS)


class Workload(Strict):
    queries: Annotated[list[QuerySpec], Field(min_length=1)] | None = None
    generator: GeneratorSpec | None = None

    @model_validator(mode="after")
    def _one_source(self) -> Workload:
        if (self.queries is None) == (self.generator is None):
            raise ConfigError(
                "workload: give exactly one of 'queries' (explicit list) or "
                "'generator' (qnum, smax, rate, zskew, omax, gen, seed)"
            )
        if self.queries is not None:
            first: dict[str, int] = {}
            for i, q in enumerate(self.queries):
                if q.id in first:
                    raise ConfigError(
                        f"workload.queries[{i}].id: duplicate query id {short_repr(q.id)} "
                        f"(also workload.queries[{first[q.id]}]); ids must be unique"
                    )
                first[q.id] = i
        if self.generator is not None:
            g = self.generator
            if "div" in as_list(g.gen) and min(as_list(g.smax)) < 2:
                raise ConfigError(
                    f"workload.generator.smax: gen 'div' draws prime slides and "
                    f"needs smax >= 2 (got {min(as_list(g.smax))})"
                )
        return self


class StreamSpec(Strict):
    rate: Rate
