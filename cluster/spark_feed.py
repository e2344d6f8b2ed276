"""Read DEBS Parquet with Spark and push ordered Arrow batches to a ``Deployment`` (mode ``raw``).

Why the driver path: DESIGN.md s. 8 measured ``DataFrame.toArrow()`` at ~650 K rows/s to the
driver (Row iteration ~70 K rows/s) and driver -> actor at ~370 K rows/s warm, faster than Spark
workers pushing into Ray from ``mapInArrow`` (260 K rows/s) and with no Ray client inside Spark
workers.  So the driver pulls Arrow and feeds (the default; ``executor_feed`` is the route with
the driver out of the data path, for clusters where the driver's core or NIC is the limit:
cluster/README.md, "Driver route vs executor route").

Order: every tree needs its stream in event-time order (out-of-order tuples beyond the allowed
lateness are *late*).  In DEBS data all streams share one timestamp column, so one ordering by
``(ts_ms, index)`` serves every stream (``index`` makes ties deterministic, which count windows
need).  Sorting in Spark costs about as much as the pull itself (2 M rows: 2.3 s unsorted,
4.6 s sorted, 1.25 s unsorted without ``index``), and DEBS files are already in time order, so
the default ``order="auto"`` pulls file order, verifies it on the driver and sorts only chunks
that are not in order.  To keep driver memory bounded on big files the time axis is cut into
ranges of about ``chunk_rows`` rows; each range is one Spark job (``where`` + ``toArrow``, with
Parquet min/max pruning), prefetched by a background thread while the previous one is fed, and
re-sliced into ``batch_rows`` batches (1 MiB batches move at ~100 MB/s, 64 KiB ones crawl:
batch generously).

Mode ``sliced`` (``feed_sliced``): Spark cuts each stream at the union of the edges of every
tree on it (``Deployment.edge_classes``) and computes per-slice count/sum/min/max/sum of squares
in ``mapInArrow`` (vectorised numpy in the Python workers: ``executors.slice_input
.slice_aggregates``); only the slices travel to the driver and the actors, which fold them into
their trees' own slices (``SlicedExecutionTree``).  Why ``mapInArrow`` and no ``groupBy``: the
slice id of a tuple is a union of residue classes (hundreds of classes for 1000 queries), which
numpy enumerates cheaply (one ``arange`` per class over the partition's span + one
``searchsorted``) but a SQL expression would need one ``pmod`` per class per row; and a
``groupBy`` would add a shuffle only to merge the few slices cut by partition or chunk
boundaries, which the trees fold together anyway (their slices are unions of the incoming ones).
Answers equal raw mode's (module ``executors.slice_input``): sliced mode aggregates the data as
if sorted by time, i.e. like raw mode with ``order="auto"``/``"sort"``; ``order="file"``
(replaying disorder, with late tuples) needs raw mode.  Who reads the file for the slicing
tasks (``reader``): by default, for a local Parquet file, the Spark tasks themselves with
pyarrow (``reader="arrow"``: each task reads its row range of the overlapping row groups), so
the tuples never cross from the JVM to the Python workers, which was most of the sliced feed's
Spark time; ``reader="spark"`` keeps Spark's own reader + ``mapInArrow`` (any source Spark
reads).  Both cut the same time-range chunks; a chunk's span comes from the Parquet footer when
the file is local (``parquet_span``), not from an aggregate Spark job (~0.4 s a run).
"""

from __future__ import annotations

import functools
import math
import os
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa


def spark_session(
    master: str = "local[*]",
    app_name: str = "weaveplace",
    conf: dict[str, str] | None = None,
    log_level: str = "ERROR",
):
    """A quiet local Spark session (UI off, UTC, loopback, Arrow on).

    ``PYSPARK_PYTHON`` is set to this interpreter *before* the session is built, otherwise
    Python workers start the system Python without pyarrow.  ``getOrCreate`` reuses a live
    session (a second session in one process, after ``stop``, starts in 0.25 s).
    """
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    b = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", "2g")
    )
    for k, v in (conf or {}).items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark


