"""Slicing into residue classes, docs/DESIGN.md s. 2 test vectors, and query validation.

Every test vector is checked with all three edge engines and with the brute-force oracle, and the
edge positions themselves are listed by hand where the vector is small enough to do so.
"""

from __future__ import annotations

from fractions import Fraction
from math import lcm

import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.edges import ENGINES, get_engine, weaveability
from placement.queries import Query, QueryError, query_from_mapping, validate_unique
from placement.slicing import (
    brute_force_edges,
    compatible,
    composite_slide,
    crt_merge,
    distinct_window_lengths,
    query_classes,
    tree_classes,
    window_lengths,
)


def positions(classes, period):
    """Edge positions in ``[0, period)``, listed independently of the code under test."""
    return {t for t in range(period) for m, r in classes if t % m == r}


# ---- query_classes -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "r, s, expected",
    [
        (12, 4, {(4, 0)}),  # r mod s == 0: one edge per slide
        (10, 6, {(6, 0), (6, 4)}),  # two fragments g1 = 4, g2 = 2
        (3, 5, {(5, 0), (5, 3)}),  # r < s (hopping window with gaps) is legal
        (5, 5, {(5, 0)}),  # tumbling
        (1, 1, {(1, 0)}),  # every position is an edge
    ],
)
def test_query_classes(r, s, expected):
    assert query_classes(Query("q", r, s)) == frozenset(expected)


def test_tree_classes_is_union_and_composite_slide_is_lcm():
    qs = [Query("a", 12, 9), Query("b", 10, 6), Query("c", 18, 9)]
    assert tree_classes(qs) == {(9, 0), (9, 3), (6, 0), (6, 4)}
    assert composite_slide(q.slide for q in qs) == 18
    assert composite_slide([2, 3, 4, 5, 6]) == 60


def test_brute_force_oracle_small_case():
    # (2, 0) and (3, 0) in 6: positions 0, 2, 3, 4.
    assert brute_force_edges({(2, 0), (3, 0)}) == 4
    assert brute_force_edges({(2, 0), (3, 0)}, period=12) == 8
    assert brute_force_edges(set()) == 0


# ---- docs/DESIGN.md s. 2 test vectors, every engine ---------------------------------------------


@pytest.fixture(params=ENGINES)
def engine(request):
    return get_engine(request.param)


def test_vector_slides_2_to_6_multiples(engine):
    qs = [Query(f"q{s}", 3 * s, s) for s in (2, 3, 4, 5, 6)]  # r mod s == 0
    cls = tree_classes(qs)
    assert cls == {(s, 0) for s in (2, 3, 4, 5, 6)}
    count = engine.count(cls)
    assert (count.edges, count.composite_slide) == (44, 60)
    assert count.rate == Fraction(44, 60)
    assert brute_force_edges(cls) == 44
    assert len(positions(cls, 60)) == 44


def test_vector_slides_3_4_6_9_with_fragments(engine):
    # r mod 4 == 3, r mod 6 == 2, slides 3 and 9 without fragments.
    qs = [Query("s3", 3, 3), Query("s4", 7, 4), Query("s6", 8, 6), Query("s9", 18, 9)]
    cls = tree_classes(qs)
    assert cls == {(3, 0), (4, 0), (4, 3), (6, 0), (6, 2), (9, 0)}
    count = engine.count(cls)
    assert (count.edges, count.composite_slide) == (27, 36)
    assert brute_force_edges(cls) == 27
    assert len(positions(cls, 36)) == 27


def test_vector_qa_qb_weaveability(engine):
    qa, qb = Query("a", 12, 9), Query("b", 10, 6)
    # By hand, in [0, 18): q_a edges 0, 3, 9, 12; q_b edges 0, 4, 6, 10, 12, 16.
    assert positions(query_classes(qa), 18) == {0, 3, 9, 12}
    assert positions(query_classes(qb), 18) == {0, 4, 6, 10, 12, 16}
    w = weaveability([qa], [qb], engine=engine)
    assert w.composite_slide == 18
    assert (w.edges_x, w.edges_y) == (4, 6)
    assert w.common == 2
    assert w.distinct == 8
    assert w.value == Fraction(1, 4)
    assert float(w.value) == 0.25
    count = engine.count(tree_classes([qa, qb]))
    assert (count.edges, count.composite_slide) == (8, 18)


