"""Where the workloads of a simulation run: local processes, or Ray tasks on a cluster.

Why a module: ``sim.simulate`` prices one workload (all node layouts of one generated workload
share its queries, cost model and WeaveShare result) and leaves *where* that happens to a
runner here. A runner gets the workloads largest first, calls ``work(config, group, out,
tick)`` for each somewhere, returns every row and reports one progress label per
(configuration, optimizer) through ``tick``; rows and files do not depend on the runner.

- ``in_processes``: spawned local processes writing their plans straight into ``out``.
- ``on_ray``: one Ray task per workload (1 CPU each) on an attached cluster or an embedded local
  Ray; a task writes into a temporary directory of its own machine and returns the files with
  its rows, so the driver writes every file and no shared file system is needed. Progress
  labels come back through a Ray queue. The tasks import this package, so its workers need
  weaveplace importable, as for live runs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sim.config import Config, ConfigError
from sim.ray_address import check_attach

Rows = list[dict[str, Any]]
Tick = Callable[[str], None]
Work = Callable[[Config, list[int], Path, Tick], Rows]
POLL_S = 0.2  # how often the driver passes progress labels on


def in_processes(work: Work, config: Config, groups: list[list[int]], out: Path, workers, tick):
    """Workloads across ``workers`` processes (spawned: no inherited threads or sessions);
    progress labels come back through a managed queue."""
    import multiprocessing as mp
    import queue as queue_mod
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    ctx = mp.get_context("spawn")
    rows: Rows = []
    with ctx.Manager() as manager, ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        q = manager.Queue()
        pending = {pool.submit(_in_process, work, config, g, out, q) for g in groups}

        def drain() -> None:
            while True:
                try:
                    tick(q.get_nowait())
                except queue_mod.Empty:
                    return

        while pending:
            finished, pending = wait(pending, timeout=POLL_S, return_when=FIRST_COMPLETED)
            drain()
            for f in finished:
                rows += f.result()
        drain()
    return rows


def _in_process(work: Work, config: Config, group: list[int], out: Path, queue) -> Rows:
    return work(config, group, out, lambda label: queue.put(label))


def on_ray(work: Work, config: Config, groups: list[list[int]], out: Path, address, workers, tick):
    """Workloads as Ray tasks on the cluster at ``address`` (``local``: an embedded local Ray
    with ``workers`` CPUs; a Ray this process already runs is used as it is). An address that
    cannot be reached or refuses the token is one ``ConfigError`` line."""
    import ray
    from ray.util.queue import Queue

    from cluster.runtime.ray_runtime import RayRuntime

    check_attach(address)
    try:
        runtime = RayRuntime(address=address, num_cpus=workers).start()
    except ConnectionError as exc:  # e.g. 'auto' with no cluster running
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(
            f"cluster.ray.address {address!r}: cannot connect to Ray ({first})"
        ) from None
    rows: Rows = []
    pending: dict[Any, list[int]] = {}
    try:
        labels = Queue()
        task = ray.remote(num_cpus=1)(_on_ray_task)
        pending = {task.remote(work, config, g, labels): g for g in groups}

        def drain() -> None:
            n = labels.qsize()
            if n:
                for label in labels.get_nowait_batch(n):
                    tick(label)

        while pending:
            finished, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
            drain()
            for ref in finished:
                del pending[ref]
                got, files = ray.get(ref)
                for rel, data in files.items():
                    (out / rel).parent.mkdir(parents=True, exist_ok=True)
                    (out / rel).write_bytes(data)
                rows += got
        drain()
        labels.shutdown()
    finally:
        for ref in pending:  # an error or Ctrl-C: the other workloads are not wanted
            ray.cancel(ref, force=True)
        runtime.stop()
    return rows


def _on_ray_task(work: Work, config: Config, group: list[int], labels) -> tuple[Rows, dict]:
    """One workload in a Ray worker: its rows, and its files by path relative to ``out``."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="weaveplace-simulate-") as d:
        out = Path(d)
        (out / "plans").mkdir()
        rows = work(config, group, out, labels.put)
        files = {
            str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()
        }
    return rows, files
