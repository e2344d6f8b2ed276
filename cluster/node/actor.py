"""``NodeCore`` as a Ray actor: the ``ray.remote`` wrapping, made lazily, and the extension
executors shipped to the actors' processes.

Why its own module: everything here needs Ray (imported only when first used), while
``cluster.node.core.NodeCore`` is a plain class that tests and in-process runs use without it.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from cluster.node.core import NodeCore
from cluster.node.liveness import data_methods
from cluster.runtime import collector
from executors.base import extensions


def shipped_executors() -> dict[str, type]:
    """The executors registered outside ``executors`` (``executors.base.extensions``), for a
    node actor's constructor: Ray pickles them by value, so their module need not be
    importable in the actor's process."""
    ext = extensions()
    if ext:
        from ray import cloudpickle

        for cls in ext.values():
            cloudpickle.register_pickle_by_value(sys.modules[cls.__module__])
    return ext


class ActorCore(NodeCore):
    """NodeCore plus what only makes sense inside a Ray actor."""

    def ray_node_id(self) -> str:
        """The Ray node this actor runs on (hex id): checks node pinning."""
        import ray

        return ray.get_runtime_context().get_node_id()

    def health(self) -> dict[str, Any]:
        """The driver's health check (``cluster.deployment.liveness``), answered on the actor's
        ``health`` thread, never behind a data call: the data call running and its progress
        (``cluster.node.liveness``), the node's light counters (``vitals``), this process and
        its Ray node."""
        return {
            **self.calls.report(),
            **self.vitals(),
            "pid": os.getpid(),
            "ray_node": self.ray_node_id(),
        }


def _freezing_init(core: type):
    """``core``'s constructor, then the objects built so far frozen for the actor's life
    (``cluster.runtime.collector``): at 100,000 queries a node's trees are ~100,000 query
    specs, and its full collections took 0.5-0.85 s each.  Only in an actor's own process: a
    node built in process (tests, in-process runs) leaves the caller's collector alone."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        core.__init__(self, *args, **kwargs)
        collector.freeze_start(collect=False)

    return __init__


#: the concurrency group (a thread of its own in each actor) of the health check
HEALTH_GROUP = "health"


class LazyActorClass:
    """``X.remote(...)``/``X.options(...)`` of a node class as a Ray actor, wrapped by
    ``ray.remote`` on first use, so that importing this module does not import Ray.

    ``num_cpus=0``: the actor does not reserve a CPU slot, so a 2-CPU local Ray can host a plan
    with more nodes than cores (they then share the cores, as a simulation should).  No
    restarts or retries: the driver recovers a dead actor itself, exactly once.

    Two concurrency groups: the data calls run one at a time, in order, on the default one;
    ``health`` runs on a thread of its own (``HEALTH_GROUP``), so the driver's health check is
    answered while a data call runs, and a data call that runs is visible to it (every data
    method is wrapped by ``cluster.node.liveness.tracked_method``)."""

    def __init__(self, core: type):
        self.core = core
        self.remote_class = None

    def __getattr__(self, name):
        if name.startswith("__"):  # copy/pickle probes: not the actor class's business
            raise AttributeError(name)
        if self.remote_class is None:
            import ray

            methods = data_methods(self.core)
            methods["health"] = ray.method(concurrency_group=HEALTH_GROUP)(self.core.health)
            methods["__init__"] = _freezing_init(self.core)
            tracked = type(self.core.__name__, (self.core,), methods)
            self.remote_class = ray.remote(
                num_cpus=0,
                max_restarts=0,
                max_task_retries=0,
                concurrency_groups={HEALTH_GROUP: 1},
            )(tracked)
        return getattr(self.remote_class, name)


#: ``ActorCore`` as a Ray actor (made on first use)
NodeActor = LazyActorClass(ActorCore)
