"""A stream over a directory: Spark Structured Streaming picks up DEBS files as they arrive,
``foreachBatch`` pushes each micro-batch into a running ``Deployment``, and the answers the
watermark releases are written at once, one Parquet part per micro-batch.

Source.  Spark's file source on the ``binaryFile`` format: Spark watches the directory (one
listing per trigger, ``files_per_batch`` new files at most per micro-batch, files already there
first), remembers which files it has handed over, and gives ``foreachBatch`` each new file's
path, modification time and bytes.  The bytes are parsed on the driver by ``cluster.debs.reader``'s own
readers (``read_debs_buffer``): a name ending ``.parquet``/``.pq`` is DEBS Parquet (schema
checked), anything else is the DEBS text format (TSV, tolerant: malformed lines are counted and
rejected with their line numbers, good lines kept).  Why bytes and not Spark's ``csv``/
``parquet`` readers: the text format needs the project's strict tolerant parser (exact line
numbers, per-line reasons, the same rows as a batch run), a file is the unit of the ordering
contract below, and a broken file (a corrupt Parquet footer, a wrong schema) is rejected whole
instead of failing the query.  Parsing on the driver is not the bottleneck: the reader does
~1.2 M rows/s per core, the driver -> actor push ~370 K rows/s (docs/DESIGN.md s. 8).

Ordering contract (docs/DESIGN.md s. 1).  The stream is the files in the order Spark hands them over
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
they are written as ``answers.parquet/part-<batch>.parquet`` (docs/DESIGN.md s. 1 columns), new late
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
clock), ``request_stop()`` from another thread, or Ctrl-C or ``kill`` (SIGINT or SIGTERM, when
run in the main thread; the stop reason names the signal; a second signal aborts the flush at
once; under ``run_directory`` either signal during the final teardown of actors, Spark and Ray is
ignored so that it completes).  A stop waits for the micro-batch in
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

This module is the stream itself (the Spark source it starts and watches, and what each
micro-batch does with its files), one idea kept in one ``DirectoryStream`` class because
``cluster.service.stream`` subclasses it; its options and stats are in
``cluster.feeds.directory_options``, its output parts in ``cluster.answers.parts``, ``run_directory``
(runtimes and Ctrl-C around it) in ``cluster.runs.directory_run``.
"""

from __future__ import annotations

import io
import os
import posixpath
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa

from cluster.answers.blocks import LATE_SCHEMA, answer_schema
from cluster.answers.parts import PartWriter
from cluster.deployment.deployment import Deployment
from cluster.errors import StreamError
from cluster.feeds.directory_options import FileRecord, StreamOptions, StreamStats
from cluster.feeds.sliced import feed_file_slices
from cluster.feeds.time_chunks import nondecreasing
from cluster.runtime.signals import Stopped, on_stop_signals, signal_name
from placement.messages import one_line

#: Files above this size are rejected whole: Spark's binaryFile source and Arrow's binary
#: arrays stop at 2 GiB, and a micro-batch's bytes sit in driver memory.
MAX_FILE_BYTES = 1 << 30


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


