"""Text files of a run directory that survive a crash: each appears whole or not at all.

Why one module: the service's state, plan and status are written so that a ``kill -9`` at any
instant leaves either the old file or the new one (write to a hidden temporary, then
``os.replace``); ``serve --resume`` relies on that, whatever the file holds.  Its Parquet
outputs follow the same rule through ``cluster.answers.parts``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


def atomic_write(path: Path, text: str | bytes, mode: int | None = None) -> None:
    """Write ``text`` (bytes: as they are) to ``path`` whole or not at all (a temporary renamed
    over it)."""
    tmp = path.with_name(f".{path.name}.tmp")
    data = text if isinstance(text, bytes) else text.encode()
    if mode is not None:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
    else:
        tmp.write_bytes(data)
    os.replace(tmp, path)


def jsonable(x):
    """``json.dumps`` default: numpy scalars as Python numbers, anything else as its string."""
    if hasattr(x, "item"):
        return x.item()
    return str(x)


def to_json(obj: Any, indent: int | None = None, default: Callable[[Any], Any] = jsonable) -> bytes:
    """``obj`` as UTF-8 JSON that parses to what ``json.dumps(obj, indent=indent,
    default=default)`` would (``Infinity``/``NaN`` included; floats may be spelt otherwise,
    e.g. ``0.00001`` for ``1e-05``).

    Why pydantic-core's encoder (Rust) and not ``json``: a service writes its state and its
    plan on every command, ~10 MB each at 100,000 queries; this takes about half the time of
    ``json``'s compact C encoder, and indents in Rust where ``json`` falls back to Python."""
    import pydantic_core

    return pydantic_core.to_json(obj, indent=indent, fallback=default, inf_nan_mode="constants")
