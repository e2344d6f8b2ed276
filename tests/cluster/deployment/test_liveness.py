"""Liveness (cluster/deployment/liveness.py, cluster/node/liveness.py): a node actor that stops
answering on a healthy host (SIGSTOP: Ray sees nothing wrong) is not waited for; the other
nodes go on and their answers are committed; stuck past ``call_timeout_s`` it is killed and
recovered (a ``failure`` event ``detected_by: deadline``); a node that answers again in time
catches up from the replay log.  Every answer equals the fault-free run's, exactly once.
"""

from __future__ import annotations

import os
import signal
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.cluster_plans import STREAMS, make_plan

from cluster.node.liveness import CallTracker

pytestmark = pytest.mark.cluster

KEY = [("query_id", "ascending"), ("window_start", "ascending")]


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_call_tracker_reports_the_running_call_and_its_progress():
    c = Clock()
    t = CallTracker(clock=c)
    assert t.report() == {"call": None, "call_s": 0.0, "since_progress_s": 0.0, "calls_done": 0}
    t.begin("ingest")
    c.t += 3
    t.begin("warmup")  # a data method calling another: one call, and progress
    c.t += 2
    t.end()
    r = t.report()
    assert (r["call"], r["call_s"], r["since_progress_s"], r["calls_done"]) == ("ingest", 5, 2, 0)
    t.step()
    c.t += 1
    assert t.report()["since_progress_s"] == 1
    t.end()
    assert t.report() == {"call": None, "call_s": 0.0, "since_progress_s": 0.0, "calls_done": 1}
    t.begin("ingest")
    with t.compiling():  # a kernel compiling: no step to see, not a stall
        c.t += 40
        assert t.report()["since_progress_s"] == 0.0
    assert t.report()["since_progress_s"] == 0.0  # and it counts as progress when done
    c.t += 2
    assert t.report()["since_progress_s"] == 2


def test_silence_is_the_unanswered_health_call_or_a_call_without_progress():
    from cluster.deployment.liveness import NodeHealth

    h = NodeHealth(actor=None, started=0.0)
    assert h.silence(50.0) == 0.0  # nothing sent yet
    h.ref, h.sent = object(), 10.0
    assert h.silence(14.0) == 4.0  # the health call waits
    h.ref, h.reply = None, {"call": "ingest", "since_progress_s": 7.5}
    assert h.silence(14.0) == 7.5  # answered, but the data call does not move
    h.reply = {"call": None, "since_progress_s": 0.0}
    assert h.silence(14.0) == 0.0


def _batches(workload, rows: int = 200) -> list[pa.RecordBatch]:
    t = pq.read_table(workload["path"]).select(["ts_ms", *STREAMS]).sort_by("ts_ms")
    return t.to_batches(max_chunksize=rows)


def _run(plan, batches, options, during=None, pause_s: float = 0.0):
    """Feed ``batches`` as a live stream does (answers taken after every 2 batches); returns
    (all answers sorted, [(wall time, answers taken)], fault events, the deployment's
    metrics).  ``during(dep, i)`` runs before batch ``i``."""
    from cluster.answers.blocks import concat_answers
    from cluster.deployment.deployment import Deployment

    taken = []
    with Deployment(plan, options) as dep:
        for i, b in enumerate(batches):
            if during is not None:
                during(dep, i)
            dep.feed(None, b)
            if i % 2 == 1:
                taken.append((time.time(), dep.take_answers()))
                time.sleep(pause_s)
        res = dep.finish()
        events = dep.fault_log.summary()["events"]
        metrics = res.metrics
    allans = concat_answers([t for _, t in taken] + [res.answers]).sort_by(KEY)
    return allans, taken, events, metrics


def _pid(dep, nid: str) -> int:
    import ray

    return int(ray.get(dep.actor(nid).health.remote())["pid"])


def _node_queries(plan, nid: str) -> set[str]:
    trees = [t for n in plan["nodes"] if n["id"] == nid for t in n["trees"]]
    return {q if isinstance(q, str) else q["id"] for t in trees for q in t["queries"]}


