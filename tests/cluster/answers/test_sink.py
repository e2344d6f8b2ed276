"""The answer sink's commit protocol (cluster/answers/sink.py): parts written by node and round,
orphans and retries among them, and after ``finalize`` exactly the acknowledged writes."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.answers.sink import AnswerCommits, read_answers, write_part


def _rows(qids, starts, value):
    return pa.table(
        {
            "query_id": pa.array(qids, pa.string()),
            "window_start": pa.array(starts, pa.int64()),
            "window_end": pa.array([s + 10 for s in starts], pa.int64()),
            "value": pa.array([value] * len(qids), pa.int64()),
        }
    )


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["n0", "n1", "n2"]),
            st.integers(0, 3),  # round
            st.integers(0, 4),  # rows
            st.sampled_from(["commit", "orphan", "retry"]),
        ),
        max_size=12,
    )
)
def test_commit_protocol_keeps_exactly_the_committed_parts(tmp_path_factory, ops):
    """Writes of parts by node and round, some never acknowledged (orphans, also under a
    committed name), some retried under the same name with other content (the restored
    actor's), and a zombie's writes after the end: after ``finalize`` the dataset is exactly
    the last acknowledged write of every committed name."""
    root = tmp_path_factory.mktemp("sink") / "answers.parquet"
    commits = AnswerCommits(root)
    commits.reset()
    want: dict[str, pa.Table] = {}
    for k, (node, rnd, rows, what) in enumerate(ops):
        t = _rows([f"q{node}{rnd}"] * rows, list(range(rows)), k)
        part = write_part(root, node, f"{rnd:06d}", t)
        if what == "orphan":  # staged, never acknowledged: never in place, whatever its name
            continue
        commits.commit(part)
        if rows:
            want[part.path] = t
        else:
            want.pop(part.path, None)
    commits.finalize()
    # a zombie (an actor of a node declared lost that came back) writes after the end, under a
    # committed name and a new one: what it stages stays hidden, no reader sees it
    for node, rnd, _rows_n, _what in ops[:2]:
        write_part(root, node, f"{rnd:06d}", _rows([f"zombie{node}"], [99], -1))
    got = read_answers(root)
    exp = (
        pa.concat_tables(list(want.values())).sort_by(
            [("query_id", "ascending"), ("window_start", "ascending")]
        )
        if want
        else got.slice(0, 0)
    )
    assert got.num_rows == commits.num_rows == sum(t.num_rows for t in want.values())
    assert got.select(["query_id", "window_start"]).equals(exp.select(["query_id", "window_start"]))
    assert sorted(got.column("value").to_pylist()) == sorted(exp.column("value").to_pylist())
    if want:  # what Spark and pyarrow readers see, listing the files themselves
        import pyarrow.dataset as ds

        listed = ds.dataset(str(root), format="parquet", partitioning="hive").to_table()
        assert listed.num_rows == commits.num_rows