@pytest.mark.parametrize("rx", [2, 7, 12, 27])  # r mod 5 == 2 (including r < s)
@pytest.mark.parametrize("ry", [3, 6, 15])  # r mod 3 == 0
def test_vector_qx_qy(engine, rx, ry):
    qx, qy = Query("x", rx, 5), Query("y", ry, 3)
    w = weaveability([qx], [qy], engine=engine)
    assert w.composite_slide == 15
    assert (w.edges_x, w.edges_y) == (6, 5)
    assert w.common == 2  # positions 0 and 12
    assert w.distinct == 9
    assert w.value == Fraction(2, 9)
    assert positions(query_classes(qx), 15) & positions(query_classes(qy), 15) == {0, 12}
    count = engine.count(tree_classes([qx, qy]))
    assert (count.edges, count.composite_slide) == (9, 15)


def test_weaveability_identical_trees_is_one_and_disjoint_is_zero():
    q = Query("a", 7, 5)
    w = weaveability([q], [Query("b", 12, 5)])  # same classes {(5,0),(5,2)}
    assert (w.common, w.distinct, w.value) == (2, 2, Fraction(1))
    # (r 2, s 2) has edges 0, 2 in [0, 4); (r 5, s 4) has edges 0, 1: only 0 is common.
    w = weaveability([Query("c", 2, 2)], [Query("d", 5, 4)])
    assert w.composite_slide == 4
    assert (w.edges_x, w.edges_y, w.common) == (2, 2, 1)
    assert w.value == Fraction(1, 3)


# ---- query validation ---------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["range", "slide"])
@pytest.mark.parametrize("bad", [0, -3, 2.5, 4.0, "5", None, True, False])
def test_query_rejects_bad_range_and_slide(field, bad):
    kwargs = {"range": 10, "slide": 5, field: bad}
    with pytest.raises(QueryError) as info:
        Query("q7", **kwargs)
    msg = str(info.value)
    assert field in msg
    assert repr(bad) in msg
    assert "'q7'" in msg


def test_query_error_is_value_error():
    assert issubclass(QueryError, ValueError)


def test_query_rejects_unknown_aggregate_and_kind():
    with pytest.raises(QueryError, match=r"unknown aggregate 'median'") as info:
        Query("q1", 10, 5, aggregate="median")
    assert "allowed" in str(info.value) and "sum" in str(info.value)
    with pytest.raises(QueryError, match=r"unknown kind 'rows'"):
        Query("q1", 10, 5, kind="rows")


def test_query_rejects_empty_id_and_stream():
    with pytest.raises(QueryError, match="id"):
        Query("", 10, 5)
    with pytest.raises(QueryError, match="stream"):
        Query("q", 10, 5, stream="")


def test_query_accepts_hopping_and_tumbling_and_fragment():
    assert Query("h", 3, 10).fragment == 3
    assert Query("t", 10, 10).fragment == 0
    assert Query("p", 10, 6).fragment == 4


def test_query_from_mapping_builds_query_with_defaults():
    q = query_from_mapping({"id": "q1", "range": 10000, "slide": 2000})
    assert q == Query("q1", 10000, 2000, "sum", "s0", "time")
    q = query_from_mapping(
        {"id": 5, "range": 7, "slide": 3, "aggregate": "max", "stream": "mf01", "kind": "count"}
    )
    assert q == Query("5", 7, 3, "max", "mf01", "count")


@pytest.mark.parametrize(
    "raw",
    [
        {"range": 5, "slide": 5},
        {"id": None, "range": 5, "slide": 5},
        {"id": "", "range": 5, "slide": 5},
    ],
)
def test_query_from_mapping_missing_id(raw):
    with pytest.raises(QueryError, match=r"queries\[3\]: missing id"):
        query_from_mapping(raw, 3)
    with pytest.raises(QueryError, match="missing id"):
        query_from_mapping(raw)


