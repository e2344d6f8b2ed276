"""Ports for a ``ray start`` the tests launch themselves: every listening port Ray would pick
by default is given a free loopback port, so a test's cluster never collides with another
Ray on the machine (another engineer's, or a parallel test's)."""

from __future__ import annotations

import socket

#: the ``ray start`` port options a head on loopback needs besides ``--port``
PORT_OPTIONS = (
    "dashboard-agent-listen-port",
    "dashboard-agent-grpc-port",
    "metrics-export-port",
    "runtime-env-agent-port",
    "node-manager-port",
    "object-manager-port",
)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_flags(*extra: str) -> list[str]:
    """``--<option> <free port>`` for every ``PORT_OPTIONS`` entry and ``extra`` option."""
    return [x for k in (*PORT_OPTIONS, *extra) for x in (f"--{k}", str(free_port()))]
