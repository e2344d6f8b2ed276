"""WeaveShare's compiled lazy table (placement.lazy_table: table and kernels): exact benefits
bit for bit, certified bounds, and the same plans as the paper's eager table."""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.lazy_table import kernels as wk
from placement.lazy_table import table as lt
from placement.lazy_table.table import KernelTable
from placement.queries import Query
from placement.trees import CostModel
from placement.weaveshare import _Table, initial_trees, weave, weaveshare
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


def _pair_value(t, z, s, lam):
    sl = t.slots
    return wk.pair_value(
        z, s, lam, sl.e, sl.om, sl.cost, sl.smod, sl.kcls, sl.cstart, t.classes.mod, t.classes.res
    )


def _table(groups, lam, tech="panes"):
    model = CostModel(tech, lam, "fast")
    trees = [model.tree(g) for g in groups]
    table = KernelTable(model, trees, 1e-12)
    slots = table._add_many(trees)
    return model, trees, table, slots


@settings(max_examples=examples(300))
@given(pool=tree_pool(), tech=st.sampled_from(["panes", "flatfit"]))
def test_pair_values_exact_bit_for_bit_or_certified_bounds(pool, tech):
    groups, lam = pool
    model, trees, t, slots = _table(groups, lam, tech)
    for i, z in enumerate(slots):
        for j, s in enumerate(slots):
            if i == j:
                continue
            v, exact = _pair_value(t, z, s, lam)
            a, b = (trees[i], trees[j]) if trees[i].uid < trees[j].uid else (trees[j], trees[i])
            true = model.benefit(a, b)
            single = (
                len({m for m, _ in trees[i].classes}) == 1
                and len({m for m, _ in trees[j].classes}) == 1
            )
            assert exact == single
            if exact:
                assert v == true  # the very float the engine-based benefit gives
            else:
                assert v >= true


def _bound_per_class_pair(t, z, s, lam):
    """``kernels._bound`` as first written: one gcd and one residue test per class pair (the
    reference the run-of-moduli version must match bit for bit)."""
    sl, pm, pr = t.slots, t.classes.mod, t.classes.res
    zs, zn, ss, sn = int(sl.cstart[z]), int(sl.kcls[z]), int(sl.cstart[s]), int(sl.kcls[s])
    ez, es = float(sl.e[z]), float(sl.e[s])
    c = min(ez, es)
    if zn * sn <= wk.WORK_LIMIT:
        colsum = [0.0] * sn
        cz = 0.0
        for i in range(zs, zs + zn):
            mi, ri = int(pm[i]), int(pr[i])
            rowsum = 0.0
            for j in range(sn):
                mj = int(pm[ss + j])
                g = math.gcd(mi, mj)
                if (ri - int(pr[ss + j])) % g == 0:
                    term = g / (float(mi) * float(mj))
                    rowsum += term
                    colsum[j] += term
            cz += min(1.0 / mi, rowsum)
        cs = 0.0
        for j in range(sn):
            cs += min(1.0 / int(pm[ss + j]), colsum[j])
        c = min(c, cz, cs)
    om, cost = sl.om, sl.cost
    bound = lam + float(om[z]) * (c - es) + float(om[s]) * (c - ez)
    return bound + wk.INFLATE * (abs(bound) + float(cost[s]) + float(cost[z]))


@settings(max_examples=examples(200))
@given(pool=tree_pool(max_trees=8), merges=st.integers(0, 4), seed=st.integers(0, 1000))
def test_class_pair_bound_same_float_as_one_gcd_per_pair(pool, merges, seed):
    """``_bound`` (one gcd per run of equal moduli, no residue test for coprime moduli) gives
    the very float of one gcd per class pair, and it is at least the exact benefit; trees
    woven from several mixed ones hold long runs of equal moduli on both sides."""
    groups, lam = pool
    model = CostModel("panes", lam, "fast")
    trees = [model.tree(g) for g in groups]
    rng = np.random.default_rng(seed)
    for _ in range(merges):
        if len(trees) < 3:  # keep two trees to compare
            break
        i, j = sorted(rng.choice(len(trees), 2, replace=False).tolist())
        y, x = trees.pop(j), trees.pop(i)  # disjoint windows, as in a weave
        trees.append(model.merge(x, y))
    t = KernelTable(model, trees, 1e-12)
    slots = t._add_many(trees)
    sl = t.slots
    wmax = int(sl.kcls[: len(slots)].max())
    scratch = np.zeros(wmax), np.zeros(wmax, np.int64), np.zeros(wmax)
    for i, z in enumerate(slots):
        for j, s in enumerate(slots):
            if i == j:
                continue
            got = wk._bound(
                z,
                s,
                lam,
                sl.e,
                sl.om,
                sl.cost,
                sl.kcls,
                sl.cstart,
                t.classes.mod,
                t.classes.res,
                *scratch,
            )
            assert got == _bound_per_class_pair(t, z, s, lam)
            assert got >= model.benefit(trees[i], trees[j])
            # the O(1) screen of pairs behind a partner's cut is never below it
            assert wk._loose(z, s, lam, sl.e, sl.om, sl.cost) >= got


