"""Where a node's answer time goes, in one process (no Ray, no Spark): the end-to-end
benchmark's plan at ``--queries`` queries, each node's ``NodeCore`` fed the same DEBS-style
file in one batch, then each phase of the answer path timed on its own.

    python -P sim/bench/e2e_answers.py --queries 10000 --duration-s 1000

* ``trees_s``: ingest + flush (the trees' own work, answers kept as they come: ``busy_s``);
* ``snapshot_s``: ``NodeCore.snapshot`` (what each checkpoint also takes);
* driver route: ``blocks_s`` (``drain_blocks``), ``pickle_s`` (the blocks pickled as Ray
  does, buffers out of band), and once for all nodes ``merge_s`` (``merge_blocks``);
* actor route: ``write_s`` (``checkpoint_write`` minus its snapshot: the part's columns and
  its Parquet file) and the part's size; then, on a second copy of the node, the same answers
  split into ``columns_s`` (the part's table: grouped by query, dictionary codes) and
  ``parquet_s`` (``write_part``: encoding and the atomic write), and ``node_over_tree``:
  (trees + ``write_s``) / trees, the floor this node's own work sets for the benchmark's wall
  / tree ratio when no core is spare (``sim.bench.e2e.tree_time``).

Why a script by path: it uses only ``NodeCore``'s and ``merge_blocks``' public calls, so it
runs unchanged against an older tree (``PYTHONPATH=<old tree> python -P <this file>``; ``-P``:
not this directory first, whose ``executors.py`` would hide the package) and both
answer paths are measured the same way on the same machine, minutes apart.

``--rounds N``: the actor route as a node actor runs it instead, one node per fresh process
(as an actor is): ``N`` rounds of the file (each shifted in event time after the previous)
fed to the node's trees (``trees``) and written as a part (``write``: ``write_answers``, the
part's table and its Parquet file, what ``answer_s`` counts), each phase with its wall
seconds, CPU seconds and minor page faults (``resource.getrusage``).  Why: the first round
touches fresh memory, later ones may reuse what the process kept or freed, so round 1
against round 2 shows what first touching memory costs on this machine; the environment
(``NUMPY_MADVISE_HUGEPAGE``, ``MALLOC_*``) applies to the node's process.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path


def _plan(queries: int, plan_file: Path | None):
    from sim.bench.e2e import e2e_queries
    from sim.bench.live import round_robin_plan

    if plan_file and plan_file.exists():
        return json.loads(plan_file.read_text())
    plan = round_robin_plan(e2e_queries(queries), 2, 0.1)
    if plan_file:
        plan_file.write_text(json.dumps(plan))
    return plan


def measure(queries: int, data: Path, plan_file: Path | None = None) -> dict:
    """The phases per node (module docstring) and the merge of every node's blocks."""
    import pyarrow.parquet as pq

    from cluster.deployment.specs import node_specs
    from cluster.node.core import NodeCore

    table = pq.read_table(data)
    plan = _plan(queries, plan_file)
    out: dict = {"queries": queries, "rows": table.num_rows, "nodes": {}}
    blocks = []
    with tempfile.TemporaryDirectory() as tmp:
        for spec in node_specs(plan):
            row: dict = {}
            for route in ("driver", "actors"):
                core = NodeCore(spec["node_id"], spec["trees"], count_ops=True)
                core.warmup()
                t = time.perf_counter()
                core.ingest(None, table, seq=0)
                core.flush()
                row[f"{route}_trees_s"] = time.perf_counter() - t
                t = time.perf_counter()
                core.snapshot()
                row[f"{route}_snapshot_s"] = time.perf_counter() - t
                if route == "driver":
                    t = time.perf_counter()
                    b = core.drain_blocks()
                    row["blocks_s"] = time.perf_counter() - t
                    t = time.perf_counter()
                    pickle.dumps(b, protocol=5, buffer_callback=lambda _: None)
                    row["pickle_s"] = time.perf_counter() - t
                    row["answers"] = b.num_rows
                    blocks.append(b)
                else:
                    t = time.perf_counter()
                    _, part, _ = core.checkpoint_write(tmp, "000001", "float64")
                    row["write_s"] = time.perf_counter() - t - row["actors_snapshot_s"]
                    row["part_mb"] = part.nbytes / 1e6
                    row["node_over_tree"] = 1 + row["write_s"] / row["actors_trees_s"]
                del core
            row.update(_part_phases(spec, table, tmp))
            out["nodes"][spec["node_id"]] = {k: round(v, 3) for k, v in row.items()}
    from cluster.answers.blocks import merge_blocks

    t = time.perf_counter()
    merged = merge_blocks(blocks)
    out["merge_s"] = round(time.perf_counter() - t, 3)
    out["merged_rows"] = merged.num_rows
    return out


