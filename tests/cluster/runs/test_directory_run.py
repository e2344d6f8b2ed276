"""Live mode over a directory (cluster/feeds/directory.py): files dropped into a directory while the
stream runs give, file by file, the answers of a batch run on the concatenated data.

The oracle is the batch path: ``feed_raw`` over one Parquet file holding the same rows, into a
fresh Deployment of the same plan; where a file reaches back in time, the plan's nodes
(``NodeCore``) replaying the concatenated files in arrival order.  Answers and late tuples must
be equal row for row.  One Ray and one Spark for the whole session (tests/conftest.py); three
streams in all, to keep the file well under a minute.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from support.cluster_plans import make_plan, make_queries
from support.waiting import wait_for

from cluster.debs import format as debs_format
from cluster.debs.format import BOOL_COLUMNS, INT_COLUMNS
from cluster.debs.reader import read_debs
from sim.debs_generator import generate_debs

pytestmark = pytest.mark.cluster

DURATION_S, RATE_HZ = 60, 100
SAFETY_S = 45.0  # every stream also stops on this timeout, so a broken test fails, not hangs


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("stream")
    generate_debs(d / "all.parquet", duration_s=DURATION_S, rate_hz=RATE_HZ, seed=21)
    t = pq.read_table(d / "all.parquet")
    queries = make_queries(n_time=18, seed=5)
    return {
        "dir": d,
        "table": t,
        "t0": int(t.column("ts_ms")[0].as_py()),
        "queries": queries,
        "plan": make_plan(queries),
    }


def span(data, lo_s: float, hi_s: float) -> pa.Table:
    """The rows with ``lo_s <= (ts_ms - first ts) / 1000 < hi_s``."""
    t = data["table"]
    rel = pc.subtract(t.column("ts_ms"), data["t0"])
    return t.filter(
        pc.and_(pc.greater_equal(rel, int(lo_s * 1000)), pc.less(rel, int(hi_s * 1000)))
    )


def tsv_bytes(t: pa.Table) -> bytes:
    """The DEBS text format of ``t`` (the generator's own writer; ms timestamps)."""
    cols = {c: t.column(c).to_numpy(zero_copy_only=False) for c in INT_COLUMNS + BOOL_COLUMNS}
    return debs_format.tsv_bytes(t.column("ts_ms").to_numpy() * 10_000, cols)


def drop(directory: Path, name: str, payload: pa.Table | bytes) -> None:
    """Put a file in place atomically: written under a hidden name (Spark ignores those), then
    renamed; 20 ms apart so modification times keep the arrival order."""
    tmp = directory / f".{name}.tmp"
    if isinstance(payload, pa.Table):
        if name.endswith(".parquet"):
            pq.write_table(payload, tmp)
        else:
            tmp.write_bytes(tsv_bytes(payload))
    else:
        tmp.write_bytes(payload)
    os.replace(tmp, directory / name)
    time.sleep(0.02)


def batch_reference(plan, spark, tables: list[pa.Table], path: Path):
    """The batch-mode run (``feed_raw``, ``order="auto"``) on the concatenated data."""
    from cluster.deployment.deployment import Deployment
    from cluster.feeds.parquet import feed_raw

    pq.write_table(pa.concat_tables(tables), path, row_group_size=1 << 20)
    with Deployment(plan) as dep:
        feed_raw(dep, spark, str(path))
        return dep.finish()


def replay_reference(plan, tables: list[pa.Table], *, lateness: int):
    """The plan's nodes (``NodeCore``, the code inside the actors) fed the concatenated data in
    that order in this process: the batch run's answers and late tuples, without Ray or Spark
    (a cheaper oracle where the order, not the transport, is what is tested)."""
    from cluster.answers.blocks import concat_answers
    from cluster.deployment.specs import node_specs
    from cluster.node.core import NodeCore

    data = pa.concat_tables(tables).combine_chunks()
    answers, late = [], []
    for spec in node_specs(plan):
        node = NodeCore(spec["node_id"], spec["trees"], plan.get("ie") or "slickdeque", lateness)
        for b in data.to_batches(max_chunksize=1 << 18):
            node.ingest(None, b)
        node.flush()
        answers.append(node.drain())
        late.append(node.late())
    return concat_answers(answers), pa.concat_tables(late)


def by_window(t: pa.Table) -> pa.Table:
    return t.sort_by([("query_id", "ascending"), ("window_start", "ascending")])


def by_tuple(t: pa.Table) -> pa.Table:
    return t.sort_by(
        [
            ("node_id", "ascending"),
            ("tree_id", "ascending"),
            ("ts_ms", "ascending"),
            ("value", "ascending"),
        ]
    )


def assert_same_answers(ours: pa.Table, ref: pa.Table) -> None:
    """Row for row (values compared exactly: int streams, avg computed the same way)."""
    assert ours.num_rows == ref.num_rows > 0
    ours = by_window(ours).cast(ref.schema)
    assert ours.equals(by_window(ref)), "streamed answers differ from the batch run"


def run_stream_with(plan, spark, inp: Path, out: Path, options, writer=None, lateness: int = 0):
    """Stream ``inp`` into a fresh deployment in this (main) thread while ``writer(stream)``
    drops files from another; writer errors fail the test."""
    from cluster.deployment.deployment import Deployment
    from cluster.deployment.options import DeploymentOptions
    from cluster.feeds.directory import DirectoryStream

    errors = []

    def guarded(s):
        try:
            writer(s)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
            s.request_stop("writer failed")

    with Deployment(plan, DeploymentOptions(allowed_lateness=lateness)) as dep:
        s = DirectoryStream(dep, spark, inp, out, options)
        th = threading.Thread(target=guarded, args=(s,), daemon=True) if writer else None
        if th:
            th.start()
        stats = s.run()
        if th:
            th.join(timeout=10)
    if errors:
        raise errors[0]
    return stats


def six_files(data) -> list[tuple[str, pa.Table]]:
    """The data as six 10 s files in time order (text, one Parquet)."""
    return [
        (f"{k:02d}-debs.{'parquet' if k == 2 else 'tsv'}", span(data, 10 * k, 10 * k + 10))
        for k in range(6)
    ]


def with_bad_lines(t: pa.Table) -> bytes:
    """``t`` as text with three malformed lines *inserted* (no good row lost): a bad
    timestamp, too few fields, a non-integer index."""
    lines = tsv_bytes(t).split(b"\r\n")
    bad = [
        lines[3].replace(b"2012-", b"2O12-", 1),
        b"\t".join(lines[50].split(b"\t")[:20]),
        lines[90].replace(b"\t", b"\tx", 1),
    ]
    for at, line in zip((5, 100, 1000), bad):  # 1-based line numbers 6, 101, 1001
        lines.insert(at, line)
    return b"\r\n".join(lines)


@pytest.fixture(scope="module")
def reference(data, ray_session, spark):
    """The batch-mode run (feed_raw) on all the data."""
    return batch_reference(data["plan"], spark, [data["table"]], data["dir"] / "ref.parquet")


@pytest.fixture(scope="module")
def in_order(data, ray_session, spark, tmp_path_factory):
    """One stream fed in three waves while it runs: files 0-2 and an unreadable Parquet;
    once those are done files 3-4 (4 with malformed lines) and a Parquet of another schema;
    once those are done, a snapshot of the answers on disk, then file 5."""
    from cluster.feeds.directory_options import StreamOptions

    d = tmp_path_factory.mktemp("in_order")
    inp, out = d / "in", d / "out"
    inp.mkdir()
    files = six_files(data)
    pq.write_table(pa.table({"x": [1, 2]}), d / "other.parquet")
    bad_text = with_bad_lines(files[4][1])
    (d / "bad.tsv").write_bytes(bad_text)
    seen = {}

    def writer(s):
        for name, t in files[:3]:
            drop(inp, name, t)
        drop(inp, "02x-junk.parquet", b"PAR1 not a parquet file")
        wait_for(lambda: s.stats.files >= 4, "the first wave", timeout=30.0)
        drop(inp, *files[3])
        drop(inp, files[4][0], bad_text)
        drop(inp, "04x-other.parquet", (d / "other.parquet").read_bytes())
        wait_for(lambda: s.stats.files >= 7, "the second wave", timeout=30.0)
        seen["early"] = pq.read_table(out / "answers.parquet")
        seen["parts"] = sorted(p.name for p in (out / "answers.parquet").iterdir())
        drop(inp, *files[5])

    stats = run_stream_with(
        data["plan"],
        spark,
        inp,
        out,
        StreamOptions(poll_s=0.2, max_files=8, timeout_s=SAFETY_S),
        writer,
    )
    return {"dir": d, "out": out, "stats": stats, "files": files, **seen}


def test_streamed_answers_equal_batch_run(data, reference, in_order):
    stats, out = in_order["stats"], in_order["out"]
    assert stats.stop_reason == "max_files" and stats.files == 8
    assert [f.name for f in stats.files_log] == [  # arrival (modification time) order
        "00-debs.tsv",
        "01-debs.tsv",
        "02-debs.parquet",
        "02x-junk.parquet",
        "03-debs.tsv",
        "04-debs.tsv",
        "04x-other.parquet",
        "05-debs.tsv",
    ]
    assert stats.rows == data["table"].num_rows and 3 <= stats.batches <= 8
    final = pq.read_table(out / "answers.parquet")
    assert_same_answers(final, reference.answers)
    assert stats.answers == final.num_rows
    assert pq.read_table(out / "late.parquet").num_rows == 0 == reference.late.num_rows


def test_answers_appear_as_files_arrive(data, in_order):
    """Before the last file existed, the answers of the earlier ones were on disk (several
    parts, up to the watermark), and they are final: unchanged in the end."""
    early, files = in_order["early"], in_order["files"]
    final = pq.read_table(in_order["out"] / "answers.parquet")
    last_lo = files[5][1].column("ts_ms")[0].as_py()
    assert len(in_order["parts"]) >= 2 and early.num_rows > 0.5 * final.num_rows
    assert pc.max(early.column("window_end")).as_py() <= last_lo
    assert pc.max(early.column("window_end")).as_py() >= data["t0"] + 45_000  # up to file 4
    rows = lambda t: set(zip(*(t.column(c).to_pylist() for c in t.schema.names)))  # noqa: E731
    assert rows(early) <= rows(final)


def test_malformed_rows_and_broken_files_are_rejected_not_fatal(in_order):
    """Bad lines are rejected one by one in the reader's rejects format (line numbers of their
    file, the same bytes as reading the file from disk); an unreadable Parquet and one of
    another schema are rejected whole (line 0); the stream went on."""
    stats, d = in_order["stats"], in_order["dir"]
    assert stats.files_rejected == 2 and stats.rows_rejected == 3
    rej = in_order["out"] / "rejects"
    assert sorted(p.name for p in rej.iterdir()) == [
        "02x-junk.parquet.rejects.tsv",
        "04-debs.tsv.rejects.tsv",
        "04x-other.parquet.rejects.tsv",
    ]
    read_debs(d / "bad.tsv", rejects_path=d / "bad.rejects.tsv").read_all()
    got = (rej / "04-debs.tsv.rejects.tsv").read_bytes()
    assert got == (d / "bad.rejects.tsv").read_bytes()
    assert [ln.split(b"\t")[0] for ln in got.splitlines()[1:]] == [b"6", b"101", b"1001"]
    for name in ("02x-junk.parquet", "04x-other.parquet"):
        body = (rej / f"{name}.rejects.tsv").read_text().splitlines()
        assert body[0] == "line\treason\traw" and body[1].startswith("0\tunreadable: ")
    log = {f.name: f for f in stats.files_log}
    assert log["04-debs.tsv"].rejected_rows == 3 and log["04-debs.tsv"].error is None
    assert log["04-debs.tsv"].rows == in_order["files"][4][1].num_rows
    assert log["02x-junk.parquet"].error and log["02x-junk.parquet"].rows == 0


@pytest.mark.scenario  # ~11 s here: make test-scenarios (make test stays under 8 min)
def test_file_reaching_back_in_time_gives_late_tuples_not_losses(
    data, ray_session, spark, tmp_path
):
    """Files A=[0,30) C=[32,45) B=[30,32) D=[45,60) s, all there before the start (one
    micro-batch, put in modification-time order; an empty file is skipped by Spark), stop when
    idle.  With allowed lateness 14 s, B's tuples older than the watermark after C are late
    (late.parquet), the newer ones folded in; answers and late tuples equal the plan's nodes
    replaying the same file order."""
    from cluster.feeds.directory_options import StreamOptions

    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    lateness = 14_000
    files = [
        ("00-a.tsv", span(data, 0, 30)),
        ("01-c.tsv", span(data, 32, 45)),
        ("02-b.tsv", span(data, 30, 32)),
        ("03-d.parquet", span(data, 45, 60)),
    ]
    for name, t in files:
        drop(inp, name, t)
    drop(inp, "04-empty.tsv", b"")
    stats = run_stream_with(
        data["plan"],
        spark,
        inp,
        out,
        StreamOptions(poll_s=0.2, idle_timeout_s=0.5, timeout_s=SAFETY_S),
        lateness=lateness,
    )
    assert stats.stop_reason == "idle"
    assert [f.name for f in stats.files_log] == [n for n, _ in files]

    ref_answers, ref_late = replay_reference(data["plan"], [t for _, t in files], lateness=lateness)
    late = pq.read_table(out / "late.parquet")
    assert late.num_rows == stats.late == ref_late.num_rows > 0
    assert by_tuple(late).equals(by_tuple(ref_late))
    assert_same_answers(pq.read_table(out / "answers.parquet"), ref_answers)

    b = files[2][1].column("ts_ms").to_numpy()
    watermark = files[1][1].column("ts_ms")[-1].as_py() - lateness
    late_ts = late.column("ts_ms").to_numpy()
    assert np.isin(late_ts, b).all() and late_ts.max() < watermark  # only B, only the old part
    assert (b >= watermark).sum() > 0 and not np.isin(b[b >= watermark], late_ts).any()


@pytest.mark.parametrize(
    "signum",
    # SIGINT ~7 s here: make test-scenarios (make test stays under 8 min)
    [pytest.param(signal.SIGINT, marks=pytest.mark.scenario), signal.SIGTERM],
    ids=["SIGINT", "SIGTERM"],
)
def test_config_run_stops_cleanly_on_a_signal(
    data, reference, ray_session, spark, tmp_path, signum
):
    """The user surface: a config with ``data.directory`` run by ``sim.cluster_run.run_on_cluster`` (what
    ``weaveplace run`` calls), the same queries placed by WG_TN on one node (placement does
    not change answers).  Ctrl-C (SIGINT to this process), or SIGTERM (``kill PID``, which
    Ray's handler in this process would turn into an exit), while it waits for more files
    stops it cleanly: every pending window flushed and written (the answers equal the batch
    run's), the stop reason naming the signal, both handlers restored."""
    import yaml

    from sim.cluster_run import run_on_cluster
    from sim.config import load_config

    assert threading.current_thread() is threading.main_thread()
    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    keys = ("id", "stream", "aggregate", "range", "slide", "kind")
    cfg = {
        "workload": {"queries": [{k: q.to_dict()[k] for k in keys} for q in data["queries"]]},
        "streams": {s: {"rate": 0.1} for s in ("mf01", "mf02", "mf03")},
        "cluster": {"nodes": 1},
        "placement": {"optimizers": "WG_TN", "ie": "slickdeque"},
        "data": {
            "directory": {"path": "in", "poll_s": 0.2, "files_per_batch": 4, "timeout_s": SAFETY_S}
        },
        "run": {"mode": "live", "output_dir": "out"},
    }
    (tmp_path / "live.yaml").write_text(yaml.safe_dump(cfg))
    config = load_config(tmp_path / "live.yaml")
    for name, t in six_files(data):
        drop(inp, name, t)
    sent = []

    def progress(text):  # "Ctrl-C" once every file is in
        if not sent and text.startswith("watching: 6 files"):
            sent.append(text)
            os.kill(os.getpid(), signum)

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    summary = run_on_cluster(config, out, progress=progress, spark=spark)
    assert {s: signal.getsignal(s) for s in before} == before and sent
    st = summary.metrics["stream"]
    assert (
        st["stop_reason"] == signal.Signals(signum).name and st["files"] == 6 and st["batches"] >= 2
    )
    assert summary.tuples == data["table"].num_rows
    answers = pq.read_table(out / "answers.parquet")
    assert_same_answers(answers, reference.answers)  # the flushed tail windows included
    assert summary.answers == answers.num_rows
    m = json.loads((out / "metrics.json").read_text())
    assert m["feed"]["mode"] == "stream" and m["answers"] == answers.num_rows


@pytest.mark.scenario  # ~21 s: make test-scenarios (make test stays under 8 min)
def test_node_lost_between_micro_batches_changes_nothing(data, ray_session, spark, tmp_path):
    """``run_directory`` with a fault drill, one file per micro-batch, two files reaching back in
    time (late tuples in two micro-batches): node-1 is lost for good in the middle of file
    D - after the micro-batch of B handed over node-1's late tuples, with D's first batch fed
    to it and not taken - and node-0, which took over its trees, is killed in the middle of
    F.  The answers and late tuples written equal the plan's nodes replaying the same file
    order, row for row and none twice; the late tuples of node-1's trees name node-1 up to
    the loss and node-0 after it.  metrics.json records the re-placement, plan_final.json
    verifies, and the report counts late tuples on the node holding their tree at the end."""
    from cluster.deployment.options import DeploymentOptions
    from cluster.feeds.directory_options import StreamOptions
    from cluster.runs.directory_run import run_directory
    from cluster.runs.options import RuntimeOptions
    from placement.plan import verify_plan
    from sim.cluster_run import drill_lines
    from sim.report import build_report

    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    lateness = 5_000
    files = [
        ("00-a.tsv", span(data, 0, 15)),
        ("01-c.tsv", span(data, 17, 30)),
        ("02-b.tsv", span(data, 15, 17)),
        ("03-d.parquet", span(data, 30, 45)),
        ("04-f.tsv", span(data, 47, 60)),
        ("05-e.tsv", span(data, 45, 47)),
    ]
    for name, t in files:
        drop(inp, name, t)
    rows = 500
    first = np.cumsum([0] + [-(-t.num_rows // rows) for _, t in files])  # first batch per file
    faults = [
        {"kind": "lose", "node": "node-1", "at_batch": int(first[3]) + 1},
        {"kind": "kill", "node": "node-0", "at_batch": int(first[4]) + 1},
    ]
    out.mkdir()
    (out / "plan.json").write_text(json.dumps(data["plan"]))  # as run_on_cluster writes it
    res = run_directory(
        data["plan"],
        inp,
        out,
        runtime=RuntimeOptions(spark=spark),
        deployment=DeploymentOptions(allowed_lateness=lateness, faults=faults),
        stream=StreamOptions(
            poll_s=0.2, files_per_batch=1, max_files=len(files), timeout_s=SAFETY_S, batch_rows=rows
        ),
    )
    st, m = res.stats, res.metrics
    assert st.stop_reason == "max_files" and st.batches == len(files)
    assert [f.name for f in st.files_log] == [n for n, _ in files]
    assert [f["fired"] for f in m["faults"]] == [True, True]
    (rec,) = m["replacements"]
    assert rec["node"] == "node-1" and rec["before_batch"] == first[3] + 1
    assert rec["snapshot_seq"] == first[3] - 1  # the checkpoint at the end of B's micro-batch
    assert set(m["nodes"]) == {"node-0"} and m["nodes"]["node-0"]["recoveries"] == 1

    ref_answers, ref_late = replay_reference(data["plan"], [t for _, t in files], lateness=lateness)
    assert_same_answers(pq.read_table(out / "answers.parquet"), ref_answers)
    late = pq.read_table(out / "late.parquet")
    key = lambda t: t.select(["tree_id", "stream", "ts_ms", "value"]).sort_by(  # noqa: E731
        [("tree_id", "ascending"), ("ts_ms", "ascending"), ("value", "ascending")]
    )
    assert late.num_rows == st.late == ref_late.num_rows > 0
    assert key(late).equals(key(ref_late))
    moved = set(rec["trees"])
    names = {
        (n, t.split("~")[0] in moved)
        for n, t in zip(late.column("node_id").to_pylist(), late.column("tree_id").to_pylist())
    }
    assert names == {("node-0", False), ("node-1", True), ("node-0", True)}

    final = json.loads((out / "plan_final.json").read_text())
    assert verify_plan(final) == [] and [n["id"] for n in final["nodes"]] == ["node-0"]
    assert drill_lines(m)[0].startswith(f"node node-1 lost before batch {first[3] + 1} ")
    text = build_report(out).read_text()
    assert "differ" not in text and "Nodes lost and re-placed" in text
    from support.report_tables import Tables

    rows_by_node = {ra["data-node"]: f for ra, f in Tables(text).fields("live-nodes")}
    assert (
        int(rows_by_node["node-0"]["late_rows"][0]["data-value"])
        == m["nodes"]["node-0"]["late_tuples"]
        == late.num_rows
    )
    assert int(rows_by_node["node-1"]["late_rows"][0]["data-value"]) == 0


def test_sliced_directory_run_equals_raw_mode_and_the_brute_force(
    data, ray_session, spark, tmp_path
):
    """``run_directory`` in sliced mode (each arriving file cut into slices on the driver) on a
    real deployment, files A=[0,30) C=[32,45) B=[30,32) s with allowed lateness 1 s, so part of
    B is late: the answers equal raw mode's (the plan's nodes replaying the files in arrival
    order) and the brute force's over that order; a late slice is one row (its newest
    timestamp, the sum of its tuples), so per tree the late rows add up to raw mode's late
    tuples and their timestamps are late tuples' timestamps."""
    from support.cluster_oracles import file_order_oracle

    from cluster.deployment.options import DeploymentOptions
    from cluster.feeds.directory_options import StreamOptions
    from cluster.runs.directory_run import run_directory
    from cluster.runs.options import RuntimeOptions

    queries = [q for q in data["queries"] if q.kind == "time"][:8]
    plan = make_plan(queries)
    inp, out = tmp_path / "in", tmp_path / "out"
    inp.mkdir()
    lateness = 1_000
    files = [
        ("00-a.parquet", span(data, 0, 30)),
        ("01-c.tsv", span(data, 32, 45)),
        ("02-b.parquet", span(data, 30, 32)),
    ]
    for name, t in files:
        drop(inp, name, t)
    res = run_directory(
        plan,
        inp,
        out,
        stream=StreamOptions(poll_s=0.2, idle_timeout_s=0.5, timeout_s=SAFETY_S),
        runtime=RuntimeOptions(spark=spark),
        deployment=DeploymentOptions(mode="sliced", allowed_lateness=lateness),
    )
    assert res.stats.stop_reason == "idle" and res.stats.files == 3
    tables = [t for _, t in files]
    raw_answers, raw_late = replay_reference(plan, tables, lateness=lateness)
    answers = by_window(pq.read_table(out / "answers.parquet"))
    ref = by_window(raw_answers)
    assert answers.num_rows == ref.num_rows > 0
    for c in ("query_id", "window_start", "window_end"):
        assert answers.column(c).to_pylist() == ref.column(c).to_pylist(), c
    np.testing.assert_allclose(
        answers.column("value").to_numpy().astype(float),
        ref.column("value").to_numpy().astype(float),
        rtol=1e-9,
    )
    pq.write_table(pa.concat_tables(tables), tmp_path / "arrival.parquet")
    want, want_late = file_order_oracle(plan, tmp_path / "arrival.parquet", lateness)
    np.testing.assert_allclose(
        answers.column("value").to_numpy().astype(float), want.column("value").to_numpy()
    )
    assert answers.column("window_start").to_pylist() == want.column("window_start").to_pylist()
    late = pq.read_table(out / "late.parquet")
    assert raw_late.num_rows == len(want_late) > late.num_rows == res.stats.late > 0
    for tree in {r[0] for r in want_late}:
        mine = late.filter(pc.equal(late.column("tree_id"), tree))
        theirs = [r for r in want_late if r[0] == tree]
        assert pc.sum(mine.column("value")).as_py() == pytest.approx(sum(r[2] for r in theirs))
        assert set(mine.column("ts_ms").to_pylist()) <= {r[1] for r in theirs}
    b = files[2][1].column("ts_ms").to_numpy()
    assert np.isin(late.column("ts_ms").to_numpy(), b).all()  # only B is late
