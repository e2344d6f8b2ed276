"""NodeCore (the logic inside a NodeActor) and plan checks, without starting Ray."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from support.plan_dicts import plan

from cluster.answers.blocks import concat_answers
from cluster.answers.sink import read_answers
from cluster.deployment.specs import DeploymentError, node_specs
from cluster.node.core import NodeCore, pick_technique
from executors import ExecutionTree

Q1 = [
    {"id": "a", "aggregate": "sum", "range": 1000, "slide": 300, "kind": "time"},
    {"id": "b", "aggregate": "sum", "range": 500, "slide": 500, "kind": "time"},
]
Q2 = [{"id": "c", "aggregate": "max", "range": 700, "slide": 200, "kind": "time"}]
TREES = [
    {"id": "t0", "stream": "mf01", "queries": Q1},
    {"id": "t1", "stream": "mf02", "queries": Q2},
]


def data(n=4000, seed=0, jitter=0):
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, 20_000, n)).astype(np.int64)
    if jitter:  # some out-of-order tuples, to produce late ones
        ts = ts + rng.integers(-jitter, 1, n) * (rng.random(n) < 0.05)
    return pa.record_batch(
        {
            "ts_ms": ts,
            "mf01": rng.integers(0, 100, n),
            "mf02": rng.integers(0, 100, n),
            "other": np.zeros(n),
        }
    )


def run_direct(batch, step, lateness=0):
    out = []
    trees = {
        "t0": (ExecutionTree(Q1, allowed_lateness=lateness), "mf01"),
        "t1": (ExecutionTree(Q2, allowed_lateness=lateness), "mf02"),
    }
    for i in range(0, batch.num_rows, step):
        b = batch.slice(i, step)
        for t, s in trees.values():
            out.append(t.process(b.column("ts_ms").to_numpy(), b.column(s).to_numpy()))
    for t, _ in trees.values():
        out.append(t.flush())
    late = sum(t.late.count for t, _ in trees.values())
    return concat_answers(out).sort_by(
        [("query_id", "ascending"), ("window_start", "ascending")]
    ), late


@pytest.mark.parametrize("lateness", [0, 150])
def test_node_equals_trees_and_snapshot_resumes(lateness):
    batch = data(jitter=400)
    ref, ref_late = run_direct(batch, 1000, lateness)
    assert ref_late > 0
    node = NodeCore("n0", TREES, allowed_lateness=lateness)
    parts = []
    for i in range(0, batch.num_rows, 700):  # other batch size: same answers
        node.ingest(None, batch.slice(i, 700), seq=i // 700)
        if i // 700 == 2:
            blob, ans, seq = node.checkpoint()
            parts.append(ans)
            assert seq == 2
    node.flush()
    got = concat_answers(parts + [node.drain()]).sort_by(
        [("query_id", "ascending"), ("window_start", "ascending")]
    )
    assert got.equals(ref)
    assert node.metrics()["late_tuples"] == ref_late == node.late().num_rows
    # restore the checkpoint on a fresh node and replay the rest
    node2 = NodeCore("n0", TREES, allowed_lateness=lateness)
    assert node2.restore(blob) == 2
    for i in range(3 * 700, batch.num_rows, 700):
        node2.ingest(None, batch.slice(i, 700))
    node2.flush()
    got2 = concat_answers([parts[0], node2.drain()]).sort_by(
        [("query_id", "ascending"), ("window_start", "ascending")]
    )
    assert got2.equals(ref)
    assert node2.late().equals(node.late())


def test_late_since_returns_only_new_late_tuples():
    """``late(since)``: the suffix of each tree's late tuples after ``since[tree]`` (what a
    live stream writes per micro-batch); the suffixes add up to ``late()``."""
    batch = data(jitter=400)
    node = NodeCore("n0", TREES, allowed_lateness=0)
    since, parts = {}, []
    for i in range(0, batch.num_rows, 500):
        node.ingest(None, batch.slice(i, 500))
        new = node.late(since)
        for tid in set(new.column("tree_id").to_pylist()):
            since[tid] = since.get(tid, 0) + new.column("tree_id").to_pylist().count(tid)
        parts.append(new)
    assert node.late(since).num_rows == 0
    whole = node.late()
    key = [("tree_id", "ascending"), ("ts_ms", "ascending"), ("value", "ascending")]
    assert whole.num_rows > 10 and sum(p.num_rows for p in parts) == whole.num_rows
    assert pa.concat_tables(parts).sort_by(key).equals(whole.sort_by(key))


def test_ingest_single_stream_and_errors():
    node = NodeCore("n0", TREES)
    b = data(100)
    node.ingest("mf02", b)
    assert node.metrics()["stream_tuples"] == {"mf01": 0, "mf02": 100}
    node.ingest("other", b)  # a column no tree reads: ignored
    with pytest.raises(KeyError, match="mf09"):
        node.ingest("mf09", b)
    with pytest.raises(KeyError, match="ts_ms"):
        node.ingest(None, pa.record_batch({"mf01": np.arange(3)}))


def test_pick_technique_falls_back_for_mixed_invertibility():
    assert pick_technique("slickdeque_inv", ["max"]) == "slickdeque"
    assert pick_technique("slickdeque_inv", ["sum"]) == "slickdeque_inv"
    assert pick_technique("slickdeque_noninv", ["avg"]) == "slickdeque"
    assert pick_technique("flatfit", ["avg"]) == "flatfit"


Q3 = [{"id": "d", "aggregate": "min", "range": 900, "slide": 300, "kind": "time"}]


def test_adopted_trees_resume_exactly_and_skip_seen_batches():
    """Node A checkpoints after batch 2, keeps going to batch 4 and is lost; node B adopts A's
    trees from that snapshot and replays batches 3-4 to them only.  A's committed answers +
    B's answers equal the trees run directly (no loss, no duplicates); a batch B's trees get
    twice (replay, then the live feed) counts once."""
    batch = data(jitter=400)
    ref, ref_late = run_direct(batch, 700, lateness=150)
    other = ExecutionTree(Q3, allowed_lateness=150)
    a = NodeCore("A", TREES, allowed_lateness=150)
    b = NodeCore("B", [{"id": "t2", "stream": "mf02", "queries": Q3}], allowed_lateness=150)
    parts = [batch.slice(i, 700) for i in range(0, batch.num_rows, 700)]
    committed = []
    for seq, p in enumerate(parts[:5]):
        a.ingest(None, p, seq)
        b.ingest(None, p, seq)
        if seq == 2:
            blob, ans, _ = a.checkpoint()
            committed.append(ans)
    assert a.drain().num_rows > 0  # answers after the checkpoint die with A
    seqs = b.add_trees([t for t in TREES], blob)
    assert seqs == {"t0": 2, "t1": 2}
    for seq in (3, 4):
        b.ingest(None, parts[seq], seq, trees=["t0", "t1"])
    m = b.metrics()
    assert m["replayed_batches"] == 2 and m["batches"] == 5  # replays are not B's own input
    assert m["tuples"] == sum(p.num_rows for p in parts[:5])
    b_own = m["trees"]["t2"]["slices"]
    b.ingest(None, parts[4], 4)  # the live feed resends batch 4: every tree already has it
    assert b.metrics()["trees"]["t2"]["slices"] == b_own
    for seq, p in enumerate(parts[5:], start=5):
        b.ingest(None, p, seq)
    b.flush()
    everything = concat_answers(committed + [b.drain()]).sort_by(
        [("query_id", "ascending"), ("window_start", "ascending")]
    )
    got = everything.filter(
        pa.compute.is_in(everything.column("query_id"), value_set=pa.array(["a", "b", "c"]))
    )
    assert got.equals(ref)
    lt = b.late()
    assert (
        lt.filter(pa.compute.is_in(lt.column("tree_id"), value_set=pa.array(["t0", "t1"]))).num_rows
        == ref_late
        > 0
    )
    # B's own tree is untouched by the adoption and the resent batch
    d_ref = concat_answers(
        [other.process(p.column("ts_ms").to_numpy(), p.column("mf02").to_numpy()) for p in parts]
        + [other.flush()]
    )
    d_got = everything.filter(pa.compute.equal(everything.column("query_id"), "d"))
    assert d_ref.num_rows > 0 and d_got.equals(d_ref)
    b2 = NodeCore.from_snapshot(b.snapshot())  # a snapshot after adoption holds all trees
    assert sorted(b2.trees) == ["t0", "t1", "t2"] and b2.tree_seq["t0"] == len(parts) - 1


def test_add_trees_refusals():
    a = NodeCore("A", TREES)
    blob = a.snapshot()
    b = NodeCore("B", [{"id": "t1", "stream": "mf02", "queries": Q3}])
    with pytest.raises(ValueError, match="already hosts a tree 't1'"):
        b.add_trees(TREES, blob)
    assert sorted(b.trees) == ["t1"]  # nothing added when one tree is refused
    with pytest.raises(ValueError, match="has no tree 'x'"):
        b.add_trees([{"id": "x", "stream": "mf01", "queries": Q1}], blob)
    with pytest.raises(ValueError, match="answers"):
        b.add_trees([{"id": "t0", "stream": "mf01", "queries": Q2}], blob)
    with pytest.raises(ValueError, match="input_mode"):
        NodeCore("S", [], input_mode="slices").add_trees(TREES[:1], blob)
    assert b.add_trees(TREES[:1]) == {"t0": -1}  # fresh: the initial state
    assert b.streams == ["mf01", "mf02"]


def test_moved_trees_resume_exactly_and_old_host_drops_them():
    """Scale out at the NodeCore level: A checkpoints after batch 2, new node N adds t1 from
    that snapshot, A drops t1; then both go on.  A's committed answers + A's and N's later ones
    equal the trees run directly; A's snapshot no longer holds t1; undrained answers and
    unknown trees are refused."""
    batch = data(jitter=400)
    ref, ref_late = run_direct(batch, 700, lateness=150)
    a = NodeCore("A", TREES, allowed_lateness=150)
    parts = [batch.slice(i, 700) for i in range(0, batch.num_rows, 700)]
    for seq, p in enumerate(parts[:3]):
        a.ingest(None, p, seq)
    with pytest.raises(ValueError, match="undrained answers"):
        a.drop_trees(["t1"])
    blob, committed, _ = a.checkpoint()
    n = NodeCore("N", [], allowed_lateness=150)
    assert n.add_trees(TREES[1:], blob) == {"t1": 2}
    with pytest.raises(ValueError, match=r"no tree\(s\) \['x'\]"):
        a.drop_trees(["t1", "x"])
    assert a.drop_trees(["t1"]) == 1
    assert sorted(a.trees) == ["t0"] and a.streams == ["mf01"]
    assert [t["id"] for t in a.spec["trees"]] == ["t0"]
    for seq, p in enumerate(parts[3:], start=3):
        a.ingest(None, p, seq)
        n.ingest(None, p, seq)
    a.flush()
    n.flush()
    got = concat_answers([committed, a.drain(), n.drain()]).sort_by(
        [("query_id", "ascending"), ("window_start", "ascending")]
    )
    assert got.equals(ref)
    assert a.metrics()["late_tuples"] + n.metrics()["late_tuples"] == ref_late > 0
    assert sorted(NodeCore.from_snapshot(a.snapshot()).trees) == ["t0"]


def test_cutty_plan_reaches_the_trees_and_answers_as_pairs():
    """The plan's ``slicing`` goes into every tree spec; a node builds Cutty trees from it
    (snapshots keep them Cutty) and answers exactly as Pairs trees; a bad value is refused;
    re-placement after a lost node prices trees under the plan's slicing."""
    from cluster.deployment.running_plan import Layout
    from placement.plan import single_node_plan
    from placement.queries import Query
    from placement.trees import CostModel

    qs = [
        {"id": "x", "stream": "mf01", "aggregate": "sum", "range": 1000, "slide": 300},
        {"id": "y", "stream": "mf01", "aggregate": "max", "range": 700, "slide": 200},
    ]
    p = {
        **plan(
            [{"id": "n", "trees": [{"id": "t", "queries": ["x"]}, {"id": "u", "queries": ["y"]}]}],
            qs,
        ),
        "slicing": "cutty",
        "streams": {"mf01": {"rate": 0.2}},
    }
    specs = node_specs(p)
    assert {t["slicing"] for t in specs[0]["trees"]} == {"cutty"}
    assert {t["slicing"] for t in node_specs({**p, "slicing": "pairs"})[0]["trees"]} == {"pairs"}
    assert "slicing" in node_specs({k: v for k, v in p.items() if k != "slicing"})[0]["trees"][0]
    with pytest.raises(DeploymentError, match="plan slicing: expected pairs or cutty, got 'x'"):
        node_specs({**p, "slicing": "x"})
    cut = NodeCore("n", specs[0]["trees"])
    pairs = NodeCore("n", node_specs({**p, "slicing": "pairs"})[0]["trees"])
    assert {t.slicing for t in cut.trees.values()} == {"cutty"}
    assert {t["slicing"] for t in cut.metrics()["trees"].values()} == {"cutty"}
    b = data()
    cut.ingest(None, b.slice(0, 1500), seq=0)
    first = cut.drain()
    cut = NodeCore.from_snapshot(cut.snapshot())
    assert {t.slicing for t in cut.trees.values()} == {"cutty"}
    cut.ingest(None, b.slice(1500), seq=1)
    cut.flush()
    pairs.ingest(None, b)
    pairs.flush()
    key = [("query_id", "ascending"), ("window_start", "ascending")]
    want = pairs.drain().sort_by(key)
    assert want.num_rows > 50 and pa.concat_tables([first, cut.drain()]).sort_by(key).equals(want)
    lay = Layout(p)
    assert lay.model.slicing == "cutty" and lay.plan.slicing == "cutty"
    model = CostModel("slickdeque", {"mf01": 0.2}, slicing="cutty")
    t = model.tree([Query("x", 1000, 300, "sum", "mf01")])
    assert [x.cost for x in lay.plan.trees if x.queries[0].id == "x"] == [t.cost]
    assert single_node_plan("o", [t], model, {"mf01": 0.2}).to_dict()["slicing"] == "cutty"


