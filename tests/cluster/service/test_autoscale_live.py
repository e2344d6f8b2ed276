"""An elastic ``weaveplace serve`` (``placement.autoscale``) with the real Ray and Spark (session
fixtures): queries added past the capacity scale the deployment out in one decision, removing
them scales it in; ``ctl autoscale off`` survives a resume (the policy's memory too) and, on
again, the policy acts; and the answers are the section 9 oracle's (docs/DESIGN.md s. 9:
``executors.churn_oracle.registered_answers`` from T_reg to T_unreg), each window once."""

from __future__ import annotations

import json
import threading
from collections import Counter

import pyarrow.parquet as pq
import pytest
from support.serve_files import RATE_HZ, SAFETY_S, serve_files
from support.service import assert_answers_follow_registrations, drop, service_queries
from support.waiting import wait_for

# ~30 s alone (session Ray and Spark), a resume included: make test-scenarios
pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.scenario]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return serve_files(tmp_path_factory)


def test_serve_scales_out_and_in_with_the_queries(ray_session, spark, files, tmp_path):
    from cluster.deployment.churn import ChurnDeployment, plan_from_state
    from cluster.feeds.directory_options import StreamOptions
    from cluster.service.autoscale import AutoscalePolicy
    from cluster.service.control import call
    from cluster.service.options import ServiceOptions, ServiceStart
    from cluster.service.resume import load_state, restore_nodes
    from cluster.service.service import Service
    from placement.node_count import node_count
    from placement.optimizers import optimize
    from placement.plan import verify_plan
    from placement.queries import query_from_mapping
    from placement.trees import CostModel

    rates = {s: RATE_HZ / 1000.0 for s in ("mf01", "mf02", "mf03")}
    model = CostModel("slickdeque", rates)
    first = service_queries("a", 2, seed=3)
    more = service_queries("b", 6, seed=4)
    qa = [query_from_mapping(q) for q in first]
    qall = qa + [query_from_mapping(q) for q in more]
    # one node carries the first queries at 70 % of its capacity: inside the band (50-80 %)
    cap = optimize("WG_TN", qa, model, 1).max_cost / 0.7
    policy = AutoscalePolicy(
        capacity=cap, max_nodes=4, high=0.8, low=0.5, cooldown_s=0.0, busy_high=50.0
    )
    need = node_count(qall, model, 0.8 * cap, 1, 4).nodes
    assert need >= 2  # the added queries do not fit on one node
    plan = optimize("WG_TN", qa, model, [cap]).to_dict()
    incoming, run_dir = tmp_path / "in", tmp_path / "run"
    incoming.mkdir()
    opts = StreamOptions(poll_s=0.2, files_per_batch=2, timeout_s=SAFETY_S)
    regs = {q["id"]: [q, None, None] for q in first}
    with ChurnDeployment(plan) as dep:
        svc = Service(
            dep,
            spark,
            incoming,
            run_dir,
            ServiceStart(plan, model),
            ServiceOptions(stream=opts, default_rate=RATE_HZ / 1000.0, autoscale=policy),
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
        assert list(dep.nodes) == ["node-0"]  # 70 %: no decision
        rep = call(run_dir, "POST", "/add-queries", {"queries": more})
        for q in more:
            regs[q["id"]] = [q, rep["accepted_at"][q["stream"]], None]
        assert len(dep.nodes) == need  # one decision, several nodes at once
        st = call(run_dir, "GET", "/status")
        assert st["max_cost"] <= 0.8 * cap * (1 + 1e-9)
        assert st["autoscale"]["last_decision"]["action"] == "out"
        assert st["autoscale"]["last_decision"]["nodes_after"] == need
        feed(1)
        rep = call(run_dir, "POST", "/remove-queries", {"ids": [q["id"] for q in more]})
        for q in more:
            regs[q["id"]][2] = rep["removed_at"][q["stream"]]
        assert list(dep.nodes) and len(dep.nodes) == 1  # back to the count that fits
        off = call(run_dir, "POST", "/autoscale", {"on": False})
        assert off["enabled"] is False
        feed(2)
        call(run_dir, "POST", "/stop", {"flush": False})  # resumable
        th.join(SAFETY_S)
        assert not th.is_alive()

    # serve --resume (in this process, as sim.serve_start does it): the override stays off and
    # the policy remembers its last decision; switched on again, it acts
    state = load_state(run_dir / "state")
    m = state["model"]
    model = CostModel(m["ie"], dict(m["rates"]), slicing=m["slicing"])
    plan = plan_from_state(state["nodes"], m, state["capacity"])
    later = service_queries("c", 6, seed=5)
    need_later = node_count(qa + [query_from_mapping(q) for q in later], model, 0.8 * cap, 1, 4)
    assert need_later.nodes >= 2
    with ChurnDeployment(plan) as dep:
        restore_nodes(dep, run_dir, state)
        svc = Service(
            dep,
            spark,
            incoming,
            run_dir,
            ServiceStart(plan, model, resume_state=state),
            ServiceOptions(stream=opts, default_rate=RATE_HZ / 1000.0, autoscale=policy),
        )
        th = threading.Thread(target=svc.run, daemon=True)
        th.start()
        wait_for(lambda: svc.state == "running", "the service to resume")
        st = call(run_dir, "GET", "/status")
        assert st["autoscale"]["enabled"] is False
        last = st["autoscale"]["last_decision"]  # the scale-in before the stop
        assert (last["action"], last["nodes_after"]) == ("in", 1)
        rep = call(run_dir, "POST", "/add-queries", {"queries": later})
        for q in later:
            regs[q["id"]] = [q, rep["accepted_at"][q["stream"]], None]
        feed(3)
        assert len(dep.nodes) == 1  # overridden off: the added load moves nothing
        on = call(run_dir, "POST", "/autoscale", {"on": True})
        assert on["enabled"] is True  # and it evaluated at once: the added load is seen
        evs = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
        assert len(dep.nodes) == need_later.nodes, [e for e in evs if e["command"] == "autoscale"]
        assert on["last_decision"]["action"] == "out"
        feed(4)
        call(run_dir, "POST", "/stop", {"flush": True})
        th.join(SAFETY_S)
        assert not th.is_alive()
    assert_answers_follow_registrations(files[:5], regs, run_dir)
    got = pq.read_table(run_dir / "answers.parquet").to_pydict()
    keys = Counter(zip(got["query_id"], got["window_start"]))
    assert max(keys.values()) == 1  # no window written twice
    ev = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    scale = [e for e in ev if e["command"] == "autoscale" and e["action"] in ("out", "in")]
    assert [(e["action"], e["nodes_before"], e["nodes_after"]) for e in scale] == [
        ("out", 1, need),
        ("in", need, 1),
        ("out", 1, need_later.nodes),  # after the resume, switched on again
    ]
    assert all("why" in e["reason"] and "need_at_high" in e["reason"] for e in scale)
    assert verify_plan(json.loads((run_dir / "plan_current.json").read_text())) == []
