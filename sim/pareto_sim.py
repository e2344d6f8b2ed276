"""WG_PF in simulations: its front and the exact front on disk, distances to them, grid summary.

Why a module of its own: ``sim.simulate`` stays a loop over optimizers; what is particular to the
Pareto front (the front files, each optimizer's distance to the exact front, the share of
configurations where WG_PF's front weakly dominates each optimizer) lives here.

Columns added to ``results.csv`` (``None`` where they do not apply):

- every row: ``pf_weakly_dominates`` (WG_PF is in the run: some plan of its front is at least as
  good in TotalCost and in MaxCost, or max utilization with capacities, within 1e-9 relative);
  ``exact_front_gap`` (the exact front was computed: the multiplicative epsilon distance
  ``min_f max(0, T_f/T - 1, M_f/M - 1)``, 0 when the plan is on the exact front);
- WG_PF rows (``runtime_s`` includes the runtimes of the Table 7 / WG_LS plans of the same
  configuration that it reuses as seeds, so it is the whole front's time): ``front`` (path of ``plans/c<NNNN>_WG_PF_front.json``), ``front_points``,
  ``choose`` (the rule), ``choose_met``, ``choose_note`` (one line when the rule could not be met,
  with a load-shedding proposal for capacities), ``front_hv_ratio`` (hypervolume of WG_PF's front
  over the exact front's, reference point 1.1 x the exact front's worst TotalCost and MaxCost).

``pareto_summary.csv``: per optimizer, the configurations where WG_PF ran, the share that WG_PF's
front weakly dominates, the mean ``exact_front_gap`` and, for WG_PF, the mean and smallest
hypervolume ratio.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from placement.pareto.front import front_distance, hypervolume, weakly_dominates
from placement.pareto.search import ParetoResult, wg_pf
from placement.plan import Plan

FRONT_COLUMNS = ("front", "front_points", "choose", "choose_met", "choose_note", "front_hv_ratio")


def pareto_for(queries, model, caps, config, seeds=None) -> ParetoResult:
    """WG_PF with the config's seed, preprocessing, front size and choose rule; ``seeds``:
    plans of the same configuration already computed (``placement.pareto.search.wg_pf``)."""
    pl = config.placement
    return wg_pf(
        queries,
        model,
        caps,
        seed=config.run.seed,
        preprocess=pl.preprocess_arg,
        front_size=pl.front_size,
        rule=pl.choose_rule(caps),
        seeds=seeds,
    )


def plan_point(d: dict[str, Any]) -> tuple[float, float]:
    """(TotalCost, max utilization) of a plan dict: MaxCost when nodes have no capacity."""
    u = max(n["cost"] / (1.0 if n.get("capacity") is None else n["capacity"]) for n in d["nodes"])
    return (d["total_cost"], u)


def write_front(path: Path, plans: Sequence[dict[str, Any]]) -> None:
    """A front as a JSON list of ``weaveplace.plan/1`` plans (each checkable by verify-plan)."""
    path.write_text(json.dumps(list(plans), indent=1))


def front_rows(
    res: ParetoResult, out: Path, i: int, ids: Sequence[str], exact_front: Sequence[Plan] | None
) -> dict[str, Any]:
    """Write WG_PF's front for configuration ``i``; its columns for the WG_PF row."""
    rel = Path("plans") / f"c{i:04d}_WG_PF_front.json"
    write_front(out / rel, res.front_dicts(ids))
    row = {
        "front": str(rel),
        "front_points": len(res.front),
        "choose": str(res.rule),
        "choose_met": res.met,
        "choose_note": res.note or None,
        "front_hv_ratio": None,
    }
    if exact_front:
        ep = [(p.total_cost, p.max_cost) for p in exact_front]
        ref = (1.1 * max(p[0] for p in ep), 1.1 * max(p[1] for p in ep))
        hv_ex = hypervolume(ep, ref)
        if hv_ex > 0:
            row["front_hv_ratio"] = (
                hypervolume([(p.total_cost, p.max_cost) for p in res.front], ref) / hv_ex
            )
        else:  # one exact point: the ratio is 1 exactly when WG_PF reached it
            row["front_hv_ratio"] = float(
                any(weakly_dominates((p.total_cost, p.max_cost), ep[0]) for p in res.front)
            )
    return row


def annotate(
    rows: list[dict[str, Any]],
    pf_points: list[tuple[float, float]] | None,
    exact_front: Sequence[Plan] | None,
    plan_dicts: list[dict[str, Any]],
) -> None:
    """Add ``pf_weakly_dominates`` and ``exact_front_gap`` to one configuration's rows."""
    ep = [(p.total_cost, p.max_cost) for p in exact_front] if exact_front else None
    for row, d in zip(rows, plan_dicts):
        row["pf_weakly_dominates"] = (
            None
            if pf_points is None
            else any(weakly_dominates(f, plan_point(d)) for f in pf_points)
        )
        row["exact_front_gap"] = (
            None if ep is None else front_distance((d["total_cost"], d["max_cost"]), ep)
        )
        for c in FRONT_COLUMNS:
            row.setdefault(c, None)


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """``pareto_summary.csv`` (module docstring); empty when WG_PF did not run."""
    if "pf_weakly_dominates" not in df or df["pf_weakly_dominates"].isna().all():
        return pd.DataFrame()
    out = []
    for name, g in df.groupby("optimizer", sort=False):
        dom = g["pf_weakly_dominates"].dropna().astype(bool)
        gap = g["exact_front_gap"].dropna().astype(float) if "exact_front_gap" in g else []
        hv = g["front_hv_ratio"].dropna().astype(float) if name == "WG_PF" else []
        out.append(
            {
                "optimizer": name,
                "configs": len(dom),
                "pf_weakly_dominates_pct": 100.0 * float(dom.mean()) if len(dom) else None,
                "exact_front_configs": len(gap),
                "exact_front_gap_mean_pct": 100.0 * float(gap.mean()) if len(gap) else None,
                "exact_front_gap_max_pct": 100.0 * float(gap.max()) if len(gap) else None,
                "hv_ratio_mean": float(hv.mean()) if len(hv) else None,
                "hv_ratio_min": float(hv.min()) if len(hv) else None,
            }
        )
    return pd.DataFrame(out)
