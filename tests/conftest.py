"""Test-session set-up: hypothesis profiles, the ``cluster`` marker, shared Ray and Spark.

Hypothesis profiles (``HYPOTHESIS_PROFILE``, default ``ci``): ``ci`` runs every property test with
its full example count, ``dev`` with few, for the inner loop. Both drop the deadline (a shared,
loaded machine and first-call numba compiles make per-example timings meaningless) and the
too-slow health check for the same reason. A test whose cost needs its own count uses
``helpers.examples(n)``, which the ``dev`` profile caps.

Session-scoped Ray and Spark: ``ray.init`` costs 6-11 s and ~1 GB, a Spark session ~15 s
(docs/DESIGN.md s. 8), and the machine is shared: the whole test session starts at most one of
each, lazily (only when a test asks for the fixture) and always stops them at the end, also after
failures. A test that asks for either fixture is marked ``cluster`` here, so `make test-fast`
(``-m "not cluster and not slow"``) can never start them.

Parallel runs (``pytest -n 2``, pytest-xdist; `make test`): each worker process is a test
session of its own, with its own lazy Ray and Spark. Most of the suite's wall time is waiting
(start-ups, subprocesses, streams), so two workers overlap it. ``--dist loadfile`` keeps a
module on one worker, so its module-scoped fixtures (one live run shared by many checks) are
built once. Each worker's Ray keeps its session files under a ``RAY_TMPDIR`` of its own, so two
local clusters never share a ``session_latest``.
"""

from __future__ import annotations

import os

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

CLUSTER_FIXTURES = {"ray_session", "spark"}


def pytest_collection_modifyitems(config, items):
    """Every test that (directly or through another fixture) uses Ray or Spark is ``cluster``."""
    for item in items:
        if CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(scope="session")
def ray_session():
    """An embedded local Ray (2 CPUs, 127.0.0.1, no dashboard); yields the RayRuntime."""
    from cluster.runtime.ray_runtime import RayRuntime

    rt = RayRuntime(num_cpus=2).start()
    try:
        yield rt
    finally:
        rt.stop()


@pytest.fixture(scope="session")
def spark():
    """A quiet local[2] Spark session shared by the whole test session."""
    from cluster.feeds.parquet import spark_session

    s = spark_session("local[2]", app_name="weaveplace-tests")
    try:
        yield s
    finally:
        s.stop()
