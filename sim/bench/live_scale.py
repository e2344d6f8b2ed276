"""``weaveplace bench live-scale``: the live path at a large query count (issue 34, item 4).

(a) ``run``: ``weaveplace run`` (a child process, as a user starts it) of ``queries`` queries
over ``rows`` DEBS-style rows (100 Hz); reported: the process's wall time and its phases (the
config read, the plan, the start-up, the feed, the finish), answers and answers per second,
the peak resident memory of the whole process tree (driver, Ray's processes and actors, Spark's
JVM; sampled every ``SAMPLE_S``) and of the driver alone, and every answer of ``check``
random queries against the brute force (``window_answers``: each window recomputed from the
tuples with numpy, exact for the integer DEBS columns).

(b) ``add``: ``weaveplace serve`` (``sim.serve_start.run_service`` on a thread, driven through
its control API) running the same ``queries`` queries over a watched directory, fed ``files``
files first; then one ``add-queries`` of ``add`` new queries, timed from the request to the
reply (Incremental WeaveShare placing them, the trees changed on the actors, the plan and state
written, the drift check), then one more file, whose answers must include the new queries'.

The workload (``scale_queries``) is the generator's (``sim.workload``: Smax 100, Zipf 0.5,
overlap up to 10, seed 0) in seconds: slides of 1-100 s, ranges whole multiples of the slide
(``the last 90 s every 15 s``), over mf01-mf03 and five aggregates: about 1,000 distinct
windows, a plan of a few seconds, and about 340 answers per query over 1 M rows.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

STREAMS = ("mf01", "mf02", "mf03")
AGGS = ("sum", "count", "avg", "min", "max")
SAMPLE_S = 0.5
RATE_HZ = 100


@dataclass(frozen=True)
class LiveScaleOptions:
    """What ``run_live_scale`` runs (module docstring)."""

    queries: int = 100_000
    rows: int = 1_000_000
    check: int = 200
    add: int = 1_000
    files: int = 2
    file_s: float = 100.0
    nodes: int = 1
    optimizer: str = "weaveshare"
    ie: str = "panes"
    run: bool = True
    serve: bool = True
    seed: int = 0


def scale_queries(n: int, seed: int = 0, prefix: str = "q") -> list[dict]:
    """``n`` query mappings (module docstring), ids ``<prefix><i>``."""
    from sim.workload import WorkloadSpec, generate_arrays

    r, s = generate_arrays(WorkloadSpec(qnum=n, smax=100, rate=1.0, zskew=0.5, omax=10, seed=seed))
    k = np.maximum(1, np.rint(r / s)).astype(np.int64)
    return [
        {
            "id": f"{prefix}{i}",
            "stream": STREAMS[i % 3],
            "aggregate": AGGS[(i // 3) % 5],
            "range": int(ki * si) * 1000,
            "slide": int(si) * 1000,
        }
        for i, (ki, si) in enumerate(zip(k.tolist(), s.tolist()))
    ]


def debs_rows(path: Path, rows: int, seed: int = 1) -> Path:
    """Exactly ``rows`` generated DEBS-style rows at ``RATE_HZ`` (kept: made once)."""
    import pyarrow.parquet as pq

    from sim.debs_generator import generate_debs

    if path.exists() and pq.read_metadata(path).num_rows == rows:
        return path
    tmp = path.with_suffix(".all.parquet")
    generate_debs(tmp, duration_s=rows / RATE_HZ * 1.01 + 10, rate_hz=RATE_HZ, seed=seed)
    t = pq.read_table(tmp)
    if t.num_rows < rows:
        raise RuntimeError(f"generated {t.num_rows} rows, fewer than {rows}")
    pq.write_table(t.slice(0, rows), path)
    tmp.unlink()
    return path


def window_answers(q: dict, ts: np.ndarray, vals: np.ndarray) -> dict[int, float]:
    """Every non-empty window ``[k*s, k*s + r)`` of time query ``q`` over the tuples ``(ts,
    vals)`` (sorted by ``ts``): ``{window_start: value}``, recomputed per window."""
    r, s, agg = int(q["range"]), int(q["slide"]), q["aggregate"]
    if not len(ts):
        return {}
    ks = np.arange((int(ts[0]) - r) // s + 1, int(ts[-1]) // s + 1)
    lo = np.searchsorted(ts, ks * s, "left")
    hi = np.searchsorted(ts, ks * s + r, "left")
    out = {}
    for k, a, b in zip(ks.tolist(), lo.tolist(), hi.tolist()):
        if b <= a:
            continue
        w = vals[a:b]
        if agg == "count":
            v = b - a
        elif agg == "sum":
            v = int(w.sum())
        elif agg == "min":
            v = int(w.min())
        elif agg == "max":
            v = int(w.max())
        elif agg == "avg":
            v = int(w.sum()) / (b - a)
        else:
            raise ValueError(f"no brute force for {agg!r}")
        out[k * s] = float(v)
    return out


def check_answers(answers_path: Path, data: Path, queries: list[dict], n: int, seed: int) -> dict:
    """``n`` random queries' answers in ``answers_path`` against ``window_answers``: every
    window present, none extra, every value equal."""
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    pick = [queries[i] for i in sorted(rng.choice(len(queries), min(n, len(queries)), False))]
    t = pq.read_table(data, columns=["ts_ms", *STREAMS]).sort_by("ts_ms")
    ts = t.column("ts_ms").to_numpy()
    got = pq.read_table(
        answers_path,
        columns=["query_id", "window_start", "window_end", "value"],
        filters=[("query_id", "in", [q["id"] for q in pick])],
    )
    by_q: dict[str, dict[int, tuple[int, float]]] = {}
    for qid, ws, we, v in zip(
        got.column("query_id").to_pylist(),
        got.column("window_start").to_pylist(),
        got.column("window_end").to_pylist(),
        got.column("value").to_pylist(),
    ):
        by_q.setdefault(qid, {})[ws] = (we, float(v))
    windows = bad = 0
    first_bad = None
    for q in pick:
        want = window_answers(q, ts, t.column(q["stream"]).to_numpy())
        have = by_q.get(q["id"], {})
        windows += len(want)
        diff = set(want) ^ set(have)
        diff |= {w for w in set(want) & set(have) if have[w] != (w + q["range"], want[w])}
        bad += len(diff)
        if diff and first_bad is None:
            w = min(diff)
            first_bad = {"query": q, "window_start": w, "want": want.get(w), "got": have.get(w)}
    return {
        "queries": len(pick),
        "windows": windows,
        "wrong": bad,
        "equal": bad == 0,
        **({"first_wrong": first_bad} if first_bad else {}),
    }


class TreeMemory:
    """Peak resident memory of a process and all its descendants (and of the process alone),
    sampled from ``/proc`` every ``SAMPLE_S`` on a thread."""

    def __init__(self, pid: int):
        self.pid, self.peak_total, self.peak_root = pid, 0, 0
        self.t0 = time.perf_counter()
        self.timeline: list[tuple[float, int, int]] = []  # (s, driver, tree) every second
        self._stop = threading.Event()
        self._th = threading.Thread(target=self._run, daemon=True)
        self._th.start()

    @staticmethod
    def _rss(pid: int) -> int:
        try:
            with open(f"/proc/{pid}/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            return 0

    def _tree(self) -> list[int]:
        kids: dict[int, list[int]] = {}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(d))
        out, todo = [], [self.pid]
        while todo:
            p = todo.pop()
            out.append(p)
            todo += kids.get(p, [])
        return out

    def _run(self) -> None:
        while not self._stop.is_set():
            root, total = self._rss(self.pid), sum(self._rss(p) for p in self._tree())
            self.peak_root, self.peak_total = max(self.peak_root, root), max(self.peak_total, total)
            t = time.perf_counter() - self.t0
            if not self.timeline or t - self.timeline[-1][0] >= 1.0:
                self.timeline.append((round(t, 1), root, total))
            self._stop.wait(SAMPLE_S)

    def stop(self) -> dict:
        self._stop.set()
        self._th.join(5)
        return {
            "peak_rss_total_bytes": self.peak_total,
            "peak_rss_driver_bytes": self.peak_root,
            "rss_timeline": [[t, round(a / 1e6), round(b / 1e6)] for t, a, b in self.timeline],
        }


def _env() -> dict:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return env


def run_part(out: Path, opts: LiveScaleOptions, data: Path, say: Callable[[str], None]) -> dict:
    """(a): ``weaveplace run`` in a child process, measured and checked."""
    queries = scale_queries(opts.queries, opts.seed)
    run_dir = out / "run"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    cfg = {
        "name": "bench-live-scale",
        "workload": {"queries": queries},
        "streams": {s: {"rate": RATE_HZ / 1000} for s in STREAMS},
        "cluster": {"nodes": opts.nodes},
        "placement": {"optimizers": opts.optimizer, "ie": opts.ie},
        "data": {"path": str(data)},
        "run": {"mode": "live", "output_dir": str(run_dir)},
    }
    # JSON (a YAML document): read by json, not a YAML parser (``sim.config.loading``)
    cpath = out / "live_scale_run.json"
    cpath.write_text(json.dumps(cfg))
    say(f"weaveplace run: {opts.queries} queries over {opts.rows} rows ({cpath})")
    log = open(out / "run.log", "wb")
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sim.cli", "run", str(cpath)],
        env=_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    mem = TreeMemory(proc.pid)
    code = proc.wait()
    wall = time.perf_counter() - t0
    peaks = mem.stop()
    log.close()
    if code != 0:
        tail = (out / "run.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"weaveplace run exited with {code}:\n{tail}")
    m = json.loads((run_dir / "metrics.json").read_text())
    answers = int(m["answers"])
    say(f"run: {wall:.1f} s, {answers} answers; checking {opts.check} queries")
    check = check_answers(run_dir / "answers.parquet", data, queries, opts.check, opts.seed + 1)
    feed = m.get("feed", {})
    return {
        "queries": opts.queries,
        "rows": int(feed.get("rows", 0)),
        "wall_s": round(wall, 2),
        "answers": answers,
        "answers_per_s": round(answers / wall),
        "answers_per_s_feed_finish": round(
            answers / (float(feed.get("seconds", 0)) + float(m.get("finish_s", 0)))
        ),
        "feed_s": round(float(feed.get("seconds", 0)), 2),
        "finish_s": round(float(m.get("finish_s", 0)), 2),
        "startup": m.get("startup"),
        "busy_s": {n: round(v.get("busy_s", 0), 2) for n, v in m.get("nodes", {}).items()},
        **peaks,
        "check": check,
    }


def serve_part(out: Path, opts: LiveScaleOptions, data: Path, say: Callable[[str], None]) -> dict:
    """(b): a deployment of ``queries`` queries, then one ``add-queries`` of ``add``."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from cluster.service.control import call
    from sim.bench.serve import start_service

    incoming, run_dir = out / "incoming", out / "serve"
    for p in (incoming, run_dir):
        if p.exists():
            shutil.rmtree(p)
    incoming.mkdir(parents=True)
    table = pq.read_table(data)
    rel = pc.subtract(table.column("ts_ms"), int(table.column("ts_ms")[0].as_py()))

    def drop(k: int) -> None:
        lo, hi = int(k * opts.file_s * 1000), int((k + 1) * opts.file_s * 1000)
        part = table.filter(pc.and_(pc.greater_equal(rel, lo), pc.less(rel, hi)))
        tmp = incoming / f".f{k:05d}.parquet"
        pq.write_table(part, tmp)
        os.replace(tmp, incoming / f"f{k:05d}.parquet")

    def saved_files() -> int:
        """Files whose micro-batch is over: its answers written and the state saved after
        them (a command waits for a micro-batch in progress: not the command's own time)."""
        try:
            return int(
                json.loads((run_dir / "state" / "service.json").read_text())["stats"]["files"]
            )
        except (OSError, ValueError, KeyError):
            return 0

    def wait_files(n: int, limit: float = 900) -> float:
        t = time.monotonic()
        while call(run_dir, "GET", "/status", timeout=60)["files"] < n or saved_files() < n:
            if time.monotonic() - t > limit:
                raise RuntimeError(f"serve: {n} files not fed in {limit:.0f} s")
            time.sleep(0.5)
        return time.monotonic() - t

    cfg = {
        "name": "bench-live-scale-serve",
        "workload": {"queries": scale_queries(opts.queries, opts.seed)},
        "streams": {s: {"rate": RATE_HZ / 1000} for s in STREAMS},
        "cluster": {"nodes": opts.nodes},
        "placement": {"optimizers": opts.optimizer, "ie": opts.ie},
        "data": {"directory": {"path": str(incoming), "poll_s": 0.25}},
        "run": {"mode": "live", "output_dir": str(run_dir)},
    }
    say(f"serve: starting a deployment of {opts.queries} queries")
    th, box, up_s = start_service(cfg, out / "live_scale_serve.json", run_dir, str(out))
    say(f"serve: up in {up_s:.1f} s; feeding {opts.files} files of {opts.file_s:g} s")
    for k in range(opts.files):
        drop(k)
    fed_s = wait_files(opts.files)
    st0 = call(run_dir, "GET", "/status")
    adds = scale_queries(opts.add, opts.seed + 7, prefix="add")
    t1 = time.perf_counter()
    reply = call(run_dir, "POST", "/add-queries", {"queries": adds}, timeout=600)
    add_s = time.perf_counter() - t1
    say(f"serve: add-queries of {opts.add} answered in {add_s:.2f} s")
    drop(opts.files)
    wait_files(opts.files + 1)
    st1 = call(run_dir, "GET", "/status")
    call(run_dir, "POST", "/stop", {})
    th.join(600)
    if "error" in box:
        raise box["error"]
    ans = pq.read_table(run_dir / "answers.parquet", columns=["query_id"])
    new_ids = set(pc.unique(ans.column("query_id")).to_pylist()) & {q["id"] for q in adds}
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    return {
        "queries": opts.queries,
        "added": opts.add,
        "up_s": round(up_s, 2),
        "files_before_add": opts.files,
        "fed_before_add_s": round(fed_s, 2),
        "add_queries_s": round(add_s, 3),
        "reply_accepted_at": reply.get("accepted_at"),
        "added_queries_answering": len(new_ids),
        "events": [e["command"] for e in events],
        "driver_rss_bytes": {"before": st0["driver_rss_bytes"], "after": st1["driver_rss_bytes"]},
        "actors_rss_bytes": {n: v["measured"].get("rss_bytes") for n, v in st1["nodes"].items()},
    }


def run_live_scale(
    out: Path, opts: LiveScaleOptions = LiveScaleOptions(), say: Callable[[str], None] = print
) -> dict:
    """Both parts (module docstring); the results also in ``out/bench_live_scale.json``."""
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    data = debs_rows(out / f"debs_{opts.rows}.parquet", opts.rows)
    res: dict = {"options": asdict(opts)}
    if opts.run:
        res["run"] = run_part(out, opts, data, say)
        (out / "bench_live_scale.json").write_text(json.dumps(res, indent=1))
    if opts.serve:
        res["serve"] = serve_part(out, opts, data, say)
        (out / "bench_live_scale.json").write_text(json.dumps(res, indent=1))
    return res
