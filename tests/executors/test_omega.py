"""The cost model's Omega against the executors' measured operation counts.

SlickDeque Inv: Omega = 2 x distinct window lengths (in slices) of the whole tree, exactly what
the kernel performs per edge.  Each test also brute-forces the window lengths from the edge
definition alone (no shared helper), so a wrong helper cannot make model and executor agree.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from executors import ExecutionTree
from placement.cost import omega, omega_floor, running_aggregates
from placement.queries import Query
from placement.slicing import window_lengths
from placement.trees import CostModel
from placement.weaveshare import weave

PRIMITIVES = {"sum": 1, "count": 1, "avg": 2, "stddev": 3}


def brute_lengths(windows) -> set[int]:
    """Distinct slices per window, from the definition: edges t with t % s in {0, r % s}."""
    period = math.lcm(*(s for _, s in windows))
    lo, hi = -period, 2 * period + max(r for r, _ in windows)
    edges = [t for t in range(lo, hi) if any(t % s == 0 or t % s == r % s for r, s in windows)]
    out = set()
    for r, s in windows:
        for x in range(0, period, s):
            out.add(sum(1 for e in edges if x <= e < x + r))
    return out


def measured(queries, technique="slickdeque_inv", span=None):
    """Run a dense stream (one tuple per time unit) with op counting; the tree's op counts."""
    windows = {(q["range"], q["slide"]) for q in queries}
    period = math.lcm(*(s for _, s in windows))
    span = span or 3 * period + 2 * max(r for r, _ in windows) + 50
    tree = ExecutionTree(queries, technique=technique, count_ops=True)
    ts = np.arange(span, dtype=np.int64)
    tree.process(ts, (ts % 7).astype(np.int64))
    return tree.op_counts()


@settings(max_examples=examples(150))
@given(
    wins=st.lists(st.tuples(st.integers(1, 40), st.integers(1, 10)), min_size=1, max_size=4),
    agg=st.sampled_from(sorted(PRIMITIVES)),
)
def test_slickdeque_inv_measured_ops_equal_omega(wins, agg):
    """Single and woven trees: measured ops per edge == Omega x primitives, on every edge."""
    qs = [dict(id=f"q{i}", aggregate=agg, range=r, slide=s) for i, (r, s) in enumerate(wins)]
    model = CostModel("slickdeque", 1.0).tree(
        [Query(q["id"], q["range"], q["slide"], agg) for q in qs]
    )
    assert model.technique == "slickdeque_inv"
    lengths = brute_lengths(set(wins))
    assert model.omega == 2 * len(lengths)
    assert running_aggregates(frozenset(wins)) == (len(lengths), True)
    oc = measured(qs, "slickdeque")
    assert oc["slices"] > 0
    assert oc["omega"] == PRIMITIVES[agg] * model.omega
    assert set(oc["per_slice"].tolist()) == {PRIMITIVES[agg] * model.omega}
    # the old formula (2 x unique ranges) is a lower bound, and the merge floor is valid
    assert 2 * len({r for r, _ in wins}) <= model.omega
    assert omega_floor("slickdeque_inv", set(wins), model.omega) <= model.omega


def test_woven_example_has_five_lengths_not_three():
    """Ranges 16/10/8, slides 4/5/4 (WeaveShare Example 3's queries woven in one tree)."""
    wins = [(16, 4), (10, 5), (8, 4)]
    assert window_lengths(wins) == {(8, 4): (2, 3, 4), (10, 5): (4,), (16, 4): (6, 7)}
    assert brute_lengths(wins) == {2, 3, 4, 6, 7}
    om = omega("slickdeque_inv", wins, 0.4)
    assert om == 10.0  # eq. 7.6 gives 3 (x2 = 6): 40% low
    qs = [dict(id=f"q{i}", aggregate="sum", range=r, slide=s) for i, (r, s) in enumerate(wins)]
    assert measured(qs)["omega"] == 10.0


def test_shared_lengths_make_omega_below_sum_per_query():
    """(2, 2) and (3, 3): lengths {1, 2} and {2}: the length 2 is shared (Omega 4, not 6)."""
    assert window_lengths([(2, 2), (3, 3)]) == {(2, 2): (1, 2), (3, 3): (2,)}
    assert omega("slickdeque_inv", [(2, 2), (3, 3)], 2 / 3) == 4.0
    qs = [
        dict(id="a", aggregate="sum", range=2, slide=2),
        dict(id="b", aggregate="sum", range=3, slide=3),
    ]
    assert measured(qs)["omega"] == 4.0


