"""Read DEBS Parquet with Spark and push ordered Arrow batches to a ``Deployment`` (mode ``raw``).

Why the driver path: docs/DESIGN.md s. 8 measured ``DataFrame.toArrow()`` at ~650 K rows/s to the
driver (Row iteration ~70 K rows/s) and driver -> actor at ~370 K rows/s warm, faster than Spark
workers pushing into Ray from ``mapInArrow`` (260 K rows/s) and with no Ray client inside Spark
workers.  So the driver pulls Arrow and feeds (the default; ``cluster.feeds.executors`` is the route
with the driver out of the data path, for clusters where the driver's core or NIC is the limit:
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

Where: raw mode (the session, the ordered batches, ``feed_raw``) is this module; sliced mode is
``cluster.feeds.sliced``; the file's time axis (spans, chunks, prefetch) is ``time_chunks``.
"""

from __future__ import annotations

import itertools
import os
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pyarrow as pa

from cluster.feeds.driver_jvm import driver_conf
from cluster.feeds.file_order import file_order_batches, first_disorder, is_local_file
from cluster.feeds.time_chunks import nondecreasing, time_chunks


def driver_address() -> str:
    """Where the Spark driver listens: ``SPARK_LOCAL_IP`` when set (a standalone master's
    executors on other hosts must reach the driver there), else loopback (a local session
    exposes nothing)."""
    return os.environ.get("SPARK_LOCAL_IP") or "127.0.0.1"


def spark_session(
    master: str = "local[*]",
    app_name: str = "weaveplace",
    conf: dict[str, str] | None = None,
    log_level: str = "ERROR",
):
    """A quiet Spark session (UI off, UTC, Arrow on; the driver on ``driver_address()``:
    loopback unless ``SPARK_LOCAL_IP`` names the host's address; the driver JVM started from
    ``weaveplace warmup``'s class archive, C1 only: ``cluster.feeds.driver_jvm``).

    ``PYSPARK_PYTHON`` is set to this interpreter *before* the session is built, otherwise
    Python workers start the system Python without pyarrow.  ``getOrCreate`` reuses a live
    session (a second session in one process, after ``stop``, starts in 0.25 s).
    """
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    host = driver_address()

    b = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.host", host)
        .config("spark.driver.bindAddress", host)
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", "2g")
    )
    for k, v in driver_conf(conf).items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark


def footer_schema(path):
    """The Spark schema of a local Parquet file, read from its footer by pyarrow, or None (not
    a local file, or a column type other than a signed integer, float, double, boolean or
    string, whose mapping Spark's own inference might choose differently).

    Why: Spark infers a Parquet file's schema on every read, 0.05-0.1 s a run here (measured:
    inferred 0.06-0.17 s, given 0.02-0.05 s), half the trees' time of 1000 queries over 100 K
    rows; pyarrow reads the footer in about a millisecond.  Every field nullable, as Spark
    makes an inferred one."""
    if not is_local_file(path):
        return None
    try:
        import pyarrow.parquet as pq
        from pyspark.sql.pandas.types import from_arrow_schema
        from pyspark.sql.types import StructField, StructType

        schema = pq.read_schema(str(path))
    except Exception:  # unreadable: Spark's read will say why
        return None
    plain = (
        pa.types.is_signed_integer,
        pa.types.is_float32,
        pa.types.is_float64,
        pa.types.is_boolean,
        pa.types.is_string,
    )
    if not all(any(ok(f.type) for ok in plain) for f in schema):
        return None
    return StructType(
        [StructField(f.name, f.dataType, True) for f in from_arrow_schema(schema).fields]
    )


