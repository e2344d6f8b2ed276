"""WG_PF (placement.pareto): plans recompute, the front is non-dominated and bounded by the exact
front, each ``choose`` rule picks what it says, the exact front equals a brute force, and a
capacity-infeasible case ends with one line and a shedding proposal."""

from __future__ import annotations

import itertools
import json
import math

import pytest
from helpers import examples, random_queries, set_partitions
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.exact.optimum import solve_exact
from placement.local_search.search import LocalSearch, wg_ls
from placement.optimizers import optimize
from placement.pareto.choose import ChoiceRule, ChooseError, choose
from placement.pareto.front import (
    Archive,
    dominates,
    front_distance,
    hypervolume,
    nondominated,
    weakly_dominates,
)
from placement.pareto.search import Splitter, wg_pf
from placement.plan import verify_plan
from placement.queries import Query
from placement.trees import CostModel
from sim.config import ConfigError, config_from_mapping
from sim.simulate import plan_for, simulate

TOL = 1e-9


def point(p):
    return (p.total_cost, p.max_cost)


# ---- independent oracles -------------------------------------------------------------------------


def brute_points(queries, model, n_nodes):
    """Every (TotalCost, MaxCost) of every plan: each query to a node, each node's queries split
    into single-key trees every possible way (no subset DP, no pruning)."""
    pts = set()
    for assign in itertools.product(range(n_nodes), repeat=len(queries)):
        per_node = []
        for j in range(n_nodes):
            mine = [q for q, a in zip(queries, assign) if a == j]
            costs = set()
            for blocks in set_partitions(mine):
                if all(len({(q.stream, q.aggregate) for q in b}) == 1 for b in blocks):
                    costs.add(sum(model.tree(b).cost for b in blocks))
            per_node.append(sorted(costs) or [0.0])
        for loads in itertools.product(*per_node):
            pts.add((sum(loads), max(loads)))
    return pts


def brute_front(pts):
    """Non-dominated points by pairwise comparison (quadratic, no sorting trick)."""
    pts = list(pts)
    keep = [
        p
        for p in pts
        if not any(
            q[0] <= p[0] * (1 + TOL)
            and q[1] <= p[1] * (1 + TOL)
            and (q[0] < p[0] * (1 - TOL) or q[1] < p[1] * (1 - TOL))
            for q in pts
        )
    ]
    out = []
    for p in sorted(keep):
        if not out or not (
            math.isclose(p[0], out[-1][0], rel_tol=1e-7)
            and math.isclose(p[1], out[-1][1], rel_tol=1e-7)
        ):
            out.append(p)
    return out


def grid_area(points, ref):
    """Hypervolume by coordinate compression: cells of the grid of all coordinates that some
    point dominates (independent of the sweep in ``hypervolume``)."""
    pts = [p for p in points if p[0] < ref[0] and p[1] < ref[1]]
    xs = sorted({p[0] for p in pts} | {ref[0]})
    ys = sorted({p[1] for p in pts} | {ref[1]})
    area = 0.0
    for x0, x1 in zip(xs, xs[1:]):
        for y0, y1 in zip(ys, ys[1:]):
            if any(p[0] <= x0 and p[1] <= y0 for p in pts):
                area += (x1 - x0) * (y1 - y0)
    return area


# ---- front structure -----------------------------------------------------------------------------


@settings(max_examples=examples(40))
@given(pts=st.lists(st.tuples(st.integers(1, 30), st.integers(1, 30)), min_size=1, max_size=25))
def test_nondominated_and_hypervolume_match_oracles(pts):
    pts = [(float(a), float(b)) for a, b in pts]
    got = [pts[i] for i in nondominated(pts)]
    want = brute_front(pts)
    assert got == want
    ref = (31.0, 31.0)
    assert math.isclose(hypervolume(pts, ref), grid_area(pts, ref), rel_tol=1e-12)
    assert math.isclose(hypervolume(got, ref), hypervolume(pts, ref), rel_tol=1e-12)
    for p in pts:
        d = front_distance(p, got)
        assert d >= 0
        # d is the smallest factor: some front point is within it in both objectives
        assert any(
            p[0] <= f[0] * (1 + d) * (1 + TOL) and p[1] <= f[1] * (1 + d) * (1 + TOL) for f in got
        )
        assert (d == 0) == any(weakly_dominates(p, f) for f in got)


