"""Python's cyclic garbage collector kept off the path of a ``serve`` command.

Why: a deployment of 100,000 queries holds millions of Python objects (the queries, the priced
trees, the plans); a full collection traverses every one of them, 0.05-0.25 s here, and comes
every few seconds of a run (each micro-batch and command allocates).  One falling inside an
``add-queries`` (~1.5 s) made its latency jump by that much; the young collections inside it
took ~0.07 s more.  So:

- ``freeze_start``: what the start built (the deployment, the plan, the queries) is collected
  once and frozen (``gc.freeze``): later collections never traverse it again.  Reference
  counting still frees a frozen object; only a reference cycle among frozen objects would stay.
- ``paused``: a command runs with the collector off; the collections it would have made run
  after it, on the next allocations.  Pauses nest and may overlap across threads (the control
  API answers on one thread per request): the collector comes back when the last one ends, and
  only if it was on when the first began.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
_restore = False  # whether the last pause to end turns the collector back on


@contextmanager
def paused() -> Iterator[None]:
    """The cyclic collector off for the body (module doc)."""
    global _depth, _restore
    with _lock:
        if _depth == 0:
            _restore = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _restore:
                gc.enable()


def freeze_start() -> int:
    """Collect, then freeze every object tracked now (module doc); returns how many are
    frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
