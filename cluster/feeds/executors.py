"""The executor route for input: Spark tasks push their piece of the file straight to the actors.

Why: on the driver route every tuple crosses the driver (``toArrow`` then ``ray.put``), so the
driver's one core and network card cap the deployment whatever the number of nodes
(cluster/README.md, "Driver route vs executor route").  Here the driver only plans the pieces
and waits for the job: each Spark task attaches to the Ray cluster (once per Python worker;
with the cluster's token, ``ray_runtime.attach_auth``), looks the node actors up by name
(``Deployment.actor_names``), reads its *piece* (a row range of a row group of the local
Parquet file, with pyarrow: no JVM -> Python hop) and pushes it, cut into ``batch_rows``
sub-batches as Arrow IPC bytes, to every node hosting one of its streams.

Order: pieces are numbered in file order and a node applies them strictly in that order
(``piece_order``: early pieces buffered, at most ``max_ahead`` pieces ahead; a task whose piece
is further ahead waits, asking the actor ``piece_window`` every 5 ms, before it sends any data:
bounded memory per actor, and ``max_in_flight`` pushes outstanding per task and actor).  So
each tree sees exactly the file order, tuple by tuple, as the driver route does with
``order="file"``: a file out of time order is fed as it is, and its tuples are late or not by
docs/DESIGN.md s. 1 (the watermark is the newest timestamp in file order minus
``allowed_lateness``), so disorder within the lateness changes no answer and the late tuples
are the driver route's.  Why not sort: the pieces are read by tasks in parallel, and sorting
across them would take a shuffle, the cost this route exists to avoid.  Each task checks its
piece and the driver the boundaries between pieces (``ts_ms`` non-decreasing across the file):
``FeedStats.pushed["disordered_pieces"]`` counts the pieces out of order; sliced mode, which
aggregates as if sorted, refuses them in one line (``feed: driver`` sorts such files).

Exactly once through failures: the feed runs as one Spark job per *segment* of pieces, cut
at every ``checkpoint_every`` pieces and at every fault drill (``at_batch`` counts pieces on
this route).  Between segments the driver checkpoints, fires the drill and logs the segment's
sub-batches as ``PieceSource``s (a file address, no data: the replay log of ``recovery``).  A
node actor that dies (a drill's kill, or a crash during a job) is restored
from its checkpoint and replays the logged sub-batches *by reading the file itself*; a node
lost for good has its trees adopted the same way (``membership``); the failed segment is then
pushed again under a new *epoch* (pushes of the failed attempt's lingering tasks are dropped),
and the trees that applied part of it skip those batches by ``seq``.  So the answers equal a
fault-free run's, and the driver still sees no tuple.  The file must be readable at the same
path by the actors (as it is by the Spark workers).

Bounded detection: while a job runs the driver keeps one ping outstanding per node actor
(``_watch_job``, every ``WATCH_S``).  A killed actor's ping fails at once; a crashed, hung or
cut-off host's when Ray's health checks declare its node dead (``cluster.failure_timeout_s``);
either cancels the job, so recovery starts then, not when Spark's task retries run out, and the
failure's ``detect_s`` counts from the node's last answered ping.  A Spark worker host that
falls silent would hold its tasks for Spark's ``spark.network.timeout`` (120 s by default):
``spark_failure_conf`` bounds that by the same setting for a Spark session the run starts
(an operator's own session keeps its settings).

Sliced mode: a task cuts its piece into each stream's slices (``piece_order.Slicing``: the
deployment's edge union per stream, the driver route's ``slice_partition``) and pushes each
stream's slices to the nodes hosting it; a slice cut by a piece boundary arrives as two rows,
which the trees fold as on the driver route.

What this route does not do (refused in one line): a text or non-local input, and a file out
of time order in sliced mode.
"""

from __future__ import annotations

import functools
import math
import os
import secrets
import time
from collections import deque
from pathlib import Path
from typing import Any

from cluster.deployment.recovery import LoggedBatch
from cluster.deployment.specs import DeploymentError
from cluster.feeds.parquet import FeedStats
from cluster.feeds.time_chunks import parquet_row_groups
from cluster.node.piece_order import SUBS_PER_PIECE, Slicing, sub_batches

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
    from cluster.runtime.ray_runtime import attach_auth

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


