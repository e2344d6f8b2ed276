"""The start-up path every run shares: Ray and Spark started at the same time, then the
deployment, each stopped in reverse, plus ``plan_final.json`` at the end.

Why one module: a file run and a directory run differ only in what they feed; both load a plan,
start (or borrow) Ray and Spark, deploy, and record the layout as it ran. Written once here, they
cannot drift apart.

Why at the same time: Ray (4-11 s here) and Spark's JVM (3-5 s) need nothing from each other,
and one after the other they made up most of the wait before the first row.  Spark starts on a
thread of its own, followed there by the input's first read (``prepare``: a Parquet file
resolved and its first chunk pulled), while the main thread starts Ray and then the
deployment's actors; the run waits for Spark only when it needs the session, so the first row
is fed as soon as the slower of the two sides is done.  Whatever else is needed only once Ray
is up overlaps its start too: the plan (a ``PlanSource`` may be a callable, waited for then:
``sim.cluster_run`` makes it on a thread) and the deployment's modules (``preload``).  At the
end, work on the written outputs (the report) runs while the runtimes stop
(``WhileStopping``).  Ray stays on the main thread because ``ray.init`` takes SIGTERM over there
and the hand-over to SIGINT (``cluster.runtime.signals``) can only be put back from the main
thread; PySpark installs its SIGINT handler only when its context is created on the main
thread, so a session started on the thread installs none (``on_new_spark`` still runs, on the
main thread, once the session is there).
"""

from __future__ import annotations

import importlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cluster.deployment.options import DeploymentOptions
from cluster.feeds.parquet import spark_session
from cluster.runs.options import RuntimeOptions
from cluster.runtime import collector
from cluster.runtime.ray_runtime import RayRuntime
from cluster.runtime.signals import reinstall_sigterm_as_sigint, sigterm_as_sigint

if TYPE_CHECKING:
    from cluster.deployment.deployment import Deployment

#: a plan: the dict, the JSON file it is in, or a callable returning the dict once it is made
#: (``sim.cluster_run`` makes the plan while Ray and Spark start)
PlanSource = Mapping[str, Any] | str | Path | Callable[[], Mapping[str, Any]]


#: what a node actor imports before its first batch: its code (numba's kernels' modules) and
#: pandas, which pyarrow imports on the first array it builds
NODE_MODULES = ("cluster.node.actor", "pandas")


def load_plan(plan: PlanSource) -> Mapping[str, Any]:
    """The plan dict of ``plan``: read from its file, or waited for (a callable)."""
    if callable(plan):
        return plan()
    return json.loads(Path(plan).read_text()) if isinstance(plan, (str, Path)) else plan


def new_ray(runtime: RuntimeOptions) -> AbstractContextManager:
    """Ray for ``runtime``: started, attached or borrowed (``RayRuntime``); an embedded Ray's
    workers import the node actors' code as they start (``NODE_MODULES``)."""
    return RayRuntime(
        address=runtime.ray_address,
        num_cpus=runtime.num_cpus,
        failure_timeout_s=runtime.failure_timeout_s,
        preload=NODE_MODULES,
    )


def new_spark(runtime: RuntimeOptions) -> Any:
    """A Spark session on ``runtime.spark_master``, its executor heartbeat timeout bounded by
    ``failure_timeout_s`` (``spark_failure_conf``)."""
    from cluster.feeds.executors import spark_failure_conf  # on Spark's thread, not Ray's way

    return spark_session(runtime.spark_master, conf=spark_failure_conf(runtime.failure_timeout_s))


