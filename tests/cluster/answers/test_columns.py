"""The columnar answer path against the simple version, on small random answers: a node's
columns grouped into ``AnswerBlocks`` (``cluster.node.answers.answer_blocks``), blocks of
several parts merged (``merge_blocks``), written as dictionary-coded Parquet parts
(``AnswerBlocks.dictionary_table`` + ``cluster.answers.sink.write_part``) and pickled (what Ray
does) all give the rows, types and order of a plain row list sorted by ``(query_id,
window_start)`` under the int64 rule.  No Ray needed."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.answers.blocks import ANSWER_SCHEMA_INT, AnswerBlocks, answer_schema_for, merge_blocks
from cluster.answers.sink import AnswerCommits, read_answers, write_part
from cluster.node.answer_buffers import AnswerBuffers
from cluster.node.answers import PendingAnswers, answer_blocks, part_table, query_ranks


def plain_table(rows: list[tuple[str, int, int, float | int, bool]], value_type=None) -> pa.Table:
    """The simple version: (query id, start, range, value, is int) rows, sorted, int64 rule."""
    all_int = all(r[4] for r in rows)
    schema = answer_schema_for(all_int and value_type != "float64")
    rows = sorted(rows, key=lambda r: (r[0], r[1]))
    return pa.table(
        {
            "query_id": [r[0] for r in rows],
            "window_start": [r[1] for r in rows],
            "window_end": [r[1] + r[2] for r in rows],
            "value": [r[3] if all_int and value_type != "float64" else float(r[3]) for r in rows],
        },
        schema=schema,
    )


@st.composite
def node_answers(draw):
    """Trees of a node (queries with id, range, int or float answers) and their answer columns
    in production order: per call, each query's next windows, queries interleaved."""
    nq = draw(st.integers(1, 6))
    ids = draw(st.lists(st.sampled_from([f"q{i}" for i in range(12)]), min_size=nq, max_size=nq))
    ids = list(dict.fromkeys(ids))
    queries = [
        SimpleNamespace(id=q, range=draw(st.integers(1, 50)), is_int=draw(st.booleans()))
        for q in ids
    ]
    cut = draw(st.integers(1, len(queries)))
    groups = [g for g in (queries[:cut], queries[cut:]) if g]
    # a query's int/float kind is its tree's (one aggregate per query, one stream per tree)
    for g in groups:
        for q in g:
            q.is_int = g[0].is_int
    trees = {f"t{k}": SimpleNamespace(queries=g) for k, g in enumerate(groups)}
    nxt = {q.id: draw(st.integers(0, 5)) for q in queries}
    parts = []
    for _ in range(draw(st.integers(0, 4))):
        tid = draw(st.sampled_from(sorted(trees)))
        tq = trees[tid].queries
        idx = draw(st.lists(st.integers(0, len(tq) - 1), max_size=8))
        if not idx:
            continue
        starts = []
        for i in idx:
            starts.append(nxt[tq[i].id])
            nxt[tq[i].id] += draw(st.integers(1, 4))
        is_int = tq[0].is_int
        vals = [draw(st.integers(-(1 << 53) - 2, (1 << 53) + 2)) for _ in idx]
        va = np.array(vals, np.int64) if is_int else np.array(vals, np.float64) / 4
        q = np.array(idx, np.int64)
        st_ = np.array(starts, np.int64)
        parts.append((tid, (q, st_, st_ + 1, va)))
    return trees, parts


def rows_of(trees, parts):
    rng = {q.id: q.range for t in trees.values() for q in t.queries}
    out = []
    for tid, (q, s, _, v) in parts:
        for i, a, x in zip(q.tolist(), s.tolist(), v.tolist()):
            qid = trees[tid].queries[i].id
            out.append((qid, a, rng[qid], x, v.dtype == np.int64))
    return out


@settings(max_examples=60, deadline=None)
@given(node_answers(), st.sampled_from([None, "float64"]))
def test_node_blocks_equal_the_sorted_rows(answers, value_type):
    trees, parts = answers
    blocks = answer_blocks(list(parts), trees, query_ranks(trees))
    rows = rows_of(trees, parts)
    want = plain_table(rows, value_type)
    assert blocks.num_rows == want.num_rows
    assert blocks.qids == sorted(set(blocks.qids))  # one block per query, in id order
    inexact = any(r[4] and abs(r[3]) > 1 << 53 for r in rows)  # ints beyond 2^53
    if inexact and (value_type == "float64" or len({r[4] for r in rows}) > 1):
        with pytest.raises(pa.ArrowInvalid):  # a float64 table cannot hold them exactly
            blocks.table(value_type)
        with pytest.raises(ValueError):  # nor can blocks taken as floats (the actor route)
            answer_blocks(list(parts), trees, query_ranks(trees), "float64")
        return
    assert blocks.table(value_type).equals(want)
    # pickled as Ray does (the columns as buffers), the same blocks
    back = pickle.loads(pickle.dumps(blocks, protocol=5))
    assert back.table(value_type).equals(want)
    # the dictionary-coded table, from blocks taken with the run's value type (the actor
    # route: ints stored as floats on the way): the same rows once its codes are decoded
    for b in (blocks, answer_blocks(list(parts), trees, query_ranks(trees), value_type)):
        d = b.dictionary_table(value_type)
        if want.num_rows:
            assert pa.types.is_dictionary(d.schema.field("query_id").type)
            assert d.column("query_id").cast(pa.string()).equals(want.column("query_id"))
        assert d.drop(["query_id"]).equals(want.drop(["query_id"]))


