"""``weaveplace run CONFIG``: a config's live run on the cluster: plan, deploy on Ray, feed
through Spark, collect, write, summarise.

Flow (one way): config -> workload -> placement (one optimizer) -> plan JSON -> cluster
(``cluster.runs.file_run.run_file``: Ray actors fed by Spark; with ``data.directory``,
``cluster.runs.directory_run.run_directory``: Structured Streaming over arriving files) ->
answers, late tuples, metrics -> summary; the config becomes the cluster's options objects in
``sim.run_options``.
Live queries read DEBS columns: a query's ``stream`` is the column name (mf01, mf02, ...), ranges
and slides are in milliseconds (``kind: time``) or tuples (``kind: count``). A stream's rate in the
cost model is the data's rate in tuples per millisecond unless ``streams`` gives one.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from placement.messages import short_repr
from placement.trees import CostModel
from sim.config import Config, ConfigError
from sim.config.paths import check_path, make_output_dir
from sim.ray_address import check_attach
from sim.simulate import plan_for, workload_point


@dataclass
class RunSummary:
    """What ``weaveplace run`` prints: the plan's estimate and what the run counted."""

    out_dir: Path
    optimizer: str
    queries: int
    nodes: int
    tuples: int
    answers: int
    late: int
    seconds: float
    estimated_total_cost: float
    estimated_max_cost: float
    metrics: dict[str, Any]


def drill_lines(metrics: dict[str, Any]) -> list[str]:
    """One line per node added (trees moved to it, cost change), per node lost for good (where
    its trees went, batches replayed, cost change), per restarted node, and per fault of the
    drill that did not fire."""
    lines = []
    for a in metrics.get("additions") or []:
        src: dict[str, int] = {}
        for node in (a.get("trees") or {}).values():
            src[node] = src.get(node, 0) + 1
        pl = a.get("planned", {})
        where = ", ".join(f"{n}: {k}" for n, k in sorted(src.items())) or "none"
        lines.append(
            f"node {a['node']} added before batch {a['before_batch']} ({a['reason']}): "
            f"{a['moved']} tree(s) moved to it (from {where}), restored from their hosts' "
            f"snapshots after batch {a['snapshot_seq']}; MaxCost "
            f"{pl.get('max_change', 0.0):+.4g}, TotalCost {pl.get('total_change', 0.0):+.4g}"
        )
    for r in metrics.get("replacements") or []:
        dest: dict[str, int] = {}
        for node in (r.get("trees") or {}).values():
            dest[node] = dest.get(node, 0) + 1
        ex, pl = r.get("executed", {}), r.get("planned", {})
        where = ", ".join(f"{n}: {k}" for n, k in sorted(dest.items())) or "none"
        woven = r.get("woven_in_plan") or []
        lines.append(
            f"node {r['node']} lost before batch {r['before_batch']} ({r['reason']}): "
            f"{r['moved']} tree(s) re-placed ({where}), restored from its snapshot after batch "
            f"{r['snapshot_seq']} + {r['replayed_batches']} replayed batch(es); TotalCost "
            f"{ex.get('total_change', 0.0):+.4g}, MaxCost {ex.get('max_change', 0.0):+.4g}"
            + (
                f" (placement would weave {len(woven)} of them: TotalCost "
                f"{pl.get('total_change', 0.0):+.4g}; run as separate trees)"
                if woven
                else ""
            )
        )
    for nid, m in sorted((metrics.get("nodes") or {}).items()):
        if m.get("recoveries"):
            lines.append(f"node {nid} restarted {m['recoveries']} time(s) from its checkpoint")
    batches = metrics.get("batches")
    more = " or give the stream more files" if metrics.get("stream") else ""
    for f in metrics.get("faults") or []:
        if not f.get("fired"):
            lines.append(
                f"fault drill: {f['kind']} {f['node']} at batch {f['at_batch']} did "
                f"not fire (the run fed {batches} batch(es); lower run.batch_rows"
                f"{more})"
            )
    return lines


def _streams(config: Config) -> list[tuple[str, str]]:
    """(config key, stream) of every query, without generating the workload."""
    wl = config.workload
    if wl.generator is not None:
        return [("workload.generator.stream", wl.generator.stream)]
    return [(f"workload.queries[{i}].stream", q.stream) for i, q in enumerate(wl.queries or [])]


