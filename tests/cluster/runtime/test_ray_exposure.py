"""What the embedded Ray exposes: every TCP listener of the Ray processes
a ``RayRuntime`` starts (GCS, raylet, driver, workers, actors) is on the loopback interface,
and token authentication is on.  Checked on the session's embedded Ray with an actor alive
(``cluster/runtime/ray_runtime.py`` says how and why)."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

import pytest

LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


def _children(pid: int) -> set[int]:
    """``pid`` and its descendants, from /proc (psutil is not a project dependency)."""
    parent = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            parent[int(d.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    out, todo = {pid}, [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p and c not in out]
        out.update(kids)
        todo += kids
    return out


def _addr(hexaddr: str) -> tuple[str, int]:
    ip, port = hexaddr.split(":")
    raw = bytes.fromhex(ip)
    if len(raw) == 4:
        return str(ipaddress.IPv4Address(raw[::-1])), int(port, 16)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))  # host-order 32-bit words
    a = ipaddress.IPv6Address(words)
    return (f"::ffff:{a.ipv4_mapped}" if a.ipv4_mapped else str(a)), int(port, 16)


def _listeners(pids: set[int]) -> list[tuple[str, int, str]]:
    """(ip, port, process name) of every listening TCP socket of ``pids``."""
    listen = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A":  # TCP_LISTEN
                listen[f[9]] = _addr(f[1])
    out = []
    for pid in pids:
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(fd)
            except OSError:
                continue
            if link.startswith("socket:[") and link[8:-1] in listen:
                out.append((*listen[link[8:-1]], name))
    return out


def test_embedded_ray_listens_on_loopback_only(ray_session):
    import ray

    from cluster.runtime.ray_runtime import LOOPBACK_ENV

    if not ray_session.owned:
        pytest.skip("the session's Ray was not started by RayRuntime")

    @ray.remote(num_cpus=0)
    class Probe:
        def pid(self) -> int:
            return os.getpid()

    probe = Probe.remote()
    actor_pid = ray.get(probe.pid.remote())
    pids = _children(os.getpid()) | {actor_pid}
    found = _listeners(pids)
    names = {n for *_, n in found}
    assert any("gcs_server" in n for n in names) and any("raylet" in n for n in names), found
    assert any(pid == actor_pid for pid in pids) and any(
        port for ip, port, n in _listeners({actor_pid})
    ), "the actor listens"
    exposed = [(ip, port, n) for ip, port, n in found if ip not in LOOPBACK]
    assert not exposed, f"listening beyond loopback: {exposed}"
    assert ray.nodes()[0]["NodeManagerAddress"] == "127.0.0.1"
    assert os.environ.get(LOOPBACK_ENV) == "0"
    assert ray_session.auth.startswith("embedded: token authentication")
    ray.kill(probe)


def test_loopback_setting_is_undone_after_stop():
    """The switch is process-wide while the embedded Ray runs; stop restores it (an attached
    cluster needs the routable node IP).  No Ray is started: the helper alone."""
    import ray._private.ray_constants as rc

    from cluster.runtime.ray_runtime import LOOPBACK_ENV, _loopback_only

    before_env, before = os.environ.get(LOOPBACK_ENV), rc.ENABLE_RAY_CLUSTER
    restore = _loopback_only()
    assert os.environ[LOOPBACK_ENV] == "0" and rc.ENABLE_RAY_CLUSTER is False
    restore()
    assert os.environ.get(LOOPBACK_ENV) == before_env and rc.ENABLE_RAY_CLUSTER == before
