"""Edges, slices and window lengths (docs/DESIGN.md s. 2 test vectors)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from executors.slicing import (
    edge_classes,
    edges_between,
    first_cover_end,
    floor_edge,
    next_edge,
    normalize_query,
    pairs_partials,
    window_lengths,
)
from placement.slicing import composite_slide


def edges_in_period(classes, L):
    return set(edges_between(classes, 0, L).tolist())


def test_design_vector_slides_2_to_6():
    rs = [(s, s) for s in (2, 3, 4, 5, 6)]
    cl = edge_classes(rs)
    L = composite_slide(s for _, s in rs)
    assert L == 60
    assert len(edges_in_period(cl, L)) == 44


def test_design_vector_fragments():
    # slides 3, 4, 6, 9 with r mod 4 == 3 and r mod 6 == 2
    rs = [(3, 3), (7, 4), (8, 6), (9, 9)]
    cl = edge_classes(rs)
    assert composite_slide(s for _, s in rs) == 36
    assert len(edges_in_period(cl, 36)) == 27


def test_design_vector_weavability():
    a = edges_in_period(edge_classes([(12, 9)]), 18)
    b = edges_in_period(edge_classes([(10, 6)]), 18)
    assert len(a | b) == 8 and len(a & b) == 2
    x = edges_in_period(edge_classes([(7, 5)]), 15)
    y = edges_in_period(edge_classes([(3, 3)]), 15)
    assert (len(x), len(y), len(x & y), len(x | y)) == (6, 5, 2, 9)


@settings(max_examples=examples(60))
@given(r=st.integers(1, 40), s=st.integers(1, 12))
def test_lone_query_partials_match_pairs_formula(r, s):
    """Dissertation Table 1 (Pairs): r/s partials, or 2*floor(r/s)+1 when r % s != 0."""
    wsize, ns, exact = window_lengths([(r, s)], edge_classes([(r, s)]))
    assert exact and ns[(r, s)] == (pairs_partials(r, s),) and wsize == pairs_partials(r, s)


@settings(max_examples=examples(60))
@given(
    qs=st.lists(st.tuples(st.integers(1, 30), st.integers(1, 8)), min_size=1, max_size=4),
    t=st.integers(-100, 100),
)
def test_edges_helpers_agree_with_definition(qs, t):
    cl = edge_classes(qs)
    brute = [e for e in range(t - 300, t + 300) if any(e % s == 0 or e % s == r % s for r, s in qs)]
    assert edges_between(cl, t - 300, t + 300).tolist() == brute
    assert floor_edge(cl, t) == max(e for e in brute if e <= t)
    assert next_edge(cl, t) == min(e for e in brute if e > t)
    # earliest end of a window containing t
    ends = [
        k * s + r
        for r, s in qs
        for k in range((t - r) // s - 1, t // s + 2)
        if k * s <= t < k * s + r
    ]
    got = int(first_cover_end(qs, np.array([t]))[0])
    assert got == (min(ends) if ends else np.iinfo(np.int64).max)


@settings(max_examples=examples(40))
@given(qs=st.lists(st.tuples(st.integers(1, 30), st.integers(1, 8)), min_size=1, max_size=4))
def test_window_lengths_cover_every_window(qs):
    qs = sorted(set(qs))
    cl = edge_classes(qs)
    wsize, ns, exact = window_lengths(qs, cl)
    assert exact
    edges = edges_between(cl, -200, 400)
    for r, s in qs:
        seen = set()
        for k in range(0, 30):
            a, b = k * s, k * s + r
            seen.add(int(((edges >= a) & (edges < b)).sum()))
        assert seen <= set(ns[(r, s)]) and max(ns[(r, s)]) <= wsize


@settings(max_examples=examples(60))
@given(
    qs=st.lists(st.tuples(st.integers(1, 60), st.integers(1, 12)), min_size=1, max_size=6),
    cells=st.integers(1, 40),
)
def test_length_bounds_are_the_formula_and_bound_every_window(qs, cells):
    """The bound window sets too large to scan use: ``min(r, sum over classes of
    ceil(r / s2))``, computed in numpy blocks of ``cells`` numbers, against the formula and
    against the edges that fall in windows on the real edge grid."""
    from executors.edges import length_bounds

    qs = sorted(set(qs))
    cl = edge_classes(qs)
    got = length_bounds(qs, cl, cells)
    assert got == [min(r, sum(-(-r // s2) for s2, _ in cl)) for r, _ in qs]
    edges = edges_between(cl, -200, 600)
    for (r, s), b in zip(qs, got):
        for k in range(0, 20):
            assert int(((edges >= k * s) & (edges < k * s + r)).sum()) <= b


def test_normalize_query_accepts_dicts_and_objects():
    class Q:
        id, aggregate, range, slide, kind = "q", "MAX", 5, 3, "count"

    q = normalize_query(Q())
    assert (q.id, q.aggregate.name, q.range, q.slide, q.kind) == ("q", "max", 5, 3, "count")
    q = normalize_query({"id": 1, "aggregate": "avg", "range": 2, "slide": 7})
    assert q.kind == "time" and q.id == "1"
    with pytest.raises(ValueError, match="slide must be an integer >= 1"):
        normalize_query({"id": "x", "aggregate": "sum", "range": 2, "slide": 0})
    with pytest.raises(ValueError, match="unknown aggregate"):
        normalize_query({"id": "x", "aggregate": "median", "range": 2, "slide": 1})
    with pytest.raises(ValueError, match="kind"):
        normalize_query({"id": "x", "aggregate": "sum", "range": 2, "slide": 1, "kind": "rows"})


@settings(max_examples=examples(50))
@given(st.lists(st.tuples(st.integers(1, 6), st.integers(1, 4)), min_size=1, max_size=40))
def test_slicer_groups_the_queries_of_each_window_in_query_order(windows):
    """``StreamSlicer.rs`` / ``rs_queries``: the distinct (r, s) sorted, each with the indices
    of its queries in query order (the oracle: one scan per window)."""
    from executors.slicing import StreamSlicer

    qs = [
        normalize_query({"id": f"q{i}", "aggregate": "sum", "range": r, "slide": s})
        for i, (r, s) in enumerate(windows)
    ]
    sl = StreamSlicer(qs, [])
    want_rs = sorted(set(windows))
    assert sl.rs == want_rs
    assert list(sl.rs_queries) == want_rs
    for rs in want_rs:
        want = [i for i, q in enumerate(qs) if (q.range, q.slide) == rs]
        assert sl.rs_queries[rs].tolist() == want
        assert sl.rs_queries[rs].dtype == np.int64
    # the flat form the kernels read: per window r, s, #queries, offset, then the indices
    g_r, g_s, g_nq, g_off, g_q = sl._groups
    assert list(zip(g_r.tolist(), g_s.tolist())) == want_rs
    flat = [i for rs in want_rs for i, q in enumerate(qs) if (q.range, q.slide) == rs]
    assert g_q.tolist() == flat
    counts = [len(sl.rs_queries[rs]) for rs in want_rs]
    assert g_nq.tolist() == counts and g_off.tolist() == np.cumsum([0, *counts[:-1]]).tolist()
    assert all(a.dtype == np.int64 for a in sl._groups)


@settings(max_examples=examples(40))
@given(
    st.lists(
        st.tuples(st.integers(1, 30), st.integers(1, 8)), min_size=1, max_size=10, unique=True
    ),
    st.sampled_from(["pairs", "cutty"]),
)
def test_kept_window_lengths_are_the_scans_and_each_caller_gets_its_own_dict(windows, slicing):
    """``executors.edges.window_lengths`` keeps the exact scan per window set: the same as
    ``placement.slicing.window_lengths``, and a caller changing its dict changes no later
    caller's (the lengths are tuples: nobody changes them)."""
    from executors.edges import EXACT_SCAN_LIMIT
    from executors.edges import window_lengths as kept
    from placement.slicing import window_lengths as scan

    rs = sorted(windows)
    classes = edge_classes(rs)
    want = scan(rs, slicing, EXACT_SCAN_LIMIT)
    _, got, exact = kept(rs, classes, slicing)
    if want is None:
        assert not exact
        return
    assert exact and got == want and all(isinstance(v, tuple) for v in got.values())
    got.clear()
    assert kept(rs, classes, slicing)[1] == want


def test_kept_bounds_give_each_caller_its_own_lists():
    """A window set too large to scan gets bounds (kept as the exact scans are) and empty
    length lists that SlickDeque Inv fills: one caller's lists are not the next caller's."""
    from executors.edges import window_lengths as kept

    rs = [(2500, 997), (1500, 991), (2949, 983)]  # composite slide ~9.7e8: no exact scan
    classes = edge_classes(rs)
    wsize, got, exact = kept(rs, classes)
    assert not exact and got == {w: [] for w in rs} and wsize >= 1
    got[rs[0]].append(7)
    assert kept(rs, classes) == (wsize, {w: [] for w in rs}, False)
