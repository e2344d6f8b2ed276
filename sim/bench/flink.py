"""Benchmark: weaveplace beside Apache Flink SQL on the same data and queries (issue 35).

    weaveplace bench flink --rows 3000000

Why: a user comparing the two runs both as they come, on the same cores, and looks at the
answers and the times; this does that in one run, one system after the other:

* **data**: ``rows`` DEBS-style events (``sim.debs_generator``, 100 Hz, seed 1) as Parquet,
  kept in ``data_dir``.  Flink reads a CSV of the columns the queries read (``ts_ms`` and
  the streams), written once from that Parquet file and not timed: Flink's Parquet format
  needs the ``flink-sql-parquet`` jar, which the apache-flink wheel does not ship (it has the
  CSV and JSON formats only), and nothing is downloaded at run time.
* **queries**: the bench's own generator (``sim.bench.live.bench_queries``: the published DEBS
  queries, then random ones over mf01-mf03 with every aggregate ``bench e2e`` uses); those
  Flink's window TVFs cannot run (range not a whole number of slides) are left out of both
  sides and counted (``sim/bench/flink_sql.py``).
* **weaveplace**: ``weaveplace run`` in a child process over the Parquet file (live mode,
  ``nodes`` nodes, ``optimizer``, SlickDeque, the config's default ``allowed_lateness``).
  Whole process: the child's wall time from launch to exit (Ray, Spark, planning, the feed,
  the answers, the report).  Data path: its ``metrics.json`` ``wall_s``, the figure of issue
  35's table: from Ray, Spark and the actors all up (``Deployment.start_clock``) to the
  answers in hand.  Beside it ``bench e2e``'s measure (BENCHMARKS.md, "End to end"), the feed
  plus ``finish`` (``feed.seconds + finish_s``).  Neither holds the input's first read, which
  a run does during its start-up (``feed.early_seconds``): that is in the whole process.
* **Flink**: a child process in Flink's own Python (``flink_python``, ``sim/bench/flink_job.py``)
  running one statement set, one window TVF statement per distinct (range, slide), streaming
  mode, event time with the watermark matching weaveplace's lateness, parallelism 2,
  blackhole sinks, 1 GiB of managed memory (``FLINK_MANAGED_MEMORY``: the local default fails
  with this many window statements), everything else Flink's defaults.  Whole process: the
  child's wall time; data path: the job's net runtime.
  Then, untimed, the same job with CSV file sinks (and checkpoints, which commit the files)
  for the answers.
* **answers**: every window of every query, both sides (``flink_sql.compare_answers``):
  integer aggregates exactly, avg within ``flink_sql.REL_TOL`` relative.

Run it under the bench lock (``flock /tmp/wp-bench.lock``): both systems want both cores.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from sim.bench import flink_sql as fs

#: the environment variable naming Flink's Python (an interpreter with apache-flink)
FLINK_PYTHON_ENV = "WEAVEPLACE_FLINK_PYTHON"
#: where ``pip install --group flink`` puts it by default (README): beside the checkout
DEFAULT_FLINK_VENV = Path(__file__).resolve().parents[2] / ".venv-flink"
JOB_SCRIPT = Path(__file__).with_name("flink_job.py")


class FlinkUnavailable(Exception):
    """PyFlink or Java is missing: one line, exit 2 (``weaveplace bench flink``)."""


class ChildFailed(RuntimeError):
    """A child run (``weaveplace run`` or the Flink job) failed: its last telling line and
    where its whole output is (one line, exit 1)."""


#: Flink's managed memory for the local cluster: the window operators' buffers share it, and
#: the local default (128 MiB) fails with ~50 window statements ("minBucketMemorySize is not
#: valid")
FLINK_MANAGED_MEMORY = "1g"


#: a node's kernel time above this means numba compiled, not loaded (measured: ~40 s cold,
#: 6-8 s loading a warm cache on the loaded 2-core machine)
COLD_COMPILE_S = 20.0


def _last_cause(text: str) -> str:
    """The innermost ``Caused by`` of a Java trace, else the last non-empty line."""
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    causes = [x for x in lines if x.startswith("Caused by:")]
    return (causes or lines or ["no output"])[-1][:300]


@dataclass(frozen=True)
class FlinkBenchOptions:
    """What ``run_flink_bench`` runs (module docstring)."""

    rows: int = 100_000
    queries: int = 85  # generated; those Flink can run are kept (59 of 85)
    nodes: int = 3
    optimizer: str = "WG_LS"
    ie: str = "slickdeque"
    parallelism: int = 2
    compare: bool = True
    seed: int = 0
    data_dir: str = "/tmp/weaveplace-bench-flink"
    flink_python: str | None = None
    timeout_s: float = 3600.0
    flink_config: dict = field(default_factory=dict)


# ----------------------------------------------------------------------------- the extra
def find_flink_python(explicit: str | None = None) -> str:
    """An interpreter that imports pyflink, and Java on the PATH, or ``FlinkUnavailable``
    with what to do.  Looked for in ``explicit``, ``$WEAVEPLACE_FLINK_PYTHON``, this
    interpreter, then ``.venv-flink`` beside the checkout."""
    if shutil.which("java") is None:
        raise FlinkUnavailable(
            "bench flink: no java on the PATH; Flink 2 needs Java 11, 17 or 21 (apt-get "
            "install openjdk-17-jre-headless)"
        )
    candidates = [explicit, os.environ.get(FLINK_PYTHON_ENV)]
    if explicit is None and os.environ.get(FLINK_PYTHON_ENV) is None:
        if importlib.util.find_spec("pyflink") is not None:
            return sys.executable
        candidates.append(str(DEFAULT_FLINK_VENV / "bin" / "python"))
    hint = (
        "make venv-flink (python3.11 -m venv .venv-flink && .venv-flink/bin/pip install "
        "--group flink: README), or pass --flink-python"
    )
    for c in candidates:
        if not c:
            continue
        if not Path(c).exists():
            if c == candidates[0] or c == candidates[1]:
                raise FlinkUnavailable(f"bench flink: {c}: no such interpreter; {hint}")
            continue
        r = subprocess.run([c, "-c", "import pyflink"], capture_output=True, timeout=120)
        if r.returncode != 0:
            raise FlinkUnavailable(f"bench flink: {c} cannot import pyflink; {hint}")
        return c
    raise FlinkUnavailable(f"bench flink: pyflink is not installed; {hint}")


# ----------------------------------------------------------------------------- data, queries
def bench_data(rows: int, data_dir: Path, streams: list[str], log=print) -> tuple[Path, Path, int]:
    """``(parquet, csv, rows)``: the generated events and Flink's CSV of ``ts_ms`` + ``streams``
    (no header), both cached in ``data_dir``."""
    from sim.debs_generator import generate_debs

    data_dir.mkdir(parents=True, exist_ok=True)
    parq = data_dir / f"debs_{rows}.parquet"
    if not parq.exists():
        t = time.perf_counter()
        tmp = data_dir / f".debs_{rows}.parquet"
        generate_debs(tmp, duration_s=rows / 100.0, rate_hz=100, seed=1)
        tmp.rename(parq)
        log(f"generated {parq} in {time.perf_counter() - t:.1f} s")
    cols = ["ts_ms", *streams]
    csv = data_dir / f"debs_{rows}_{'_'.join(streams)}.csv"
    if not csv.exists():
        t = time.perf_counter()
        tmp = data_dir / f".{csv.name}"
        f = pq.ParquetFile(parq)
        opts = pacsv.WriteOptions(include_header=False)
        with pacsv.CSVWriter(tmp, _schema(f, cols), write_options=opts) as w:
            for b in f.iter_batches(columns=cols, batch_size=1 << 18):
                w.write_batch(b)
        tmp.rename(csv)
        log(f"wrote Flink's input {csv} in {time.perf_counter() - t:.1f} s")
    n = pq.ParquetFile(parq).metadata.num_rows
    return parq, csv, n


def _schema(f: pq.ParquetFile, cols: list[str]) -> pa.Schema:
    s = f.schema_arrow
    return pa.schema([s.field(c) for c in cols])


def bench_query_set(n: int, seed: int = 0):
    """``(kept, left_out)`` of the bench's ``n`` generated queries (``flink_sql.expressible``)."""
    from sim.bench.live import bench_queries

    return fs.split_queries(bench_queries(n, seed=seed)[:n])


