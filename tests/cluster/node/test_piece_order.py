"""Executor pushes put back in order on the node (cluster/node/piece_order.py): ``PieceOrder``
under any interleaving of sub-batches, and the sub-batches and segments that cover a piece.
No Ray, no Spark."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from helpers import examples
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


@st.composite
def _disordered_pushes(draw):
    """A tree's queries, a stream in arrival (file) order with a drawn disorder pattern, the
    allowed lateness, and its cut into pieces and sub-batches pushed in a drawn interleaving.
    The disorder: each timestamp is an increasing base minus a jitter up to ``J``; ``J`` is
    drawn within the lateness (no tuple may be late) or beyond it (some may be)."""
    from helpers import random_queries  # noqa: I001

    qs = random_queries(draw, draw(st.integers(1, 3)), keys=2, max_slide=7)
    n = draw(st.integers(1, 90))
    lateness = draw(st.integers(0, 12))
    jitter = draw(st.sampled_from([lateness, lateness + draw(st.integers(1, 30))]))
    steps = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    back = draw(st.lists(st.integers(0, jitter), min_size=n, max_size=n))
    ts = np.cumsum(steps) + 40 - np.array(back)
    vals = np.array(draw(st.lists(st.integers(-50, 50), min_size=n, max_size=n)), np.int64)
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, n - 1)), max_size=5))) - {n})
    batch_rows = draw(st.integers(1, 25))
    return qs, ts.astype(np.int64), vals, lateness, [0, *cuts, n], batch_rows


@settings(max_examples=examples(40), deadline=None)
@given(_disordered_pushes(), st.randoms())
def test_executor_route_on_disordered_input_equals_the_brute_force(case, rnd):
    """The node side of the executor route (``NodeCore.push_piece``: pieces pushed in any
    interleaving, applied in file order) on a stream out of time order: its answers and late
    tuples are the brute force's over the file order with the allowed lateness (docs/DESIGN.md
    s. 1), whether the disorder stays within the lateness (then nothing is late) or not."""
    from cluster.node.core import NodeCore
    from executors.oracle import brute_force

    qs, ts, vals, lateness, bounds, batch_rows = case
    specs = [
        {"id": q.id, "aggregate": q.aggregate, "range": q.range, "slide": q.slide, "kind": "time"}
        for q in qs
    ]
    node = NodeCore("n", [{"id": "t0", "stream": "mf01", "queries": specs}], "slickdeque", lateness)
    node.begin_pieces(0, max_ahead=len(bounds), first_piece=0, epoch=1)
    table = pa.table({"ts_ms": pa.array(ts, pa.int64()), "mf01": pa.array(vals, pa.int64())})
    queues = []
    for p, (a, b) in enumerate(zip(bounds, bounds[1:])):
        chunks = [table.slice(x, min(batch_rows, b - x)) for x in range(a, b, batch_rows)]
        queues.append([(p, j, j == len(chunks) - 1, _ipc(c)) for j, c in enumerate(chunks)])
    while any(queues):
        q = rnd.choice([q for q in queues if q])
        assert node.push_piece(*q.pop(0), epoch=1)
    node.end_pieces(len(queues))
    node.flush()
    got = node.drain().to_pylist()
    want, late = brute_force(specs, ts, vals, lateness)
    assert sorted(
        (r["query_id"], r["window_start"], r["window_end"], r["value"]) for r in got
    ) == sorted(want)  # sum and max of integers: exact
    lt = node.late().to_pylist()
    assert [r["ts_ms"] for r in lt] == [int(ts[i]) for i in late]
    assert [r["value"] for r in lt] == [int(vals[i]) for i in late]
    if int(np.max(np.maximum.accumulate(ts) - ts)) <= lateness:
        assert not late  # disorder within the lateness: nothing is late


def _ipc(t: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    return sink.getvalue().to_pybytes()
