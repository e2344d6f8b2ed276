"""Live mode over a directory: Spark Structured Streaming picks up DEBS files as they arrive,
``foreachBatch`` pushes each micro-batch into a running ``Deployment``, and the answers the
watermark releases are written at once, one Parquet part per micro-batch.

Source.  Spark's file source on the ``binaryFile`` format: Spark watches the directory (one
listing per trigger, ``files_per_batch`` new files at most per micro-batch, files already there
first), remembers which files it has handed over, and gives ``foreachBatch`` each new file's
path, modification time and bytes.  The bytes are parsed on the driver by ``cluster.debs_reader``'s own
readers (``read_debs_buffer``): a name ending ``.parquet``/``.pq`` is DEBS Parquet (schema
checked), anything else is the DEBS text format (TSV, tolerant: malformed lines are counted and
rejected with their line numbers, good lines kept).  Why bytes and not Spark's ``csv``/
``parquet`` readers: the text format needs the project's strict tolerant parser (exact line
numbers, per-line reasons, the same rows as a batch run), a file is the unit of the ordering
contract below, and a broken file (a corrupt Parquet footer, a wrong schema) is rejected whole
instead of failing the query.  Parsing on the driver is not the bottleneck: the reader does
~1.2 M rows/s per core, the driver -> actor push ~370 K rows/s (DESIGN.md s. 8).

Ordering contract (DESIGN.md s. 1).  The stream is the files in the order Spark hands them over
- by modification time, ties by path - each file's rows put in ``(ts_ms, index)`` order (as
``feed_raw``'s ``order="auto"`` does), files fed one after another.  All DEBS streams share
``ts_ms``, so this is event-time order for every stream at once.  Hence the answers and late
tuples are exactly those of ``feed_raw(order="file")`` on the concatenation of the (sorted)
files in that order, however Spark groups files into micro-batches.  Intended use: one file =
one time range, files arriving in ascending time order (a logger rotating every minute).  A
file that reaches back in time is not an error: its rows within ``allowed_lateness`` of the
newest tuple seen are folded in, rows whose windows were already emitted are *late* - counted
and written to ``late.parquet``, never folded in, never dropped.

Answers.  After each micro-batch the deployment checkpoints and hands over the answers made
due so far (``Deployment.take_answers``: exactly once even if an actor is recovered or its
node lost later);
they are written as ``answers.parquet/part-<batch>.parquet`` (DESIGN.md s. 1 columns), new late
tuples as ``late.parquet/part-<batch>.parquet``.  A part appears atomically (written under a
hidden name, then renamed), so ``pyarrow.parquet.read_table(out / "answers.parquet")`` (or
pandas, Spark, DuckDB) reads the answers so far at any moment; each part is sorted by
``(query_id, window_start)``, the dataset as a whole is not.  ``value`` has one type for the
whole run: int64 when every query's answer is integer on its DEBS column, else float64.

Faults.  The deployment's recovery works inside a stream unchanged: a dead actor is restarted
from its checkpoint, a node lost for good (``Deployment.lose_node``, a Ray node gone, or a
drill) has its trees re-placed on the survivors, and the answers and late tuples written stay
exactly those of a fault-free run (answers are handed over only through a checkpoint; late
tuples are counted per tree id, and a moved tree keeps its late tuples in its snapshot).  Only
``node_id`` of late tuples written after a re-placement names the adopting node.  A drill's
``at_batch`` and ``checkpoint_every`` count ``Deployment.feed`` batches: at most
``batch_rows`` rows of one file each, files in the order above, so they do not depend on how
Spark groups files into micro-batches.

Backpressure.  ``foreachBatch`` is synchronous: Spark starts the next micro-batch only when the
previous one is fed, and ``Deployment.feed`` blocks while an actor has ``max_in_flight`` calls
outstanding.  Unread files simply wait in the directory.  Driver memory holds one micro-batch
of file bytes (``files_per_batch`` files); files above 1 GiB are rejected whole (split them).

Stop.  ``idle_timeout_s`` (no new file for that long), ``max_files``, ``timeout_s`` (wall
clock), ``request_stop()`` from another thread, or Ctrl-C (SIGINT, when run in the main thread;
a second Ctrl-C aborts the flush at once; under ``run_stream`` Ctrl-C during the final teardown
of actors, Spark and Ray is ignored so that it completes).  A stop waits for the micro-batch in
progress (files are fed whole or not at all), stops the query, flushes every pending window
(``Deployment.finish``) and writes the last parts.  The run is not resumable: Spark's
checkpoint is a temporary directory, because the actors' state is not in it; a new run reads
every file of the directory again.

Put files in place atomically (write them elsewhere on the same file system, or under a name
starting with ``.`` or ``_``, which Spark ignores, then rename): Spark may otherwise read a file
that is still being written.  A file is read once; changing it afterwards has no effect.  Only
files directly in the directory are read: subdirectories are ignored, except that Spark takes
``name=value`` subdirectories for partitions (avoid such names there).  Empty files are skipped
by Spark's scan (not even counted).
"""

