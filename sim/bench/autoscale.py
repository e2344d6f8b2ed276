"""``weaveplace bench autoscale``: an elastic deployment (``placement.autoscale``) under a query
load that ramps up and back down, with files arriving at ``speed`` x real time.

The load: one base query, then ``step`` queries added every ``step_s`` wall seconds up to
``peak``, then removed ``step`` at a time back to the base (the same queries, newest first).
Every node has ``capacity`` (default: a fifth of the peak's one-node WG_TN TotalCost, so the
peak needs several nodes).  Reported:

- the node count over time against the **smallest feasible count** at each moment (the
  smallest count whose plan fits at ``high`` x capacity, ``placement.node_count`` with the
  policy's optimizers: the count the model can prove or find);
- **steps to converge** after each load step: the autoscale decisions until the count is at
  most one above the smallest feasible count (0: it already was);
- **node-seconds** above the minimum over the run, as a share of the minimum's node-seconds;
- **flapping**: a node added and one retired (or the other way round) within one cool-down;
- answer latency p50/p99 (a file's arrival to its answers written; ``status``);
- every answer against the section 9 brute force (``executors.churn_oracle``: windows from
  T_reg to T_unreg, each query over every row fed), and no window written twice.

Goals (issue text): at most one above the smallest feasible count within one decision after
each step, node-seconds over the minimum within 15 %, no flapping.  The deployment is
``sim.serve_start.run_service`` (what ``weaveplace serve`` runs) in a thread of this process,
driven through its control API.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from sim.bench.serve import STREAMS, make_queries, start_service


@dataclass(frozen=True)
class AutoscaleBenchOptions:
    """The ramp (module doc): ``peak`` queries in steps of ``step`` every ``step_s`` wall
    seconds, files of ``file_s`` s of ``rate_hz`` data dropped at ``speed`` x real time; the
    policy's ``high``, ``low``, ``cooldown_s``, ``max_nodes`` and node ``capacity`` (None: a
    fifth of the peak's one-node cost)."""

    peak: int = 300
    step: int = 50
    step_s: float = 15.0
    speed: float = 10.0
    file_s: float = 10.0
    rate_hz: int = 20
    high: float = 0.8
    low: float = 0.5
    cooldown_s: float = 10.0
    max_nodes: int = 12
    capacity: float | None = None


OPTIMIZERS = ("WG_TN", "WG_I")  # the policy's count search here: fast enough per step


def _pct(xs, q):
    return float(np.percentile(np.asarray(xs), q)) if len(xs) else None


def ramp(opts: AutoscaleBenchOptions) -> list[int]:
    """The number of added queries running after each step: up by ``step`` to ``peak``, down
    to 0."""
    up = list(range(opts.step, opts.peak + 1, opts.step))
    if not up or up[-1] != opts.peak:
        up.append(opts.peak)
    return up + up[-2::-1] + [0]