@settings(max_examples=examples(25))
@given(
    data=st.data(),
    n=st.integers(2, 7),
    n_nodes=st.integers(1, 4),
    lam=st.sampled_from([0.5, 5.0, 50.0]),
    keys=st.integers(1, 2),
    technique=st.sampled_from(["panes", "slickdeque", "flatfit"]),
    front_size=st.integers(1, 8),
)
def test_front_plans_recompute_are_nondominated_and_bounded_by_exact(
    data, n, n_nodes, lam, keys, technique, front_size
):
    qs = random_queries(data.draw, n, keys)
    model = CostModel(technique, lam)
    res = wg_pf(qs, model, n_nodes, front_size=front_size)
    assert 1 <= len(res.front) <= front_size
    ids = sorted(q.id for q in qs)
    for p in res.front:
        d = p.to_dict()
        assert verify_plan(d) == []  # every plan recomputes from its queries
        assert sorted(q.id for q in p.queries) == ids and len(p.nodes) == n_nodes
    pts = [point(p) for p in res.front]
    assert pts == sorted(pts)
    for a, b in itertools.permutations(pts, 2):
        assert not weakly_dominates(a, b)  # pairwise non-dominated (and distinct)
    ex = [point(p) for p in solve_exact(qs, model, n_nodes).front]
    for p in pts:  # nothing beats the exact front
        assert any(weakly_dominates(e, p) for e in ex)
    if front_size == 8:  # room for the cover: every seed is weakly dominated
        for name, s in res.seeds.items():
            assert any(weakly_dominates(f, point(s)) for f in pts), name


def test_front_covers_table7_and_wg_ls_on_a_mid_instance():
    from sim.workload import WorkloadSpec, generate

    qs = generate(WorkloadSpec(qnum=40, smax=30, rate=10.0, zskew=1, omax=10, gen="div", seed=2))
    model = CostModel("panes", 10.0)
    res = wg_pf(qs, model, 4)
    pts = [point(p) for p in res.front]
    for name in list(res.seeds):
        plan = optimize(name, qs, CostModel("panes", 10.0), 4)
        assert any(weakly_dominates(f, point(plan)) for f in pts), name
    assert len(pts) >= 2 and all(verify_plan(p.to_dict()) == [] for p in res.front)


def test_split_moves_are_priced_exactly():
    qs = [
        Query(f"q{i}", r, s)
        for i, (r, s) in enumerate([(12, 3), (9, 3), (20, 5), (10, 5), (14, 7), (21, 7), (8, 4)])
    ]
    model = CostModel("panes", 2.0)
    big = model.tree(qs)
    nodes = [[big], []]
    sp = Splitter(model, [1.0, 1.0])
    cands = sp.candidates(nodes)
    assert cands  # a slide group or the large-slide half of the tree, to the empty node
    for c in cands:
        assert sorted(q.id for ts in c for t in ts for q in t.queries) == sorted(q.id for q in qs)
        assert len(c[0]) == 1 and len(c[1]) == 1  # one tree left behind, one moved
        for ts in c:
            for t in ts:
                assert math.isclose(t.cost, model.tree(t.queries).cost, rel_tol=1e-12)
    arch = Archive([None, None])
    loads = [max(sum(t.cost for t in ts) for ts in c) for c in cands]
    assert min(loads) < big.cost  # splitting unloads the busiest node
    assert arch.point(nodes) == (big.cost, big.cost)


# ---- the work budget and the kicks ----------------------------------------------------------------


