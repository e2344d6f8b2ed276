"""The base of every configuration section: one-line errors, strict models, shared field types.

Why a module of its own: each section (``workload``, ``cluster``, ``placement``, ``data``,
``run``) builds on the same strict model and the same error type, so the sections do not import
one another.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag


class ConfigError(ValueError):
    """A configuration mistake. The message is one line: ``key.path: problem (got value)``."""


def one_or_list(item: Any) -> Any:
    """``x`` or a non-empty list of ``x``; a discriminator keeps errors to the branch used
    (a plain Union would report every branch's complaint)."""
    return Annotated[
        Annotated[item, Tag("__one__")]
        | Annotated[list[item], Field(min_length=1), Tag("__many__")],
        Discriminator(lambda v: "__many__" if isinstance(v, list) else "__one__"),
    ]


def as_list(value: Any) -> list:
    """A ``one_or_list`` value as a list."""
    return list(value) if isinstance(value, list) else [value]


class Strict(BaseModel):
    """Base: unknown keys refused, no type coercion, no NaN/inf, assignments re-validated."""

    model_config = ConfigDict(
        extra="forbid", strict=True, allow_inf_nan=False, validate_default=True
    )


PosInt = Annotated[int, Field(ge=1)]
Rate = Annotated[float, Field(gt=0)]


def id_to_str(v: Any) -> Any:
    """YAML reads ``id: 7`` as an int; ids are strings everywhere else, so accept integers."""
    return str(v) if isinstance(v, int) and not isinstance(v, bool) else v
