"""Benchmark: how long a live run waits for its first row (``metrics.json`` ``startup``).

    weaveplace bench startup --runs 3

Why: Ray and Spark start at the same time (``cluster.runs.startup``), and the input's first
read (``early_s``: resolving the file, its first chunk) follows Spark's start on its thread
while Ray and the actors start, so the first row should come about when the slower is up; the goal (issue 35) is ``first_row_s <=
max(ray_s, spark_s) + 1``.  A speed goal belongs here, not in a timed unit test.  Each run is
``config`` (default the live quickstart) run live in a process of its own, as ``weaveplace
run`` runs it (without the report), so it starts its own embedded Ray and local Spark; its
``metrics.json`` ``startup`` is read.  Runs are sequential: two at once would compete for the
cores their start-ups need.

``alone`` (``--alone``): after each run, its two sides again, one after the other, each in a
process of its own (so neither shares the cores with the other): Ray and the actors
(``started_run`` with no Spark to start), then Spark and the input's first read (the run's
own, ``cluster.runs.file_run.first_read``).  Why: in a run the two share the cores, so its
figures cannot say whether the goal is out of reach on this machine or only crowded out;
``floor_s``, the later of the two sides alone, is the earliest the first row could come if
neither slowed the other, against ``goal_alone_s``, the slower start alone plus the slack.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: how much later than the slower of Ray's and Spark's start the first row may come (s)
GOAL_SLACK_S = 1.0

_RUN = """
import sys
from sim.cluster_run import run_on_cluster
from sim.config import load_config
run_on_cluster(load_config(sys.argv[1]), sys.argv[2])
"""


_RAY_ALONE = """
import json, sys, tempfile
from cluster.runs.startup import started_run
from sim.config import load_config
from sim.run_options import deployment_options, runtime_options
config = load_config(sys.argv[1])
with tempfile.TemporaryDirectory() as out:  # a run's outputs, never written: nothing is fed
    runtime = runtime_options(config, spark=object())  # a session "given": Spark not started
    with started_run(sys.argv[2], runtime, deployment_options(config, out)) as run:
        st = dict(run.startup)
print(json.dumps({k: st[k] for k in ("ray_s", "deployment_s", "ready_s")}))
"""

_SPARK_ALONE = """
import json, sys, time
from cluster.runs.file_run import first_read
from cluster.runs.startup import new_spark
from sim.config import load_config
from sim.run_options import file_feed_options, runtime_options
config = load_config(sys.argv[1])
read = first_read(sys.argv[2], sys.argv[3], file_feed_options(config), config.run.feed_mode)
t0 = time.perf_counter()
spark = new_spark(runtime_options(config))
spark_s = time.perf_counter() - t0
if read is not None:  # None where a run reads nothing early (not a Parquet file, ...)
    read(spark)
