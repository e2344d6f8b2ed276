"""The feed and answer routes of a live run on a multi-node Ray cluster: every route shown
to work with plan nodes on different Ray nodes.

A ``ray.cluster_utils.Cluster`` (head + 1 worker on 127.0.0.1, checking tokens) runs in a
subprocess (``multinode_routes_driver.py`` next to this file; its docstring says why), first
with Spark ``local[2]``, then with a standalone Spark master + worker that this module starts (JVM
subprocesses, a free port, torn down whatever happens); one Ray cluster serves both, its
start-up being the dearest part.  Each feed (``driver | executors``) and answer route (``driver |
actors``) and mode (raw, sliced) goes through ``run_file`` attached to
that cluster by address, plan nodes pinned to its Ray nodes, and must give answers equal, row
for row, to

* the driver route on the test session's single-node Ray (same plan, same data), and
* a brute-force oracle independent of the code under test: every time window
  ``[k*s, k*s + r)`` holding a tuple, aggregated by numpy over a mask (Spark SQL's
  ``window()`` semantics, which tests/cluster/deployment/test_deployment.py checks our runs
  against), and count windows over stream positions (``count_oracle``).

Fault drills (a kill before any checkpoint, a node lost for good, a node added) run on both
feeds, with either answer route and in sliced mode; the answers must still be exactly the
fault-free ones.  On the executor feed a drill's ``at_batch`` counts pieces, the feed runs as
one Spark job per segment between drills, and a restored or adopting actor replays the logged
pieces by reading the file itself.

On the standalone master the Spark tasks run in the Python workers of the worker's executor
(a marker in the worker's environment proves it), attach to the Ray cluster with its token
(found by the attach itself: the worker's environment has no Ray settings) and push their
pieces to the pinned actors; nothing crosses the driver (``rows_fed`` 0).  Last, a real
multi-node failure: the Ray worker node leaves the cluster mid executor feed; the plan nodes
pinned there are lost for good and their trees re-placed on the head, exactly.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from helpers import run_cluster_driver
from support.cluster_oracles import assert_answers_equal, count_oracle
from support.cluster_plans import STREAMS, make_plan, make_queries

from cluster.runtime.ray_runtime import LOOPBACK_ENV
from placement.queries import Query
from sim.debs_generator import generate_debs

pytestmark = pytest.mark.cluster

DRIVER = Path(__file__).with_name("multinode_routes_driver.py")
REPO = DRIVER.parents[3]
TIMEOUT_S = 420  # a hard cap on the driver run (~60-90 s alone, ~3x that on a loaded machine)
# 3 plan nodes over 2 Ray nodes (workers first, then the head: node-0 and node-2 share one);
# a third Ray node costs a raylet and its workers on a 2-core machine and proves nothing more
RAY_WORKERS = 1
BATCH = 250  # rows (raw) or slices (sliced) per batch: ~10 batches, room for the drills
DRILL = [
    {"kind": "kill", "node": "node-0", "at_batch": 1},  # before any checkpoint: replay all
    {"kind": "lose", "node": "node-1", "at_batch": 3},  # trees re-placed on node-0, node-2
    {"kind": "add", "at_batch": 5},  # node-3, pinned round robin, trees move to it
]


# ----------------------------------------------------------------------------- oracle
def time_oracle(ts: np.ndarray, v: np.ndarray, q: Query) -> list[tuple]:
    """Every window ``[k*s, k*s + r)`` that holds a tuple, brute force (a mask per window)."""
    k = (int(ts.min()) - q.range) // q.slide + 1
    out = []
    while k * q.slide <= int(ts.max()):
        a = k * q.slide
        w = v[(ts >= a) & (ts < a + q.range)]
        if len(w):
            val = {
                "sum": w.sum(),
                "count": len(w),
                "avg": w.sum() / len(w),
                "min": w.min(),
                "max": w.max(),
            }[q.aggregate]
            out.append((q.id, a, a + q.range, float(val)))
        k += 1
    return out


def oracle(path: Path, queries: list[Query]) -> pa.Table:
    data = pq.read_table(path, columns=["ts_ms", "index", *STREAMS]).sort_by(
        [("ts_ms", "ascending"), ("index", "ascending")]
    )
    ts = data.column("ts_ms").to_numpy()
    rows = []
    for q in queries:
        v = data.column(q.stream).to_numpy()
        rows += time_oracle(ts, v, q) if q.kind == "time" else count_oracle(v, q)
    rows.sort(key=lambda r: (r[0], r[1]))
    cols = ["query_id", "window_start", "window_end", "value"]
    return pa.table({c: list(x) for c, x in zip(cols, zip(*rows))})


def test_time_oracle_small():
    """The oracle itself on a hand-checked case: r=5, s=2 over ts 0, 1, 4, 9."""
    ts, v = np.array([0, 1, 4, 9]), np.array([3, 5, 7, 11])
    got = time_oracle(ts, v, Query("q", 5, 2, "sum", "s", "time"))
    assert got == [
        ("q", -4, 1, 3.0),
        ("q", -2, 3, 8.0),
        ("q", 0, 5, 15.0),
        ("q", 2, 7, 7.0),
        ("q", 4, 9, 7.0),
        ("q", 6, 11, 11.0),
        ("q", 8, 13, 11.0),
    ]


# ----------------------------------------------------------------------------- workload
@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    d = tmp_path_factory.mktemp("routes_mn")
    path = d / "debs.parquet"
    n = generate_debs(path, duration_s=25, rate_hz=100, seed=13)
    queries = make_queries(n_time=18, seed=5)
    tq = [q for q in queries if q.kind == "time"]
    plans = {"raw": make_plan(queries, n_nodes=3), "sliced": make_plan(tq, n_nodes=3)}
    assert all(n["trees"] for p in plans.values() for n in p["nodes"])
    ids = {k: {q.id for q in (queries if k == "raw" else tq)} for k in plans}
    return {"dir": d, "path": path, "rows": n, "queries": queries, "plans": plans, "ids": ids}


@pytest.fixture(scope="module")
def reference(workload, ray_session):
    """The driver route on the session's single-node Ray, per plan, and the oracle's answers."""
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions

    batches = pq.read_table(workload["path"]).to_batches(max_chunksize=BATCH)
    ref = {}
    for name, plan in workload["plans"].items():
        with Deployment(plan, DeploymentOptions(max_in_flight=2)) as dep:
            for b in batches:
                dep.feed(None, b)
            ref[name] = dep.finish().answers
    assert ref["raw"].num_rows > 1000
    ora = oracle(workload["path"], workload["queries"])
    avg = {q.id for q in workload["queries"] if q.aggregate == "avg"}
    assert_answers_equal(ref["raw"], ora, avg)  # the reference is right to begin with
    return {**ref, "oracle": ora, "avg": avg}


def _only(t: pa.Table, ids) -> pa.Table:
    return t.filter(pc.is_in(t.column("query_id"), value_set=pa.array(sorted(ids))))


# ----------------------------------------------------------------------------- the runs
def _runs(specs: list[dict]) -> list[dict]:
    out = []
    for r in specs:
        r = {"plan": "raw", "batch_rows": BATCH, **r}
        out.append({"mode": r["plan"], **r})
    return out


# Spark local[2]: either feed, either answer route, either mode, each run with a drill
LOCAL_RUNS = _runs(
    [
        # each feed with each answer route and each mode once (the driver feed with driver
        # answers is tests/cluster/deployment/test_pinning.py's; the embedded Ray runs every
        # pairing)
        {"name": "driver-actors-drill", "feed": "driver", "answers": "actors", "faults": DRILL},
        {
            "name": "executors-actors-drill",
            "feed": "executors",
            "answers": "actors",
            "faults": DRILL,  # at_batch counts pieces: 8 of them (4 per Spark core)
        },
        {
            "name": "sliced-driver-actors-drill",
            "plan": "sliced",
            "feed": "driver",
            "answers": "actors",
            # fewer batches in sliced mode (one per stream and ~BATCH slices)
            "faults": [dict(f, at_batch=f["at_batch"] // 2) for f in DRILL],
        },
        {
            "name": "sliced-executors-driver-drill",
            "plan": "sliced",
            "feed": "executors",
            "answers": "driver",
            "faults": DRILL,
        },
    ]
)
# the standalone master: the executor feed (tasks in the worker's executor attach to Ray),
# raw with a drill, sliced without, and last (it leaves the head alone) the Ray worker node
# leaving the cluster mid-feed (checkpoints every 2 pieces; the 2 plan nodes pinned there are
# lost, their trees re-placed on node-1 from the checkpoint at piece 4)
STANDALONE_RUNS = _runs(
    [
        {
            "name": "sa-executors-actors-drill",
            "feed": "executors",
            "answers": "actors",
            "faults": DRILL,
        },
        {
            "name": "sa-sliced-executors-driver",
            "plan": "sliced",
            "feed": "executors",
            "answers": "driver",
        },
        {
            "name": "sa-executors-actors-ray-node-lost",
            "feed": "executors",
            "answers": "actors",
            "checkpoint_every": 2,
            "remove_ray_workers_at": 4,
        },
    ]
)
#: the JVM flags of the test Spark drivers (``SPARK_SUBMIT_OPTS``, set by tests/conftest.py)
#: for the standalone master, worker and executor JVMs too: their life here is also start-up
#: and a few small jobs, where C1 alone and the serial collector cost the least CPU
TEST_JVM_OPTS = os.environ.get("SPARK_SUBMIT_OPTS", "")
STANDALONE_CONF = {
    "spark.executor.memory": "512m",
    "spark.cores.max": "1",
    "spark.executor.extraJavaOptions": TEST_JVM_OPTS,
}


# ----------------------------------------------------------------------------- standalone Spark
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


MASTER_UP = "I have been elected leader"
WORKER_UP = "Successfully registered with master"


@contextmanager
def standalone_spark(d: Path):
    """A Spark standalone master and one worker (1 core, 1 GiB) on 127.0.0.1, a free port, no
    fixed web UI ports; each in its own process group, killed on exit whatever happened.

    Started, not waited for: they come up while the driver starts its Ray cluster and runs
    the local[2] phase; the worker starts once the master's log says it leads (a worker that
    finds no master retries only after 5-15 s), the driver waits for the worker's
    registration in its log (``ready``).  The worker's environment is what a deployed worker
    has: this interpreter for PySpark, the project importable, and a marker the test looks
    for in task processes."""
    import pyspark

    home = Path(pyspark.__file__).parent
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    clean = {  # no Ray settings of this process: the tasks find the token as a worker would
        k: v
        for k, v in os.environ.items()
        if not k.startswith("RAY_AUTH") and k not in ("RAY_ADDRESS", LOOPBACK_ENV)
    }
    env = dict(
        clean,
        SPARK_HOME=str(home),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOG_DIR=str(d),
        PYSPARK_PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
        WEAVEPLACE_SPARK_WORKER=str(d),
        SPARK_DAEMON_JAVA_OPTS=TEST_JVM_OPTS,  # the master's and the worker's JVM
        SPARK_LAUNCHER_OPTS=TEST_JVM_OPTS,  # and the short JVM spark-class runs before each
    )
    cls = str(home / "bin" / "spark-class")
    master_log, worker_log = d / "master.log", d / "worker.log"
    master = ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port)]
    worker = ["org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--cores", "1"]
    worker += ["--memory", "1g", "--work-dir", str(d / "work")]
    worker_sh = (
        f"until grep -q '{MASTER_UP}' {shlex.quote(str(master_log))}; do sleep 0.2; done; "
        f"exec {shlex.quote(cls)} {shlex.join(worker)} --webui-port 0"
    )
    procs: list[subprocess.Popen] = []
    try:
        for cmd, log in (
            ([cls, *master, "--webui-port", "0"], master_log),
            (["sh", "-c", worker_sh], worker_log),
        ):
            with open(log, "w") as f:
                procs.append(
                    subprocess.Popen(
                        cmd, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True
                    )
                )
        ready = {"log": str(worker_log), "text": WORKER_UP, "timeout_s": 120}
        yield {"url": url, "marker": str(d), "procs": procs, "ready": ready}
    finally:
        for p in reversed(procs):  # the worker (and its executors) first, then the master
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


# ----------------------------------------------------------------------------- the driver
def run_driver(workload, out: Path, phases: list[dict]) -> dict:
    """Run the routes driver (its own Ray cluster) under a hard timeout; its result.json."""
    out.mkdir(parents=True, exist_ok=True)
    job = {"out": str(out), "data": str(workload["path"]), "plans": workload["plans"]}
    job["ray_workers"] = RAY_WORKERS
    (out / "job.json").write_text(json.dumps({**job, "phases": phases}))
    raytmp = tempfile.mkdtemp(prefix="wp-mr-", dir="/tmp")
    env = dict(os.environ, RAY_TMPDIR=raytmp, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    env["RAY_AUTH_MODE"] = "token"  # the cluster checks tokens (~/.ray/auth_token)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    rc, log = run_cluster_driver(
        [sys.executable, str(DRIVER), str(out / "job.json")],
        env,
        REPO,
        raytmp,
        TIMEOUT_S,
        "routes driver",
    )
    assert rc == 0, log[-4000:]
    return json.loads((out / "result.json").read_text())


def _routes(workload, out: Path, local: bool, sa_dir: Path | None) -> dict:
    """One driver run (one Ray cluster): the local[2] phase (if ``local``), then the
    standalone one (when ``sa_dir`` is given: the JVMs' directory).  A standalone master that
    does not come up fails its own test only (the error is kept)."""
    t0 = time.perf_counter()
    phases = []
    if local:
        phases.append({"name": "local", "master": "local[2]", "runs": LOCAL_RUNS})
    sa: dict | Exception | None = None
    with ExitStack() as stack:
        try:
            if sa_dir is not None:
                sa = stack.enter_context(standalone_spark(sa_dir))
                phases.append(
                    {
                        "name": "standalone",
                        "master": sa["url"],
                        "ready": sa["ready"],
                        "runs": STANDALONE_RUNS,
                        "spark_conf": STANDALONE_CONF,
                    }
                )
        except Exception as e:  # noqa: BLE001  (reported by the standalone test)
            sa = e
        res = run_driver(workload, out, phases)
        if isinstance(sa, dict):  # master and worker lived through the whole run
            res["standalone_alive"] = all(p.poll() is None for p in sa["procs"])
    res["test_s"] = time.perf_counter() - t0
    return {"out": out, "res": res, "standalone": sa}


@pytest.fixture(scope="module")
def routes_started(workload, tmp_path_factory, request):
    """The driver run started in a background thread (a future of ``_routes``), each phase
    only if its test was selected.  Started before ``reference`` (the tests ask for ``routes``
    first): the driver's Ray cluster and the standalone JVMs come up while this process starts
    the session's Ray and computes the reference, mostly waiting on other processes."""
    selected = {getattr(i, "originalname", i.name) for i in request.session.items}
    out = tmp_path_factory.mktemp("routes_out")
    sa_dir = tmp_path_factory.mktemp("standalone") if SA_TEST in selected else None
    with ThreadPoolExecutor(1, thread_name_prefix="routes") as pool:
        fut = pool.submit(_routes, workload, out, LOCAL_TEST in selected, sa_dir)
        yield fut  # leaving the pool waits for the run (it has a hard timeout)


@pytest.fixture(scope="module")
def routes(routes_started, reference):
    """The driver run's result, once the reference is built too (its failure is raised here)."""
    return routes_started.result()


def answers_of(run_dir: Path) -> tuple[pa.Table, dict]:
    """A run's answers (the file the driver wrote, or the actors' dataset) and metrics."""
    from cluster.answers.sink import read_answers

    a = run_dir / "answers.parquet"
    t = read_answers(a) if a.is_dir() else pq.read_table(a)
    return t, json.loads((run_dir / "metrics.json").read_text())


def check_run(workload, reference, res: dict, out: Path, run: dict) -> dict:
    """Answers equal the single-node driver route and the oracle; the route is the one asked
    for; a drill fired entirely (a kill recovered, a loss re-placed, an addition)."""
    got, m = answers_of(out / run["name"])
    plan = run["plan"]
    assert m["answers_route"] == run["answers"] and m["feed"]["route"] == run["feed"]
    assert m["feed"]["mode"] == run["mode"] and m["answers"] == got.num_rows
    if run["answers"] == "actors":
        assert (out / run["name"] / "answers.parquet").is_dir()
        assert m["answer_bytes_to_driver"] == 0 and m["answer_parts"] > 0
    else:
        assert m["answer_bytes_to_driver"] > 0
    if run["feed"] == "executors":
        assert m["rows_fed"] == 0 and m["bytes_fed"] == 0  # no tuple through the driver
        pushed = m["feed"]["pushed"]
        assert pushed["bytes_pushed"] > 16 * (workload["rows"] if plan == "raw" else 100)
        assert m["feed"]["rows"] == workload["rows"] and pushed["pieces"] == 8
        # one Spark job per segment between drills (or checkpoints every 2 pieces); a
        # killed actor fails one attempt
        cut = run.get("faults") or run.get("checkpoint_every")
        assert pushed["segments"] == (4 if cut else 1)
        if run.get("faults") or not cut:
            assert pushed["attempts"] == pushed["segments"] + (1 if run.get("faults") else 0)
    elif plan == "raw":
        assert m["rows_fed"] == workload["rows"]
    # plan node i pinned to Ray node i mod 2 of (worker, head) of this cluster (an added
    # node too: node-3 -> the head)
    order = res["ray_nodes"]["workers"] + res["ray_nodes"]["head"]
    assert len(order) == 2
    assert {nid: n["ray_node"] for nid, n in m["nodes"].items()} == {
        nid: order[int(nid.split("-")[1]) % 2] for nid in m["nodes"]
    }
    if run.get("faults"):
        assert [f["fired"] for f in m["faults"]] == [True] * len(run["faults"])
        assert m["replacements"] and m["additions"] and "node-1" not in m["nodes"]
        assert m["nodes"]["node-0"]["recoveries"] == 1  # restarted, on its pinned Ray node
    assert got.equals(reference[plan]), f"{run['name']}: not the single-node driver route's"
    assert_answers_equal(got, _only(reference["oracle"], workload["ids"][plan]), reference["avg"])
    return m


def _summary(what: str, res: dict, phase: dict) -> str:
    runs = ", ".join(f"{k} {v['wall_s']:.1f} s" for k, v in phase["runs"].items())
    return (
        f"{what}: ray start {res['ray_startup_s']:.1f} s, waited for a Spark worker "
        f"{phase['waited_s']:.1f} s, spark start {phase['startup_s']:.1f} s, "
        f"runs {runs}; driver {res['total_s']:.1f} s, with JVMs {res['test_s']:.1f} s"
    )


LOCAL_TEST = "test_routes_on_a_ray_cluster_with_spark_local2"
SA_TEST = "test_executor_feed_with_a_standalone_spark_master"


@pytest.mark.scenario
def test_routes_on_a_ray_cluster_with_spark_local2(workload, routes, reference):
    res = routes["res"]
    phase = res["phases"]["local"]
    assert phase["master"] == "local[2]" and list(phase["runs"]) == [r["name"] for r in LOCAL_RUNS]
    assert len(res["ray_nodes"]["workers"]) == RAY_WORKERS
    assert res["ray_nodes"]["ips"] == ["127.0.0.1"]
    assert res["tokenless_probe"] == "refused"  # a token-checking cluster
    # Spark's Python workers that ran the executor feed are attached to this cluster
    assert {t["ray_address"] for t in phase["tasks"]} - {None} == {res["ray_nodes"]["address"]}
    for run in LOCAL_RUNS:
        check_run(workload, reference, res, routes["out"], run)
    print(_summary("routes on a Ray cluster + Spark local[2]", res, phase))


@pytest.mark.scenario
@pytest.mark.slow
def test_executor_feed_with_a_standalone_spark_master(workload, routes, reference):
    sa = routes["standalone"]
    if isinstance(sa, Exception):
        raise sa
    res = routes["res"]
    phase = res["phases"]["standalone"]
    assert "error" not in phase, phase.get("error")
    assert phase["master"] == sa["url"]
    # the tasks ran in the worker's executor (its environment), not in the driver's process
    tasks = phase["tasks"]
    assert tasks and all(t["marker"] == sa["marker"] for t in tasks)
    assert phase["driver_pid"] not in {t["pid"] for t in tasks}
    # ... and attached to this Ray cluster, which refuses clients without its token: the
    # attach found ~/.ray/auth_token itself (the worker's environment has no RAY_AUTH_*)
    assert res["tokenless_probe"] == "refused"
    assert {(t["ray_address"], t["ray_auth_mode"]) for t in tasks} == {
        (res["ray_nodes"]["address"], "token")
    }
    for run in STANDALONE_RUNS:
        m = check_run(workload, reference, res, routes["out"], run)
        # the worker's one core: one Python worker, unless a task failed (a drill's kill:
        # Spark then starts a new one)
        assert (
            m["feed"]["pushed"]["worker_pids"] == 1
            or run.get("faults")
            or run.get("remove_ray_workers_at")
        )
    # the Ray worker node left before piece 4: node-0 and node-2 (pinned there) lost for good,
    # their trees on node-1 (the head), and the answers above still exact
    lost = STANDALONE_RUNS[-1]["name"]
    assert phase["runs"][lost]["ray_nodes_removed"] == res["ray_nodes"]["workers"]
    _, m = answers_of(routes["out"] / lost)
    assert sorted(r["node"] for r in m["replacements"]) == ["node-0", "node-2"]
    assert all("Ray node" in r["reason"] and "gone" in r["reason"] for r in m["replacements"])
    assert list(m["nodes"]) == ["node-1"] and m["feed"]["pushed"]["attempts"] > 4
    assert res["standalone_alive"]
    print(_summary("executor feed on a Ray cluster + standalone Spark", res, phase))
