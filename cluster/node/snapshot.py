"""The byte format of a node snapshot: JSON metadata plus each tree's own snapshot, packed by
``executors.array_pack`` (no pickle; snapshots ``numpy.savez`` wrote before still load).

Why its own module: the format (its version, its keys) is what a replacement actor, an adopting
node and the driver's recovery agree on; ``core`` decides *what* goes in a snapshot and
when, this module only how it is written and read back.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from cluster.answers.files import to_json
from executors.array_pack import pack, unpack

SNAPSHOT_VERSION = 1


def dump_snapshot(meta: dict[str, Any], trees: dict[str, bytes]) -> bytes:
    """``meta`` (JSON-able, ``version`` added) and each tree's snapshot bytes by tree id."""
    # the meta lists every tree's queries (the node's spec): 100,000 of them at each checkpoint
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