def _part_phases(spec: dict, table, tmp: str) -> dict:
    """The actor route's part in two phases, on a fresh node fed the same data: the table
    (``PendingAnswers.take_table`` where it exists, else blocks laid out as a dictionary
    table) and ``write_part``."""
    from cluster.answers.sink import write_part
    from cluster.node.core import NodeCore

    core = NodeCore(spec["node_id"], spec["trees"], count_ops=True)
    core.warmup()
    core.ingest(None, table, seq=0)
    core.flush()
    t = time.perf_counter()
    if hasattr(core.pending, "take_table"):
        part = core.pending.take_table(core.trees, "float64")
    else:  # an older tree: blocks, then their table
        part = core.pending.take_blocks(core.trees, "float64").dictionary_table("float64")
    t1 = time.perf_counter()
    write_part(tmp, spec["node_id"], "000002", part)
    return {"columns_s": t1 - t, "parquet_s": time.perf_counter() - t1}


def _phase(row: dict, name: str, fn):
    """Run ``fn`` as phase ``name``: its wall and CPU seconds and minor page faults in ``row``."""
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn()
    row[f"{name}_s"] = round(time.perf_counter() - t0, 3)
    row[f"{name}_cpu_s"] = round(time.process_time() - c0, 3)
    row[f"{name}_minflt"] = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
    return out


def node_rounds(queries: int, data: Path, plan_file: Path | None, node: str, rounds: int):
    """The actor route of one node in this process, as its actor runs it: one ``NodeCore``
    fed the file ``rounds`` times, each time shifted in event time to follow the previous one
    (a later round of the same stream; the last one flushed), each round's answers written
    as a part (``write_answers``, what ``answer_s`` counts)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from cluster.deployment.specs import node_specs
    from cluster.node.core import NodeCore

    table = pq.read_table(data)
    ts = table.column("ts_ms")
    span = pc.max(ts).as_py() - pc.min(ts).as_py() + 10  # 100 Hz: the next round's first tuple
    spec = next(s for s in node_specs(_plan(queries, plan_file)) if s["node_id"] == node)
    core = NodeCore(spec["node_id"], spec["trees"], count_ops=True)
    core.warmup()
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(rounds):
            shifted = table.set_column(
                table.schema.get_field_index("ts_ms"), "ts_ms", pc.add(ts, pa.scalar(k * span))
            )
            row: dict = {"round": k + 1}
            _phase(row, "trees", partial(_feed, core, shifted, k, k == rounds - 1))
            row["answers"] = core.pending.count()
            _phase(row, "write", partial(core.write_answers, tmp, f"{k:06d}", "float64"))
            row["node_over_tree"] = round(1 + row["write_s"] / row["trees_s"], 3)
            out.append(row)
    return out


def _feed(core, batch, seq: int, last: bool) -> None:
    """A round's input to the node's trees; the last round also ends the stream (flush)."""
    core.ingest(None, batch, seq=seq)
    if last:
        core.flush()


def fresh_rounds(a, data: Path) -> dict:
    """``node_rounds`` of every node, each in a fresh process (as a node actor is)."""
    from cluster.deployment.specs import node_specs

    plan_file = Path(a.plan) if a.plan else None
    nodes = [s["node_id"] for s in node_specs(_plan(a.queries, plan_file))]
    res: dict = {"queries": a.queries, "rounds": a.rounds, "nodes": {}}
    for node in nodes:
        cmd = [sys.executable, "-P", __file__, "--queries", str(a.queries), "--duration-s",
               str(a.duration_s), "--data-dir", a.data_dir, "--rounds", str(a.rounds),
               "--node", node] + (["--plan", a.plan] if a.plan else [])  # fmt: skip
        done = subprocess.run(cmd, check=True, capture_output=True, text=True, env=os.environ)
        res["nodes"][node] = json.loads(done.stdout)
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queries", type=int, default=10000)
    ap.add_argument("--duration-s", type=int, default=1000, help="the e2e bench's data file")
    ap.add_argument("--data-dir", default="/tmp/weaveplace-bench-e2e")
    ap.add_argument("--plan", default=None, help="cache the plan here (planning is slow)")
    ap.add_argument(
        "--rounds", type=int, default=0, help="the actor route, one process per node (above)"
    )
    ap.add_argument("--node", default=None, help=argparse.SUPPRESS)  # one node, this process
    a = ap.parse_args(argv)
    data = Path(a.data_dir) / f"debs_{a.duration_s}s_100hz.parquet"
    if not data.exists():
        from sim.debs_generator import generate_debs

        data.parent.mkdir(parents=True, exist_ok=True)
        generate_debs(data, duration_s=a.duration_s, rate_hz=100, seed=1)
    plan = Path(a.plan) if a.plan else None
    if a.node:
        print(json.dumps(node_rounds(a.queries, data, plan, a.node, max(1, a.rounds))))
    elif a.rounds:
        print(json.dumps(fresh_rounds(a, data), indent=1))
    else:
        print(json.dumps(measure(a.queries, data, plan), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