@settings(max_examples=60, deadline=None)
@given(node_answers(), st.sampled_from(["int64", "float64"]), st.booleans())
def test_part_table_equals_the_sorted_rows(answers, value_type, swap):
    """The actor route's part in one pass (``part_table``) holds the sorted rows of the
    run's value type; ``swap``: two batches exchanged, so a query's windows may come out of
    order (the sort fallback); ints beyond 2^53 as float64 and floats in an int64 run are
    refused."""
    trees, parts = answers
    if swap and len(parts) > 1:
        parts[0], parts[-1] = parts[-1], parts[0]
    rows = rows_of(trees, parts)
    has_float = any(not r[4] for r in rows)
    inexact = any(r[4] and abs(r[3]) > 1 << 53 for r in rows)
    if (value_type == "int64" and has_float) or (value_type == "float64" and inexact):
        with pytest.raises(ValueError):
            part_table(list(parts), query_ranks(trees), value_type)
        return
    got = part_table(list(parts), query_ranks(trees), value_type)
    want = plain_table(rows, value_type)
    if value_type == "int64":
        want = want.cast(answer_schema_for(True))
    assert got.num_rows == want.num_rows
    if not want.num_rows:
        assert got.schema.equals(want.schema)
        return
    assert pa.types.is_dictionary(got.schema.field("query_id").type)
    assert got.column("query_id").cast(pa.string()).equals(want.column("query_id"))
    assert got.drop(["query_id"]).equals(want.drop(["query_id"]))
    if not swap:  # the blocks' route to the same part: the same rows
        old = answer_blocks(list(parts), trees, query_ranks(trees), value_type)
        d = old.dictionary_table(value_type)
        assert d.drop(["query_id"]).equals(got.drop(["query_id"]))
        assert (
            d.column("query_id").cast(pa.string()).equals(got.column("query_id").cast(pa.string()))
        )


def exact_rows(trees, parts, value_type):
    """The oracle's rows of a node's answers, or None when the run's type refuses them."""
    rows = rows_of(trees, parts)
    if value_type == "int64" and any(not r[4] for r in rows):
        return None
    if value_type == "float64" and any(r[4] and abs(r[3]) > 1 << 53 for r in rows):
        return None
    want = plain_table(rows, value_type)
    return want.cast(answer_schema_for(True)) if value_type == "int64" else want


@settings(max_examples=40, deadline=None)
@given(st.lists(node_answers(), min_size=1, max_size=4), st.sampled_from(["int64", "float64"]))
def test_part_table_in_kept_memory_over_rounds(rounds, value_type):
    """Rounds of a node's answers built one after the other in the same kept memory
    (``AnswerBuffers``: grown, then reused by smaller and larger rounds) each hold the sorted
    rows of that round only, whatever an earlier round left in the memory."""
    mem = AnswerBuffers()
    for trees, parts in rounds:
        want = exact_rows(trees, parts, value_type)
        if want is None:
            with pytest.raises(ValueError):
                part_table(list(parts), query_ranks(trees), value_type, mem.columns)
            continue
        got = part_table(list(parts), query_ranks(trees), value_type, mem.columns)
        assert got.num_rows == want.num_rows
        if want.num_rows:
            assert got.column("query_id").cast(pa.string()).equals(want.column("query_id"))
            assert got.drop(["query_id"]).equals(want.drop(["query_id"]))
        assert mem.rows >= want.num_rows


