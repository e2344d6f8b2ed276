"""``weaveplace serve`` with WG_PF: the initial plan and every re-plan are the plan
the config's ``placement.choose`` rule picks from WG_PF's front; the rule survives
``serve --resume``; a bad or unmeetable rule is one line, exit 2.

Oracle: WG_PF's front computed here (``placement.pareto.search.wg_pf`` with the config's arguments)
and the rule applied to it here by its definition (``_pick``), compared with the running plan's
TotalCost / MaxCost.  The rule picks from the full archive before truncation and the truncated
front keeps the chosen plan and both ends, so the rule applied to the returned front picks the
same plan.  Answers: the section 9 oracle (``registered_answers``) over every row fed; the added
queries include two on a stream the initial plan did not read (mf03), which must be fed from the
next file on (``ServiceStream._feed``) and priced at the config's rate for it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml
from support.service import (
    assert_answers_follow_registrations,
    drop,
    raw_request,
    serve_in_thread,
    serve_running,
)
from support.waiting import wait_for

from placement.pareto.choose import ChoiceRule
from sim.debs_generator import generate_debs

ROOT = Path(__file__).resolve().parents[3]
FILE_S, N_FILES, RATE_HZ = 3, 6, 50
RATES = {s: RATE_HZ / 1000.0 for s in ("mf01", "mf02", "mf03")}
REL = 1e-9  # placement.pareto.front.REL: the rules compare costs with this tolerance


def _q(i, stream, agg, r, s, prefix="a"):
    return {"id": f"{prefix}{i}", "stream": stream, "aggregate": agg, "range": r, "slide": s}


INITIAL = [
    _q(i, ["mf01", "mf02"][i % 2], ["sum", "max"][i % 2], r, s)
    for i, (r, s) in enumerate(
        [(1000, 500), (2000, 500), (3000, 1000), (1500, 500), (2000, 1000), (4000, 1000)]
        + [(1000, 250), (750, 250)]
    )
]
ADDED = [
    _q(0, "mf01", "sum", 2500, 500, "b"),
    _q(1, "mf03", "min", 1000, 250, "b"),
    _q(2, "mf03", "min", 2000, 500, "b"),
    _q(3, "mf02", "max", 3000, 750, "b"),
]


def _pick(points, rule: ChoiceRule) -> tuple[float, float]:
    """The rule by its definition (``placement.choose`` in configs/README.md) over a front."""
    T = [p[0] for p in points]
    M = [p[1] for p in points]
    if rule.rule == "max_cost_within":
        ok = [i for i in range(len(points)) if M[i] <= min(M) * (1 + rule.amount) * (1 + REL)]
        i = min(ok, key=lambda i: (T[i], M[i]))
    elif rule.rule == "total_cost_within":
        ok = [i for i in range(len(points)) if T[i] <= min(T) * (1 + rule.amount) * (1 + REL)]
        i = min(ok, key=lambda i: (M[i], T[i]))
    else:
        raise AssertionError(f"rule {rule} not covered by this oracle")
    return T[i], M[i]


def _expected(queries, cfg, rule: ChoiceRule):
    """(TotalCost, MaxCost) the rule picks from WG_PF's front of ``queries`` on 3 nodes, and the
    front's points."""
    from placement.pareto.search import wg_pf
    from placement.queries import query_from_mapping
    from placement.trees import CostModel

    pl = cfg.placement
    model = CostModel(pl.ie, dict(RATES), pl.engine, pl.slicing)
    res = wg_pf(
        [query_from_mapping(q) for q in queries],
        model,
        3,
        seed=cfg.run.seed,
        preprocess=pl.preprocess_arg,
        front_size=pl.front_size,
        rule=rule,
    )
    pts = [(p.total_cost, p.max_cost) for p in res.front]
    return _pick(pts, rule), pts


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("serve_choose_data")
    generate_debs(d / "all.parquet", duration_s=FILE_S * N_FILES, rate_hz=RATE_HZ, seed=3)
    t = pq.read_table(d / "all.parquet")
    rel = pc.subtract(t.column("ts_ms"), int(t.column("ts_ms")[0].as_py()))
    return [
        t.filter(
            pc.and_(pc.greater_equal(rel, k * FILE_S * 1000), pc.less(rel, (k + 1) * FILE_S * 1000))
        )
        for k in range(N_FILES)
    ]


