"""``weaveplace run`` of a file across three emulated hosts, with a fault landing mid-feed: a node
actor's process SIGKILLed, or the host running it crashed (every process of its namespace
SIGKILLed: its Ray node, the actor, its Spark worker), hung (every process SIGSTOPped for
longer than the failure timeout, then SIGCONTinued) or cut off (its link down as long, then up).

The run is a plain YAML config attached to the hosts' token-protected Ray cluster
(``cluster.ray.address``), the driver on host 0, the plan's three nodes pinned one per host
(node-0 on host 1, where every fault lands).  ``feed: executors`` runs on Spark standalone
across the hosts (``spark_cluster``: tasks on every host push their pieces to the actors, so
a crash also ends host 1's Spark worker and a hang or partition silences it); ``feed: driver``
reads with Spark ``local[1]`` on host 0.  A second driver on host 0 (``kill_actor.py``) finds
node-0's actor in Ray's actor table by its name and waits until it has taken some feed
batches; then it SIGKILLs the actor, or the test injects the host fault.  Small batches
(``run.batch_rows``) make the feed long enough for the fault to land mid-feed.

The matrix (``CASES``): every fault kind on each feed route, each answer route seeing each
fault kind once, and a fault-free run per feed route (the wall time to compare with).  Every
answer equals the brute force over the file (none lost, none twice) and the run completes;
``metrics.json`` ``fault_log`` and the run's ``events.jsonl`` hold the same two events: the
failure (how it was detected, ``detect_s``, the event time fed by then) and the recovery
(``restarted`` on the same host after an actor kill, ``re-placed`` on the survivors after a
host fault; seconds to recovery and to the first new answer).  Detection is bounded by the
failure timeout on both feed routes (the executor route's driver watches the actors while
Spark pushes); on the driver route the feed goes on without a hung or cut-off node meanwhile
(it is silent: ``cluster.deployment.liveness``).  After a host fault the host is "rebooted" (its processes killed by pid); the
next test's fixtures start its Ray node and Spark worker again.

With ``-s`` it prints a row per run for BENCHMARKS.md's hosts section.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from support.service import assert_answers_follow_registrations, service_queries

from hosts.netns import FAILURE_TIMEOUT_S, RAY_TMP
from hosts.serving import STREAMS, attached_config, events
from sim.debs_generator import generate_debs

pytestmark = pytest.mark.hosts

HERE = Path(__file__).resolve().parent
DURATION_S, RATE_HZ, BATCH_ROWS = 200, 100, 100  # 20,000 rows: 200 feed batches
#: the batches node-0 has applied when the fault lands, per feed route (on the executor route
#: a node applies pieces in file order, in bursts as the earlier pieces complete: the first
#: applied sub-batch already means the Spark job is pushing)
FAULT_AFTER_BATCHES = {"driver": 40, "executors": 1}
SAFETY_S = 600.0
#: how long a hang or partition lasts: well past the failure timeout (Ray's health checks
#: slip on a loaded 2-core machine)
SILENT_S = FAILURE_TIMEOUT_S + 5
#: slack on the detection bound for a loaded 2-core machine
SLACK_S = 10.0

# (feed route, answer route, fault); the fault-free runs first (their wall time is compared)
CASES = [
    ("driver", "driver", "none"),
    ("executors", "driver", "none"),
    ("driver", "driver", "actor kill"),
    ("driver", "actors", "actor kill"),
    ("executors", "driver", "actor kill"),
    ("executors", "actors", "actor kill"),
    ("driver", "driver", "host crash"),
    ("driver", "actors", "hang"),
    ("driver", "driver", "partition"),
    ("executors", "actors", "host crash"),
    ("executors", "driver", "hang"),
    ("executors", "actors", "partition"),
]
HOST = 1  # node-0's host: every fault lands there
#: deployment wall seconds of the fault-free run per feed route (filled by the "none" cases)
BASELINE: dict[str, float] = {}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("file_run") / "data.parquet"
    generate_debs(path, duration_s=DURATION_S, rate_hz=RATE_HZ, seed=11)
    return path


def wait_for_node0(hosts, ray_cluster, env: dict, d: Path, batches: int, fault: str) -> dict:
    """``kill_actor.py`` on host 0: node-0's actor killed once it has applied ``batches``
    batches (``actor kill``), or only waited for; its JSON line, read as soon as it is written
    (the script's own exit, Ray's shutdown, takes seconds the feed goes on meanwhile)."""
    argv = [sys.executable, str(HERE / "kill_actor.py"), ray_cluster.address, "node-0"]
    argv += [str(batches), str(SAFETY_S)] + (["--wait"] if fault != "actor kill" else [])
    log = d / "waiter.log"
    proc = hosts.start(0, argv, env, log, cwd=d)
    deadline = time.monotonic() + SAFETY_S
    while True:
        lines = [x for x in log.read_text().splitlines() if x.startswith("{")]
        if lines:
            return json.loads(lines[-1])
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"kill_actor.py: {log.read_text()[-3000:]}")
        time.sleep(0.05)


def inject(hosts, fault: str) -> None:
    """The host fault on ``HOST``, returning once it is over (the host continued or
    reconnected; a crashed host stays down)."""
    if fault == "host crash":
        assert hosts.signal_host(HOST, signal.SIGKILL)
    elif fault == "hang":
        assert hosts.signal_host(HOST, signal.SIGSTOP)
        time.sleep(SILENT_S)
        hosts.signal_host(HOST, signal.SIGCONT)
    elif fault == "partition":
        hosts.link(HOST, up=False)
        time.sleep(SILENT_S)
        hosts.link(HOST, up=True)


@pytest.mark.parametrize(("feed", "answers", "fault"), CASES, ids=lambda x: x.replace(" ", "-"))
def test_file_run_survives_a_fault_mid_feed(
    emulated_hosts, ray_cluster, data, tmp_path, request, feed, answers, fault
):
    hosts, d = emulated_hosts, tmp_path
    master = "local[1]"
    if feed == "executors":  # every host's Spark worker up (an earlier crash ended one)
        master = request.getfixturevalue("spark_cluster").master
    queries = service_queries("q", 6, seed=7, streams=STREAMS)
    run_dir = d / "run"
    run = {
        "output_dir": str(run_dir),
        "batch_rows": BATCH_ROWS,
        "checkpoint_every": 25,
        "feed": feed,
        "answers": answers,
    }
    cfg = attached_config(
        ray_cluster.address,
        queries,
        {"path": str(data)},
        run,
        rate_hz=RATE_HZ,
        spark_master=master,
    )
    (d / "run.yaml").write_text(yaml.safe_dump(cfg))
    env = ray_cluster.env(RAY_TMPDIR=RAY_TMP, SPARK_LOCAL_IP=hosts.hosts[0].ip)
    t_start = time.time()
    proc = hosts.start(
        0, [sys.executable, "-m", "sim.cli", "run", "run.yaml"], env, d / "run.log", cwd=d
    )
    try:
        if fault != "none":
            hit = wait_for_node0(hosts, ray_cluster, env, d, FAULT_AFTER_BATCHES[feed], fault)
            t_fault = hit["wall_time"]
            if fault != "actor kill":
                t_fault = time.time()
                inject(hosts, fault)
        proc.wait(SAFETY_S)
        assert proc.returncode == 0
    except BaseException:
        print((d / "run.log").read_text()[-4000:])
        raise
    finally:
        if fault not in ("none", "actor kill"):  # reboot the host: whatever it ran is over
            hosts.link(HOST, up=True)
            hosts.signal_host(HOST, signal.SIGCONT)
            hosts.signal_host(HOST, signal.SIGKILL)
    wall = time.time() - t_start

    table = pq.read_table(data)
    assert_answers_follow_registrations(
        [table], {q["id"]: [q, None, None] for q in queries}, run_dir
    )
    metrics = json.loads((run_dir / "metrics.json").read_text())
    ev = events(run_dir)
    assert ev == metrics["fault_log"]["events"]
    if fault == "none":
        assert ev == [] and metrics["fault_log"]["failures"] == 0
        BASELINE[feed] = metrics["wall_s"]
        print(
            f"\nfile run, feed {feed}, answers {answers}, no fault | wall {wall:.1f} s | "
            f"deployment wall_s {metrics['wall_s']:.2f}"
        )
        return
    # node-0 is pinned on host 1, and the fault landed mid-feed
    assert hit["ip"] == hosts.hosts[HOST].ip, hit
    total = DURATION_S * RATE_HZ // BATCH_ROWS
    assert FAULT_AFTER_BATCHES[feed] <= hit["batches"] < total, hit
    assert [e["command"] for e in ev] == ["failure", "recovery"], ev
    f, r = ev
    assert f["node"] == r["node"] == "node-0", f
    assert t_fault <= f["wall_time"] <= r["wall_time"]
    # detection bounded by the failure timeout, counted from the node's last sign of life
    found_after = f["wall_time"] - t_fault
    assert found_after <= FAILURE_TIMEOUT_S + SLACK_S, (found_after, f)
    assert f["detect_s_from"] == "last sign of life" and 0 <= f["detect_s"], f
    assert f["detect_s"] <= FAILURE_TIMEOUT_S + SLACK_S, f
    # the newest event time fed by then (ms of the file), no later at the recovery
    ts = table.column("ts_ms")
    first, last = ts[0].as_py(), ts[-1].as_py()
    assert f["event_time"] is not None and first <= f["event_time"] <= last, f
    assert f["event_time"] <= r["event_time"] <= last, r
    survivors = {"node-1", "node-2"}
    if fault == "actor kill":  # a new actor on the same host, from the checkpoint
        assert f["detected_by"] == "actor died" and r["action"] == "restarted", (f, r)
        assert set(r["trees"].values()) == {"node-0"}, r
    else:  # the Ray node is gone: its trees moved to the survivors
        assert f["detected_by"] in ("node marked dead", "actor died"), f
        assert r["action"] == "re-placed" and r["trees_moved"] >= 1, r
        assert set(r["trees"].values()) <= survivors, r
        assert metrics["lost_nodes"] and "node-0" in metrics["lost_nodes"], metrics["lost_nodes"]
    if feed == "executors":  # the job pushing to the actor was cancelled: pushed again
        assert metrics["feed"]["pushed"]["attempts"] >= 2, metrics["feed"]["pushed"]
    elif fault in ("hang", "partition"):  # node-0 silent: the feed went on without it
        # (cluster.deployment.liveness), its batches waiting in the replay log
        assert hit["batches"] < f["batch"] <= metrics["batches"], (hit, f)
        assert r["batches_replayed"] >= 1, r
    else:  # found while the driver fed (not at the end of input)
        assert f["batch"] < total, f
        if fault == "actor kill":  # the batches since the checkpoint, replayed from the log
            assert r["batches_replayed"] >= 1, r
    assert 0 <= r["recover_s"] <= r["first_answer_s"], r
    assert metrics["fault_log"]["failures"] == 1 and metrics["fault_log"]["recoveries"] == 1
    base = BASELINE.get(feed)
    print(
        f"\nfile run | {fault} | feed {feed} | answers {answers} | after {hit['batches']} batches "
        f"| {f['detected_by']} | fault to detection {found_after:.2f} s | detect_s "
        f"{f['detect_s']:.2f} | recover_s {r['recover_s']:.2f} | first_answer_s "
        f"{r['first_answer_s']:.2f} | replayed {r['batches_replayed']} | deployment wall_s "
        f"{metrics['wall_s']:.2f} vs {base if base is None else f'{base:.2f}'} without a fault"
        f" | process wall {wall:.1f} s"
    )
