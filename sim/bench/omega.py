"""``weaveplace bench omega``: the cost model's Omega against measured operations per edge.

Why: the plans are only as good as ``C = lambda + E * Omega``; this runs the executors with
operation counting on the very trees a plan contains and reports how far Table 11's Omega is
from what the kernels actually do.  Default workload: the dissertation's chapter-7 practical
point (Table 13: Qnum 100, Smax 1000, Omax 10,000, lambda 1, Zskew 0, slides = factors of Smax).

Per technique: WeaveShare plans the workload with that technique's Omega; each tree then runs in
an ``ExecutionTree`` (int64 data, ``sum``; ``max`` for SlickDeque Non-Inv) over a stream with one
uniformly random tuple per slice (the dissertation's uniform-input assumption, which matters for
SlickDeque Non-Inv's deque).  The first ``warm`` slices fill the window (FlatFAT, FlatFIT,
SlickDeque Non-Inv have state-dependent costs; Panes and SlickDeque Inv count the same from the
first slice, identity operands included); then ``measure`` slices, a whole number of composite
slides, are averaged.  Panes' measured slices are capped by ``max_ops`` per tree.

``slicing="cutty"``: plans and trees are priced under Cutty slicing (``CostModel(...,
slicing="cutty")``: E = density of the window starts, Omega with the open-partial combines) and
run with ``ExecutionTree(..., slicing="cutty")``; one tuple per Cutty slice.

Reported per technique: E-weighted totals ``sum E_t * measured_t`` vs ``sum E_t * Omega_t``
(final-aggregation operations per time unit, the part of the plan cost Omega drives) and the
per-tree % differences.  For SlickDeque Inv also the old formula ``2 x #unique ranges``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from executors.base import TECHNIQUES as EXECUTORS
from placement.cost import TECHNIQUES as PRICED
from placement.cost import cutty_terms, open_combines_estimate, running_aggregates
from placement.queries import Query
from placement.slicing import slicing_classes
from placement.trees import CostModel
from placement.weaveshare import weaveshare
from sim.workload import WorkloadSpec, generate

#: every priced technique that is not a family (``placement.cost.TECHNIQUES``)
TECHNIQUES = tuple(n for n, t in PRICED.items() if t.resolve is None)
#: trees with a longer composite slide are skipped (their stream could not be generated)
MAX_COMPOSITE_SLIDE = 10**8
#: the chapter-7 practical evaluation point (dissertation Table 13)
CH7 = dict(qnum=100, smax=1000, rate=1.0, zskew=0.0, omax=10_000, gen="factors", seed=0)


@dataclass
class TreeCheck:
    technique: str
    queries: int
    composite_slide: int
    edge_rate: float
    wsize: int
    estimated: float  # the model's Omega (operations per edge)
    measured: float  # measured operations per edge (mean over `slices`)
    slices: int
    old_formula: float | None = None  # SlickDeque Inv: 2 x #unique ranges
    exact_scan: bool = True  # the model's composite-slide scan was in budget
    slicing: str = "pairs"
    open_model: float | None = None  # Cutty: open-partial combines per edge in the model
    open_exact: float | None = None  # Cutty: the same counted exactly (cutty_profile)

    @property
    def diff_pct(self) -> float:
        if self.estimated == 0:  # Cutty: every window inside one slice (no operation)
            return 0.0 if self.measured == 0 else math.inf
        return 100.0 * (self.measured - self.estimated) / self.estimated


def _edges(classes, a: int, b: int) -> np.ndarray:
    from executors.slicing import edges_between

    return edges_between(sorted(classes), a, b)


def measure_tree(
    tree,
    technique: str,
    warm_cap: int = 1 << 18,
    measure_min: int = 4096,
    max_ops: float = 2e8,
    measure_cap: int = 1 << 20,
    seed: int = 0,
) -> TreeCheck:
    """Run one planned tree with op counting; measured ops per edge after the warm-up.

    At most ``measure_cap`` slices (rounded up to whole composite slides) are measured: a tree
    of 100 queries with a slide-1 query and windows of 10^7 slices would otherwise run 2 x 10^7
    slices and keep ~10^9 answers (it ran out of 24 GiB)."""
    from executors import ExecutionTree
    from executors.slicing import window_lengths

    agg = "max" if EXECUTORS[technique].requires_selective else "sum"
    qs = [dict(id=q.id, aggregate=agg, range=q.range, slide=q.slide) for q in tree.queries]
    rs = sorted(tree.windows)
    slicing = tree.slicing
    classes = slicing_classes(rs, slicing)  # one tuple per slice of the tree's slicing
    wsize, _, _ = window_lengths(rs, sorted(classes), slicing)
    per_period = tree.edges  # edges in one composite slide
    # Cutty: warm up for every technique (windows reaching before the first slice see fewer
    # complete slices, and their open-partial combines fall on the first slices)
    warm = (
        0
        if technique in ("panes", "slickdeque_inv") and slicing == "pairs"
        else min(wsize, warm_cap)
    )
    measure = min(
        max(measure_min, 2 * wsize if warm else 0, per_period), max(measure_cap, per_period)
    )
    if technique == "panes":  # state-independent, but expensive: cap the work
        measure = min(measure, max(per_period, int(max_ops / max(tree.omega, 1.0))))
    measure = -(-measure // per_period) * per_period  # whole composite slides
    if tree.composite_slide > MAX_COMPOSITE_SLIDE:
        raise ValueError(f"composite slide {tree.composite_slide} is too long to measure")
    # one tuple per slice (slice i is [ts[i], ts[i+1])); every composite slide has `edges` edges
    need = warm + measure + 2
    span = (-(-need // per_period) + 1) * tree.composite_slide
    ts = _edges(classes, 0, span)[: need + wsize + 2]
    rng = np.random.default_rng(seed)
    v = rng.integers(0, 1 << 20, ts.shape[0])
    ex = ExecutionTree(qs, technique=technique, count_ops=True, dtype=np.int64, slicing=slicing)
    ex.process(ts, v)
    ex.flush()
    per = ex.op_counts()["per_slice"]
    # The slicer starts at the earliest window holding ts[0] (docs/DESIGN.md s. 1: windows starting
    # before the first tuple are answered), max_r before the watermark when the data is shorter
    # than the longest range: skip those empty slices, then slice i is [ts[i], ts[i+1]).
    from executors.slicing import floor_edge

    cursor = floor_edge(sorted(classes), min(int(ts[0]), int(ts[-1]) - max(r for r, _ in rs)))
    lead = _edges(classes, cursor, int(ts[0])).shape[0]
    seg = per[lead + warm : lead + warm + measure]
    if seg.shape[0] < measure:
        raise RuntimeError(f"only {per.shape[0]} slices closed, needed {warm + measure}")
    old = (
        2.0 * len({r for r, _ in rs})
        if technique == "slickdeque_inv" and slicing == "pairs"
        else None
    )
    open_model = open_exact = None
    if slicing == "pairs":
        exact = running_aggregates(frozenset(rs))[1]
    else:
        _, f, exact = cutty_terms(frozenset(rs))
        open_exact = f if exact else None
        open_model = (
            f
            if technique == "slickdeque_inv"
            else (0.0 if technique == "panes" else open_combines_estimate(rs, tree.edge_rate))
        )
    # E per time unit (a count tree's edges per tuple x its stream's rate): totals add up
    return TreeCheck(
        technique,
        len(tree.queries),
        tree.composite_slide,
        tree.time_edge_rate,
        wsize,
        tree.omega,
        float(seg.mean()),
        measure,
        old,
        exact,
        slicing,
        open_model,
        open_exact,
    )


def run_omega_check(
    spec: WorkloadSpec | None = None,
    techniques=TECHNIQUES,
    progress=None,
    slicing: str = "pairs",
    **kw,
) -> dict[str, list[TreeCheck]]:
    """Plan the workload with each technique's Omega (under ``slicing``); measure every tree
    of each plan."""
    spec = spec or WorkloadSpec(**CH7)
    out: dict[str, list[TreeCheck]] = {}
    for tech in techniques:
        agg = "max" if EXECUTORS[tech].requires_selective else "sum"
        qs = [Query(q.id, q.range, q.slide, agg, q.stream) for q in generate(spec)]
        model = CostModel(tech, spec.rate, slicing=slicing)
        rows, skipped = [], 0
        t0 = time.perf_counter()
        for t in weaveshare(qs, model):
            try:
                rows.append(measure_tree(t, tech, **kw))
            except ValueError:  # composite slide beyond MAX_COMPOSITE_SLIDE: no stream for it
                skipped += 1
                continue
            if progress:
                progress(rows[-1])
        out[tech] = rows
        if progress:
            note = (
                f", {skipped} not measured (composite slide > {MAX_COMPOSITE_SLIDE:.0e})"
                if skipped
                else ""
            )
            progress(f"{tech}: {len(rows)} trees in {time.perf_counter() - t0:.1f}s{note}")
    return out


def slickdeque_inv_on_plan(
    spec: WorkloadSpec | None = None, plan_technique: str = "panes", slicing: str = "pairs"
) -> dict:
    """SlickDeque Inv's model (new and old formula) vs measured on the trees of *another*
    technique's plan (Panes weaves more, so its trees show what the old formula misses)."""
    spec = spec or WorkloadSpec(**CH7)
    model = CostModel("slickdeque_inv", spec.rate, slicing=slicing)
    trees = [
        model.tree(t.queries)
        for t in weaveshare(generate(spec), CostModel(plan_technique, spec.rate, slicing=slicing))
    ]
    checks, skipped = [], 0
    for t in trees:
        try:
            checks.append(measure_tree(t, "slickdeque_inv"))
        except ValueError:
            skipped += 1
    new = math.fsum(c.edge_rate * c.estimated for c in checks)
    mea = math.fsum(c.edge_rate * c.measured for c in checks)
    out = dict(
        plan=plan_technique,
        slicing=slicing,
        trees=len(checks),
        skipped=skipped,
        model=new,
        measured=mea,
        trees_exact=sum(1 for c in checks if abs(c.measured - c.estimated) < 1e-9),
    )
    if slicing == "pairs":
        old = math.fsum(c.edge_rate * c.old_formula for c in checks)
        out.update(
            old_formula=old,
            old_diff_pct=100.0 * (old - mea) / mea,
            trees_old_wrong=sum(1 for c in checks if c.old_formula != c.measured),
        )
    return out


