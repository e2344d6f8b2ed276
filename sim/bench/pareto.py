"""WG_PF benchmarks: weak dominance on a mixed grid, hypervolume against the exact front, runtime.

Why a grid of its own: the papers' generator has one stream and slides drawn from 1..Smax; the
trade-off between sharing and balance shows most on what a new user writes: two
streams at different rates, prime slides, ``r < s`` hopping windows mixed with ``r mod s != 0``,
2-4 nodes, Panes / FlatFIT / FlatFAT. ``mixed_instances`` draws such workloads from a seed.

- ``dominance``: per instance, every Table 7 optimizer and WG_LS (each run on its own, as a user
  would) against WG_PF's returned front: does some front plan weakly dominate it?
- ``hv_vs_exact``: small instances (8-10 queries): WG_PF front hypervolume / exact front's
  (reference point 1.1 x the exact front's worst TotalCost and MaxCost).
- ``runtime``: WG_PF's whole front vs WG_LS at given generator points (``RUNTIME_POINTS``), each
  on a fresh cost model (no shared caches), in both orders; the ratio is taken per point, with
  the work (candidate moves) of WG_LS's search and of WG_PF's own search and its budget.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from placement.optimizers import optimize
from placement.pareto.front import hypervolume, weakly_dominates
from placement.pareto.search import SEED_OPTIMIZERS, wg_pf
from placement.queries import Query
from placement.trees import CostModel

PRIMES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)
#: Table 8's largest point (500 queries; timed on 32 nodes): first the configuration where WG_LS
#: converges fastest relative to WG_PF's search (6.4x before WG_PF's work budget), then Smax 50
_P = dict(qnum=500, seed=0)
RUNTIME_POINTS = [
    dict(_P, smax=25, rate=100.0, zskew=1.0, omax=100.0, gen="div"),
    *(
        dict(_P, smax=50, rate=rate, zskew=1.0, omax=100.0, gen=gen)
        for gen in ("nrm", "div")
        for rate in (10.0, 100.0)
    ),
    *(
        dict(_P, smax=50, rate=rate, zskew=0.0, omax=omax, gen=gen)
        for gen in ("nrm", "div")
        for rate in (10.0, 100.0)
        for omax in (10.0, 100.0)
    ),
]
TECHNIQUES = ("panes", "flatfit", "flatfat")


def mixed_queries(n: int, rng: random.Random) -> tuple[list[Query], dict[str, float]]:
    """``n`` queries over two streams (rates 10 and 1, or 100 and 5), prime slides (a few
    composite ones), a third hopping ``r < s``, a third ``r mod s != 0``, sum and max."""
    rates = rng.choice(({"mf01": 10.0, "mf02": 1.0}, {"mf01": 100.0, "mf02": 5.0}))
    qs = []
    for i in range(n):
        s = rng.choice(PRIMES) if rng.random() < 0.8 else rng.choice((4, 6, 10, 12, 15))
        kind = rng.random()
        if kind < 1 / 3 and s > 1:
            r = rng.randint(1, s - 1)  # hopping window: gaps between windows
        elif kind < 2 / 3:
            r = s * rng.randint(1, 6) + rng.randint(1, s - 1)
        else:
            r = s * rng.randint(1, 8)
        stream = "mf01" if rng.random() < 0.6 else "mf02"
        qs.append(Query(f"q{i}", r, s, rng.choice(("sum", "max")), stream))
    return qs, rates


def mixed_instances(
    count: int, seed: int = 0, sizes=(12, 24, 36, 48), nodes=(2, 3, 4)
) -> list[dict[str, Any]]:
    """``count`` instances cycling sizes x nodes x techniques, workloads from ``seed + i``."""
    out = []
    for i in range(count):
        rng = random.Random(seed + i)
        n = sizes[i % len(sizes)]
        qs, rates = mixed_queries(n, rng)
        out.append(
            {
                "i": i,
                "qnum": n,
                "nodes": nodes[(i // len(sizes)) % len(nodes)],
                "ie": TECHNIQUES[(i // (len(sizes) * len(nodes))) % len(TECHNIQUES)],
                "queries": qs,
                "rates": rates,
            }
        )
    return out


def dominance(
    instances: list[dict[str, Any]],
    front_size: int = 8,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """One row per (instance, seed optimizer): weakly dominated by WG_PF's front?"""
    rows = []
    for inst in instances:
        qs, nodes = inst["queries"], inst["nodes"]
        t0 = time.perf_counter()
        res = wg_pf(qs, CostModel(inst["ie"], inst["rates"]), nodes, front_size=front_size)
        pf_s = time.perf_counter() - t0
        pts = [(p.total_cost, p.max_cost) for p in res.front]
        for name in SEED_OPTIMIZERS:
            p = optimize(name, qs, CostModel(inst["ie"], inst["rates"]), nodes)
            rows.append(
                {
                    "i": inst["i"],
                    "qnum": inst["qnum"],
                    "nodes": nodes,
                    "ie": inst["ie"],
                    "optimizer": name,
                    "total_cost": p.total_cost,
                    "max_cost": p.max_cost,
                    "front_points": len(pts),
                    "wg_pf_s": pf_s,
                    "weakly_dominated": any(
                        weakly_dominates(f, (p.total_cost, p.max_cost)) for f in pts
                    ),
                }
            )
        if on_row:
            on_row(rows[-1])
    return rows


