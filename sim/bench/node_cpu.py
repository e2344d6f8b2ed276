"""Node actors on a fraction of a core, for benchmarks: Linux CPU cgroups (v1 ``cpu`` or v2
``cpu.max``) with a CFS quota, one per node actor process.

Why: on this machine the nodes are never the bottleneck (a node applies a tuple in ~0.2 us,
the driver's micro-batch costs ~1.5 us a row and ~0.2 s a file), so a benchmark about nodes
that cannot keep up (``weaveplace bench overload``) gives each node actor a small share of a
core, as if each ran on a weaker host of its own.  The kernel enforces the quota; nothing in
the node is changed.  Needs root and a writable cgroup file system; ``CpuLimitError`` says
what is missing in one line.  Only groups this module made are removed, and only when empty.
"""

from __future__ import annotations

import os
from pathlib import Path

PERIOD_US = 100_000
_V1 = Path("/sys/fs/cgroup/cpu")
_V2 = Path("/sys/fs/cgroup/unified")


def cpu_seconds(pid: int) -> float:
    """The CPU time process ``pid`` has used so far, all its threads, user and system
    (``/proc/PID/stat``'s utime + stime: clock ticks, 10 ms here)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def renice(pid: int, nice: int = 0) -> None:
    """Every thread of process ``pid`` at niceness ``nice``: Ray starts its worker processes
    at 15, so under contention any job of niceness below 19 outweighs a node actor; a
    benchmark's node stands for a host of its own.  Threads it starts later inherit it."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.setpriority(os.PRIO_PROCESS, int(tid), nice)
        except ProcessLookupError:  # a thread that ended meanwhile
            pass


class CpuLimitError(RuntimeError):
    """No CPU cgroup can be made here (not root, no cgroup file system)."""


def _root() -> tuple[Path, str]:
    if (_V1 / "cpu.cfs_quota_us").exists():
        return _V1, "v1"
    for base in (_V2, Path("/sys/fs/cgroup")):
        ctl = base / "cgroup.controllers"
        if ctl.exists() and "cpu" in ctl.read_text().split():
            return base, "v2"
    raise CpuLimitError(
        "no CPU cgroup controller at /sys/fs/cgroup (cpu or cgroup2 cpu.max); "
        "a node CPU limit needs Linux cgroups"
    )


class CpuLimits:
    """Cgroups limiting processes to ``share`` of one core each (``limit(name, pid)``);
    ``close()`` removes them (their processes gone or moved back to the root group)."""

    def __init__(self, share: float, tag: str = "weaveplace-bench"):
        if not 0 < share <= 64:
            raise ValueError(f"a CPU share in (0, 64] cores, got {share!r}")
        if os.geteuid() != 0:
            raise CpuLimitError("a node CPU limit needs root (it writes CPU cgroups)")
        self.base, self.kind = _root()
        self.quota = max(1000, int(share * PERIOD_US))
        self.tag = f"{tag}-{os.getpid()}"
        self.groups: list[Path] = []
        self._remove_stale(tag)

    def _remove_stale(self, tag: str) -> None:
        """Groups an earlier run left (killed before ``close``): its process is gone, the
        group is empty, and it is removed."""
        for g in self.base.glob(f"{tag}-*-*"):
            pid = g.name[len(tag) + 1 :].split("-", 1)[0]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                try:
                    g.rmdir()
                except OSError:  # still holds a process: leave it
                    pass

    def limit(self, name: str, pid: int) -> Path:
        """Put process ``pid`` (all its threads) in a group of its own limited to the share."""
        g = self.base / f"{self.tag}-{name}"
        g.mkdir(exist_ok=True)
        if self.kind == "v1":
            (g / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (g / "cpu.cfs_quota_us").write_text(str(self.quota))
        else:
            (g / "cpu.max").write_text(f"{self.quota} {PERIOD_US}")
        (g / "cgroup.procs").write_text(str(pid))
        self.groups.append(g)
        return g

    def close(self) -> None:
        """Move what is left in our groups back to the root group, then remove the groups."""
        for g in self.groups:
            try:
                for pid in (g / "cgroup.procs").read_text().split():
                    try:
                        (self.base / "cgroup.procs").write_text(pid)
                    except OSError:
                        pass
                g.rmdir()
            except OSError:
                pass
        self.groups = []
