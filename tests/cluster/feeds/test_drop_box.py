"""Drop boxes: the vectorised mask equals the scalar definition tuple by tuple, keeps about
the fraction asked, is the same on every call, and nests (a tuple kept at x is kept at every
fraction above x)."""

from __future__ import annotations

import numpy as np
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.feeds.drop_box import keep_mask, keep_one


@settings(max_examples=examples(80))
@given(
    ts=st.lists(st.integers(-(2**40), 2**45), min_size=1, max_size=40),
    keep=st.floats(0.0, 1.0),
)
def test_the_mask_is_the_definition(ts, keep):
    ts_a = np.array(ts, dtype=np.int64)
    idx = np.arange(len(ts), dtype=np.int64) * 7 + 3
    got = keep_mask(ts_a, idx, keep)
    want = [keep_one(int(t), int(i), keep) for t, i in zip(ts_a, idx)]
    assert got.tolist() == want


def test_fractions_are_kept_and_nest():
    rng = np.random.default_rng(5)
    ts = np.sort(rng.integers(0, 10**9, 200_000))
    idx = np.arange(len(ts))
    prev = None
    for x in (0.1, 1 / 3, 0.5, 0.9):
        m = keep_mask(ts, idx, x)
        assert abs(m.mean() - x) < 0.01
        assert (m == keep_mask(ts, idx, x)).all()
        if prev is not None:
            assert (m | ~prev).all()  # kept at a smaller fraction: kept here too
        prev = m
    # rows sharing a timestamp (index apart) are chosen independently
    same = keep_mask(np.zeros(100_000, np.int64), np.arange(100_000), 0.5)
    assert abs(same.mean() - 0.5) < 0.01
    assert keep_mask(ts, idx, 1.0).all() and not keep_mask(ts, idx, 0.0).any()
