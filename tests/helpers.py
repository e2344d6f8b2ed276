"""Helpers shared by several test modules: one copy of each, so that the oracles and the
comparisons they make cannot drift apart between files.

Independent of the code under test on purpose: ``set_partitions`` and ``random_queries`` are the
brute-force side of the placement tests, ``rows``/``run``/``assert_same``/``refused`` the
comparison side of the executor tests against ``executors.brute_force``.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st

from placement.queries import Query

# ---- hypothesis -----------------------------------------------------------------------------------


def examples(n: int) -> int:
    """``max_examples`` for a property test whose cost sets its own count ``n``: ``n`` under the
    ``ci`` profile (tests/conftest.py), at most the profile's count under any other (``dev``)."""
    if os.environ.get("HYPOTHESIS_PROFILE", "ci") == "ci":
        return n
    return min(n, settings.default.max_examples)


# ---- placement oracles ----------------------------------------------------------------------------


def set_partitions(items):
    """All set partitions of ``items`` (a list), each as a list of blocks."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for p in set_partitions(rest):
        yield [[first]] + p
        for i in range(len(p)):
            yield p[:i] + [[first] + p[i]] + p[i + 1 :]


def greedy_reference(trees, model, floor=1e-12, target=0):
    """The pairwise greedy by brute force: price every same-key pair, merge the largest benefit
    (ties to the lower creation uids) while it is above ``floor`` (``-math.inf``: at a loss
    too, To Nodes' forced merge) and more than ``target`` trees are left."""
    alive = sorted(trees, key=lambda t: t.uid)
    while len(alive) > target:
        best = None
        for i, x in enumerate(alive):
            for y in alive[i + 1 :]:
                if x.key == y.key:
                    k = (-model.benefit(x, y), x.uid, y.uid)
                    if best is None or k < best[0]:
                        best = (k, x, y)
        if best is None or -best[0][0] <= floor:
            break
        _, x, y = best
        alive = [t for t in alive if t is not x and t is not y] + [model.merge(x, y)]
    return alive


def random_queries(draw, n, keys=1, streams=1, max_slide=9, range_factor=3, kinds=("time",)):
    """``n`` queries q0.. with slide in [1, max_slide], range in [1, range_factor * slide],
    aggregate sum or max (``keys`` = 2 mixes them) on streams s0.. (``streams`` of them), window
    kind drawn from ``kinds`` (no draw when there is one)."""
    qs = []
    for i in range(n):
        s = draw(st.integers(1, max_slide))
        r = draw(st.integers(1, range_factor * s))
        k = draw(st.integers(0, keys - 1))
        sid = draw(st.integers(0, streams - 1))
        kind = draw(st.sampled_from(kinds)) if len(kinds) > 1 else kinds[0]
        qs.append(Query(f"q{i}", r, s, "sum" if k == 0 else "max", f"s{sid}", kind))
    return qs


def all_moves_exact(s, nodes, loads):
    """Every move of WG_LS's neighbourhood (module doc of placement.local_search.search: whole trees
    anywhere, single queries out of the most loaded node), priced exactly: the brute-force
    oracle for ``LocalSearch.best_move`` (``s``, a ``placement.local_search.search.LocalSearch``)."""
    out = []
    N = len(nodes)
    h = max(range(N), key=lambda j: (loads[j], -j))
    for a in range(N):
        for ti, t in enumerate(nodes[a]):
            for b in range(N):
                if b == a:
                    continue
                out.append(("move", a, ti, b, None))
                for ui, u in enumerate(nodes[b]):
                    if u.key == t.key:
                        out.append(("move", a, ti, b, ui))
                    if b > a:
                        out.append(("swap", a, ti, b, ui))
            if len(t.queries) > 1 and a == h:
                for q in t.queries:
                    for b in range(N):
                        if b != a:
                            out.append(("query", a, ti, b, None, q))
                            out += [
                                ("query", a, ti, b, ui, q)
                                for ui, u in enumerate(nodes[b])
                                if u.key == t.key
                            ]
    keys = []
    for mv in out:
        ns, ls = [list(x) for x in nodes], list(loads)
        s.apply(ns, ls, mv)
        keys.append(s.key(ls))
        s._single.clear()  # apply may hand out the cached single-query tree
    return keys


# ---- executor comparisons -------------------------------------------------------------------------

AGGS = ["sum", "count", "min", "max", "avg", "stddev", "range"]


def draw_stream(draw, max_n: int, gaps: list[int], max_lateness: int, slack: int, t0: int):
    """A stream for the executor oracles: ``(ts, v, lateness, cuts, snap_at)``.  Up to ``max_n``
    timestamps stepping by ``gaps`` (0: duplicates) from ``-t0``, each pulled back by up to
    ``lateness + slack`` (out of order within and beyond the lateness); int64 values up to 2^40
    or floats; batch cuts, and a batch before which ``run`` snapshots and restores (or none)."""
    n = draw(st.integers(0, max_n))
    steps = draw(st.lists(st.sampled_from(gaps), min_size=n, max_size=n))
    lateness = draw(st.integers(0, max_lateness))
    jitter = draw(st.lists(st.integers(-lateness - slack, 0), min_size=n, max_size=n))
    ts = np.cumsum(np.array(steps, dtype=np.int64)) + np.array(jitter, dtype=np.int64) - t0
    ts = ts.astype(np.int64)
    if draw(st.booleans()):
        ints = st.lists(st.integers(-(2**40), 2**40), min_size=n, max_size=n)
        v = np.array(draw(ints), dtype=np.int64)
    else:
        floats = st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=n, max_size=n)
        v = np.array(draw(floats), dtype=np.float64)
    cuts = sorted(set(draw(st.lists(st.integers(0, n), max_size=4))) | {0, n})
    snap_at = draw(st.none() | st.integers(0, max(0, len(cuts) - 2)))
    return ts, v, lateness, cuts, snap_at


