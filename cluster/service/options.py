"""What a ``Service`` is built from: where it starts (``ServiceStart``) and how it runs
(``ServiceOptions``).

Why two objects: the start is one deployment's (its plan, the cost model that priced it, how
WG_PF chose it, the saved state of a resume), the options are the config's policy (the
stream's options, the rate of a new stream, the drift tolerance, the moves per re-plan, the
optimizer and its arguments); ``sim.serve_cli`` builds both, tests build them by hand.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cluster.feeds.directory_options import StreamOptions, StreamStats
from cluster.service.planning import Planner


@dataclass(frozen=True)
class ServiceStart:
    """``plan``: the plan the deployment runs (``weaveplace.plan/1``); ``model``: the cost
    model that priced it (``placement.trees.CostModel``), used to price changes; ``choice``:
    how WG_PF chose it (``cluster.service.planning.choice_record``), else None;
    ``resume_state``: the saved state (``RUN_DIR/state/service.json``) a resume continues
    from, None for a fresh start."""

    plan: dict
    model: Any
    choice: dict | None = None
    resume_state: dict | None = None


@dataclass(frozen=True)
class ServiceOptions:
    """``stream``: how the directory is watched; ``progress(stats)``: called while it runs;
    ``default_rate``: the input rate of a stream the plan did not have; ``tolerance``: the
    drift above which a change re-plans (``placement.tolerance``); ``max_moves``: running
    trees moved per re-plan at most (``placement.max_moves``); ``optimizer``: the plan's
    optimizer label (default: the plan's); ``planner``: how re-plans plan (default: the
    optimizer's defaults); ``autoscale``: the elastic policy; ``resources``: where added
    nodes' Ray nodes come from on an attached cluster; ``shedding``: the drop boxes'
    policy."""

    stream: StreamOptions | None = None
    progress: Callable[[StreamStats], None] | None = None
    default_rate: float = 0.1
    tolerance: float = 0.25
    max_moves: int = 8
    optimizer: str | None = None
    planner: Planner | None = None
    #: a line for the operator once the control API listens: the load page's token URL
    announce: Callable[[str], None] | None = None
    #: the elastic policy (``cluster.service.autoscale.AutoscalePolicy``), None: off
    autoscale: Any = None
    #: Ray's autoscaler of an attached cluster (``cluster.runtime.resources.RayResources``)
    resources: Any = None
    #: live load shedding (``cluster.service.load_shedding.SheddingPolicy``), None: off
    shedding: Any = None
    #: how long a command waits for the data path before it is refused with 503
    #: (``cluster.service.gate``)
    command_wait_s: float = 10.0