@settings(max_examples=examples(200))
@given(pool=tree_pool(max_trees=8))
def test_bucket_bounds_are_certified(pool):
    groups, lam = pool
    model, trees, t, slots = _table(groups, lam)
    open_ = wk.bucket_pairs(
        t.nb,
        t.buckets.key,
        t.buckets.mod,
        t.buckets.kmin,
        t.buckets.kmax,
        t.buckets.om,
        lam,
        -math.inf,
    )
    assert open_.all()
    open_ = wk.bucket_pairs(
        t.nb, t.buckets.key, t.buckets.mod, t.buckets.kmin, t.buckets.kmax, t.buckets.om, lam, 1e-12
    )
    for i, z in enumerate(slots):
        for j, s in enumerate(slots):
            if i == j or t.slots.smod[s] == 0:
                continue
            b = int(t.slots.bucket[s])
            mb = int(t.buckets.mod[b])  # the rows read a bucket's k / m, not divide
            assert t.buckets.klo[b] == np.float64(t.buckets.kmin[b]) / np.float64(mb)
            assert t.buckets.khi[b] == np.float64(t.buckets.kmax[b]) / np.float64(mb)
            bb = wk.bucket_bound(
                z,
                lam,
                t.slots.e,
                t.slots.om,
                t.slots.cost,
                t.slots.kcls,
                t.slots.cstart,
                t.classes.mod,
                t.buckets.mod[b],
                t.buckets.kmin[b],
                t.buckets.kmax[b],
                t.buckets.om[b],
            )
            true = model.benefit(trees[i], trees[j])
            assert bb >= true
            # ... and with its margin at least the value the pair gets in either row
            bm = wk.bucket_margin(bb, t.slots.cost[z], t.buckets.costmax[b])
            assert bm >= max(_pair_value(t, z, s, lam)[0], _pair_value(t, s, z, lam)[0])
            if t.slots.smod[z] > 0 and true > 1e-12:
                assert open_[t.slots.bucket[z], b]


def _plans(qs, lam, tech="panes", **kw):
    out = []
    for strategy in ("lazy", "paper"):
        model = CostModel(tech, lam, "fast")
        trees = weave(initial_trees(qs, model), model, strategy=strategy, **kw)
        out.append(trees)
    return out


def _grouping(trees):
    return sorted(sorted(q.id for q in t.queries) for t in trees)


@settings(max_examples=examples(60))
@given(
    qnum=st.integers(2, 120),
    smax=st.sampled_from([10, 30, 100, 600]),
    lam=st.sampled_from([0.002, 0.1, 1.0, 100.0]),
    omax=st.sampled_from([1, 3, 10, 100]),
    zskew=st.sampled_from([0, 1, 3]),
    gen=st.sampled_from(["nrm", "div", "factors"]),
    seed=st.integers(0, 10_000),
    tech=st.sampled_from(["panes", "flatfit"]),
)
def test_lazy_equals_paper_on_generated_workloads(qnum, smax, lam, omax, zskew, gen, seed, tech):
    qs = generate(WorkloadSpec(qnum, smax, lam, zskew, omax, gen, seed))
    lazy, paper = _plans(qs, lam, tech)
    assert _grouping(lazy) == _grouping(paper)
    assert math.fsum(t.cost for t in lazy) == math.fsum(t.cost for t in paper)
    # in the same order too (the plan file's): the lazy table files its initial trees
    # costliest first, and gives them back in their given order
    assert [[q.id for q in t.queries] for t in lazy] == [[q.id for q in t.queries] for t in paper]


@settings(max_examples=examples(30))
@given(
    qnum=st.integers(2, 60),
    seed=st.integers(0, 10_000),
    stop=st.integers(1, 10),
    gen=st.sampled_from(["nrm", "div"]),
)
def test_lazy_equals_paper_forced_merges(qnum, seed, stop, gen):
    """To Nodes' forced merges: floor -inf and stop_at (every pair is a candidate)."""
    qs = generate(WorkloadSpec(qnum, 60, 0.01, 1, 5, gen, seed))
    lazy, paper = _plans(qs, 0.01, floor=-math.inf, stop_at=stop)
    assert _grouping(lazy) == _grouping(paper)