# ----------------------------------------------------------------------------- weaveplace
def weaveplace_config(queries, parquet: Path, out_dir: Path, opts: FlinkBenchOptions) -> dict:
    """The ``weaveplace run`` config: the queries, the file, live mode, defaults otherwise."""
    from sim.config.run import Run

    streams = sorted({q.stream for q in queries})
    return {
        "name": "bench-flink",
        "workload": {"queries": [q.to_dict() for q in queries]},
        "streams": {s: {"rate": 0.1} for s in streams},  # 100 Hz in tuples per ms
        "cluster": {"nodes": opts.nodes},
        "placement": {"optimizers": opts.optimizer, "ie": opts.ie},
        "data": {"path": str(parquet)},
        "run": {
            "mode": "live",
            "allowed_lateness": Run.model_fields["allowed_lateness"].default,
            "output_dir": str(out_dir),
        },
    }


def run_weaveplace(cfg: dict, out_dir: Path, timeout_s: float) -> dict:
    """``weaveplace run`` of ``cfg`` in a child process: wall seconds, metrics, answers."""
    import yaml

    out_dir.mkdir(parents=True, exist_ok=True)
    cfg_path = out_dir.parent / "weaveplace_bench_flink.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    env = dict(os.environ)
    env["RAY_TMPDIR"] = ray_tmp = tempfile.mkdtemp(prefix="wp-bf-", dir="/tmp")  # short paths
    try:
        t = time.perf_counter()
        r = subprocess.run(
            [sys.executable, "-m", "sim.cli", "run", str(cfg_path), "--out", str(out_dir)],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout_s,
        )
        wall = time.perf_counter() - t
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    if r.returncode != 0:
        (out_dir / "run_output.txt").write_text(r.stdout + r.stderr)
        raise ChildFailed(
            f"weaveplace run failed (exit {r.returncode}): {_last_cause(r.stdout + r.stderr)} "
            f"(all of it: {out_dir / 'run_output.txt'})"
        )
    m = json.loads((out_dir / "metrics.json").read_text())
    answers = pq.read_table(out_dir / "answers.parquet")
    return {"process_s": wall, "metrics": m, "answers": answers}


