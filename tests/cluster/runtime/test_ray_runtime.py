"""RayRuntime (cluster/runtime/ray_runtime.py) inside a process that already runs Ray."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.cluster


def test_ray_runtime_borrows_a_running_ray(ray_session):
    """A RayRuntime inside a process that already runs Ray neither restarts nor stops it."""
    import ray

    from cluster.runtime.ray_runtime import RayRuntime

    assert ray_session.owned
    with RayRuntime() as rt:
        assert not rt.owned and ray.is_initialized()
    assert ray.is_initialized()
