"""The specialised SlickDeque kernels: fast paths equal the generic kernels bit for bit, both
equal brute force, float running sums stay at least as exact as double-double, old
snapshots load, and ``run(out=...)``."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from executors.aggregates import OP_MAX, OP_MIN, OP_SUM, Primitive, two_sum
from executors.slickdeque_inv import SlickDequeInv, _sdi_kernel, _sdi_single
from executors.slickdeque_noninv import SlickDequeNonInv, _sdn_kernel, _sdn_single

SPECIALS = [math.inf, -math.inf, 0.0, -0.0, 1e300, -1e300, 5e-324]


def _generic_inv(agg, hi, lo, ptr, ns):
    """Run the generic multi-length kernel directly (never the single-length fast path)."""
    s = agg.state
    m = ns.shape[0]
    oh, ol = np.empty(m, hi.dtype), np.zeros(m, hi.dtype)
    agg._grow_keys(ns)
    s = agg.state
    _sdi_kernel(
        hi,
        lo,
        ptr,
        ns,
        oh,
        ol,
        np.zeros(0, np.int64),
        s["ring_hi"],
        s["ring_lo"],
        s["key_n"],
        s["key_hi"],
        s["key_lo"],
        s["key_x"],
        s["key_of_n"],
        s["meta"],
        agg.op,
    )
    return oh, ol


def _generic_noninv(agg, hi, ptr, ns):
    s = agg.state
    oh, ol = np.empty(ns.shape[0], hi.dtype), np.full(ns.shape[0], 7, hi.dtype)
    _sdn_kernel(
        hi, ptr, ns, oh, ol, np.zeros(0, np.int64), s["dq_pos"], s["dq_val"], s["meta"], agg.op
    )
    assert not ol.any()
    return oh


def _partials(data, n, dtype):
    """Slice partials: float ones are double-doubles with a non-zero lo part half the time
    (a slice of several tuples), int ones have lo == 0."""
    if dtype == "i8":
        hi = np.array(
            data.draw(st.lists(st.integers(-(2**62), 2**62), min_size=n, max_size=n)),
            dtype=np.int64,
        )
        return hi, np.zeros(n, np.int64)
    mags = data.draw(st.lists(st.integers(-30, 30), min_size=n, max_size=n))
    a = np.array(data.draw(st.lists(st.floats(-1, 1), min_size=n, max_size=n)))
    b = np.array(data.draw(st.lists(st.floats(-1, 1), min_size=n, max_size=n)))
    a = a * 10.0 ** np.array(mags)
    b = b * 10.0 ** (np.array(mags) - 12) * data.draw(st.sampled_from([0.0, 1.0]))
    hi, lo = np.empty(n), np.empty(n)
    for i in range(n):
        hi[i], lo[i] = two_sum(a[i], b[i])
    return hi, lo


@settings(max_examples=examples(60))
@given(
    data=st.data(), dtype=st.sampled_from(["i8", "f8"]), W=st.integers(1, 70), N=st.integers(1, 400)
)
def test_inv_single_path_equals_generic_and_brute_force(data, dtype, W, N):
    """One known length: ``_sdi_single`` (fast path) and ``_sdi_kernel`` give the same bits
    (answers and state, over random batch splits and renormalisation points); a few slices
    asking another length switch to the generic kernel mid-batch."""
    n = data.draw(st.integers(1, W))
    hi, lo = _partials(data, N, dtype)
    other = data.draw(st.lists(st.integers(0, N - 1), max_size=2))
    due = [
        [n] if j not in other else sorted({n, data.draw(st.integers(1, W))}, reverse=True)
        for j in range(N)
    ]
    due = [d if data.draw(st.integers(0, 5)) else [] for d in due]
    ptr = np.concatenate([[0], np.cumsum([len(d) for d in due])]).astype(np.int64)
    ns = np.array([x for d in due for x in d], dtype=np.int64)
    prim = Primitive(OP_SUM, "v", dtype)
    fast, gen = SlickDequeInv(prim, W, known_ns=[n]), SlickDequeInv(prim, W, known_ns=[n])
    cuts = sorted(set(data.draw(st.lists(st.integers(0, N), max_size=4))) | {0, N})
    got_f, got_g = [], []
    for a, b in zip(cuts[:-1], cuts[1:]):
        p = ptr[a : b + 1] - ptr[a]
        fh, fl, _ = fast.run(hi[a:b], lo[a:b], p, ns[ptr[a] : ptr[b]])
        gh, gl = _generic_inv(gen, hi[a:b].copy(), lo[a:b].copy(), p, ns[ptr[a] : ptr[b]])
        got_f += list(zip(fh.tolist(), fl.tolist()))
        got_g += list(zip(gh.tolist(), gl.tolist()))
    assert got_f == got_g
    for k in fast.state:
        np.testing.assert_array_equal(fast.state[k], gen.state[k], err_msg=k)
    # brute force: exact for ints, to the double-double rounding for floats
    q = 0
    for j in range(N):
        for x in due[j]:
            lo_j = max(0, j - x + 1)
            if dtype == "i8":
                want = int(np.sum(hi[lo_j : j + 1]))  # int64 wrap-around, as the kernels
                assert got_f[q][0] == want and got_f[q][1] == 0
            else:
                want = sum(
                    Fraction(h) + Fraction(l)
                    for h, l in zip(hi[lo_j : j + 1].tolist(), lo[lo_j : j + 1].tolist())
                )
                err = abs(Fraction(got_f[q][0]) + Fraction(got_f[q][1]) - want)
                scale = max(np.abs(hi[: j + 1]).max(), 1e-300)
                assert err <= Fraction(2.0**-100) * Fraction(scale), (j, x)
            q += 1


def test_inv_float_sums_as_exact_as_double_double_over_a_long_run():
    """200k slices of magnitudes 1e-8..1e12 with lo parts, window 1000: every answer (as a
    double-double) is within 2^-104 of the largest magnitude of the exact value; the bound
    the replaced pair of accurate double-double additions guaranteed per slice (6 u^2 M,
    u = 2^-53) already allows ~2^-103 M for *one* slice, and it accumulated."""
    rng = np.random.default_rng(3)
    N, W = 200_000, 1000
    a = rng.normal(0, 1, N) * 10.0 ** rng.integers(-8, 13, N)
    b = rng.normal(0, 1, N) * np.abs(a) * 2.0**-60
    hi, lo = np.empty(N), np.empty(N)
    for i in range(N):
        hi[i], lo[i] = two_sum(a[i], b[i])
    agg = SlickDequeInv(Primitive(OP_SUM, "v", "f8"), W, known_ns=[W])
    oh, ol, _ = agg.run(hi, lo, np.arange(N + 1), np.full(N, W))
    M = Fraction(float(np.abs(hi).max()))
    for j in range(N - 3000, N, 211):
        want = sum(
            Fraction(h) + Fraction(l)
            for h, l in zip(hi[j - W + 1 : j + 1].tolist(), lo[j - W + 1 : j + 1].tolist())
        )
        assert abs(Fraction(oh[j]) + Fraction(ol[j]) - want) <= M * Fraction(2.0**-104)


def test_inv_cancellation_to_a_tiny_window_sum():
    """Huge partials leave the window and the sum drops to 1e-20: the triple renormalises
    without error, so the tiny answer is exact to ~u^2 of itself plus ~2^-140 of the past."""
    big = [1e16, -3e15, 7e15, 2.5e-20, 1e-20]
    x = np.array(big + [0.0] * 3 + [3e-21])
    agg = SlickDequeInv(Primitive(OP_SUM, "v", "f8"), 5, known_ns=[5])
    oh, ol, _ = agg.run(x, np.zeros_like(x), np.arange(x.shape[0] + 1), np.full(x.shape[0], 5))
    # window of the last 5 = [1e-20, 0, 0, 0, 3e-21]
    want = Fraction(1e-20) + Fraction(3e-21)
    assert abs(Fraction(oh[-1]) + Fraction(ol[-1]) - want) <= want * Fraction(2.0**-100)


def test_inv_old_snapshot_without_key_x_loads():
    prim = Primitive(OP_SUM, "v", "f8")
    x = np.random.default_rng(1).normal(size=300)
    a = SlickDequeInv(prim, 16, known_ns=[16, 5])
    a.run(x[:200], 0 * x[:200], np.zeros(201, np.int64), np.zeros(0, np.int64))
    st_ = a.state_dict()
    st_.pop("key_x")  # as written before the running sums became triples
    b = SlickDequeInv(prim, 16, known_ns=[16, 5])
    b.load_state_dict(st_)
    ptr, ns = np.arange(0, 201, 2), np.tile([16, 5], 100)
    ha, la, _ = a.run(x[200:], 0 * x[200:], ptr, ns)
    hb, lb, _ = b.run(x[200:], 0 * x[200:], ptr, ns)
    np.testing.assert_allclose(ha + la, hb + lb, rtol=1e-15, atol=1e-15)


@settings(max_examples=examples(80))
@given(
    data=st.data(),
    op=st.sampled_from([OP_MIN, OP_MAX]),
    dtype=st.sampled_from(["i8", "f8"]),
    W=st.integers(1, 40),
    N=st.integers(1, 300),
    shape=st.sampled_from(["random", "ties", "up", "down", "specials"]),
)
def test_noninv_single_path_equals_generic_and_brute_force(data, op, dtype, W, N, shape):
    """``single`` kernel (head answers, register window, no counting) vs the generic kernel
    (walk over the deque) vs brute force, on random data, many ties (pops stop at equal
    values the same way), monotone runs (every slice pops all: the >4-pop loop; or never
    pops: the deque fills and expires every slice) and +-inf; slices asking another length
    or two windows make the fast path hand over to the generic kernel mid-batch."""
    if shape == "random":
        v = data.draw(st.lists(st.integers(-(10**6), 10**6), min_size=N, max_size=N))
    elif shape == "ties":
        v = data.draw(st.lists(st.integers(0, 3), min_size=N, max_size=N))
    elif shape in ("up", "down"):
        v = sorted(
            data.draw(st.lists(st.integers(-1000, 1000), min_size=N, max_size=N)),
            reverse=shape == "down",
        )
        v = [x + data.draw(st.sampled_from([0, 0, 0, 5000])) for x in v]  # some resets
    else:
        v = data.draw(st.lists(st.sampled_from(SPECIALS + [1.0, -1.0]), min_size=N, max_size=N))
        dtype = "f8"
    vals = np.array(v, dtype=np.int64 if dtype == "i8" else np.float64)
    odd = set(data.draw(st.lists(st.integers(0, N - 1), max_size=3)))
    due = []
    for j in range(N):
        if j in odd:
            due.append(
                sorted(data.draw(st.lists(st.integers(1, W), min_size=1, max_size=3)), reverse=True)
            )
        else:
            due.append([W] if data.draw(st.integers(0, 4)) else [])
    ptr = np.concatenate([[0], np.cumsum([len(d) for d in due])]).astype(np.int64)
    ns = np.array([x for d in due for x in d], dtype=np.int64)
    prim = Primitive(op, "v", dtype)
    fast, gen = SlickDequeNonInv(prim, W), SlickDequeNonInv(prim, W)
    cuts = sorted(set(data.draw(st.lists(st.integers(0, N), max_size=4))) | {0, N})
    got_f, got_g = [], []
    for a, b in zip(cuts[:-1], cuts[1:]):
        p = ptr[a : b + 1] - ptr[a]
        fh, fl, _ = fast.run(vals[a:b], np.zeros_like(vals[a:b]), p, ns[ptr[a] : ptr[b]])
        assert not fl.any()
        got_f += fh.tolist()
        got_g += _generic_noninv(gen, vals[a:b].copy(), p, ns[ptr[a] : ptr[b]]).tolist()
    assert got_f == got_g
    assert fast.deque() == gen.deque()
    np.testing.assert_array_equal(fast.state["meta"], gen.state["meta"])
    f = max if op == OP_MAX else min
    want = [f(vals[max(0, j - x + 1) : j + 1].tolist()) for j in range(N) for x in due[j]]
    assert got_f == want


@pytest.mark.parametrize("op", [OP_MIN, OP_MAX])
def test_noninv_counts_are_the_published_comparisons(op):
    """Operation counts (generic kernel) are the pops plus the comparison that stopped the
    pop loop, slice by slice, on random data and on monotone runs (5+ pops per slice)."""
    rng = np.random.default_rng(op)
    for vals in (rng.integers(0, 50, 500), np.arange(300) * (1 if op == OP_MAX else -1)):
        W = 23
        agg = SlickDequeNonInv(Primitive(op, "v", "i8"), W)
        _, _, ops = agg.run(
            vals, 0 * vals, np.arange(vals.shape[0] + 1), np.full(vals.shape[0], W), count_ops=True
        )
        dq, want = [], []
        beats = (lambda b, v: b <= v) if op == OP_MAX else (lambda b, v: b >= v)
        for t, v in enumerate(vals.tolist()):
            if dq and dq[0][0] <= t - W:
                dq.pop(0)
            c = 0
            while dq:
                c += 1
                if beats(dq[-1][1], v):
                    dq.pop()
                else:
                    break
            dq.append((t, v))
            want.append(c)
        assert ops.tolist() == want


def test_noninv_old_snapshot_ring_is_relaid():
    """Snapshots from the (wsize + 1)-slot ring load into the power-of-two ring."""
    prim = Primitive(OP_MAX, "v", "i8")
    W = 6
    x = np.array([5, 9, 1, 3, 8, 2, 7, 7, 4, 0, 6, 1], np.int64)
    a = SlickDequeNonInv(prim, W)
    a.run(x[:9], 0 * x[:9], np.zeros(10, np.int64), np.zeros(0, np.int64))
    nodes = a.deque()
    t = int(a.state["meta"][0])
    old_cap, head = W + 1, 5  # the old layout, head somewhere past the wrap
    pos, val = np.zeros(old_cap, np.int64), np.zeros(old_cap, np.int64)
    for i, (p_, v_) in enumerate(nodes):
        pos[(head + i) % old_cap], val[(head + i) % old_cap] = p_, v_
    b = SlickDequeNonInv(prim, W)
    b.load_state_dict(
        {"dq_pos": pos, "dq_val": val, "meta": np.array([t, head, len(nodes), W], np.int64)}
    )
    assert b.deque() == nodes
    ptr, ns = np.arange(4), np.full(3, W)
    assert (
        a.run(x[9:], 0 * x[9:], ptr, ns)[0].tolist() == b.run(x[9:], 0 * x[9:], ptr, ns)[0].tolist()
    )


def test_run_into_caller_buffers():
    """``out=``: every technique writes both answer arrays (the buffers start as NaN), into
    views of the caller's arrays, the same answers as fresh arrays; too short is refused."""
    from executors.base import TECHNIQUES

    rng = np.random.default_rng(5)
    x = rng.normal(size=40)
    for cls in TECHNIQUES.values():
        for op in (OP_SUM, OP_MIN, OP_MAX):
            if (cls.requires_inverse and op != OP_SUM) or (cls.requires_selective and op == OP_SUM):
                continue
            prim = Primitive(op, "v", "f8")
            ns = np.full(40, 5) if not cls.multi_query else rng.integers(1, 6, 40)
            a, b = cls(prim, 5, known_ns=[5]), cls(prim, 5, known_ns=[5])
            buf = (np.full(64, np.nan), np.full(64, np.nan))
            oh, ol, _ = a.run(x, 0 * x, np.arange(41), ns, out=buf)
            wh, wl, _ = b.run(x, 0 * x, np.arange(41), ns)
            assert np.shares_memory(oh, buf[0]) and np.shares_memory(ol, buf[1])
            assert oh.tolist() == wh.tolist() and ol.tolist() == wl.tolist(), cls.name
            with pytest.raises(ValueError, match="out"):
                a.run(x, 0 * x, np.arange(41), ns, out=(buf[0][:5], buf[1]))


