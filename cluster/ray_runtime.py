"""Start (or attach to) Ray for one run, and always shut it down again.

Why a wrapper: ``ray.init`` costs 6-11 s and ~1 GB of processes on this machine (DESIGN.md s. 8),
the machine is shared, and a forgotten Ray keeps burning ~8% of a core.  ``RayRuntime`` is a
context manager that

* starts an **embedded local Ray** bound to 127.0.0.1 with no dashboard, a modest ``num_cpus``
  and a bounded object store, keeping its session files under ``RAY_TMPDIR`` (default
  ``/tmp/ray-weaveplace``, short enough for Ray's unix-socket path limit), or
* **attaches** to an existing cluster when ``address`` is given (``"auto"`` or ``"ray://..."`` /
  ``"host:port"``) - then it never shuts that cluster down, it only disconnects, or
* **reuses** a Ray this process already initialised (e.g. a pytest session fixture) and leaves it
  running: whoever started Ray stops it.

``__exit__`` runs on exceptions and on ``KeyboardInterrupt`` alike (both are BaseException), so a
Ctrl-C during a run still stops the Ray processes this process started.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

DEFAULT_TMPDIR = "/tmp/ray-weaveplace"
_REPO = Path(__file__).resolve().parents[1]


def _worker_env() -> dict[str, str]:
    """Env vars Ray workers must see.  Workers are forked by the raylet this process starts, so
    setting them before ``ray.init`` is enough; we also pass them in the runtime_env for attached
    clusters.  NUMBA_CACHE_DIR lets actors reuse compiled kernels instead of JIT-ing per actor."""
    if "NUMBA_CACHE_DIR" not in os.environ:
        cache = _REPO / ".cache" / "numba"
        try:
            cache.mkdir(parents=True, exist_ok=True)
            os.environ["NUMBA_CACHE_DIR"] = str(cache)
        except OSError:  # read-only checkout: numba then compiles in memory
            pass
    return {k: os.environ[k] for k in ("NUMBA_CACHE_DIR",) if k in os.environ}


class RayRuntime:
    """Context manager owning (or borrowing) a Ray connection for one run.

    >>> with RayRuntime(num_cpus=2) as rt:      # embedded local Ray
    ...     dep = Deployment(plan)
    >>> with RayRuntime(address="auto"): ...   # attach to a running cluster

    ``owned`` tells whether this object started Ray (and therefore stops it).
    """

    def __init__(self, address: str | None = None, *, num_cpus: int | None = 2,
                 object_store_memory: int | None = 512 * 1024 ** 2,
                 tmpdir: str | None = None, namespace: str | None = "weaveplace",
                 quiet: bool = True):
        self.address = address
        self.num_cpus = num_cpus
        self.object_store_memory = object_store_memory
        self.tmpdir = tmpdir or os.environ.get("RAY_TMPDIR") or DEFAULT_TMPDIR
        self.namespace = namespace
        self.quiet = quiet
        self.owned = False
        self.started = False

    def start(self) -> "RayRuntime":
        import ray

        if ray.is_initialized():  # borrowed: a fixture or the caller owns it
            self.started, self.owned = True, False
            return self
        env = _worker_env()
        kw = dict(include_dashboard=False, namespace=self.namespace,
                  logging_level=logging.WARNING if self.quiet else logging.INFO,
                  log_to_driver=not self.quiet)
        if self.address in (None, "", "local"):
            os.environ["RAY_TMPDIR"] = self.tmpdir
            Path(self.tmpdir).mkdir(parents=True, exist_ok=True)
            kw.update(address="local", num_cpus=self.num_cpus,
                      object_store_memory=self.object_store_memory,
                      _node_ip_address="127.0.0.1", _temp_dir=self.tmpdir)
            self.owned = True
        else:  # attach: the cluster's own resources apply; ship our env to its workers
            kw.update(address=self.address, runtime_env={"env_vars": env} if env else None)
            self.owned = False
        ray.init(**kw)
        self.started = True
        return self

    def stop(self) -> None:
        """Shut Ray down if we started it; disconnect if we attached; leave a borrowed Ray."""
        import ray

        if self.started and ray.is_initialized():
            if self.owned or self.address not in (None, "", "local"):
                ray.shutdown()
        self.started = False

    def __enter__(self) -> "RayRuntime":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        self.stop()

    def __repr__(self) -> str:  # pragma: no cover
        return (f"RayRuntime(address={self.address!r}, owned={self.owned}, "
                f"started={self.started}, tmpdir={self.tmpdir!r})")
