"""Test-session set-up: hypothesis profiles, the ``cluster`` marker, shared Ray and Spark.

Hypothesis profiles (``HYPOTHESIS_PROFILE``, default ``ci``): ``ci`` runs every property test with
its full example count, ``dev`` with few, for the inner loop. Both drop the deadline (a shared,
loaded machine and first-call numba compiles make per-example timings meaningless) and the
too-slow health check for the same reason. A test whose cost needs its own count uses
``helpers.examples(n)``, which the ``dev`` profile caps.

Session-scoped Ray and Spark: ``ray.init`` costs 6-11 s and ~1 GB, a Spark session ~15 s
(DESIGN.md s. 8), and the machine is shared: the whole test session starts at most one of each,
lazily (only when a test asks for the fixture) and always stops them at the end, also after
failures. A test that asks for either fixture is marked ``cluster`` here, so `make test-fast`
(``-m "not cluster and not slow"``) can never start them.
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
