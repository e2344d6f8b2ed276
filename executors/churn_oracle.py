"""Brute-force references for trees whose queries come and go (docs/DESIGN.md s. 9).

Two oracles, both independent of the slicing and final-aggregation code:

* ``registered_answers`` is section 9 itself: a query registered at ``T_reg`` answers exactly
  the non-empty windows ``[k*s, k*s + r)`` with ``k*s >= T_reg``; unregistered at ``T_unreg``
  it answers no window ending after ``T_unreg``.  Each window's value is computed exactly over
  *every* tuple of the stream in it.  This is the truth whenever no tuple is late, e.g. when
  every tuple arrives at most ``allowed_lateness`` behind the newest timestamp seen before it
  (a window containing ``ts`` ends after ``ts``, so it cannot be closed yet).
* ``generation_answers`` covers late tuples too.  ``executors.churn_tree.ChurnTree`` changes a
  tree's query set by starting a new *generation* (an ordinary tree over the new set, fed the
  tuples with ``ts >= T``) while the old one runs on until its windows before ``T`` have
  closed; lateness is each generation's rule (docs/DESIGN.md s. 1 over its queries).  This
  oracle spells that out with ``executors.oracle.brute_force`` per generation.

Count windows (``kind: count``) live on the positions axis (docs/DESIGN.md s. 1): a tuple's
timestamp is its 0-based arrival number in the stream, and ``T_reg``/``T_unreg`` and a change's
``at`` are positions too (the number of tuples consumed when the change happens, or later); no
tuple is ever late.

A *schedule* is the arrival order of a run: a list of ``("data", ts, values)`` and
``("change", at, add, remove)`` items (``add``: query dicts, ``remove``: ids; ``at`` is the
``T`` of the change, later than every timestamp before it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .oracle import brute_force, evaluate_window, exact_value
from .slicing import QuerySpec, normalize_query


@dataclass
class _Generation:
    """One generation of ``generation_answers``: its queries, ``T_g`` (None: the first), per
    query its domain ``[lo, hi, ehi]`` (start >= lo, start < hi, end <= ehi; None: unbounded)
    and the index of the first tuple that arrived after it was created."""

    queries: list[QuerySpec]
    t_start: int | None
    domain: dict[str, list[int | None]]
    first: int


def registrations(initial, schedule) -> list[tuple[dict, int | None, int | None]]:
    """``(query, T_reg, T_unreg)`` for every query of a schedule (None: unbounded)."""
    reg = {normalize_query(q).id: [q, None, None] for q in initial}
    for item in schedule:
        if item[0] != "change":
            continue
        _, at, add, remove = item
        for q in add:
            reg[normalize_query(q).id] = [q, int(at), None]
        for qid in remove:
            reg[qid][2] = int(at)
    return [tuple(v) for v in reg.values()]


def registered_answers(regs, ts, values) -> list[tuple[str, int, int, object]]:
    """Section 9 answers of ``(query, T_reg, T_unreg)`` registrations over all tuples
    ``(ts, values)`` (arrival order does not matter: no tuple may be late).

    Returns ``(query_id, window_start, window_end, value)`` sorted by (query id, start).
    """
    values = np.asarray(values)
    is_int = bool(np.issubdtype(values.dtype, np.integer))
    tl = [int(t) for t in ts]
    vl = [exact_value(v, is_int) for v in values]
    out = []
    for q, t_reg, t_unreg in regs:
        q = normalize_query(q)
        r, s = q.range, q.slide
        wins: dict[int, list] = {}
        for t, v in zip(range(len(vl)) if q.kind == "count" else tl, vl):
            for k in range((t - r) // s + 1, t // s + 1):
                start, end = k * s, k * s + r
                if t_reg is not None and start < t_reg:
                    continue
                if t_unreg is not None and end > t_unreg:
                    continue
                wins.setdefault(k, []).append(v)
        for k, ws in wins.items():
            out.append((q.id, k * s, k * s + r, evaluate_window(q.aggregate.name, ws, is_int)))
    out.sort(key=lambda x: (x[0], x[1]))
    return out


def generation_answers(initial, schedule, allowed_lateness: int = 0):
    """Answers and late tuples of a ``ChurnTree`` driven by ``schedule``, by brute force.

    Generation g (created at the start or by a change at ``T_g``) runs its query set on every
    tuple arriving after its creation with ``ts >= T_g`` (all tuples for the first one), with
    the window rule and lateness of docs/DESIGN.md s. 1; of its answers it keeps the windows
    in its *domain*: for a query it took over, start >= T_g (and >= the query's T_reg); start
    < T of the next change; end <= T_unreg of a query removed at that change.
    Returns ``(answers, late)``: answers as in ``registered_answers``; late: the set of
    ``(generation number, arrival index)`` pairs (index over all data tuples).
    """
    cur = [normalize_query(q) for q in initial]
    gens = [_Generation(cur, None, {q.id: [None, None, None] for q in cur}, 0)]
    ts_all: list[int] = []
    v_all: list = []
    for item in schedule:
        if item[0] == "data":
            ts_all += [int(t) for t in item[1]]
            v_all += list(np.asarray(item[2]))
            continue
        _, at, add, remove = item
        if not add and not remove:
            continue
        g = gens[-1]
        for dom in g.domain.values():
            dom[1] = at if dom[1] is None else min(dom[1], at)
        for old in gens:
            for qid, dom in old.domain.items():
                if qid in remove:
                    dom[2] = at if dom[2] is None else min(dom[2], at)
        keep = [q for q in g.queries if q.id not in set(remove)]
        new = keep + [normalize_query(q) for q in add]
        gens.append(_Generation(new, at, {q.id: [at, None, None] for q in new}, len(ts_all)))
    dtype = np.asarray(v_all).dtype if v_all else np.int64
    answers, late = [], set()
    for gi, gen in enumerate(gens):
        qs, t0, dom_of, first = gen.queries, gen.t_start, gen.domain, gen.first
        if not qs:
            continue
        if qs[0].kind == "count":
            # positions are arrival numbers over the whole stream; a later generation's
            # domain starts at or after its creation, so only its own tuples fall in it
            if first == len(ts_all):
                continue
            idx = list(range(len(ts_all)))
            got, lt = brute_force(qs, ts_all, np.array(v_all, dtype=dtype))
        else:
            idx = [i for i in range(first, len(ts_all)) if t0 is None or ts_all[i] >= t0]
            ts = np.array([ts_all[i] for i in idx], dtype=np.int64)
            vs = np.array([v_all[i] for i in idx], dtype=dtype)
            if not len(idx):
                continue
            got, lt = brute_force(qs, ts, vs, allowed_lateness)
        late |= {(gi, idx[j]) for j in lt}
        for qid, start, end, val in got:
            lo, hi, ehi = dom_of[qid]
            if (
                (lo is None or start >= lo)
                and (hi is None or start < hi)
                and (ehi is None or end <= ehi)
            ):
                answers.append((qid, start, end, val))
    answers.sort(key=lambda x: (x[0], x[1]))
    return answers, late


__all__ = ["registrations", "registered_answers", "generation_answers"]