def test_wg_ls_reports_its_work_and_wg_pf_stays_within_its_budget():
    from sim.workload import WorkloadSpec, generate

    qs = generate(WorkloadSpec(qnum=40, smax=30, rate=10.0, zskew=1, omax=10, gen="div", seed=2))
    ls = wg_ls(qs, CostModel("panes", 10.0), [None] * 4)
    assert ls.work is not None and ls.work > 0
    assert wg_ls(qs, CostModel("panes", 10.0), [None] * 4).work == ls.work  # machine-free units
    runs = {}
    for ratio in (0.0, 0.5, 2.0):
        res = wg_pf(qs, CostModel("panes", 10.0), 4, work_ratio=ratio, work_floor=0)
        assert res.budget == ratio * ls.work and res.seeds["WG_LS"].work == ls.work
        # each step is checked before it starts: one step (a best-move scan, one layout's
        # splits) past the budget at most, never a walk or a phase
        assert res.work <= res.budget + 2_000, (ratio, res.work, res.budget)
        runs[ratio] = res
    again = wg_pf(qs, CostModel("panes", 10.0), 4, work_ratio=0.5, work_floor=0)
    assert [point(p) for p in again.front] == [point(p) for p in runs[0.5].front]
    assert again.work == runs[0.5].work
    # no budget: the front is the seeds' non-dominated plans, nothing searched
    assert runs[0.0].work == 0
    seed_pts = [point(p) for p in runs[0.0].seeds.values()]
    assert {point(p) for p in runs[0.0].front} <= set(seed_pts)
    # a seed WG_LS plan without its work (e.g. loaded from a file) is recomputed, not trusted
    given = dict(runs[0.5].seeds)
    given["WG_LS"] = optimize("WG_LS", qs, CostModel("panes", 10.0), 4)
    given["WG_LS"].work = None
    res = wg_pf(qs, CostModel("panes", 10.0), 4, work_ratio=0.5, work_floor=0, seeds=given)
    assert res.budget == 0.5 * ls.work


@settings(max_examples=examples(20))
@given(data=st.data(), n=st.integers(3, 8), n_nodes=st.integers(2, 4), keys=st.integers(1, 2))
def test_pinned_queries_stay_on_their_node(data, n, n_nodes, keys):
    """WG_PF's kicks pin the two trees of a split: WG_LS's descent moves everything else."""
    qs = random_queries(data.draw, n, keys)
    model = CostModel("panes", 2.0)
    where = [data.draw(st.integers(0, n_nodes - 1)) for _ in qs]
    nodes = [[model.tree([q]) for q, w in zip(qs, where) if w == j] for j in range(n_nodes)]
    pinned = {q.id for q in qs if data.draw(st.booleans())}
    search = LocalSearch(model, [None] * n_nodes, math.inf, math.inf)
    search.pinned = frozenset(pinned)
    seen = []

    def node_of(ns):
        return {q.id: j for j, ts in enumerate(ns) for t in ts for q in t.queries}

    out = search.run(nodes, 50, on_plan=lambda ns: seen.append(node_of(ns)))
    want = {q.id: w for q, w in zip(qs, where) if q.id in pinned}
    for m in [*seen, node_of(out)]:
        assert {k: m[k] for k in pinned} == want
        assert sorted(m) == sorted(q.id for q in qs)


def _hv_ratio(front, exact):
    ep = [point(p) for p in exact]
    ref = (1.1 * max(p[0] for p in ep), 1.1 * max(p[1] for p in ep))
    return hypervolume([point(p) for p in front], ref) / hypervolume(ep, ref)


