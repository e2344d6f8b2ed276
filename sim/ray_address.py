"""The one check of a configured Ray address (``cluster.ray.address``), before anything waits
on Ray: live runs (``sim.cluster_run``) and simulations on Ray (``sim.workload_runners``).

Why a module: without the check ``ray.init`` retries an unreachable head for minutes, and a
refused token is a long retry loop; both must be one line naming the key instead.
"""

from __future__ import annotations

from placement.messages import short_repr
from sim.config import ConfigError

EMBEDDED = (None, "", "auto", "local")  # left to Ray: no head to probe beforehand


def check_ray_address(address: str | None, timeout_s: float = 3.0) -> None:
    """Fail fast (ConfigError) when a configured Ray head cannot be reached over TCP; without
    this, ``ray.init`` retries for minutes before giving up. ``auto``/``local`` are left to Ray."""
    import socket

    if address in (None, "auto", "local"):
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(
            f"cluster.ray.address: {short_repr(address)} is not host:port "
            "(e.g. 'head:6379' or 'ray://head:10001'), 'auto' or null"
        )
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise ConfigError(
            f"cluster.ray.address: cannot reach Ray at {short_repr(address)} ({exc}); "
            "is the head node running? (null: an embedded local Ray for live runs, local "
            "processes for simulate)"
        ) from exc


def check_attach(address: str | None) -> None:
    """``check_ray_address``, then the token check ``ray.init`` would fail on slowly
    (``cluster.runtime.ray_runtime.attach_auth``), as one ConfigError line."""
    check_ray_address(address)
    if address in EMBEDDED:
        return
    from cluster.runtime.ray_runtime import attach_auth

    try:
        attach_auth(address)
    except ConnectionError as exc:
        raise ConfigError(
            f"cluster.ray.address {short_repr(address)}: cannot connect to Ray ({exc})"
        ) from None
