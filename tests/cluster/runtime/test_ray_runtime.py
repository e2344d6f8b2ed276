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


def test_an_embedded_rays_workers_import_the_node_code_as_they_start(ray_session):
    """``RayRuntime(preload=...)``, as a run starts it (``cluster.runs.startup.new_ray``): a
    worker of the embedded Ray has the node actors' code and pandas imported before it runs
    anything (the task below imports nothing), and a run names both."""
    import ray

    from cluster.runs.startup import NODE_MODULES

    assert ray_session.preload == NODE_MODULES == ("cluster.node.actor", "pandas")
    code = {"__name__": "__main__"}  # a function Ray ships by value: it imports nothing of ours
    exec("import sys\ndef imported(names):\n    return [n in sys.modules for n in names]", code)
    assert ray.get(ray.remote(code["imported"]).remote(list(NODE_MODULES))) == [True, True]
