"""ExecutionTree end to end against the brute-force oracle."""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pytest
from helpers import AGGS, assert_same, draw_stream, examples, refused, rows, run
from hypothesis import given, settings
from hypothesis import strategies as st

from executors import ALL_TECHNIQUES, ExecutionTree, brute_force
from executors.slicing import edge_classes, window_lengths


@st.composite
def workloads(draw):
    kind = draw(st.sampled_from(["time", "time", "count"]))
    nq = draw(st.integers(1, 3))
    qs = [
        dict(
            id=f"q{i}",
            aggregate=draw(st.sampled_from(AGGS)),
            range=draw(st.integers(1, 16)),
            slide=draw(st.integers(1, 7)),
            kind=kind,
        )
        for i in range(nq)
    ]
    ts, v, lateness, cuts, snap_at = draw_stream(draw, 50, [0, 0, 1, 1, 2, 3, 30], 6, 3, 20)
    return qs, ts, v, lateness, cuts, snap_at


@settings(max_examples=examples(150))
@given(w=workloads())
def test_every_technique_matches_oracle(w):
    """technique x aggregate x kind, r<s, r==s, r%s!=0, gaps, duplicate and out-of-order
    timestamps, late tuples, random batch splits and a snapshot/restore mid-stream."""
    qs, ts, v, lateness, cuts, snap_at = w
    want, late_pos = brute_force(qs, ts, v, lateness)
    scale = float(np.abs(v).max()) if v.shape[0] else 1.0
    kind = qs[0]["kind"]
    for tech in ALL_TECHNIQUES:
        if refused(tech, qs):
            with pytest.raises(ValueError):
                ExecutionTree(qs, technique=tech, allowed_lateness=lateness)
            continue
        tree = ExecutionTree(qs, technique=tech, allowed_lateness=lateness)
        tree, got = run(tree, None if kind == "count" else ts, v, cuts, snap_at)
        assert_same(got, want, scale)
        late = tree.late
        assert late.count == len(late_pos), tech
        assert sorted(late.ts.tolist()) == sorted(ts[late_pos].tolist())
        assert sorted(late.values.tolist()) == sorted(v[late_pos].tolist())


def test_lateness_example():
    """Windows [0,10),[10,20) (sum); allowed lateness 3."""
    q = [dict(id="s", aggregate="sum", range=10, slide=10)]
    tree = ExecutionTree(q, allowed_lateness=3)
    out = rows(tree.process(np.array([1, 5, 12, 9, 13]), np.array([1, 2, 4, 8, 16])))
    # watermark 10 after ts=13: [0,10) is due and holds 1+2+8 (ts=9 is within lateness)
    assert out == [("s", 0, 10, 11)]
    out = rows(tree.process(np.array([8, 25]), np.array([100, 1000])))
    # ts=8 arrives after [0,10) was emitted: late, not lost; ts=25 closes [10,20)
    assert out == [("s", 10, 20, 20)]
    assert tree.late.count == 1 and tree.late.ts.tolist() == [8]
    assert tree.late.values.tolist() == [100]
    assert rows(tree.flush()) == [("s", 20, 30, 1000)]


def test_hopping_gaps_and_empty_windows():
    """r < s: tuples in the gaps belong to no window (not late, not answered)."""
    q = [dict(id="h", aggregate="count", range=2, slide=5)]
    tree = ExecutionTree(q)
    out = rows(tree.process(np.array([0, 1, 2, 3, 4, 5, 21]), np.arange(7)))
    assert out == [("h", 0, 2, 2), ("h", 5, 7, 1)]
    out += rows(tree.flush())
    assert out == [("h", 0, 2, 2), ("h", 5, 7, 1), ("h", 20, 22, 1)]
    assert tree.stats()["outside_windows"] == 3 and tree.late.count == 0


def test_windows_before_first_tuple_and_negative_time():
    q = [dict(id="m", aggregate="max", range=7, slide=3)]
    out = rows(ExecutionTree(q).process(np.array([-4, 4]), np.array([5, 9])))
    # windows with end <= watermark 4: [-9,-2) and [-6,1) hold ts=-4
    assert out == [("m", -9, -2, 5), ("m", -6, 1, 5)]


def test_count_windows_and_split_invariance():
    q = [
        dict(id="c", aggregate="avg", range=4, slide=2, kind="count"),
        dict(id="d", aggregate="max", range=3, slide=3, kind="count"),
    ]
    v = np.arange(10, dtype=np.int64) * 10
    one = ExecutionTree(q)
    a = rows(one.process(None, v)) + rows(one.flush())
    two = ExecutionTree(q)
    b = rows(two.process(None, v[:3])) + rows(two.process(None, v[3:])) + rows(two.flush())
    assert a == b
    assert ("c", 0, 4, 15.0) in a and ("d", 3, 6, 50) in a and ("c", 8, 12, 85.0) in a


