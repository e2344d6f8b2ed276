"""Event-time order for batches that Spark tasks push to a node actor in parallel.

Why: on the executor route (``executor_feed``) each Spark task reads one *piece* of a
time-ordered Parquet file (a row range, pieces numbered in file order) and pushes it, cut
into sub-batches, straight to the node actors; tasks run in parallel and finish in any order,
but every tree must see its stream in event-time order.  So a node applies pieces strictly in
piece order and, within a piece, sub-batches in order: ``PieceOrder`` buffers what arrives
early, and refuses (the task retries later) what is more than ``max_ahead`` pieces ahead of
the next piece to apply, which bounds the buffer (backpressure per actor) without a
deadlock: the next piece is always accepted, and Spark starts tasks in piece order, so the
task holding it is running.

Each sub-batch ``j`` of piece ``p`` is applied with batch sequence number
``base + p * SUB + j`` (``SUB`` = 2^20 sub-batches per piece at most), so the trees' seq
bookkeeping (skip what was applied) works as on the driver route.
"""

from __future__ import annotations

from typing import Any

SUB = 1 << 20


class PieceOrder:
    """The reorder buffer of one node for one executor feed."""

    def __init__(self, base_seq: int, max_ahead: int = 4):
        if max_ahead < 1:
            raise ValueError("max_ahead must be >= 1")
        self.base = int(base_seq)
        self.max_ahead = int(max_ahead)
        self.next_piece = 0
        self.next_sub = 0
        self.buffer: dict[tuple[int, int], tuple[bool, Any]] = {}
        self.max_buffered = 0  # the most sub-batches ever held back (a metric)

    def seq(self, piece: int, sub: int) -> int:
        return self.base + piece * SUB + sub

    def offer(self, piece: int, sub: int, last: bool, item: Any) -> list[tuple[int, Any]] | None:
        """Take sub-batch ``sub`` of ``piece`` (``last``: the piece's final one).  Returns the
        items now due, in order, as ``(seq, item)`` (maybe none: buffered), or ``None`` when
        refused (too far ahead: offer it again later).  A sub-batch already applied or
        already buffered is ignored (a retried push)."""
        if not 0 <= sub < SUB:
            raise ValueError(f"sub-batch index {sub} out of range")
        if piece >= self.next_piece + self.max_ahead:
            return None
        if (piece, sub) < (self.next_piece, self.next_sub) or (piece, sub) in self.buffer:
            return []
        self.buffer[(piece, sub)] = (bool(last), item)
        self.max_buffered = max(self.max_buffered, len(self.buffer))
        due = []
        while (self.next_piece, self.next_sub) in self.buffer:
            last_, it = self.buffer.pop((self.next_piece, self.next_sub))
            due.append((self.seq(self.next_piece, self.next_sub), it))
            if last_:
                self.next_piece, self.next_sub = self.next_piece + 1, 0
            else:
                self.next_sub += 1
        return due

    def done(self, pieces: int) -> bool:
        """Every one of ``pieces`` pieces applied, nothing held back."""
        return self.next_piece == pieces and self.next_sub == 0 and not self.buffer