def test_node_core_writes_parts_with_one_schema(tmp_path):
    """A node writes its answers at a checkpoint; the value type is the run's (float64 here
    for an int-only node), and a checkpoint with nothing new removes a stale part of that
    name (a retry that has nothing to write, once the driver commits it)."""
    from cluster.answers.sink import AnswerCommits
    from cluster.node.core import NodeCore

    trees = [
        {
            "id": "t0",
            "stream": "mf01",
            "queries": [
                {"id": "a", "aggregate": "sum", "range": 500, "slide": 100, "kind": "time"},
                {"id": "b", "aggregate": "max", "range": 300, "slide": 300, "kind": "time"},
            ],
        }
    ]
    ts = np.arange(0, 5000, 7, dtype=np.int64)
    v = (ts * 31 % 97).astype(np.int64)
    ref = NodeCore("n", trees)
    ref.ingest(None, pa.table({"ts_ms": ts, "mf01": v}))
    ref.flush()
    want = ref.drain()
    node = NodeCore("n", trees)
    node.ingest(None, pa.table({"ts_ms": ts[:300], "mf01": v[:300]}), seq=0)
    commits = AnswerCommits(tmp_path)  # the driver's side: puts each staged part in place
    blob, part, seq = node.checkpoint_write(str(tmp_path), "000001", "float64")
    assert seq == 0 and part.path == "node=n/part-000001.parquet" and part.num_rows > 0
    assert not (tmp_path / part.path).exists()  # staged only, until committed
    commits.commit(part)
    node.ingest(None, pa.table({"ts_ms": ts[300:], "mf01": v[300:]}), seq=1)
    node.flush()
    busy, answer_s = node.counters["busy_s"], node.counters["answer_s"]
    commits.commit(node.checkpoint_write(str(tmp_path), "000002", "float64")[1])
    assert (tmp_path / "node=n" / "part-000002.parquet").exists()
    # writing answers is answer time, never the trees' busy time
    assert node.counters["busy_s"] == busy and node.counters["answer_s"] > answer_s > 0
    got = read_answers(tmp_path)
    assert got.schema.field("value").type == pa.float64()
    assert got.column("value").to_pylist() == [float(x) for x in want.column("value").to_pylist()]
    assert got.select(["query_id", "window_start", "window_end"]).equals(
        want.select(["query_id", "window_start", "window_end"])
    )
    # a restored node re-running round 2 with nothing pending: the part goes away
    again = NodeCore.from_snapshot(node.snapshot())
    retry = again.checkpoint_write(str(tmp_path), "000002", "float64")[1]
    assert retry.num_rows == 0
    commits.commit(retry)
    assert not (tmp_path / "node=n" / "part-000002.parquet").exists()
    with pytest.raises(ValueError, match="declared int64"):
        bad = NodeCore(
            "m", [{**trees[0], "queries": [{**trees[0]["queries"][0], "aggregate": "avg"}]}]
        )
        bad.ingest(None, pa.table({"ts_ms": ts, "mf01": v}))
        bad.flush()
        bad.checkpoint_write(str(tmp_path), "x", "int64")


