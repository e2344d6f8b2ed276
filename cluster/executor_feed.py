"""The executor route for input: Spark tasks push their piece of the file straight to the actors.

Why: on the driver route every tuple crosses the driver (``toArrow`` then ``ray.put``), so the
driver's one core and network card cap the deployment whatever the number of nodes (issue 15;
cluster/README.md, "Driver route vs executor route").  Here the driver only plans the pieces
and waits for the job: each Spark task attaches to the Ray cluster (once per Python worker;
with the cluster's token, ``ray_runtime.attach_auth``), looks the node actors up by name
(``Deployment.actor_names``), reads its *piece* (a row range of a row group of the local
Parquet file, with pyarrow: no JVM -> Python hop) and pushes it, cut into ``batch_rows``
sub-batches as Arrow IPC bytes, to every node hosting one of its streams.

Order: pieces are numbered in file order and a node applies them strictly in that order
(``piece_order``: early pieces buffered, at most ``max_ahead`` pieces ahead; a task whose piece
is further ahead waits, asking the actor ``piece_window`` every 5 ms, before it sends any data:
bounded memory per actor, and ``max_in_flight`` pushes outstanding per task and actor).  So each tree sees the file order,
which is event-time order when the file is sorted by time; each task checks its piece and the
driver checks the boundaries between pieces (``ts_ms`` non-decreasing across the file) and
refuses the result in one line otherwise (``feed: driver`` sorts such files).

What this route does not do (refused in one line): sliced mode, a text or non-local input,
fault drills and recovery: the tuples never pass the driver, so it keeps no replay log; an
actor dying during the feed fails the run with a ``DeploymentError`` (use ``feed: driver`` for
exactly-once recovery; cluster/README.md says how a replay from the source would lift this).
"""

from __future__ import annotations

import functools
import math
import os
import time
from collections import deque
from pathlib import Path
from typing import Any

from .piece_order import SUB
from .plan_specs import DeploymentError
from .spark_feed import FeedStats
from .time_chunks import parquet_row_groups

_ATTACHED: dict[str, Any] = {}  # per Spark Python worker: the Ray address it attached to


def _attach(address: str, namespace: str, loopback: bool) -> None:
    """Connect this Spark Python worker to the Ray cluster (once; workers are reused)."""
    import ray

    if _ATTACHED.get("address") == address and ray.is_initialized():
        return
    if loopback:  # an embedded Ray on 127.0.0.1: do not rewrite the address to the LAN IP
        # (the environment alone is too late once ray is imported: its constant too, as
        # ray_runtime does; else ray.init retries the LAN address for minutes)
        import ray._private.ray_constants as rc

        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        rc.ENABLE_RAY_CLUSTER = False
    from .ray_runtime import attach_auth

    attach_auth(address)
    import logging

    ray.init(
        address=address,
        namespace=namespace,
        log_to_driver=False,
        logging_level=logging.WARNING,
        include_dashboard=False,
    )
    _ATTACHED["address"] = address


