"""The optimizer registry: every single-node and distributed optimizer, by name.

Config validation (``sim.config``), ``weaveplace plan --optimizer``, simulation and live runs
read these two dicts and nothing else.  A new optimizer is one function plus one
``register_optimizer`` call; this module registers the built-in ones.  Why a module of its
own: it sits above every optimizer module (``weaveshare``, ``distributed``,
``local_search``, ``pareto``), so none of them imports another one back to dispatch by
name.

- A **single-node** optimizer maps queries to trees, ``run(queries, model, progress)``; a plan
  puts all its trees on the first node (``sim.simulate``).
- A **distributed** optimizer maps queries to trees on nodes, ``run(queries, model, caps,
  seed=, preprocess=, **options) -> Plan`` with ``caps`` one capacity per node (None: equal
  nodes; ``distributed.node_capacities``); ``category`` is Table 7's G / W / WG.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from placement import distributed, weaveshare
from placement.banded import banded_weaveshare, wg_band
from placement.distributed import NodesArg, node_capacities
from placement.local_search.search import wg_ls
from placement.pareto.search import wg_pf
from placement.plan import Plan
from placement.queries import Query, validate_unique
from placement.refine import banded_refined
from placement.trees import CostModel, Tree
from placement.weaveshare import Progress


@dataclass(frozen=True)
class SingleNodeOptimizer:
    name: str
    run: Callable[[list[Query], CostModel, Progress], list[Tree]]
    doc: str = ""


@dataclass(frozen=True)
class DistributedOptimizer:
    name: str
    category: str  # "G", "W" or "WG" (dissertation Table 7)
    run: Callable[..., Plan]
    doc: str = ""


#: single-node optimizers by name, in registration order
SINGLE_NODE: dict[str, SingleNodeOptimizer] = {}
#: distributed optimizers by name, in registration order
DISTRIBUTED: dict[str, DistributedOptimizer] = {}


def register_optimizer(opt: SingleNodeOptimizer | DistributedOptimizer) -> None:
    """Make ``opt`` available under ``opt.name`` to validation, planning and runs."""
    if opt.name in SINGLE_NODE or opt.name in DISTRIBUTED:
        raise ValueError(f"optimizer {opt.name!r} is already registered")
    if isinstance(opt, SingleNodeOptimizer):
        SINGLE_NODE[opt.name] = opt
    else:
        DISTRIBUTED[opt.name] = opt


def unregister_optimizer(name: str) -> None:
    SINGLE_NODE.pop(name, None)
    DISTRIBUTED.pop(name, None)


def optimizer_names() -> tuple[str, ...]:
    """Every optimizer name: the distributed ones, then the single-node ones."""
    return tuple(DISTRIBUTED) + tuple(SINGLE_NODE)


def category(name: str) -> str:
    """Table 7's category of a distributed optimizer, ``single-node`` for the others."""
    return DISTRIBUTED[name].category if name in DISTRIBUTED else "single-node"


def optimize(
    name: str,
    queries: Iterable[Query],
    model: CostModel,
    nodes: NodesArg,
    seed: int = 0,
    preprocess: bool | str = False,
    **options: Any,
) -> Plan:
    """Run one distributed optimizer by name; ``options`` go to it (``stop_at_nodes``,
    ``init``, ``max_iters``, ``front_size``, ``rule``, ``band_size``: see the implementing
    module)."""
    if name not in DISTRIBUTED:  # (a single-node one too: ``run_single_node`` runs those)
        raise ValueError(f"unknown optimizer {name!r}; allowed: {', '.join(DISTRIBUTED)}")
    qs = validate_unique(queries)
    caps = node_capacities(nodes)
    return DISTRIBUTED[name].run(qs, model, caps, seed=seed, preprocess=preprocess, **options)


def run_single_node(
    name: str, queries: Iterable[Query], model: CostModel, progress: Progress = None
) -> list[Tree]:
    """One single-node optimizer by name; ``progress`` is ticked by the ones that take long."""
    if name not in SINGLE_NODE:
        raise ValueError(f"unknown optimizer {name!r}; allowed: {', '.join(SINGLE_NODE)}")
    return SINGLE_NODE[name].run(list(queries), model, progress)


# ---- the built-in optimizers ------------------------------------------------------------------


def _no_progress(fn: Callable[[Iterable[Query], CostModel], list[Tree]]):
    def run(queries: list[Query], model: CostModel, progress: Progress = None) -> list[Tree]:
        return fn(queries, model)

    return run


def _with_progress(fn: Callable[..., list[Tree]]):
    def run(queries: list[Query], model: CostModel, progress: Progress = None) -> list[Tree]:
        return fn(queries, model, progress=progress)

    return run


def _wg_pf(qs: Sequence[Query], model: CostModel, caps: list, **kw: Any) -> Plan:
    return wg_pf(qs, model, caps, **kw).plan


for _opt in (
    SingleNodeOptimizer("weaveshare", _with_progress(weaveshare.weaveshare), "WeaveShare"),
    SingleNodeOptimizer(
        "insert_then_weave", _with_progress(weaveshare.insert_then_weave), "Insert-then-Weave"
    ),
    SingleNodeOptimizer("no_share", _no_progress(weaveshare.no_share), "one tree per query"),
    SingleNodeOptimizer("shared", _no_progress(weaveshare.shared), "one tree per key"),
    SingleNodeOptimizer(
        "banded_weaveshare",
        _with_progress(banded_weaveshare),
        "WeaveShare within bands of similar edge density (banded)",
    ),
    SingleNodeOptimizer(
        "banded_refined",
        _with_progress(banded_refined),
        "banded WeaveShare, then one pass of unit moves between trees (refine)",
    ),
):
    register_optimizer(_opt)
for _spec in distributed.OPTIMIZERS.values():  # the thirteen of Table 7
    register_optimizer(
        DistributedOptimizer(
            _spec.name, _spec.category, partial(distributed.place, _spec.name), _spec.doc
        )
    )
register_optimizer(
    DistributedOptimizer(
        "WG_LS", "WG", wg_ls, "local search from WG_TN and WG_I (placement.local_search)"
    )
)
register_optimizer(
    DistributedOptimizer(
        "WG_PF",
        "WG",
        _wg_pf,
        "Pareto front of TotalCost vs MaxCost, plan picked by a rule (pareto)",
    )
)
register_optimizer(
    DistributedOptimizer(
        "WG_BAND",
        "WG",
        wg_band,
        "To Nodes on density bands: WeaveShare per band of similar units, then G_TL (banded)",
    )
)