def _data_columns(path: str) -> tuple[list[str], str]:
    """Columns a live run can read from ``data.path`` and a label for messages: the Parquet
    schema (read from the footer, no data) or the DEBS text layout (``cluster.debs.format``), after a
    check that the file can be opened and read."""
    from cluster.debs.format import VALUE_COLUMNS
    from cluster.debs.reader import is_parquet_name

    if is_parquet_name(path):
        import pyarrow.parquet as pq

        try:
            names = list(pq.read_schema(path).names)
        except Exception as exc:  # noqa: BLE001  (pyarrow raises several kinds)
            raise ConfigError(
                f"data.path: cannot read {path!r} as Parquet: "
                f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
            ) from None
        if "ts_ms" not in names:
            raise ConfigError(
                f"data.path: {path!r} has no ts_ms column (event time in ms); "
                f"columns: {', '.join(names[:8])}{', ...' if len(names) > 8 else ''}"
            )
        return names, f"the columns of {Path(path).name}"
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as exc:
        raise ConfigError(f"data.path: cannot read {path!r}: {exc.strerror or exc}") from None
    return list(VALUE_COLUMNS), "DEBS columns"


def _check_sliced_file_order(config: Config) -> None:
    """Sliced mode aggregates in time order, so with ``data.order: file`` a Parquet
    ``data.path`` must be in time order (its ``ts_ms`` column is read; a DEBS text file is
    checked by the run, after Spark has parsed it)."""
    from cluster.debs.reader import is_parquet_name
    from cluster.feeds.file_order import first_disorder, sliced_file_order_refusal

    path = config.data.path
    if config.run.feed_mode != "sliced" or config.data.order != "file" or path is None:
        return
    if is_parquet_name(path):
        found = first_disorder(path)
        if found is not None:
            raise ConfigError("data.order: " + sliced_file_order_refusal(path, found))


def check_cluster_run(
    config: Config, out_dir: str | Path | None = None, *, java: bool = True
) -> None:
    """Every check ``weaveplace run`` makes before doing work, so that ``weaveplace validate``
    can make the same ones and a mistake costs no Ray or Spark start-up: run.mode live, one
    workload and one cluster layout, one optimizer, a readable data source whose columns
    include every query's stream, in sliced mode with ``data.order: file`` a Parquet file in
    time order, an output directory that is not the watched one, a reachable
    Ray address that accepts our token (``cluster.runtime.ray_runtime.attach_auth``) and Java
    (PySpark 4).  Raises a one-line ``ConfigError``."""
    import shutil

    if config.run.mode != "live":
        raise ConfigError(
            f"run.mode: {short_repr(config.run.mode)}; `weaveplace run` needs run.mode: "
            "live (use `weaveplace simulate` to price plans)"
        )
    points = config.points()
    if len(points) != 1:
        raise ConfigError(
            f"a live run takes one workload and one cluster layout; this config "
            f"expands to {len(points)} (remove the list-valued parameters)"
        )
    names = config.placement.optimizer_list
    if len(names) != 1:
        hint = (
            ""
            if "optimizers" in config.placement.model_fields_set
            else " (the default; set placement.optimizers to one name, e.g. WG_TN)"
        )
        raise ConfigError(
            f"placement.optimizers: a live run takes one optimizer, got {names}{hint}"
        )
    if config.data.path is not None:
        columns, label = _data_columns(config.data.path)
    else:
        from cluster.debs.format import VALUE_COLUMNS

        columns, label = list(VALUE_COLUMNS), "DEBS columns"
    for key, stream in _streams(config):
        if stream not in columns or stream in ("ts_ms", "ts"):
            shown = [c for c in columns if c not in ("ts_ms", "ts")]
            raise ConfigError(
                f"{key}: {short_repr(stream)} is not a column of the data; live queries "
                f"read one of the {label}: {', '.join(shown[:8])}"
                f"{', ...' if len(shown) > 8 else ''}"
            )
    _check_sliced_file_order(config)
    watch = config.data.directory
    out = Path(out_dir if out_dir is not None else config.run.output_dir)
    check_path("--out" if out_dir is not None else "run.output_dir", out)
    if watch is not None and out.resolve() == Path(watch.path):
        raise ConfigError(
            f"run.output_dir: {str(out)!r} is the watched directory "
            "(data.directory.path); outputs would be read as input"
        )
    check_attach(config.cluster.ray.address)
    if java and shutil.which("java") is None:
        raise ConfigError(
            "Java is not installed or not on PATH: PySpark 4 needs Java 17 "
            "(e.g. apt-get install openjdk-17-jre-headless)"
        )


