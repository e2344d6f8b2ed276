"""``weaveplace serve`` across three emulated hosts while they fail: a host crash (every process
of its namespace SIGKILLed), a network partition (its link down for longer than the failure
timeout, then up), both hosts back with new Ray nodes and used again (``ctl add-node``), and a
hang (every process of a host SIGSTOPped for longer than the timeout, then SIGCONTinued),
during which the other hosts' answers keep being committed (the hung node is silent:
``cluster.deployment.liveness``).
The driver runs on host 0 attached to the token-protected Ray cluster, the plan's three nodes
pinned one per host (workers first: node-0 on host 1, node-1 on host 2, node-2 on the head;
the added node-3 by the same round robin on host 1).  Every answer equals the section 9 oracle over every row fed (none lost,
none twice), the deployment answers the files fed after both faults, and ``events.jsonl``
lists each failure (how it was detected, seconds to detection) and its recovery (trees moved,
batches replayed, seconds to the first new answer); ``ctl status`` counts them.

It also measures (printed as a table with ``-s``; BENCHMARKS.md): per fault, the seconds to
detection, to recovery and to the first new answer (from the events), and the latency of the
files dropped while the fault lasted (drop to their answers written: the service saves its
state, file count included, right after writing a micro-batch's answers), p50 and p99,
against the files before any fault.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

import pytest
from support.service import assert_answers_follow_registrations, drop, service_queries
from support.waiting import wait_for

from hosts.netns import FAILURE_TIMEOUT_S, RAY_TMP
from hosts.serving import (
    AnswerClock,
    answers_after,
    events,
    pct,
    queries_off,
    recovered,
    split_files,
    write_serve_config,
)

pytestmark = pytest.mark.hosts

ROOT = Path(__file__).resolve().parents[2]
FILE_S, N_FILES, RATE_HZ = 3, 14, 50
SAFETY_S = 300.0


def test_serve_survives_crash_partition_hosts_back_and_hang(emulated_hosts, ray_cluster, tmp_path):
    hosts = emulated_hosts
    d = tmp_path
    files = split_files(d, FILE_S, N_FILES, RATE_HZ)
    queries = service_queries("a", 6, seed=3, streams=("mf01", "mf02"))
    incoming, run_dir = write_serve_config(d, ray_cluster.address, queries, 2, RATE_HZ)
    env = ray_cluster.env(RAY_TMPDIR=RAY_TMP, SPARK_LOCAL_IP=hosts.hosts[0].ip)
    cli = [sys.executable, "-m", "sim.cli"]
    proc = hosts.start(0, [*cli, "serve", "serve.yaml"], env, d / "serve.log", cwd=d)
    clock = AnswerClock(run_dir)
    dropped: dict[int, float] = {}
    windows: dict[str, list[float]] = {}  # fault -> [start, end] wall times

    def status() -> dict:
        r = hosts.run(0, [*cli, "ctl", str(run_dir), "status"], env, timeout=120, cwd=d)
        assert r.returncode == 0, r.stdout + r.stderr
        return json.loads(r.stdout)

    def log_tail() -> str:
        return (d / "serve.log").read_text()[-3000:]

    try:
        wait_for(
            lambda: (run_dir / "control.json").exists() and status()["state"] == "running",
            "serve to start",
            SAFETY_S,
            proc=proc,
            retry_errors=True,
            interval=1.0,
        )
        plan = json.loads((run_dir / "plan_current.json").read_text())
        assert all(n["trees"] for n in plan["nodes"]), "every plan node hosts a tree"

        def feed(ks):
            for k in ks:
                dropped[k] = time.time()
                drop(incoming, f"f{k:02d}.parquet", files[k])
            wait_for(
                lambda: ks[-1] in clock.seen, f"files up to {ks[-1]} answered", SAFETY_S, proc=proc
            )

        feed([0, 1, 2, 3])
        # a host crash: every process of host 2 (its raylet, node-1's actor) killed
        windows["host crash"] = [time.time()]
        assert hosts.signal_host(2, signal.SIGKILL)
        feed([4, 5])
        wait_for(lambda: recovered(run_dir, "node-1"), "node-1 recovered", SAFETY_S, proc=proc)
        windows["host crash"].append(time.time())
        # a partition: host 1 cut off for longer than the failure timeout, then back
        windows["partition"] = [time.time()]
        hosts.link(1, up=False)
        t_cut = time.monotonic()
        feed([6, 7])
        wait_for(lambda: recovered(run_dir, "node-0"), "node-0 recovered", SAFETY_S, proc=proc)
        windows["partition"].append(time.time())
        time.sleep(max(0.0, FAILURE_TIMEOUT_S + 2 - (time.monotonic() - t_cut)))
        hosts.link(1, up=True)
        # both hosts come back (host 1's old Ray, told it is dead, is ended like a reboot) with
        # new Ray nodes, and the deployment uses one again: add-node pins node-3 on host 1
        hosts.signal_host(1, signal.SIGKILL)
        ray_cluster.start_node(1)
        ray_cluster.start_node(2)
        ray_cluster.wait_alive([h.ip for h in hosts.hosts])
        r = hosts.run(0, [*cli, "ctl", str(run_dir), "add-node"], env, cwd=d)
        assert r.returncode == 0, r.stdout + r.stderr
        added = json.loads(r.stdout)
        assert added["node"] == "node-3" and added["moved"], added
        feed([8, 9])
        # a hang: every process of host 1 stopped for longer than the failure timeout
        hang_et = int(status()["event_time"])
        others = queries_off(run_dir, "node-3")
        windows["hang"] = [time.time()]
        hosts.signal_host(1, signal.SIGSTOP)
        t_stop = time.monotonic()
        for k in (10, 11):
            dropped[k] = time.time()
            drop(incoming, f"f{k:02d}.parquet", files[k])
        # until node-3 is declared lost, the other hosts' answers keep being committed
        flowing = 0
        while not any(e["command"] == "failure" and e["node"] == "node-3" for e in events(run_dir)):
            flowing = max(flowing, answers_after(run_dir, hang_et, others))
            assert time.monotonic() - t_stop < SAFETY_S and proc.poll() is None
            time.sleep(0.2)
        assert flowing > 0, "no answer of the other hosts while node-3 was silent"
        wait_for(lambda: 11 in clock.seen, "files up to 11 answered", SAFETY_S, proc=proc)
        wait_for(lambda: recovered(run_dir, "node-3"), "node-3 recovered", SAFETY_S, proc=proc)
        windows["hang"].append(time.time())
        time.sleep(max(0.0, FAILURE_TIMEOUT_S + 2 - (time.monotonic() - t_stop)))
        hosts.signal_host(1, signal.SIGCONT)
        feed([12, 13])  # still answering after every fault
        st = status()
        assert st["faults"]["failures"] == 3 and st["faults"]["recoveries"] == 3
        assert st["faults"]["recovering"] == []
        r = hosts.run(0, [*cli, "ctl", str(run_dir), "stop", "--flush"], env, cwd=d)
        assert r.returncode == 0, r.stdout + r.stderr
        proc.wait(SAFETY_S)
        assert proc.returncode == 0, log_tail()
    except BaseException:
        print(log_tail())
        raise
    finally:
        clock.stop.set()

    regs = {q["id"]: [q, None, None] for q in queries}
    assert_answers_follow_registrations(files, regs, run_dir)
    ev = events(run_dir)
    fails = {e["node"]: e for e in ev if e["command"] == "failure"}
    recs = {e["node"]: e for e in ev if e["command"] == "recovery"}
    assert set(fails) == set(recs) == {"node-0", "node-1", "node-3"}, [e["command"] for e in ev]
    assert [e["node"] for e in ev if e["command"] == "add-node"] == ["node-3"]
    for node in ("node-0", "node-1", "node-3"):
        f, r = fails[node], recs[node]
        assert f["ray_node"] and f["detected_by"] in ("node marked dead", "actor died"), f
        assert f["event_time"] is not None and f["wall_time"] <= r["wall_time"]
        # detection is bounded by the failure timeout (from the last sign of life)
        assert 0 <= f["detect_s"] <= FAILURE_TIMEOUT_S + 30, f
        assert r["action"] == "re-placed" and r["trees_moved"] >= 1, r
        assert set(r["trees"].values()) <= {"node-0", "node-2"} - {node}, r  # the survivors
        assert r["batches_replayed"] >= 0 and 0 <= r["recover_s"] <= r["first_answer_s"], r
    assert [e["command"] for e in ev][0] == "start" and ev[-1]["command"] == "stop"
    latency = {k: clock.seen[k] - dropped[k] for k in dropped if k in clock.seen}
    before = [latency[k] for k in (0, 1, 2, 3)]
    print(
        f"\nfailure timeout {FAILURE_TIMEOUT_S:.0f} s; files before any fault: latency p50 "
        f"{pct(before, 50):.2f} s, p99 {pct(before, 99):.2f} s"
    )
    print(
        "fault | node | detected_by | detected after the fault (s) | detect_s | recover_s | "
        "first_answer_s | "
        "batches replayed | files during | latency p50 | latency p99"
    )
    for fault, node in (("host crash", "node-1"), ("partition", "node-0"), ("hang", "node-3")):
        f, r = fails[node], recs[node]
        t0, t1 = windows[fault]
        during = [latency[k] for k in dropped if t0 <= dropped[k] <= t1 and k in latency]
        print(
            f"{fault} | {node} | {f['detected_by']} | {f['wall_time'] - t0:.2f} | "
            f"{f['detect_s']:.2f} | {r['recover_s']:.2f}"
            f" | {r['first_answer_s']:.2f} | {r['batches_replayed']} | {len(during)} | "
            f"{pct(during, 50):.2f} | {pct(during, 99):.2f}"
        )
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["fault_log"]["failures"] == 3
    assert (
        f"a silent host is declared lost after at most {FAILURE_TIMEOUT_S:.0f} s"
        in (d / "serve.log").read_text()
    )