@pytest.mark.scenario
def test_a_stuck_node_is_not_waited_for_then_declared_and_recovered(workload, ray_session):
    """node-1 stopped for good after batch 6: the feed does not wait for it, node-0's and
    node-2's answers are committed meanwhile, node-1 is declared stuck within call_timeout_s
    (+ a poll) and restarted from its checkpoint; all answers equal the fault-free run's."""
    from cluster.deployment.options import DeploymentOptions

    plan = make_plan(workload["queries"], n_nodes=3)
    batches = _batches(workload)
    clean, *_ = _run(plan, batches, DeploymentOptions(call_timeout_s=None))
    timeout = 10.0  # a loaded 2-core machine can hold a healthy actor's answer for seconds
    stopped = {}

    def stop(dep, i):
        if i == 6:
            stopped["pid"] = _pid(dep, "node-1")
            os.kill(stopped["pid"], signal.SIGSTOP)
            stopped["at"] = time.time()

    try:
        got, taken, events, metrics = _run(
            plan, batches, DeploymentOptions(call_timeout_s=timeout), stop, pause_s=0.25
        )
    finally:
        if "pid" in stopped:
            try:
                os.kill(stopped["pid"], signal.SIGCONT)
            except ProcessLookupError:
                pass
    assert got.equals(clean)
    fails = [e for e in events if e["command"] == "failure"]
    assert [(e["node"], e["detected_by"]) for e in fails] == [("node-1", "deadline")]
    f = fails[0]
    assert timeout <= f["detect_s"] <= timeout + 5
    assert stopped["at"] + timeout - 1 <= f["wall_time"] <= stopped["at"] + timeout + 5
    # the call it was stopped in: a batch, or the checkpoint the feed was taking then
    assert f["call"] in ("ingest", "checkpoint_blocks", None) and f["pid"] == stopped["pid"]
    recs = [e for e in events if e["command"] == "recovery"]
    assert [(e["node"], e["action"], e["detected_by"]) for e in recs] == [
        ("node-1", "restarted", "deadline")
    ]
    assert metrics["nodes"]["node-1"]["recoveries"] == 1
    # while node-1 was silent, before its verdict, the others' answers were committed
    others = _node_queries(plan, "node-0") | _node_queries(plan, "node-2")
    during = [
        t
        for w, t in taken
        if stopped["at"] + 1.5 < w < f["wall_time"]
        and t.num_rows
        and set(t.column("query_id").to_pylist()) & others
    ]
    assert len(during) >= 2


@pytest.mark.scenario
def test_a_node_silent_for_less_than_the_deadline_catches_up(workload, ray_session):
    """node-2 stopped for 6 s (silent after 2 s, deadline 20 s), then continued: not
    recovered, no failure; it catches up from the replay log; answers exact."""
    from cluster.deployment.options import DeploymentOptions

    plan = make_plan(workload["queries"], n_nodes=3)
    batches = _batches(workload)
    clean, *_ = _run(plan, batches, DeploymentOptions(call_timeout_s=None))
    state = {}

    def pause(dep, i):
        if i == 4:
            state["pid"] = _pid(dep, "node-2")
            os.kill(state["pid"], signal.SIGSTOP)
            state["at"] = time.time()
        if "at" in state and "cont" not in state and time.time() - state["at"] > 6.0:
            state["lagging"] = dep.lagging
            os.kill(state["pid"], signal.SIGCONT)
            state["cont"] = time.time()

    try:
        got, taken, events, metrics = _run(
            plan, batches, DeploymentOptions(call_timeout_s=20.0), pause, pause_s=0.4
        )
    finally:
        if "pid" in state and "cont" not in state:
            os.kill(state["pid"], signal.SIGCONT)
    assert "cont" in state and state["lagging"] == ["node-2"]
    assert got.equals(clean)
    assert events == []
    assert metrics["nodes"]["node-2"]["recoveries"] == 0
    # during the pause the micro-batches were held up by node-2 only until it was found
    # silent (2 s, looked at every second), then not at all (held, a gap would last the
    # rest of the pause: about 4 s)
    gaps = [b - a for (a, _), (b, _) in zip(taken, taken[1:]) if state["at"] < a < state["cont"]]
    assert len(gaps) >= 3 and gaps[0] < 4.0 and max(gaps[1:]) < 2.5, gaps


