"""DEBS *text* files (the original format) as the input of a file run (``data.path``).

Why a stage: the original file is text (32 M lines, ~3.5 GB) and only the project's reader
(``cluster.debs.text``) has the text rules (strict fields, per-line reject reasons and exact line
numbers, glued records split, an optional trailing column dropped).  Spark's own CSV reader
has none of that, and the driver alone would parse ~1.2 M rows/s on one core and hold what it
parsed.  So Spark does the partitioned reading: the file is cut into byte ranges at line
boundaries (``cluster.debs.reader.text_line_ranges``, a few bytes read per cut), one Spark task per range
parses its lines with ``read_debs_tsv_range`` and writes them as one Parquet part (only the
run's columns: ``ts_ms``, ``index``, the streams) plus its rejects with range-local line
numbers.  The driver holds no rows: it renumbers the rejects into
``rejects/<file>.rejects.tsv`` (the format and line numbers of a whole-file read, as in
directory mode) and then feeds the staged parts like any DEBS Parquet input.

Feeding the stage (``feed_text``).  Raw mode: when the file is in time order (every part's
``ts_ms`` non-decreasing, each part starting at or after the previous part's end, ties kept in
file order) or ``order="file"``, the driver streams the parts in file order with pyarrow:
exactly the order ``feed_raw`` gives the converted Parquet file.  Otherwise the stage
directory goes through ``feed_raw`` with ``order="sort"`` (chunks sorted by ``(ts_ms,
index)``), which is what ``order="auto"`` gives the converted file whenever ``index``
increases through it (``ordered_arrow_batches``).  Sliced mode: ``feed_sliced`` over the stage
directory (Spark's reader + ``mapInArrow``); its slices do not depend on the order, so with
``order="file"`` a file out of time order is refused in one line (``DeploymentError``, as for
Parquet: sliced mode cannot replay disorder).  Hence a run over the text equals a run over its
conversion (``weaveplace data convert``).

The stage lives in ``<out_dir>/.text-stage`` and is removed after the feed.  Cost: a second
pass over a small columnar copy (a few int64 columns, zstd), not over the text.  With a
remote Spark master the input file and the output directory must be on a file system every
Spark worker sees.
"""

from __future__ import annotations

import functools
import json
import math
import os
import shutil
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from cluster.deployment.specs import DeploymentError
from cluster.feeds.parquet import FeedStats, feed_raw, push_batches
from cluster.feeds.sliced import feed_sliced

#: byte range per Spark task at most (64 MiB: ~400 K lines, ~0.3 s of parsing, ~60 MB of
#: parsed columns in the task's memory at worst)
MAX_RANGE_BYTES = 64 << 20
STAGE_DIR = ".text-stage"


@dataclass
class TextStage:
    """A text file parsed into ``parts`` (file order) by Spark tasks; reader counters summed."""

    source: Path
    directory: Path
    parts: list[Path]
    rejects_path: Path
    ranges: int = 0
    rows: int = 0
    in_order: bool = True
    seconds: float = 0.0
    counts: dict = field(default_factory=dict)  # lines, rows_read, rows_rejected, ...
    rejects_by_reason: dict = field(default_factory=dict)

    def metrics(self) -> dict:
        return {
            "source": str(self.source),
            "ranges": self.ranges,
            "in_order": self.in_order,
            "parse_seconds": self.seconds,
            **self.counts,
            "rejects_by_reason": dict(self.rejects_by_reason),
            "rejects": str(self.rejects_path),
        }


_COUNTS = (
    "lines",
    "rows_read",
    "rows_rejected",
    "header_lines",
    "glued_lines",
    "extra_column_lines",
)