class SparkStart:
    """A Spark session being started on a thread of its own, then the input's first read.

    ``wait`` returns the session (or raises what its start raised); ``prepared`` waits for
    what ``prepare(session)`` returned (or raises what it raised), so that resolving the file
    and pulling its first chunk overlap Ray's and the actors' start too.  ``stop`` stops the
    session (``owned``: one this run started) once the thread is over, whether or not anyone
    waited for it (a run that ended before it needed Spark).  Both block in the caller's
    thread while the start goes on; a Ctrl-C there interrupts the wait (the thread is a
    daemon: it never keeps the process alive)."""

    def __init__(
        self,
        start: Callable[[], Any],
        prepare: Callable[[Any], Any] | None = None,
        owned: bool = True,
    ):
        self.session: Any = None
        self.error: BaseException | None = None
        self.seconds: float | None = None  # how long the start took, once over
        self.owned = owned
        self._prepared: Any = None
        self._prepare_error: BaseException | None = None
        self._stopped = False
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(
            target=self._run, args=(start, prepare), name="weaveplace-spark-start", daemon=True
        )
        self._started = threading.Event()  # the session is there (or its start failed)
        self._thread.start()

    def _run(self, start: Callable[[], Any], prepare: Callable[[Any], Any] | None) -> None:
        try:
            self.session = start()
        except BaseException as exc:  # noqa: BLE001  (handed to whoever waits)
            self.error = exc
        finally:
            self.seconds = time.perf_counter() - self._t0
            self._started.set()
        if prepare is None or self.error is not None:
            return
        try:
            self._prepared = prepare(self.session)
        except BaseException as exc:  # noqa: BLE001  (raised where the input is read)
            self._prepare_error = exc

    def wait(self) -> Any:
        self._started.wait()
        if self.error is not None:
            raise self.error
        return self.session

    def prepared(self) -> Any:
        """What ``prepare`` returned, once it is over (None without one)."""
        self.wait()
        self._thread.join()
        if self._prepare_error is not None:
            raise self._prepare_error
        return self._prepared

    def stop(self) -> None:
        self._thread.join()
        if self.owned and self.session is not None and not self._stopped:
            self._stopped = True
            self.session.stop()


class Runtimes:
    """What ``started_runtimes`` yields: Ray running, Spark running or still starting.

    ``startup``: the figures for the metrics (``started_runtimes``); ``t0``: ``perf_counter()``
    when the start-up began, the origin of every ``*_s`` in it after ``ray_s``."""

    def __init__(
        self,
        t0: float,
        startup: dict[str, Any],
        spark: Any = None,
        starting: SparkStart | None = None,
        on_new_spark: Callable[[], None] | None = None,
    ):
        self.t0 = t0
        self.startup = startup
        self._spark = spark
        self._starting = starting
        self._on_new_spark = on_new_spark

    def spark(self) -> Any:
        """The Spark session; the first call waits for a session this run starts, records
        ``spark_s`` (its own start, overlapping Ray's) and runs ``on_new_spark``."""
        if self._starting is not None and self._spark is None:
            self._spark = self._starting.wait()
            if self._starting.owned:
                self.startup["spark_s"] = self._starting.seconds
                if self._on_new_spark:
                    self._on_new_spark()
        return self._spark

    def prepared(self) -> Any:
        """What ``prepare`` (``started_runtimes``) made of the session, once it is over."""
        self.spark()
        return None if self._starting is None else self._starting.prepared()


@contextmanager
def started_runtimes(
    runtime: RuntimeOptions,
    on_new_spark: Callable[[], None] | None = None,
    *,
    start_ray: Callable[[RuntimeOptions], AbstractContextManager] = new_ray,
    start_spark: Callable[[RuntimeOptions], Any] = new_spark,
    prepare: Callable[[Any], Any] | None = None,
) -> Iterator[Runtimes]:
    """Ray (started unless one is running or ``runtime.ray_address`` is given) and a Spark
    session (started unless ``runtime.spark`` is given), started at the same time: Spark on a
    thread, Ray on the calling thread (``Runtimes.spark`` waits for the session).  Each is
    stopped on exit if this run started it, Spark first, also when the other failed to start.
    ``start_ray``, ``start_spark``: what starts each (tests put stand-ins there).
    ``prepare(session)``: the input's first read, run on Spark's thread once the session is
    there (a session passed in too), while Ray and the actors start (``Runtimes.prepared``).

    ``Runtimes.startup`` = ``{ray_s, ray_owned, ray_auth, failure_detection_s, spark_s}`` for
    the metrics (``failure_detection_s``: the bound Ray applies on declaring a silent host
    dead; ``spark_s``: 0 for a session passed in, else set once the session is waited for).
    ``on_new_spark`` runs on the calling thread when a session this run started is first
    waited for (a directory run takes Ctrl-C back from whatever took it).  From start to end
    SIGTERM does what SIGINT does (``cluster.runtime.signals``), Ray's own SIGTERM handler
    replaced once Ray runs."""
    t0 = time.perf_counter()
    if runtime.spark is None:
        starting = SparkStart(lambda: start_spark(runtime), prepare)
    elif prepare is not None:  # a borrowed session: only its first read overlaps
        starting = SparkStart(lambda: runtime.spark, prepare, owned=False)
    else:
        starting = None
    try:
        with sigterm_as_sigint(), start_ray(runtime) as rt:
            reinstall_sigterm_as_sigint()  # ray.init took SIGTERM over (cluster.runtime.signals)
            startup = {
                "ray_s": time.perf_counter() - t0,
                "ray_owned": rt.owned,
                "ray_auth": rt.auth,
                "failure_detection_s": rt.failure_detection_s,
                "spark_s": 0.0,
            }
            try:
                yield Runtimes(t0, startup, runtime.spark, starting, on_new_spark)
            finally:
                if starting is not None:
                    starting.stop()  # before Ray, as ever
    finally:
        if starting is not None:
            starting.stop()  # Ray's start failed or was interrupted: Spark's is stopped too