def read_debs_df(spark, path: str, streams: Sequence[str] | None = None):
    """The DEBS Parquet as a DataFrame with ``ts_ms``, ``index`` (if present) and ``streams``."""
    df = spark.read.parquet(str(path))
    cols = ["ts_ms"] + (["index"] if "index" in df.columns else [])
    missing = [s for s in (streams or []) if s not in df.columns]
    if missing:
        raise KeyError(
            f"{path}: no column(s) {missing}; streams must be column names "
            f"(have {df.columns[:8]}...)"
        )
    if streams is not None:
        df = df.select(*cols, *[s for s in streams if s not in cols])
    return df


def nondecreasing(ts: np.ndarray, prev: int | None) -> bool:
    if ts.shape[0] == 0:
        return True
    if prev is not None and ts[0] < prev:
        return False
    return bool((ts[1:] >= ts[:-1]).all())


def parquet_span(path) -> tuple[int, int, int] | None:
    """``(rows, min ts_ms, max ts_ms)`` of a local Parquet file from its footer (row-group
    statistics), or None (a directory, a remote path, a file without statistics): the caller
    then asks Spark.  Why: that aggregate job costs ~0.4 s per run here, a third of a sliced
    feed of a million rows."""
    groups = parquet_row_groups(path)
    if groups is None:  # not a local file, no statistics, unreadable: Spark will tell
        return None
    if not groups:
        return 0, 0, 0
    return (sum(g[1] for g in groups), min(g[2] for g in groups), max(g[3] for g in groups))


def _time_chunks(df, chunk_rows: int, path=None) -> tuple[int, int, int, list[int]]:
    """Split the event-time span into ``k`` equal ranges of ~``chunk_rows`` rows each:
    ``(rows, k, step, range starts)``; ``(0, 0, 0, [])`` for an empty frame.  ``path``: the
    Parquet file ``df`` reads unfiltered, whose footer gives the span without a Spark job."""
    from pyspark.sql import functions as F

    span = parquet_span(path) if path is not None else None
    if span is None:
        row = df.agg(
            F.min("ts_ms").alias("lo"), F.max("ts_ms").alias("hi"), F.count(F.lit(1)).alias("n")
        ).collect()[0]
        span = (int(row["n"] or 0), row["lo"], row["hi"])
    if not span[0]:
        return 0, 0, 0, []
    n, lo, hi = int(span[0]), int(span[1]), int(span[2])
    k = max(1, math.ceil(n / chunk_rows))
    step = max(1, math.ceil((hi - lo + 1) / k))
    return n, k, step, list(range(lo, hi + 1, step))


