"""Run configurations more than one test module loads."""

from __future__ import annotations

#: explicit queries on two streams (one with an explicit ``kind``), named nodes with
#: capacities, ``exact: true``: the config tests' second base and the live tests' query set
EXPLICIT = {
    "workload": {
        "queries": [
            {"id": "a", "stream": "mf01", "aggregate": "max", "range": 10, "slide": 2},
            {
                "id": "b",
                "stream": "mf01",
                "aggregate": "max",
                "range": 6,
                "slide": 3,
                "kind": "time",
            },
            {"id": "c", "stream": "mf02", "aggregate": "avg", "range": 4, "slide": 4},
        ]
    },
    "streams": {"mf01": {"rate": 0.1}, "mf02": {"rate": 2}},
    "cluster": {"nodes": [{"id": "n0", "capacity": 50.0}, {"id": "n1", "capacity": 80}]},
    "placement": {"optimizers": "WG_I", "ie": "slickdeque", "preprocess": "classes", "exact": True},
    "run": {"output_dir": "out/y"},
}
