"""The shared live workload of the cluster checks: one DEBS Parquet file, its plan, and one
fault-free live run of that plan (driver feed, raw mode), built once per test process.

The deployment, recovery, membership and file-run checks all compare against the same
fault-free run; session scope keeps that one run (the dearest part) from being repeated for
each of their modules.  Ray and Spark themselves come from tests/conftest.py.
"""

from __future__ import annotations

import json

import pytest
from support.cluster_plans import RATE_HZ, STREAMS, make_plan, make_queries

from sim.debs_generator import generate_debs

DURATION_S = 90


@pytest.fixture(scope="session")
def workload(tmp_path_factory):
    d = tmp_path_factory.mktemp("cluster")
    path = d / "debs.parquet"
    n = generate_debs(path, duration_s=DURATION_S, rate_hz=RATE_HZ, seed=11)
    queries = make_queries()
    plan = make_plan(queries)
    (d / "plan.json").write_text(json.dumps(plan))
    return {"dir": d, "path": path, "rows": n, "queries": queries, "plan": plan}


@pytest.fixture(scope="session")
def live_result(workload, ray_session, spark):
    """One deployment fed by Spark (driver path, raw mode): the fault-free reference run."""
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.feeds.parquet import feed_raw

    with Deployment(workload["plan"], DeploymentOptions(max_in_flight=3)) as dep:
        assert len(dep.nodes) == 2 and all(n.spec["trees"] for n in dep.nodes.values())
        fs = feed_raw(dep, spark, str(workload["path"]), batch_rows=1000)
        res = dep.finish()
    assert fs.rows == workload["rows"] and fs.sorted_chunks == 0  # file already in order
    return res


@pytest.fixture(scope="session")
def small_batches(workload, spark):
    """The workload file as 700-row Arrow batches in time order (13 batches)."""
    from cluster.feeds.parquet import ordered_arrow_batches, read_debs_df

    df = read_debs_df(spark, str(workload["path"]), list(STREAMS))
    return [b.select(["ts_ms", *STREAMS]) for b in ordered_arrow_batches(df, batch_rows=700)]