#: the least Spark heartbeat timeout ``spark_failure_conf`` sets (a smaller one would declare
#: executors lost during a long garbage collection of a loaded machine)
SPARK_MIN_TIMEOUT_S = 5


def spark_failure_conf(failure_timeout_s: float) -> dict[str, str]:
    """Spark settings bounding how long a silent executor (its host crashed, hung or cut off)
    holds a job by ``failure_timeout_s`` (at least ``SPARK_MIN_TIMEOUT_S``): the driver
    declares an executor lost, and runs its tasks elsewhere, once its heartbeats have been
    missing that long (``spark.network.timeout``, checked every quarter of it, heartbeats every
    quarter of it).  RPC replies keep Spark's default wait (``spark.rpc.askTimeout``: 120 s,
    which otherwise follows the network timeout)."""
    t = max(int(math.ceil(float(failure_timeout_s))), SPARK_MIN_TIMEOUT_S)
    beat_ms = t * 1000 // 4
    return {
        "spark.network.timeout": f"{t}s",
        "spark.network.timeoutInterval": f"{beat_ms}ms",
        "spark.executor.heartbeatInterval": f"{beat_ms}ms",
        "spark.rpc.askTimeout": "120s",
    }


def _push_pieces(rows, *, spec: dict):
    """Spark task body: for each ``(piece no, row group, first row, end row)``, read the rows,
    check their order, push sub-batches to the target actors in order (bounded in flight per
    actor; refused pushes re-offered).  Yields one summary dict per piece."""
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
        br, slicing = spec["batch_rows"], spec["slicing"]
        # per target node, its sub-batches in order: (stream or None, seq sub number, bytes)
        payloads: dict[str, list] = {}
        chunks: dict[str, int] = {}
        slice_rows = 0
        if slicing is None:
            subs = sub_batches(spec["path"], rg, a, b, br, spec["columns"])
            for nid, cols in spec["targets"].items():
                tt = t.select(cols)
                payloads[nid] = [(None, j, _ipc(src.chunk_of(tt))) for j, src in subs]
        else:
            cut = {s: slicing.cut(t, s) for s in slicing.streams}
            chunks = {s: max(1, math.ceil(x.num_rows / br)) for s, x in cut.items()}
            slice_rows = sum(x.num_rows for x in cut.values())
            if max(chunks.values()) > slicing.slot:
                raise RuntimeError(f"piece {p}: more than {slicing.slot} slice sub-batches")
            subs = sub_batches(spec["path"], rg, a, b, br, spec["columns"], slicing, chunks)
            for nid, cols in spec["targets"].items():
                payloads[nid] = [
                    (src.stream, j, _ipc(src.chunk_of(cut[src.stream])))
                    for j, src in subs
                    if src.stream in cols
                ]
        t1 = time.perf_counter()
        waits = 0
        for nid in payloads:  # the piece's turn: within max_ahead of the next piece to apply
            while not ray.get(actors[nid].piece_window.remote(p, spec["epoch"])):
                waits += 1
                time.sleep(0.005)
        inflight: deque = deque()
        limit = spec["max_in_flight"] * len(payloads)
        for j in range(max((len(x) for x in payloads.values()), default=0)):
            for nid, items in payloads.items():
                if j < len(items):
                    s, ss, data = items[j]
                    inflight.append(
                        actors[nid].push_piece.remote(
                            p, j, j == len(items) - 1, data, spec["epoch"], s, ss
                        )
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
            "max": int(ts.max()) if ts.shape[0] else None,
            "ordered": ordered,
            "bytes": int(sum(len(x[2]) for v in payloads.values() for x in v)),
            "chunks": chunks,  # sliced mode: slice sub-batches per stream
            "slice_rows": slice_rows,
            "read_s": t1 - t0,
            "push_s": time.perf_counter() - t1,
            "refused": waits,
            "pid": os.getpid(),
            "nulls": int(sum(t.column(c).null_count for c in spec["columns"])),
        }


