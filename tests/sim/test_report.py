"""``sim.report`` and ``weaveplace report``: the HTML report shows the run's own numbers,
embeds every plot, needs no network.

Why: people quote the report; a number in it that differs from the plan JSON / results table (by
re-computation or formatting drift) or a plot that silently went missing would mislead them.
Runs are built in tmp_path (a 2-configuration simulation and a synthetic live run dir with the
exact file formats of ``cluster.runs.file_run``), so the whole module takes a few seconds; the headless
Chromium screenshot runs only where ``chromium`` is installed.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.report_tables import Tables

from placement.optimizers import optimize
from placement.queries import Query
from placement.trees import CostModel
from sim.config import config_from_mapping
from sim.report import build_report
from sim.report.plots import pareto_front
from sim.report.terminal import print_summary
from sim.simulate import simulate

SIM = {
    "name": "report-test",
    "workload": {
        "generator": {
            "qnum": [6, 7],
            "smax": 12,
            "rate": 10.0,
            "zskew": 1,
            "omax": 5,
            "gen": "nrm",
            "seed": 0,
        }
    },
    "cluster": {"nodes": 3},
    "placement": {
        "optimizers": ["G_TL", "W_TN", "WG_TN", "WG_I", "weaveshare"],
        "ie": "panes",
        "exact": 7,
    },
    "run": {"seed": 1},
}
SIM_PNGS = {
    "fig40_quality.png",
    "table10_runtime.png",
    "fig41_nodes_c0000.png",
    "fig41_nodes_c0001.png",
    "total_vs_max_c0000.png",
    "total_vs_max_c0001.png",
}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("sim")
    simulate(config_from_mapping(SIM), output_dir=out)
    html_path = build_report(out)
    return out, html_path, Tables(html_path.read_text())


def _plans(run_dir: Path) -> dict[str, dict]:
    """Every plan file (fronts, ``*_front.json``, are lists of plans: not rows of the table)."""
    return {
        f"plans/{p.name}": json.loads(p.read_text())
        for p in sorted((run_dir / "plans").glob("*.json"))
        if not p.name.endswith("_front.json")
    }


def test_sim_report_embeds_every_plot_and_writes_pngs(sim_run):
    out, html_path, doc = sim_run
    assert html_path == out / "report" / "report.html"
    pngs = {p.name for p in html_path.parent.glob("*.png")}
    assert pngs == SIM_PNGS
    embedded = {img["data-file"]: img["src"] for img in doc.imgs}
    assert set(embedded) == SIM_PNGS
    for name, src in embedded.items():
        data = (html_path.parent / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5000, name
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]) == data, name  # same bytes as on disk


def test_sim_report_numbers_equal_plan_json(sim_run):
    out, _, doc = sim_run
    plans = _plans(out)
    assert any(k.endswith("EXACT_min_total.json") for k in plans)
    rows = doc.fields("plans-full")
    assert sorted(ra["data-plan"] for ra, _ in rows) == sorted(plans)
    for ra, f in rows:
        plan = plans[ra["data-plan"]]
        for key in ("total_cost", "max_cost"):
            attrs, text = f[key]
            assert float(attrs["data-value"]) == plan[key]
            assert text == repr(float(plan[key]))  # full precision shown as written
        assert f["node_costs"][1] == ", ".join(f"{n['id']}: {n['cost']!r}" for n in plan["nodes"])
        assert f["optimizer"][1] == plan["optimizer"]
    # per-configuration tables (rounded display, exact data-value)
    per_config = [t for t in doc.tables if t and t.startswith("plans-c")]
    assert sorted(per_config) == ["plans-c0000", "plans-c0001"]
    seen = 0
    for tid in per_config:
        for ra, f in doc.fields(tid):
            plan = plans[ra["data-plan"]]
            assert float(f["total_cost"][0]["data-value"]) == plan["total_cost"]
            assert float(f["max_cost"][0]["data-value"]) == plan["max_cost"]
            for j, n in enumerate(plan["nodes"]):
                attrs, text = f[f"node_cost_{j}"]
                assert float(attrs["data-value"]) == n["cost"]
                assert float(text.replace(",", "")) == pytest.approx(n["cost"], rel=1e-5)
            seen += 1
    assert seen == len(plans)


def test_sim_report_tables_equal_result_files(sim_run):
    out, _, doc = sim_run
    res = pd.read_parquet(out / "results.parquet").set_index("plan")
    for tid in ("plans-c0000", "plans-c0001"):
        for ra, f in doc.fields(tid):
            if ra["data-plan"] not in res.index:
                assert "EXACT" in ra["data-plan"]
                continue
            row = res.loc[ra["data-plan"]]
            assert float(f["runtime_s"][0]["data-value"]) == row["runtime_s"]
            if pd.notna(row["gap_total"]):
                assert float(f["gap_total_pct"][0]["data-value"]) == row["gap_total"] * 100
    f40 = pd.read_csv(out / "fig40_quality.csv", float_precision="round_trip")
    shown = doc.fields("fig40")
    assert len(shown) == len(f40) == 2 * len(SIM["placement"]["optimizers"])
    for (_, f), row in zip(shown, f40.itertuples()):
        assert f["optimizer"][1] == row.optimizer and f["metric"][1] == row.metric
        assert float(f["quality_mean_pct"][0]["data-value"]) == row.quality_mean_pct
        assert float(f["quality_std_pct"][0]["data-value"]) == row.quality_std_pct
    t10 = pd.read_csv(out / "table10_runtime.csv", float_precision="round_trip")
    ((_, compact),) = doc.tables["table10-compact"]
    assert [float(c[0]["data-value"]) for c in compact[1:]] == t10["mean_s"].tolist()
    for (_, f), row in zip(doc.fields("table10"), t10.itertuples()):
        assert f["optimizer"][1] == row.optimizer
        assert float(f["mean_s"][0]["data-value"]) == row.mean_s
        assert float(f["max_s"][0]["data-value"]) == row.max_s


def test_report_is_self_contained(sim_run):
    _, html_path, doc = sim_run
    text = html_path.read_text()
    assert not re.search(r"https?:", text, re.I)
    assert "<script" not in text.lower() and "url(" not in text.lower()
    assert "<link" not in text.lower() and "@import" not in text.lower()
    assert doc.links and all(s.startswith("data:image/png;base64,") for s in doc.links)


def test_mismatch_between_results_and_plan_is_reported(sim_run, tmp_path):
    out, _, _ = sim_run
    run = tmp_path / "run"
    shutil.copytree(out, run, ignore=shutil.ignore_patterns("report"))
    victim = run / "plans" / "c0000_W_TN.json"
    d = json.loads(victim.read_text())
    d["total_cost"] += 1.0
    victim.write_text(json.dumps(d))
    text = build_report(run, tmp_path / "rep").read_text()
    assert 'class="warn"' in text and "plans/c0000_W_TN.json: total_cost" in text
    # the plan's own (tampered) number is what the plan table shows, not the results table's
    doc = Tables(text)
    row = [f for ra, f in doc.fields("plans-full") if ra["data-plan"] == "plans/c0000_W_TN.json"]
    assert float(row[0]["total_cost"][0]["data-value"]) == d["total_cost"]


def test_figure_limit_for_large_grids(sim_run, tmp_path):
    out, _, _ = sim_run
    html_path = build_report(out, tmp_path / "rep", max_config_figures=1)
    doc = Tables(html_path.read_text())
    assert {i["data-file"] for i in doc.imgs} == SIM_PNGS - {
        "fig41_nodes_c0001.png",
        "total_vs_max_c0001.png",
    }
    assert "figures for the first 1 only" in html_path.read_text()
    assert len(doc.fields("plans-full")) == len(_plans(out))  # every plan still in the table


def _small_plan(n_nodes: int = 3, optimizer: str = "WG_I"):
    qs = [
        Query(f"q{i}", r, s, "sum", "s0")
        for i, (r, s) in enumerate([(6, 2), (9, 3), (8, 4), (10, 5), (12, 6), (12, 4)])
    ]
    model = CostModel("panes", {"s0": 10.0})
    plan = optimize(optimizer, qs, model, [None] * n_nodes, seed=0)
    for i, n in enumerate(plan.nodes):
        n.id = f"node-{i}"
    return plan


def test_plans_only_run_dir(tmp_path):
    run = tmp_path / "run"
    for name in ("WG_I", "WG_TN", "G_TL"):
        _small_plan(optimizer=name).write(run / "plans" / f"c0000_{name}.json")
    html_path = build_report(run)
    doc = Tables(html_path.read_text())
    assert {i["data-file"] for i in doc.imgs} == {
        "fig40_quality.png",
        "fig41_nodes_c0000.png",
        "total_vs_max_c0000.png",
    }
    q = {
        (f["optimizer"][1], f["metric"][1]): float(f["quality_mean_pct"][0]["data-value"])
        for _, f in doc.fields("fig40")
    }
    plans = {
        n: json.loads((run / "plans" / f"c0000_{n}.json").read_text())
        for n in ("WG_I", "WG_TN", "G_TL")
    }
    for metric, key in (("TotalCost", "total_cost"), ("MaxCost", "max_cost")):
        vals = {n: p[key] for n, p in plans.items()}
        lo, hi = min(vals.values()), max(vals.values())
        for n, v in vals.items():
            assert q[(n, metric)] == pytest.approx(0 if hi == lo else 100 * (v - lo) / (hi - lo))


def test_pareto_front():
    pts = [(10, 5), (8, 6), (12, 4), (9, 6), (8, 7), (13, 4)]
    assert pareto_front(pts) == [(8, 6), (10, 5), (12, 4)]


# -- live runs ------------------------------------------------------------------------------------


def _live_run(root: Path, measured_ops: bool = False) -> tuple[Path, dict, dict]:
    """A live run dir in ``cluster.runs.file_run.run_file``'s formats (metrics as Deployment.metrics)."""
    run = root / "live"
    plan = _small_plan().to_dict()
    run.mkdir(parents=True)
    (run / "plan.json").write_text(json.dumps(plan, indent=1))
    rng = np.random.default_rng(0)
    n = 400
    qids = np.array([f"q{i % 6}" for i in range(n)])
    ws = np.sort(rng.integers(0, 10_000, n))
    answers = pa.table(
        {
            "query_id": qids,
            "window_start": pa.array(ws, pa.int64()),
            "window_end": pa.array(ws + 100, pa.int64()),
            "value": pa.array(rng.random(n), pa.float64()),
        }
    )
    pq.write_table(answers, run / "answers.parquet")
    late = pa.table(
        {
            "node_id": ["node-0"] * 5 + ["node-2"] * 2,
            "tree_id": ["t0"] * 5 + ["t3"] * 2,
            "stream": ["s0"] * 7,
            "ts_ms": pa.array([5, 6, 7, 8, 9, 100, 101], pa.int64()),
            "value": pa.array([1.0] * 7, pa.float64()),
        }
    )
    pq.write_table(late, run / "late.parquet")
    nodes = {}
    for i, node in enumerate(plan["nodes"]):
        nid = node["id"]
        m = {
            "node_id": nid,
            "batches": 10,
            "tuples": 3000,
            "tree_tuples": 3000 * len(node["trees"]),
            "answers": 100 + i,
            "busy_s": 0.5 + i * 0.25,
            "late_tuples": {"node-0": 5, "node-2": 2}.get(nid, 0),
            "pending_answers": 0,
            "last_seq": 9,
            "stream_tuples": {"s0": 3000},
            "trees": {
                t["id"]: {
                    "stream": "s0",
                    "technique": "panes",
                    "queries": len(t["queries"]),
                    "slices": 100 + 7 * k,
                    "late": 0,
                }
                for k, t in enumerate(node["trees"])
            },
            "queue_depth": 0,
            "max_queue_depth": 3,
            "driver_blocked_s": 0.01,
            "recoveries": 0,
            "utilisation": (0.5 + i * 0.25) / 4.0,
        }
        if measured_ops:
            m["measured_ops"] = 1000 * (i + 1)
        nodes[nid] = m
    metrics = {
        "rows_fed": 3000,
        "bytes_fed": 120000,
        "batches": 10,
        "wall_s": 4.0,
        "technique": "panes",
        "checkpoints": 0,
        "nodes": nodes,
        "answers": n,
        "feed": {
            "mode": "raw",
            "rows": 3000,
            "batches": 10,
            "seconds": 3.0,
            "spark_seconds": 1.0,
            "rows_per_s": 1000.0,
        },
        "startup": {"ray_s": 1.0, "ray_owned": True, "spark_s": 2.0},
        "finish_s": 0.2,
        "data_path": "/data/debs.parquet",
    }
    (run / "metrics.json").write_text(json.dumps(metrics, indent=1))
    return run, plan, metrics


