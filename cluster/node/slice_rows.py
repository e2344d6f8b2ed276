"""Tuples -> slice rows: the input a node in sliced mode ingests, one row per (stream,
non-empty slice) with count, sum, min, max and sum of squares.

Why in ``node``: the slice-row layout is what a sliced node accepts, and two sides make it:
Spark's Python workers (``cluster.feeds.sliced``, the executor route's tasks) and a node that
re-slices a logged piece of a file during a replay (``piece_order``). Pure Arrow and numpy, so
it runs in any of those processes.
"""

from __future__ import annotations


def slice_partition(batches, streams, classes, as_float):
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
