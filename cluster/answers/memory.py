"""Memory for large answer columns: anonymous mappings whose pages the kernel fills in one call.

Why: a node's part or the driver's merged answers are hundreds of MB, and filling them in fresh
numpy arrays costs more than the work that fills them.  numpy asks for transparent huge pages
on arrays of 4 MB or more; where the kernel then compacts memory on the first touch of each
2 MB page (THP ``defrag`` in ``madvise`` mode, as on this project's VM), 190 MB of columns took
0.02-0.44 s to fill, against 0.08-0.09 s for a mapping populated at once (``MAP_POPULATE``: no
fault per page, no compaction, 4 KB pages) and 0.12-0.16 s for the same mapping faulted page by
page (BENCHMARKS.md, "Answers at 10,000 queries").  Only the answer columns live here: the
trees' own arrays keep their huge pages.
"""

from __future__ import annotations

import mmap

import numpy as np


def mapping(nbytes: int) -> mmap.mmap:
    """Anonymous memory of ``nbytes`` (at least 1), its pages populated at once where the OS
    can (elsewhere faulted on first touch, as any memory)."""
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0)
    return mmap.mmap(-1, max(int(nbytes), 1), flags=flags)


def populated(n: int, dtype) -> np.ndarray:
    """A new writable array of ``n`` items of ``dtype`` in its own populated mapping (contents
    zero); the mapping lives as long as the array or any view of it (an Arrow array made from
    it without a copy included)."""
    dtype = np.dtype(dtype)
    return np.frombuffer(mapping(n * dtype.itemsize), dtype=dtype, count=n)