def test_a_snapshot_lists_no_query_twice_and_rebuilds_its_spec(tmp_path):
    """A node snapshot's meta names its trees without their queries (each tree's own
    snapshot lists them); ``from_snapshot`` rebuilds the whole spec from those, and a node
    rebuilt so answers the rest of the input as the original does.  A snapshot written with
    the queries in its meta (before) still loads."""
    import json

    from cluster.node.churn import ChurnNodeCore
    from cluster.node.snapshot import load_snapshot
    from executors.array_pack import pack

    batch = data()
    head, tail = batch.slice(0, 2000), batch.slice(2000)
    for cls in (NodeCore, ChurnNodeCore):
        node = cls("n", [dict(t, queries=[dict(q) for q in t["queries"]]) for t in TREES])
        node.ingest(None, head, seq=0)
        if cls is ChurnNodeCore:  # a lineage that grew: the spec lists what it gained
            node.change_tree("t1", 20_000, [dict(Q2[0], id="d", slide=100)], ["c"])
        blob, _, _ = node.checkpoint()  # the answers so far go with it: not the rebuilt's
        arrays, meta = load_snapshot(blob)
        assert all("queries" not in t for t in meta["spec"]["trees"])
        assert b'"aggregate"' not in arrays["meta"].tobytes()
        again = cls.from_snapshot(blob)
        assert again.spec == json.loads(json.dumps(node.spec))
        assert [q["id"] for q in again.spec["trees"][1]["queries"]] == (
            ["c", "d"] if cls is ChurnNodeCore else ["c"]
        )
        # the format before: the spec with its queries in the meta
        text = json.dumps({**meta, "spec": node.spec}).encode()
        old = pack({**arrays, "meta": np.frombuffer(text, np.uint8)})
        assert load_snapshot(old)[1]["spec"]["trees"][0]["queries"] == Q1
        assert cls.from_snapshot(old).spec == again.spec
        both = []
        for n in (node, again):
            n.ingest(None, tail, seq=1)
            n.flush()
            both.append(n.drain())
        assert both[0].num_rows > 0 and both[0].equals(both[1])
