"""Emulated hosts for tests: Linux network namespaces on one bridge, each with its own 10.x
address, and the faults a real host has (crash, hang, link down).

Why namespaces: Ray and Spark then see several machines with their own IPs (Ray's node
affinity, health checks and node deaths behave as across hosts), on one machine and without
containers.  Safety: no namespace has a default route, and the bridge has no address, so no
packet from an emulated host can leave it or reach the machine's own network; ``check_isolated``
refuses to go on otherwise (after every link change too).  Clean-up is by process id (``ip
netns pids``), never by process name, and always runs (fixture finalizers).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

SUBNET = "10.77.0"
#: the failure timeout of the emulated Ray cluster (``cluster.failure_timeout_s`` of the configs)
FAILURE_TIMEOUT_S = 10.0
#: its session files (short: Ray's unix socket paths are limited)
RAY_TMP = "/tmp/wph"


def why_not_available() -> str | None:
    """One line saying why emulated hosts cannot run here, or None when they can."""
    if os.geteuid() != 0:
        return "emulated hosts need root (network namespaces)"
    if shutil.which("ip") is None:
        return "emulated hosts need the `ip` command (iproute2)"
    probe = f"wpprobe{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return f"`ip netns add` failed: {r.stderr.strip() or r.returncode}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str, check: bool = True) -> str:
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


@dataclass
class Host:
    """One emulated host: its namespace, address and the root end of its link."""

    index: int
    netns: str
    ip: str
    link: str  # the veth end on the bridge (down = the host is cut off)


@dataclass
class EmulatedHosts:
    """``n`` hosts ``<prefix>-h<i>`` at ``10.77.0.<10+i>``, joined by the bridge ``<prefix>-br``."""

    n: int
    prefix: str = "wp"
    hosts: list[Host] = field(default_factory=list)
    procs: list[subprocess.Popen] = field(default_factory=list)

    @property
    def bridge(self) -> str:
        return f"{self.prefix}-br"

    def create(self) -> EmulatedHosts:
        self.destroy()  # leftovers of an aborted session with the same names
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("link", "set", self.bridge, "up")
        for i in range(self.n):
            h = Host(i, f"{self.prefix}-h{i}", f"{SUBNET}.{10 + i}", f"{self.prefix}-v{i}")
            _ip("netns", "add", h.netns)
            _ip("-n", h.netns, "link", "set", "lo", "up")
            _ip("link", "add", h.link, "type", "veth", "peer", "name", "eth0", "netns", h.netns)
            _ip("link", "set", h.link, "master", self.bridge)
            _ip("link", "set", h.link, "up")
            _ip("-n", h.netns, "addr", "add", f"{h.ip}/24", "dev", "eth0")
            _ip("-n", h.netns, "link", "set", "eth0", "up")
            self.hosts.append(h)
        self.check_isolated()
        return self

    def check_isolated(self) -> None:
        """Refuse (RuntimeError) if any namespace has a default route or any address outside
        the emulated subnet and loopback: nothing may reach outside the machine."""
        for h in self.hosts:
            routes = _ip("-n", h.netns, "route", "show", "default").strip()
            routes6 = _ip("-n", h.netns, "-6", "route", "show", "default").strip()
            if routes or routes6:
                raise RuntimeError(f"{h.netns} has a default route ({routes or routes6}): refusing")
            for line in _ip("-n", h.netns, "-o", "-4", "addr", "show").splitlines():
                addr = line.split()[3].split("/")[0]
                if addr != "127.0.0.1" and not addr.startswith(SUBNET + "."):
                    raise RuntimeError(f"{h.netns} has address {addr} outside {SUBNET}.0/24")
        if _ip("-o", "-4", "addr", "show", "dev", self.bridge).strip():
            raise RuntimeError(f"bridge {self.bridge} has an IPv4 address: refusing")

    # -- processes --------------------------------------------------------------------------
    def start(self, i: int, argv: Sequence[str], env: dict, log_path, cwd=None) -> subprocess.Popen:
        """Run ``argv`` on host ``i`` (its own process group), output to ``log_path``; returns
        once the process is inside the host's namespace."""
        log = open(log_path, "ab")
        p = subprocess.Popen(
            ["ip", "netns", "exec", self.hosts[i].netns, *argv],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=cwd,
        )
        log.close()
        self.procs.append(p)
        # `ip netns exec` enters the namespace after fork: wait until it has, so a crash or a
        # hang signalled right after start reaches this process too.
        deadline = time.monotonic() + 10
        while p.pid not in self.pids(i) and p.poll() is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"pid {p.pid} did not enter {self.hosts[i].netns} in 10 s")
            time.sleep(0.01)
        return p

    def run(self, i: int, argv: Sequence[str], env: dict, timeout: float = 300, cwd=None):
        """Run ``argv`` on host ``i`` to completion (``CompletedProcess``, text output)."""
        return subprocess.run(
            ["ip", "netns", "exec", self.hosts[i].netns, *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=cwd,
        )

    def pids(self, i: int) -> list[int]:
        """Every process running in host ``i``'s namespace (``ip netns pids``)."""
        out = _ip("netns", "pids", self.hosts[i].netns, check=False)
        return [int(x) for x in out.split()]

    def signal_host(self, i: int, sig: int) -> list[int]:
        """Send ``sig`` to every process of host ``i`` (a crash: SIGKILL; a hang: SIGSTOP,
        then SIGCONT); returns the pids signalled."""
        pids = self.pids(i)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        return pids

    def link(self, i: int, up: bool) -> None:
        """Cut host ``i`` off the bridge (``up=False``: a partition) or reconnect it."""
        _ip("link", "set", self.hosts[i].link, "up" if up else "down")
        self.check_isolated()

    # -- clean-up ---------------------------------------------------------------------------
    def destroy(self) -> None:
        """Kill every process of every namespace (by pid, continuing stopped ones), then delete
        the namespaces, links and bridge.  Idempotent; also for an aborted earlier session."""
        names = [f"{self.prefix}-h{i}" for i in range(self.n)]
        existing = set(_ip("netns", "list", check=False).split())
        for _ in range(3):
            left = False
            for ns in names:
                if ns not in existing:
                    continue
                for pid in (int(x) for x in _ip("netns", "pids", ns, check=False).split()):
                    left = True
                    for sig in (signal.SIGKILL, signal.SIGCONT):
                        try:
                            os.kill(pid, sig)
                        except ProcessLookupError:
                            pass
            if not left:
                break
            time.sleep(0.5)
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        for ns in names:
            if ns in existing:
                _ip("netns", "del", ns, check=False)
        for i in range(self.n):
            _ip("link", "del", f"{self.prefix}-v{i}", check=False)
        _ip("link", "del", self.bridge, check=False)
        self.hosts = []
        self.procs = []
