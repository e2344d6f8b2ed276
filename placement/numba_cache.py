"""numba's one on-disk cache directory for every process (``NUMBA_CACHE_DIR``).

Why in the lowest layer: every layer's kernels (placement, executors) compile into this one
cache, and it must be set before numba is imported, by the CLI's entry point (sim) and for the
Ray workers (``cluster.runtime.ray_runtime``); here each may import it without importing numba. Filling
the cache (``weaveplace warmup``) is ``sim.compile_cache``.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CACHE = REPO / ".cache" / "numba"


def ensure_cache_dir() -> str | None:
    """``NUMBA_CACHE_DIR`` = ``<checkout>/.cache/numba`` unless already set (or not writable:
    numba then falls back to its own default).  Must run before numba is imported to apply to
    this process; child processes (Ray workers, simulation workers) inherit it."""
    if "NUMBA_CACHE_DIR" not in os.environ:
        try:
            DEFAULT_CACHE.mkdir(parents=True, exist_ok=True)
            os.environ["NUMBA_CACHE_DIR"] = str(DEFAULT_CACHE)
        except OSError:  # read-only checkout
            return None
    return os.environ["NUMBA_CACHE_DIR"]