@settings(max_examples=examples(15), deadline=None)
@given(
    data=st.data(),
    n=st.integers(4, 8),
    n_nodes=st.integers(2, 3),
    lam=st.sampled_from([0.5, 5.0]),
    keys=st.integers(1, 2),
)
def test_front_hypervolume_against_the_exhaustive_exact_front(data, n, n_nodes, lam, keys):
    qs = random_queries(data.draw, n, keys, streams=2)
    model = CostModel("panes", lam)
    res = wg_pf(qs, model, n_nodes)
    ex = solve_exact(qs, model, n_nodes, method="exhaustive").front
    for p in res.front:
        assert verify_plan(p.to_dict()) == []
    assert _hv_ratio(res.front, ex) <= 1 + 1e-9  # no front beats the exact one
    for p in res.front:  # every front plan is weakly dominated by an exact one
        assert any(weakly_dominates(point(e), point(p)) for e in ex)


@pytest.mark.xfail(strict=True, reason="open: duplicate windows on 3 nodes, hypervolume 0.92")
def test_front_gap_on_duplicate_windows():
    """Found by the property above: six queries of one key, three of them the same window
    (1, 1) and two (2, 1), on 3 nodes; WG_PF's front stays 8 % below the exact hypervolume."""
    qs = [
        Query(f"q{i}", r, s, "sum", "s0")
        for i, (r, s) in enumerate([(1, 1), (2, 1), (5, 2), (1, 1), (1, 1), (2, 1)])
    ]
    model = CostModel("panes", 0.5)
    res = wg_pf(qs, model, 3)
    ex = solve_exact(qs, model, 3, method="exhaustive").front
    assert _hv_ratio(res.front, ex) >= 0.99


def test_kick_reaches_the_front_no_single_move_does():
    """Mixed-grid small instance 39 (3 nodes, Panes): the exact front's balanced points need a
    tree split and several trees moved around it at once; every single move raises MaxCost."""
    from sim.bench.pareto import mixed_instances

    inst = mixed_instances(40, 0, sizes=(8, 10))[39]
    model = CostModel(inst["ie"], inst["rates"])
    res = wg_pf(inst["queries"], model, inst["nodes"])
    ex = solve_exact(inst["queries"], model, inst["nodes"]).front
    assert len(res.front) >= 2 and _hv_ratio(res.front, ex) >= 0.99
    assert min(p.max_cost for p in res.front) == pytest.approx(min(p.max_cost for p in ex))


# ---- the choose rule -----------------------------------------------------------------------------


def oracle_choose(pts, rule, fits):
    """Direct reading of each rule over the front's points (indices)."""
    idx = range(len(pts))
    if rule.rule == "capacities":
        ok = [i for i in idx if fits[i]]
        return min(ok, key=lambda i: pts[i][0]) if ok else None
    if rule.rule == "max_cost_at_most":
        ok = [i for i in idx if pts[i][1] <= rule.value * (1 + TOL)]
        return min(ok, key=lambda i: pts[i][0]) if ok else None
    if rule.rule == "max_cost_within":
        m = min(p[1] for p in pts)
        ok = [i for i in idx if pts[i][1] <= m * (1 + rule.value) * (1 + TOL)]
        return min(ok, key=lambda i: pts[i][0])
    t = min(p[0] for p in pts)
    ok = [i for i in idx if pts[i][0] <= t * (1 + rule.value) * (1 + TOL)]
    return min(ok, key=lambda i: pts[i][1])


