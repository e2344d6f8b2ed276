"""Aggregates: monoid laws, flags, exactness and drift."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from executors.aggregates import (
    AGGREGATES,
    OP_SUM,
    Primitive,
    get_aggregate,
    require_invertible,
    require_selective,
)
from executors.slickdeque_inv import SlickDequeInv

ints = st.integers(-(10**6), 10**6)


@settings(max_examples=examples(50))
@given(xs=st.lists(ints, min_size=1, max_size=12), cut=st.integers(0, 12))
def test_monoid_laws_and_lower(xs, cut):
    for agg in AGGREGATES.values():
        lifted = [agg.lift(x) for x in xs]
        left = agg.identity()
        for v in lifted:
            left = agg.combine(left, v)
        # associativity: fold of two halves combined equals the fold of all
        cut_ = min(cut, len(xs))
        a, b = agg.identity(), agg.identity()
        for v in lifted[:cut_]:
            a = agg.combine(a, v)
        for v in lifted[cut_:]:
            b = agg.combine(b, v)
        assert agg.combine(a, b) == left
        if agg.has_inverse and cut_ < len(xs):
            assert agg.inverse(left, a) == b
        expect = {
            "sum": sum(xs),
            "count": len(xs),
            "min": min(xs),
            "max": max(xs),
            "range": max(xs) - min(xs),
            "avg": sum(xs) / len(xs),
            "stddev": float(np.std(np.array(xs, dtype=np.float64))),
        }[agg.name]
        assert agg.lower(left) == pytest.approx(expect, rel=1e-12, abs=1e-9)


def test_flags():
    sel = {n for n, a in AGGREGATES.items() if a.selective}
    inv = {n for n, a in AGGREGATES.items() if a.invertible}
    assert sel == {"min", "max", "range"}
    assert inv == {"sum", "count", "avg", "stddev"}
    for name in sorted(AGGREGATES):
        agg = get_aggregate(name)
        if not agg.selective:
            with pytest.raises(ValueError, match=repr(name)):
                require_selective(agg)
        if not agg.invertible:
            with pytest.raises(ValueError, match=repr(name)):
                require_invertible(agg, "slickdeque_inv")
            with pytest.raises(ValueError, match="not invertible"):
                agg.inverse(agg.identity(), agg.identity())
    assert get_aggregate("MEAN").name == "avg" and get_aggregate("std").name == "stddev"


def test_float_running_sum_does_not_drift():
    """Subtract-on-evict over 200k slices of wildly mixed magnitudes stays exact-ish."""
    rng = np.random.default_rng(7)
    n, W = 200_000, 37
    mag = 10.0 ** rng.integers(-6, 12, n)
    x = rng.normal(0, 1, n) * mag
    prim = Primitive(OP_SUM, "v", "f8")
    agg = SlickDequeInv(prim, W, known_ns=[W])
    oh, ol, _ = agg.run(x, np.zeros(n), np.arange(n + 1), np.full(n, W))
    got = oh + ol
    for j in range(n - 2000, n, 97):
        want = math.fsum(x[j - W + 1 : j + 1])
        scale = np.abs(x[j - W + 1 : j + 1]).max()
        assert abs(got[j] - want) <= 1e-9 * abs(want) + 1e-15 * scale


def test_int_sums_are_exact_beyond_2_pow_53():
    big = 2**60
    x = np.array([big, 1, -big, 3, big, 7], dtype=np.int64)
    agg = SlickDequeInv(Primitive(OP_SUM, "v", "i8"), 2, known_ns=[2])
    oh, _, _ = agg.run(x, 0 * x, np.arange(7), np.full(6, 2))
    assert oh.tolist() == [big, big + 1, 1 - big, 3 - big, big + 3, big + 7]


def test_executors_never_import_ray_or_pyspark():
    import subprocess
    import sys

    code = (
        "import sys, executors, sim.bench.executors, executors.tree; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('ray', 'pyspark')]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
