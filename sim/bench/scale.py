"""``weaveplace bench scale``: plan time and peak memory against the query count N.

A grid of N x Smax x nodes x optimizer (single-node optimizers, WeaveShare by default, on one
node; the distributed optimizers on more), one generated workload per (N, Smax) (``weaveplace
plan``'s defaults: lambda 1, Zipf skew 0.5, overlap up to 10, slides 1..Smax, seed 0). Each cell is a child process
(``python -m sim.bench.scale CELL_JSON``) so that a per-cell time limit is enforced from
outside: a cell over it is killed and reported as such rather than waited for, and the peak
memory is the child's own maximum resident set size. Plan time is measured in a warm child:
imports and numba's one-off loading of the kernels come before the timer. The child writes the
plan JSON and, outside the timed part, checks that every cost recomputes from its queries
(``placement.plan.verify_plan``, what ``weaveplace verify-plan`` runs).

The growth exponent per (Smax, nodes, optimizer) is the least-squares slope of log(plan time)
on log(N) over the finished cells (cells under ``MIN_FIT_S`` carry mostly fixed costs and are
left out of the fit).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

QNUMS = (1_000, 3_000, 10_000, 30_000, 100_000, 300_000, 1_000_000)
SMAXES = (100, 1_000, 10_000)
NODES = (1, 16, 64)
SINGLE = ("weaveshare",)  # the default single-node optimizers of the grid (one node)
DISTRIBUTED = ("WG_TN", "WG_BAND")  # the default distributed optimizers of the grid
MIN_FIT_S = 0.05  # cells faster than this are left out of the growth fit


@dataclass
class Cell:
    qnum: int
    smax: int
    nodes: int
    optimizer: str
    status: str = "not run"  # "ok", "> LIMIT s", "killed by SIG..." (a signal), "error: ..."
    seconds: float | None = None  # plan wall time
    cpu_s: float | None = None
    peak_mb: float | None = None  # the child's max RSS (whole process: imports included)
    trees: int | None = None
    total_cost: float | None = None
    max_cost: float | None = None
    plan_hash: str | None = None  # sha256 of the sorted query groups per node
    verified: bool | None = None  # every cost recomputes from the queries (verify_plan)
    #: the distributed optimizers' units (``placement.distributed.make_units``): "none", one
    #: per query (their default), or "classes", equal residue classes grouped first
    preprocess: str = "none"

    @property
    def label(self) -> str:
        """The optimizer as the table names it (with its units when they are grouped)."""
        return (
            self.optimizer if self.preprocess == "none" else f"{self.optimizer}+{self.preprocess}"
        )


def plan_hash(groups: list) -> str:
    """Digest of a plan's query grouping (per node, the sorted query ids of each tree)."""
    return hashlib.sha256(json.dumps(groups).encode()).hexdigest()[:16]


