"""Micro-benchmarks of the final-aggregation kernels (the dissertation's set-up).

Tuple-based windows with slide 1: every tuple is a slice, so a window of n tuples
spans n partials.  ``single`` asks one window of n per slide; ``max-multi`` asks
every n' in 1..n per slide (the dissertation's upper bound).  Each cell:

1. warm-up: insert n slices without asking anything (untimed), so the structure is
   in steady state;
2. throughput: timed batches of slices until ``cell_seconds`` or ``max_slices``
   (at least one full window for amortised techniques when the budget allows), through
   ``FinalAggregator.run`` (argument checks included) with answer buffers allocated
   once per cell, for every technique alike: fresh answer arrays per batch cost page
   faults (~2 us per 4 KiB on this VM, i.e. ~4 ns per float64 answer pair), more than
   most kernels spend per slide;
   the exact operations per slide are counted in a separate untimed pass;
3. latency: ``latency_samples`` consecutive slides timed one by one with one
   kernel call each (includes ~1 us of call overhead; periodic spikes of period
   ~n are missed when n >> samples, which is why ``ops_max`` is reported too);
4. memory: bytes of the technique's state arrays, and tracemalloc's peak over the
   cell (numpy allocations are traced).

``numpy`` is the naive vectorised baseline: a cumulative-sum difference for Sum,
``sliding_window_view(...).max`` for Max (O(n) per slide).
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from executors.aggregates import OP_MAX, OP_SUM, Primitive
from executors.base import FAMILIES, TECHNIQUES, technique_class

DEFAULT_TECHNIQUES = (
    "numpy",
    "panes",
    "panes_inv",
    "flatfat",
    "bint",
    "flatfit",
    "slickdeque",
    "twostacks",
    "daba",
)


def _cls_for(technique: str, op: int):
    if technique in FAMILIES:
        return technique_class(technique, Primitive(op, "v", "f8"))
    cls = TECHNIQUES[technique]
    if cls.requires_inverse and op != OP_SUM:
        return None
    if cls.requires_selective and op == OP_SUM:
        return None
    return cls


def _numpy_cell(op, x, n, budget):
    """Vectorised baseline over len(x) - n + 1 windows; returns (slices, seconds, CPU
    seconds of this thread)."""
    m = x.shape[0] - n + 1
    c0 = time.thread_time()
    t0 = time.perf_counter()
    if op == OP_SUM:
        c = np.concatenate([[0.0], np.cumsum(x)])
        out = c[n:] - c[:-n]
    else:
        # chunk so one call stays within the budget for large n
        step = max(1, int(2e7 // n))
        out = []
        done = 0
        while done < m and time.perf_counter() - t0 < budget:
            w = np.lib.stride_tricks.sliding_window_view(x[done : done + step + n - 1], n)
            out.append(w.max(axis=1))
            done += w.shape[0]
        m = done
    el = time.perf_counter() - t0
    cpu = time.thread_time() - c0
    del out
    return m, el, cpu


@dataclass(frozen=True)
class ExecutorBenchOptions:
    """The cells of ``run_executor_bench``: every technique x aggregate x mode x window (``None``:
    powers of two 1..2^22; max-multi stops at ``max_multi_window``: n answers per slide, the
    output alone is n values), each timed for ``cell_seconds`` over at most ``max_slices``
    slices, ``latency_samples`` single slides timed one by one."""

    techniques: Sequence[str] = DEFAULT_TECHNIQUES
    aggregates: Sequence[str] = ("sum", "max")
    windows: Sequence[int] | None = None
    modes: Sequence[str] = ("single", "max-multi")
    dtype: str = "f8"
    cell_seconds: float = 0.5
    max_slices: int = 1 << 23
    latency_samples: int = 2000
    max_multi_window: int = 1 << 12
    seed: int = 0


def run_executor_bench(
    opts: ExecutorBenchOptions = ExecutorBenchOptions(), progress=None
) -> list[dict]:
    """Benchmark rows, one per (technique, aggregate, mode, window).

    Row keys: technique, aggregate, mode, window, queries, slices, seconds,
    throughput (slices/s, wall clock), cpu_seconds and throughput_cpu (the same over this
    thread's CPU time: on a shared machine it leaves out the time other processes held
    the core), lat_p50_us, lat_p99_us, lat_p999_us, lat_max_us,
    ops_mean, ops_max (aggregate operations per slide), state_bytes, peak_bytes;
    ``progress`` gets each row as it is done.
    """
    windows = [1 << k for k in range(23)] if opts.windows is None else opts.windows
    rng = np.random.default_rng(opts.seed)
    rows = []
    for agg in opts.aggregates:
        op = {"sum": OP_SUM, "max": OP_MAX}[agg]
        prim = Primitive(op, "v", opts.dtype)
        for mode in opts.modes:
            for n in windows:
                if mode == "max-multi" and n > opts.max_multi_window:
                    continue
                for tech in opts.techniques:
                    row = _cell(tech, agg, op, prim, mode, n, rng, opts)
                    if row is not None:
                        rows.append(row)
                        if progress:
                            progress(row)
    return rows


def _cell(tech, agg, op, prim, mode, n, rng, opts: ExecutorBenchOptions):
    dt = prim.np_dtype
    if tech == "numpy":
        if mode != "single":
            return None
        total = min(opts.max_slices, max(4 * n, 1 << 20)) + n - 1
        x = rng.standard_normal(total) if dt == np.float64 else rng.integers(-1000, 1000, total)
        tracemalloc.start()
        m, el, cpu = _numpy_cell(op, x.astype(dt), n, opts.cell_seconds)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return dict(
            technique="numpy",
            aggregate=agg,
            mode=mode,
            window=n,
            queries=1,
            slices=m,
            seconds=el,
            throughput=m / el if el else float("inf"),
            cpu_seconds=cpu,
            throughput_cpu=m / cpu if cpu else float("inf"),
            lat_p50_us=None,
            lat_p99_us=None,
            lat_p999_us=None,
            lat_max_us=None,
            ops_mean=None,
            ops_max=None,
            state_bytes=None,
            peak_bytes=peak,
        )
    cls = _cls_for(tech, op)
    if cls is None or (mode == "max-multi" and not cls.multi_query):
        return None
    q = 1 if mode == "single" else n
    ns_slide = np.array([n], np.int64) if mode == "single" else np.arange(n, 0, -1, dtype=np.int64)
    tracemalloc.start()
    a = cls(prim, n, known_ns=ns_slide.tolist())

    def feed(k, ask=True):
        x = rng.standard_normal(k) if dt == np.float64 else rng.integers(-1000, 1000, k)
        x = x.astype(dt)
        if ask:
            ptr = np.arange(k + 1, dtype=np.int64) * q
            due = np.tile(ns_slide, k)
        else:
            ptr = np.zeros(k + 1, dtype=np.int64)
            due = np.zeros(0, dtype=np.int64)
        return x, np.zeros(k, dt), ptr, due

    # 1. warm-up (untimed): fill the window
    left = n
    while left:
        k = min(left, 1 << 20)
        a.run(*feed(k, ask=False))
        left -= k
    # 2. throughput: batches double while a batch stays well under the budget; keep
    # going (up to 4x the budget) until one full window has slid, so periodic costs
    # (FlatFIT's wReset, TwoStacks' flip) are amortised as in the dissertation
    cap = max(1, min(1 << 18, (1 << 22) // q))
    out = (np.empty(cap * q, dt), np.empty(cap * q, dt))  # reused: no page faults in the timing
    batch, done, el, cpu = 1, 0, 0.0, 0.0
    while done < opts.max_slices and (
        el < opts.cell_seconds or (done <= n and el < 4 * opts.cell_seconds)
    ):
        k = min(batch, opts.max_slices - done)
        args = feed(k)
        c0 = time.thread_time()
        t0 = time.perf_counter()
        a.run(*args, out=out)
        dt_ = time.perf_counter() - t0
        cpu += time.thread_time() - c0
        el += dt_
        done += k
        if dt_ < opts.cell_seconds / 16:
            batch = min(2 * batch, cap)
    # exact operations per slide, untimed, on a fresh copy of the state
    st = a.state_dict()
    k = min(done, max(1, min(2 * n + 2, 1 << 18)), max(1, (1 << 22) // q))
    _, _, ops = a.run(*feed(k), count_ops=True)
    a.load_state_dict(st)
    # 3. latency: one slice per call, straight into the compiled kernel (the
    # wrapper's argument checks would otherwise dominate small windows)
    xs, _, _, _ = feed(opts.latency_samples, ask=False)
    lo1 = np.zeros(1, dt)
    ptr1 = np.array([0, q], dtype=np.int64)
    out_hi = np.empty(q, dt)
    out_lo = np.zeros(q, dt)
    no_ops = np.zeros(0, np.int64)
    lat = np.empty(opts.latency_samples)
    for i in range(opts.latency_samples):
        x1 = xs[i : i + 1]
        t0 = time.perf_counter()
        a._kernel(x1, lo1, ptr1, ns_slide, out_hi, out_lo, no_ops)
        lat[i] = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    p = np.percentile(lat, [50, 99, 99.9]) * 1e6
    return dict(
        technique=tech,
        aggregate=agg,
        mode=mode,
        window=n,
        queries=q,
        slices=done,
        seconds=el,
        throughput=done / el if el else float("inf"),
        cpu_seconds=cpu,
        throughput_cpu=done / cpu if cpu else float("inf"),
        lat_p50_us=float(p[0]),
        lat_p99_us=float(p[1]),
        lat_p999_us=float(p[2]),
        lat_max_us=float(lat.max() * 1e6),
        ops_mean=float(ops.mean()),
        ops_max=int(ops.max()),
        state_bytes=a.memory_bytes(),
        peak_bytes=peak,
    )


def slicing_workload(nq: int = 20, seed: int = 0) -> list[dict]:
    """Sum queries with fragments (r mod s != 0): slides 5..39, ranges 3..11 slides + 1..s-1."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(nq):
        s = int(rng.integers(5, 40))
        r = int(s * rng.integers(3, 12) + rng.integers(1, s))
        out.append(dict(id=f"q{i}", aggregate="sum", range=r, slide=s))
    return out