def _parse_ranges(it, path: str, stage: str, columns: list[str], extra_columns: str):
    """Spark task body: each ``(k, begin, end)`` byte range of ``path`` parsed by the DEBS
    reader into ``parts/part-<k>.parquet`` and ``rejects/<k>.tsv``; yields one JSON summary
    per range (counters, ``ts_ms`` span, whether the range is in time order)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from cluster.debs.format import DEBS_SCHEMA
    from cluster.debs.reader import read_debs_tsv_range

    schema = pa.schema([DEBS_SCHEMA.field(c) for c in columns])
    for k, a, b in it:
        part = Path(stage) / "parts" / f"part-{k:05d}.parquet"
        rows, lo, hi, ordered, prev = 0, None, None, True, None
        with (
            open(Path(stage) / "rejects" / f"{k:05d}.tsv", "wb") as rej,
            pq.ParquetWriter(part, schema, compression="zstd") as w,
        ):
            r = read_debs_tsv_range(
                path, a, b, rejects=rej, batch_rows=1 << 17, extra_columns=extra_columns
            )
            for bt in r:
                bt = bt.select(columns)
                ts = bt.column(0).to_numpy()
                if len(ts):
                    if ordered and (
                        (prev is not None and ts[0] < prev) or bool((ts[1:] < ts[:-1]).any())
                    ):
                        ordered = False
                    prev = int(ts[-1])
                    lo = int(ts.min()) if lo is None else min(lo, int(ts.min()))
                    hi = int(ts.max()) if hi is None else max(hi, int(ts.max()))
                    rows += len(ts)
                w.write_batch(pa.RecordBatch.from_arrays(bt.columns, schema=schema))
        st = r.stats
        yield json.dumps(
            {
                "k": k,
                "rows": rows,
                "ts_min": lo,
                "ts_max": hi,
                "ordered": ordered,
                **{c: getattr(st, c) for c in _COUNTS},
                "reasons": dict(st.rejects_by_reason),
                "seconds": st.seconds,
            }
        )


def stage_text(
    spark,
    path: str | Path,
    out_dir: str | Path,
    columns: Sequence[str],
    *,
    extra_columns: str = "reject",
    range_bytes: int | None = None,
) -> TextStage:
    """Parse the DEBS text file ``path`` with Spark tasks into ``<out_dir>/.text-stage``
    (module docstring) and write its rejects to ``<out_dir>/rejects/<name>.rejects.tsv``.

    ``columns``: the columns to keep (``ts_ms`` first).  ``range_bytes``: bytes per task
    (default: the file split evenly into a multiple of Spark's default parallelism of ranges,
    at most 64 MiB and at least 1 MiB each)."""
    from cluster.debs.format import EXTRA_COLUMNS_CHOICES
    from cluster.debs.reader import text_line_ranges

    if extra_columns not in EXTRA_COLUMNS_CHOICES:
        raise ValueError(
            f"extra_columns must be one of {EXTRA_COLUMNS_CHOICES}, got {extra_columns!r}"
        )
    src = Path(path).resolve()
    out = Path(out_dir).resolve()
    stage = out / STAGE_DIR
    shutil.rmtree(stage, ignore_errors=True)
    (stage / "parts").mkdir(parents=True)
    (stage / "rejects").mkdir()
    t0 = time.perf_counter()
    sc = spark.sparkContext
    par = max(1, int(sc.defaultParallelism))
    size = src.stat().st_size
    if range_bytes is None:  # a multiple of the cores' count of ranges: no lone last wave
        waves = max(1, math.ceil(size / (par * MAX_RANGE_BYTES)))
        range_bytes = max(1 << 20, math.ceil(size / (par * waves)))
    ranges = text_line_ranges(src, range_bytes)
    job = [(k, a, b) for k, (a, b) in enumerate(ranges)]
    fn = functools.partial(
        _parse_ranges,
        path=str(src),
        stage=str(stage),
        columns=list(columns),
        extra_columns=extra_columns,
    )
    res = sorted(
        (json.loads(x) for x in sc.parallelize(job, len(job)).mapPartitions(fn).collect()),
        key=lambda d: d["k"],
    )
    if [d["k"] for d in res] != list(range(len(job))):
        raise RuntimeError(f"{src}: Spark returned {len(res)} of {len(job)} text ranges")
    rejects = out / "rejects" / f"{src.name}.rejects.tsv"
    _merge_rejects(stage / "rejects", res, rejects)
    counts = {c: sum(d[c] for d in res) for c in _COUNTS}
    reasons: Counter = Counter()
    for d in res:
        reasons.update(d["reasons"])
    in_order, prev = True, None
    for d in res:
        if not d["rows"]:
            continue
        if not d["ordered"] or (prev is not None and d["ts_min"] < prev):
            in_order = False
        prev = d["ts_max"]
    return TextStage(
        source=src,
        directory=stage,
        parts=[stage / "parts" / f"part-{k:05d}.parquet" for k in range(len(job))],
        rejects_path=rejects,
        ranges=len(job),
        rows=sum(d["rows"] for d in res),
        in_order=in_order,
        seconds=time.perf_counter() - t0,
        counts=counts,
        rejects_by_reason=reasons,
    )


def _merge_rejects(parts_dir: Path, res: list[dict], dest: Path) -> None:
    """Concatenate the ranges' rejects, line numbers shifted by the lines of the ranges
    before; streamed line by line (a reject's raw bytes never hold an LF)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp")
    before = 0
    with open(tmp, "wb") as out:
        out.write(b"line\treason\traw\n")
        for d in res:
            with open(parts_dir / f"{d['k']:05d}.tsv", "rb") as f:
                head = f.readline()
                assert head in (b"", b"line\treason\traw\n"), head
                for ln in f:
                    no, rest = ln.split(b"\t", 1)
                    out.write(b"%d\t" % (int(no) + before) + rest)
            before += d["lines"]
    os.replace(tmp, dest)


def _stage_batches(
    stage: TextStage, columns: list[str], batch_rows: int
) -> Iterator[pa.RecordBatch]:
    for p in stage.parts:
        f = pq.ParquetFile(p)
        yield from f.iter_batches(batch_size=batch_rows, columns=columns)


@dataclass(frozen=True)
class TextFeedOptions:
    """How ``feed_text`` feeds a text file: ``mode`` (``raw`` or ``sliced``, as the
    deployment's), ``streams`` (default: the deployment's), ``batch_rows`` and ``chunk_rows``
    (as ``feed_raw``/``feed_sliced``), ``order`` (``auto``, ``sort`` or ``file``; module
    docstring), ``max_rows`` (raw mode: stop after that many rows), ``extra_columns`` and
    ``range_bytes`` (the staging's: ``stage_text``)."""

    mode: str = "raw"
    streams: Sequence[str] | None = None
    batch_rows: int = 1 << 18
    chunk_rows: int = 1_000_000
    order: str = "auto"
    max_rows: int | None = None
    extra_columns: str = "reject"
    range_bytes: int | None = None


def feed_text(
    deployment,
    spark,
    path: str | Path,
    out_dir: str | Path,
    options: TextFeedOptions | None = None,
) -> tuple[FeedStats, TextStage]:
    """Feed the DEBS text file ``path`` to ``deployment`` (raw or sliced mode, as
    ``feed_raw``/``feed_sliced`` feed Parquet; module docstring for the order; ``options``:
    ``TextFeedOptions``, default all defaults).  Returns the feed's stats (``seconds``
    includes the Spark parsing) and the stage's (rejects, glued lines, extra columns).  The
    stage directory is removed before returning."""
    o = options if options is not None else TextFeedOptions()
    mode, order, max_rows = o.mode, o.order, o.max_rows
    batch_rows, chunk_rows = o.batch_rows, o.chunk_rows
    if mode not in ("raw", "sliced"):
        raise ValueError(f"feed mode must be 'raw' or 'sliced', got {mode!r}")
    if order not in ("auto", "sort", "file"):
        raise ValueError(f"order must be 'auto', 'sort' or 'file', got {order!r}")
    streams = list(o.streams or deployment.streams)
    t0 = time.perf_counter()
    stage = stage_text(
        spark,
        path,
        out_dir,
        ["ts_ms", "index", *streams],
        extra_columns=o.extra_columns,
        range_bytes=o.range_bytes,
    )
    try:
        parts_dir = str(stage.directory / "parts")
        if mode == "sliced":
            if order == "file" and not stage.in_order:  # sliced mode aggregates in time order
                raise DeploymentError(
                    f"{Path(str(path)).name} is not in time order; sliced mode aggregates in "
                    "time order, so it cannot replay the file's order (data.order: file): "
                    "set data.order: time or run.feed_mode: raw"
                )
            fs = feed_sliced(
                deployment,
                spark,
                parts_dir,
                streams=streams,
                batch_rows=batch_rows,
                chunk_rows=chunk_rows,
                order="auto" if order == "file" else order,
            )
        elif order == "file" or stage.in_order:
            fs = _feed_parts(deployment, stage, streams, batch_rows, max_rows)
        else:
            fs = feed_raw(
                deployment,
                spark,
                parts_dir,
                streams=streams,
                batch_rows=batch_rows,
                chunk_rows=chunk_rows,
                order="sort",
                max_rows=max_rows,
            )
    finally:
        shutil.rmtree(stage.directory, ignore_errors=True)
    fs.spark_seconds += stage.seconds
    fs.seconds = time.perf_counter() - t0
    return fs, stage


def _feed_parts(
    deployment, stage: TextStage, streams: list[str], batch_rows: int, max_rows: int | None
) -> FeedStats:
    """The stage's rows in file order, read on the driver with pyarrow (no Spark job)."""
    st = FeedStats()
    t0 = time.perf_counter()
    it = _stage_batches(stage, ["ts_ms", *streams], batch_rows)
    push_batches(deployment, it, st, t0, max_rows=max_rows, skip_empty=True)
    st.chunks = len(stage.parts)
    return st
