"""Answers as blocks (one per query) and their merge into one sorted table: driver side.

Why its own module: a node actor only *produces* ``AnswerBlocks``; turning blocks of many
nodes and checkpoints into one ``(query_id, window_start)``-sorted table (``merge_blocks``)
is the driver route's work, and the actor route (``cluster.answers.sink``) writes the same blocks
as Parquet parts with the same schema.  The one int64 rule of every answer table lives here
(``answer_schema_for``): ``value`` is int64 when every answer is integer, else float64 (then int
answers beyond 2^53 are refused, as Arrow's checked cast does).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa

ANSWER_SCHEMA_INT = pa.schema(
    [
        ("query_id", pa.string()),
        ("window_start", pa.int64()),
        ("window_end", pa.int64()),
        ("value", pa.int64()),
    ]
)
ANSWER_SCHEMA_FLOAT = ANSWER_SCHEMA_INT.set(3, pa.field("value", pa.float64()))
LATE_SCHEMA = pa.schema(
    [
        ("node_id", pa.string()),
        ("tree_id", pa.string()),
        ("stream", pa.string()),
        ("ts_ms", pa.int64()),
        ("value", pa.float64()),
    ]
)


def answer_schema_for(all_int: bool) -> pa.Schema:
    """The int64 rule: ``value`` is int64 iff every answer is integer, else float64."""
    return ANSWER_SCHEMA_INT if all_int else ANSWER_SCHEMA_FLOAT


def trees_answer_int(trees: Iterable[dict], column_is_int: Callable[[str], bool]) -> bool:
    """Whether every query of these tree specs answers integers, given which stream columns
    are integer (int columns: sum, min, max, range, count; avg and stddev give floats)."""
    from executors.aggregates import get_aggregate

    return all(
        get_aggregate(q["aggregate"]).output_is_int(column_is_int(t["stream"]))
        for t in trees
        for q in t["queries"]
    )


def answer_schema(deployment: Any) -> pa.Schema:
    """The answers' schema of a run on DEBS columns, fixed up front so that every part agrees
    (``deployment``: a ``cluster.deployment.deployment.Deployment``); boolean columns give
    float64, as in a batch run."""
    from cluster.debs.format import DEBS_SCHEMA

    trees = [t for n in deployment.nodes.values() for t in n.spec["trees"]]
    return answer_schema_for(
        trees_answer_int(trees, lambda s: pa.types.is_integer(DEBS_SCHEMA.field(s).type))
    )


def empty_answers(int_values: bool = True) -> pa.Table:
    return answer_schema_for(int_values).empty_table()


def empty_late() -> pa.Table:
    return LATE_SCHEMA.empty_table()


class AnswerBlocks:
    """Answers as one block per query: ``qids[i]`` (strictly increasing), the query's range
    ``ranges[i]`` and numpy arrays ``starts[i]`` (window starts, increasing) and ``values[i]``
    (int64 or float64); ``window_end = window_start + range``.  ``table()`` gives the answer
    table sorted by ``(query_id, window_start)``.  What a node hands to the driver."""

    __slots__ = ("qids", "ranges", "starts", "values")

    def __init__(self, qids, ranges, starts, values):
        self.qids, self.ranges, self.starts, self.values = qids, ranges, starts, values

    @classmethod
    def empty(cls) -> AnswerBlocks:
        return cls([], [], [], [])

    @property
    def num_rows(self) -> int:
        return int(sum(x.shape[0] for x in self.starts))

    def table(self, value_type: str | None = None) -> pa.Table:
        """The answer table; ``value_type`` (``"int64"``/``"float64"``) fixes the value
        column's type (the actor route: every part of a run has one schema)."""
        return _blocks_table([(self, i) for i in range(len(self.qids))], value_type)


#: threads filling the merged answer columns (the copies release the GIL; on this machine
#: writing fresh memory, ~0.6 GB/s per thread, bounds a merge of ~13 M answers)
MERGE_THREADS = 4
#: fewer rows than this are filled by one thread
MERGE_THREADED_ROWS = 1 << 20


