"""A config's live run as the cluster's options objects, built once and handed to
``cluster.runs`` unchanged.

Why its own module: ``weaveplace run`` (a file or a watched directory) and its tests read the same
config keys into the same objects; written here once, a key cannot reach one run and miss the
other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cluster.deployment.options import DeploymentOptions
from cluster.feeds.directory_options import StreamOptions
from cluster.runs.options import FileFeedOptions, RuntimeOptions, default_pinning
from sim.config import Config


def runtime_options(config: Config, spark: Any = None) -> RuntimeOptions:
    """``cluster.ray`` and ``cluster.spark``; ``spark``: a running session to use instead."""
    return RuntimeOptions(
        ray_address=config.cluster.ray.address,
        failure_timeout_s=config.cluster.failure_timeout_s,
        spark=spark,
        spark_master=config.cluster.spark.master,
    )


def deployment_options(config: Config, out_dir: str | Path) -> DeploymentOptions:
    """``run.allowed_lateness``, ``run.checkpoint_every``, ``run.faults``, ``run.feed_mode``,
    ``run.answers`` (the actors write under ``out_dir``), ``run.count_ops`` and
    ``cluster.call_timeout_s``; plan nodes pinned to Ray nodes when attached to a cluster by
    address."""
    address = config.cluster.ray.address
    return DeploymentOptions(
        allowed_lateness=config.run.allowed_lateness,
        checkpoint_every=config.run.checkpoint_every,
        faults=[f.model_dump(exclude_none=True) for f in config.run.faults],
        answers=config.run.answers,
        mode=config.run.feed_mode,
        out_dir=out_dir if config.run.answers == "actors" else None,
        pin_nodes=default_pinning(None, address),
        count_ops=config.run.count_ops,
        call_timeout_s=config.cluster.call_timeout_s,
    )


#: ``data.order`` as the feed's ``order``: ``file`` replays the file as recorded, ``time`` sorts
#: it where it is not in order (the driver route's ``auto``: a sorted file is not re-sorted)
FEED_ORDER = {"file": "file", "time": "auto"}


def file_feed_options(config: Config) -> FileFeedOptions:
    """``run.batch_rows``, ``run.feed``, ``data.order`` and ``data.extra_columns`` for a file
    run."""
    return FileFeedOptions(
        batch_rows=config.run.batch_rows,
        order=FEED_ORDER[config.data.order],
        extra_columns=config.data.extra_columns,
        route=config.run.feed,
    )


def stream_options(config: Config) -> StreamOptions:
    """``data.directory`` and ``run.batch_rows`` for a directory run."""
    w = config.data.directory
    return StreamOptions(
        pattern=w.pattern,
        files_per_batch=w.files_per_batch,
        poll_s=w.poll_s,
        idle_timeout_s=w.idle_timeout_s,
        max_files=w.max_files,
        timeout_s=w.timeout_s,
        batch_rows=config.run.batch_rows,
        extra_columns=config.data.extra_columns,
    )
