"""A load sample (``load.jsonl``) while a node has not answered since it (re)started: its
counters are unknown, written as None, and the report's load series skips it (a recovered
node's first sample once failed ``add-node`` with ``KeyError: 'tuples'``)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from cluster.service.load_history import LoadHistory
from cluster.service.status import sample_load
from sim.report.serve_page import load_series


class _Svc:
    def __init__(self, run_dir, replies):
        self.run_dir = run_dir
        self.event_time = 5000
        self.stream = SimpleNamespace(stats=SimpleNamespace(files=2, answers=10))
        self.load_history = LoadHistory()
        self._replies = replies
        plan = SimpleNamespace(nodes=[SimpleNamespace(id=n, cost=1.5) for n in replies])
        self.placement_plan = lambda: (plan, None)
        self.dep = SimpleNamespace(metrics=lambda: {"nodes": self._replies})


def test_a_node_without_counters_is_sampled_as_unknown(tmp_path):
    counters = {"tuples": 40, "tree_tuples": 80, "busy_s": 0.5, "answers": 7}
    # node-1 restarted and silent since: the deployment's stand-in reply (Deployment.metrics)
    stale = {"busy_s": 0.0, "health": "starting", "silent_s": 3.0, "stale": True}
    svc = _Svc(tmp_path, {"node-0": counters, "node-1": stale})
    sample_load(svc)
    svc._replies = {"node-0": {**counters, "busy_s": 1.5}, "node-1": stale}
    sample_load(svc)
    rows = [json.loads(x) for x in (tmp_path / "load.jsonl").read_text().splitlines()]
    assert [r["nodes"]["node-0"]["tuples"] for r in rows] == [40, 40]
    assert rows[0]["nodes"]["node-1"] == {
        "planned_cost": 1.5,
        "tuples": None,
        "tree_tuples": None,
        "busy_s": None,
        "answers": None,
        "queue_depth": None,
    }
    rows[1]["wall_time"] = rows[0]["wall_time"] + 2.0
    _, series = load_series(rows)
    assert list(series) == ["node-0"]
    assert series["node-0"][0][1] == 0.5  # (1.5 - 0.5) busy seconds over 2 s
    assert len(svc.load_history) == 2
