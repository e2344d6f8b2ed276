"""Run by test_answer_routes.py (next to this file) in a subprocess: every feed/answer route of
a live run on a multi-node Ray cluster, with Spark ``local[2]`` or a standalone Spark master.

Why a subprocess: as in ``multinode_driver.py`` (its docstring says more), one process can be
connected to one Ray only, and the test session's embedded Ray must stay undisturbed; a hang
or crash here is ended by the parent killing this process group (the Cluster's reaper then
stops its nodes).  The caller sets ``RAY_TMPDIR`` (private, short),
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (Ray's node IP is then 127.0.0.1, where the GCS listens)
and ``RAY_AUTH_MODE=token`` (the nodes check the token of ``~/.ray/auth_token``).

Usage: ``python multinode_routes_driver.py JOB.json``.  The job names the plans, the data and
the phases: each a name, a Spark master (and conf, and optionally a log line to wait for: a
standalone worker still starting) and its runs (``{name, plan, mode, feed, answers,
batch_rows, faults}``).  One ``ray.cluster_utils.Cluster`` (head + ``ray_workers`` workers, 1
CPU and an 80 MiB object store each) serves every phase (its start-up is the dearest part);
each run is one ``cluster.runs.file_run.run_file`` attached to it by address (plan nodes pinned to Ray
nodes round robin), its outputs in ``OUT/<name>/``.  ``OUT/result.json`` holds the Ray nodes,
what a client without a token gets from them, and per phase the Spark master, the run wall
times and where Spark tasks ran (process, interpreter, a marker from the environment of a
standalone worker, the Ray they are attached to).
"""

from __future__ import annotations

import json
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

MIB = 1 << 20
NODE = dict(num_cpus=1, object_store_memory=80 * MIB, node_ip_address="127.0.0.1")
HEAD_RESOURCE = "node:__internal_head__"


def _task_env(_):
    """Spark task body: where this task runs (process, environment) and the Ray it is
    attached to (the executor feed's tasks attached this reused Python worker)."""
    import os

    import ray

    yield {
        "pid": os.getpid(),
        "marker": os.environ.get("WEAVEPLACE_SPARK_WORKER"),
        "python": sys.executable,
        "ray_address": ray.get_runtime_context().gcs_address if ray.is_initialized() else None,
        "ray_auth_mode": os.environ.get("RAY_AUTH_MODE"),
    }


PROBE = """
import sys
from ray._raylet import GcsClient
from ray.exceptions import AuthenticationError
try:
    GcsClient(address=sys.argv[1]).internal_kv_get(b"probe", None, timeout=10)
    print("open")
except AuthenticationError:
    print("refused")
except Exception as e:
    print("error", type(e).__name__)
"""