@settings(max_examples=examples(40))
@given(
    qnum=st.integers(2, 120),
    smax=st.sampled_from([10, 30, 600]),
    lam=st.sampled_from([0.002, 1.0, 100.0]),
    omax=st.sampled_from([1, 10, 100]),
    gen=st.sampled_from(["nrm", "div", "factors"]),
    seed=st.integers(0, 10_000),
    cap=st.integers(1, 3),
    forced=st.booleans(),
)
def test_lazy_equals_paper_with_tiny_row_caps(qnum, smax, lam, omax, gen, seed, cap, forced):
    """Rows that keep one to three entries are refilled inside ``pop`` all the time: the plan
    must still be the eager table's (also with To Nodes' forced merges)."""
    qs = generate(WorkloadSpec(qnum, smax, lam, 1, omax, gen, seed))
    kw = dict(floor=-math.inf, stop_at=1) if forced else {}
    with _row_cap(cap):
        lazy, paper = _plans(qs, lam, **kw)
    assert _grouping(lazy) == _grouping(paper)
    assert math.fsum(t.cost for t in lazy) == math.fsum(t.cost for t in paper)


@contextlib.contextmanager
def _parts(parts, par_from, sort_first=lt.SORT_FIRST):
    old = lt.PARTS, lt.PAR_FROM, lt.SORT_FIRST
    lt.PARTS, lt.PAR_FROM, lt.SORT_FIRST = parts, par_from, sort_first
    try:
        yield
    finally:
        lt.PARTS, lt.PAR_FROM, lt.SORT_FIRST = old


ALL = 1 << 40  # no row reaches it: one part, every bucket sorted at once


def _woven_rows(qs, lam, cap):
    """The weave of ``qs`` on a ``KernelTable`` with ``cap`` entries a row, and every row as
    priced: after the fill, and the merged tree's row after each merge."""
    model = CostModel("panes", lam, "fast")
    with _row_cap(cap):
        table = KernelTable(model, initial_trees(qs, model), 1e-12)
        table.fill()
        seen = []

        def note():
            rw, n = table.rows, len(table.trees)
            seen.append(
                (
                    rw.partner[: int(table.sizes[wk.SZ_POOL])].tolist(),
                    rw.negval[: int(table.sizes[wk.SZ_POOL])].tolist(),
                    rw.full[:n].tolist(),
                    rw.cutv[:n].tolist(),
                )
            )

        note()
        while (pair := table.pop_best()) is not None:
            table.row(table.merge(*pair))
            note()
    return _grouping(table.result()), seen


@settings(max_examples=examples(40))
@given(
    qnum=st.integers(2, 120),
    smax=st.sampled_from([10, 30, 100, 600]),
    lam=st.sampled_from([0.002, 1.0, 100.0]),
    omax=st.sampled_from([1, 10, 100]),
    gen=st.sampled_from(["nrm", "div", "factors"]),
    seed=st.integers(0, 10_000),
    parts=st.integers(1, 5),
    cap=st.sampled_from([1, 3, 16]),
    sort_first=st.sampled_from([1, 2, 5, 256]),
)
def test_rows_bounded_in_parts_are_the_same_rows(
    qnum, smax, lam, omax, gen, seed, parts, cap, sort_first
):
    """A row's buckets bounded and walked in parts (on threads), each part sorted a run at a
    time (``_sort_next``, from ``sort_first`` buckets on), the row the best of the parts' kept
    entries, from every row on: every row the very same (entries, values, cuts) as bounded and
    walked in one part with all buckets sorted at once, so the same plan, and the eager table's
    (whose pairs take Euclid's gcds)."""
    qs = generate(WorkloadSpec(qnum, smax, lam, 1, omax, gen, seed))
    with _parts(1, ALL, ALL):
        one, one_rows = _woven_rows(qs, lam, cap)
    with _parts(parts, 1, sort_first):
        many, many_rows = _woven_rows(qs, lam, cap)
    assert many_rows == one_rows
    assert many == one
    with _row_cap(cap):
        assert many == _grouping(_plans(qs, lam)[1])


@settings(max_examples=examples(60))
@given(
    vals=st.lists(st.sampled_from([-3.0, -1.5, -1.0, 0.0, 2.0, -np.inf, np.nan]), max_size=40),
    k=st.integers(1, 8),
)
def test_sort_next_runs_make_one_stable_sort(vals, k):
    """Runs of ``k``, then twice as many, sorted one after the other (as a row's walk asks for
    them): the order of one stable sort of the whole, ties (many here) by position, NaNs last
    (no bound is NaN, but none may be lost if one were)."""
    vb = np.array(vals, dtype=np.float64)
    n = len(vb)
    order = np.arange(n, dtype=np.int64)
    a = 0
    while a < n:
        end = wk._sort_next(vb, order, a, n, k)
        assert end > a  # every run moves on
        assert sorted(order[end:].tolist()) == order[end:].tolist()  # the rest in position order
        a, k = end, 2 * k
    assert order.tolist() == np.argsort(vb, kind="mergesort").tolist()