def test_omega_can_shrink_on_merge_and_weaveshare_still_exact():
    """Weaving a slide-1 query into the 16/10/8 tree makes every length equal to its range:
    Omega 10 -> 8.  So max(Omega_x, Omega_y) is no bound for SlickDeque Inv merges; the floor
    2 x #unique ranges is.  With lambda = 3 the merge saves 1 (3 + 0.4*10 + 1*2 - 1*8), which
    the old bound (E 1 x Omega 10: benefit <= -1) pruned."""
    x = [Query("a", 16, 4), Query("b", 10, 5), Query("c", 8, 4)]
    y = [Query("d", 1, 1)]
    model = CostModel("slickdeque_inv", 3.0)
    tx, ty = model.tree(x), model.tree(y)
    assert (tx.omega, ty.omega, float(tx.edge_rate)) == (10.0, 2.0, 0.4)
    e, om, cost = model.merged_price(tx, ty)
    assert (e, om) == (1, 8.0)
    assert model.benefit(tx, ty) == pytest.approx(1.0)
    assert model.omega_floor(tx) == 6.0 and model.omega_floor(ty) == 2.0
    plan = weave([tx, ty], model)  # from these two trees the only merge saves 1: it is made
    assert [sorted(q.id for q in t.queries) for t in plan] == [["a", "b", "c", "d"]]
    qs = [dict(id=q.id, aggregate="sum", range=q.range, slide=q.slide) for q in x + y]
    assert measured(qs)["omega"] == 8.0


@settings(max_examples=examples(80))
@given(
    x=st.lists(st.tuples(st.integers(1, 50), st.integers(1, 12)), min_size=1, max_size=4),
    y=st.lists(st.tuples(st.integers(1, 50), st.integers(1, 12)), min_size=1, max_size=4),
    tech=st.sampled_from(["panes", "flatfit", "flatfat", "slickdeque_inv", "slickdeque_noninv"]),
)
def test_omega_floor_bounds_every_merge(x, y, tech):
    """WeaveShare's pruning needs Omega(x u y) >= floor(x) for every technique."""
    agg = "max" if tech == "slickdeque_noninv" else "sum"
    model = CostModel(tech, 1.0)
    tx = model.tree([Query(f"x{i}", r, s, agg) for i, (r, s) in enumerate(x)])
    ty = model.tree([Query(f"y{i}", r, s, agg) for i, (r, s) in enumerate(y)])
    _, om, _ = model.merged_price(tx, ty)
    assert om >= max(model.omega_floor(tx), model.omega_floor(ty)) - 1e-12