@settings(max_examples=20, deadline=None)
@given(st.lists(node_answers(), min_size=1, max_size=3))
def test_pending_write_part_over_rounds_reads_back(tmp_path_factory, rounds):
    """A node's rounds written as parts through its kept memory
    (``PendingAnswers.write_part``, the actor route) read back as each round's sorted rows:
    a part written earlier is not touched by a later round's use of the memory."""
    pending = PendingAnswers()
    root = tmp_path_factory.mktemp("parts") / "answers.parquet"
    commits, want_all = AnswerCommits(root), []
    for k, (trees, parts) in enumerate(rounds):
        want = exact_rows(trees, parts, "float64")
        if want is None:
            continue
        for t in trees.values():  # one query id space per round, as a node's trees change
            for q in t.queries:
                q.id = f"r{k}{q.id}"
        pending.trees_changed()
        for tid, c in parts:
            pending.keep(tid, c)
        written = pending.write_part(trees, str(root), "n0", f"{k:06d}", "float64")
        commits.commit(written)
        assert written.num_rows == want.num_rows and pending.count() == 0
        want_all.append(plain_table(rows_of(trees, parts), "float64"))
    want = pa.concat_tables(want_all) if want_all else None
    got = read_answers(root)
    if want is None or not want.num_rows:
        assert got.num_rows == 0
    else:
        assert got.equals(want.sort_by([("query_id", "ascending"), ("window_start", "ascending")]))


@settings(max_examples=40, deadline=None)
@given(st.lists(node_answers(), min_size=1, max_size=3))
def test_merge_of_parts_equals_the_sorted_rows(nodes):
    """Parts of different nodes (each its own queries' answers, as in a run) merge to the
    sorted rows."""
    parts, rows = [], []
    for k, (trees, cols) in enumerate(nodes):
        for t in trees.values():  # disjoint query ids per node
            for q in t.queries:
                q.id = f"n{k}{q.id}"
        parts.append(answer_blocks(list(cols), trees, query_ranks(trees)))
        rows += rows_of(trees, cols)
    mixed = len({r[4] for r in rows}) > 1
    big = any(abs(r[3]) > 1 << 53 for r in rows if r[4])
    if mixed and big:  # int answers beyond 2^53 in a float table: refused
        try:
            merge_blocks(parts)
        except pa.ArrowInvalid:
            return
        raise AssertionError("ints beyond 2^53 merged into float64")
    assert merge_blocks(parts).equals(plain_table(rows))


@settings(max_examples=25, deadline=None)
@given(node_answers())
def test_dictionary_part_reads_back_as_the_plain_table(tmp_path_factory, answers):
    """A part written from dictionary codes holds the rows and schema of the plain table: the
    file's own schema says ``string``, and ``read_answers`` gives the sorted rows."""
    trees, parts = answers
    rows = rows_of(trees, parts)
    if any(r[4] and abs(r[3]) > 1 << 53 for r in rows):
        return  # not exact as float64 (the test above)
    blocks = answer_blocks(list(parts), trees, query_ranks(trees), "float64")
    want = plain_table(rows, "float64")
    root = tmp_path_factory.mktemp("parts") / "answers.parquet"
    written = write_part(root, "n0", "000000", blocks.dictionary_table("float64"))
    AnswerCommits(root).commit(written)
    assert written.num_rows == want.num_rows
    if want.num_rows:
        f = pq.read_table(root / written.path)
        assert f.schema.equals(answer_schema_for(False))
        assert f.equals(want)
    got = read_answers(root)
    assert got.equals(want) if want.num_rows else got.schema.equals(ANSWER_SCHEMA_INT)


def test_part_statistics_for_windows_and_values_not_query_ids(tmp_path):
    """A part keeps min/max statistics where readers prune by them (window columns, value)
    and skips them for the dictionary-coded ``query_id`` (their cost: ``parquet_options``)."""
    trees = {"t0": SimpleNamespace(queries=[SimpleNamespace(id="a", range=5)])}
    cols = (np.zeros(3, np.int64), np.array([0, 2, 4]), None, np.array([1.5, 2.5, 3.5]))
    table = part_table([("t0", cols)], query_ranks(trees), "float64")
    written = write_part(tmp_path, "n0", "000000", table)
    AnswerCommits(tmp_path).commit(written)
    rg = pq.ParquetFile(tmp_path / written.path).metadata.row_group(0)
    stats = {rg.column(i).path_in_schema: rg.column(i).statistics for i in range(4)}
    assert stats["query_id"] is None
    assert (stats["window_start"].min, stats["window_start"].max) == (0, 4)
    assert (stats["window_end"].min, stats["window_end"].max) == (5, 9)
    assert (stats["value"].min, stats["value"].max) == (1.5, 3.5)


def _required(schema: pa.Schema) -> bool:
    return all(not f.nullable for f in schema)


