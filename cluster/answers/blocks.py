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

from cluster.answers.memory import populated


def required_schema(fields: Iterable[tuple[str, pa.DataType]]) -> pa.Schema:
    """A schema whose every field is required (``nullable=False``).  Why: no answer or late
    tuple is ever null, and Parquet then stores no definition levels: writing a node's part
    at 10,000 queries took ~0.15 s of CPU instead of ~0.21 s with nullable fields."""
    return pa.schema([pa.field(name, t, nullable=False) for name, t in fields])


ANSWER_SCHEMA_INT = required_schema(
    [
        ("query_id", pa.string()),
        ("window_start", pa.int64()),
        ("window_end", pa.int64()),
        ("value", pa.int64()),
    ]
)
ANSWER_SCHEMA_FLOAT = ANSWER_SCHEMA_INT.set(3, pa.field("value", pa.float64(), nullable=False))
LATE_SCHEMA = required_schema(
    [
        ("node_id", pa.string()),
        ("tree_id", pa.string()),
        ("stream", pa.string()),
        ("ts_ms", pa.int64()),
        ("value", pa.float64()),
    ]
)


def answer_table(query_id: pa.Array, start, end, value: pa.Array) -> pa.Table:
    """The answer table of these columns (``query_id`` as strings or dictionary codes; window
    starts and ends as int64), every field required: the one way every answer table is made,
    so the driver's merged table, the actors' parts and what readers get back have one
    schema."""
    cols = [query_id, pa.array(start, pa.int64()), pa.array(end, pa.int64()), value]
    return pa.Table.from_arrays(
        cols, schema=required_schema(zip(ANSWER_SCHEMA_INT.names, (c.type for c in cols)))
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
    """Answers as one block per query, stored as columns: ``qids[i]`` (query ids, increasing),
    the query's range ``ranges[i]``, block ``i`` holding rows ``bounds[i]:bounds[i + 1]`` of
    ``start_col`` (window starts, increasing within a block) and ``value_bits`` (the values'
    8 bytes: int64 where ``int_blocks[i]``, else float64 bits); ``window_end = window_start +
    range``.  ``table()`` gives the answer table sorted by ``(query_id, window_start)``.  What
    a node hands to the driver.

    Why columns: a node at 10,000 queries hands over millions of answers; as five arrays they
    cross Ray's object store as a few large buffers (zero-copy on the reader's side) instead of
    two small arrays per query, and the actor route writes them as Parquet without a string per
    answer (``dictionary_table``).  Why value bits: a node's queries may mix int and float
    aggregates, and one column of 8-byte words keeps both exact until the int64 rule decides
    the table's type.  ``AnswerBlocks(qids, ranges, starts, values)`` builds the same from one
    array per block (``starts``, ``values`` give those per-block views back)."""

    __slots__ = ("qids", "ranges", "bounds", "start_col", "value_bits", "int_blocks")

    def __init__(self, qids, ranges, starts, values):
        starts = [np.asarray(x, dtype=np.int64) for x in starts]
        values = [np.asarray(v) for v in values]
        counts = [x.shape[0] for x in starts]
        self._set(
            list(qids),
            np.asarray(ranges, dtype=np.int64).reshape(-1),
            np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64),
            np.concatenate(starts) if starts else np.zeros(0, np.int64),
            np.concatenate([_bits(v) for v in values]) if values else np.zeros(0, np.int64),
            np.array([v.dtype.kind in "iub" for v in values], dtype=bool),
        )

    def _set(self, qids, ranges, bounds, start_col, value_bits, int_blocks) -> None:
        self.qids, self.ranges, self.bounds = qids, ranges, bounds
        self.start_col, self.value_bits, self.int_blocks = start_col, value_bits, int_blocks

    @classmethod
    def from_columns(
        cls,
        qids: list[str],
        ranges: np.ndarray,
        bounds: np.ndarray,
        start_col: np.ndarray,
        value_bits: np.ndarray,
        int_blocks: np.ndarray,
    ) -> AnswerBlocks:
        """Blocks from their columns (the class docstring), taken as they are."""
        out = cls.__new__(cls)
        out._set(qids, ranges, bounds, start_col, value_bits, int_blocks)
        return out

    @classmethod
    def empty(cls) -> AnswerBlocks:
        return cls([], [], [], [])

    def __reduce__(self):
        return (
            AnswerBlocks.from_columns,
            (
                self.qids,
                self.ranges,
                self.bounds,
                self.start_col,
                self.value_bits,
                self.int_blocks,
            ),
        )

    @property
    def num_rows(self) -> int:
        return int(self.start_col.shape[0])

    @property
    def nbytes(self) -> int:
        """What travels per answer: its window start and value (8 bytes each)."""
        return int(self.start_col.nbytes + self.value_bits.nbytes)

    @property
    def counts(self) -> np.ndarray:
        return np.diff(self.bounds)

    @property
    def starts(self) -> list[np.ndarray]:
        """Block ``i``'s window starts (views; a new list per call: for tests and small
        uses, the columns are what code at scale reads)."""
        b = self.bounds.tolist()
        return [self.start_col[b[i] : b[i + 1]] for i in range(len(self.qids))]

    @property
    def values(self) -> list[np.ndarray]:
        """Block ``i``'s values (views: int64 or float64)."""
        b = self.bounds.tolist()
        col = self.value_bits
        return [
            col[b[i] : b[i + 1]] if ok else col[b[i] : b[i + 1]].view(np.float64)
            for i, ok in enumerate(self.int_blocks.tolist())
        ]

    @property
    def all_int(self) -> bool:
        return bool(self.int_blocks.all())

    def value_column(self, value_type: str | None = None) -> np.ndarray:
        """The values as one int64 or float64 column by the int64 rule (``value_type`` forces
        one of the two; float blocks in an int64 column: refused; int values beyond 2^53 in a
        float64 column: refused, as Arrow's checked cast does)."""
        if value_type not in (None, "int64", "float64"):
            raise ValueError(f"value_type must be 'int64' or 'float64', got {value_type!r}")
        all_int = self.all_int
        if value_type == "int64" and not all_int:
            raise ValueError("float answers in a run whose answers were declared int64")
        if all_int and value_type != "float64":
            return self.value_bits
        if not self.int_blocks.any():
            return self.value_bits.view(np.float64)
        from executors.answer_order import values_as_float  # numba: imported when needed

        out, bad = values_as_float(self.value_bits, self.bounds, self.int_blocks)
        if bad >= 0:
            pa.array(self.value_bits[bad : bad + 1]).cast(pa.float64())  # raises ArrowInvalid
        return out

    def table(self, value_type: str | None = None) -> pa.Table:
        """The answer table; ``value_type`` (``"int64"``/``"float64"``) fixes the value
        column's type (the actor route: every part of a run has one schema)."""
        return _blocks_table([(self, i) for i in range(len(self.qids))], value_type)

    def dictionary_table(self, value_type: str | None = None) -> pa.Table:
        """``table()`` with ``query_id`` as dictionary codes into the block's query ids (int32
        indices, one per row): the same rows without a string per answer, what the actor
        route writes (``cluster.answers.parts.write_answer_file``: Parquet stores it as a
        dictionary-encoded string column, read back as ``string``).  Blocks of one query id
        must be adjacent and in window order (a node's blocks are: one block per query)."""
        n = len(self.qids)
        if n == 0:
            return empty_answers(value_type != "float64")
        from executors.answer_order import ends_and_codes  # numba: imported when needed

        end, codes = ends_and_codes(self.start_col, self.bounds, self.ranges)
        vals = self.value_column(value_type)
        vt = pa.int64() if vals.dtype == np.int64 else pa.float64()
        return answer_table(
            pa.DictionaryArray.from_arrays(
                pa.array(codes, pa.int32()), pa.array(self.qids, pa.string())
            ),
            self.start_col,
            end,
            pa.array(vals, vt),
        )