def test_live_report(tmp_path):
    run, plan, metrics = _live_run(tmp_path)
    html_path = build_report(run)
    text = html_path.read_text()
    assert not re.search(r"https?:", text, re.I)
    doc = Tables(text)
    assert {i["data-file"] for i in doc.imgs} == {"live_node_load.png", "live_event_time.png"}
    for name in ("live_node_load.png", "live_event_time.png"):
        assert (html_path.parent / name).read_bytes().startswith(PNG_MAGIC)
    assert "busy seconds" in text
    rows = doc.fields("live-nodes")
    assert [ra["data-node"] for ra, _ in rows] == [n["id"] for n in plan["nodes"]]
    busy_total = sum(m["busy_s"] for m in metrics["nodes"].values())
    for (_ra, f), node in zip(rows, plan["nodes"]):
        m = metrics["nodes"][node["id"]]
        assert float(f["est_cost"][0]["data-value"]) == node["cost"]
        assert float(f["measured"][0]["data-value"]) == m["busy_s"]
        assert float(f["measured_share_pct"][0]["data-value"]) == pytest.approx(
            100 * m["busy_s"] / busy_total
        )
        assert int(f["late_tuples"][0]["data-value"]) == m["late_tuples"]
        assert int(f["answers"][0]["data-value"]) == m["answers"]
        omega = {t["id"]: t["omega"] for t in node["trees"]}
        assert float(f["slice_ops"][0]["data-value"]) == pytest.approx(
            m["tree_tuples"] + sum(t["slices"] * omega[tid] for tid, t in m["trees"].items())
        )
    ((_, late),) = doc.fields("live-late")
    assert int(late["late_metrics"][0]["data-value"]) == 7
    assert int(late["late_rows"][0]["data-value"]) == 7
    ov = {ra["data-key"]: cells[1] for ra, cells in doc.tables["live-overview"]}
    assert float(ov["plan TotalCost"][0]["data-value"]) == plan["total_cost"]
    assert float(ov["feed rows / s (mean)"][0]["data-value"]) == 1000.0
    per_query = (
        pq.read_table(run / "answers.parquet")
        .group_by("query_id")
        .aggregate([("query_id", "count")])
    )
    counts = per_query.column("query_id_count").to_numpy()
    ((_, cells),) = doc.tables["answers-per-query"]
    assert [float(c[0]["data-value"]) for c in cells] == [counts.min(), counts.mean(), counts.max()]
    assert int(ov["answers.parquet rows"][0]["data-value"]) == 400


