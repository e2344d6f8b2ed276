"""``weaveplace serve`` with ``placement.autoscale`` on a cluster whose autoscaler is Ray's own
(the fake multi-node provider: worker raylets launched and removed on this machine,
``tests/support/fake_autoscaler.py``), not a stand-in for ``request_resources``.

Scale out: queries added past one node's capacity make serve ask Ray for three bundles; Ray's
autoscaler starts two worker raylets and the two added plan nodes are pinned to them, one each
(the status names each plan node's Ray node).  Scale in: all but two queries that run on the
workers removed, serve keeps the head's plan node (those two move there) and asks for one
bundle; Ray's autoscaler removes the idle workers and serve runs on.  The answers are the section 9 oracle's throughout, each window once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from support.fake_autoscaler import fake_autoscaling_head, node_history, watch_nodes
from support.serve_files import RATE_HZ, serve_files
from support.service import assert_answers_follow_registrations, drop, service_queries
from support.waiting import wait_for

pytestmark = [pytest.mark.scenario, pytest.mark.cluster]

ROOT = Path(__file__).resolve().parents[3]
HEAD_ID = "f" * 51 + "00000"  # the fake provider's head node id (workers: ...00001, ...)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return serve_files(tmp_path_factory)


def _plan_setup():
    """(first queries, added queries, capacity, nodes the lot needs): the first fit one node
    at 70 % of its capacity, the lot needs three at 80 %."""
    from placement.node_count import node_count
    from placement.optimizers import optimize
    from placement.queries import query_from_mapping
    from placement.trees import CostModel

    model = CostModel("slickdeque", {s: RATE_HZ / 1000.0 for s in ("mf01", "mf02", "mf03")})
    first, more = service_queries("a", 2, seed=3), service_queries("b", 4, seed=4)
    qa = [query_from_mapping(q) for q in first]
    cap = optimize("WG_TN", qa, model, 1).max_cost / 0.7
    qall = qa + [query_from_mapping(q) for q in more]
    return first, more, cap, node_count(qall, model, 0.8 * cap, 1, 8).nodes


def _serve_config(first, cap, address, incoming, run_dir) -> dict:
    return {
        "workload": {"queries": first},
        "streams": {s: {"rate": RATE_HZ / 1000.0} for s in ("mf01", "mf02", "mf03")},
        "cluster": {
            "nodes": [{"id": "node-0", "capacity": cap}],
            "ray": {"address": address},
            "spark": {"master": "local[1]"},
        },
        "placement": {
            "optimizers": "WG_TN",
            "ie": "slickdeque",
            "max_moves": 10,
            "autoscale": {
                "max_nodes": 3,
                "high": 0.8,
                "low": 0.5,
                "cooldown_s": 0,
                "busy_high": 50.0,  # the model decides, not the measured busy share
                "ray_wait_s": 120,
            },
        },
        "data": {"directory": {"path": str(incoming), "poll_s": 0.2, "files_per_batch": 2}},
        "run": {"mode": "live", "output_dir": str(run_dir), "batch_rows": 64},
    }


def test_serve_scales_with_rays_own_autoscaler(files, tmp_path):
    from sim.serve_cli import ctl

    first, more, cap, need = _plan_setup()
    assert need == 3  # one plan node per Ray node: the head and two workers
    incoming, run_dir = tmp_path / "in", tmp_path / "run"
    incoming.mkdir()
    regs = {q["id"]: [q, None, None] for q in first}
    with fake_autoscaling_head(tmp_path, max_workers=2, idle_timeout_minutes=0.1) as head:
        cfg = tmp_path / "serve.yaml"
        cfg.write_text(yaml.safe_dump(_serve_config(first, cap, head.address, incoming, run_dir)))
        history = tmp_path / "nodes.jsonl"
        watcher = watch_nodes(head, history)
        log = open(tmp_path / "serve.log", "wb")
        serve = subprocess.Popen(
            [sys.executable, "-m", "sim.cli", "serve", str(cfg)],
            cwd=ROOT,
            env=head.env(PYTHONPATH=str(ROOT), RAY_TMPDIR=str(head.temp_dir)),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:

            def status():
                return ctl(run_dir, "status", [])

            def pins():  # plan node -> the Ray node its actor says it runs on
                return {n: v["health"]["ray_node"] for n, v in status()["nodes"].items()}

            def feed(k):
                drop(incoming, f"f{k:02d}.parquet", files[k])
                wait_for(lambda: status()["files"] >= k + 1, f"file {k} fed", 120, proc=serve)

            wait_for(
                lambda: (run_dir / "control.json").exists() and status()["state"] == "running",
                "serve running",
                180,
                interval=0.3,
                proc=serve,
                retry_errors=True,
            )
            wait_for(lambda: node_history(history), "the node watcher", 60, proc=watcher)
            assert node_history(history)[-1]["alive"] == [HEAD_ID]  # no worker yet
            feed(0)
            assert pins() == {"node-0": HEAD_ID}

            # scale out: the command returns once the plan nodes run on the new Ray nodes
            (tmp_path / "more.yaml").write_text(yaml.safe_dump({"queries": more}))
            t_ask = time.time()
            rep = ctl(run_dir, "add-queries", [str(tmp_path / "more.yaml")], timeout=240)
            t_out = time.time()
            for q in more:
                regs[q["id"]] = [q, rep["accepted_at"][q["stream"]], None]
            # (an added actor names its Ray node in its first health answer)
            wait_for(lambda: None not in pins().values(), "the added nodes' health", 30)
            placed = pins()
            workers = sorted(set(placed.values()) - {HEAD_ID})
            assert len(placed) == 3 and placed["node-0"] == HEAD_ID, placed
            assert len(workers) == 2, placed  # the added plan nodes: one on each new Ray node
            assert set(node_history(history)[-1]["alive"]) == {HEAD_ID, *workers}
            assert status()["autoscale"]["last_decision"]["action"] == "out"
            feed(1)
            feed(2)

            # scale in to the queries that run on the workers (b1, b2 fit one node): serve
            # keeps the head's plan node all the same and moves them there, since a worker
            # running a plan node is never idle to Ray (``pinning.keep_rank``)
            hosts = {
                q: n for n, v in status()["nodes"].items() for qs in v["trees"].values() for q in qs
            }
            stay = ["b1", "b2"]
            assert all(placed[hosts[q]] != HEAD_ID for q in stay), hosts
            dropped = [q for q in regs if q not in stay]
            rep = ctl(run_dir, "remove-queries", dropped, timeout=120)
            t_in = time.time()
            for q in dropped:
                regs[q][2] = rep["removed_at"][regs[q][0]["stream"]]
            assert list(pins().values()) == [HEAD_ID], pins()
            wait_for(
                lambda: set(node_history(history)[-1]["alive"]) == {HEAD_ID},
                "Ray's autoscaler to remove the idle workers",
                120,
                interval=0.5,
                proc=serve,
            )
            feed(3)
            assert status()["state"] == "running"
            ctl(run_dir, "stop", [], flush=True, timeout=120)
            serve.wait(timeout=120)
        finally:
            for p in (serve, watcher):
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait(timeout=30)
            log.close()
    assert not head.processes(), "processes of the head left running"
    out = (tmp_path / "serve.log").read_text(errors="replace")
    assert serve.returncode == 0, out[-3000:]

    # the Ray nodes: the two workers appeared after the ask and were gone after the scale-in
    hist = node_history(history)
    up = {w: min(h["t"] for h in hist if w in h["alive"]) for w in workers}
    gone = {w: min(h["t"] for h in hist if w in h["dead"]) for w in workers}
    assert all(t_ask < up[w] < t_out for w in workers)
    assert all(gone[w] > t_in for w in workers)
    ev = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    assert not [e for e in ev if e["command"] in ("failure", "recovery")]  # no node lost
    scale = [e for e in ev if e["command"] == "autoscale" and e["action"] in ("out", "in")]
    assert [(e["action"], e["nodes_before"], e["nodes_after"]) for e in scale] == [
        ("out", 1, 3),
        ("in", 3, 1),
    ]
    res_out, res_in = scale[0]["resources"], scale[1]["resources"]
    assert (res_out["requested_bundles"], res_out["ray_nodes_before"]) == (3, 1)
    assert (res_out["ray_nodes_after"], res_out["fallback"]) == (3, None)
    assert res_in["requested_bundles"] == 1
    print(
        f"Ray's autoscaler: workers up {max(up.values()) - t_ask:.1f} s after the request, "
        f"plan nodes pinned {t_out - t_ask:.1f} s after it (serve waited "
        f"{res_out['waited_s']:.1f} s); workers removed "
        f"{max(gone.values()) - t_in:.1f} s after the scale-in"
    )

    # the answers: the oracle's, each window once
    assert_answers_follow_registrations(files[:4], regs, run_dir)
    got = pq.read_table(run_dir / "answers.parquet").to_pydict()
    assert max(Counter(zip(got["query_id"], got["window_start"])).values()) == 1
