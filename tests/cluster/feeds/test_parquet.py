"""The driver route's Parquet feed: the schema Spark is given from the file's footer, and the
rows it hands to a deployment, each exactly once and in order.

Oracles: Spark's own schema inference (the footer's schema must be exactly it), and pyarrow
reading the file (the brute force for which rows the feed must hand over, in which order).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sim.debs import generate_debs

STREAMS = ["mf01", "mf02", "mf03"]


class Recorder:
    """A stand-in deployment that keeps what it is fed (the feed's one interface: ``streams``
    and ``feed``), so the feed is checked without Ray."""

    def __init__(self, streams):
        self.streams = list(streams)
        self.batches: list[pa.RecordBatch | pa.Table] = []

    def feed(self, stream, batch) -> int:
        assert stream is None
        self.batches.append(batch)
        return len(self.batches)

    def table(self) -> pa.Table:
        return pa.concat_tables(
            [b if isinstance(b, pa.Table) else pa.Table.from_batches([b]) for b in self.batches]
        )


@pytest.fixture(scope="module")
def debs_files(tmp_path_factory):
    """A DEBS file as one row group and the same rows as five, plus a file with one column of
    every plain type the footer's schema maps."""
    d = tmp_path_factory.mktemp("parquet_feed")
    one = d / "one.parquet"
    generate_debs(one, duration_s=30, rate_hz=100, seed=3)
    t = pq.read_table(one)
    five = d / "five.parquet"
    pq.write_table(t, five, row_group_size=-(-t.num_rows // 5))
    mixed = d / "mixed.parquet"
    pq.write_table(
        pa.table(
            {
                "ts_ms": pa.array([1, 2, 3], pa.int64()),
                "a": pa.array([1, 2, None], pa.int32()),
                "b": pa.array([0.5, 1.5, 2.5], pa.float32()),
                "c": pa.array([1.0, None, 3.0], pa.float64()),
                "d": pa.array([True, False, True]),
                "e": pa.array(["x", "y", None]),
                "f": pa.array([1, 2, 3], pa.int8()),
            }
        ),
        mixed,
    )
    return {"one": one, "five": five, "mixed": mixed, "rows": t.num_rows}


def test_footer_schema_declines_what_it_cannot_map_exactly(tmp_path):
    from cluster.feeds.parquet import footer_schema

    for name, arr in {
        "uint": pa.array([1, 2], pa.uint32()),
        "timestamp": pa.array([1, 2], pa.timestamp("ms")),
        "large_string": pa.array(["a", "b"], pa.large_string()),
    }.items():
        p = tmp_path / f"{name}.parquet"
        pq.write_table(pa.table({"ts_ms": pa.array([1, 2], pa.int64()), "x": arr}), p)
        assert footer_schema(p) is None, name
    assert footer_schema(tmp_path) is None  # a directory: Spark infers
    assert footer_schema(tmp_path / "missing.parquet") is None
    (tmp_path / "junk.parquet").write_bytes(b"not parquet")
    assert footer_schema(tmp_path / "junk.parquet") is None  # Spark's read says why


@pytest.mark.cluster
def test_footer_schema_is_sparks_inferred_schema(debs_files, spark):
    from cluster.feeds.parquet import footer_schema, read_debs_df

    for key in ("one", "mixed"):
        path = str(debs_files[key])
        given = footer_schema(path)
        assert given is not None
        assert given == spark.read.parquet(path).schema, key
        # and the rows read under it are the file's, value for value (nulls included)
        cols = pq.read_schema(path).names
        got = read_debs_df(spark, path, cols[1:]).toArrow()
        want = pq.read_table(path, columns=got.column_names)
        assert got.schema.names == want.schema.names
        for c in got.column_names:
            assert got.column(c).to_pylist() == want.column(c).to_pylist(), (key, c)


@pytest.mark.cluster
@pytest.mark.parametrize(
    "key, chunk_rows, batch_rows, early",
    [("one", 1_000_000, 700, False), ("five", 900, 400, False), ("five", 900, 400, True)],
)
def test_feed_raw_hands_every_row_once_in_file_order(
    debs_files, spark, key, chunk_rows, batch_rows, early
):
    """One Spark job, or several time-range jobs over five row groups (each pruned to its
    own): the rows fed are the file's rows (a file in time order), each once, in order; the
    same when the file was opened and its first chunk pulled before the feed (``open_raw``,
    as a run does during its start-up)."""
    from cluster.feeds.parquet import feed_raw, open_raw

    dep = Recorder(STREAMS)
    path = str(debs_files[key])
    opened = None
    if early:
        opened = open_raw(spark, path, STREAMS, batch_rows=batch_rows, chunk_rows=chunk_rows)
    st = feed_raw(dep, spark, path, batch_rows=batch_rows, chunk_rows=chunk_rows, opened=opened)
    got = dep.table()
    want = pq.read_table(debs_files[key], columns=["ts_ms", *STREAMS])
    assert got.num_rows == want.num_rows == debs_files["rows"] == st.rows
    for c in want.column_names:
        assert np.array_equal(got.column(c).to_numpy(), want.column(c).to_numpy()), c
    assert max(b.num_rows for b in dep.batches) <= batch_rows
    assert st.chunks == (1 if chunk_rows >= debs_files["rows"] else -(-st.rows // chunk_rows))
    if early:  # resolved and first chunk pulled before: outside the feed's clock
        assert 0 < st.resolve_seconds < st.early_seconds
    else:  # the feed's clock includes Spark resolving the file
        assert 0 < st.resolve_seconds <= st.seconds and st.early_seconds == 0