def _child(args: dict) -> dict:
    """Runs inside the child process: generate, plan (timed), write, verify."""
    import gc

    from cluster.runtime import collector
    from placement.optimizers import SINGLE_NODE, optimize, run_single_node
    from placement.plan import single_node_plan, verify_plan
    from placement.trees import CostModel
    from sim.compile_cache import warm_placement
    from sim.workload import WorkloadSpec, generate

    spec = WorkloadSpec(args["qnum"], args["smax"], 1.0, 0.5, 10.0, "nrm", args.get("seed", 0))
    queries = generate(spec)
    model = CostModel("panes", spec.rate, "fast")
    warm_placement()
    gc.collect()
    gc.freeze()
    start, cpu = time.perf_counter(), time.process_time()
    with collector.paused():  # as `weaveplace plan` plans (sim.cli.plans)
        if args["nodes"] == 1 and args["optimizer"] in SINGLE_NODE:
            trees = run_single_node(args["optimizer"], queries, model)
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
            plan = single_node_plan(args["optimizer"], trees, model, {spec.stream: spec.rate})
        else:
            pre = args.get("preprocess", "none")
            plan = optimize(
                args["optimizer"], queries, model, args["nodes"], preprocess=pre != "none" and pre
            )
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    groups = [sorted(sorted(q.id for q in t.queries) for t in n.trees) for n in plan.nodes]
    out: dict = {
        "status": "ok",
        "seconds": seconds,
        "cpu_s": cpu,
        "trees": len(plan.trees),
        "total_cost": plan.total_cost,
        "max_cost": plan.max_cost,
        "plan_hash": plan_hash(groups),
    }
    data = plan.to_dict()
    if args.get("plan_path"):
        Path(args["plan_path"]).parent.mkdir(parents=True, exist_ok=True)
        Path(args["plan_path"]).write_text(json.dumps(data))
    if args.get("verify", True):
        out["verified"] = not verify_plan(data)
    out["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def run_cell(cell: Cell, limit_s: float, plan_dir: Path | None = None, verify: bool = True) -> Cell:
    """Run one cell in a child process, killed after ``limit_s`` seconds (plan, start-up and
    verification together)."""
    args = {
        "qnum": cell.qnum,
        "smax": cell.smax,
        "nodes": cell.nodes,
        "optimizer": cell.optimizer,
        "preprocess": cell.preprocess,
        "verify": verify,
    }
    if plan_dir is not None:
        args["plan_path"] = str(
            plan_dir / f"n{cell.qnum}_s{cell.smax}_k{cell.nodes}_{cell.optimizer}.json"
        )
    cmd = [sys.executable, "-m", "sim.bench.scale", json.dumps(args)]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ)
    )
    try:
        stdout, stderr = proc.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        cell.status = f"> {limit_s:g} s"
        return cell
    if proc.returncode < 0:  # stopped from outside (a signal): not an error of the plan's
        cell.status = f"killed by {signal.Signals(-proc.returncode).name}"
        return cell
    if proc.returncode != 0:
        tail = (stderr.strip().splitlines() or ["?"])[-1]
        cell.status = f"error: {tail[:80]}"
        return cell
    for k, v in json.loads(stdout.strip().splitlines()[-1]).items():
        setattr(cell, k, v)
    return cell


def grid(
    qnums: Sequence[int],
    smaxes: Sequence[int],
    nodes: Sequence[int],
    distributed: Sequence[str] = DISTRIBUTED,
    preprocess: str = "none",
    single: Sequence[str] = SINGLE,
) -> list[Cell]:
    """The cells in running order: per (Smax, nodes, optimizer), N ascending (so a limit hit
    at one N skips the larger ones: ``run``)."""
    cells = []
    for s in smaxes:
        for k in nodes:
            for opt in tuple(single) if k == 1 else tuple(distributed):
                for n in sorted(qnums):
                    pre = "none" if k == 1 else preprocess
                    cells.append(Cell(n, s, k, opt, preprocess=pre))
    return cells


def run(
    cells: list[Cell],
    limit_s: float,
    plan_dir: Path | None = None,
    verify: bool = True,
    on_cell: Callable[[Cell], None] | None = None,
) -> list[Cell]:
    """Run the cells in order. Once a cell of a series (Smax, nodes, optimizer) is over the
    limit, its larger N are reported as over it too without running (time grows with N)."""
    over: set[tuple] = set()
    for c in cells:
        series = (c.smax, c.nodes, c.label)
        if series in over:
            c.status = f"> {limit_s:g} s (skipped: a smaller N was over)"
        else:
            run_cell(c, limit_s, plan_dir, verify)
            if c.status.startswith(">"):
                over.add(series)
        if on_cell:
            on_cell(c)
    return cells