def test_fast_paths_stop_at_the_first_other_request():
    """The fast kernels do the slices they can and hand the rest over (what run() relies on
    to pick them): slice 3 asks another length / two windows."""
    x = np.arange(1.0, 9.0)
    ptr = np.array([0, 1, 2, 3, 5, 6, 7, 8, 9])
    no_ops = np.zeros(0, np.int64)
    a = SlickDequeInv(Primitive(OP_SUM, "v", "f8"), 4, known_ns=[4])
    s = a.state
    out, out_lo = np.zeros(9), np.zeros(9)
    done = _sdi_single(
        x,
        0 * x,
        ptr,
        np.array([4, 4, 4, 4, 2, 4, 4, 4, 4]),
        out,
        out_lo,
        no_ops,
        s["ring_hi"],
        s["ring_lo"],
        s["key_n"],
        s["key_hi"],
        s["key_lo"],
        s["key_x"],
        s["meta"],
    )
    assert done == 3 and out[:3].tolist() == [1, 3, 6]
    b = SlickDequeNonInv(Primitive(OP_MAX, "v", "f8"), 4)
    s = b.state
    done = _sdn_single(
        x, ptr, np.full(9, 4), out, out_lo, no_ops, s["dq_pos"], s["dq_val"], s["meta"], OP_MAX
    )
    assert done == 3 and out[:3].tolist() == [1, 2, 3]