POSITIVE = st.floats(1e-6, 1e3, allow_nan=False)


@settings(max_examples=examples(300))
@given(
    members=st.lists(st.tuples(POSITIVE, st.floats(-50.0, 50.0) | st.just(-np.inf)), max_size=6),
    lam=st.floats(1e-3, 10.0),
    oz=POSITIVE,
    ez=st.floats(1e-6, 1.0) | st.sampled_from([float(x) for x in wk.SLOPES]),  # on a slope
    cfrac=st.floats(0.0, 1.0) | st.just(0.0),
    klo=st.floats(0.0, 1.0),
    cz=POSITIVE,
    costmax=POSITIVE,
)
def test_cut_envelope_skips_only_buckets_whose_members_are_all_behind_their_cuts(
    members, lam, oz, ez, cfrac, klo, cz, costmax
):
    """A bucket the envelope skips: every member's bound (the walk's, at its own Omega) is
    strictly below that member's cut value (``-inf`` where its row was full: never skipped).
    The envelope is filed from the members' cuts and Omegas in any order (``file_cut``)."""
    env = np.full((wk.NENV, 1), np.inf)
    for omega, cutval in members:
        wk.file_cut(env, 0, -cutval, omega)
    c = cfrac * ez
    if wk.cut_envelope(env, 0, wk.env_start(ez), lam, oz, ez, cz, c, klo, costmax):
        for omega, cutval in members:
            w = wk.bucket_margin(wk.bucket_value(lam, oz, ez, cz, c, klo, omega), cz, costmax)
            assert w < cutval


@settings(max_examples=examples(200))
@given(ez=st.floats(1e-30, 1.0) | st.sampled_from([float(x) for x in wk.SLOPES]) | st.just(0.0))
def test_env_start_is_the_first_slope_at_or_below_the_rows_beta(ez):
    """``env_start``: the first slope at or below ``ez (1 - 1e-6)``, the largest ``beta`` a row
    reads (``NENV`` when none is), by a linear search of the slopes."""
    beta = ez * (1.0 - 1e-6)
    first = next((k for k, x in enumerate(wk.SLOPES) if x <= beta), wk.NENV)
    assert wk.env_start(ez) == (first if beta > 0.0 else wk.NENV)


def test_cut_envelope_skips_a_bucket_its_least_omega_would_not():
    """The envelope's point: a member of small Omega and a high cut, one of large Omega and a
    low cut. At the least Omega the bound is above the lowest cut (the bucket's cut keeps the
    bucket), yet each member's own bound is below its own cut: the envelope skips it."""
    lam, oz, ez, c, klo, cz, costmax = 1.0, 1.0, 0.5, 0.0, 0.0, 2.0, 2.0
    members = [(0.1, 0.99), (10.0, -2.0)]  # (Omega, cut value)
    env = np.full((wk.NENV, 1), np.inf)
    for omega, cutval in members:
        wk.file_cut(env, 0, -cutval, omega)
    at_least = wk.bucket_margin(wk.bucket_value(lam, oz, ez, cz, c, klo, 0.1), cz, costmax)
    assert at_least > min(cut for _, cut in members)  # the bucket's cut would not skip it
    for omega, cutval in members:
        assert (
            wk.bucket_margin(wk.bucket_value(lam, oz, ez, cz, c, klo, omega), cz, costmax) < cutval
        )
    assert wk.cut_envelope(env, 0, wk.env_start(ez), lam, oz, ez, cz, c, klo, costmax)
    wk.file_cut(env, 0, np.inf, 5.0)  # a member whose row was full: its pairs are the row's
    assert not wk.cut_envelope(env, 0, wk.env_start(ez), lam, oz, ez, cz, c, klo, costmax)


def test_cut_envelope_reads_the_chord_between_its_slopes():
    """Between two slopes the envelope reads the chord of its values (the least ``cut value +
    Omega x slope`` is concave in the slope). With one member it is the member's line: a
    bound between the line and its value at the slope below is skipped (the slope below
    would keep it), a bound above the line is not."""
    omega, cutval = 8.0, 1.0
    oz, ez, c, klo, cz, costmax = 1.0, 0.6, 0.0, 0.0, 1.0, 1.0  # beta = ez - c = 0.6
    env = np.full((wk.NENV, 1), np.inf)
    wk.file_cut(env, 0, -cutval, omega)
    assert 0.6 not in wk.SLOPES  # beta between two slopes
    below = wk.SLOPES[wk.SLOPES < 0.6][0]
    for lam in (5.79, 5.81):  # the line at beta: 1 + 8 x 0.6 = 5.8; at the slope below 5.757
        assert lam > cutval + omega * below  # the slope below would keep the bucket
        w = wk.bucket_margin(wk.bucket_value(lam, oz, ez, cz, c, klo, omega), cz, costmax)
        skip = wk.cut_envelope(env, 0, wk.env_start(ez), lam, oz, ez, cz, c, klo, costmax)
        assert skip == (lam < 5.8)
        assert (w < cutval) == (lam < 5.8)  # the walk agrees: the member's pair is its own


