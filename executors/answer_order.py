"""Grouping a node's answers by query: a stable counting sort of the trees' answer columns.

Why its own module: the trees emit each call's answers in slice order, queries interleaved;
whoever hands them on (a node's per-query blocks, ``cluster.node.answers``) needs them grouped
by query with each query's answers still in production (= window) order.  A comparison sort
of millions of small ints plus a gather of every column costs more than the trees' own work
at 10,000 queries; counting the answers per query and scattering each column once, in
order, is two linear passes with no index array.  Compiled with numba, so it lives with the
other kernels (``weaveplace warmup`` loads it).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _count(qidx, rank, counts):
    """``counts[rank[q]] += 1`` for every answer's tree-local query index ``q``."""
    for i in range(qidx.shape[0]):
        counts[rank[qidx[i]]] += 1


@njit(cache=True)
def _scatter(qidx, rank, starts, bits, to_float, pos, out_starts, out_bits, out_float):
    """Answer ``i`` to the next free row of its query's group (``pos``: next row per code);
    ``to_float[c]``: code ``c``'s int values stored as float64 (``out_float`` views
    ``out_bits``).  Returns the first answer whose int value a float64 cannot hold exactly
    (beyond 2^53), or -1."""
    lim = np.int64(1) << 53
    for i in range(qidx.shape[0]):
        c = rank[qidx[i]]
        p = pos[c]
        out_starts[p] = starts[i]
        if to_float[c]:
            v = bits[i]
            if v > lim or v < -lim:
                return i
            out_float[p] = np.float64(v)
        else:
            out_bits[p] = bits[i]
        pos[c] = p + 1
    return -1


def group_by_query(
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]], n_codes: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``parts``: per batch of answers ``(qidx, rank, starts, bits, to_float)`` (tree-local
    query indexes, the tree's query index -> code map, window starts, values as int64 words,
    per code whether this batch's values of it are ints to store as float64: a bool array of
    ``n_codes``, all False for a batch of float values), in production order.

    Why per code: one batch of a tree holds several queries' values in one array, so a
    query may come as ints in one batch and as floats in another (a churn tree whose newer
    generation answers floats); only the queries whose group is float are converted.  Returns ``(counts per
    code, starts, bits)`` with the rows grouped by code in code order, and within a code in
    production order (a stable sort by code).  An int beyond 2^53 to be stored as a float:
    ``ValueError`` (not exact).  Consumes ``parts`` (emptied as it goes).

    Why let go of each batch as soon as it is copied: on the project's VM, memory a process
    has just freed is reused ~20x faster than fresh memory (first touch), and the answer
    table and Parquet buffers built next are as large as the batches."""
    counts = np.zeros(n_codes, dtype=np.int64)
    for q, r, _, _, _ in parts:
        _count(q, r, counts)
    pos = np.zeros(n_codes, dtype=np.int64)
    np.cumsum(counts[:-1], out=pos[1:])
    n = int(counts.sum())
    out_starts = np.empty(n, dtype=np.int64)
    out_bits = np.empty(n, dtype=np.int64)
    out_float = out_bits.view(np.float64)
    parts.reverse()
    while parts:  # each batch let go once copied: its memory is what the next arrays reuse
        q, r, s, b, f = parts.pop()
        bad = _scatter(q, r, s, b, f, pos, out_starts, out_bits, out_float)
        if bad >= 0:
            raise ValueError(f"int answer {int(b[bad])} is beyond 2^53: not exact as a float64")
    return counts, out_starts, out_bits


@njit(cache=True, nogil=True)
def _scatter_values(qidx, rank, starts, bits, conv, pos, out_start, out_bits, out_float):
    """Answer ``i`` to the next free row of its code's group (``pos``): window start and value
    word (``conv``: an int stored as float64 through ``out_float``, a view of ``out_bits``).
    Returns the first answer whose int value a float64 cannot hold exactly (beyond 2^53), or
    -1."""
    lim = np.int64(1) << 53
    for i in range(qidx.shape[0]):
        c = rank[qidx[i]]
        p = pos[c]
        out_start[p] = starts[i]
        v = bits[i]
        if conv:
            if v > lim or v < -lim:
                return i
            out_float[p] = np.float64(v)
        else:
            out_bits[p] = v
        pos[c] = p + 1
    return -1


@njit(cache=True, nogil=True)
def _ends_codes_in_order(start, counts, ranges, out_end, out_code):
    """Rows grouped by code (code ``c``: the next ``counts[c]`` rows): each row's window end
    (start + ``ranges[c]``) and code, in one sequential pass; returns whether every code's
    window starts increase."""
    ok = True
    i = 0
    for c in range(counts.shape[0]):
        r = ranges[c]
        for k in range(counts[c]):
            x = start[i]
            if k and x <= start[i - 1]:
                ok = False
            out_end[i] = x + r
            out_code[i] = c
            i += 1
    return ok


def fresh_columns(n: int, value_dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``answer_columns``' default arrays: new ``(start, end, value, code)`` for ``n`` rows."""
    return (
        np.empty(n, dtype=np.int64),
        np.empty(n, dtype=np.int64),
        np.empty(n, dtype=value_dtype),
        np.empty(n, dtype=np.int32),
    )


