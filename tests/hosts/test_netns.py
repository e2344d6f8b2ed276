"""The emulated hosts themselves (tests/hosts/netns.py): addresses of their own, reachable from
each other and nothing else; a default route (in a namespace, or after a link change) is
refused; a host's processes are found and signalled by namespace; clean-up leaves nothing."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from hosts.netns import EmulatedHosts, why_not_available

pytestmark = pytest.mark.hosts


@pytest.fixture
def two_hosts():
    why = why_not_available()
    if why is not None:
        pytest.skip(why)
    hosts = EmulatedHosts(2, prefix="wpt")
    try:
        yield hosts.create()
    finally:
        hosts.destroy()


def test_isolation_refuses_a_default_route_and_cleanup_is_by_pid(two_hosts, tmp_path):
    h = two_hosts
    ping = [sys.executable, "-c", "import socket;socket.create_connection(('10.77.0.11', 9), 2)"]
    # host 0 reaches host 1's address (connection refused = reachable), not the internet
    r = h.run(0, ping, {}, timeout=30)
    assert "ConnectionRefusedError" in r.stderr, r.stderr
    out = [sys.executable, "-c", "import socket;socket.create_connection(('1.1.1.1', 53), 2)"]
    r = h.run(0, out, {}, timeout=30)
    assert "Network is unreachable" in r.stderr, r.stderr
    # a link down and up keeps the namespaces without a default route
    h.link(1, up=False)
    h.link(1, up=True)
    subprocess.run(
        ["ip", "-n", h.hosts[0].netns, "route", "add", "default", "via", "10.77.0.11"],
        check=True,
    )
    with pytest.raises(RuntimeError, match="default route"):
        h.check_isolated()
    subprocess.run(["ip", "-n", h.hosts[0].netns, "route", "del", "default"], check=True)
    h.check_isolated()
    # a host's processes are its namespace's; a crash kills them all, a stop stops them
    p = h.start(1, ["sleep", "300"], {}, tmp_path / "sleep.log")
    assert p.pid in h.pids(1) and h.pids(0) == []
    assert h.signal_host(1, signal.SIGSTOP) == [p.pid]
    h.signal_host(1, signal.SIGCONT)
    h.signal_host(1, signal.SIGKILL)
    assert p.wait(10) == -signal.SIGKILL
    left = h.start(0, ["sleep", "300"], {}, tmp_path / "left.log")
    h.destroy()  # also ends what is still running, by pid
    assert left.poll() is not None
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "wpt-h" not in names
