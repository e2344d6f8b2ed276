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
* ``rejects/<file>.rejects.tsv``: a text input's malformed lines (``cluster.feeds.text``);
* ``metrics.json``: feed throughput and per-node metrics (tuples, answers, late tuples, busy
  seconds, utilisation, queue depths, driver blocking, recoveries, Ray node pins), nodes lost for
  good and their re-placements (moved trees, cost change), the fault drill;
* ``plan_final.json``: only if a node was lost or added: the plan as it ran at the end (moved
  trees on their new nodes; verifiable like any plan).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from cluster.debs.reader import is_parquet_name
from cluster.deployment.deployment import Deployment
from cluster.deployment.options import DeploymentOptions
from cluster.deployment.result import RunResult
from cluster.feeds.parquet import feed_raw, spark_session
from cluster.feeds.sliced import feed_sliced
from cluster.feeds.text import TextFeedOptions, feed_text
from cluster.runtime.ray_runtime import RayRuntime


def write_result(
    result: RunResult,
    out_dir: str | Path,
    *,
    csv: bool = False,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "answers": out / "answers.parquet",
        "late": out / "late.parquet",
        "metrics": out / "metrics.json",
    }
    if result.answers_dir is None:  # the actor route: the actors wrote both datasets
        pq.write_table(result.answers, paths["answers"])
        pq.write_table(result.late, paths["late"])
    if csv:
        paths["answers_csv"] = out / "answers.csv"
        pacsv.write_csv(result.answers, paths["answers_csv"])
    metrics = dict(result.metrics)
    metrics.update(extra or {})
    paths["metrics"].write_text(json.dumps(metrics, indent=1, default=float))
    return paths


def load_plan(plan: Mapping[str, Any] | str | Path) -> Mapping[str, Any]:
    """A plan dict, or the JSON file it is in."""
    return json.loads(Path(plan).read_text()) if isinstance(plan, (str, Path)) else plan


def default_pinning(pin_nodes: bool | None, ray_address: str | None) -> bool:
    """Pin plan nodes to Ray nodes when attached to a cluster by address (unless told)."""
    return ray_address not in (None, "", "local") if pin_nodes is None else pin_nodes


@contextmanager
def started_runtimes(
    ray_address: str | None,
    num_cpus: int,
    spark,
    spark_master: str,
    on_new_spark: Callable[[], None] | None = None,
) -> Iterator[tuple]:
    """Ray (started unless one is running or ``ray_address`` is given) and a Spark session
    (started unless ``spark`` is given), each stopped on exit if this run started it.  Yields
    ``(spark, startup)``; ``startup`` = ``{ray_s, ray_owned, spark_s}`` for the metrics.
    ``on_new_spark`` runs right after a session is created (a new SparkContext installs
    PySpark's SIGINT handler: ``run_stream`` takes it back)."""
    own_spark = spark is None
    t0 = time.perf_counter()
    with RayRuntime(address=ray_address, num_cpus=num_cpus) as rt:
        startup = {"ray_s": time.perf_counter() - t0, "ray_owned": rt.owned, "ray_auth": rt.auth}
        try:
            t1 = time.perf_counter()
            if own_spark:
                spark = spark_session(spark_master)
                if on_new_spark:
                    on_new_spark()
            startup["spark_s"] = time.perf_counter() - t1
            yield spark, startup
        finally:
            if own_spark and spark is not None:
                spark.stop()


def write_final_plan(out_dir: str | Path, plan: Mapping[str, Any], changed: bool) -> None:
    """``plan_final.json``: the layout as it ran, when nodes were lost or added; a previous
    run's file in the same folder is removed (it is not this run's plan)."""
    final = Path(out_dir) / "plan_final.json"
    if changed:
        final.write_text(json.dumps(plan, indent=1))
    elif final.exists():
        final.unlink()


