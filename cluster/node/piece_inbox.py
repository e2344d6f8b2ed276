"""A node's inbox for the executor route: sub-batches pushed by Spark tasks, let out in order.

Why apart from ingest: on the executor route (``cluster.feeds.executors``) Spark tasks push
pieces of the input straight to the node, in any order and possibly from a failed attempt that
Spark has not cancelled yet.  Which pushes to take (this attempt's *epoch* only), which to hold
back (``piece_order.PieceOrder``: at most ``max_ahead`` pieces ahead) and which batch ``seq``
each one gets is the inbox's business; the node only ingests what comes out, as on the driver
route.
"""

from __future__ import annotations

import pyarrow as pa

from cluster.node.piece_order import SUBS_PER_PIECE, PieceOrder


class PieceInbox:
    """The pushes of one executor feed (or segment of it) at one node."""

    def __init__(self, node_id: str):
        self.node_id = node_id
        self.order: PieceOrder | None = None  # the reorder buffer of the feed in progress
        self.epoch = -1  # the feed attempt it belongs to (pushes of older ones are dropped)

    def begin(self, base_seq: int, max_ahead: int, first_piece: int, epoch: int) -> None:
        self.order = PieceOrder(base_seq, max_ahead, first_piece)
        self.epoch = int(epoch)

    def _open(self) -> PieceOrder:
        if self.order is None:
            raise RuntimeError(f"node {self.node_id}: begin_pieces was not called")
        return self.order

    def window(self, piece: int, epoch: int) -> bool:
        """Whether ``piece`` may be pushed now; a stale attempt's task is let through (its
        pushes are dropped)."""
        if epoch != self.epoch:
            return True
        po = self._open()
        return piece < po.next_piece + po.max_ahead

    def offer(
        self,
        piece: int,
        sub: int,
        last: bool,
        data: bytes,
        epoch: int,
        stream: str | None,
        seq_sub: int | None,
    ) -> list[tuple[str | None, pa.Table, int]] | None:
        """Take one pushed sub-batch (Arrow IPC stream bytes); returns the batches now due as
        ``(stream, table, seq)`` in order (none for a stale push), or ``None``: refused, too
        far ahead.  Sliced mode: ``stream``'s slices get seq ``base + piece *
        SUBS_PER_PIECE + seq_sub`` (the same number on every node), ``sub`` orders them."""
        if epoch != self.epoch:
            return []
        po = self._open()
        due = po.offer(piece, sub, last, (stream, sub if seq_sub is None else seq_sub, data))
        if due is None:
            return None
        out = []
        for seq, (s, ss, d) in due:
            batch = pa.ipc.open_stream(d).read_all()
            out.append((s, batch, seq - (seq - po.base) % SUBS_PER_PIECE + ss))
        return out

    def end(self, pieces: int) -> int:
        """Close the feed up to piece ``pieces``: every piece before it must have been let
        out (else a task's push was lost: ``RuntimeError``).  Returns the most sub-batches
        ever held back."""
        po, self.order = self.order, None
        if po is None or not po.done(pieces):
            got = None if po is None else (po.next_piece, po.next_sub, len(po.buffer))
            raise RuntimeError(
                f"node {self.node_id}: pushed feed incomplete: {pieces} pieces expected, "
                f"(next piece, next sub-batch, held back) = {got}"
            )
        return po.max_buffered