def ordered_arrow_batches(
    df,
    *,
    batch_rows: int = 1 << 18,
    chunk_rows: int = 1_000_000,
    order: str = "auto",
    prefetch: bool = True,
    stats: dict | None = None,
    path=None,
) -> Iterator[pa.RecordBatch]:
    """Yield the DataFrame's rows as Arrow batches in stream order.

    ``order``:

    * ``"sort"``: each chunk is sorted by Spark by ``(ts_ms, index)``;
    * ``"auto"`` (default): each chunk is pulled in file order (no Spark sort: about twice as
      fast) and checked on the driver; ``ts_ms`` non-decreasing (across chunks too) means file
      order *is* the stream order (ties keep file order, i.e. ``index`` order for DEBS files),
      otherwise that chunk is pulled again sorted.  The output is exactly ``"sort"``'s order
      whenever the ``index`` column increases through the file, as DEBS files' does;
    * ``"file"``: file order, unchecked, in one piece (time-range chunking would reorder an
      unsorted file): out-of-order tuples then reach the trees and are subject to the allowed
      lateness, which is what a replay of a disordered source should do.  Driver memory holds
      the whole file.

    One small aggregate job finds the time span and row count; the span is cut into equal
    ranges expected to hold ``chunk_rows`` rows each (skew just gives uneven chunks; order is
    exact because the ranges are disjoint).  With ``prefetch`` the next chunk is pulled by a
    background thread while the current one is fed, so Spark and the actors overlap.
    ``stats`` (a dict, optional) receives ``chunks`` and ``sorted_chunks`` (auto-mode re-pulls).
    ``path``: the local Parquet file ``df`` reads unfiltered (``read_debs_df``): the span
    then comes from its footer (``parquet_span``), not from a Spark job.
    """
    from pyspark.sql import functions as F

    if order not in ("auto", "sort", "file"):
        raise ValueError(f"order must be 'auto', 'sort' or 'file', got {order!r}")
    sort_cols = ["ts_ms"] + (["index"] if "index" in df.columns else [])
    if order == "file":
        yield from df.toArrow().combine_chunks().to_batches(max_chunksize=batch_rows)
        return
    n, k, step, ranges = _time_chunks(df, chunk_rows, path)
    if not n:
        return

    def part(a):
        return df if k == 1 else df.where((F.col("ts_ms") >= a) & (F.col("ts_ms") < a + step))

    def pull(a) -> pa.Table:
        d = part(a)
        if order == "auto":  # ``index`` only orders ties in a sort: do not ship it otherwise
            d = d.select(*[c for c in d.columns if c != "index"])
        else:
            d = d.orderBy(*sort_cols)
        return d.toArrow().combine_chunks()

    stats = stats if stats is not None else {}
    stats.setdefault("chunks", 0)
    stats.setdefault("sorted_chunks", 0)
    pool = ThreadPoolExecutor(1) if prefetch and len(ranges) > 1 else None
    try:
        nxt = pool.submit(pull, ranges[0]) if pool else None
        prev = None
        for i, a in enumerate(ranges):
            tbl = nxt.result() if pool else pull(a)
            if pool and i + 1 < len(ranges):
                nxt = pool.submit(pull, ranges[i + 1])
            stats["chunks"] += 1
            if tbl.num_rows == 0:
                continue
            if order == "auto":
                ts = tbl.column("ts_ms").to_numpy()
                if not nondecreasing(ts, prev):
                    tbl = part(a).orderBy(*sort_cols).toArrow().combine_chunks()
                    stats["sorted_chunks"] += 1
                    ts = tbl.column("ts_ms").to_numpy()
                prev = int(ts[-1])
            yield from tbl.to_batches(max_chunksize=batch_rows)
    finally:
        if pool:
            pool.shutdown(wait=True, cancel_futures=True)


@dataclass
class FeedStats:
    rows: int = 0
    batches: int = 0
    seconds: float = 0.0  # wall time of the whole feed (Spark + pushes)
    spark_seconds: float = 0.0  # time spent waiting for Spark to hand over batches
    chunks: int = 0  # Spark jobs pulling data (time ranges)
    sorted_chunks: int = 0  # order="auto": chunks found out of order and re-pulled sorted
    slices: int = 0  # sliced mode: slice rows shipped (all streams)
    reader: str = ""  # sliced mode: who read the file for slicing (arrow | spark)
    # raw mode: per batch, wall-clock seconds since the feed started and the rows/s of the batch
    timeline: list = field(default_factory=list)

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0


def push_batches(
    deployment,
    batches,
    st: FeedStats,
    t0: float,
    *,
    keep: Sequence[str] | None = None,
    max_rows: int | None = None,
    skip_empty: bool = False,
) -> None:
    """Feed ``batches`` (Arrow tables) to ``deployment`` in order, counting into ``st``: the
    producer's time (Spark, or a reader) apart from the push, a rows/s timeline from ``t0``,
    at most ``max_rows`` rows, only the ``keep`` columns."""
    while True:
        t1 = time.perf_counter()
        b = next(batches, None)
        st.spark_seconds += time.perf_counter() - t1
        if b is None:
            break
        if skip_empty and not b.num_rows:
            continue
        if max_rows is not None and st.rows + b.num_rows > max_rows:
            b = b.slice(0, max_rows - st.rows)
        if keep is not None:
            b = b.select(keep)
        deployment.feed(None, b)
        st.rows += b.num_rows
        st.batches += 1
        now = time.perf_counter()
        st.timeline.append({"t_s": now - t0, "rows": b.num_rows / max(now - t1, 1e-9)})
        if max_rows is not None and st.rows >= max_rows:
            break