def _ipc(part) -> bytes:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, part.schema) as w:
        w.write_table(part)
    return sink.getvalue().to_pybytes()


def plan_pieces(groups, piece_rows: int) -> list[tuple[int, int, int, int]]:
    """``(piece no, row group, first row, end row)``: each row group cut into row ranges of at
    most ``piece_rows`` rows, in file order."""
    out: list[tuple[int, int, int, int]] = []
    for rg, rows, _, _ in groups:
        for a in range(0, rows, piece_rows):
            out.append((len(out), rg, a, min(rows, a + piece_rows)))
    return out


def segment_cuts(pieces: int, checkpoint_every: int | None, fault_at) -> list[int]:
    """Where the feed of ``pieces`` pieces is cut into Spark jobs: ``0``, ``pieces``, every
    ``checkpoint_every`` pieces and every fault drill's piece inside the feed (sorted)."""
    cuts = {0, pieces}
    if checkpoint_every:
        cuts.update(range(0, pieces, int(checkpoint_every)))
    cuts.update(int(a) for a in fault_at if 0 < int(a) < pieces)
    return sorted(cuts)


def feed_executors(
    deployment,
    spark,
    path: str,
    *,
    batch_rows: int = 1 << 18,
    piece_rows: int | None = None,
    max_ahead: int = 4,
    max_in_flight: int = 2,
    max_attempts: int = 3,
) -> FeedStats:
    """Push the tuples of the local Parquet file ``path`` (in file order) to ``deployment``
    (mode ``raw``: rows; ``sliced``: each stream's slices) from Spark tasks: one task per
    piece of ``piece_rows`` rows (default: the file cut into about 4 pieces per Spark core),
    pushed in sub-batches of at most ``batch_rows`` rows (slice rows in sliced mode), one
    Spark job per segment (module docstring; a segment whose job
    fails because a node actor died is pushed again after recovery, at most
    ``max_attempts`` times).  The driver sees no tuple: ``deployment.metrics()["bytes_fed"]``
    stays 0 and ``FeedStats.pushed`` counts what the tasks pushed; ``timeline`` has one point
    per segment."""
    import pyarrow.parquet as pq

    dep = deployment
    groups = parquet_row_groups(path)
    if groups is None:
        raise DeploymentError(
            f"feed 'executors' needs a local Parquet file with ts_ms statistics; {path!r} is not"
        )
    schema = pq.read_schema(path)
    streams = [s for s in dep.streams if s in schema.names]
    missing = sorted(set(dep.streams) - set(streams))
    if missing:
        raise KeyError(f"{path}: no column(s) {missing}; streams must be column names")
    dep.declare_input(schema)
    slicing = None
    if getattr(dep, "mode", "raw") == "sliced":
        import pyarrow as pa

        ints = all(
            pa.types.is_integer(schema.field(s).type) or pa.types.is_boolean(schema.field(s).type)
            for s in streams
        )
        slicing = Slicing(
            tuple(streams),
            tuple(tuple(tuple(c) for c in dep.edge_classes(s)) for s in streams),
            not ints,
        )
    st = FeedStats()
    t0 = time.perf_counter()
    total = sum(g[1] for g in groups)
    par = max(1, int(spark.sparkContext.defaultParallelism))
    if piece_rows is None:
        piece_rows = max(1, math.ceil(total / (4 * par)))
    pieces = plan_pieces(groups, piece_rows)
    columns = ["ts_ms", *streams]
    job = {
        "path": str(Path(path).resolve()),
        "columns": columns,
        "batch_rows": int(batch_rows),
        "max_in_flight": int(max_in_flight),
        "max_ahead": int(max_ahead),
        "base": dep.last_seq + 1,
        "slicing": slicing,
    }
    first = dep.batches_fed  # the drills' clock counts pieces here
    cuts = segment_cuts(
        len(pieces),
        dep.checkpoint_every,
        [f["at_batch"] - first for f in dep.faults if not f["fired"]],
    )
    out: list[dict] = []
    ends: list[dict] = []
    attempts = 0
    prev = None  # the newest timestamp of the pieces checked so far
    disordered = 0
    for lo, hi in zip(cuts, cuts[1:], strict=False):
        t1 = time.perf_counter()
        dep.fire_faults(first + lo)
        seg, seg_ends, targets, tries = _push_segment(dep, spark, pieces, lo, hi, job, max_attempts)
        attempts += tries
        for x in sorted(seg, key=lambda x: x["piece"]):
            if x["nulls"]:
                raise DeploymentError(f"{path}: null values in the stream columns")
            in_order = x["ordered"] and (prev is None or x["first"] is None or x["first"] >= prev)
            if not in_order:
                disordered += 1
                if slicing is not None:
                    raise DeploymentError(
                        f"{path}: not in time order (piece {x['piece']}); sliced mode on feed "
                        "'executors' needs a time-ordered file (feed 'driver' sorts)"
                    )
            if x["max"] is not None:
                prev = x["max"] if prev is None else max(prev, x["max"])
        out += seg
        now = time.perf_counter()
        st.timeline.append(
            {"t_s": now - t0, "rows": sum(x["rows"] for x in seg) / max(now - t1, 1e-9)}
        )
        ends += seg_ends
        _log_segment(dep, pieces[lo:hi], job, targets, {x["piece"]: x["chunks"] for x in seg})
        # every seq below is applied; the drills' clock counts pieces
        due = dep.note_pushed(job["base"] + hi * SUBS_PER_PIECE - 1, first + hi, hi - lo, prev)
        if due and hi < len(pieces):
            dep.checkpoint()
    st.spark_seconds = time.perf_counter() - t0
    st.rows = sum(x["rows"] for x in out)
    st.batches = sum(max(1, math.ceil(x["rows"] / batch_rows)) for x in out)
    st.chunks = len(pieces)
    st.slices = sum(x["slice_rows"] for x in out)
    st.seconds = time.perf_counter() - t0
    st.pushed = {
        "pieces": len(pieces),
        "segments": len(cuts) - 1,
        "attempts": attempts,
        "bytes_pushed": sum(x["bytes"] for x in out),
        "task_read_s": sum(x["read_s"] for x in out),
        "task_push_s": sum(x["push_s"] for x in out),
        "refused_rounds": sum(x["refused"] for x in out),
        "max_buffered": max((e["max_buffered"] for e in ends), default=0),
        "worker_pids": len({x["pid"] for x in out}),
        "disordered_pieces": disordered,
    }
    return st