def rows(table):
    """An answer table as ``(query_id, window_start, window_end, value)`` tuples, in order."""
    d = table.to_pydict()
    return list(zip(d["query_id"], d["window_start"], d["window_end"], d["value"]))


def run(tree, ts, v, cuts, snap_at=None):
    """Feed [cuts[i], cuts[i+1]) batches; optionally snapshot+restore before batch snap_at."""
    from executors import ExecutionTree  # here: the placement and config tests need no executors

    out = []
    for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])):
        if snap_at == i:
            tree = ExecutionTree.restore(tree.snapshot())
        out += rows(tree.process(None if ts is None else ts[a:b], v[a:b]))
    out += rows(tree.flush())
    return tree, out


def assert_same(got, want, scale):
    """Same windows in the same order; int values exact, float values to 1e-9 relative."""
    assert [g[:3] for g in got] == [w[:3] for w in want]
    for g, w in zip(got, want):
        if isinstance(w[3], int) and isinstance(g[3], int):
            assert g[3] == w[3], (g, w)
        else:
            # 1e-9 relative; stddev of a (near-)constant window can only be exact to
            # ~1e-16 of the data's magnitude (sqrt of a tiny variance), hence the abs term
            assert g[3] == pytest.approx(w[3], rel=1e-9, abs=1e-12 * scale), (g, w)


def refused(tech, qs):
    """Whether ``ExecutionTree`` must refuse technique ``tech`` for queries ``qs`` (dicts):
    invertible-only techniques with min/max/range, the non-invertible SlickDeque with an
    invertible aggregate, single-(range, slide) techniques with several."""
    aggs = {q["aggregate"] for q in qs}
    if tech in ("panes_inv", "slickdeque_inv") and aggs & {"min", "max", "range"}:
        return True
    if tech == "slickdeque_noninv" and aggs - {"min", "max", "range"}:
        return True
    return (
        tech in ("panes_inv", "twostacks", "daba")
        and len({(q["range"], q["slide"]) for q in qs}) > 1
    )


# ---- live runs over every aggregate ------------------------------------------------------------

#: one window per aggregate (prime-ish slides, r mod s != 0 included)
WINDOWS = [(1000, 400), (700, 400), (1200, 600), (500, 500), (900, 300), (1100, 400), (800, 200)]


def live_config(optimizer: str, ie: str, engine: str = "fast", slicing: str = "pairs") -> dict:
    """A short live run's config: one query per aggregate on mf01, 2 nodes, 4 s at 100 Hz."""
    from placement.queries import AGGREGATES

    queries = [
        {"id": f"q_{a}", "stream": "mf01", "aggregate": a, "range": r, "slide": s}
        for a, (r, s) in zip(AGGREGATES, WINDOWS)
    ]
    return {
        "workload": {"queries": queries},
        "streams": {"mf01": {"rate": 0.1}},
        "cluster": {"nodes": 2},
        "placement": {"optimizers": optimizer, "ie": ie, "engine": engine, "slicing": slicing},
        "data": {"duration_s": 4, "rate_hz": 100, "seed": 3},
        "run": {"mode": "live", "batch_rows": 128},
    }


def run_cluster_driver(argv: list[str], env: dict, cwd, raytmp: str, timeout_s: float, label: str):
    """Run a multi-node test driver (its own Ray cluster) in a process group of its own under a
    hard timeout (the group is killed on expiry); its private ``RAY_TMPDIR`` ``raytmp`` is
    removed whatever happens.  Returns ``(returncode, output)``."""
    import os
    import signal
    import subprocess

    import pytest

    proc = subprocess.Popen(
        argv,
        env=env,
        cwd=str(cwd),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        log, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        log, _ = proc.communicate()
        pytest.fail(f"{label} timed out after {timeout_s} s:\n{log[-3000:]}")
    finally:
        subprocess.run(["rm", "-rf", raytmp], check=False)
    return proc.returncode, log
