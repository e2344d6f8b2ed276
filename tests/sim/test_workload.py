"""The papers' workload generator (sim/workload.py): seeded, parameters honoured, bad input refused."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.queries import Query
from placement.slicing import divisors
from sim.workload import (
    GENERATORS,
    WorkloadSpec,
    candidate_slides,
    generate,
    generate_arrays,
    primes_up_to,
)


def is_prime(n: int) -> bool:
    return n >= 2 and all(n % d for d in range(2, math.isqrt(n) + 1))


def test_same_seed_same_queries_and_different_seed_differs():
    spec = WorkloadSpec(qnum=200, smax=40, rate=10.0, zskew=0.6, omax=5.0, gen="nrm", seed=7)
    a, b = generate(spec), generate(WorkloadSpec(**{**spec.__dict__}))
    assert a == b
    assert [q.id for q in a] == [f"q{i}" for i in range(200)]
    c = generate(WorkloadSpec(**{**spec.__dict__, "seed": 8}))
    assert [(q.range, q.slide) for q in c] != [(q.range, q.slide) for q in a]
    ra, sa = generate_arrays(spec)
    assert ra.dtype == sa.dtype == np.int64
    assert [(q.range, q.slide) for q in a] == list(zip(ra.tolist(), sa.tolist()))


def test_queries_carry_stream_and_aggregate():
    qs = generate(WorkloadSpec(qnum=5, smax=10, rate=1.0, stream="mf01", aggregate="max"))
    assert all(isinstance(q, Query) for q in qs)
    assert {(q.stream, q.aggregate, q.kind) for q in qs} == {("mf01", "max", "time")}


def test_primes_up_to():
    assert primes_up_to(1).tolist() == []
    assert primes_up_to(2).tolist() == [2]
    assert primes_up_to(30).tolist() == [2, 3, 5, 7, 11, 13, 17, 19, 23, 29]
    assert primes_up_to(1000).tolist() == [n for n in range(1001) if is_prime(n)]


def test_candidate_slides_per_generator():
    assert candidate_slides(6, "nrm").tolist() == [1, 2, 3, 4, 5, 6]
    assert candidate_slides(20, "div").tolist() == [2, 3, 5, 7, 11, 13, 17, 19]
    assert candidate_slides(60, "factors").tolist() == [1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30, 60]
    assert set(GENERATORS) == {"nrm", "div", "factors"}


@settings(max_examples=examples(30))
@given(smax=st.integers(2, 400), seed=st.integers(0, 2**32 - 1), zskew=st.floats(0, 3))
def test_div_gives_prime_slides_only(smax, seed, zskew):
    _, slides = generate_arrays(WorkloadSpec(300, smax, 1.0, zskew=zskew, gen="div", seed=seed))
    assert all(is_prime(s) and s <= smax for s in slides.tolist())


@settings(max_examples=examples(30))
@given(smax=st.integers(1, 5000), seed=st.integers(0, 2**32 - 1), zskew=st.floats(0, 3))
def test_factors_gives_divisors_of_smax_only(smax, seed, zskew):
    _, slides = generate_arrays(WorkloadSpec(300, smax, 1.0, zskew=zskew, gen="factors", seed=seed))
    assert all(smax % s == 0 for s in slides.tolist())


@pytest.mark.parametrize(
    "gen, smax, expected",
    [
        ("nrm", 12, list(range(1, 13))),
        ("div", 30, [2, 3, 5, 7, 11, 13, 17, 19, 23, 29]),
        ("factors", 36, list(divisors(36))),
    ],
)
def test_uniform_skew_reaches_every_candidate(gen, smax, expected):
    _, slides = generate_arrays(WorkloadSpec(3000, smax, 1.0, zskew=0.0, gen=gen, seed=3))
    assert sorted(set(slides.tolist())) == expected


@pytest.mark.parametrize("gen, smax", [("nrm", 50), ("div", 100), ("factors", 720)])
def test_larger_zskew_favours_larger_slides(gen, smax):
    means = []
    for z in (0.0, 0.5, 1.0, 2.0):
        _, slides = generate_arrays(WorkloadSpec(5000, smax, 1.0, zskew=z, gen=gen, seed=11))
        means.append(slides.mean())
    assert means == sorted(means) and len(set(means)) == 4
    # Very large skew: (almost) every slide is the largest candidate (rank 1).
    _, slides = generate_arrays(WorkloadSpec(2000, smax, 1.0, zskew=60.0, gen=gen, seed=11))
    assert (slides == candidate_slides(smax, gen).max()).mean() > 0.99


def test_zskew_zero_is_uniform():
    _, slides = generate_arrays(WorkloadSpec(20000, 10, 1.0, zskew=0.0, seed=5))
    counts = np.bincount(slides, minlength=11)[1:]
    assert counts.min() > 1700 and counts.max() < 2300  # 2000 expected per slide


@settings(max_examples=examples(40))
@given(
    smax=st.integers(1, 300),
    omax=st.floats(1.0, 60.0),
    seed=st.integers(0, 2**32 - 1),
    gen=st.sampled_from(["nrm", "factors"]),
)
def test_ranges_between_slide_and_omax_times_slide(smax, omax, seed, gen):
    ranges, slides = generate_arrays(WorkloadSpec(200, smax, 1.0, omax=omax, gen=gen, seed=seed))
    assert (ranges >= slides).all()
    assert (ranges <= np.floor(omax * slides + 0.5)).all()
    assert (ranges >= 1).all()


def test_omax_one_gives_tumbling_windows_and_fragments_appear_otherwise():
    ranges, slides = generate_arrays(WorkloadSpec(500, 100, 1.0, omax=1.0, seed=4))
    assert (ranges == slides).all()
    ranges, slides = generate_arrays(WorkloadSpec(500, 100, 1.0, omax=10.0, seed=4))
    assert (ranges % slides != 0).mean() > 0.5  # ranges are multiples of slides only by chance
    overlap = ranges / slides
    assert overlap.max() > 8.0 and overlap.min() < 2.0  # spread over [1, omax]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(qnum=0), "qnum"),
        (dict(qnum=-5), "qnum"),
        (dict(omax=0.5), "omax"),
        (dict(zskew=-0.1), "zskew"),
        (dict(rate=0.0), "rate"),
        (dict(rate=-1.0), "rate"),
        (dict(smax=0), "smax"),
        (dict(gen="zipf"), "unknown generator 'zipf'"),
        (dict(gen="div", smax=1), "div"),
    ],
)
def test_bad_parameters_raise_value_error(kwargs, match):
    params = dict(qnum=10, smax=20, rate=1.0, zskew=0.0, omax=2.0, gen="nrm", seed=0)
    params.update(kwargs)
    with pytest.raises(ValueError, match=match):
        generate(WorkloadSpec(**params))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        pytest.param(dict(omax=math.nan), "omax"),
        pytest.param(dict(omax=math.inf), "omax"),
        pytest.param(dict(zskew=math.nan), "zskew"),
        pytest.param(dict(rate=math.nan), "rate"),
        pytest.param(dict(qnum=2.5), "qnum"),
        pytest.param(dict(smax=10.5), "smax"),
    ],
)
def test_non_finite_and_non_integer_parameters_raise_value_error(kwargs, match):
    params = dict(qnum=10, smax=20, rate=1.0, zskew=0.0, omax=2.0, gen="nrm", seed=0)
    params.update(kwargs)
    with pytest.raises(ValueError, match=match):
        generate(WorkloadSpec(**params))