def _status(run_dir):
    from cluster.service.control import call

    return call(run_dir, "GET", "/status")


@pytest.mark.scenario  # ~24 s: make test-scenarios (make test stays under 8 min)
def test_serve_runs_and_replans_the_chosen_plan(ray_session, spark, files, tmp_path):
    from cluster.service.control import call
    from placement.plan import verify_plan

    incoming, run_dir = tmp_path / "in", tmp_path / "run"
    incoming.mkdir()
    cfg_map = {
        "workload": {"queries": INITIAL},
        "cluster": {"nodes": 3},
        "placement": {
            "optimizers": "WG_PF",
            "ie": "slickdeque",
            "front_size": 4,
            "choose": {"max_cost_within": "0%"},
            "tolerance": 0.1,
            "max_moves": 50,  # every move of a re-plan is made: the running plan is the fresh one
        },
        "streams": {s: {"rate": r} for s, r in RATES.items()},
        "data": {"directory": {"path": str(incoming), "poll_s": 0.2, "files_per_batch": 2}},
        "run": {"mode": "live", "output_dir": str(run_dir)},
    }
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(cfg_map))
    rule = ChoiceRule("max_cost_within", 0.0)
    regs = {q["id"]: [q, None, None] for q in INITIAL}

    cfg, th, box = serve_in_thread(path, None, spark)
    wait_for(lambda: serve_running(run_dir, box), "serve to start")
    (t0, m0), front0 = _expected(INITIAL, cfg, rule)  # the config's order, as serve plans
    assert t0 > min(p[0] for p in front0)  # the rule gives up TotalCost for balance
    assert [x for x in box["said"] if x.startswith("WG_PF")] == [
        f"WG_PF: the plan `max_cost_within: 0%` picks of a {len(front0)}-plan front "
        f"(TotalCost {t0:.6g}, MaxCost {m0:.6g})"
    ]
    st = _status(run_dir)
    assert (st["total_cost"], st["max_cost"]) == (t0, m0)
    ch = st["choose"]
    assert ch["rule"] == "max_cost_within: 0%" and ch["met"] and not ch["default"]
    assert ch["note"] is None and [tuple(p) for p in ch["front"]] == front0
    cur = json.loads((run_dir / "plan_current.json").read_text())
    assert verify_plan(cur) == [] and cur["choose"]["rule"] == ch["rule"]
    assert (cur["total_cost"], cur["max_cost"]) == (t0, m0)
    ctl = json.loads((run_dir / "control.json").read_text())
    code, page = raw_request(ctl["url"] + f"/?token={ctl['token']}")
    assert code == 200 and b"max_cost_within: 0%" in page and b"WG_PF rule" in page

    def feed(k):
        drop(incoming, f"f{k:02d}.parquet", files[k])
        wait_for(lambda: _status(run_dir)["files"] >= k + 1, f"file {k} fed")

    feed(0)
    feed(1)
    # the balanced plan costs more than WeaveShare by more than the tolerance: the add re-plans
    assert st["drift"]["drift"] > 0.1
    rep = call(run_dir, "POST", "/add-queries", {"queries": ADDED})
    for q in ADDED:
        regs[q["id"]] = [q, rep["accepted_at"][q["stream"]], None]
    ev = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    assert [e["command"] for e in ev] == ["start", "add-queries", "drift"]
    assert ev[-1]["choose"] == "max_cost_within: 0%" and ev[-1]["choose_met"] is True
    running = sorted(INITIAL + ADDED, key=lambda q: q["id"])  # a re-plan plans them by id
    (t1, m1), front1 = _expected(running, cfg, rule)
    st = _status(run_dir)
    assert (st["total_cost"], st["max_cost"]) == (t1, m1)
    assert (ev[-1]["total_cost_after"], ev[-1]["max_cost_after"]) == (t1, m1)
    assert [tuple(p) for p in st["choose"]["front"]] == front1
    feed(2)
    call(run_dir, "POST", "/stop", {})
    th.join(120)
    assert not th.is_alive() and "error" not in box

    # the rule is in the state: a resume keeps it even if the saved config says otherwise
    state = json.loads((run_dir / "state" / "service.json").read_text())
    assert state["planner"] == {
        "optimizer": "WG_PF",
        "seed": 0,
        "preprocess": False,
        "front_size": 4,
        "choose": {"max_cost_within": "0%"},
    }
    saved = run_dir / "state" / "config.yaml"
    saved.write_text(saved.read_text().replace("0%", "50%"))
    cfg2, th, box = serve_in_thread(None, run_dir, spark)
    assert cfg2.placement.choose == {"max_cost_within": "50%"}
    wait_for(lambda: serve_running(run_dir, box), "serve --resume to start")
    st = _status(run_dir)
    assert st["choose"]["rule"] == "max_cost_within: 0%"
    assert (st["total_cost"], st["max_cost"]) == (t1, m1)
    feed(3)
    gone = ["a0", "b2"]
    rep = call(run_dir, "POST", "/remove-queries", {"ids": gone})
    for g in gone:
        regs[g][2] = rep["removed_at"][regs[g][0]["stream"]]
    rep = call(run_dir, "POST", "/rebalance", {})
    running = [q for q in running if q["id"] not in gone]
    (t2, m2), _ = _expected(running, cfg, rule)
    assert rep["choose"]["rule"] == "max_cost_within: 0%" and rep["choose"]["met"]
    assert (rep["total_cost"], rep["max_cost"]) == (t2, m2)
    assert (rep["fresh_total_cost"], rep["fresh_max_cost"]) == (t2, m2)
    for k in range(4, N_FILES):
        feed(k)
    call(run_dir, "POST", "/stop", {"flush": True})
    th.join(120)
    assert not th.is_alive() and "error" not in box
    # answers: the section 9 oracle over every row, across the re-plans and the resume
    assert_answers_follow_registrations(files, regs, run_dir)
    assert verify_plan(json.loads((run_dir / "plan_current.json").read_text())) == []


