"""The autoscale policy's decision (``cluster.service.autoscale``, pure: no Ray), Ray's resource
request (``cluster.runtime.resources``, with a stand-in for Ray's API) and the config key."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.runtime.resources import RayResources
from cluster.service.autoscale import (
    AutoscalePolicy,
    Autoscaler,
    Memory,
    Observation,
    after,
    decide,
    keep_nodes,
    match_nodes,
    with_busy_sample,
    with_lag_sample,
)
from placement.distributed import build_plan
from placement.node_count import NodeCount
from placement.queries import Query
from placement.trees import CostModel

POLICY = AutoscalePolicy(capacity=10.0, min_nodes=1, max_nodes=6, high=0.8, low=0.5, cooldown_s=30)


def counts(load: float, p: AutoscalePolicy = POLICY) -> tuple[NodeCount, NodeCount]:
    """The node counts of a perfectly divisible load (the model a test can compute by hand)."""

    def nc(frac: float) -> NodeCount:
        need = max(p.min_nodes, math.ceil(load / (frac * p.capacity) - 1e-9))
        fits = need <= p.max_nodes
        return NodeCount(min(need, p.max_nodes), fits, None, True, frac * p.capacity, "test")

    return nc(p.high), nc(p.low)


def obs(load: float, n: int, now: float = 100.0, busy=None, queue=None) -> Observation:
    need, low = counts(load)
    planned = {f"node-{i}": load / n for i in range(n)}
    return Observation(now, planned, need, low, busy or {}, queue or {})


def test_scale_out_to_the_count_that_fits_at_once_even_cooling_down():
    d = decide(POLICY, obs(30.0, 2), Memory(last_at=99.0))  # 15 per node > 8 = high
    assert (d.action, d.nodes_before, d.nodes_after) == ("out", 2, 4)  # ceil(30 / 8)
    assert d.reason["over_high"] == ["node-0", "node-1"] and d.reason["need_at_high"] == 4


def test_over_high_on_a_count_that_fits_replans_instead_of_adding():
    o = obs(14.0, 2)
    o = Observation(o.now, {"node-0": 10.0, "node-1": 4.0}, o.need, o.need_low)
    d = decide(POLICY, o, Memory())
    assert (d.action, d.nodes_after) == ("replan", 2)


def test_scale_in_below_low_to_the_count_fitting_at_high_unless_cooling_or_busy():
    o = obs(12.0, 5)  # fits on ceil(12 / 5) = 3 below low, on 2 at high
    assert (decide(POLICY, o, Memory()).action, decide(POLICY, o, Memory()).nodes_after) == (
        "in",
        2,
    )
    assert decide(POLICY, o, Memory(last_at=80.0)).action == "vetoed"  # 20 s < cooldown 30 s
    assert decide(POLICY, o, Memory(last_at=60.0)).action == "in"
    busy = obs(12.0, 5, busy={"node-3": 0.95})
    d = decide(POLICY, busy, Memory())
    assert d.action == "vetoed" and "node-3" in d.reason["why"]
    queued = obs(12.0, 5, queue={"node-1": 9})
    assert decide(POLICY, queued, Memory()).action == "vetoed"


def test_inside_the_band_holds_and_off_holds_everything():
    assert decide(POLICY, obs(12.0, 3), Memory()).action == "hold"  # 4 per node: between
    assert decide(POLICY, obs(30.0, 2), Memory(enabled=False)).action == "hold"


def test_measured_busy_share_scales_out_by_one_after_sustain_samples():
    mem = Memory()
    hot = {"node-0": 0.97, "node-1": 0.2}
    for _ in range(POLICY.sustain - 1):
        mem = with_busy_sample(mem, hot, POLICY.busy_high)
        assert decide(POLICY, obs(12.0, 2, busy=hot), mem).action == "hold"
    mem = with_busy_sample(mem, hot, POLICY.busy_high)
    d = decide(POLICY, obs(12.0, 2, busy=hot), mem)
    assert (d.action, d.nodes_after) == ("out", 3)
    assert decide(POLICY, obs(12.0, 2), after(mem, d, 100.0)).action == "hold"  # streak reset
    cool = Memory(last_at=95.0, busy_streak=POLICY.sustain)
    assert decide(POLICY, obs(12.0, 2), cool).action == "vetoed"
    assert with_busy_sample(mem, {"node-0": 0.1}, 0.9).busy_streak == 0


def test_a_node_lagging_alone_is_replaced_after_sustain_samples():
    mem = Memory()
    lag = {"node-0": 45.0, "node-1": 0.4, "node-2": None}
    for _ in range(POLICY.sustain - 1):
        mem = with_lag_sample(mem, lag, POLICY.lag_high_s)
        assert decide(POLICY, obs(12.0, 3), mem).action == "hold"
    mem = with_lag_sample(mem, lag, POLICY.lag_high_s)
    assert mem.slow == ("node-0", POLICY.sustain)
    d = decide(POLICY, obs(12.0, 3), mem)
    assert (d.action, d.nodes_before, d.nodes_after) == ("replace", 3, 3)
    assert d.reason["slow_node"] == "node-0" and d.acts
    assert after(mem, d, 100.0).slow is None  # the streak starts anew
    assert decide(POLICY, obs(12.0, 3), replace(mem, last_at=95.0)).action == "vetoed"
    # every node lagging alike is the load's doing, not one node's; a new worst starts over
    assert with_lag_sample(mem, {"node-0": 45.0, "node-1": 40.0}, 30.0).slow is None
    assert with_lag_sample(mem, {"node-0": 1.0, "node-1": 40.0}, 30.0).slow == ("node-1", 1)
    assert with_lag_sample(mem, {"node-0": 1.0, "node-1": 2.0}, 30.0).slow is None
    # the lag is counted from the least lagging node's: all behind, one far more so, is slow
    assert with_lag_sample(mem, {"a": 40.0, "b": 75.0, "c": 41.0}, 30.0).slow == ("b", 1)
    assert with_lag_sample(mem, {"a": 40.0, "b": 69.0, "c": 41.0}, 30.0).slow is None
    assert with_lag_sample(mem, {"a": 90.0}, 30.0).slow is None  # no other node to compare
    assert with_lag_sample(mem, {"a": 90.0, "b": None}, 30.0).slow is None


def test_bounds_min_and_max_nodes():
    p = AutoscalePolicy(capacity=10.0, min_nodes=2, max_nodes=3, high=0.8, low=0.5)
    need, low = counts(100.0, p)
    d = decide(p, Observation(0.0, {"a": 50.0, "b": 50.0}, need, low), Memory())
    assert (d.action, d.nodes_after, d.reason["need_fits"]) == ("out", 3, False)
    need, low = counts(1.0, p)
    d = decide(p, Observation(0.0, {"a": 1.0}, need, low), Memory())
    assert (d.action, d.nodes_after) == ("out", 2)
    with pytest.raises(ValueError, match="low < high"):
        AutoscalePolicy(capacity=1.0, high=0.5, low=0.5)


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(st.floats(0.5, 60.0), min_size=1, max_size=30),
    st.floats(1.0, 20.0),
)
def test_a_load_ramp_converges_in_one_decision_and_never_flaps(loads, gap_s):
    """Apply every decision at once to a divisible load: after each load change the count is
    the smallest fitting one (or above it, within the band, at most until the cool-down ends);
    no scale-in within one cool-down of a scale-out unless the load fell, and vice versa."""
    mem, n, now = Memory(), 1, 0.0
    history = []
    for load in loads:
        now += gap_s
        need, _ = counts(load)
        d = decide(POLICY, obs(load, n, now), mem)
        if d.acts:
            mem = after(mem, d, now)
            history.append((now, d.action, load))
            n = d.nodes_after
        if need.fits:
            assert n >= need.nodes  # never under-provisioned after a decision
            if d.action in ("out", "in"):
                assert n == need.nodes  # one decision reaches the smallest count
            if d.acts or now - (mem.last_at or -1e9) >= POLICY.cooldown_s:
                assert n <= need.nodes + POLICY.spare_nodes  # at most one spare node
        per_node = load / n
        assert per_node <= POLICY.high * POLICY.capacity + 1e-9 or not need.fits
    for (t1, a1, l1), (t2, a2, l2) in zip(history, history[1:]):
        if {a1, a2} == {"out", "in"} and t2 - t1 < POLICY.cooldown_s:
            assert a2 == "out" and l2 > l1  # only a grown load adds right after a scale-in


def test_match_nodes_keeps_queries_where_they_run():
    model = CostModel("panes", {"s": 1.0})
    qa, qb, qc = (
        Query("a", 4, 2, "sum", "s"),
        Query("b", 6, 3, "max", "s"),
        Query("c", 5, 5, "sum", "s"),
    )
    fresh = build_plan(
        "x",
        model,
        [[model.tree([qb])], [model.tree([qa]), model.tree([qc])]],
        [None, None],
        [qa, qb, qc],
    )
    hosted = {"n1": {"a"}, "n2": {"b"}, "n3": {"c"}}
    assert match_nodes(fresh, hosted, ["n1", "n2"]) == ["n2", "n1"]
    assert keep_nodes(fresh, {"n1": {"a", "c"}, "n2": set(), "n3": {"b"}}, ["n1", "n2", "n3"]) == [
        "n1",
        "n3",
    ]
    with pytest.raises(ValueError):
        match_nodes(fresh, hosted, ["n1"])


def test_scale_in_on_rays_autoscaler_keeps_the_plan_nodes_whose_ray_node_stays():
    """On an autoscaled Ray cluster a scale-in keeps the plan nodes on the head, then on the
    Ray nodes hosting the most, before the shared queries: a worker left running one plan node
    is never idle, so Ray would keep it for good while the head idles."""
    from cluster.deployment.pinning import keep_rank

    model = CostModel("panes", {"s": 1.0})
    qa, qb = Query("a", 4, 2, "sum", "s"), Query("b", 6, 3, "max", "s")
    fresh = build_plan("x", model, [[model.tree([qa]), model.tree([qb])]], [None], [qa, qb])
    hosted = {"n0": set(), "n1": {"a", "b"}, "n2": {"a"}}
    running = ["n0", "n1", "n2"]
    assert keep_nodes(fresh, hosted, running) == ["n1"]  # the most shared queries
    rank = keep_rank({"n0": "head", "n1": "w1", "n2": "w2"}, "head")
    assert keep_nodes(fresh, hosted, running, rank) == ["n0"]  # the head stays anyway
    # no plan node on the head: the worker hosting two plan nodes stays, the lone one goes
    rank = keep_rank({"n0": "w1", "n1": "w2", "n2": "w1"}, "head")
    assert rank["n0"] == rank["n2"] < rank["n1"]
    assert keep_nodes(fresh, hosted, running, rank) == ["n2"]


def test_autoscaler_measures_busy_share_from_counters_and_reports_status():
    a = Autoscaler(POLICY)
    busy, queue, lag = a.measure({"n": {"busy_s": 1.0, "queue_depth": 2}}, 10.0)
    assert busy == {"n": None} and queue == {"n": 2}
    busy, _, _ = a.measure({"n": {"busy_s": 2.9, "queue_depth": 0}}, 12.0)
    assert busy["n"] == pytest.approx(0.95) and a.memory.busy_streak == 1
    st_ = a.status(12.0)
    assert st_["enabled"] and st_["policy"]["high"] == 0.8 and st_["last_decision"] is None
    a.set_enabled(False)
    assert not a.status(12.0)["enabled"]


def test_ray_resources_request_wait_and_fallback():
    asked: list = []
    alive = iter([1, 1, 2, 3])
    r = RayResources(wait_s=5.0, poll_s=0.0, request=asked.append, alive=lambda: next(alive))
    rep = r.scale_to(3)
    assert asked == [[{"CPU": 1}] * 3]
    assert (rep["ray_nodes_before"], rep["ray_nodes_after"], rep["fallback"]) == (1, 3, None)
    never = RayResources(wait_s=0.05, poll_s=0.01, request=asked.append, alive=lambda: 1)
    rep = never.scale_to(2)
    assert rep["ray_nodes_after"] == 1 and "share the Ray nodes" in rep["fallback"]
    assert never.release_to(1)["requested_bundles"] == 1 and asked[-1] == [{"CPU": 1}]


def test_config_key_is_checked():
    from sim.config import ConfigError, config_from_mapping

    base = {
        "workload": {"queries": [{"id": "a", "stream": "mf01", "range": 4000, "slide": 2000}]},
        "streams": {"mf01": {"rate": 0.1}},
        "cluster": {"nodes": [{"id": "n0", "capacity": 2.0}]},
    }
    cfg = config_from_mapping({**base, "placement": {"autoscale": {"max_nodes": 4}}})
    assert cfg.placement.autoscale.max_nodes == 4 and cfg.placement.autoscale.high == 0.9
    assert config_from_mapping(base).placement.autoscale is None
    bad = [
        ({"low": 0.9, "high": 0.8}, "low"),
        ({"min_nodes": 3, "max_nodes": 2}, "min_nodes"),
        ({"optimizers": ["weaveshare"]}, "distributed"),
        ({"hgh": 0.8}, "hgh"),
    ]
    for auto, word in bad:
        with pytest.raises(ConfigError, match=word):
            config_from_mapping({**base, "placement": {"autoscale": auto}})
    no_caps = {**base, "cluster": {"nodes": 2}, "placement": {"autoscale": {}}}
    with pytest.raises(ConfigError, match="capacity"):
        config_from_mapping(no_caps)


def test_ctl_autoscale_takes_on_or_off_and_the_route_checks_its_body(tmp_path):
    from cluster.service.control import parse_autoscale
    from cluster.service.refusals import InvalidRequest
    from sim.serve_cli import ServeError, ctl

    assert parse_autoscale({"on": True}) is True and parse_autoscale({"on": False}) is False
    for body in ({"on": "yes"}, {}, None, [True]):
        with pytest.raises(InvalidRequest, match="autoscale"):
            parse_autoscale(body)
    for args in ([], ["maybe"], ["on", "off"]):
        with pytest.raises(ServeError, match="autoscale: give on or off"):
            ctl(tmp_path, "autoscale", args)


def test_the_policy_state_survives_a_resume():
    """``serve --resume``: off stays off, the last decision, its cool-down (counting the time
    the deployment was down) and the streaks go on (``Autoscaler.to_state``)."""
    import json

    a = Autoscaler(POLICY)
    a.set_enabled(False)
    d = decide(POLICY, obs(30.0, 2), Memory())
    a.record(d, now=1000.0, wall=5000.0)
    a.memory = replace(a.memory, busy_streak=2, slow=("node-1", 1))
    saved = json.loads(json.dumps(a.to_state(now=1010.0, wall=5010.0)))
    b = Autoscaler(POLICY)
    b.restore_state(saved, now=20.0, wall=5015.0)  # a new process, down for 5 s
    assert not b.memory.enabled and b.status(20.0)["enabled"] is False
    assert b.memory.last_at == pytest.approx(20.0 - 15.0)  # the decision was 15 s ago
    assert b.status(20.0)["cooldown_left_s"] == pytest.approx(POLICY.cooldown_s - 15.0)
    assert (b.memory.last_action, b.memory.last_nodes) == ("out", (2, 4))
    assert (b.memory.busy_streak, b.memory.slow) == (2, ("node-1", 1))
    assert b.last == a.last and b.decisions == a.decisions == 1