def run_autoscale_bench(
    out: Path,
    opts: AutoscaleBenchOptions = AutoscaleBenchOptions(),
    say: Callable[[str], None] = print,
) -> dict:
    from cluster.service.control import call
    from placement.node_count import node_count
    from placement.optimizers import optimize
    from placement.queries import query_from_mapping
    from placement.trees import CostModel
    from sim.debs_generator import generate_debs

    out = Path(out).resolve()
    incoming, run_dir = out / "incoming", out / "run"
    for p in (incoming, run_dir):
        if p.exists():
            shutil.rmtree(p)
    incoming.mkdir(parents=True)
    steps = ramp(opts)
    span_s = (len(steps) + 4) * opts.step_s * opts.speed + 60 * opts.speed
    n_files = int(span_s / opts.file_s) + 1
    data = out / f"data_{opts.rate_hz}hz_{n_files}.parquet"
    if not data.exists():
        say(f"generating {n_files} files of {opts.file_s:g} s of DEBS-style data")
        generate_debs(data, duration_s=n_files * opts.file_s, rate_hz=opts.rate_hz, seed=5)
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(data)
    rel = pc.subtract(table.column("ts_ms"), int(table.column("ts_ms")[0].as_py()))
    rate = opts.rate_hz / 1000.0
    model = CostModel("slickdeque", {s: rate for s in STREAMS})
    base = make_queries("base", 1, 9)
    adds = make_queries("q", opts.peak, 2)
    peak_qs = [query_from_mapping(q) for q in base + adds]
    cap = opts.capacity or optimize("WG_TN", peak_qs, model, 1).total_cost / 5.0
    cfg = {
        "name": "bench-autoscale",
        "workload": {"queries": base},
        "streams": {s: {"rate": rate} for s in STREAMS},
        "cluster": {"nodes": [{"id": "node-0", "capacity": cap}]},
        "placement": {
            "optimizers": "WG_TN",
            "ie": "slickdeque",
            "autoscale": {
                "min_nodes": 1,
                "max_nodes": opts.max_nodes,
                "high": opts.high,
                "low": opts.low,
                "cooldown_s": opts.cooldown_s,
                "optimizers": list(OPTIMIZERS),
            },
        },
        "data": {"directory": {"path": str(incoming), "poll_s": 0.25, "files_per_batch": 4}},
        "run": {"mode": "live", "output_dir": str(run_dir)},
    }
    th, box, up_s = start_service(cfg, out / "bench_autoscale.yaml", run_dir, str(out))
    say(f"deployment up in {up_s:.1f} s; node capacity {cap:.6g}")
    stop = threading.Event()
    fed_parts: list = []

    def dropper():
        k, period = 0, opts.file_s / opts.speed
        nxt = time.monotonic()
        while not stop.is_set() and k < n_files:
            part = table.filter(
                pc.and_(
                    pc.greater_equal(rel, int(k * opts.file_s * 1000)),
                    pc.less(rel, int((k + 1) * opts.file_s * 1000)),
                )
            )
            tmp = incoming / f".f{k:05d}.parquet"
            pq.write_table(part, tmp)
            os.replace(tmp, incoming / f"f{k:05d}.parquet")
            fed_parts.append(part)
            k += 1
            nxt += period
            time.sleep(max(0.0, nxt - time.monotonic()))

    timeline: list[tuple[float, int, int]] = []  # (wall s, nodes, minimum)
    current_min = [1]

    def sampler():
        while not stop.is_set():
            try:
                st = call(run_dir, "GET", "/status", timeout=30)
                timeline.append((time.monotonic(), len(st["nodes"]), current_min[0]))
            except Exception:
                pass
            time.sleep(0.25)

    dth = threading.Thread(target=dropper, daemon=True)
    sth = threading.Thread(target=sampler, daemon=True)
    dth.start()
    time.sleep(2 * opts.file_s / opts.speed)
    sth.start()
    regs = {q["id"]: [q, None, None] for q in base}
    running = 0
    per_step = []
    for i, target in enumerate(steps):
        t_step = time.monotonic()
        ev_before = len(_events(run_dir))
        if target > running:
            batch = adds[running:target]
            rep = call(run_dir, "POST", "/add-queries", {"queries": batch}, timeout=600)
            for q in batch:
                regs[q["id"]] = [q, rep["accepted_at"][q["stream"]], None]
        else:
            gone = adds[target:running]
            rep = call(
                run_dir, "POST", "/remove-queries", {"ids": [q["id"] for q in gone]}, timeout=600
            )
            for q in gone:
                regs[q["id"]][2] = rep["removed_at"][q["stream"]]
        running = target
        qs = [query_from_mapping(q) for q in base + adds[:running]]
        need = node_count(qs, model, opts.high * cap, 1, opts.max_nodes, OPTIMIZERS)
        current_min[0] = need.nodes
        # the decision ran inside the command; wait the step out, then read what happened
        time.sleep(max(0.0, t_step + opts.step_s - time.monotonic()))
        evs = _events(run_dir)[ev_before:]
        decisions = [
            e for e in evs if e["command"] == "autoscale" and e.get("action") in ("out", "in")
        ]
        replans = sum(1 for e in evs if e["command"] == "autoscale" and e.get("action") == "replan")
        nodes_after_cmd = _nodes_after(evs, timeline, t_step)
        converged = None
        n_now = nodes_after_cmd[0]
        if n_now <= need.nodes + 1 and n_now >= need.nodes:
            converged = 0
        for k, e in enumerate(decisions, 1):
            if converged is None and need.nodes <= e["nodes_after"] <= need.nodes + 1:
                converged = k
        st = call(run_dir, "GET", "/status")
        per_step.append(
            {
                "step": i,
                "queries": running + len(base),
                "smallest_feasible": need.nodes,
                "feasible_method": need.method,
                "nodes_after_step": len(st["nodes"]),
                "decisions": [
                    (e["action"], e["nodes_before"], e["nodes_after"]) for e in decisions
                ],
                "steps_to_converge": converged,
                "replans": replans,
                "max_cost_over_capacity": st["max_cost"] / cap,
            }
        )
        say(
            f"step {i}: {running + len(base)} queries, smallest feasible {need.nodes}, "
            f"nodes {len(st['nodes'])}, decisions {per_step[-1]['decisions']}"
        )
    time.sleep(2 * opts.file_s / opts.speed)
    stop.set()
    dth.join(60)
    sth.join(60)
    st1 = call(run_dir, "GET", "/status")
    call(run_dir, "POST", "/stop", {"flush": True})
    th.join(600)
    if "error" in box:
        raise box["error"]
    events = _events(run_dir)
    # node-seconds over the minimum (from the first step on)
    over = base_ns = 0.0
    for (t1, n1, m1), (t2, _, _) in zip(timeline, timeline[1:]):
        over += max(0, n1 - m1) * (t2 - t1)
        base_ns += m1 * (t2 - t1)
    flaps = _flaps(events, opts.cooldown_s)
    say("checking every answer against the brute force")
    t1 = time.perf_counter()
    check = check_answers(pa.concat_tables(fed_parts), regs, run_dir)
    lat = st1["answer_latency_s"]
    conv = [s["steps_to_converge"] for s in per_step]
    res = {
        "options": asdict(opts),
        "capacity": cap,
        "optimizers": list(OPTIMIZERS),
        "steps": per_step,
        "timeline": [(round(t - timeline[0][0], 3), n, m) for t, n, m in timeline],
        "node_seconds_over_min": over,
        "node_seconds_min": base_ns,
        "node_seconds_over_min_share": over / base_ns if base_ns else None,
        "steps_to_converge_max": None if None in conv else max(conv),
        "all_steps_converged_within_one_decision": all(c is not None and c <= 1 for c in conv),
        "flaps": flaps,
        "autoscale_decisions": sum(
            1 for e in events if e["command"] == "autoscale" and e.get("action") in ("out", "in")
        ),
        "answer_latency_s": {"p50": lat["p50"], "p99": lat["p99"], "files": lat["n"]},
        "files_fed": st1["files"],
        "rows_fed": st1["rows"],
        "answers": check["answers"],
        "answers_equal_brute_force": check["equal"],
        "windows_written_twice": check["twice"],
        "check_s": time.perf_counter() - t1,
    }
    (out / "bench_autoscale.json").write_text(json.dumps(res, indent=1))
    return res


