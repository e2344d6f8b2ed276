"""WG_BAND (placement.banded): bands of similar density, each woven alone, then Group To Lowest."""

from __future__ import annotations

import math

import pytest
from helpers import examples, greedy_reference
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.banded import banded_weave, banded_weaveshare, bands
from placement.distributed import make_units
from placement.optimizers import optimize
from placement.plan import verify_plan
from placement.queries import Query
from placement.trees import CostModel
from placement.weaveshare import EPS, weaveshare
from sim.workload import WorkloadSpec, generate


def groups(trees):
    return sorted(sorted(q.id for q in t.queries) for t in trees)


def workload(n, seed, smax=40, keys=1):
    """``generate``'s queries, spread over ``keys`` (stream, aggregate) pairs."""
    qs = generate(WorkloadSpec(qnum=n, smax=smax, rate=1, omax=4, seed=seed))
    if keys == 1:
        return qs
    return [
        Query(q.id, q.range, q.slide, ("sum", "max")[i % 2], ("s0", "s1")[(i // 2) % (keys // 2)])
        for i, q in enumerate(qs)
    ]


CASES = dict(
    seed=st.integers(0, 10_000),
    n=st.integers(1, 24),
    band_size=st.integers(1, 9),
    keys=st.sampled_from([1, 2, 4]),
    tech=st.sampled_from(["panes", "flatfit", "flatfat"]),
)


@settings(max_examples=examples(40), deadline=None)
@given(**CASES)
def test_bands_cut_each_key_in_density_order(seed, n, band_size, keys, tech):
    model = CostModel(tech, 1.0)
    units = make_units(workload(n, seed, keys=keys), model, "classes")
    got = bands(units, band_size)
    assert sorted(u.uid for b in got for u in b) == sorted(u.uid for u in units)  # each once
    for key in {u.key for u in units}:
        same = [u for u in units if u.key == key]
        mine = [b for b in got if b[0].key == key]
        assert all(u.key == key for b in mine for u in b)  # a band holds one key
        assert len(mine) == math.ceil(len(same) / band_size)
        assert max(map(len, mine)) - min(map(len, mine)) <= 1
        assert max(map(len, mine)) <= band_size
        order = [u for b in mine for u in b]  # the bands, one after the other: densest first,
        rank = {u.uid: i for i, u in enumerate(same)}  # ties in input order
        assert [(-float(u.edge_rate), rank[u.uid]) for u in order] == sorted(
            (-float(u.edge_rate), rank[u.uid]) for u in same
        )


@settings(max_examples=examples(30), deadline=None)
@given(**CASES)
def test_banded_weave_is_the_naive_greedy_in_every_band(seed, n, band_size, keys, tech):
    model = CostModel(tech, 1.0)
    units = make_units(workload(n, seed, keys=keys), model, "classes")
    want = [t for b in bands(units, band_size) for t in greedy_reference(b, model, EPS)]
    got = banded_weave(units, model, band_size)
    assert groups(got) == groups(want)
    band_of = {q.id: i for i, b in enumerate(bands(units, band_size)) for u in b for q in u.queries}
    assert all(len({band_of[q.id] for q in t.queries}) == 1 for t in got)  # never across bands
    assert sum(t.cost for t in got) <= sum(u.cost for u in units) + 1e-9  # merges only win


@settings(max_examples=examples(25), deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(1, 30),
    nodes=st.integers(1, 5),
    keys=st.sampled_from([1, 2, 4]),
)
def test_one_band_is_wg_tn_with_grouped_units(seed, n, nodes, keys):
    model = CostModel("panes", 1.0)
    qs = workload(n, seed, keys=keys)
    band = optimize("WG_BAND", qs, model, nodes)
    tn = optimize("WG_TN", qs, CostModel("panes", 1.0), nodes, preprocess="classes")
    assert groups(band.trees) == groups(tn.trees)
    assert [n.cost for n in band.nodes] == pytest.approx([n.cost for n in tn.nodes])
    assert verify_plan(band.to_dict()) == []


def test_small_bands_change_the_plan_and_keep_it_valid():
    model = CostModel("panes", 1.0)
    qs = generate(WorkloadSpec(qnum=120, smax=60, rate=1, zskew=0.5, omax=10, seed=3))
    one = optimize("WG_BAND", qs, model, 4)
    split = optimize("WG_BAND", qs, model, 4, band_size=10)
    assert groups(one.trees) != groups(split.trees)
    assert sorted(q.id for q in split.queries) == sorted(q.id for q in qs)
    assert verify_plan(split.to_dict()) == []
    units = make_units(qs, model, "classes")
    assert len(split.trees) < len(units)  # the bands weave


def test_band_size_must_be_positive():
    with pytest.raises(ValueError, match="band_size must be >= 1"):
        optimize("WG_BAND", workload(5, 0), CostModel("panes", 1.0), 2, band_size=0)


@settings(max_examples=examples(20), deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 30), band_size=st.integers(1, 40))
def test_banded_weaveshare_is_wg_band_on_one_node(seed, n, band_size):
    model = CostModel("panes", 1.0)
    qs = workload(n, seed)
    ticks: list[int] = []
    trees = banded_weaveshare(qs, model, ticks.append, band_size)
    plan = optimize("WG_BAND", qs, model, 1, band_size=band_size)
    assert groups(trees) == groups(plan.trees)
    assert sum(ticks) == n  # every query ticked once, band by band
    if band_size >= n:  # one band: WeaveShare's plan
        assert groups(trees) == groups(weaveshare(qs, model))