@settings(max_examples=examples(40))
@given(m=st.integers(1, 5000), top=st.integers(1, 3000))
def test_gcd_table_is_the_gcd(m, top):
    """``gcd_table``'s sieve over the divisors of a bucket's modulus gives Euclid's gcd."""
    from placement.lazy_table import spectra

    dv = spectra.divisors(m)[0].astype(np.int64)
    sp = wk.Spectra(
        start=np.zeros(1, np.int64),
        size=np.zeros(1, np.int64),
        d=np.zeros(1, np.int64),
        f=np.zeros(1),
        phi=np.zeros(1),
        dense=np.zeros(1),
        bstart=np.zeros(1, np.int64),
        bsize=np.array([len(dv)], np.int64),
        bd=dv,
        gcds=np.full(top, -1, np.int64),
    )
    wk.gcd_table(m, sp, 0, top)
    assert sp.gcds[1:].tolist() == [math.gcd(m, x) for x in range(1, top)]


def test_tiny_row_caps_refill():
    """Exp 5's shape with rows of two entries: refills happen, the plan is the same."""
    qs = generate(WorkloadSpec(200, 600, 1.0, 3, 30, "div", 0))
    model = CostModel("panes", 1.0, "fast")
    trees = initial_trees(qs, model)
    with _row_cap(2):
        table = KernelTable(model, trees, 1e-12)
        table.fill()
        while (pair := table.pop_best()) is not None:
            table.row(table.merge(*pair))
    assert table.refills > 10
    plan = weaveshare(qs, CostModel("panes", 1.0, "fast"))
    assert _grouping(table.result()) == _grouping(plan)


@settings(max_examples=examples(40))
@given(
    qnum=st.integers(2, 150),
    smax=st.sampled_from([10, 30, 600]),
    lam=st.sampled_from([0.002, 1.0, 100.0]),
    gen=st.sampled_from(["nrm", "div", "factors"]),
    seed=st.integers(0, 10_000),
    merges=st.integers(0, 40),
)
def test_single_modulus_buckets_stay_in_omega_order(qnum, smax, lam, gen, seed, merges):
    """A row stops walking a single-modulus bucket at the first member whose bound is behind
    its kept entries, which is only exact if the lists are in Omega order and the bucket's
    Omega is at most every member's: checked after the fill and after each merge."""
    qs = generate(WorkloadSpec(qnum, smax, lam, 1, 10, gen, seed))
    model = CostModel("panes", lam, "fast")
    table = KernelTable(model, initial_trees(qs, model), 1e-12)
    table.fill()

    def check():
        bk, sl = table.buckets, table.slots
        for b in range(table.nb):
            members = []
            s = int(bk.head[b])
            while s >= 0:
                members.append(s)
                s = int(sl.nxt[s])
            alive = [s for s in members if sl.alive[s]]
            every = {s for s in range(len(table.trees)) if sl.bucket[s] == b and sl.alive[s]}
            pending = int(table.sizes[wk.SZ_PENDING])
            assert set(alive) == every - {pending}  # every alive filed member is listed
            assert all(s <= bk.newest[b] for s in members)
            if bk.mod[b] > 0:
                oms = [sl.om[s] for s in members]
                assert oms == sorted(oms)
                assert all(bk.om[b] <= sl.om[s] for s in alive)

    check()
    for _ in range(merges):
        pair = table.pop_best()
        if pair is None:
            break
        table.row(table.merge(*pair))
        check()


def test_single_modulus_rows_need_no_engine_pricing():
    """Prime slides (exp 2's shape): every pair is single-modulus until trees mix moduli."""
    qs = generate(WorkloadSpec(300, 600, 1.0, 3, 100, "div", 0))
    model = CostModel("panes", 1.0, "fast")
    plan = weaveshare(qs, model)
    assert weave.last_evaluations < 20
    paper = weaveshare(qs, CostModel("panes", 1.0, "fast"), strategy="paper")
    assert _grouping(plan) == _grouping(paper)


