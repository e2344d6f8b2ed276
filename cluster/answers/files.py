"""Text files of a run directory that survive a crash: each appears whole or not at all.

Why one module: the service's state, plan and status are written so that a ``kill -9`` at any
instant leaves either the old file or the new one (write to a hidden temporary, then
``os.replace``); ``serve --resume`` relies on that, whatever the file holds.  Its Parquet
outputs follow the same rule through ``cluster.answers.parts``.
"""

from __future__ import annotations

import os
from pathlib import Path


def atomic_write(path: Path, text: str, mode: int | None = None) -> None:
    """Write ``text`` to ``path`` whole or not at all (a temporary renamed over it)."""
    tmp = path.with_name(f".{path.name}.tmp")
    if mode is not None:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, mode)
    else:
        tmp.write_text(text)
    os.replace(tmp, path)


def jsonable(x):
    """``json.dumps`` default: numpy scalars as Python numbers, anything else as its string."""
    if hasattr(x, "item"):
        return x.item()
    return str(x)
