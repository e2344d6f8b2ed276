"""Drop boxes at the sources: which of a stream's tuples a kept fraction keeps.

A tuple with event time ``ts_ms`` and DEBS row number ``index`` is kept under a kept fraction
``x`` when ``u(ts_ms, index) < x``, ``u`` a hash spread evenly over [0, 1).  The stream is not
in the hash: streams with one fraction keep the same rows, so they travel as one batch (a
linear program's solution has few distinct fractions: 0, 1 and at most one per node), and a
row kept at ``x`` is kept at every larger fraction.  Why a hash and not a random draw: the choice is a function of the tuple alone, so a
resumed run drops the same tuples, and a brute force over the kept tuples (the oracle every
shed answer is checked against) reproduces every answer from the input and the fractions.
Why a hash written here: it must be the same in the feed and in any oracle, vectorised over
a file's rows, and stable across numpy and Python versions (``hash()`` is salted per
process); SplitMix64's finaliser (Steele, Lea, Flood 2014) mixes 64 bits in five integer
operations, which numpy's wrapping ``uint64`` arithmetic computes exactly.

``u = mix(ts_ms * G + index * H) / 2**64`` (mod 2**64 throughout), ``G`` and ``H`` odd
constants; ``keep_one`` is the scalar definition, ``keep_mask`` the same over arrays.
"""

from __future__ import annotations

import numpy as np

_M = (1 << 64) - 1
_G = 0x9E3779B97F4A7C15
_H = 0xBF58476D1CE4E5B9
_C1 = 0xBF58476D1CE4E5B9
_C2 = 0x94D049BB133111EB


def _mix(x: int) -> int:
    x &= _M
    x = ((x ^ (x >> 30)) * _C1) & _M
    x = ((x ^ (x >> 27)) * _C2) & _M
    return x ^ (x >> 31)


def keep_one(ts_ms: int, index: int, keep: float) -> bool:
    """Whether the tuple is kept under the kept fraction ``keep`` (the definition)."""
    if keep >= 1.0:
        return True
    return _mix(ts_ms * _G + index * _H) < min(int(max(keep, 0.0) * 2.0**64), _M)


def keep_mask(ts_ms: np.ndarray, index: np.ndarray, keep: float) -> np.ndarray:
    """``keep_one`` over arrays of tuples: a boolean mask (all True at ``keep >=
    1``, all False at ``keep <= 0``)."""
    n = len(ts_ms)
    if keep >= 1.0:
        return np.ones(n, dtype=bool)
    if keep <= 0.0:
        return np.zeros(n, dtype=bool)
    with np.errstate(over="ignore"):
        x = np.asarray(ts_ms).astype(np.uint64) * np.uint64(_G) + np.asarray(index).astype(
            np.uint64
        ) * np.uint64(_H)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(_C1)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(_C2)
        x = x ^ (x >> np.uint64(31))
    # u < keep  <=>  x < keep * 2**64; compare in integers (a float64 u loses the low bits)
    bound = int(keep * 2.0**64)
    return x < np.uint64(min(bound, _M))