def feed_raw(
    deployment,
    spark,
    path: str,
    *,
    streams: Sequence[str] | None = None,
    batch_rows: int = 1 << 18,
    chunk_rows: int = 1_000_000,
    order: str = "auto",
    max_rows: int | None = None,
) -> FeedStats:
    """Push the tuples of ``path`` to ``deployment`` (mode ``raw``), all its streams at once.

    Only ``ts_ms`` and the deployment's stream columns leave Spark (``index`` orders ties and is
    dropped before feeding).  ``order``: see ``ordered_arrow_batches``.  ``max_rows`` stops
    early (for smoke runs).
    """
    streams = list(streams or deployment.streams)
    df = read_debs_df(spark, path, streams)
    st = FeedStats()
    t0 = time.perf_counter()
    cs: dict = {}
    it = ordered_arrow_batches(
        df, batch_rows=batch_rows, chunk_rows=chunk_rows, order=order, stats=cs, path=path
    )
    push_batches(deployment, it, st, t0, keep=["ts_ms"] + streams, max_rows=max_rows)
    st.seconds = time.perf_counter() - t0
    st.chunks, st.sorted_chunks = cs.get("chunks", 0), cs.get("sorted_chunks", 0)
    return st


# ----------------------------------------------------------------------------- sliced mode
def _slice_partition(batches, streams, classes, as_float):
    """``mapInArrow`` body (runs in Spark's Python workers): one partition's tuples -> one
    row per (stream, non-empty slice).  The whole partition is aggregated at once so only
    partition boundaries (not Arrow batch boundaries) split a slice."""
    import numpy as np
    import pyarrow as pa

    from executors.slice_input import slice_aggregates

    bs = [b for b in batches if b.num_rows]
    if not bs:
        return
    tbl = pa.Table.from_batches(bs)
    ts = tbl.column("ts_ms").combine_chunks().to_numpy(zero_copy_only=False)
    vt = pa.float64() if as_float else pa.int64()
    for i, s in enumerate(streams):
        col = tbl.column(s).combine_chunks()
        if col.null_count:
            raise ValueError(f"stream column {s!r} contains nulls")
        v = col.to_numpy(zero_copy_only=False)
        v = v.astype(np.float64 if as_float else np.int64, copy=False)
        o = slice_aggregates(ts, v, classes[s])
        k = o["count"].shape[0]
        arrs = [pa.array(np.full(k, i, np.int32), pa.int32())]
        arrs += [
            pa.array(o[c], pa.int64()) for c in ("slice_start", "slice_end", "ts_max", "count")
        ]
        arrs += [pa.array(o[c], vt) for c in ("sum", "min", "max", "sq")]
        names = ["sid", "slice_start", "slice_end", "ts_max", "count", "sum", "min", "max", "sq"]
        if as_float:
            arrs += [pa.array(o["sum_lo"], pa.float64()), pa.array(o["sq_lo"], pa.float64())]
            names += ["sum_lo", "sq_lo"]
        yield pa.RecordBatch.from_arrays(arrs, names=names)


