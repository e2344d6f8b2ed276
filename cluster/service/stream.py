"""The directory stream of ``weaveplace serve``: ``cluster.feeds.directory``'s stream, resumable.

Why a subclass of its own: the service's stream differs from ``weaveplace run``'s only where a
long-lived, resumable deployment needs it: float64 answers for the whole run (queries added
later may need them), the streams fed follow the running queries (an added query may read a
stream no tree read before), output parts and fed files kept across a resume, the service's
state saved after every micro-batch, and a stop that keeps open windows unless asked to flush.
"""

from __future__ import annotations

import os
import posixpath
import time
from typing import Any

import pyarrow as pa

from cluster.answers.blocks import ANSWER_SCHEMA_FLOAT, LATE_SCHEMA
from cluster.answers.parts import AnswerParts
from cluster.feeds.directory import DirectoryStream

#: the answers' columns when shedding is configured: ``kept``, the smallest kept fraction in
#: force over the answer's window (``cluster.service.load_shedding``)
ANSWER_SCHEMA_KEPT = ANSWER_SCHEMA_FLOAT.append(pa.field("kept", pa.float64(), nullable=False))


class KeptAnswerParts(AnswerParts):
    """The answer parts of a service that sheds load: each answer with its ``kept`` column."""

    shedder: Any

    def write(self, table: pa.Table, batch: int | None = None) -> None:
        super().write(self.shedder.with_kept(table) if table.num_rows else table)


class ServiceStream(DirectoryStream):
    """The directory stream of a service: float64 answers for the whole run (see module doc),
    outputs and fed files that survive a resume, the service's state saved after every
    micro-batch, and a stop that keeps open windows for a resume (unless ``flush``)."""

    service: Any  # the cluster.service.service.Service that owns the stream (set by it)

    def answer_schema(self) -> pa.Schema:
        return ANSWER_SCHEMA_FLOAT

    def open_outputs(self) -> None:
        """Open the numbered parts once (the service opens them before ``run``, so commands may
        write parts at once); a resumed run keeps the parts its saved state counted."""
        if getattr(self, "_answers", None) is not None:  # opened by Service.run already
            return
        out = self.out
        r = self.service.resume_state
        fresh = r is None
        shed = self.service.shedding
        if shed is None:
            self._answers = AnswerParts(
                out / "answers.parquet",
                ANSWER_SCHEMA_FLOAT,
                0 if fresh else r["answer_parts"],
                fresh,
            )
        else:
            self._answers = KeptAnswerParts(
                out / "answers.parquet",
                ANSWER_SCHEMA_KEPT,
                0 if fresh else r["answer_parts"],
                fresh,
            )
            self._answers.shedder = shed
        self._late = AnswerParts(
            out / "late.parquet", LATE_SCHEMA, 0 if fresh else r["late_parts"], fresh
        )
        self._rejects = out / "rejects"
        if fresh and self._rejects.is_dir():
            for p in self._rejects.glob("*.rejects.tsv"):
                p.unlink()

    def write_handed_over(self, answers: pa.Table, late: pa.Table) -> None:
        """Write answers and late tuples a command's checkpoint handed over (between
        micro-batches) and count them, as a micro-batch does with its own."""
        self._answers.write(answers)
        self._late.write(late)
        self.stats.answers += answers.num_rows
        self.stats.late += late.num_rows

    @property
    def next_answer_part(self) -> int:
        """The number the next answer part gets (saved with the state: a resume keeps the
        parts below it and rewrites the ones from it on)."""
        return self._answers.next

    @property
    def next_late_part(self) -> int:
        """As ``next_answer_part``, for the late tuples."""
        return self._late.next

    def _feed(self, table, rec) -> None:
        # the deployment's streams now, not at the start: a query added on a stream no tree
        # read before gets that column from the next file on
        self.streams = list(self.dep.streams)
        super()._feed(table, rec)

    def _parts(self, t: pa.Table) -> list[tuple[str | None, pa.Table]]:
        shed = self.service.shedding
        return super()._parts(t) if shed is None else shed.split(t, self.streams)

    def _already_fed(self, row) -> bool:
        return posixpath.basename(row["path"]) in self.service.running.fed_names

    def _process(self, batch_df) -> None:
        n = self.stats.files
        super()._process(batch_df)
        self.service.log_faults()  # failures detected and recoveries completed meanwhile
        if self.stats.files != n:
            now = time.time()  # the answers the files released are written: their latency
            for rec in self.stats.files_log[n:]:
                try:
                    lat = now - os.stat(self.directory / rec.name).st_mtime
                    self.service.file_latency.append(lat)
                    self.service.latency_timeline.append((now, lat))
                except OSError:
                    pass
            for rec in self.stats.files_log[n:]:
                self.service.running.fed_names.add(rec.name)
            self.service.persist()
            self.service.sample_load()
            self.service.after_batch()  # the autoscale policy, between micro-batches

    def _after_idle_recovery(self) -> None:
        """A node recovered or caught up between micro-batches: its events logged, the
        answers written and the state saved (it may have been behind: the state waited for
        it)."""
        # the answers first: the recovery event is complete once the trees' new hosts commit
        # theirs; then the events (trees moved where they run now) and the state after them
        self.write_handed_over(self.dep.take_answers(), self.dep.take_late())
        self.service.log_faults()
        self.service.persist()

    def _finish(self) -> None:
        import ray

        # the state saved at a stop must hold every node: a silent one catches up first (or,
        # stuck past cluster.call_timeout_s, is recovered)
        self.dep.catch_up_all()
        for ref in self._warmups:
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError:
                pass
        if self.service.flush_on_stop:
            super()._finish()
            self.service.persist(final=True)
            return
        self.service.flush_outputs()
        self._answers.close()
        self._late.close()
        self.stats.stop_reason = self._stop_reason
        self.stats.deployment_metrics = self.dep.metrics()
