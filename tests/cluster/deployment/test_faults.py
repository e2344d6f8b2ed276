"""The fault log (cluster/deployment/faults.py): failures and recoveries as events with their
figures, on a fake clock; and on the session Ray, an actor killed behind the deployment's back
and a node declared lost show up as ``failure`` / ``recovery`` events while the answers stay
exactly the fault-free run's."""

from __future__ import annotations

import pytest

from cluster.deployment.faults import FaultLog, detection, error_line


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_failure_then_recovery_carry_their_seconds():
    clock = Clock()
    log = FaultLog(clock)
    clock.t = 103.0
    fail = log.failure(
        "node-1", ray_node="r1", detected_by="node marked dead", last_seen=100.5, batch=7
    )
    assert fail["command"] == "failure" and fail["wall_time"] == 103.0
    assert fail["detect_s"] == 2.5 and fail["detect_s_from"] == "last sign of life"
    clock.t = 104.0
    log.recovered(fail, action="re-placed", trees={"t1": "node-0", "t2": "node-2"}, replayed=3)
    assert [e["command"] for e in log.take()] == ["failure"]  # the recovery waits for answers
    assert log.summary()["recovering"] == ["node-1"]
    clock.t = 105.0
    log.answers_committed("node-1", 10)  # the lost node answers nothing any more
    log.answers_committed("node-2", 0)  # no answers: not yet
    assert log.take() == []
    clock.t = 106.5
    log.answers_committed("node-2", 4)
    (rec,) = log.take()
    assert rec["command"] == "recovery" and rec["action"] == "re-placed"
    assert rec["trees_moved"] == 2 and rec["trees_restarted"] == 0
    assert rec["batches_replayed"] == 3
    assert rec["recover_s"] == 1.0 and rec["first_answer_s"] == 3.5
    assert rec["wall_time"] == 106.5 and rec["detect_s"] == 2.5
    s = log.summary()
    assert (s["failures"], s["recoveries"], s["recovering"]) == (1, 1, [])


def test_injected_fault_times_detection_from_the_fault_and_close_completes():
    clock = Clock()
    log = FaultLog(clock)
    log.note_injected("node-0")
    clock.t = 100.25
    fail = log.failure("node-0", ray_node=None, detected_by="actor died", last_seen=1.0, batch=0)
    assert fail["detect_s"] == 0.25 and fail["detect_s_from"] == "fault"
    log.recovered(fail, action="restarted", trees={"t0": "node-0"}, replayed=0)
    clock.t = 101.0
    log.close()
    rec = log.events[-1]
    assert rec["trees_restarted"] == 1 and rec["first_answer"] == "end of input"
    assert rec["first_answer_s"] == 0.75
    # a second failure of the same node is timed from its last sign of life again
    clock.t = 110.0
    again = log.failure("node-0", ray_node=None, detected_by="actor died", last_seen=109.0, batch=1)
    assert again["detect_s"] == 1.0 and again["detect_s_from"] == "last sign of life"
    log.discard(again)
    assert log.summary()["failures"] == 1


def test_events_carry_the_event_time_fed_when_recorded():
    clock, fed = Clock(), {"t": None}
    log = FaultLog(clock, event_clock=lambda: fed["t"])
    early = log.failure("node-0", ray_node=None, detected_by="actor died", last_seen=99, batch=0)
    assert early["event_time"] is None  # nothing fed yet
    fed["t"] = 5_000
    fail = log.failure("node-1", ray_node=None, detected_by="actor died", last_seen=99, batch=3)
    log.recovered(fail, action="restarted", trees={"t1": "node-1"}, replayed=1)
    fed["t"] = 7_000
    log.answers_committed("node-1", 2)
    assert [e["event_time"] for e in log.events] == [None, 5_000, 7_000]


def test_detection_kinds():
    class ActorUnavailableError(Exception):
        pass

    assert detection(None, True) == "node marked dead"
    assert detection(None, False) == "actor died"
    assert detection(RuntimeError("The actor is dead because its node has died."), False) == (
        "node marked dead"
    )
    assert detection(RuntimeError("its worker process has died"), False) == "actor died"
    assert detection(ActorUnavailableError("x"), False) == "actor unavailable"
    line = error_line(RuntimeError("The actor died.\n\tpid: 3\nThe actor is dead because x."))
    assert line == "RuntimeError: The actor is dead because x."


@pytest.mark.cluster
def test_kill_and_loss_are_events_and_answers_stay_exact(
    workload, live_result, small_batches, ray_session
):
    """node-0's actor killed behind the deployment's back (detected when a call fails:
    restarted, replayed), then node-1 declared lost by a drill (re-placed): two failures, two
    recoveries with their figures in ``metrics()["fault_log"]``, and the answers equal the
    fault-free run's."""
    import ray

    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions

    opts = DeploymentOptions(
        max_in_flight=2, faults=[{"kind": "lose", "node": "node-1", "at_batch": 9}]
    )
    with Deployment(workload["plan"], opts) as dep:
        for i, b in enumerate(small_batches):
            if i == 4:
                dep.checkpoint()
            if i == 6:
                ray.kill(dep.actor("node-0"), no_restart=True)
            dep.feed(None, b)
            if i == 7:
                dep.checkpoint()  # node-0 answers again: its recovery is complete
        res = dep.finish()
    assert res.answers.equals(live_result.answers)
    log = res.metrics["fault_log"]
    assert (log["failures"], log["recoveries"], log["recovering"]) == (2, 2, [])
    fail0, rec0, fail1, rec1 = log["events"]
    assert (fail0["command"], fail0["node"], fail0["detected_by"]) == (
        "failure",
        "node-0",
        "actor died",
    )
    assert fail0["detect_s_from"] == "last sign of life" and 0 <= fail0["detect_s"] < 60
    assert "RayActorError" in fail0["error"] or "ActorDiedError" in fail0["error"]
    # the newest event time fed when detected: the kill before batch 6, found by batch 8
    newest = [max(b.column("ts_ms").to_pylist()) for b in small_batches]
    assert max(newest[:7]) <= fail0["event_time"] <= max(newest[:9]), fail0
    assert fail0["event_time"] <= rec0["event_time"] <= max(newest)
    assert rec0["command"] == "recovery" and rec0["action"] == "restarted"
    assert rec0["trees_restarted"] == len(workload["plan"]["nodes"][0]["trees"])
    assert rec0["batches_replayed"] >= 1  # the batches fed since the checkpoint at 4
    assert 0 <= rec0["recover_s"] <= rec0["first_answer_s"] < 120
    assert rec0["first_answer"] == "answers committed by node-0"
    assert (fail1["node"], fail1["detected_by"], fail1["detect_s_from"]) == (
        "node-1",
        "declared lost",
        "fault",
    )
    assert rec1["action"] == "re-placed" and set(rec1["trees"].values()) == {"node-0"}
    assert rec1["trees_moved"] == len(workload["plan"]["nodes"][1]["trees"])
    assert rec1["batches_replayed"] == res.metrics["replacements"][0]["replayed_batches"]
    assert rec1["first_answer_s"] is not None