print(json.dumps({"spark_s": spark_s, "early_s": time.perf_counter() - t0 - spark_s}))
spark.stop()
"""


def _child(script: str, args: list[str], timeout_s: float) -> str:
    """``script`` run with ``args`` in a new process (its own embedded Ray's files under a short
    temporary path); what it printed."""
    import os

    env = dict(os.environ)
    env["RAY_TMPDIR"] = ray_tmp = tempfile.mkdtemp(prefix="wp-bs-", dir="/tmp")  # short paths
    try:
        r = subprocess.run(
            [sys.executable, "-c", script, *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout_s,
        )
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    if r.returncode != 0:
        raise RuntimeError(f"the run failed (exit {r.returncode}): {(r.stdout + r.stderr)[-2000:]}")
    return r.stdout


def _printed(out: str) -> dict:
    """The JSON object a child printed last."""
    return json.loads(out.strip().splitlines()[-1])


def alone(config: Path, run_dir: Path, timeout_s: float = 600.0) -> dict:
    """Each side of ``run_dir``'s start-up again without the other (module docstring):
    ``ray_alone_s``, ``deployment_alone_s``, ``spark_alone_s``, ``early_alone_s``, and
    ``floor_s`` against ``goal_alone_s``.  The run's plan and its input file are reused (its
    ``plan.json``; ``data.path``, or the ``data.parquet`` a generated run wrote)."""
    from sim.config import load_config

    data = load_config(config).data.path or run_dir / "data.parquet"
    plan = str(run_dir / "plan.json")
    r = _printed(_child(_RAY_ALONE, [str(config), plan], timeout_s))
    s = _printed(_child(_SPARK_ALONE, [str(config), plan, str(data)], timeout_s))
    ray_side = r["ray_s"] + r["deployment_s"]
    return {
        "ray_alone_s": r["ray_s"],
        "deployment_alone_s": r["deployment_s"],
        "spark_alone_s": s["spark_s"],
        "early_alone_s": s["early_s"],
        "floor_s": max(ray_side, s["spark_s"] + s["early_s"]),
        "goal_alone_s": max(r["ray_s"], s["spark_s"]) + GOAL_SLACK_S,
    }


def one_run(config: Path, out_dir: Path, timeout_s: float = 1200.0) -> dict:
    """``config`` run live in a new process into ``out_dir``; its ``startup`` figures plus
    ``slower_s`` (the slower of Ray's and Spark's start) and ``met`` (the goal)."""
    _child(_RUN, [str(config), str(out_dir)], timeout_s)
    metrics = json.loads((out_dir / "metrics.json").read_text())
    st = metrics["startup"]
    keys = ("ray_s", "spark_s", "deployment_s", "ready_s", "first_row_s")
    row = {k: st.get(k) for k in keys}
    # the input's first read, done on Spark's thread during the start-up (0: read after it)
    row["early_s"] = metrics.get("feed", {}).get("early_seconds", 0.0)
    row["slower_s"] = max(st["ray_s"], st["spark_s"])
    row["met"] = st["first_row_s"] is not None and (
        st["first_row_s"] <= row["slower_s"] + GOAL_SLACK_S
    )
    return row


def run_startup_bench(
    config: Path, runs: int, out: Path, say=None, with_alone: bool = False
) -> list[dict]:
    rows = []
    for i in range(runs):
        run_dir = out / f"run{i + 1}"
        row = {"run": i + 1, **one_run(config, run_dir)}
        if with_alone:
            row.update(alone(config, run_dir))
        rows.append(row)
        if say is not None:
            say(json.dumps(row))
    return rows


def format_table(rows: list[dict]):
    """The runs' figures; with ``--alone`` a second table of each run's sides alone."""
    from rich.console import Group
    from rich.table import Table

    t = Table(
        "run",
        "ray_s",
        "spark_s",
        "deployment_s",
        "ready_s",
        "first read (early_s)",
        "first_row_s",
        f"slower + {GOAL_SLACK_S:g} s",
        "goal",
        title="start-up: seconds from the run's start (Ray and Spark started at the same time)",
    )
    for r in rows:
        t.add_row(
            str(r["run"]),
            *(f"{r[k]:.2f}" for k in ("ray_s", "spark_s", "deployment_s", "ready_s")),
            f"{r.get('early_s') or 0.0:.2f}",
            "-" if r["first_row_s"] is None else f"{r['first_row_s']:.2f}",
            f"{r['slower_s'] + GOAL_SLACK_S:.2f}",
            "met" if r["met"] else "missed",
        )
    if not all("floor_s" in r for r in rows):
        return t
    a = Table(
        "run",
        "Ray + actors",
        "Spark + first read",
        "floor (the later)",
        f"slower start + {GOAL_SLACK_S:g} s",
        "the goal",
        title="each side alone (a process of its own, without the other side): seconds",
    )
    for r in rows:
        a.add_row(
            str(r["run"]),
            f"{r['ray_alone_s']:.2f} + {r['deployment_alone_s']:.2f}",
            f"{r['spark_alone_s']:.2f} + {r['early_alone_s']:.2f}",
            f"{r['floor_s']:.2f}",
            f"{r['goal_alone_s']:.2f}",
            "within reach" if r["floor_s"] <= r["goal_alone_s"] else "out of reach",
        )
    return Group(t, a)