def test_output_schema_and_types():
    q = [dict(id="a", aggregate="sum", range=2, slide=1)]
    t = ExecutionTree(q).process(np.array([0, 1, 2]), np.array([1, 2, 3]))
    assert t.schema.field("value").type == pa.int64()
    assert t.schema.field("query_id").type == pa.string()
    assert t.column("value").to_pylist() == [1, 3]  # windows [-1,1), [0,2)
    q2 = q + [dict(id="b", aggregate="avg", range=2, slide=1)]
    t = ExecutionTree(q2).process(np.array([0, 1, 2]), np.array([1, 2, 3]))
    assert t.schema.field("value").type == pa.float64()


def test_refusals():
    with pytest.raises(ValueError, match="'avg'"):
        ExecutionTree(
            [dict(id="a", aggregate="avg", range=4, slide=2)], technique="slickdeque_noninv"
        )
    with pytest.raises(ValueError, match="'max'"):
        ExecutionTree([dict(id="a", aggregate="max", range=4, slide=2)], technique="slickdeque_inv")
    with pytest.raises(ValueError, match="one window length"):
        ExecutionTree(
            [
                dict(id="a", aggregate="max", range=4, slide=2),
                dict(id="b", aggregate="max", range=6, slide=2),
            ],
            technique="daba",
        )
    with pytest.raises(ValueError, match="mix time and count"):
        ExecutionTree(
            [
                dict(id="a", aggregate="max", range=4, slide=2),
                dict(id="b", aggregate="max", range=6, slide=2, kind="count"),
            ]
        )
    with pytest.raises(ValueError, match="duplicate query ids"):
        ExecutionTree([dict(id="a", aggregate="max", range=4, slide=2)] * 2)
    with pytest.raises(ValueError, match="unknown technique"):
        ExecutionTree([dict(id="a", aggregate="max", range=4, slide=2)], technique="fiba")
    t = ExecutionTree([dict(id="a", aggregate="max", range=4, slide=2)])
    t.process(np.array([1]), np.array([1]))
    with pytest.raises(ValueError, match="int64 values"):
        t.process(np.array([2]), np.array([1.5]))


def test_sparse_stream_skips_empty_stretches():
    """A jump of 10^12 time units with slide 1 must not enumerate the edges in between."""
    q = [dict(id="s", aggregate="sum", range=3, slide=1)]
    ts = np.array([0, 1, 10**12, 10**12 + 1, 2 * 10**12], dtype=np.int64)
    t0 = time.perf_counter()
    tree = ExecutionTree(q)
    out = rows(tree.process(ts, np.arange(1, 6))) + rows(tree.flush())
    assert time.perf_counter() - t0 < 5
    want, _ = brute_force(q, ts, np.arange(1, 6))
    assert out == want and tree.stats()["resets"] >= 2


@pytest.mark.parametrize(
    "queries", [[(8, 2)], [(8, 2), (6, 2), (4, 2)], [(10, 3)], [(12, 9), (10, 6)], [(7, 5), (3, 3)]]
)
def test_slickdeque_inv_omega_is_two_per_distinct_length(queries):
    """Measured ops per slice equal 2 x #distinct window lengths (in partials)."""
    qs = [dict(id=f"q{i}", aggregate="sum", range=r, slide=s) for i, (r, s) in enumerate(queries)]
    tree = ExecutionTree(qs, technique="slickdeque_inv", count_ops=True)
    ts = np.arange(0, 3000)
    tree.process(ts, np.ones(3000, dtype=np.int64))
    _, ns, _ = window_lengths(sorted(set(queries)), edge_classes(queries))
    distinct = len({n for v in ns.values() for n in v})
    oc = tree.op_counts()
    assert oc["omega"] == 2 * distinct
    assert set(oc["per_slice"].tolist()) == {2 * distinct}


def test_panes_ops_equal_sum_of_window_lengths():
    qs = [
        dict(id="a", aggregate="max", range=8, slide=2),
        dict(id="b", aggregate="max", range=6, slide=4),
    ]
    tree = ExecutionTree(qs, technique="panes", count_ops=True)
    tree.process(np.arange(0, 400), np.arange(400))
    oc = tree.op_counts()
    # one composite slide (4): a answers twice (4 partials each: 3 ops), b once (3 ops: 2)
    per_period = 2 * 3 + 2
    assert oc["total"] == pytest.approx(per_period * oc["slices"] / 2, abs=per_period)


def test_long_composite_slide_uses_bounds_and_lazy_lengths():
    """Coprime slides: the composite slide (~1e12) is too long to enumerate; window
    lengths fall back to a bound and SlickDeque Inv registers lengths lazily."""
    qs = [
        dict(id="a", aggregate="sum", range=2500, slide=997),
        dict(id="b", aggregate="max", range=1500, slide=991),
        dict(id="c", aggregate="avg", range=983 * 3, slide=983),
        dict(id="d", aggregate="stddev", range=5000, slide=977),
    ]
    rng = np.random.default_rng(0)
    ts = np.sort(rng.integers(0, 40000, 300))
    v = rng.integers(-100, 100, 300)
    want, _ = brute_force(qs, ts, v)
    for tech in ("slickdeque", "flatfit", "bint"):
        tree = ExecutionTree(qs, technique=tech)
        tree, got = run(tree, ts, v, list(range(0, 300, 37)) + [300])
        assert not tree.stats()["exact_wsize"]
        assert_same(got, want, 100.0)


