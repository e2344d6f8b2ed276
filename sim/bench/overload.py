"""``weaveplace bench overload``: input at 3x what the nodes can carry, then back to 1x, with
load shedding (``placement.shedding``) and without, one after the other in one run.

What "can carry" means here: the nodes' capacity is the running plan's MaxCost at the 1x rate
(the plan fits exactly at 1x), and the 1x rate is the one at which the busiest node actor uses
``target_busy`` of its CPU: at 3x the nodes really cannot keep up, and without shedding the
answers fall further behind with every file.  Each node actor runs on ``node_cpu`` of a core
(a CPU cgroup, ``sim.bench.node_cpu``: on this machine the driver, not the nodes, would
otherwise be the bottleneck), so the bench needs root.

The run: a calibration deployment fed ``calibration_files`` files in real time, the last
half of three times ``calibration_hz`` rows per second (every stream on every row), the first
half of ``calibration_hz`` (its first third dropped at once and answered before the clock
starts: kernels load, the driver warms up).
Each node actor's CPU time is read as each file is fed (``/proc``): its CPU seconds per wall
second at the two rates give a fixed part (Ray's own threads, a micro-batch's checkpoint and
answers: 0.02-0.04 of a core with 2-s files) and a part per row per second, hence the rate
at which it uses ``target_busy`` of its share (the least over the nodes: 1x).  CPU time, not
answer latency, because it is steady: the latency at a light load is mostly the CPU quota's
100-ms periods and the feed's polling, and two latency calibrations of the same deployment
differed by 1.7x (the per-file latencies at both rates are reported beside it).  Feed
batches of ``batch_rows`` rows;
then two deployments on the same files, one file of ``file_s`` seconds dropped every
``file_s`` wall seconds: ``warm_files`` at 1x, ``hot_files`` at 3x, ``cool_files`` at 1x (the
1x files are every third row of the 3x data).  Reported per phase and run: answer latency
p50/p99 (a file's arrival to its answers written, ``metrics.json``'s timeline) and each
node's CPU use as a share of its core's share; with
shedding, the fractions applied in the 3x phase against the LP's at the true 3x rate
(``placement.shedding.shed_load`` on the running plan) and the rows actually kept; every
answer against the brute force over the kept tuples (each file's rows masked by the drop
box's definition under the fractions the ``shed`` events put in force before it), and none
twice.

Goals (issue text): with shedding, p99 under 5 s at 3x, the fractions within 5 % of the LP's,
every answer equal to the brute force over the kept tuples; without, the latency growing.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from sim.bench.autoscale import compare_answers
from sim.bench.serve import make_queries, start_service

#: the streams the queries read: ten DEBS columns, so that the trees (one per stream and
#: aggregate at these rates, where weaving always wins) give each row real work on a node
STREAMS = ("mf01", "mf02", "mf03", "pc13", "pc14", "pc15", "pc25", "pc26", "pc27", "res")


class CalibrationError(RuntimeError):
    """The calibration cannot set 1x with these options (one line: what to change)."""


@dataclass(frozen=True)
class OverloadBenchOptions:
    """The run (module docstring)."""

    queries: int = 200
    nodes: int = 2
    file_s: float = 2.0
    warm_files: int = 10
    hot_files: int = 30
    cool_files: int = 20
    calibration_hz: int = 8000
    calibration_files: int = 24
    batch_rows: int = 8192
    target_busy: float = 0.6
    rate_window_s: float = 2.0
    node_cpu: float = 0.1


def _pct(xs, q):
    return float(np.percentile(np.asarray(xs), q)) if len(xs) else None


def _queries(n: int) -> list[dict]:
    """``make_queries``' DEBS-style queries, spread over ``STREAMS``."""
    qs = make_queries("q", n, 17)
    for i, q in enumerate(qs):
        q["stream"] = STREAMS[i % len(STREAMS)]
    return qs


def _split(table, file_s: float, n: int) -> list:
    import pyarrow.compute as pc

    rel = pc.subtract(table.column("ts_ms"), int(table.column("ts_ms")[0].as_py()))
    step = int(file_s * 1000)
    return [
        table.filter(pc.and_(pc.greater_equal(rel, k * step), pc.less(rel, (k + 1) * step)))
        for k in range(n)
    ]


