"""Executor pushes put back in order on the node (cluster/node/piece_order.py): ``PieceOrder``
under any interleaving of sub-batches, and the sub-batches and segments that cover a piece.
No Ray, no Spark."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=6), st.integers(1, 3), st.randoms())
def test_piece_order_applies_in_order_whatever_the_arrival(subs, max_ahead, rnd):
    """Tasks push sub-batches in any interleaving (each task's own in order, as a task
    sends them; retries of refused or repeated offers): the items come out exactly in
    (piece, sub-batch) order, each once, with seq numbers increasing, and never more than
    ``max_ahead`` pieces are held."""
    from cluster.node.piece_order import PieceOrder

    po = PieceOrder(base_seq=7, max_ahead=max_ahead)
    queues = [[(p, j, j == n - 1) for j in range(n)] for p, n in enumerate(subs)]
    out = []
    while any(queues):
        p = rnd.choice([i for i, q in enumerate(queues) if q])
        piece, j, last = queues[p][0]
        got = po.offer(piece, j, last, (piece, j))
        if got is None:
            assert piece >= po.next_piece + max_ahead
            continue
        queues[p].pop(0)
        out += got
        if rnd.random() < 0.2:  # a repeated offer is ignored
            assert po.offer(piece, j, last, (piece, j)) == []
        assert all(k[0] < po.next_piece + max_ahead for k in po.buffer)
    assert [it for _, it in out] == [(p, j) for p, n in enumerate(subs) for j in range(n)]
    seqs = [s for s, _ in out]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs) and seqs[0] == 7
    assert po.done(len(subs))


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 50),
    st.integers(1, 400),
    st.integers(1, 130),
    st.integers(0, 40),
    st.one_of(st.none(), st.integers(1, 9)),
    st.lists(st.integers(-3, 45), max_size=5),
)
def test_sub_batches_and_segments_cover_the_piece(a, n, batch_rows, pieces, ckpt, faults):
    """A piece's sub-batches (``sub_batches``, what the task pushes and the replay log holds)
    re-read from a real file give its rows exactly, in order, at most ``batch_rows`` each,
    numbered 0, 1, ...; in sliced mode each stream's chunks of slices, numbered from the
    stream's slot, give its slices; the segments cover every piece once, cut at checkpoints
    and drills."""
    import tempfile

    from cluster.feeds.executors import segment_cuts
    from cluster.node.piece_order import Slicing, sub_batches

    ts = np.arange(a + n, dtype=np.int64) * 7
    t = pa.table({"ts_ms": ts, "mf01": ts % 13, "mf02": ts % 5})
    with tempfile.TemporaryDirectory() as d:
        path = f"{d}/f.parquet"
        pq.write_table(t, path, row_group_size=a + n)
        subs = sub_batches(path, 0, a, a + n, batch_rows, ["ts_ms", "mf01", "mf02"])
        assert [j for j, _ in subs] == list(range(max(1, -(-n // batch_rows))))
        got = [src.read() for _, src in subs]
        assert all(g.num_rows <= batch_rows for g in got)
        assert pa.concat_tables(got).equals(t.slice(a, n))
        sl = Slicing(("mf01", "mf02"), (((21, 0),), ((35, 0), (14, 0))), False)
        piece = t.slice(a, n)
        cut = {s: sl.cut(piece, s) for s in sl.streams}
        chunks = {s: max(1, -(-x.num_rows // batch_rows)) for s, x in cut.items()}
        subs = sub_batches(path, 0, a, a + n, batch_rows, t.column_names, sl, chunks)
        assert [j for j, _ in subs] == sorted({j for j, _ in subs})
        for s in sl.streams:
            mine = [(j, src) for j, src in subs if src.stream == s]
            assert [j for j, _ in mine] == [sl.first_sub(s) + c for c in range(chunks[s])]
            assert pa.concat_tables([src.read() for _, src in mine]).equals(cut[s])
    cuts = segment_cuts(pieces, ckpt, faults)
    assert cuts[0] == 0 and cuts[-1] == pieces and cuts == sorted(set(cuts))
    want = {0, pieces} | ({k for k in range(0, pieces, ckpt)} if ckpt else set())
    want |= {f for f in faults if 0 < f < pieces}
    assert set(cuts) == want
