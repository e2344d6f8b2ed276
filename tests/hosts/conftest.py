"""Fixtures of the emulated-hosts tests (marker ``hosts``; ``make test-hosts``): three hosts as
network namespaces (``netns.py``) with a token-protected Ray cluster across them, the head
on host 0 (where the driver runs too: a Ray driver needs a raylet on its own address) and one
worker on each of hosts 1 and 2, every Ray node with its own IP.

Without root or ``ip netns`` every test here skips with one line saying why.  Everything
started is ended by process id at the end (``EmulatedHosts.destroy``), also when a test fails.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
import time
from pathlib import Path

import pytest

from cluster.runtime.ray_runtime import LOOPBACK_ENV, health_check_config
from hosts.netns import FAILURE_TIMEOUT_S, RAY_TMP, EmulatedHosts, why_not_available

ROOT = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).with_name("ray"))
HEAD_PORT = 6379


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.hosts)


def host_env(tmp: Path, token: str, **extra) -> dict:
    """The environment of a process on an emulated host: token mode with the cluster's token,
    this checkout importable, no setting of the session's own Ray."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("RAY_AUTH") and k not in ("RAY_ADDRESS", LOOPBACK_ENV)
    }
    env.update(
        PYTHONPATH=str(ROOT),
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN=token,
        HOME=str(tmp),
        NUMBA_CACHE_DIR=os.environ.get("NUMBA_CACHE_DIR", str(ROOT / ".cache" / "numba")),
    )
    env.update(extra)
    return env


class RayCluster:
    """A Ray head on host 0 and workers on the other hosts, started with ``ray start``."""

    def __init__(self, hosts: EmulatedHosts, tmp: Path):
        self.hosts = hosts
        self.tmp = tmp
        self.token = secrets.token_hex(32)
        self.address = f"{hosts.hosts[0].ip}:{HEAD_PORT}"
        self.system_config = json.dumps(health_check_config(FAILURE_TIMEOUT_S))
        self.starts = 0

    def env(self, **extra) -> dict:
        return host_env(self.tmp, self.token, **extra)

    def start_node(self, i: int) -> None:
        """Start Ray on host ``i`` (again, after a crash: a new Ray node on the same IP)."""
        h = self.hosts.hosts[i]
        args = [RAY, "start", "--block", "--num-cpus", "1", "--disable-usage-stats"]
        args += ["--node-ip-address", h.ip]
        if i == 0:
            args += ["--head", "--port", str(HEAD_PORT), "--include-dashboard", "false"]
            args += ["--system-config", self.system_config, "--temp-dir", RAY_TMP]
        else:
            args += ["--address", self.address]
        self.starts += 1
        log = self.tmp / f"ray-h{i}-{self.starts}.log"
        self.hosts.start(i, args, self.env(RAY_TMPDIR=RAY_TMP), log, cwd=self.tmp)
        deadline = time.monotonic() + 180
        while b"Ray runtime started" not in log.read_bytes():
            if time.monotonic() > deadline:
                pytest.fail(f"ray start on host {i} did not come up: {log.read_text()[-2000:]}")
            time.sleep(0.5)

    def wait_alive(self, ips: list[str], timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while (alive := self.alive_nodes()) != sorted(ips):
            if time.monotonic() > deadline:
                pytest.fail(f"Ray nodes alive: {alive}, expected {sorted(ips)}")
            time.sleep(1)

    def alive_nodes(self) -> list[str]:
        """IPs of the Ray nodes the head reports alive (asked from host 0)."""
        code = (
            "import ray,json;ray.init(address='auto',logging_level='ERROR');"
            "print(json.dumps(sorted(n['NodeManagerAddress'] for n in ray.nodes() if n['Alive'])))"
        )
        r = self.hosts.run(0, [sys.executable, "-c", code], self.env(RAY_ADDRESS=self.address))
        if r.returncode != 0:
            raise RuntimeError(r.stderr[-2000:])
        return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def emulated_hosts():
    why = why_not_available()
    if why is not None:
        pytest.skip(why)
    hosts = EmulatedHosts(3, prefix="wp")
    try:
        yield hosts.create()
    finally:
        hosts.destroy()


@pytest.fixture(scope="session")
def ray_cluster(emulated_hosts, tmp_path_factory):
    """A token-protected Ray cluster over the three hosts (Ray's health checks bound by
    ``FAILURE_TIMEOUT_S``)."""
    cluster = RayCluster(emulated_hosts, tmp_path_factory.mktemp("raycluster"))
    try:
        for i in range(len(emulated_hosts.hosts)):
            cluster.start_node(i)
        cluster.wait_alive([h.ip for h in emulated_hosts.hosts])
        yield cluster
    finally:
        emulated_hosts.destroy()  # every process of the hosts, by pid (idempotent)
        shutil.rmtree(RAY_TMP, ignore_errors=True)