@settings(max_examples=examples(200))
@given(
    vals=st.lists(st.integers(0, 6), min_size=0, max_size=80),
    cap=st.integers(1, 20),
    seed=st.integers(0, 1000),
)
def test_row_keeps_its_best_entries_sorted(vals, cap, seed):
    """A row keeps its best ``cap`` entries by (-value, partner uid), sorted (many ties in the
    values: the uid decides)."""
    rng = np.random.default_rng(seed)
    n = len(vals)
    uid = rng.permutation(max(n, 1)).astype(np.int64)[:n]
    tv, tu = np.zeros(cap), np.zeros(cap, np.int64)
    tj, tx = np.zeros(cap, np.int64), np.zeros(cap, np.bool_)
    cnt = 0
    for i in range(n):
        cnt = wk._keep(tv, tu, tj, tx, cnt, cap, float(vals[i]), uid[i], i, bool(i % 2))
        assert cnt == min(i + 1, cap)
    rj, rv, rx = np.zeros(cap + 3, np.int64), np.zeros(cap + 3), np.zeros(cap + 3, np.bool_)
    wk._sorted_out(tv, tu, tj, tx, cnt, rj, rv, rx, 3)
    want = sorted((float(vals[i]), int(uid[i]), i) for i in range(n))[:cap]
    got = [(rv[3 + k], int(uid[rj[3 + k]]), int(rj[3 + k])) for k in range(cnt)]
    assert got == want
    assert all(rx[3 + k] == bool(rj[3 + k] % 2) for k in range(cnt))


@contextlib.contextmanager
def _row_cap(cap):
    old, lt.ROW_CAP = lt.ROW_CAP, cap
    try:
        yield
    finally:
        lt.ROW_CAP = old


def _refill(t, z, lam):
    """The next part of ``z``'s row after its cut (what ``pop`` does for a used-up row; the
    heads heap is emptied first: ``pop`` refills only rows whose head it has taken off)."""
    t.sizes[wk.SZ_HEADS] = 0
    t._room(min(2 * int(t.rows.cap[z]), wk.MAX_CAP))
    wk.rows(
        np.array([z], np.int64),
        t.floor,
        lam,
        t.slots,
        t.classes,
        t.buckets,
        t.nb,
        t.wmax,
        lt.NO_PRUNE,
        t._hist,
        0,
        True,
        t.rows,
        t.heaps,
        t.spec,
    )


@settings(max_examples=examples(40))
@given(
    qnum=st.integers(2, 100),
    smax=st.sampled_from([12, 40, 600]),
    lam=st.sampled_from([0.002, 1.0, 30.0]),
    gen=st.sampled_from(["nrm", "div"]),
    seed=st.integers(0, 10_000),
    cap=st.integers(1, 5),
    kill=st.floats(0.0, 0.5),
)
def test_kept_entries_and_refills_give_the_whole_row_in_order(
    qnum, smax, lam, gen, seed, cap, kill
):
    """A row's kept entries followed by its refills (each after the previous cut) are in the
    eager table's order (-value, partner uid), and over all rows every alive pair above the
    floor comes exactly once: in the row of the later-filed tree, unless it was after the
    earlier one's cut when the later one was priced (then the earlier row's refills price it);
    the cap doubles per refill."""
    qs = generate(WorkloadSpec(qnum, smax, lam, 0.5, 10, gen, seed))
    model = CostModel("panes", lam, "fast")
    trees = initial_trees(qs, model)
    if len(trees) > 3:  # some multi-modulus trees too
        trees = [model.merge(trees[0], trees[1])] + trees[2:]
    t = KernelTable(model, trees, 1e-12)
    with _row_cap(cap):
        t.fill()
    n = len(t.trees)
    rng = np.random.default_rng(seed)
    t.slots.alive[:n] &= rng.random(n) >= kill  # trees merged away meanwhile
    seen: dict[frozenset, float] = {}
    for z in range(n):
        if not t.slots.alive[z]:
            continue
        got = []
        caps = [int(t.rows.cap[z])]
        while True:
            got += [
                (t.rows.negval[p], int(t.slots.uid[t.rows.partner[p]]), int(t.rows.partner[p]))
                for p in range(int(t.rows.pos[z]), int(t.rows.end[z]))
                if t.slots.alive[t.rows.partner[p]]
            ]
            if t.rows.full[z]:
                break
            _refill(t, z, lam)
            caps.append(int(t.rows.cap[z]))
        assert got == sorted(set(got))  # in order, each partner once
        assert caps == [cap * 2**i for i in range(len(caps))]
        for negv, _, s in got:
            pair = frozenset((z, s))
            assert pair not in seen  # not in the partner's row too
            seen[pair] = negv
    for z in range(n):
        for s in range(z):
            if t.slots.alive[z] and t.slots.alive[s]:
                v, exact = _pair_value(t, z, s, lam)
                if v > t.floor:
                    assert seen.pop(frozenset((z, s))) == -v
    assert not seen  # no dead or non-positive pairs


