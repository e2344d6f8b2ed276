"""Cutty slicing (slices cut at window starts only): answers, slices and operation counts."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import AGGS, assert_same, draw_stream, examples, refused, rows, run
from hypothesis import given, settings
from hypothesis import strategies as st

from executors import ALL_TECHNIQUES, ExecutionTree, brute_force
from executors.slice_input import SlicedExecutionTree, slice_aggregates
from executors.slicing import edge_classes
from placement.slicing import window_lengths


@st.composite
def workloads(draw):
    """r < s, r == s, r % s != 0 (forced into the mix), gaps, duplicate timestamps,
    out-of-order tuples within and beyond the lateness, batch splits, a snapshot."""
    kind = draw(st.sampled_from(["time", "time", "time", "count"]))
    nq = draw(st.integers(1, 3))
    qs = []
    for i in range(nq):
        s = draw(st.integers(1, 9))
        shape = draw(st.sampled_from(["lt", "eq", "frag", "any"]))
        r = {
            "lt": draw(st.integers(1, max(1, s - 1))),
            "eq": s,
            "frag": s * draw(st.integers(1, 3)) + draw(st.integers(0, s - 1)),
            "any": draw(st.integers(1, 30)),
        }[shape]
        qs.append(
            dict(id=f"q{i}", aggregate=draw(st.sampled_from(AGGS)), range=r, slide=s, kind=kind)
        )
    ts, v, lateness, cuts, snap_at = draw_stream(draw, 60, [0, 0, 1, 1, 2, 3, 7, 40], 8, 4, 25)
    return qs, ts, v, lateness, cuts, snap_at


@settings(max_examples=examples(150))
@given(w=workloads())
def test_cutty_equals_oracle_and_pairs(w):
    """Every technique under Cutty: the oracle's answers and late tuples, and Pairs' answers
    (same batches, same snapshot point)."""
    qs, ts, v, lateness, cuts, snap_at = w
    want, late_pos = brute_force(qs, ts, v, lateness)
    scale = float(np.abs(v).max()) if v.shape[0] else 1.0
    t = None if qs[0]["kind"] == "count" else ts
    for tech in ALL_TECHNIQUES:
        if refused(tech, qs):
            with pytest.raises(ValueError):
                ExecutionTree(qs, technique=tech, slicing="cutty")
            continue
        tree, got = run(
            ExecutionTree(qs, technique=tech, allowed_lateness=lateness, slicing="cutty"),
            t,
            v,
            cuts,
            snap_at,
        )
        assert_same(got, want, scale)
        assert tree.late.count == len(late_pos), tech
        assert sorted(tree.late.ts.tolist()) == sorted(ts[late_pos].tolist())
        _, pairs = run(
            ExecutionTree(qs, technique=tech, allowed_lateness=lateness), t, v, cuts, snap_at
        )
        assert [g[:3] for g in got] == [p[:3] for p in pairs]
        if v.dtype == np.int64 and all(
            q["aggregate"] in ("sum", "count", "min", "max", "range") for q in qs
        ):
            assert got == pairs, tech  # int answers: identical, not just close


@settings(max_examples=examples(150))
@given(data=st.data())
def test_cutty_hopping_next_to_long_windows_out_of_order(data):
    """The in-order sealing case of ``test_executors_tree`` (values are powers of two, so a
    sum names the exact set of tuples) under Cutty."""
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
    for tech in ("slickdeque", "panes", "flatfit"):
        tree, got = run(
            ExecutionTree(qs, technique=tech, allowed_lateness=lateness, slicing="cutty"),
            ts,
            v,
            cuts,
        )
        assert got == want and tree.late.count == len(late), tech


def test_figure4_example_range5_slide3():
    """Dissertation Figure 4 (range 5, slide 3): Cutty keeps partials of 3 tuples and answers
    from the previous partial (3 tuples) plus the current one (2 tuples); Pairs needs
    2*floor(5/3)+1 = 3 slices per window, Cutty ceil(5/3) = 2 (one complete + the open one)."""
    q = [dict(id="q", aggregate="sum", range=5, slide=3, kind="count")]
    v = np.arange(1, 31, dtype=np.int64)
    cut = ExecutionTree(q, slicing="cutty", count_ops=True, technique="slickdeque_inv")
    pairs = ExecutionTree(q, count_ops=True, technique="slickdeque_inv")
    a = rows(cut.process(None, v)) + rows(cut.flush())
    b = rows(pairs.process(None, v)) + rows(pairs.flush())
    assert a == b
    assert a[:3] == [("q", -3, 2, 1 + 2), ("q", 0, 5, 15), ("q", 3, 8, 4 + 5 + 6 + 7 + 8)]
    assert window_lengths([(5, 3)], "cutty") == {(5, 3): (1,)}
    assert window_lengths([(5, 3)]) == {(5, 3): (3,)}
    assert (cut.stats()["slices"], cut.stats()["cuts"], pairs.stats()["slices"]) == (10, 21, 21)
    # SlickDeque Inv: 2 per slice (one running aggregate, n = 1) + 1 combine with the open
    # partial per answer; Pairs: 2 per slice (n = 3)
    oc, op = cut.op_counts(), pairs.op_counts()
    assert (oc["total"], op["total"]) == (2 * 10 + 11, 2 * 21)


def test_cutty_slices_per_query_vs_pairs():
    """Slices per window and slices per time unit, lone queries and a woven tree."""
    cases = {(10, 3): ((3,), (7,)), (12, 4): ((3,), (3,)), (2, 5): ((0,), (1,))}
    for (r, s), (cut, pairs) in cases.items():
        assert window_lengths([(r, s)], "cutty")[(r, s)] == cut
        assert window_lengths([(r, s)])[(r, s)] == pairs
    qs = [
        dict(id="a", aggregate="sum", range=10, slide=3),
        dict(id="b", aggregate="sum", range=7, slide=2),
    ]
    ts = np.arange(600)
    c = ExecutionTree(qs, slicing="cutty")
    p = ExecutionTree(qs)
    assert rows(c.process(ts, ts)) == rows(p.process(ts, ts))
    # starts: multiples of 2 or 3 (4 per 6); Pairs adds the ends 1 mod 3 and 1 mod 2: every
    # position (6 per 6)
    assert c.stats()["slices"] / p.stats()["slices"] == pytest.approx(4 / 6, abs=0.01)
    assert c.stats()["cuts"] == p.stats()["slices"]


def test_cutty_refusals():
    with pytest.raises(ValueError, match="unknown slicing 'panes'"):
        ExecutionTree([dict(id="a", aggregate="sum", range=4, slide=2)], slicing="panes")
    with pytest.raises(ValueError, match="unknown slicing"):
        SlicedExecutionTree([dict(id="a", aggregate="sum", range=4, slide=2)], slicing="cut")
    # a slice-fed Cutty tree still needs its Pairs edges (window ends) in the input
    t = SlicedExecutionTree([dict(id="a", aggregate="sum", range=5, slide=3)], slicing="cutty")
    with pytest.raises(ValueError, match="straddles an edge"):
        t.process_slices(slice_aggregates(np.arange(12), np.arange(12), [(3, 0)]))


@settings(max_examples=examples(60))
@given(data=st.data())
def test_sliced_cutty_equals_raw_pairs(data):
    """A slice-fed Cutty tree (input cut at the union of its Pairs edges and another tree's,
    as the cluster's sliced feed does) answers exactly as a raw Pairs tree, across a snapshot
    and over batch splits; int input, so values must be identical."""
    nq = data.draw(st.integers(1, 3))
    qs = [
        dict(
            id=f"q{i}",
            aggregate=data.draw(st.sampled_from(AGGS)),
            range=data.draw(st.integers(1, 30)),
            slide=data.draw(st.integers(1, 9)),
        )
        for i in range(nq)
    ]
    other = (data.draw(st.integers(1, 30)), data.draw(st.integers(1, 12)))
    classes = edge_classes(sorted({(q["range"], q["slide"]) for q in qs} | {other}))
    n = data.draw(st.integers(1, 80))
    ts = np.sort(
        np.array(data.draw(st.lists(st.integers(-20, 200), min_size=n, max_size=n)), dtype=np.int64)
    )
    v = np.array(
        data.draw(st.lists(st.integers(-1000, 1000), min_size=n, max_size=n)), dtype=np.int64
    )
    tech = data.draw(st.sampled_from(["slickdeque", "panes", "flatfat", "flatfit", "bint"]))
    want = run(ExecutionTree(qs, technique=tech), ts, v, [0, n])[1]
    sl = slice_aggregates(ts, v, classes)
    k = sl["slice_start"].shape[0]
    cut = data.draw(st.integers(0, k))
    tree = SlicedExecutionTree(qs, technique=tech, slicing="cutty")
    got = rows(tree.process_slices({c: a[:cut] for c, a in sl.items()}))
    tree = SlicedExecutionTree.restore(tree.snapshot())
    assert tree.slicing == "cutty"
    got += rows(tree.process_slices({c: a[cut:] for c, a in sl.items()})) + rows(tree.flush())
    assert_same(got, want, 1000.0)
    if all(q["aggregate"] in ("sum", "count", "min", "max", "range") for q in qs):
        assert got == want


def test_cutty_long_composite_slide_bounds_and_lazy_lengths():
    """Coprime slides (composite slide ~1e12): Cutty's window lengths fall back to a bound and
    SlickDeque Inv registers lengths lazily, as under Pairs; answers still the oracle's."""
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
        tree, got = run(
            ExecutionTree(qs, technique=tech, slicing="cutty"),
            ts,
            v,
            list(range(0, 300, 37)) + [300],
        )
        assert not tree.stats()["exact_wsize"]
        assert_same(got, want, 100.0)


def test_cutty_can_cost_slickdeque_inv_more_on_a_woven_tree():
    """Fewer slices is not always less work: (10, 3) and (7, 2) woven.  Pairs cuts every
    position (0/1 mod 3, 0/1 mod 2) and each query keeps one length (10 and 7: 4 ops per
    slice, 24 per composite slide of 6).  Cutty cuts at 0, 2, 3, 4 mod 6 (4 slices) but the
    lengths (complete slices) vary: {6, 7} and {4, 5} (8 ops per slice), plus 3 combines with
    the open partial per period (ends at 1 mod 6 for both queries, 5 mod 6 for (7, 2)): 35 per
    period.  (`CostModel(..., slicing="cutty")` prices this: tests/placement/test_cutty.py.)"""
    wins = [(10, 3), (7, 2)]
    assert window_lengths(wins) == {(7, 2): (7,), (10, 3): (10,)}
    assert window_lengths(wins, "cutty") == {(7, 2): (4, 5), (10, 3): (6, 7)}
    qs = [dict(id=f"q{i}", aggregate="sum", range=r, slide=s) for i, (r, s) in enumerate(wins)]
    ts = np.arange(6000)
    om = {}
    for slicing in ("pairs", "cutty"):
        tree = ExecutionTree(qs, technique="slickdeque_inv", slicing=slicing, count_ops=True)
        tree.process(ts, ts)
        om[slicing] = tree.op_counts()["omega"]
    assert om["pairs"] == 4.0
    assert om["cutty"] == pytest.approx(35 / 4, abs=0.005)
