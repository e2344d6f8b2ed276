"""Benchmark: a live run's feed over DEBS *text* vs the same data as DEBS Parquet (raw mode).

    weaveplace bench text --rows 1000000 --queries 100

The same ``rows`` generated events are written once as the original text format and once
converted to Parquet (``cluster.debs.reader.convert_debs``; the conversion time is reported, not part of
either figure).  For each input, ``repeat`` times, alternating (Parquet, text, Parquet, ...)
so that both see the same machine load: a ``Deployment`` of ``queries`` queries
(``sim.bench.live.bench_queries``, WeaveShare trees dealt over ``nodes`` nodes) in raw mode, its
actors warmed up, then the clock runs over the feed and ``finish``: ``feed_raw`` for Parquet,
``cluster.feeds.text.feed_text`` (Spark tasks parse byte ranges into a stage, then the stage is
fed) for text.  Best wall time per input counts (all in ``runs_s``); rows/s = rows / wall.
Ray and Spark start-up are excluded, both warm (one small run of each input first).  The text
run's answers must equal the Parquet run's exactly, else the row says so.
"""

from __future__ import annotations

import time
from pathlib import Path

from sim.bench.live import bench_queries, round_robin_plan


def _one_run(plan, kind: str, spark, path: Path, stage_dir: Path, batch_rows: int):
    import ray

    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.feeds.parquet import feed_raw
    from cluster.feeds.text import TextFeedOptions, feed_text

    with Deployment(plan, DeploymentOptions(mode="raw", auto_recover=False)) as dep:
        ray.get([n.actor.warmup.remote() for n in dep.nodes.values()])
        t = time.perf_counter()
        parse_s = 0.0
        if kind == "text":
            fs, stage = feed_text(
                dep, spark, path, stage_dir, TextFeedOptions(batch_rows=batch_rows)
            )
            parse_s = stage.seconds
        else:
            fs = feed_raw(dep, spark, str(path), batch_rows=batch_rows)
        res = dep.finish()
        wall = time.perf_counter() - t
    return fs, res, wall, parse_s


def run_text_bench(
    rows: int = 1_000_000,
    queries: int = 100,
    *,
    nodes: int = 2,
    repeat: int = 2,
    batch_rows: int = 1 << 18,
    spark_master: str = "local[2]",
    data_dir: str | Path = "/tmp/weaveplace-bench-text",
    log=print,
) -> list[dict]:
    """Rows/s of text vs Parquet input; one dict per input (``parquet``, ``text``)."""
    from cluster.debs.reader import convert_debs
    from cluster.feeds.parquet import spark_session
    from cluster.runtime.ray_runtime import RayRuntime
    from sim.debs_generator import generate_debs

    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    text = data_dir / f"debs_{rows}.txt"
    parq = data_dir / f"debs_{rows}.parquet"
    if not text.exists():
        tmp = data_dir / f".debs_{rows}.txt"
        generate_debs(tmp, duration_s=rows / 100.0, rate_hz=100, seed=1, fmt="tsv")
        tmp.rename(text)
    t0 = time.perf_counter()
    st = convert_debs(text, parq)
    convert_s = time.perf_counter() - t0
    n_rows = st.rows_read
    log(
        f"data: {n_rows:,} rows, text {text.stat().st_size / 2**20:.0f} MiB, Parquet "
        f"{parq.stat().st_size / 2**20:.0f} MiB (convert {convert_s:.1f} s, one core)"
    )
    plan = round_robin_plan(bench_queries(queries)[:queries], nodes, 0.1)
    out: dict[str, dict] = {}
    answers = {}
    with RayRuntime(num_cpus=2):
        spark = spark_session(spark_master, app_name="weaveplace-bench-text")
        try:
            warm = round_robin_plan(bench_queries(3)[:3], 1, 0.1)
            for kind, path in (("parquet", parq), ("text", text)):
                _one_run(warm, kind, spark, path, data_dir, batch_rows)
            for i in range(max(1, repeat)):
                for kind, path in (("parquet", parq), ("text", text)):
                    fs, res, wall, parse_s = _one_run(plan, kind, spark, path, data_dir, batch_rows)
                    log(
                        f"{kind:8s} run {i + 1}: {wall:.2f} s ({fs.rows / wall:,.0f} rows/s"
                        + (f"; Spark parse {parse_s:.2f} s" if kind == "text" else "")
                        + ")"
                    )
                    r = out.setdefault(
                        kind,
                        {
                            "input": kind,
                            "queries": queries,
                            "rows": fs.rows,
                            "runs_s": [],
                            "parse_s": [],
                        },
                    )
                    r["runs_s"].append(wall)
                    r["parse_s"].append(parse_s)
                    answers.setdefault(kind, res.answers)
        finally:
            spark.stop()
    a = answers["text"].sort_by([("query_id", "ascending"), ("window_start", "ascending")])
    b = answers["parquet"].sort_by([("query_id", "ascending"), ("window_start", "ascending")])
    rows_out = []
    for kind in ("parquet", "text"):
        r = out[kind]
        r["seconds"] = min(r["runs_s"])
        r["rows_per_s"] = r["rows"] / r["seconds"]
        r["convert_s"] = convert_s
        r["answers_equal"] = a.equals(b)
        rows_out.append(r)
    rows_out[1]["text_over_parquet"] = rows_out[1]["rows_per_s"] / rows_out[0]["rows_per_s"]
    return rows_out


def format_table(rows: list[dict]) -> str:
    lines = [
        f"{'input':8s} {'queries':>7s} {'rows':>10s} {'best s':>7s} {'rows/s':>10s} "
        f"{'parse s':>8s}  answers equal"
    ]
    for r in rows:
        lines.append(
            f"{r['input']:8s} {r['queries']:7d} {r['rows']:10,d} {r['seconds']:7.2f} "
            f"{r['rows_per_s']:10,.0f} {min(r['parse_s']):8.2f}  {r['answers_equal']}"
        )
    t = rows[-1]
    lines.append(f"text / Parquet rows/s: {t['text_over_parquet']:.2f}")
    return "\n".join(lines)
