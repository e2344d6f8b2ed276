"""A Parquet file read in *file order* (its rows as recorded, ``data.order: file``) on the driver
route, in bounded memory, and the check of whether that order is already time order.

Why its own module: a file is a recorded stream, so its row order is its arrival order, and
``run.allowed_lateness`` is measured over it on every route (docs/DESIGN.md s. 1).  Spark's
time-range chunks (``cluster.feeds.time_chunks``) give that order only when the file is in time
order; a file out of time order would be reordered by them (rows of an early time range that
sit late in the file would move ahead).  So the driver route first reads the ``ts_ms`` column
alone (``first_disorder``: 8 bytes a row, one row group at a time) and then either pulls the
file by Spark's time ranges as usual (in order: the same rows, the same order) or streams it
with pyarrow in file order (``file_order_batches``), never holding the whole file.  Sliced
mode, which aggregates as if sorted, is exact in file order only for a file in time order,
which ``first_disorder`` decides too.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa


def is_local_file(path) -> bool:
    """Whether ``path`` is a file this process can open (not a directory, not a remote URI)."""
    try:
        return path is not None and Path(str(path)).is_file()
    except OSError:
        return False


def first_disorder(path, batch_rows: int = 1 << 20) -> tuple[int, int, int] | None:
    """The first row of the local Parquet file ``path`` that is older than a row before it, as
    ``(row, ts_ms, newest ts_ms before it)`` (rows 0-based in file order), or None when
    ``ts_ms`` never decreases (file order is time order; ties keep file order either way)."""
    import pyarrow.parquet as pq

    newest: int | None = None
    row = 0
    for b in pq.ParquetFile(str(path)).iter_batches(batch_size=batch_rows, columns=["ts_ms"]):
        ts = b.column(0).to_numpy(zero_copy_only=False)
        if ts.shape[0] == 0:
            continue
        run_max = np.maximum.accumulate(ts)
        if newest is not None:
            run_max = np.maximum(run_max, newest)
            behind = ts < np.concatenate(([newest], run_max[:-1]))
        else:
            behind = np.concatenate(([False], ts[1:] < run_max[:-1]))
        if behind.any():
            i = int(np.argmax(behind))
            before = newest if i == 0 else int(run_max[i - 1])
            return row + i, int(ts[i]), int(before)
        newest = int(run_max[-1])
        row += ts.shape[0]
    return None


def sliced_file_order_refusal(path, found: tuple[int, int, int]) -> str:
    """The one line that refuses sliced mode in file order on a file out of time order
    (``found``: ``first_disorder``'s row, timestamp and newest timestamp before it)."""
    row, ts, before = found
    return (
        f"{Path(str(path)).name} is not in time order (row {row}: ts_ms {ts} after {before}); "
        "sliced mode aggregates in time order, so it cannot replay the file's order "
        "(data.order: file): set data.order: time (feed: driver sorts the file) or "
        "run.feed_mode: raw (late tuples by run.allowed_lateness)"
    )


def file_order_batches(path, columns: Sequence[str], batch_rows: int) -> Iterator[pa.RecordBatch]:
    """The ``columns`` of the local Parquet file ``path`` in file order, ``batch_rows`` rows a
    batch at most (one row group's worth in memory at a time)."""
    import pyarrow.parquet as pq

    for b in pq.ParquetFile(str(path)).iter_batches(batch_size=batch_rows, columns=list(columns)):
        if b.num_rows:
            yield b
