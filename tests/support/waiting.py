"""Polling instead of fixed sleeps: a test waits exactly as long as the condition takes (fast on
an idle machine) and up to a generous timeout on a loaded one, instead of a sleep that is too
long on the first and too short on the second."""

from __future__ import annotations

import time
from collections.abc import Callable

#: long enough for a Ray or Spark step on this 2-core machine shared with other work; only a
#: broken test waits that long, and then it fails instead of hanging
DEFAULT_TIMEOUT_S = 240.0


def wait_for(
    cond: Callable[[], object],
    what: str,
    timeout: float = DEFAULT_TIMEOUT_S,
    *,
    interval: float = 0.05,
    proc=None,
    retry_errors: bool = False,
) -> None:
    """Return as soon as ``cond()`` is true; fail with ``timed out waiting for <what>`` after
    ``timeout`` seconds.

    ``proc`` (a ``subprocess.Popen``): fail at once when it exits, since nothing it was to do
    can happen any more.  ``retry_errors``: an exception from ``cond`` counts as "not yet" (a
    server not listening yet, a file half written) instead of failing the test.
    """
    start = time.monotonic()
    while True:
        try:
            if cond():
                return
        except Exception:
            if not retry_errors:
                raise
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process exited ({proc.returncode}) while waiting for {what}")
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)
