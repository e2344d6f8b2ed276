"""One plan node = one Ray actor hosting that node's execution trees.

Why thin: the executor (``executors.ExecutionTree``) does all the window work; the actor only
routes columns to trees, keeps answers until the driver collects them, and reports metrics.
The logic lives in the plain class ``NodeCore`` (testable without Ray); ``NodeActor`` is the same
class wrapped by ``ray.remote``.

Routing: a query's *stream* is a column name of the input (e.g. ``"mf01"``); every batch carries
``ts_ms`` (int64 event time) plus one or more stream columns.  ``ingest(stream, batch)`` feeds
every tree on ``stream`` with ``(ts_ms, batch[stream])``; ``stream=None`` feeds every hosted
stream whose column is in the batch (one call per batch instead of one per stream: calls cost
~1.6 ms each, DESIGN.md s. 8).  Trees are ordered by id within a stream, so a replay is
deterministic.

Output: answers accumulate in the actor (returning them per call would ship small tables on the
hot path).  ``drain()`` hands them over; ``checkpoint()`` hands them over *together with* a
snapshot taken at the same point, which is what makes recovery exactly-once: the driver commits
the answers up to the snapshot, and a replacement actor restored from it regenerates exactly
the answers after it.  Late tuples live in the trees' state (so they are part of snapshots).

Snapshots are ``numpy.savez`` bytes (JSON metadata + each tree's own snapshot), no pickle.

Moving trees between nodes (a node lost for good, ``Deployment.lose_node``): every tree records
the last batch ``seq`` it applied (``tree_seq``, part of snapshots), ``add_trees(specs,
snapshot)`` adopts trees restored from another node's snapshot, and ``ingest(..., trees=)``
replays batches to those trees only.  A tree skips a batch whose ``seq`` it already applied,
so a batch that reaches a tree both by replay and by the live feed counts once.  A node added
to a running deployment (``Deployment.add_node``) takes trees the same way, and their old hosts
``drop_trees`` them.
"""

from __future__ import annotations

import io
import json
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from executors import ExecutionTree
from executors.aggregates import get_aggregate
from executors.base import extensions, register
from executors.slice_input import SliceBatch, SlicedExecutionTree, check_slice_edges
from executors.slicing import edge_classes
from executors.tree import fits, normalize_technique

INPUT_MODES = ("tuples", "slices")

ANSWER_SCHEMA_INT = pa.schema(
    [
        ("query_id", pa.string()),
        ("window_start", pa.int64()),
        ("window_end", pa.int64()),
        ("value", pa.int64()),
    ]
)
ANSWER_SCHEMA_FLOAT = ANSWER_SCHEMA_INT.set(3, pa.field("value", pa.float64()))


def _as_table(batch) -> pa.Table | pa.RecordBatch:
    if isinstance(batch, (pa.Table, pa.RecordBatch)):
        return batch
    if isinstance(batch, dict):
        return pa.table(batch)
    raise TypeError(
        f"ingest expects a pyarrow RecordBatch/Table or a dict of columns, "
        f"got {type(batch).__name__}"
    )


def _column(batch, name: str) -> np.ndarray:
    col = batch.column(name)
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if col.null_count:
        raise ValueError(f"column {name!r} contains nulls; streams must be non-null")
    return col.to_numpy(zero_copy_only=False)


def pick_technique(technique: str, aggregates: Iterable[str]) -> str:
    """The executor technique for one tree.

    A plan's ``ie`` is one name for all trees; ``slickdeque_inv``/``panes_inv`` only run
    invertible aggregates and ``slickdeque_noninv`` only selective ones.  Where the plan's
    technique cannot run a tree's aggregate we fall back to ``slickdeque`` (which picks Inv or
    Non-Inv per primitive) rather than refusing a valid plan; the choice is in ``metrics()``.
    """
    t = normalize_technique(technique)
    return t if fits(t, [get_aggregate(a) for a in set(aggregates)]) else "slickdeque"