@dataclass
class PlacedRun:
    """A config's plan, placed and written, as both kinds of run start from it."""

    config: Config
    plan: Any  # placement.plan.Plan
    plan_dict: dict[str, Any]  # the plan as written to plan.json and deployed
    out: Path
    optimizer: str
    queries: int
    start: float  # perf_counter() when the run began

    def summary(self, tuples: int, answers: int, late: int, metrics: dict[str, Any]) -> RunSummary:
        return RunSummary(
            self.out,
            self.optimizer,
            self.queries,
            len(self.plan.nodes),
            tuples,
            answers,
            late,
            time.perf_counter() - self.start,
            self.plan.total_cost,
            self.plan.max_cost,
            metrics,
        )


def run_on_cluster(
    config: Config,
    out_dir: str | Path | None = None,
    progress=None,
    spark=None,
    then: Callable[[Path], Any] | None = None,
) -> RunSummary:
    """Run ``config`` live on Ray and Spark; ``progress(stage)`` is called with a short text
    per stage (with ``data.directory``, with the stream's progress line about four times a
    second).  ``spark``: a running session to use (and leave running), e.g. in tests.  Every
    check is ``check_cluster_run``'s, made before any work (``weaveplace validate`` makes the
    same).  ``then(out_dir)``: work on a file run's finished outputs (the CLI's report), done
    while Ray and Spark stop (``cluster.runs.file_run.run_file``); a directory run does not
    call it."""
    from sim.debs_generator import generate_debs

    say = progress or (lambda stage: None)
    check_cluster_run(config, out_dir, java=spark is None)
    start = time.perf_counter()
    out = Path(out_dir if out_dir is not None else config.run.output_dir)
    watch = config.data.directory
    make_output_dir("--out" if out_dir is not None else "run.output_dir", out)
    points = config.points()
    names = config.placement.optimizer_list
    point = points[0]
    queries, rates, _ = workload_point(config, point["workload"])
    if config.streams is None:
        rates = {s: config.data.rate_hz / 1000.0 for s in {q.stream for q in queries}}
    data_path = config.data.path
    if data_path is None and watch is None:
        say(f"generating {config.data.duration_s:g} s of DEBS-style data")
        data_path = out / "data.parquet"
        generate_debs(
            data_path,
            duration_s=config.data.duration_s,
            rate_hz=config.data.rate_hz,
            seed=config.data.seed,
            fmt="parquet",
        )
    name = names[0]

    def place() -> PlacedRun:
        from cluster.answers.files import atomic_write

        model = CostModel(
            config.placement.ie, rates, config.placement.engine, config.placement.slicing
        )
        plan = plan_for(name, queries, model, point["capacities"], config, strict=True)
        for node, node_id in zip(plan.nodes, point["node_ids"]):
            node.id = node_id
        plan_dict = plan.to_dict()
        # whole or not at all: a run that fails to start ends without waiting for this thread
        atomic_write(out / "plan.json", json.dumps(plan_dict, indent=1))
        return PlacedRun(config, plan, plan_dict, out, name, len(queries), start)

    if watch is not None:
        say(f"placing {len(queries)} queries with {name}")
        return _run_directory(place(), say, spark)
    say(f"placing {len(queries)} queries with {name} while Ray and Spark start")
    return _run_file(config, out, in_background(place), data_path, say, spark, then)