from __future__ import annotations

import io
import json
import os
import posixpath
import re
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .answer_blocks import ANSWER_SCHEMA_FLOAT, ANSWER_SCHEMA_INT, empty_late
from .deploy import Deployment
from .live import default_pinning, load_plan, started_runtimes, write_final_plan
from .spark_feed import nondecreasing

#: Files above this size are rejected whole: Spark's binaryFile source and Arrow's binary
#: arrays stop at 2 GiB, and a micro-batch's bytes sit in driver memory.
MAX_FILE_BYTES = 1 << 30
LATE_SCHEMA = empty_late().schema
_PART_RE = re.compile(r"part-\d+\.parquet")


class StreamError(RuntimeError):
    """A live stream that cannot start or could not go on (one line, no traceback for users)."""


@dataclass(frozen=True)
class StreamOptions:
    """How to watch the directory and when to stop (``None``: no such limit)."""

    pattern: str = "*"  # glob over file names (Spark's pathGlobFilter)
    files_per_batch: int = 8  # Spark's maxFilesPerTrigger
    poll_s: float = 1.0  # trigger interval: one directory listing per poll
    idle_timeout_s: float | None = None
    max_files: int | None = None
    timeout_s: float | None = None
    batch_rows: int = 1 << 18  # rows per Deployment.feed call
    extra_columns: str = "reject"  # a text line's trailing 57th field: "reject" or "ignore"

    def __post_init__(self):
        if self.files_per_batch < 1:
            raise ValueError("files_per_batch must be >= 1")
        if self.poll_s <= 0 or self.batch_rows < 1:
            raise ValueError("poll_s must be > 0 and batch_rows >= 1")
        for k in ("idle_timeout_s", "max_files", "timeout_s"):
            v = getattr(self, k)
            if v is not None and v <= 0:
                raise ValueError(f"{k} must be > 0 or None")
        if self.idle_timeout_s is not None and self.idle_timeout_s <= self.poll_s:
            raise ValueError(
                f"idle_timeout_s ({self.idle_timeout_s}) must exceed poll_s "
                f"({self.poll_s}): Spark looks for new files once per poll"
            )
        if self.extra_columns not in ("reject", "ignore"):
            raise ValueError(
                f"extra_columns must be 'reject' or 'ignore', got {self.extra_columns!r}"
            )
        if not self.pattern or "/" in self.pattern:
            raise ValueError(f"pattern must be a non-empty file-name glob, got {self.pattern!r}")


@dataclass
class FileRecord:
    """One file handed over by Spark: what became of it."""

    name: str
    batch: int
    rows: int = 0
    rejected_rows: int = 0
    glued_lines: int = 0  # text lines holding two records, split (cluster.debs_text)
    extra_column_lines: int = 0  # text lines whose trailing extra field was dropped
    error: str | None = None  # set when the whole file was rejected
    ts_min: int | None = None
    ts_max: int | None = None
    t_s: float = 0.0  # seconds after the stream started when it was fed


