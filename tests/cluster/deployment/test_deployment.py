"""A Deployment fed by Spark gives the answers of independent oracles.

The oracle is a real peer: Spark SQL's ``groupBy(window(t, "<r> milliseconds", "<s>
milliseconds"))`` on the same Parquet file computes every time-window answer independently of
our slicing and final aggregation; count windows (which Spark has no notion of) are checked
against a numpy brute force over stream positions.  The live run is the shared fixture of
tests/cluster/conftest.py; one Ray and one Spark for the whole session (tests/conftest.py).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.cluster_oracles import assert_answers_equal, count_oracle, spark_oracle
from support.cluster_plans import STREAMS

pytestmark = [pytest.mark.cluster, pytest.mark.scenario]  # a ~40 s live run: make test-scenarios


def test_time_windows_equal_spark_sql(workload, live_result, spark):
    qs = [q for q in workload["queries"] if q.kind == "time"]
    assert any(q.range % q.slide for q in qs) and any(q.range == q.slide for q in qs)
    ref = spark_oracle(spark, workload["path"], qs)
    ours = live_result.answers.filter(
        pa.compute.is_in(
            live_result.answers.column("query_id"), value_set=pa.array([q.id for q in qs])
        )
    )
    assert ref.num_rows > 10_000
    assert set(ours.column("query_id").to_pylist()) == {q.id for q in qs}
    assert_answers_equal(ours, ref, {q.id for q in qs if q.aggregate == "avg"})


def test_count_windows_equal_numpy(workload, live_result):
    t = pq.read_table(workload["path"], columns=["ts_ms", "index", *STREAMS]).sort_by(
        [("ts_ms", "ascending"), ("index", "ascending")]
    )
    qs = [q for q in workload["queries"] if q.kind == "count"]
    rows = sorted(r for q in qs for r in count_oracle(t.column(q.stream).to_numpy(), q))
    ref = pa.table(
        {
            k: list(v)
            for k, v in zip(["query_id", "window_start", "window_end", "value"], zip(*rows))
        }
    )
    ours = live_result.answers.filter(
        pa.compute.is_in(
            live_result.answers.column("query_id"), value_set=pa.array([q.id for q in qs])
        )
    )
    assert_answers_equal(ours, ref, {q.id for q in qs if q.aggregate == "avg"})


def test_metrics_and_late(workload, live_result):
    m = live_result.metrics
    assert m["rows_fed"] == workload["rows"]
    assert sum(n["answers"] for n in m["nodes"].values()) == live_result.answers.num_rows
    for n in m["nodes"].values():
        assert n["tuples"] == workload["rows"] and n["late_tuples"] == 0
        assert n["busy_s"] > 0 and n["queue_depth"] == 0 and 1 <= n["max_queue_depth"] <= 3
    assert live_result.late.num_rows == 0  # DEBS timestamps are non-decreasing
