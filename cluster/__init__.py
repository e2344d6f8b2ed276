"""Cluster layer: Ray node actors hosting execution trees, fed by Spark (docs/DESIGN.md s. 5-6).

The names below are imported on first use (PEP 562): importing one module of the package
(a run's start-up, a node actor) then does not import every other one (numba's kernels,
pyarrow's compute functions: about 0.8 s a process)."""

from __future__ import annotations

import importlib

_EXPORTS = {
    "Deployment": "cluster.deployment.deployment",
    "RayRuntime": "cluster.runtime.ray_runtime",
    "feed_raw": "cluster.feeds.parquet",
    "feed_sliced": "cluster.feeds.sliced",
    "run_file": "cluster.runs.file_run",
    "spark_session": "cluster.feeds.parquet",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'cluster' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
