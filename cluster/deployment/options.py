"""What a deployment is told: one options object, built once (from the config, a test or a
benchmark) and handed down unchanged to the deployment, its feeds and its runs.

Why one object: a deployment's settings used to travel as a dozen keyword arguments through
every entry point (a file run, a directory run, ``serve``), each repeating the list and its
defaults. Here they are written once, with their defaults and the checks that need no Ray.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

#: where answers go: through the driver (merged there) or written by the node actors
ANSWER_ROUTES = ("driver", "actors")
#: what travels from Spark to the actors: raw tuples, or slices pre-aggregated by Spark
FEED_MODES = ("raw", "sliced")


@dataclass(frozen=True)
class DeploymentOptions:
    """A deployment's settings (all optional; the defaults are a single-host embedded run).

    ``technique``: the incremental-evaluation technique of every tree (default: the plan's
    ``ie``, else ``slickdeque``). ``allowed_lateness``: ms a tuple may arrive behind the
    watermark and still count. ``max_in_flight``: calls outstanding per actor before the
    driver waits (backpressure). ``checkpoint_every`` (batches) and ``max_log_bytes`` (the
    replay log's size): when a checkpoint is taken; ``auto_recover``: restart dead actors from
    it. ``actor_options``: extra ``ray.remote`` options. ``mode``: ``raw`` or ``sliced``.
    ``count_ops``: count the trees' operations (for the Omega check). ``pin_nodes``: plan
    node -> Ray node (``True``: node i on Ray node i mod R; a mapping: explicit). ``faults``:
    a fault drill ``[{kind, node, at_batch}]``. ``answers``: ``driver`` or ``actors`` (the
    actors write Parquet parts under ``out_dir``). ``call_timeout_s``: the deadline of a node
    that answers nothing (``cluster.deployment.liveness``: silent nodes are not waited for,
    stuck ones are killed and recovered); ``None``: no health check, calls wait as long as Ray
    does.
    """

    technique: str | None = None
    allowed_lateness: int = 0
    max_in_flight: int = 4
    checkpoint_every: int | None = None
    max_log_bytes: int | None = 128 << 20
    auto_recover: bool = True
    actor_options: Mapping[str, Any] = field(default_factory=dict)
    mode: str = "raw"
    count_ops: bool = False
    pin_nodes: bool | Mapping[str, str] = False
    faults: tuple[Mapping[str, Any], ...] = ()
    answers: str = "driver"
    out_dir: str | os.PathLike | None = None
    call_timeout_s: float | None = 30.0

    def __post_init__(self) -> None:
        if self.call_timeout_s is not None and not 0 < self.call_timeout_s <= 3600:
            raise ValueError(f"call_timeout_s must be in (0, 3600], got {self.call_timeout_s!r}")
        if self.max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1")
        if self.mode not in FEED_MODES:
            raise ValueError(f"mode must be 'raw' or 'sliced', got {self.mode!r}")
        if self.answers not in ANSWER_ROUTES:
            raise ValueError(f"answers must be 'driver' or 'actors', got {self.answers!r}")
        if self.answers == "actors" and self.out_dir is None:
            raise ValueError("answers='actors' needs out_dir (where the actors write)")
        object.__setattr__(self, "faults", tuple(self.faults or ()))
        object.__setattr__(self, "actor_options", dict(self.actor_options or {}))

    def with_(self, **changes: Any) -> DeploymentOptions:
        """A copy with ``changes`` (a run adds what only it knows, e.g. ``out_dir``)."""
        return replace(self, **changes)