def _config(
    queries, rate_per_ms: float, nodes: int, capacity, incoming, run_dir, shed, batch_rows: int
) -> dict:
    cfg = {
        "name": "bench-overload",
        "workload": {"queries": queries},
        "streams": {s: {"rate": rate_per_ms} for s in STREAMS},
        "cluster": {
            "nodes": nodes
            if capacity is None
            else [{"id": f"node-{i}", "capacity": capacity} for i in range(nodes)]
        },
        "placement": {"optimizers": "WG_TN", "ie": "slickdeque"},
        "data": {"directory": {"path": str(incoming), "poll_s": 0.1, "files_per_batch": 1}},
        "run": {"mode": "live", "output_dir": str(run_dir), "batch_rows": batch_rows},
    }
    if shed is not None:
        cfg["placement"]["shedding"] = shed
    return cfg


def _limit_nodes(run_dir: Path, cpu, say) -> dict[str, int]:
    """Each node actor's process in a CPU cgroup of its own, at niceness 0 (Ray's 15 would let
    any other job take its share: ``sim.bench.node_cpu``); their pids by node."""
    from cluster.service.control import call
    from sim.bench.node_cpu import renice

    deadline = time.monotonic() + 60
    while True:
        nodes = call(run_dir, "GET", "/status", timeout=30)["nodes"]
        pids = {n: (d.get("health") or {}).get("pid") for n, d in nodes.items()}
        if all(pids.values()):
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"node actors without a pid after 60 s: {pids}")
        time.sleep(0.5)
    for n, pid in sorted(pids.items()):
        cpu.limit(n, int(pid))
        renice(int(pid))
    say(f"node actors limited to {cpu.quota / 1000:g} ms of CPU per 100 ms, nice 0: {pids}")
    return {n: int(p) for n, p in pids.items()}


def _serve(
    out: Path, name: str, cfg: dict, files: list, every_s: float, say, cpu, settle: int = 0
) -> dict:
    """One deployment fed ``files``, one every ``every_s`` wall seconds, its node actors under
    the CPU limits ``cpu``; what it measured.  The first ``settle`` files are dropped at once
    and their answers awaited before the clock starts (a first deployment's first files wait
    for the driver's own warm-up: a backlog that would blur a calibration)."""
    import pyarrow.parquet as pq

    from cluster.service.control import call
    from sim.bench.node_cpu import cpu_seconds

    incoming, run_dir = Path(cfg["data"]["directory"]["path"]), Path(cfg["run"]["output_dir"])
    for p in (incoming, run_dir):
        if p.exists():
            shutil.rmtree(p)
    incoming.mkdir(parents=True)
    th, box, up_s = start_service(cfg, out / f"{name}.yaml", run_dir, str(out))
    say(f"{name}: deployment up in {up_s:.1f} s")
    pids = _limit_nodes(run_dir, cpu, say)

    def drop(k: int) -> None:
        tmp = incoming / f".f{k:04d}.tmp"
        pq.write_table(files[k], tmp)
        os.replace(tmp, incoming / f"f{k:04d}.parquet")
        cpu_at.append({n: cpu_seconds(p) for n, p in pids.items()})

    cpu_at: list[dict] = []  # per file: each node's CPU seconds as it was dropped
    for k in range(settle):  # at once, then wait until their answers are written
        drop(k)
    deadline = time.monotonic() + 300
    while settle and call(run_dir, "GET", "/status", timeout=30)["files"] < settle:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name}: the first {settle} files not fed within 300 s")
        time.sleep(0.2)
    t0 = time.monotonic()
    for k in range(settle, len(files)):
        drop(k)
        time.sleep(max(0.0, t0 + (k + 1 - settle) * every_s - time.monotonic()))
    deadline = time.monotonic() + 600
    fed = [(time.monotonic(), 0)]  # (time, files fed)
    while fed[-1][1] < len(files):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name}: files not all fed within 600 s of the last one")
        time.sleep(0.1)
        fed.append((time.monotonic(), call(run_dir, "GET", "/status", timeout=30)["files"]))
    plan = json.loads((run_dir / "plan_current.json").read_text())
    call(run_dir, "POST", "/stop", {"flush": True}, timeout=300)
    th.join(300)
    if "error" in box:
        raise box["error"]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    return {
        "run_dir": run_dir,
        "plan": plan,
        "metrics": metrics,
        "events": events,
        "fed": fed,
        "cpu_at": cpu_at,
    }


