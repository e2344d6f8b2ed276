"""End-to-end benchmark: raw vs sliced feed vs Spark SQL's native windows, same queries, same data.

    python -m sim.bench.e2e --queries 1 10 100 1000 --duration-s 2000 --rate-hz 100

For each query count n: n queries over mf01-mf03 (``sim.bench.live.bench_queries``: the published
DEBS queries first, then random ones; slides multiples of 100 ms, ranges 1-10 slides, every
third with ``r mod s != 0``; aggregates sum/count/avg/min/max), woven by WeaveShare and dealt
round-robin over ``nodes`` nodes, then

* ``raw``: ``Deployment`` + ``feed_raw`` (Spark -> driver -> actors, every tuple);
* ``sliced``: ``Deployment(mode="sliced")`` + ``feed_sliced`` (Spark tasks compute the slices at
  the union of the edges per stream, reading their piece of the file with pyarrow: the
  ``arrow`` reader; only slices travel);
* ``spark_sql``: Spark SQL's ``groupBy(window(t, "<r> milliseconds", "<s> milliseconds"))
  .agg(...)``, one Spark job per distinct (r, s) (all of that group's queries as aggregates of
  one job), each forced with ``.write.format("noop")``; wall time of the whole set.

Throughput = tuples (DEBS rows) / wall seconds of the feed + ``finish`` (actors created and
their numba kernels loaded (``NodeCore.warmup``) before the clock starts; Ray and Spark
start-up excluded, both warm: each mode and Spark SQL's jobs run once on 3 queries first).
Each mode runs ``repeat`` times (default 2) and the best wall time counts (all in ``runs_s``):
the first large transfer of a kind in a fresh JVM is slower (sliced mode at 100 queries:
1.4 s, then 0.8 s, 0.5 s of Spark time), and the machine is shared; Spark SQL likewise, unless
its run took ``sql_repeat_below_s`` (60 s) or more (hundreds of jobs: warm after the first).  Answers: for
``n <= check_max_queries`` each mode's answers are compared with Spark SQL's (collected in a
separate, untimed pass of the same per-(r, s) jobs): identical query ids/windows, values equal
(avg to 1e-9 relative); above it, a random sample of ``check_sample`` queries is checked.
Raw and sliced answers are compared with each other (all of them) for every n.

``count_ops=True`` (default) makes the trees count their final-aggregation operations, so each
row also carries per-node measured cost next to the plan's estimate ``sum_t lambda + E_t *
Omega_t`` (``node_cost``: per node and per part, lambda and each IE technique, in the model's
units; ``cost_check``: the mean measured/plan ratio over nodes and the ratio per part;
``measured_cost`` says exactly what is counted); counting costs a few percent of actor time.
``feed_s`` starts before Spark resolves the file (``spark_resolve_s``), so the feed and
``finish``'s phases fill the whole timed window; with ``early_read`` (raw mode through the
driver) the file is resolved and its first chunk pulled before the clock, as a live run
does during its start-up, and ``early_s`` says how long that took.
``finish`` in each row: where ``Deployment.finish`` spent its time (nodes working off their
queues, flush, answers handed over, driver merge); ``tree_s``: the busiest node's tree time
(``busy_s``), ``wall_over_tree``: the wall time over it (what handing over, merging and
writing the answers add beyond computing them), ``answers_per_s``; ``node_over_tree``: the
floor the nodes' own work sets for that ratio (``tree_time``).  Where a node's answer time
goes, phase by phase and without Ray: ``sim/bench/e2e_answers.py``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sim.bench.live import STREAMS, bench_queries, round_robin_plan


def e2e_queries(n: int, seed: int = 0):
    """``n`` queries: the published DEBS queries first, then random sliding ones (all time
    windows, r >= s so Spark SQL accepts them)."""
    qs = bench_queries(n, seed=seed)[:n]
    assert all(q.range >= q.slide for q in qs)
    return qs


# ----------------------------------------------------------------------------- Spark SQL
def _spark_jobs(spark, path, queries):
    """One DataFrame per distinct (r, s): ``window`` + one aggregate column per query."""
    from pyspark.sql import functions as F

    fn = {"sum": F.sum, "count": F.count, "avg": F.avg, "min": F.min, "max": F.max}
    df = (
        spark.read.parquet(str(path))
        .select("ts_ms", *STREAMS)
        .withColumn("t", F.timestamp_millis("ts_ms"))
    )
    groups: dict[tuple[int, int], list] = defaultdict(list)
    for q in queries:
        groups[(q.range, q.slide)].append(q)
    jobs = []
    for (r, s), qs in sorted(groups.items()):
        w = F.window("t", f"{r} milliseconds", f"{s} milliseconds")
        aggs = [fn[q.aggregate](q.stream).alias(q.id) for q in qs]
        jobs.append(((r, s), qs, df.groupBy(w.alias("w")).agg(*aggs)))
    return jobs


def spark_sql_time(spark, path, queries) -> tuple[float, int]:
    """Wall seconds to run every (r, s) job, forced with the ``noop`` writer."""
    jobs = _spark_jobs(spark, path, queries)
    t = time.perf_counter()
    for _, _, d in jobs:
        d.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - t, len(jobs)


def spark_sql_answers(spark, path, queries) -> pa.Table:
    """The same jobs collected: ``query_id, window_start, window_end, value`` (float64)."""
    from pyspark.sql import functions as F

    parts = []
    for _, qs, d in _spark_jobs(spark, path, queries):
        t = d.select(
            F.unix_millis("w.start").alias("ws"),
            F.unix_millis("w.end").alias("we"),
            *[F.col(q.id).cast("double") for q in qs],
        ).toArrow()
        ws, we = t.column("ws"), t.column("we")
        for q in qs:
            parts.append(
                pa.table(
                    {
                        "query_id": pa.array([q.id] * t.num_rows, pa.string()),
                        "window_start": ws,
                        "window_end": we,
                        "value": t.column(q.id),
                    }
                )
            )
    out = pa.concat_tables(parts)
    return out.sort_by([("query_id", "ascending"), ("window_start", "ascending")])


def compare_answers(ours: pa.Table, ref: pa.Table, avg_ids: set[str]) -> str | None:
    """None if identical (avg to 1e-9 relative), else a short description of the difference."""
    if ours.num_rows != ref.num_rows:
        return f"rows {ours.num_rows} != {ref.num_rows}"
    for c in ("query_id", "window_start", "window_end"):
        if not ours.column(c).equals(ref.column(c)):
            return f"column {c} differs"
    qid = np.array(ours.column("query_id").to_pylist(), dtype=object)
    a = ours.column("value").to_numpy().astype(np.float64)
    b = ref.column("value").to_numpy().astype(np.float64)
    is_avg = np.isin(qid, list(avg_ids))
    bad = int((a[~is_avg] != b[~is_avg]).sum())
    bad += int((np.abs(a[is_avg] - b[is_avg]) > 1e-9 * np.abs(b[is_avg])).sum())
    return None if bad == 0 else f"{bad} values differ"


# ----------------------------------------------------------------------------- ours
def _warm_python_workers(spark) -> None:
    """Start Spark's Python workers and import what the slicing tasks use.  Why before each
    sliced run: Spark stops Python workers idle for a minute, and the Spark SQL jobs timed
    just before (65 s at 100 queries, ~400 s at 1000) leave them idle longer than that; a
    cold worker costs ~1 s (numpy, pyarrow, numba imports), a start-up cost like the JVM's,
    excluded here as it is for Spark SQL (warm-up job) and for Ray (actors warmed up)."""
    sc = spark.sparkContext
    n = max(1, int(sc.defaultParallelism))
    sc.parallelize(range(n), n).mapPartitions(
        lambda it: [__import__("executors.slice_input").__name__]
    ).collect()


#: data paths: who feeds the actors and who writes the answers
ROUTES = {
    "driver": ("driver", "driver"),  # Spark -> driver -> actors -> driver -> Parquet
    "actors": ("driver", "actors"),  # Spark -> driver -> actors -> Parquet (actors write)
    "executors": ("executors", "actors"),  # Spark tasks -> actors -> Parquet: driver out
}


@dataclass(frozen=True)
class E2eOptions:
    """What ``run_e2e_bench`` runs (module docstring): per query count of ``queries_list``, each
    mode x route (``ROUTES`` names) ``repeat`` times over ``duration_s`` seconds of DEBS-style
    data at ``rate_hz`` (kept in ``data_dir``), and Spark SQL's window jobs (``spark_sql``,
    repeated while a run takes under ``sql_repeat_below_s``); answers checked against Spark
    SQL's up to ``check_max_queries`` queries, above it on ``check_sample`` random ones.
    ``early_read``: raw mode through the driver opens the file and pulls its first chunk
    before the clock starts, as ``weaveplace run`` does during its start-up (``early_s``)."""

    queries_list: Sequence[int] = (1, 10, 100, 1000)
    modes: Sequence[str] = ("raw", "sliced")
    duration_s: float = 2000
    rate_hz: float = 100
    routes: Sequence[str] = ("driver",)
    nodes: int = 2
    spark_sql: bool = True
    check_max_queries: int = 100
    check_sample: int = 0
    data_dir: str | Path = "/tmp/weaveplace-bench-e2e"
    batch_rows: int = 1 << 18
    chunk_rows: int = 1_000_000
    max_in_flight: int = 4
    count_ops: bool = True
    spark_master: str = "local[2]"
    seed: int = 0
    repeat: int = 2
    sql_repeat_below_s: float = 60.0
    early_read: bool = False


def _run_mode(plan, mode: str, route: str, spark, path, opts: E2eOptions, out_dir=None):
    """One timed run of ``plan`` in ``mode`` over ``route``: (feed stats, run result, wall s)."""
    import ray

    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.feeds.executors import feed_executors
    from cluster.feeds.parquet import feed_raw, open_raw
    from cluster.feeds.sliced import feed_sliced

    feed_by, answers = ROUTES[route]
    if mode == "sliced" or feed_by == "executors":
        _warm_python_workers(spark)

    with Deployment(
        plan,
        DeploymentOptions(
            mode=mode,
            max_in_flight=opts.max_in_flight,
            count_ops=opts.count_ops,
            auto_recover=False,
            answers=answers,
            out_dir=out_dir if answers == "actors" else None,
        ),
    ) as dep:
        # new actor processes load numba kernels on first use (~0.5-1 s): not the feed's cost
        ray.get([n.actor.warmup.remote() for n in dep.nodes.values()])
        early = {}
        if opts.early_read and mode == "raw" and feed_by == "driver":
            # what a live run's start-up does meanwhile (cluster.runs.startup: prepare)
            early["opened"] = open_raw(
                spark,
                str(path),
                dep.streams,
                batch_rows=opts.batch_rows,
                chunk_rows=opts.chunk_rows,
            )
        t = time.perf_counter()
        cpu = time.process_time()  # the driver process's CPU (all its threads)
        if feed_by == "executors":
            fs = feed_executors(dep, spark, str(path), batch_rows=opts.batch_rows)
        else:
            feed = feed_sliced if mode == "sliced" else feed_raw
            fs = feed(
                dep,
                spark,
                str(path),
                batch_rows=opts.batch_rows,
                chunk_rows=opts.chunk_rows,
                **early,
            )
        res = dep.finish()
        wall = time.perf_counter() - t
        res.metrics["driver_cpu_s"] = time.process_time() - cpu
    return fs, res, wall


def tree_time(metrics: dict, wall: float) -> dict:
    """The busiest node's tree time (``busy_s``: its trees ingesting and flushing, answers
    kept as they come; no hand-over, merge or writing) and the wall time over it: 1.0 would
    mean every answer was handed over or written for free, so how far above 1 the ratio is
    says what moving the answers costs beyond computing them.

    And the bound the nodes' own work sets: ``answer_s`` is a node's time handing its answers
    over (grouping them, building the blocks or the part, Parquet), ``node_s`` the largest
    ``busy_s + answer_s`` over the nodes and ``node_over_tree`` its ratio to ``tree_s``.  A
    node does its answers after its trees on one core, and on a machine with no core to
    spare (2 cores, 2 node actors) nothing else can do them meanwhile, so ``wall_over_tree``
    cannot go below ``node_over_tree``; what lies between the two is waiting for input,
    calls and the driver's share."""
    nodes = list(metrics["nodes"].values())
    busy = max((n["busy_s"] for n in nodes), default=0.0)
    node_s = max((n["busy_s"] + n.get("answer_s", 0.0) for n in nodes), default=0.0)
    answer = max((n.get("answer_s", 0.0) for n in nodes), default=0.0)
    return {
        "tree_s": round(busy, 3),
        "wall_over_tree": round(wall / busy, 3) if busy > 0 else None,
        "answers_per_s": round(metrics["answers"] / wall) if wall > 0 else None,
        "answer_s": round(answer, 3),
        "node_s": round(node_s, 3),
        "node_over_tree": round(node_s / busy, 3) if busy > 0 else None,
    }