def _push_pieces(rows, *, spec: dict):
    """Spark task body: for each ``(piece no, row group, first row, end row)``, read the rows,
    check their order, push sub-batches to the target actors in order (bounded in flight per
    actor; refused pushes re-offered).  Yields one summary dict per piece."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import ray

    _attach(spec["address"], spec["namespace"], spec["loopback"])
    actors = {
        nid: ray.get_actor(name, namespace=spec["namespace"]) for nid, name in spec["names"].items()
    }
    f = pq.ParquetFile(spec["path"])
    for p, rg, a, b in rows:
        t0 = time.perf_counter()
        t = f.read_row_group(rg, columns=spec["columns"]).slice(a, b - a)
        ts = t.column("ts_ms").to_numpy()
        ordered = bool(ts.shape[0] < 2 or (ts[1:] >= ts[:-1]).all())
        subs = max(1, math.ceil(t.num_rows / spec["batch_rows"]))
        payloads = {}
        for nid, cols in spec["targets"].items():
            tt = t.select(cols)
            out = []
            for j in range(subs):
                part = tt.slice(j * spec["batch_rows"], spec["batch_rows"])
                sink = pa.BufferOutputStream()
                with pa.ipc.new_stream(sink, part.schema) as w:
                    w.write_table(part)
                out.append(sink.getvalue().to_pybytes())
            payloads[nid] = out
        t1 = time.perf_counter()
        waits = 0
        for nid in payloads:  # the piece's turn: within max_ahead of the next piece to apply
            while not ray.get(actors[nid].piece_window.remote(p)):
                waits += 1
                time.sleep(0.005)
        inflight: deque = deque()
        limit = spec["max_in_flight"] * len(payloads)
        for j in range(subs):
            for nid in payloads:
                inflight.append(
                    actors[nid].push_piece.remote(p, j, j == subs - 1, payloads[nid][j])
                )
            while len(inflight) > limit:
                if not ray.get(inflight.popleft()):
                    raise RuntimeError(f"piece {p}: push refused inside its window")
        if not all(ray.get(list(inflight))):
            raise RuntimeError(f"piece {p}: push refused inside its window")
        yield {
            "piece": p,
            "rows": t.num_rows,
            "first": int(ts[0]) if ts.shape[0] else None,
            "last": int(ts[-1]) if ts.shape[0] else None,
            "ordered": ordered,
            "bytes": int(sum(len(x) for v in payloads.values() for x in v)),
            "read_s": t1 - t0,
            "push_s": time.perf_counter() - t1,
            "refused": waits,
            "pid": os.getpid(),
            "nulls": int(sum(t.column(c).null_count for c in spec["columns"])),
        }


def plan_pieces(groups, piece_rows: int) -> list[tuple[int, int, int, int]]:
    """``(piece no, row group, first row, end row)``: each row group cut into row ranges of at
    most ``piece_rows`` rows, in file order."""
    out: list[tuple[int, int, int, int]] = []
    for rg, rows, _, _ in groups:
        for a in range(0, rows, piece_rows):
            out.append((len(out), rg, a, min(rows, a + piece_rows)))
    return out


def feed_executors(
    deployment,
    spark,
    path: str,
    *,
    batch_rows: int = 1 << 18,
    piece_rows: int | None = None,
    max_ahead: int = 4,
    max_in_flight: int = 2,
) -> FeedStats:
    """Push the tuples of the local Parquet file ``path`` (in time order) to ``deployment``
    (mode ``raw``) from Spark tasks: one task per piece of ``piece_rows`` rows (default: the
    file cut into about 4 pieces per Spark core), pushed in sub-batches of at most
    ``batch_rows`` rows.  The driver
    sees no tuple: ``deployment.metrics()["bytes_fed"]`` stays 0 and ``FeedStats`` counts what
    the tasks pushed (``bytes_pushed`` in ``timeline[0]``)."""
    import ray

    if getattr(deployment, "mode", "raw") != "raw":
        raise DeploymentError("feed 'executors' runs raw mode only (sliced mode: feed 'driver')")
    if deployment.faults:
        raise DeploymentError(
            "fault drills need feed 'driver': the executor route keeps no replay log"
        )
    groups = parquet_row_groups(path)
    if groups is None:
        raise DeploymentError(
            f"feed 'executors' needs a local Parquet file with ts_ms statistics; {path!r} is not"
        )
    import pyarrow.parquet as pq

    schema = pq.read_schema(path)
    streams = [s for s in deployment.streams if s in schema.names]
    missing = sorted(set(deployment.streams) - set(streams))
    if missing:
        raise KeyError(f"{path}: no column(s) {missing}; streams must be column names")
    deployment.declare_input(schema)
    st = FeedStats()
    t0 = time.perf_counter()
    total = sum(g[1] for g in groups)
    par = max(1, int(spark.sparkContext.defaultParallelism))
    if piece_rows is None:
        piece_rows = max(1, math.ceil(total / (4 * par)))
    pieces = plan_pieces(groups, piece_rows)
    nodes = {
        nid: ["ts_ms"] + sorted({t["stream"] for t in n.spec["trees"]} & set(streams))
        for nid, n in deployment.nodes.items()
    }
    targets = {nid: cols for nid, cols in nodes.items() if len(cols) > 1}
    base = deployment._seq + 1
    _on_actors(
        [deployment.nodes[n].actor.begin_pieces.remote(base, max_ahead) for n in deployment.nodes]
    )
    ctx = ray.get_runtime_context()
    address = ctx.gcs_address
    spec = {
        "address": address,
        "namespace": ctx.namespace,
        "loopback": address.split(":")[0] in ("127.0.0.1", "localhost"),
        "names": {nid: deployment.actor_names[nid] for nid in targets},
        "targets": targets,
        "path": str(Path(path).resolve()),
        "columns": ["ts_ms", *streams],
        "batch_rows": int(batch_rows),
        "max_in_flight": int(max_in_flight),
    }
    sc = spark.sparkContext
    fn = functools.partial(_push_pieces, spec=spec)
    try:
        out = sc.parallelize(pieces, len(pieces)).mapPartitions(fn).collect() if pieces else []
    except Exception as e:  # a Py4J trace of pages: one line
        raise DeploymentError(
            "executor feed failed (a node actor died or a Spark task could not reach Ray; the "
            f"executor route keeps no replay log: rerun, or use feed 'driver'): {_first_line(e)}"
        ) from None
    st.spark_seconds = time.perf_counter() - t0
    out.sort(key=lambda x: x["piece"])
    prev = None
    for x in out:
        if x["nulls"]:
            raise DeploymentError(f"{path}: null values in the stream columns")
        if not x["ordered"] or (prev is not None and x["first"] is not None and x["first"] < prev):
            raise DeploymentError(
                f"{path}: not in time order (piece {x['piece']}); feed 'executors' needs a "
                "time-ordered file (feed 'driver' sorts)"
            )
        if x["last"] is not None:
            prev = x["last"]
    ends = _on_actors(
        [deployment.nodes[n].actor.end_pieces.remote(len(pieces)) for n in deployment.nodes]
    )
    deployment._seq = max([base - 1] + [e["last_seq"] for e in ends] + [base + len(pieces) * SUB])
    st.rows = sum(x["rows"] for x in out)
    st.batches = sum(max(1, math.ceil(x["rows"] / batch_rows)) for x in out)
    st.chunks = len(pieces)
    st.seconds = time.perf_counter() - t0
    st.timeline = [
        {
            "route": "executors",
            "pieces": len(pieces),
            "bytes_pushed": sum(x["bytes"] for x in out),
            "task_read_s": sum(x["read_s"] for x in out),
            "task_push_s": sum(x["push_s"] for x in out),
            "refused_rounds": sum(x["refused"] for x in out),
            "max_buffered": max((e["max_buffered"] for e in ends), default=0),
            "worker_pids": len({x["pid"] for x in out}),
        }
    ]
    return st


def _on_actors(refs: list) -> list:
    """``ray.get`` of calls to the node actors; a dead actor is a one-line refusal (no replay
    log on this route)."""
    import ray

    try:
        return ray.get(refs)
    except ray.exceptions.RayActorError as e:
        raise DeploymentError(
            "a node actor died during the executor feed; the executor route keeps no replay "
            f"log: rerun, or use feed 'driver' ({type(e).__name__})"
        ) from None


def _first_line(e: BaseException) -> str:
    """The most telling line of a (Py4J-wrapped) exception."""
    text = str(e)
    for line in text.splitlines():
        line = line.strip()
        if "Error" in line and "Py4J" not in line and "Traceback" not in line:
            return line[:300]
    return (text.splitlines() or [type(e).__name__])[0][:300]