@settings(max_examples=examples(60))
@given(
    qnum=st.integers(2, 150),
    smax=st.sampled_from([6, 12, 40, 200]),
    lam=st.sampled_from([0.002, 0.05, 1.0, 30.0]),
    omax=st.sampled_from([1, 2, 10]),
    gen=st.sampled_from(["nrm", "div", "factors"]),
    seed=st.integers(0, 10_000),
    mixed=st.booleans(),
)
def test_fill_keeps_every_positive_pair(qnum, smax, lam, omax, gen, seed, mixed):
    """After a fill (bucket-pair mask, residue counts, bucket bounds), every pair whose exact
    benefit is above the floor sits in a row with a value >= its benefit (equal when exact), or
    after the cut of a row that dropped entries."""
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
        for p in range(int(t.rows.pos[z]), int(t.rows.end[z])):
            found[frozenset((z, int(t.rows.partner[p])))] = (
                -t.rows.negval[p],
                bool(t.rows.exact[p]),
            )
    for i, x in enumerate(trees):
        for y in trees[i + 1 :]:
            b = model.benefit(x, y)
            got = found.get(frozenset((slot_of[x.uid], slot_of[y.uid])))
            if b > 1e-12 and got is None:  # only beyond a cut: a row that dropped entries
                z = max(slot_of[x.uid], slot_of[y.uid])
                other = min(slot_of[x.uid], slot_of[y.uid])
                uz, uo = int(t.slots.uid[z]), int(t.slots.uid[other])
                rw = t.rows
                assert (not rw.full[z] and (-b, uo) > (rw.cutv[z], int(rw.cutu[z]))) or (
                    not rw.full[other] and (-b, uz) > (rw.cutv[other], int(rw.cutu[other]))
                ), (b, x.classes, y.classes)
            if got is not None:
                assert got[0] == b if got[1] else got[0] >= b


def test_compiled_machine_code_is_looked_up_by_argument_types():
    """``compiled`` types a table's arguments once per set of types: equal types give the very
    function numba compiled for them, other dtypes, layouts or tuple classes another one (the
    cache must never hand back code for other types)."""
    probe = wk.numba.njit(lambda t, n, x, y: n + t[1].size + x.size + y.size)
    ints = wk.Prune(False, *(np.zeros(3, np.int64) for _ in range(4)), 1)
    args = (ints, 5, np.zeros(4), np.zeros((2, 3), np.int64))
    first = wk.compiled(probe, args)
    assert first(*args) == 5 + 3 + 4 + 6
    again = (ints._replace(ptr=np.ones(9, np.int64)), 7, np.ones(2), np.ones((5, 1), np.int64))
    assert wk.compiled(probe, again) is first
    for other in (
        (ints, 5, np.zeros(4, np.float32), args[3]),  # dtype
        (ints, 5, np.zeros(8)[::2], args[3]),  # layout (not contiguous)
        (ints, 5.0, args[2], args[3]),  # a float, not an int
        (tuple(ints), 5, args[2], args[3]),  # a plain tuple, not the NamedTuple
    ):
        key = tuple(wk.numba.typeof(a) for a in other)
        assert key != tuple(wk.numba.typeof(a) for a in args)
        assert wk.compiled(probe, other) is not first


@settings(max_examples=examples(30))
@given(
    qnum=st.integers(2, 80),
    smax=st.sampled_from([5, 12, 30]),
    lam=st.sampled_from([0.1, 1.0, 100.0]),
    omax=st.sampled_from([1, 4, 10]),
    seed=st.integers(0, 10_000),
    dup=st.integers(0, 12),
    tech=st.sampled_from(["panes", "flatfit", "slickdeque_inv", "flatfat"]),
)
def test_lazy_equals_paper_with_duplicate_windows(qnum, smax, lam, omax, seed, dup, tech):
    """One tree per query with repeated windows (the Python table, whose Omega bounds subtract
    the items two trees share): the lazy table makes the paper table's merges, ties included:
    the same trees, in the same order, at the same costs."""
    qs = generate(WorkloadSpec(qnum, smax, lam, 1, omax, "nrm", seed))
    qs += [
        Query(f"dup{i}", q.range, q.slide, q.aggregate, q.stream) for i, q in enumerate(qs[:dup])
    ]
    got = []
    for strategy in ("lazy", "paper"):
        model = CostModel(tech, lam, "fast")
        trees = weave([model.tree([q]) for q in qs], model, strategy=strategy)
        got.append([([q.id for q in t.queries], t.cost) for t in trees])
    assert got[0] == got[1]


