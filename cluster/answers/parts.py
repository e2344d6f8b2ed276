"""A stream's outputs: Parquet datasets written one part per micro-batch, each part atomic,
and the answers' schema fixed for the whole run.

Why its own module: how results land on disk (a hidden name then a rename, so a reader sees
whole parts only; a previous run's parts removed, foreign files refused) is independent of
how Spark hands over files and how they are fed; ``cluster.service.service`` writes its parts by the
same rules.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from cluster.answers.blocks import ANSWER_SCHEMA_FLOAT, ANSWER_SCHEMA_INT, empty_late
from cluster.deployment.deployment import Deployment
from cluster.feeds.directory_options import StreamError

LATE_SCHEMA = empty_late().schema
_PART_RE = re.compile(r"part-\d+\.parquet")


class PartWriter:
    """A Parquet dataset directory written one part at a time, each part atomically."""

    def __init__(self, path: Path, schema: pa.Schema):
        self.path, self.schema, self.parts, self.rows = path, schema, 0, 0
        clear_dataset(path)
        path.mkdir(parents=True)

    def write(self, table: pa.Table, batch: int) -> None:
        if not table.num_rows:
            return
        self._put(table.select(self.schema.names).cast(self.schema), f"part-{batch:05d}.parquet")
        self.parts += 1
        self.rows += table.num_rows

    def close(self) -> None:
        """An empty dataset still gets one (empty) part, so readers know its schema."""
        if not self.parts:
            self._put(self.schema.empty_table(), "part-00000.parquet")

    def _put(self, table: pa.Table, name: str) -> None:
        tmp = self.path / f".{name}.tmp"
        pq.write_table(table, tmp)
        os.replace(tmp, self.path / name)


def clear_dataset(path: Path) -> None:
    """Remove a previous run's output at ``path`` (a file, or a directory of our parts only)."""
    if path.is_dir():
        foreign = [
            p.name
            for p in path.iterdir()
            if not (_PART_RE.fullmatch(p.name) or p.name.startswith("."))
        ]
        if foreign:
            raise StreamError(
                f"{path} holds files weaveplace did not write ({foreign[:3]}); "
                f"choose another output directory"
            )
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def answer_schema(deployment: Deployment) -> pa.Schema:
    """The answers' schema for the whole run, fixed up front so that every part agrees: value
    is int64 iff every query's answer is integer on its DEBS column (int columns: sum, min,
    max, range, count; avg/stddev and boolean columns give float64), as in a batch run."""
    from cluster.debs.format import DEBS_SCHEMA
    from executors.aggregates import get_aggregate

    all_int = True
    for n in deployment.nodes.values():
        for t in n.spec["trees"]:
            col_int = pa.types.is_integer(DEBS_SCHEMA.field(t["stream"]).type)
            all_int &= all(
                get_aggregate(q["aggregate"]).output_is_int(col_int) for q in t["queries"]
            )
    return ANSWER_SCHEMA_INT if all_int else ANSWER_SCHEMA_FLOAT
