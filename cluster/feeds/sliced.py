"""Mode ``sliced``: Spark cuts each stream into slices at the edges of the trees on it and only
the slices (count/sum/min/max/sum of squares) travel to the driver and the actors.

Why its own module: slicing happens inside Spark's Python workers (``mapInArrow``, or tasks reading
their piece of the Parquet file with pyarrow: the ``reader`` choice) and the driver reorders and
routes slices per stream; none of it is shared with raw mode's ordered tuple batches
(``cluster.feeds.parquet``) beyond the time chunks (``time_chunks``).  The reasoning behind
``mapInArrow`` over ``groupBy`` and behind the ``arrow`` reader is in ``cluster.feeds.parquet``'s
module docstring.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa

from cluster.feeds.parquet import FeedStats, read_debs_df
from cluster.feeds.time_chunks import parquet_row_groups, prefetched, time_chunks
from cluster.node.slice_rows import slice_partition
from executors.slice_input import FLOAT_LO_COLUMNS, SLICE_COLUMNS


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


def _slice_pieces(pieces, path, streams, classes, as_float):
    """Spark task body of the ``arrow`` reader (runs in Spark's Python workers): each piece
    ``(row group, first row, end row, lo, hi)`` of the Parquet file read with pyarrow, its rows
    with ``lo <= ts_ms < hi`` (a time-range chunk; None: all) cut into slices
    (``slice_partition``) and shipped as Arrow IPC bytes."""
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
        for rb in slice_partition(t.to_batches(), streams, classes, as_float):
            if w is None:
                w = pa.ipc.new_stream(sink, rb.schema)
            w.write_batch(rb)
        if w is not None:
            w.close()
            yield sink.getvalue().to_pybytes()


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
    busy); ``"auto"`` (default): ``arrow`` when ``path`` allows it, else ``spark``.  Why
    ``arrow``: with the ``spark`` reader every tuple crosses from the JVM to a Python worker (Arrow IPC) before it
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
        slice_pieces = functools.partial(
            _slice_pieces,
            path=str(path),
            streams=streams,
            classes={s: [tuple(c) for c in classes[s]] for s in streams},
            as_float=as_float,
        )
        yield from _arrow_sliced_tables(
            df, str(path), groups, slice_pieces, chunk_rows, prefetch, stats
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
        slice_partition,
        streams=streams,
        classes={s: [tuple(c) for c in classes[s]] for s in streams},
        as_float=as_float,
    )
    df = df.select("ts_ms", *streams)
    n, k, step, ranges = time_chunks(df, chunk_rows, path)
    stats.setdefault("chunks", 0)
    stats["rows"] = n
    if not n:
        return

    def pull(a) -> pa.Table:
        d = df if k == 1 else df.where((F.col("ts_ms") >= a) & (F.col("ts_ms") < a + step))
        return _order_slices(d.mapInArrow(fn, schema).toArrow())

    yield from prefetched(pull, ranges, prefetch, stats)


def _arrow_sliced_tables(
    df, path, groups, slice_pieces, chunk_rows, prefetch, stats
) -> Iterator[pa.Table]:
    """``sliced_arrow_tables`` with the ``arrow`` reader: per time-range chunk one Spark job
    (an RDD of pieces, one task each, running ``slice_pieces``: ``_slice_pieces`` bound to
    the file, streams, edges and value type), the next job prefetched while the current
    slices are fed."""
    sc = df.sparkSession.sparkContext
    fn = slice_pieces
    n, k, step, ranges = time_chunks(df, chunk_rows, path)
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

    yield from prefetched(pull, ranges, prefetch, stats)


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


def feed_file_slices(deployment, table: pa.Table, batch_rows: int = 1 << 18) -> int:
    """Sliced mode of a watched directory (``weaveplace serve``): one file's rows (``ts_ms`` +
    stream columns, in time order) cut per stream by ``deployment.slice_plan(stream)`` (the
    trees' edges and change points, ``cluster.node.slice_churn``) and fed as slice batches.

    On the driver with numpy, not in Spark: a watched directory's file holds a few thousand
    rows, which numpy slices in well under a millisecond, while a Spark job per file would cost
    tens of milliseconds of scheduling and move the same rows to a Python worker and back.
    Returns the slice rows fed."""
    from cluster.node.slice_churn import slice_file
    from executors.edges import INF, NEG_INF

    def plan(s: str) -> list:
        # a deployment whose trees never change (``weaveplace run`` over a directory): the
        # union of its trees' edges, as ``feed_sliced`` cuts
        if hasattr(deployment, "slice_plan"):
            return deployment.slice_plan(s)
        return [(NEG_INF, INF, deployment.edge_classes(s))]

    ts = table.column("ts_ms").to_numpy()
    fed = 0
    for s in deployment.streams:
        if s not in table.schema.names:
            continue
        col = table.column(s)
        if col.null_count:
            raise ValueError(f"stream column {s!r} contains nulls")
        cols = slice_file(ts, col.to_numpy(), plan(s))
        names = [c for c in (*SLICE_COLUMNS, *FLOAT_LO_COLUMNS) if c in cols]
        batch = pa.RecordBatch.from_arrays([pa.array(cols[c]) for c in names], names=names)
        for b in pa.Table.from_batches([batch]).to_batches(max_chunksize=batch_rows):
            deployment.feed(s, b)
            fed += b.num_rows
    return fed
