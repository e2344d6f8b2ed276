"""The cluster tests' workload: mixed time windows (tumbling, sliding, range not a multiple of
the slide) and a few count windows over three DEBS streams, and a WeaveShare plan of them dealt
over the nodes; one definition so that every cluster test runs the same kind of plan."""

from __future__ import annotations

import numpy as np

from placement.plan import Node, Plan
from placement.queries import Query
from placement.trees import CostModel
from placement.weaveshare import weaveshare

STREAMS = ("mf01", "mf02", "mf03")
AGGS = ("sum", "count", "avg", "min", "max")
SLIDES = (100, 200, 250, 400, 500, 750, 1000, 2000, 3000)
RATE_HZ = 100


def make_queries(n_time: int = 54, seed: int = 3) -> list[Query]:
    """Mixed ranges/slides in ms: multiples (tumbling and sliding) and r mod s != 0, r >= s
    (Spark refuses slide > range), plus a few count windows."""
    rng = np.random.default_rng(seed)
    qs = []
    for i in range(n_time):
        s = int(rng.choice(SLIDES))
        k = int(rng.integers(1, 6))
        r = s * k + (int(rng.integers(1, s)) if i % 3 == 0 else 0)
        qs.append(Query(f"q{i:03d}", r, s, AGGS[i % len(AGGS)], STREAMS[i % 3], "time"))
    for j, (r, s, agg) in enumerate([(50, 20, "sum"), (100, 100, "max"), (64, 24, "avg")]):
        qs.append(Query(f"c{j}", r, s, agg, STREAMS[j], "count"))
    return qs


def make_plan(queries, n_nodes: int = 2, slicing: str = "pairs") -> dict:
    """WeaveShare trees dealt round-robin (by descending cost) over ``n_nodes`` nodes."""
    rates = {s: RATE_HZ / 1000.0 for s in STREAMS}  # tuples per ms
    model = CostModel("slickdeque", rates, slicing=slicing)
    trees = sorted(weaveshare(queries, model), key=lambda t: -t.cost)
    nodes = [Node(f"node-{i}") for i in range(n_nodes)]
    for i, t in enumerate(trees):
        nodes[i % n_nodes].trees.append(t)
    return Plan("WG_TN", "slickdeque", nodes, rates).to_dict()