def _order_slices(t: pa.Table) -> pa.Table:
    """``t`` sorted by ``(sid, slice_start, ts_max)`` (stable).  Each partition yields each
    stream's slices in order and partitions arrive in file order, so for a file in time order
    a stable grouping by stream (a radix sort on the stream index) already is that order:
    checked, with Arrow's full sort as the fallback (the same result, it being stable)."""
    t = t.combine_chunks()
    if t.num_rows < 2:
        return t
    sid = t.column("sid").to_numpy()
    o = np.argsort(sid.astype(np.uint16), kind="stable") if int(sid.max()) < 1 << 16 else None
    if o is not None:
        d, st, tm = sid[o], t.column("slice_start").to_numpy()[o], t.column("ts_max").to_numpy()[o]
        same = d[1:] == d[:-1]
        ok = (st[1:] > st[:-1]) | ((st[1:] == st[:-1]) & (tm[1:] >= tm[:-1]))
        if bool((~same | ok).all()):
            return t.take(pa.array(o))
    return t.sort_by(
        [("sid", "ascending"), ("slice_start", "ascending"), ("ts_max", "ascending")]
    ).combine_chunks()


def parquet_row_groups(path) -> list[tuple[int, int, int, int]] | None:
    """``[(row group, rows, min ts_ms, max ts_ms)]`` of a local Parquet file from its footer,
    or None (not a local file, no ``ts_ms`` statistics)."""
    try:
        import pyarrow.parquet as pq

        p = Path(str(path))
        if not p.is_file():
            return None
        md = pq.ParquetFile(p).metadata
        col = md.schema.names.index("ts_ms")
        out = []
        for i in range(md.num_row_groups):
            rg = md.row_group(i)
            if rg.num_rows == 0:
                continue
            st = rg.column(col).statistics
            if st is None or not st.has_min_max or st.null_count:
                return None
            out.append((i, int(rg.num_rows), int(st.min), int(st.max)))
        return out
    except Exception:
        return None


