"""The ``weaveplace serve`` tests' shared parts: the queries they register, files dropped into
the watched directory, raw HTTP requests to the control server, and the oracle for the answers
of queries that come and go (docs/DESIGN.md s. 9: ``executors.churn_oracle.registered_answers``).
"""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from executors.churn_oracle import registered_answers


def service_queries(prefix, n, seed, streams=("mf01", "mf02", "mf03")):
    """``n`` time queries ``<prefix>0..`` over ``streams`` in turn: slides of 200-1000 ms, ranges
    of 1-3 slides (every third one not a multiple of its slide), the aggregates in turn."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        s = int(rng.choice([200, 250, 500, 1000]))
        r = s * int(rng.integers(1, 4)) + (int(rng.integers(1, s)) if i % 3 == 0 else 0)
        out.append(
            {
                "id": f"{prefix}{i}",
                "stream": streams[i % len(streams)],
                "aggregate": ["sum", "max", "avg", "min", "count"][i % 5],
                "range": r,
                "slide": s,
                "kind": "time",
            }
        )
    return out


def drop(directory: Path, name: str, table: pa.Table) -> None:
    """Put ``table`` in ``directory`` as ``name`` atomically (written under a hidden name, then
    renamed), 20 ms after the previous drop so modification times keep the arrival order."""
    tmp = directory / f".{name}.tmp"
    pq.write_table(table, tmp)
    os.replace(tmp, directory / name)
    time.sleep(0.02)


def raw_request(url, token=None, method="GET", body=None):
    """An HTTP request to the control server as ``(status, body)``, error statuses included."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def assert_answers_follow_registrations(files, regs: dict, run_dir: Path) -> None:
    """``answers.parquet`` equals the section 9 oracle: each registration ``(query, accepted
    at, removed at)`` answered over every row of ``files`` (the tables dropped)."""
    allt = pa.concat_tables(files)
    want = []
    for q, a, b in regs.values():
        want += registered_answers(
            [(q, a, b)], allt.column("ts_ms").to_numpy(), allt.column(q["stream"]).to_numpy()
        )
    want.sort(key=lambda x: (x[0], x[1]))
    got = pq.read_table(run_dir / "answers.parquet").sort_by(
        [("query_id", "ascending"), ("window_start", "ascending")]
    )
    d = got.to_pydict()
    assert list(zip(d["query_id"], d["window_start"], d["window_end"])) == [w[:3] for w in want]
    np.testing.assert_allclose(d["value"], [float(w[3]) for w in want], rtol=1e-9)


def serve_in_thread(config_path, resume, spark):
    """``weaveplace serve`` in this process (the session's Ray and Spark) on a thread: returns
    the config, the thread and a box with ``said`` (lines it printed), and ``stats`` at its end
    or ``error`` when it failed (``serve_running`` raises it)."""
    import threading

    from sim.serve_start import prepare, run_service

    cfg, run_dir, state, text, base = prepare(config_path, resume)
    box: dict = {"said": []}

    def go():
        try:
            box["stats"] = run_service(
                cfg, run_dir, state, text, base, spark=spark, say=box["said"].append
            )
        except BaseException as e:  # shown by serve_running, which waits for the start
            box["error"] = e

    th = threading.Thread(target=go, daemon=True)
    th.start()
    return cfg, th, box


def serve_running(run_dir, box) -> bool:
    """True once the service in ``box`` answers ``running``; raises what it failed with."""
    from cluster.service.control import ControlError, call

    if "error" in box:
        raise AssertionError(f"serve failed: {box['error']!r}")
    try:
        return call(run_dir, "GET", "/status", timeout=5)["state"] == "running"
    except ControlError:
        return False


def serve_config(queries, incoming: Path, run_dir: Path, **run) -> dict:
    """The small in-process serve config the service tests share: two nodes, WG_TN over
    SlickDeque, the watched directory ``incoming`` polled every 0.2 s, two files a batch, 64-row
    feed batches; ``run`` adds or overrides ``run`` keys (e.g. ``feed_mode``)."""
    return {
        "workload": {"queries": queries},
        "streams": {s: {"rate": 0.05} for s in ("mf01", "mf02", "mf03")},
        "cluster": {"nodes": 2},
        "placement": {"optimizers": "WG_TN", "ie": "slickdeque", "max_moves": 10},
        "data": {"directory": {"path": str(incoming), "poll_s": 0.2, "files_per_batch": 2}},
        "run": {"mode": "live", "output_dir": str(run_dir), "batch_rows": 64, **run},
    }