def growth_exponents(cells: Sequence[Cell]) -> dict[tuple, float | None]:
    """Per series (Smax, nodes, optimizer): the least-squares slope of log(seconds) on log(N)
    over finished cells of at least ``MIN_FIT_S`` s (None with fewer than two)."""
    series: dict[tuple, list[tuple[float, float]]] = {}
    for c in cells:
        key = (c.smax, c.nodes, c.label)
        series.setdefault(key, [])
        if c.status == "ok" and c.seconds is not None and c.seconds >= MIN_FIT_S:
            series[key].append((math.log(c.qnum), math.log(c.seconds)))
    out: dict[tuple, float | None] = {}
    for key, pts in series.items():
        if len({x for x, _ in pts}) < 2:
            out[key] = None
            continue
        mx = sum(x for x, _ in pts) / len(pts)
        my = sum(y for _, y in pts) / len(pts)
        sxx = sum((x - mx) ** 2 for x, _ in pts)
        out[key] = sum((x - mx) * (y - my) for x, y in pts) / sxx
    return out


def to_markdown(cells: Sequence[Cell]) -> str:
    lines = [
        "| N | Smax | nodes | optimizer | status | plan time (s) | peak MB | trees | "
        "TotalCost | MaxCost | verify-plan | plan |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def f(x, fmt):
        return "-" if x is None else format(x, fmt)

    for c in cells:
        verified = "-" if c.verified is None else ("ok" if c.verified else "FAILED")
        lines.append(
            f"| {c.qnum:,} | {c.smax:,} | {c.nodes} | {c.label} | {c.status} | "
            f"{f(c.seconds, '.2f')} | {f(c.peak_mb, '.0f')} | {f(c.trees, 'd')} | "
            f"{f(c.total_cost, '.6g')} | {f(c.max_cost, '.6g')} | {verified} | "
            f"{c.plan_hash or '-'} |"
        )
    lines.append("")
    lines.append("| Smax | nodes | optimizer | growth exponent (plan time ~ N^k) |")
    lines.append("|---|---|---|---|")
    for (s, k, opt), e in growth_exponents(cells).items():
        lines.append(f"| {s:,} | {k} | {opt} | {'-' if e is None else f'{e:.2f}'} |")
    return "\n".join(lines) + "\n"


def plot(cells: Sequence[Cell], path: Path) -> Path:
    """Log-log plot of plan time and peak memory against N, one line per series."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(12, 4.5))
    exps = growth_exponents(cells)
    series: dict[tuple, list[Cell]] = {}
    for c in cells:
        series.setdefault((c.smax, c.nodes, c.label), []).append(c)
    plotted = False
    for key, cs in series.items():
        ok = [c for c in cs if c.status == "ok"]
        if not ok:
            continue
        plotted = True
        s, k, opt = key
        e = exps.get(key)
        label = f"S={s:,} {opt} x{k}" + (f" (k={e:.2f})" if e is not None else "")
        ax_t.plot([c.qnum for c in ok], [c.seconds for c in ok], "o-", label=label)
        ax_m.plot([c.qnum for c in ok], [c.peak_mb for c in ok], "o-", label=label)
    for ax, what in ((ax_t, "plan time (s)"), (ax_m, "peak memory (MB)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("queries N")
        ax.set_ylabel(what)
        ax.grid(True, which="both", alpha=0.3)
    if plotted:
        ax_t.legend(fontsize=7)
    else:  # every cell over its limit or failed: say so rather than draw empty axes
        for ax in (ax_t, ax_m):
            ax.text(0.5, 0.5, "no plan within the limit", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def save(cells: Sequence[Cell], out: Path) -> dict[str, Path]:
    """``scale.json`` (every cell), ``scale.md`` (the table and exponents), ``scale.png``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "scale.json", "md": out / "scale.md", "png": out / "scale.png"}
    exps = {f"{s}/{k}/{o}": e for (s, k, o), e in growth_exponents(cells).items()}
    paths["json"].write_text(
        json.dumps({"cells": [asdict(c) for c in cells], "growth_exponents": exps}, indent=1)
    )
    paths["md"].write_text(to_markdown(cells))
    plot(cells, paths["png"])
    return paths


if __name__ == "__main__":  # a child: one cell
    print(json.dumps(_child(json.loads(sys.argv[1]))))
