"""Recovery (cluster/deployment/recovery.py): actors killed mid-stream come back from their last
checkpoint and replay; the recovered run must equal the fault-free run exactly, and answers
and late tuples taken while it happens must arrive exactly once.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from support.cluster_plans import STREAMS

pytestmark = pytest.mark.cluster


@pytest.mark.scenario  # ~27 s here: make test-scenarios (make test stays under 8 min)
def test_fault_recovery_equals_fault_free(workload, live_result, ray_session, spark):
    """Kill node-0 before any checkpoint (restored from the initial state, full replay) and
    node-1 after a checkpoint (restored from the snapshot, replay of the later batches)."""
    import ray

    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.feeds.parquet import ordered_arrow_batches, read_debs_df

    df = read_debs_df(spark, str(workload["path"]), list(STREAMS))
    batches = [b.select(["ts_ms", *STREAMS]) for b in ordered_arrow_batches(df, batch_rows=700)]
    assert len(batches) > 10

    with Deployment(workload["plan"], DeploymentOptions(max_in_flight=2)) as dep:
        for b in batches:
            dep.feed(None, b)
        clean = dep.finish()

    with Deployment(workload["plan"], DeploymentOptions(max_in_flight=2)) as dep:
        for i, b in enumerate(batches):
            if i == 3:
                ray.kill(dep.actor("node-0"), no_restart=True)
            if i == 6:
                dep.checkpoint()
            if i == 9:
                ray.kill(dep.actor("node-1"), no_restart=True)
            dep.feed(None, b)
        faulty = dep.finish()
    assert faulty.metrics["nodes"]["node-0"]["recoveries"] == 1
    assert faulty.metrics["nodes"]["node-1"]["recoveries"] == 1
    assert faulty.answers.equals(clean.answers)
    assert faulty.late.equals(clean.late)
    # the answers do not depend on the batch size either (700 here, 1000 in live_result)
    assert clean.answers.equals(live_result.answers)


@pytest.mark.scenario  # ~20 s: make test-scenarios (make test stays under 8 min)
def test_take_answers_and_late_exactly_once_across_recovery(workload, ray_session, spark):
    """What a live stream does after each micro-batch: ``take_answers`` (checkpoint + hand
    over) and ``take_late`` (new late tuples only).  With actors killed between takes, the
    pieces taken plus ``finish()`` still equal a clean batch run: nothing twice, nothing lost."""
    import ray

    from cluster.answers.blocks import concat_answers
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.feeds.parquet import ordered_arrow_batches, read_debs_df

    df = read_debs_df(spark, str(workload["path"]), list(STREAMS))
    batches = [b.select(["ts_ms", *STREAMS]) for b in ordered_arrow_batches(df, batch_rows=900)]
    batches[4], batches[5] = batches[5], batches[4]  # one batch reaching back: late tuples
    key = [
        ("node_id", "ascending"),
        ("tree_id", "ascending"),
        ("ts_ms", "ascending"),
        ("value", "ascending"),
    ]

    with Deployment(workload["plan"], DeploymentOptions(allowed_lateness=50)) as dep:
        for b in batches:
            dep.feed(None, b)
        clean = dep.finish()
    assert clean.late.num_rows > 0

    answers, late = [], []
    with Deployment(workload["plan"], DeploymentOptions(allowed_lateness=50)) as dep:
        for i, b in enumerate(batches):
            dep.feed(None, b)
            if i in (2, 6):
                ray.kill(dep.actor("node-1" if i == 2 else "node-0"), no_restart=True)
            if i % 3 == 0:
                answers.append(dep.take_answers())
                late.append(dep.take_late())
        late.append(dep.take_late())
        res = dep.finish()
    assert res.metrics["nodes"]["node-0"]["recoveries"] == 1
    assert res.metrics["nodes"]["node-1"]["recoveries"] == 1
    got = concat_answers([*answers, res.answers]).sort_by(
        [("query_id", "ascending"), ("window_start", "ascending")]
    )
    assert len([a for a in answers if a.num_rows]) >= 3 and got.equals(clean.answers)
    assert pa.concat_tables(late).sort_by(key).equals(clean.late.sort_by(key))
