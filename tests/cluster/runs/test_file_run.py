"""``run_file`` (cluster/runs/file_run.py): one Parquet file through a live run, its outputs on
disk, an unordered file sorted on the way in, and fault and add-node drills that write the
final plan; answers checked against the shared fault-free run (tests/cluster/conftest.py).
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.cluster_plans import make_plan

pytestmark = pytest.mark.cluster


def test_run_file_writes_outputs(workload, live_result, ray_session, spark, tmp_path):
    from cluster.deployment.options import DeploymentOptions
    from cluster.runs.file_run import run_file
    from cluster.runs.options import FileFeedOptions, RuntimeOptions

    res = run_file(
        str(workload["dir"] / "plan.json"),
        workload["path"],
        tmp_path / "out",
        runtime=RuntimeOptions(spark=spark),
        deployment=DeploymentOptions(checkpoint_every=2),
        feed=FileFeedOptions(batch_rows=1024),
    )
    assert res.metrics["checkpoints"] >= 2
    assert res.metrics["startup"]["ray_owned"] is False  # borrowed the session's Ray
    ans = pq.read_table(tmp_path / "out" / "answers.parquet")
    assert ans.schema.names == ["query_id", "window_start", "window_end", "value"]
    assert ans.schema.field("window_start").type == pa.int64()
    assert not any(f.nullable for f in ans.schema)  # no answer is null: required fields
    assert ans.equals(live_result.answers)
    assert pq.read_table(tmp_path / "out" / "late.parquet").num_rows == 0
    m = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert m["feed"]["rows"] == workload["rows"] and set(m["nodes"]) == {"node-0", "node-1"}


def test_then_gets_the_written_outputs_and_its_error_is_run_files(
    workload, live_result, ray_session, spark, tmp_path
):
    """``run_file(then=...)``: ``then`` runs on a thread of its own once every output is
    written (what it reads from disk equals the run's result), before ``run_file`` returns;
    what it raises, ``run_file`` raises (one run: ``then`` checks, then raises)."""
    import threading

    from cluster.runs.file_run import run_file
    from cluster.runs.options import FileFeedOptions, RuntimeOptions

    seen = {}

    def then(result):
        out = tmp_path / "out"
        seen["thread"] = threading.current_thread()
        seen["answers"] = pq.read_table(out / "answers.parquet")
        seen["metrics"] = json.loads((out / "metrics.json").read_text())
        seen["result"] = result
        raise OSError("disk full while reporting")

    with pytest.raises(OSError, match="disk full while reporting"):
        run_file(
            str(workload["dir"] / "plan.json"),
            workload["path"],
            tmp_path / "out",
            runtime=RuntimeOptions(spark=spark),
            feed=FileFeedOptions(batch_rows=4096),
            then=then,
        )
    assert seen["thread"] is not threading.current_thread()
    assert seen["answers"].equals(live_result.answers)
    assert seen["result"].answers.equals(live_result.answers)
    assert seen["metrics"]["feed"]["rows"] == workload["rows"]
    assert seen["metrics"]["startup"] == seen["result"].metrics["startup"]


@pytest.mark.scenario  # ~18 s here: make test-scenarios (make test stays under 8 min)
def test_unordered_file_auto_sorts_and_file_mode_counts_late(
    workload, live_result, ray_session, spark, tmp_path
):
    """A file whose rows are out of time order: ``order="auto"`` detects it per chunk and sorts
    (same answers as the ordered file); ``order="file"`` feeds the disorder, and the late tuples
    and answers equal an ExecutionTree fed the same file order directly."""
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.feeds.parquet import feed_raw
    from executors import ExecutionTree

    t = pq.read_table(workload["path"])
    n = t.num_rows
    rng = np.random.default_rng(5)
    perm = np.arange(n)
    for a in rng.choice(n - 40, 60, replace=False):  # local swaps: a few ms out of order
        perm[a], perm[a + 30] = perm[a + 30], perm[a]
    bad = tmp_path / "unordered.parquet"
    pq.write_table(t.take(perm), bad, row_group_size=2000)

    with Deployment(workload["plan"]) as dep:
        fs = feed_raw(dep, spark, str(bad), batch_rows=1500, chunk_rows=3000, order="auto")
        auto = dep.finish()
    assert fs.chunks >= 3 and 0 < fs.sorted_chunks <= fs.chunks
    assert auto.answers.equals(live_result.answers)

    q = next(q for q in workload["queries"] if q.kind == "time" and q.aggregate == "max")
    plan = {
        "schema": "weaveplace.plan/1",
        "ie": "slickdeque",
        "streams": {},
        "queries": [q.to_dict()],
        "nodes": [{"id": "n0", "trees": [{"id": "t0", "stream": q.stream, "queries": [q.id]}]}],
    }
    with Deployment(plan, DeploymentOptions(allowed_lateness=100)) as dep:
        feed_raw(dep, spark, str(bad), batch_rows=1500, order="file")
        filed = dep.finish()
    shuffled = t.take(perm)
    tree = ExecutionTree([q.to_dict()], allowed_lateness=100)
    parts = [
        tree.process(shuffled.column("ts_ms").to_numpy(), shuffled.column(q.stream).to_numpy()),
        tree.flush(),
    ]
    ref = pa.concat_tables(parts).sort_by(
        [("query_id", "ascending"), ("window_start", "ascending")]
    )
    assert tree.late.count > 0 and filed.late.num_rows == tree.late.count
    assert filed.late.column("ts_ms").to_pylist() == tree.late.ts.tolist()
    # (a tree's own tables leave nullability open; a run's answers are required fields)
    assert filed.answers.equals(ref.cast(filed.answers.schema))


@pytest.mark.scenario  # ~16 s here: make test-scenarios (make test stays under 8 min)
def test_run_file_fault_drill_writes_final_plan(
    workload, live_result, ray_session, spark, tmp_path
):
    """The user path of a drill: ``run_file`` with ``DeploymentOptions(faults=...)`` on 3 nodes (node-2 killed, node-1
    lost for good): same answers.parquet, the re-placement in metrics.json, plan_final.json
    verifies, and the summary lines say what happened."""
    from cluster.deployment.options import DeploymentOptions
    from cluster.runs.file_run import run_file
    from cluster.runs.options import FileFeedOptions, RuntimeOptions
    from placement.plan import verify_plan
    from sim.cluster_run import drill_lines

    plan = make_plan(workload["queries"], n_nodes=3)
    faults = [
        {"kind": "kill", "node": "node-2", "at_batch": 2},
        {"kind": "lose", "node": "node-1", "at_batch": 5},
        {"kind": "kill", "node": "node-0", "at_batch": 99},
    ]
    res = run_file(
        plan,
        workload["path"],
        tmp_path / "out",
        runtime=RuntimeOptions(spark=spark),
        deployment=DeploymentOptions(checkpoint_every=3, faults=faults),
        feed=FileFeedOptions(batch_rows=1000),
    )
    out = tmp_path / "out"
    assert pq.read_table(out / "answers.parquet").equals(live_result.answers)
    m = json.loads((out / "metrics.json").read_text())
    (rec,) = m["replacements"]
    assert rec["node"] == "node-1" and rec["before_batch"] == 5 and rec["snapshot_seq"] == 2
    assert [f["fired"] for f in m["faults"]] == [True, True, False]
    assert m["nodes"]["node-2"]["recoveries"] == 1 and set(m["lost_nodes"]) == {"node-1"}
    final = json.loads((out / "plan_final.json").read_text())
    assert verify_plan(final) == [] and [n["id"] for n in final["nodes"]] == ["node-0", "node-2"]
    # the faults as events: metrics.json's fault_log and events.jsonl beside it
    events = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
    assert events == m["fault_log"]["events"]
    assert [(e["command"], e["node"]) for e in events if e["command"] == "failure"] == [
        ("failure", "node-2"),
        ("failure", "node-1"),
    ]
    got = {(e["node"], e["action"]) for e in events if e["command"] == "recovery"}
    assert got == {("node-2", "restarted"), ("node-1", "re-placed")}
    assert all(e["detect_s_from"] == "fault" for e in events if e["command"] == "failure")
    moved = next(e for e in events if e.get("action") == "re-placed")
    assert moved["trees_moved"] == rec["moved"]
    assert moved["batches_replayed"] == rec["replayed_batches"]
    lines = drill_lines(res.metrics)
    assert lines[0].startswith(
        f"node node-1 lost before batch 5 (fault drill at batch 5): "
        f"{rec['moved']} tree(s) re-placed ("
    )
    assert "node node-2 restarted 1 time(s) from its checkpoint" in lines
    assert 5 < m["batches"] < 99
    assert lines[-1] == (
        f"fault drill: kill node-0 at batch 99 did not fire (the run fed "
        f"{m['batches']} batch(es); lower run.batch_rows)"
    )


@pytest.mark.scenario  # ~19 s here: make test-scenarios (make test stays under 8 min)
def test_run_file_add_drill_writes_final_plan(workload, live_result, ray_session, spark, tmp_path):
    """The user path of a scale-out drill: ``run_file`` with a drill adds a node before batch 2,
    kills it before batch 4 and loses node-0 before batch 6: same answers.parquet, the
    addition in metrics.json, plan_final.json verifies, the summary line says what moved."""
    from cluster.deployment.options import DeploymentOptions
    from cluster.runs.file_run import run_file
    from cluster.runs.options import FileFeedOptions, RuntimeOptions
    from placement.plan import verify_plan
    from sim.cluster_run import drill_lines

    faults = [
        {"kind": "add", "at_batch": 2},
        {"kind": "kill", "node": "node-2", "at_batch": 4},
        {"kind": "lose", "node": "node-0", "at_batch": 6},
    ]
    res = run_file(
        workload["plan"],
        workload["path"],
        tmp_path / "out",
        runtime=RuntimeOptions(spark=spark),
        deployment=DeploymentOptions(checkpoint_every=3, faults=faults),
        feed=FileFeedOptions(batch_rows=1000),
    )
    out = tmp_path / "out"
    assert pq.read_table(out / "answers.parquet").equals(live_result.answers)
    m = json.loads((out / "metrics.json").read_text())
    (add,) = m["additions"]
    assert add["node"] == "node-2" and add["before_batch"] == 2 and add["moved"] > 0
    assert [f["fired"] for f in m["faults"]] == [True, True, True]
    assert m["nodes"]["node-2"]["recoveries"] == 1 and set(m["lost_nodes"]) == {"node-0"}
    final = json.loads((out / "plan_final.json").read_text())
    assert verify_plan(final) == [] and [n["id"] for n in final["nodes"]] == ["node-1", "node-2"]
    lines = drill_lines(res.metrics)
    assert lines[0].startswith(
        f"node node-2 added before batch 2 (fault drill at batch 2): "
        f"{add['moved']} tree(s) moved to it (from node-"
    )