@settings(max_examples=examples(40))
@given(
    qnum=st.integers(2, 24),
    smax=st.sampled_from([5, 12, 30]),
    lam=st.sampled_from([0.1, 1.0, 100.0]),
    seed=st.integers(0, 10_000),
    dup=st.integers(1, 12),
    tech=st.sampled_from(["panes", "flatfit", "slickdeque_inv", "flatfat"]),
)
def test_python_table_bounds_are_above_the_benefits(qnum, smax, lam, seed, dup, tech):
    """Every bound the Python table files (``_Table._candidates``, trees with repeated windows
    and trees woven from them) is at least the pair's exact benefit."""
    qs = generate(WorkloadSpec(qnum, smax, lam, 1, 4, "nrm", seed))
    qs += [
        Query(f"dup{i}", q.range, q.slide, q.aggregate, q.stream) for i, q in enumerate(qs[:dup])
    ]
    model = CostModel(tech, lam, "fast")
    trees = [model.tree([q]) for q in qs]
    trees += [model.merge(trees[i], trees[i + 1]) for i in range(0, len(trees) - 1, 2)]
    table = _Table(model, trees, floor=-math.inf)
    table.fill()
    checked = 0
    for slot in range(min(len(trees), 10)):  # each against every other: enough, and cheap
        idx, bound = table._candidates(slot)
        for other, b in zip(idx.tolist(), bound.tolist()):
            assert b >= model.benefit(trees[slot], trees[other]) - 1e-9 * (1 + abs(b))
            checked += 1
    assert checked > 0


def _big_groups(rng, trees, per_tree, smax):
    """Query groups of ``per_tree`` queries of distinct slides each (windows disjoint across
    all groups): merged trees of many moduli, over ``WORK_LIMIT`` class pairs two by two."""
    slides = rng.permutation(np.arange(2, smax + 1))[: trees * per_tree]
    groups = []
    for t in range(trees):
        qs = []
        for s in slides[t * per_tree : (t + 1) * per_tree]:
            s = int(s)
            qs.append(Query(f"t{t}s{s}", int(rng.integers(s + 1, 4 * s)), s))
        groups.append(qs)
    return groups


@settings(max_examples=examples(15), deadline=None)
@given(seed=st.integers(0, 10_000), lam=st.sampled_from([0.01, 0.3, 1.0]))
def test_tight_bound_is_above_the_benefit_however_many_class_pairs(seed, lam):
    """``tight_bound`` (per-class union bounds with no work limit) certifies the engine's
    benefit of two large merged trees, and is never above the row's ``C <= min(E)`` bound."""
    rng = np.random.default_rng(seed)
    groups = _big_groups(rng, 2, 40, 150)
    model, trees, t, slots = _table(groups, lam)
    sl, cl = t.slots, t.classes
    z, s = slots
    assert sl.kcls[z] * sl.kcls[s] > wk.WORK_LIMIT
    args = (sl.e, sl.om, sl.cost, sl.kcls, sl.cstart, cl.mod, cl.res)
    loose, exact = _pair_value(t, z, s, lam)
    assert not exact
    benefit = model.benefit(trees[0], trees[1])
    for a, b in ((z, s), (s, z)):  # either way round (pop_best's a, b are in uid order)
        assert benefit <= wk.tight_bound(a, b, lam, *args) <= loose


@pytest.mark.parametrize(("per", "base", "step", "lam"), [(34, 1000, 37, 1.0), (40, 500, 23, 0.3)])
def test_pairs_of_large_trees_below_the_floor_are_dropped_unpriced(per, base, step, lam):
    """Two large merged trees of nearly equal edge rates and few common edges: their row bound
    (``C <= min(E)``) is near lambda and reaches the top, ``tight_bound`` shows it at most the
    floor and the table drops the pair without the engine. A third tree has the first one's
    classes (ranges one slide longer): that pair is worth weaving and is priced. The plan is
    the paper table's."""
    slides = [base + step * i for i in range(per)]
    groups = [
        [Query(f"a{s}", 2 * s + 1, s) for s in slides],
        [Query(f"b{s}", 2 * s + 3, s + 1) for s in slides],
        [Query(f"c{s}", 3 * s + 1, s) for s in slides],
        [Query("d", 7, 5)],
    ]
    out = []
    for strategy in ("lazy", "paper"):
        model = CostModel("panes", lam, "fast")
        trees = [model.tree(g) for g in groups]
        if strategy == "lazy":
            table = KernelTable(model, trees, 1e-12)
            table.fill()
            while (pair := table.pop_best()) is not None:
                table.row(table.merge(*pair))
            out.append(table.result())
        else:
            out.append(weave(trees, model, strategy="paper"))
    assert table.dropped >= 1
    assert table.evaluations >= 1
    lazy, paper = out
    assert _grouping(lazy) == _grouping(paper)
    assert math.fsum(t.cost for t in lazy) == math.fsum(t.cost for t in paper)