def _push_segment(dep, spark, pieces, lo: int, hi: int, job: dict, max_attempts: int):
    """One Spark job pushing pieces ``[lo, hi)`` to every node hosting a stream; if it fails
    because node actors died, they are recovered (``Deployment.actor_died``: restored and
    replayed from the log, or lost and re-placed) and the segment is pushed again under a new
    epoch.  While the job runs the driver watches the actors (``_watch_job``): a death cancels
    the job at once instead of waiting for Spark's task retries.  Returns the tasks' piece
    summaries, the nodes' ``end_pieces`` replies, the target nodes and the number of
    attempts."""
    import ray

    for attempt in range(1, max_attempts + 1):
        epoch = secrets.randbits(62)
        targets = {
            nid: ["ts_ms"] + sorted({t["stream"] for t in n.spec["trees"]} & set(job["columns"]))
            for nid, n in dep.nodes.items()
        }
        targets = {nid: cols for nid, cols in targets.items() if len(cols) > 1}
        failure = None
        dead: dict[str, BaseException | None] = {}
        try:
            ray.get(
                [
                    dep.nodes[n].actor.begin_pieces.remote(job["base"], job["max_ahead"], lo, epoch)
                    for n in dep.nodes
                ]
            )
            _seen(dep, list(dep.nodes))
            ctx = ray.get_runtime_context()
            address = ctx.gcs_address
            spec = {
                **job,
                "address": address,
                "namespace": ctx.namespace,
                "loopback": address.split(":")[0] in ("127.0.0.1", "localhost"),
                "names": {nid: dep.actor_names[nid] for nid in targets},
                "targets": targets,
                "epoch": epoch,
            }
            fn = functools.partial(_push_pieces, spec=spec)
            part = pieces[lo:hi]
            out: list = []
            if part:
                run = _SparkJob(spark.sparkContext, part, fn)
                dead = _watch_job(dep, run)
                if dead:  # the job was cancelled: recover below
                    raise _ActorsDied(", ".join(f"{n}: {_first_line(e)}" for n, e in dead.items()))
                out = run.result()
            ends = ray.get([dep.nodes[n].actor.end_pieces.remote(hi) for n in dep.nodes])
            _seen(dep, list(dep.nodes))
            return out, ends, targets, attempt
        except _ActorsDied as e:
            failure = str(e)
        except ray.exceptions.RayActorError as e:
            failure = type(e).__name__
        except Exception as e:  # a failed Spark job (a Py4J trace of pages): one line
            failure = _first_line(e)
        dead = dead or _dead_nodes(dep)
        if not dead:
            raise DeploymentError(f"executor feed failed (no node actor died): {failure}")
        if not dep.auto_recover:
            raise DeploymentError(
                f"node(s) {', '.join(dead)} died during the executor feed and auto_recover is "
                f"off: {failure}"
            )
        dep.note_event_time(_applied_time(dep, pieces, job, set(dead)))
        for nid, error in dead.items():
            if nid in dep.nodes:
                dep.actor_died(nid, error)
    raise DeploymentError(
        f"executor feed: pieces {lo}-{hi - 1} failed {max_attempts} times (node actors kept "
        f"dying); last: {failure}"
    )


