"""``weaveplace plan``, ``verify-plan`` and ``shed``: a single-node plan, a plan's costs checked,
a plan's feasibility on its nodes' capacities.

Why together: each reads or writes one plan JSON, with no config, Ray or Spark.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer
from rich.table import Table

from cluster.runtime import collector
from placement.messages import short_repr
from sim.cli.base import UserError, console
from sim.cli.base import progress as _progress


def _run_single_node(name: str, queries, model, progress_cb=None):
    from placement.optimizers import run_single_node

    return run_single_node(name, queries, model, progress_cb)


def plan(
    qnum: int = typer.Option(100, help="Number of queries (Qnum)."),
    smax: int = typer.Option(100, help="Largest slide (Smax)."),
    rate: float = typer.Option(1.0, help="Input rate lambda (tuples per time unit)."),
    zskew: float = typer.Option(0.5, help="Zipf skew; larger favours larger slides."),
    omax: float = typer.Option(10.0, help="Largest overlap factor (range = factor x slide)."),
    gen: str = typer.Option("nrm", help="Slide set: nrm, div (primes) or factors (of Smax)."),
    seed: int = typer.Option(0, help="Random seed."),
    optimizer: str = typer.Option(
        "weaveshare",
        help="A single-node optimizer (placement.optimizers.SINGLE_NODE): weaveshare "
        "(default), insert_then_weave, no_share, shared or banded_weaveshare (WeaveShare "
        "within bands of 10,000 similar units: for very many queries, a little dearer).",
    ),
    ie: str = typer.Option("panes", help="IE technique for the cost model."),
    engine: str = typer.Option("fast", help="Edge engine: fast, f1 or bitset."),
    slicing: str = typer.Option(
        "pairs", help="pairs or cutty: the slicing plans are priced (and later run) with."
    ),
    out: Path = typer.Option(Path("out/plan.json"), help="Where to write the plan JSON."),
):
    """Generate a workload and build a single-node sharing plan."""
    from placement.optimizers import SINGLE_NODE
    from placement.plan import single_node_plan
    from placement.trees import CostModel
    from sim.workload import WorkloadSpec, generate

    if optimizer not in SINGLE_NODE:
        raise UserError(
            f"--optimizer: unknown optimizer {short_repr(optimizer)}; allowed: {', '.join(SINGLE_NODE)}"
        )
    try:
        spec = WorkloadSpec(qnum, smax, rate, zskew, omax, gen, seed)
        queries = generate(spec)
        model = CostModel(ie, rate, engine, slicing)
    except ValueError as exc:
        raise UserError(str(exc)) from exc
    from sim.compile_cache import warm_placement

    compile_s = warm_placement()  # one-off numba compile/cache load, reported apart
    start = time.perf_counter()
    # The weave allocates millions of objects (trees, the engine's memo) and no cycles: the
    # cyclic collector's passes over them were ~3 % of a plan of 100,000 queries (BENCHMARKS.md)
    with _progress() as bar, collector.paused():
        task = bar.add_task(optimizer, total=len(queries))
        trees = _run_single_node(optimizer, queries, model, lambda k: bar.advance(task, k))
    seconds = time.perf_counter() - start
    p = single_node_plan(optimizer, trees, model, {spec.stream: rate})
    path = p.write(out)
    console.print(
        f"{optimizer}: {len(trees)} trees for {len(queries)} queries, "
        f"TotalCost {p.total_cost:.6g}, {seconds:.2f} s (+ {compile_s:.2f} s "
        f"numba compile/cache load, one-off) -> {path}",
        soft_wrap=True,
    )


def verify_plan_cmd(path: Path):
    """Recompute every cost of a plan JSON from its queries and report differences (a front
    file, a JSON list of plans such as ``c0000_WG_PF_front.json``: every plan of it)."""
    from placement.plan import PlanError, verify_plan

    if not path.exists():
        raise UserError(f"plan file not found: {path}")
    try:
        data = json.loads(path.read_text())
        plans = data if isinstance(data, list) else [data]
        problems = [
            f"plan {i}: {p}" if isinstance(data, list) else p
            for i, d in enumerate(plans)
            for p in verify_plan(d)
        ]
    except (
        json.JSONDecodeError,
        KeyError,
        PlanError,
        ValueError,
        TypeError,
        AttributeError,
    ) as exc:
        raise UserError(f"{path}: not a valid weaveplace plan: {exc}") from exc
    if problems:
        for p in problems:
            console.print(f"[red]{p}")
        raise typer.Exit(1)
    console.print(f"[green]{path}: every cost recomputes from its queries")


def shed(path: Path = typer.Argument(..., help="A plan JSON whose nodes have capacities.")):
    """Feasibility of a plan on its node capacities, and source drop fractions when overloaded."""
    from placement.plan import PlanError, load_plan
    from placement.shedding import InfeasibleEvenWhenShedding, overloads, shed_load

    if not path.exists():
        raise UserError(f"plan file not found: {path}")
    try:
        plan = load_plan(path)
    except (json.JSONDecodeError, KeyError, PlanError, ValueError) as exc:
        raise UserError(f"{path}: not a valid weaveplace plan: {exc}") from exc
    over = overloads(plan)
    if not over:
        console.print("[green]feasible[/]: every node within its capacity (or unbounded)")
        return
    for o in over:
        console.print(
            f"[red]{o.node}[/]: cost {o.cost:.6g} > capacity {o.capacity:.6g} (+{o.excess:.6g})"
        )
    try:
        res = shed_load(plan)
    except InfeasibleEvenWhenShedding as exc:
        console.print(f"[red]infeasible:[/] {exc}")
        raise typer.Exit(1) from exc
    table = Table("stream", "keep", "drop")
    for s, x in sorted(res.keep.items()):
        table.add_row(s, f"{x:.4%}", f"{1 - x:.4%}")
    console.print(table)
    console.print(f"kept {res.kept_value / res.full_value:.2%} of (tuple x query) work")
