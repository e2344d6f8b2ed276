"""The exact yardstick (issue 17): seeded with heuristic plans, proven bounds, never worse than
a known plan; bounds never above the brute-force optimum."""
from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from placement.distributed import ALL_OPTIMIZERS, optimize
from placement.exact import exact_cpsat, exact_exhaustive, seed_result
from placement.plan import verify_plan
from placement.queries import Query
from placement.trees import CostModel

TOL = 1e-9
HEURISTICS = [n for n in ALL_OPTIMIZERS if n != "WG_LS"]


def random_queries(draw, n, keys=1):
    qs = []
    for i in range(n):
        s = draw(st.integers(1, 9))
        r = draw(st.integers(1, 4 * s))
        k = draw(st.integers(0, keys - 1))
        qs.append(Query(f"q{i}", r, s, "sum" if k == 0 else "max", "s0"))
    return qs


@settings(max_examples=12, deadline=None)
@given(data=st.data(), n=st.integers(2, 7), n_nodes=st.integers(2, 3),
       lam=st.sampled_from([0.5, 5.0, 20.0]), limit=st.sampled_from([0.01, 0.2]))
def test_seeded_cpsat_never_worse_than_a_heuristic_and_bounds_hold(data, n, n_nodes, lam,
                                                                    limit):
    """Even with a time limit too short to prove anything, CP-SAT seeded with every heuristic
    plan is at most each of them, and its bounds are at most the brute-force optimum."""
    qs = random_queries(data.draw, n, keys=2)
    model = CostModel("panes", lam)
    plans = [optimize(name, qs, model, n_nodes, seed=1) for name in HEURISTICS]
    res = exact_cpsat(qs, model, n_nodes, time_limit_s=limit, front=False, hint=False,
                      hints=plans)
    ex = exact_exhaustive(qs, model, n_nodes)
    opt_t, opt_m = ex.min_total.total_cost, ex.min_max.max_cost
    for p in plans:
        assert res.min_total.total_cost <= p.total_cost * (1 + TOL), p.optimizer
        assert res.min_max.max_cost <= p.max_cost * (1 + TOL), p.optimizer
    assert res.bound_total <= opt_t * (1 + TOL)
    assert res.bound_max <= opt_m * (1 + TOL)
    assert res.min_total.total_cost >= opt_t * (1 - TOL)
    assert res.min_max.max_cost >= opt_m * (1 - TOL)
    assert res.gap_total >= 0 and res.gap_max >= 0
    if res.optimal_total:
        assert math.isclose(res.min_total.total_cost, opt_t, rel_tol=1e-6)
    if res.optimal_max:
        assert math.isclose(res.min_max.max_cost, opt_m, rel_tol=1e-6)
    for p in (res.min_total, res.min_max):
        assert verify_plan(p.to_dict()) == []


def test_seed_result_takes_a_better_hint_and_keeps_bounds_below():
    """A deliberately bad 'exact' answer is replaced by the better hint; bounds are clipped to
    the best known plan and the front stays non-dominated."""
    qs = [Query("a", 4, 2), Query("b", 8, 4), Query("c", 3, 3), Query("d", 6, 3)]
    model = CostModel("panes", 1.0)
    ex = exact_exhaustive(qs, model, 2)
    bad = optimize("G_RR", qs, model, 2)  # 4 single trees, 2 per node: worse in TotalCost
    assert bad.total_cost > ex.min_total.total_cost + 0.1
    res = type(ex)(bad, bad, [bad], "cpsat", False, 0.0, 0, bound_total=0.0, bound_max=0.0)
    assert not res.optimal_total and res.gap_total == math.inf
    good = optimize("WG_TL", qs, model, 2)
    seed_result(res, [good], [None, None])
    assert res.min_total.total_cost == good.total_cost < bad.total_cost
    assert res.seeded and res.seeded[0].startswith("min_total:")
    assert res.min_total is not good  # a copy: the caller's plan is not renamed
    pts = [(p.total_cost, p.max_cost) for p in res.front]
    assert pts == sorted(pts) and all(b[1] < a[1] for a, b in zip(pts, pts[1:]))


def test_simulate_gap_intervals(tmp_path):
    """results.csv: the exact answer is at most every heuristic (gap >= 0), the interval's
    upper end is at least its lower end, and the bound columns are filled."""
    import pandas as pd

    from sim.config import config_from_mapping
    from sim.simulate import simulate

    cfg = config_from_mapping({
        "workload": {"generator": {"qnum": 7, "smax": 12, "rate": 20, "omax": 5, "seed": 3}},
        "cluster": {"nodes": [2, 3]},
        "placement": {"optimizers": ["WG_TN", "WG_I", "W_RR"], "exact": 8,
                      "exact_time_limit": 5},
        "run": {"output_dir": str(tmp_path)}})
    simulate(cfg)
    df = pd.read_csv(tmp_path / "results.csv")
    assert len(df) == 6
    assert (df["gap_total"] >= -1e-12).all() and (df["gap_max"] >= -1e-12).all()
    assert (df["gap_total_hi"] >= df["gap_total"] - 1e-12).all()
    assert (df["gap_max_hi"] >= df["gap_max"] - 1e-12).all()
    assert (df["exact_bound_total"] <= df["exact_total"] * (1 + 1e-12)).all()
    assert df["exact_proven_total"].all() and df["exact_proven_max"].all()
    for tag in ("min_total", "min_max"):
        import json

        d = json.loads((tmp_path / "plans" / f"c0000_EXACT_{tag}.json").read_text())
        assert d["exact"]["proven"] is True
        assert verify_plan(d) == []