def tokenless_probe(address: str):
    """Ask the cluster, as a client without a token, in a subprocess running alongside the
    runs; ``.communicate()`` gives ``refused`` when the cluster checks tokens (then whoever
    attached, the Spark tasks too, did so with the token)."""
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env["RAY_AUTH_MODE"] = "disabled"
    return subprocess.Popen(
        [sys.executable, "-c", PROBE, address],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@contextmanager
def ray_worker_removed_at(cluster, at_batch: int | None):
    """While a run is in this context, the Ray worker node(s) leave the cluster just before
    batch ``at_batch`` (pieces on the executor feed) is fed: the drill's clock
    (``Deployment.fire_faults``, which both feeds call) is where the real failure happens,
    so it falls between the same batches in every run."""
    if at_batch is None:
        yield
        return
    from cluster.deployment.deployment import Deployment

    orig = Deployment.fire_faults
    gone: list = []

    def fire(self, batch_no: int) -> None:
        if batch_no >= at_batch and not gone:
            gone.extend(n.node_id for n in list(cluster.worker_nodes))
            for n in list(cluster.worker_nodes):
                cluster.remove_node(n, allow_graceful=True)
        orig(self, batch_no)

    Deployment.fire_faults = fire
    try:
        yield gone
    finally:
        Deployment.fire_faults = orig


def run_phase(phase: dict, job: dict, address: str, out: Path, cluster) -> dict:
    """One Spark session (``phase["master"]``) and its runs, each a ``run_file`` attached to
    the cluster at ``address``; the session is stopped before the next phase (and before the
    cluster: its Python workers are attached to it)."""
    from cluster.deployment.options import DeploymentOptions
    from cluster.feeds.parquet import spark_session
    from cluster.runs.file_run import run_file
    from cluster.runs.options import FileFeedOptions, RuntimeOptions

    t1 = time.perf_counter()
    ready = phase.get("ready")  # a standalone worker still starting: wait for its log line
    while ready and ready["text"] not in Path(ready["log"]).read_text(errors="replace"):
        if time.perf_counter() - t1 > ready["timeout_s"]:
            return {"error": f"{phase['master']}: no {ready['text']!r} in {ready['log']}"}
        time.sleep(0.2)
    t_ready = time.perf_counter()
    spark = spark_session(phase["master"], conf=phase.get("spark_conf"))
    try:
        sc = spark.sparkContext
        res: dict = {
            "waited_s": t_ready - t1,
            "startup_s": time.perf_counter() - t_ready,
            "master": sc.master,
            "parallelism": sc.defaultParallelism,
            "driver_pid": os.getpid(),
            "runs": {},
        }
        for run in phase["runs"]:
            t2 = time.perf_counter()
            with ray_worker_removed_at(cluster, run.get("remove_ray_workers_at")) as gone:
                r = run_file(
                    job["plans"][run["plan"]],
                    job["data"],
                    out / run["name"],
                    runtime=RuntimeOptions(ray_address=address, spark=spark),
                    deployment=DeploymentOptions(
                        mode=run["mode"],
                        max_in_flight=2,
                        checkpoint_every=run.get("checkpoint_every"),
                        faults=run.get("faults") or (),
                        answers=run["answers"],
                        out_dir=out / run["name"],
                        pin_nodes=True,  # plan nodes on Ray nodes, as attached by address
                    ),
                    feed=FileFeedOptions(batch_rows=run["batch_rows"], route=run["feed"]),
                )
            res["runs"][run["name"]] = {
                "wall_s": time.perf_counter() - t2,
                "replacements": r.replacements,
                "additions": r.additions,
                "ray_nodes_removed": gone,
            }
        # where Spark tasks run: one task per core slot, after the runs (same executors)
        n = max(2, sc.defaultParallelism)
        res["tasks"] = sc.parallelize(range(n), n).mapPartitions(_task_env).collect()
    finally:
        spark.stop()
    return res


def main(job_path: str) -> None:
    import ray
    from ray.cluster_utils import Cluster

    from cluster.runtime.ray_runtime import RayRuntime

    t0 = time.perf_counter()
    job = json.loads(Path(job_path).read_text())
    out = Path(job["out"])
    Path(os.environ["RAY_TMPDIR"], "ray").mkdir(parents=True, exist_ok=True)
    cluster = Cluster(
        initialize_head=True,
        head_node_args=dict(NODE, include_dashboard=False, temp_dir=os.environ["RAY_TMPDIR"]),
    )
    res: dict = {"phases": {}}
    try:
        for _ in range(job["ray_workers"]):
            cluster.add_node(**NODE)
        cluster.wait_for_nodes()
        res["ray_startup_s"] = time.perf_counter() - t0
        with RayRuntime(address=cluster.address) as rt:  # runs below borrow this connection
            assert not rt.owned
            nodes = [n for n in ray.nodes() if n["Alive"]]
            res["ray_nodes"] = {
                "head": [n["NodeID"] for n in nodes if HEAD_RESOURCE in n["Resources"]],
                "workers": sorted(
                    n["NodeID"] for n in nodes if HEAD_RESOURCE not in n["Resources"]
                ),
                "ips": sorted({n["NodeManagerAddress"] for n in nodes}),
                "address": cluster.address,
            }
            probe = tokenless_probe(cluster.address)
            for phase in job["phases"]:  # one Spark session per phase, one after the other
                res["phases"][phase["name"]] = run_phase(phase, job, cluster.address, out, cluster)
            pout, perr = probe.communicate(timeout=90)
            res["tokenless_probe"] = (pout.strip().splitlines() or [perr.strip()[-300:]])[-1]
    finally:
        cluster.shutdown()
    res["total_s"] = time.perf_counter() - t0
    (out / "result.json").write_text(json.dumps(res, indent=1, default=str))


if __name__ == "__main__":
    main(sys.argv[1])
