"""``run_stream``: a directory stream end to end, owning its runtimes (Ray, Spark, the
deployment) and Ctrl-C while they start and stop, with ``metrics.json`` at the end.

Why its own module: starting and tearing down runtimes around a stream, and what Ctrl-C means
during each phase, is the command's concern; ``cluster.feeds.directory.DirectoryStream`` runs a stream
on runtimes someone else owns (``cluster.service.service`` does).
"""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster.deployment.deployment import Deployment
from cluster.deployment.options import DeploymentOptions
from cluster.feeds.directory import stream_directory
from cluster.feeds.directory_options import StreamOptions, StreamStats
from cluster.runs.file_run import default_pinning, load_plan, started_runtimes, write_final_plan


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
                DeploymentOptions(
                    technique=technique,
                    allowed_lateness=allowed_lateness,
                    max_in_flight=max_in_flight,
                    checkpoint_every=checkpoint_every,
                    max_log_bytes=max_log_bytes,
                    pin_nodes=pin_nodes,
                    faults=faults,
                ),
            ) as dep:
                stats = stream_directory(dep, spark, directory, out_dir, options, progress)
                guard.quiet = True  # only teardown left: let it complete
                final_plan = dep.plan
    finally:
        guard.restore()
    metrics = stats.metrics("stream")
    metrics["startup"] = startup
    metrics["data_path"] = str(directory)
    out = Path(out_dir)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1, default=float))
    write_final_plan(out, final_plan, bool(metrics.get("replacements") or metrics.get("additions")))
    return StreamResult(stats, metrics, out)
