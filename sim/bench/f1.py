"""``weaveplace bench f1``: the dissertation's five F1 experiments (ch. 5, Table 5).

For each point, WeaveShare (Panes cost, identical-slicing preprocessing) generates a plan with
each edge engine. Each run is a child process, so that time and memory caps are enforced from
outside (a baseline past its cap is killed and reported as "did not finish") and the peak memory
is the child's own maximum resident set size. Plan time is measured in a warm process: imports
and numba's one-off loading of the table kernels (``warmup_s``, reported) come before the timer,
and the objects made so far are frozen out of the cyclic garbage collector.
Plans of the engines that finish are compared: they must be identical (same trees, same queries).
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

# (experiment, varied parameter, values, fixed parameters) as in Table 5.
EXPERIMENTS: dict[int, tuple[str, list, dict]] = {
    1: (
        "qnum",
        [100, 1_000, 10_000, 100_000, 1_000_000],
        dict(smax=1000, rate=0.002, zskew=0.5, omax=10, gen="nrm"),
    ),
    2: (
        "smax",
        [100, 300, 1_000, 3_000, 10_000],
        dict(qnum=1000, rate=1.0, zskew=3, omax=100, gen="div"),
    ),
    3: (
        "rate",
        [100, 1_000, 10_000, 100_000, 1_000_000],
        dict(qnum=1000, smax=100, zskew=1, omax=1000, gen="nrm"),
    ),
    4: ("zskew", [0, 0.5, 1, 2, 5, 100], dict(qnum=50, smax=500, rate=0.1, omax=100, gen="nrm")),
    5: ("omax", [100, 30, 10, 3, 1], dict(qnum=1000, smax=600, rate=1.0, zskew=3, gen="div")),
}
from placement.edges import ENGINES  # noqa: E402  (the one list)

# A configuration is "<engine>" (our lazy WeaveShare) or "<engine>/paper" (the paper's eager cost
# lookup table): "f1/paper" and "bitset/paper" are the dissertation's own set-ups.
CONFIGS = ("fast", "f1", "bitset", "f1/paper", "bitset/paper")


@dataclass
class Result:
    experiment: int
    param: str
    value: float
    engine: str
    status: str  # "ok" or "DNF (...)"
    seconds: float | None = None
    peak_mb: float | None = None
    trees: int | None = None
    total_cost: float | None = None
    plan_hash: str | None = None
    evaluations: int | None = None
    warmup_s: float | None = None  # one-off kernel loading before the timer (not in seconds)
    cpu_s: float | None = None  # CPU time of the plan (``seconds`` is wall time)


def _child(args: dict) -> dict:
    """Runs inside the child process: generate, plan, report."""
    from placement.edges import EdgeCountLimit, get_engine
    from placement.lazy_table.table import warm
    from placement.trees import CostModel
    from placement.weaveshare import weave, weaveshare
    from sim.workload import WorkloadSpec, generate

    if args.get("mem_bytes"):
        resource.setrlimit(resource.RLIMIT_AS, (args["mem_bytes"], args["mem_bytes"]))
    spec = WorkloadSpec(**args["spec"])
    queries = generate(spec)
    engine, _, strategy = args["engine"].partition("/")
    options = {"max_bytes": args["mem_bytes"] // 2} if engine == "bitset" else {}
    model = CostModel("panes", spec.rate, get_engine(engine, **options))
    # One-off per process, like the imports above: numba loading the compiled table kernels.
    warmup = warm()
    # Start-up objects (numba's registries above all) leave the cyclic GC's generations, so a
    # collection during the plan does not traverse them (~50 ms each otherwise); every config.
    gc.collect()
    gc.freeze()
    start, cpu = time.perf_counter(), time.process_time()
    try:
        trees = weaveshare(queries, model, strategy=strategy or "lazy")
    except (EdgeCountLimit, MemoryError) as exc:
        return {"status": f"DNF ({type(exc).__name__})"}
    seconds = time.perf_counter() - start
    cpu = time.process_time() - cpu
    groups = sorted(sorted(q.id for q in t.queries) for t in trees)
    digest = hashlib.sha256(json.dumps(groups).encode()).hexdigest()[:16]
    return {
        "status": "ok",
        "seconds": seconds,
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "trees": len(trees),
        "total_cost": sum(t.cost for t in trees),
        "plan_hash": digest,
        "evaluations": getattr(weave, "last_evaluations", None),
        "warmup_s": warmup,
        "cpu_s": cpu,
    }


def run_point(
    experiment: int, value, engine: str, cap_s: float, mem_bytes: int, seed: int = 0
) -> Result:
    param, _, fixed = EXPERIMENTS[experiment]
    spec = dict(fixed, seed=seed)
    spec[param] = value
    args = {"spec": spec, "engine": engine, "mem_bytes": mem_bytes}
    cmd = [sys.executable, "-m", "sim.bench.f1", json.dumps(args)]
    res = Result(experiment, param, value, engine, "DNF")
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=cap_s, env=dict(os.environ)
        )
    except subprocess.TimeoutExpired:
        res.status = f"DNF (> {cap_s:g} s)"
        return res
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        res.status = "DNF (memory cap)" if "MemoryError" in proc.stderr else f"DNF ({tail[:60]})"
        return res
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for k, v in out.items():
        setattr(res, k, v)
    return res


def run(
    experiments=(1, 2, 3, 4, 5),
    engines=("fast", "f1", "f1/paper", "bitset/paper"),
    baseline_cap_s: float = 60.0,
    fast_cap_s: float = 1800.0,
    mem_gb: float = 8.0,
    seed: int = 0,
    on_result=None,
    values: dict[int, list] | None = None,
) -> list[Result]:
    """All points of the chosen experiments; BitSet and F1 are capped, ``fast`` gets a big cap."""
    results = []
    for exp in experiments:
        for value in (values or {}).get(exp, EXPERIMENTS[exp][1]):
            for engine in engines:
                cap = fast_cap_s if engine == "fast" else baseline_cap_s
                r = run_point(exp, value, engine, cap, int(mem_gb * 2**30), seed)
                results.append(r)
                if on_result:
                    on_result(r)
    return results


def check_identical(results: list[Result]) -> list[str]:
    """Points where two finished engines disagree on the plan (must be empty)."""
    by_point: dict[tuple, set] = {}
    for r in results:
        if r.status == "ok":
            by_point.setdefault((r.experiment, r.value), set()).add(r.plan_hash)
    return [f"exp {e} value {v}" for (e, v), hs in by_point.items() if len(hs) > 1]


def speedups_over(results: list[Result], baseline: str) -> dict[int, dict]:
    """Per experiment: the largest point where ``baseline`` finished, fast's speed-up there."""
    out = {}
    for exp in sorted({r.experiment for r in results}):
        rs = [r for r in results if r.experiment == exp]
        f1_ok = [r for r in rs if r.engine == baseline and r.status == "ok"]
        fast = {r.value: r for r in rs if r.engine == "fast" and r.status == "ok"}
        if not f1_ok:
            out[exp] = {"f1_largest": None}
            continue
        order = [v for v in EXPERIMENTS[exp][1]]
        last = max(f1_ok, key=lambda r: order.index(r.value) if r.value in order else -1)
        f = fast.get(last.value)
        out[exp] = {
            "f1_largest": last.value,
            "speedup": (last.seconds / f.seconds) if f and f.seconds else None,
        }
    return out


