"""Benchmark: the driver feed reading a file in ``data.order: file`` vs ``data.order: time``.

    weaveplace bench order --rows 1000000 --queries 100

Why: ``file`` is the default of ``weaveplace run`` (a file's own order on every route), and it
reads a file differently: one pass over the ``ts_ms`` column first (``cluster.feeds.file_order``),
then Spark's time-range chunks when the file is in time order, else pyarrow batches in file
order; ``time`` (the feed's ``auto``) pulls the chunks and has Spark sort those out of order.
Two files of the same ``rows`` generated events: ``sorted`` (DEBS order) and ``disordered``
(every row delayed by up to 250 ms of event time, rows stably ordered by the delayed time:
disorder within the lateness of 300 ms, so both orders give the same answers, which the bench
checks).  Per file, ``repeat`` times alternating (file, time, file, ...) so both see the same
load: a ``Deployment`` of ``queries`` queries (``sim.bench.live.bench_queries``, WeaveShare trees
dealt over ``nodes`` nodes) in raw mode, actors warmed up, then the clock runs over ``feed_raw``
and ``finish``.  Best wall time per (file, order) counts (all in ``runs_s``); Ray and Spark
start-up are excluded, both warm (one small run of each first).
"""

from __future__ import annotations

import time
from pathlib import Path

from sim.bench.live import bench_queries, round_robin_plan

LATENESS = 300  # ms: more than the disordered file's 250 ms of delay, so nothing is late
ORDERS = {"file": "file", "time": "auto"}  # data.order -> the feed's order (sim.run_options)


def _one_run(plan, spark, path: Path, order: str, batch_rows: int):
    import ray

    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.feeds.parquet import feed_raw

    opts = DeploymentOptions(mode="raw", auto_recover=False, allowed_lateness=LATENESS)
    with Deployment(plan, opts) as dep:
        ray.get([n.actor.warmup.remote() for n in dep.nodes.values()])
        t = time.perf_counter()
        fs = feed_raw(dep, spark, str(path), batch_rows=batch_rows, order=ORDERS[order])
        res = dep.finish()
        wall = time.perf_counter() - t
    return fs, res, wall


def _files(rows: int, data_dir: Path) -> dict[str, Path]:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sim.debs_generator import generate_debs

    sorted_path = data_dir / f"debs_{rows}.parquet"
    disordered = data_dir / f"debs_{rows}_disordered.parquet"
    if not sorted_path.exists():
        tmp = data_dir / f".debs_{rows}.parquet"
        generate_debs(tmp, duration_s=rows / 100.0, rate_hz=100, seed=1)
        tmp.rename(sorted_path)
    if not disordered.exists():
        t = pq.read_table(sorted_path)
        ts = t.column("ts_ms").to_numpy()
        delay = np.random.default_rng(1).integers(0, 251, ts.shape[0])
        tmp = data_dir / f".debs_{rows}_disordered.parquet"
        pq.write_table(t.take(pa.array(np.argsort(ts + delay, kind="stable"))), tmp)
        tmp.rename(disordered)
    return {"sorted": sorted_path, "disordered": disordered}


def run_order_bench(
    rows: int = 1_000_000,
    queries: int = 100,
    *,
    nodes: int = 2,
    repeat: int = 2,
    batch_rows: int = 1 << 18,
    spark_master: str = "local[2]",
    data_dir: str | Path = "/tmp/weaveplace-bench-order",
    log=print,
) -> list[dict]:
    """Wall time of the driver feed in each order on each file; one dict per (file, order)."""
    from cluster.feeds.parquet import spark_session
    from cluster.runtime.ray_runtime import RayRuntime

    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    files = _files(rows, data_dir)
    plan = round_robin_plan(bench_queries(queries)[:queries], nodes, 0.1)
    out: dict[tuple[str, str], dict] = {}
    answers: dict[tuple[str, str], object] = {}
    with RayRuntime(num_cpus=2):
        spark = spark_session(spark_master, app_name="weaveplace-bench-order")
        try:
            warm = round_robin_plan(bench_queries(3)[:3], 1, 0.1)
            for path in files.values():
                for order in ORDERS:
                    _one_run(warm, spark, path, order, batch_rows)
            for i in range(max(1, repeat)):
                for name, path in files.items():
                    for order in ORDERS:
                        fs, res, wall = _one_run(plan, spark, path, order, batch_rows)
                        log(
                            f"{name:10s} {order:4s} run {i + 1}: {wall:.2f} s "
                            f"({fs.rows / wall:,.0f} rows/s, Spark sorted {fs.sorted_chunks} "
                            f"of {fs.chunks} chunks)"
                        )
                        r = out.setdefault(
                            (name, order),
                            {"file": name, "order": order, "queries": queries, "rows": fs.rows},
                        )
                        r.setdefault("runs_s", []).append(wall)
                        r["late"] = res.late.num_rows
                        answers.setdefault((name, order), res.answers)
        finally:
            spark.stop()
    ref = answers[("sorted", "time")].sort_by(
        [("query_id", "ascending"), ("window_start", "ascending")]
    )
    rows_out = []
    for (name, order), r in out.items():
        r["seconds"] = min(r["runs_s"])
        r["rows_per_s"] = r["rows"] / r["seconds"]
        a = answers[(name, order)].sort_by(
            [("query_id", "ascending"), ("window_start", "ascending")]
        )
        r["answers_equal"] = a.equals(ref) and r["late"] == 0
        rows_out.append(r)
    for r in rows_out:
        if r["order"] == "file":
            r["file_over_time"] = r["seconds"] / out[(r["file"], "time")]["seconds"]
    return rows_out


def format_table(rows: list[dict]) -> str:
    lines = [
        f"{'file':10s} {'order':5s} {'queries':>7s} {'rows':>10s} {'best s':>7s} {'rows/s':>10s}"
        "  answers equal  file/time"
    ]
    for r in rows:
        ratio = f"{r['file_over_time']:.2f}" if "file_over_time" in r else ""
        lines.append(
            f"{r['file']:10s} {r['order']:5s} {r['queries']:7d} {r['rows']:10,d} "
            f"{r['seconds']:7.2f} {r['rows_per_s']:10,.0f}  {str(r['answers_equal']):13s}  {ratio}"
        )
    return "\n".join(lines)