def _bits(v: np.ndarray) -> np.ndarray:
    """A value block as int64 words: int values as they are, floats by their bits."""
    if v.dtype.kind in "iub":
        return v.astype(np.int64, copy=False)
    return np.ascontiguousarray(v, dtype=np.float64).view(np.int64)


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
    ``np.repeat`` with counts as much) are allocated once and filled block by block by a
    compiled loop (``executors.answer_order.fill_blocks``), block ranges in parallel threads."""
    if value_type not in (None, "int64", "float64"):
        raise ValueError(f"value_type must be 'int64' or 'float64', got {value_type!r}")
    if not order:
        return empty_answers(value_type != "float64")
    used = {id(p): p for p, _ in order}
    intf = np.array([bool(p.int_blocks[i]) for p, i in order], dtype=bool)
    all_int = bool(intf.all())
    if value_type == "int64" and not all_int:
        raise ValueError("float answers in a run whose answers were declared int64")
    as_int = all_int and value_type != "float64"
    # per part: block bounds as Python ints (values converted while filled, below)
    bnd = {k: p.bounds.tolist() for k, p in used.items()}
    lo = [bnd[id(p)][i] for p, i in order]
    counts = np.array([bnd[id(p)][i + 1] - bnd[id(p)][i] for p, i in order], dtype=np.int64)
    ranges = [int(p.ranges[i]) for p, i in order]
    raw = [p.qids[i].encode() for p, i in order]
    bounds = np.concatenate([[0], np.cumsum(counts)])
    n = int(bounds[-1])
    lens = np.array([len(x) for x in raw], dtype=np.int64)
    pos = np.concatenate([[0], np.cumsum(lens * counts)])
    vt = pa.int64() if as_int else pa.float64()
    vdt = np.int64 if as_int else np.float64
    if int(pos[-1]) >= 1 << 31:  # beyond 32-bit string offsets: not expected
        col = {k: (p.value_bits if as_int else p.value_column("float64")) for k, p in used.items()}
        src = [(p.start_col, col[id(p)]) for p, _ in order]
        c = counts.tolist()
        st = [s[a : a + k] for (s, _), a, k in zip(src, lo, c)]
        return answer_table(
            pa.array([x.decode() for x in raw]).take(
                pa.array(np.repeat(np.arange(len(raw)), counts))
            ),
            np.concatenate(st),
            np.concatenate([s + r for s, r in zip(st, ranges)]),
            pa.array(np.concatenate([v[a : a + k] for (_, v), a, k in zip(src, lo, c)]), vt),
        )
    from executors.answer_order import fill_blocks  # numba: imported when needed

    # the merged columns in memory populated at once (``cluster.answers.memory``: no huge-page
    # compaction on first touch)
    start = populated(n, np.int64)
    end = populated(n, np.int64)
    value = populated(n, vdt)
    offsets = populated(n + 1, np.int32)
    offsets[0] = 0
    data = populated(int(pos[-1]), np.uint8)
    # per source part, its blocks' rows and where they go, filled by a compiled loop (without
    # the GIL: block ranges of about equal rows in parallel threads)
    index = {k: i for i, k in enumerate(used)}
    which = np.array([index[id(p)] for p, _ in order])
    lo_a, rng_a = np.array(lo, np.int64), np.array(ranges, np.int64)
    threads = MERGE_THREADS if n >= MERGE_THREADED_ROWS else 1
    jobs = []
    for k, p in enumerate(used.values()):
        sel = np.flatnonzero(which == k)
        names = b"".join(raw[j] for j in sel.tolist())
        name_off = np.zeros(sel.shape[0] + 1, dtype=np.int64)
        np.cumsum(lens[sel], out=name_off[1:])
        name_buf = np.frombuffer(names, np.uint8) if names else np.zeros(1, np.uint8)
        rows = np.concatenate([[0], np.cumsum(counts[sel])])
        cuts = np.searchsorted(rows, np.linspace(0, rows[-1], threads + 1)).tolist()
        cuts[0], cuts[-1] = 0, sel.shape[0]
        for x, y in zip(cuts, cuts[1:]):
            if y > x:
                b = sel[x:y]
                jobs.append(
                    (
                        (p.start_col, p.value_bits, intf[b], not as_int),
                        (lo_a[b], counts[b], bounds[b], rng_a[b], name_off[x : y + 1], name_buf),
                        pos[b],
                    )
                )
    out = (start, end, value, offsets, data)

    def fill(job) -> None:
        src, (a, c, d, r, no, nb), dp = job
        bad = fill_blocks(src, (a, c, d, r, no, nb, dp), out)
        if bad >= 0:  # an int a float64 cannot hold: Arrow's checked cast names it
            pa.array(src[1][bad : bad + 1]).cast(pa.float64())

    if len(jobs) > 1 and threads > 1:
        with ThreadPoolExecutor(min(len(jobs), threads)) as ex:
            list(ex.map(fill, jobs))
    else:
        for job in jobs:
            fill(job)
    qid = pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    return answer_table(qid, start, end, pa.array(value, vt))


def merge_blocks(parts: list[AnswerBlocks]) -> pa.Table:
    """The answers of several ``AnswerBlocks`` (nodes, checkpoints) as one table sorted by
    ``(query_id, window_start)``: the blocks are ordered by (query id, first window start),
    a sort of a few thousand blocks instead of millions of rows.  Blocks of one query from
    different parts (a tree's answers before and after a checkpoint) must not overlap in
    time; if they do (not expected), the rows are sorted in full."""
    keyed = []
    for p in parts:
        b = p.bounds
        first = p.start_col[b[:-1][np.diff(b) > 0]].tolist()
        last = p.start_col[b[1:][np.diff(b) > 0] - 1].tolist()
        nonempty = np.flatnonzero(np.diff(b) > 0).tolist()
        keyed += [(p.qids[i], f, z, p, i) for i, f, z in zip(nonempty, first, last)]
    keyed.sort(key=lambda b: (b[0], b[1]))
    order = [(p, i) for _, _, _, p, i in keyed]
    for x, y in zip(keyed, keyed[1:]):
        if x[0] == y[0] and x[2] >= y[1]:
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