def run_live(
    plan: Mapping[str, Any] | str | Path,
    data_path: str | Path,
    out_dir: str | Path,
    *,
    ray_address: str | None = None,
    num_cpus: int = 2,
    spark=None,
    spark_master: str = "local[*]",
    technique: str | None = None,
    allowed_lateness: int = 0,
    mode: str = "raw",
    batch_rows: int = 1 << 18,
    chunk_rows: int = 1_000_000,
    order: str = "auto",
    max_in_flight: int = 4,
    checkpoint_every: int | None = None,
    max_log_bytes: int | None = 128 << 20,
    max_rows: int | None = None,
    pin_nodes: bool | None = None,
    faults: list[Mapping[str, Any]] | None = None,
    csv: bool = False,
    extra_columns: str = "reject",
    text_range_bytes: int | None = None,
    answers: str = "driver",
    feed: str = "driver",
) -> RunResult:
    """Deploy ``plan`` (dict or JSON path) on Ray, feed ``data_path`` through Spark, write
    answers, late tuples and metrics to ``out_dir``; return the ``RunResult``.

    ``data_path``: DEBS Parquet (``.parquet``/``.pq``) or DEBS text (any other name): Spark
    tasks parse the text by byte ranges (``cluster.feeds.text``; ``extra_columns`` and
    ``text_range_bytes`` apply there), malformed lines go to
    ``out_dir/rejects/<file>.rejects.tsv`` and the run goes on; ``metrics["text"]`` counts
    lines, rejects, glued lines split and extra columns dropped.

    The deployment snapshots its nodes every ``checkpoint_every`` batches and whenever its
    replay log (batches pinned in the object store) exceeds ``max_log_bytes``; a lost actor is
    then recovered exactly (answers as in a fault-free run), and a node lost for good has its
    trees re-placed on the others, exactly too (a node added by the drill: trees move to it,
    exactly; ``plan_final.json`` then holds the layout as it ran).  ``pin_nodes`` (default:
    when ``ray_address`` is given) pins plan nodes to Ray nodes round robin (``Deployment``);
    ``faults`` is a fault drill (``cluster.deployment.drills.check_faults``).

    ``answers``: ``"driver"`` (default: the actors hand their answers to the driver, which
    merges and writes them; the fastest route on one machine) or ``"actors"`` (each node actor
    writes ``answers.parquet/node=<id>/part-<k>.parquet`` and ``late.parquet/...`` itself, the
    driver commits part names: ``cluster.answers.sink``).  ``feed``: ``"driver"`` (Spark ->
    driver -> actors) or ``"executors"`` (Spark tasks push their rows to the actors:
    ``cluster.feeds.executors``; raw mode, a local Parquet file).
    """
    if feed not in ("driver", "executors"):
        raise ValueError(f"feed must be 'driver' or 'executors', got {feed!r}")
    if answers == "actors" and csv:
        raise ValueError("answers.csv needs the answers on the driver (answers: driver)")
    if mode not in ("raw", "sliced"):
        raise ValueError(f"feed mode must be 'raw' or 'sliced', got {mode!r}")
    if mode == "sliced" and max_rows is not None:
        raise ValueError("max_rows is supported in raw mode only")
    plan = load_plan(plan)
    pin_nodes = default_pinning(pin_nodes, ray_address)
    text_metrics = None
    with started_runtimes(ray_address, num_cpus, spark, spark_master) as (spark, startup):
        with Deployment(
            plan,
            DeploymentOptions(
                technique=technique,
                allowed_lateness=allowed_lateness,
                max_in_flight=max_in_flight,
                checkpoint_every=checkpoint_every,
                max_log_bytes=max_log_bytes,
                mode=mode,
                pin_nodes=pin_nodes,
                faults=faults,
                answers=answers,
                out_dir=out_dir if answers == "actors" else None,
            ),
        ) as dep:
            if feed == "executors":
                from cluster.feeds.executors import feed_executors

                fs = feed_executors(dep, spark, str(data_path), batch_rows=batch_rows)
            elif not is_parquet_name(Path(data_path).name):
                fs, stage = feed_text(
                    dep,
                    spark,
                    data_path,
                    out_dir,
                    TextFeedOptions(
                        mode=mode,
                        batch_rows=batch_rows,
                        chunk_rows=chunk_rows,
                        order=order,
                        max_rows=max_rows,
                        extra_columns=extra_columns,
                        range_bytes=text_range_bytes,
                    ),
                )
                text_metrics = stage.metrics()
            elif mode == "sliced":
                fs = feed_sliced(
                    dep,
                    spark,
                    str(data_path),
                    batch_rows=batch_rows,
                    chunk_rows=chunk_rows,
                    order=order,
                )
            else:
                fs = feed_raw(
                    dep,
                    spark,
                    str(data_path),
                    batch_rows=batch_rows,
                    chunk_rows=chunk_rows,
                    order=order,
                    max_rows=max_rows,
                )
            t2 = time.perf_counter()
            result = dep.finish()
            t_finish = time.perf_counter() - t2
            final_plan = dep.plan
    extra = {
        "feed": {
            "mode": mode,
            "rows": fs.rows,
            "batches": fs.batches,
            "seconds": fs.seconds,
            "spark_seconds": fs.spark_seconds,
            "rows_per_s": fs.rows_per_s,
            "batch_rows": batch_rows,
            "chunks": fs.chunks,
            "sorted_chunks": fs.sorted_chunks,
            "slices": fs.slices,
            "timeline": fs.timeline,
            "pushed": fs.pushed,
            "order": order,
            "route": feed,
        },
        "startup": startup,
        "finish_s": t_finish,
        "data_path": str(data_path),
    }
    if text_metrics is not None:
        extra["text"] = text_metrics
    result.metrics.update(extra)
    write_result(result, out_dir, csv=csv)
    write_final_plan(out_dir, final_plan, bool(result.replacements or result.additions))
    return result
