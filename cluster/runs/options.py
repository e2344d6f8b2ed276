"""What a run is told beyond the deployment's options: the runtimes it starts or borrows and,
for a file run, how the file is fed.

Why objects: a run's settings used to travel as two dozen keyword arguments through every entry
point (``weaveplace run``, tests, benchmarks), each repeating the list and its defaults. They are
built once (from a config, a test or a benchmark) and handed down unchanged; the deployment's own
settings are ``cluster.deployment.options.DeploymentOptions``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: how a file's rows reach the actors: through the driver, or pushed by Spark tasks
FEED_ROUTES = ("driver", "executors")


def default_pinning(pin_nodes: bool | None, ray_address: str | None) -> bool:
    """Pin plan nodes to Ray nodes when attached to a cluster by address (unless told)."""
    return ray_address not in (None, "", "local") if pin_nodes is None else pin_nodes


@dataclass(frozen=True)
class RuntimeOptions:
    """Ray and Spark for one run.

    ``ray_address``: a Ray cluster to attach to (``None``: the running Ray, else an embedded
    one with ``num_cpus`` CPUs). ``failure_timeout_s``: how long a silent host may stay silent
    before the embedded Ray declares it dead (``cluster.runtime.ray_runtime``; an attached
    cluster keeps its own). ``spark``: a running session to use and leave running (e.g. a
    test's); without it a session on ``spark_master`` is started and stopped by the run.
    """

    ray_address: str | None = None
    num_cpus: int = 2
    failure_timeout_s: float = 30.0
    spark: Any = None
    spark_master: str = "local[*]"


@dataclass(frozen=True)
class FileFeedOptions:
    """How a file run feeds its file (the deployment's ``mode`` says raw tuples or slices).

    ``batch_rows``: rows per batch handed to the actors. ``chunk_rows``, ``order``: how the
    driver route reads the file (``cluster.feeds.parquet``): ``"file"`` replays its own order
    (the config's ``data.order: file``, and always the executor route's), ``"auto"`` (the
    default here, ``data.order: time``) sorts what is out of time order. ``max_rows``: stop after
    this many rows (raw mode). ``csv``: also write ``answers.csv``. ``extra_columns``,
    ``text_range_bytes``: a DEBS text file's parsing (``cluster.feeds.text``). ``route``:
    ``driver`` (Spark -> driver -> actors) or ``executors`` (Spark tasks push to the actors:
    ``cluster.feeds.executors``; raw mode, a local Parquet file).
    """

    batch_rows: int = 1 << 18
    chunk_rows: int = 1_000_000
    order: str = "auto"
    max_rows: int | None = None
    csv: bool = False
    extra_columns: str = "reject"
    text_range_bytes: int | None = None
    route: str = "driver"

    def __post_init__(self) -> None:
        if self.route not in FEED_ROUTES:
            raise ValueError(f"feed must be 'driver' or 'executors', got {self.route!r}")
