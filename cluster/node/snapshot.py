"""The byte format of a node snapshot: JSON metadata plus each tree's own snapshot, packed by
``executors.array_pack`` (no pickle; snapshots ``numpy.savez`` wrote before still load).

Why its own module: the format (its version, its keys) is what a replacement actor, an adopting
node and the driver's recovery agree on; ``core`` decides *what* goes in a snapshot and
when, this module only how it is written and read back.

The meta's ``spec`` is the node's spec with its trees' specs *without* their ``queries``: each
tree's own snapshot lists them (a restored tree answers exactly those), and at 100,000
queries the lists were 7.8 of a checkpoint's 27 MB, encoded again at every checkpoint.  A
snapshot written before (the lists in the meta) still loads; ``spec_with_queries`` gives the
whole spec either way.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np

from cluster.answers.files import to_json
from executors.array_pack import pack, unpack

SNAPSHOT_VERSION = 1


def dump_snapshot(meta: dict[str, Any], trees: dict[str, bytes]) -> bytes:
    """``meta`` (JSON-able, ``version`` added; its ``spec`` is stored without the trees'
    queries, module doc) and each tree's snapshot bytes by tree id."""
    if "spec" in meta:
        spec = meta["spec"]
        trees_ = [{k: v for k, v in t.items() if k != "queries"} for t in spec["trees"]]
        meta = {**meta, "spec": {**spec, "trees": trees_}}
    arrays = {"meta": np.frombuffer(to_json({"version": SNAPSHOT_VERSION, **meta}), np.uint8)}
    for tid in sorted(trees):
        arrays[f"tree/{tid}"] = np.frombuffer(trees[tid], np.uint8)
    return pack(arrays)


def load_snapshot(data: bytes) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(arrays, meta) of a node snapshot; a tree's snapshot is ``arrays[f"tree/{id}"]``."""
    arrays = unpack(data)
    meta = json.loads(arrays["meta"].tobytes().decode())
    if meta.get("version") != SNAPSHOT_VERSION:
        raise ValueError(f"unsupported node snapshot version {meta.get('version')!r}")
    return arrays, meta


def tree_snapshot(arrays: dict[str, np.ndarray], tid: str) -> bytes:
    """One tree's snapshot bytes out of ``load_snapshot``'s arrays."""
    return arrays[f"tree/{tid}"].tobytes()


def spec_with_queries(
    meta: dict[str, Any], queries_of: Callable[[str], list[dict]]
) -> dict[str, Any]:
    """The node spec of a snapshot's ``meta`` with each tree's ``queries``: those the meta
    lists (a snapshot written before they were left out), else ``queries_of(tree id)`` (the
    queries of the tree restored from its own snapshot)."""
    spec = meta["spec"]
    trees = [
        t if "queries" in t else {**t, "queries": queries_of(str(t["id"]))} for t in spec["trees"]
    ]
    return {**spec, "trees": trees}
