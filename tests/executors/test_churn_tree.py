"""ChurnTree (queries added/removed while a tree runs) against the section 9 oracles."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from helpers import AGGS, assert_same, examples
from hypothesis import given, settings
from hypothesis import strategies as st

from executors.churn_oracle import generation_answers, registered_answers, registrations
from executors.churn_tree import ChurnTree, _Gen
from executors.edges import INF, NEG_INF
from executors.query_spec import QueryColumns, QuerySpec, get_aggregate

TECHS = ["slickdeque", "panes", "flatfat", "flatfit", "bint", "slickdeque_inv", "twostacks"]
EXAMPLES = examples(120)


def rows(cols, tree):
    if cols is None:
        return []
    q, s, e, v = cols
    return [(tree.queries[int(a)].id, int(b), int(c), v_.item()) for a, b, c, v_ in zip(q, s, e, v)]


def drive(initial, schedule, lateness, technique="slickdeque", slicing="pairs", snap_every=0):
    """Run a ChurnTree over a schedule; returns (answers sorted by (query, start), tree)."""
    tree = ChurnTree(initial, technique=technique, allowed_lateness=lateness, slicing=slicing)
    out = []
    for i, item in enumerate(schedule):
        if snap_every and i % snap_every == snap_every - 1:
            tree = ChurnTree.restore(tree.snapshot())
            gathered_columns_hold(tree)
        if item[0] == "data":
            out += rows(tree.process_columns(item[1], item[2]), tree)
        else:
            _, at, add, remove = item
            assert tree.change(at, add=add, remove=remove) == at
            gathered_columns_hold(tree)
    out += rows(tree.flush_columns(), tree)
    out.sort(key=lambda x: (x[0], x[1]))
    return out, tree


def gathered_columns_hold(tree: ChurnTree) -> None:
    """Each generation's columns, gathered from the lineage's, are its queries' own, read
    query by query, and so are its tree's; the active queries are the newest generation's."""
    for g in tree.gens:
        own = QueryColumns.of(g.tree.queries)
        for f in ("ids", "range", "slide", "aggregate", "kind"):
            assert np.array_equal(getattr(g.columns, f), getattr(own, f)), f
        assert [tree.queries[i] for i in g.qmap.tolist()] == g.tree.queries
        assert np.array_equal(g.tree._r, own.range)
        assert g.tree._ids.tolist() == own.ids.tolist()
        assert [
            g.tree._agg_list[i].name for i in g.tree._agg_idx.tolist()
        ] == own.aggregate.tolist()
    if tree.newest is not None:
        assert tree.active == [q.id for q in tree.newest.tree.queries]


@st.composite
def schedules(draw, bounded_disorder=True):
    """Initial queries, then batches of tuples with changes (adds/removes) in between."""
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
    schedule, max_ts, base = [], None, draw(st.integers(-20, 5))
    last_at = base
    for _ in range(draw(st.integers(1, 6))):
        n = draw(st.integers(0, 12))
        gaps = draw(st.lists(st.sampled_from([0, 1, 1, 2, 3, 9]), min_size=n, max_size=n))
        if bounded_disorder:  # each tuple at most `lateness` behind the newest before it
            jit = draw(st.lists(st.integers(0, lateness), min_size=n, max_size=n))
        else:
            jit = draw(st.lists(st.integers(0, lateness + 12), min_size=n, max_size=n))
        sorted_ts = base + np.cumsum(np.array(gaps, dtype=np.int64))
        ts = (sorted_ts - np.array(jit, dtype=np.int64)).astype(np.int64)
        if n:
            base = int(sorted_ts[-1])
        if is_int:
            v = np.array(
                draw(st.lists(st.integers(-1000, 1000), min_size=n, max_size=n)), dtype=np.int64
            )
        else:
            v = np.array(
                draw(st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=n, max_size=n)),
                dtype=np.float64,
            )
        schedule.append(("data", ts, v))
        if n:
            max_ts = max(int(ts.max()), max_ts if max_ts is not None else int(ts.max()))
        if draw(st.booleans()):
            at = max(max_ts + 1 if max_ts is not None else base, last_at) + draw(st.integers(0, 4))
            last_at = at
            add = [query() for _ in range(draw(st.integers(0, 2)))]
            remove = (
                draw(st.lists(st.sampled_from(active), unique=True, max_size=2)) if active else []
            )
            active = [a for a in active if a not in remove] + [q["id"] for q in add]
            schedule.append(("change", at, add, remove))
            base = max(base, at)
    return initial, schedule, lateness, is_int


def all_tuples(schedule):
    ts = [x[1] for x in schedule if x[0] == "data"]
    vs = [x[2] for x in schedule if x[0] == "data"]
    return np.concatenate(ts), np.concatenate(vs)


@settings(max_examples=EXAMPLES)
@given(
    w=schedules(),
    tech=st.sampled_from(TECHS),
    slicing=st.sampled_from(["pairs", "cutty"]),
    snap_every=st.sampled_from([0, 0, 2, 3]),
)
def test_section9_answers_without_late_tuples(w, tech, slicing, snap_every):
    """Every query answers exactly the windows of its registration (start >= T_reg, end <=
    T_unreg), each over every tuple in it; no tuple within the allowed lateness is late;
    snapshots in between change nothing."""
    initial, schedule, lateness, _ = w
    ts, v = all_tuples(schedule)
    want = registered_answers(registrations(initial, schedule), ts, v)
    got, tree = drive(initial, schedule, lateness, tech, slicing, snap_every)
    assert_same(got, want, float(np.abs(v).max()) if v.shape[0] else 1.0)
    assert tree.late.count == 0


@settings(max_examples=EXAMPLES)
@given(w=schedules(bounded_disorder=False), snap_every=st.sampled_from([0, 2]))
def test_generations_with_late_tuples(w, snap_every):
    """With tuples beyond the allowed lateness the answers are the generations' (brute force per
    generation, domains applied); every reported late tuple is a real data tuple that is late
    for a generation (never an invented or lost one)."""
    initial, schedule, lateness, _ = w
    ts, v = all_tuples(schedule)
    want, late = generation_answers(initial, schedule, lateness)
    got, tree = drive(initial, schedule, lateness, snap_every=snap_every)
    assert_same(got, want, float(np.abs(v).max()) if v.shape[0] else 1.0)
    late_ts = sorted(int(ts[i]) for _, i in late)
    # unrouted tuples (older than every running generation) are judged by the generation that
    # covered their time: late there too, so the reported multiset is within the oracle's
    got_late = sorted(tree.late.ts.tolist())
    rest = list(late_ts)
    for t in got_late:
        assert t in rest, (t, late_ts)
        rest.remove(t)


def test_add_and_remove_by_hand():
    """sum (10, 5) runs; at T=12 a count (4, 4) joins and the sum is removed at T=23."""
    tree = ChurnTree([{"id": "s", "aggregate": "sum", "range": 10, "slide": 5}])
    out = rows(tree.process_columns(np.array([0, 3, 7, 11]), np.array([1, 2, 4, 8])), tree)
    assert out == [("s", -5, 5, 3), ("s", 0, 10, 7)]
    tree.change(12, add=[{"id": "c", "aggregate": "count", "range": 4, "slide": 4}])
    # generations: old (s, windows starting < 12), new (s + c, windows starting >= 12)
    assert len(tree.gens) == 2
    out = rows(
        tree.process_columns(np.array([12, 15, 17, 21, 22]), np.array([16, 32, 64, 128, 256])), tree
    )
    # c's first window is [12, 16): k*s >= T_reg, nothing before
    assert ("c", 12, 16, 2) in out and ("c", 8, 12, 1) not in out
    assert ("s", 5, 15, 4 + 8 + 16) in out and ("s", 10, 20, 8 + 16 + 32 + 64) in out
    assert len(tree.gens) == 1  # the old generation's last window [10, 20) closed: dropped
    tree.change(23, remove=["s"])
    out2 = rows(tree.process_columns(np.array([26, 40]), np.array([1, 1])), tree) + rows(
        tree.flush_columns(), tree
    )
    ends_s = [e for q, _, e, _ in out + out2 if q == "s"]
    assert max(ends_s) <= 23 and ("s", 15, 25, 64 + 128 + 256) not in out2
    assert ("c", 24, 28, 1) in out2 and ("c", 40, 44, 1) in out2
    assert tree.late.count == 0


def test_change_errors():
    tree = ChurnTree([{"id": "a", "aggregate": "max", "range": 4, "slide": 2}])
    tree.process_columns(np.array([5]), np.array([1]))
    with pytest.raises(ValueError, match="later than every timestamp"):
        tree.change(5, add=[{"id": "b", "aggregate": "sum", "range": 2, "slide": 2}])
    with pytest.raises(ValueError, match="already used"):
        tree.change(6, add=[{"id": "a", "aggregate": "sum", "range": 2, "slide": 2}])
    with pytest.raises(ValueError, match="unknown query ids"):
        tree.change(6, remove=["zz"])
    tree.change(6, remove=["a"])
    assert tree.active == [] and not tree.done()  # old generation holds [4, 8)
    tree.process_columns(np.array([7, 20]), np.array([3, 3]))
    assert tree.done()


@settings(max_examples=EXAMPLES)
@given(w=schedules(), data=st.data())
def test_handoff_between_trees(w, data):
    """Re-weaving: a query handed from tree A to tree B at T (A keeps its windows starting
    before T, B answers those from T on) is answered exactly as if it had never moved."""
    initial, schedule, lateness, _ = w
    ts, v = all_tuples(schedule)
    regs = registrations(initial, schedule)
    want = registered_answers(regs, ts, v)
    active = [q["id"] for q in initial]
    a = ChurnTree(initial, allowed_lateness=lateness)
    b = None
    in_b: list[str] = []
    out = []
    for item in schedule:
        if item[0] == "data":
            for t in (a, b):
                if t is not None:
                    out += rows(t.process_columns(item[1], item[2]), t)
            continue
        _, at, add, remove = item
        for t, mine in ((a, [x for x in active if x not in in_b]), (b, in_b)):
            rm = [r for r in remove if r in mine]
            if t is not None and rm:
                t.change(at, remove=rm)
        handed_rm = [r for r in remove if r in in_b]
        if handed_rm:  # a still answers their windows starting before the hand-off: cap them
            a.change(at, remove=handed_rm)
        active = [x for x in active if x not in remove]
        in_b = [x for x in in_b if x not in remove]
        if add:
            a.change(at, add=add)
            active += [q["id"] for q in add]
        movable = [x for x in active if x not in in_b]
        if movable and data.draw(st.booleans()):
            qid = data.draw(st.sampled_from(movable))
            q = next(x for x in a.queries if x.id == qid).as_dict()
            a.change(at, handoff=[qid])
            if b is None:
                b = ChurnTree([q], allowed_lateness=lateness, t_start=at)
            else:
                b.change(at, add=[q])
            in_b.append(qid)
    for t in (a, b):
        if t is not None:
            out += rows(t.flush_columns(), t)
    out.sort(key=lambda x: (x[0], x[1]))
    assert_same(out, want, float(np.abs(v).max()) if v.shape[0] else 1.0)


def test_removal_after_handoff_caps_the_old_tree():
    """A query handed from A to B at T and removed at T_unreg: A still holds its windows that
    start before T; those ending after T_unreg must not be answered (found by the property
    test above: ``q0`` (r 2, s 1) handed off and removed at 1 answered ``[0, 2)``)."""
    q0 = {"id": "q0", "aggregate": "sum", "range": 2, "slide": 1}
    a = ChurnTree([q0, {"id": "q1", "aggregate": "sum", "range": 1, "slide": 1}])
    out = rows(a.process_columns(np.zeros(3, dtype=np.int64), np.ones(3)), a)
    a.change(1, handoff=["q0"])
    b = ChurnTree([q0], t_start=1)
    b.change(1, remove=["q0"])
    a.change(1, remove=["q0"])  # cap-only: q0 is no longer active in A
    assert a.active == ["q1"]
    with pytest.raises(ValueError, match="unknown query ids"):
        a.change(1, remove=["zz"])
    out += rows(a.flush_columns(), a) + rows(b.flush_columns(), b)
    assert sorted(o[:4] for o in out) == [("q0", -1, 1, 3.0), ("q1", 0, 1, 3.0)]


@st.composite
def count_schedules(draw):
    """Count windows (docs/DESIGN.md s. 1: positions): initial queries, batches of tuples
    (their timestamps drawn out of order: positions ignore them), changes at a position at or
    after the number of tuples consumed."""
    counter = iter(range(1000))

    def query():
        return dict(
            id=f"c{next(counter)}",
            aggregate=draw(st.sampled_from(AGGS)),
            range=draw(st.integers(1, 12)),
            slide=draw(st.integers(1, 6)),
            kind="count",
        )

    initial = [query() for _ in range(draw(st.integers(1, 3)))]
    active = [q["id"] for q in initial]
    schedule, pos = [], 0
    for _ in range(draw(st.integers(1, 6))):
        n = draw(st.integers(0, 12))
        ts = np.array(draw(st.lists(st.integers(0, 50), min_size=n, max_size=n)), np.int64)
        v = np.array(draw(st.lists(st.integers(-99, 99), min_size=n, max_size=n)), np.int64)
        schedule.append(("data", ts, v))
        pos += n
        if draw(st.booleans()):
            at = pos + draw(st.sampled_from([0, 0, 1, 3]))
            add = [query() for _ in range(draw(st.integers(0, 2)))]
            remove = (
                draw(st.lists(st.sampled_from(active), unique=True, max_size=2)) if active else []
            )
            active = [a for a in active if a not in remove] + [q["id"] for q in add]
            schedule.append(("change", at, add, remove))
            pos = at if add or remove else pos  # an empty change leaves the position
    return initial, schedule


@settings(max_examples=EXAMPLES)
@given(
    w=count_schedules(),
    tech=st.sampled_from(TECHS),
    lateness=st.integers(0, 5),
    snap_every=st.sampled_from([0, 0, 2, 3]),
)
def test_count_windows_follow_their_registrations(w, tech, lateness, snap_every):
    """Count queries added and removed while the tree runs: each answers exactly its windows
    on the positions axis with start >= T_reg and end <= T_unreg (positions), over every
    tuple in them, as the generations' brute force says; nothing is ever late (the allowed
    lateness does not apply to positions); snapshots in between change nothing."""
    initial, schedule = w
    ts, v = all_tuples(schedule)
    want = registered_answers(registrations(initial, schedule), ts, v)
    assert generation_answers(initial, schedule, lateness) == (want, set())
    got, tree = drive(initial, schedule, lateness, tech, snap_every=snap_every)
    assert_same(got, want, float(np.abs(v).max()) if v.shape[0] else 1.0)
    assert tree.late.count == 0 and tree.kind == "count"


def test_count_tree_started_later_and_its_refusals():
    """A count tree started at position 5 (queries added to a running deployment) numbers its
    first tuple 5; a change cannot go back before the next position, and a count tree takes no
    time window (nor the reverse)."""
    tree = ChurnTree(
        [{"id": "n", "aggregate": "sum", "range": 4, "slide": 2, "kind": "count"}], t_start=5
    )
    out = rows(tree.process_columns(None, np.arange(1, 8)), tree)  # positions 5..11
    assert out == [("n", 6, 10, 2 + 3 + 4 + 5)]  # [8, 12) is due once position 12 is seen
    with pytest.raises(ValueError, match=r"later than every position consumed \(newest: 11\)"):
        tree.change(11, remove=["n"])
    with pytest.raises(ValueError, match="cannot join a tree of count windows"):
        tree.change(12, add=[{"id": "t", "aggregate": "sum", "range": 4, "slide": 2}])
    timed = ChurnTree([{"id": "t", "aggregate": "sum", "range": 4, "slide": 2}])
    with pytest.raises(ValueError, match="cannot join a tree of time windows"):
        timed.change(
            1, add=[{"id": "m", "aggregate": "sum", "range": 4, "slide": 2, "kind": "count"}]
        )
    assert tree.change(12, remove=["n"]) == 12
    # [8, 12) ends at T_unreg = 12: answered; [10, 14) ends after it: not
    assert rows(tree.flush_columns(), tree) == [("n", 8, 12, 4 + 5 + 6 + 7)]


def test_snapshots_list_the_lineage_once_and_restore_each_generations_queries():
    """A churn tree's snapshot lists its lineage once (version 2); its generations' own
    snapshots list no queries, their domains are arrays, and a restore gives each
    generation the lineage's queries at its ``qmap``.  A version-1 snapshot (each generation listing its queries) still restores to
    the same tree, answering the rest of the input the same."""
    import io
    import json

    from executors.array_pack import unpack as unpack_arrays
    from executors.churn_tree import ChurnTree

    def unpack(blob):
        arrays = unpack_arrays(blob)
        return json.loads(arrays["meta"].tobytes().decode()), arrays

    def savez(arrays) -> bytes:  # the container every snapshot was before packs
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        return buf.getvalue()

    q = [{"id": f"q{i}", "aggregate": "sum", "range": 4 + i, "slide": 2} for i in range(3)]
    t = ChurnTree(q, technique="panes")
    t.process_columns(np.arange(0, 20, dtype=np.int64), np.arange(20, dtype=np.int64))
    t.change(30, add=[{"id": "n0", "aggregate": "sum", "range": 6, "slide": 3}])
    t.process_columns(np.arange(30, 40, dtype=np.int64), np.arange(10, dtype=np.int64))
    t.change(50, remove=["q1"])
    blob = t.snapshot()
    m, arrays = unpack(blob)
    assert m["version"] == 2 and [x["id"] for x in m["queries"]] == ["q0", "q1", "q2", "n0"]
    assert len(t.gens) == 2
    for i, g in enumerate(t.gens):
        gm, _ = unpack(arrays[f"gen{i}"].tobytes())
        assert "queries" not in gm and set(m["gens"][i]) == {"t_start", "late_seen"}
        assert np.array_equal(arrays[f"gen{i}/qmap"], g.qmap)
    # version 1: each generation's snapshot with its queries, the domains in the JSON
    gens_v1 = [
        {**gm, **{k: arrays[f"gen{i}/{k}"].tolist() for k in ("qmap", "lo", "hi", "ehi")}}
        for i, gm in enumerate(m["gens"])
    ]
    v1 = {k: v for k, v in arrays.items() if "/" not in k}
    v1["meta"] = np.frombuffer(json.dumps({**m, "version": 1, "gens": gens_v1}).encode(), np.uint8)
    for i, g in enumerate(t.gens):
        v1[f"gen{i}"] = np.frombuffer(savez(unpack(g.tree.snapshot())[1]), np.uint8)
    rest = (np.arange(50, 80, dtype=np.int64), np.arange(30, dtype=np.int64))
    want = t.process_columns(*rest)
    for data in (blob, savez(v1)):
        r = ChurnTree.restore(data)
        assert [[x.id for x in g.tree.queries] for g in r.gens] == [
            ["q0", "q1", "q2", "n0"],
            ["q0", "q2", "n0"],
        ]
        got = r.process_columns(*rest)
        assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))


_BOUND = st.one_of(
    st.just(int(INF)), st.just(-(1 << 62)), st.integers(min_value=-(10**6), max_value=10**13)
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 5000), st.integers(1, 5000), _BOUND, _BOUND),
        min_size=0,
        max_size=12,
    )
)
def test_last_end_is_the_query_by_query_bound(rows):
    """A generation's ``last_end`` (numpy) equals the query-by-query loop on every mix of open
    and capped domains, including a change before anything was fed (hi = T_FIRST)."""
    qs = [
        QuerySpec(f"q{i}", get_aggregate("sum"), r, s, "time")
        for i, (r, s, _, _) in enumerate(rows)
    ]
    n = len(rows)
    g = _Gen(
        SimpleNamespace(queries=qs),  # only the queries are read
        0,
        np.arange(n, dtype=np.int64),
        np.full(n, NEG_INF, np.int64),
        np.array([h for *_, h, _ in rows], dtype=np.int64),
        np.array([e for *_, e in rows], dtype=np.int64),
        QueryColumns.of(qs),
    )
    assert g.last_end() == _last_end_loop(g)


def _last_end_loop(g) -> int:
    """``_Gen.last_end`` query by query: per query the end of the last window starting before
    ``hi``, capped at ``ehi`` (INF: open ended)."""
    best = NEG_INF
    for q, hi, ehi in zip(g.tree.queries, g.hi, g.ehi):
        if hi == INF and ehi == INF:
            return INF
        end = INF if hi == INF else (-(-int(hi) // q.slide) - 1) * q.slide + q.range
        best = max(best, min(end, int(ehi)))
    return best