def run_slicing_bench(
    queries=None,
    techniques=("slickdeque", "panes", "flatfat", "flatfit"),
    n_tuples: int = 1_000_000,
    batch: int = 200_000,
    repeats: int = 3,
    seed: int = 0,
    progress=None,
) -> list[dict]:
    """Pairs vs Cutty on one tree: tuples/s of ``process`` (best of ``repeats``, the two
    slicings alternating so machine load hits both alike), slices handed to final
    aggregation, and operations per slice / per tuple (a separate counted run).

    One int64 tuple per time unit.  Answers of the two slicings are compared (must be equal).
    """
    from executors.tree import ExecutionTree

    qs = queries or slicing_workload(seed=seed)
    rng = np.random.default_rng(seed)
    ts = np.arange(n_tuples, dtype=np.int64)
    v = rng.integers(0, 1000, n_tuples)
    rows = []
    for tech in techniques:
        best = {}
        for _ in range(repeats):
            for slicing in ("pairs", "cutty"):
                tree = ExecutionTree(qs, technique=tech, slicing=slicing)
                tree.process(ts[:1000], v[:1000])  # compile / warm up
                t0 = time.perf_counter()
                for a in range(1000, n_tuples, batch):
                    tree.process(ts[a : a + batch], v[a : a + batch])
                el = time.perf_counter() - t0
                if slicing not in best or el < best[slicing][0]:
                    best[slicing] = (el, tree.stats()["slices"])
        answers = {}
        for slicing in ("pairs", "cutty"):
            tree = ExecutionTree(qs, technique=tech, slicing=slicing, count_ops=True)
            tab = tree.process(ts, v)
            answers[slicing] = tab.column("value").to_pylist()
            oc = tree.op_counts()
            el, slices = best[slicing]
            row = dict(
                technique=tech,
                slicing=slicing,
                queries=len(qs),
                tuples=n_tuples - 1000,
                seconds=el,
                throughput=(n_tuples - 1000) / el,
                slices=slices,
                ops_per_slice=oc["omega"],
                ops_per_tuple=oc["total"] / n_tuples,
                wsize=tree.wsize,
            )
            rows.append(row)
            if progress:
                progress(row)
        if answers["pairs"] != answers["cutty"]:
            raise AssertionError(f"{tech}: Pairs and Cutty answers differ")
    return rows


