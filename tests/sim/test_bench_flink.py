"""``weaveplace bench flink`` (``sim/bench/flink.py``, ``sim/bench/flink_sql.py``): the query
to Flink SQL translation, the answer comparison, reading Flink's CSV sinks, the one-line
exit 2 without PyFlink or Java, and (only where a Python with apache-flink is found) a tiny
Flink job against a brute force of docs/DESIGN.md s. 1's windows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from placement.queries import Query
from sim.bench import flink as bf
from sim.bench import flink_sql as fs

REPO = Path(__file__).resolve().parents[2]


def test_the_bench_queries_flink_can_run():
    kept, left = bf.bench_query_set(85)
    assert (len(kept), len(left)) == (59, 26)
    assert all(q.range % q.slide == 0 for q in kept)
    assert all(q.range % q.slide != 0 for q in left)
    assert {q.aggregate for q in kept} == {"sum", "count", "avg", "min", "max"}
    assert [q.id for q in kept[:7]] == [
        "debs_avg1s",
        "debs_min1s",
        "debs_max1s",
        "debs_cnt1s",
        "debs_avg60s_mf01",
        "debs_avg60s_mf02",
        "debs_avg60s_mf03",
    ]
    assert not fs.expressible(Query("c", 10, 5, "sum", "mf01", kind="count"))
    assert fs.expressible(Query("s", 4000, 1000, "stddev", "mf01"))


@pytest.mark.parametrize(
    "ms, text",
    [
        (1, "0 00:00:00.001"),
        (1000, "0 00:00:01.000"),
        (1500, "0 00:00:01.500"),
        (60_000, "0 00:01:00.000"),
        (90_061_001, "1 01:01:01.001"),
    ],
)
def test_intervals_are_day_to_second_literals(ms, text):
    assert fs.interval_sql(ms) == f"INTERVAL '{text}' DAY TO SECOND(3)"


@pytest.mark.parametrize("ms", [0, -5, 100 * 86_400_000])
def test_intervals_out_of_reach_are_refused(ms):
    with pytest.raises(ValueError, match="interval"):
        fs.interval_sql(ms)


def test_one_statement_per_range_and_slide():
    qs = [
        Query("a", 1000, 1000, "sum", "mf01"),
        Query("b", 3000, 1000, "avg", "mf02"),
        Query("c", 1000, 1000, "max", "mf03"),
        Query("d", 3000, 1000, "count", "mf01"),
    ]
    jobs = fs.window_jobs(qs)
    assert [(j.name, j.range, j.slide, [q.id for q in j.queries]) for j in jobs] == [
        ("w0", 1000, 1000, ["a", "c"]),
        ("w1", 3000, 1000, ["b", "d"]),
    ]
    assert jobs[0].columns == [
        ("ws", "TIMESTAMP(3)"),
        ("we", "TIMESTAMP(3)"),
        ("q0", "BIGINT"),
        ("q1", "BIGINT"),
    ]
    assert jobs[1].columns[2:] == [("q0", "DOUBLE"), ("q1", "BIGINT")]
    assert fs.insert_sql(jobs[0]) == (
        "INSERT INTO w0_out SELECT window_start AS ws, window_end AS we, SUM(`mf01`) AS q0, "
        "MAX(`mf03`) AS q1 FROM TABLE(TUMBLE(TABLE debs, DESCRIPTOR(rt), "
        "INTERVAL '0 00:00:01.000' DAY TO SECOND(3))) GROUP BY window_start, window_end"
    )
    # HOP takes the slide first, then the size; avg over DOUBLE (a BIGINT avg truncates)
    assert (
        "HOP(TABLE debs, DESCRIPTOR(rt), INTERVAL '0 00:00:01.000' DAY TO SECOND(3), "
        "INTERVAL '0 00:00:03.000' DAY TO SECOND(3))" in jobs[1].select_sql()
    )
    assert "AVG(CAST(`mf02` AS DOUBLE)) AS q0, COUNT(`mf01`) AS q1" in jobs[1].select_sql()
    with pytest.raises(ValueError, match=r"\['e'\]"):
        fs.window_jobs([Query("e", 2500, 1000, "sum", "mf01")])


def test_watermark_is_one_ms_behind_the_lateness():
    ddl = fs.source_ddl("/d/x.csv", ["mf01", "mf02"], 0)
    assert "ts_ms BIGINT, `mf01` BIGINT, `mf02` BIGINT, rt AS TO_TIMESTAMP_LTZ(ts_ms, 3)" in ddl
    assert "WATERMARK FOR rt AS rt - INTERVAL '0 00:00:00.001' DAY TO SECOND(3)" in ddl
    assert "'path' = '/d/x.csv', 'format' = 'csv'" in ddl
    assert "INTERVAL '0 00:00:02.001'" in fs.source_ddl("/d/x.csv", ["mf01"], 2000)
    job = fs.window_jobs([Query("a", 1000, 1000, "sum", "mf01")])[0]
    assert fs.sink_ddl(job, "blackhole").endswith("WITH ('connector' = 'blackhole')")
    assert "'path' = '/o/it''s'" in fs.sink_ddl(job, "csv", "/o/it's")


def _answers(rows):
    return pa.table(
        {
            "query_id": pa.array([r[0] for r in rows], pa.string()),
            "window_start": pa.array([r[1] for r in rows], pa.int64()),
            "window_end": pa.array([r[2] for r in rows], pa.int64()),
            "value": pa.array([r[3] for r in rows], pa.float64()),
        }
    )


def test_compare_answers_on_every_window():
    ours = _answers([("s", 0, 1000, 10.0), ("s", 1000, 2000, 7.0), ("a", 0, 1000, 1 / 3)])
    same = _answers([("a", 0, 1000, 1 / 3), ("s", 1000, 2000, 7.0), ("s", 0, 1000, 10.0)])
    c = fs.compare_answers(ours, same, {"a"})
    assert c["equal"] and c["windows"] == 3 and c["bit_equal"] == 3 and c["differ"] == 0
    # an avg within 1e-9 relative is equal, not to the bit; a sum off by one is not
    close = _answers(
        [("a", 0, 1000, 1 / 3 * (1 + 1e-12)), ("s", 1000, 2000, 7), ("s", 0, 1000, 10)]
    )
    c = fs.compare_answers(ours, close, {"a"})
    assert c["equal"] and c["bit_equal"] == 2 and 0 < c["max_rel_diff"] < 1e-11
    off = _answers([("a", 0, 1000, 1 / 3 * (1 + 1e-6)), ("s", 1000, 2000, 8), ("s", 0, 1000, 10)])
    c = fs.compare_answers(ours, off, {"a"})
    assert not c["equal"] and c["differ"] == 2
    assert {(e["query_id"], e["ours"], e["theirs"]) for e in c["examples"]} >= {("s", 7.0, 8.0)}
    # a window only one side has
    fewer = _answers([("a", 0, 1000, 1 / 3), ("s", 0, 1000, 10.0)])
    more = _answers(
        [*[(r, 0, 1000, v) for r, v in (("a", 1 / 3), ("s", 10.0))], ("s", -1000, 0, 1.0)]
    )
    c = fs.compare_answers(ours, fewer, {"a"})
    assert (c["only_ours"], c["only_theirs"], c["equal"]) == (1, 0, False)
    c = fs.compare_answers(fewer, more, {"a"})
    assert (c["only_ours"], c["only_theirs"], c["windows_theirs"]) == (0, 1, 3)


def test_flink_csv_sinks_read_as_answers(tmp_path):
    """Flink's csv format writes TIMESTAMP(3) with as many fraction digits as needed and
    windows before the epoch as 1969 (the lines of a real run)."""
    job = fs.window_jobs(
        [Query("b", 2000, 1000, "avg", "mf02"), Query("c", 2000, 1000, "count", "mf01")]
    )[0]
    d = tmp_path / job.name
    d.mkdir()
    (d / "part-x-0-0").write_text(
        '"1969-12-31 23:59:58","1970-01-01 00:00:00",10.0,1\n'
        '"1969-12-31 23:59:59.5","1970-01-01 00:00:01.5",20.0,3\n'
        '"2012-02-22 16:46:29","2012-02-22 16:46:31",35.25,4\n'
    )
    (d / ".part-y-0-1.inprogress").write_text("garbage\n")  # never committed: not read
    t = bf.read_flink_answers([job], tmp_path)
    t = t.sort_by([("query_id", "ascending"), ("window_start", "ascending")])
    assert t.column("query_id").to_pylist() == ["b"] * 3 + ["c"] * 3
    assert t.column("window_start").to_pylist()[:3] == [-2000, -500, 1329929189000]
    assert t.column("window_end").to_pylist()[:3] == [0, 1500, 1329929191000]
    assert t.column("value").to_pylist() == [10.0, 20.0, 35.25, 1.0, 3.0, 4.0]


def test_the_weaveplace_config_is_a_live_run_over_the_file(tmp_path):
    from sim.config import load_config
    from sim.debs_generator import generate_debs

    kept, _ = bf.bench_query_set(20)
    generate_debs(tmp_path / "d.parquet", duration_s=5)
    cfg = bf.weaveplace_config(kept, tmp_path / "d.parquet", tmp_path / "o", bf.FlinkBenchOptions())
    assert cfg["run"] == {"mode": "live", "allowed_lateness": 0, "output_dir": str(tmp_path / "o")}
    assert cfg["cluster"] == {"nodes": 3}
    assert cfg["placement"] == {"optimizers": "WG_LS", "ie": "slickdeque"}
    import yaml

    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(cfg))
    loaded = load_config(p)  # valid as weaveplace reads it
    assert len(loaded.workload.queries) == len(kept) == 15


# ----------------------------------------------------------------------------- no Flink
def _bench(env_extra: dict, tmp_path) -> subprocess.CompletedProcess:
    env = {**os.environ, **env_extra}
    return subprocess.run(
        [sys.executable, "-m", "sim.cli", "bench", "flink", "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )


def _one_line_exit_2(res, *needles):
    out = (res.stdout + res.stderr).strip()
    assert res.returncode == 2, out
    assert "Traceback" not in out
    assert len(out.splitlines()) == 1, out
    for n in needles:
        assert n in out, out


def test_without_pyflink_one_line_and_exit_2(tmp_path):
    missing = tmp_path / "nothing" / "python"
    _one_line_exit_2(
        _bench({bf.FLINK_PYTHON_ENV: str(missing)}, tmp_path),
        f"{missing}: no such interpreter",
        "pip install --group flink",
    )
    # an interpreter that is there but has no pyflink (this one, in `make test`'s venv)
    if subprocess.run([sys.executable, "-c", "import pyflink"], capture_output=True).returncode:
        _one_line_exit_2(
            _bench({bf.FLINK_PYTHON_ENV: sys.executable}, tmp_path),
            "cannot import pyflink",
        )
    assert not (tmp_path / "o").exists()  # nothing run, nothing written


def test_without_java_one_line_and_exit_2(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)  # a PATH with python but no java
    _one_line_exit_2(_bench({"PATH": str(bin_dir)}, tmp_path), "no java on the PATH")


# ----------------------------------------------------------------------------- with Flink
def _brute_force(ts, vals, q: Query) -> dict[tuple[int, int], float]:
    """docs/DESIGN.md s. 1: window k covers [k*s, k*s + r); windows holding no tuple are not
    answered."""
    out: dict[tuple[int, int], list] = {}
    for t, v in zip(ts, vals):
        k_hi = t // q.slide
        k_lo = (t - q.range) // q.slide + 1  # the smallest k with k*s + r > t
        for k in range(k_lo, k_hi + 1):
            out.setdefault((k * q.slide, k * q.slide + q.range), []).append(v)
    f = {"sum": sum, "count": len, "min": min, "max": max, "avg": lambda x: sum(x) / len(x)}
    return {w: float(f[q.aggregate](x)) for w, x in out.items()}


@pytest.mark.slow
def test_a_flink_job_answers_as_the_brute_force(tmp_path):
    """Where a Python with apache-flink is found (``.venv-flink``, $WEAVEPLACE_FLINK_PYTHON):
    the translated statements run in Flink, answers equal to the window convention's brute
    force, windows before the first tuple and after the last one included."""
    try:
        python = bf.find_flink_python()
    except bf.FlinkUnavailable as exc:
        pytest.skip(str(exc))
    rng = np.random.default_rng(3)
    ts = np.sort(rng.integers(-2500, 9000, 400))
    a, b = rng.integers(0, 1000, 400), rng.integers(-50, 50, 400)
    csv = tmp_path / "in.csv"
    csv.write_text("".join(f"{t},{x},{y}\n" for t, x, y in zip(ts, a, b)))
    qs = [
        Query("sum1", 1000, 1000, "sum", "mf01"),
        Query("avg3", 3000, 1000, "avg", "mf02"),
        Query("cnt3", 3000, 1000, "count", "mf01"),
        Query("max15", 1500, 500, "max", "mf02"),
        Query("min2", 2000, 250, "min", "mf01"),
    ]
    jobs = fs.window_jobs(qs)
    opts = bf.FlinkBenchOptions()
    spec = bf.flink_spec(jobs, csv, ["mf01", "mf02"], 0, opts, sink_dir=tmp_path / "sinks")
    run = bf.run_flink(python, spec, tmp_path / "job", 600)
    assert run["net_runtime_ms"] > 0 and run["process_s"] > run["net_runtime_ms"] / 1000
    theirs = bf.read_flink_answers(jobs, tmp_path / "sinks")
    rows = []
    for q in qs:
        vals = a if q.stream == "mf01" else b
        for (ws, we), v in sorted(_brute_force(ts.tolist(), vals.tolist(), q).items()):
            rows.append((q.id, ws, we, v))
    c = fs.compare_answers(_answers(rows), theirs, {"avg3"})
    assert c["equal"], c
    assert c["windows"] == c["windows_theirs"] == len(rows) == 118
    starts = theirs.column("window_start").to_pylist()
    assert (min(starts), max(starts)) == (-5000, 8750)  # tuples -2487 .. 8997: avg3, min2


def test_a_failed_child_is_told_by_its_innermost_cause():
    trace = (
        "Traceback (most recent call last):\n  File x\n"
        "Caused by: org.apache.flink.runtime.JobException: Recovery is suppressed\n\tat a.b\n"
        "Caused by: java.lang.IllegalArgumentException: The minBucketMemorySize is not valid!\n"
        "\tat c.d\n"
    )
    assert bf._last_cause(trace) == (
        "Caused by: java.lang.IllegalArgumentException: The minBucketMemorySize is not valid!"
    )
    assert bf._last_cause("boom\nerror: live run: no\n\n") == "error: live run: no"
    assert bf._last_cause("") == "no output"


def test_the_table_gives_both_times_and_their_ratios():
    res = {
        "rows": 2_993_463,
        "queries": 59,
        "queries_left_out": 26,
        "queries_generated": 85,
        "statements": 50,
        "aggregates": ["avg", "count", "max", "min", "sum"],
        "weaveplace": {
            "process_s": 20.0,
            "data_path_s": 8.0,
            "feed_finish_s": 6.4,
            "compile_s": 2.1,
        },
        "flink": {"process_s": 300.0, "data_path_s": 280.0},
        "ratio_process": 15.0,
        "ratio_data_path": 35.0,
        "ratio_feed_finish": 43.75,
        "answers": {
            "equal": True,
            "windows": 1_792_041,
            "windows_theirs": 1_792_041,
            "only_ours": 0,
            "only_theirs": 0,
            "differ": 0,
            "rel_tol": 1e-9,
            "max_rel_diff": 0.0,
            "bit_equal": 1_792_041,
            "examples": [],
        },
    }
    text = bf.format_table(res)
    assert "2,993,463 rows, 59 queries (26 of 85 left out" in text
    assert "whole process (s)                      300.00       20.00   15.0x" in text
    assert "data path (s)                          280.00        8.00   35.0x" in text
    assert "6.40   43.8x" in text
    assert "EQUAL on every window: 1,792,041 windows" in text
    assert "note:" not in text  # 2.1 s of kernels: loaded, not compiled
    res["weaveplace"]["compile_s"] = 39.5
    res["answers"] = None
    text = bf.format_table(res)
    assert "39.5 s on numba kernels" in text and "not compared (--no-compare)" in text
