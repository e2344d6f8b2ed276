"""``run_file``: a run over one file end to end (Ray actors fed by Spark), written to a folder.

Why a single function: ``weaveplace run CONFIG`` (mode live) needs exactly this, and tests and
benchmarks want the same path.  It owns what it starts: Ray (unless one is running or an address
is given) and the actors always; the Spark session only if none was passed in
(``cluster.runs.startup``, shared with ``cluster.runs.directory_run``).

Outputs in ``out_dir``:

* ``answers.parquet`` (and ``answers.csv`` with ``feed.csv``): ``query_id: string,
  window_start: int64, window_end: int64, value: int64 | float64`` (docs/DESIGN.md s. 1),
  sorted by ``(query_id, window_start)``;
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
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from cluster.debs.reader import is_parquet_name
from cluster.deployment.options import DeploymentOptions
from cluster.deployment.result import RunResult
from cluster.deployment.specs import DeploymentError
from cluster.feeds.file_order import first_disorder, is_local_file, sliced_file_order_refusal
from cluster.feeds.parquet import feed_raw, open_raw
from cluster.runs.options import FileFeedOptions, RuntimeOptions
from cluster.runs.startup import (
    PlanSource,
    StartedRun,
    WhileStopping,
    load_plan,
    started_run,
    write_fault_events,
    write_final_plan,
)


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
        import pyarrow.csv as pacsv

        paths["answers_csv"] = out / "answers.csv"
        pacsv.write_csv(result.answers, paths["answers_csv"])
    metrics = dict(result.metrics)
    metrics.update(extra or {})
    paths["metrics"].write_text(json.dumps(metrics, indent=1, default=float))
    return paths


def run_file(
    plan: PlanSource,
    data_path: str | Path,
    out_dir: str | Path,
    *,
    runtime: RuntimeOptions = RuntimeOptions(),
    deployment: DeploymentOptions = DeploymentOptions(),
    feed: FileFeedOptions = FileFeedOptions(),
    then: Callable[[RunResult], Any] | None = None,
) -> RunResult:
    """Deploy ``plan`` (dict, JSON path, or a callable returning the dict: a plan still being
    made, waited for once Ray is up) on Ray, feed ``data_path`` through Spark, write answers,
    late tuples and metrics to ``out_dir``; return the ``RunResult``.

    ``data_path``: DEBS Parquet (``.parquet``/``.pq``) or DEBS text (any other name): Spark
    tasks parse the text by byte ranges (``cluster.feeds.text``; ``feed.extra_columns`` and
    ``feed.text_range_bytes`` apply there), malformed lines go to
    ``out_dir/rejects/<file>.rejects.tsv`` and the run goes on; ``metrics["text"]`` counts
    lines, rejects, glued lines split and extra columns dropped.

    ``deployment`` is the deployment's settings as given (``out_dir`` is filled in for the
    actors' answer route): it snapshots its nodes every ``checkpoint_every`` batches and
    whenever its replay log exceeds ``max_log_bytes``; a lost actor is then recovered exactly
    (answers as in a fault-free run), and a node lost for good has its trees re-placed on the
    others, exactly too (a node added by the drill: trees move to it, exactly;
    ``plan_final.json`` then holds the layout as it ran).  ``pin_nodes`` pins plan nodes to Ray
    nodes (``cluster.runs.options.default_pinning`` gives the usual choice: when attached to a
    cluster by address); ``faults`` is a fault drill (``cluster.deployment.drills``).

    ``deployment.answers``: ``"driver"`` (the actors hand their answers to the driver, which
    merges and writes them; the fastest route on one machine) or ``"actors"`` (each node actor
    writes ``answers.parquet/node=<id>/part-<k>.parquet`` and ``late.parquet/...`` itself, the
    driver commits part names: ``cluster.answers.sink``).  ``feed.route``: see
    ``FileFeedOptions``.

    ``then(result)``: work on the written outputs (``weaveplace run``'s report), done on a
    thread while the actors, Spark and Ray stop (``cluster.runs.startup.WhileStopping``);
    ``run_file`` returns once both are over and raises what ``then`` raised.
    """
    if deployment.answers == "actors" and feed.csv:
        raise ValueError("answers.csv needs the answers on the driver (answers: driver)")
    if deployment.mode == "sliced" and feed.max_rows is not None:
        raise ValueError("max_rows is supported in raw mode only")
    asked_order = feed.order
    if deployment.mode == "sliced" and feed.route == "driver":  # refused before any start-up
        feed = replace(feed, order=_sliced_order(data_path, feed.order))
    if deployment.answers == "actors":
        deployment = deployment.with_(out_dir=out_dir)
    prepare = first_read(plan, data_path, feed, deployment.mode)
    after = WhileStopping()
    try:
        with started_run(plan, runtime, deployment, prepare=prepare) as run:
            fs, text_metrics = _feed_file(run, data_path, out_dir, feed, deployment.mode)
            run.note_first_row()
            t2 = time.perf_counter()
            result = run.deployment.finish()
            t_finish = time.perf_counter() - t2
            result.metrics.update(
                _run_metrics(fs, text_metrics, feed, deployment.mode, asked_order, data_path)
            )
            result.metrics.update(startup=run.startup, finish_s=t_finish)
            write_result(result, out_dir, csv=feed.csv)
            replaced = bool(result.replacements or result.additions)
            write_final_plan(out_dir, run.deployment.plan, replaced)
            write_fault_events(out_dir, result.metrics)
            if then is not None:
                after.start(partial(then, result))
    except BaseException:
        after.join(raise_error=False)  # the run's own error is the one to tell
        raise
    after.join()
    return result


def _run_metrics(fs, text_metrics, feed: FileFeedOptions, mode: str, asked_order: str, data_path):
    """What a file run adds to the deployment's metrics: the feed's figures, the text stage's
    (a DEBS text file) and the input's path."""
    extra = {
        "feed": {
            "mode": mode,
            "rows": fs.rows,
            "batches": fs.batches,
            "seconds": fs.seconds,
            "spark_seconds": fs.spark_seconds,
            "resolve_seconds": fs.resolve_seconds,
            "early_seconds": fs.early_seconds,
            "rows_per_s": fs.rows_per_s,
            "batch_rows": feed.batch_rows,
            "chunks": fs.chunks,
            "sorted_chunks": fs.sorted_chunks,
            "slices": fs.slices,
            "timeline": fs.timeline,
            "pushed": fs.pushed,
            "order": asked_order,
            "route": feed.route,
        },
        "data_path": str(data_path),
    }
    if text_metrics is not None:
        extra["text"] = text_metrics
    return extra


def _feed_file(
    run: StartedRun, data_path: str | Path, out_dir: str | Path, feed: FileFeedOptions, mode: str
):
    """Feed the whole file by ``feed.route`` in the deployment's ``mode``; returns the feed's
    stats and, for a DEBS text file, the text stage's metrics (else ``None``)."""
    dep, spark = run.deployment, run.spark
    if feed.route == "executors":
        from cluster.feeds.executors import feed_executors

        return feed_executors(dep, spark, str(data_path), batch_rows=feed.batch_rows), None
    if not is_parquet_name(Path(data_path).name):
        from cluster.feeds.text import TextFeedOptions, feed_text

        fs, stage = feed_text(
            dep,
            spark,
            data_path,
            out_dir,
            TextFeedOptions(
                mode=mode,
                batch_rows=feed.batch_rows,
                chunk_rows=feed.chunk_rows,
                order=feed.order,
                max_rows=feed.max_rows,
                extra_columns=feed.extra_columns,
                range_bytes=feed.text_range_bytes,
            ),
        )
        return fs, stage.metrics()
    if mode == "sliced":
        from cluster.feeds.sliced import feed_sliced

        return feed_sliced(
            dep,
            spark,
            str(data_path),
            batch_rows=feed.batch_rows,
            chunk_rows=feed.chunk_rows,
            order=feed.order,
        ), None
    return feed_raw(
        dep,
        spark,
        str(data_path),
        batch_rows=feed.batch_rows,
        chunk_rows=feed.chunk_rows,
        order=feed.order,
        max_rows=feed.max_rows,
        opened=run.prepared() if run.prepared is not None else None,
    ), None


def first_read(plan: PlanSource, data_path, feed: FileFeedOptions, mode: str):
    """The file's first read, for the start-up to do on Spark's thread while Ray and the
    actors start (``open_raw``, of the plan's streams: a plan still being made is waited for
    there); on the default path (raw tuples of a Parquet file through the driver); None
    elsewhere (those feeds read the file themselves)."""
    if mode != "raw" or feed.route != "driver" or not is_parquet_name(Path(data_path).name):
        return None

    def read(session):
        nodes = load_plan(plan)["nodes"]
        return open_raw(
            session,
            path=str(data_path),
            streams=sorted({t["stream"] for n in nodes for t in n["trees"]}),
            batch_rows=feed.batch_rows,
            chunk_rows=feed.chunk_rows,
            order=feed.order,
        )

    return read


def _sliced_order(data_path: str | Path, order: str) -> str:
    """Sliced mode aggregates in time order, so file order is exact only for a file in time
    order: then it is read as ``"auto"`` reads it; a local Parquet file out of time order is
    refused in one line (``DeploymentError``), as the executor route refuses it.  (A DEBS text
    file is checked by ``feed_text`` once Spark has parsed it.)"""
    if order != "file" or not is_local_file(data_path):
        return order  # feed_sliced refuses "file" on a source it cannot check
    if not is_parquet_name(Path(data_path).name):
        return order
    found = first_disorder(data_path)
    if found is not None:
        raise DeploymentError(sliced_file_order_refusal(data_path, found))
    return "auto"