def test_live_report_reads_only_what_it_shows_of_the_answers(tmp_path):
    """The answers' ids and window ends, ids as a category: 35 M answers of 100,000 queries
    were 4.4 GB read whole into pandas."""
    from sim.report.data import load_live

    run, _, _ = _live_run(tmp_path)
    got = load_live(run).answers
    assert list(got.columns) == ["query_id", "window_end"]
    assert isinstance(got["query_id"].dtype, pd.CategoricalDtype)
    want = pq.read_table(run / "answers.parquet").to_pandas()
    assert got["query_id"].astype(str).tolist() == want["query_id"].tolist()
    assert got["window_end"].tolist() == want["window_end"].tolist()


def test_live_report_without_plan(tmp_path):
    run, plan, metrics = _live_run(tmp_path)
    (run / "plan.json").unlink()
    text = build_report(run).read_text()
    assert "no plan JSON in the run directory" in text
    doc = Tables(text)
    assert {i["data-file"] for i in doc.imgs} == {"live_node_load.png", "live_event_time.png"}
    rows = doc.fields("live-nodes")
    assert "est_cost" not in rows[0][1] and "slice_ops" not in rows[0][1]
    assert [float(f["measured"][0]["data-value"]) for _, f in rows] == [
        m["busy_s"] for m in metrics["nodes"].values()
    ]


