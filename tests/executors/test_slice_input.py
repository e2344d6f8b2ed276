"""Slice-fed trees (executors/slice_input.py) give the tuple-fed tree's answers.

The slices are cut at the union of the tree's edges and the edges of random *other* queries on
the same stream (as the cluster's sliced mode does), so the tree must fold several incoming
slices into each of its own.  In-order time data (the sliced mode's contract).
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import AGGS, examples, rows
from hypothesis import given, settings
from hypothesis import strategies as st

from executors import ExecutionTree
from executors.slice_input import SlicedExecutionTree, slice_aggregates
from executors.slicing import edge_classes

TECHS = ["slickdeque", "panes", "flatfat", "flatfit", "bint"]


@st.composite
def workloads(draw):
    nq = draw(st.integers(1, 4))
    qs = []
    for i in range(nq):
        s = draw(st.integers(1, 40))
        r = draw(st.integers(1, 120))
        qs.append(
            dict(id=f"q{i}", aggregate=draw(st.sampled_from(AGGS)), range=r, slide=s, kind="time")
        )
    others = [
        (draw(st.integers(1, 150)), draw(st.integers(1, 50)))
        for _ in range(draw(st.integers(0, 3)))
    ]
    n = draw(st.integers(0, 300))
    gaps = draw(st.lists(st.sampled_from([0, 0, 1, 1, 2, 3, 7, 30, 400]), min_size=n, max_size=n))
    t0 = draw(st.integers(-200, 200))
    ts = t0 + np.cumsum(np.array(gaps, dtype=np.int64))
    is_int = draw(st.booleans())
    seed = draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    v = rng.integers(-1000, 1000, n) if is_int else rng.normal(0, 100, n)
    n_batches = draw(st.integers(1, 4))
    lateness = draw(st.sampled_from([0, 0, 5, 50]))
    tech = draw(st.sampled_from(TECHS))
    split_rows = draw(st.booleans())
    return qs, others, ts, v, n_batches, lateness, tech, split_rows


def _cut(n, k):
    return sorted({0, n, *np.linspace(0, n, k + 1).astype(int).tolist()})


@settings(max_examples=examples(150))
@given(w=workloads())
def test_slice_fed_equals_tuple_fed(w):
    qs, others, ts, v, n_batches, lateness, tech, split_rows = w
    rs = [(q["range"], q["slide"]) for q in qs] + others
    classes = edge_classes(rs)
    ref_tree = ExecutionTree(qs, technique=tech, allowed_lateness=lateness)
    tree = SlicedExecutionTree(qs, technique=tech, allowed_lateness=lateness)
    want, got = [], []
    cuts = _cut(len(ts), n_batches)
    for a, b in zip(cuts[:-1], cuts[1:]):
        want += rows(ref_tree.process(ts[a:b], v[a:b]))
        if split_rows and b - a > 1:
            # a slice cut in two pieces (two producer partitions): both pieces are folded in
            m = (a + b) // 2
            parts = [
                slice_aggregates(ts[a:m], v[a:m], classes),
                slice_aggregates(ts[m:b], v[m:b], classes),
            ]
        else:
            parts = [slice_aggregates(ts[a:b], v[a:b], classes)]
        for p in parts:
            got += rows(tree.process_slices(p))
    want += rows(ref_tree.flush())
    got += rows(tree.flush())
    assert [g[:3] for g in got] == [x[:3] for x in want]
    int_exact = np.issubdtype(v.dtype, np.integer)
    for g, x in zip(got, want):
        if int_exact or isinstance(x[3], int):
            assert g[3] == x[3], (g, x)
        else:  # float sums pre-aggregated in float64 (module docstring)
            assert g[3] == pytest.approx(x[3], rel=1e-9, abs=1e-9), (g, x)
    assert tree.late.count == 0 and ref_tree.late.count == 0  # in order: nothing late
    assert tree.stats()["pending"] == 0


def test_slice_aggregates_columns():
    ts = np.array([0, 1, 5, 6, 9, 10, 11], dtype=np.int64)
    v = np.array([1, 2, 3, 4, 5, 6, 7])
    out = slice_aggregates(ts, v, edge_classes([(10, 5), (7, 7)]))  # edges 0 5 7 10 14 15
    assert out["slice_start"].tolist() == [0, 5, 7, 10]
    assert out["slice_end"].tolist() == [5, 7, 10, 14]
    assert out["count"].tolist() == [2, 2, 1, 2]
    assert out["sum"].tolist() == [3, 7, 5, 13]
    assert out["min"].tolist() == [1, 3, 5, 6] and out["max"].tolist() == [2, 4, 5, 7]
    assert out["sq"].tolist() == [5, 25, 25, 85]
    assert out["ts_max"].tolist() == [1, 6, 9, 11]
    # sparse data with a huge gap takes the per-tuple path and gives the same slices
    ts2 = np.array([3, 10**12 + 3], dtype=np.int64)
    out2 = slice_aggregates(ts2, np.array([1, 2]), edge_classes([(10, 5)]))
    assert out2["slice_start"].tolist() == [0, 10**12]
    assert out2["slice_end"].tolist() == [5, 10**12 + 5]


def test_slices_not_covering_the_tree_edges_are_refused():
    tree = SlicedExecutionTree([dict(id="q", aggregate="sum", range=10, slide=5)])
    bad = slice_aggregates(np.arange(20), np.ones(20, np.int64), edge_classes([(10, 10)]))
    with pytest.raises(ValueError, match="straddles an edge"):
        tree.process_slices(bad)
    with pytest.raises(ValueError, match="count windows"):
        SlicedExecutionTree([dict(id="c", aggregate="sum", range=10, slide=5, kind="count")])


def test_snapshot_restore_mid_stream():
    qs = [
        dict(id="a", aggregate="avg", range=30, slide=7),
        dict(id="b", aggregate="max", range=12, slide=12),
    ]
    classes = edge_classes([(30, 7), (12, 12), (9, 4)])
    rng = np.random.default_rng(0)
    ts = np.cumsum(rng.integers(0, 4, 400))
    v = rng.integers(0, 50, 400)
    ref = ExecutionTree(qs)
    want = rows(ref.process(ts, v)) + rows(ref.flush())
    tree = SlicedExecutionTree(qs)
    got = rows(tree.process_slices(slice_aggregates(ts[:150], v[:150], classes)))
    tree = SlicedExecutionTree.restore(tree.snapshot())
    assert isinstance(tree, SlicedExecutionTree)
    got += rows(tree.process_slices(slice_aggregates(ts[150:], v[150:], classes)))
    got += rows(tree.flush())
    assert got == want
