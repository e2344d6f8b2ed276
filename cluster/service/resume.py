"""What ``weaveplace serve --resume`` continues from: the service's state in ``RUN_DIR/state``.

Why one module: saving and restoring must agree field by field (``state/service.json``, the
query log ``state/queries.jsonl`` and one snapshot file per node), and the order of writes is
what makes a crash lose nothing: answers handed over through a checkpoint are written first,
the state right after (``flush_outputs``);
a resumed run re-reads the files fed since and regenerates their answers (parts written after
the state are removed at resume, ``cluster.answers.parts.AnswerParts``).
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from cluster.answers.files import atomic_write, to_json
from cluster.feeds.directory_options import FileRecord
from cluster.service import query_log
from cluster.service.planning import Planner
from cluster.service.state import ServiceState


def load_state(state_dir: Path) -> dict:
    """``state_dir/service.json`` as ``restore`` takes it: queries named by id there filled in
    from the query log (``query_log.load``; a version-1 state held them itself).  Raises
    ``OSError``, ``ValueError`` (not JSON) or ``QueryLogError``."""
    state = json.loads((Path(state_dir) / "service.json").read_text())
    return query_log.load(state_dir, state)


def restore(svc: Any, r: dict) -> None:
    """Set a ``cluster.service.service.Service``'s bookkeeping from a saved state ``r``
    (``load_state``'s form; its stream already exists: its counters and fed files are restored
    too)."""
    svc.running = ServiceState.from_saved(r)
    svc.query_log = query_log.QueryLog.start(svc.run_dir / "state", r)
    svc.state_gen = int(r["gen"])
    svc.opt_factor = float(r.get("opt_factor", 1.0))
    if r.get("planner"):  # (states saved before the planner was kept: the constructor's)
        svc.planner = Planner.from_state(r["planner"])
    svc.choice = r.get("choice", svc.choice)
    if svc.autoscaler is not None and r.get("autoscale"):  # the policy goes on where it was
        svc.autoscaler.restore_state(r["autoscale"], time.monotonic(), time.time())
    if svc.shedding is not None and r.get("shedding"):  # the drops in force go on
        svc.shedding.restore_state(r["shedding"])
    st = svc.stream.stats
    for k, v in r["stats"].items():
        setattr(st, k, v)
    st.files_log = [FileRecord(name, -1) for name in r["fed"]]
    svc.event_log.reload()


def restore_nodes(dep: Any, run_dir, state: dict) -> None:
    """Put a new ``ChurnDeployment``'s nodes back to a saved state's checkpoints: each node's
    snapshot file in ``RUN_DIR/state``, the batch sequence and late-tuple offsets."""
    sd = run_dir / "state"
    blobs = {
        nid: (sd / v["blob"]).read_bytes() if v["blob"] else None
        for nid, v in state["nodes"].items()
    }
    dep.restore_state(state["nodes"], blobs, state["seq"], state["late_seen"])


def flush_outputs(svc: Any, checkpoint: bool = True) -> None:
    """Checkpoint, write the answers and late tuples handed over, save the state: what is
    on disk is always consistent with the saved state (see ``save_state``).  With
    ``checkpoint=False`` the answers committed by the checkpoint a command just took (tree
    changes end with one, and nothing is fed during a command) are handed over without
    another: it would snapshot the same state (at 100,000 queries ~0.5-1 s per command)."""
    ans = svc.dep.take_answers(checkpoint=checkpoint)
    late = svc.dep.take_late()
    svc.stream.write_handed_over(ans, late)
    save_state(svc)


def _write_blobs(state_dir: Path, blobs: list[tuple[str, bytes]]) -> None:
    """Each ``(file name, snapshot bytes)`` written and synced to disk."""
    for name, blob in blobs:
        with open(state_dir / name, "wb") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())


def _state(svc: Any, final: bool, gen: int, logged: Any, nodes: dict[str, Any]) -> dict:
    """``service.json``'s content: the driver's bookkeeping besides the snapshot files
    (``logged``: the query log's reference, ``nodes``: each node's trees, snapshot file and
    sequence)."""
    dep = svc.dep
    st = svc.stream.stats
    return {
        "version": 2,
        "final": final,
        "gen": gen,
        **svc.running.to_saved(),
        "query_log": logged,
        "nodes": nodes,
        "seq": dep.last_seq,
        "late_seen": dep.late_seen,
        "lost": sorted(dep.lost),
        "answer_parts": svc.stream.next_answer_part,
        "late_parts": svc.stream.next_late_part,
        "stats": {
            k: getattr(st, k)
            for k in (
                "files",
                "rows",
                "answers",
                "late",
                "batches",
                "max_ts",
                "files_rejected",
                "rows_rejected",
            )
        },
        "model": {
            "ie": svc.model.technique,
            "rates": svc.rates(),
            "slicing": svc.model.slicing,
            "default_rate": svc.default_rate,
        },
        "optimizer": svc.optimizer,
        "allowed_lateness": dep.allowed_lateness,
        "tolerance": svc.tolerance,
        "max_moves": svc.max_moves,
        "opt_factor": svc.opt_factor,
        "planner": svc.planner.to_state(),
        "choice": svc.choice,
        "autoscale": None
        if svc.autoscaler is None
        else svc.autoscaler.to_state(time.monotonic(), time.time()),
        "shedding": None if svc.shedding is None else svc.shedding.to_state(),
    }


def save_state(svc: Any, final: bool = False) -> None:
    """Save what ``serve --resume`` needs in ``RUN_DIR/state``: every node's last checkpoint
    (snapshot files), the driver's bookkeeping (queries, trees, ids used, files fed, part
    counters, late offsets, batch sequence).  Called right after answers were handed over
    through a checkpoint and written, so state and outputs agree; a crash before the next
    call loses nothing: the resumed run re-reads the files fed since and regenerates their
    answers (parts written after this state are removed at resume).

    Not while a node is behind (silent: its snapshot is older than the files fed since,
    ``cluster.deployment.liveness``): the state saved before stays, so a crash now resumes
    from it and re-feeds the files since to every node; once the node caught up (at the next
    micro-batch, or between them when it answers again: ``cluster.feeds.directory``) the
    state is saved again."""
    dep = svc.dep
    if dep.lagging:
        return
    if any(len(n.sources) != 1 for n in dep.nodes.values()):
        dep.checkpoint(may_skip=True)
        if dep.lagging:  # went silent in it
            return
    gen = svc.state_gen + 1
    sd = svc.run_dir / "state"
    sd.mkdir(exist_ok=True)
    log, running = svc.query_log, svc.running
    blobs = {
        nid: (f"{nid}.{gen}.snap", n.sources[0].blob)
        for nid, n in dep.nodes.items()
        if n.sources[0].blob is not None
    }
    # the snapshot files (~20 MB at 100,000 queries) written and synced on a thread while the
    # query log and the state are made here; the state is written once both are on disk
    pool = ThreadPoolExecutor(1, thread_name_prefix="weaveplace-state")
    written = pool.submit(_write_blobs, sd, list(blobs.values()))
    try:
        logged = log.write(
            running.used_ids,
            running.queries,
            (t for n in dep.nodes.values() for t in n.sources[0].trees),
        )
        nodes = {}
        for nid, n in dep.nodes.items():
            src = n.sources[0]
            nodes[nid] = {
                "trees": log.refer(src.trees),
                "blob": blobs[nid][0] if nid in blobs else None,
                "seq": src.seq,
                "ray_node": n.ray_node,
            }
        data = to_json(_state(svc, final, gen, logged, nodes))
        written.result()
    finally:
        pool.shutdown()
    atomic_write(sd / "service.json", data)
    keep = {v["blob"] for v in nodes.values()}
    for p in [*sd.glob("*.snap"), *sd.glob("*.npz")]:  # (.npz: saved before packs)
        if p.name not in keep:
            p.unlink()
    svc.state_gen = gen
