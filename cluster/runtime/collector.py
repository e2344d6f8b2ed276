"""Python's cyclic garbage collector kept off the paths where its pauses hurt.

Why: a deployment of 100,000 queries holds millions of Python objects (the queries, the plan,
the priced trees; in a node actor, the trees' query specs); a full collection traverses every
one of them, 0.05-0.85 s here, and comes every few seconds (each batch, micro-batch and command
allocates).  In a ``weaveplace run`` of 100,000 queries they took ~1.8 s of the driver and
~1.5 s of the node actor; one falling inside a ``serve`` command (``add-queries``: ~1.5 s)
made its latency jump by up to 0.25 s, the young collections inside it ~0.07 s more.  So:

- ``frozen``: what exists when a run or a service is up (the deployment, the plan, the queries)
  is frozen for as long as it runs (``gc.freeze``): collections do not traverse it.  Reference
  counting still frees a frozen object; only a reference cycle among them waits for the end,
  when they are unfrozen (a process that runs many deployments, a test session, collects them).
- ``freeze_start``: the same for the rest of a process (a node actor, once its trees are built).
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
_frozen = 0  # ``frozen`` bodies running: the last one to end unfreezes


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


def freeze_start(collect: bool = True) -> int:
    """Freeze every object tracked now, for the rest of the process (module doc); with
    ``collect``, after a full collection (garbage is not frozen with the rest, at the price of
    that one collection).  Returns how many objects are frozen."""
    if collect:
        gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


@contextmanager
def frozen(collect: bool = False) -> Iterator[int]:
    """Every object tracked now frozen for the body, unfrozen when the outermost ``frozen``
    ends (module doc); yields how many are frozen."""
    global _frozen
    with _lock:
        _frozen += 1
        n = freeze_start(collect)
    try:
        yield n
    finally:
        with _lock:
            _frozen -= 1
            if _frozen == 0:
                gc.unfreeze()
