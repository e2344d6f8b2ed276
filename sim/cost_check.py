"""The plan's estimated cost per node beside the cost measured on a live run.

Why operation counts and not busy seconds: the cost model prices a tree's own work, ``C = lambda
+ E * Omega`` per ms of event time (docs/DESIGN.md s. 3): every tuple of its stream folded into
a slice, and ``Omega`` final-aggregation operations per slice edge.  Busy seconds add what
the model leaves out on purpose: per-batch overheads (an actor call, Arrow columns, one
kernel dispatch per tree and batch), which on a small run outweigh the trees' work and make
a balanced plan look lopsided.  With ``run.count_ops`` the executors count exactly what the
model prices, so measured and estimated cost are in the same units and can agree.

Measured per tree: the tuples of its stream the node ingested (``stream_tuples``) plus its
final-aggregation operations (``final_ops``, counted per primitive, so divided by the
aggregate's primitives: the model prices an ``avg`` once, the executor runs ``sum`` and
``count``), over the data's event-time span in ms.
"""

from __future__ import annotations

from typing import Any

from executors.aggregates import get_aggregate


def node_cost_check(plan: dict[str, Any], nodes: dict[str, dict], span_ms: float) -> dict:
    """Per plan node with metrics: ``plan`` (its cost in the plan), ``measured`` (the same
    terms from the counts), ``ratio`` (measured / plan) and the two parts (``lambda``, tuples
    folded; ``final``, ``E * Omega``), each as ``[plan, measured]``; ``{}`` when the trees
    did not count operations."""
    rates = {s: float(v["rate"]) for s, v in (plan.get("streams") or {}).items()}
    out = {}
    for n in plan["nodes"]:
        m = nodes.get(n["id"])
        if m is None:
            continue
        lam = [0.0, 0.0]
        fin = [0.0, 0.0]
        for t in n["trees"]:
            tm = (m.get("trees") or {}).get(t["id"])
            if tm is None or "final_ops" not in tm:
                return {}
            lam[0] += rates.get(t["stream"], 0.0)
            lam[1] += (m.get("stream_tuples") or {}).get(t["stream"], 0) / span_ms
            fin[0] += float(t["edge_rate"]) * float(t["omega"])
            primitives = len(get_aggregate(t["aggregate"]).primitives(False))
            fin[1] += tm["final_ops"] / primitives / span_ms
        plan_cost, measured = float(n["cost"]), lam[1] + fin[1]
        out[n["id"]] = {
            "plan": plan_cost,
            "measured": measured,
            "ratio": measured / plan_cost if plan_cost else None,
            "lambda": lam,
            "final": fin,
        }
    return out


def agreement_lines(check: dict) -> list[str]:
    """One line per node: plan vs measured cost and how far apart, and the shares of the
    whole (what a balanced placement is about)."""
    tp = sum(v["plan"] for v in check.values()) or 1.0
    tm = sum(v["measured"] for v in check.values()) or 1.0
    lines = []
    for nid, v in check.items():
        off = "" if v["ratio"] is None else f" ({100 * (v['ratio'] - 1):+.1f} %)"
        lines.append(
            f"{nid}: estimated cost {v['plan']:.4g}, measured {v['measured']:.4g}{off}; "
            f"share {100 * v['plan'] / tp:.1f} % planned, {100 * v['measured'] / tm:.1f} % measured"
        )
    return lines
