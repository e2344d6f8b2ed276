"""Opening DEBS inputs: by file suffix (text or Parquet), text byte ranges, bytes in memory.

Why its own module: the live runs read DEBS data in three shapes (a file on disk, a byte range
of a text file in a Spark task, a file's content handed over by Spark's ``binaryFile`` source);
each opens its source here and gets the same ``DebsReader`` (rows in ``DEBS_SCHEMA``, read
statistics) from the one text parser (``cluster.debs.text``) or the Parquet check, so all
three give the same rows, rejects and line numbers. ``convert_debs`` writes a text file's
rows as Parquet with the same rules.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from cluster.debs.format import DEBS_SCHEMA
from cluster.debs.text import (
    DebsReader,
    ReadStats,
    check_read_args,
    read_debs_tsv,
    read_tsv_batches,
)


def _line_start_at_or_after(f: BinaryIO, pos: int, size: int) -> int:
    """The first line start at or after byte ``pos``: ``pos`` itself when it is 0 or follows
    an LF, else the byte after the next LF (``size`` when there is none)."""
    if pos <= 0:
        return 0
    if pos >= size:
        return size
    f.seek(pos - 1)
    at = pos - 1
    while True:
        buf = f.read(1 << 16)
        if not buf:
            return size
        k = buf.find(b"\n")
        if k >= 0:
            return at + k + 1
        at += len(buf)


def text_line_ranges(path: str | os.PathLike, range_bytes: int) -> list[tuple[int, int]]:
    """Cut a text file into byte ranges of about ``range_bytes``, each from one line start to
    the next (``[begin, end)``, consecutive, covering the file): every line lies in exactly one
    range, so ranges can be read in parallel (``read_debs_tsv_range``) and their rows, rejects
    and line counts concatenated give exactly a whole-file read.  Reads a few bytes per cut."""
    if range_bytes < 1:
        raise ValueError("range_bytes must be >= 1")
    size = os.path.getsize(path)
    cuts = [0]
    with open(path, "rb") as f:
        for pos in range(range_bytes, size, range_bytes):
            c = _line_start_at_or_after(f, pos, size)
            if c > cuts[-1] and c < size:
                cuts.append(c)
    cuts.append(size)
    return [(a, b) for a, b in zip(cuts[:-1], cuts[1:]) if b > a] or [(0, size)]


class _Window:
    """A read-only view of bytes ``[begin, end)`` of an open file (``read`` only)."""

    def __init__(self, f: BinaryIO, begin: int, end: int):
        self._f, self._left = f, end - begin
        f.seek(begin)

    def read(self, n: int = -1) -> bytes:
        n = self._left if n < 0 else min(n, self._left)
        data = self._f.read(n) if n > 0 else b""
        self._left -= len(data)
        return data

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


def read_debs_tsv_range(
    path: str | os.PathLike,
    begin: int,
    end: int,
    *,
    rejects: BinaryIO | None = None,
    batch_rows: int = 1 << 17,
    block_bytes: int = 4 << 20,
    max_line_bytes: int = 1 << 16,
    extra_columns: str = "reject",
) -> DebsReader:
    """``read_debs_tsv`` over the lines in bytes ``[begin, end)`` of ``path``, a range of
    ``text_line_ranges`` (it must start and end at line starts).  Line numbers in ``rejects``
    and ``stats.lines`` count from the range's first line (1-based); add the lines of the
    ranges before it for the file's numbers.  A BOM or a header line is recognised only in the
    range that starts at byte 0, as in a whole-file read."""
    check_read_args(batch_rows, block_bytes, max_line_bytes, extra_columns)
    stats = ReadStats()
    src = _Window(open(path, "rb"), begin, end)
    it = read_tsv_batches(
        src,
        rejects,
        batch_rows,
        block_bytes,
        max_line_bytes,
        stats,
        extra_columns,
        file_start=begin == 0,
    )
    return DebsReader(_closing(it, src), stats)


def _closing(it: Iterator, src: _Window) -> Iterator:
    try:
        yield from it
    finally:
        src.__exit__()


def read_debs(
    path: str | os.PathLike,
    *,
    rejects_path: str | os.PathLike | None = None,
    batch_rows: int = 1 << 17,
    extra_columns: str = "reject",
) -> DebsReader:
    """Open DEBS data by suffix: ``.parquet``/``.pq`` -> Parquet (schema checked), else text
    (``extra_columns``: see ``read_debs_tsv``)."""
    p = Path(path)
    if not is_parquet_name(p.name):
        return read_debs_tsv(
            p, rejects_path=rejects_path, batch_rows=batch_rows, extra_columns=extra_columns
        )
    return _read_parquet(pq.ParquetFile(p), str(p), rejects_path, batch_rows)


def is_parquet_name(name: str) -> bool:
    """The format rule of ``read_debs``: ``.parquet``/``.pq`` is Parquet, anything else text."""
    return Path(name).suffix.lower() in (".parquet", ".pq")


def read_debs_buffer(
    data,
    name: str,
    *,
    rejects: BinaryIO | None = None,
    batch_rows: int = 1 << 17,
    extra_columns: str = "reject",
) -> DebsReader:
    """``read_debs`` over a file held in memory (``bytes`` or a ``pyarrow.Buffer``, e.g. a
    file's content handed over by Spark's ``binaryFile`` source); ``name``'s suffix picks the
    format as in ``read_debs``.  ``rejects``: an open binary file that receives the rejects
    (same format and header as ``rejects_path``).  The same parsers, so the same rows, rejects
    and line numbers as reading the file from disk."""
    src = pa.BufferReader(data)
    if not is_parquet_name(name):
        check_read_args(batch_rows, 1, 1, extra_columns)
        stats = ReadStats()
        return DebsReader(
            read_tsv_batches(src, rejects, batch_rows, 4 << 20, 1 << 16, stats, extra_columns),
            stats,
        )
    return _read_parquet(pq.ParquetFile(src), name, rejects, batch_rows)


def _read_parquet(pf: pq.ParquetFile, label: str, rejects_path, batch_rows: int) -> DebsReader:
    """A DEBS Parquet file (schema checked against ``DEBS_SCHEMA``, nulls refused)."""
    got = pf.schema_arrow
    want = DEBS_SCHEMA
    if got.names != want.names or [f.type for f in got] != [f.type for f in want]:
        raise ValueError(
            f"{label}: not a DEBS Parquet file: columns/types differ from "
            f"DEBS_SCHEMA (got {got.names[:5]}...)"
        )
    stats = ReadStats()

    def gen() -> Iterator[pa.RecordBatch]:
        if rejects_path is not None:  # same contract as the text reader: the file exists
            if hasattr(rejects_path, "write"):
                rejects_path.write(b"line\treason\traw\n")
            else:
                Path(rejects_path).write_bytes(b"line\treason\traw\n")
        batches = pf.iter_batches(batch_size=batch_rows)
        while True:
            t0 = time.perf_counter()
            b = next(batches, None)
            stats.seconds += time.perf_counter() - t0
            if b is None:
                return
            if any(c.null_count for c in b.columns):
                raise ValueError(f"{label}: DEBS Parquet must not contain nulls")
            stats.rows_read += b.num_rows
            stats.lines += b.num_rows
            yield pa.RecordBatch.from_arrays(b.columns, schema=DEBS_SCHEMA)

    return DebsReader(gen(), stats)


class _CountingReader:
    """A binary file whose ``read`` reports the bytes read so far to ``progress``."""

    def __init__(self, f: BinaryIO, progress):
        self._f, self._progress, self.done = f, progress, 0

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self.done += len(data)
        if self._progress is not None:
            self._progress(self.done)
        return data

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


def convert_debs(
    src: str | os.PathLike,
    dest: str | os.PathLike,
    *,
    rejects_path: str | os.PathLike | None = None,
    extra_columns: str = "reject",
    row_group_rows: int = 1 << 20,
    progress=None,
) -> ReadStats:
    """Convert a DEBS text file to DEBS Parquet (``DEBS_SCHEMA``, zstd, row groups of
    ``row_group_rows`` with ``ts_ms`` statistics) with ``read_debs_tsv``'s rules: malformed
    lines go to ``rejects_path``, glued records are split, ``extra_columns`` as there.

    Streams the file (memory: one row group), writes ``dest`` under a temporary name and
    renames it, so a failed conversion leaves no partial file.  ``progress(bytes_read)`` is
    called as the text is read.  A live run over ``dest`` gives the same answers as over
    ``src`` (``cluster.feeds.text``)."""
    src, dest = Path(src), Path(dest)
    check_read_args(1, 1, 1, extra_columns)
    if row_group_rows < 1:
        raise ValueError("row_group_rows must be >= 1")
    stats = ReadStats()
    tmp = dest.with_name(f".{dest.name}.tmp")
    try:
        with (
            _CountingReader(open(src, "rb"), progress) as f,
            pq.ParquetWriter(tmp, DEBS_SCHEMA, compression="zstd") as w,
        ):
            it = read_tsv_batches(
                f,
                Path(rejects_path) if rejects_path is not None else None,
                row_group_rows,
                4 << 20,
                1 << 16,
                stats,
                extra_columns,
            )
            for b in it:
                w.write_table(
                    pa.Table.from_batches([b], schema=DEBS_SCHEMA), row_group_size=row_group_rows
                )
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            tmp.unlink()
    return stats