def test_query_from_mapping_other_errors_name_the_entry():
    with pytest.raises(QueryError, match=r"queries\[0\] \('q1'\): missing slide"):
        query_from_mapping({"id": "q1", "range": 5}, 0)
    with pytest.raises(QueryError, match=r"unknown key\(s\) \['rnage'\]"):
        query_from_mapping({"id": "q1", "rnage": 5, "slide": 5}, 0)
    with pytest.raises(QueryError, match="expected a mapping"):
        query_from_mapping(["q1", 5, 5], 0)
    with pytest.raises(QueryError, match=r"slide must be an integer >= 1, got 0"):
        query_from_mapping({"id": "q1", "range": 5, "slide": 0}, 0)


def test_validate_unique():
    qs = [Query("a", 5, 5), Query("b", 6, 5)]
    assert validate_unique(iter(qs)) == qs
    with pytest.raises(QueryError, match=r"duplicate query id 'a'"):
        validate_unique(qs + [Query("a", 9, 3)])


# ---- CRT merge against brute force -------------------------------------------------------------


@st.composite
def residue_class(draw, max_mod=30):
    m = draw(st.integers(1, max_mod))
    return (m, draw(st.integers(0, m - 1)))


@settings(max_examples=examples(500))
@given(residue_class(), residue_class())
def test_crt_merge_matches_brute_force(a, b):
    period = lcm(a[0], b[0])
    both = {t for t in range(period) if t % a[0] == a[1] and t % b[0] == b[1]}
    merged = crt_merge(a, b)
    assert compatible(a, b) == bool(both)
    if not both:
        assert merged is None
    else:
        m, r = merged
        assert m == period and 0 <= r < m
        assert both == {r}  # exactly one common position per lcm
    assert crt_merge(b, a) == merged


# ---- window lengths (SlickDeque Inv's running aggregates, Cutty's slices per window) ----------


def brute_window_lengths(wins, slicing):
    """Slices per window from the definition: Pairs counts cuts t % s in {0, r % s} in
    [x, x + r); Cutty counts window starts in (x, x + r] (complete slices before the end)."""
    period = lcm(*(s for _, s in wins))

    def cut(t):
        return any(t % s == 0 or (slicing == "pairs" and t % s == r % s) for r, s in wins)

    out = {}
    for r, s in set(wins):
        span = range(0, r) if slicing == "pairs" else range(1, r + 1)
        out[(r, s)] = tuple(
            sorted({sum(cut(x + d) for d in span) for x in range(-2 * s, period + 2 * s, s)})
        )
    return out


@settings(max_examples=examples(150))
@given(
    wins=st.lists(st.tuples(st.integers(1, 40), st.integers(1, 9)), min_size=1, max_size=4),
    slicing=st.sampled_from(["pairs", "cutty"]),
)
def test_window_lengths_match_definition(wins, slicing):
    assert window_lengths(wins, slicing) == brute_window_lengths(wins, slicing)


def test_window_lengths_vectors_budget_and_errors():
    # a lone query: Pairs 2*floor(r/s)+1 slices when r % s != 0 (dissertation Table 1); Cutty
    # floor(r/s) complete slices plus the open one: ceil(r/s) partials
    assert window_lengths([(14, 8)]) == {(14, 8): (3,)}
    assert window_lengths([(14, 8)], "cutty") == {(14, 8): (1,)}
    assert window_lengths([(3, 8)], "cutty") == {(3, 8): (0,)}
    assert window_lengths([(16, 4), (10, 5), (8, 4)]) == {
        (8, 4): (2, 3, 4),
        (10, 5): (4,),
        (16, 4): (6, 7),
    }
    assert distinct_window_lengths([(16, 4), (10, 5), (8, 4)]) == 5
    # a composite slide of 997 * 991 * 983: over budget, refused (not guessed)
    assert window_lengths([(2500, 997), (1500, 991), (2949, 983)]) is None
    assert window_lengths([(2500, 997), (1500, 991)], limit=10**7) is not None
    with pytest.raises(ValueError, match="unknown slicing 'panes'"):
        window_lengths([(4, 2)], "panes")
    with pytest.raises(ValueError, match="integers >= 1"):
        window_lengths([(0, 2)])
    with pytest.raises(ValueError, match="at least one"):
        window_lengths([])
