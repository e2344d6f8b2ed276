"""The live step of `make run` (``configs/live_quickstart.yaml``, the config as shipped) on the
session's Ray and Spark: each node's measured cost agrees with the plan's estimate within 15 %
(``sim.cost_check``: counted operations, the model's own units), the tour prints that
agreement, and in headless Chromium every plot of its report has more than one point.

Oracle for the cost: the plan's node costs (``placement``, recomputed by ``verify_plan``); the
measured side counts the tuples each tree folded and the operations its executor ran.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from placement.plan import verify_plan
from sim.bundled import bundled_config
from sim.cli.tour import cost_agreement
from sim.cluster_run import run_on_cluster
from sim.config import load_config
from sim.report import build_report

CHROMIUM = shutil.which("chromium") or (
    "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None
)


@pytest.fixture(scope="module")
def quickstart_run(ray_session, spark, tmp_path_factory):
    out = tmp_path_factory.mktemp("quickstart") / "live"
    with bundled_config("live_quickstart.yaml") as path:  # what `weaveplace quickstart` runs
        cfg = load_config(path)
    run_on_cluster(cfg, out, spark=spark)
    return out, build_report(out)


def test_measured_cost_agrees_with_the_plan_per_node(quickstart_run):
    out, _ = quickstart_run
    metrics = json.loads((out / "metrics.json").read_text())
    plan = json.loads((out / "plan.json").read_text())
    assert verify_plan(plan) == []
    check = metrics["cost_check"]["nodes"]
    assert set(check) == {n["id"] for n in plan["nodes"]} and len(check) == 2
    for n in plan["nodes"]:
        c = check[n["id"]]
        assert c["plan"] == n["cost"]
        assert abs(c["measured"] / c["plan"] - 1) < 0.15, (n["id"], c)
        m = metrics["nodes"][n["id"]]
        assert sum(t["final_ops"] for t in m["trees"].values()) > 0  # operations were counted
    assert metrics["feed"]["batches"] >= 20  # a timeline, not one batch
    lines = cost_agreement(out / "metrics.json")
    assert len(lines) == 3 and all(n in "".join(lines) for n in check)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed")
def test_every_plot_of_the_live_report_has_points(quickstart_run, tmp_path):
    _, html_path = quickstart_run
    text = html_path.read_text()
    assert "measured cost (the trees" in text and "per-batch overheads" in text
    dom = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--dump-dom",
            html_path.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    imgs = re.findall(r"<img [^>]*>", dom)
    files = {re.search(r'data-file="([^"]+)"', i).group(1): i for i in imgs}
    assert {"live_node_load.png", "live_throughput.png", "live_event_time.png"} <= set(files)
    for name, tag in files.items():
        points = re.search(r'data-points="(\d+)"', tag)
        assert points and int(points.group(1)) > 1, name
        assert 'src="data:image/png;base64,' in tag


def test_cost_check_counts_what_the_model_prices():
    """``sim.cost_check`` by hand: lambda from the tuples of each tree's stream, ``E * Omega``
    from the counted operations per primitive (avg runs sum and count: two)."""
    from sim.cost_check import agreement_lines, node_cost_check

    plan = {
        "streams": {"mf01": {"rate": 0.1}, "mf02": {"rate": 0.1}},
        "nodes": [
            {
                "id": "n0",
                "cost": 0.21,
                "trees": [
                    {
                        "id": "a",
                        "stream": "mf01",
                        "aggregate": "sum",
                        "edge_rate": 0.001,
                        "omega": 2,
                    },
                    {
                        "id": "b",
                        "stream": "mf02",
                        "aggregate": "avg",
                        "edge_rate": 0.002,
                        "omega": 4,
                    },
                ],
            }
        ],
    }
    nodes = {
        "n0": {
            "stream_tuples": {"mf01": 1000, "mf02": 1100},
            "trees": {"a": {"final_ops": 20}, "b": {"final_ops": 160}},
        }
    }
    c = node_cost_check(plan, nodes, span_ms=10_000)["n0"]
    assert c["lambda"] == pytest.approx([0.2, 0.21])
    assert c["final"] == pytest.approx([0.01, 0.002 + 0.008])
    assert c["measured"] == pytest.approx(0.22) and c["ratio"] == pytest.approx(0.22 / 0.21)
    assert agreement_lines({"n0": c}) == [
        "n0: estimated cost 0.21, measured 0.22 (+4.8 %); share 100.0 % planned, 100.0 % measured"
    ]
    del nodes["n0"]["trees"]["b"]["final_ops"]  # operations not counted: no check
    assert node_cost_check(plan, nodes, span_ms=10_000) == {}
