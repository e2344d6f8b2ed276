"""Bounded failure detection on the executor route (cluster/feeds/executors.py): the Spark
settings derived from ``cluster.failure_timeout_s`` (``spark_failure_conf``), the driver's
watch over the node actors while a segment's Spark job runs (``_watch_job``: a dead actor
cancels the job at once, a live one's ping is its sign of life), and the job's cancellation
(``_SparkJob``: a job group of its own, ended within seconds though its tasks would run on).
The whole route through a host fault is tests/hosts/test_file_run_faults.py."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.cluster_plans import make_plan, make_queries

from cluster.feeds.executors import SPARK_MIN_TIMEOUT_S, _SparkJob, _watch_job, spark_failure_conf


def _ms(v: str) -> float:
    return float(v[:-2]) if v.endswith("ms") else float(v[:-1]) * 1000


def test_spark_failure_conf_follows_the_timeout():
    c = spark_failure_conf(10)
    assert c["spark.network.timeout"] == "10s"
    assert c["spark.executor.heartbeatInterval"] == c["spark.network.timeoutInterval"] == "2500ms"
    assert c["spark.rpc.askTimeout"] == "120s"  # replies keep Spark's default wait
    assert spark_failure_conf(0.2)["spark.network.timeout"] == f"{SPARK_MIN_TIMEOUT_S}s"
    assert spark_failure_conf(30.5)["spark.network.timeout"] == "31s"


@given(st.floats(min_value=0.01, max_value=3600, allow_nan=False))
def test_spark_failure_conf_is_a_valid_bound(t):
    """Spark refuses a heartbeat interval not below the network timeout; the timeout is never
    below the setting (nor the floor)."""
    c = spark_failure_conf(t)
    timeout = _ms(c["spark.network.timeout"])
    assert timeout >= max(t, SPARK_MIN_TIMEOUT_S) * 1000
    assert 0 < _ms(c["spark.executor.heartbeatInterval"]) < timeout
    assert 0 < _ms(c["spark.network.timeoutInterval"]) < timeout


class FakeJob:
    """A job that runs until cancelled (``_watch_job`` asks ``running``, then ``cancel``)."""

    def __init__(self, limit_s: float):
        self.t_end = time.monotonic() + limit_s
        self.cancelled = False

    def running(self, wait_s: float) -> bool:
        time.sleep(wait_s)
        return not self.cancelled and time.monotonic() < self.t_end

    def cancel(self) -> None:
        self.cancelled = True


@pytest.mark.cluster
def test_watch_cancels_the_job_when_an_actor_dies(ray_session):
    import ray

    from cluster.deployment.deployment import Deployment

    plan = make_plan(make_queries(n_time=6, seed=2), n_nodes=2)
    with Deployment(plan) as dep:
        # a job that ends by itself: nobody died, and every node was seen alive meanwhile
        before = {nid: n.last_seen for nid, n in dep.nodes.items()}
        assert _watch_job(dep, FakeJob(1.5)) == {}
        assert all(n.last_seen > before[nid] for nid, n in dep.nodes.items())
        ray.kill(dep.actor("node-1"), no_restart=True)
        job = FakeJob(60.0)
        t0 = time.monotonic()
        dead = _watch_job(dep, job)
        assert job.cancelled and time.monotonic() - t0 < 10
        assert list(dead) == ["node-1"]
        assert isinstance(dead["node-1"], ray.exceptions.RayActorError)


@pytest.mark.cluster
def test_a_cancelled_spark_job_ends_at_once(spark):
    def sleepy(rows):  # nested: pickled by value, so Spark's Python workers need not import
        time.sleep(120)  # this test module (and its tests/support imports)
        yield from rows

    job = _SparkJob(spark.sparkContext, [1, 2], sleepy)
    assert job.running(1.0)
    t0 = time.monotonic()
    job.cancel()
    took = time.monotonic() - t0  # ~2 s (Spark's task kill timeout); far below the job's 120 s
    assert took < 60 and not job.running(0), took
    with pytest.raises(Exception, match="cancel"):
        job.result()
