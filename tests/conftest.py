"""Test-session set-up: hypothesis profiles, the ``cluster`` marker, shared Ray and Spark.

Hypothesis profiles (``HYPOTHESIS_PROFILE``, default ``ci``): ``ci`` runs every property test with
its full example count, ``dev`` with few, for the inner loop. Both drop the deadline (a shared,
loaded machine and first-call numba compiles make per-example timings meaningless) and the
too-slow health check for the same reason. A test whose cost needs its own count uses
``helpers.examples(n)``, which the ``dev`` profile caps.

Session-scoped Ray and Spark: ``ray.init`` costs 6-11 s and ~1 GB, a Spark session ~15 s
(docs/DESIGN.md s. 8), and the machine is shared: the whole test session starts at most one of
each, lazily (only when a test asks for the fixture; Spark also beside Ray when some collected
test will ask for it, ``_SparkStart``) and always stops them at the end, also after failures.
A test that asks for either fixture is marked ``cluster`` here, so `make test-fast` (``-m "not
cluster and not slow"``) can never start them.

Spark drivers started by tests run their JVM with C1 only and the serial collector
(``TEST_SPARK_SUBMIT_OPTS`` below, through ``SPARK_SUBMIT_OPTS``, which the CLI and driver
subprocesses of the tests inherit; set ``SPARK_SUBMIT_OPTS=`` to run them with the JVM's
defaults): on test-sized data a driver's life is its start-up and first queries.

Parallel runs (``pytest -n 2``, pytest-xdist; `make test`): each worker process is a test
session of its own, with its own lazy Ray and Spark. Most of the suite's wall time is waiting
(start-ups, subprocesses, streams), so two workers overlap it. ``--dist loadfile`` keeps a
module on one worker, so its module-scoped fixtures (one live run shared by many checks) are
built once. Each worker's Ray keeps its session files under a ``RAY_TMPDIR`` of its own, so two
local clusters never share a ``session_latest``.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "dev", max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def _worker_ray_tmpdir() -> None:
    """Under pytest-xdist, ``RAY_TMPDIR`` gets the worker's id appended (inherited by the Ray
    and CLI subprocesses the worker starts): ``/tmp/ray-tests`` becomes ``/tmp/ray-tests-gw0``."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        from cluster.runtime.ray_runtime import DEFAULT_TMPDIR

        os.environ["RAY_TMPDIR"] = f"{os.environ.get('RAY_TMPDIR') or DEFAULT_TMPDIR}-{worker}"


_worker_ray_tmpdir()

#: JVM flags for every Spark driver a test starts: the session's below and those of the CLI
#: runs and drivers the tests start as subprocesses (they inherit this environment; the Spark
#: launcher adds ``SPARK_SUBMIT_OPTS`` to the driver's command).  A test's data is small, so a
#: driver JVM's life is mostly its start-up and first queries, where the C2 compiler's threads
#: cost more CPU than their code gives back: C1 alone and the serial collector halve a
#: driver's CPU to its first answers (BENCHMARKS.md).  Tests only: real runs keep the defaults.
TEST_SPARK_SUBMIT_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
os.environ.setdefault("SPARK_SUBMIT_OPTS", TEST_SPARK_SUBMIT_OPTS)

CLUSTER_FIXTURES = {"ray_session", "spark"}


def pytest_collection_modifyitems(config, items):
    """Every test that (directly or through another fixture) uses Ray or Spark is ``cluster``."""
    for item in items:
        if CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.cluster)


class _SparkStart:
    """The test session's Spark, started on a thread: ``ray_session`` starts it before Ray when
    some collected test uses ``spark`` (as a run starts the two at once, cluster/runs/startup.py),
    so a worker's first cluster test waits for the slower of the two, not their sum."""

    def __init__(self) -> None:
        self.future: Future | None = None
        self.claimed = False  # the ``spark`` fixture took it (and stops it)

    def start(self) -> None:
        if self.future is None:
            from cluster.feeds.parquet import spark_session

            pool = ThreadPoolExecutor(1, thread_name_prefix="test-spark-start")
            self.future = pool.submit(spark_session, "local[2]", app_name="weaveplace-tests")
            pool.shutdown(wait=False)

    def get(self):
        self.start()
        assert self.future is not None
        self.claimed = True
        return self.future.result()

    def stop_unclaimed(self) -> None:
        if self.future is not None and not self.claimed and self.future.exception() is None:
            self.future.result().stop()


_SPARK = _SparkStart()


@pytest.fixture(scope="session")
def ray_session(request):
    """An embedded local Ray (2 CPUs, 127.0.0.1, no dashboard, its workers importing the node
    code as they start, as a run's); yields the RayRuntime. Spark starts beside it when some
    collected test uses it (``_SparkStart``)."""
    from cluster.runs.startup import NODE_MODULES
    from cluster.runtime.ray_runtime import RayRuntime

    if any("spark" in getattr(i, "fixturenames", ()) for i in request.session.items):
        _SPARK.start()
    rt = RayRuntime(num_cpus=2, preload=NODE_MODULES).start()
    try:
        yield rt
    finally:
        rt.stop()
        _SPARK.stop_unclaimed()


@pytest.fixture(scope="session")
def spark():
    """A quiet local[2] Spark session shared by the whole test session."""
    s = _SPARK.get()
    try:
        yield s
    finally:
        s.stop()
