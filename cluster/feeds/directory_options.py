"""What a directory stream is told and what it reports: its options, one record per file
handed over, and the running counters (its error type is ``cluster.errors.StreamError``).

Why its own module: the CLI, the config layer and ``cluster.service.service`` build options and read
stats without needing Spark or the stream's machinery (``cluster.feeds.directory``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime


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
    glued_lines: int = 0  # text lines holding two records, split (cluster.debs.text)
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

    def metrics(self, mode: str) -> dict:
        """``metrics.json`` of a stream that stopped: the deployment's metrics with the answers
        of every part (``finish()`` counted only the last), the stream's counters and the feed
        summary (``mode``: ``stream`` for ``weaveplace run``, ``serve``)."""
        m = dict(self.deployment_metrics or {})
        m["answers"] = self.answers
        m["stream"] = self.to_dict()
        m["feed"] = {
            "mode": mode,
            "rows": self.rows,
            "batches": self.batches,
            "seconds": self.seconds,
            "rows_per_s": self.rows / self.seconds if self.seconds else 0.0,
            "timeline": self.timeline,
        }
        return m

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("deployment_metrics")
        d["files_log"] = [asdict(f) for f in self.files_log]
        d["watermark"] = self.watermark
        return d