def summarize(results: dict[str, list[TreeCheck]]) -> list[dict]:
    """One row per technique: E-weighted totals and per-tree % differences."""
    rows = []
    for tech, trees in results.items():
        if not trees:  # every tree of the plan was too long to measure
            continue
        est = math.fsum(t.edge_rate * t.estimated for t in trees)
        mea = math.fsum(t.edge_rate * t.measured for t in trees)
        d = [t.diff_pct for t in trees]
        row = dict(
            technique=tech,
            slicing=trees[0].slicing if trees else "pairs",
            trees=len(trees),
            estimated=est,
            measured=mea,
            diff_pct=100.0 * (mea - est) / est,
            tree_diff_min=min(d),
            tree_diff_median=float(np.median(d)),
            tree_diff_max=max(d),
            exact_trees=sum(1 for t in trees if abs(t.measured - t.estimated) < 1e-9),
            scan_exact_trees=sum(1 for t in trees if t.exact_scan),
        )
        if (
            trees
            and trees[0].slicing != "pairs"
            and tech not in ("panes", "slickdeque_inv")
            and all(t.open_exact is not None for t in trees)
        ):
            om = math.fsum(t.edge_rate * t.open_model for t in trees)
            ox = math.fsum(t.edge_rate * t.open_exact for t in trees)
            row["open_model"], row["open_exact"] = om, ox
        if tech == "slickdeque_inv" and trees and all(t.old_formula is not None for t in trees):
            old = math.fsum(t.edge_rate * t.old_formula for t in trees)
            row["old_formula"] = old
            row["old_diff_pct"] = 100.0 * (mea - old) / old
        rows.append(row)
    return rows


def format_summary(rows: list[dict]) -> str:
    lines = [
        "| technique | trees | sum E*Omega (model) | sum E*measured | diff | per-tree diff "
        "min / median / max | trees exact |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['technique']} | {r['trees']} | {r['estimated']:.6g} | {r['measured']:.6g} | "
            f"{r['diff_pct']:+.2f}% | {r['tree_diff_min']:+.2f}% / {r['tree_diff_median']:+.2f}% / "
            f"{r['tree_diff_max']:+.2f}% | {r['exact_trees']}/{r['trees']} |"
        )
    for r in rows:
        if "open_model" in r:
            d = (
                100.0 * (r["open_model"] - r["open_exact"]) / r["open_exact"]
                if r["open_exact"]
                else 0.0
            )
            lines.append(
                f"\n{r['technique']}: open-partial combines per time unit, estimate "
                f"{r['open_model']:.6g} vs exact {r['open_exact']:.6g} ({d:+.2f}%)"
            )
        if "old_formula" in r:
            lines.append(
                f"\nSlickDeque Inv, old formula 2 x #unique ranges: sum E*Omega = "
                f"{r['old_formula']:.6g} ({r['old_diff_pct']:+.2f}% measured vs it)"
            )
    return "\n".join(lines)