class WhileStopping:
    """Work that overlaps the stop of the runtimes: ``start(fn)`` runs ``fn()`` on a thread of
    its own; ``join()`` waits for it and raises what it raised (``raise_error=False``: only
    waits, when the run is failing already).

    Why: an embedded Ray takes 1-1.5 s to stop, mostly waiting for its processes to exit, and
    the actors and Spark take a little more; a run's report (about 1.5 s of plotting) reads
    only the files the run wrote before, so it is made meanwhile instead of after.  The
    thread is not a daemon: a process that ends keeps it until it is done."""

    def __init__(self):
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def start(self, fn: Callable[[], Any]) -> None:
        def work() -> None:
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001  (raised by join, in the caller)
                self._error = exc

        self._thread = threading.Thread(target=work, name="weaveplace-while-stopping")
        self._thread.start()

    def join(self, raise_error: bool = True) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        error, self._error = self._error, None
        if error is not None and raise_error:
            raise error


@dataclass
class StartedRun:
    """What a run feeds and reads: the Spark session, the deployment and the start-up times
    (``startup``; ``t0``: ``perf_counter()`` when the start-up began)."""

    spark: Any
    deployment: Deployment
    startup: dict[str, Any]
    t0: float
    # waits for what ``started_run``'s ``prepare`` made of the session (None: no prepare)
    prepared: Callable[[], Any] | None = None

    def note_first_row(self) -> dict[str, Any]:
        """``startup["first_row_s"]``: seconds from the start-up's beginning to the first rows
        handed to the deployment (``None`` if none were); returns ``startup``."""
        at = self.deployment.first_row_at
        self.startup["first_row_s"] = None if at is None else at - self.t0
        return self.startup


@contextmanager
def started_run(
    plan: PlanSource,
    runtime: RuntimeOptions,
    options: DeploymentOptions,
    on_new_spark: Callable[[], None] | None = None,
    prepare: Callable[[Any], Any] | None = None,
) -> Iterator[StartedRun]:
    """``plan`` (``PlanSource``: a plan still being made is waited for once Ray is up) deployed
    on started (or borrowed) runtimes; everything this run started is stopped on exit, the
    deployment first.  The actors are created while Spark
    is still starting; ``startup`` gains ``deployment_s`` (creating them, once Ray was up) and
    ``ready_s`` (from the beginning until Ray, Spark and the actors are all up).
    ``prepare(session)``: the input's first read (``cluster.feeds.parquet.open_raw``), on
    Spark's thread while the actors start; ``StartedRun.prepared()`` returns what it returned
    (an error it raised is raised there, where the feed would have met it)."""
    preloading = preload("cluster.deployment.deployment")
    with started_runtimes(runtime, on_new_spark, prepare=prepare) as rts:
        plan = load_plan(plan)
        preloading.join()
        from cluster.deployment.deployment import Deployment

        t = time.perf_counter()
        with Deployment(plan, options) as dep:
            rts.startup["deployment_s"] = time.perf_counter() - t
            spark = rts.spark()
            rts.startup["ready_s"] = time.perf_counter() - rts.t0
            dep.start_clock()  # wall_s: from here, as when Spark started before the actors
            with collector.frozen():  # the plan, the deployment: never traversed while it runs
                yield StartedRun(
                    spark, dep, rts.startup, rts.t0, rts.prepared if prepare is not None else None
                )


def preload(module: str) -> threading.Thread:
    """``module`` imported on a daemon thread of its own, which is returned (an error is left
    for the import that needs the module to raise).

    Why: the deployment's modules (the node actors' code, numba's kernels, pyarrow's compute
    functions) take about 0.8 s to import and are needed only once Ray is up; imported while
    Ray starts, they are not on the way to the first row."""

    def work() -> None:
        try:
            importlib.import_module(module)
        except BaseException:  # noqa: BLE001, S110  (raised again where it is imported)
            pass

    thread = threading.Thread(target=work, name="weaveplace-preload", daemon=True)
    thread.start()
    return thread


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
