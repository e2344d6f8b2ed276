"""``simulate``: plans on disk are valid and the results table says exactly what they say.

Why: the tables are what people quote (Table 9 / Figure 40 style); they must be traceable to
plans that anyone can re-price with ``verify_plan``.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from placement.plan import verify_plan
from sim.cli import app
from sim.config import ConfigError, config_from_mapping, load_config
from sim.simulate import _group_weight, _workload_groups, simulate

ROOT = Path(__file__).resolve().parents[2]

TINY = {
    "workload": {
        "generator": {
            "qnum": [6, 7],
            "smax": 12,
            "rate": 10.0,
            "zskew": 1,
            "omax": 5,
            "gen": "nrm",
            "seed": [0, 1],
        }
    },
    "cluster": {"nodes": [2, 3]},
    "placement": {
        "optimizers": [
            "G_RAND",
            "G_TL",
            "W_TN",
            "WG_TN",
            "WG_I",
            "WG_LS",
            "weaveshare",
            "no_share",
        ],
        "ie": "panes",
        "exact": 7,
    },
    "run": {"seed": 3},
}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("sim")
    calls = []
    summary = simulate(
        config_from_mapping(TINY), progress=lambda *a: calls.append(a), output_dir=out
    )
    return out, summary, calls


def test_plans_verify_and_results_match_plan_json(tiny_run):
    out, summary, _ = tiny_run
    df = pd.read_csv(out / "results.csv", float_precision="round_trip")
    assert len(df) == summary.runs == 8 * 8  # 2 qnum x 2 seeds x 2 node counts, 8 optimizers
    for row in df.itertuples():
        plan = json.loads((out / row.plan).read_text())
        assert verify_plan(plan) == [], row.plan
        assert plan["optimizer"] == row.optimizer
        assert len(plan["queries"]) == row.qnum == row.n_queries
        assert len(plan["nodes"]) == row.nodes
        assert row.total_cost == plan["total_cost"]
        assert row.max_cost == plan["max_cost"]
        assert json.loads(row.node_costs) == [n["cost"] for n in plan["nodes"]]
        assert row.n_trees == sum(len(n["trees"]) for n in plan["nodes"])


def test_parquet_equals_csv(tiny_run):
    out, _, _ = tiny_run
    csv = pd.read_csv(out / "results.csv", float_precision="round_trip")
    pq = pd.read_parquet(out / "results.parquet")
    assert list(csv.columns) == list(pq.columns)
    for col in ("total_cost", "max_cost", "runtime_s", "gap_total"):
        assert csv[col].tolist() == pytest.approx(pq[col].astype(float).tolist(), nan_ok=True)
    assert csv["node_costs"].tolist() == pq["node_costs"].tolist()


def test_exact_gaps(tiny_run):
    """Every workload has <= 7 queries: the exact optimum is computed and never beaten."""
    out, _, _ = tiny_run
    df = pd.read_csv(out / "results.csv", float_precision="round_trip")
    assert df["exact_total"].notna().all()
    assert (df["gap_total"] >= -1e-9).all() and (df["gap_max"] >= -1e-9).all()
    assert (df["gap_total"] == df["total_cost"] / df["exact_total"] - 1).all()
    for cid in df["config_id"].unique():
        for tag in ("min_total", "min_max"):
            plan = json.loads((out / "plans" / f"c{cid:04d}_EXACT_{tag}.json").read_text())
            assert verify_plan(plan) == []
        exact = json.loads((out / "plans" / f"c{cid:04d}_EXACT_min_total.json").read_text())
        assert math.isclose(exact["total_cost"], df.loc[df.config_id == cid, "exact_total"].iloc[0])


def test_summaries(tiny_run):
    out, summary, calls = tiny_run
    df = pd.read_csv(out / "results.csv", float_precision="round_trip")
    for _, g in df.groupby("config_id"):
        assert g["best_total"].any() and g["best_max"].any()
        assert g.loc[g.best_total, "quality_total_pct"].eq(0).all()
        assert g["quality_total_pct"].between(0, 100).all()
        assert g["quality_max_pct"].between(0, 100).all()
    t9 = pd.read_csv(out / "table9_best.csv")
    assert set(t9["metric"]) == {"MaxCost", "TotalCost"}
    assert len(t9) == 2 * 8
    f40 = pd.read_csv(out / "fig40_quality.csv")
    assert f40["quality_mean_pct"].between(0, 100).all()
    t10 = pd.read_csv(out / "table10_runtime.csv")
    assert list(t10["optimizer"]) == TINY["placement"]["optimizers"]
    assert (t10["runs"] == 8).all()
    best = pd.read_csv(out / "best_per_config.csv")
    assert len(best) == 8
    assert (best["best_total"] <= best["worst_total"]).all()
    assert [r["optimizer"] for r in summary.per_optimizer] == TINY["placement"]["optimizers"]
    # single-node optimizers put everything on the first node
    ws = df[df.optimizer == "weaveshare"]
    assert (ws["max_cost"] == ws["total_cost"]).all()
    assert calls[-1][0] == calls[-1][1] == 64


def test_explicit_queries_node_ids_and_capacities(tmp_path):
    cfg = config_from_mapping(
        {
            "workload": {
                "queries": [
                    {"id": "a", "stream": "mf01", "aggregate": "max", "range": 10, "slide": 2},
                    {"id": "b", "stream": "mf01", "aggregate": "max", "range": 6, "slide": 3},
                    {"id": "c", "stream": "mf02", "aggregate": "sum", "range": 4, "slide": 4},
                    {"id": "d", "stream": "mf02", "aggregate": "sum", "range": 8, "slide": 4},
                ]
            },
            "streams": {"mf01": {"rate": 0.5}, "mf02": {"rate": 2.0}},
            "cluster": {"nodes": [{"id": "east", "capacity": 100}, {"id": "west", "capacity": 50}]},
            "placement": {"optimizers": ["WG_I", "WG_TL", "shared"], "exact": True},
            "run": {"output_dir": str(tmp_path / "unused")},
        }
    )
    summary = simulate(cfg, output_dir=tmp_path / "run")
    df = pd.read_csv(summary.files["results_csv"], float_precision="round_trip")
    assert len(df) == 3 and (df["gen"] == "explicit").all()
    assert json.loads(df["capacities"].iloc[0]) == [100.0, 50.0]
    for row in df.itertuples():
        plan = json.loads((tmp_path / "run" / row.plan).read_text())
        assert [n["id"] for n in plan["nodes"]] == ["east", "west"]
        assert [n["capacity"] for n in plan["nodes"]] == [100.0, 50.0]
        assert verify_plan(plan) == []
    assert not (tmp_path / "unused").exists()


def test_live_mode_is_refused():
    cfg = config_from_mapping({**TINY, "run": {"mode": "live"}})
    with pytest.raises(ConfigError, match="run.mode"):
        simulate(cfg, output_dir="/nonexistent/never-written")


def test_quickstart_is_quick(tmp_path):
    t0 = time.perf_counter()
    summary = simulate(load_config(ROOT / "configs" / "quickstart.yaml"), output_dir=tmp_path)
    assert time.perf_counter() - t0 < 30
    assert summary.configurations == 2
    names = {r["optimizer"] for r in summary.per_optimizer}
    assert {"WG_TN", "WG_I", "WG_LS"} <= names


def test_cli_simulate(tmp_path):
    cfg = tmp_path / "c.yaml"
    small = {
        **TINY,
        "workload": {"generator": {"qnum": 5, "smax": 6, "rate": 2.0}},
        "cluster": {"nodes": 2},
    }
    cfg.write_text(yaml.safe_dump(small))
    res = CliRunner().invoke(app, ["simulate", str(cfg), "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "o" / "results.parquet").exists()
    assert "results:" in res.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("workload: {generator: {qnum: 5, smax: 6}}\nrun: {mode: livee}\n")
    res = CliRunner().invoke(app, ["simulate", str(bad)])
    assert res.exit_code == 2 and "run.mode" in res.output


def test_workers_give_the_same_results(tiny_run, tmp_path):
    """Two worker processes (each taking whole workloads) write the rows and plans of one."""
    out, summary, calls = tiny_run
    calls2 = []
    s2 = simulate(
        config_from_mapping(TINY),
        progress=lambda *a: calls2.append(a),
        output_dir=tmp_path,
        workers=2,
    )
    one = pd.read_csv(out / "results.csv", float_precision="round_trip")
    two = pd.read_csv(tmp_path / "results.csv", float_precision="round_trip")
    assert s2.runs == summary.runs
    cols = [c for c in one.columns if c not in ("runtime_s", "compile_s")]  # timings
    pd.testing.assert_frame_equal(one[cols], two[cols])
    for row in one.itertuples():
        assert (out / row.plan).read_text() == (tmp_path / row.plan).read_text()
    assert calls2[-1][:2] == (summary.runs, summary.runs)  # progress reached the end


def test_cutty_slicing_prices_plans_under_cutty(tmp_path):
    """``placement.slicing: cutty``: every plan (heuristics, WG_LS and the exact optimum)
    records and verifies under Cutty, the results say so, the exact optimum still bounds the
    heuristics, and costs differ from the Pairs run of the same workload."""
    base = {
        **TINY,
        "workload": {
            "generator": {"qnum": 7, "smax": 12, "rate": 10.0, "omax": 5, "gen": "nrm", "seed": 1}
        },
        "cluster": {"nodes": 2},
        "placement": {"optimizers": ["WG_TN", "WG_I", "WG_LS"], "ie": "slickdeque", "exact": 7},
    }
    cut = simulate(
        config_from_mapping({**base, "placement": {**base["placement"], "slicing": "cutty"}}),
        output_dir=tmp_path / "c",
    )
    pairs = simulate(config_from_mapping(base), output_dir=tmp_path / "p")
    dc = pd.read_csv(cut.files["results_csv"], float_precision="round_trip")
    dp = pd.read_csv(pairs.files["results_csv"], float_precision="round_trip")
    assert (dc["slicing"] == "cutty").all() and (dp["slicing"] == "pairs").all()
    for row in dc.itertuples():
        plan = json.loads((tmp_path / "c" / row.plan).read_text())
        assert plan["slicing"] == "cutty" and verify_plan(plan) == []
        assert row.total_cost >= row.exact_total * (1 - 1e-9)
    assert list(dc["total_cost"]) != list(dp["total_cost"])


def test_wg_pf_after_its_seed_optimizers_reuses_their_plans(tmp_path):
    """WG_PF listed after seed optimizers takes their plans (``sim.simulate``): the reuse once
    read a name ``sim.pareto_sim`` no longer had and raised AttributeError."""
    raw = {
        "workload": {"generator": {"qnum": 6, "smax": 12, "rate": 10.0, "seed": 0}},
        "cluster": {"nodes": 2},
        "placement": {"optimizers": ["WG_TN", "WG_I", "WG_PF"], "ie": "panes"},
    }
    summary = simulate(config_from_mapping(raw), output_dir=tmp_path)
    df = pd.read_csv(tmp_path / "results.csv")
    assert summary.runs == 3 and list(df.optimizer) == ["WG_TN", "WG_I", "WG_PF"]
    for row in df.itertuples():
        assert verify_plan(json.loads((tmp_path / row.plan).read_text())) == [], row.plan


def test_pool_submits_the_largest_workloads_first():
    """The pool gets the largest workloads first (grid order puts qnum 6 before 7), so no worker
    idles at the end; rows do not depend on the order (``test_workers_give_the_same_results``)."""
    cfg = config_from_mapping(TINY)
    points = cfg.points()
    groups = _workload_groups(points)
    qnum = [points[g[0]]["workload"]["qnum"] for g in groups]
    assert qnum == [6, 6, 7, 7]
    order = sorted(groups, key=lambda g: _group_weight(cfg, points, g), reverse=True)
    assert [points[g[0]]["workload"]["qnum"] for g in order] == [7, 7, 6, 6]
    assert order[0] == groups[2]  # stable among equals: grid order


def test_pool_weighs_what_made_table8_workloads_slow():
    """The most queries with Nrm slides, the larger Smax and the smaller Omax (the grid's
    slowest kind) go first; the fewest with Div slides, small Smax, large Omax last."""
    gen = {"qnum": [6, 9], "smax": [12, 24], "rate": 10.0, "zskew": 1, "omax": [5, 100]}
    gen |= {"gen": ["div", "nrm"], "seed": 0}
    cfg = config_from_mapping({**TINY, "workload": {"generator": gen}})
    points = cfg.points()
    groups = _workload_groups(points)
    order = sorted(groups, key=lambda g: _group_weight(cfg, points, g), reverse=True)
    first, last = (points[order[i][0]]["workload"] for i in (0, -1))
    assert (first["qnum"], first["smax"], first["omax"], first["gen"]) == (9, 24, 5, "nrm")
    assert (last["qnum"], last["smax"], last["omax"], last["gen"]) == (6, 12, 100, "div")


def test_unreachable_ray_address_is_one_line(tmp_path):
    """A Ray address nobody listens on: one line naming the key (exit 2 on the command line),
    before any workload is priced, not minutes of ``ray.init`` retries."""
    with pytest.raises(
        ConfigError, match=r"cluster.ray.address: cannot reach Ray at '127.0.0.1:1'"
    ):
        simulate(config_from_mapping(TINY), output_dir=tmp_path / "a", ray_address="127.0.0.1:1")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({**TINY, "cluster": {"nodes": 2, "ray": {"address": "nohost"}}}))
    res = CliRunner().invoke(app, ["simulate", str(cfg), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "is not host:port" in res.output
    assert len(res.output.strip().splitlines()) == 1 and "Traceback" not in res.output
    assert not (tmp_path / "o").exists()  # refused before any work
    res = CliRunner().invoke(app, ["validate", str(cfg)])
    assert res.exit_code == 2 and "is not host:port" in res.output