def hv_vs_exact(
    instances: list[dict[str, Any]],
    front_size: int = 8,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Hypervolume ratio WG_PF / exact on small instances
    (``placement.exact.optimum.solve_exact``)."""
    from placement.exact.optimum import solve_exact

    rows = []
    for inst in instances:
        model = CostModel(inst["ie"], inst["rates"])
        res = wg_pf(inst["queries"], model, inst["nodes"], front_size=front_size)
        ex = solve_exact(inst["queries"], model, inst["nodes"])
        ep = [(p.total_cost, p.max_cost) for p in ex.front]
        ref = (1.1 * max(p[0] for p in ep), 1.1 * max(p[1] for p in ep))
        hv = hypervolume(ep, ref)
        got = hypervolume([(p.total_cost, p.max_cost) for p in res.front], ref)
        rows.append(
            {
                "i": inst["i"],
                "qnum": inst["qnum"],
                "nodes": inst["nodes"],
                "ie": inst["ie"],
                "exact_points": len(ep),
                "front_points": len(res.front),
                "hv_ratio": got / hv if hv > 0 else 1.0,
            }
        )
        if on_row:
            on_row(rows[-1])
    return rows


def runtime(
    points: list[dict[str, Any]], nodes: int, on_row: Callable[[dict[str, Any]], None] | None = None
) -> list[dict[str, Any]]:
    """WG_PF's whole front vs WG_LS at generator points (``sim.workload.WorkloadSpec`` kwargs),
    fresh cost models, both orders (caches of the edge engine may favour the second run)."""
    from sim.workload import WorkloadSpec, generate

    rows = []
    for kw in points:
        spec = WorkloadSpec(**kw)
        qs = generate(spec)
        times: dict[str, list[float]] = {"WG_LS": [], "WG_PF": []}
        work: dict[str, Any] = {}
        for order in (("WG_LS", "WG_PF"), ("WG_PF", "WG_LS")):
            for name in order:
                model = CostModel("panes", {spec.stream: spec.rate})
                t0 = time.perf_counter()
                if name == "WG_PF":
                    res = wg_pf(qs, model, nodes)
                    work.update(pf_work=res.work, pf_budget=res.budget, pf_points=len(res.front))
                else:
                    work["ls_work"] = optimize(name, qs, model, nodes).work
                times[name].append(time.perf_counter() - t0)
        ls, pf = min(times["WG_LS"]), min(times["WG_PF"])
        rows.append({**kw, "nodes": nodes, "wg_ls_s": ls, "wg_pf_s": pf, "ratio": pf / ls, **work})
        if on_row:
            on_row(rows[-1])
    return rows


def run_summary(run_dir) -> dict[str, Any]:
    """Read a ``weaveplace simulate`` output with WG_PF (and, if computed, exact fronts): how
    often its front weakly dominates each optimizer, what it adds over the seeds' own
    non-dominated plans (hypervolume ratio, reference 1.1 x the seeds' worst TotalCost and
    MaxCost), hypervolume against the exact front, and its whole-front runtime over WG_LS's."""
    import json
    from pathlib import Path

    import pandas as pd

    from placement.pareto.front import nondominated

    run = Path(run_dir)
    d = pd.read_csv(run / "results.csv", float_precision="round_trip")
    rows = []
    for cid, g in d.groupby("config_id"):
        pf = g[g.optimizer == "WG_PF"].iloc[0]
        fp = [(x["total_cost"], x["max_cost"]) for x in json.loads((run / pf["front"]).read_text())]
        sp = [(r.total_cost, r.max_cost) for r in g[g.optimizer != "WG_PF"].itertuples()]
        sf = [sp[i] for i in nondominated(sp)]
        ref = (1.1 * max(p[0] for p in sf), 1.1 * max(p[1] for p in sf))
        hs = hypervolume(sf, ref)
        ls = g[g.optimizer == "WG_LS"]
        row = {
            "config_id": cid,
            "qnum": pf.qnum,
            "nodes": pf.nodes,
            "front_points": len(fp),
            "new_points": sum(not any(weakly_dominates(s, f) for s in sf) for f in fp),
            "hv_over_seeds": hypervolume(fp, ref) / hs if hs > 0 else 1.0,
            "pf_s": pf.runtime_s,
            "ls_s": float(ls.runtime_s.iloc[0]) if len(ls) else None,
        }
        ex = run / f"plans/c{cid:04d}_EXACT_front.json"
        if ex.exists():
            ep = [(x["total_cost"], x["max_cost"]) for x in json.loads(ex.read_text())]
            r2 = (1.1 * max(p[0] for p in ep), 1.1 * max(p[1] for p in ep))
            he = hypervolume(ep, r2)
            row["hv_seeds_over_exact"] = hypervolume(sf, r2) / he if he > 0 else 1.0
            row["hv_over_exact"] = hypervolume(fp, r2) / he if he > 0 else 1.0
        rows.append(row)
    r = pd.DataFrame(rows)
    dom = d[d.optimizer != "WG_PF"].groupby("optimizer", sort=False)["pf_weakly_dominates"]
    out = {
        "configs": len(r),
        "weak_dominance_pct_min": 100 * float(dom.mean().min()),
        "weak_dominance_pct_all": 100
        * float(d.loc[d.optimizer != "WG_PF", "pf_weakly_dominates"].mean()),
        "front_points_mean": float(r.front_points.mean()),
        "configs_with_new_points_pct": 100 * float((r.new_points > 0).mean()),
        "hv_over_seeds_mean": float(r.hv_over_seeds.mean()),
        "hv_over_seeds_max": float(r.hv_over_seeds.max()),
    }
    if "hv_over_exact" in r:
        out.update(
            hv_over_exact_mean=float(r.hv_over_exact.mean()),
            hv_over_exact_min=float(r.hv_over_exact.min()),
            hv_within_1pct_pct=100 * float((r.hv_over_exact >= 0.99).mean()),
            hv_seeds_over_exact_mean=float(r.hv_seeds_over_exact.mean()),
        )
    if r.ls_s.notna().all():
        ratio = r.pf_s / r.ls_s
        big = (r.qnum == r.qnum.max()) & (r.nodes == r.nodes.max())
        out.update(
            runtime_ratio_median=float(ratio.median()),
            runtime_ratio_largest_point_max=float(ratio[big].max()),
            runtime_ratio_largest_point_mean=float(ratio[big].mean()),
            pf_s_total=float(r.pf_s.sum()),
            ls_s_total=float(r.ls_s.sum()),
        )
    return out
