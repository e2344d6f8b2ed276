"""Run by test_pinning.py (next to this file) in a subprocess: a 3-node Ray cluster on this machine.

Why a subprocess: the test session shares one embedded Ray (tests/conftest.py) and a process can
be connected to only one Ray at a time.  Here a ``ray.cluster_utils.Cluster`` (head + 2 workers,
1 CPU and an 80 MiB object store each, all on 127.0.0.1, no dashboard) gets a process of its
own: it cannot disturb the shared Ray whatever the test order, and whatever happens here (a
hang, a crash) the parent kills this process group and the Cluster's reaper stops its nodes.

Usage: ``python multinode_driver.py PLAN.json DATA.parquet OUT_DIR``.  Writes to OUT_DIR
``clean.parquet`` and ``faulty.parquet`` (answers) and ``result.json`` (pins expected and
observed, re-placements, recoveries, timings).  The caller sets ``RAY_TMPDIR`` (a private, short
directory) and ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``: with it Ray resolves "this machine" to
127.0.0.1 instead of the first non-loopback address, so the driver reaches a GCS that listens on
127.0.0.1 only (otherwise ``ray.init`` rewrites ``127.0.0.1:port`` to ``<LAN IP>:port``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

MIB = 1 << 20
NODE = dict(num_cpus=1, object_store_memory=80 * MIB, node_ip_address="127.0.0.1")
HEAD_RESOURCE = "node:__internal_head__"


def main(plan_path: str, data_path: str, out_dir: str) -> None:
    import ray
    from ray.cluster_utils import Cluster

    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.runtime.ray_runtime import RayRuntime

    t0 = time.perf_counter()
    out = Path(out_dir)
    Path(os.environ["RAY_TMPDIR"], "ray").mkdir(parents=True, exist_ok=True)
    plan = json.loads(Path(plan_path).read_text())
    batches = pq.read_table(data_path).to_batches(max_chunksize=250)
    cluster = Cluster(
        initialize_head=True,
        head_node_args=dict(NODE, include_dashboard=False, temp_dir=os.environ["RAY_TMPDIR"]),
    )
    workers = [cluster.add_node(**NODE) for _ in range(2)]
    cluster.wait_for_nodes()
    res: dict = {"startup_s": time.perf_counter() - t0, "batches": len(batches)}
    try:
        with RayRuntime(address=cluster.address) as rt:  # the attach path of live runs
            assert not rt.owned
            nodes = [n for n in ray.nodes() if n["Alive"]]
            assert all(n["NodeManagerAddress"] == "127.0.0.1" for n in nodes)
            head = [n["NodeID"] for n in nodes if HEAD_RESOURCE in n["Resources"]]
            work = sorted(n["NodeID"] for n in nodes if HEAD_RESOURCE not in n["Resources"])
            order = work + head  # documented pinning order: workers first, the head last
            plan_nodes = [n["id"] for n in plan["nodes"]]
            res["expected"] = {nid: order[i % len(order)] for i, nid in enumerate(plan_nodes)}
            res["ray_nodes"] = {"head": head[0], "workers": work}

            # fault-free run, every plan node pinned
            with Deployment(plan, DeploymentOptions(pin_nodes=True, max_in_flight=2)) as dep:
                res["pins"] = {nid: n.ray_node for nid, n in dep.nodes.items()}
                res["placement"] = dep.placement()  # what the actors themselves report
                for b in batches:
                    dep.feed(None, b)
                clean = dep.finish()
            pq.write_table(clean.answers, out / "clean.parquet")

            # the worker hosting node-1 leaves mid-stream (node-1 is lost: its trees move to
            # the surviving plan nodes), then node-0's actor is killed (restarted, same pin),
            # then a plan node is added (pinned: to the alive Ray node hosting the fewest)
            victim_ray = res["expected"]["node-1"]
            victim = next(w for w in workers if w.node_id == victim_ray)
            with Deployment(plan, DeploymentOptions(pin_nodes=True, max_in_flight=2)) as dep:
                for i, b in enumerate(batches):
                    if i == 3:
                        dep.checkpoint()
                    if i == 5:
                        cluster.remove_node(victim, allow_graceful=True)
                    if i == 8:
                        ray.kill(dep.actor("node-0"), no_restart=True)
                    if i == 10:
                        dep.add_node()
                    dep.feed(None, b)
                faulty = dep.finish()
                res["placement_after"] = dep.placement()
            pq.write_table(faulty.answers, out / "faulty.parquet")
            res["replacements"] = faulty.replacements
            res["additions"] = faulty.additions
            res["recoveries"] = {nid: m["recoveries"] for nid, m in faulty.metrics["nodes"].items()}
            res["late_rows"] = [clean.late.num_rows, faulty.late.num_rows]
    finally:
        cluster.shutdown()
    res["total_s"] = time.perf_counter() - t0
    (out / "result.json").write_text(json.dumps(res, indent=1, default=str))


if __name__ == "__main__":
    main(*sys.argv[1:4])