def to_markdown(results: list[Result]) -> str:
    lines = [
        "| exp | param | value | engine | status | plan time (s) | peak MB | trees | plan |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.experiment} | {r.param} | {r.value:g} | {r.engine} | {r.status} | "
            + (f"{r.seconds:.3f}" if r.seconds is not None else "-")
            + " | "
            + (f"{r.peak_mb:.0f}" if r.peak_mb is not None else "-")
            + " | "
            + (str(r.trees) if r.trees is not None else "-")
            + " | "
            + (r.plan_hash or "-")
            + " |"
        )
    return "\n".join(lines)


def save(results: list[Result], out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "bench_f1.json"
    path.write_text(json.dumps([asdict(r) for r in results], indent=1))
    (out_dir / "bench_f1.md").write_text(to_markdown(results) + "\n")
    return path


if __name__ == "__main__":  # child process entry
    print(json.dumps(_child(json.loads(sys.argv[1]))))


def engine_micro(
    sizes=(4, 8, 12, 16, 20, 24, 32, 64, 256, 1024),
    smaxes=(100, 1000),
    budget_s: float = 20.0,
    seed: int = 0,
    on_row=None,
) -> list[dict]:
    """Engine-only comparison: the edge rate of one tree of ``n`` generated queries (nrm, omax 10)
    with each engine, cold caches, each engine under a ``budget_s`` time budget (bitset also under
    a 2 GiB bitmap cap). Densities of engines that finish must agree exactly."""
    from placement.edges import EdgeCountLimit, get_engine
    from placement.slicing import tree_classes
    from sim.workload import WorkloadSpec, generate

    rows = []
    for smax in smaxes:
        for n in sizes:
            qs = generate(WorkloadSpec(n, smax, 1.0, 0.5, 10, "nrm", seed))
            classes = tree_classes(qs)
            row = {"smax": smax, "queries": n, "classes": len(classes)}
            values = set()
            for name in ENGINES:
                options = {"time_budget_s": budget_s}
                if name == "bitset":
                    options["max_bytes"] = 2 << 30
                eng = get_engine(name, **options)
                start = time.perf_counter()
                try:
                    d = eng.density(classes)
                    row[name] = time.perf_counter() - start
                    values.add(d)
                except (EdgeCountLimit, MemoryError):
                    row[name] = None
            row["agree"] = len(values) <= 1
            rows.append(row)
            if on_row:
                on_row(row)
    return rows