def test_live_report_prefers_measured_operations(tmp_path):
    run, plan, metrics = _live_run(tmp_path, measured_ops=True)
    text = build_report(run).read_text()
    assert "measured operations (measured_ops)" in text
    rows = Tables(text).fields("live-nodes")
    assert [int(f["measured"][0]["data-value"]) for _, f in rows] == [1000, 2000, 3000]


def test_live_report_prefers_the_measured_cost(tmp_path):
    """With ``cost_check`` (``run.count_ops``) the load plot and table compare the plan's cost
    with the measured one in the model's units, and say what is left out."""
    run, plan, metrics = _live_run(tmp_path)
    check = {
        n["id"]: {"plan": n["cost"], "measured": 1.5 * (i + 1)} for i, n in enumerate(plan["nodes"])
    }
    metrics["cost_check"] = {"span_ms": 10_000.0, "nodes": check}
    (run / "metrics.json").write_text(json.dumps(metrics))
    text = build_report(run).read_text()
    assert "measured cost (the trees" in text and "from counted operations)" in text
    assert "per-batch overheads" in text
    rows = Tables(text).fields("live-nodes")
    assert [float(f["measured"][0]["data-value"]) for _, f in rows] == [
        check[n["id"]]["measured"] for n in plan["nodes"]
    ]
    assert re.search(r'data-file="live_node_load.png" data-points="3"', text)


