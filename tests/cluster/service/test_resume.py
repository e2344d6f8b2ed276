"""The deployment that lives, end to end: ``weaveplace serve`` as a real process
with its own Ray and Spark, 3 nodes; while files arrive: add 20 queries, remove 5, add a node,
retire another, ``kill -9`` the driver, ``serve --resume``, add 5 more, stop.  Every query's
answers equal the section 9 oracle (``registered_answers``, with the T_reg / T_unreg the
commands returned) over every row fed; nothing is late (files arrive in time order);
events.jsonl lists every change; plan_current.json verifies.

One test, two driver processes (~1-2 min: each starts Ray and Spark).  The driver runs in its
own process group; after ``kill -9`` of the driver, what it left (Ray, the JVM) is ended by that
group id.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml
from support.serve_process import ctl_started, end_group, finished, run_ctl, start_serve
from support.service import drop, service_queries
from support.waiting import wait_for

from executors.churn_oracle import registered_answers
from sim.debs_generator import generate_debs

pytestmark = pytest.mark.cluster

FILE_S, N_FILES, RATE_HZ = 3, 12, 50
SAFETY_S = 300.0


@pytest.mark.scenario
def test_serve_kill_resume(tmp_path):
    from cluster.service.control import call
    from placement.plan import verify_plan

    d = tmp_path
    generate_debs(d / "all.parquet", duration_s=FILE_S * N_FILES, rate_hz=RATE_HZ, seed=5)
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
    initial = service_queries("a", 8, seed=11)
    cfg = {
        "workload": {"queries": initial},
        "cluster": {"nodes": 3},
        "placement": {"optimizers": "WG_TN", "ie": "slickdeque"},
        "streams": {s: {"rate": RATE_HZ / 1000} for s in ("mf01", "mf02", "mf03")},
        "data": {"directory": {"path": str(incoming), "poll_s": 0.2, "files_per_batch": 2}},
        "run": {"mode": "live", "output_dir": str(run_dir)},
    }
    (d / "live.yaml").write_text(yaml.safe_dump(cfg))
    regs = {q["id"]: [q, None, None] for q in initial}
    ray_tmp = tempfile.mkdtemp(prefix="wp-serve-", dir="/tmp")  # short: Ray's socket paths
    proc = start_serve(["live.yaml"], d, ray_tmp)
    procs = [proc]
    try:
        wait_for(
            lambda: call(run_dir, "GET", "/status", timeout=5)["state"] == "running",
            "serve to start",
            SAFETY_S,
            proc=proc,
            retry_errors=True,
        )

        def feed(k, p):
            drop(incoming, f"f{k:02d}.parquet", files[k])
            wait_for(
                lambda: call(run_dir, "GET", "/status", timeout=10)["files"] >= k + 1,
                f"file {k} fed",
                SAFETY_S,
                proc=p,
                retry_errors=True,
            )

        feed(0, proc)
        # 20 queries, the first 10 through `weaveplace ctl add-queries FILE.yaml`
        b = service_queries("b", 20, seed=12)
        (d / "b.yaml").write_text(yaml.safe_dump({"queries": b[:10]}))
        r = run_ctl(run_dir, d, ray_tmp, "add-queries", str(d / "b.yaml"))
        assert r.returncode == 0, r.stderr
        rep = json.loads(r.stdout)
        for q in b[:10]:
            regs[q["id"]] = [q, rep["accepted_at"][q["stream"]], None]
        feed(1, proc)
        rep = call(run_dir, "POST", "/add-queries", {"queries": b[10:]})
        for q in b[10:]:
            regs[q["id"]] = [q, rep["accepted_at"][q["stream"]], None]
        refused = ctl_started(run_dir, d, ray_tmp, "remove-queries", "nope")  # while file 2 is fed
        feed(2, proc)
        r = finished(refused)  # refused: exit 2, one line
        assert r.returncode == 2 and "unknown query" in r.stderr + r.stdout
        gone = ["a0", "a3", "b1", "b7", "b15"]
        rep = call(run_dir, "POST", "/remove-queries", {"ids": gone})
        for g in gone:
            regs[g][2] = rep["removed_at"][regs[g][0]["stream"]]
        feed(3, proc)
        rep = call(run_dir, "POST", "/add-node", {"id": "node-new"})
        assert rep["node"] == "node-new"
        feed(4, proc)
        r = run_ctl(run_dir, d, ray_tmp, "retire-node", "node-1")
        assert r.returncode == 0, r.stderr
        refused = ctl_started(run_dir, d, ray_tmp, "retire-node", "node-1")  # while file 5 is fed
        feed(5, proc)
        assert finished(refused).returncode == 2
        feed(6, proc)
        st = call(run_dir, "GET", "/status")
        assert set(st["nodes"]) == {"node-0", "node-2", "node-new"}
        # kill -9 the driver right after a file lands (possibly mid micro-batch)
        drop(incoming, "f07.parquet", files[7])
        time.sleep(0.3)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        end_group(proc)
        proc = start_serve(["--resume", str(run_dir)], d, ray_tmp)
        procs.append(proc)
        wait_for(
            lambda: call(run_dir, "GET", "/status", timeout=5)["state"] == "running",
            "serve --resume to start",
            SAFETY_S,
            proc=proc,
            retry_errors=True,
        )
        wait_for(
            lambda: call(run_dir, "GET", "/status", timeout=10)["files"] >= 8,
            "file 7",
            SAFETY_S,
            proc=proc,
            retry_errors=True,
        )
        c = service_queries("c", 5, seed=13)
        rep = call(run_dir, "POST", "/add-queries", {"queries": c})
        for q in c:
            regs[q["id"]] = [q, rep["accepted_at"][q["stream"]], None]
        for k in range(8, N_FILES):
            feed(k, proc)
        r = run_ctl(run_dir, d, ray_tmp, "stop", "--flush")
        assert r.returncode == 0, r.stderr
        assert proc.wait(SAFETY_S) == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(30)
            end_group(p)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    got = pq.read_table(run_dir / "answers.parquet").sort_by(
        [("query_id", "ascending"), ("window_start", "ascending")]
    )
    allt = pa.concat_tables(files)
    ts = allt.column("ts_ms").to_numpy()
    want = []
    for q, a, b_ in regs.values():
        want += registered_answers([(q, a, b_)], ts, allt.column(q["stream"]).to_numpy())
    want.sort(key=lambda x: (x[0], x[1]))
    g = got.to_pydict()
    keys = list(zip(g["query_id"], g["window_start"], g["window_end"]))
    assert len(keys) == len(set(keys)), "an answer was written twice"
    assert keys == [w[:3] for w in want]
    np.testing.assert_allclose(g["value"], [float(w[3]) for w in want], rtol=1e-9)
    assert pq.read_table(run_dir / "late.parquet").num_rows == 0
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    cmds = [e["command"] for e in events if e["command"] != "drift"]  # re-plans they caused
    assert cmds == [
        "start",
        "add-queries",
        "add-queries",
        "remove-queries",
        "add-node",
        "retire-node",
        "resume",
        "add-queries",
        "stop",
    ], cmds
    assert [e for e in events if e["command"] == "retire-node"][0]["trees_moved"] >= 1
    cur = json.loads((run_dir / "plan_current.json").read_text())
    assert verify_plan(cur) == []
    assert sorted(q["id"] for q in cur["queries"]) == sorted(
        k for k, v in regs.items() if v[2] is None
    )
    assert sorted(n["id"] for n in cur["nodes"]) == ["node-0", "node-2", "node-new"]