@settings(max_examples=examples(25))
@given(
    data=st.data(),
    n=st.integers(3, 8),
    n_nodes=st.integers(2, 4),
    lam=st.sampled_from([0.5, 5.0, 50.0]),
    frac=st.floats(0.0, 1.0),
)
def test_each_choose_rule_picks_what_it_says(data, n, n_nodes, lam, frac):
    qs = random_queries(data.draw, n, 2)
    model = CostModel("panes", lam)
    res = wg_pf(qs, model, n_nodes, front_size=8)
    pts = [point(p) for p in res.front]
    lo_m, hi_m = min(p[1] for p in pts), max(p[1] for p in pts)
    rules = [
        ChoiceRule("max_cost_at_most", lo_m + frac * (hi_m - lo_m)),
        ChoiceRule("max_cost_at_most", lo_m * 0.5),
        ChoiceRule("max_cost_within", frac),
        ChoiceRule("total_cost_within", frac / 4),
    ]
    for rule in rules:
        i, met, note = choose(res.front, rule)
        want = oracle_choose(pts, rule, None)
        if want is None:  # no plan meets the cap: the most balanced one, said in one line
            assert not met and i == min(range(len(pts)), key=lambda k: (pts[k][1], pts[k][0]))
            assert "no plan of the WG_PF front has MaxCost <=" in note and "\n" not in note
        else:
            assert met and note == "" and pts[i] == pts[want], rule
    # capacities: a cap between the ends admits exactly the plans whose nodes all fit
    cap = lo_m + frac * (hi_m - lo_m)
    res_c = wg_pf(qs, model, [cap] * n_nodes, front_size=8)
    assert res_c.rule == ChoiceRule("capacities")  # the default with capacities
    cpts = [point(p) for p in res_c.front]
    fits = [all(nd.cost <= cap * (1 + 1e-12) for nd in p.nodes) for p in res_c.front]
    want = oracle_choose(cpts, ChoiceRule("capacities"), fits)
    if want is not None:
        assert res_c.met and cpts[res_c.chosen] == cpts[want]
    else:  # no front plan fits: said in one line, never silently
        assert not res_c.met and res_c.note.startswith("no plan of the WG_PF front fits")
        assert "\n" not in res_c.note


def test_default_rule_without_capacities_is_total_within_five_percent():
    qs = [Query(f"q{i}", 3 * s, s) for i, s in enumerate([2, 3, 4, 5, 6, 7, 8, 9])]
    res = wg_pf(qs, CostModel("panes", 20.0), 3)
    assert res.rule == ChoiceRule("total_cost_within", 0.05)
    t0 = min(p.total_cost for p in res.front)
    ok = [p for p in res.front if p.total_cost <= 1.05 * t0 * (1 + TOL)]
    assert res.plan.max_cost == min(p.max_cost for p in ok)


@pytest.mark.parametrize(
    "raw, msg",
    [
        ({"max_cost_within": 10}, "placement.choose.max_cost_within: expected a percentage"),
        ({"max_cost_at_most": 0}, "placement.choose.max_cost_at_most: expected a number > 0"),
        ({"cheapest": True}, "placement.choose: unknown rule 'cheapest'"),
        ("balanced", "placement.choose: expected capacities"),
    ],
)
def test_bad_choose_is_one_line(raw, msg):
    with pytest.raises(ChooseError, match="^" + msg.replace(".", r"\.")):
        ChoiceRule.parse(raw)
    cfg = {
        "workload": {"generator": {"qnum": 5, "smax": 5, "rate": 1.0}},
        "placement": {"optimizers": "WG_PF", "choose": raw},
    }
    with pytest.raises(ConfigError) as e:
        config_from_mapping(cfg)
    assert str(e.value).startswith(msg) and "\n" not in str(e.value)


def test_capacities_rule_needs_capacities():
    cfg = {
        "workload": {"generator": {"qnum": 5, "smax": 5, "rate": 1.0}},
        "cluster": {"nodes": 2},
        "placement": {"optimizers": "WG_PF", "choose": "capacities"},
    }
    with pytest.raises(ConfigError, match="needs node capacities"):
        config_from_mapping(cfg)


def test_percentages_parse():
    assert ChoiceRule.parse({"total_cost_within": "5%"}) == ChoiceRule("total_cost_within", 0.05)
    assert ChoiceRule.parse({"max_cost_within": " 12.5 % "}).value == pytest.approx(0.125)
    assert ChoiceRule.parse("capacities").to_dict() == "capacities"


# ---- exact front -----------------------------------------------------------------------------------


