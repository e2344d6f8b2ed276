"""Pieces of a Parquet file: their order at a node, and their source for replays.

Why: on the executor route (``cluster.feeds.executors``) each Spark task reads one *piece* of a
Parquet file (a row range, pieces numbered in file order) and pushes it, cut into
sub-batches, straight to the node actors; tasks run in parallel and finish in any order, but
every tree must see its stream in file order (event-time order for a sorted file; for one out
of order, the order lateness is judged over, as the driver route's ``order="file"``).  So a node applies pieces strictly in
piece order and, within a piece, sub-batches in order: ``PieceOrder`` buffers what arrives
early, and refuses (the task retries later) what is more than ``max_ahead`` pieces ahead of
the next piece to apply, which bounds the buffer (backpressure per actor) without a
deadlock: the next piece is always accepted, and Spark starts tasks in piece order, so the
task holding it is running.

Each sub-batch ``j`` of piece ``p`` is applied with batch sequence number
``base + p * SUBS_PER_PIECE + j`` (2^20 sub-batches per piece at most), so the trees' seq
bookkeeping (skip what was applied) works as on the driver route.

Replays read the source: the tuples of the executor route never pass the driver, so its
replay log (``recovery``) holds ``PieceSource``s, a sub-batch's address in the file, and a
restored actor reads them itself (``NodeCore.ingest``).  A sub-batch read again holds exactly
the rows the task pushed under the same ``seq`` (same row group, same row range).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

#: sub-batches a piece may have at most: the stride of the batch seq numbers from piece to
#: piece (sub-batch j of piece p is batch base + p * SUBS_PER_PIECE + j)
SUBS_PER_PIECE = 1 << 20


@dataclass(frozen=True)
class Slicing:
    """Sliced mode on the executor route: the streams in a fixed order (stream ``i``'s slice
    sub-batches of a piece take sub numbers from ``i * slot``: one seq numbering for every
    node, whichever streams it hosts), each stream's edge classes (the union over the
    deployment, ``Deployment.edge_classes``) and the value type."""

    streams: tuple[str, ...]
    classes: tuple[tuple[tuple[int, int], ...], ...]
    as_float: bool

    @property
    def slot(self) -> int:
        return SUBS_PER_PIECE // max(1, len(self.streams))

    def first_sub(self, stream: str) -> int:
        return self.streams.index(stream) * self.slot

    def cut(self, rows: pa.Table, stream: str) -> pa.Table:
        """The slices of ``stream`` in ``rows`` (``ts_ms`` + the stream column; at least one
        row), the columns a sliced node ingests."""
        from cluster.node.slice_rows import slice_partition

        i = self.streams.index(stream)
        out = list(
            slice_partition(
                rows.select(["ts_ms", stream]).to_batches(),
                [stream],
                {stream: list(self.classes[i])},
                self.as_float,
            )
        )
        if not out:
            raise ValueError("a piece has at least one row")
        return pa.Table.from_batches(out).drop(["sid"])


@dataclass(frozen=True)
class PieceSource:
    """One sub-batch of the executor route: chunk ``chunk`` (``batch_rows`` rows at most) of
    the piece rows ``[start, stop)`` of row group ``row_group`` of the Parquet file ``path``
    (columns ``columns``), or in sliced mode (``slicing``) of ``stream``'s slices of them.
    The pushing task cuts its piece with ``chunk_of`` and the replay log holds these, so a
    replay re-reads exactly what was pushed under the same ``seq``."""

    path: str
    row_group: int
    start: int
    stop: int
    columns: tuple[str, ...]
    chunk: int
    batch_rows: int
    stream: str | None = None
    slicing: Slicing | None = None

    def chunk_of(self, rows: pa.Table) -> pa.Table:
        """This sub-batch's chunk of the piece's rows (raw) or of its stream's slices."""
        return rows.slice(self.chunk * self.batch_rows, self.batch_rows)

    def take(self, piece: pa.Table) -> pa.Table:
        """This sub-batch of the piece's rows (as read: ``columns``)."""
        if self.slicing is not None:
            assert self.stream is not None
            piece = self.slicing.cut(piece, self.stream)
        return self.chunk_of(piece)

    def read(self) -> pa.Table:
        import pyarrow.parquet as pq

        t = pq.ParquetFile(self.path).read_row_group(self.row_group, columns=list(self.columns))
        return self.take(t.slice(self.start, self.stop - self.start))


def sub_batches(
    path: str,
    row_group: int,
    start: int,
    stop: int,
    batch_rows: int,
    columns,
    slicing: Slicing | None = None,
    chunks: dict[str, int] | None = None,
) -> list[tuple[int, PieceSource]]:
    """A piece's sub-batches in push order, each with its sub number (the ``seq`` offset in
    the piece): raw mode, its rows cut into ``batch_rows`` (at least one chunk, maybe empty);
    sliced mode, per stream in ``slicing``'s order its ``chunks[stream]`` chunks of slices,
    numbered from ``slicing.first_sub(stream)``."""
    cols = tuple(columns)
    if slicing is None:
        n = max(1, -(-(stop - start) // batch_rows))
        return [
            (c, PieceSource(path, row_group, start, stop, cols, c, batch_rows)) for c in range(n)
        ]
    assert chunks is not None
    return [
        (
            slicing.first_sub(s) + c,
            PieceSource(path, row_group, start, stop, ("ts_ms", s), c, batch_rows, s, slicing),
        )
        for s in slicing.streams
        for c in range(chunks[s])
    ]


class PieceOrder:
    """The reorder buffer of one node for one executor feed."""

    def __init__(self, base_seq: int, max_ahead: int = 4, first_piece: int = 0):
        if max_ahead < 1:
            raise ValueError("max_ahead must be >= 1")
        self.base = int(base_seq)
        self.max_ahead = int(max_ahead)
        self.next_piece = int(first_piece)  # a feed in segments starts each one further on
        self.next_sub = 0
        self.buffer: dict[tuple[int, int], tuple[bool, Any]] = {}
        self.max_buffered = 0  # the most sub-batches ever held back (a metric)

    def seq(self, piece: int, sub: int) -> int:
        return self.base + piece * SUBS_PER_PIECE + sub

    def offer(self, piece: int, sub: int, last: bool, item: Any) -> list[tuple[int, Any]] | None:
        """Take sub-batch ``sub`` of ``piece`` (``last``: the piece's final one).  Returns the
        items now due, in order, as ``(seq, item)`` (maybe none: buffered), or ``None`` when
        refused (too far ahead: offer it again later).  A sub-batch already applied or
        already buffered is ignored (a retried push)."""
        if not 0 <= sub < SUBS_PER_PIECE:
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
        """Every piece before ``pieces`` applied, nothing held back."""
        return self.next_piece == pieces and self.next_sub == 0 and not self.buffer
