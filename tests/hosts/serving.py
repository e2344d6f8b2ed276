"""What the tests on emulated hosts share: the config of a deployment attached to the hosts'
Ray cluster, the files the ``serve`` tests drop, the events they read, when each file's answers
were written, and percentiles."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

from hosts.netns import FAILURE_TIMEOUT_S
from sim.debs_generator import generate_debs

STREAMS = ("mf01", "mf02", "mf03")


def attached_config(
    address: str, queries: list[dict], data: dict, run: dict, *, rate_hz: int, spark_master: str
) -> dict:
    """A YAML config (as a dict) for ``weaveplace serve`` or ``run`` attached to the hosts' Ray
    cluster at ``address``: ``queries`` on 3 plan nodes (pinned one per host, the default when
    attached), the hosts' failure timeout, the generated streams at ``rate_hz``, and the
    given ``data`` and ``run`` sections (``run.mode: live`` is added)."""
    return {
        "workload": {"queries": queries},
        "cluster": {
            "nodes": 3,
            "ray": {"address": address},
            "spark": {"master": spark_master},
            "failure_timeout_s": FAILURE_TIMEOUT_S,
        },
        "placement": {"optimizers": "WG_TN", "ie": "slickdeque"},
        "streams": {s: {"rate": rate_hz / 1000} for s in STREAMS},
        "data": data,
        "run": {"mode": "live", **run},
    }


def write_serve_config(
    d: Path, address: str, queries: list[dict], files_per_batch: int, rate_hz: int
):
    """``d/serve.yaml``: ``weaveplace serve`` attached at ``address`` (``attached_config``),
    watching ``d/in`` (made here; ``files_per_batch`` files per micro-batch) and writing to
    ``d/run``, Spark ``local[1]`` on the driver's host.  Returns ``(incoming, run_dir)``."""
    incoming, run_dir = d / "in", d / "run"
    incoming.mkdir()
    directory = {"path": str(incoming), "poll_s": 0.2, "files_per_batch": files_per_batch}
    cfg = attached_config(
        address,
        queries,
        {"directory": directory},
        {"output_dir": str(run_dir)},
        rate_hz=rate_hz,
        spark_master="local[1]",
    )
    (d / "serve.yaml").write_text(yaml.safe_dump(cfg))
    return incoming, run_dir


def split_files(d: Path, file_s: int, n_files: int, rate_hz: int, seed: int = 5):
    """``n_files`` tables of ``file_s`` seconds each of generated DEBS data, in time order."""
    generate_debs(d / "all.parquet", duration_s=file_s * n_files, rate_hz=rate_hz, seed=seed)
    t = pq.read_table(d / "all.parquet")
    rel = pc.subtract(t.column("ts_ms"), int(t.column("ts_ms")[0].as_py()))
    return [
        t.filter(
            pc.and_(pc.greater_equal(rel, k * file_s * 1000), pc.less(rel, (k + 1) * file_s * 1000))
        )
        for k in range(n_files)
    ]


def events(run_dir: Path) -> list[dict]:
    """The lines of ``run_dir/events.jsonl`` (none yet: [])."""
    p = run_dir / "events.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines() if x.strip()] if p.exists() else []


def recovered(run_dir: Path, node: str) -> bool:
    return any(e["command"] == "recovery" and e["node"] == node for e in events(run_dir))


class AnswerClock:
    """When each file's answers were written: polls ``state/service.json`` (saved right after
    a micro-batch's answers) every 50 ms and notes when its file count first reaches k."""

    def __init__(self, run_dir: Path):
        self.path = run_dir / "state" / "service.json"
        self.seen: dict[int, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        while not self.stop.wait(0.05):
            try:
                files = int(json.loads(self.path.read_text())["stats"]["files"])
            except (OSError, ValueError, KeyError):
                continue
            now = time.time()
            for k in range(files):
                self.seen.setdefault(k, now)


def queries_off(run_dir: Path, node: str) -> list[str]:
    """The running plan's queries on every node but ``node``."""
    plan = json.loads((run_dir / "plan_current.json").read_text())
    trees = [t for n in plan["nodes"] if n["id"] != node for t in n["trees"]]
    return sorted({q if isinstance(q, str) else q["id"] for t in trees for q in t["queries"]})


def answers_after(run_dir: Path, event_time: int, queries: list[str]) -> int:
    """Answers of ``queries`` written so far whose windows end after ``event_time``."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:
        t = pq.read_table(run_dir / "answers.parquet")
    except (OSError, pa.ArrowInvalid):
        return 0
    keep = pc.and_(
        pc.greater(t.column("window_end"), event_time),
        pc.is_in(t.column("query_id"), value_set=pa.array(queries)),
    )
    return int(pc.sum(keep.cast("int64")).as_py() or 0)


def pct(xs: list[float], q: float) -> float | None:
    return float(np.percentile(xs, q)) if xs else None
