"""The memory a node builds its Parquet parts in, kept from one round to the next.

Why: a node's part at 10,000 queries is millions of answers, four columns of ~28 bytes per
answer, and building it in fresh memory costs more than the part's own work (numpy's huge
pages, compacted on first touch on this project's VM: ``cluster.answers.memory``).  So the
columns live in one mapping of the node's own, populated at once (``memory.mapping``) and
reused by every later round as long as it is large enough: a later round touches no new page
at all.  The price: a node keeps the memory of its largest part's columns between rounds.

The arrays ``columns`` returns are views of that memory, valid until its next call: whoever
takes them writes the part before the next round builds its own
(``cluster.node.answers.PendingAnswers.write_part``), and never hands them out.
"""

from __future__ import annotations

import mmap

import numpy as np

from cluster.answers.memory import mapping

#: bytes per answer: window start, window end, value (8 bytes each), dictionary code (4)
ROW_BYTES = 8 + 8 + 8 + 4
_ALIGN = 64  # Arrow's buffer alignment


def _aligned(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


class AnswerBuffers:
    """A node's part columns, in memory kept across rounds (module docstring)."""

    def __init__(self) -> None:
        self.memory: mmap.mmap | None = None
        self.rows = 0  # answers the memory holds

    def columns(self, n: int, value_dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(window_start, window_end, value, code)`` for ``n`` answers: int64, int64,
        ``value_dtype`` (8 bytes), int32; views of the kept memory, grown (an eighth to spare)
        when ``n`` answers do not fit.  Their contents are whatever the last round left."""
        value_dtype = np.dtype(value_dtype)
        if value_dtype.itemsize != 8:
            raise ValueError(f"value columns are 8 bytes wide, got {value_dtype}")
        if n > self.rows or self.memory is None:
            self.rows = max(n + n // 8, 1)
            # the old mapping is let go; views still held keep it alive until they go
            self.memory = mapping(3 * _aligned(8 * self.rows) + _aligned(4 * self.rows))
        out, at = [], 0
        for dt in (np.int64, np.int64, value_dtype, np.int32):
            out.append(np.frombuffer(self.memory, dtype=dt, count=n, offset=at))
            at += _aligned(np.dtype(dt).itemsize * self.rows)
        return out[0], out[1], out[2], out[3]

    @property
    def nbytes(self) -> int:
        return len(self.memory) if self.memory is not None else 0