# ---- without Ray: the planner and the one-line mistakes --------------------------------------


def test_replan_with_an_unmet_rule_runs_the_fallback_and_says_why():
    """A re-plan whose rule no front plan meets runs the rule's fallback (the most balanced
    plan) and records the note; the start refuses it (``initial_plan``, tested below)."""
    from cluster.service.planning import Planner
    from placement.queries import query_from_mapping
    from placement.trees import CostModel

    qs = [query_from_mapping(q) for q in INITIAL]
    model = CostModel("slickdeque", dict(RATES))
    plan, ch = Planner("WG_PF", choose={"max_cost_at_most": 1e-6}).plan(qs, model, [None] * 3)
    assert ch is not None and ch["met"] is False and ch["rule"] == "max_cost_at_most: 1e-06"
    assert "\n" not in ch["note"] and "no plan of the WG_PF front" in ch["note"]
    assert plan.max_cost == min(p[1] for p in ch["front"])
    # unset: total_cost_within 5% without capacities, capacities with them
    p = Planner("WG_PF")
    assert str(p.rule([None, None])) == "total_cost_within: 5%"
    assert str(p.rule([1.0, 2.0])) == "capacities"
    plan, ch = Planner("WG_TN").plan(qs, model, [None] * 3)
    assert ch is None and plan.optimizer == "WG_TN"


