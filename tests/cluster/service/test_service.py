"""``weaveplace serve`` (cluster/service/service.py): a deployment over a directory whose
queries come and go and whose plan drifts and is re-planned, with the real Ray and Spark
(session fixtures).

Oracle: docs/DESIGN.md s. 9 (``executors.churn_oracle.registered_answers``) over every row of the
files, each query with the T_reg / T_unreg its command returned.  The files are in time order,
so no tuple is late.
"""

from __future__ import annotations

import json
import threading
import time

import pyarrow.parquet as pq
import pytest
from support.serve_files import RATE_HZ, SAFETY_S, serve_files
from support.service import assert_answers_follow_registrations, drop
from support.waiting import wait_for

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return serve_files(tmp_path_factory)


@pytest.mark.scenario  # ~23 s: make test-scenarios (make test stays under 8 min)
def test_serve_drift_replan_and_moves(ray_session, spark, files, tmp_path):
    """A plan with nothing woven, all on one node: the running TotalCost is far above
    WeaveShare's, so the first command re-plans ("drift"): queries are handed between trees at
    T, at most max_moves (1) trees change node; answers stay those of the section 9 oracle;
    then add-node, retire-node and rebalance keep them.  An actor killed behind the service's
    back shows as a ``failure`` and a ``recovery`` event (``events.jsonl``, status ``faults``)."""
    import ray

    from cluster.deployment.churn import ChurnDeployment
    from cluster.feeds.directory_options import StreamOptions
    from cluster.service.control import ControlError, call
    from cluster.service.options import ServiceOptions, ServiceStart
    from cluster.service.service import Service
    from placement.plan import Node, Plan, verify_plan
    from placement.queries import query_from_mapping
    from placement.trees import CostModel
    from placement.weaveshare import no_share

    qs = [
        {
            "id": f"s{i}",
            "stream": "mf01",
            "aggregate": "sum",
            "range": r,
            "slide": s,
            "kind": "time",
        }
        for i, (r, s) in enumerate(
            [(1000, 500), (2000, 500), (3000, 1000), (1500, 500), (2000, 1000), (4000, 1000)]
        )
    ]
    qs += [
        {
            "id": "m0",
            "stream": "mf02",
            "aggregate": "max",
            "range": 1000,
            "slide": 250,
            "kind": "time",
        }
    ]
    rates = {s: RATE_HZ / 1000.0 for s in ("mf01", "mf02", "mf03")}
    model = CostModel("slickdeque", rates)
    trees = no_share([query_from_mapping(q) for q in qs], model)
    plan = Plan(
        "WG_TN", "slickdeque", [Node("node-0", trees), Node("node-1"), Node("node-2")], rates
    ).to_dict()
    incoming, run_dir = tmp_path / "in", tmp_path / "run"
    incoming.mkdir()
    opts = StreamOptions(poll_s=0.2, files_per_batch=2, timeout_s=SAFETY_S)
    regs = {q["id"]: [q, None, None] for q in qs}
    with ChurnDeployment(plan) as dep:
        svc = Service(
            dep,
            spark,
            incoming,
            run_dir,
            ServiceStart(plan, model),
            ServiceOptions(stream=opts, default_rate=RATE_HZ / 1000.0, tolerance=0.25, max_moves=1),
        )
        th = threading.Thread(target=svc.run, daemon=True)
        th.start()
        wait_for(
            lambda: svc.state == "running" and (run_dir / "control.json").exists(),
            "the service to start",
        )

        def feed(k):
            drop(incoming, f"f{k:02d}.parquet", files[k])
            wait_for(lambda: svc.stream.stats.files >= k + 1, f"file {k} fed")

        feed(0)
        feed(1)
        assert svc.drift()["drift"] > 0.25
        extra = [
            {
                "id": "s9",
                "stream": "mf01",
                "aggregate": "sum",
                "range": 1000,
                "slide": 1000,
                "kind": "time",
            }
        ]
        rep = call(run_dir, "POST", "/add-queries", {"queries": extra})
        regs["s9"] = [extra[0], rep["accepted_at"]["mf01"], None]
        ev = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
        assert [e["command"] for e in ev] == ["start", "add-queries", "drift"]
        assert ev[-1]["trees_moved"] <= 1 and ev[-1]["handoffs"] > 0
        assert ev[-1]["total_cost_after"] == pytest.approx(ev[-1]["fresh_total"])
        assert svc.drift()["drift"] <= 0.25
        feed(2)
        ray.kill(svc.dep.actor("node-0"), no_restart=True)
        feed(3)

        def events():
            return [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]

        wait_for(lambda: any(e["command"] == "recovery" for e in events()), "the recovery event")
        ev = events()
        fail, rec = [e for e in ev if e["command"] in ("failure", "recovery")]
        assert (fail["node"], fail["detected_by"], rec["action"]) == (
            "node-0",
            "actor died",
            "restarted",
        )
        assert fail["event_time"] is not None and fail["detect_s"] >= 0
        assert rec["trees_restarted"] >= 1 and 0 <= rec["recover_s"] <= rec["first_answer_s"]
        faults = call(run_dir, "GET", "/status")["faults"]
        assert (faults["failures"], faults["recoveries"], faults["recovering"]) == (1, 1, [])
        rep = call(run_dir, "POST", "/add-node", {})
        feed(4)

        def retrying(*args):
            """A command refused while a node is silent (503, "try again": the new node's
            first batch on a loaded machine) is sent again, as its message says."""
            deadline = time.monotonic() + 60
            while True:
                try:
                    return call(*args)
                except ControlError as e:
                    if "try again" not in str(e) or time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)

        with pytest.raises(ControlError, match="unknown node"):
            retrying(run_dir, "POST", "/retire-node", {"id": "node-9"})
        retrying(run_dir, "POST", "/retire-node", {"id": "node-0"})
        feed(5)
        rep = call(run_dir, "POST", "/rebalance", {})
        assert rep["total_cost"] == pytest.approx(rep["fresh_total_cost"])
        feed(6)
        feed(7)
        call(run_dir, "POST", "/stop", {"flush": True})
        th.join(SAFETY_S)
        assert not th.is_alive()
    assert_answers_follow_registrations(files, regs, run_dir)
    assert pq.read_table(run_dir / "late.parquet").num_rows == 0
    assert verify_plan(json.loads((run_dir / "plan_current.json").read_text())) == []