def _events(run_dir: Path) -> list[dict]:
    p = run_dir / "events.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []


def _nodes_after(evs: list[dict], timeline, t_step: float) -> tuple[int, str]:
    """The node count right after a step's command: its own event's ``nodes_after`` when it
    made no autoscale decision, else the first decision's ``nodes_before`` (the count the
    step found)."""
    dec = [e for e in evs if e["command"] == "autoscale" and "nodes_before" in e]
    if dec:
        return dec[0]["nodes_before"], "before the first decision"
    seen = [n for t, n, _ in timeline if t >= t_step]
    return (seen[0] if seen else timeline[-1][1]), "sampled"


def _flaps(events: list[dict], cooldown_s: float) -> list[dict]:
    """Pairs of node changes in opposite directions within one cool-down."""
    changes = [
        (e["wall_time"], "add" if e["command"] == "add-node" else "retire")
        for e in events
        if e["command"] in ("add-node", "retire-node")
    ]
    for e in events:
        if e["command"] == "autoscale" and e.get("action") in ("out", "in"):
            changes.append((e["wall_time"], "add" if e["action"] == "out" else "retire"))
    changes.sort()
    return [
        {"first": a, "then": b, "seconds": tb - ta}
        for (ta, a), (tb, b) in zip(changes, changes[1:])
        if a != b and tb - ta < cooldown_s
    ]


def check_answers(allt, regs: dict, run_dir: Path) -> dict:
    """Every answer against ``executors.churn_oracle.registered_answers`` (each registration
    over the rows that can reach its windows), and no (query, window) written twice."""
    from executors.churn_oracle import registered_answers

    ts = allt.column("ts_ms").to_numpy()
    order = np.argsort(ts, kind="stable")
    ts = ts[order]
    want = []
    for q, a, b in regs.values():
        lo = 0 if a is None else int(np.searchsorted(ts, a - q["range"], "left"))
        hi = len(ts) if b is None else int(np.searchsorted(ts, b, "right"))
        vals = allt.column(q["stream"]).to_numpy()[order][lo:hi]
        want += registered_answers([(q, a, b)], ts[lo:hi], vals)
    want.sort(key=lambda x: (x[0], x[1]))
    return compare_answers(run_dir, want)


def compare_answers(run_dir: Path, want: list[tuple]) -> dict:
    """``answers.parquet`` against ``want`` (``(query_id, window_start, window_end, value)``
    sorted by query and start): the count, whether equal (values to 1e-9 relative), and how
    many (query, window) were written more than once."""
    import pyarrow.parquet as pq

    got = pq.read_table(run_dir / "answers.parquet").sort_by(
        [("query_id", "ascending"), ("window_start", "ascending")]
    )
    d = got.to_pydict()
    keys = list(zip(d["query_id"], d["window_start"], d["window_end"]))
    twice = sum(c - 1 for c in Counter((k[0], k[1]) for k in keys).values() if c > 1)
    equal = keys == [w[:3] for w in want] and bool(
        np.allclose(d["value"], [float(w[3]) for w in want], rtol=1e-9, atol=0)
    )
    return {"answers": len(keys), "equal": equal, "twice": twice}