# ------------------------------------------------------------------ Max side by side
def _twostacks_literal_op():
    """TwoStacks with ``op`` a compile-time literal (the per-op specialisation SlickDeque
    Non-Inv has), as a fairness check: the same kernel body as ``twostacks``, compiled once
    per op.  Not a registered technique."""
    from numba import literally, njit

    from executors.aggregates import OP_MIN
    from executors.twostacks import TwoStacks, twostacks_kernel

    impl = njit(cache=False)(twostacks_kernel.py_func)

    @njit(cache=False)
    def lit(op, *args):
        op = literally(op)
        return impl(op, *args)

    @njit(cache=False)
    def entry(
        op,
        new_hi,
        new_lo,
        due_ptr,
        due_n,
        out_hi,
        out_lo,
        ops,
        a,
        b,
        c,
        d,
        e,
        f,
        g,
        h,
        ih,
        il,
        meta,
    ):
        if op == OP_MAX:
            return lit(
                OP_MAX,
                new_hi,
                new_lo,
                due_ptr,
                due_n,
                out_hi,
                out_lo,
                ops,
                a,
                b,
                c,
                d,
                e,
                f,
                g,
                h,
                ih,
                il,
                meta,
            )
        if op == OP_MIN:
            return lit(
                OP_MIN,
                new_hi,
                new_lo,
                due_ptr,
                due_n,
                out_hi,
                out_lo,
                ops,
                a,
                b,
                c,
                d,
                e,
                f,
                g,
                h,
                ih,
                il,
                meta,
            )
        return lit(
            OP_SUM,
            new_hi,
            new_lo,
            due_ptr,
            due_n,
            out_hi,
            out_lo,
            ops,
            a,
            b,
            c,
            d,
            e,
            f,
            g,
            h,
            ih,
            il,
            meta,
        )

    class TwoStacksLiteralOp(TwoStacks):
        name = "twostacks_literal_op"

        def _kernel(self, new_hi, new_lo, due_ptr, due_n, out_hi, out_lo, ops):
            s = self.state
            entry(
                self.op,
                new_hi,
                new_lo,
                due_ptr,
                due_n,
                out_hi,
                out_lo,
                ops,
                s["f_val_hi"],
                s["f_val_lo"],
                s["f_agg_hi"],
                s["f_agg_lo"],
                s["b_val_hi"],
                s["b_val_lo"],
                s["b_agg_hi"],
                s["b_agg_lo"],
                s["ident_hi"],
                s["ident_lo"],
                s["meta"],
            )

    return TwoStacksLiteralOp