#: primitives the executor maintains (and counts operations for) per aggregate
PRIMITIVES = {"sum": 1, "count": 1, "min": 1, "max": 1, "avg": 2, "range": 2, "stddev": 3}


def measured_cost(plan, metrics, span_ms: float, mode: str) -> dict:
    """Per node: the plan's estimated cost ``sum_t lambda + E_t * Omega_t`` beside the measured
    one, in the model's units, split by part (docs/DESIGN.md s. 3).

    * ``lambda``: items folded into each tree's slices per ms: in raw mode every tuple of the
      tree's stream (the model's lambda, per tree); in sliced mode the incoming slices (the
      tuples were folded by Spark, once per stream: the model does not price that mode).
    * ``E * Omega`` per IE technique the model resolves for the tree's aggregate
      (``placement.cost.resolve_technique``): final-aggregation operations per ms.  The
      executor counts per primitive (avg = sum + count: two), the model per aggregate, so
      measured operations are divided by the aggregate's primitives (``PRIMITIVES``).  Also
      the measured edge rate (slices per ms, over the data's span: windows closing after the
      last tuple add ~max range / span) beside the plan's.  SlickDeque Inv trees whose Omega
      the model could not compute exactly (composite slide beyond its scan budget: it prices
      the lower bound ``2 * #ranges``, ``running_aggregates``) are their own part,
      ``slickdeque_inv_lower_bound``.
    """
    from placement.cost import resolve_technique, running_aggregates

    qs = {q["id"]: q for q in plan["queries"]}
    rates = {s: float(v["rate"]) for s, v in (plan.get("streams") or {}).items()}
    out = {}
    for n in plan["nodes"]:
        m = metrics["nodes"].get(n["id"])
        if m is None:
            continue
        parts: dict[str, dict] = {"lambda": {"trees": 0, "plan": 0.0, "measured": 0.0}}
        for t in n["trees"]:
            tm = m["trees"].get(t["id"])
            if tm is None:
                continue
            agg = t["aggregate"]
            tech = resolve_technique(plan.get("ie") or "slickdeque", [agg])
            if tech == "slickdeque_inv":
                win = frozenset((qs[q]["range"], qs[q]["slide"]) for q in t["queries"])
                if not running_aggregates(win)[1]:  # the model's lower bound, not exact
                    tech = "slickdeque_inv_lower_bound"
            lam = parts["lambda"]
            lam["trees"] += 1
            lam["plan"] += rates.get(t["stream"], 0.0)
            folded = (m["stream_tuples"] if mode == "raw" else m["stream_slices"]).get(
                t["stream"], 0
            )
            lam["measured"] += folded / span_ms
            p = parts.setdefault(
                tech,
                {
                    "trees": 0,
                    "plan": 0.0,
                    "measured": 0.0,
                    "plan_edges_per_ms": 0.0,
                    "edges_per_ms": 0.0,
                },
            )
            p["trees"] += 1
            p["plan"] += float(t["edge_rate"]) * float(t["omega"])
            p["measured"] += tm.get("final_ops", 0) / PRIMITIVES.get(agg, 1) / span_ms
            p["plan_edges_per_ms"] += float(t["edge_rate"])
            p["edges_per_ms"] += tm.get("slices", 0) / span_ms
        plan_cost = sum(v["plan"] for v in parts.values())
        meas = sum(v["measured"] for v in parts.values())
        for v in parts.values():
            v["ratio"] = round(v["measured"] / v["plan"], 4) if v["plan"] else None
            for k in ("plan", "measured", "plan_edges_per_ms", "edges_per_ms"):
                if k in v:
                    v[k] = round(v[k], 4)
        out[n["id"]] = {
            "plan_cost": round(plan_cost, 4),
            "plan_cost_in_plan": round(float(n.get("cost") or 0.0), 4),
            "measured_cost": round(meas, 4),
            "ratio": round(meas / plan_cost, 4) if plan_cost else None,
            "parts": parts,
            "busy_s": round(m["busy_s"], 3),
        }
    return out


