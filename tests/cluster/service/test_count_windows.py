"""``weaveplace serve`` from a YAML config with count windows (docs/DESIGN.md s. 1: windows over
tuple positions) next to time windows: count queries in the initial plan, added and removed
while it runs (registered at the position P of their stream, the tuples fed so far), a re-plan
that hands queries between trees, and a stop and ``--resume`` in between.

Oracle: the section 9 oracle (``executors.churn_oracle.registered_answers``) over every row of
the files in arrival order, each query with the T (time) or P (count) its command returned.
"""

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

pytestmark = [pytest.mark.cluster, pytest.mark.scenario]  # ~20 s: make test-scenarios


def _q(qid, stream, agg, r, s, kind):
    return {"id": qid, "stream": stream, "aggregate": agg, "range": r, "slide": s, "kind": kind}


INITIAL = [
    _q("t0", "mf01", "sum", 2000, 500, "time"),
    _q("t1", "mf02", "max", 1500, 1000, "time"),
    _q("n0", "mf01", "sum", 30, 10, "count"),
    _q("n1", "mf01", "sum", 45, 10, "count"),
    _q("n2", "mf02", "max", 25, 7, "count"),
]
ADDED = [
    _q("n3", "mf01", "sum", 40, 15, "count"),  # weaves into n0/n1's tree, or a tree of its own
    _q("n4", "mf03", "avg", 12, 12, "count"),  # a stream no running query reads
    _q("t2", "mf03", "min", 1000, 250, "time"),
]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return serve_files(tmp_path_factory)


def test_serve_count_windows_from_yaml(ray_session, spark, files, tmp_path):
    from cluster.service.control import call
    from placement.plan import verify_plan

    incoming, run_dir = tmp_path / "in", tmp_path / "run"
    incoming.mkdir()
    cfg = serve_config(INITIAL, incoming, run_dir)
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(cfg))
    regs = {q["id"]: [q, None, None] for q in INITIAL}
    fed = 0

    def feed(k):
        nonlocal fed
        drop(incoming, f"f{k:02d}.parquet", files[k])
        wait_for(lambda: call(run_dir, "GET", "/status")["files"] >= k + 1, f"file {k} fed")
        fed += files[k].num_rows

    _, th, box = serve_in_thread(path, None, spark)
    wait_for(lambda: serve_running(run_dir, box), "serve to start")
    feed(0)
    feed(1)
    rep = call(run_dir, "POST", "/add-queries", {"queries": ADDED})
    assert rep["accepted_at_position"] == {"mf01": fed, "mf03": fed}
    for q in ADDED:
        key = "accepted_at_position" if q["kind"] == "count" else "accepted_at"
        regs[q["id"]] = [q, rep[key][q["stream"]], None]
    ev = json.loads((run_dir / "events.jsonl").read_text().splitlines()[-1])
    assert ev["command"] == "add-queries" and ev["accepted_at_position"] == fed
    feed(2)
    # a stop and a resume: the positions go on from the saved count of rows fed
    call(run_dir, "POST", "/stop", {})
    th.join(120)
    assert not th.is_alive() and "error" not in box
    _, th, box = serve_in_thread(None, run_dir, spark)
    wait_for(lambda: serve_running(run_dir, box), "serve --resume to start")
    feed(3)
    rep = call(run_dir, "POST", "/remove-queries", {"ids": ["n0", "t1"]})
    assert rep["removed_at_position"] == {"mf01": fed}
    regs["n0"][2] = rep["removed_at_position"]["mf01"]
    regs["t1"][2] = rep["removed_at"]["mf02"]
    feed(4)
    rep = call(run_dir, "POST", "/rebalance", {})
    assert rep["handed_at_position"] == fed
    for k in range(5, len(files)):
        feed(k)
    call(run_dir, "POST", "/stop", {"flush": True})
    th.join(120)
    assert not th.is_alive() and "error" not in box
    assert_answers_follow_registrations(files, regs, run_dir)
    counted = pq.read_table(run_dir / "answers.parquet").to_pydict()["query_id"]
    assert {"n0", "n1", "n2", "n3", "n4"} <= set(counted)
    assert pq.read_table(run_dir / "late.parquet").num_rows == 0
    assert verify_plan(json.loads((run_dir / "plan_current.json").read_text())) == []
