"""Pinning (cluster/deployment/pinning.py): plan nodes pinned to Ray nodes, and a Ray node
leaving mid-stream.

``pin_round_robin`` and the fault-drill checks are checked first, without Ray.  Then a
``ray.cluster_utils.Cluster`` (head + 2 workers on 127.0.0.1) runs in a subprocess
(``multinode_driver.py`` next to this file, whose docstring says why); this test builds the plan
and the data, runs the same plan on the session's single-node Ray as the reference, and checks
what the subprocess saw: each actor on the Ray node it was pinned to (4 plan nodes round robin
over 3 Ray nodes), the fault-free answers equal to the single-node run, and, after the Ray node
of ``node-1`` is removed and ``node-0``'s actor is killed, the answers still equal, ``node-1``'s
trees re-placed on the surviving plan nodes and ``node-0`` restarted on its own Ray node; a plan
node added after that (``add_node``) is pinned round robin over the Ray nodes still alive.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from helpers import run_cluster_driver
from support.plan_dicts import plan

from cluster.deployment.specs import DeploymentError, node_specs
from placement.plan import Node, Plan
from placement.queries import Query
from placement.trees import CostModel
from placement.weaveshare import weaveshare
from sim.debs_generator import generate_debs

STREAMS = ("mf01", "mf02", "mf03")
DRIVER = Path(__file__).with_name("multinode_driver.py")
TIMEOUT_S = 170  # a hard cap; the run takes ~25-40 s on this 2-core machine


def test_pin_round_robin_and_fault_drill_checks():
    from cluster.deployment.drills import check_faults
    from cluster.deployment.pinning import pin_round_robin

    assert pin_round_robin(["a", "b", "c", "d", "e"], ["w0", "w1", "head"]) == {
        "a": "w0",
        "b": "w1",
        "c": "head",
        "d": "w0",
        "e": "w1",
    }
    with pytest.raises(DeploymentError, match="no alive Ray node"):
        pin_round_robin(["a"], [])
    drill = check_faults(
        [
            {"kind": "lose", "node": "b", "at_batch": 7},
            {"kind": "kill", "node": "a", "at_batch": 3},
        ],
        ["a", "b"],
    )
    assert [(f["kind"], f["node"], f["at_batch"], f["fired"]) for f in drill] == [
        ("kill", "a", 3, False),
        ("lose", "b", 7, False),
    ]  # in firing order
    for faults, msg in [
        ([{"kind": "boom", "node": "a", "at_batch": 1}], r"faults\[0\]\.kind"),
        ([{"kind": "kill", "node": "a", "at_batch": True}], r"faults\[0\]\.at_batch"),
        (
            [
                {"kind": "lose", "node": "a", "at_batch": 1},
                {"kind": "kill", "node": "a", "at_batch": 1},
            ],
            "already lost",
        ),
        (
            [
                {"kind": "lose", "node": "a", "at_batch": 1},
                {"kind": "lose", "node": "b", "at_batch": 2},
            ],
            "loses every node",
        ),
    ]:
        with pytest.raises(DeploymentError, match=msg):
            check_faults(faults, ["a", "b"])
    with pytest.raises(DeploymentError, match="tree ids must be unique in a plan"):
        node_specs(
            plan(
                [
                    {"id": "n", "trees": [{"id": "t", "queries": ["x"]}]},
                    {"id": "m", "trees": [{"id": "t", "queries": ["y"]}]},
                ],
                [{"id": "x", "range": 4, "slide": 2}, {"id": "y", "range": 4, "slide": 2}],
            )
        )


def _plan(n_nodes: int = 4) -> dict:
    rng = np.random.default_rng(7)
    qs = []
    for i in range(24):
        s = int(rng.choice([200, 250, 500, 1000, 1500]))
        r = s * int(rng.integers(1, 5)) + (int(rng.integers(1, s)) if i % 3 == 0 else 0)
        qs.append(
            Query(f"q{i:02d}", r, s, ("sum", "max", "avg", "min")[i % 4], STREAMS[i % 3], "time")
        )
    qs.append(Query("c0", 40, 15, "sum", "mf02", "count"))
    rates = {s: 0.1 for s in STREAMS}
    trees = sorted(weaveshare(qs, CostModel("slickdeque", rates)), key=lambda t: -t.cost)
    nodes = [Node(f"node-{i}") for i in range(n_nodes)]
    for i, t in enumerate(trees):
        nodes[i % n_nodes].trees.append(t)
    return Plan("WG_TN", "slickdeque", nodes, rates).to_dict()


def test_added_node_goes_where_fewest_plan_nodes_run():
    """An added plan node's Ray node: the alive one hosting the fewest plan nodes, ties in
    pinning order (workers first, the head last): Ray nodes just launched for it first."""
    from cluster.deployment.pinning import least_placed

    alive = ["w1", "w2", "head"]  # w1, w2 just launched by Ray's autoscaler
    assert least_placed(alive, ["head"]) == "w1"
    assert least_placed(alive, ["head", "w1"]) == "w2"
    assert least_placed(alive, ["head", "w1", "w2"]) == "w1"
    assert least_placed(alive, ["w1", "w1", "w2", "gone"]) == "head"
    assert least_placed(["head"], ["head", "head"]) == "head"


@pytest.mark.scenario
@pytest.mark.cluster
def test_pinned_multinode_and_lost_ray_node(tmp_path, ray_session):
    from cluster.deployment.deployment import Deployment

    plan = _plan()
    assert all(n["trees"] for n in plan["nodes"])
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    data = tmp_path / "debs.parquet"
    generate_debs(data, duration_s=30, rate_hz=100, seed=5)

    # reference: the same plan on the session's single-node Ray, same batches
    batches = pq.read_table(data).to_batches(max_chunksize=250)
    with Deployment(plan) as dep:
        for b in batches:
            dep.feed(None, b)
        ref = dep.finish().answers
    assert ref.num_rows > 1000

    # the multi-node run: own Ray in a subprocess, own short RAY_TMPDIR (socket path limit)
    raytmp = tempfile.mkdtemp(prefix="wp-mn-", dir="/tmp")
    env = dict(os.environ, RAY_TMPDIR=raytmp, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    t0 = time.perf_counter()
    rc, log = run_cluster_driver(
        [sys.executable, str(DRIVER), str(tmp_path / "plan.json"), str(data), str(tmp_path)],
        env,
        DRIVER.parents[3],
        raytmp,
        TIMEOUT_S,
        "multi-node driver",
    )
    elapsed = time.perf_counter() - t0
    assert rc == 0, log[-3000:]
    res = json.loads((tmp_path / "result.json").read_text())

    # pinning: 4 plan nodes round robin over workers then head; the actors really are there
    ray_nodes = res["ray_nodes"]
    w0, w1 = ray_nodes["workers"]
    assert res["expected"] == {
        "node-0": w0,
        "node-1": w1,
        "node-2": ray_nodes["head"],
        "node-3": w0,
    }
    assert res["pins"] == res["expected"] == res["placement"]

    # answers: fault-free multi-node run == single-node run, row for row, bit for bit
    clean = pq.read_table(tmp_path / "clean.parquet")
    assert clean.equals(ref)

    # a Ray node left and node-0 was killed: still the same answers
    faulty = pq.read_table(tmp_path / "faulty.parquet")
    assert faulty.equals(ref)
    (rec,) = res["replacements"]
    assert rec["node"] == "node-1" and "Ray node" in rec["reason"] and "gone" in rec["reason"]
    assert rec["snapshot_seq"] == 2 and rec["moved"] == len(plan["nodes"][1]["trees"])
    assert set(rec["trees"].values()) <= {"node-0", "node-2", "node-3"}
    assert res["recoveries"] == {"node-0": 1, "node-2": 0, "node-3": 0, "node-4": 0}
    # plan node 4 -> the alive Ray node hosting the fewest plan nodes: the head (node-2 only;
    # w0 runs node-0 and node-3)
    (add,) = res["additions"]
    assert add["node"] == "node-4" and add["ray_node"] == ray_nodes["head"] and add["moved"] > 0
    after = res["placement_after"]
    head = ray_nodes["head"]
    assert after == {"node-0": w0, "node-2": head, "node-3": w0, "node-4": head}
    assert res["late_rows"] == [0, 0]
    print(
        f"multi-node: startup {res['startup_s']:.1f} s, driver {res['total_s']:.1f} s, "
        f"test {elapsed:.1f} s"
    )
