"""Final-aggregation techniques: brute force equality, worked examples, operation counts."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from executors.aggregates import OP_MAX, OP_MIN, OP_SUM, Primitive
from executors.base import TECHNIQUES
from executors.daba import DABA
from executors.flatfit import FlatFIT
from executors.panes import Panes
from executors.panes_inv import PanesInv
from executors.slickdeque_inv import SlickDequeInv
from executors.slickdeque_noninv import SlickDequeNonInv
from executors.twostacks import TwoStacks

MAX_I = Primitive(OP_MAX, "v", "i8")
SUM_I = Primitive(OP_SUM, "v", "i8")


def steps(agg, values, ns):
    """Feed one partial per step, ask windows of ``ns`` partials; answers and ops per step."""
    answers, ops = [], []
    for x in values:
        oh, _, o = agg.run(
            np.array([x]), np.array([0]), np.array([0, len(ns)]), np.array(ns), count_ops=True
        )
        answers.append(oh.tolist())
        ops.append(int(o[0]))
    return answers, ops


def compatible(cls, op):
    return not (
        (cls.requires_inverse and op != OP_SUM) or (cls.requires_selective and op == OP_SUM)
    )


def brute(vals, j, n, op):
    w = vals[max(0, j - n + 1) : j + 1]
    return {OP_SUM: np.sum, OP_MIN: np.min, OP_MAX: np.max}[op](w)


@settings(max_examples=examples(40))
@given(
    data=st.data(),
    op=st.sampled_from([OP_SUM, OP_MIN, OP_MAX]),
    W=st.integers(1, 17),
    N=st.integers(1, 120),
)
def test_every_technique_equals_brute_force(data, op, W, N):
    """Random window lengths per slice (multi-query) or the single length, random chunks."""
    vals = np.array(
        data.draw(st.lists(st.integers(-1000, 1000), min_size=N, max_size=N)), dtype=np.int64
    )
    prim = Primitive(op, "v", "i8")
    # per slice: 0..3 windows with random n, sorted descending (the interface contract)
    due = [
        sorted(data.draw(st.lists(st.integers(1, W), max_size=3)), reverse=True) for _ in range(N)
    ]
    ptr = np.concatenate([[0], np.cumsum([len(d) for d in due])]).astype(np.int64)
    ns = np.array([n for d in due for n in d], dtype=np.int64)
    single_ptr = np.arange(N + 1, dtype=np.int64)
    single_ns = np.full(N, W, dtype=np.int64)
    cuts = sorted(set(data.draw(st.lists(st.integers(0, N), max_size=4))) | {0, N})
    for cls in TECHNIQUES.values():
        if not compatible(cls, op):
            continue
        p, n_ = (ptr, ns) if cls.multi_query else (single_ptr, single_ns)
        agg = cls(prim, W)
        got = []
        for a, b in zip(cuts[:-1], cuts[1:]):
            oh, _, _ = agg.run(
                vals[a:b], np.zeros(b - a, np.int64), p[a : b + 1] - p[a], n_[p[a] : p[b]]
            )
            got.extend(oh.tolist())
        want = [brute(vals, j, int(n_[q]), op) for j in range(N) for q in range(p[j], p[j + 1])]
        assert got == want, cls.name


def test_refusals_name_the_problem():
    with pytest.raises(ValueError, match="selective"):
        SlickDequeNonInv(SUM_I, 4)
    with pytest.raises(ValueError, match="invertible"):
        SlickDequeInv(MAX_I, 4)
    agg = TwoStacks(MAX_I, 4)
    with pytest.raises(ValueError, match="single window length"):
        agg.run(np.array([1]), np.array([0]), np.array([0, 1]), np.array([2]))
    with pytest.raises(ValueError, match="outside 1..wsize"):
        Panes(MAX_I, 4).run(np.array([1]), np.array([0]), np.array([0, 1]), np.array([5]))


# --------------------------------------------------------------------------- worked examples
EX34 = [2, 4, 0, 3, 7, 6, 1, 8, 9, 5]
EX56 = [6, 5, 0, 1, 3, 4, 2, 7]


def test_example3_flatfit_single_query():
    """Dissertation Example 3: Max, range 5, slide 1 tuple; FlatFIT 21 vs Panes 40 ops."""
    ans, ops = steps(FlatFIT(MAX_I, 5), EX34, [5])
    assert [a[0] for a in ans] == [2, 4, 4, 4, 7, 7, 7, 8, 9, 9]
    # step 1 wReset (4), step 2 one comparison, steps 3-5 two, 6 one, 7 wReset, 8 one, 9 two
    assert ops == [4, 1, 2, 2, 2, 1, 4, 1, 2, 2]
    assert sum(ops) == 21
    _, pops = steps(Panes(MAX_I, 5), EX34, [5])
    assert sum(pops) == 40


def test_example3_flatfit_arrays_after_step2():
    """After step 2 (Figure 10): Pointers[0] = 1 and Partials[0] = 4."""
    agg = FlatFIT(MAX_I, 5)
    steps(agg, EX34[:1], [5])
    assert agg.state["pointers"].tolist() == [1, 0, 0, 0, 0]
    assert agg.state["part_hi"][1:].tolist() == [2, 2, 2, 2]
    steps(agg, EX34[1:2], [5])
    assert agg.state["pointers"][0] == 1 and agg.state["part_hi"][0] == 4


def test_example4_flatfit_multi_query():
    """Example 4: adding Q2 (range 2) costs 0 ops at steps 1, 3, 7, 9 and 1 op otherwise."""
    ans, ops = steps(FlatFIT(MAX_I, 5), EX34, [5, 2])
    assert [a[0] for a in ans] == [2, 4, 4, 4, 7, 7, 7, 8, 9, 9]
    assert [a[1] for a in ans] == [2, 4, 4, 3, 7, 7, 6, 8, 9, 9]
    _, single = steps(FlatFIT(MAX_I, 5), EX34, [5])
    q2 = [m - s for m, s in zip(ops, single)]
    assert q2 == [0, 1, 0, 1, 1, 1, 0, 1, 0, 1]
    assert sum(q2) == 6
    _, pops = steps(Panes(MAX_I, 5), EX34, [5, 2])
    assert sum(pops) - 40 == 10  # Panes: 10 comparisons for Q2


def test_example5_slickdeque_inv():
    """Example 5: Sum over 3 and 5 tuples; answers map updated with +new -expiring."""
    agg = SlickDequeInv(SUM_I, 5, known_ns=[3, 5])
    ans, ops = steps(agg, EX56, [5, 3])
    assert [a[1] for a in ans] == [6, 11, 11, 6, 4, 8, 9, 13]  # Q1 (range 3)
    assert [a[0] for a in ans] == [6, 11, 11, 12, 15, 13, 10, 17]  # Q2 (range 5)
    assert ops == [4] * 8  # 2 operations per distinct range per slice
    assert agg.state["ring_hi"].tolist() == [4, 2, 7, 1, 3]  # Figure 20, step 8


def test_example6_slickdeque_noninv():
    """Example 6: Max over 3 and 5 tuples; deque contents and 11 vs 48 operations."""
    agg = SlickDequeNonInv(MAX_I, 5)
    deques, answers, ops = [], [], []
    for x in EX56:
        a, o = steps(agg, [x], [5, 3])
        answers.append(a[0])
        ops.append(o[0])
        deques.append(agg.deque())
    assert [a[1] for a in answers] == [6, 6, 6, 5, 3, 4, 4, 7]
    assert [a[0] for a in answers] == [6, 6, 6, 6, 6, 5, 4, 7]
    # positions are absolute slice numbers (step - 1); Figure 22 shows them mod 5
    assert deques[3] == [(0, 6), (1, 5), (3, 1)]
    assert deques[4] == [(0, 6), (1, 5), (4, 3)]
    assert deques[5] == [(1, 5), (5, 4)]
    assert deques[6] == [(5, 4), (6, 2)]
    assert deques[7] == [(7, 7)]
    assert sum(ops) == 11
    _, pops = steps(Panes(MAX_I, 5), EX56, [5, 3])
    assert sum(pops) == 48


# --------------------------------------------------------------------------- op counts
@pytest.mark.parametrize("W", [1, 4, 16, 64])
def test_twostacks_and_daba_costs(W):
    """TwoStacks: amortised 3, worst n+1 (flip); DABA: amortised 5, worst 8 (Table 2)."""
    x = np.random.default_rng(W).integers(0, 9, 4 * W + 400)
    n = x.shape[0]
    for cls, amort, worst in ((TwoStacks, 3.0, W + 3), (DABA, 5.0, 8)):
        _, _, o = cls(SUM_I, W).run(x, 0 * x, np.arange(n + 1), np.full(n, W), count_ops=True)
        steady = o[2 * W + 2 :]
        assert abs(steady.mean() - amort) < 0.05 + 2.0 / W, cls.name
        assert o.max() <= worst, cls.name


def test_panes_inv_two_ops_and_flatfit_amortised_three():
    x = np.arange(1000)
    _, _, o = PanesInv(SUM_I, 8).run(x, 0 * x, np.arange(1001), np.full(1000, 8), count_ops=True)
    assert set(o.tolist()) == {2}
    W = 16
    _, _, o = FlatFIT(MAX_I, W).run(x, 0 * x, np.arange(1001), np.full(1000, W), count_ops=True)
    # one wReset (W-1 ops) every W+1 slices; 2 ops on W-2 of them, 1 op on the other 2
    period = o[W + 1 : 2 * (W + 1)]
    assert sorted(period.tolist()) == sorted([W - 1] + [1, 1] + [2] * (W - 2))


@settings(max_examples=examples(40))
@given(data=st.data(), op=st.sampled_from([OP_SUM, OP_MIN, OP_MAX]), W=st.integers(1, 13))
def test_answer_between_inserts_equals_brute_force(data, op, W):
    """``answer`` (no insert; what Cutty slicing asks between two slices) interleaved with
    ``run``: every answer is the fold of the last n inserted partials (identity before the
    first), for every technique, and leaves the state fit for the following inserts."""
    prim = Primitive(op, "v", "i8")
    steps_ = data.draw(
        st.lists(st.tuples(st.booleans(), st.integers(0, 5)), min_size=1, max_size=12)
    )
    ident = {OP_SUM: 0, OP_MIN: np.iinfo(np.int64).max, OP_MAX: np.iinfo(np.int64).min}[op]
    f = {OP_SUM: sum, OP_MIN: min, OP_MAX: max}[op]
    for cls in TECHNIQUES.values():
        if not compatible(cls, op):
            continue
        rng = np.random.default_rng(W)
        agg, vals = cls(prim, W), []
        for ins, k in steps_:
            if ins:
                x = rng.integers(-50, 50, k)
                ns = np.full(k, W) if not cls.multi_query else rng.integers(1, W + 1, k)
                oh, _, _ = agg.run(x, 0 * x, np.arange(k + 1), ns)
                for j in range(k):
                    vals.append(int(x[j]))
                    assert oh[j] == f([ident] + vals[-int(ns[j]) :]), cls.name
            else:
                ns = (
                    np.full(k, W)
                    if not cls.multi_query
                    else np.sort(rng.integers(1, W + 1, k))[::-1]
                )
                oh, _, _ = agg.answer(ns)
                want = [f([ident] + vals[-int(n) :]) if vals else ident for n in ns]
                assert oh.tolist() == want, cls.name


def test_answer_operation_counts():
    """Between inserts: Panes n - 1, SlickDeque Inv 0 for a known length (n - 1 to register a
    new one), SlickDeque Non-Inv 0 (position comparisons only), TwoStacks / DABA 1."""
    x = np.arange(1, 9)
    ptr = np.arange(9)
    counts = {}
    for cls in (Panes, SlickDequeInv, TwoStacks, DABA, PanesInv):
        a = cls(SUM_I, 4, known_ns=[4])
        a.run(x, 0 * x, ptr, np.full(8, 4))
        oh, _, c = a.answer(np.array([4]), count_ops=True)
        assert oh.tolist() == [5 + 6 + 7 + 8], cls.name
        counts[cls.name] = c
    assert counts == {"panes": 3, "slickdeque_inv": 0, "twostacks": 1, "daba": 1, "panes_inv": 0}
    a = SlickDequeInv(SUM_I, 4, known_ns=[4])
    a.run(x, 0 * x, ptr, np.full(8, 4))
    assert a.answer(np.array([3]), count_ops=True)[2] == 2 and a.n_keys == 2
    a.run(np.array([9]), np.array([0]), np.array([0, 2]), np.array([4, 3]))
    assert a.answer(np.array([4, 3]))[0].tolist() == [6 + 7 + 8 + 9, 7 + 8 + 9]
    d = SlickDequeNonInv(MAX_I, 4)
    d.run(x, 0 * x, ptr, np.full(8, 4))
    oh, _, c = d.answer(np.array([4, 1]), count_ops=True)
    assert oh.tolist() == [8, 8] and c == 0
    with pytest.raises(ValueError, match="single window length"):
        TwoStacks(SUM_I, 4).answer(np.array([2]))