class DirectoryStream:
    """One directory stream: ``directory`` -> Spark -> ``deployment`` -> ``out_dir``.

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
        from cluster.debs.format import DEBS_SCHEMA

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
        #: monotonic time the micro-batch in progress started (``None``: between batches)
        self.batch_started: float | None = None
        #: files handed over before the one being read now (``stats.files`` moves only at the
        #: end of a micro-batch; the drop boxes date their changes by it)
        self.files_before = 0
        self._stop_reason: str | None = None
        self._error: BaseException | None = None
        self._interrupts = 0
        self._t0 = self._last_file = time.monotonic()

    def open_outputs(self) -> None:
        """Open the output parts in ``out_dir``: a fresh run's (a previous run's parts and
        rejects are removed).  Public so an owner can open them before ``run`` (a service's
        commands write parts before the first micro-batch)."""
        out = self.out
        self._answers = PartWriter(out / "answers.parquet", self.answer_schema())
        self._late = PartWriter(out / "late.parquet", LATE_SCHEMA)
        self._rejects = out / "rejects"
        if self._rejects.is_dir():
            for p in self._rejects.glob("*.rejects.tsv"):
                p.unlink()

    def _already_fed(self, row) -> bool:
        """A file handed over again (``cluster.service.stream``: a resumed run) is skipped."""
        return False

    def answer_schema(self) -> pa.Schema:
        """The answers' schema, fixed for the run (``cluster.service.stream`` overrides it)."""
        return answer_schema(self.dep)

    # -- control ------------------------------------------------------------------------------
    @contextmanager
    def between_batches(self, timeout: float | None = None):
        """Hold off micro-batches while the block runs: a file is fed whole before or after it,
        never across it (a service's commands change the trees here).  ``timeout``: wait at
        most that long for the micro-batch in progress; the block gets whether it may go on
        (``False``: it must not touch the deployment)."""
        got = self._lock.acquire(timeout=-1 if timeout is None else timeout)
        try:
            yield got
        finally:
            if got:
                self._lock.release()

    def request_stop(self, reason: str = "requested") -> None:
        """Ask the stream to stop after the micro-batch in progress (thread-safe)."""
        if self._stop_reason is None:
            self._stop_reason = reason

    def run(self) -> StreamStats:
        out = self.out
        out.mkdir(parents=True, exist_ok=True)
        self.open_outputs()
        self._warm_up()
        ckpt = tempfile.mkdtemp(prefix="weaveplace-stream-")
        query = None
        try:
            with self._signal_stops():
                try:
                    query = self._start(ckpt)
                except Exception as exc:  # e.g. Spark refusing the directory's layout
                    raise StreamError(
                        f"Spark cannot watch {self.directory}: {one_line(exc, 200)}"
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
                    f"{one_line(exc, 200) if exc else 'no reason given'}"
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
            self._recover_idle()
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

    def _recover_idle(self) -> None:
        """Between micro-batches: nodes the deployment's health check found gone or stuck
        (``cluster.deployment.liveness``) are recovered now, not at the next file's first
        call to them (with no file arriving, a lost node would stay lost and unreported), and
        nodes left behind while silent that answer again are caught up now, not when the next
        file's batch is sent (an idle stream sends none: they would stay behind, the state
        unsaved and every command refused).  The owner's hook runs after either."""
        dep = self.dep
        recovering = dep.liveness.needs_attention()
        answering = [nid for nid in dep.lagging if not dep.liveness.silent(nid)]
        if not (recovering or answering) or not self._lock.acquire(blocking=False):
            return
        try:
            if self._stop_reason is None:
                dep.recover_declared()
                if dep.catch_up_answering() or recovering:
                    self._after_idle_recovery()
        except BaseException as exc:  # raised again in run(), as a micro-batch's error is
            self._error = exc
            self.request_stop("error")
        finally:
            self._lock.release()

    def _after_idle_recovery(self) -> None:
        """What an owner does after a recovery between micro-batches (``cluster.service.
        stream``: log the events, save the state)."""

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

    def _signal_stops(self):
        """Ctrl-C or SIGTERM = ``request_stop`` with the signal's name (``SIGINT``,
        ``SIGTERM``); a second one raises ``Stopped`` (a KeyboardInterrupt) at once.  Only
        the main thread may set signal handlers: elsewhere this is a no-op."""

        def handler(signum, frame):
            self._interrupts += 1
            if self._interrupts > 1:
                raise Stopped(signum)
            self.request_stop(signal_name(signum))

        return on_stop_signals(handler)

    def _report(self) -> None:
        if self.progress is not None:
            self.progress(self.stats)

    # -- one micro-batch (Spark's foreachBatch thread) ----------------------------------------
    def _on_batch(self, batch_df, batch_id: int) -> None:
        with self._lock:
            if self._stop_reason is not None:  # stopping: leave these files alone
                return
            self.batch_started = time.monotonic()
            try:
                self._process(batch_df)
            except BaseException as exc:  # raised again in run(); Spark would only log it
                self._error = exc
                self.request_stop("error")
            finally:
                self.batch_started = None

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
            self.files_before = self.stats.files + len(recs)
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
        from cluster.debs.reader import read_debs_buffer

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
            return self._reject_file(rec, f"unreadable: {one_line(exc, 200)}")
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
        for stream, part in self._parts(t):
            if getattr(self.dep, "mode", "raw") == "sliced":
                feed_file_slices(self.dep, part, self.options.batch_rows)
            else:
                for b in part.to_batches(max_chunksize=self.options.batch_rows):
                    self.dep.feed(stream, b)
        rec.rows = t.num_rows
        rec.ts_min, rec.ts_max = int(ts.min()), int(ts.max())

    def _parts(self, t: pa.Table) -> list[tuple[str | None, pa.Table]]:
        """What to feed of one file's rows (``ts_ms``, ``index``, the streams, in feed order):
        ``(stream, table)`` pairs, ``None`` for every stream of the table at once.  Here the
        whole file; the service's drop boxes feed, per kept fraction, the rows it keeps of
        its streams (``cluster.service.load_shedding``)."""
        return [(None, t.select(["ts_ms", *self.streams]))]

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