def _serve_cli(tmp_path, cfg_map):
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(cfg_map))
    return subprocess.run(
        [sys.executable, "-m", "sim.cli", "serve", str(path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=180,
    )


@pytest.mark.parametrize(
    "placement,nodes,expect",
    [
        (
            {"optimizers": "WG_PF", "choose": {"max_cost_within": "ten"}},
            3,
            'placement.choose.max_cost_within: expected a percentage such as "5%"',
        ),
        (
            {"optimizers": "WG_PF", "choose": "capacities"},
            3,
            "placement.choose: 'capacities' needs node capacities",
        ),
        (  # no plan fits: the note simulate writes (choose_note), with the shedding proposal
            {"optimizers": "WG_PF"},
            [{"id": "a", "capacity": 0.01}, {"id": "b", "capacity": 0.01}],
            "no plan of the WG_PF front fits the node capacities",
        ),
    ],
)
def test_serve_choose_mistakes_are_one_line(tmp_path, placement, nodes, expect):
    incoming = tmp_path / "in"
    incoming.mkdir()
    res = _serve_cli(
        tmp_path,
        {
            "workload": {"queries": INITIAL},
            "cluster": {"nodes": nodes},
            "placement": {"ie": "slickdeque", **placement},
            "streams": {s: {"rate": r} for s, r in RATES.items()},
            "data": {"directory": {"path": str(incoming)}},
            "run": {"mode": "live", "output_dir": str(tmp_path / "run")},
        },
    )
    out = res.stdout + res.stderr
    assert res.returncode == 2, out
    assert expect in out and "Traceback" not in out
    assert len([x for x in out.splitlines() if x.strip()]) <= 2, out  # the serving line + error
    assert not (tmp_path / "run" / "control.json").exists()


def test_run_runs_the_chosen_plan(ray_session, spark, tmp_path):
    """``weaveplace run`` with WG_PF: plan.json is the plan the rule picks from WG_PF's front
    (``sim.simulate.plan_for(strict=True)``; here not the cheapest plan), and its answers are
    the brute force's."""
    from executors.oracle import brute_force
    from sim.cluster_run import run_on_cluster
    from sim.config import config_from_mapping

    out = tmp_path / "out"
    raw = {
        "workload": {"queries": INITIAL},
        "streams": {s: {"rate": RATES[s]} for s in ("mf01", "mf02")},
        "cluster": {"nodes": 3},
        "placement": {
            "optimizers": "WG_PF",
            "ie": "slickdeque",
            "front_size": 4,
            "choose": {"max_cost_within": "0%"},
        },
        "data": {"duration_s": 6, "rate_hz": RATE_HZ, "seed": 3},
        "run": {"mode": "live", "output_dir": str(out), "batch_rows": 128},
    }
    cfg = config_from_mapping(raw)
    rule = ChoiceRule("max_cost_within", 0.0)
    want, front = _expected(INITIAL, cfg, rule)
    assert want[0] > min(p[0] for p in front)  # the rule gives up TotalCost for balance
    summary = run_on_cluster(cfg, spark=spark)
    plan = json.loads((out / "plan.json").read_text())
    assert plan["optimizer"] == "WG_PF" and (plan["total_cost"], plan["max_cost"]) == want
    assert (summary.estimated_total_cost, summary.estimated_max_cost) == want
    data = pq.read_table(out / "data.parquet", columns=["ts_ms", "mf01", "mf02"])
    got = pq.read_table(out / "answers.parquet").sort_by(
        [("query_id", "ascending"), ("window_start", "ascending")]
    )
    d = got.to_pydict()
    wanted = []
    for q in INITIAL:
        spec = {k: q[k] for k in ("id", "aggregate", "range", "slide")}
        rows, late = brute_force([spec], data["ts_ms"].to_numpy(), data[q["stream"]].to_numpy())
        assert not late
        wanted += rows
    wanted.sort(key=lambda w: (w[0], w[1]))
    assert list(zip(d["query_id"], d["window_start"], d["window_end"])) == [w[:3] for w in wanted]
    np.testing.assert_allclose(d["value"], [float(w[3]) for w in wanted], rtol=1e-9)
