"""WeaveShare's compiled lazy table (placement.weave_kernels, placement.lazy_table): exact benefits
bit for bit, certified bounds, and the same plans as the paper's eager table."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from placement import weave_kernels as wk
from placement.lazy_table import KernelTable
from placement.queries import Query
from placement.trees import CostModel
from placement.weaveshare import initial_trees, weave, weaveshare
from sim.workload import WorkloadSpec, generate

SLIDES = st.sampled_from([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 14, 15, 18, 20, 24, 30, 35, 49, 97])


@st.composite
def tree_pool(draw, max_trees=6):
    """Trees of one stream with disjoint windows: single-modulus ones (all queries of one slide)
    and mixed ones, as WeaveShare produces them."""
    n = draw(st.integers(2, max_trees))
    used: set = set()
    groups = []
    qid = 0
    for _ in range(n):
        k = draw(st.integers(1, 4))
        one = draw(st.booleans())
        s0 = draw(SLIDES)
        qs = []
        for _ in range(k):
            s = s0 if one else draw(SLIDES)
            r = draw(st.integers(1, 5 * s))
            if (r, s) in used:
                continue
            used.add((r, s))
            qs.append(Query(f"q{qid}", r, s))
            qid += 1
        if qs:
            groups.append(qs)
    lam = draw(st.sampled_from([0.001, 0.05, 0.3, 1.0, 7.0]) | st.floats(0.001, 10.0))
    return groups, lam


def _table(groups, lam, tech="panes"):
    model = CostModel(tech, lam, "fast")
    trees = [model.tree(g) for g in groups]
    table = KernelTable(model, trees, 1e-12)
    slots = table._add_many(trees)
    return model, trees, table, slots


@settings(max_examples=300, deadline=None)
@given(pool=tree_pool(), tech=st.sampled_from(["panes", "flatfit"]))
def test_pair_values_exact_bit_for_bit_or_certified_bounds(pool, tech):
    groups, lam = pool
    model, trees, t, slots = _table(groups, lam, tech)
    for i, z in enumerate(slots):
        for j, s in enumerate(slots):
            if i == j:
                continue
            v, exact = wk.pair_value(z, s, lam, t.e, t.om, t.cost, t.smod, t.kcls, t.cstart,
                                     t.pm, t.pr)
            a, b = (trees[i], trees[j]) if trees[i].uid < trees[j].uid else (trees[j], trees[i])
            true = model.benefit(a, b)
            single = (len({m for m, _ in trees[i].classes}) == 1
                      and len({m for m, _ in trees[j].classes}) == 1)
            assert exact == single
            if exact:
                assert v == true  # the very float the engine-based benefit gives
            else:
                assert v >= true


@settings(max_examples=200, deadline=None)
@given(pool=tree_pool(max_trees=8))
def test_bucket_bounds_are_certified(pool):
    groups, lam = pool
    model, trees, t, slots = _table(groups, lam)
    open_ = wk.bucket_pairs(t.nb, t.b_key, t.b_mod, t.b_kmin, t.b_kmax, t.b_om, lam, -math.inf)
    assert open_.all()
    open_ = wk.bucket_pairs(t.nb, t.b_key, t.b_mod, t.b_kmin, t.b_kmax, t.b_om, lam, 1e-12)
    for i, z in enumerate(slots):
        for j, s in enumerate(slots):
            if i == j or t.smod[s] == 0:
                continue
            b = int(t.bucket[s])
            bb = wk.bucket_bound(z, lam, t.e, t.om, t.cost, t.kcls, t.cstart, t.pm,
                                 t.b_mod[b], t.b_kmin[b], t.b_kmax[b], t.b_om[b])
            true = model.benefit(trees[i], trees[j])
            assert bb >= true
            if t.smod[z] > 0 and true > 1e-12:
                assert open_[t.bucket[z], b]


def _plans(qs, lam, tech="panes", **kw):
    out = []
    for strategy in ("lazy", "paper"):
        model = CostModel(tech, lam, "fast")
        trees = weave(initial_trees(qs, model), model, strategy=strategy, **kw)
        out.append(trees)
    return out


def _grouping(trees):
    return sorted(sorted(q.id for q in t.queries) for t in trees)


@settings(max_examples=60, deadline=None)
@given(qnum=st.integers(2, 120), smax=st.sampled_from([10, 30, 100, 600]),
       lam=st.sampled_from([0.002, 0.1, 1.0, 100.0]), omax=st.sampled_from([1, 3, 10, 100]),
       zskew=st.sampled_from([0, 1, 3]), gen=st.sampled_from(["nrm", "div", "factors"]),
       seed=st.integers(0, 10_000), tech=st.sampled_from(["panes", "flatfit"]))
def test_lazy_equals_paper_on_generated_workloads(qnum, smax, lam, omax, zskew, gen, seed, tech):
    qs = generate(WorkloadSpec(qnum, smax, lam, zskew, omax, gen, seed))
    lazy, paper = _plans(qs, lam, tech)
    assert _grouping(lazy) == _grouping(paper)
    assert math.fsum(t.cost for t in lazy) == math.fsum(t.cost for t in paper)


@settings(max_examples=30, deadline=None)
@given(qnum=st.integers(2, 60), seed=st.integers(0, 10_000), stop=st.integers(1, 10),
       gen=st.sampled_from(["nrm", "div"]))
def test_lazy_equals_paper_forced_merges(qnum, seed, stop, gen):
    """To Nodes' forced merges: floor -inf and stop_at (every pair is a candidate)."""
    qs = generate(WorkloadSpec(qnum, 60, 0.01, 1, 5, gen, seed))
    lazy, paper = _plans(qs, 0.01, floor=-math.inf, stop_at=stop)
    assert _grouping(lazy) == _grouping(paper)


