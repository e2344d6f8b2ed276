"""Files of a run directory that survive a crash: each appears whole or not at all.

Why one module: the service's outputs (numbered Parquet parts of answers and late tuples),
its state and its plan are all written so that a ``kill -9`` at any instant leaves either the
old file or the new one (write to a hidden temporary, then ``os.replace``); ``serve --resume``
relies on that, whatever the file holds.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

#: a numbered part of a dataset written by ``AnswerParts``
PART_RE = re.compile(r"part-(\d+)\.parquet")


class AnswerParts:
    """A Parquet dataset written one numbered part at a time, each atomically, that survives a
    restart: a resumed run keeps the parts before its checkpoint's counter and removes the
    ones from it on (written after the checkpoint: they are regenerated), so every answer
    ends up in exactly one part."""

    def __init__(self, path: Path, schema: pa.Schema, start: int, fresh: bool):
        from cluster.answers.parts import clear_dataset

        self.path, self.schema, self.next, self.rows = path, schema, int(start), 0
        if fresh:
            clear_dataset(path)
        path.mkdir(parents=True, exist_ok=True)
        for p in path.iterdir():
            m = PART_RE.fullmatch(p.name)
            if (m and int(m.group(1)) >= self.next) or p.name.startswith("."):
                p.unlink()
        self.parts = sum(1 for p in path.iterdir() if PART_RE.fullmatch(p.name))

    def write(self, table: pa.Table, batch: int | None = None) -> None:
        if not table.num_rows:
            return
        name = f"part-{self.next:05d}.parquet"
        self.next += 1
        tmp = self.path / f".{name}.tmp"
        pq.write_table(table.select(self.schema.names).cast(self.schema), tmp)
        os.replace(tmp, self.path / name)
        self.parts += 1
        self.rows += table.num_rows

    def close(self) -> None:
        if not self.parts:
            self.write_empty()

    def write_empty(self) -> None:
        tmp = self.path / ".empty.tmp"
        pq.write_table(self.schema.empty_table(), tmp)
        os.replace(tmp, self.path / f"part-{self.next:05d}.parquet")
        self.next += 1
        self.parts += 1


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