def in_background(fn: Callable[[], Any]) -> Future:
    """``fn()`` on a daemon thread, its outcome in the returned ``Future``.

    Why: a file run's plan (0.5 s for bench flink's 59 queries, minutes for 100,000 on a
    wide window menu) is needed only once Ray is up, so it is made while Ray and Spark start
    (``run_file`` takes it as a callable).  A daemon thread: a run that fails to start
    ends without waiting for the plan."""
    future: Future = Future()

    def work() -> None:
        future.set_running_or_notify_cancel()
        try:
            future.set_result(fn())
        except BaseException as exc:  # noqa: BLE001  (raised where the plan is waited for)
            future.set_exception(exc)

    threading.Thread(target=work, name="weaveplace-plan", daemon=True).start()
    return future


def _run_file(
    config: Config, out: Path, placing: Future, data_path: str | Path, say, spark, then
) -> RunSummary:
    """A file (``data.path``, or the data generated into the output folder); ``placing``:
    the ``PlacedRun`` being made (``in_background``), waited for once Ray is up."""
    from cluster.debs.reader import is_parquet_name
    from cluster.runs.file_run import run_file
    from sim.run_options import deployment_options, file_feed_options, runtime_options

    text = not is_parquet_name(Path(data_path).name)
    say(
        "deploying on Ray and feeding through Spark"
        + (" (DEBS text: Spark tasks parse byte ranges first)" if text else "")
    )
    deployment = deployment_options(config, out)
    if deployment.faults:
        say(f"fault drill: {len(deployment.faults)} fault(s)")

    def written(result) -> None:  # on the outputs, while Ray and Spark stop
        if config.run.count_ops and not text:
            plan = placing.result().plan_dict
            add_cost_check(plan, result.metrics, data_path, out / "metrics.json")
        if then is not None:
            then(out)

    result = run_file(
        lambda: placing.result().plan_dict,
        data_path,
        out,
        runtime=runtime_options(config, spark),
        deployment=deployment,
        feed=file_feed_options(config),
        then=written,
    )
    metrics = result.metrics
    tuples = int(metrics.get("feed", {}).get("rows", 0)) if isinstance(metrics, dict) else 0
    return placing.result().summary(
        tuples,
        int(metrics.get("answers", 0)),
        int(metrics.get("late_tuples", 0)) if result.late_dir else result.late.num_rows,
        metrics,
    )


def add_cost_check(plan: dict, metrics: dict, data_path: str | Path, path: Path) -> None:
    """``metrics["cost_check"]`` (``sim.cost_check``: the plan's cost per node beside the one
    the counted operations give, over the data's event-time span), written to ``path``."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from cluster.answers.files import atomic_write
    from sim.cost_check import node_cost_check

    ts = pq.read_table(data_path, columns=["ts_ms"]).column("ts_ms")
    if len(ts) == 0:
        return
    span_ms = float(pc.max(ts).as_py() - pc.min(ts).as_py() + 1)
    check = node_cost_check(plan, metrics.get("nodes") or {}, span_ms)
    if check:
        metrics["cost_check"] = {"span_ms": span_ms, "nodes": check}
        atomic_write(path, json.dumps(metrics, indent=1, default=float))


def _run_directory(placed: PlacedRun, say, spark) -> RunSummary:
    """``data.directory``: Structured Streaming over the directory until a stop condition
    (``cluster.errors.StreamError`` if the stream cannot start or go on).

    ``run.batch_rows``, ``run.checkpoint_every`` and ``run.faults`` apply as in a file run:
    each file is fed in ``batch_rows``-row batches (files in arrival order), and those feed
    batches are what ``checkpoint_every`` and a drill's ``at_batch`` count (on top, every
    micro-batch ends with a checkpoint: ``Deployment.take_answers``)."""
    from cluster.runs.directory_run import run_directory
    from sim.run_options import deployment_options, runtime_options, stream_options

    config, out = placed.config, placed.out
    deployment = deployment_options(config, out)
    faults = deployment.faults
    say(
        f"starting Ray and Spark to watch {config.data.directory.path}"
        + (f" (fault drill: {len(faults)} fault(s))" if faults else "")
    )
    res = run_directory(
        placed.plan_dict,
        config.data.directory.path,
        out,
        stream=stream_options(config),
        runtime=runtime_options(config, spark),
        deployment=deployment,
        progress=lambda st: say(f"watching: {st.line()}"),
    )
    st = res.stats
    return placed.summary(st.rows, st.answers, st.late, res.metrics)
