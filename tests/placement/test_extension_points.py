"""Extension points: a technique, an optimizer and an engine added from this file alone.

The toy technique ``toy_recompute`` recomputes every answer from the stored partials, folding
oldest to newest (its executor: ``Recompute``; its pricing: ``n - 1`` combines per answer of a
window of ``n = r * E`` partials, one answer per slide).  The toy optimizer ``toy_rr`` puts one
tree per query on the nodes round robin.  A fixture registers both (pricing in
``placement.cost``, executor in ``executors.base``, optimizer in ``placement.optimizers``) and
unregisters them after; nothing else in the code base names them.  Each goes through
``weaveplace validate``, planning, ``simulate`` and a live run (Ray actors fed by Spark: the
executor reaches the actors' processes by value, ``cluster.node.actor.shipped_executors``),
with answers equal to the brute-force oracle.  The toy engine ``toy_brute`` counts edges by
checking every position of the composite slide; plans priced with it equal ``fast``'s.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from helpers import WINDOWS, live_config
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from executors import ExecutionTree, brute_force
from executors.aggregates import combine2
from executors.base import FinalAggregator, register, unregister
from placement.cost import Pricing, Technique, register_technique, unregister_technique
from placement.distributed import build_plan
from placement.edges import register_engine, unregister_engine
from placement.edges.base import EdgeEngine
from placement.optimizers import (
    DistributedOptimizer,
    optimize,
    register_optimizer,
    unregister_optimizer,
)
from placement.plan import verify_plan
from placement.queries import AGGREGATES, Query
from placement.slicing import brute_force_edges
from placement.trees import CostModel
from sim.cli import app
from sim.config import load_config

TECH, OPT, ENGINE = "toy_recompute", "toy_rr", "toy_brute"


# ---- the toy technique ------------------------------------------------------------------------


class Recompute(FinalAggregator):
    """A ring of the last ``wsize`` partials; every answer folds its ``n`` partials afresh."""

    name = TECH

    def reset(self):
        hi, lo = self._ident_ring(self.wsize)
        self.state = {"ring_hi": hi, "ring_lo": lo, "meta": np.zeros(1, dtype=np.int64)}

    def _fold(self, last: int, n: int):
        ring_hi, ring_lo = self.state["ring_hi"], self.state["ring_lo"]
        w = ring_hi.shape[0]
        i = (last - n + 1) % w
        ah, al = ring_hi[i], ring_lo[i]
        for k in range(1, n):
            j = (i + k) % w
            ah, al = combine2(self.op, ah, al, ring_hi[j], ring_lo[j])
        return ah, al

    def _kernel(self, new_hi, new_lo, due_ptr, due_n, out_hi, out_lo, ops):
        s = self.state
        w = s["ring_hi"].shape[0]
        cur = int(s["meta"][0])
        for j in range(new_hi.shape[0]):
            s["ring_hi"][cur], s["ring_lo"][cur] = new_hi[j], new_lo[j]
            c = 0
            for q in range(due_ptr[j], due_ptr[j + 1]):
                out_hi[q], out_lo[q] = self._fold(cur, int(due_n[q]))
                c += int(due_n[q]) - 1
            if ops.shape[0]:
                ops[j] = c
            cur = (cur + 1) % w
        s["meta"][0] = cur

    def _answer_kernel(self, due_n, out_hi, out_lo) -> int:
        last = (int(self.state["meta"][0]) - 1) % self.wsize
        c = 0
        for q in range(due_n.shape[0]):
            out_hi[q], out_lo[q] = self._fold(last, int(due_n[q]))
            c += int(due_n[q]) - 1
        return c


def recompute_omega(windows, e: Fraction) -> float:
    """Combines per edge: a window of ``n = r E`` partials answered every ``s`` costs
    ``n - 1``, i.e. ``(r E - 1) / (s E)`` per edge."""
    return math.fsum(max(float(r * e) - 1.0, 0.0) / float(s * e) for r, s in windows)


def _zero(windows, omega_value: float) -> float:
    return 0.0


# ---- the toy optimizer ------------------------------------------------------------------------


def one_tree_per_query_round_robin(queries, model, caps, seed=0, preprocess=False):
    nodes: list[list] = [[] for _ in caps]
    for i, q in enumerate(queries):
        nodes[i % len(caps)].append(model.tree([q]))
    return build_plan(OPT, model, nodes, caps, queries)


# ---- the toy engine ---------------------------------------------------------------------------


class BruteEngine(EdgeEngine):
    name = ENGINE

    def density(self, classes):
        if not classes:
            return Fraction(0)
        period = math.lcm(*(m for m, _ in classes))
        return Fraction(brute_force_edges(classes, period), period)


@pytest.fixture(scope="module", autouse=True)
def toys():
    pricing = Pricing(recompute_omega, _zero)
    register_technique(Technique(TECH, pricing, pricing, doc="toy: recompute per window"))
    register(Recompute)
    register_optimizer(DistributedOptimizer(OPT, "G", one_tree_per_query_round_robin, "toy"))
    register_engine(ENGINE, lambda **options: BruteEngine())
    try:
        yield
    finally:
        unregister_engine(ENGINE)
        unregister_optimizer(OPT)
        unregister(TECH)
        unregister_technique(TECH)


# ---- checks -----------------------------------------------------------------------------------


def _config(slicing: str = "pairs") -> dict:
    return live_config(OPT, TECH, slicing=slicing)


def _write(tmp_path, raw: dict):
    raw["run"]["output_dir"] = str(tmp_path / "out")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _check_answers(raw, ts, v, rows):
    by_q: dict[str, list] = {}
    for row in rows:
        by_q.setdefault(row["query_id"], []).append(
            (row["window_start"], row["window_end"], row["value"])
        )
    assert sorted(by_q) == sorted(q["id"] for q in raw["workload"]["queries"])
    for q in raw["workload"]["queries"]:
        want, late = brute_force([{k: q[k] for k in ("id", "aggregate", "range", "slide")}], ts, v)
        assert not late
        mine = sorted(by_q[q["id"]])
        assert [(s, e) for s, e, _ in mine] == [(s, e) for _, s, e, _ in want], q["id"]
        np.testing.assert_allclose(
            [x for *_, x in mine], [x for *_, x in want], rtol=1e-9, err_msg=q["id"]
        )


@settings(max_examples=25, deadline=None)
@given(
    wins=st.lists(
        st.tuples(st.integers(1, 12), st.integers(1, 6)), min_size=1, max_size=4, unique=True
    ),
    agg=st.sampled_from(AGGREGATES),
    n=st.integers(0, 120),
    seed=st.integers(0, 1000),
    slicing=st.sampled_from(("pairs", "cutty")),
)
def test_toy_executor_equals_the_oracle(wins, agg, n, seed, slicing):
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, 60, n)).astype(np.int64)
    v = rng.integers(-50, 50, n).astype(np.int64)
    qs = [
        {"id": f"q{i}", "aggregate": agg, "range": r, "slide": s} for i, (r, s) in enumerate(wins)
    ]
    tree = ExecutionTree(qs, technique=TECH, slicing=slicing, count_ops=True)
    rows = tree.process(ts, v).to_pylist() + tree.flush().to_pylist()
    want, _ = brute_force(qs, ts, v)
    got = sorted((r["query_id"], r["window_start"], r["window_end"], r["value"]) for r in rows)
    assert [g[:3] for g in got] == [w[:3] for w in sorted(want)]
    np.testing.assert_allclose([g[3] for g in got], [w[3] for w in sorted(want)], rtol=1e-9)


def test_toy_pricing_counts_the_executors_operations():
    """Omega of a lone query whose range is a multiple of its slide (one edge per slide, every
    answer folds r/s partials) equals the combines the executor counts per slice."""
    model = CostModel(TECH, 1.0)
    tree = model.tree([Query("q", 12, 3, "sum")])
    assert tree.omega == pytest.approx(3.0)  # (12/3 - 1) / 1 edge per slide
    q = {"id": "q", "aggregate": "sum", "range": 12, "slide": 3}
    ex = ExecutionTree([q], technique=TECH, count_ops=True)
    ex.process(np.arange(0, 300, dtype=np.int64), np.ones(300, dtype=np.int64))
    ex.flush()
    per = ex.op_counts()["per_slice"]
    assert per[10:-10].mean() == pytest.approx(tree.omega)


def test_validate_accepts_the_toys_and_refuses_them_once_unregistered(tmp_path):
    path = _write(tmp_path, _config())
    res = CliRunner().invoke(app, ["validate", str(path)])
    assert res.exit_code == 0 and "OK" in res.output, res.output
    unregister_optimizer(OPT)
    try:
        res = CliRunner().invoke(app, ["validate", str(path)])
        assert res.exit_code == 2 and f"unknown optimizer '{OPT}'" in res.output
    finally:
        register_optimizer(DistributedOptimizer(OPT, "G", one_tree_per_query_round_robin))


def test_plan_is_one_tree_per_query_round_robin_and_verifies():
    qs = [Query(f"q{i}", r, s, "sum", "mf01") for i, (r, s) in enumerate(WINDOWS)]
    model = CostModel(TECH, {"mf01": 0.1})
    plan = optimize(OPT, qs, model, 3)
    assert [[t.queries[0].id for t in n.trees] for n in plan.nodes] == [
        ["q0", "q3", "q6"],
        ["q1", "q4"],
        ["q2", "q5"],
    ]
    assert plan.ie == TECH
    assert verify_plan(plan.to_dict()) == []
    want = sum(
        0.1 + float(t.edge_rate) * recompute_omega(t.windows, t.edge_rate)
        for n in plan.nodes
        for t in n.trees
    )
    assert plan.total_cost == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("slicing", ["pairs", "cutty"])
def test_simulate_prices_the_toys(tmp_path, slicing):
    from sim.simulate import simulate

    raw = _config(slicing)
    raw["run"]["mode"] = "simulate"
    raw["placement"]["optimizers"] = [OPT, "WG_TN"]
    cfg = load_config(_write(tmp_path, raw))
    summary = simulate(cfg, output_dir=tmp_path / "sim")
    rows = {r["optimizer"]: r for r in summary.per_optimizer}
    assert set(rows) == {OPT, "WG_TN"}
    plan = json.loads(next((tmp_path / "sim").rglob(f"*{OPT}*.json")).read_text())
    assert plan["optimizer"] == OPT and plan["ie"] == TECH
    assert sum(len(n["trees"]) for n in plan["nodes"]) == len(WINDOWS)


def test_run_on_cluster_answers_equal_the_oracle(ray_session, spark, tmp_path):
    from sim.cluster_run import run_on_cluster

    raw = _config()
    cfg = load_config(_write(tmp_path, raw))
    out = tmp_path / "out"
    summary = run_on_cluster(cfg, spark=spark)
    plan = json.loads((out / "plan.json").read_text())
    assert plan["optimizer"] == OPT and plan["ie"] == TECH
    assert [len(n["trees"]) for n in plan["nodes"]] == [4, 3]
    data = pq.read_table(out / "data.parquet", columns=["ts_ms", "mf01"])
    ts, v = data["ts_ms"].to_numpy(), data["mf01"].to_numpy()
    got = pq.read_table(out / "answers.parquet").to_pylist()
    assert summary.tuples == len(ts) > 300 and summary.answers == len(got)
    _check_answers(raw, ts, v, got)


def test_toy_engine_validates_and_prices_like_fast(tmp_path):
    raw = _config()
    raw["placement"]["engine"] = ENGINE
    res = CliRunner().invoke(app, ["validate", str(_write(tmp_path, raw))])
    assert res.exit_code == 0 and "OK" in res.output, res.output
    qs = [Query(f"q{i}", r, s, "sum", "mf01") for i, (r, s) in enumerate(WINDOWS)]
    mine = optimize("WG_TN", qs, CostModel("panes", {"mf01": 0.1}, ENGINE), 2).to_dict()
    fast = optimize("WG_TN", qs, CostModel("panes", {"mf01": 0.1}, "fast"), 2).to_dict()
    assert mine == fast