def _slice_pieces(pieces, path, streams, classes, as_float):
    """Spark task body of the ``arrow`` reader (runs in Spark's Python workers): each piece
    ``(row group, first row, end row, lo, hi)`` of the Parquet file read with pyarrow, its rows
    with ``lo <= ts_ms < hi`` (a time-range chunk; None: all) cut into slices
    (``_slice_partition``) and shipped as Arrow IPC bytes."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    f = None
    for rg, a, b, lo, hi in pieces:
        f = f or pq.ParquetFile(path)
        t = f.read_row_group(rg, columns=["ts_ms", *streams]).slice(a, b - a)
        if lo is not None:
            ts = t.column("ts_ms")
            t = t.filter(pc.and_(pc.greater_equal(ts, lo), pc.less(ts, hi)))
        sink = pa.BufferOutputStream()
        w = None
        for rb in _slice_partition(t.to_batches(), streams, classes, as_float):
            if w is None:
                w = pa.ipc.new_stream(sink, rb.schema)
            w.write_batch(rb)
        if w is not None:
            w.close()
            yield sink.getvalue().to_pybytes()


def _prefetched(pull, ranges: list[int], prefetch: bool, stats: dict) -> Iterator[pa.Table]:
    """``pull(a)`` for each chunk start, the next chunk's Spark job running (one thread) while
    the caller feeds the current one; empty tables are skipped, ``stats["chunks"]`` counted."""
    pool = ThreadPoolExecutor(1) if prefetch and len(ranges) > 1 else None
    try:
        nxt = pool.submit(pull, ranges[0]) if pool else None
        for i, a in enumerate(ranges):
            tbl = nxt.result() if pool else pull(a)
            if pool and i + 1 < len(ranges):
                nxt = pool.submit(pull, ranges[i + 1])
            stats["chunks"] += 1
            if tbl.num_rows:
                yield tbl
    finally:
        if pool:
            pool.shutdown(wait=True, cancel_futures=True)


def sliced_arrow_tables(
    df,
    streams: Sequence[str],
    classes: dict,
    *,
    chunk_rows: int = 1_000_000,
    prefetch: bool = True,
    stats: dict | None = None,
    path=None,
    reader: str = "auto",
) -> Iterator[pa.Table]:
    """Yield, per time-range chunk (one Spark job each, as ``ordered_arrow_batches``), the
    chunk's slices of every stream: columns ``sid`` (index into ``streams``) + the
    ``SLICE_COLUMNS`` (+ ``sum_lo``/``sq_lo`` when a stream is float), sorted by
    ``(sid, slice_start, ts_max)``.  A slice cut by a chunk or partition boundary appears as
    several rows (consecutive after the sort); consumers fold them together.  ``stats``
    receives ``chunks``, ``rows`` (tuples) and ``reader``.  ``path``: as in
    ``ordered_arrow_batches``.

    ``reader``: ``"spark"``: Spark's Parquet reader hands each partition's rows to
    ``mapInArrow`` (any source Spark reads); ``"arrow"``: Spark tasks read their piece of the
    local Parquet file ``path`` with pyarrow and slice it (``_slice_pieces``): the same
    time-range chunks, each a job whose tasks are the overlapping row groups cut into row
    ranges (at least ``defaultParallelism`` tasks, so a one-row-group file keeps every core
    busy); ``"auto"`` (default): ``arrow`` when ``path`` allows it, else ``spark``.  Why ``arrow``: with the
    ``spark`` reader every tuple crosses from the JVM to a Python worker (Arrow IPC) before it
    is sliced, which cost more than the slicing and the shipping of the slices together
    (1 M DEBS rows: ~0.6 s of the ~0.9 s Spark part at 10 queries; the ``arrow`` reader ~0.4 s,
    both cores busy even on a one-row-group file).  The slices are the same rows either way
    (up to where piece boundaries cut slices, which consumers fold together)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if reader not in ("auto", "arrow", "spark"):
        raise ValueError(f"reader must be 'auto', 'arrow' or 'spark', got {reader!r}")
    streams = list(streams)
    num = (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.BooleanType)
    as_float = not all(isinstance(df.schema[s].dataType, num) for s in streams)
    stats = stats if stats is not None else {}
    groups = None
    if reader != "spark" and path is not None:
        groups = parquet_row_groups(path)
    if reader == "arrow" and groups is None:
        raise ValueError(
            f"reader 'arrow' needs a local Parquet file with ts_ms statistics; "
            f"{path!r} is not one (use reader='spark')"
        )
    if groups is not None:
        yield from _arrow_sliced_tables(
            df, str(path), groups, streams, classes, as_float, chunk_rows, prefetch, stats
        )
        return
    stats["reader"] = "spark"
    vt = T.DoubleType() if as_float else T.LongType()
    fields = [T.StructField("sid", T.IntegerType(), False)]
    fields += [
        T.StructField(c, T.LongType(), False)
        for c in ("slice_start", "slice_end", "ts_max", "count")
    ]
    fields += [T.StructField(c, vt, False) for c in ("sum", "min", "max", "sq")]
    if as_float:
        fields += [T.StructField(c, T.DoubleType(), False) for c in ("sum_lo", "sq_lo")]
    schema = T.StructType(fields)
    fn = functools.partial(
        _slice_partition,
        streams=streams,
        classes={s: [tuple(c) for c in classes[s]] for s in streams},
        as_float=as_float,
    )
    df = df.select("ts_ms", *streams)
    n, k, step, ranges = _time_chunks(df, chunk_rows, path)
    stats.setdefault("chunks", 0)
    stats["rows"] = n
    if not n:
        return

    def pull(a) -> pa.Table:
        d = df if k == 1 else df.where((F.col("ts_ms") >= a) & (F.col("ts_ms") < a + step))
        return _order_slices(d.mapInArrow(fn, schema).toArrow())

    yield from _prefetched(pull, ranges, prefetch, stats)


