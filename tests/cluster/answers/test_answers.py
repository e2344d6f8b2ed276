"""How answers leave the nodes: ``NodeCore.drain_blocks`` (per-query blocks) and the driver's
``merge_blocks`` equal the plain way (every tree's ``process`` tables concatenated and sorted
by query id and window start), row for row, including int/float value unification, answers
split by checkpoints, the threaded column fill, and the full-sort fallback.  No Ray needed."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import cluster.answers.blocks as answer_blocks
from cluster.answers.blocks import AnswerBlocks, concat_answers, merge_blocks
from cluster.feeds.time_chunks import parquet_row_groups, parquet_span
from cluster.node.core import NodeCore
from executors import ExecutionTree

KEY = [("query_id", "ascending"), ("window_start", "ascending")]
TREES = [
    {
        "id": "t0",
        "stream": "mf01",
        "queries": [
            {"id": "q10", "aggregate": "sum", "range": 1000, "slide": 300},
            {"id": "q02", "aggregate": "sum", "range": 500, "slide": 500},
            {"id": "q7", "aggregate": "sum", "range": 1000, "slide": 300},
        ],
    },  # same window as q10
    {
        "id": "t1",
        "stream": "mf02",
        "queries": [
            {"id": "q05", "aggregate": "avg", "range": 700, "slide": 200},
            {"id": "q1", "aggregate": "max", "range": 450, "slide": 150},
        ],
    },
    {
        "id": "t2",
        "stream": "mf01",
        "queries": [{"id": "q3", "aggregate": "count", "range": 2000, "slide": 1000}],
    },
]


def batch(n=5000, seed=0):
    rng = np.random.default_rng(seed)
    return pa.record_batch(
        {
            "ts_ms": np.sort(rng.integers(0, 40_000, n)).astype(np.int64),
            "mf01": rng.integers(0, 100, n),
            "mf02": rng.integers(0, 100, n),
        }
    )


def reference(trees, b, step):
    out = []
    for t in trees:
        tree = ExecutionTree(t["queries"])
        for i in range(0, b.num_rows, step):
            x = b.slice(i, step)
            out.append(tree.process(x.column("ts_ms").to_numpy(), x.column(t["stream"]).to_numpy()))
        out.append(tree.flush())
    return concat_answers(out).sort_by(KEY)


@pytest.mark.parametrize("trees", [TREES, TREES[:1] + TREES[2:]])  # float + int; int only
def test_drain_is_the_sorted_tree_answers(trees):
    b = batch()
    want = reference(trees, b, 900)
    node = NodeCore("n", trees)
    for i in range(0, b.num_rows, 600):
        node.ingest(None, b.slice(i, 600), seq=i)
    node.flush()
    got = node.drain()
    assert got.num_rows > 300 and got.equals(want)
    assert got.schema.field("value").type == want.schema.field("value").type
    assert node.drain().num_rows == 0


def test_blocks_across_checkpoints_and_nodes_merge_to_the_sorted_answers():
    b = batch(seed=1)
    want = reference(TREES, b, 1000)
    nodes = [NodeCore("a", TREES[:1]), NodeCore("b", TREES[1:])]
    parts = []
    for i in range(0, b.num_rows, 500):
        for n in nodes:
            n.ingest(None, b.slice(i, 500), seq=i)
        if i in (1000, 3500):  # a query's answers split between checkpoints
            parts += [n.checkpoint_blocks()[1] for n in nodes]
    for n in nodes:
        n.flush()
    parts += [n.drain_blocks() for n in nodes] + [AnswerBlocks.empty()]
    assert sum(p.num_rows for p in parts) == want.num_rows
    assert merge_blocks(parts).equals(want)
    assert merge_blocks(parts[::-1]).equals(want)  # part order does not matter
    assert merge_blocks([]).num_rows == 0


def test_threaded_fill_and_overlap_fallback(monkeypatch):
    b = batch(seed=2)
    node = NodeCore("n", TREES)
    node.ingest(None, b)
    node.flush()
    blocks = node.drain_blocks()
    want = blocks.table()
    monkeypatch.setattr(answer_blocks, "MERGE_THREADED_ROWS", 1)
    monkeypatch.setattr(answer_blocks, "MERGE_THREADS", 3)
    assert merge_blocks([blocks]).equals(want)
    # two parts holding overlapping windows of one query (not produced by a run): the rows
    # are sorted in full, nothing is lost
    i = blocks.qids.index("q05")
    half = AnswerBlocks(
        ["q05"], [blocks.ranges[i]], [blocks.starts[i][::2]], [blocks.values[i][::2]]
    )
    rest = AnswerBlocks(
        list(blocks.qids),
        list(blocks.ranges),
        [s if j != i else s[1::2] for j, s in enumerate(blocks.starts)],
        [v if j != i else v[1::2] for j, v in enumerate(blocks.values)],
    )
    assert merge_blocks([half, rest]).equals(want)


def test_int_answers_beyond_2_53_refused_when_mixed_with_float():
    ints = AnswerBlocks(["a"], [10], [np.array([0])], [np.array([(1 << 53) + 1])])
    floats = AnswerBlocks(["b"], [10], [np.array([0])], [np.array([0.5])])
    assert merge_blocks([ints]).column("value").to_pylist() == [(1 << 53) + 1]
    with pytest.raises(pa.ArrowInvalid):
        merge_blocks([ints, floats])


def test_parquet_footer_span_and_row_groups(tmp_path):
    rng = np.random.default_rng(3)
    ts = rng.integers(10, 10**6, 5000)
    t = pa.table({"ts_ms": ts, "mf01": rng.integers(0, 9, 5000)})
    p = tmp_path / "x.parquet"
    pq.write_table(t, p, row_group_size=700)
    assert parquet_span(p) == (5000, int(ts.min()), int(ts.max()))
    groups = parquet_row_groups(p)
    assert [g[1] for g in groups] == [700] * 7 + [100]
    assert groups[2][2:] == (int(ts[1400:2100].min()), int(ts[1400:2100].max()))
    assert parquet_span(tmp_path) is None and parquet_row_groups(tmp_path / "nope") is None
    pq.write_table(t, p, write_statistics=False)
    assert parquet_span(p) is None


def test_drain_with_queries_without_answers():
    """A tree whose first and last queries have no answers yet (long windows): the block
    bookkeeping skips empty blocks at both ends."""
    trees = [
        {
            "id": "t",
            "stream": "mf01",
            "queries": [
                {"id": "long1", "aggregate": "sum", "range": 90_000, "slide": 90_000},
                {"id": "mid", "aggregate": "sum", "range": 1000, "slide": 1000},
                {"id": "mid2", "aggregate": "sum", "range": 2000, "slide": 1000},
                {"id": "long2", "aggregate": "sum", "range": 80_000, "slide": 80_000},
            ],
        }
    ]
    b = batch(n=2000)
    node = NodeCore("n", trees)
    node.ingest(None, b.slice(0, 1500))
    got = node.drain()
    assert set(got.column("query_id").to_pylist()) == {"mid", "mid2"}
    node.ingest(None, b.slice(1500))
    node.flush()
    got = pa.concat_tables([got, node.drain()]).sort_by(KEY)
    assert got.equals(reference(trees, b, 2000))


def test_bench_cost_check_in_model_units():
    """``sim.bench.e2e.measured_cost`` on nodes run in this process: the lambda part is the
    tuples each tree folded per ms (= the plan's rate), SlickDeque Inv trees with an exact
    Omega measure the plan's E * Omega (avg trees' two primitives counted as one aggregate
    operation) up to the windows closing after the last tuple, and the parts add up to the
    plan's node cost."""
    from cluster.deployment.specs import node_specs
    from sim.bench.e2e import cost_summary, e2e_queries, format_table, measured_cost
    from sim.bench.live import STREAMS, round_robin_plan

    rate = 0.1  # tuples per ms, as in the plan
    plan = round_robin_plan(e2e_queries(12), 2, rate)
    n = 200_000
    ts = np.arange(n, dtype=np.int64) * 10  # 0.1 per ms
    rng = np.random.default_rng(0)
    b = pa.record_batch({"ts_ms": ts, **{s: rng.integers(0, 1000, n) for s in STREAMS}})
    metrics = {"nodes": {}}
    for sp in node_specs(plan):
        node = NodeCore(sp["node_id"], sp["trees"], plan["ie"], count_ops=True)
        for i in range(0, n, 50_000):
            node.ingest(None, b.slice(i, 50_000))
        node.flush()
        metrics["nodes"][sp["node_id"]] = node.metrics()
    span = float(ts[-1] - ts[0] + 1)
    cost = measured_cost(plan, metrics, span, "raw")
    for node in plan["nodes"]:
        c = cost[node["id"]]
        assert c["plan_cost"] == pytest.approx(node["cost"], abs=1e-4)
        assert c["parts"]["lambda"]["ratio"] == pytest.approx(1.0, abs=1e-4)
        inv = c["parts"].get("slickdeque_inv")
        if inv:  # windows closing after the last tuple: at most max range / span more
            assert 1.0 <= inv["ratio"] < 1.0 + 61_000 / span
    summary = cost_summary(cost)
    assert set(summary["node_ratios"]) == {n["id"] for n in plan["nodes"]}
    assert summary["parts"]["lambda"]["trees"] == sum(len(n["trees"]) for n in plan["nodes"])
    text = format_table([{"queries": 12, "mode": "raw", "tuples_per_s": 1, "cost_check": summary}])
    assert "cost check" in text and "lambda" in text
