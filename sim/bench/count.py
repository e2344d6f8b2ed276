"""``weaveplace bench count``: count-window plans against measured operations per time unit.

Why: a count window slices the tuple axis, so its edges per time unit are its edges
per tuple times the stream's rate; a plan that forgets the rate misprices count trees by that
factor (0.1 tuples/ms: 10x too high; 100 tuples per time unit: 100x too low).  This plans a
workload of count and time windows (the papers' generator for ranges and slides, every other
query a count window, two streams, sum/max/avg), runs the plan on Ray actors
(``cluster.deployment.deployment.Deployment`` with operation counting; ``live=False``: the actors' core
``NodeCore`` in this process) over a stream of exactly ``rate`` tuples per ms, and reports the
e2e cost check (``sim.bench.e2e.measured_cost``: per node and part, measured vs planned
operations per ms) plus, over the count trees alone, planned vs measured edges and
final-aggregation operations per ms and what the unconverted model (edges per tuple taken as
edges per ms) would have planned.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

import numpy as np

STREAMS = ("mf01", "mf02")
AGGS = ("sum", "max", "avg")


def count_workload(qnum: int = 40, smax: int = 50, omax: float = 20.0, seed: int = 0):
    """The generator's ranges and slides; every other query a count window; streams and
    aggregates dealt round-robin (query i: stream i mod 2, aggregate i mod 3)."""
    from sim.workload import WorkloadSpec, generate

    qs = generate(WorkloadSpec(qnum=qnum, smax=smax, rate=1.0, omax=omax, gen="nrm", seed=seed))
    return [
        replace(
            q, stream=STREAMS[i % 2], aggregate=AGGS[i % 3], kind="count" if i % 2 == 0 else "time"
        )
        for i, q in enumerate(qs)
    ]


@dataclass(frozen=True)
class CountCheckOptions:
    """What ``run_count_check`` plans and runs: the workload (``count_workload``), ``tuples``
    per stream at ``rate`` tuples per ms, the plan's ``nodes``, ``technique`` and
    ``optimizer``; ``live``: on Ray actors (False: ``NodeCore`` in this process)."""

    qnum: int = 40
    smax: int = 50
    omax: float = 20.0
    rate: float = 0.5
    tuples: int = 1_000_000
    nodes: int = 2
    technique: str = "slickdeque"
    optimizer: str = "WG_LS"
    live: bool = True
    seed: int = 0
    batch_rows: int = 1 << 17


def run_count_check(opts: CountCheckOptions = CountCheckOptions(), log=print) -> dict:
    """Plan, run with operation counting, compare (module docstring). ``opts.tuples`` per
    stream, timestamps ``floor(i / rate)`` ms."""
    import pyarrow as pa

    from placement.optimizers import optimize
    from placement.plan import verify_plan
    from placement.trees import CostModel
    from sim.bench.e2e import PRIMITIVES, cost_summary, measured_cost

    qs = count_workload(opts.qnum, opts.smax, opts.omax, opts.seed)
    rates = {s: float(opts.rate) for s in STREAMS}
    model = CostModel(opts.technique, rates)
    t0 = time.perf_counter()
    plan = optimize(opts.optimizer, qs, model, opts.nodes, seed=opts.seed).to_dict()
    problems = verify_plan(plan)
    if problems:
        raise RuntimeError(f"plan does not verify: {problems[:3]}")
    log(
        f"{opts.optimizer}: {sum(len(n['trees']) for n in plan['nodes'])} trees for {len(qs)} "
        f"queries on {opts.nodes} nodes, TotalCost {plan['total_cost']:.6g} "
        f"({time.perf_counter() - t0:.1f} s)"
    )
    ts = np.floor(np.arange(opts.tuples) / opts.rate).astype(np.int64)
    rng = np.random.default_rng(opts.seed)
    data = pa.record_batch(
        {"ts_ms": ts, **{s: rng.integers(0, 1 << 20, opts.tuples) for s in STREAMS}}
    )
    span = float(ts[-1] - ts[0] + 1)
    t0 = time.perf_counter()
    if opts.live:
        from cluster.deployment.deployment import Deployment
        from cluster.deployment.options import DeploymentOptions
        from cluster.runtime.ray_runtime import RayRuntime

        with RayRuntime(num_cpus=2):
            with Deployment(plan, DeploymentOptions(max_in_flight=2, count_ops=True)) as dep:
                for i in range(0, opts.tuples, opts.batch_rows):
                    dep.feed(None, data.slice(i, opts.batch_rows))
                metrics = dep.finish().metrics
    else:
        from cluster.deployment.specs import node_specs
        from cluster.node.core import NodeCore

        metrics = {"nodes": {}}
        for sp in node_specs(plan):
            node = NodeCore(sp["node_id"], sp["trees"], plan["ie"], count_ops=True)
            for i in range(0, opts.tuples, opts.batch_rows):
                node.ingest(None, data.slice(i, opts.batch_rows))
            node.flush()
            metrics["nodes"][sp["node_id"]] = node.metrics()
    log(
        f"ran {opts.tuples} tuples per stream {'on Ray actors' if opts.live else 'in process'} "
        f"({time.perf_counter() - t0:.1f} s)"
    )
    node_cost = measured_cost(plan, metrics, span, "raw")
    axes: dict[str, dict] = {}
    for n in plan["nodes"]:
        for t in n["trees"]:
            tm = metrics["nodes"][n["id"]]["trees"][t["id"]]
            a = axes.setdefault(
                t["axis"],
                {
                    "trees": 0,
                    "plan_edges_per_ms": 0.0,
                    "edges_per_ms": 0.0,
                    "plan_ops_per_ms": 0.0,
                    "ops_per_ms": 0.0,
                    "unconverted_ops_per_ms": 0.0,
                },
            )
            e_axis = t["edges"] / t["composite_slide"]  # per ms or per tuple
            a["trees"] += 1
            a["plan_edges_per_ms"] += t["edge_rate"]
            a["edges_per_ms"] += tm["slices"] / span
            a["plan_ops_per_ms"] += t["edge_rate"] * t["omega"]
            a["ops_per_ms"] += tm["final_ops"] / PRIMITIVES.get(t["aggregate"], 1) / span
            a["unconverted_ops_per_ms"] += e_axis * t["omega"]
    for a in axes.values():
        a["edges_ratio"] = a["edges_per_ms"] / a["plan_edges_per_ms"]
        a["ops_ratio"] = a["ops_per_ms"] / a["plan_ops_per_ms"]
        a["unconverted_ratio"] = a["ops_per_ms"] / a["unconverted_ops_per_ms"]
    return {
        "config": dict(
            qnum=opts.qnum,
            smax=opts.smax,
            omax=opts.omax,
            rate=opts.rate,
            tuples=opts.tuples,
            nodes=opts.nodes,
            technique=opts.technique,
            optimizer=opts.optimizer,
            live=opts.live,
            seed=opts.seed,
        ),
        "total_cost": plan["total_cost"],
        "cost_check": cost_summary(node_cost),
        "node_cost": node_cost,
        "axes": axes,
    }


def format_count_check(res: dict) -> str:
    lines = [
        "| axis | trees | edges/ms plan | measured | ratio | final ops/ms plan | measured "
        "| ratio | unconverted model: measured / it |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for axis, a in sorted(res["axes"].items()):
        lines.append(
            f"| {axis} | {a['trees']} | {a['plan_edges_per_ms']:.6g} | {a['edges_per_ms']:.6g} | "
            f"{a['edges_ratio']:.4f} | {a['plan_ops_per_ms']:.6g} | {a['ops_per_ms']:.6g} | "
            f"{a['ops_ratio']:.4f} | {a['unconverted_ratio']:.4g} |"
        )
    cc = res["cost_check"]
    parts = ", ".join(f"{k} {v['ratio']}" for k, v in sorted(cc["parts"].items()))
    lines.append(
        f"\nnode cost measured / plan: mean {cc['mean_node_ratio']} "
        f"({', '.join(f'{k} {v}' for k, v in cc['node_ratios'].items())}); "
        f"per part: {parts}"
    )
    worst = max((abs(r - 1) for r in cc["node_ratios"].values() if r is not None), default=math.nan)
    lines.append(f"largest node deviation: {100 * worst:.3f} %")
    return "\n".join(lines)