def test_beyond_the_scan_budget_the_model_is_a_lower_bound():
    """Coprime slides: the composite slide (~10^12) is not scanned; the model falls back to
    2 x #unique ranges and the executor, registering lengths lazily, measures at least that."""
    wins = [(2500, 997), (1500, 991), (2949, 983)]
    assert window_lengths(wins) is None
    assert running_aggregates(frozenset(wins)) == (3, False)
    qs = [dict(id=f"q{i}", aggregate="sum", range=r, slide=s) for i, (r, s) in enumerate(wins)]
    tree = ExecutionTree(qs, technique="slickdeque_inv", count_ops=True)
    ts = np.arange(0, 60_000, 7, dtype=np.int64)
    tree.process(ts, np.ones(ts.shape[0], dtype=np.int64))
    per = tree.op_counts()["per_slice"]
    steady = per[per.shape[0] // 2 :]
    assert steady.min() >= omega("slickdeque_inv", wins, 0.0) == 6.0


def test_bench_omega_measures_planned_trees():
    """``weaveplace bench omega`` on a small workload: SlickDeque Inv exact on every tree;
    Panes on a lone (8, 2): each edge answers one window of 4 slices = 3 combines, the model's
    r/s = 4 (Table 11 charges n, the kernel does n - 1)."""
    from sim.bench.omega import measure_tree, run_omega_check, summarize
    from sim.workload import WorkloadSpec

    spec = WorkloadSpec(qnum=8, smax=12, rate=1.0, omax=4, gen="factors", seed=3)
    res = run_omega_check(spec, ("slickdeque_inv", "panes"))
    rows = {r["technique"]: r for r in summarize(res)}
    sdi = rows["slickdeque_inv"]
    assert sdi["exact_trees"] == sdi["trees"] > 0 and sdi["diff_pct"] == 0.0
    assert rows["panes"]["diff_pct"] < 0
    tree = CostModel("panes", 1.0).tree([Query("a", 8, 2)])
    c = measure_tree(tree, "panes")
    assert (c.estimated, c.measured, c.diff_pct) == (4.0, 3.0, -25.0)


@pytest.mark.parametrize("wins", [[(64, 1)], [(40, 4), (30, 6)], [(300, 7), (120, 5), (90, 3)]])
def test_slickdeque_noninv_measured_ops_match_omega_on_uniform_input(wins):
    """Non-Inv's Omega = 2 - 2/nP_max value comparisons per edge (``placement.cost``): on
    uniform random partials (one tuple per slice) the kernel's mean is within 2 % of it, and
    eq. 7.7's ``nQ + sum 1/i!`` (position comparisons) would overshoot by far more."""
    qs = [dict(id=f"q{i}", aggregate="max", range=r, slide=s) for i, (r, s) in enumerate(wins)]
    model = CostModel("slickdeque", 1.0).tree(
        [Query(q["id"], q["range"], q["slide"], "max") for q in qs]
    )
    assert model.technique == "slickdeque_noninv"
    np_max = max(r for r, _ in wins) * float(model.edge_rate)
    assert model.omega == pytest.approx(2 - 2 / np_max, rel=1e-12)
    tree = ExecutionTree(qs, technique="slickdeque", count_ops=True)
    # one tuple per time unit placed just after each edge: one random partial per slice
    period = math.lcm(*(s for _, s in wins))
    edges = np.array([t for t in range(period) if any(t % s in (0, r % s) for r, s in wins)])
    reps = 400_000 // len(edges) + 1
    ts = (edges[None, :] + period * np.arange(reps)[:, None]).ravel().astype(np.int64)
    rng = np.random.default_rng(1)
    tree.process(ts, rng.random(ts.shape[0]))
    per = tree.op_counts()["per_slice"]
    steady = per[per.shape[0] // 10 :]
    assert steady.mean() == pytest.approx(model.omega, rel=0.02)
    eq77 = model.omega + len(wins) + sum(1 / math.factorial(i) for i in range(1, 20))
    assert steady.mean() < 0.7 * eq77


def test_bench_omega_under_cutty():
    """``weaveplace bench omega --slicing cutty``: plans priced under Cutty, trees run with
    Cutty slicing; SlickDeque Inv exact on every tree (open-partial combines included), also
    on the Panes plan's trees."""
    from sim.bench.omega import run_omega_check, slickdeque_inv_on_plan, summarize
    from sim.workload import WorkloadSpec

    spec = WorkloadSpec(qnum=8, smax=12, rate=1.0, omax=4, gen="factors", seed=3)
    res = run_omega_check(spec, ("slickdeque_inv", "flatfit"), slicing="cutty")
    assert all(c.slicing == "cutty" and c.exact_scan for v in res.values() for c in v)
    rows = {r["technique"]: r for r in summarize(res)}
    sdi = rows["slickdeque_inv"]
    assert sdi["exact_trees"] == sdi["trees"] > 0 and sdi["diff_pct"] == 0.0
    assert "old_formula" not in sdi and rows["flatfit"]["slicing"] == "cutty"
    other = slickdeque_inv_on_plan(spec, "panes", "cutty")
    assert other["trees_exact"] == other["trees"] > 0 and other["model"] == other["measured"]


def test_bench_omega_skips_trees_too_long_to_measure(monkeypatch):
    """A tree whose composite slide is beyond ``MAX_COMPOSITE_SLIDE`` is counted as not
    measured (the progress line says so), not a traceback; a technique left with no tree is
    left out of the summary."""
    import sim.bench.omega as oc
    from sim.workload import WorkloadSpec

    monkeypatch.setattr(oc, "MAX_COMPOSITE_SLIDE", 1)
    said = []
    res = oc.run_omega_check(
        WorkloadSpec(qnum=6, smax=12, rate=1.0, omax=4, gen="factors", seed=3),
        ("panes",),
        progress=said.append,
    )
    assert res == {"panes": []}
    assert "not measured" in said[-1] and oc.summarize(res) == []
