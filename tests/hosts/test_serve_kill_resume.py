"""``weaveplace serve`` across three emulated hosts: one node actor's process SIGKILLed behind
its back (found in Ray's actor table on its host, ``kill_actor.py``), then the driver itself
killed (SIGKILL, its process group with its Spark) and ``serve --resume RUN_DIR`` started on
the head host again, attached to the same Ray cluster.

Every answer equals the section 9 oracle over every row fed (none lost, none twice), the
resumed deployment answers the files dropped after it, ``events.jsonl`` lists the failure
(``actor died``) and the recovery (``restarted``: a new actor on the same host from its
checkpoint), then ``resume``.  With ``-s`` it prints the figures for BENCHMARKS.md: seconds
from the kill to detection, to the first new answer, and the latency of the files dropped
while each fault lasted (drop to answers written), p50 and p99.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from support.service import assert_answers_follow_registrations, drop, service_queries
from support.waiting import wait_for

from hosts.netns import RAY_TMP
from hosts.serving import (
    AnswerClock,
    events,
    pct,
    recovered,
    split_files,
    write_serve_config,
)

pytestmark = pytest.mark.hosts

HERE = Path(__file__).resolve().parent
FILE_S, N_FILES, RATE_HZ = 3, 10, 50
SAFETY_S = 300.0


def _end_group(proc) -> None:
    """The driver's process group (the driver, its Spark JVM): by its id, never by name."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(30)


def test_serve_actor_sigkill_then_driver_killed_and_resumed(emulated_hosts, ray_cluster, tmp_path):
    hosts, d = emulated_hosts, tmp_path
    files = split_files(d, FILE_S, N_FILES, RATE_HZ, seed=9)
    queries = service_queries("s", 6, seed=4, streams=("mf01", "mf02"))
    incoming, run_dir = write_serve_config(d, ray_cluster.address, queries, 1, RATE_HZ)
    env = ray_cluster.env(RAY_TMPDIR=RAY_TMP, SPARK_LOCAL_IP=hosts.hosts[0].ip)
    cli = [sys.executable, "-m", "sim.cli"]
    procs = [hosts.start(0, [*cli, "serve", "serve.yaml"], env, d / "serve-1.log", cwd=d)]
    clock = AnswerClock(run_dir)
    dropped: dict[int, float] = {}
    windows: dict[str, list[float]] = {}

    def status() -> dict:
        r = hosts.run(0, [*cli, "ctl", str(run_dir), "status"], env, timeout=120, cwd=d)
        assert r.returncode == 0, r.stdout + r.stderr
        return json.loads(r.stdout)

    def running():
        wait_for(
            lambda: (run_dir / "control.json").exists() and status()["state"] == "running",
            "serve to run",
            SAFETY_S,
            proc=procs[-1],
            retry_errors=True,
            interval=1.0,
        )

    def feed(ks):
        for k in ks:
            dropped[k] = time.time()
            drop(incoming, f"f{k:02d}.parquet", files[k])
        wait_for(lambda: ks[-1] in clock.seen, f"file {ks[-1]} answered", SAFETY_S, proc=procs[-1])

    try:
        running()
        feed([0, 1])
        # node-0's actor SIGKILLed: the one node actor in Ray's actor table on host 1 (serve's
        # actors have no names; node-0 is pinned there)
        killer = [sys.executable, str(HERE / "kill_actor.py"), ray_cluster.address, "node-0"]
        r = hosts.run(0, [*killer, "0", "120", hosts.hosts[1].ip], env, timeout=180)
        assert r.returncode == 0, r.stdout + r.stderr[-3000:]
        kill = json.loads(r.stdout.strip().splitlines()[-1])
        assert kill["ip"] == hosts.hosts[1].ip, kill
        windows["actor SIGKILL"] = [kill["wall_time"]]
        feed([2, 3])
        wait_for(lambda: recovered(run_dir, "node-0"), "node-0 recovered", SAFETY_S)
        windows["actor SIGKILL"].append(time.time())
        feed([4])
        # the driver killed right after a file lands (possibly mid micro-batch), then resumed
        windows["driver killed"] = [time.time()]
        dropped[5] = time.time()
        drop(incoming, "f05.parquet", files[5])
        time.sleep(0.3)
        os.kill(procs[-1].pid, signal.SIGKILL)
        _end_group(procs[-1])
        resume = [*cli, "serve", "--resume", str(run_dir)]
        procs.append(hosts.start(0, resume, env, d / "serve-2.log", cwd=d))
        running()
        wait_for(lambda: 5 in clock.seen, "file 5 answered after resume", SAFETY_S, proc=procs[-1])
        windows["driver killed"].append(time.time())
        feed([6, 7])
        feed([8, 9])  # still answering
        st = status()
        assert st["faults"]["recovering"] == []
        r = hosts.run(0, [*cli, "ctl", str(run_dir), "stop", "--flush"], env, cwd=d)
        assert r.returncode == 0, r.stdout + r.stderr
        procs[-1].wait(SAFETY_S)
        assert procs[-1].returncode == 0
    except BaseException:
        for log in sorted(d.glob("serve-*.log")):
            print(f"--- {log.name}\n{log.read_text()[-3000:]}")
        raise
    finally:
        clock.stop.set()
        for p in procs:
            if p.poll() is None:
                _end_group(p)

    assert_answers_follow_registrations(files, {q["id"]: [q, None, None] for q in queries}, run_dir)
    ev = events(run_dir)
    cmds = [e["command"] for e in ev if e["command"] != "drift"]
    assert cmds == ["start", "failure", "recovery", "resume", "stop"], cmds
    f = next(e for e in ev if e["command"] == "failure")
    rec = next(e for e in ev if e["command"] == "recovery")
    assert f["node"] == rec["node"] == "node-0" and f["detected_by"] == "actor died", f
    assert kill["wall_time"] <= f["wall_time"] <= rec["wall_time"] and f["event_time"] is not None
    assert rec["action"] == "restarted" and 0 <= rec["recover_s"] <= rec["first_answer_s"], rec
    latency = {k: clock.seen[k] - dropped[k] for k in dropped if k in clock.seen}
    before = [latency[k] for k in (0, 1)]
    print(
        f"\nserve: files before any fault: latency p50 {pct(before, 50):.2f} s, "
        f"p99 {pct(before, 99):.2f} s"
    )
    print(
        "fault | detected_by | detected after the fault (s) | first_answer_s | files during "
        "| latency p50 | latency p99"
    )
    for fault, (t0, t1) in windows.items():
        during = [latency[k] for k in dropped if t0 <= dropped[k] <= t1 and k in latency]
        det = f"{f['detected_by']} | {f['wall_time'] - t0:.2f} | {rec['first_answer_s']:.2f}"
        if fault == "driver killed":
            det = "(no driver) | - | -"
        print(f"{fault} | {det} | {len(during)} | {pct(during, 50):.2f} | {pct(during, 99):.2f}")