def _arrow_sliced_tables(
    df, path, groups, streams, classes, as_float, chunk_rows, prefetch, stats
) -> Iterator[pa.Table]:
    """``sliced_arrow_tables`` with the ``arrow`` reader: per time-range chunk one Spark job
    (an RDD of pieces, one task each), the next job prefetched while the current slices are
    fed."""
    sc = df.sparkSession.sparkContext
    fn = functools.partial(
        _slice_pieces,
        path=path,
        streams=streams,
        classes={s: [tuple(c) for c in classes[s]] for s in streams},
        as_float=as_float,
    )
    n, k, step, ranges = _time_chunks(df, chunk_rows, path)
    stats.setdefault("chunks", 0)
    stats["rows"] = n
    stats["reader"] = "arrow"
    if not n:
        return
    par = max(1, int(sc.defaultParallelism))

    def pieces(a: int) -> list:
        lo, hi = (None, None) if k == 1 else (a, a + step)
        over = [g for g in groups if k == 1 or (g[3] >= lo and g[2] < hi)]
        split = max(1, -(-par // max(1, len(over))))
        out = []
        for rg, rows, _, _ in over:
            size = -(-rows // split)
            out += [(rg, x, min(rows, x + size), lo, hi) for x in range(0, rows, size)]
        return out

    def pull(a) -> pa.Table:
        job = pieces(a)
        data = sc.parallelize(job, len(job)).mapPartitions(fn).collect() if job else []
        tables = [pa.ipc.open_stream(d).read_all() for d in data]
        return _order_slices(pa.concat_tables(tables)) if tables else pa.table({})

    yield from _prefetched(pull, ranges, prefetch, stats)


def feed_sliced(
    deployment,
    spark,
    path: str,
    *,
    streams: Sequence[str] | None = None,
    batch_rows: int = 1 << 18,
    chunk_rows: int = 1_000_000,
    order: str = "auto",
    reader: str = "auto",
) -> FeedStats:
    """Push the slices of ``path`` to ``deployment`` (built with ``mode="sliced"``).

    Per stream the slice boundaries are ``deployment.edge_classes(stream)``, the union of the
    edges of every tree on that stream; each stream's slices go only to the nodes hosting it
    (one ``feed`` call per stream and batch).  ``order``: ``"auto"``/``"sort"`` (the same
    thing here: slices are ordered by time on the driver after aggregation); ``"file"`` is
    refused (see the module docstring).  ``reader``: who reads the file for the slicing
    tasks (``sliced_arrow_tables``).  ``FeedStats.rows`` counts tuples, ``slices`` slice rows.
    """
    if order == "file":
        raise ValueError(
            "sliced mode aggregates the data as if sorted by time; replaying a "
            "file's disorder (order='file', late tuples) needs mode 'raw'"
        )
    if order not in ("auto", "sort"):
        raise ValueError(f"order must be 'auto' or 'sort' in sliced mode, got {order!r}")
    if getattr(deployment, "mode", "raw") != "sliced":
        raise ValueError("feed_sliced needs a Deployment(..., mode='sliced')")
    streams = list(streams or deployment.streams)
    classes = {s: deployment.edge_classes(s) for s in streams}
    df = read_debs_df(spark, path, streams)
    st = FeedStats()
    t0 = time.perf_counter()
    cs: dict = {}
    it = sliced_arrow_tables(
        df, streams, classes, chunk_rows=chunk_rows, stats=cs, path=path, reader=reader
    )
    keep = None
    while True:
        t1 = time.perf_counter()
        tbl = next(it, None)
        st.spark_seconds += time.perf_counter() - t1
        if tbl is None:
            break
        if keep is None:
            keep = [c for c in tbl.schema.names if c != "sid"]
        sid = tbl.column("sid").to_numpy()
        bounds = np.searchsorted(sid, np.arange(len(streams) + 1), side="left")
        for i, s in enumerate(streams):
            part = tbl.slice(int(bounds[i]), int(bounds[i + 1] - bounds[i])).select(keep)
            for b in part.to_batches(max_chunksize=batch_rows):
                deployment.feed(s, b)
                st.slices += b.num_rows
                st.batches += 1
    st.rows = cs.get("rows", 0)
    st.seconds = time.perf_counter() - t0
    st.chunks = cs.get("chunks", 0)
    st.reader = cs.get("reader", "")
    return st
