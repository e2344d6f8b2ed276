"""A churn node's answers (plain core, no Ray) when a tree's generations answer different value
types (an int generation, then one with a float aggregate): every query's values keep their own
type through grouping and merging, equal to the section 9 brute force
(``executors.churn_oracle.registered_answers``)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from helpers import assert_same

from cluster.node.churn import ChurnNodeCore
from executors.churn_oracle import registered_answers, registrations


def rows(table: pa.Table) -> list[tuple]:
    return [
        (r["query_id"], r["window_start"], r["window_end"], r["value"]) for r in table.to_pylist()
    ]


def test_count_then_a_float_sum_keeps_the_counts_exact():
    """The reported case: a count query, a float ``avg`` added at T=1 to an int stream; the
    count window ``[1,2)`` once came out as the bits of 1.0 read as an int64."""
    node = ChurnNodeCore("n", [{"id": "t0", "stream": "s", "queries": [
        dict(id="c", aggregate="count", range=1, slide=1)]}])  # fmt: skip
    ts, v = np.arange(4, dtype=np.int64), np.array([5, 6, 7, 8], dtype=np.int64)
    node.ingest(None, pa.table({"ts_ms": ts[:1], "s": v[:1]}), 1)
    node.change_tree("t0", 1, [dict(id="f", aggregate="avg", range=2, slide=1)], [])
    for i in range(1, 4):  # one tuple per batch: some batches hold only int answers
        node.ingest(None, pa.table({"ts_ms": ts[i : i + 1], "s": v[i : i + 1]}), i + 1)
    node.flush()
    got = rows(node.drain())
    initial = [dict(id="c", aggregate="count", range=1, slide=1)]
    schedule = [("change", 1, [dict(id="f", aggregate="avg", range=2, slide=1)], [])]
    want = registered_answers(registrations(initial, schedule), ts, v)
    assert [g[:3] for g in got] == [w[:3] for w in want]
    assert [g[3] for g in got if g[0] == "c"] == [1, 1, 1, 1]
    assert_same(got, want, 1.0)
