"""A churn node's answers (plain core, no Ray) when a tree's generations answer different value
types (an int generation, then one with a float aggregate): every query's values keep their own
type through grouping and merging, equal to the section 9 brute force
(``executors.churn_oracle.registered_answers``)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from helpers import AGGS, assert_same, examples
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.answers.blocks import merge_blocks
from cluster.node.churn import ChurnNodeCore
from executors.churn_oracle import registered_answers, registrations


def rows(table: pa.Table) -> list[tuple]:
    return [
        (r["query_id"], r["window_start"], r["window_end"], r["value"]) for r in table.to_pylist()
    ]


def test_count_then_a_float_sum_keeps_the_counts_exact():
    """The reported case: a count query, a float ``avg`` added at T=1 to an int stream; the
    count window ``[1,2)`` once came out as the bits of 1.0 read as an int64."""
    node = ChurnNodeCore("n", [{"id": "t0", "stream": "s", "queries": [
        dict(id="c", aggregate="count", range=1, slide=1)]}])  # fmt: skip
    ts, v = np.arange(4, dtype=np.int64), np.array([5, 6, 7, 8], dtype=np.int64)
    node.ingest(None, pa.table({"ts_ms": ts[:1], "s": v[:1]}), 1)
    node.change_tree("t0", 1, [dict(id="f", aggregate="avg", range=2, slide=1)], [])
    for i in range(1, 4):  # one tuple per batch: some batches hold only int answers
        node.ingest(None, pa.table({"ts_ms": ts[i : i + 1], "s": v[i : i + 1]}), i + 1)
    node.flush()
    got = rows(node.drain())
    initial = [dict(id="c", aggregate="count", range=1, slide=1)]
    schedule = [("change", 1, [dict(id="f", aggregate="avg", range=2, slide=1)], [])]
    want = registered_answers(registrations(initial, schedule), ts, v)
    assert [g[:3] for g in got] == [w[:3] for w in want]
    assert [g[3] for g in got if g[0] == "c"] == [1, 1, 1, 1]
    assert_same(got, want, 1.0)


@st.composite
def mixed_generations(draw):
    """Initial queries, then in-order batches (one tuple or several) with query changes between
    them, every change after the newest timestamp (no tuple late: the brute force's domain);
    aggregates of both value types, so a tree's generations may answer ints, then floats, then
    ints again; ``drain_after``: batches after which the node hands its answers over."""
    counter = iter(range(1000))

    def query():
        return dict(
            id=f"q{next(counter)}",
            aggregate=draw(st.sampled_from(AGGS)),
            range=draw(st.integers(1, 6)),
            slide=draw(st.integers(1, 4)),
        )

    initial = [query() for _ in range(draw(st.integers(1, 2)))]
    is_int = draw(st.booleans())
    active = [q["id"] for q in initial]
    schedule, t = [], draw(st.integers(-5, 5))
    for _ in range(draw(st.integers(1, 8))):
        n = draw(st.integers(1, 4))
        gaps = draw(st.lists(st.sampled_from([0, 1, 1, 2, 5]), min_size=n, max_size=n))
        ts = (t + np.cumsum(np.array(gaps, dtype=np.int64))).astype(np.int64)
        t = int(ts[-1])
        if is_int:
            v = np.array(draw(st.lists(st.integers(-99, 99), min_size=n, max_size=n)), np.int64)
        else:
            fl = st.floats(-1e3, 1e3, allow_nan=False)
            v = np.array(draw(st.lists(fl, min_size=n, max_size=n)), np.float64)
        schedule.append(("data", ts, v, draw(st.booleans())))
        if draw(st.booleans()):
            t += 1 + draw(st.integers(0, 3))
            add = [query() for _ in range(draw(st.integers(0, 2)))]
            remove = (
                draw(st.lists(st.sampled_from(active), unique=True, max_size=1)) if active else []
            )
            active = [a for a in active if a not in remove] + [q["id"] for q in add]
            schedule.append(("change", t, add, remove))
    return initial, schedule


@settings(max_examples=examples(60), deadline=None)
@given(w=mixed_generations())
def test_churn_node_mixed_value_generations_equal_the_brute_force(w):
    """Whatever value types a tree's generations answer, batch by batch, the node's answers
    (drained in parts, merged as the driver does) are the brute force's: int values exact,
    and no value read with another value type's bits."""
    initial, schedule = w
    node = ChurnNodeCore("n", [{"id": "t0", "stream": "s", "queries": [dict(q) for q in initial]}])
    parts, seq = [], 0
    for item in schedule:
        if item[0] == "change":
            _, at, add, remove = item
            node.change_tree("t0", at, [dict(q) for q in add], remove)
            continue
        _, ts, v, drain = item
        seq += 1
        node.ingest(None, pa.table({"ts_ms": ts, "s": v}), seq)
        if drain:
            parts.append(node.drain_blocks())
    node.flush()
    parts.append(node.drain_blocks())
    got = rows(merge_blocks(parts))
    data = [x for x in schedule if x[0] == "data"]
    ts, v = np.concatenate([x[1] for x in data]), np.concatenate([x[2] for x in data])
    want = registered_answers(registrations(initial, [x[:4] for x in schedule]), ts, v)
    assert_same(got, want, float(np.abs(v).max(initial=1.0)))
    aggs = {q["aggregate"] for q, _, _ in registrations(initial, [x[:4] for x in schedule])}
    if v.dtype.kind == "i" and aggs <= {"count", "sum", "min", "max", "range"}:
        # the int64 rule: every query answers ints, so the table is int64 (a tree hosting a
        # float aggregate answers all its queries as floats, as a plain tree does)
        assert all(isinstance(g[3], int) for g in got)


def test_change_tree_returns_what_the_lineage_gained():
    """``change_tree`` returns only the queries the tree's lineage gained, in order; the node's
    spec lists the whole lineage (what a restored tree reports), removed queries included."""
    node = ChurnNodeCore("n", [{"id": "t0", "stream": "s", "queries": [
        dict(id="a", aggregate="sum", range=4, slide=2),
        dict(id="b", aggregate="max", range=3, slide=1)]}])  # fmt: skip
    ts, v = np.arange(3, dtype=np.int64), np.array([5, 6, 7], dtype=np.int64)
    node.ingest(None, pa.table({"ts_ms": ts, "s": v}), 1)
    add = [dict(id="c", aggregate="min", range=2, slide=2, kind="time")]
    assert node.change_tree("t0", 3, add, ["a"]) == add
    assert node.change_tree("t0", 4, [], ["b"]) == []
    spec = next(t for t in node.spec["trees"] if t["id"] == "t0")
    lineage = [q.id for q in node.trees["t0"].queries]
    assert [q["id"] for q in spec["queries"]] == lineage == ["a", "b", "c"]


@settings(max_examples=examples(30), deadline=None)
@given(w=mixed_generations(), twice=st.booleans())
def test_changes_in_one_call_are_the_changes_one_by_one(w, twice):
    """``change_trees`` (one call per node and command) returns, lists in the node's spec and
    answers what ``change_tree`` called for each change in turn does, a tree changed twice in
    one call included."""
    initial, schedule = w
    other = [dict(q, id=f"o{q['id']}") for q in initial]
    specs = [
        {"id": "t0", "stream": "s", "queries": [dict(q) for q in initial]},
        {"id": "t1", "stream": "s", "queries": [dict(q) for q in other]},
    ]
    one, batched = (ChurnNodeCore("n", [dict(t) for t in specs]) for _ in range(2))
    seq = 0
    for item in schedule:
        if item[0] == "change":
            _, at, add, remove = item
            cs = [("t0", at, [dict(q) for q in add], remove, [])]
            cs.append(
                ("t1", at, [dict(q, id=f"o{q['id']}") for q in add], [f"o{r}" for r in remove], [])
            )
            if twice and add:  # t0 again: its first addition removed right away
                cs.append(("t0", at, [], [add[0]["id"]], []))
            want = [one.change_tree(*c) for c in cs]
            assert batched.change_trees([tuple(c) for c in cs]) == want
            continue
        _, ts, v, _ = item
        seq += 1
        for node in (one, batched):
            node.ingest(None, pa.table({"ts_ms": ts, "s": v}), seq)
    assert batched.spec["trees"] == one.spec["trees"]
    for node in (one, batched):
        node.flush()
    assert rows(batched.drain()) == rows(one.drain())