def test_print_summary(sim_run, tmp_path):
    from rich.console import Console

    out, _, _ = sim_run
    con = Console(record=True, width=200)
    print_summary(out, con)
    text = con.export_text()
    for name in SIM["placement"]["optimizers"] + ["EXACT_min_total"]:
        assert name in text
    plan = json.loads((out / "plans" / "c0000_G_TL.json").read_text())
    assert f"{plan['total_cost']:,.6g}" in text
    run, _, _ = _live_run(tmp_path)
    con = Console(record=True, width=200)
    print_summary(run, con)
    text = con.export_text()
    assert "node-0" in text and "busy seconds" in text and "slice ops" in text


def test_report_command(sim_run, tmp_path):
    """The real ``weaveplace report``: writes the page, prints the summary and the page's path;
    a missing run directory is one line on the console and exit code 2, no traceback."""
    import os
    import sys

    from typer.testing import CliRunner

    from sim.cli import UserError, app

    out, _, _ = sim_run
    res = CliRunner().invoke(app, ["report", str(out), "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "r" / "report.html").exists()
    assert "plan quality" in res.output  # print_summary's table
    assert f"report: {tmp_path / 'r' / 'report.html'}" in res.output
    res = CliRunner().invoke(app, ["report", str(tmp_path / "missing")])
    assert isinstance(res.exception, UserError)
    assert "run directory not found" in str(res.exception)
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-m", "sim.cli", "report", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        cwd=repo,
        env=dict(os.environ, COLUMNS="200"),
        timeout=120,
    )
    assert proc.returncode == 2
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert lines == [f"error: run directory not found: {tmp_path / 'missing'}"]


CHROMIUM = shutil.which("chromium") or (
    "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None
)


@pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium not installed (needed for the headless screenshot check; /usr/bin/chromium)",
)
def test_a_run_report_made_while_the_run_stops_is_shown_after(tmp_path):
    """``RunReport`` as ``weaveplace run`` uses it: called on the written outputs (while Ray
    and Spark stop), it makes the page; ``show_or_exit`` then prints the summary without
    making it again.  Never called (a directory run), ``show_or_exit`` makes it; a folder
    that is not a run is a ``UserError`` there, not an error on the run's thread."""
    from rich.console import Console

    import sim.cli.reports as reports
    from sim.cli import UserError

    run, _, _ = _live_run(tmp_path)
    early = reports.RunReport()
    early(run)
    page = run / "report" / "report.html"
    assert early.path == page and page.exists()
    page.unlink()
    con = Console(record=True, width=200)
    old, reports.console = reports.console, con
    try:
        assert early.show_or_exit(run) == page and not page.exists()  # shown, not made again
        assert "busy seconds" in con.export_text()  # print_summary's table
        assert reports.RunReport().show_or_exit(run) == page and page.exists()
        empty = tmp_path / "empty"
        empty.mkdir()
        broken = reports.RunReport()
        broken(empty)  # no error on the caller's side yet
        with pytest.raises(UserError):
            broken.show_or_exit(empty)
    finally:
        reports.console = old


@pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium not installed (needed for the headless screenshot check; /usr/bin/chromium)",
)
def test_chromium_screenshot_not_blank(sim_run, tmp_path):
    import matplotlib.image as mpimg

    _, html_path, _ = sim_run
    shot = tmp_path / "shot.png"
    subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            f"--screenshot={shot}",
            "--window-size=1280,2000",
            html_path.resolve().as_uri(),
        ],
        check=True,
        timeout=60,
        capture_output=True,
    )
    img = mpimg.imread(shot)[..., :3]
    assert img.shape[0] >= 1000 and img.shape[1] >= 1000
    assert float(img.std()) > 0.05  # not a blank page
    assert float((img.mean(axis=2) < 0.9).mean()) > 0.02  # some ink: text and plots rendered


def test_live_report_with_a_lost_node(tmp_path):
    """A node lost for good has no metrics of its own: no 'nodes differ' warning, its plan row
    stays (estimate only) and the re-placement table shows the record of metrics.json."""
    run, plan, metrics = _live_run(tmp_path)
    gone = plan["nodes"][1]["id"]
    del metrics["nodes"][gone]
    rec = {
        "node": gone,
        "reason": "fault drill at batch 4",
        "before_batch": 4,
        "snapshot_seq": 1,
        "moved": 2,
        "trees": {"t1": "node-0", "t2": "node-2"},
        "woven_in_plan": [],
        "replayed_batches": 3,
        "seconds": 0.25,
        "planned": {"total_change": -0.5},
        "executed": {"total_change": 0.0, "max_change": 1.5},
    }
    metrics["lost_nodes"] = {gone: {"reason": rec["reason"]}}
    metrics["replacements"] = [rec]
    metrics["nodes"]["node-0"]["adopted_trees"] = 1
    (run / "metrics.json").write_text(json.dumps(metrics))
    text = build_report(run).read_text()
    assert "differ" not in text
    doc = Tables(text)
    rows = doc.fields("live-nodes")
    assert [ra["data-node"] for ra, _ in rows] == [n["id"] for n in plan["nodes"]]
    ((_, cells),) = doc.tables["live-replacements"]
    texts = [c[1] for c in cells]
    assert texts[0] == gone and texts[3] == "2" and texts[4] == "t1: node-0, t2: node-2"
    assert texts[6] == "3"
    assert "trees adopted from lost nodes" in text