def test_answers_and_late_tuples_are_required_fields_everywhere(tmp_path):
    """No answer or late tuple is ever null, and every schema they are made or written with
    says so (why: Parquet then writes no definition levels, a cheaper part): the driver's
    merged table, a node's blocks and its part table (the actor route), late tuples, the
    numbered parts of the directory stream and ``serve`` (``PartWriter``), the tables
    readers give back; in the Parquet files every column is required (no definition level)."""
    from cluster.answers.blocks import LATE_SCHEMA, concat_answers, empty_answers, empty_late
    from cluster.answers.parts import AnswerParts, PartWriter
    from cluster.answers.sink import read_late
    from cluster.node.answers import late_table

    trees = {"t0": SimpleNamespace(queries=[SimpleNamespace(id="a", range=5)])}
    cols = (np.zeros(3, np.int64), np.array([0, 2, 4]), None, np.array([1, 2, 3]))
    blocks = answer_blocks([("t0", cols)], trees, query_ranks(trees))
    lt = SimpleNamespace(count=2, ts=np.array([7, 8]), values=np.array([1, 2]))
    late = late_table("n0", {"t0": SimpleNamespace(late=lt)}, {"t0": "mf01"}, None)
    tables = {
        "merged": merge_blocks([blocks]),
        "blocks": blocks.table("float64"),
        "dictionary": blocks.dictionary_table(),
        "part": part_table([("t0", cols)], query_ranks(trees), "int64"),
        "concat": concat_answers([blocks.table(), blocks.table("float64")]),
        "empty": empty_answers(),
        "late": late,
        "empty late": empty_late(),
    }
    for name, t in tables.items():
        assert _required(t.schema), name
    assert tables["merged"].schema.equals(ANSWER_SCHEMA_INT) and late.schema.equals(LATE_SCHEMA)
    assert tables["merged"].num_rows == 3 and late.num_rows == 2
    # written: a node's part (actor route), numbered parts (directory stream, serve)
    root = tmp_path / "actors" / "answers.parquet"
    AnswerCommits(root).commit(write_part(root, "n0", "final", tables["part"]))
    late_root = tmp_path / "actors" / "late.parquet"
    AnswerCommits(late_root).commit(write_part(late_root, "n0", "final", late))
    w = PartWriter(tmp_path / "stream" / "answers.parquet", answer_schema_for(False))
    w.write(tables["merged"])
    s = AnswerParts(tmp_path / "serve" / "late.parquet", LATE_SCHEMA)
    s.write(late)
    files = sorted(tmp_path.rglob("part-*.parquet"))
    assert len(files) == 4
    for f in files:
        schema = pq.ParquetFile(f).schema
        assert [schema.column(i).max_definition_level for i in range(len(schema))] == [0] * len(
            schema
        ), f
    # read back: the same schemas as made
    assert read_answers(root).equals(tables["merged"])
    assert read_late(late_root).equals(late)
    assert pq.read_table(tmp_path / "stream" / "answers.parquet").equals(
        tables["merged"].cast(answer_schema_for(False))
    )


def test_bench_wall_over_the_busiest_nodes_tree_time():
    """``bench e2e`` rows say how far the wall time is above the busiest node's tree time
    (what moving the answers costs beyond computing them), and the table prints it."""
    from sim.bench.e2e import format_table, tree_time

    m = {
        "answers": 900,
        "nodes": {"a": {"busy_s": 1.5, "answer_s": 1.1}, "b": {"busy_s": 2.0, "answer_s": 0.5}},
    }
    got = tree_time(m, 3.0)
    assert got == {
        "tree_s": 2.0,
        "wall_over_tree": 1.5,
        "answers_per_s": 300,
        "answer_s": 1.1,
        "node_s": 2.6,  # node a: 1.5 s of trees + 1.1 s of answers
        "node_over_tree": 1.3,
    }
    assert tree_time({"answers": 0, "nodes": {}}, 1.0)["wall_over_tree"] is None
    row = {
        "queries": 10,
        "mode": "raw/actors",
        "route": "actors",
        "tuples_per_s": 5,
        "driver_cpu_s": 0.1,
        "driver_bytes": 0,
        "seconds": 3.0,
        **got,
    }
    assert "wall 3.00 s / tree 2.00 s = 1.50x (trees + answers on a node 2.60 s = 1.30x)" in (
        format_table([row])
    )


def test_blocks_bytes_are_the_two_columns():
    """What the driver route reports as answer bytes to the driver: 16 per answer."""
    b = AnswerBlocks(["a", "b"], [5, 3], [np.array([0, 2]), np.array([1])], [np.ones(2), [7]])
    assert b.nbytes == 3 * 16 and b.num_rows == 3
    assert [v.dtype for v in b.values] == [np.float64, np.int64]


def test_populated_memory_and_kept_buffers():
    """Answer columns' memory (``cluster.answers.memory.populated``): writable, zeroed, of the
    size asked (none included), alive as long as an Arrow array made from it; a node's kept
    buffers refuse a value column that is not 8 bytes wide."""
    from cluster.answers.memory import populated

    assert populated(0, np.int64).shape == (0,)
    a = populated(5, np.int32)
    assert a.dtype == np.int32 and a.flags.writeable and not a.any()
    a[:] = [1, 2, 3, 4, 5]
    arr = pa.array(a)
    del a
    assert arr.to_pylist() == [1, 2, 3, 4, 5]
    with pytest.raises(ValueError):
        AnswerBuffers().columns(3, np.float32)
