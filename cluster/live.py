"""``run_live``: one live run end to end (Ray actors fed by Spark), written to an output folder.

Why a single function: ``weaveplace run CONFIG`` (mode live) needs exactly this, and tests and
benchmarks want the same path.  It owns what it starts: Ray (unless one is running or an address
is given) and the actors always; the Spark session only if none was passed in.

Outputs in ``out_dir``:

* ``answers.parquet`` (and ``answers.csv`` with ``csv=True``): ``query_id: string,
  window_start: int64, window_end: int64, value: int64 | float64`` (DESIGN.md s. 1), sorted by
  ``(query_id, window_start)``;
* ``late.parquet``: late tuples per tree (``node_id, tree_id, stream, ts_ms, value``); a tuple
  late for two trees appears twice;
* ``metrics.json``: feed throughput and per-node metrics (tuples, answers, late tuples, busy
  seconds, utilisation, queue depths, driver blocking, recoveries, Ray node pins), nodes lost for
  good and their re-placements (moved trees, cost change), the fault drill;
* ``plan_final.json``: only if a node was lost: the plan as it ran at the end (the lost nodes'
  trees on their new nodes; verifiable like any plan).
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Mapping

import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from .deploy import Deployment, RunResult
from .ray_runtime import RayRuntime
from .spark_feed import feed_raw, feed_sliced, spark_session


def write_result(result: RunResult, out_dir: str | Path, *, csv: bool = False,
                 extra: Mapping[str, Any] | None = None) -> dict[str, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"answers": out / "answers.parquet", "late": out / "late.parquet",
             "metrics": out / "metrics.json"}
    pq.write_table(result.answers, paths["answers"])
    pq.write_table(result.late, paths["late"])
    if csv:
        paths["answers_csv"] = out / "answers.csv"
        pacsv.write_csv(result.answers, paths["answers_csv"])
    metrics = dict(result.metrics)
    metrics.update(extra or {})
    paths["metrics"].write_text(json.dumps(metrics, indent=1, default=float))
    return paths


def run_live(plan: Mapping[str, Any] | str | Path, data_path: str | Path,
             out_dir: str | Path, *, ray_address: str | None = None, num_cpus: int = 2,
             spark=None, spark_master: str = "local[*]", technique: str | None = None,
             allowed_lateness: int = 0, mode: str = "raw", batch_rows: int = 1 << 18,
             chunk_rows: int = 1_000_000, order: str = "auto", max_in_flight: int = 4,
             checkpoint_every: int | None = None, max_log_bytes: int | None = 128 << 20,
             max_rows: int | None = None, pin_nodes: bool | None = None,
             faults: list[Mapping[str, Any]] | None = None,
             csv: bool = False) -> RunResult:
    """Deploy ``plan`` (dict or JSON path) on Ray, feed ``data_path`` (DEBS Parquet) through
    Spark, write answers, late tuples and metrics to ``out_dir``; return the ``RunResult``.

    The deployment snapshots its nodes every ``checkpoint_every`` batches and whenever its
    replay log (batches pinned in the object store) exceeds ``max_log_bytes``; a lost actor is
    then recovered exactly (answers as in a fault-free run), and a node lost for good has its
    trees re-placed on the others, exactly too (a node added by the drill: trees move to it,
    exactly; ``plan_final.json`` then holds the layout as it ran).  ``pin_nodes`` (default:
    when ``ray_address`` is given) pins plan nodes to Ray nodes round robin (``Deployment``);
    ``faults`` is a fault drill (``cluster.deploy.check_faults``).
    """
    if mode not in ("raw", "sliced"):
        raise ValueError(f"feed mode must be 'raw' or 'sliced', got {mode!r}")
    if mode == "sliced" and max_rows is not None:
        raise ValueError("max_rows is supported in raw mode only")
    if isinstance(plan, (str, Path)):
        plan = json.loads(Path(plan).read_text())
    own_spark = spark is None
    if pin_nodes is None:
        pin_nodes = ray_address not in (None, "", "local")
    t0 = time.perf_counter()
    with RayRuntime(address=ray_address, num_cpus=num_cpus) as rt:
        t_ray = time.perf_counter() - t0
        try:
            t1 = time.perf_counter()
            if own_spark:
                spark = spark_session(spark_master)
            t_spark = time.perf_counter() - t1
            with Deployment(plan, technique=technique, allowed_lateness=allowed_lateness,
                            max_in_flight=max_in_flight,
                            checkpoint_every=checkpoint_every,
                            max_log_bytes=max_log_bytes, mode=mode, pin_nodes=pin_nodes,
                            faults=faults) as dep:
                if mode == "sliced":
                    fs = feed_sliced(dep, spark, str(data_path), batch_rows=batch_rows,
                                     chunk_rows=chunk_rows, order=order)
                else:
                    fs = feed_raw(dep, spark, str(data_path), batch_rows=batch_rows,
                                  chunk_rows=chunk_rows, order=order, max_rows=max_rows)
                t2 = time.perf_counter()
                result = dep.finish()
                t_finish = time.perf_counter() - t2
                final_plan = dep.plan
        finally:
            if own_spark and spark is not None:
                spark.stop()
    extra = {"feed": {"mode": mode, "rows": fs.rows, "batches": fs.batches,
                      "seconds": fs.seconds, "spark_seconds": fs.spark_seconds,
                      "rows_per_s": fs.rows_per_s, "batch_rows": batch_rows,
                      "chunks": fs.chunks, "sorted_chunks": fs.sorted_chunks,
                      "slices": fs.slices, "timeline": fs.timeline,
                      "order": order},
             "startup": {"ray_s": t_ray, "ray_owned": rt.owned, "spark_s": t_spark},
             "finish_s": t_finish, "data_path": str(data_path)}
    result.metrics.update(extra)
    write_result(result, out_dir, csv=csv)
    final = Path(out_dir) / "plan_final.json"
    if result.replacements or result.additions:  # the layout changed during the run
        final.write_text(json.dumps(final_plan, indent=1))
    elif final.exists():  # a previous run's, in the same output directory: not this run's plan
        final.unlink()
    return result