def answer_columns(
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
    ranges: np.ndarray,
    as_float: bool,
    columns=fresh_columns,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A node's answers as the four columns of its Parquet part, grouped by code in code
    order and each code's rows in window order: ``(window_start, window_end, value, code)``.
    ``parts``: per batch ``(qidx, rank, starts, values)`` (tree-local query indexes, the
    tree's query index -> code map, window starts, values), in production order; consumed.
    ``ranges[c]``: code ``c``'s window length; ``as_float``: the run's values are float64
    (int values converted, beyond 2^53 refused: ``ValueError``), else int64 (a float batch:
    ``ValueError``).  ``columns(n, value_dtype)``: the four arrays to fill (``fresh_columns``,
    or memory a node keeps across rounds: ``cluster.node.answer_buffers``).

    Why not ``group_by_query`` and then ``AnswerBlocks.dictionary_table``: the part's
    columns are the only arrays made (no grouped copy of the values to lay out again, no
    block bounds, no temporary arrays for the order check), and only two of them are
    scattered (start, value: a random write per answer into one of thousands of groups); the
    window ends, codes and the order check are one sequential pass.  A query's answers come
    in window order from its tree, so the stable scatter leaves them in order; where they do
    not (a query handed from one tree to another), the columns are sorted by (code, start)."""
    n_codes = ranges.shape[0]
    counts = np.zeros(n_codes, dtype=np.int64)
    for q, r, _, _ in parts:
        _count(q, r, counts)
    pos = np.zeros(n_codes, dtype=np.int64)
    np.cumsum(counts[:-1], out=pos[1:])
    n = int(counts.sum())
    start, end, value, code = columns(n, np.float64 if as_float else np.int64)
    vbits = value.view(np.int64)
    parts.reverse()
    while parts:  # each batch let go once copied: its memory is what the next arrays reuse
        q, r, s, v = parts.pop()
        is_int = v.dtype.kind in "iub"
        if not is_int and not as_float:
            raise ValueError("float answers in a run whose answers were declared int64")
        if is_int:
            b = v.astype(np.int64, copy=False)
        else:
            b = np.ascontiguousarray(v, dtype=np.float64).view(np.int64)
        s = s.astype(np.int64, copy=False)
        conv = bool(is_int and as_float)
        bad = _scatter_values(q, r, s, b, conv, pos, start, vbits, value.view(np.float64))
        if bad >= 0:
            raise ValueError(f"int answer {int(b[bad])} is beyond 2^53: not exact as a float64")
    if not _ends_codes_in_order(start, counts, ranges, end, code):
        # a query's answers out of window order (handed from one tree to another): sort
        o = np.lexsort((start, code))
        start, end, value, code = start[o], end[o], value[o], code[o]
    return start, end, value, code


@njit(cache=True)
def _ends_codes(starts, bounds, ranges, out_end, out_codes):
    for j in range(ranges.shape[0]):
        r = ranges[j]
        for i in range(bounds[j], bounds[j + 1]):
            out_end[i] = starts[i] + r
            out_codes[i] = j


def ends_and_codes(starts: np.ndarray, bounds: np.ndarray, ranges: np.ndarray):
    """Per row of blocks (block ``j``: rows ``bounds[j]:bounds[j + 1]``, window length
    ``ranges[j]``): its window end and its block number (int32), in one pass."""
    end = np.empty(starts.shape[0], dtype=np.int64)
    codes = np.empty(starts.shape[0], dtype=np.int32)
    _ends_codes(starts, bounds, ranges, end, codes)
    return end, codes


@njit(cache=True)
def _as_float(bits, bounds, int_blocks, out, out_bits):
    """``out``: the values as float64, int blocks converted; returns the row of the first int
    beyond 2^53 in magnitude (not exact as a float), or -1."""
    lim = np.int64(1) << 53
    for j in range(int_blocks.shape[0]):
        a = bounds[j]
        z = bounds[j + 1]
        if int_blocks[j]:
            for i in range(a, z):
                v = bits[i]
                if v > lim or v < -lim:
                    return i
                out[i] = np.float64(v)
        else:
            for i in range(a, z):
                out_bits[i] = bits[i]
    return -1


def values_as_float(bits: np.ndarray, bounds: np.ndarray, int_blocks: np.ndarray):
    """Blocks of value words (int64 values where ``int_blocks``, float64 bits elsewhere; block
    ``j`` is rows ``bounds[j]:bounds[j + 1]``) as one float64 column, and the row of the first
    int that a float64 cannot hold exactly (beyond 2^53), or -1 (then the column is partial)."""
    out = np.empty(bits.shape[0], dtype=np.float64)
    bad = _as_float(bits, bounds, int_blocks, out, out.view(np.int64))
    return out, int(bad)


@njit(cache=True, nogil=True)
def _fill_blocks(
    src_start, src_bits, block_int, to_float, lo, cnt, dst, ranges, names, name_off, data_pos,
    start, end, value_bits, value_float, offsets, data,
):  # fmt: skip
    """Copy blocks ``j`` (rows ``lo[j]:lo[j] + cnt[j]`` of the source columns) to output rows
    ``dst[j]:dst[j] + cnt[j]``: window start, end (start + ``ranges[j]``), value (its 8-byte
    word; with ``to_float`` an int block's values as float64, through ``value_float``, a view
    of ``value_bits``), and the block's query id (bytes ``names[name_off[j]:name_off[j +
    1]]``) once per row into a string column's ``data`` from byte ``data_pos[j]``
    (``offsets``: Arrow's, row ``i`` ends at ``offsets[i + 1]``).  Returns the source row of
    the first int beyond 2^53 to be stored as a float (not exact), or -1."""
    lim = np.int64(1) << 53
    for j in range(lo.shape[0]):
        a = dst[j]
        s = lo[j]
        r = ranges[j]
        k0 = name_off[j]
        k = name_off[j + 1] - k0
        q = data_pos[j]
        conv = to_float and block_int[j]
        for i in range(cnt[j]):
            x = src_start[s + i]
            start[a + i] = x
            end[a + i] = x + r
            v = src_bits[s + i]
            if conv:
                if v > lim or v < -lim:
                    return s + i
                value_float[a + i] = np.float64(v)
            else:
                value_bits[a + i] = v
            for b in range(k):
                data[q + b] = names[k0 + b]
            q += k
            offsets[a + i + 1] = q
    return -1


def fill_blocks(src, blocks, out) -> int:
    """Lay blocks of one source out as answer table columns (``_fill_blocks``): ``src`` =
    (window starts, value words, per block whether it holds ints, whether the table's values
    are float64), ``blocks`` = (source row, rows, output row, range, name offsets into the name
    bytes, the name bytes, first data byte) per block, ``out`` = (start, end, value, offsets,
    data) arrays to fill.  Returns the source row of an int a float64 cannot hold, or -1."""
    lo, cnt, dst, ranges, name_off, names, data_pos = blocks
    start, end, value, offsets, data = out
    bits = value.view(np.int64)
    return int(
        _fill_blocks(
            src[0], src[1], src[2], bool(src[3]), lo, cnt, dst, ranges, names, name_off,
            data_pos, start, end, bits, bits.view(np.float64), offsets, data,
        )
    )  # fmt: skip


def warm() -> None:
    """Load (or compile) the kernels on a few rows, outside any timed work."""
    z = np.zeros(2, dtype=np.int64)
    for f in (False, True):
        conv = np.full(1, f, dtype=bool)
        group_by_query([(z, np.zeros(1, dtype=np.uint16), z, z, conv)], 1)
        group_by_query([(z, np.zeros(1, dtype=np.uint32), z, z, conv)], 1)
        for dt in (np.uint16, np.uint32):
            answer_columns([(z, np.zeros(1, dtype=dt), z, z)], z[:1], f)
            if f:
                answer_columns([(z, np.zeros(1, dtype=dt), z, z.astype(np.float64))], z[:1], f)
    ends_and_codes(z, np.array([0, 2]), z[:1])
    values_as_float(z, np.array([0, 1, 2]), np.array([True, False]))
    for as_float in (False, True):
        one = np.ones(1, dtype=np.int64)
        cols = (np.empty(1, np.int64), np.empty(1, np.int64), np.empty(1, np.float64))
        fill_blocks(
            (z, z, np.ones(1, dtype=bool), as_float),
            (z[:1], one, z[:1], z[:1], np.array([0, 1]), one.view(np.uint8)[:1], z[:1]),
            (*cols, np.zeros(2, np.int32), np.empty(1, np.uint8)),
        )