class _ActorsDied(Exception):
    """The driver saw node actors die while a segment's Spark job ran (and cancelled it)."""


#: seconds between the driver's looks at the actors while a Spark job pushes to them
WATCH_S = 0.5


class _SparkJob:
    """One segment's Spark job on a thread of its own, in a job group of its own, so the driver
    can watch the actors meanwhile and cancel the job when one dies."""

    def __init__(self, sc, part: list, fn):
        import threading

        self.sc = sc
        self.group = f"weaveplace-feed-{secrets.token_hex(6)}"
        self.out: list | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(part, fn), daemon=True)
        self.thread.start()

    def _run(self, part: list, fn) -> None:
        try:
            # job groups are per thread (PySpark's pinned threads): set here, not by the caller
            self.sc.setJobGroup(self.group, "weaveplace executor feed", interruptOnCancel=True)
            self.out = self.sc.parallelize(part, len(part)).mapPartitions(fn).collect()
        except BaseException as e:  # surfaced by ``result`` on the driver's thread
            self.error = e

    def running(self, wait_s: float) -> bool:
        self.thread.join(wait_s)
        return self.thread.is_alive()

    def cancel(self, timeout_s: float = 120.0) -> None:
        """Cancel the job (its tasks are interrupted; a task still pushing pushes under an
        epoch the actors no longer accept) and wait until ``collect`` has returned."""
        self.sc.cancelJobGroup(self.group)
        self.thread.join(timeout_s)
        if self.thread.is_alive():
            raise DeploymentError(
                f"executor feed: the cancelled Spark job did not end in {timeout_s:.0f} s"
            )

    def result(self) -> list:
        if self.error is not None:
            raise self.error
        return self.out or []


def _watch_job(dep, run: _SparkJob) -> dict[str, BaseException]:
    """Watch the node actors while ``run`` runs: one ping outstanding per node, looked at every
    ``WATCH_S``.  A ping that returns is the node's sign of life (``last_seen``); one that
    fails because the actor died (its process killed, or its Ray node declared dead by the
    health checks, ``cluster.failure_timeout_s``) cancels the job.  So a dead actor is found
    within ``WATCH_S`` of Ray knowing it, not when Spark's task retries run out.  Returns the
    dead nodes with their errors ({} when the job ended by itself)."""
    import ray

    pings: dict[str, Any] = {}
    while run.running(WATCH_S):
        dead: dict[str, BaseException] = {}
        for nid in list(dep.nodes):
            ref = pings.get(nid)
            if ref is None:
                pings[nid] = dep.nodes[nid].actor.ping.remote()
                continue
            if not ray.wait([ref], timeout=0)[0]:
                continue  # busy with pushes, or silent: Ray's health checks decide
            pings[nid] = None
            try:
                ray.get(ref)
                _seen(dep, [nid])
            except ray.exceptions.ActorUnavailableError:
                pass  # maybe transient (Ray's own words): ask again
            except ray.exceptions.RayActorError as e:
                dead[nid] = e
        if dead:
            run.cancel()
            return dead
    return {}