@dataclass
class StreamStats:
    """Counters of a stream, updated after every micro-batch (read them from any thread)."""

    directory: str = ""
    files: int = 0  # files handed over and read (rejected ones included)
    files_rejected: int = 0  # files rejected whole (unreadable, too big, vanished)
    rows: int = 0  # tuples fed
    rows_rejected: int = 0  # malformed lines of text files
    glued_lines: int = 0  # text lines holding two records, split into two rows
    batches: int = 0  # micro-batches that brought files
    answers: int = 0  # answer rows written
    late: int = 0  # late-tuple rows written (per tree)
    parts: int = 0  # answer parts written
    max_ts: int | None = None  # newest event time fed (ms)
    allowed_lateness: int = 0
    seconds: float = 0.0
    idle_s: float = 0.0  # seconds since the last file (or the start)
    stop_reason: str | None = None
    files_log: list[FileRecord] = field(default_factory=list)
    timeline: list[dict] = field(default_factory=list)
    deployment_metrics: dict = field(default_factory=dict)

    @property
    def watermark(self) -> int | None:
        return None if self.max_ts is None else self.max_ts - self.allowed_lateness

    def line(self) -> str:
        """One short progress line: files, micro-batches, rows, answers, late tuples, the
        watermark (event time, UTC) and the seconds since the last file."""
        wm = self.watermark
        wm_s = "-" if wm is None else datetime.fromtimestamp(wm / 1000, UTC).strftime("%H:%M:%S")
        rej = f" ({self.files_rejected} rejected)" if self.files_rejected else ""
        bad = f" ({self.rows_rejected:,} bad)" if self.rows_rejected else ""
        return (
            f"{self.files} files{rej}, {self.batches} batches, {self.rows:,} rows{bad}, "
            f"{self.answers:,} answers, {self.late:,} late, wm {wm_s}, "
            f"idle {self.idle_s:.0f}s"
        )

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("deployment_metrics")
        d["files_log"] = [asdict(f) for f in self.files_log]
        d["watermark"] = self.watermark
        return d


class _PartWriter:
    """A Parquet dataset directory written one part at a time, each part atomically."""

    def __init__(self, path: Path, schema: pa.Schema):
        self.path, self.schema, self.parts, self.rows = path, schema, 0, 0
        clear_dataset(path)
        path.mkdir(parents=True)

    def write(self, table: pa.Table, batch: int) -> None:
        if not table.num_rows:
            return
        self._put(table.select(self.schema.names).cast(self.schema), f"part-{batch:05d}.parquet")
        self.parts += 1
        self.rows += table.num_rows

    def close(self) -> None:
        """An empty dataset still gets one (empty) part, so readers know its schema."""
        if not self.parts:
            self._put(self.schema.empty_table(), "part-00000.parquet")

    def _put(self, table: pa.Table, name: str) -> None:
        tmp = self.path / f".{name}.tmp"
        pq.write_table(table, tmp)
        os.replace(tmp, self.path / name)


def clear_dataset(path: Path) -> None:
    """Remove a previous run's output at ``path`` (a file, or a directory of our parts only)."""
    if path.is_dir():
        foreign = [
            p.name
            for p in path.iterdir()
            if not (_PART_RE.fullmatch(p.name) or p.name.startswith("."))
        ]
        if foreign:
            raise StreamError(
                f"{path} holds files weaveplace did not write ({foreign[:3]}); "
                f"choose another output directory"
            )
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def answer_schema(deployment: Deployment) -> pa.Schema:
    """The answers' schema for the whole run, fixed up front so that every part agrees: value
    is int64 iff every query's answer is integer on its DEBS column (int columns: sum, min,
    max, range, count; avg/stddev and boolean columns give float64), as in a batch run."""
    from cluster.debs_format import DEBS_SCHEMA
    from executors.aggregates import get_aggregate

    all_int = True
    for n in deployment.nodes.values():
        for t in n.spec["trees"]:
            col_int = pa.types.is_integer(DEBS_SCHEMA.field(t["stream"]).type)
            all_int &= all(
                get_aggregate(q["aggregate"]).output_is_int(col_int) for q in t["queries"]
            )
    return ANSWER_SCHEMA_INT if all_int else ANSWER_SCHEMA_FLOAT