def _blocks_table(order: list[tuple[AnswerBlocks, int]], value_type: str | None = None) -> pa.Table:
    """The answer table of these blocks, in this order.  value is int64 if every block is,
    else float64 (int values beyond 2^53 refused, as Arrow's checked cast does);
    ``value_type`` forces one of the two (float blocks in an int64 table: refused).

    The columns (query id strings from their buffers: a ``take`` of 13 M rows cost ~0.4 s,
    ``np.repeat`` with counts as much) are allocated once and filled block by block, block
    ranges in parallel threads."""
    if value_type not in (None, "int64", "float64"):
        raise ValueError(f"value_type must be 'int64' or 'float64', got {value_type!r}")
    if not order:
        return empty_answers(value_type != "float64")
    starts = [p.starts[i] for p, i in order]
    values = [p.values[i] for p, i in order]
    ranges = [p.ranges[i] for p, i in order]
    raw = [p.qids[i].encode() for p, i in order]
    counts = np.array([x.shape[0] for x in starts], dtype=np.int64)
    bounds = np.concatenate([[0], np.cumsum(counts)])
    n = int(bounds[-1])
    lens = np.array([len(x) for x in raw], dtype=np.int64)
    pos = np.concatenate([[0], np.cumsum(lens * counts)])
    all_int = all(v.dtype == np.int64 for v in values)
    if value_type == "int64" and not all_int:
        raise ValueError("float answers in a run whose answers were declared int64")
    vt = answer_schema_for(all_int and value_type != "float64").field("value").type
    vdt: type[np.number]
    if pa.types.is_integer(vt):
        vdt = np.int64
    else:
        ints = [v for v in values if v.dtype == np.int64]
        iv = np.concatenate(ints) if ints else np.zeros(0, np.int64)
        if iv.shape[0] and (int(iv.max()) > 1 << 53 or int(iv.min()) < -(1 << 53)):
            pa.array(iv).cast(pa.float64())  # raises ArrowInvalid, naming the value
        vdt = np.float64
    if int(pos[-1]) >= 1 << 31:  # beyond 32-bit string offsets: not expected
        big = pa.table(
            {
                "query_id": pa.array([x.decode() for x in raw]).take(
                    pa.array(np.repeat(np.arange(len(raw)), counts))
                ),
                "window_start": pa.array(np.concatenate(starts)),
                "window_end": pa.array(np.concatenate([s + r for s, r in zip(starts, ranges)])),
                "value": pa.array(np.concatenate(values).astype(vdt)),
            }
        )
        return big
    start = np.empty(n, dtype=np.int64)
    end = np.empty(n, dtype=np.int64)
    value = np.empty(n, dtype=vdt)
    offsets = np.empty(n + 1, dtype=np.int32)
    offsets[0] = 0
    data = np.empty(int(pos[-1]), dtype=np.uint8)
    bl, bp = bounds.tolist(), pos.tolist()

    def fill(lo: int, hi: int) -> None:
        for j in range(lo, hi):
            a, z, c, k, q = bl[j], bl[j + 1], bl[j + 1] - bl[j], len(raw[j]), bp[j]
            start[a:z] = starts[j]
            np.add(starts[j], ranges[j], out=end[a:z])
            value[a:z] = values[j]
            if k:
                data[q : q + k * c].reshape(c, k)[:] = np.frombuffer(raw[j], np.uint8)
                offsets[a + 1 : z + 1] = np.arange(q + k, q + k * c + 1, k)
            else:
                offsets[a + 1 : z + 1] = q

    # block ranges of about equal rows
    cuts = np.searchsorted(bounds, np.linspace(0, n, MERGE_THREADS + 1)).tolist()
    cuts[0], cuts[-1] = 0, len(order)
    jobs = [(x, y) for x, y in zip(cuts, cuts[1:]) if y > x]
    if len(jobs) > 1 and n >= MERGE_THREADED_ROWS:
        with ThreadPoolExecutor(len(jobs)) as ex:
            list(ex.map(lambda j: fill(*j), jobs))
    else:
        fill(0, len(order))
    qid = pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    return pa.table(
        {
            "query_id": qid,
            "window_start": pa.array(start, pa.int64()),
            "window_end": pa.array(end, pa.int64()),
            "value": pa.array(value, vt),
        }
    )


def merge_blocks(parts: list[AnswerBlocks]) -> pa.Table:
    """The answers of several ``AnswerBlocks`` (nodes, checkpoints) as one table sorted by
    ``(query_id, window_start)``: the blocks are ordered by (query id, first window start),
    a sort of a few thousand blocks instead of millions of rows.  Blocks of one query from
    different parts (a tree's answers before and after a checkpoint) must not overlap in
    time; if they do (not expected), the rows are sorted in full."""
    order = [(p, i) for p in parts for i in range(len(p.qids)) if p.starts[i].shape[0]]
    order.sort(key=lambda b: (b[0].qids[b[1]], int(b[0].starts[b[1]][0])))
    for (p, i), (q, j) in zip(order, order[1:]):
        if p.qids[i] == q.qids[j] and int(p.starts[i][-1]) >= int(q.starts[j][0]):
            return _blocks_table(order).sort_by(
                [("query_id", "ascending"), ("window_start", "ascending")]
            )
    return _blocks_table(order)


def concat_answers(parts: list[pa.Table]) -> pa.Table:
    """Concatenate answer tables; value is int64 if every part is int64, else float64
    (int64 answers beyond 2^53 then lose precision: keep such trees in int-only runs)."""
    parts = [p for p in parts if p is not None]
    if not parts:
        return empty_answers(True)
    schema = answer_schema_for(
        all(pa.types.is_integer(p.schema.field("value").type) for p in parts)
    )
    return pa.concat_tables([p.select(schema.names).cast(schema) for p in parts])
