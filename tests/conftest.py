"""Shared, session-scoped Ray and Spark for the cluster tests.

Why: ``ray.init`` costs 6-11 s and ~1 GB, a Spark session ~15 s (DESIGN.md s. 8), and the
machine is shared: the whole test session starts at most one of each, lazily (only when a test
asks for the fixture) and always stops them at the end, also after failures.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def ray_session():
    """An embedded local Ray (2 CPUs, 127.0.0.1, no dashboard); yields the RayRuntime."""
    from cluster.ray_runtime import RayRuntime

    rt = RayRuntime(num_cpus=2).start()
    try:
        yield rt
    finally:
        rt.stop()


@pytest.fixture(scope="session")
def spark():
    """A quiet local[2] Spark session shared by the whole test session."""
    from cluster.spark_feed import spark_session

    s = spark_session("local[2]", app_name="weaveplace-tests")
    try:
        yield s
    finally:
        s.stop()