def _binary_file_schema():
    from pyspark.sql import types as T

    return T.StructType(
        [
            T.StructField("path", T.StringType(), False),
            T.StructField("modificationTime", T.TimestampType(), False),
            T.StructField("length", T.LongType(), False),
            T.StructField("content", T.BinaryType(), True),
        ]
    )


def _one_line(exc: BaseException, limit: int = 200) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


class DirectoryStream:
    """One live stream: ``directory`` -> Spark -> ``deployment`` -> ``out_dir``.

    ``run()`` blocks until a stop condition (see the module docstring), flushes the deployment
    and returns the ``StreamStats``; the deployment's actors stay alive (the caller owns them,
    e.g. for ``metrics()``), Spark's query is stopped.  ``progress(stats)`` is called from the
    calling thread about every ``tick_s`` while the stream runs.
    """

    tick_s = 0.25

    def __init__(
        self,
        deployment: Deployment,
        spark,
        directory: str | Path,
        out_dir: str | Path,
        options: StreamOptions | None = None,
        progress: Callable[[StreamStats], None] | None = None,
    ):
        from cluster.debs_format import DEBS_SCHEMA

        self.dep, self.spark = deployment, spark
        self.directory = Path(directory).resolve()
        self.out = Path(out_dir).resolve()
        self.options = options or StreamOptions()
        self.progress = progress
        if not self.directory.is_dir():
            raise StreamError(f"watched directory not found: {str(self.directory)!r}")
        if self.out == self.directory:
            raise StreamError(
                f"the output directory must not be the watched directory "
                f"({str(self.out)!r}): outputs would be read as input"
            )
        self.streams = list(deployment.streams)
        unknown = [s for s in self.streams if s not in DEBS_SCHEMA.names or s == "ts_ms"]
        if unknown:
            raise StreamError(f"plan streams {unknown} are not DEBS columns")
        self.stats = StreamStats(
            directory=str(self.directory), allowed_lateness=deployment.allowed_lateness
        )
        self._lock = threading.Lock()  # held while a micro-batch is processed
        self._stop_reason: str | None = None
        self._error: BaseException | None = None
        self._interrupts = 0
        self._t0 = self._last_file = time.monotonic()

    def _open_outputs(self, out: Path) -> None:
        """A fresh run's outputs (a previous run's parts and rejects are removed)."""
        self._answers = _PartWriter(out / "answers.parquet", self.answer_schema())
        self._late = _PartWriter(out / "late.parquet", LATE_SCHEMA)
        self._rejects = out / "rejects"
        if self._rejects.is_dir():
            for p in self._rejects.glob("*.rejects.tsv"):
                p.unlink()

    def _already_fed(self, row) -> bool:
        """A file handed over again (``cluster.service``: a resumed run) is skipped."""
        return False

    def answer_schema(self) -> pa.Schema:
        """The answers' schema, fixed for the run (``cluster.service`` overrides it)."""
        return answer_schema(self.dep)

    # -- control ------------------------------------------------------------------------------
    def request_stop(self, reason: str = "requested") -> None:
        """Ask the stream to stop after the micro-batch in progress (thread-safe)."""
        if self._stop_reason is None:
            self._stop_reason = reason

    def run(self) -> StreamStats:
        out = self.out
        out.mkdir(parents=True, exist_ok=True)
        self._open_outputs(out)
        self._warm_up()
        ckpt = tempfile.mkdtemp(prefix="weaveplace-stream-")
        query = None
        try:
            with self._sigint_stops():
                try:
                    query = self._start(ckpt)
                except Exception as exc:  # e.g. Spark refusing the directory's layout
                    raise StreamError(
                        f"Spark cannot watch {self.directory}: {_one_line(exc)}"
                    ) from exc
                self._t0 = self._last_file = time.monotonic()
                self._watch(query)
                with self._lock:  # let a micro-batch in progress finish: files go whole
                    self.request_stop("stopped")
                self._between_triggers(query)
                query.stop()
                if self._error is not None:
                    raise self._error
                self._finish()
        finally:
            if query is not None and query.isActive:
                self._stop_quietly(query)
            shutil.rmtree(ckpt, ignore_errors=True)
            self.stats.seconds = time.monotonic() - self._t0
        return self.stats

    def _warm_up(self) -> None:
        """Have the actors load their numba kernels while Spark starts the query, so the first
        file's answers do not wait for them (``NodeCore.warmup`` leaves the state untouched;
        an actor runs one call at a time, so its first ``ingest`` simply queues behind it).
        The results are collected in ``_finish`` (errors surface there, except an actor that
        died meanwhile: a fault the deployment recovers from or re-places)."""
        self._warmups = [n.actor.warmup.remote() for n in self.dep.nodes.values()]

    # -- Spark ----------------------------------------------------------------------------------
    def _start(self, checkpoint_dir: str):
        o = self.options
        df = (
            self.spark.readStream.format("binaryFile")
            .schema(_binary_file_schema())
            .option("pathGlobFilter", o.pattern)
            .option("maxFilesPerTrigger", o.files_per_batch)
            .option("maxFileAge", "36500d")  # never skip a file for its age
            .option("ignoreMissingFiles", "true")  # a file deleted before it was read
            .load(str(self.directory))
        )
        return (
            df.writeStream.foreachBatch(self._on_batch)
            .trigger(processingTime=f"{int(o.poll_s * 1000)} milliseconds")
            .option("checkpointLocation", checkpoint_dir)
            .queryName(f"weaveplace-{os.getpid()}-{id(self)}")
            .start()
        )

    def _watch(self, query) -> None:
        """Poll until a stop condition.  Idle means: no micro-batch running, Spark between
        triggers with no new data, for ``idle_timeout_s`` since the last file - and Spark has
        finished its first trigger (files already there at the start are handed over by it,
        and its first listing and jobs can take seconds), so the clock starts only then."""
        from pyspark.errors import StreamingQueryException

        o = self.options
        ready = False
        while self._stop_reason is None:
            if not query.isActive:  # Spark ended the query by itself
                exc = query.exception()
                raise StreamError(
                    f"Spark stopped the stream over {self.directory}: "
                    f"{_one_line(exc) if exc else 'no reason given'}"
                )
            now = time.monotonic()
            status = query.status
            spark_idle = (
                not status["isTriggerActive"]
                and not status["isDataAvailable"]
                and not status["message"].startswith("Initializing")
            )
            if not ready and spark_idle:
                ready = True
                self._last_file = max(self._last_file, now)
            busy = self._lock.locked()
            self.stats.idle_s = now - self._last_file if ready and not busy else 0.0
            if o.timeout_s is not None and now - self._t0 >= o.timeout_s:
                self.request_stop("timeout")
            elif (
                o.idle_timeout_s is not None
                and spark_idle
                and not busy
                and self.stats.idle_s >= o.idle_timeout_s
            ):
                self.request_stop("idle")
            else:
                try:
                    query.awaitTermination(self.tick_s)
                except StreamingQueryException:
                    pass  # seen as not isActive on the next turn
            self._report()
        self._report()

    def _between_triggers(self, query, wait_s: float = 5.0) -> None:
        """Wait (a little) until Spark is between triggers: stopping a query interrupts its
        thread, and an interrupted Spark job logs errors even though nothing is lost."""
        t = time.monotonic()
        while query.isActive and query.status["isTriggerActive"] and time.monotonic() - t < wait_s:
            time.sleep(0.02)

    def _stop_quietly(self, query) -> None:
        try:
            query.stop()
        except Exception:  # Spark already going down (e.g. a second Ctrl-C): nothing to save
            pass

    @contextmanager
    def _sigint_stops(self):
        """Ctrl-C = request_stop("interrupt"); a second one raises KeyboardInterrupt at once.
        Only the main thread may set signal handlers: elsewhere this is a no-op."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(signum, frame):
            self._interrupts += 1
            if self._interrupts > 1:
                raise KeyboardInterrupt
            self.request_stop("interrupt")

        previous = signal.signal(signal.SIGINT, handler)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)

    def _report(self) -> None:
        if self.progress is not None:
            self.progress(self.stats)

    # -- one micro-batch (Spark's foreachBatch thread) ----------------------------------------
    def _on_batch(self, batch_df, batch_id: int) -> None:
        with self._lock:
            if self._stop_reason is not None:  # stopping: leave these files alone
                return
            try:
                self._process(batch_df)
            except BaseException as exc:  # raised again in run(); Spark would only log it
                self._error = exc
                self.request_stop("error")

    def _process(self, batch_df) -> None:
        from pyspark.sql import functions as F

        t1 = time.monotonic()
        meta = sorted(
            batch_df.select("path", "modificationTime", "length").collect(),
            key=lambda r: (r["modificationTime"], r["path"]),
        )
        meta = [r for r in meta if not self._already_fed(r)]
        if self.options.max_files is not None:
            meta = meta[: max(0, self.options.max_files - self.stats.files)]
        if not meta:
            return
        content: dict[str, Any] = {}
        if any(r["length"] <= MAX_FILE_BYTES for r in meta):
            # the length filter is pushed into the binaryFile reader: big files are not read
            tbl = (
                batch_df.where(
                    (F.col("length") <= MAX_FILE_BYTES)
                    & F.col("path").isin([r["path"] for r in meta])
                )
                .select("path", "content")
                .toArrow()
            )
            col = tbl.column("content")
            content = {p: col[i].as_buffer() for i, p in enumerate(tbl.column("path").to_pylist())}
        batch = self.stats.batches
        recs: list[FileRecord] = []
        for r in meta:
            rec = FileRecord(posixpath.basename(r["path"]), batch)
            table = self._read(rec, r["length"], content.get(r["path"]))
            if table is not None and table.num_rows:
                self._feed(table, rec)
            rec.t_s = time.monotonic() - self._t0
            recs.append(rec)
        ans = late = None
        if any(rec.rows for rec in recs):
            ans = self.dep.take_answers()
            late = self.dep.take_late()
            self._answers.write(ans, batch)
            self._late.write(late, batch)
        # counters move only now, with the batch's parts on disk: whoever sees "n files"
        # also finds their answers
        st = self.stats
        rows = sum(rec.rows for rec in recs)
        st.files += len(recs)
        st.files_log.extend(recs)
        st.files_rejected += sum(rec.error is not None for rec in recs)
        st.rows_rejected += sum(rec.rejected_rows for rec in recs)
        st.glued_lines += sum(rec.glued_lines for rec in recs)
        st.rows += rows
        fed = [rec.ts_max for rec in recs if rec.rows]
        if fed:
            st.max_ts = max(fed + ([st.max_ts] if st.max_ts is not None else []))
        st.answers += ans.num_rows if ans is not None else 0
        st.late += late.num_rows if late is not None else 0
        st.parts = self._answers.parts
        st.batches += 1
        now = time.monotonic()
        st.timeline.append(
            {
                "t_s": now - self._t0,
                "rows": rows / max(now - t1, 1e-9),
                "files": len(recs),
                "answers": ans.num_rows if ans is not None else 0,
                "late": late.num_rows if late is not None else 0,
            }
        )
        self._last_file = now
        if self.options.max_files is not None and st.files >= self.options.max_files:
            self.request_stop("max_files")

    def _read(self, rec: FileRecord, length: int, data) -> pa.Table | None:
        """Parse one file with the DEBS readers; a file that cannot be read at all is rejected
        whole (``rec.error``), malformed lines of a text file one by one."""
        from cluster.debs_reader import read_debs_buffer

        if length > MAX_FILE_BYTES:
            return self._reject_file(rec, f"file larger than {MAX_FILE_BYTES >> 20} MiB; split it")
        if data is None:
            return self._reject_file(rec, "file vanished before it was read")
        rej = io.BytesIO()
        try:
            reader = read_debs_buffer(
                data,
                rec.name,
                rejects=rej,
                batch_rows=1 << 20,
                extra_columns=self.options.extra_columns,
            )
            table = reader.read_all()
        except (ValueError, OSError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            return self._reject_file(rec, f"unreadable: {_one_line(exc)}")
        rec.rejected_rows = reader.stats.rows_rejected
        rec.glued_lines = reader.stats.glued_lines
        rec.extra_column_lines = reader.stats.extra_column_lines
        if rec.rejected_rows:
            self._write_rejects(rec.name, rej.getvalue())
        return table

    def _reject_file(self, rec: FileRecord, reason: str) -> None:
        """Line 0 of the rejects file stands for the whole file."""
        rec.error = reason
        self._write_rejects(rec.name, b"line\treason\traw\n0\t" + reason.encode() + b"\t\n")
        return None

    def _write_rejects(self, name: str, data: bytes) -> None:
        self._rejects.mkdir(parents=True, exist_ok=True)
        tmp = self._rejects / f".{name}.rejects.tsv.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, self._rejects / f"{name}.rejects.tsv")

    def _feed(self, table: pa.Table, rec: FileRecord) -> None:
        """One file's rows, in (ts_ms, index) order, into the deployment (blocking on its
        backpressure)."""
        t = table.select(["ts_ms", "index", *self.streams]).combine_chunks()
        ts = t.column("ts_ms").to_numpy()
        if not nondecreasing(ts, None):
            t = t.sort_by([("ts_ms", "ascending"), ("index", "ascending")])
        t = t.select(["ts_ms", *self.streams])
        for b in t.to_batches(max_chunksize=self.options.batch_rows):
            self.dep.feed(None, b)
        rec.rows = t.num_rows
        rec.ts_min, rec.ts_max = int(ts.min()), int(ts.max())

    # -- end ----------------------------------------------------------------------------------
    def _finish(self) -> None:
        """Flush every pending window and write the last parts (flushing adds no late tuples,
        so the late tuples are taken before)."""
        import ray

        for ref in self._warmups:
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError:
                pass  # the actor was killed or its node lost since: the deployment rebuilt it
        batch = self.stats.batches
        late = self.dep.take_late()
        res = self.dep.finish()
        self._answers.write(res.answers, batch)
        self._late.write(late, batch)
        self._answers.close()
        self._late.close()
        self.stats.answers += res.answers.num_rows
        self.stats.late += late.num_rows
        self.stats.parts = self._answers.parts
        self.stats.stop_reason = self._stop_reason
        self.stats.deployment_metrics = res.metrics


def stream_directory(
    deployment: Deployment,
    spark,
    directory: str | Path,
    out_dir: str | Path,
    options: StreamOptions | None = None,
    progress: Callable[[StreamStats], None] | None = None,
) -> StreamStats:
    """Watch ``directory`` and feed ``deployment`` until a stop condition; see the module
    docstring.  Writes ``answers.parquet/``, ``late.parquet/`` and ``rejects/`` in ``out_dir``."""
    return DirectoryStream(deployment, spark, directory, out_dir, options, progress).run()


class _SigintGuard:
    """``run_stream``'s Ctrl-C policy outside the stream itself (which has its own, see
    ``DirectoryStream``): while Ray, Spark and the actors start, Ctrl-C aborts
    (KeyboardInterrupt); once the stream has stopped only the teardown is left (actors, Spark,
    Ray: a few seconds), and Ctrl-C is ignored so that it completes.  PySpark's own handler
    would cancel jobs through Py4J from inside a Py4J call (tracebacks, a half-stopped
    context), so it is kept out while ``run_stream`` runs; the handler found at the start is
    restored at the end.  Outside the main thread this does nothing."""

    def __init__(self):
        self.quiet = False
        self.previous = None
        self.active = threading.current_thread() is threading.main_thread()

    def _handler(self, signum, frame):
        if not self.quiet:
            raise KeyboardInterrupt

    def install(self) -> None:
        if self.active:
            prev = signal.signal(signal.SIGINT, self._handler)
            if self.previous is None:
                self.previous = prev

    def restore(self) -> None:
        if self.active and self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)


@dataclass
class StreamResult:
    stats: StreamStats
    metrics: dict
    out_dir: Path


def run_stream(
    plan: Mapping[str, Any] | str | Path,
    directory: str | Path,
    out_dir: str | Path,
    *,
    options: StreamOptions | None = None,
    ray_address: str | None = None,
    num_cpus: int = 2,
    spark=None,
    spark_master: str = "local[*]",
    technique: str | None = None,
    allowed_lateness: int = 0,
    max_in_flight: int = 4,
    checkpoint_every: int | None = None,
    max_log_bytes: int | None = 128 << 20,
    pin_nodes: bool | None = None,
    faults: list[Mapping[str, Any]] | None = None,
    progress: Callable[[StreamStats], None] | None = None,
) -> StreamResult:
    """``run_live`` for a directory: deploy ``plan`` on Ray, stream ``directory`` through
    Spark until a stop condition, write the answers as they come plus ``metrics.json`` (and
    ``plan_final.json`` if a node was lost for good or added, as ``run_live`` does).

    ``checkpoint_every``, ``max_log_bytes``, ``pin_nodes`` (default: when ``ray_address`` is
    given) and ``faults`` are ``Deployment``'s.  A drill's ``at_batch`` counts the feed
    batches (``options.batch_rows`` rows of one file each, files in arrival order), not
    Spark's micro-batches, so a drill hits the same rows however Spark groups the files;
    a fault whose batch is never fed does not fire (``metrics["faults"]``).  Answers and
    late tuples stay exactly those of a fault-free run (``Deployment.take_answers`` /
    ``take_late``); ``node_id`` of a late tuple is the node hosting its tree when it was
    handed over.

    Owns what it starts (Ray unless one is running or an address is given, Spark unless a
    session is passed in) and stops it on every exit path, Ctrl-C included."""
    plan = load_plan(plan)
    pin_nodes = default_pinning(pin_nodes, ray_address)
    guard = _SigintGuard()
    guard.install()
    try:
        # a new SparkContext installs PySpark's SIGINT handler: take it back
        with started_runtimes(
            ray_address, num_cpus, spark, spark_master, on_new_spark=guard.install
        ) as (spark, startup):
            with Deployment(
                plan,
                technique=technique,
                allowed_lateness=allowed_lateness,
                max_in_flight=max_in_flight,
                checkpoint_every=checkpoint_every,
                max_log_bytes=max_log_bytes,
                pin_nodes=pin_nodes,
                faults=faults,
            ) as dep:
                stats = stream_directory(dep, spark, directory, out_dir, options, progress)
                guard.quiet = True  # only teardown left: let it complete
                final_plan = dep.plan
    finally:
        guard.restore()
    metrics = dict(stats.deployment_metrics)
    metrics["answers"] = stats.answers  # finish() counted only the last (flushed) part
    metrics["stream"] = stats.to_dict()
    metrics["feed"] = {
        "mode": "stream",
        "rows": stats.rows,
        "batches": stats.batches,
        "seconds": stats.seconds,
        "rows_per_s": stats.rows / stats.seconds if stats.seconds else 0.0,
        "timeline": stats.timeline,
    }
    metrics["startup"] = startup
    metrics["data_path"] = str(directory)
    out = Path(out_dir)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1, default=float))
    write_final_plan(out, final_plan, bool(metrics.get("replacements") or metrics.get("additions")))
    return StreamResult(stats, metrics, out)
