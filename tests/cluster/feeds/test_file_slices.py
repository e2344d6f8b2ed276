"""``feed_file_slices`` (a watched file in sliced mode) without Ray: each stream's slices are cut
by the deployment's plan, stand for every tuple once, and fold to the brute force's answers."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from cluster.feeds.sliced import feed_file_slices
from cluster.node.slice_churn import lineage_plan
from executors.oracle import brute_force
from executors.slice_input import SLICE_COLUMNS, SlicedExecutionTree


class _Dep:
    """What ``feed_file_slices`` needs of a deployment: streams, their plans, ``feed``."""

    streams = ["a", "b"]

    def __init__(self):
        self.fed: list[tuple[str, pa.RecordBatch]] = []

    def slice_plan(self, stream):
        return lineage_plan({(10, 5)} if stream == "a" else {(7, 7)}, [23])

    def feed(self, stream, batch):
        self.fed.append((stream, batch))


def test_a_file_becomes_each_streams_slices():
    rng = np.random.default_rng(3)
    ts = np.sort(rng.integers(0, 60, 200))
    t = pa.table({"ts_ms": ts, "a": rng.integers(-9, 9, 200), "b": rng.normal(size=200)})
    dep = _Dep()
    fed = feed_file_slices(dep, t, batch_rows=16)
    assert fed == sum(b.num_rows for _, b in dep.fed) and {s for s, _ in dep.fed} == {"a", "b"}
    for s, r in (("a", (10, 5)), ("b", (7, 7))):
        bs = [b for x, b in dep.fed if x == s]
        assert all(b.num_rows <= 16 for b in bs)
        sl = pa.Table.from_batches(bs)
        assert set(SLICE_COLUMNS) <= set(sl.schema.names)
        assert sum(sl.column("count").to_pylist()) == 200  # every tuple once
        starts = sl.column("slice_start").to_numpy()
        ends = sl.column("slice_end").to_numpy()
        assert not np.any((starts < 23) & (ends > 23))  # the change point cuts
        q = {"id": "q", "aggregate": "sum", "range": r[0], "slide": r[1]}
        tree = SlicedExecutionTree([q])
        got = tree.process_slices(sl).to_pylist() + tree.flush().to_pylist()
        want, _ = brute_force([q], ts, t.column(s).to_numpy())
        assert [(x["window_start"], x["window_end"]) for x in got] == [w[1:3] for w in want]
        np.testing.assert_allclose([x["value"] for x in got], [w[3] for w in want], rtol=1e-9)


class _StaticDep:
    """A deployment whose trees never change (``weaveplace run`` over a directory): no
    ``slice_plan``, only the union of its trees' edges."""

    streams = ["a"]

    def __init__(self):
        self.fed: list[tuple[str, pa.RecordBatch]] = []

    def edge_classes(self, stream):
        from executors.edges import edge_classes

        return edge_classes([(10, 5)])

    def feed(self, stream, batch):
        self.fed.append((stream, batch))


def test_a_static_deployment_is_cut_at_its_trees_edges():
    ts = np.arange(0, 40, 3)
    dep = _StaticDep()
    feed_file_slices(dep, pa.table({"ts_ms": ts, "a": ts}), batch_rows=100)
    sl = pa.Table.from_batches([b for s, b in dep.fed if s == "a"])
    assert sl.column("slice_start").to_pylist() == [0, 5, 10, 15, 20, 25, 30, 35]
    assert sum(sl.column("count").to_pylist()) == ts.shape[0]
