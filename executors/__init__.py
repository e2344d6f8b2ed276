"""executors: run one execution tree (queries over one stream sharing one slicing).

Public API::

    from executors import ExecutionTree, AGGREGATES, TECHNIQUES, brute_force
    tree = ExecutionTree([{"id": "q1", "aggregate": "max", "range": 10, "slide": 2}],
                         technique="slickdeque", allowed_lateness=0)
    answers = tree.process(ts, values)   # pyarrow Table: query_id, window_start, window_end, value
    answers = tree.flush()

Modules: ``aggregates`` (monoids, numeric primitives), ``slicing`` (edges, slices,
watermark/lateness), one module per final-aggregation technique (``panes``,
``panes_inv``, ``flatfat``, ``bint``, ``flatfit``, ``slickdeque_inv``,
``slickdeque_noninv``, ``twostacks``, ``daba``), ``tree`` (ExecutionTree),
``oracle`` (brute force); the micro-benchmarks are in ``sim.bench.executors``.  Never imports ray or pyspark.
"""

from . import (  # noqa: F401  (each registers its technique in executors.base, before .tree)
    bint,
    daba,
    flatfat,
    flatfit,
    panes,
    panes_inv,
    slickdeque_inv,
    slickdeque_noninv,
    twostacks,
)
from .aggregates import AGGREGATES, Aggregate, Primitive, get_aggregate
from .base import TECHNIQUES, FinalAggregator
from .oracle import brute_force
from .slicing import QuerySpec, StreamSlicer, edge_classes, edges_between, normalize_query
from .tree import ALL_TECHNIQUES, ExecutionTree, LateTuples

__all__ = [
    "AGGREGATES",
    "Aggregate",
    "Primitive",
    "get_aggregate",
    "TECHNIQUES",
    "FinalAggregator",
    "brute_force",
    "QuerySpec",
    "StreamSlicer",
    "edge_classes",
    "edges_between",
    "normalize_query",
    "ALL_TECHNIQUES",
    "ExecutionTree",
    "LateTuples",
]
