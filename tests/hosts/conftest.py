"""Fixtures of the emulated-hosts tests (marker ``hosts``; ``make test-hosts``): three hosts as
network namespaces (``netns.py``) with a token-protected Ray cluster across them, the head
on host 0 (where the driver runs too: a Ray driver needs a raylet on its own address) and one
worker on each of hosts 1 and 2, every Ray node with its own IP; and, for the tests that ask
for it, a Spark standalone cluster: the master on host 0, a worker on every host.

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
SPARK_PORT = 7077


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

    def restore(self) -> None:
        """A Ray node on every worker host again: an earlier test may have left a host without
        one (a hung host's raylet exits once Ray has declared it dead), and each test starts
        from a whole cluster."""
        alive = self.alive_nodes()
        ips = [h.ip for h in self.hosts.hosts]
        if ips[0] not in alive:
            pytest.fail(f"the Ray head on {ips[0]} is gone: the hosts' cluster cannot be restored")
        missing = [i for i, ip in enumerate(ips) if ip not in alive]
        for i in missing:
            self.start_node(i)
        if missing:
            self.wait_alive(ips)

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


class SparkStandalone:
    """A Spark standalone master on host 0 and a worker (1 core) on every host, each bound to
    its host's address (``--host``, ``SPARK_LOCAL_IP``); the workers carry the Ray cluster's
    environment (token), which their executors' Python workers need to attach to Ray."""

    def __init__(self, hosts: EmulatedHosts, ray_cluster: RayCluster, tmp: Path):
        import pyspark

        self.hosts = hosts
        self.ray_cluster = ray_cluster
        self.tmp = tmp
        self.home = Path(pyspark.__file__).parent
        self.master = f"spark://{hosts.hosts[0].ip}:{SPARK_PORT}"
        self.workers: dict[int, object] = {}  # host -> its worker's process
        self.starts = 0

    def _env(self, i: int) -> dict:
        return self.ray_cluster.env(
            RAY_TMPDIR=RAY_TMP,
            SPARK_HOME=str(self.home),
            SPARK_LOCAL_IP=self.hosts.hosts[i].ip,
            SPARK_LOG_DIR=str(self.tmp),
            SPARK_WORKER_DIR=str(self.tmp / f"work-h{i}"),
            PYSPARK_PYTHON=sys.executable,
        )

    def _start(self, i: int, argv: list[str], ready: bytes, name: str):
        self.starts += 1
        log = self.tmp / f"{name}-h{i}-{self.starts}.log"
        spark_class = [str(self.home / "bin" / "spark-class")]
        proc = self.hosts.start(i, spark_class + argv, self._env(i), log, cwd=self.tmp)
        deadline = time.monotonic() + 180
        while ready not in (log.read_bytes() if log.exists() else b""):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"Spark {name} on host {i} did not come up: {log.read_text()[-2000:]}")
            time.sleep(0.5)
        return proc

    def start(self) -> SparkStandalone:
        ip0 = self.hosts.hosts[0].ip
        master = ["org.apache.spark.deploy.master.Master", "--host", ip0]
        master += ["--port", str(SPARK_PORT), "--webui-port", "8080"]
        self._start(0, master, b"I have been elected leader", "master")
        for i in range(len(self.hosts.hosts)):
            self.start_worker(i)
        return self

    def start_worker(self, i: int) -> None:
        """A worker (1 core) on host ``i``, registered with the master."""
        worker = ["org.apache.spark.deploy.worker.Worker", "--host", self.hosts.hosts[i].ip]
        worker += ["--cores", "1", "--memory", "1g", "--webui-port", "8081", self.master]
        self.workers[i] = self._start(i, worker, b"Successfully registered with master", "worker")

    def restore(self) -> SparkStandalone:
        """A worker on every host again (a host crash or reboot in an earlier test ended its
        worker); the master on host 0 must still run."""
        for i, proc in self.workers.items():
            if proc.poll() is not None:
                self.start_worker(i)
        return self


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


@pytest.fixture
def ray_cluster(whole_ray_cluster):
    """The hosts' Ray cluster with a Ray node on every host at the test's start."""
    whole_ray_cluster.restore()
    return whole_ray_cluster


@pytest.fixture(scope="session")
def whole_ray_cluster(emulated_hosts, tmp_path_factory):
    """A token-protected Ray cluster over the three hosts (Ray's health checks bound by
    ``FAILURE_TIMEOUT_S``), started once per session."""
    cluster = RayCluster(emulated_hosts, tmp_path_factory.mktemp("raycluster"))
    try:
        for i in range(len(emulated_hosts.hosts)):
            cluster.start_node(i)
        cluster.wait_alive([h.ip for h in emulated_hosts.hosts])
        yield cluster
    finally:
        emulated_hosts.destroy()  # every process of the hosts, by pid (idempotent)
        shutil.rmtree(RAY_TMP, ignore_errors=True)


@pytest.fixture
def spark_cluster(spark_standalone):
    """Spark standalone with a worker on every host at the test's start."""
    return spark_standalone.restore()


@pytest.fixture(scope="session")
def spark_standalone(emulated_hosts, whole_ray_cluster, tmp_path_factory):
    """Spark standalone across the hosts (ended with the hosts' processes, by pid)."""
    return SparkStandalone(
        emulated_hosts, whole_ray_cluster, tmp_path_factory.mktemp("spark")
    ).start()
