"""Ray nodes for the plan nodes an autoscaling deployment adds, from Ray's own autoscaler.

Why here: asking an attached Ray cluster for capacity is the runtime's business (starting and
attaching to Ray is), and ``weaveplace serve``'s policy (``cluster.service.autoscale``) only
needs "make room for k plan nodes, tell me what happened".  ``request_resources`` is Ray's
request API (``ray.autoscaler.sdk``): the cluster is asked to hold one bundle per plan node
(plan nodes are pinned one per Ray node, docs/ARCHITECTURE.md), a later call replaces the
request, so a scale-in releases the part no longer needed by asking for fewer bundles.  A
scale-out waits at most ``wait_s`` for the Ray nodes; when they do not come, the plan nodes
run on the Ray nodes there are (several per Ray node, as pinning does) and the reply says so.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any


def alive_ray_nodes() -> int:
    import ray

    return sum(1 for n in ray.nodes() if n.get("Alive"))


def ray_request(bundles: list[dict]) -> None:
    from ray.autoscaler.sdk import request_resources

    request_resources(bundles=bundles)


class RayResources:
    """Ask Ray's autoscaler for room for ``n`` plan nodes (``bundle`` each) and wait for it.

    ``request`` and ``alive`` default to Ray's (``request_resources``, ``ray.nodes``); tests
    pass their own."""

    def __init__(
        self,
        bundle: Mapping[str, float] | None = None,
        wait_s: float = 60.0,
        poll_s: float = 1.0,
        request: Callable[[list[dict]], None] = ray_request,
        alive: Callable[[], int] = alive_ray_nodes,
    ):
        self.bundle = dict(bundle or {"CPU": 1})
        self.wait_s = float(wait_s)
        self.poll_s = float(poll_s)
        self.request = request
        self.alive = alive

    def scale_to(self, n: int) -> dict[str, Any]:
        """Request room for ``n`` plan nodes; when that is more Ray nodes than alive, wait up
        to ``wait_s`` for them.  The reply: requested bundles, Ray nodes before and after,
        seconds waited and ``fallback`` (the Ray nodes did not come in time: plan nodes share
        the Ray nodes there are)."""
        before = self.alive()
        self.request([dict(self.bundle) for _ in range(n)])
        t0 = time.monotonic()
        now = before
        while now < n and time.monotonic() - t0 < self.wait_s:
            time.sleep(self.poll_s)
            now = self.alive()
        fallback = now < n
        return {
            "requested_bundles": n,
            "bundle": dict(self.bundle),
            "ray_nodes_before": before,
            "ray_nodes_after": now,
            "waited_s": round(time.monotonic() - t0, 3),
            "fallback": (
                f"{now} Ray node(s) after {self.wait_s:g} s for {n} plan nodes: plan nodes "
                "share the Ray nodes there are"
                if fallback
                else None
            ),
        }

    def release_to(self, n: int) -> dict[str, Any]:
        """A scale-in: ask for room for ``n`` plan nodes only (the rest of the request is
        released; Ray's autoscaler removes idle Ray nodes by its own timeout)."""
        self.request([dict(self.bundle) for _ in range(n)])
        return {"requested_bundles": n, "bundle": dict(self.bundle), "released": True}
