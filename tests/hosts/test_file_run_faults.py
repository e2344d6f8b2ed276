"""``weaveplace run`` of a file across three emulated hosts, with a node actor's process
SIGKILLed behind its back in the middle of the feed.

The run is a plain YAML config attached to the hosts' token-protected Ray cluster
(``cluster.ray.address``), the driver on host 0, the plan's three nodes pinned one per host
(node-0 on host 1); the executor route runs on Spark standalone across the hosts
(``spark_standalone``: tasks on every host push their pieces to the actors).  A second driver on host 0 (``kill_actor.py``) finds node-0's actor in
Ray's actor table by its name, waits until it has taken some feed batches and SIGKILLs its
process.  Small batches (``run.batch_rows``) make the feed long enough for the kill to land
mid-feed.  Every answer equals the brute force over the file (none lost, none twice), on both
answer routes, and ``metrics.json`` ``fault_log`` and the run's ``events.jsonl`` list the
failure (``actor died``, its detection time) and the recovery (a new actor restored from the
checkpoint, batches replayed, seconds to the first new answer).  On the executor route the
driver learns of the death when the Spark job pushing to the actor fails; the restored actor
then takes the failed segment pushed again (a second attempt), not a replay from the driver.

It prints, with ``-s``, a row per run for BENCHMARKS.md's hosts section: seconds from the kill
to detection, to recovery and to the first new answer.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from support.service import assert_answers_follow_registrations, service_queries

from hosts.netns import FAILURE_TIMEOUT_S, RAY_TMP
from sim.debs_generator import generate_debs

pytestmark = pytest.mark.hosts

HERE = Path(__file__).resolve().parent
DURATION_S, RATE_HZ, BATCH_ROWS = 300, 100, 100  # 30,000 rows: 300 feed batches
KILL_AFTER_BATCHES = 40
SAFETY_S = 600.0


def _events(run_dir: Path) -> list[dict]:
    p = run_dir / "events.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines() if x.strip()] if p.exists() else []


@pytest.mark.parametrize(
    ("feed", "answers"), [("driver", "driver"), ("driver", "actors"), ("executors", "driver")]
)
def test_file_run_survives_actor_sigkill_mid_feed(
    emulated_hosts, ray_cluster, tmp_path, request, feed, answers
):
    hosts, d = emulated_hosts, tmp_path
    # the executor route on Spark standalone across the hosts: tasks on every host push their
    # pieces of the file (same path everywhere: the namespaces share the filesystem)
    master = "local[1]"
    if feed == "executors":
        master = request.getfixturevalue("spark_standalone").master
    data = d / "data.parquet"
    generate_debs(data, duration_s=DURATION_S, rate_hz=RATE_HZ, seed=11)
    queries = service_queries("q", 6, seed=7, streams=("mf01", "mf02", "mf03"))
    run_dir = d / "run"
    cfg = {
        "workload": {"queries": queries},
        "cluster": {
            "nodes": 3,
            "ray": {"address": ray_cluster.address},
            "spark": {"master": master},
            "failure_timeout_s": FAILURE_TIMEOUT_S,
        },
        "placement": {"optimizers": "WG_TN", "ie": "slickdeque"},
        "streams": {s: {"rate": RATE_HZ / 1000} for s in ("mf01", "mf02", "mf03")},
        "data": {"path": str(data)},
        "run": {
            "mode": "live",
            "output_dir": str(run_dir),
            "batch_rows": BATCH_ROWS,
            "checkpoint_every": 25,
            "feed": feed,
            "answers": answers,
        },
    }
    (d / "run.yaml").write_text(yaml.safe_dump(cfg))
    env = ray_cluster.env(RAY_TMPDIR=RAY_TMP, SPARK_LOCAL_IP=hosts.hosts[0].ip)
    run = hosts.start(
        0, [sys.executable, "-m", "sim.cli", "run", "run.yaml"], env, d / "run.log", cwd=d
    )
    killer_argv = [sys.executable, str(HERE / "kill_actor.py"), ray_cluster.address, "node-0"]
    killer = hosts.run(0, [*killer_argv, str(KILL_AFTER_BATCHES), str(SAFETY_S)], env, SAFETY_S)
    try:
        assert killer.returncode == 0, killer.stdout + killer.stderr[-3000:]
        kill = json.loads(killer.stdout.strip().splitlines()[-1])
        run.wait(SAFETY_S)
        assert run.returncode == 0
    except BaseException:
        print((d / "run.log").read_text()[-4000:])
        raise
    # node-0 is pinned on host 1, and the kill landed mid-feed
    assert kill["ip"] == hosts.hosts[1].ip, kill
    total_rows = DURATION_S * RATE_HZ
    assert KILL_AFTER_BATCHES <= kill["batches"] < total_rows // BATCH_ROWS, kill

    files = [pq.read_table(data)]
    assert_answers_follow_registrations(files, {q["id"]: [q, None, None] for q in queries}, run_dir)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    ev = _events(run_dir)
    assert ev == metrics["fault_log"]["events"]
    assert [e["command"] for e in ev] == ["failure", "recovery"], ev
    f, r = ev
    assert f["node"] == r["node"] == "node-0" and f["detected_by"] == "actor died", f
    # a file run has no stream clock of its own: the key is there, its value null
    assert "event_time" in f and kill["wall_time"] <= f["wall_time"] <= r["wall_time"]
    assert f["detect_s"] >= 0, f
    assert r["action"] == "restarted", r
    if feed == "driver":  # the batches since the checkpoint, replayed from the driver's log
        assert r["batches_replayed"] >= 1, r
    else:  # the Spark job failed with the actor: the segment is pushed again (a new attempt)
        assert metrics["feed"]["pushed"]["attempts"] >= 2, metrics["feed"]["pushed"]
    assert 0 <= r["recover_s"] <= r["first_answer_s"], r
    assert metrics["fault_log"]["failures"] == 1 and metrics["fault_log"]["recoveries"] == 1
    print(
        f"\nfile run, feed {feed}, answers {answers}, Spark {master}: actor SIGKILL after {kill['batches']} "
        f"batches | detected_by {f['detected_by']} | kill to detection "
        f"{f['wall_time'] - kill['wall_time']:.2f} s | detect_s {f['detect_s']:.2f} | recover_s "
        f"{r['recover_s']:.2f} | first_answer_s {r['first_answer_s']:.2f} | batches replayed "
        f"{r['batches_replayed']}"
    )
