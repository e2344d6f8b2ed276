"""The operator's views of a deployment without Ray or Spark: the load history's rates
(``cluster.service.load_history``) against a brute force over the samples, the load page's
plots in headless Chromium over a made-up history, and ``/metrics``' exposition
(``cluster.service.prometheus``) parsed back with prometheus_client's own parser.

The same views over a live ``serve`` with churn: ``tests/cluster/service/test_control.py``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from cluster.service.load_history import LoadHistory
from cluster.service.load_page import render_page
from cluster.service.prometheus import exposition

CHROMIUM = shutil.which("chromium") or (
    "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None
)


def _samples(draw_times, busy_steps, nodes=("node-0", "node-1")):
    """Samples at ``draw_times`` whose counters grow by ``busy_steps``."""
    rows, busy, answers = [], dict.fromkeys(nodes, 0.0), 0
    for k, (t, b) in enumerate(zip(draw_times, busy_steps)):
        answers += k
        for i, n in enumerate(nodes):
            busy[n] += b * (i + 1)
        rows.append(
            {
                "wall_time": t,
                "answers": answers,
                "nodes": {
                    n: {
                        "planned_cost": 1.0 + i,
                        "busy_s": busy[n],
                        "answers": answers * (i + 1),
                        "tuples": 10 * k,
                        "queue_depth": k % 3,
                    }
                    for i, n in enumerate(nodes)
                },
            }
        )
    return rows


@given(
    st.lists(st.floats(0.05, 3.0), min_size=1, max_size=40),
    st.data(),
    st.floats(0.1, 2.0),
)
def test_history_rates_against_brute_force(gaps, data, min_interval):
    times = [1000.0]
    for g in gaps:
        times.append(times[-1] + g)
    steps = data.draw(st.lists(st.floats(0, 1), min_size=len(times), max_size=len(times)))
    rows = _samples(times, steps)
    h = LoadHistory(window_s=1e9)
    for r in rows:
        h.add(r)
    s = h.series(now=times[-1], min_interval_s=min_interval)
    # brute force: anchors chosen greedily, each point the first sample >= min_interval after
    anchors = [0]
    for j in range(1, len(rows)):
        if times[j] - times[anchors[-1]] >= min_interval:
            anchors.append(j)
    assert s["t"] == [times[j] for j in anchors[1:]]
    for a, b in zip(anchors, anchors[1:]):
        k = anchors.index(b) - 1
        dt = times[b] - times[a]
        for i, n in enumerate(("node-0", "node-1")):
            want = (rows[b]["nodes"][n]["busy_s"] - rows[a]["nodes"][n]["busy_s"]) / dt
            assert s["nodes"][n]["busy_share"][k] == pytest.approx(want)
            assert s["nodes"][n]["planned_cost"][k] == 1.0 + i
            assert s["nodes"][n]["queue_depth"][k] == rows[b]["nodes"][n]["queue_depth"]
        assert s["answers_per_s"][k] == pytest.approx(
            (rows[b]["answers"] - rows[a]["answers"]) / dt
        )


def test_history_window_reset_and_missing_node(tmp_path):
    rows = _samples([0.0, 1.0, 2.0, 3.0, 700.0, 701.0], [1, 0.5, 0.5, 0.5, 0.5, 0.5])
    rows[2]["nodes"]["node-1"]["busy_s"] = 0.0  # restored from a checkpoint: counters went back
    del rows[3]["nodes"]["node-0"]  # not in the sample (being recovered)
    h = LoadHistory(window_s=1e9)
    for r in rows:
        h.add(r)
    s = h.series(now=701.0)
    assert s["nodes"]["node-1"]["busy_share"][1] is None  # 1 -> 2 went back
    assert s["nodes"]["node-0"]["busy_share"][2] is None  # 2 -> 3: missing at 3
    assert s["nodes"]["node-0"]["planned_cost"][2] is None
    assert s["nodes"]["node-0"]["busy_share"][0] == pytest.approx(0.5)
    recent = LoadHistory(window_s=600.0)
    for r in rows:
        recent.add(r)
    assert recent.series(now=701.0)["t"] == [701.0]  # only the last 600 s
    path = tmp_path / "load.jsonl"
    import json

    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"cut')
    assert len(LoadHistory.from_file(path)) == len(rows)  # a resumed deployment continues


def _status(nodes=("node-0", "node-1"), events=()):
    return {
        "state": "running",
        "event_time": 5000,
        "watermark": {"mf01": 3000, "mf02": 3000},
        "queries": ["a0", "a1", "a2"],
        "total_cost": 3.5,
        "max_cost": 2.25,
        "nodes": {
            n: {
                "planned_cost": 1.25 + i,
                "capacity": None,
                "trees": {f"t{i}": ["a0"], f"u{i}": ["a1", "a2"]},
                "queries": 3,
                "measured": {
                    "tuples_per_s": 10.0,
                    "busy_share": 0.125 * (i + 1),
                    "answers_per_s": 3.0,
                    "queue_depth": i,
                    "tuples": 100 * (i + 1),
                    "late_tuples": i,
                    "rss_bytes": 1 << 20,
                    "generations": 1,
                    "busy_s": 2.5,
                    "answers": 40,
                },
            }
            for i, n in enumerate(nodes)
        },
        "backlog": {"files": 2, "bytes": 123},
        "files": 7,
        "rows": 7000,
        "late": 3,
        "answers": 80,
        "events": list(events),
        "answer_latency_s": {"n": 2, "p50": 0.5, "p99": 0.9, "max": 1.0},
        "driver_rss_bytes": 1 << 24,
        "drift": {},
        "choose": None,
        "event_counts": {"start": 1, "add-queries": 2, "recovery": 3, "failure": 3},
    }


def test_metrics_exposition_parses_back():
    text = exposition(_status).decode()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    value = {
        (s.name, tuple(sorted(s.labels.items()))): s.value for f in fams.values() for s in f.samples
    }
    assert value[("weaveplace_queries", ())] == 3
    assert value[("weaveplace_answers_total", ())] == 80
    assert value[("weaveplace_late_tuples_total", ())] == 3
    assert value[("weaveplace_recoveries_total", ())] == 3
    assert value[("weaveplace_events_total", (("command", "add-queries"),))] == 2
    assert value[("weaveplace_node_planned_cost", (("node", "node-1"),))] == 2.25
    assert value[("weaveplace_node_busy_share", (("node", "node-0"),))] == 0.125
    assert value[("weaveplace_node_queue_depth", (("node", "node-1"),))] == 1
    assert value[("weaveplace_node_trees", (("node", "node-0"),))] == 2
    assert value[("weaveplace_watermark_lag_seconds", (("stream", "mf01"),))] == 2.0
    assert ("weaveplace_node_capacity", (("node", "node-0"),)) not in value  # unknown: left out
    assert fams["weaveplace_answers"].type == "counter"
    assert fams["weaveplace_node_planned_cost"].type == "gauge"


class _FakeService:
    """What the page reads of a service: its run directory, status and load history."""

    def __init__(self, st, history):
        self.run_dir = Path("/run/x")
        self._st = st
        self.load_history = history

    def status(self):
        return self._st


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed")
def test_load_page_draws_history_and_events(tmp_path):
    import time

    now = time.time()
    times = [now - 60 + 2 * k for k in range(30)]
    h = LoadHistory()
    for r in _samples(times, [0.3] * 30):
        h.add(r)
    events = [
        {"wall_time": times[5], "event_time": 1, "command": "add-queries"},
        {"wall_time": times[12], "event_time": 2, "command": "failure"},
        {"wall_time": times[13], "event_time": 3, "command": "recovery"},
        {"wall_time": times[20], "event_time": 4, "command": "some-new-kind"},
    ]
    page = tmp_path / "page.html"
    page.write_text(render_page(_FakeService(_status(events=events), h)))
    dom = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.split("<script>")[0]  # the drawn page, not the script's source
    charts = re.findall(r'<svg class="chart" data-key="(\w+)".*?</svg>', dom, re.S)
    assert charts == ["planned_cost", "busy_share", "queue_depth", "answers_per_s"]
    for svg in re.findall(r'<svg class="chart".*?</svg>', dom, re.S):
        lines = re.findall(
            r'<polyline class="series" data-node="(node-\d)"[^>]*points="([^"]+)"', svg
        )
        assert sorted(n for n, _ in lines) == ["node-0", "node-1"]
        assert all(len(p.split()) == 29 for _, p in lines)  # every point of the history
        kinds = re.findall(r'<line class="event" data-command="([^"]+)"', svg)
        assert kinds == ["add-queries", "failure", "recovery", "some-new-kind"]
    # coloured by kind: one colour per command, the same on every chart
    colours = dict(re.findall(r'data-command="([^"]+)"[^>]*stroke="(#[0-9a-f]+)"', dom))
    assert len(colours) == 4


def test_grafana_dashboard_queries_exported_metrics():
    """docs/grafana/weaveplace.json asks only for metrics ``/metrics`` exports."""
    import json

    dash = json.loads(
        (Path(__file__).resolve().parents[3] / "docs" / "grafana" / "weaveplace.json").read_text()
    )
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs += [v["query"] for v in dash["templating"]["list"] if v["type"] == "query"]
    used = {m for e in exprs for m in re.findall(r"weaveplace_\w+", e)}
    samples = {
        s.name
        for f in text_string_to_metric_families(exposition(_status).decode())
        for s in f.samples
    }
    assert len(used) >= 15 and used <= samples, used - samples


def test_metrics_and_history_routes_need_the_token():
    """The control server over a stand-in service (no Ray): ``/metrics`` with the bearer token
    only (401 without it, or with the page's query token), ``/history`` as the page fetches it."""
    import json
    import time

    from support.service import raw_request

    from cluster.service.control import ControlServer

    h = LoadHistory()
    now = time.time()
    for r in _samples([now - 3, now - 2, now - 1], [0.5, 0.5, 0.5]):
        h.add(r)
    srv = ControlServer(_FakeService(_status(), h))
    srv.start()
    try:
        code, body = raw_request(srv.url + "/metrics", srv.token)
        assert code == 200
        got = {
            (s.name, tuple(s.labels.values())): s.value
            for f in text_string_to_metric_families(body.decode())
            for s in f.samples
        }
        assert got[("weaveplace_node_planned_cost", ("node-1",))] == 2.25
        assert raw_request(srv.url + "/metrics")[0] == 401
        assert raw_request(srv.url + "/metrics", "wrong")[0] == 401
        assert raw_request(srv.url + f"/metrics?token={srv.token}")[0] == 401
        code, body = raw_request(srv.url + "/history", srv.token)
        assert code == 200 and set(json.loads(body)["nodes"]) == {"node-0", "node-1"}
        assert raw_request(srv.url + "/history")[0] == 401
    finally:
        srv.stop()


def test_control_refusals_cut_long_values():
    """A request's long values come back in a short one-line refusal (start and length)."""
    from cluster.service.control import parse_new_queries, parse_node, parse_query_ids
    from cluster.service.refusals import InvalidRequest

    long = "N" * 5000
    bad = [
        lambda: parse_node({"id": [long]}, "add-node"),
        lambda: parse_query_ids(["a"] * 3000),
        lambda: parse_new_queries(
            [{"id": long, "stream": "mf01", "aggregate": long, "range": 1000, "slide": 1000}],
            lambda qid: None,
        ),
        lambda: parse_new_queries(
            [{"id": long, "stream": long, "aggregate": "sum", "range": 1000, "slide": 1000}],
            lambda qid: None,
        ),
    ]
    for call in bad:
        with pytest.raises(InvalidRequest) as e:
            call()
        msg = e.value.message
        assert len(msg) < 300 and "\n" not in msg and ("characters" in msg or "item" in msg), msg
