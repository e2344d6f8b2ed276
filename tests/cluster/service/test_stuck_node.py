"""A stuck node actor on a healthy host, end to end: ``weaveplace serve`` as a real process on
3 nodes, files arriving every second; node-1's actor process is stopped (SIGSTOP) and never
continued.  Ray sees nothing wrong; the health check (cluster/deployment/liveness.py) must:

* keep the other nodes answering: answers of node-0's and node-2's queries with windows
  ending after the stop are written before node-1 is declared stuck;
* declare node-1 stuck within ``cluster.call_timeout_s`` + 5 s (a ``failure`` event
  ``detected_by: deadline``), kill and restart it (a ``recovery`` event);
* keep the control API answering: every ``status`` within 1 s, naming the silent node;
* and at the end every answer equals the brute force, none written twice.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml
from support.service import assert_answers_follow_registrations, drop, service_queries
from support.waiting import wait_for

from sim.debs_generator import generate_debs

pytestmark = [pytest.mark.cluster, pytest.mark.scenario]

ROOT = Path(__file__).resolve().parents[3]
FILE_S, N_FILES, RATE_HZ = 2, 24, 50
CALL_TIMEOUT_S = 8.0
SAFETY_S = 300.0


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="wp-stuck-", dir="/tmp")
    env.setdefault("NUMBA_CACHE_DIR", str(ROOT / ".cache" / "numba"))
    return env


def _node_queries(plan: dict, nid: str) -> set[str]:
    trees = [t for n in plan["nodes"] if n["id"] == nid for t in n["trees"]]
    return {q if isinstance(q, str) else q["id"] for t in trees for q in t["queries"]}


def test_serve_goes_on_while_a_node_actor_is_stuck(tmp_path):
    from cluster.service.control import call

    d = tmp_path
    generate_debs(d / "all.parquet", duration_s=FILE_S * N_FILES, rate_hz=RATE_HZ, seed=9)
    t = pq.read_table(d / "all.parquet")
    rel = pc.subtract(t.column("ts_ms"), int(t.column("ts_ms")[0].as_py()))
    files = [
        t.filter(
            pc.and_(pc.greater_equal(rel, k * FILE_S * 1000), pc.less(rel, (k + 1) * FILE_S * 1000))
        )
        for k in range(N_FILES)
    ]
    incoming, run_dir = d / "in", d / "run"
    incoming.mkdir()
    queries = service_queries("q", 30, seed=21)
    cfg = {
        "workload": {"queries": queries},
        "cluster": {"nodes": 3, "call_timeout_s": CALL_TIMEOUT_S},
        "placement": {"optimizers": "WG_TN", "ie": "slickdeque"},
        "streams": {s: {"rate": RATE_HZ / 1000} for s in ("mf01", "mf02", "mf03")},
        "data": {"directory": {"path": str(incoming), "poll_s": 0.2, "files_per_batch": 1}},
        "run": {"mode": "live", "output_dir": str(run_dir)},
    }
    (d / "live.yaml").write_text(yaml.safe_dump(cfg))
    env = _env()
    log = open(d / "serve.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "sim.cli", "serve", "live.yaml"],
        cwd=d,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    box: dict = {"latency": [], "silent_seen": False, "during": 0, "errors": []}
    stop_polling = threading.Event()
    pid = None

    def poll_status():
        """``status`` every 0.25 s: its latency; after the stop, until the failure event, the
        answers of the other nodes' queries with windows ending after the stop."""
        while not stop_polling.is_set():
            t0 = time.monotonic()
            try:
                st = call(run_dir, "GET", "/status", timeout=5)
            except Exception as e:  # a status that did not come within 5 s
                box["errors"].append(repr(e))
                st = None
            box["latency"].append(time.monotonic() - t0)
            if st is not None and "stopped_at" in box and "detected" not in box:
                dp = st["data_path"]
                if "node-1" in dp["silent"] + dp["behind"]:
                    box["silent_seen"] = True
                fails = [
                    e for e in st.get("faults", {}).get("latest", []) if e["command"] == "failure"
                ]
                if fails:
                    box["detected"] = fails[0]
                else:
                    ans = pq.read_table(run_dir / "answers.parquet")
                    later = ans.filter(
                        pc.and_(
                            pc.greater(ans.column("window_end"), box["stopped_et"]),
                            pc.is_in(ans.column("query_id"), value_set=box["others"]),
                        )
                    )
                    box["during"] = max(box["during"], later.num_rows)
            time.sleep(0.25)

    poller = threading.Thread(target=poll_status, daemon=True)
    try:
        wait_for(
            lambda: call(run_dir, "GET", "/status", timeout=5)["state"] == "running",
            "serve to start",
            SAFETY_S,
            proc=proc,
            retry_errors=True,
        )
        poller.start()
        for k in range(N_FILES):
            drop(incoming, f"f{k:02d}.parquet", files[k])
            if k == 5:
                wait_for(
                    lambda: call(run_dir, "GET", "/status", timeout=5)["files"] >= 6,
                    "six files fed",
                    SAFETY_S,
                    proc=proc,
                )
                st = call(run_dir, "GET", "/status", timeout=5)
                plan = json.loads((run_dir / "plan_current.json").read_text())
                import pyarrow as pa

                box["others"] = pa.array(
                    sorted(_node_queries(plan, "node-0") | _node_queries(plan, "node-2"))
                )
                box["stopped_et"] = int(st["event_time"])
                pid = int(st["nodes"]["node-1"]["health"]["pid"])
                os.kill(pid, signal.SIGSTOP)
                box["stopped_at"] = time.time()
            time.sleep(1.0)
        wait_for(
            lambda: call(run_dir, "GET", "/status", timeout=5)["files"] >= N_FILES,
            "every file fed",
            SAFETY_S,
            proc=proc,
        )
        stop_polling.set()
        poller.join(10)
        r = call(run_dir, "POST", "/stop", {"flush": True}, timeout=60)
        assert r["stopping"]
        assert proc.wait(SAFETY_S) == 0
    finally:
        stop_polling.set()
        if pid is not None:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)
    # the control API answered within 1 s throughout, and said which node was silent
    assert box["errors"] == [] and len(box["latency"]) > 20
    assert max(box["latency"]) < 1.0, sorted(box["latency"])[-5:]
    assert box["silent_seen"]
    # declared within call_timeout_s + 5 s, by its deadline, and restarted
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    fails = [e for e in events if e["command"] == "failure"]
    assert [(e["node"], e["detected_by"]) for e in fails] == [("node-1", "deadline")]
    assert fails[0]["wall_time"] - box["stopped_at"] <= CALL_TIMEOUT_S + 5
    assert CALL_TIMEOUT_S <= fails[0]["detect_s"] <= CALL_TIMEOUT_S + 5
    recs = [e for e in events if e["command"] == "recovery"]
    assert [(e["node"], e["action"]) for e in recs] == [("node-1", "restarted")]
    # the other nodes' answers kept coming while node-1 was silent, before its verdict
    assert "detected" in box and box["during"] > 0
    # every answer equals the brute force, none twice
    regs = {q["id"]: (q, None, None) for q in queries}
    assert_answers_follow_registrations(files, regs, run_dir)