def read_debs_df(spark, path: str, streams: Sequence[str] | None = None):
    """The DEBS Parquet as a DataFrame with ``ts_ms``, ``index`` (if present) and ``streams``;
    a local file's schema comes from its footer (``footer_schema``), not from Spark."""
    schema = footer_schema(path)
    reader = spark.read if schema is None else spark.read.schema(schema)
    df = reader.parquet(str(path))
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
    * ``"file"``: file order (``data.order: file``): out-of-order tuples reach the trees and
      are subject to the allowed lateness, which is what a replay of a recorded stream should
      do.  For a local file (``path``) its ``ts_ms`` column is checked first
      (``cluster.feeds.file_order``): in time order, the file is pulled as ``"auto"`` pulls it
      (the same rows in the same order, no chunk re-sorted); out of order, it is streamed in
      file order with pyarrow, a batch at a time.  Any other source is pulled in one piece
      (time-range chunking would reorder it), so driver memory holds it whole.

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
        if not is_local_file(path):
            yield from df.toArrow().combine_chunks().to_batches(max_chunksize=batch_rows)
            return
        if first_disorder(path) is not None:
            yield from file_order_batches(path, df.columns, batch_rows)
            return
        order = "auto"  # file order is time order: the time-range pulls give it, chunked
    n, k, step, ranges = time_chunks(df, chunk_rows, path)
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
    resolve_seconds: float = 0.0  # raw mode: Spark resolving the file before its first job
    # raw mode, the file opened during the start-up: its resolution and first chunk, not in
    # ``seconds`` (they overlapped Ray's and the actors' start)
    early_seconds: float = 0.0
    chunks: int = 0  # Spark jobs pulling data (time ranges)
    sorted_chunks: int = 0  # order="auto": chunks found out of order and re-pulled sorted
    slices: int = 0  # sliced mode: slice rows shipped (all streams)
    reader: str = ""  # sliced mode: who read the file for slicing (arrow | spark)
    # raw mode: per batch, wall-clock seconds since the feed started and the rows/s of the batch
    timeline: list = field(default_factory=list)
    # the executor route: what the Spark tasks pushed (bytes, pieces, segments, attempts, ...)
    pushed: dict = field(default_factory=dict)

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


@dataclass
class OpenedInput:
    """A DEBS Parquet file opened for a raw feed, its first batch already pulled
    (``open_raw``): the rest comes from ``batches`` as the feed goes."""

    batches: Iterator[pa.RecordBatch]
    resolve_seconds: float  # Spark resolving the file
    first_seconds: float  # Spark's first chunk, up to the first batch
    chunk_stats: dict  # ``ordered_arrow_batches``' counts, filled as the feed goes


def open_raw(
    spark,
    path: str,
    streams: Sequence[str],
    *,
    batch_rows: int = 1 << 18,
    chunk_rows: int = 1_000_000,
    order: str = "auto",
) -> OpenedInput:
    """Resolve ``path`` with Spark and pull its first chunk (``ordered_arrow_batches``).

    Why apart from ``feed_raw``: the file's first read (resolving it, the first chunk's job:
    seconds on a loaded machine) needs only the session, so a run does it while Ray and the
    actors start (``cluster.runs.startup.started_run``'s ``prepare``), and the first row is
    fed as soon as everything is up."""
    t0 = time.perf_counter()
    df = read_debs_df(spark, path, streams)
    resolve = time.perf_counter() - t0
    cs: dict = {}
    it = ordered_arrow_batches(
        df, batch_rows=batch_rows, chunk_rows=chunk_rows, order=order, stats=cs, path=path
    )
    first = next(it, None)
    batches = it if first is None else itertools.chain([first], it)
    return OpenedInput(batches, resolve, time.perf_counter() - t0 - resolve, cs)


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
    opened: OpenedInput | None = None,
) -> FeedStats:
    """Push the tuples of ``path`` to ``deployment`` (mode ``raw``), all its streams at once.

    Only ``ts_ms`` and the deployment's stream columns leave Spark (``index`` orders ties and is
    dropped before feeding).  ``order``: see ``ordered_arrow_batches``.  ``max_rows`` stops
    early (for smoke runs).  ``opened``: the file already opened by ``open_raw`` (during the
    start-up; its streams must be the deployment's); without it ``seconds`` counts from before
    Spark resolves the file (``resolve_seconds``), so the feed's wall time is all the input
    costs, and with it from the feed's start (``early_seconds``: what was done before,
    overlapped with the start-up).
    """
    streams = list(streams or deployment.streams)
    st = FeedStats()
    t0 = time.perf_counter()
    if opened is None:
        opened = open_raw(
            spark, path, streams, batch_rows=batch_rows, chunk_rows=chunk_rows, order=order
        )
        st.spark_seconds = opened.first_seconds
    else:
        st.early_seconds = opened.resolve_seconds + opened.first_seconds
    st.resolve_seconds = opened.resolve_seconds
    push_batches(deployment, opened.batches, st, t0, keep=["ts_ms"] + streams, max_rows=max_rows)
    st.seconds = time.perf_counter() - t0
    cs = opened.chunk_stats
    st.chunks, st.sorted_chunks = cs.get("chunks", 0), cs.get("sorted_chunks", 0)
    return st
