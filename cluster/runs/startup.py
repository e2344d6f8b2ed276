"""The start-up path every run shares: the plan, Ray, Spark and the deployment, each started
in that order and stopped in reverse, plus ``plan_final.json`` at the end.

Why one module: a file run and a directory run differ only in what they feed; both load a plan,
start (or borrow) Ray and Spark, deploy, and record the layout as it ran. Written once here, they
cannot drift apart.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster.deployment.deployment import Deployment
from cluster.deployment.options import DeploymentOptions
from cluster.feeds.executors import spark_failure_conf
from cluster.feeds.parquet import spark_session
from cluster.runs.options import RuntimeOptions
from cluster.runtime.ray_runtime import RayRuntime
from cluster.runtime.signals import reinstall_sigterm_as_sigint, sigterm_as_sigint


def load_plan(plan: Mapping[str, Any] | str | Path) -> Mapping[str, Any]:
    """A plan dict, or the JSON file it is in."""
    return json.loads(Path(plan).read_text()) if isinstance(plan, (str, Path)) else plan


@contextmanager
def started_runtimes(
    runtime: RuntimeOptions, on_new_spark: Callable[[], None] | None = None
) -> Iterator[tuple]:
    """Ray (started unless one is running or ``runtime.ray_address`` is given) and a Spark
    session (started unless ``runtime.spark`` is given, with the executor heartbeat timeout
    bounded by ``failure_timeout_s``: ``spark_failure_conf``), each stopped on exit if this
    run started it.  Yields ``(spark, startup)``; ``startup`` = ``{ray_s, ray_owned, ray_auth,
    failure_detection_s, spark_s}`` for the metrics (``failure_detection_s``: the bound Ray
    applies on declaring a silent host dead).  ``on_new_spark`` runs right after a session is created (a new
    SparkContext installs PySpark's SIGINT handler: a directory run takes it back).  From
    start to end SIGTERM does what SIGINT does (``cluster.runtime.signals``), Ray's own
    SIGTERM handler replaced once Ray runs."""
    spark = runtime.spark
    own_spark = spark is None
    t0 = time.perf_counter()
    with (
        sigterm_as_sigint(),
        RayRuntime(
            address=runtime.ray_address,
            num_cpus=runtime.num_cpus,
            failure_timeout_s=runtime.failure_timeout_s,
        ) as rt,
    ):
        reinstall_sigterm_as_sigint()  # ray.init took SIGTERM over (cluster.runtime.signals)
        startup = {
            "ray_s": time.perf_counter() - t0,
            "ray_owned": rt.owned,
            "ray_auth": rt.auth,
            "failure_detection_s": rt.failure_detection_s,
        }
        try:
            t1 = time.perf_counter()
            if own_spark:
                spark = spark_session(
                    runtime.spark_master, conf=spark_failure_conf(runtime.failure_timeout_s)
                )
                if on_new_spark:
                    on_new_spark()
            startup["spark_s"] = time.perf_counter() - t1
            yield spark, startup
        finally:
            if own_spark and spark is not None:
                spark.stop()


@dataclass
class StartedRun:
    """What a run feeds and reads: the Spark session, the deployment and the start-up times."""

    spark: Any
    deployment: Deployment
    startup: dict[str, Any]


@contextmanager
def started_run(
    plan: Mapping[str, Any] | str | Path,
    runtime: RuntimeOptions,
    options: DeploymentOptions,
    on_new_spark: Callable[[], None] | None = None,
) -> Iterator[StartedRun]:
    """``plan`` (dict or JSON path) deployed on started (or borrowed) runtimes; everything this
    run started is stopped on exit, the deployment first."""
    plan = load_plan(plan)
    with started_runtimes(runtime, on_new_spark) as (spark, startup):
        with Deployment(plan, options) as dep:
            yield StartedRun(spark, dep, startup)


def write_final_plan(out_dir: str | Path, plan: Mapping[str, Any], changed: bool) -> None:
    """``plan_final.json``: the layout as it ran, when nodes were lost or added; a previous
    run's file in the same folder is removed (it is not this run's plan)."""
    final = Path(out_dir) / "plan_final.json"
    if changed:
        final.write_text(json.dumps(plan, indent=1))
    elif final.exists():
        final.unlink()


def write_fault_events(out_dir: str | Path, metrics: Mapping[str, Any]) -> None:
    """``events.jsonl``: the failures the deployment detected and its recoveries
    (``metrics["fault_log"]``, ``cluster.deployment.faults``), one JSON line each, as
    ``weaveplace serve`` logs them; ``weaveplace report`` draws them.  Only when there were
    any (a previous run's file in the same folder is removed)."""
    events = (metrics.get("fault_log") or {}).get("events") or []
    path = Path(out_dir) / "events.jsonl"
    if events:
        path.write_text("".join(json.dumps(e, default=str) + "\n" for e in events))
    elif path.exists():
        path.unlink()