def _cores(cpu_at: list[dict], a: int, b: int, file_s: float) -> dict[str, float]:
    """Each node's CPU use in cores between the drops of files ``a`` and ``b`` (``b > a``),
    dropped ``file_s`` apart."""
    return {n: (cpu_at[b][n] - cpu_at[a][n]) / ((b - a) * file_s) for n in cpu_at[a]}


def _window_answers(q: dict, ts: np.ndarray, vals: np.ndarray) -> list[tuple]:
    """Every non-empty window of time query ``q`` recomputed from the tuples ``(ts, vals)``
    (sorted by ``ts``): the brute force, one numpy reduction per window (the exact
    ``executors.oracle`` walks each tuple in Python: hours at these rates)."""
    r, s, agg = int(q["range"]), int(q["slide"]), q["aggregate"]
    if not len(ts):
        return []
    ks = np.arange((int(ts[0]) - r) // s + 1, int(ts[-1]) // s + 1)
    lo = np.searchsorted(ts, ks * s, "left")
    hi = np.searchsorted(ts, ks * s + r, "left")
    out = []
    for k, a, b in zip(ks.tolist(), lo.tolist(), hi.tolist()):
        if b <= a:
            continue
        w = vals[a:b]
        if agg == "count":
            v = float(b - a)
        elif agg in ("min", "max"):
            v = float(w.min() if agg == "min" else w.max())
        elif agg in ("sum", "avg"):
            v = float(w.sum()) / (1 if agg == "sum" else b - a)
        else:
            raise ValueError(f"bench overload: no brute force for {agg!r}")
        out.append((q["id"], k * s, k * s + r, v))
    return out


def _kept_answers(files, queries, sheds) -> list[tuple]:
    """The brute force over the kept tuples (module docstring)."""
    from cluster.feeds.drop_box import keep_mask

    steps = [(e["after_files"], e["keep"]) for e in sheds]
    kept: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for s in STREAMS:
        ts, vals = [], []
        for i, f in enumerate(files):
            f = f.sort_by([("ts_ms", "ascending"), ("index", "ascending")])
            x = 1.0
            for after, keep in steps:
                if after <= i:
                    x = keep.get(s, 1.0)
            t = f.column("ts_ms").to_numpy()
            m = keep_mask(t, f.column("index").to_numpy(), x)
            ts.append(t[m])
            vals.append(f.column(s).to_numpy().astype(np.float64)[m])
        kept[s] = (np.concatenate(ts), np.concatenate(vals))
    want = []
    for q in queries:
        want += _window_answers(q, *kept[q["stream"]])
    want.sort(key=lambda x: (x[0], x[1]))
    return want


def _phases(latency: list, opts: OverloadBenchOptions) -> dict:
    """Latency p50/p99 per phase, and its growth (seconds per file: the slope of a least-squares
    line; a backlog that builds grows by a step per file): the i-th latency is the i-th
    file's (fed in order)."""
    lat = [x[1] for x in latency]
    w, h = opts.warm_files, opts.warm_files + opts.hot_files
    out = {}
    for name, part in (("warm_1x", lat[:w]), ("hot_3x", lat[w:h]), ("cool_1x", lat[h:])):
        out[name] = {
            "files": len(part),
            "p50_s": _pct(part, 50),
            "p99_s": _pct(part, 99),
            "max_s": max(part, default=None),
            "last_s": part[-1] if part else None,
            "growth_s_per_file": float(np.polyfit(np.arange(len(part)), part, 1)[0])
            if len(part) > 1
            else None,
        }
    return out


def _busy(cpu_at: list[dict], opts: OverloadBenchOptions) -> dict:
    """Each node's CPU use per phase as a share of its ``node_cpu`` (the first file of a phase
    left out: the one before it may still be running)."""
    w, h, n = opts.warm_files, opts.warm_files + opts.hot_files, len(cpu_at)
    out = {}
    for name, a, b in (("warm_1x", 1, w), ("hot_3x", w + 1, h), ("cool_1x", h + 1, n - 1)):
        if b > a:
            cores = _cores(cpu_at, a, b, opts.file_s)
            out[name] = {node: round(x / opts.node_cpu, 4) for node, x in cores.items()}
    return out


def run_overload_bench(
    out: Path,
    opts: OverloadBenchOptions = OverloadBenchOptions(),
    say: Callable[[str], None] = print,
) -> dict:
    from sim.bench.node_cpu import CpuLimits

    cpu = CpuLimits(opts.node_cpu)
    try:
        return _run(out, opts, say, cpu)
    finally:
        cpu.close()


def _run(out: Path, opts: OverloadBenchOptions, say, cpu) -> dict:
    import pyarrow.parquet as pq

    from placement.optimizers import optimize
    from placement.plan import load_plan
    from placement.queries import query_from_mapping
    from placement.shedding import shed_load
    from placement.trees import CostModel
    from sim.debs_generator import generate_debs

    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    queries = _queries(opts.queries)
    incoming, run_dir = out / "incoming", out / "run"

    # 1. calibration: each node's CPU use at R0 and at 3 R0 rows/s, files in real time
    n_cal = opts.calibration_files
    half = n_cal // 2  # files at R0, then as many at 3 R0
    warm = max(1, half // 3)  # files the deployment warms up on (not measured)
    cal = out / f"calibration_{opts.calibration_hz}hz_{n_cal}.parquet"
    if not cal.exists():
        generate_debs(cal, duration_s=n_cal * opts.file_s, rate_hz=3 * opts.calibration_hz, seed=11)
    cal_files = _split(pq.read_table(cal), opts.file_s, n_cal)
    cal_files = [
        f.take(np.arange(0, f.num_rows, 3)) if k < half else f for k, f in enumerate(cal_files)
    ]
    c = _serve(
        out,
        "calibration",
        _config(
            queries,
            opts.calibration_hz / 1000.0,
            opts.nodes,
            None,
            incoming,
            run_dir,
            None,
            opts.batch_rows,
        ),
        cal_files,
        opts.file_s,
        say,
        cpu,
        settle=warm,
    )
    low = _cores(c["cpu_at"], warm, half - 1, opts.file_s)
    high = _cores(c["cpu_at"], half + 1, n_cal - 1, opts.file_s)
    hz0 = opts.calibration_hz
    per_node = {}
    for node in sorted(low):
        per_row = (high[node] - low[node]) / (2 * hz0)  # cores per row/s
        fixed = low[node] - per_row * hz0  # cores with no rows
        if high[node] > 0.9 * opts.node_cpu:
            raise CalibrationError(
                f"calibration: {node} used {high[node]:.3f} cores of its {opts.node_cpu:g} at "
                f"{3 * hz0} rows/s, too near its limit to measure (raise --node-cpu)"
            )
        if not per_row > 0:
            raise CalibrationError(
                f"calibration: {node} used {low[node]:.4f} cores at {hz0} rows/s and "
                f"{high[node]:.4f} at three times that: no cost per row to calibrate on"
            )
        if not fixed < opts.node_cpu:
            raise CalibrationError(
                f"calibration: {node} uses {fixed:.3f} cores before its rows: more than "
                f"its {opts.node_cpu:g} (raise --node-cpu or --file-s)"
            )
        per_node[node] = {
            "cores_at_r0": low[node],
            "cores_at_3r0": high[node],
            "fixed_cores": fixed,
            "us_per_row": per_row * 1e6,
            "rows_per_s_carried": (opts.node_cpu - fixed) / per_row,
            "rows_per_s_at_target": (opts.target_busy * opts.node_cpu - fixed) / per_row,
        }
    carried = min(v["rows_per_s_carried"] for v in per_node.values())
    at_target = min(v["rows_per_s_at_target"] for v in per_node.values())
    if not at_target > 0:
        raise CalibrationError(
            f"calibration: a node uses more than {opts.target_busy:g} of its "
            f"{opts.node_cpu:g} cores before its rows (raise --node-cpu or --load)"
        )
    lat = [x[1] for x in c["metrics"]["answer_latency"]]
    latency = {"r0_p50_s": _pct(lat[warm:half], 50), "3r0_p50_s": _pct(lat[half + 1 :], 50)}
    hz = max(10, int(at_target))
    for node, v in per_node.items():
        say(
            f"calibration: {node} uses {v['fixed_cores']:.4f} cores + {v['us_per_row']:.2f} "
            f"us per row (each row/s): {v['rows_per_s_carried']:,.0f} rows/s fill its share"
        )
    say(
        f"calibration: the nodes carry {carried:,.0f} rows/s at their whole share; "
        f"1x = {hz:,} rows/s ({opts.target_busy:g} of it)"
    )

    # 2. the data: 3x throughout, the 1x phases every third row
    n = opts.warm_files + opts.hot_files + opts.cool_files
    data = out / f"data_{3 * hz}hz_{n}x{opts.file_s:g}.parquet"
    if not data.exists():
        generate_debs(data, duration_s=n * opts.file_s, rate_hz=3 * hz, seed=12)
    files = _split(pq.read_table(data), opts.file_s, n)
    hot = range(opts.warm_files, opts.warm_files + opts.hot_files)
    files = [f if k in hot else f.take(np.arange(0, f.num_rows, 3)) for k, f in enumerate(files)]
    rate = hz / 1000.0
    # the capacity: the MaxCost of the plan at 1x without capacities (it fits exactly there)
    fresh = optimize(
        "WG_TN",
        [query_from_mapping(q) for q in queries],
        CostModel("slickdeque", {s: rate for s in STREAMS}),
        [1e18] * opts.nodes,
    )
    capacity = max(nd.cost for nd in fresh.nodes) * (1 + 1e-9)

    # 3. the same files with and without shedding
    runs = {}
    shed_cfg = {"rate_window_s": opts.rate_window_s}
    for name, shed in (("shedding", shed_cfg), ("no_shedding", None)):
        r = _serve(
            out,
            name,
            _config(
                queries,
                rate,
                opts.nodes,
                capacity,
                incoming,
                out / f"run_{name}",
                shed,
                opts.batch_rows,
            ),
            files,
            opts.file_s,
            say,
            cpu,
        )
        sheds = [e for e in r["events"] if e["command"] == "shed"]
        res = {
            "latency": _phases(r["metrics"]["answer_latency"], opts),
            "busy": _busy(r["cpu_at"], opts),
            "shed_events": len(sheds),
        }
        check = compare_answers(r["run_dir"], _kept_answers(files, queries, sheds))
        res.update(answers=check["answers"], answers_equal_brute_force=check["equal"])
        res["windows_written_twice"] = check["twice"]
        if shed is not None:
            running = load_plan(r["plan"])
            lp = shed_load(running, {s: 3 * rate for s in STREAMS}).keep
            in_hot = [e for e in sheds if e["after_files"] < opts.warm_files + opts.hot_files]
            applied = in_hot[-1]["keep"] if in_hot else {}
            sh = r["metrics"].get("shedding", {})
            res["fractions"] = {
                s: {
                    "lp_at_3x": lp.get(s),
                    "applied": applied.get(s),
                    "within": None
                    if not applied or lp.get(s) is None
                    else abs(applied[s] - lp[s]) / max(lp[s], 1e-12),
                }
                for s in STREAMS
            }
            res["rows"] = {
                s: {
                    "kept": sh.get("kept_rows", {}).get(s),
                    "dropped": sh.get("dropped_rows", {}).get(s),
                }
                for s in STREAMS
            }
        runs[name] = res
        say(f"{name}: latency {json.dumps(res['latency'])}; busy {json.dumps(res['busy'])}")
    result = {
        "options": asdict(opts),
        "calibration": {
            "rows_per_s_carried": carried,
            "rate_hz_1x": hz,
            "capacity": capacity,
            "nodes": per_node,
            "answer_latency": latency,
        },
        "runs": runs,
    }
    (out / "bench_overload.json").write_text(json.dumps(result, indent=1, default=str))
    return result
