"""``run_directory``: a directory stream end to end, owning its runtimes (Ray, Spark, the
deployment) and Ctrl-C or SIGTERM while they start and stop, with ``metrics.json`` at the end.

Why its own module: starting and tearing down runtimes around a stream, and what Ctrl-C means
during each phase, is the command's concern; ``cluster.feeds.directory.DirectoryStream`` runs a
stream on runtimes someone else owns (``cluster.service.service`` does).
"""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster.deployment.options import DeploymentOptions
from cluster.feeds.directory import stream_directory
from cluster.feeds.directory_options import StreamOptions, StreamStats
from cluster.runs.options import RuntimeOptions
from cluster.runs.startup import started_run, write_fault_events, write_final_plan
from cluster.runtime.signals import STOP_SIGNALS, Stopped


class _SignalGuard:
    """``run_directory``'s policy for Ctrl-C and SIGTERM outside the stream itself (which has
    its own, see ``DirectoryStream``): while Ray, Spark and the actors start, either signal
    aborts (``Stopped``, a KeyboardInterrupt naming it); once the stream has stopped only the
    teardown is left (actors, Spark, Ray: a few seconds), and both are ignored so that it
    completes.  PySpark's own SIGINT handler would cancel jobs through Py4J from inside a Py4J
    call (tracebacks, a half-stopped context), so it is kept out while ``run_directory`` runs;
    the handlers found at the start are restored at the end.  Outside the main thread this does
    nothing."""

    def __init__(self):
        self.quiet = False
        self.previous: dict = {}
        self.active = threading.current_thread() is threading.main_thread()

    def _handler(self, signum, frame):
        if not self.quiet:
            raise Stopped(signum)

    def install(self) -> None:
        if self.active:
            for s in STOP_SIGNALS:
                prev = signal.signal(s, self._handler)
                self.previous.setdefault(s, prev)

    def restore(self) -> None:
        if self.active:
            for s, prev in self.previous.items():
                signal.signal(s, prev if prev is not None else signal.SIG_DFL)


@dataclass
class StreamResult:
    stats: StreamStats
    metrics: dict
    out_dir: Path


def run_directory(
    plan: Mapping[str, Any] | str | Path,
    directory: str | Path,
    out_dir: str | Path,
    *,
    stream: StreamOptions | None = None,
    runtime: RuntimeOptions = RuntimeOptions(),
    deployment: DeploymentOptions = DeploymentOptions(),
    progress: Callable[[StreamStats], None] | None = None,
) -> StreamResult:
    """``run_file`` for a directory: deploy ``plan`` on Ray, stream ``directory`` through
    Spark until a stop condition, write the answers as they come plus ``metrics.json`` (and
    ``plan_final.json`` if a node was lost for good or added, as ``run_file`` does).

    ``deployment`` is the deployment's settings (answers through the driver: the stream
    writes them; ``mode`` raw tuples, or ``sliced``: each arriving file cut into its streams'
    slices on the driver, ``cluster.feeds.sliced.feed_file_slices``).  A drill's ``at_batch`` counts the feed batches (``stream.batch_rows``
    rows of one file each, files in arrival order), not Spark's micro-batches, so a drill hits
    the same rows however Spark groups the files; a fault whose batch is never fed does not
    fire (``metrics["faults"]``).  Answers and late tuples stay exactly those of a fault-free
    run (``Deployment.take_answers`` / ``take_late``); ``node_id`` of a late tuple is the node
    hosting its tree when it was handed over.

    Owns what it starts (Ray unless one is running or an address is given, Spark unless a
    session is passed in) and stops it on every exit path, Ctrl-C included."""
    if deployment.answers != "driver":
        raise ValueError("a directory stream takes its answers on the driver (answers: driver)")
    guard = _SignalGuard()
    guard.install()
    try:
        # a new SparkContext installs PySpark's SIGINT handler, ray.init its SIGTERM one: take
        # both back
        with started_run(plan, runtime, deployment, on_new_spark=guard.install) as run:
            stats = stream_directory(
                run.deployment, run.spark, directory, out_dir, stream, progress
            )
            guard.quiet = True  # only teardown left: let it complete
            final_plan = run.deployment.plan
            startup = run.note_first_row()
    finally:
        guard.restore()
    metrics = stats.metrics("stream")
    metrics["startup"] = startup
    metrics["data_path"] = str(directory)
    out = Path(out_dir)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1, default=float))
    write_final_plan(out, final_plan, bool(metrics.get("replacements") or metrics.get("additions")))
    write_fault_events(out, metrics)
    return StreamResult(stats, metrics, out)
