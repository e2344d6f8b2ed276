"""The control API of ``weaveplace serve`` (cluster/service/control.py) on a running service,
with the real Ray and Spark (session fixtures): queries added and removed through it, its
request checks, HTTP codes and token auth, the control file's mode, and the page in a browser.

Oracle: docs/DESIGN.md s. 9 (``executors.churn_oracle.registered_answers``) over every row of the
files, each query with the T_reg / T_unreg its command returned.  The files are in time order,
so no tuple is late.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.serve_files import RATE_HZ, SAFETY_S, serve_files
from support.service import drop, raw_request, service_queries
from support.waiting import wait_for

from executors.churn_oracle import registered_answers

pytestmark = pytest.mark.cluster

CHROMIUM = shutil.which("chromium") or (
    "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None
)


def _plan(queries, n_nodes=3):
    from placement.plan import Node, Plan
    from placement.queries import query_from_mapping
    from placement.trees import CostModel
    from placement.weaveshare import weaveshare

    rates = {s: RATE_HZ / 1000.0 for s in ("mf01", "mf02", "mf03")}
    model = CostModel("slickdeque", rates)
    trees = sorted(
        weaveshare([query_from_mapping(q) for q in queries], model), key=lambda t: -t.cost
    )
    nodes = [Node(f"node-{i}") for i in range(n_nodes)]
    for i, t in enumerate(trees):
        nodes[i % n_nodes].trees.append(t)
    return Plan("WG_TN", "slickdeque", nodes, rates).to_dict(), model


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return serve_files(tmp_path_factory)


def test_serve_add_remove_queries(ray_session, spark, files, tmp_path):
    from cluster.deployment.churn import ChurnDeployment
    from cluster.feeds.directory_options import StreamOptions
    from cluster.service.control import ControlError, call
    from cluster.service.options import ServiceOptions, ServiceStart
    from cluster.service.service import Service
    from placement.plan import verify_plan

    initial = service_queries("a", 6, seed=1)
    plan, model = _plan(initial)
    incoming, run_dir = tmp_path / "in", tmp_path / "run"
    incoming.mkdir()
    opts = StreamOptions(poll_s=0.2, files_per_batch=2, timeout_s=SAFETY_S)
    announced = []  # the lines serve prints: the load page's token URL
    with ChurnDeployment(plan) as dep:
        svc = Service(
            dep,
            spark,
            incoming,
            run_dir,
            ServiceStart(plan, model),
            ServiceOptions(stream=opts, default_rate=RATE_HZ / 1000.0, announce=announced.append),
        )
        box = {}
        th = threading.Thread(target=lambda: box.setdefault("stats", svc.run()), daemon=True)
        th.start()
        wait_for(
            lambda: svc.state == "running" and (run_dir / "control.json").exists(),
            "the service to start",
        )
        ctl = json.loads((run_dir / "control.json").read_text())
        assert stat.S_IMODE(os.stat(run_dir / "control.json").st_mode) == 0o600
        regs = {q["id"]: [q, None, None] for q in initial}

        def feed(k):
            drop(incoming, f"f{k:02d}.parquet", files[k])
            wait_for(lambda: svc.stream.stats.files >= k + 1, f"file {k} fed")

        feed(0)
        feed(1)
        added = service_queries("b", 5, seed=2)
        rep = call(run_dir, "POST", "/add-queries", {"queries": added})
        t_reg = rep["accepted_at"]["mf01"]
        assert t_reg == svc.stream.stats.max_ts + 1
        assert set(rep["queries"]) == {q["id"] for q in added}
        for q in added:
            regs[q["id"]] = [q, t_reg, None]
        feed(2)
        # the load page's history has a point per second at most (LoadHistory.series): load
        # samples (one per micro-batch) at least a second apart make the two points asserted below
        time.sleep(1.2)
        feed(3)
        rep = call(run_dir, "POST", "/remove-queries", {"ids": ["a1", "b2"]})
        t_unreg = rep["removed_at"]["mf02"]
        regs["a1"][2] = regs["b2"][2] = t_unreg
        # refused commands change nothing: 4xx with one line
        with pytest.raises(ControlError, match="already running"):
            call(run_dir, "POST", "/add-queries", {"queries": [added[0]]})
        with pytest.raises(ControlError, match="used before"):
            call(run_dir, "POST", "/add-queries", {"queries": [dict(added[2], id="a1")]})
        with pytest.raises(ControlError, match="unknown query"):
            call(run_dir, "POST", "/remove-queries", {"ids": ["zz"]})
        with pytest.raises(ControlError, match="range"):
            call(run_dir, "POST", "/add-queries", {"queries": [dict(added[0], id="x", range=0)]})
        code, body = raw_request(ctl["url"] + "/add-queries", ctl["token"], "POST", b"{oops")
        assert code == 400 and b"malformed JSON" in body
        code, _ = raw_request(ctl["url"] + "/status")
        assert code == 401
        code, _ = raw_request(ctl["url"] + "/status", "wrong")
        assert code == 401
        feed(4)
        more = service_queries("c", 3, seed=3)
        rep = call(run_dir, "POST", "/add-queries", {"queries": more})
        for q in more:
            regs[q["id"]] = [q, rep["accepted_at"][q["stream"]], None]
        time.sleep(1.2)
        feed(5)
        st = call(run_dir, "GET", "/status")
        assert sorted(st["queries"]) == sorted(k for k, v in regs.items() if v[2] is None)
        assert set(st["nodes"]) == {"node-0", "node-1", "node-2"}
        assert st["files"] == 6 and st["backlog"]["files"] == 0
        # Prometheus: the same figures as ctl status, parsed by prometheus_client; token required
        code, text = raw_request(ctl["url"] + "/metrics", ctl["token"])
        assert code == 200
        assert call(run_dir, "GET", "/status")["answers"] == st["answers"]  # nothing moved
        got = {
            (x.name, tuple(x.labels.values())): x.value
            for f in text_string_to_metric_families(text.decode())
            for x in f.samples
        }
        assert got[("weaveplace_queries", ())] == len(st["queries"])
        assert got[("weaveplace_nodes", ())] == 3
        assert got[("weaveplace_answers_total", ())] == st["answers"] > 0
        assert got[("weaveplace_late_tuples_total", ())] == st["late"] == 0
        assert got[("weaveplace_files_total", ())] == 6
        assert got[("weaveplace_recoveries_total", ())] == 0
        assert got[("weaveplace_events_total", ("add-queries",))] == 2
        assert got[("weaveplace_total_cost", ())] == pytest.approx(st["total_cost"])
        for nid, d in st["nodes"].items():
            assert got[("weaveplace_node_planned_cost", (nid,))] == pytest.approx(d["planned_cost"])
            assert got[("weaveplace_node_queries", (nid,))] == d["queries"]
            assert got[("weaveplace_node_trees", (nid,))] == len(d["trees"])
            assert got[("weaveplace_node_tuples_total", (nid,))] == d["measured"]["tuples"]
        for token in (None, "wrong"):
            assert raw_request(ctl["url"] + "/metrics", token)[0] == 401
        assert raw_request(ctl["url"] + f"/metrics?token={ctl['token']}")[0] == 401
        hist = call(run_dir, "GET", "/history")
        assert set(hist["nodes"]) == {"node-0", "node-1", "node-2"} and len(hist["t"]) >= 2
        code, page = raw_request(ctl["url"] + f"/?token={ctl['token']}")
        assert code == 200 and b"c2" in page and b"http" not in page.replace(b"http-equiv", b"")
        if CHROMIUM:  # the page in headless Chromium after add-queries (a skip at the end if not)
            shot = tmp_path / "page.png"
            url = re.search(r"load page: (\S+)", announced[0]).group(1)  # as printed at start
            assert url == ctl["url"] + f"/?token={ctl['token']}"
            flags = [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--virtual-time-budget=3000",
            ]
            dom = subprocess.run(
                flags + ["--dump-dom", url], capture_output=True, text=True, timeout=120, check=True
            ).stdout
            assert all(q["id"] in dom for q in more)
            drawn = dom.split("<script>")[0]  # the history: a line per node, the commands marked
            for key in ("planned_cost", "busy_share", "queue_depth", "answers_per_s"):
                svg = re.search(rf'<svg class="chart" data-key="{key}".*?</svg>', drawn, re.S)
                nodes = re.findall(r'<polyline class="series" data-node="([^"]+)"', svg.group())
                assert set(nodes) == {"node-0", "node-1", "node-2"}, key
                marked = re.findall(r'<line class="event" data-command="([^"]+)"', svg.group())
                assert {"start", "add-queries", "remove-queries"} <= set(marked), key
            assert len(re.findall(r'<tr class="node" data-node="node-\d">', dom)) == 3
            widths = [int(w) for w in re.findall(r'bar planned"><span style="width:(\d+)px', dom)]
            assert len(widths) == 3 and max(widths) == 260
            subprocess.run(
                flags + [f"--screenshot={shot}", "--window-size=1280,900", url],
                check=True,
                timeout=120,
                capture_output=True,
            )
            import matplotlib.image as mpimg

            img = mpimg.imread(shot)[..., :3]
            assert float(img.std()) > 0.05 and float((img.mean(axis=2) < 0.9).mean()) > 0.01
        feed(6)
        feed(7)
        call(run_dir, "POST", "/stop", {"flush": True})
        th.join(SAFETY_S)
        assert not th.is_alive()
        with pytest.raises(ControlError, match="no deployment answering"):
            call(run_dir, "GET", "/status", timeout=5)
    stats = box["stats"]
    assert stats.stop_reason == "stop" and stats.late == 0
    got = pq.read_table(run_dir / "answers.parquet").sort_by(
        [("query_id", "ascending"), ("window_start", "ascending")]
    )
    allt = pa.concat_tables(files)
    rows = []
    for q, a, b in regs.values():
        col = allt.column(q["stream"]).to_numpy()
        rows += registered_answers([(q, a, b)], allt.column("ts_ms").to_numpy(), col)
    rows.sort(key=lambda x: (x[0], x[1]))
    d = got.to_pydict()
    assert list(zip(d["query_id"], d["window_start"], d["window_end"])) == [r[:3] for r in rows]
    np.testing.assert_allclose(d["value"], [float(r[3]) for r in rows], rtol=1e-9)
    # every change is an event; the running plan verifies and holds the running queries
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    events = [e for e in events if e["command"] != "drift"]  # re-plans the commands caused
    assert [e["command"] for e in events] == [
        "start",
        "add-queries",
        "remove-queries",
        "add-queries",
        "stop",
    ]
    assert events[1]["accepted_at"] == t_reg and events[2]["removed_at"] == t_unreg
    assert all(e["total_cost_after"] > 0 for e in events)
    cur = json.loads((run_dir / "plan_current.json").read_text())
    assert verify_plan(cur) == []
    assert sorted(q["id"] for q in cur["queries"]) == sorted(
        k for k, v in regs.items() if v[2] is None
    )
    # weaveplace report: the load over time with the events marked
    from sim.report import build_report

    text = build_report(run_dir).read_text()
    assert "Deployment over time" in text and "serve_load_over_time.png" in text
    assert text.count("remove-queries") >= 1
    if CHROMIUM is None:  # reported, not passed: the page's browser check above did not run
        pytest.skip(
            "chromium not installed: the control page was not checked in a browser "
            "(every other check of this test ran and passed)"
        )