def test_slices_close_in_order_with_hopping_and_long_windows():
    """Regression: [1, 5) lies in (100, 100)'s window only; it must not be sealed when the
    later slice [5, 6) of the hopping query (1, 5) is due, or the late-arriving (but not late)
    tuple at ts=2 lands in another slice.  Found by a random search: answers were wrong."""
    qs = [
        dict(id="q0", aggregate="sum", range=3, slide=8),
        dict(id="q1", aggregate="sum", range=38, slide=24),
        dict(id="q2", aggregate="sum", range=12, slide=25),
    ]
    ts = np.array([35, 9, 29, 3, 15, 9, 66, 56])
    v = 10 ** np.arange(8, dtype=np.int64)
    want, late = brute_force(qs, ts, v, 5)
    assert ("q2", 25, 37, 101) in want and ("q1", 24, 62, 101) in want and late == [1, 3, 5, 7]
    for tech in ("slickdeque", "panes", "flatfit"):
        _, got = run(ExecutionTree(qs, technique=tech, allowed_lateness=5), ts, v, [0, 2, 4, 7, 8])
        assert got == want, tech
    # the answer of [5, 6) waits for [1, 5) to be sealed (watermark 100), with the right value
    qs = [
        dict(id="long", aggregate="sum", range=100, slide=100),
        dict(id="hop", aggregate="sum", range=1, slide=5),
    ]
    tree = ExecutionTree(qs)
    assert rows(tree.process(np.array([0, 5, 30]), np.array([1, 10, 1000]))) == [("hop", 0, 1, 1)]
    assert rows(tree.process(np.array([2]), np.array([100]))) == []  # not late: fce(2) = 100
    out = rows(tree.process(np.array([100]), np.array([7])))
    assert out[:3] == [("hop", 5, 6, 10), ("hop", 30, 31, 1000), ("long", 0, 100, 1111)]
    assert tree.late.count == 0


@settings(max_examples=examples(150))
@given(data=st.data())
def test_hopping_next_to_long_windows_out_of_order(data):
    """A short hopping window (r < s) next to a long one, disordered batches: the case the small
    ranges of ``workloads`` rarely reach (without in-order sealing ~10% of these examples fail).
    Values are powers of two, so a sum names the exact set of tuples in a window."""
    s_hop = data.draw(st.integers(3, 15))
    r_long = data.draw(st.integers(30, 119))
    qs = [
        dict(
            id="hop",
            aggregate="sum",
            range=data.draw(st.integers(1, min(3, s_hop - 1))),
            slide=s_hop,
        ),
        dict(
            id="long",
            aggregate="sum",
            range=r_long,
            slide=data.draw(st.integers(max(1, r_long // 3), r_long)),
        ),
    ]
    n = data.draw(st.integers(4, 24))
    ts = np.array(data.draw(st.lists(st.integers(0, 120), min_size=n, max_size=n)), np.int64)
    v = 2 ** np.arange(n, dtype=np.int64)
    lateness = data.draw(st.integers(0, 39))
    cuts = sorted(set(data.draw(st.lists(st.integers(0, n), max_size=5))) | {0, n})
    want, late = brute_force(qs, ts, v, lateness)
    for tech in ("slickdeque", "panes"):
        tree, got = run(ExecutionTree(qs, technique=tech, allowed_lateness=lateness), ts, v, cuts)
        assert got == want and tree.late.count == len(late), tech


@settings(max_examples=examples(40))
@given(
    windows=st.lists(st.tuples(st.integers(1, 50), st.integers(1, 9)), min_size=1, max_size=12),
    more=st.integers(0, 3),
    meta=st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=4),
)
def test_snapshot_meta_json_is_the_plain_encoding_and_its_cache_follows_appends(
    windows, more, meta
):
    """``query_spec.meta_json``: the same JSON object as encoding every query again, the
    queries' text reused while the list is unchanged and redone when it grew."""
    import json

    from executors.query_spec import meta_json, normalize_query

    meta = {k: v for k, v in meta.items() if k != "queries"}
    qs = [
        normalize_query({"id": f"q{i}", "aggregate": "max", "range": r, "slide": s})
        for i, (r, s) in enumerate(windows)
    ]

    def want():
        return {"queries": [q.as_dict() for q in qs], **meta}

    text, cached = meta_json(meta, qs, None)
    assert json.loads(text) == want()
    assert meta_json(meta, qs, cached) == (text, cached)
    qs += [
        normalize_query({"id": f"n{i}", "aggregate": "sum", "range": 3, "slide": 2})
        for i in range(more)
    ]
    text2, cached2 = meta_json(meta, qs, cached)
    assert json.loads(text2) == want()
    assert cached2[0] == len(qs)
