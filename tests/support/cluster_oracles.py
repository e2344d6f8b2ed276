"""Answers computed without our executors, and the comparison of two answer tables.

Spark SQL's ``window()`` is a real peer for time windows (it assigns the windows itself); count
windows, which Spark has no notion of, come from a numpy brute force over stream positions.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from placement.queries import Query
from support.cluster_plans import STREAMS


def spark_oracle(spark, path, queries) -> pa.Table:
    """Every time query answered by Spark SQL's window(), as one job, values as double.

    Each query contributes ``(query_id, window(t, r ms, s ms), value)`` rows (Spark assigns
    the windows); one ``groupBy(query_id, w)`` then computes the aggregates and each query
    keeps its own (one shuffle in all, instead of one per query).
    """
    from pyspark.sql import functions as F

    df = (
        spark.read.parquet(str(path))
        .select("ts_ms", *STREAMS)
        .withColumn("t", F.timestamp_millis("ts_ms"))
    )
    parts = []
    for q in queries:
        if q.kind != "time":
            continue
        w = F.window("t", f"{q.range} milliseconds", f"{q.slide} milliseconds")
        parts.append(
            df.select(
                F.lit(q.id).alias("query_id"),
                F.lit(q.aggregate).alias("agg"),
                w.alias("w"),
                F.col(q.stream).alias("v"),
            )
        )
    u = parts[0]
    for p in parts[1:]:
        u = u.unionByName(p)
    agg = F.col("agg")
    out = (
        u.groupBy("query_id", "agg", "w")
        .agg(
            F.sum("v").alias("sum"),
            F.count("v").alias("count"),
            F.avg("v").alias("avg"),
            F.min("v").alias("min"),
            F.max("v").alias("max"),
        )
        .select(
            "query_id",
            F.unix_millis("w.start").alias("window_start"),
            F.unix_millis("w.end").alias("window_end"),
            F.when(agg == "sum", F.col("sum"))
            .when(agg == "count", F.col("count"))
            .when(agg == "avg", F.col("avg"))
            .when(agg == "min", F.col("min"))
            .otherwise(F.col("max"))
            .cast("double")
            .alias("value"),
        )
    )
    return out.toArrow().sort_by([("query_id", "ascending"), ("window_start", "ascending")])


def count_oracle(values: np.ndarray, q: Query) -> list[tuple]:
    """Count windows over positions: window k covers positions [k*s, k*s + r)."""
    n = len(values)
    out = []
    k = -((q.range - 1) // q.slide)  # windows starting before position 0 hold tuples too
    while k * q.slide < n:
        a, b = max(k * q.slide, 0), min(k * q.slide + q.range, n)
        v = values[a:b]
        val = {
            "sum": v.sum(),
            "max": v.max(),
            "min": v.min(),
            "count": len(v),
            "avg": v.sum() / len(v),
        }[q.aggregate]
        out.append((q.id, k * q.slide, k * q.slide + q.range, float(val)))
        k += 1
    return out


def assert_answers_equal(ours: pa.Table, ref: pa.Table, avg_ids: set[str]):
    assert ours.num_rows == ref.num_rows, (ours.num_rows, ref.num_rows)
    for c in ("query_id", "window_start", "window_end"):
        a, b = ours.column(c).to_pylist(), ref.column(c).to_pylist()
        if a != b:
            i = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
            raise AssertionError(
                f"{c} differs at row {i}: ours {ours.slice(i, 1).to_pylist()}"
                f" ref {ref.slice(i, 1).to_pylist()}"
            )
    qid = np.array(ours.column("query_id").to_pylist(), dtype=object)
    va = ours.column("value").to_numpy().astype(np.float64)
    vb = ref.column("value").to_numpy().astype(np.float64)
    is_avg = np.isin(qid, list(avg_ids))
    np.testing.assert_array_equal(va[~is_avg], vb[~is_avg])
    np.testing.assert_allclose(va[is_avg], vb[is_avg], rtol=1e-9, atol=0)


def file_order_oracle(plan: dict, path, lateness: int) -> tuple[pa.Table, list[tuple]]:
    """The brute force (``executors.oracle.brute_force``) of every tree of ``plan`` over its
    stream in the order of the rows in the Parquet file ``path``, with the allowed lateness:
    the answers as a run writes them (sorted by query and window start, values as double) and
    the late tuples as sorted ``(tree_id, ts_ms, value)``."""
    import pyarrow.parquet as pq

    from executors.oracle import brute_force

    data = pq.read_table(path)
    ts = data.column("ts_ms").to_numpy()
    qmap = {q["id"]: q for q in plan["queries"]}
    rows, late = [], []
    for node in plan["nodes"]:
        for tree in node["trees"]:
            v = data.column(tree["stream"]).to_numpy()
            got, lt = brute_force([qmap[q] for q in tree["queries"]], ts, v, lateness)
            rows += got
            late += [(tree["id"], int(ts[i]), float(v[i])) for i in lt]
    rows.sort(key=lambda r: (r[0], r[1]))
    cols = list(zip(*rows))
    table = pa.table(
        {
            "query_id": pa.array(cols[0], pa.string()),
            "window_start": pa.array(cols[1], pa.int64()),
            "window_end": pa.array(cols[2], pa.int64()),
            "value": pa.array(np.asarray(cols[3], dtype=np.float64)),
        }
    )
    return table, sorted(late)


def assert_answers_close(got: pa.Table, want: pa.Table) -> None:
    """A run's answers (sorted by query and window) against an oracle's: the same windows, and
    values equal to 1e-12 relative (float sums in another order)."""
    assert got.num_rows == want.num_rows > 0
    for c in ("query_id", "window_start", "window_end"):
        assert got.column(c).to_pylist() == want.column(c).to_pylist(), c
    np.testing.assert_allclose(
        got.column("value").to_numpy().astype(np.float64),
        want.column("value").to_numpy(),
        rtol=1e-12,
    )