class NodeCore:
    """The state of one plan node: its trees, grouped by stream, plus counters.

    ``trees``: ``[{"id": "t0", "stream": "mf01", "queries": [query dicts]}, ...]`` where each
    query dict has ``id, aggregate, range, slide, kind``; an optional ``"slicing"`` (``"pairs"``
    default, or ``"cutty"``) is the executor tree's slicing, in both input modes (a slice-fed
    Cutty tree folds the incoming slices, cut at Pairs edges, into its Cutty slices).

    ``input_mode``: ``"tuples"`` (raw mode: batches of ``ts_ms`` + stream columns) or
    ``"slices"`` (sliced mode: per-stream batches of pre-aggregated slices, the columns of
    ``executors.slice_input.SLICE_COLUMNS``, fed to ``SlicedExecutionTree`` s; time windows
    only).  ``ingest`` tells the two apart by the ``slice_start`` column and refuses the wrong one.
    """

    def __init__(
        self,
        node_id: str,
        trees: list[dict[str, Any]],
        technique: str = "slickdeque",
        allowed_lateness: int = 0,
        input_mode: str = "tuples",
        count_ops: bool = False,
        executors: dict[str, type] | None = None,
    ):
        for cls in (executors or {}).values():  # extensions from the driver (shipped_executors)
            register(cls)
        if input_mode not in INPUT_MODES:
            raise ValueError(f"input_mode must be one of {INPUT_MODES}, got {input_mode!r}")
        self.node_id = str(node_id)
        self.input_mode = input_mode
        self.spec = {
            "node_id": self.node_id,
            "trees": [],
            "technique": technique,
            "allowed_lateness": int(allowed_lateness),
            "input_mode": input_mode,
            "count_ops": bool(count_ops),
        }
        self.trees: dict[str, ExecutionTree] = {}
        self._ranks = None  # (query ids sorted, {tree id: rank of each of its queries})
        self._union_classes: dict[tuple, list] = {}  # slices mode: trees -> union of edges
        self.tree_stream: dict[str, str] = {}
        self.tree_technique: dict[str, str] = {}
        self.tree_seq: dict[str, int] = {}
        self.by_stream: dict[str, list[str]] = {}
        self.stream_tuples: dict[str, int] = {}
        self.stream_slices: dict[str, int] = {}  # slices mode: slice rows taken per stream
        for t in trees:
            self._host(t)
            self.spec["trees"].append(t)
        # answers since the last drain: (tree id, (qidx, window_start, window_end, value))
        self._pending: list[tuple[str, tuple]] = []
        self.last_seq = -1
        self.counters = {
            "batches": 0,
            "tuples": 0,
            "tree_tuples": 0,
            "answers": 0,
            "busy_s": 0.0,
            "slices_in": 0,
            "tree_slices": 0,
            "replayed_batches": 0,
            "compile_s": 0.0,
        }
        # one-off kernel loading (numba compile or cache load) per (tree, data kind), done
        # before a batch's busy timer starts and counted in ``compile_s``, never in ``busy_s``
        self._warm_tids: set[tuple[str, str]] = set()
        self._warm_keys: set[tuple] = set()

    @property
    def _tree_cls(self):
        return SlicedExecutionTree if self.input_mode == "slices" else ExecutionTree

    def _host(self, t: dict[str, Any], tree=None, seq: int = -1) -> str:
        """Add one tree (``tree``: an already restored executor tree; else a fresh one)."""
        tid, stream = str(t["id"]), str(t["stream"])
        if tid in self.trees:
            raise ValueError(f"node {self.node_id}: duplicate tree id {tid!r}")
        tech = pick_technique(self.spec["technique"], [q["aggregate"] for q in t["queries"]])
        if tree is None:
            tree = self._tree_cls(
                t["queries"],
                technique=tech,
                allowed_lateness=self.spec["allowed_lateness"],
                count_ops=self.spec["count_ops"],
                slicing=t.get("slicing", "pairs"),
            )
        self.trees[tid] = tree
        self.tree_stream[tid] = stream
        self.tree_technique[tid] = tree.technique
        self.tree_seq[tid] = int(seq)
        ids = self.by_stream.setdefault(stream, [])
        ids.append(tid)
        ids.sort()
        self.stream_tuples.setdefault(stream, 0)
        self.stream_slices.setdefault(stream, 0)
        self._ranks = None
        return tid

    # -- streaming --------------------------------------------------------------------------
    @property
    def streams(self) -> list[str]:
        return sorted(self.by_stream)

    def ingest(
        self, stream: str | None, batch, seq: int | None = None, trees: Iterable[str] | None = None
    ) -> int:
        """Feed one batch to the trees on ``stream`` (``None``: every hosted stream present).

        ``seq`` (optional, increasing) records the last batch applied, per node and per tree;
        it is stored in snapshots so the driver knows which batches to replay after a restore,
        and a tree skips a ``seq`` it already applied (replays are then idempotent).
        ``trees``: only these trees (a replay to trees adopted from a lost node).  Returns the
        number of answers this call produced (the answers themselves stay here until drained).
        """
        self._warm_for(_as_table(batch), trees)
        t0 = time.perf_counter()
        raw = batch
        batch = _as_table(batch)
        names = set(batch.schema.names)
        if ("slice_start" in names) != (self.input_mode == "slices"):
            raise ValueError(
                f"node {self.node_id} (input_mode {self.input_mode!r}) got a "
                f"{'slice' if 'slice_start' in names else 'tuple'} batch"
            )
        only = None if trees is None else set(trees)
        if self.input_mode == "slices":
            return self._ingest_slices(stream, batch, seq, t0, only)
        if stream is None:
            streams = [s for s in self.streams if s in names]
        else:
            if stream not in names:
                raise KeyError(
                    f"node {self.node_id}: batch has no column {stream!r} "
                    f"(columns: {sorted(names)})"
                )
            streams = [stream] if stream in self.by_stream else []
        produced = 0
        if streams and batch.num_rows:
            if "ts_ms" not in names:
                raise KeyError(f"node {self.node_id}: batch has no 'ts_ms' column")
            ts = _column(batch, "ts_ms").astype(np.int64, copy=False)
            # once per batch rather than once per tree: whether event time is in order, and
            # whether the arrays are immutable (Arrow buffers: trees may keep views of them)
            in_order = ts.shape[0] < 2 or bool((ts[1:] >= ts[:-1]).all())
            copy = not isinstance(raw, (pa.Table, pa.RecordBatch))
            for s in streams:
                tids = self._targets(s, seq, only)
                if not tids:
                    continue
                v = _column(batch, s)
                for tid in tids:
                    out = self.trees[tid].process_columns(ts, v, in_order=in_order, copy=copy)
                    produced += self._keep(tid, out)
                    self.counters["tree_tuples"] += batch.num_rows
                if only is None:
                    self.stream_tuples[s] += batch.num_rows
        self._count_batch(batch.num_rows, only is not None)
        self.counters["answers"] += produced
        if seq is not None:
            self.last_seq = max(self.last_seq, int(seq))
        self.counters["busy_s"] += time.perf_counter() - t0
        return produced

    def _warm_for(self, batch, only: Iterable[str] | None) -> None:
        """Warm the kernels the trees this batch reaches need for its data kind (int or float
        values; slices: int), unless done already: the first batch's ``busy_s`` would otherwise
        hold seconds of numba compiling (issue 11, item 7)."""
        names = batch.schema.names
        todo = []
        for s, tids in self.by_stream.items():
            if self.input_mode == "tuples" and s not in names:
                continue
            kind = "i"
            if self.input_mode == "tuples" and pa.types.is_floating(batch.schema.field(s).type):
                kind = "f"
            todo += [
                (tid, kind)
                for tid in tids
                if (tid, kind) not in self._warm_tids and (only is None or tid in only)
            ]
        if todo:
            self.warmup(todo)

    def _keep(self, tid: str, cols) -> int:
        """Keep a tree's answer columns until the next drain; returns their number."""
        if cols is None or cols[0].shape[0] == 0:
            return 0
        self._pending.append((tid, cols))
        return int(cols[0].shape[0])

    def _count_batch(self, tuples: int, replay: bool) -> None:
        """``batches``/``tuples`` count the node's own input; a replay to adopted trees counts
        in ``replayed_batches`` (its work shows in ``tree_tuples``, ``busy_s``)."""
        if replay:
            self.counters["replayed_batches"] = self.counters.get("replayed_batches", 0) + 1
        else:
            self.counters["batches"] += 1
            self.counters["tuples"] += tuples

    def _targets(self, stream: str, seq: int | None, only: set[str] | None) -> list[str]:
        """The trees on ``stream`` that take batch ``seq`` (marked as applied): in ``only`` if
        given, and not already past ``seq``."""
        tids = [
            tid
            for tid in self.by_stream.get(stream, ())
            if (only is None or tid in only) and (seq is None or self.tree_seq[tid] < seq)
        ]
        if seq is not None:
            for tid in tids:
                self.tree_seq[tid] = int(seq)
        return tids

    def _ingest_slices(
        self, stream: str | None, batch, seq, t0: float, only: set[str] | None = None
    ) -> int:
        """One stream's pre-aggregated slices to every tree on that stream.  ``tuples``
        counts the tuples the slices stand for; ``slices_in`` the slice rows."""
        if stream is None:
            raise ValueError("slice batches belong to one stream: pass stream=")
        produced = 0
        n = batch.num_rows
        tids = self._targets(stream, seq, only) if n else []
        if tids:
            cnt = int(pc.sum(batch.column("count")).as_py() or 0)
            # once per batch for all trees: the record array, and the edge check against the
            # union of the trees' edges (a slice inside it is inside every tree's)
            sb = SliceBatch.of(batch)
            key = tuple(tids)
            if key not in self._union_classes:
                self._union_classes[key] = edge_classes(
                    sorted({rs for tid in tids for rs in self.trees[tid].slicer.rs})
                )
            check_slice_edges(
                self._union_classes[key],
                sb.start,
                sb.end,
                sb.ts,
                f"a tree of node {self.node_id} on {stream!r}",
            )
            for tid in tids:
                out = self.trees[tid].process_slice_batch(sb, edges_checked=True)
                produced += self._keep(tid, out)
                self.counters["tree_tuples"] += cnt
                self.counters["tree_slices"] += n
            if only is None:
                self.stream_tuples[stream] += cnt
                self.stream_slices[stream] += n
                self.counters["slices_in"] += n
        self._count_batch(cnt if tids else 0, only is not None)
        self.counters["answers"] += produced
        if seq is not None:
            self.last_seq = max(self.last_seq, int(seq))
        self.counters["busy_s"] += time.perf_counter() - t0
        return produced

    def flush(self, trees: Iterable[str] | None = None) -> int:
        """End of input on every tree (or on ``trees`` only, e.g. trees adopted after this
        node was flushed): emit all pending windows (kept until drained)."""
        t0 = time.perf_counter()
        produced = 0
        for tid in sorted(self.trees if trees is None else set(trees)):
            produced += self._keep(tid, self.trees[tid].flush_columns())
        self.counters["answers"] += produced
        self.counters["busy_s"] += time.perf_counter() - t0
        return produced

    def drain(self) -> pa.Table:
        """Hand over (and forget) the answers produced since the last drain/checkpoint, sorted
        by ``(query_id, window_start)``.

        int64 and float64 value columns are unified to float64 only when both occur; the
        driver does the same across nodes.  (The driver takes them as ``drain_blocks``.)
        """
        return self.drain_blocks().table()

    def drain_blocks(self) -> AnswerBlocks:
        """``drain`` as ``AnswerBlocks``: the answers as one block per query, in query id
        order, each block's windows in order.

        Why blocks: the driver then merges the nodes' answers block by block
        (``merge_blocks``) instead of sorting millions of rows by a string key on one core,
        and only ``window_start`` and ``value`` travel (query id and range per block give the
        rest): 16 bytes per answer instead of ~33.  The grouping is cheap: a tree emits each
        query's answers in window order, so per tree a stable sort by query (a radix sort on
        small ints) is enough (checked, with a full sort as fallback).
        """
        parts, self._pending = self._pending, []
        if not parts:
            return AnswerBlocks.empty()
        ids, ranks = self._query_ranks()
        by_tree: dict[str, list] = {}
        for tid, c in parts:
            by_tree.setdefault(tid, []).append(c)
        blocks = []
        for tid, cs in by_tree.items():
            q, st, va = (
                np.concatenate([c[i] for c in cs]) if len(cs) > 1 else cs[0][i] for i in (0, 1, 3)
            )
            tree = self.trees[tid]
            nq = len(tree.queries)
            if nq > 1:
                o = np.argsort(q.astype(np.uint16) if nq <= 1 << 16 else q, kind="stable")
                q, st, va = q[o], st[o], va[o]
            cnt = np.bincount(q, minlength=nq)
            off = np.concatenate([[0], np.cumsum(cnt)])
            if st.shape[0] > 1:
                inc = st[1:] > st[:-1]
                cut = off[1:-1]
                inc[cut[(cut > 0) & (cut < st.shape[0])] - 1] = True  # block boundaries
                if not bool(inc.all()):  # not expected: a query's answers out of window order
                    o = np.lexsort((st, q))
                    q, st, va = q[o], st[o], va[o]
            r = ranks[tid]
            blocks += [
                (int(r[i]), tree.queries[i].range, st[off[i] : off[i + 1]], va[off[i] : off[i + 1]])
                for i in np.flatnonzero(cnt)
            ]
        blocks.sort(key=lambda b: b[0])
        return AnswerBlocks(
            [ids[b[0]] for b in blocks],
            [b[1] for b in blocks],
            [b[2] for b in blocks],
            [b[3] for b in blocks],
        )

    def _query_ranks(self):
        """(query ids of every hosted tree, sorted; per tree: the rank of each of its queries
        in that order)."""
        if self._ranks is None:
            # a query handed from one tree to another (cluster.service re-weaving) is in both
            qids = sorted({q.id for t in self.trees.values() for q in t.queries})
            pos = {q: i for i, q in enumerate(qids)}
            dt = np.uint16 if len(qids) <= 1 << 16 else np.uint32
            ranks = {
                tid: np.array([pos[q.id] for q in t.queries], dtype=dt)
                for tid, t in self.trees.items()
            }
            self._ranks = (qids, ranks)
        return self._ranks

    def late(self, since: dict[str, int] | None = None) -> pa.Table:
        """Late tuples per tree (cumulative): node_id, tree_id, stream, ts_ms, value.

        ``since`` (tree id -> count) skips each tree's first ``count`` late tuples, so a
        driver writing late tuples as they come fetches only the new ones (a tree's late
        tuples only ever grow, in arrival order, and are part of its snapshots)."""
        rows = []
        for tid in sorted(self.trees):
            lt = self.trees[tid].late
            k = int((since or {}).get(tid, 0))
            if lt.count > k:
                ts, vals = lt.ts[k:], lt.values[k:]
                n = ts.shape[0]
                rows.append(
                    pa.table(
                        {
                            "node_id": pa.array([self.node_id] * n, pa.string()),
                            "tree_id": pa.array([tid] * n, pa.string()),
                            "stream": pa.array([self.tree_stream[tid]] * n, pa.string()),
                            "ts_ms": pa.array(ts, pa.int64()),
                            "value": pa.array(vals.astype(np.float64), pa.float64()),
                        }
                    )
                )
        return pa.concat_tables(rows) if rows else empty_late()

    def metrics(self) -> dict[str, Any]:
        """Counters for this node.  Queue depth is known only to the driver (in-flight calls);
        ``Deployment.metrics()`` adds it."""
        late = sum(t.late.count for t in self.trees.values())
        return {
            "node_id": self.node_id,
            **self.counters,
            "late_tuples": int(late),
            "pending_answers": int(sum(c[0].shape[0] for _, c in self._pending)),
            "last_seq": self.last_seq,
            "stream_tuples": dict(self.stream_tuples),
            "stream_slices": dict(self.stream_slices),
            "trees": {
                tid: {
                    "stream": self.tree_stream[tid],
                    "technique": self.tree_technique[tid],
                    "slicing": t.slicing,
                    "queries": len(t.queries),
                    **_plain(t.stats()),
                    **(_ops(t) if t.count_ops else {}),
                }
                for tid, t in sorted(self.trees.items())
            },
        }

    # -- checkpoints ------------------------------------------------------------------------
    def snapshot(self) -> bytes:
        """All trees' state + counters + ``last_seq`` + per-tree ``tree_seq``.  Undrained
        answers are *not* included: use ``checkpoint()`` to take answers and snapshot at the
        same point."""
        meta = {
            "version": 1,
            "spec": self.spec,
            "last_seq": self.last_seq,
            "counters": self.counters,
            "stream_tuples": self.stream_tuples,
            "stream_slices": self.stream_slices,
            "trees": sorted(self.trees),
            "tree_seq": self.tree_seq,
        }
        arrays = {"meta": np.frombuffer(json.dumps(meta).encode(), np.uint8)}
        for tid in sorted(self.trees):
            arrays[f"tree/{tid}"] = np.frombuffer(self.trees[tid].snapshot(), np.uint8)
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        return buf.getvalue()

    def checkpoint(self) -> tuple[bytes, pa.Table, int]:
        """``(snapshot, answers since the previous drain, last_seq)`` taken atomically (an actor
        runs one call at a time)."""
        return self.snapshot(), self.drain(), self.last_seq

    def checkpoint_blocks(self) -> tuple[bytes, AnswerBlocks, int]:
        """``checkpoint`` with the answers as ``AnswerBlocks`` (what the driver takes)."""
        return self.snapshot(), self.drain_blocks(), self.last_seq

    def restore(self, data: bytes) -> int:
        """Replace this node's state by a snapshot (of a node with the same spec); returns the
        snapshot's ``last_seq`` so the caller can replay the batches after it."""
        arrays, meta = _load_snapshot(data)
        if sorted(meta["trees"]) != sorted(self.trees):
            raise ValueError(
                f"snapshot of node {meta['spec']['node_id']!r} has trees "
                f"{meta['trees']}, this node has {sorted(self.trees)}"
            )
        seqs = meta.get("tree_seq") or {}
        for tid in self.trees:
            self.trees[tid] = self._tree_cls.restore(arrays[f"tree/{tid}"].tobytes())
            self.tree_seq[tid] = int(seqs.get(tid, meta["last_seq"]))
        self._ranks = None
        self.last_seq = int(meta["last_seq"])
        self.counters = dict(meta["counters"])
        self.stream_tuples = dict(meta["stream_tuples"])
        self.stream_slices = {s: 0 for s in self.by_stream}
        self.stream_slices.update(meta.get("stream_slices") or {})
        self._pending = []
        return self.last_seq

    def add_trees(
        self, trees: list[dict[str, Any]], snapshot: bytes | None = None
    ) -> dict[str, int]:
        """Host more trees: fresh (``snapshot=None``: the initial state), or restored from a
        snapshot of another node that holds them (a lost node's last checkpoint).  Returns each
        added tree's ``tree_seq``: the batches after it must be replayed to it (``ingest(...,
        trees=)``).  Nothing is added if any tree is refused."""
        arrays, meta = _load_snapshot(snapshot) if snapshot is not None else ({}, {})
        if meta and meta["spec"].get("input_mode", "tuples") != self.input_mode:
            raise ValueError(
                f"node {self.node_id} (input_mode {self.input_mode!r}) cannot adopt "
                f"trees of a {meta['spec'].get('input_mode')!r} node"
            )
        seqs = meta.get("tree_seq") or {}
        staged = []
        for t in trees:
            tid = str(t["id"])
            if tid in self.trees or any(tid == x[0]["id"] for x in staged):
                raise ValueError(f"node {self.node_id}: already hosts a tree {tid!r}")
            tree, seq = None, -1
            if snapshot is not None:
                key = f"tree/{tid}"
                if key not in arrays:
                    raise ValueError(
                        f"snapshot of node {meta['spec']['node_id']!r} has no tree "
                        f"{tid!r} (trees: {meta['trees']})"
                    )
                tree = self._tree_cls.restore(arrays[key].tobytes())
                want = sorted(str(q["id"]) for q in t["queries"])
                if sorted(q.id for q in tree.queries) != want:
                    raise ValueError(
                        f"tree {tid!r} in the snapshot answers "
                        f"{sorted(q.id for q in tree.queries)}, expected {want}"
                    )
                seq = int(seqs.get(tid, meta["last_seq"]))
            staged.append(({**t, "id": tid}, tree, seq))
        for t, tree, seq in staged:
            self._host(t, tree, seq)
            self.spec["trees"].append(t)
        return {t["id"]: seq for t, _, seq in staged}

    def drop_trees(self, trees: Iterable[str]) -> int:
        """Stop hosting ``trees`` (they moved to another node, restored there from a snapshot
        of this one: ``Deployment.add_node``).  Refused if a tree is unknown or has answers not
        yet drained (they would be lost: the driver drops trees right after a checkpoint).
        Their late tuples go with them (they are in the snapshot).  Returns how many."""
        ids = [str(t) for t in trees]
        unknown = sorted(set(ids) - set(self.trees))
        if unknown:
            raise ValueError(f"node {self.node_id}: no tree(s) {unknown} to drop")
        gone = set(ids)
        pending = sorted({tid for tid, _ in self._pending if tid in gone})
        if pending:
            raise ValueError(f"node {self.node_id}: tree(s) {pending} have undrained answers")
        for tid in gone:
            del self.trees[tid]
            stream = self.tree_stream.pop(tid)
            self.tree_technique.pop(tid, None)
            self.tree_seq.pop(tid, None)
            self.by_stream[stream].remove(tid)
            if not self.by_stream[stream]:
                del self.by_stream[stream]
        self.spec["trees"] = [t for t in self.spec["trees"] if str(t["id"]) not in gone]
        self._ranks = None
        self._union_classes = {}
        return len(gone)

    @classmethod
    def from_snapshot(cls, data: bytes) -> NodeCore:
        s = _load_snapshot(data)[1]["spec"]
        node = cls(
            s["node_id"],
            s["trees"],
            s["technique"],
            s["allowed_lateness"],
            s.get("input_mode", "tuples"),
            s.get("count_ops", False),
        )
        node.restore(data)
        return node

    def ping(self) -> str:
        return self.node_id

    def warmup(self, which: Iterable[tuple[str, str]] | None = None) -> float:
        """Load the numba kernels this node's trees use (from the on-disk cache, or compile
        them) by running throwaway copies of the trees on a little synthetic data, and
        pyarrow's lazy imports, so that no batch's ``busy_s`` pays it.  ``which``: (tree id,
        ``"i"`` or ``"f"`` for int or float values) pairs, default every tree with int data;
        a kernel set already loaded is skipped.  Tree state is untouched; the seconds are
        returned and added to the ``compile_s`` counter (reported apart from ``busy_s``)."""
        t0 = time.perf_counter()
        if not self._warm_keys:
            empty_late()  # pyarrow imports pandas on the first table built (~0.3 s)
        tree_cls = SlicedExecutionTree if self.input_mode == "slices" else ExecutionTree
        if which is None:
            which = [(tid, "i") for tid in self.trees]
        for tid, kind in which:
            self._warm_tids.add((tid, kind))
            t = self.trees[tid]
            key = (
                self.tree_technique[tid],
                t.slicing,
                t.count_ops,
                kind,
                tuple(sorted(str(p) for p in _prims_of(t.queries))),
            )
            if key in self._warm_keys:
                continue
            self._warm_keys.add(key)
            qs = [q.as_dict() for q in t.queries]
            tmp = tree_cls(
                qs, technique=self.tree_technique[tid], count_ops=t.count_ops, slicing=t.slicing
            )
            mr = max(q["range"] for q in qs)
            ts = np.arange(0, 3 * mr, max(1, mr // 32), dtype=np.int64)
            v = (ts % 7).astype(np.float64 if kind == "f" else np.int64)
            if self.input_mode == "slices":
                from executors.slice_input import slice_aggregates

                tmp.process_slices(slice_aggregates(ts, v, tmp.slicer.classes))
            else:
                tmp.process(ts, v)
            tmp.flush()
        dt = time.perf_counter() - t0
        self.counters["compile_s"] = self.counters.get("compile_s", 0.0) + dt
        return dt


def _load_snapshot(data: bytes) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(arrays, meta) of a node snapshot."""
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(arrays["meta"].tobytes().decode())
    if meta.get("version") != 1:
        raise ValueError(f"unsupported node snapshot version {meta.get('version')!r}")
    return arrays, meta


def _prims_of(queries) -> set:
    return {p for q in queries for p in q.aggregate.primitives(True)}


def _ops(tree) -> dict:
    """Final-aggregation operation counts of a tree built with ``count_ops`` (the cost
    model's ``E_t * Omega_t`` part, summed over time; DESIGN.md s. 3)."""
    oc = tree.op_counts()
    return {"final_ops": int(oc["total"]), "omega": float(oc["omega"])}


def _plain(d: dict) -> dict:
    return {k: (v.item() if isinstance(v, np.generic) else v) for k, v in d.items()}


def empty_answers(int_values: bool = True) -> pa.Table:
    return (ANSWER_SCHEMA_INT if int_values else ANSWER_SCHEMA_FLOAT).empty_table()


def empty_late() -> pa.Table:
    return pa.schema(
        [
            ("node_id", pa.string()),
            ("tree_id", pa.string()),
            ("stream", pa.string()),
            ("ts_ms", pa.int64()),
            ("value", pa.float64()),
        ]
    ).empty_table()


class AnswerBlocks:
    """Answers as one block per query: ``qids[i]`` (strictly increasing), the query's range
    ``ranges[i]`` and numpy arrays ``starts[i]`` (window starts, increasing) and ``values[i]``
    (int64 or float64); ``window_end = window_start + range``.  ``table()`` gives the answer
    table sorted by ``(query_id, window_start)``.  What a node hands to the driver."""

    __slots__ = ("qids", "ranges", "starts", "values")

    def __init__(self, qids, ranges, starts, values):
        self.qids, self.ranges, self.starts, self.values = qids, ranges, starts, values

    @classmethod
    def empty(cls) -> AnswerBlocks:
        return cls([], [], [], [])

    @property
    def num_rows(self) -> int:
        return int(sum(x.shape[0] for x in self.starts))

    def table(self) -> pa.Table:
        return _blocks_table([(self, i) for i in range(len(self.qids))])


#: threads filling the merged answer columns (the copies release the GIL; on this machine
#: writing fresh memory, ~0.6 GB/s per thread, bounds a merge of ~13 M answers)
MERGE_THREADS = 4
#: fewer rows than this are filled by one thread
MERGE_THREADED_ROWS = 1 << 20


def _blocks_table(order: list[tuple[AnswerBlocks, int]]) -> pa.Table:
    """The answer table of these blocks, in this order.  value is int64 if every block is,
    else float64 (int values beyond 2^53 refused, as Arrow's checked cast does).

    The columns (query id strings from their buffers: a ``take`` of 13 M rows cost ~0.4 s,
    ``np.repeat`` with counts as much) are allocated once and filled block by block, block
    ranges in parallel threads."""
    if not order:
        return empty_answers(True)
    starts = [p.starts[i] for p, i in order]
    values = [p.values[i] for p, i in order]
    ranges = [p.ranges[i] for p, i in order]
    raw = [p.qids[i].encode() for p, i in order]
    counts = np.array([x.shape[0] for x in starts], dtype=np.int64)
    bounds = np.concatenate([[0], np.cumsum(counts)])
    n = int(bounds[-1])
    lens = np.array([len(x) for x in raw], dtype=np.int64)
    pos = np.concatenate([[0], np.cumsum(lens * counts)])
    if all(v.dtype == np.int64 for v in values):
        vt, vdt = pa.int64(), np.int64
    else:
        ints = [v for v in values if v.dtype == np.int64]
        iv = np.concatenate(ints) if ints else np.zeros(0, np.int64)
        if iv.shape[0] and (int(iv.max()) > 1 << 53 or int(iv.min()) < -(1 << 53)):
            pa.array(iv).cast(pa.float64())  # raises ArrowInvalid, naming the value
        vt, vdt = pa.float64(), np.float64
    if int(pos[-1]) >= 1 << 31:  # beyond 32-bit string offsets: not expected
        big = pa.table(
            {
                "query_id": pa.array([x.decode() for x in raw]).take(
                    pa.array(np.repeat(np.arange(len(raw)), counts))
                ),
                "window_start": pa.array(np.concatenate(starts)),
                "window_end": pa.array(np.concatenate([s + r for s, r in zip(starts, ranges)])),
                "value": pa.array(np.concatenate(values).astype(vdt)),
            }
        )
        return big
    start = np.empty(n, dtype=np.int64)
    end = np.empty(n, dtype=np.int64)
    value = np.empty(n, dtype=vdt)
    offsets = np.empty(n + 1, dtype=np.int32)
    offsets[0] = 0
    data = np.empty(int(pos[-1]), dtype=np.uint8)
    bl, bp = bounds.tolist(), pos.tolist()

    def fill(lo: int, hi: int) -> None:
        for j in range(lo, hi):
            a, z, c, k, q = bl[j], bl[j + 1], bl[j + 1] - bl[j], len(raw[j]), bp[j]
            start[a:z] = starts[j]
            np.add(starts[j], ranges[j], out=end[a:z])
            value[a:z] = values[j]
            if k:
                data[q : q + k * c].reshape(c, k)[:] = np.frombuffer(raw[j], np.uint8)
                offsets[a + 1 : z + 1] = np.arange(q + k, q + k * c + 1, k)
            else:
                offsets[a + 1 : z + 1] = q

    # block ranges of about equal rows
    cuts = np.searchsorted(bounds, np.linspace(0, n, MERGE_THREADS + 1)).tolist()
    cuts[0], cuts[-1] = 0, len(order)
    jobs = [(x, y) for x, y in zip(cuts, cuts[1:]) if y > x]
    if len(jobs) > 1 and n >= MERGE_THREADED_ROWS:
        with ThreadPoolExecutor(len(jobs)) as ex:
            list(ex.map(lambda j: fill(*j), jobs))
    else:
        fill(0, len(order))
    qid = pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    return pa.table(
        {
            "query_id": qid,
            "window_start": pa.array(start, pa.int64()),
            "window_end": pa.array(end, pa.int64()),
            "value": pa.array(value, vt),
        }
    )


def merge_blocks(parts: list[AnswerBlocks]) -> pa.Table:
    """The answers of several ``AnswerBlocks`` (nodes, checkpoints) as one table sorted by
    ``(query_id, window_start)``: the blocks are ordered by (query id, first window start),
    a sort of a few thousand blocks instead of millions of rows.  Blocks of one query from
    different parts (a tree's answers before and after a checkpoint) must not overlap in
    time; if they do (not expected), the rows are sorted in full."""
    order = [(p, i) for p in parts for i in range(len(p.qids)) if p.starts[i].shape[0]]
    order.sort(key=lambda b: (b[0].qids[b[1]], int(b[0].starts[b[1]][0])))
    for (p, i), (q, j) in zip(order, order[1:]):
        if p.qids[i] == q.qids[j] and int(p.starts[i][-1]) >= int(q.starts[j][0]):
            return _blocks_table(order).sort_by(
                [("query_id", "ascending"), ("window_start", "ascending")]
            )
    return _blocks_table(order)


def concat_answers(parts: list[pa.Table]) -> pa.Table:
    """Concatenate answer tables; value is int64 if every part is int64, else float64
    (int64 answers beyond 2^53 then lose precision: keep such trees in int-only runs)."""
    parts = [p for p in parts if p is not None]
    if not parts:
        return empty_answers(True)
    all_int = all(pa.types.is_integer(p.schema.field("value").type) for p in parts)
    schema = ANSWER_SCHEMA_INT if all_int else ANSWER_SCHEMA_FLOAT
    return pa.concat_tables([p.select(schema.names).cast(schema) for p in parts])


def shipped_executors() -> dict[str, type]:
    """The executors registered outside ``executors`` (``executors.base.extensions``), for a
    node actor's constructor: Ray pickles them by value, so their module need not be
    importable in the actor's process."""
    ext = extensions()
    if ext:
        from ray import cloudpickle

        for cls in ext.values():
            cloudpickle.register_pickle_by_value(sys.modules[cls.__module__])
    return ext


class _ActorCore(NodeCore):
    """NodeCore plus what only makes sense inside a Ray actor."""

    def ray_node_id(self) -> str:
        """The Ray node this actor runs on (hex id): checks node pinning."""
        import ray

        return ray.get_runtime_context().get_node_id()


def _make_actor():
    import ray

    # num_cpus=0: the actor does not reserve a CPU slot, so a 2-CPU local Ray can host a plan
    # with more nodes than cores (they then share the cores, as a simulation should).
    return ray.remote(num_cpus=0, max_restarts=0, max_task_retries=0)(_ActorCore)


class _LazyActor:
    """``NodeActor.remote(...)``/``.options(...)`` without importing Ray at module import."""

    _cls = None

    def __getattr__(self, name):
        if _LazyActor._cls is None:
            _LazyActor._cls = _make_actor()
        return getattr(_LazyActor._cls, name)


NodeActor = _LazyActor()
