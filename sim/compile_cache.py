"""numba's one-off compilation: one cache directory for everything, filled once at install time.

Why: the kernels (``placement.lazy_table``, ``placement.local_search`` and
``placement.edges.small`` and ``placement.edges.sieve``, the executors' final aggregators and slicers) are compiled by numba on first use, ~25 s of CPU for
a first ``weaveplace plan`` and seconds per live actor, and that used to land inside reported
runtimes. Now:

* every process uses one on-disk cache, ``NUMBA_CACHE_DIR`` (default ``<checkout>/.cache/numba``,
  the directory the Makefile exports and Ray's workers get): ``ensure_cache_dir``
  (``placement.numba_cache``) sets it before numba is imported (the CLI's entry point does);
* ``make`` (the install stamp) runs ``weaveplace warmup``, which compiles every kernel a plan or a
  run can use into that cache (``warm_all``), so a new user's first plan loads machine code
  instead of compiling;
* what is left (loading the cache: a few hundred ms per process; compiling when the cache is cold
  or was cleared) happens before the timers and is reported apart: ``compile_s`` in simulation
  rows and summaries, in ``weaveplace plan``'s line, and per node in live-run metrics
  (``cluster.node.core.NodeCore.warmup``), never inside ``runtime_s`` / Table 10 / ``busy_s``.

numba keys its cache on each kernel's source file: after editing ``executors/aggregates.py``
(shared combine functions) clear the cache directory (``executors/README.md``, Caveats).
"""

from __future__ import annotations

import time
from collections.abc import Callable

_PLACEMENT_WARM: float | None = None


def warm_placement() -> float:
    """Load (or compile) the planning kernels once per process; returns the seconds spent the
    first time and 0.0 afterwards, so a caller can report it apart from its timed work."""
    global _PLACEMENT_WARM
    if _PLACEMENT_WARM is not None:
        return 0.0
    from placement.edges import sieve, small
    from placement.lazy_table.table import warm
    from placement.local_search import kernels as ls_kernels

    t0 = time.perf_counter()
    warm()
    ls_kernels.warm()
    small.warm()
    sieve.warm()
    _PLACEMENT_WARM = time.perf_counter() - t0
    return _PLACEMENT_WARM


def executor_cases() -> list[tuple[str, str, str, tuple[str, ...], bool]]:
    """(technique, slicing, value kind, aggregates, sliced input) for every executor
    configuration a run can use: every technique and slicing, int and float values, the
    aggregates the technique runs, tuple and pre-aggregated slice input."""
    from executors.base import TECHNIQUES
    from executors.tree import ALL_TECHNIQUES, SLICINGS
    from placement.queries import AGGREGATES, INVERTIBLE_AGGREGATES, SELECTIVE_AGGREGATES

    cases = []
    for tech in ALL_TECHNIQUES:
        cls = TECHNIQUES.get(tech)  # None: a family, which runs every aggregate
        if cls is not None and cls.requires_inverse:
            aggs = tuple(a for a in AGGREGATES if a in INVERTIBLE_AGGREGATES)
        elif cls is not None and cls.requires_selective:
            aggs = tuple(a for a in AGGREGATES if a in SELECTIVE_AGGREGATES)
        else:
            aggs = tuple(AGGREGATES)
        for slicing in SLICINGS:
            for kind in ("i", "f"):
                for sliced in (False, True):
                    cases.append((tech, slicing, kind, aggs, sliced))
    return cases


def warm_executor_case(
    tech: str, slicing: str, kind: str, aggs: tuple[str, ...], sliced: bool
) -> None:
    """Run one small tree of this configuration (compiles or loads its kernels)."""
    import numpy as np

    from executors.slice_input import SlicedExecutionTree, slice_aggregates
    from executors.tree import SINGLE_LENGTH, ExecutionTree

    wins = [(10, 4)] if tech in SINGLE_LENGTH else [(10, 4), (7, 3), (12, 6)]
    qs = [
        {"id": f"{a}{j}", "aggregate": a, "range": r, "slide": s}
        for a in aggs
        for j, (r, s) in enumerate(wins)
    ]
    ts = np.arange(0, 200, dtype=np.int64)
    v = (ts % 7).astype(np.float64 if kind == "f" else np.int64)
    cls = SlicedExecutionTree if sliced else ExecutionTree
    tree = cls(qs, technique=tech, slicing=slicing)
    if sliced:
        tree.process_slices(slice_aggregates(ts, v, tree.slicer.classes))
    else:
        tree.process(ts, v)
    tree.flush()


def warm_all(progress: Callable[[str], None] | None = None) -> dict[str, float]:
    """Compile (or load) every kernel into the cache: planning, then every executor case.
    Returns seconds per part."""
    say = progress or (lambda label: None)
    out = {}
    t0 = time.perf_counter()
    say("placement kernels")
    warm_placement()
    out["placement_s"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    for case in executor_cases():
        say(
            f"executors: {case[0]} {case[1]} {'float' if case[2] == 'f' else 'int'}"
            f"{' slices' if case[4] else ''}"
        )
        warm_executor_case(*case)
    say("executors: answer grouping")
    from executors import answer_order

    answer_order.warm()
    out["executors_s"] = time.perf_counter() - t1
    return out