@settings(max_examples=examples(20))
@given(
    data=st.data(),
    n=st.integers(1, 5),
    n_nodes=st.integers(1, 3),
    lam=st.sampled_from([0.3, 3.0, 30.0]),
    keys=st.integers(1, 2),
    method=st.sampled_from(["exhaustive", "cpsat"]),
)
def test_exact_front_equals_brute_force(data, n, n_nodes, lam, keys, method):
    qs = random_queries(data.draw, n, keys)
    model = CostModel("panes", lam)
    got = [point(p) for p in solve_exact(qs, model, n_nodes, method=method).front]
    want = brute_front(brute_points(qs, model, n_nodes))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g == pytest.approx(w, rel=1e-7)


def test_wg_pf_reaches_the_exact_front_on_tiny_instances():
    """Small enough for the Pareto local search to finish: the front is the exact one."""
    from sim.workload import WorkloadSpec, generate

    for seed in range(4):
        qs = generate(WorkloadSpec(qnum=6, smax=12, rate=10.0, zskew=1, omax=5, seed=seed))
        model = CostModel("panes", 10.0)
        ex = [point(p) for p in solve_exact(qs, model, 2).front]
        got = [point(p) for p in wg_pf(qs, model, 2, front_size=16).front]
        assert len(got) == len(ex), seed
        assert [x for p in got for x in p] == pytest.approx([x for p in ex for x in p], rel=1e-9), (
            seed
        )


# ---- capacities that no plan meets ------------------------------------------------------------------


def infeasible_case():
    qs = [Query(f"q{i}", 4 * s, s) for i, s in enumerate([2, 3, 4, 5, 6])]
    model = CostModel("panes", 10.0)
    cheapest = solve_exact(qs, model, 2).min_max.max_cost
    return qs, model, [0.8 * cheapest, 0.8 * cheapest]


def test_capacity_infeasible_one_line_with_shedding_proposal():
    qs, model, caps = infeasible_case()
    res = wg_pf(qs, model, caps)
    assert not res.met and res.rule.rule == "capacities"
    assert "\n" not in res.note
    assert res.note.startswith("no plan of the WG_PF front fits the node capacities")
    assert "proposal: shed at the sources" in res.note and "s0" in res.note
    # the proposal is the shedding module's answer for a front plan, and it makes it feasible
    from placement.shedding import InfeasibleEvenWhenShedding, overloads, shed_load

    fracs = []
    for p in res.front:
        try:
            fracs.append(shed_load(p))
        except InfeasibleEvenWhenShedding:  # edges alone exceed a capacity on this plan
            pass
    best = max(fracs, key=lambda s: s.kept_value)
    lost = 100 * (1 - best.kept_value / best.full_value)
    assert f"losing {lost:.3g} %" in res.note
    assert any(overloads(p) for p in res.front)


def test_capacity_infeasible_live_plan_is_a_config_error():
    qs, model, caps = infeasible_case()
    cfg = config_from_mapping(
        {
            "workload": {"queries": [{"id": q.id, "range": q.range, "slide": q.slide} for q in qs]},
            "streams": {"s0": {"rate": 10.0}},
            "cluster": {
                "nodes": [{"id": "a", "capacity": caps[0]}, {"id": "b", "capacity": caps[1]}]
            },
            "placement": {"optimizers": "WG_PF"},
        }
    )
    with pytest.raises(ConfigError) as e:
        plan_for("WG_PF", qs, model, caps, cfg, strict=True)
    assert "\n" not in str(e.value) and "shed" in str(e.value)
    plan = plan_for("WG_PF", qs, model, caps, cfg)  # simulate: the least overloaded plan
    assert verify_plan(plan.to_dict()) == []


# ---- simulate ---------------------------------------------------------------------------------------


