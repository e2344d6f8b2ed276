"""``weaveplace bench scale`` (``sim/bench/scale.py``): cells run in child processes give the
plan an in-process WeaveShare gives, a cell over its limit is stopped and reported, the
growth fit and the command on a tiny grid."""

from __future__ import annotations

import hashlib
import json
import math
import signal
import subprocess
import warnings

import pytest
from typer.testing import CliRunner

from placement.trees import CostModel
from placement.weaveshare import weaveshare
from sim.bench import scale
from sim.cli import UserError, app
from sim.workload import WorkloadSpec, generate


def _in_process_hash(qnum: int, smax: int) -> tuple[str, float]:
    qs = generate(WorkloadSpec(qnum, smax, 1.0, 0.5, 10.0, "nrm", 0))
    trees = weaveshare(qs, CostModel("panes", 1.0, "fast"))
    groups = [sorted(sorted(q.id for q in t.queries) for t in trees)]
    return hashlib.sha256(json.dumps(groups).encode()).hexdigest()[:16], sum(t.cost for t in trees)


@pytest.mark.scenario  # child processes of the bench: make test-scenarios
def test_a_cell_gives_the_in_process_plan_verified(tmp_path):
    cell = scale.run_cell(scale.Cell(200, 50, 1, "weaveshare"), 120.0, tmp_path)
    digest, total = _in_process_hash(200, 50)
    assert cell.status == "ok"
    assert cell.plan_hash == digest
    assert math.isclose(cell.total_cost, total, rel_tol=1e-12)
    assert cell.total_cost == cell.max_cost  # one node
    assert cell.verified is True
    assert cell.peak_mb > 10 and cell.seconds >= 0
    plan = json.loads((tmp_path / "n200_s50_k1_weaveshare.json").read_text())
    assert len(plan["queries"]) == 200
    assert sum(len(t["queries"]) for n in plan["nodes"] for t in n["trees"]) == 200


@pytest.mark.scenario  # child processes of the bench: make test-scenarios
def test_a_distributed_cell_spreads_over_its_nodes():
    cell = scale.run_cell(scale.Cell(120, 30, 4, "WG_TN"), 120.0, verify=True)
    assert cell.status == "ok" and cell.verified is True
    assert cell.max_cost < cell.total_cost  # more than one node carries trees
    # grouped units (--preprocess classes): the plan optimize() makes from them
    from placement.distributed import optimize
    from placement.trees import CostModel
    from sim.workload import WorkloadSpec, generate

    grouped = scale.run_cell(scale.Cell(120, 30, 4, "WG_TN", preprocess="classes"), 120.0)
    spec = WorkloadSpec(120, 30, 1.0, 0.5, 10.0, "nrm", 0)
    want = optimize("WG_TN", generate(spec), CostModel("panes", spec.rate, "fast"), 4,
                    preprocess="classes")  # fmt: skip
    assert grouped.label == "WG_TN+classes" and grouped.verified is True
    assert (grouped.total_cost, grouped.max_cost) == (want.total_cost, want.max_cost)


@pytest.mark.scenario  # child processes of the bench: make test-scenarios
def test_a_cell_over_its_limit_is_stopped_and_larger_n_skipped():
    cells = scale.grid([50_000, 100_000], [10_000], [1])
    scale.run(cells, limit_s=1.0, verify=False)
    assert cells[0].status == "> 1 s"
    assert cells[0].seconds is None
    assert cells[1].status.startswith("> 1 s (skipped")


def test_a_cell_whose_child_is_killed_says_so(monkeypatch):
    """A child stopped by a signal from outside is reported as such, not as ``error: ?``."""
    real = subprocess.Popen

    def killed_at_once(*args, **kwargs):
        proc = real(*args, **kwargs)
        proc.send_signal(signal.SIGTERM)
        return proc

    monkeypatch.setattr(scale.subprocess, "Popen", killed_at_once)
    cell = scale.grid([1_000], [100], [1])[0]
    scale.run_cell(cell, limit_s=60.0, verify=False)
    assert cell.status == "killed by SIGTERM"
    assert cell.seconds is None


def test_growth_exponent_is_the_log_log_slope():
    cells = [
        scale.Cell(n, 100, 1, "weaveshare", status="ok", seconds=2e-4 * n**1.5)
        for n in (1_000, 10_000, 100_000)
    ]
    cells.append(scale.Cell(1_000_000, 100, 1, "weaveshare", status="> 60 s"))
    cells.append(scale.Cell(100, 100, 1, "weaveshare", status="ok", seconds=0.01))  # < MIN_FIT_S
    (exp,) = scale.growth_exponents(cells).values()
    assert math.isclose(exp, 1.5, rel_tol=1e-9)
    assert scale.growth_exponents(cells[:1]) == {(100, 1, "weaveshare"): None}


@pytest.mark.scenario  # child processes of the bench: make test-scenarios
def test_the_command_writes_table_plot_and_json(tmp_path):
    res = CliRunner().invoke(
        app,
        ["bench", "scale", "--qnums", "60,120", "--smaxes", "20", "--nodes", "1,2"]
        + ["--single", "weaveshare,banded_weaveshare", "--limit", "120", "--out", str(tmp_path)],
    )
    assert res.exit_code == 0, res.output
    data = json.loads((tmp_path / "scale.json").read_text())
    assert [(c["qnum"], c["nodes"], c["optimizer"], c["status"]) for c in data["cells"]] == [
        (60, 1, "weaveshare", "ok"),
        (120, 1, "weaveshare", "ok"),
        (60, 1, "banded_weaveshare", "ok"),
        (120, 1, "banded_weaveshare", "ok"),
        (60, 2, "WG_TN", "ok"),
        (120, 2, "WG_TN", "ok"),
        (60, 2, "WG_BAND", "ok"),
        (120, 2, "WG_BAND", "ok"),
    ]
    assert all(c["verified"] for c in data["cells"])
    # under 10,000 units one band: banded WeaveShare gives WeaveShare's plan
    cost = {(c["qnum"], c["optimizer"]): c["total_cost"] for c in data["cells"]}
    for n in (60, 120):
        assert cost[n, "banded_weaveshare"] == pytest.approx(cost[n, "weaveshare"])
    assert (tmp_path / "scale.png").stat().st_size > 1000
    assert "growth exponent" in (tmp_path / "scale.md").read_text()


def test_bad_options_are_user_errors_naming_the_option():
    for args, option in (
        (["--nodes", "0"], "--nodes"),
        (["--single", "WG_TN"], "--single"),
        (["--distributed", "NOPE"], "--distributed"),
        (["--limit", "0"], "--limit"),
        (["--preprocess", "slides"], "--preprocess"),
    ):
        res = CliRunner().invoke(app, ["bench", "scale", *args])
        assert isinstance(res.exception, UserError), res.output
        assert str(res.exception).startswith(option)


def test_a_plot_with_no_finished_plan_says_so_without_a_warning(tmp_path):
    """Every cell over its limit (e.g. WG_PF at 1,000 queries on 64 nodes): the plot is still
    written, with no matplotlib warning reaching the user."""
    cells = [scale.Cell(1_000, 10_000, 64, "WG_PF", status="> 150 s")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        path = scale.plot(cells, tmp_path / "scale.png")
    assert path.stat().st_size > 1000
