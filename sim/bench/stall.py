"""``weaveplace bench stall``: one node actor stuck on a healthy host while files keep arriving.

The deployment (``sim.serve_start.run_service``, what ``weaveplace serve`` runs, on a thread of
this process) has ``nodes`` nodes and ``queries`` queries; DEBS-style files of ``file_s``
seconds of data arrive every ``drop_every_s`` wall seconds.  After ``stop_after`` files the
process of node-1's actor is stopped (SIGSTOP) and never continued: Ray sees nothing wrong, the
health check (``cluster.deployment.liveness``) must.  ``status`` is asked every 0.25 s
throughout, as an operator's dashboard would.  Reported:

- **detection**: wall seconds from the stop to the ``failure`` event (``detected_by:
  deadline``) and its ``detect_s``, against ``call_timeout_s``;
- **answers during the silence**: answers of the other nodes' queries with windows ending
  after the stop that were written before the detection, and the answers per second of all
  nodes before the stop and during the silence;
- **control-API latency** of ``status`` before the stop and during the silence (p50, p99, max)
  and any status that did not come within 5 s;
- **recovery**: ``recover_s`` and ``first_answer_s`` of the ``recovery`` event;
- every answer against the brute force, and no window written twice.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from sim.bench.autoscale import check_answers
from sim.bench.serve import STREAMS, make_queries, start_service


@dataclass(frozen=True)
class StallBenchOptions:
    """The stall (module docstring)."""

    nodes: int = 3
    queries: int = 30
    call_timeout_s: float = 10.0
    files: int = 30
    file_s: float = 2.0
    drop_every_s: float = 1.0
    stop_after: int = 5
    rate_hz: int = 50


def _pct(xs, q):
    return float(np.percentile(np.asarray(xs), q)) if len(xs) else None


def _latency(xs: list[float]) -> dict:
    return {"n": len(xs), "p50_s": _pct(xs, 50), "p99_s": _pct(xs, 99), "max_s": max(xs or [0])}


def run_stall_bench(
    out: Path, opts: StallBenchOptions = StallBenchOptions(), say: Callable[[str], None] = print
) -> dict:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from cluster.service.control import call
    from sim.debs_generator import generate_debs

    out = Path(out).resolve()
    incoming, run_dir = out / "incoming", out / "run"
    for p in (incoming, run_dir):
        if p.exists():
            shutil.rmtree(p)
    incoming.mkdir(parents=True)
    data = out / f"data_{opts.rate_hz}hz_{opts.files}x{opts.file_s:g}.parquet"
    if not data.exists():
        generate_debs(data, duration_s=opts.files * opts.file_s, rate_hz=opts.rate_hz, seed=9)
    table = pq.read_table(data)
    rel = pc.subtract(table.column("ts_ms"), int(table.column("ts_ms")[0].as_py()))
    step = int(opts.file_s * 1000)
    files = [
        table.filter(pc.and_(pc.greater_equal(rel, k * step), pc.less(rel, (k + 1) * step)))
        for k in range(opts.files)
    ]
    queries = make_queries("q", opts.queries, 21)
    rate = opts.rate_hz / 1000.0
    cfg = {
        "name": "bench-stall",
        "workload": {"queries": queries},
        "streams": {s: {"rate": rate} for s in STREAMS},
        "cluster": {"nodes": opts.nodes, "call_timeout_s": opts.call_timeout_s},
        "placement": {"optimizers": "WG_TN", "ie": "slickdeque"},
        "data": {"directory": {"path": str(incoming), "poll_s": 0.2, "files_per_batch": 1}},
        "run": {"mode": "live", "output_dir": str(run_dir)},
    }
    th, box, up_s = start_service(cfg, out / "bench_stall.yaml", run_dir, str(out))
    say(f"deployment up in {up_s:.1f} s; {opts.nodes} nodes, {opts.queries} queries")
    polls: list[tuple[float, float, dict | None]] = []  # (wall, latency, status)
    done = threading.Event()

    def poll():
        while not done.is_set():
            t0 = time.monotonic()
            try:
                st = call(run_dir, "GET", "/status", timeout=5)
            except Exception:  # no status within 5 s
                st = None
            polls.append((time.time(), time.monotonic() - t0, st))
            time.sleep(0.25)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    stopped_at = pid = stop_et = None
    during: list[tuple[float, int]] = []  # (wall, answers of the others ending after the stop)
    try:
        for k in range(opts.files):
            tmp = incoming / f".f{k:03d}.tmp"
            pq.write_table(files[k], tmp)
            os.replace(tmp, incoming / f"f{k:03d}.parquet")
            if k + 1 == opts.stop_after:
                _wait(lambda: call(run_dir, "GET", "/status")["files"] >= opts.stop_after, 120)
                st = call(run_dir, "GET", "/status")
                plan = json.loads((run_dir / "plan_current.json").read_text())
                others = pa.array(
                    sorted(
                        {
                            q if isinstance(q, str) else q["id"]
                            for n in plan["nodes"]
                            if n["id"] != "node-1"
                            for t in n["trees"]
                            for q in t["queries"]
                        }
                    )
                )
                stop_et = int(st["event_time"])
                pid = int(st["nodes"]["node-1"]["health"]["pid"])
                os.kill(pid, signal.SIGSTOP)
                stopped_at = time.time()
                say(f"node-1's actor (pid {pid}) stopped after file {k}")
            if stopped_at is not None and not _failed(run_dir):
                ans = pq.read_table(run_dir / "answers.parquet")
                keep = pc.and_(
                    pc.greater(ans.column("window_end"), stop_et),
                    pc.is_in(ans.column("query_id"), value_set=others),
                )
                during.append((time.time(), int(pc.sum(keep.cast("int64")).as_py() or 0)))
            time.sleep(opts.drop_every_s)
        _wait(lambda: call(run_dir, "GET", "/status")["files"] >= opts.files, 300)
        done.set()
        poller.join(10)
        call(run_dir, "POST", "/stop", {"flush": True}, timeout=120)
        th.join(300)
    finally:
        done.set()
        if pid is not None:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
    if "error" in box:
        raise box["error"]
    evs = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    fail = next(e for e in evs if e["command"] == "failure")
    rec = next((e for e in evs if e["command"] == "recovery"), {})
    detected = fail["wall_time"]
    before = [lat for w, lat, _ in polls if w < stopped_at]
    silent = [lat for w, lat, _ in polls if stopped_at <= w < detected]
    answered = [(w, st["answers"]) for w, _, st in polls if st is not None and "answers" in st]
    res = {
        "options": asdict(opts),
        "detection": {
            "after_stop_s": detected - stopped_at,
            "detect_s": fail["detect_s"],
            "detected_by": fail["detected_by"],
            "call": fail.get("call"),
        },
        "others_answers_during_silence": max((n for w, n in during if w < detected), default=0),
        "answers_per_s": {
            "before_stop": _rate(answered, stopped_at - 10, stopped_at),
            "during_silence": _rate(answered, stopped_at, detected),
        },
        "status_latency": {
            "before_stop": _latency(before),
            "during_silence": _latency(silent),
            "unanswered_within_5_s": sum(1 for _, _, st in polls if st is None),
        },
        "recovery": {k: rec.get(k) for k in ("action", "recover_s", "first_answer_s")},
        **_answers(table, queries, run_dir),
    }
    (out / "bench_stall.json").write_text(json.dumps(res, indent=1))
    return res


def _answers(table, queries: list[dict], run_dir: Path) -> dict:
    chk = check_answers(table, {q["id"]: (q, None, None) for q in queries}, run_dir)
    return {
        "answers": chk["answers"],
        "answers_equal_brute_force": chk["equal"],
        "windows_written_twice": chk["twice"],
    }


def _rate(points: list[tuple[float, int]], t0: float, t1: float) -> float | None:
    """Answers per second written between wall times ``t0`` and ``t1`` (from the status)."""
    inside = [(w, n) for w, n in points if t0 <= w <= t1]
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        return None
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def _failed(run_dir: Path) -> bool:
    try:
        text = (run_dir / "events.jsonl").read_text()
    except OSError:
        return False
    return '"command": "failure"' in text


def _wait(cond: Callable[[], bool], timeout: float) -> None:
    t0 = time.monotonic()
    while True:
        try:
            if cond():
                return
        except Exception:
            pass
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"timed out after {timeout:g} s")
        time.sleep(0.2)
