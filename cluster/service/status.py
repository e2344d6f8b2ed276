"""What a running ``weaveplace serve`` reports: ``status``, ``load.jsonl``, ``metrics.json``.

Why one module: the status reply, the load samples and the final metrics all read the
deployment's counters and the running plan and write nothing the service needs back (the
load page, ``weaveplace status`` and ``weaveplace report`` are their readers); the service's
commands do not depend on them.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from cluster.answers.files import atomic_write, jsonable
from cluster.feeds.directory_options import StreamStats
from cluster.node.churn import rss_bytes


def sample_load(svc: Any) -> None:
    """One line of ``RUN_DIR/load.jsonl`` (per micro-batch and per change): per node the
    planned cost and the actor's cumulative counters, from which ``weaveplace report``
    draws the load over time (``sim/report/serve_page.py``)."""
    try:
        nodes = svc.dep.metrics()["nodes"]
    except Exception:  # a node being recovered: skip this sample
        return
    plan, _ = svc.placement_plan()
    planned = {n.id: n.cost for n in plan.nodes}
    row = {
        "wall_time": time.time(),
        "event_time": svc.event_time,
        "files": svc.stream.stats.files,
        "answers": svc.stream.stats.answers,
        "nodes": {nid: _node_sample(m, planned.get(nid)) for nid, m in nodes.items()},
    }
    with open(svc.run_dir / "load.jsonl", "a") as f:
        f.write(json.dumps(row, default=jsonable) + "\n")
    svc.load_history.add(row)


def _node_sample(m: dict, planned_cost: float | None) -> dict:
    """A node's line of a load sample; its counters None while it has not answered since it
    (re)started (the deployment's stand-in reply has no counters but ``busy_s`` 0)."""
    known = m.get("tuples") is not None
    return {
        "planned_cost": planned_cost,
        **{k: m.get(k) if known else None for k in ("tuples", "tree_tuples", "busy_s", "answers")},
        "queue_depth": m.get("queue_depth"),
    }


def current(svc: Any) -> dict:
    """The status reply, never waiting behind the data path: computed afresh when the
    command lock comes within the gate's ``peek_s`` (not during a change: the plan is being
    rewritten), else the last one computed (``stale_s``: its age); ``data_path`` (what holds
    it, the nodes silent, stuck or behind) is always of now (``cluster.service.gate``)."""
    with svc.gate.peek() as got:
        if got:
            svc.log_faults()
            svc.last_status = status(svc)
            svc.last_status["computed_at"] = time.monotonic()
    last = svc.last_status
    if last is None:  # busy since the start: what is known without the running state
        last = {"state": svc.state, "event_time": svc.event_time, "computed_at": None}
    at = last.get("computed_at")
    return {
        **last,
        "stale_s": None if at is None else time.monotonic() - at,
        "data_path": svc.gate.describe(),
    }


def status(svc: Any) -> dict:
    """Nodes (trees, queries, planned cost, measured load over the last interval, health:
    ``cluster.deployment.liveness``), queries, watermark per stream, backlog, late tuples,
    answers written, the last events, failures and recoveries (``faults``), the drift and
    ``choose`` (WG_PF: how the last plan was chosen, ``cluster.service.planning``; else None)
    (the caller holds the command lock: not during a change).  No actor is asked: the
    measured figures are the nodes' last health answers (``Deployment.vitals``)."""
    st = svc.stream.stats
    plan = svc.plan_dict()
    metrics = svc.dep.vitals()
    now = time.monotonic()
    nodes = {}
    for n in plan["nodes"]:
        nid = n["id"]
        m = metrics.get(nid, {}) if isinstance(metrics, dict) else {}
        prev = svc.last_sample.get(nid)
        load = {
            "tuples_per_s": None,
            "tree_tuples_per_s": None,
            "busy_share": None,
            "answers_per_s": None,
        }
        if m.get("tuples") is not None and prev is not None and now > prev[0]:
            dt = now - prev[0]
            pm = prev[1]
            load = {
                "tuples_per_s": (m["tuples"] - pm["tuples"]) / dt,
                "tree_tuples_per_s": (m["tree_tuples"] - pm["tree_tuples"]) / dt,
                "busy_share": (m["busy_s"] - pm["busy_s"]) / dt,
                "answers_per_s": (m["answers"] - pm["answers"]) / dt,
                "interval_s": dt,
            }
        if m.get("tuples") is not None:
            svc.last_sample[nid] = (
                now,
                {k: m[k] for k in ("tuples", "tree_tuples", "busy_s", "answers")},
            )
        nodes[nid] = {
            "planned_cost": n["cost"],
            "capacity": n.get("capacity"),
            "trees": {t["id"]: t["queries"] for t in n["trees"]},
            "queries": sum(len(t["queries"]) for t in n["trees"]),
            "measured": {
                **load,
                "queue_depth": m.get("queue_depth"),
                "tuples": m.get("tuples"),
                "late_tuples": m.get("late_tuples"),
                "rss_bytes": m.get("rss_bytes"),
                "generations": m.get("generations"),
                "busy_s": m.get("busy_s"),
                "answers": m.get("answers"),
                "lag_ms": m.get("lag_ms"),
                "owed_batches": m.get("owed_batches"),
            },
            "health": {
                "state": m.get("health"),
                "silent_s": m.get("silent_s"),
                "call": m.get("call"),
                "call_s": m.get("call_s"),
                "behind": m.get("behind"),
                "recoveries": m.get("recoveries"),
                "ray_node": m.get("ray_node"),
                "pid": m.get("pid"),
            },
        }
    wm = st.watermark
    return {
        "state": svc.state,
        "event_time": st.max_ts,
        "watermark": {s: wm for s in sorted({q["stream"] for q in svc.running.queries.values()})},
        "queries": sorted(svc.running.queries),
        "total_cost": plan["total_cost"],
        "max_cost": plan["max_cost"],
        "nodes": nodes,
        "backlog": backlog(svc),
        "files": st.files,
        "rows": st.rows,
        "late": st.late,
        "answers": st.answers,
        "events": svc.events[-20:],
        "answer_latency_s": percentiles(svc.file_latency[-1000:]),
        "driver_rss_bytes": rss_bytes(),
        "drift": svc.drift(),
        "choose": svc.choice,
        "faults": faults(svc),
        "event_counts": dict(svc.event_log.counts),
        "autoscale": None if svc.autoscaler is None else svc.autoscaler.status(time.monotonic()),
        "shedding": None if svc.shedding is None else svc.shedding.status(),
    }


def faults(svc: Any) -> dict:
    """Failures detected and recoveries since the start (or resume): counts, nodes still
    recovering (detected, no new answer yet) and the latest events of both kinds."""
    s = svc.dep.fault_log.summary()
    return {k: s[k] for k in ("failures", "recoveries", "recovering")} | {
        "latest": s["events"][-10:]
    }


def backlog(svc: Any) -> dict:
    """Files in the watched directory not fed yet (and their bytes)."""
    fed = {f.name for f in svc.stream.stats.files_log}
    files = nbytes = 0
    import fnmatch

    pat = svc.stream.options.pattern
    try:
        for e in os.scandir(svc.stream.directory):
            if (
                e.is_file()
                and not e.name.startswith((".", "_"))
                and fnmatch.fnmatch(e.name, pat)
                and e.name not in fed
            ):
                files += 1
                nbytes += e.stat().st_size
    except OSError:
        pass
    return {"files": files, "bytes": nbytes}


def write_metrics(svc: Any, stats: StreamStats) -> None:
    """``metrics.json`` at stop (the input of the serve report), as ``weaveplace run`` writes."""
    m = stats.metrics("serve")
    m["data_path"] = str(svc.stream.directory)
    m["answer_latency"] = [list(x) for x in svc.latency_timeline]
    if svc.shedding is not None:
        m["shedding"] = svc.shedding.status()
    atomic_write(svc.run_dir / "metrics.json", json.dumps(m, indent=1, default=jsonable))


def percentiles(xs: list[float]) -> dict:
    """p50/p99/max of the latest file latencies (the status and the page show them)."""
    if not xs:
        return {"n": 0, "p50": None, "p99": None, "max": None}
    import numpy as np

    a = np.asarray(xs)
    return {
        "n": int(a.size),
        "p50": float(np.percentile(a, 50)),
        "p99": float(np.percentile(a, 99)),
        "max": float(a.max()),
    }
