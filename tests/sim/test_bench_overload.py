"""``weaveplace bench overload``'s brute force: one numpy reduction per window, checked
against the exact section 9 oracle (``executors.churn_oracle``) on small random inputs."""

from __future__ import annotations

import numpy as np
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from executors.churn_oracle import registered_answers
from sim.bench.overload import _window_answers


@settings(max_examples=examples(80))
@given(
    seed=st.integers(0, 10_000),
    r=st.integers(1, 40),
    s=st.integers(1, 15),
    agg=st.sampled_from(["sum", "max", "min", "avg", "count"]),
    n=st.integers(0, 60),
)
def test_window_answers_are_the_oracles(seed, r, s, agg, n):
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(-30, 200, n))
    vals = rng.normal(100, 30, n).round(3)
    q = {"id": "q", "stream": "x", "aggregate": agg, "range": r, "slide": s, "kind": "time"}
    got = _window_answers(q, ts, vals)
    want = registered_answers([(q, None, None)], ts, vals)
    assert [g[:3] for g in got] == [w[:3] for w in want]
    np.testing.assert_allclose([g[3] for g in got], [float(w[3]) for w in want], rtol=1e-12)
