"""Every allowed aggregate, IE technique, slicing, edge engine and optimizer goes through
``weaveplace validate``, planning and execution, with answers checked against the brute-force
oracle (a value that passes validation must also run: ``product`` once passed validation,
then crashed the live run).

The lists come from the modules that own them (the ones validation reads), so a value added
to a list without being executable fails here.  Every run asks for every aggregate.
``LIVE_RUNS`` full live runs (Ray actors fed by Spark) walk every technique, slicing and
engine round-robin, with optimizers chosen for the plan shapes they make (one node empty:
``shared``; a local search: ``WG_LS``; ...).  Each other optimizer is validated, planned and its
plan executed node by node in-process by ``cluster.node.core.NodeCore`` (the state a node
actor hosts: the same code minus Ray's transport), because a full live run costs ~5 s here
(actor start-up) and the plans differ only in how trees are grouped and placed.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from helpers import WINDOWS, live_config
from typer.testing import CliRunner

from executors.oracle import brute_force
from executors.tree import SINGLE_LENGTH  # (not priced: never in TECHNIQUES)
from placement.cost import TECHNIQUES
from placement.edges import ENGINES
from placement.queries import AGGREGATES
from placement.slicing import SLICINGS
from sim.cli import app
from sim.config import load_config
from sim.config.placement import OPTIMIZER_NAMES

# (range, slide) per aggregate: r mod s != 0 for some (two Pairs fragments), shared slides


LIVE_OPTIMIZERS = ("shared", "WG_LS", "W_TN", "G_RAND", "weaveshare", "WG_I")


def _runs():
    assert not SINGLE_LENGTH & set(TECHNIQUES)
    n = max(len(TECHNIQUES), len(ENGINES), len(SLICINGS), len(LIVE_OPTIMIZERS))
    cyc = lambda xs: itertools.islice(itertools.cycle(xs), n)  # noqa: E731
    live = list(zip(cyc(LIVE_OPTIMIZERS), cyc(TECHNIQUES), cyc(ENGINES), cyc(SLICINGS)))
    rest = [o for o in OPTIMIZER_NAMES if o not in LIVE_OPTIMIZERS]
    m = max(len(rest), len(TECHNIQUES) * len(SLICINGS))
    cyc = lambda xs: itertools.islice(itertools.cycle(xs), m)  # noqa: E731
    tech_slicing = list(itertools.product(TECHNIQUES, SLICINGS))
    node = [(o, t, e, sl) for o, (t, sl), e in zip(cyc(rest), cyc(tech_slicing), cyc(ENGINES))]
    return live, node


LIVE_RUNS, NODE_RUNS = _runs()


def test_the_walk_covers_every_allowed_value():
    for i, values in enumerate((OPTIMIZER_NAMES, TECHNIQUES, ENGINES, SLICINGS)):
        assert {r[i] for r in LIVE_RUNS + NODE_RUNS} == set(values)
        if i:
            assert {r[i] for r in LIVE_RUNS} == set(values)
    assert set(LIVE_OPTIMIZERS) <= set(OPTIMIZER_NAMES)
    assert len(AGGREGATES) <= len(WINDOWS) and "product" not in AGGREGATES


def _check_answers(raw, ts, v, rows):
    by_q = {}
    for row in rows:
        by_q.setdefault(row["query_id"], []).append(
            (row["window_start"], row["window_end"], row["value"])
        )
    assert sorted(by_q) == sorted(q["id"] for q in raw["workload"]["queries"])
    for q in raw["workload"]["queries"]:
        want, late = brute_force([{k: q[k] for k in ("id", "aggregate", "range", "slide")}], ts, v)
        assert not late
        mine = sorted(by_q.get(q["id"], []))
        assert [(s, e) for s, e, _ in mine] == [(s, e) for _, s, e, _ in want], q["id"]
        np.testing.assert_allclose(
            [x for *_, x in mine], [x for *_, x in want], rtol=1e-9, err_msg=q["id"]
        )


def _validated(tmp_path, optimizer, ie, engine, slicing):
    path = tmp_path / "c.yaml"
    raw = _config(optimizer, ie, engine, slicing)
    raw["run"]["output_dir"] = str(tmp_path / "out")
    path.write_text(yaml.safe_dump(raw))
    res = CliRunner().invoke(app, ["validate", str(path)])
    assert res.exit_code == 0 and "OK" in res.output, res.output
    return raw, load_config(path)


def _config(optimizer, ie, engine, slicing) -> dict:
    return live_config(optimizer, ie, engine, slicing)


@pytest.mark.parametrize("optimizer, ie, engine, slicing", LIVE_RUNS)
def test_validate_plan_and_live_run(optimizer, ie, engine, slicing, ray_session, spark, tmp_path):
    from sim.cluster_run import run_on_cluster

    raw, cfg = _validated(tmp_path, optimizer, ie, engine, slicing)
    out = tmp_path / "out"
    summary = run_on_cluster(cfg, spark=spark)
    plan = json.loads((out / "plan.json").read_text())
    assert plan["optimizer"] == optimizer and plan["ie"] == ie
    assert plan.get("slicing", "pairs") == slicing
    assert sorted(q for n in plan["nodes"] for t in n["trees"] for q in t["queries"]) == sorted(
        f"q_{a}" for a in AGGREGATES
    )
    data = pq.read_table(out / "data.parquet", columns=["ts_ms", "mf01"])
    ts, v = data["ts_ms"].to_numpy(), data["mf01"].to_numpy()
    got = pq.read_table(out / "answers.parquet").to_pylist()
    assert summary.tuples == len(ts) > 300 and summary.answers == len(got)
    _check_answers(raw, ts, v, got)


@pytest.mark.parametrize("optimizer, ie, engine, slicing", NODE_RUNS)
def test_validate_plan_and_node_run(optimizer, ie, engine, slicing, tmp_path):
    from cluster.deployment.specs import node_specs
    from cluster.node.core import NodeCore
    from placement.trees import CostModel
    from sim.debs_generator import generate_debs
    from sim.simulate import plan_for, workload_point

    raw, cfg = _validated(tmp_path, optimizer, ie, engine, slicing)
    point = cfg.points()[0]
    queries, rates, _ = workload_point(cfg, point["workload"])
    model = CostModel(ie, rates, engine, slicing)
    plan = plan_for(optimizer, queries, model, point["capacities"], cfg).to_dict()
    assert plan["optimizer"] == optimizer and plan.get("slicing", "pairs") == slicing
    generate_debs(tmp_path / "d.parquet", duration_s=4, rate_hz=100, seed=3, fmt="parquet")
    data = pq.read_table(tmp_path / "d.parquet", columns=["ts_ms", "mf01"])
    rows = []
    for spec in node_specs(plan):
        node = NodeCore(spec["node_id"], spec["trees"], plan["ie"])
        for i in range(0, data.num_rows, 128):
            node.ingest(None, data.slice(i, 128), seq=i // 128)
        node.flush()
        rows += node.drain().to_pylist()
    _check_answers(raw, data["ts_ms"].to_numpy(), data["mf01"].to_numpy(), rows)


def test_product_refused_at_validation(tmp_path):
    raw = _config("WG_TN", "panes", "fast", "pairs")
    raw["workload"]["queries"][0]["aggregate"] = "product"
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    res = CliRunner().invoke(app, ["validate", str(path)])
    assert res.exit_code == 2
    assert "workload.queries[0].aggregate" in res.output and "'product'" in res.output