def max_side_by_side(
    windows=(
        16,
        64,
        256,
        512,
        1024,
        2048,
        4096,
        1 << 13,
        1 << 14,
        1 << 15,
        1 << 16,
        1 << 17,
        1 << 20,
        1 << 22,
    ),
    reps: int = 7,
    batch: int = 1 << 18,
    seed: int = 0,
    progress=None,
):
    """Single-query Max, slide 1, float64: SlickDeque (Non-Inv), TwoStacks as the benchmark
    runs it, and TwoStacks with a literal ``op`` (fairness check), in one process.

    Per window: each technique warmed up over one window, then ``reps`` timed batches per
    technique through ``run(..., out=)`` (buffers reused), the techniques alternating
    (order reversed every other round); a batch is ``max(batch, n)`` slices (a multiple of n,
    so TwoStacks' flips are amortised exactly); best batch over the thread's CPU time.
    Returns rows {window, technique: M slides/s}."""
    from executors.twostacks import TwoStacks

    techs = {
        "slickdeque": TECHNIQUES["slickdeque_noninv"],
        "twostacks": TwoStacks,
        "twostacks_literal_op": _twostacks_literal_op(),
    }
    prim = Primitive(OP_MAX, "v", "f8")
    rng = np.random.default_rng(seed)
    rows = []
    for n in windows:
        b = max(batch, n)
        ptr = np.arange(b + 1, dtype=np.int64)
        due = np.full(b, n, np.int64)
        zero = np.zeros(b)
        out = (np.empty(b), np.empty(b))
        aggs = {}
        for name, cls in techs.items():
            a = cls(prim, n, known_ns=[n])
            x = rng.standard_normal(n)
            a.run(x, 0 * x, np.zeros(n + 1, np.int64), np.zeros(0, np.int64))
            a.run(rng.standard_normal(b), zero, ptr, due, out=out)  # compile, warm
            aggs[name] = a
        best = dict.fromkeys(techs, 0.0)
        for r in range(reps):
            x = rng.standard_normal(b)
            for name in list(aggs) if r % 2 == 0 else list(aggs)[::-1]:
                c0 = time.thread_time()
                aggs[name].run(x, zero, ptr, due, out=out)
                cpu = time.thread_time() - c0
                if cpu > 0:
                    best[name] = max(best[name], b / cpu / 1e6)
        row = dict(window=n, **best)
        rows.append(row)
        if progress:
            progress(row)
    return rows