def _applied_time(dep, pieces, job: dict, dead: set[str], timeout_s: float = 10.0) -> int | None:
    """The newest timestamp of the rows the live nodes had applied when a fault was found
    (the event time of its failure event; the driver sees no tuple on this route): the rows
    of the piece of the newest ``last_seq`` among them, up to that sub-batch (sliced mode: the
    whole piece), read from the file's ``ts_ms`` column.  None if no node applied any."""
    import pyarrow.parquet as pq
    import ray

    refs = [n.actor.metrics.remote() for nid, n in dep.nodes.items() if nid not in dead]
    seqs = []
    for ref in refs:
        try:
            seqs.append(int(ray.get(ref, timeout=timeout_s)["last_seq"]))
        except (ray.exceptions.RayError, KeyError, TypeError):
            continue
    at = max(seqs, default=-1) - job["base"]
    if at < 0 or at // SUBS_PER_PIECE >= len(pieces):
        return None
    _, rg, a, b = pieces[at // SUBS_PER_PIECE]
    if job["slicing"] is None:
        b = min(b, a + (at % SUBS_PER_PIECE + 1) * job["batch_rows"])
    ts = pq.ParquetFile(job["path"]).read_row_group(rg, columns=["ts_ms"]).column(0)
    return int(ts.slice(a, b - a).to_numpy().max()) if b > a else None


def _seen(dep, nids: list[str]) -> None:
    """A call to these nodes returned just now: their last sign of life (``detect_s``)."""
    now = time.time()
    for nid in nids:
        if nid in dep.nodes:
            dep.nodes[nid].last_seen = now


def _dead_nodes(dep, timeout_s: float = 120.0) -> dict[str, BaseException | None]:
    """The nodes whose actor does not answer a ping, with the ping's error."""
    import ray

    refs = {nid: n.actor.ping.remote() for nid, n in dep.nodes.items()}
    dead: dict[str, BaseException | None] = {}
    for nid, ref in refs.items():
        try:
            ray.get(ref, timeout=timeout_s)
        except ray.exceptions.RayActorError as e:
            dead[nid] = e
        except ray.exceptions.GetTimeoutError:
            dead[nid] = None
    return dead


def _log_segment(dep, part, job: dict, targets: dict, chunks: dict) -> None:
    """Log the segment's sub-batches (their place in the file: ``PieceSource``) for replays;
    each target node has now been sent all of its own (``submitted_seq``).  Raw mode: one
    entry per sub-batch of rows for every target; sliced mode: one per stream and chunk of
    its slices (``chunks``: per piece, chunks per stream, as the task cut them), for the
    nodes hosting that stream."""
    if not dep.auto_recover or not part:
        return
    sl = job["slicing"]
    seq = -1
    for p, rg, a, b in part:
        subs = sub_batches(job["path"], rg, a, b, job["batch_rows"], job["columns"], sl, chunks[p])
        for j, src in subs:
            seq = job["base"] + p * SUBS_PER_PIECE + j
            streams = tuple(job["columns"][1:]) if src.stream is None else (src.stream,)
            hosts = tuple(sorted(n for n, cols in targets.items() if set(streams) & set(cols)))
            dep.log_for_replay(LoggedBatch(seq, src.stream, src, hosts, streams))
    for nid in targets:
        if nid in dep.nodes:
            dep.nodes[nid].submitted_seq = max(dep.nodes[nid].submitted_seq, seq)


def _first_line(e: BaseException) -> str:
    """The most telling line of a (Py4J-wrapped) exception."""
    text = str(e)
    for line in text.splitlines():
        line = line.strip()
        if "Error" in line and "Py4J" not in line and "Traceback" not in line:
            return line[:300]
    return (text.splitlines() or [type(e).__name__])[0][:300]
