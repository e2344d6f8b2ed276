"""``weaveplace bench serve``: a deployment under query churn (queries, nodes and files that
come and go) measured for latency, cost drift and recovery.

(a) churn: ``queries`` queries added one every ``add_every_s`` seconds to a deployment of
``nodes`` (3) nodes while DEBS-style files (``file_s`` seconds of data each, 100 Hz) are dropped
at ``speed`` x real time; reported: answer latency (a file's arrival -> the answers it released
written), p50/p99; the running plan's TotalCost/MaxCost vs a fresh plan (offline WeaveShare + the
configured optimizer) of the final queries; trees moved in all; driver and actor memory at start
and end.
(b) control latency: ``add-queries`` of one query with all of them running.
(c) resume: ``stop``, then ``weaveplace serve --resume`` in a new process: seconds to the first
new answer part (Ray and Spark start-up included).

The deployment is ``sim.serve_start.run_service`` (what ``weaveplace serve`` runs) in a thread of
this process, driven through its control API like a user would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

SLIDES = (500, 1000, 2000, 5000)
AGGS = ("sum", "max", "min", "avg", "count")
STREAMS = ("mf01", "mf02", "mf03")


def make_queries(prefix: str, n: int, seed: int) -> list[dict]:
    """DEBS-style queries: ranges 1-6 slides, a third with ``r mod s != 0``."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        s = int(rng.choice(SLIDES))
        r = s * int(rng.integers(1, 7)) + (
            int(rng.integers(1, s // 100)) * 100 if i % 3 == 0 else 0
        )
        out.append(
            {
                "id": f"{prefix}{i:04d}",
                "stream": STREAMS[int(rng.integers(0, 3))],
                "aggregate": AGGS[int(rng.integers(0, len(AGGS)))],
                "range": r,
                "slide": s,
                "kind": "time",
            }
        )
    return out


def _pct(xs, q):
    return float(np.percentile(np.asarray(xs), q)) if len(xs) else None


@dataclass(frozen=True)
class ServeBenchOptions:
    """The churn of ``run_serve_bench`` (module docstring): ``initial`` queries at the start,
    ``queries`` more added one every ``add_every_s`` seconds, files of ``file_s`` seconds of
    data dropped at ``speed`` x real time; ``control_samples`` add-queries timed; ``resume``:
    also time ``serve --resume`` to the first answer."""

    queries: int = 300
    add_every_s: float = 1.0
    speed: float = 10.0
    file_s: float = 10.0
    nodes: int = 3
    initial: int = 12
    control_samples: int = 5
    resume: bool = True


def run_serve_bench(
    out: Path, opts: ServeBenchOptions = ServeBenchOptions(), say: Callable[[str], None] = print
) -> dict:
    from cluster.service.control import call
    from sim.debs_generator import generate_debs

    out = Path(out).resolve()
    incoming, run_dir = out / "incoming", out / "run"
    for p in (incoming, run_dir):
        if p.exists():
            import shutil

            shutil.rmtree(p)
    incoming.mkdir(parents=True)
    span_s = (
        opts.queries * opts.add_every_s * opts.speed + 60 * opts.speed
    )  # data for the whole run + margin
    n_files = int(span_s / opts.file_s) + 1
    say(f"generating {n_files} files of {opts.file_s:g} s of DEBS-style data at 100 Hz")
    data = out / "data.parquet"
    if not data.exists():
        generate_debs(data, duration_s=n_files * opts.file_s, rate_hz=100, seed=3)
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(data)
    rel = pc.subtract(table.column("ts_ms"), int(table.column("ts_ms")[0].as_py()))
    cfg = {
        "name": "bench-serve",
        "workload": {"queries": make_queries("q", opts.initial, 1)},
        "streams": {s: {"rate": 0.1} for s in STREAMS},
        "cluster": {"nodes": opts.nodes},
        "placement": {"optimizers": "WG_TN", "ie": "slickdeque"},
        "data": {"directory": {"path": str(incoming), "poll_s": 0.25, "files_per_batch": 4}},
        "run": {"mode": "live", "output_dir": str(run_dir)},
    }
    th, box, up_s = start_service(cfg, out / "bench_serve.yaml", run_dir, str(out))
    say(f"deployment up in {up_s:.1f} s")
    stop_drop = threading.Event()
    dropped: list[float] = []

    def drop(k: int) -> None:
        part = table.filter(
            pc.and_(
                pc.greater_equal(rel, int(k * opts.file_s * 1000)),
                pc.less(rel, int((k + 1) * opts.file_s * 1000)),
            )
        )
        tmp = incoming / f".f{k:05d}.parquet"
        pq.write_table(part, tmp)
        os.replace(tmp, incoming / f"f{k:05d}.parquet")

    def dropper():
        k, period = 0, opts.file_s / opts.speed
        nxt = time.monotonic()
        while not stop_drop.is_set() and k < n_files:
            drop(k)
            dropped.append(time.monotonic())
            k += 1
            nxt += period
            time.sleep(max(0.0, nxt - time.monotonic()))
        box["files_dropped"] = k

    dth = threading.Thread(target=dropper, daemon=True)
    dth.start()
    time.sleep(2 * opts.file_s / opts.speed)
    st0 = call(run_dir, "GET", "/status")
    mem0 = {
        "driver": st0["driver_rss_bytes"],
        "actors": {n: v["measured"]["rss_bytes"] for n, v in st0["nodes"].items()},
    }
    adds = make_queries("a", opts.queries, 2)
    lat_cmd = []
    t_start = time.monotonic()
    for i, q in enumerate(adds):
        due = t_start + i * opts.add_every_s
        time.sleep(max(0.0, due - time.monotonic()))
        t1 = time.perf_counter()
        call(run_dir, "POST", "/add-queries", {"queries": [q]})
        lat_cmd.append(time.perf_counter() - t1)
        if i % 25 == 24:
            say(f"{i + 1} queries added; add-queries p50 {_pct(lat_cmd, 50):.3f} s")
    churn_s = time.monotonic() - t_start
    # (b) control latency with all queries running
    extra = make_queries("x", opts.control_samples, 3)
    ctl_lat = []
    for q in extra:
        t1 = time.perf_counter()
        call(run_dir, "POST", "/add-queries", {"queries": [q]})
        ctl_lat.append(time.perf_counter() - t1)
        time.sleep(0.5)
    time.sleep(3 * opts.file_s / opts.speed)
    stop_drop.set()
    dth.join(60)
    st1 = call(run_dir, "GET", "/status")
    mem1 = {
        "driver": st1["driver_rss_bytes"],
        "actors": {n: v["measured"]["rss_bytes"] for n, v in st1["nodes"].items()},
    }
    # the running plan vs a fresh plan of the final queries
    from placement.optimizers import optimize
    from placement.queries import query_from_mapping
    from placement.trees import CostModel

    plan_now = json.loads((run_dir / "plan_current.json").read_text())
    model = CostModel("slickdeque", {s: 0.1 for s in STREAMS})
    qs = [query_from_mapping(q) for q in plan_now["queries"]]
    t1 = time.perf_counter()
    fresh = optimize("WG_TN", qs, model, len(plan_now["nodes"]))
    fresh_s = time.perf_counter() - t1
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    call(run_dir, "POST", "/stop", {})
    th.join(600)
    if "error" in box:
        raise box["error"]
    svc_lat = st1["answer_latency_s"]
    res = {
        "queries_added": opts.queries,
        "add_every_s": opts.add_every_s,
        "speed": opts.speed,
        "file_s": opts.file_s,
        "nodes": opts.nodes,
        "initial_queries": opts.initial,
        "churn_wall_s": churn_s,
        "files_fed": st1["files"],
        "rows_fed": st1["rows"],
        "answers": st1["answers"],
        "late": st1["late"],
        "answer_latency_s": {
            "p50": svc_lat["p50"],
            "p99": svc_lat["p99"],
            "max": svc_lat["max"],
            "files": svc_lat["n"],
        },
        "add_queries_s_during_churn": {
            "p50": _pct(lat_cmd, 50),
            "p99": _pct(lat_cmd, 99),
            "max": max(lat_cmd),
        },
        "control_latency_s": {
            "samples": ctl_lat,
            "p50": _pct(ctl_lat, 50),
            "max": max(ctl_lat),
            "running_queries": len(plan_now["queries"]),
        },
        "running_total_cost": plan_now["total_cost"],
        "running_max_cost": plan_now["max_cost"],
        "fresh_total_cost": fresh.total_cost,
        "fresh_max_cost": fresh.max_cost,
        "fresh_plan_s": fresh_s,
        "total_ratio": plan_now["total_cost"] / fresh.total_cost,
        "max_ratio": plan_now["max_cost"] / fresh.max_cost,
        "trees_moved": sum(int(e.get("trees_moved") or 0) for e in events),
        "replans": sum(1 for e in events if e["command"] in ("drift", "rebalance")),
        "memory_start": mem0,
        "memory_end": mem1,
    }
    if opts.resume:
        res["resume"] = _resume(run_dir, out, incoming, drop, box.get("files_dropped", 0), say)
    (out / "bench_serve.json").write_text(json.dumps(res, indent=1))
    return res


def _resume(run_dir: Path, out: Path, incoming: Path, drop, next_file: int, say) -> dict:
    """``serve --resume`` in a new process; seconds until the first new answer part."""
    from cluster.service.control import call

    ans = run_dir / "answers.parquet"
    before = {p.name for p in ans.iterdir()}
    env = dict(os.environ)
    env["PYTHONPATH"] = (
        str(Path(__file__).resolve().parents[1]) + os.pathsep + env.get("PYTHONPATH", "")
    )
    drop(next_file)  # waiting in the directory: the resumed run's first file
    t0 = time.monotonic()
    log = open(out / "resume.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "sim.cli", "serve", "--resume", str(run_dir)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    first = None
    try:
        while time.monotonic() - t0 < 600:
            new = [p for p in ans.iterdir() if p.name not in before and not p.name.startswith(".")]
            if new:
                first = time.monotonic() - t0
                break
            if proc.poll() is not None:
                break
            time.sleep(0.1)
        try:
            call(run_dir, "POST", "/stop", {}, timeout=60)
        except Exception:
            pass
        proc.wait(300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    say(f"resume: first new answer after {first} s")
    return {"first_new_answer_s": first, "exit_code": proc.returncode}


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/bench_serve")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--add-every", type=float, default=1.0)
    ap.add_argument("--speed", type=float, default=10.0)
    a = ap.parse_args()
    opts = ServeBenchOptions(queries=a.queries, add_every_s=a.add_every, speed=a.speed)
    print(json.dumps(run_serve_bench(Path(a.out), opts), indent=1))


def start_service(cfg: dict, cpath: Path, run_dir: Path, base: str) -> tuple[Any, dict, float]:
    """``weaveplace serve`` of config ``cfg`` (written to ``cpath``) on a thread of this process:
    the thread, a box that gets ``stats`` at its end or ``error``, and the seconds until the
    control API answered ``running`` (a benchmark drives it over that API, as an operator would)."""
    from cluster.service.control import call
    from sim.config import load_config
    from sim.serve_start import run_service

    cpath.write_text(json.dumps(cfg))  # JSON is YAML, and read by json (sim.config.loading)
    config = load_config(cpath)
    box: dict = {}

    def serve():
        try:
            box["stats"] = run_service(config, run_dir, None, cpath.read_text(), base)
        except BaseException as e:  # raised by the caller
            box["error"] = e

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    t0 = time.monotonic()
    while True:
        try:
            if call(run_dir, "GET", "/status", timeout=10)["state"] == "running":
                break
        except Exception:
            pass
        if "error" in box:
            raise box["error"]
        if time.monotonic() - t0 > 300:
            raise RuntimeError("the deployment did not start in 300 s")
        time.sleep(0.5)
    return th, box, time.monotonic() - t0
