"""Brute-force reference: recompute every window from the raw tuples.

Deliberately independent of the slicing and final-aggregation code: it walks the
tuples in arrival order, decides lateness from the window rule alone (a tuple is
late iff some window containing it ends at or before the watermark
``max_ts_seen - allowed_lateness`` when it arrives; a window whose end the
watermark has passed counts as emitted even if it was empty), and evaluates each
non-empty window exactly (Python ints / ``fractions.Fraction``), rounding once at
the end.  Slow (O(tuples x windows per tuple)); for tests and spot checks only.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from .slicing import normalize_query


def exact_value(x, is_int):
    """A value as the oracle computes with it: int, or the float's exact Fraction."""
    return int(x) if is_int else Fraction(float(x))


def evaluate_window(name: str, vals: list, is_int: bool):
    """One aggregate over one window's exact values (shared with ``churn_oracle``)."""
    if name == "count":
        return len(vals)
    if name == "sum":
        s = sum(vals)
        return int(s) if is_int else float(s)
    if name in ("min", "max"):
        m = min(vals) if name == "min" else max(vals)
        return int(m) if is_int else float(m)
    if name == "range":
        d = max(vals) - min(vals)
        return int(d) if is_int else float(d)
    if name == "avg":
        return float(Fraction(sum(vals)) / len(vals))
    if name == "stddev":
        n = len(vals)
        s = Fraction(sum(vals))
        ss = Fraction(sum(v * v for v in vals))
        var = (ss * n - s * s) / (n * n)
        return math.sqrt(float(var)) if var > 0 else 0.0
    raise ValueError(name)


def brute_force(queries, ts, values, allowed_lateness: int = 0):
    """Answers and late tuples of an uninterrupted run over ``(ts, values)``.

    Returns ``(answers, late_positions)`` where answers is a list of
    ``(query_id, window_start, window_end, value)`` sorted by (window_end, query
    order) and late_positions the indices (arrival order) of the late tuples.
    For count windows ``ts`` is ignored (positions are used).
    """
    qs = [normalize_query(q) for q in queries]
    values = np.asarray(values)
    is_int = bool(np.issubdtype(values.dtype, np.integer))
    n = len(values)
    if qs[0].kind == "count":
        ts = np.arange(n, dtype=np.int64)
        allowed_lateness = 0
    ts = [int(t) for t in ts]
    vals = [exact_value(v, is_int) for v in values]
    max_ts = None
    late = []
    windows: dict[tuple[int, int], list] = {}
    for i, (t, v) in enumerate(zip(ts, vals)):
        max_ts = t if max_ts is None else max(max_ts, t)
        wm = max_ts - allowed_lateness
        containing = []
        for qi, q in enumerate(qs):
            r, s = q.range, q.slide
            k_lo = (t - r) // s + 1
            k_hi = t // s
            for k in range(k_lo, k_hi + 1):
                containing.append((qi, k))
        if any(k * qs[qi].slide + qs[qi].range <= wm for qi, k in containing):
            late.append(i)
            continue
        for key in containing:
            windows.setdefault(key, []).append(v)
    out = []
    for (qi, k), ws in windows.items():
        q = qs[qi]
        start = k * q.slide
        out.append(
            (start + q.range, qi, q.id, start, evaluate_window(q.aggregate.name, ws, is_int))
        )
    out.sort(key=lambda x: (x[0], x[1]))
    return [(qid, st, end, val) for end, _, qid, st, val in out], late
