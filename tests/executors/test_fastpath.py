"""The executor's batched hot path equals the straightforward one it replaced.

Each fast piece is checked against a plain reference on random inputs: the compiled folds
against ``reduce_slices`` (bit for bit, double-double floats included), the due-window
enumeration against a per-(r, s) scan of every slice end, the ingest hints (``in_order``,
``copy``), unordered answer columns and pending segments against ``process``/one batch, and
the piecewise slice producer and edge check against single-piece runs.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import executors.slice_input as slice_input
from executors import ExecutionTree
from executors.aggregates import OP_MAX, OP_MIN, OP_SUM, Primitive, reduce_slices
from executors.slice_input import SlicedExecutionTree, check_slice_edges, slice_aggregates
from executors.slicing import StreamSlicer, edge_classes, fold_runs, fold_runs_v, normalize_query


def rows(table):
    return sorted(
        zip(
            *(
                table.column(c).to_pylist()
                for c in ("query_id", "window_start", "window_end", "value")
            )
        )
    )


@pytest.mark.parametrize("op", [OP_SUM, OP_MIN, OP_MAX])
@pytest.mark.parametrize("dtype", ["i8", "f8"])
def test_fold_runs_equals_reduce_slices(op, dtype):
    rng = np.random.default_rng(op * 7 + len(dtype))
    n, k = 5000, 300
    sidx = np.sort(rng.integers(0, k, n))
    bounds = np.searchsorted(sidx, np.arange(k + 1), side="left").astype(np.int64)
    p = Primitive(op, "v", dtype)
    v = (
        rng.integers(-(10**6), 10**6, n)
        if dtype == "i8"
        else rng.normal(1e6, 3.0, n) * rng.choice([1, 1e-8], n)
    )
    want_h, want_l = p.identity_arrays(k)
    lh, ll = p.lift(v)
    reduce_slices(op, sidx, lh, ll, want_h, want_l)
    got_h, got_l = p.identity_arrays(k)
    fold_runs_v(op, bounds, v.astype(p.np_dtype), p.np_dtype.type(0), got_h, got_l)
    assert got_h.tobytes() == want_h.tobytes() and got_l.tobytes() == want_l.tobytes()
    sq = Primitive(OP_SUM, "v2", "f8")  # lifted (hi, lo) pairs: the general kernel
    wh, wl = sq.identity_arrays(k)
    qh, ql = sq.lift(v)
    reduce_slices(OP_SUM, sidx, qh, ql, wh, wl)
    gh, gl = sq.identity_arrays(k)
    fold_runs(OP_SUM, bounds, qh, ql, gh, gl)
    assert gh.tobytes() == wh.tobytes() and gl.tobytes() == wl.tobytes()


def _old_due_windows(sl: StreamSlicer, ends, allv, h):
    """The former per-(r, s) scan of every slice end, sorted by (slice, n desc, query)."""
    ds, dq, dn = [], [], []
    for (r, s), qidx in sl.rs_queries.items():
        due = np.nonzero((ends - r) % s == 0)[0]
        n = (h + due) - np.searchsorted(allv, ends[due] - r, side="left")
        ds.append(np.repeat(due, qidx.shape[0]))
        dq.append(np.tile(qidx, due.shape[0]))
        dn.append(np.repeat(n, qidx.shape[0]))
    ds, dq, dn = (np.concatenate(x) for x in (ds, dq, dn))
    o = np.lexsort((dq, -dn, ds))
    return ds[o], dq[o], dn[o]


@settings(max_examples=examples(60))
@given(
    qs=st.lists(st.tuples(st.integers(1, 60), st.integers(1, 12)), min_size=1, max_size=8),
    dup=st.integers(0, 3),
    a=st.integers(-200, 200),
    span=st.integers(1, 400),
)
def test_due_windows_equal_per_end_scan(qs, dup, a, span):
    qs = qs + qs[:dup]  # several queries with the same (r, s)
    queries = [
        normalize_query({"id": f"q{i}", "aggregate": "sum", "range": r, "slide": s})
        for i, (r, s) in enumerate(qs)
    ]
    sl = StreamSlicer(queries, [])
    from executors.slicing import edges_between

    hist = edges_between(sl.classes, a - sl.max_r, a + 1)
    ends = edges_between(sl.classes, a + 1, a + 1 + span)
    if ends.shape[0] == 0:
        return
    allv = np.concatenate([hist, ends])
    got = sl._due_windows(ends, allv, hist.shape[0])
    want = _old_due_windows(sl, ends, allv, hist.shape[0])
    # rows with the same (slice, n) are one window: their query order is free
    key = lambda x: np.lexsort((x[1], -x[2], x[0]))  # noqa: E731
    for g, w in zip((y[key(got)] for y in got), (y[key(want)] for y in want)):
        assert g.tolist() == w.tolist()
    assert got[0].tolist() == want[0].tolist() and got[2].tolist() == want[2].tolist()


QUERIES = [
    {"id": "a", "aggregate": "sum", "range": 1000, "slide": 300},
    {"id": "b", "aggregate": "avg", "range": 700, "slide": 200},
    {"id": "c", "aggregate": "max", "range": 450, "slide": 100},
    {"id": "d", "aggregate": "count", "range": 900, "slide": 300},
    {"id": "e", "aggregate": "stddev", "range": 333, "slide": 111},
]


def _stream(seed, n=6000, jitter=0, floats=False):
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, 60_000, n)).astype(np.int64)
    if jitter:
        ts = ts + rng.integers(-jitter, 1, n) * (rng.random(n) < 0.05)
    v = rng.normal(50, 20, n) if floats else rng.integers(-100, 100, n)
    return ts, v


@pytest.mark.parametrize(
    "jitter,lateness,floats", [(0, 0, False), (400, 250, False), (400, 0, True), (0, 100, True)]
)
def test_hints_unordered_columns_and_segments_equal_process(jitter, lateness, floats):
    """Per batch: ``process`` on one tree; ``process_columns`` with the node's hints
    (``in_order`` computed once, ``copy=False`` on read-only arrays, ``ordered=False``) on
    another: the same answers (each query's in window order), late tuples and op counts, and
    the same as one tree fed everything in one batch (pending kept as segments)."""
    ts, v = _stream(jitter + lateness, jitter=jitter, floats=floats)
    kw = dict(technique="slickdeque", allowed_lateness=lateness, count_ops=True)
    ref, fast, whole = (
        ExecutionTree(QUERIES, **kw),
        ExecutionTree(QUERIES, **kw),
        ExecutionTree(QUERIES, **kw),
    )
    want, got = [], []
    for a in range(0, ts.shape[0], 700):
        t, x = ts[a : a + 700].copy(), v[a : a + 700].copy()
        t.flags.writeable = x.flags.writeable = False
        want += rows(ref.process(t, x))
        in_order = bool((t[1:] >= t[:-1]).all())
        cols = fast.process_columns(t, x, in_order=in_order, copy=False)
        if cols is not None:
            q, s, e, val = cols
            for qid in set(q.tolist()):  # a query's answers in window order
                assert (np.diff(s[q == qid]) > 0).all()
            got += [
                (fast.queries[i].id, int(s_), int(e_), val_.item())
                for i, s_, e_, val_ in zip(q, s, e, val)
            ]
    want += rows(ref.flush())
    cols = fast.flush_columns()
    if cols is not None:
        got += [
            (fast.queries[i].id, int(s_), int(e_), val_.item()) for i, s_, e_, val_ in zip(*cols)
        ]
    assert sorted(got) == sorted(want) and len(want) > 500
    assert fast.late.count == ref.late.count and (fast.late.ts == ref.late.ts).all()
    assert fast.op_counts()["total"] == ref.op_counts()["total"]
    if not jitter:  # batch boundaries never change the answers
        one = rows(whole.process(ts, v)) + rows(whole.flush())
        assert sorted(one) == sorted(want)
        assert whole.op_counts()["total"] == ref.op_counts()["total"]


def test_pending_segments_survive_snapshots():
    """Pending tuples in several segments (many small in-order batches) snapshot and restore
    to the same answers as an uninterrupted run."""
    ts, v = _stream(3, n=3000)
    full = ExecutionTree(QUERIES)
    want = rows(full.process(ts, v)) + rows(full.flush())
    tree = ExecutionTree(QUERIES)
    got = []
    for a in range(0, 1500, 37):  # small batches: a pending segment each
        got += rows(tree.process(ts[a : a + 37], v[a : a + 37]))
    assert len(tree.slicer._pts) > 1 or tree.stats()["pending"] < 37
    tree = ExecutionTree.restore(tree.snapshot())
    for a in range(1517, 3000, 700):
        got += rows(tree.process(ts[a : a + 700], v[a : a + 700]))
    got += rows(tree.flush())
    assert sorted(got) == sorted(want)


def test_slice_aggregates_and_edge_check_piecewise(monkeypatch):
    """Small pieces (many per call, dense and sparse ones) give the same slices as one piece,
    and the piecewise edge check finds a straddling slice in a later piece."""
    rng = np.random.default_rng(5)
    classes = edge_classes(
        [(r, s) for r, s in zip(rng.integers(5, 400, 60), rng.integers(3, 90, 60))]
    )
    ts = np.concatenate(
        [
            np.sort(rng.integers(0, 20_000, 3000)),
            np.sort(rng.integers(10**9, 10**9 + 500, 50)),  # after a long gap
            np.sort(rng.integers(2 * 10**9, 2 * 10**9 + 9000, 2000)),
        ]
    )
    v = rng.integers(-50, 50, ts.shape[0])
    want = slice_aggregates(ts, v, classes)
    monkeypatch.setattr(slice_input, "PIECE_ROWS", 64)
    got = slice_aggregates(ts, v, classes)
    assert want.keys() == got.keys()
    for k in want:
        assert want[k].tolist() == got[k].tolist(), k
    check_slice_edges(classes, got["slice_start"], got["slice_end"], got["ts_max"])
    bad_end = got["slice_end"].copy()
    bad_end[-3] = got["slice_end"][-1] + 10**6  # straddles edges
    with pytest.raises(ValueError, match="straddles an edge"):
        check_slice_edges(classes, got["slice_start"], bad_end, got["ts_max"])
    tree = SlicedExecutionTree([{"id": "q", "aggregate": "sum", "range": 10, "slide": 5}])
    with pytest.raises(ValueError, match="straddles an edge"):
        tree.process_slices(
            slice_aggregates(np.arange(20), np.ones(20, np.int64), edge_classes([(10, 10)]))
        )
