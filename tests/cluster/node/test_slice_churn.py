"""Sliced mode under query churn, without Ray: trees fed slices cut by their cut plan give the
answers and late-tuple counts of the same trees fed the tuples, and the churn brute force's."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from helpers import AGGS, assert_same, examples
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.node.slice_churn import (
    SlicedChurnTree,
    check_cuts,
    cut_plan,
    merge_plans,
    slice_file,
)
from executors.churn_oracle import generation_answers, registered_answers, registrations
from executors.churn_tree import ChurnTree
from executors.slice_input import SliceBatch

EXAMPLES = examples(120)


@st.composite
def files_and_changes(draw, late: bool):
    """Initial queries, then files (each in time order, as serve sorts a file) with query
    changes between them; ``late``: files may start further behind than the lateness."""
    counter = iter(range(1000))

    def query():
        return dict(
            id=f"q{next(counter)}",
            aggregate=draw(st.sampled_from(AGGS)),
            range=draw(st.integers(1, 14)),
            slide=draw(st.integers(1, 6)),
        )

    initial = [query() for _ in range(draw(st.integers(1, 3)))]
    lateness = draw(st.integers(0, 5))
    is_int = draw(st.booleans())
    active = [q["id"] for q in initial]
    schedule, max_ts, last_at = [], None, draw(st.integers(-20, 5))
    for _ in range(draw(st.integers(1, 6))):
        n = draw(st.integers(0, 14))
        gaps = draw(st.lists(st.sampled_from([0, 1, 1, 2, 3, 9]), min_size=n, max_size=n))
        back = draw(st.integers(0, lateness + 12 if late else lateness))
        start = (max_ts if max_ts is not None else last_at) - back
        ts = (start + np.cumsum(np.array(gaps, dtype=np.int64))).astype(np.int64)
        if is_int:
            v = np.array(draw(st.lists(st.integers(-99, 99), min_size=n, max_size=n)), np.int64)
        else:
            fl = st.floats(-1e3, 1e3, allow_nan=False)
            v = np.array(draw(st.lists(fl, min_size=n, max_size=n)), np.float64)
        schedule.append(("data", ts, v))
        if n:
            max_ts = max(int(ts.max()), max_ts if max_ts is not None else int(ts.max()))
        if draw(st.booleans()):
            at = max(max_ts + 1 if max_ts is not None else last_at, last_at) + draw(
                st.integers(0, 4)
            )
            last_at = at
            add = [query() for _ in range(draw(st.integers(0, 2)))]
            remove = (
                draw(st.lists(st.sampled_from(active), unique=True, max_size=2)) if active else []
            )
            active = [a for a in active if a not in remove] + [q["id"] for q in add]
            schedule.append(("change", at, add, remove))
    return initial, schedule, lateness


def rows(cols, tree):
    if cols is None:
        return []
    q, s, e, v = cols
    return [(tree.queries[int(a)].id, int(b), int(c), x.item()) for a, b, c, x in zip(q, s, e, v)]


def run(trees, schedule, sliced: bool, split: int = 0, snap: bool = False):
    """Drive ``trees`` (the first takes the changes, all share the stream); a sliced run cuts
    each file by the union of the trees' plans, in two batches when ``split``; ``snap``:
    every tree is restored from its snapshot before each item (a checkpoint)."""
    out = [[] for _ in trees]
    for item in schedule:
        if snap:
            trees[:] = [type(t).restore(t.snapshot()) for t in trees]
        if item[0] == "change":
            _, at, add, remove = item
            trees[0].change(at, add=add, remove=remove)
            continue
        _, ts, v = item
        if not sliced:
            for i, t in enumerate(trees):
                out[i] += rows(t.process_columns(ts, v), t)
            continue
        cols = slice_file(ts, v, merge_plans(cut_plan(t) for t in trees))
        k = min(split, cols["ts_max"].shape[0])
        for part in ({c: a[:k] for c, a in cols.items()}, {c: a[k:] for c, a in cols.items()}):
            for i, t in enumerate(trees):
                out[i] += rows(t.process_slice_batch(SliceBatch.of(part)), t)
    for i, t in enumerate(trees):
        out[i] += rows(t.flush_columns(), t)
        out[i].sort(key=lambda x: (x[0], x[1]))
    return out


def both(initial, schedule, lateness, split, other, snap=False):
    raw = [ChurnTree(initial, allowed_lateness=lateness)]
    sl = [SlicedChurnTree(initial, allowed_lateness=lateness)]
    if other:
        raw.append(ChurnTree([other], allowed_lateness=lateness))
        sl.append(SlicedChurnTree([other], allowed_lateness=lateness))
    return run(raw, schedule, False), run(sl, schedule, True, split, snap), raw, sl


def tuples(schedule):
    ts = [x[1] for x in schedule if x[0] == "data"]
    vs = [x[2] for x in schedule if x[0] == "data"]
    return np.concatenate(ts), np.concatenate(vs)


OTHER = st.one_of(
    st.none(),
    st.builds(
        lambda a, r, s: dict(id="other", aggregate=a, range=r, slide=s),
        st.sampled_from(AGGS),
        st.integers(1, 14),
        st.integers(1, 6),
    ),
)


@settings(max_examples=EXAMPLES)
@given(w=files_and_changes(late=False), split=st.integers(0, 3), other=OTHER)
def test_sliced_churn_equals_raw_and_registrations(w, split, other):
    """Disorder within the lateness: sliced = raw = section 9's registered windows, none late;
    a second tree on the stream (its own edges in the cut) is unchanged too."""
    initial, schedule, lateness = w
    raw, sl, rt, stt = both(initial, schedule, lateness, split, other)
    ts, v = tuples(schedule)
    scale = float(np.abs(v).max()) if v.shape[0] else 1.0
    want = registered_answers(registrations(initial, schedule), ts, v)
    assert_same(raw[0], want, scale)
    assert_same(sl[0], want, scale)
    if other:
        assert_same(sl[1], registered_answers([(other, None, None)], ts, v), scale)
    assert stt[0].late_tuples == stt[0].late.count == rt[0].late.count == 0


@settings(max_examples=EXAMPLES)
@given(w=files_and_changes(late=True), split=st.integers(0, 3), other=OTHER, snap=st.booleans())
def test_sliced_churn_late_files_equal_raw_and_generations(w, split, other, snap):
    """Files further behind than the lateness: sliced = raw = the generations' brute force,
    and every late tuple of raw mode is counted late in sliced mode (per tree), also across
    snapshots (the service's checkpoints)."""
    initial, schedule, lateness = w
    raw, sl, rt, stt = both(initial, schedule, lateness, split, other, snap)
    ts, v = tuples(schedule)
    scale = float(np.abs(v).max()) if v.shape[0] else 1.0
    want, _ = generation_answers(initial, schedule, lateness)
    assert_same(raw[0], want, scale)
    assert_same(sl[0], want, scale)
    for a, b, r, s in zip(raw, sl, rt, stt):
        assert_same(b, a, scale)
        assert s.late_tuples == s.stats()["late"] == r.late.count
        assert s.late.count == s.late.ts.shape[0] <= r.late.count


def test_a_slice_across_a_change_point_is_refused():
    """A slice spanning T_reg of an added query would feed tuples before T_reg to it."""
    t = SlicedChurnTree([dict(id="a", aggregate="sum", range=10, slide=10)])
    t.change(3, add=[dict(id="b", aggregate="sum", range=10, slide=10)])
    cols = slice_file(np.array([3, 4, 8]), np.array([1, 2, 3]), cut_plan(t))
    assert cols["slice_start"].tolist() == [3] and cols["slice_end"].tolist() == [10]
    with pytest.raises(ValueError, match="straddles"):
        check_cuts(cut_plan(t), np.array([0]), np.array([10]))
    bad = dict(cols, slice_start=np.array([0]))
    with pytest.raises(ValueError, match="straddles"):
        t.process_slice_batch(SliceBatch.of(bad))


def test_count_windows_are_refused():
    """Count windows need each tuple's position, which a slice does not carry."""
    with pytest.raises(ValueError, match="time windows only"):
        SlicedChurnTree([dict(id="c", aggregate="sum", range=3, slide=1, kind="count")])


@settings(max_examples=examples(40))
@given(w=files_and_changes(late=True), other=OTHER)
def test_churn_node_sliced_with_the_drivers_plan_equals_raw(w, other):
    """A churn node (plain core, no Ray) in sliced mode, fed slices cut by the driver's plan
    (``lineage_plan``: every query's edges ever, every change point), with a tree started at
    the first change: its answers and late tuples equal a raw node's."""
    from cluster.node.churn import ChurnNodeCore
    from cluster.node.slice_churn import lineage_plan

    initial, schedule, lateness = w
    specs = [{"id": "t0", "stream": "s", "queries": initial}]
    if other:
        specs.append({"id": "t1", "stream": "s", "queries": [other]})
    raw = ChurnNodeCore("n", [dict(t) for t in specs], allowed_lateness=lateness)
    sl = ChurnNodeCore(
        "n", [dict(t) for t in specs], allowed_lateness=lateness, input_mode="slices"
    )
    rs = {(q["range"], q["slide"]) for t in specs for q in t["queries"]}
    points, hosted, seq = [], False, 0
    for item in schedule:
        if item[0] == "change":
            _, at, add, remove = item
            for node in (raw, sl):
                node.change_tree("t0", at, add, remove)
            rs |= {(q["range"], q["slide"]) for q in add}
            points.append(at)
            if not hosted:
                spec = {"id": "t9", "stream": "s", "queries": [dict(initial[0], id="h0")]}
                for node in (raw, sl):
                    node.host_tree(dict(spec), at, seq)
                hosted = True
            continue
        _, ts, v = item
        if not ts.shape[0]:
            continue
        seq += 1
        raw.ingest(None, pa.table({"ts_ms": ts, "s": v}), seq)
        cols = slice_file(ts, v, lineage_plan(rs, points))
        sl.ingest("s", pa.table(cols), seq)
    raw.flush()
    sl.flush()
    a, b = raw.drain().to_pylist(), sl.drain().to_pylist()
    assert [x["query_id"] for x in a] == [x["query_id"] for x in b]
    assert [(x["window_start"], x["window_end"]) for x in a] == [
        (x["window_start"], x["window_end"]) for x in b
    ]
    np.testing.assert_allclose([x["value"] for x in b], [x["value"] for x in a], rtol=1e-9)
    for tid, t in raw.trees.items():
        assert sl.trees[tid].late_tuples == t.late.count
