"""A Ray head with Ray's own autoscaler and its fake multi-node provider, on this machine only.

Why: ``weaveplace serve`` asks an attached cluster's autoscaler for nodes through
``request_resources`` (``cluster.runtime.resources``); this starts one whose autoscaler is
Ray's real one (``RAY_FAKE_CLUSTER=1 ray start --head --autoscaling-config=FILE``), launching
and removing worker raylets on this machine.  The autoscaling YAML is written here (the ray
wheel does not ship the provider's ``example.yaml``): one worker type, its CPUs and object store,
at most ``max_workers`` of them, idle ones removed after ``idle_timeout_minutes``.

Everything listens on 127.0.0.1 (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``: the node IP is the
loopback one, also for the workers the autoscaler starts inside the head's monitor), with free
ports of its own and a short ``--temp-dir`` of its own (Ray's unix socket paths are limited).
Stopping kills by process id only (never the CLI command that ends every Ray on the machine):
the head's process group (``ray start --block`` in a session of its own; the workers' raylets
are started by its monitor, in the same group), then whatever process is still left that
descends from it or runs in its temp dir.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from support.ray_ports import free_port, port_flags

RAY = Path(sys.executable).with_name("ray")
#: the fake provider's worker node type (``available_node_types``)
WORKER_TYPE = "wp.worker"


def autoscaling_config(
    gcs_address: str,
    *,
    head_cpus: int,
    worker_cpus: int,
    max_workers: int,
    idle_timeout_minutes: float,
    worker_object_store: int = 100 * 1024**2,
) -> dict:
    """The autoscaler's cluster config for the fake multi-node provider.  Ray's monitor reads
    it as is (no defaults are merged in), so every key its reader uses is here.
    ``gcs_address``: where the launched workers join (the provider's default is port 6379 on
    the node IP, which may be another cluster's)."""
    return {
        "cluster_name": "wp-fake",
        "max_workers": max_workers,
        "upscaling_speed": 1.0,
        "idle_timeout_minutes": idle_timeout_minutes,
        "provider": {
            "type": "fake_multinode",
            "gcs_address": gcs_address,
            "use_node_id_as_ip": True,
            "disable_node_updaters": True,
            "disable_launch_config_check": True,
        },
        "available_node_types": {
            "ray.head.default": {
                "resources": {"CPU": head_cpus},
                "node_config": {},
                "max_workers": 0,
            },
            WORKER_TYPE: {
                "resources": {"CPU": worker_cpus, "object_store_memory": worker_object_store},
                "node_config": {},
                "min_workers": 0,
                "max_workers": max_workers,
            },
        },
        "head_node_type": "ray.head.default",
        "auth": {},
        "docker": {},
        "file_mounts": {},
        "cluster_synced_files": [],
        "file_mounts_sync_continuously": False,
        "rsync_exclude": [],
        "rsync_filter": [],
        "initialization_commands": [],
        "setup_commands": [],
        "head_setup_commands": [],
        "worker_setup_commands": [],
        "head_start_ray_commands": [],
        "worker_start_ray_commands": [],
    }


def token_env(token: str, **extra) -> dict:
    """This process's environment for a process of (or attached to) a token-protected head on
    loopback: no inherited Ray token or address, this ``token``, node IPs 127.0.0.1."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("RAY_AUTH") and k not in ("RAY_ADDRESS",)
    }
    env.update(
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN=token,
        RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",  # node IP 127.0.0.1, workers' too
    )
    env.update(extra)
    return env


@dataclass
class FakeHead:
    """A running head: its ``address``, the ``token`` it checks, its ``temp_dir``, the
    ``ray start`` process (``proc``) and its log."""

    address: str
    token: str
    temp_dir: Path
    proc: subprocess.Popen
    log: Path
    pids_seen: set[int] = field(default_factory=set)

    def env(self, **extra) -> dict:
        """An environment for a process attaching to this head (its token, loopback)."""
        return token_env(self.token, **extra)

    def processes(self) -> set[int]:
        """Live pids that belong to this head: its process group, its descendants, and any
        process whose command line names its temp dir (a raylet, a worker)."""
        return _descendants(self.proc.pid) | _in_group(self.proc.pid) | _naming(self.temp_dir)


def _procs() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, process group) of every process (from /proc)."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        rest = stat[stat.rindex(")") + 2 :].split()
        out[int(d)] = (int(rest[1]), int(rest[2]))
    return out


def _descendants(root: int) -> set[int]:
    procs = _procs()
    seen, todo = set(), [root]
    while todo:
        p = todo.pop()
        for pid, (ppid, _) in procs.items():
            if ppid == p and pid not in seen:
                seen.add(pid)
                todo.append(pid)
    return seen | ({root} if root in procs else set())


def _in_group(pgid: int) -> set[int]:
    return {pid for pid, (_, g) in _procs().items() if g == pgid}


def _naming(path: Path) -> set[int]:
    key = str(path).encode()
    out = set()
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != os.getpid():
            try:
                if key in Path(f"/proc/{d}/cmdline").read_bytes():
                    out.add(int(d))
            except OSError:
                pass
    return out


def _kill(pids: set[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@contextmanager
def fake_autoscaling_head(
    work: Path,
    *,
    head_cpus: int = 1,
    worker_cpus: int = 1,
    max_workers: int = 2,
    idle_timeout_minutes: float = 0.1,
    start_timeout_s: float = 120.0,
):
    """A token-protected head whose autoscaler launches up to ``max_workers`` fake workers
    (``worker_cpus`` CPUs each); yields a ``FakeHead`` and kills all of it by pid at the end."""
    temp_dir = Path(tempfile.mkdtemp(prefix="wpas-", dir="/tmp"))  # short: unix socket paths
    token = secrets.token_hex(32)
    port = free_port()
    address = f"127.0.0.1:{port}"
    cfg_path = work / "autoscaling.yaml"
    cfg_path.write_text(
        yaml.safe_dump(
            autoscaling_config(
                address,
                head_cpus=head_cpus,
                worker_cpus=worker_cpus,
                max_workers=max_workers,
                idle_timeout_minutes=idle_timeout_minutes,
            )
        )
    )
    # the dashboard's head process runs even when not included
    ports = port_flags("dashboard-port")
    cmd = [
        str(RAY),
        "start",
        "--head",
        "--block",
        f"--autoscaling-config={cfg_path}",
        "--node-ip-address=127.0.0.1",
        f"--port={port}",
        f"--num-cpus={head_cpus}",
        f"--object-store-memory={200 * 1024**2}",
        "--include-dashboard=false",
        "--disable-usage-stats",
        f"--temp-dir={temp_dir}",
        *ports,
    ]
    log = work / "ray-head.log"
    head = None
    with open(log, "wb") as out:
        env = token_env(
            token,
            RAY_FAKE_CLUSTER="1",
            AUTOSCALER_UPDATE_INTERVAL_S="1",  # the monitor's loop: 5 s by default
            RAY_TMPDIR=str(temp_dir),
        )
        proc = subprocess.Popen(
            cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=work
        )
    head = FakeHead(address, token, temp_dir, proc, log)
    try:
        deadline = time.monotonic() + start_timeout_s
        while b"Ray runtime started" not in log.read_bytes():
            if proc.poll() is not None:
                raise AssertionError(f"ray start exited: {log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"ray start --head not up in {start_timeout_s:g} s")
            time.sleep(0.5)
        yield head
    finally:
        stop_head(head)


def stop_head(head: FakeHead, grace_s: float = 3.0) -> None:
    """SIGTERM to the head's group, a short grace, then SIGKILL to every process of it
    (``FakeHead.processes``) until none is left; its temp dir removed."""
    head.pids_seen |= head.processes()
    try:
        os.killpg(head.proc.pid, signal.SIGTERM)
        head.proc.wait(timeout=grace_s)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    for _ in range(20):
        left = head.processes()
        head.pids_seen |= left
        if not left:
            break
        try:
            os.killpg(head.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _kill(left)
        time.sleep(0.2)
    try:
        head.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    subprocess.run(["rm", "-rf", str(head.temp_dir)], check=False)


#: a driver that writes the cluster's Ray nodes as one JSON line per change (wall time, alive
#: ids, dead ids), polling every 0.3 s until killed
WATCHER = r"""
import json, sys, time, ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
last = None
with open(sys.argv[2], "a") as out:
    while True:
        ns = ray.nodes()
        now = ({n["NodeID"] for n in ns if n["Alive"]}, {n["NodeID"] for n in ns if not n["Alive"]})
        if now != last:
            out.write(json.dumps({"t": time.time(), "alive": sorted(now[0]),
                                  "dead": sorted(now[1])}) + "\n")
            out.flush()
            last = now
        time.sleep(0.3)
"""


def watch_nodes(head: FakeHead, path: Path) -> subprocess.Popen:
    """A driver subprocess recording the head's Ray nodes in ``path`` (``node_history``),
    started while only the head is up (so it connects to the head's raylet, which the
    autoscaler never removes).  The caller kills it (by pid)."""
    return subprocess.Popen(
        [sys.executable, "-c", WATCHER, head.address, str(path)],
        env=head.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def node_history(path: Path) -> list[dict]:
    """The watcher's lines so far: ``{"t", "alive", "dead"}``, one per change."""
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.endswith("}")]
