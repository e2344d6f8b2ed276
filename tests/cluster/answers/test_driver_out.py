"""The driver out of the data path: actors write their answers, Spark executors push the rows.

Oracles: the driver route (itself checked against Spark SQL and numpy in
tests/cluster/deployment/test_deployment.py), the brute force for every query, and Spark
SQL's ``window()`` directly for ten of them; exactly-once under kills, node loss and addition
is checked row for row against the fault-free run, with a part written by an actor whose
reply never came (an orphan) in the mix.  The datasets are read back as one table by pyarrow
and by Spark.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from support.cluster_oracles import assert_answers_equal, file_order_oracle, spark_oracle
from support.cluster_plans import STREAMS, make_plan, make_queries
from support.waiting import wait_for

from sim.debs import generate_debs


# ----------------------------------------------------------------------------- Ray + Spark
@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    d = tmp_path_factory.mktemp("driver_out")
    path = d / "debs.parquet"
    n = generate_debs(path, duration_s=60, rate_hz=100, seed=5)
    queries = make_queries(n_time=30, seed=7)
    return {"dir": d, "path": path, "rows": n, "queries": queries, "plan": make_plan(queries)}


@pytest.fixture(scope="module")
def batches(workload, spark):
    from cluster.feeds.parquet import ordered_arrow_batches, read_debs_df

    df = read_debs_df(spark, str(workload["path"]), list(STREAMS))
    return [b.select(["ts_ms", *STREAMS]) for b in ordered_arrow_batches(df, batch_rows=600)]


@pytest.fixture(scope="module")
def driver_route(workload, batches, ray_session):
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions

    with Deployment(workload["plan"], DeploymentOptions(max_in_flight=2)) as dep:
        for b in batches:
            dep.feed(None, b)
        return dep.finish()


def _only(t: pa.Table, ids) -> pa.Table:
    return t.filter(pc.is_in(t.column("query_id"), value_set=pa.array(sorted(ids))))


def test_actor_route_equals_driver_route_and_oracles(
    workload, batches, driver_route, ray_session, spark, tmp_path
):
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions

    with Deployment(
        workload["plan"], DeploymentOptions(max_in_flight=2, answers="actors", out_dir=tmp_path)
    ) as dep:
        for i, b in enumerate(batches):
            if i == 4:
                dep.checkpoint()
            dep.feed(None, b)
        res = dep.finish()
    m = res.metrics
    assert m["answers_route"] == "actors" and m["answer_bytes_to_driver"] == 0
    assert driver_route.metrics["answer_bytes_to_driver"] >= 16 * driver_route.answers.num_rows
    # the parts: per node, one per checkpoint round with answers, one schema
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("part-*.parquet"))
    assert files and all(f.startswith("answers.parquet/node=node-") for f in files)
    assert m["answer_parts"] == len(files) and m["answers"] == driver_route.answers.num_rows
    assert res.answers.equals(driver_route.answers)
    assert res.late.num_rows == 0 == driver_route.late.num_rows
    # pyarrow reads the directory as one table (plus the ``node`` directory column)
    t = pq.read_table(tmp_path / "answers.parquet")
    assert t.num_rows == m["answers"] and "node" in t.column_names
    assert t.schema.field("value").type == pa.float64()  # avg queries: float64, one schema
    # no answer is null: every part's fields are required, as the driver route's table's
    for f in files:
        assert not any(x.nullable for x in pq.read_schema(tmp_path / f)), f
    assert not any(x.nullable for x in driver_route.answers.schema)
    # Spark reads it as one table too
    sdf = spark.read.parquet(str(tmp_path / "answers.parquet"))
    assert sdf.count() == m["answers"]
    got = (
        sdf.select("query_id", "window_start", "window_end", "value")
        .toArrow()
        .sort_by([("query_id", "ascending"), ("window_start", "ascending")])
    )
    # Spark reads every Parquet column as nullable (its rule for files): the values agree
    assert got.cast(driver_route.answers.schema).equals(driver_route.answers)
    # oracles: Spark SQL windows for the first ten time queries (every aggregate twice, every
    # stream, ranges not multiples of the slide; all 30 take Spark 10-16 s here:
    # test_deployment.py's scenario has them all)
    tq = [q for q in workload["queries"] if q.kind == "time"]
    avg = {q.id for q in workload["queries"] if q.aggregate == "avg"}
    assert {q.aggregate for q in tq[:10]} == {"sum", "count", "avg", "min", "max"}
    ref = spark_oracle(spark, workload["path"], tq[:10])
    assert_answers_equal(_only(res.answers, {q.id for q in tq[:10]}), ref, avg)
    # every query, time and count windows, against the brute force (no tuple late: the file is
    # in time order)
    want, late = file_order_oracle(workload["plan"], workload["path"], 0)
    assert not late
    assert_answers_equal(res.answers, want, avg)


@pytest.mark.scenario  # ~20 s: make test-scenarios (make test stays under 8 min)
def test_actor_route_exactly_once_with_kills_loss_add_and_an_orphan(
    workload, batches, driver_route, ray_session, tmp_path
):
    """Three nodes; a kill before any checkpoint, a checkpoint, node-1 writes a part of the
    next round and is then lost before its reply (an orphan: its trees are restored elsewhere
    from the committed snapshot), an adopting node is killed, a node is added, a kill after
    that.  The dataset equals the fault-free driver route row for row."""
    import ray

    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions

    plan = make_plan(workload["queries"], n_nodes=3)
    out = tmp_path / "run"
    with Deployment(plan, DeploymentOptions(max_in_flight=2, answers="actors", out_dir=out)) as dep:
        for i, b in enumerate(batches):
            if i == 1:
                ray.kill(dep.actor("node-0"), no_restart=True)
            if i == 3:
                dep.checkpoint()
            if i == 5:
                orphan = ray.get(
                    dep.actor("node-1").checkpoint_write.remote(
                        str(out / "answers.parquet"),
                        f"{dep.checkpoint_rounds + 1:06d}",
                        dep.value_type,
                    )
                )[1]
                assert orphan.num_rows > 0
                rec = dep.lose_node("node-1")
                adopter = sorted(set(rec["trees"].values()))[0]
            if i == 7:
                ray.kill(dep.actor(adopter), no_restart=True)
            if i == 8:
                dep.add_node()
            if i == 10:
                ray.kill(dep.actor("node-2"), no_restart=True)
            dep.feed(None, b)
        res = dep.finish()
    # the orphan was only staged (hidden): never in place, and removed at the end
    assert orphan.staged in res.metrics["orphan_parts_removed"]
    assert not (out / "answers.parquet" / orphan.path).exists()
    assert res.metrics["additions"] and res.metrics["replacements"]
    assert res.answers.equals(driver_route.answers)


@pytest.fixture(scope="module")
def late_batches(batches):
    """The batches with 4 and 5 swapped: batch 4 arrives after 5, its tuples late."""
    out = list(batches)
    out[4], out[5] = out[5], out[4]
    return out


@pytest.fixture(scope="module")
def late_reference(workload, late_batches, ray_session):
    """The fault-free driver route over ``late_batches`` (lateness 50 ms: late tuples)."""
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions

    with Deployment(workload["plan"], DeploymentOptions(allowed_lateness=50)) as dep:
        for b in late_batches:
            dep.feed(None, b)
        res = dep.finish()
    assert res.late.num_rows > 0
    return res


LATE_KEY = [(c, "ascending") for c in ("node_id", "tree_id", "ts_ms", "value")]


@pytest.mark.scenario  # ~12 s here: make test-scenarios (make test stays under 8 min)
@pytest.mark.parametrize("kind", ["kill", "lose"])
def test_a_node_failing_at_the_very_end_changes_nothing(
    workload, late_batches, late_reference, ray_session, tmp_path, kind
):
    """A drill at the batch after the last hits node-1 at the very end: on the actor route
    after its ``part-final`` is committed, before it writes its late tuples.  It is rebuilt
    from the checkpoint at batch 3 (the late batch replayed): killed, restarted; lost, its
    trees re-placed on node-0.  The answers equal the fault-free run's (the replay's answers,
    already committed, dropped: exactly once), so do the late tuples (rebuilt from the
    state; after a loss written by node-0), and the fault log has the failure and recovery.
    (The driver route's end under a kill: ``test_executor_feed_exactly_once_through_fault_drills``.)"""
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions

    faults = [{"kind": kind, "node": "node-1", "at_batch": len(late_batches)}]
    opts = DeploymentOptions(
        max_in_flight=2, allowed_lateness=50, faults=faults, answers="actors", out_dir=tmp_path
    )
    with Deployment(workload["plan"], opts) as dep:
        for i, b in enumerate(late_batches):
            if i == 3:
                dep.checkpoint()
            dep.feed(None, b)
        res = dep.finish()
        assert all(f["fired"] for f in dep.faults)
    m = res.metrics
    assert res.answers.equals(late_reference.answers)
    ref_late = late_reference.late
    if kind == "lose":  # node-0 hosts every tree at the end, and hands over their tuples
        assert set(res.late.column("node_id").to_pylist()) == {"node-0"}
        ref_late = ref_late.set_column(
            0, ref_late.schema.field(0), pa.array(["node-0"] * ref_late.num_rows, pa.string())
        )
    assert res.late.sort_by(LATE_KEY).equals(ref_late.sort_by(LATE_KEY))
    log = m["fault_log"]
    assert (log["failures"], log["recoveries"], log["recovering"]) == (1, 1, [])
    fail, rec = log["events"]
    assert (fail["command"], fail["node"], fail["detect_s_from"]) == ("failure", "node-1", "fault")
    assert fail["detected_by"] == ("actor died" if kind == "kill" else "declared lost")
    assert rec["command"] == "recovery" and rec["first_answer"] == "end of input"
    assert rec["action"] == ("restarted" if kind == "kill" else "re-placed")
    assert rec["batches_replayed"] == len(late_batches) - 3
    if kind == "kill":
        assert m["nodes"]["node-1"]["recoveries"] == 1
    else:
        assert list(m["nodes"]) == ["node-0"] and m["replacements"][0]["node"] == "node-1"
    # node-1's last answers stay in its committed part; the replay's were dropped
    assert (tmp_path / "answers.parquet" / "node=node-1" / "part-final.parquet").exists()
    assert m["replayed_answers_dropped"] > 0
    assert all(n["pending_answers"] == 0 for n in m["nodes"].values())
    assert m["late_tuples"] == late_reference.late.num_rows


def test_actor_route_refusals(workload, ray_session, tmp_path):
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.deployment.specs import DeploymentError

    with pytest.raises(ValueError, match="needs out_dir"):
        Deployment(workload["plan"], DeploymentOptions(answers="actors"))
    with pytest.raises(ValueError, match="answers must be"):
        Deployment(workload["plan"], DeploymentOptions(answers="both", out_dir=tmp_path))
    with Deployment(workload["plan"], DeploymentOptions(answers="actors", out_dir=tmp_path)) as dep:
        with pytest.raises(DeploymentError, match="write the answers themselves"):
            dep.take_answers()


# ----------------------------------------------------------------------------- executors push
@pytest.mark.parametrize(
    "answers",
    # the actors' answers ~12 s here: make test-scenarios (make test stays under 8 min)
    [pytest.param("actors", marks=pytest.mark.scenario), "driver"],
)
def test_executor_feed_equals_driver_route(
    workload, driver_route, ray_session, spark, tmp_path, answers
):
    """Spark tasks (local[2]) push pieces straight to the actors: no tuple crosses the
    driver, answers equal the driver route's row for row (answers written by the actors or
    merged on the driver)."""
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.feeds.executors import feed_executors

    with Deployment(
        workload["plan"], DeploymentOptions(max_in_flight=2, answers=answers, out_dir=tmp_path)
    ) as dep:
        fs = feed_executors(
            dep, spark, str(workload["path"]), batch_rows=500, piece_rows=1300, max_ahead=2
        )
        res = dep.finish()
    assert fs.rows == workload["rows"] and fs.chunks == -(-workload["rows"] // 1300)
    m = res.metrics
    assert m["rows_fed"] == 0 and m["bytes_fed"] == 0  # nothing through the driver
    assert fs.pushed["bytes_pushed"] > 16 * workload["rows"]
    for n in m["nodes"].values():
        assert n["tuples"] == workload["rows"]
    assert res.answers.equals(driver_route.answers)


@pytest.mark.scenario  # fault drills end to end, ~23 s each: make test-scenarios
@pytest.mark.parametrize("answers", ["driver", "actors"])
def test_executor_feed_exactly_once_through_fault_drills(
    workload, driver_route, ray_session, spark, tmp_path, answers
):
    """The executor route under a drill on three nodes: a kill before any checkpoint (the
    restored actor replays by reading the file itself), node-1 lost for good (its trees
    adopted and replayed from the file), a node added, the adopting node killed, with
    checkpoints every 4 pieces.  No tuple crosses the driver; the answers equal the fault-free
    driver route's row for row."""
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.feeds.executors import feed_executors, plan_pieces, segment_cuts
    from cluster.feeds.time_chunks import parquet_row_groups

    plan = make_plan(workload["queries"], n_nodes=3)
    n = len(plan_pieces(parquet_row_groups(str(workload["path"])), 500))
    faults = [
        {"kind": "kill", "node": "node-0", "at_batch": 2},
        {"kind": "lose", "node": "node-1", "at_batch": 5},
        {"kind": "add", "node": "node-9", "at_batch": 7},
        {"kind": "kill", "node": "node-2", "at_batch": 9},
        {"kind": "kill", "node": "node-0", "at_batch": n},  # after the last piece: at finish
    ]
    out = tmp_path / "run"
    with Deployment(
        plan,
        DeploymentOptions(
            max_in_flight=2, checkpoint_every=4, faults=faults, answers=answers, out_dir=out
        ),
    ) as dep:
        fs = feed_executors(
            dep, spark, str(workload["path"]), batch_rows=300, piece_rows=500, max_ahead=2
        )
        res = dep.finish()
    m = res.metrics
    assert fs.chunks == n >= 12 and fs.rows == workload["rows"]
    # cut at 2, 4, 5, 7, 8, 9, 12 (4, 8, 12: checkpoints)
    assert fs.pushed["segments"] == len(segment_cuts(n, 4, [2, 5, 7, 9, n])) - 1 >= 7
    assert m["rows_fed"] == 0 and m["bytes_fed"] == 0
    assert all(f["fired"] for f in dep.faults)
    assert [r["node"] for r in m["replacements"]] == ["node-1"]
    assert [a["node"] for a in m["additions"]] == ["node-9"]
    assert m["nodes"]["node-0"]["recoveries"] == 2 and m["nodes"]["node-2"]["recoveries"] == 1
    assert res.answers.equals(driver_route.answers)


@pytest.mark.scenario  # fault drills end to end: make test-scenarios
def test_executor_feed_sliced_mode_exactly_once_through_fault_drills(
    workload, driver_route, ray_session, spark, tmp_path
):
    """Sliced mode on the executor route: the tasks cut their piece into each stream's slices
    (the deployment's edge union) and push them to the nodes hosting the stream; a slice cut
    by a piece boundary arrives as two rows, which the trees fold.  Under a kill, a loss and
    an addition (replays re-slice the piece from the file), the answers equal the raw driver
    route's for every (time-window) query."""
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.feeds.executors import feed_executors

    tq = [q for q in workload["queries"] if q.kind == "time"]
    plan = make_plan(tq, n_nodes=3)
    faults = [
        {"kind": "kill", "node": "node-2", "at_batch": 1},
        {"kind": "lose", "node": "node-1", "at_batch": 3},
        {"kind": "add", "at_batch": 5},
        {"kind": "kill", "node": "node-0", "at_batch": 6},
    ]
    with Deployment(
        plan,
        DeploymentOptions(
            mode="sliced", checkpoint_every=2, faults=faults, answers="actors", out_dir=tmp_path
        ),
    ) as dep:
        fs = feed_executors(
            dep, spark, str(workload["path"]), batch_rows=40, piece_rows=700, max_ahead=2
        )
        res = dep.finish()
    m = res.metrics
    assert fs.rows == workload["rows"] and 0 < fs.slices < fs.rows
    assert m["rows_fed"] == 0 and all(f["fired"] for f in dep.faults)
    assert m["nodes"]["node-0"]["recoveries"] == 1 and m["nodes"]["node-2"]["recoveries"] == 1
    assert m["replacements"] and m["additions"]
    want = _only(driver_route.answers, {q.id for q in tq})
    avg = {q.id for q in tq if q.aggregate == "avg"}
    assert res.answers.num_rows == want.num_rows
    assert_answers_equal(res.answers, want, avg)


@pytest.mark.scenario  # ~21 s here: make test-scenarios (make test stays under 8 min)
def test_executor_feed_exact_when_an_actor_dies_during_a_job(
    workload, driver_route, ray_session, spark
):
    """An actor killed while Spark tasks are pushing (not at a drill's cut): the job fails,
    the node is restored and replays from the file, the segment is pushed again under a new
    epoch (the dead job's lingering pushes are dropped); answers equal the fault-free run's."""
    import threading
    import time

    import ray

    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.feeds.executors import feed_executors

    with Deployment(workload["plan"], DeploymentOptions(max_in_flight=2)) as dep:
        victim = dep.actor("node-1")
        killed = threading.Event()

        def kill_when_busy():
            deadline = time.time() + 60
            while time.time() < deadline:
                if ray.get(victim.metrics.remote())["tuples"] >= 1000:
                    ray.kill(victim, no_restart=True)
                    killed.set()
                    return
                time.sleep(0.01)

        th = threading.Thread(target=kill_when_busy, daemon=True)
        th.start()
        fs = feed_executors(
            dep, spark, str(workload["path"]), batch_rows=200, piece_rows=200, max_ahead=1
        )
        th.join()
        res = dep.finish()
    assert killed.is_set()
    assert res.metrics["nodes"]["node-1"]["recoveries"] == 1
    # one segment (no checkpoints, no drill); the kill came a sixth of the way through it (the
    # metrics call queues behind the pushes), so the job failed and was pushed again
    assert fs.pushed["segments"] == 1 and fs.pushed["attempts"] == 2
    assert res.answers.equals(driver_route.answers)


@pytest.mark.scenario  # ~14 s here: make test-scenarios (make test stays under 8 min)
def test_executor_feed_refusals(workload, ray_session, spark, tmp_path):
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.deployment.specs import DeploymentError
    from cluster.feeds.executors import feed_executors

    # a file out of time order in sliced mode: refused in one line (feed 'driver' sorts it;
    # raw mode feeds it in file order: tests/cluster/feeds/test_executors.py)
    t = pq.read_table(workload["path"])
    bad = tmp_path / "shuffled.parquet"
    pq.write_table(t.take(np.random.default_rng(0).permutation(t.num_rows)), bad)
    time_plan = make_plan([q for q in workload["queries"] if q.kind == "time"])
    with Deployment(time_plan, DeploymentOptions(mode="sliced")) as dep:
        with pytest.raises(DeploymentError, match="not in time order") as ei:
            feed_executors(dep, spark, str(bad))
        assert "\n" not in str(ei.value) and "sliced" in str(ei.value)
    with Deployment(workload["plan"]) as dep:
        with pytest.raises(DeploymentError, match="local Parquet file"):
            feed_executors(dep, spark, str(tmp_path / "nope.parquet"))
    # an actor lost without auto_recover: refused in one line
    import ray

    with Deployment(workload["plan"], DeploymentOptions(auto_recover=False)) as dep:
        ray.kill(dep.actor("node-1"), no_restart=True)
        with pytest.raises(DeploymentError, match="auto_recover is off") as ei:
            feed_executors(dep, spark, str(workload["path"]))
        assert "\n" not in str(ei.value)


def test_run_file_with_the_driver_out(workload, driver_route, ray_session, spark, tmp_path):
    """``run_file`` with answers by the actors and the executors' feed route: answers.parquet and late.parquet are
    the datasets the actors wrote (directories, one table each), metrics.json says so."""
    import json

    from cluster.answers.sink import read_answers
    from cluster.deployment.options import DeploymentOptions
    from cluster.runs.file_run import run_file
    from cluster.runs.options import FileFeedOptions, RuntimeOptions

    out = tmp_path / "run"
    out.mkdir()
    (out / "answers.parquet").write_bytes(b"a previous run's file")  # replaced
    res = run_file(
        workload["plan"],
        workload["path"],
        out,
        runtime=RuntimeOptions(spark=spark),
        deployment=DeploymentOptions(answers="actors", out_dir=out),
        feed=FileFeedOptions(batch_rows=800, route="executors"),
    )
    assert (out / "answers.parquet").is_dir() and (out / "late.parquet").is_dir()
    assert read_answers(out / "answers.parquet").equals(driver_route.answers)
    m = json.loads((out / "metrics.json").read_text())
    assert m["answers_route"] == "actors" and m["feed"]["route"] == "executors"
    assert m["rows_fed"] == 0 and m["answers"] == driver_route.answers.num_rows
    assert res.answers.num_rows == m["answers"]
    with pytest.raises(ValueError, match="answers.csv needs"):
        run_file(
            workload["plan"],
            workload["path"],
            out,
            runtime=RuntimeOptions(spark=spark),
            deployment=DeploymentOptions(answers="actors", out_dir=out),
            feed=FileFeedOptions(csv=True),
        )


def test_config_routes(tmp_path):
    import yaml
    from support.configs import EXPLICIT

    from sim.config import ConfigError, load_config

    (tmp_path / "in").mkdir()

    def load(run, data):
        (tmp_path / "c.yaml").write_text(yaml.safe_dump({**EXPLICIT, "data": data, "run": run}))
        return load_config(tmp_path / "c.yaml")

    for key, val in (("answers", "actors"), ("feed", "executors")):
        with pytest.raises(ConfigError, match=f"run.{key}: '{val}' is for a file"):
            load({"mode": "live", key: val}, {"directory": {"path": "in"}})
    cfg = load({"mode": "live", "answers": "actors", "feed": "executors"}, {"duration_s": 5})
    assert (cfg.run.answers, cfg.run.feed) == ("actors", "executors")
    cfg = load({"mode": "live"}, {"duration_s": 5})
    assert (cfg.run.answers, cfg.run.feed) == ("driver", "driver")


@pytest.mark.scenario  # ~10 s here: make test-scenarios (make test stays under 8 min)
def test_actor_route_last_round_without_snapshot_survives_a_death(
    workload, batches, driver_route, ray_session, tmp_path, monkeypatch
):
    """The end writes ``part-final`` without a snapshot; an actor dying right then is restored
    from its last checkpoint by a checkpoint round that writes its answers, and its answers
    are neither lost nor doubled: the dataset equals the fault-free driver route."""
    import ray

    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions

    out = tmp_path / "run"
    with Deployment(
        workload["plan"], DeploymentOptions(max_in_flight=2, answers="actors", out_dir=out)
    ) as dep:
        for i, b in enumerate(batches):
            if i == 3:
                dep.checkpoint()
            dep.feed(None, b)
        route = dep.answer_route
        last_round = route.last_round

        def die_first(d):
            actor = d.actor("node-0")
            ray.kill(actor, no_restart=True)

            def dead() -> bool:
                try:
                    ray.get(actor.ping.remote(), timeout=30)
                except ray.exceptions.RayActorError:
                    return True
                return False

            # a kill lands asynchronously: a part written before it lands would be committed
            # and the death met only by the calls after it; this test is about a death first
            wait_for(dead, "node-0's actor to be dead")
            last_round(d)

        monkeypatch.setattr(route, "last_round", die_first)
        res = dep.finish()
    parts = sorted(res.metrics["orphan_parts_removed"])
    finals = sorted(p.parent.name for p in out.rglob("part-final.parquet") if "answers" in str(p))
    assert finals == ["node=node-1"] and not any("node-1" in p for p in parts)
    assert res.metrics["nodes"]["node-0"]["recoveries"] == 1
    assert res.answers.equals(driver_route.answers)