# ----------------------------------------------------------------------------- Flink
def flink_spec(
    jobs, csv: Path, streams, lateness_ms: int, opts: FlinkBenchOptions, sink_dir=None
) -> dict:
    """The job spec ``flink_job.py`` runs: blackhole sinks, or CSV files under ``sink_dir``."""
    ddl = [fs.source_ddl(str(csv), streams, lateness_ms)]
    config = {"taskmanager.memory.managed.size": FLINK_MANAGED_MEMORY, **opts.flink_config}
    for j in jobs:
        if sink_dir is None:
            ddl.append(fs.sink_ddl(j, "blackhole"))
        else:
            ddl.append(fs.sink_ddl(j, "csv", str(sink_dir / j.name)))
    if sink_dir is not None:  # the file sink commits its files at checkpoints (and the end)
        config.setdefault("execution.checkpointing.interval", "10 s")
    return {
        "parallelism": opts.parallelism,
        "ddl": ddl,
        "inserts": [fs.insert_sql(j) for j in jobs],
        "config": config,
    }


def run_flink(python: str, spec: dict, work: Path, timeout_s: float) -> dict:
    """``flink_job.py`` on ``spec`` in a child process: wall seconds and the job's figures."""
    work.mkdir(parents=True, exist_ok=True)
    spec_path = work / "spec.json"
    spec_path.write_text(json.dumps(spec, indent=1))
    t = time.perf_counter()
    r = subprocess.run(
        [python, str(JOB_SCRIPT), str(spec_path)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=work,
    )
    wall = time.perf_counter() - t
    (work / "stdout.txt").write_text(r.stdout)
    (work / "stderr.txt").write_text(r.stderr)
    line = next((x for x in r.stdout.splitlines() if x.startswith("FLINK_JOB ")), None)
    if r.returncode != 0 or line is None:
        raise ChildFailed(
            f"the Flink job failed (exit {r.returncode}): {_last_cause(r.stderr or r.stdout)} "
            f"(all of it: {work / 'stderr.txt'})"
        )
    return {"process_s": wall, **json.loads(line[len("FLINK_JOB ") :])}


def read_flink_answers(jobs, sink_dir: Path) -> pa.Table:
    """The CSV sinks' files as one answer table (``flink_sql.job_answers``)."""
    parts = []
    for j in jobs:
        files = sorted(
            p for p in (sink_dir / j.name).rglob("*") if p.is_file() and not p.name.startswith(".")
        )
        names = [c for c, _ in j.columns]
        types = {
            c: pa.timestamp("ms")
            if t.startswith("TIMESTAMP")
            else (pa.float64() if t == "DOUBLE" else pa.int64())
            for c, t in j.columns
        }
        for f in files:
            t = pacsv.read_csv(
                f,
                read_options=pacsv.ReadOptions(column_names=names),
                convert_options=pacsv.ConvertOptions(column_types=types),
            )
            parts.append(fs.job_answers(j, t))
    return pa.concat_tables(parts) if parts else fs.ANSWER_SCHEMA.empty_table()


# ----------------------------------------------------------------------------- the bench
def run_flink_bench(opts: FlinkBenchOptions, out: Path, log=print) -> dict:
    """The whole comparison (module docstring); returns the figures ``bench_flink.json`` holds."""
    python = find_flink_python(opts.flink_python)
    kept, left = bench_query_set(opts.queries, opts.seed)
    if not kept:
        raise ValueError("no query Flink can run: raise --queries")
    streams = sorted({q.stream for q in kept})
    log(
        f"queries: {len(kept)} of {opts.queries} generated (left out {len(left)}: range not a "
        "multiple of the slide)"
    )
    parq, csv, n_rows = bench_data(opts.rows, Path(opts.data_dir), streams, log=log)
    jobs = fs.window_jobs(kept)
    cfg = weaveplace_config(kept, parq, out / "weaveplace", opts)
    lateness = cfg["run"]["allowed_lateness"]
    if (out / "weaveplace").exists():
        shutil.rmtree(out / "weaveplace")
    log(
        f"weaveplace run: {len(kept)} queries, {opts.nodes} nodes, {opts.optimizer}, {n_rows:,} rows"
    )
    wp = run_weaveplace(cfg, out / "weaveplace", opts.timeout_s)
    m = wp["metrics"]
    wp_path_s = float(m["wall_s"])
    feed_finish_s = float(m["feed"]["seconds"]) + float(m["finish_s"])
    log(
        f"  whole process {wp['process_s']:.2f} s, data path (wall_s) {wp_path_s:.2f} s, "
        f"feed + finish {feed_finish_s:.2f} s"
    )
    log(
        f"Flink SQL: {len(jobs)} window statements, parallelism {opts.parallelism}, blackhole sinks"
    )
    fl = run_flink(
        python, flink_spec(jobs, csv, streams, lateness, opts), out / "flink", opts.timeout_s
    )
    fl_path_s = fl["net_runtime_ms"] / 1000.0
    log(f"  whole process {fl['process_s']:.2f} s, data path (net runtime) {fl_path_s:.2f} s")
    res = {
        "rows": n_rows,
        "queries_generated": opts.queries,
        "queries": len(kept),
        "queries_left_out": len(left),
        "left_out_ids": [q.id for q in left],
        "aggregates": sorted({q.aggregate for q in kept}),
        "statements": len(jobs),
        "allowed_lateness_ms": lateness,
        "options": asdict(opts),
        "flink_input": "CSV (ts_ms, " + ", ".join(streams) + ") written from the Parquet file",
        "weaveplace": {
            "process_s": wp["process_s"],
            "data_path_s": wp_path_s,
            "feed_finish_s": feed_finish_s,
            "feed_s": float(m["feed"]["seconds"]),
            "finish_s": float(m["finish_s"]),
            "early_read_s": m["feed"].get("early_seconds"),
            "answers": wp["answers"].num_rows,
            "late": sum(
                int(v.get("late_tuples", 0)) for v in wp["metrics"].get("nodes", {}).values()
            ),
            "startup": wp["metrics"].get("startup"),
            # numba kernels compiled during the run (a cold cache: `weaveplace warmup` first)
            "compile_s": max(
                (float(v.get("compile_s", 0.0)) for v in wp["metrics"].get("nodes", {}).values()),
                default=0.0,
            ),
        },
        "flink": {"process_s": fl["process_s"], "data_path_s": fl_path_s, "job": fl},
        "ratio_process": fl["process_s"] / wp["process_s"],
        "ratio_data_path": fl_path_s / wp_path_s,
        "ratio_feed_finish": fl_path_s / feed_finish_s,
    }
    if opts.compare:
        sink_dir = out / "flink_answers"
        if sink_dir.exists():
            shutil.rmtree(sink_dir)
        log("Flink SQL again with CSV sinks, for the answers (untimed)")
        spec = flink_spec(jobs, csv, streams, lateness, opts, sink_dir=sink_dir)
        fc = run_flink(python, spec, out / "flink_collect", opts.timeout_s)
        theirs = read_flink_answers(jobs, sink_dir)
        float_ids = {q.id for q in kept if q.aggregate in fs.FLOAT_AGGREGATES}
        cmp = fs.compare_answers(wp["answers"], theirs, float_ids)
        res["answers"] = cmp
        res["flink_collect_process_s"] = fc["process_s"]
    return res


def format_table(res: dict) -> str:
    """The figures as the lines BENCHMARKS.md quotes."""
    w, f = res["weaveplace"], res["flink"]
    lines = [
        f"{res['rows']:,} rows, {res['queries']} queries ({res['queries_left_out']} of "
        f"{res['queries_generated']} left out: range not a multiple of the slide), "
        f"{res['statements']} Flink statements, aggregates {', '.join(res['aggregates'])}",
        f"{'':34s} {'Flink':>10s} {'weaveplace':>11s} {'ratio':>7s}",
        f"{'whole process (s)':34s} {f['process_s']:10.2f} {w['process_s']:11.2f} "
        f"{res['ratio_process']:6.1f}x",
        f"{'data path (s)':34s} {f['data_path_s']:10.2f} "
        f"{w['data_path_s']:11.2f} {res['ratio_data_path']:6.1f}x",
        f"{'  weaveplace feed + finish instead':34s} {'':10s} {w['feed_finish_s']:11.2f} "
        f"{res['ratio_feed_finish']:6.1f}x",
        "(data path: Flink's job net runtime; weaveplace's metrics.json wall_s, everything up "
        "to the answers in hand; feed + finish: bench e2e's measure)",
    ]
    if w.get("compile_s", 0.0) > COLD_COMPILE_S:
        lines.append(
            f"note: weaveplace's nodes spent {w['compile_s']:.1f} s on numba kernels (loading "
            "from a warm cache takes a few seconds): a cold cache? `weaveplace warmup` fills it"
        )
    a = res.get("answers")
    if a is None:
        lines.append("answers: not compared (--no-compare)")
    else:
        verdict = "EQUAL on every window" if a["equal"] else "DIFFERENT"
        lines.append(
            f"answers: {verdict}: {a['windows']:,} windows (weaveplace) vs {a['windows_theirs']:,} "
            f"(Flink), only weaveplace {a['only_ours']}, only Flink {a['only_theirs']}, values "
            f"differing {a['differ']}; integer aggregates compared exactly, avg within "
            f"{a['rel_tol']:g} relative (max seen {a['max_rel_diff']:.3g}); "
            f"{a['bit_equal']:,} values equal to the bit"
        )
        for e in a["examples"]:
            lines.append(f"  differs: {json.dumps(e)}")
    return "\n".join(lines)