def test_simulate_writes_fronts_and_summary(tmp_path):
    cfg = config_from_mapping(
        {
            "workload": {
                "generator": {
                    "qnum": [6, 7],
                    "smax": 12,
                    "rate": 10.0,
                    "zskew": 1,
                    "omax": 5,
                    "seed": [0, 1],
                }
            },
            "cluster": {"nodes": [2, 3]},
            "placement": {
                "optimizers": ["G_RAND", "WG_TN", "WG_I", "WG_LS", "WG_PF"],
                "exact": 7,
                "choose": {"max_cost_within": "10%"},
                "front_size": 4,
            },
        }
    )
    s = simulate(cfg, output_dir=tmp_path)
    import pandas as pd

    df = pd.read_csv(s.files["results_csv"], float_precision="round_trip")
    pf = df[df["optimizer"] == "WG_PF"]
    assert len(pf) == 8 and (pf["choose"] == "max_cost_within: 10%").all()
    for _, row in pf.iterrows():
        front = json.loads((tmp_path / row["front"]).read_text())
        assert 1 <= len(front) == row["front_points"] <= 4
        assert all(verify_plan(d) == [] for d in front)
        chosen = [d for d in front if d["chosen"]]
        assert len(chosen) == 1 and chosen[0]["total_cost"] == row["total_cost"]
        m0 = min(d["max_cost"] for d in front)
        assert row["max_cost"] <= 1.1 * m0 * (1 + TOL)
        assert row["total_cost"] == min(
            d["total_cost"] for d in front if d["max_cost"] <= 1.1 * m0 * (1 + TOL)
        )
        ex = json.loads((tmp_path / f"plans/c{row['config_id']:04d}_EXACT_front.json").read_text())
        assert all(verify_plan(d) == [] for d in ex)
        ep = [(d["total_cost"], d["max_cost"]) for d in ex]
        ref = (1.1 * max(p[0] for p in ep), 1.1 * max(p[1] for p in ep))
        hv = hypervolume([(d["total_cost"], d["max_cost"]) for d in front], ref)
        assert row["front_hv_ratio"] == pytest.approx(hv / hypervolume(ep, ref), rel=1e-12)
    for _, row in df.iterrows():  # distances to the exact front, recomputed from the files
        ex = json.loads((tmp_path / f"plans/c{row['config_id']:04d}_EXACT_front.json").read_text())
        ep = [(d["total_cost"], d["max_cost"]) for d in ex]
        want = min(max(row["total_cost"] / t, row["max_cost"] / m) for t, m in ep) - 1
        assert row["exact_front_gap"] == pytest.approx(max(0.0, want), abs=1e-12)
    summ = pd.read_csv(s.files["pareto_summary"])
    assert set(summ["optimizer"]) == {"G_RAND", "WG_TN", "WG_I", "WG_LS", "WG_PF"}
    got = summ.set_index("optimizer")["pf_weakly_dominates_pct"]
    want = df.groupby("optimizer")["pf_weakly_dominates"].mean() * 100
    for name in got.index:
        assert got[name] == pytest.approx(want[name])


def test_dominates_is_strict():
    assert dominates((1, 2), (1, 3)) and not dominates((1, 2), (1, 2))
    assert weakly_dominates((1, 2), (1, 2 * (1 + 1e-12)))


def test_verify_plan_cli_checks_every_plan_of_a_front(tmp_path):
    from typer.testing import CliRunner

    from sim.cli import app

    qs = [Query(f"q{i}", 3 * s + 1, s) for i, s in enumerate([2, 3, 4, 5, 7])]
    res = wg_pf(qs, CostModel("panes", 4.0), 2)
    path = tmp_path / "front.json"
    front = res.front_dicts(["a", "b"])
    path.write_text(json.dumps(front))
    ok = CliRunner().invoke(app, ["verify-plan", str(path)])
    assert ok.exit_code == 0 and "recomputes from its queries" in ok.output
    front[-1]["nodes"][0]["cost"] *= 1.01  # one plan of the front lies about a node
    path.write_text(json.dumps(front))
    bad = CliRunner().invoke(app, ["verify-plan", str(path)])
    assert bad.exit_code == 1 and f"plan {len(front) - 1}:" in bad.output