def test_live_report_of_a_stream_with_a_lost_node(tmp_path):
    """A live run over a directory (``cluster.feeds.directory``): answers and late tuples are
    directories of parts, metrics.json has ``stream``; a node lost for good mid-stream named
    its trees' late tuples before the loss, its adopter after.  The report reads the parts,
    shows the stream's files, micro-batches and stop reason, and counts every late tuple of a
    tree on the node holding it at the end (as metrics.json does)."""
    run, plan, metrics = _live_run(tmp_path)
    gone, keep = plan["nodes"][1]["id"], plan["nodes"][0]["id"]
    moved = [t["id"] for t in plan["nodes"][1]["trees"]]
    answers = pq.read_table(run / "answers.parquet")
    for name in ("answers.parquet", "late.parquet"):
        (run / name).unlink()
        (run / name).mkdir()
    pq.write_table(answers.slice(0, 150), run / "answers.parquet" / "part-00000.parquet")
    pq.write_table(answers.slice(150), run / "answers.parquet" / "part-00004.parquet")
    own = [t["id"] for t in plan["nodes"][0]["trees"]][0]

    def late(node, tree, ts):
        return pa.table(
            {
                "node_id": [node] * len(ts),
                "tree_id": [tree] * len(ts),
                "stream": ["s0"] * len(ts),
                "ts_ms": pa.array(ts, pa.int64()),
                "value": pa.array([1.0] * len(ts), pa.float64()),
            }
        )

    pq.write_table(
        pa.concat_tables([late(gone, moved[0], [5, 6, 7]), late(keep, own, [8])]),
        run / "late.parquet" / "part-00001.parquet",
    )
    pq.write_table(late(keep, moved[0], [50, 51]), run / "late.parquet" / "part-00004.parquet")
    del metrics["nodes"][gone]
    m0 = metrics["nodes"][keep]
    m0["trees"].update(
        {
            tid: {"stream": "s0", "technique": "panes", "queries": 1, "slices": 0, "late": 0}
            for tid in moved
        }
    )
    m0["late_tuples"], m0["adopted_trees"] = 6, len(moved)
    metrics["nodes"]["node-2"]["late_tuples"] = 0
    metrics["lost_nodes"] = {gone: {"reason": "fault drill at batch 7"}}
    metrics["replacements"] = [
        {
            "node": gone,
            "reason": "fault drill at batch 7",
            "before_batch": 7,
            "snapshot_seq": 5,
            "moved": len(moved),
            "trees": {t: keep for t in moved},
            "woven_in_plan": [],
            "replayed_batches": 1,
            "seconds": 0.1,
            "planned": {"total_change": 0.0},
            "executed": {"total_change": 0.0, "max_change": 1.0},
        }
    ]
    metrics["answers"] = answers.num_rows
    metrics["feed"] = {
        "mode": "stream",
        "rows": 3000,
        "batches": 5,
        "seconds": 3.0,
        "rows_per_s": 1000.0,
        "timeline": [{"t_s": 1.0, "rows": 900.0}, {"t_s": 2.0, "rows": 1100.0}],
    }
    metrics["stream"] = {
        "directory": "/data/in",
        "files": 6,
        "files_rejected": 1,
        "rows_rejected": 3,
        "batches": 5,
        "stop_reason": "idle",
    }
    (run / "metrics.json").write_text(json.dumps(metrics))
    text = build_report(run).read_text()
    assert "differ" not in text
    doc = Tables(text)
    ov = {ra["data-key"]: cells[1] for ra, cells in doc.tables["live-overview"]}
    assert ov["micro-batches"][1] == "5" and ov["stop reason"][1] == "idle"
    assert ov["files rejected whole"][1] == "1" and ov["nodes lost and re-placed"][1] == "1"
    assert int(ov["answers.parquet rows"][0]["data-value"]) == answers.num_rows
    assert int(ov["late.parquet rows"][0]["data-value"]) == 6
    rows = {ra["data-node"]: f for ra, f in doc.fields("live-nodes")}
    assert [n["id"] for n in plan["nodes"]] == list(rows)
    late_rows = {n: int(f["late_rows"][0]["data-value"]) for n, f in rows.items()}
    assert late_rows == {keep: 6, gone: 0, "node-2": 0}
    assert late_rows[keep] == int(rows[keep]["late_tuples"][0]["data-value"])
    per_tree = {(c[0][1], c[1][1]) for _, c in doc.tables["late-per-tree"]}
    assert {(gone, moved[0]), (keep, moved[0]), (keep, own)} == per_tree
