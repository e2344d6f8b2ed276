"""Live-run throughput: DEBS-style Parquet -> Spark -> Ray actors, end to end.

    python -m sim.bench.live --duration-s 20000 --rate-hz 100 --queries 60 --nodes 2

Why: the raw feed path (Spark -> driver -> actors), not the kernels, is expected to bound a
live run (docs/DESIGN.md s. 8); this measures it with a realistic plan.  The workload is the
published DEBS queries (1 s tumbling avg/min/max/count of mf01; 60 s/1 s avg of mf01-mf03) plus
random sliding queries over mf01-mf03 (slides multiples of 100 ms, ranges 1-10 slides, a third
with ``r mod s != 0``), woven by WeaveShare and dealt round-robin over ``--nodes`` nodes.
Prints one JSON line: feed rows/s, startup and per-node busy seconds.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

STREAMS = ("mf01", "mf02", "mf03")


def bench_queries(n: int, seed: int = 0):
    from placement.queries import Query

    qs = [
        Query("debs_avg1s", 1000, 1000, "avg", "mf01"),
        Query("debs_min1s", 1000, 1000, "min", "mf01"),
        Query("debs_max1s", 1000, 1000, "max", "mf01"),
        Query("debs_cnt1s", 1000, 1000, "count", "mf01"),
    ]
    qs += [Query(f"debs_avg60s_{s}", 60_000, 1000, "avg", s) for s in STREAMS]
    rng = np.random.default_rng(seed)
    aggs = ("sum", "count", "avg", "min", "max")
    for i in range(max(0, n - len(qs))):
        s = 100 * int(rng.integers(1, 31))
        r = s * int(rng.integers(1, 11)) + (int(rng.integers(1, s)) if i % 3 == 0 else 0)
        qs.append(Query(f"r{i}", r, s, aggs[i % 5], STREAMS[i % 3]))
    return qs


def round_robin_plan(queries, n_nodes: int, rate_per_ms: float, technique: str = "slickdeque"):
    """WeaveShare trees dealt over nodes by descending cost (a stand-in until distributed
    placement exists)."""
    from placement.plan import Node, Plan
    from placement.trees import CostModel
    from placement.weaveshare import weaveshare

    rates = {s: rate_per_ms for s in STREAMS}
    model = CostModel(technique, rates)
    trees = sorted(weaveshare(queries, model), key=lambda t: -t.cost)
    nodes = [Node(f"node-{i}") for i in range(n_nodes)]
    for i, t in enumerate(trees):
        nodes[i % n_nodes].trees.append(t)
    return Plan("WS_roundrobin", technique, nodes, rates).to_dict()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.bench.live", description=__doc__)
    ap.add_argument("--duration-s", type=float, default=20_000)
    ap.add_argument("--rate-hz", type=float, default=100)
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--batch-rows", type=int, default=1 << 18)
    ap.add_argument("--max-in-flight", type=int, default=4)
    ap.add_argument("--checkpoint-every", type=int, default=None)
    ap.add_argument("--max-log-mib", type=int, default=128)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--order", default="auto", choices=["auto", "sort", "file"])
    ap.add_argument("--chunk-rows", type=int, default=1_000_000)
    ap.add_argument("--out", default="/tmp/weaveplace-bench-live")
    a = ap.parse_args(argv)

    from cluster.deployment.options import DeploymentOptions
    from cluster.runs.file_run import run_file
    from cluster.runs.options import FileFeedOptions, RuntimeOptions
    from sim.debs_generator import generate_debs

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    data = out / f"debs_{int(a.duration_s)}s_{int(a.rate_hz)}hz.parquet"
    if not data.exists():
        t = time.perf_counter()
        generate_debs(data, duration_s=a.duration_s, rate_hz=a.rate_hz, seed=1)
        print(f"generated {data} in {time.perf_counter() - t:.1f}s", flush=True)
    t = time.perf_counter()
    plan = round_robin_plan(bench_queries(a.queries), a.nodes, a.rate_hz / 1000)
    t_plan = time.perf_counter() - t
    t = time.perf_counter()
    res = run_file(
        plan,
        data,
        out / "run",
        runtime=RuntimeOptions(spark_master=a.master),
        deployment=DeploymentOptions(
            max_in_flight=a.max_in_flight,
            checkpoint_every=a.checkpoint_every,
            max_log_bytes=a.max_log_mib << 20,
        ),
        feed=FileFeedOptions(batch_rows=a.batch_rows, order=a.order, chunk_rows=a.chunk_rows),
    )
    total = time.perf_counter() - t
    m = res.metrics
    print(
        json.dumps(
            {
                "rows": m["feed"]["rows"],
                "queries": len(plan["queries"]),
                "nodes": a.nodes,
                "trees": sum(len(n["trees"]) for n in plan["nodes"]),
                "batch_rows": a.batch_rows,
                "order": a.order,
                "feed_s": round(m["feed"]["seconds"], 2),
                "feed_rows_per_s": round(m["feed"]["rows_per_s"]),
                "spark_wait_s": round(m["feed"]["spark_seconds"], 2),
                "finish_s": round(m["finish_s"], 2),
                "checkpoints": m["checkpoints"],
                "answers": res.answers.num_rows,
                "startup_ray_s": round(m["startup"]["ray_s"], 1),
                "startup_spark_s": round(m["startup"]["spark_s"], 1),
                "startup_first_row_s": round(m["startup"]["first_row_s"], 1),
                "plan_s": round(t_plan, 2),
                "total_s": round(total, 1),
                "node_busy_s": {k: round(v["busy_s"], 2) for k, v in m["nodes"].items()},
                "driver_blocked_s": {
                    k: round(v["driver_blocked_s"], 2) for k, v in m["nodes"].items()
                },
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