@pytest.mark.scenario
def test_the_actor_route_skips_a_silent_node_at_its_checkpoints(workload, ray_session, tmp_path):
    """Answers written by the actors (``answers: actors``), a checkpoint every 2 batches:
    node-2 stopped mid-run, so some checkpoint rounds go on without it (a part it may have
    staged before it went silent is committed when it answers, or dropped with its actor);
    stuck past the deadline it is restarted.  The dataset equals the fault-free run's."""
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions

    plan = make_plan(workload["queries"], n_nodes=3)
    batches = _batches(workload)
    with Deployment(plan, DeploymentOptions(call_timeout_s=None)) as dep:
        for b in batches:
            dep.feed(None, b)
        clean = dep.finish().answers
    out = tmp_path / "run"
    opts = DeploymentOptions(call_timeout_s=10.0, answers="actors", out_dir=out, checkpoint_every=2)
    state: dict = {}
    try:
        with Deployment(plan, opts) as dep:
            for i, b in enumerate(batches):
                if i == 5:
                    state["pid"] = _pid(dep, "node-2")
                    os.kill(state["pid"], signal.SIGSTOP)
                if i > 5 and dep.lagging:
                    state["skipped"] = dep.checkpoint_rounds
                dep.feed(None, b)
                time.sleep(0.2)
            res = dep.finish()
            events = dep.fault_log.summary()["events"]
    finally:
        if "pid" in state:
            try:
                os.kill(state["pid"], signal.SIGCONT)
            except ProcessLookupError:
                pass
    assert "skipped" in state  # checkpoint rounds went on while node-2 was behind
    assert [(e["node"], e["detected_by"]) for e in events if e["command"] == "failure"] == [
        ("node-2", "deadline")
    ]
    assert res.answers.equals(clean)


@pytest.mark.scenario
def test_a_slow_call_that_moves_is_not_stuck_one_that_does_not_is(ray_session):
    """The deadline counts from the last sign of progress, not from the call's start: a data
    call running 6 s that steps every 0.5 s outlives a 3 s ``call_timeout_s``; one that stops
    stepping (a deadlock) is declared stuck and its actor killed."""
    import types

    import ray

    from cluster.deployment.liveness import Liveness

    @ray.remote(num_cpus=0, max_restarts=0, concurrency_groups={"health": 1})
    class Worker:
        def __init__(self):
            self.calls = CallTracker()

        def work(self, seconds: float, step_every: float | None):
            self.calls.begin("work")
            t0 = time.monotonic()
            try:
                while time.monotonic() - t0 < seconds:
                    time.sleep(0.05)
                    if (
                        step_every is not None
                        and time.monotonic() - self.calls.progressed > step_every
                    ):
                        self.calls.step()
                return "done"
            finally:
                self.calls.end()

        @ray.method(concurrency_group="health")
        def health(self):
            return {**self.calls.report(), "pid": os.getpid(), "ray_node": None}

    moving, stalled = Worker.remote(), Worker.remote()
    ray.get([moving.health.remote(), stalled.health.remote()])
    dep = types.SimpleNamespace(
        nodes={
            "moving": types.SimpleNamespace(actor=moving),
            "stalled": types.SimpleNamespace(actor=stalled),
        },
        event_time=None,
    )
    live = Liveness(dep, call_timeout_s=3.0)
    live.start()
    try:
        a = moving.work.remote(6.0, 0.5)
        b = stalled.work.remote(6.0, None)
        assert ray.get(a, timeout=30) == "done"
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(b, timeout=30)
        assert [(n, a) for n, a, _ in live.take_pending()] == [("stalled", stalled)]
        v = live.verdict("stalled", stalled)
        assert v["call"] == "work" and 3.0 <= v["detect_s"] < 6.0
        assert live.report("moving")["health"] == "ok"
    finally:
        live.stop()
        ray.kill(moving)
