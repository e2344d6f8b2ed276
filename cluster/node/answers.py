"""A node's answers and late tuples as the driver takes them: per-query blocks, a late table.

Why its own module: turning the trees' raw answer columns into ``AnswerBlocks`` (one block per
query, in query id order, each in window order) is the node half of the driver's block merge
(``cluster.answers.blocks.merge_blocks``); it depends on the trees only through their queries, not
on how the node routes batches or takes snapshots.  On the actor route the same columns go
straight to the table of the node's Parquet part instead (``part_table``), with no blocks in
between.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from cluster.answers.blocks import (
    LATE_SCHEMA,
    AnswerBlocks,
    answer_table,
    empty_answers,
    empty_late,
)
from cluster.answers.sink import WrittenPart, write_part
from cluster.node.answer_buffers import AnswerBuffers
from executors.answer_order import answer_columns, fresh_columns, group_by_query


def query_ranks(trees: dict) -> tuple[list[str], dict[str, np.ndarray], np.ndarray]:
    """(query ids of every tree in ``trees``, sorted; per tree id: the rank of each of its
    queries in that order; per rank: the query's range)."""
    # a query handed from one tree to another (cluster.service.service re-weaving) is in both
    qids = sorted({q.id for t in trees.values() for q in t.queries})
    pos = {q: i for i, q in enumerate(qids)}
    dt = np.uint16 if len(qids) <= 1 << 16 else np.uint32
    ranks = {tid: np.array([pos[q.id] for q in t.queries], dtype=dt) for tid, t in trees.items()}
    ranges = np.zeros(len(qids), dtype=np.int64)
    for t in trees.values():
        for q in t.queries:
            ranges[pos[q.id]] = q.range
    return qids, ranks, ranges


def answer_blocks(
    parts: list[tuple[str, tuple]],
    trees: dict,
    ranks: tuple[list[str], dict[str, np.ndarray], np.ndarray],
    value_type: str | None = None,
) -> AnswerBlocks:
    """The answer columns ``parts`` ((tree id, (qidx, window_start, window_end, value)) in
    production order; consumed) as one block per query, in query id order, each block's
    windows in order; ``ranks`` is ``query_ranks(trees)``; ``value_type="float64"``: int answers stored
    as floats on the way (the run's answers are float64: the actor route), an int beyond 2^53
    refused (``ValueError``).  The int64 rule per query: a query is an int block only if every
    batch gave it int values; one batch holds a tree's queries in one array, so a churn tree
    whose newer generation answers floats gives its int queries float values in some batches
    (then the query's int batches are stored as floats while grouped, never read as floats'
    bits).

    Why blocks: the driver then merges the nodes' answers block by block (``merge_blocks``)
    instead of sorting millions of rows by a string key on one core, and only ``window_start``
    and ``value`` travel (query id and range per block give the rest): 16 bytes per answer
    instead of ~33.  Columnar all the way: every answer's query becomes its rank (a small
    int), one stable counting sort by rank (``executors.answer_order``: two linear passes)
    groups the node's answers by query id, and a tree emits each query's answers in window
    order, so the groups are already in window order (checked, with a full sort as fallback:
    e.g. a query handed from one tree to another).  No Python object per answer or per
    query's block.
    """
    if not parts:
        return AnswerBlocks.empty()
    ids, rank_of, range_of = ranks
    # the int64 rule per query: a query is float if any batch gave it float values (one
    # batch holds a tree's queries in one array: a churn tree's float generation makes its
    # int queries' values float in that batch only), its int batches then stored as floats
    float_rank = np.zeros(len(ids), dtype=bool)
    if value_type == "float64":
        float_rank[:] = True
    else:
        for tid, c in parts:
            if c[3].dtype.kind not in "iub":
                float_rank[rank_of[tid][c[0]]] = True
    keep_float = np.zeros(len(ids), dtype=bool)  # a float batch's words are kept as they are
    cols = []
    parts.reverse()
    while parts:  # consumed: each batch's arrays are let go once grouped (group_by_query)
        tid, c = parts.pop()
        v = c[3]
        if v.dtype.kind in "iub":
            bits, conv = v.astype(np.int64, copy=False), float_rank
        else:
            bits, conv = np.ascontiguousarray(v, dtype=np.float64).view(np.int64), keep_float
        q, s = (c[i].astype(np.int64, copy=False) for i in (0, 1))
        cols.append((q, rank_of[tid], s, bits, conv))
        del c, v, bits, q, s
    cnt, st, bits = group_by_query(cols, len(ids))
    present = np.flatnonzero(cnt)
    bounds = np.zeros(present.shape[0] + 1, dtype=np.int64)
    np.cumsum(cnt[present], out=bounds[1:])
    if st.shape[0] > 1:
        inc = st[1:] > st[:-1]
        inc[bounds[1:-1] - 1] = True  # block boundaries
        if not bool(inc.all()):  # a query's answers out of window order: sort in full
            code = np.repeat(np.arange(present.shape[0]), cnt[present])
            o = np.lexsort((st, code))
            st, bits = st[o], bits[o]
    return AnswerBlocks.from_columns(
        [ids[i] for i in present.tolist()],
        range_of[present],
        bounds,
        st,
        bits,
        ~float_rank[present],
    )


def part_table(
    parts: list[tuple[str, tuple]],
    ranks: tuple[list[str], dict[str, np.ndarray], np.ndarray],
    value_type: str,
    columns=fresh_columns,
) -> pa.Table:
    """The answer columns ``parts`` (as for ``answer_blocks``; consumed) as the table of a
    Parquet part: sorted by ``(query_id, window_start)``, ``query_id`` as dictionary codes into
    every query id of the node (``ranks``: ``query_ranks``), ``value`` of the run's
    ``value_type`` (``"int64"``: a float answer is refused; ``"float64"``: ints converted, one
    beyond 2^53 refused; both ``ValueError``).  What the actor route writes: the rows and
    schema of ``answer_blocks(...).dictionary_table(value_type)``, in one pass over the
    answers (``executors.answer_order.answer_columns``) instead of grouping them into blocks
    and laying the blocks out again.  ``columns``: where the columns are built
    (``answer_columns``); with a node's kept memory (``AnswerBuffers.columns``) the table is
    valid only until that memory's next use."""
    if value_type not in ("int64", "float64"):
        raise ValueError(f"value_type must be 'int64' or 'float64', got {value_type!r}")
    as_float = value_type == "float64"
    if not parts:
        return empty_answers(not as_float)
    ids, rank_of, range_of = ranks
    cols = []
    parts.reverse()
    while parts:  # consumed: each batch's arrays are let go once copied (answer_columns)
        tid, c = parts.pop()
        cols.append((c[0].astype(np.int64, copy=False), rank_of[tid], c[1], c[3]))
        del c
    start, end, value, code = answer_columns(cols, range_of, as_float, columns)
    return answer_table(
        pa.DictionaryArray.from_arrays(pa.array(code, pa.int32()), pa.array(ids, pa.string())),
        start,
        end,
        pa.array(value, pa.float64() if as_float else pa.int64()),
    )


def late_table(
    node_id: str, trees: dict, tree_stream: dict[str, str], since: dict[str, int] | None
) -> pa.Table:
    """Late tuples per tree (cumulative): node_id, tree_id, stream, ts_ms, value; ``since``
    (tree id -> count) skips each tree's first ``count`` late tuples."""
    rows = []
    for tid in sorted(trees):
        lt = trees[tid].late
        k = int((since or {}).get(tid, 0))
        if lt.count > k:
            ts, vals = lt.ts[k:], lt.values[k:]
            n = ts.shape[0]
            rows.append(
                pa.table(
                    {
                        "node_id": pa.array([node_id] * n, pa.string()),
                        "tree_id": pa.array([tid] * n, pa.string()),
                        "stream": pa.array([tree_stream[tid]] * n, pa.string()),
                        "ts_ms": pa.array(ts, pa.int64()),
                        "value": pa.array(vals.astype(np.float64), pa.float64()),
                    },
                    schema=LATE_SCHEMA,
                )
            )
    return pa.concat_tables(rows) if rows else empty_late()


class PendingAnswers:
    """A node's answer columns produced since the last drain, kept until the driver takes
    them (a checkpoint or ``finish``): returning them per call would ship small tables on the
    hot path."""

    def __init__(self) -> None:
        self.parts: list[tuple[str, tuple]] = []  # (tree id, (qidx, start, end, value))
        self.ranks = None  # query_ranks of the hosted trees (cached until they change)
        self.buffers = AnswerBuffers()  # where the parts are built, kept across rounds

    def keep(self, tid: str, cols) -> int:
        """Keep a tree's answer columns; returns their number."""
        if cols is None or cols[0].shape[0] == 0:
            return 0
        self.parts.append((tid, (cols[0], cols[1], None, cols[3])))  # ends: start + range
        return int(cols[0].shape[0])

    def trees_changed(self) -> None:
        """The hosted trees or their queries changed: the query ranks are stale."""
        self.ranks = None

    def take_blocks(self, trees: dict, value_type: str | None = None) -> AnswerBlocks:
        """Hand over (and forget) the kept answers as ``AnswerBlocks``
        (``cluster.answers.blocks``; ``value_type``: see ``answer_blocks``)."""
        parts, self.parts = self.parts, []
        if not parts:
            return AnswerBlocks.empty()
        if self.ranks is None:
            self.ranks = query_ranks(trees)
        return answer_blocks(parts, trees, self.ranks, value_type)

    def take_table(self, trees: dict, value_type: str, columns=fresh_columns) -> pa.Table:
        """Hand over (and forget) the kept answers as the table of a Parquet part
        (``part_table``: what the actor route writes; ``columns``: where it is built)."""
        parts, self.parts = self.parts, []
        if self.ranks is None and parts:
            self.ranks = query_ranks(trees)
        return part_table(parts, self.ranks, value_type, columns)

    def write_part(
        self, trees: dict, root: str, node_id: str, part: str, value_type: str
    ) -> WrittenPart:
        """Hand over (and forget) the kept answers as the Parquet part ``part`` of
        ``node_id`` under ``root`` (``cluster.answers.sink.write_part``): ``take_table``'s
        table, built in the memory this node keeps across rounds (``AnswerBuffers``), so the
        table is written and let go here, never handed out."""
        table = self.take_table(trees, value_type, self.buffers.columns)
        written = write_part(root, node_id, part, table)
        del table  # its columns are the kept memory: the next round overwrites them
        return written

    def clear(self) -> None:
        self.parts = []

    def count(self) -> int:
        return int(sum(c[0].shape[0] for _, c in self.parts))

    def held_by(self, tree_ids: set[str]) -> list[str]:
        """The trees of ``tree_ids`` with answers not yet handed over."""
        return sorted({tid for tid, _ in self.parts if tid in tree_ids})