def cost_summary(node_cost: dict) -> dict:
    """Across nodes: mean measured/plan ratio per node, and per part (lambda, each technique)
    the summed plan and measured cost and their ratio."""
    ratios = [v["ratio"] for v in node_cost.values() if v.get("ratio")]
    parts: dict[str, dict] = {}
    for v in node_cost.values():
        for k, p in v["parts"].items():
            q = parts.setdefault(k, {"trees": 0, "plan": 0.0, "measured": 0.0})
            q["trees"] += p["trees"]
            q["plan"] += p["plan"]
            q["measured"] += p["measured"]
    for q in parts.values():
        q["ratio"] = round(q["measured"] / q["plan"], 4) if q["plan"] else None
        q["plan"], q["measured"] = round(q["plan"], 4), round(q["measured"], 4)
    return {
        "mean_node_ratio": round(sum(ratios) / len(ratios), 4) if ratios else None,
        "node_ratios": {k: v["ratio"] for k, v in node_cost.items()},
        "parts": parts,
    }


def run_e2e_bench(opts: E2eOptions = E2eOptions(), log=print) -> list[dict]:
    """Run the benchmark; one row (dict) per (query count, mode, route) including
    ``spark_sql``.

    Starts (and always stops) one embedded Ray and one local Spark session, unless Ray is
    already running (then it is borrowed) -- never more than one of each.
    """
    from cluster.feeds.parquet import spark_session
    from cluster.runtime.ray_runtime import RayRuntime
    from sim.debs_generator import generate_debs

    data_dir = Path(opts.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / f"debs_{int(opts.duration_s)}s_{int(opts.rate_hz)}hz.parquet"
    if not path.exists():
        generate_debs(path, duration_s=opts.duration_s, rate_hz=opts.rate_hz, seed=1)
    import pyarrow.parquet as pq

    meta = pq.read_table(path, columns=["ts_ms"]).column("ts_ms")
    n_rows = len(meta)
    span_ms = float(pc.max(meta).as_py() - pc.min(meta).as_py() + 1)
    rows: list[dict] = []
    with RayRuntime(num_cpus=2):
        spark = spark_session(opts.spark_master, app_name="weaveplace-bench-e2e")
        try:
            # warm-up: JVM (Spark SQL's window jobs too: its first job otherwise pays the JIT,
            # ~3 s at 1 query), Python workers, numba kernels, actors (not measured)
            warm = round_robin_plan(e2e_queries(3), 1, opts.rate_hz / 1000)
            if opts.spark_sql:
                spark_sql_time(spark, path, e2e_queries(3))
            runs_of = [(m, r) for m in opts.modes for r in opts.routes]
            out_dir = data_dir / "answers-run"
            for mode, route in runs_of:
                _run_mode(warm, mode, route, spark, path, opts, out_dir)
            for nq in opts.queries_list:
                qs = e2e_queries(nq, seed=opts.seed)
                plan = round_robin_plan(qs, opts.nodes, opts.rate_hz / 1000)
                avg_ids = {q.id for q in qs if q.aggregate == "avg"}
                ref = None
                check_qs = []
                base = {
                    "queries": nq,
                    "rows": n_rows,
                    "trees": sum(len(n["trees"]) for n in plan["nodes"]),
                    "distinct_rs": len({(q.range, q.slide) for q in qs}),
                    "r_mod_s_ne_0": sum(1 for q in qs if q.range % q.slide),
                }
                if opts.spark_sql:
                    secs, jobs = spark_sql_time(spark, path, qs)
                    runs = [secs]
                    while len(runs) < opts.repeat and max(runs) < opts.sql_repeat_below_s:
                        runs.append(spark_sql_time(spark, path, qs)[0])
                    secs = min(runs)
                    row = {
                        **base,
                        "mode": "spark_sql",
                        "seconds": round(secs, 3),
                        "runs_s": [round(x, 3) for x in runs],
                        "tuples_per_s": round(n_rows / secs),
                        "spark_jobs": jobs,
                    }
                    if nq <= opts.check_max_queries:
                        check_qs = qs
                    else:  # a random sample of the queries (checking all is one job per r, s)
                        rng = np.random.default_rng(opts.seed + nq)
                        pick = sorted(rng.choice(nq, min(opts.check_sample, nq), replace=False))
                        check_qs = [qs[i] for i in pick]
                    if check_qs:
                        ref = spark_sql_answers(spark, path, check_qs)
                        row["checked_queries"] = len(check_qs)
                        row["checked_answers"] = ref.num_rows
                    rows.append(row)
                    log(json.dumps(row))
                answers = {}
                for mode, route in runs_of:
                    best, runs = None, []
                    for _ in range(max(1, opts.repeat)):
                        got = _run_mode(plan, mode, route, spark, path, opts, out_dir)
                        runs.append(got[2])
                        if best is None or got[2] < best[2]:
                            best = got
                    fs, res, wall = best
                    m = res.metrics
                    row = {
                        **base,
                        "mode": mode if route == "driver" else f"{mode}/{route}",
                        "route": route,
                        "driver_cpu_s": round(m["driver_cpu_s"], 3),
                        # bytes into/out of the driver process on the data path: tuples fed
                        # through it, answers handed to it
                        "driver_bytes": int(m["bytes_fed"] + m["answer_bytes_to_driver"]),
                        "seconds": round(wall, 3),
                        "runs_s": [round(x, 3) for x in runs],
                        "tuples_per_s": round(n_rows / wall),
                        "feed_s": round(fs.seconds, 3),
                        "spark_wait_s": round(fs.spark_seconds, 3),
                        # raw mode: Spark resolving the file before its one job (in feed_s
                        # unless read early)
                        "spark_resolve_s": round(fs.resolve_seconds, 3),
                        # --early-read: resolving and the first chunk, before the clock
                        "early_s": round(fs.early_seconds, 3),
                        "shipped_rows": fs.slices if mode == "sliced" else fs.rows,
                        "answers": int(m["answers"]),
                        "finish": {k: round(v, 3) for k, v in res.metrics["finish"].items()},
                        **tree_time(m, wall),
                    }
                    answers[row["mode"]] = res.answers  # (actor routes: read back, untimed)
                    if ref is not None:
                        ours = res.answers
                        if len(check_qs) < nq:
                            ours = ours.filter(
                                pc.is_in(
                                    ours.column("query_id"),
                                    value_set=pa.array([q.id for q in check_qs]),
                                )
                            )
                        diff = compare_answers(ours, ref, avg_ids)
                        row["checked_queries"] = len(check_qs)
                        row["equal_to_spark_sql"] = diff is None
                        if diff:
                            row["diff"] = diff
                    if opts.count_ops:
                        row["node_cost"] = measured_cost(plan, res.metrics, span_ms, mode)
                        row["cost_check"] = cost_summary(row["node_cost"])
                    rows.append(row)
                    log(json.dumps(row))
                for key, t in answers.items():
                    base = key.split("/")[0]  # "<mode>/<route>" against that mode's driver route
                    if "/" in key and base in answers:
                        same_route = t.equals(answers[base])
                        for r in rows:
                            if r["queries"] == nq and r.get("mode") == key:
                                r["equals_driver_route"] = same_route
                if "raw" in answers and "sliced" in answers:
                    same = answers["raw"].equals(answers["sliced"])
                    for r in rows:
                        if r["queries"] == nq and r["mode"] in ("raw", "sliced"):
                            r["raw_equals_sliced"] = same
                    log(json.dumps({"queries": nq, "raw_equals_sliced": same}))
        finally:
            spark.stop()
    return rows


def format_table(rows: list[dict]) -> str:
    """Plain-text tables: tuples/s per mode per query count with the speedup over Spark SQL,
    then the cost check per query count and mode (measured / plan, per node and per part)."""
    by_n = defaultdict(dict)
    for r in rows:
        if "mode" in r:
            by_n[r["queries"]][r["mode"]] = r
    seen = list(dict.fromkeys(m for v in by_n.values() for m in v))
    modes = [m for m in seen if m != "spark_sql"] + [m for m in seen if m == "spark_sql"]
    w = max([16] + [len(m) + 7 for m in modes])  # "sliced/executors tup/s" fits
    head = f"{'queries':>8} " + " ".join(f"{m + ' tup/s':>{w}}" for m in modes)
    if "spark_sql" in modes:
        head += "".join(f" {m + '/sql':>{w - 1}}" for m in modes if m != "spark_sql")
    lines = [head + "  checked"]
    for n, v in sorted(by_n.items()):
        cells = [f"{v[m]['tuples_per_s']:>{w},}" if m in v else f"{'-':>{w}}" for m in modes]
        if "spark_sql" in v:
            sql = v["spark_sql"]["tuples_per_s"]
            cells += [
                f"{v[m]['tuples_per_s'] / sql:>{w - 1}.1f}x" if m in v else f"{'-':>{w}}"
                for m in modes
                if m != "spark_sql"
            ]
        chk = ",".join(
            f"{m}={'ok' if v[m]['equal_to_spark_sql'] else 'DIFF'}"
            for m in modes
            if m in v and "equal_to_spark_sql" in v[m]
        )
        lines.append(f"{n:>8} " + " ".join(cells) + f"  {chk or 'not checked'}")
    routed = [
        (n, m, v[m]) for n, v in sorted(by_n.items()) for m in modes if "route" in v.get(m, {})
    ]
    if routed:
        lines.append(
            "data path: driver CPU s, MB through the driver (tuples in + answers back); "
            "wall s over the busiest node's tree s"
        )
        for n, m, r in routed:
            ratio, bound = r.get("wall_over_tree"), r.get("node_over_tree")
            lines.append(
                f"{n:>8} {m:>16}  cpu {r['driver_cpu_s']:>7.2f} s  "
                f"{r['driver_bytes'] / 1e6:>9.1f} MB  {r['tuples_per_s']:>12,} tup/s  "
                f"wall {r['seconds']:.2f} s / tree {r.get('tree_s', 0):.2f} s"
                + (f" = {ratio:.2f}x" if ratio else "")
                + (
                    f" (trees + answers on a node {r['node_s']:.2f} s = {bound:.2f}x)"
                    if bound
                    else ""
                )
            )
    cost = [
        (n, m, v[m]["cost_check"])
        for n, v in sorted(by_n.items())
        for m in ("raw", "sliced")
        if m in v and "cost_check" in v[m]
    ]
    if cost:
        lines.append("cost check (measured / plan): mean over nodes; per part")
        for n, m, c in cost:
            parts = ", ".join(f"{k} {p['ratio']}" for k, p in c["parts"].items())
            lines.append(f"{n:>8} {m:>7}  mean {c['mean_node_ratio']}  ({parts})")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m sim.bench.e2e",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--queries", type=int, nargs="+", default=[1, 10, 100, 1000])
    ap.add_argument("--modes", nargs="+", default=["raw", "sliced"], choices=["raw", "sliced"])
    ap.add_argument(
        "--routes",
        nargs="+",
        default=["driver"],
        choices=list(ROUTES),
        help="data paths: driver (Spark -> driver -> actors -> driver), actors (the actors "
        "write the answers), executors (Spark tasks push to the actors, actors write)",
    )
    ap.add_argument("--duration-s", type=float, default=2000)
    ap.add_argument("--rate-hz", type=float, default=100)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--no-spark-sql", action="store_true")
    ap.add_argument("--check-max-queries", type=int, default=100)
    ap.add_argument(
        "--check-sample",
        type=int,
        default=0,
        help="above --check-max-queries, check this many random queries",
    )
    ap.add_argument("--batch-rows", type=int, default=1 << 18)
    ap.add_argument("--chunk-rows", type=int, default=1_000_000)
    ap.add_argument("--no-count-ops", action="store_true")
    ap.add_argument("--repeat", type=int, default=2, help="runs per mode; the best counts")
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    a = ap.parse_args(argv)
    opts = E2eOptions(
        queries_list=a.queries,
        modes=a.modes,
        duration_s=a.duration_s,
        rate_hz=a.rate_hz,
        routes=a.routes,
        nodes=a.nodes,
        spark_sql=not a.no_spark_sql,
        check_max_queries=a.check_max_queries,
        check_sample=a.check_sample,
        batch_rows=a.batch_rows,
        chunk_rows=a.chunk_rows,
        count_ops=not a.no_count_ops,
        repeat=max(1, a.repeat),
    )
    rows = run_e2e_bench(opts)
    print(format_table(rows))
    if a.out:
        Path(a.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