@pytest.mark.parametrize("op", [OP_MIN, OP_MAX])
def test_noninv_expiry_and_long_pop_in_one_slice(op):
    """The rare branch handles a head expiry and a 4th+ pop in the same slice (W = 5: slice 5
    expires 10 and pops 4, 3, 2, 1), and a 4th pop on a deque shorter than 3 after expiry;
    single path, generic path and brute force agree, also restored from a mid-stream snapshot."""
    sign = 1 if op == OP_MAX else -1
    f = max if op == OP_MAX else min
    W = 5
    rng = np.random.default_rng(11)
    seqs = [
        np.array([10, 4, 3, 2, 1, 9, 8, 7, 6, 5, 11, 0, 0, 0, 0, 0, 12], np.int64),
        np.array([10, 1, 2, 9, 9, 9, 9, 9, 3, 4, 5, 6, 20], np.int64),
        rng.integers(0, 6, 400),
    ]
    for x in seqs:
        x = sign * x
        N = x.shape[0]
        want = [f(x[max(0, j - W + 1) : j + 1].tolist()) for j in range(N)]
        ptr, ns = np.arange(N + 1), np.full(N, W)
        prim = Primitive(op, "v", "i8")
        fast, gen = SlickDequeNonInv(prim, W), SlickDequeNonInv(prim, W)
        assert fast.run(x, 0 * x, ptr, ns)[0].tolist() == want
        assert _generic_noninv(gen, x.copy(), ptr, ns).tolist() == want
        assert fast.deque() == gen.deque()
        for cut in (3, 5, 6, N // 2):
            a = SlickDequeNonInv(prim, W)
            a.run(x[:cut], 0 * x[:cut], np.arange(cut + 1), np.full(cut, W))
            b = SlickDequeNonInv(prim, W)
            b.load_state_dict(a.state_dict())
            rest = x[cut:]
            got = b.run(rest, 0 * rest, np.arange(rest.shape[0] + 1), np.full(rest.shape[0], W))
            assert got[0].tolist() == want[cut:]


def test_max_side_by_side_smoke():
    """The Max side-by-side benchmark runs (tiny windows and batches) and reports all three."""
    from sim.bench.executors import max_side_by_side

    rows = max_side_by_side(windows=(4, 16), reps=1, batch=64)
    assert [r["window"] for r in rows] == [4, 16]
    for r in rows:
        assert set(r) == {"window", "slickdeque", "twostacks", "twostacks_literal_op"}
        assert all(r[k] > 0 for k in r)
