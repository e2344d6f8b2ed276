"""``weaveplace bench live-scale``'s pieces that need no Ray: its brute force against the exact
oracle (``executors.oracle``) on small random streams, and its workload's shape."""

from __future__ import annotations

import numpy as np
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from executors.oracle import brute_force
from sim.bench.live_scale import AGGS, STREAMS, scale_queries, window_answers


@settings(max_examples=examples(60))
@given(
    gaps=st.lists(st.integers(0, 7), min_size=1, max_size=60),
    vals=st.lists(st.integers(-50, 50), min_size=60, max_size=60),
    r=st.integers(1, 20),
    s=st.integers(1, 9),
    agg=st.sampled_from(AGGS),
    t0=st.integers(-30, 30),
)
def test_window_answers_equal_the_exact_oracle(gaps, vals, r, s, agg, t0):
    ts = t0 + np.cumsum(np.array(gaps, dtype=np.int64))
    v = np.array(vals[: len(ts)], dtype=np.int64)
    q = {"id": "q", "range": r, "slide": s, "aggregate": agg}
    want, late = brute_force([q], ts, v)
    assert late == []
    got = window_answers(q, ts, v)
    assert got == {ws: float(val) for _, ws, we, val in want}
    assert all(we == ws + r for _, ws, we, _ in want)


def test_scale_queries_are_seconds_windows_over_the_debs_streams():
    qs = scale_queries(3000)
    assert len({q["id"] for q in qs}) == 3000
    assert {q["stream"] for q in qs} == set(STREAMS)
    assert {q["aggregate"] for q in qs} == set(AGGS)
    for q in qs:
        assert q["slide"] % 1000 == 0 and 1000 <= q["slide"] <= 100_000
        assert q["range"] % q["slide"] == 0 and q["slide"] <= q["range"] <= 10 * q["slide"]
    assert scale_queries(3000) == qs  # seeded
    assert [q["id"] for q in scale_queries(2, prefix="add")] == ["add0", "add1"]
