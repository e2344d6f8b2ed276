"""``weaveplace serve`` from a YAML config in sliced mode (``run.feed_mode: sliced``): the driver
cuts each arriving file at the trees' edges and change points and ships slices; queries are added
and removed while it runs, a re-plan hands queries between trees, and a stop and ``--resume``
come in between.  Oracle: ``executors.churn_oracle.registered_answers`` over every row of the
files, each query with the T its command returned (every window once, none twice)."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
import yaml
from support.serve_files import serve_files
from support.service import (
    assert_answers_follow_registrations,
    drop,
    serve_config,
    serve_in_thread,
    serve_running,
)
from support.waiting import wait_for

from cluster.service.control import ControlError, call

pytestmark = [pytest.mark.cluster, pytest.mark.scenario]  # ~17 s: make test-scenarios


def _q(qid, stream, agg, r, s, kind="time"):
    return {"id": qid, "stream": stream, "aggregate": agg, "range": r, "slide": s, "kind": kind}


INITIAL = [
    _q("a0", "mf01", "sum", 2000, 500),
    _q("a1", "mf01", "stddev", 1500, 300),
    _q("a2", "mf02", "max", 1500, 1000),
]
ADDED = [
    _q("b0", "mf01", "avg", 1700, 700),  # edges the running tree on mf01 lacks
    _q("b1", "mf03", "min", 1000, 250),  # a stream no running query reads
]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return serve_files(tmp_path_factory)


def test_serve_sliced_mode_from_yaml(ray_session, spark, files, tmp_path):
    incoming, run_dir = tmp_path / "in", tmp_path / "run"
    incoming.mkdir()
    cfg = serve_config(INITIAL, incoming, run_dir, feed_mode="sliced")
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(cfg))
    regs = {q["id"]: [q, None, None] for q in INITIAL}

    def feed(k):
        drop(incoming, f"f{k:02d}.parquet", files[k])
        wait_for(lambda: call(run_dir, "GET", "/status")["files"] >= k + 1, f"file {k} fed")

    _, th, box = serve_in_thread(path, None, spark)
    wait_for(lambda: serve_running(run_dir, box), "serve to start")
    feed(0)
    feed(1)
    rep = call(run_dir, "POST", "/add-queries", {"queries": ADDED})
    for q in ADDED:
        regs[q["id"]] = [q, rep["accepted_at"][q["stream"]], None]
    with pytest.raises(ControlError, match="count windows need each tuple's position"):
        call(run_dir, "POST", "/add-queries", {"queries": [_q("c0", "mf01", "sum", 9, 3, "count")]})
    feed(2)
    call(run_dir, "POST", "/stop", {})
    th.join(120)
    assert not th.is_alive() and "error" not in box
    _, th, box = serve_in_thread(None, run_dir, spark)
    wait_for(lambda: serve_running(run_dir, box), "serve --resume to start")
    feed(3)
    rep = call(run_dir, "POST", "/remove-queries", {"ids": ["a0", "a2"]})
    regs["a0"][2] = rep["removed_at"]["mf01"]
    regs["a2"][2] = rep["removed_at"]["mf02"]
    feed(4)
    call(run_dir, "POST", "/rebalance", {})
    for k in range(5, len(files)):
        feed(k)
    call(run_dir, "POST", "/stop", {"flush": True})
    th.join(120)
    assert not th.is_alive() and "error" not in box
    assert_answers_follow_registrations(files, regs, run_dir)
    assert pq.read_table(run_dir / "late.parquet").num_rows == 0
    ev = [json.loads(x)["command"] for x in (run_dir / "events.jsonl").read_text().splitlines()]
    assert "add-queries" in ev and "remove-queries" in ev
