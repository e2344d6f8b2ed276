"""``kill PID`` stops ``weaveplace serve`` as ``ctl stop`` does (issue 36: Ray's own SIGTERM
handler printed a C++ stack and aborted the driver, with no stop event and no final flush).

One real serve process, its own Ray and Spark, 2 nodes: files arrive, queries are added, then
SIGTERM: exit 0, a ``stop`` event naming SIGTERM, the state saved; ``serve --resume``, more
files, then SIGINT and SIGTERM at once (a second signal while stopping): it ends at once
(exit 143) with the state still resumable; ``serve --resume`` again, the last files,
``ctl stop --flush``.  Every query's answers over the three runs equal the section 9 oracle
(``registered_answers``, with the T_reg the commands returned) over every row fed, none twice.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml
from support.serve_process import end_group, run_ctl, serve_log, start_serve
from support.service import drop, service_queries
from support.waiting import wait_for

from executors.churn_oracle import registered_answers
from sim.debs_generator import generate_debs

pytestmark = pytest.mark.cluster

FILE_S, N_FILES, RATE_HZ = 3, 9, 50
SAFETY_S = 300.0


def _events(run_dir):
    return [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]


@pytest.mark.scenario
def test_sigterm_stops_serve_and_it_resumes_exactly(tmp_path):
    from cluster.service.control import call

    d = tmp_path
    generate_debs(d / "all.parquet", duration_s=FILE_S * N_FILES, rate_hz=RATE_HZ, seed=3)
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
    initial = service_queries("a", 6, seed=21)
    cfg = {
        "workload": {"queries": initial},
        "cluster": {"nodes": 2},
        "placement": {"optimizers": "WG_TN", "ie": "slickdeque"},
        "streams": {s: {"rate": RATE_HZ / 1000} for s in ("mf01", "mf02", "mf03")},
        "data": {"directory": {"path": str(incoming), "poll_s": 0.2, "files_per_batch": 2}},
        "run": {"mode": "live", "output_dir": str(run_dir)},
    }
    (d / "live.yaml").write_text(yaml.safe_dump(cfg))
    regs = {q["id"]: [q, None, None] for q in initial}
    ray_tmp = tempfile.mkdtemp(prefix="wp-term-", dir="/tmp")  # short: Ray's socket paths
    procs = []

    def serve(*args):
        p = start_serve(list(args), d, ray_tmp)
        procs.append(p)
        wait_for(
            lambda: call(run_dir, "GET", "/status", timeout=5)["state"] == "running",
            "serve to start",
            SAFETY_S,
            proc=p,
            retry_errors=True,
        )
        return p

    def feed(k, p):
        drop(incoming, f"f{k:02d}.parquet", files[k])
        wait_for(
            lambda: call(run_dir, "GET", "/status", timeout=10)["files"] >= k + 1,
            f"file {k} fed",
            SAFETY_S,
            proc=p,
            retry_errors=True,
        )

    try:
        proc = serve("live.yaml")
        feed(0, proc)
        b = service_queries("b", 4, seed=22)
        rep = call(run_dir, "POST", "/add-queries", {"queries": b})
        for q in b:
            regs[q["id"]] = [q, rep["accepted_at"][q["stream"]], None]
        feed(1, proc)
        feed(2, proc)
        answered = pq.read_table(run_dir / "answers.parquet").num_rows
        # SIGTERM: a graceful stop, as `ctl stop` (Ray's handler would abort with a C++ stack)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(SAFETY_S) == 0, serve_log(proc)[-3000:]
        log = serve_log(proc)
        assert "stopped (SIGTERM): 3 files" in log, log[-3000:]
        assert "SIGTERM received" not in log and "Traceback" not in log, log[-3000:]
        stop = _events(run_dir)[-1]
        assert stop["command"] == "stop" and stop["reason"] == "SIGTERM", stop
        state = json.loads((run_dir / "state" / "service.json").read_text())
        assert not state.get("final")
        # answers the watermark released since the last file were flushed by the stop
        assert pq.read_table(run_dir / "answers.parquet").num_rows >= answered > 0
        end_group(proc)

        proc = serve("--resume", str(run_dir))
        feed(3, proc)
        feed(4, proc)
        # a second signal while stopping: SIGINT then SIGTERM at once ends it without a stop
        os.kill(proc.pid, signal.SIGINT)
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(SAFETY_S) == 128 + signal.SIGTERM, serve_log(proc)[-3000:]
        log = serve_log(proc)
        assert "stopped at once by SIGTERM" in log and "--resume" in log, log[-3000:]
        assert "Traceback" not in log, log[-3000:]  # py4j's, of the interrupt it was in
        assert _events(run_dir)[-1]["command"] == "resume"  # no stop event: it did not stop
        end_group(proc)

        proc = serve("--resume", str(run_dir))
        for k in range(5, N_FILES):
            feed(k, proc)
        r = run_ctl(run_dir, d, ray_tmp, "stop", "--flush")
        assert r.returncode == 0, r.stderr
        assert proc.wait(SAFETY_S) == 0, serve_log(proc)[-3000:]
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
    cmds = [e["command"] for e in _events(run_dir) if e["command"] != "drift"]
    assert cmds == ["start", "add-queries", "stop", "resume", "resume", "stop"], cmds
    assert [e["reason"] for e in _events(run_dir) if e["command"] == "stop"] == [
        "SIGTERM",
        "stop",
    ]