def test_single_modulus_rows_need_no_engine_pricing():
    """Prime slides (exp 2's shape): every pair is single-modulus until trees mix moduli."""
    qs = generate(WorkloadSpec(300, 600, 1.0, 3, 100, "div", 0))
    model = CostModel("panes", 1.0, "fast")
    plan = weaveshare(qs, model)
    assert weave.last_evaluations < 20
    paper = weaveshare(qs, CostModel("panes", 1.0, "fast"), strategy="paper")
    assert _grouping(plan) == _grouping(paper)


def test_rows_sorted_head_and_compaction():
    """A row's head is sorted by (-value, partner uid) with ties kept together; dead partners
    are dropped before the next head is sorted."""
    rng = np.random.default_rng(0)
    n = 200
    j = rng.permutation(n).astype(np.int64)
    v = rng.integers(0, 20, n).astype(np.float64)  # many ties
    x = np.zeros(n, np.bool_)
    uid = rng.permutation(n).astype(np.int64)
    alive = rng.random(n) < 0.6
    end_all = wk._compact(j, v, x, alive, 0, n)
    head = wk._sort_head(j, v, x, uid, 0, end_all, 16)
    assert end_all == int(alive.sum())
    assert all(alive[j[:end_all]])
    key = sorted((v[i], uid[j[i]]) for i in range(end_all))
    got = [(v[i], uid[j[i]]) for i in range(head)]
    assert got == key[:head] and head >= 16
    assert all(v[i] > v[head - 1] for i in range(head, end_all))


@settings(max_examples=60, deadline=None)
@given(qnum=st.integers(2, 150), smax=st.sampled_from([6, 12, 40, 200]),
       lam=st.sampled_from([0.002, 0.05, 1.0, 30.0]), omax=st.sampled_from([1, 2, 10]),
       gen=st.sampled_from(["nrm", "div", "factors"]), seed=st.integers(0, 10_000),
       mixed=st.booleans())
def test_fill_keeps_every_positive_pair(qnum, smax, lam, omax, gen, seed, mixed):
    """After a fill (bucket-pair mask, residue counts, bucket bounds), every pair whose exact
    benefit is above the floor sits in a row with a value >= its benefit (equal when exact)."""
    qs = generate(WorkloadSpec(qnum, smax, lam, 0.5, omax, gen, seed))
    model = CostModel("panes", lam, "fast")
    trees = initial_trees(qs, model)
    if mixed and len(trees) > 3:  # some multi-modulus trees too
        trees = [model.merge(trees[0], trees[1]), model.merge(trees[2], trees[3])] + trees[4:]
    t = KernelTable(model, trees, 1e-12)
    t.fill()
    slot_of = {tr.uid: i for i, tr in enumerate(t.trees)}
    found = {}
    for z in range(len(t.trees)):
        for p in range(int(t.rpos[z]), int(t.rn[z])):
            found[frozenset((z, int(t.rj[p])))] = (-t.rv[p], bool(t.rx[p]))
    for i, x in enumerate(trees):
        for y in trees[i + 1:]:
            b = model.benefit(x, y)
            got = found.get(frozenset((slot_of[x.uid], slot_of[y.uid])))
            if b > 1e-12:
                assert got is not None, (b, x.classes, y.classes)
            if got is not None:
                assert got[0] == b if got[1] else got[0] >= b
