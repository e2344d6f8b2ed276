"""One plan node = one Ray actor hosting that node's execution trees.

Why thin: the executor (``executors.ExecutionTree``) does all the window work; the actor only
routes columns to trees, keeps answers until the driver collects them, and reports metrics.
The logic lives in the plain class ``NodeCore`` (testable without Ray); ``actor.NodeActor`` is
the same class wrapped by ``ray.remote``.  Beside it, one concern per module: ``answers``
(``PendingAnswers``: answers kept until drained, as per-query blocks; late tuples as a table),
``piece_inbox`` (``PieceInbox``: the executor route's pushed pieces, let out in order),
``slice_edges`` (sliced mode's edge check), ``snapshot`` (the snapshot byte format),
``warmup`` (kernel loading outside ``busy_s``), ``churn`` (trees that gain and lose queries).
What stays here (~590 lines) is one idea: the node's tree-hosting state (trees by stream,
their applied ``seq``, counters) and the calls that change it (ingest, flush, drain,
checkpoint, restore, adopt, drop), which all read and write that same state; cutting it
further would pass that state around instead of keeping it in one place.

Routing: a query's *stream* is a column name of the input (e.g. ``"mf01"``); every batch carries
``ts_ms`` (int64 event time) plus one or more stream columns.  ``ingest(stream, batch)`` feeds
every tree on ``stream`` with ``(ts_ms, batch[stream])``; ``stream=None`` feeds every hosted
stream whose column is in the batch (one call per batch instead of one per stream: calls cost
~1.6 ms each, docs/DESIGN.md s. 8).  Trees are ordered by id within a stream, so a replay is
deterministic.

Output: answers accumulate in the actor (returning them per call would ship small tables on the
hot path).  ``drain()`` hands them over; ``checkpoint()`` hands them over *together with* a
snapshot taken at the same point, which is what makes recovery exactly-once: the driver commits
the answers up to the snapshot, and a replacement actor restored from it regenerates exactly
the answers after it.  Late tuples live in the trees' state (so they are part of snapshots).

Snapshots are packed arrays (JSON metadata + each tree's own snapshot, ``cluster.node.snapshot``),
no pickle (``snapshot``).

Moving trees between nodes (a node lost for good, ``Deployment.lose_node``): every tree records
the last batch ``seq`` it applied (``tree_seq``, part of snapshots), ``add_trees(specs,
snapshot)`` adopts trees restored from another node's snapshot, and ``ingest(..., trees=)``
replays batches to those trees only.  A tree skips a batch whose ``seq`` it already applied,
so a batch that reaches a tree both by replay and by the live feed counts once.  A node added
to a running deployment (``Deployment.add_node``) takes trees the same way, and their old hosts
``drop_trees`` them.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cluster.answers.blocks import AnswerBlocks
from cluster.answers.sink import WrittenPart, write_part
from cluster.node.answers import PendingAnswers, late_table
from cluster.node.liveness import CallTracker
from cluster.node.piece_inbox import PieceInbox
from cluster.node.piece_order import PieceSource
from cluster.node.slice_edges import SliceEdgeCheck
from cluster.node.snapshot import dump_snapshot, load_snapshot, spec_with_queries, tree_snapshot
from cluster.node.warmup import KernelWarmup
from executors import ExecutionTree
from executors.aggregates import get_aggregate
from executors.base import register
from executors.slice_input import SliceBatch, SlicedExecutionTree
from executors.tree import fits, normalize_technique

INPUT_MODES = ("tuples", "slices")


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
        self.pending = PendingAnswers()  # answers since the last drain
        self.slice_edges = SliceEdgeCheck(self.node_id)  # slices mode: the edge check
        self.tree_stream: dict[str, str] = {}
        self.tree_technique: dict[str, str] = {}
        self.tree_seq: dict[str, int] = {}
        self.by_stream: dict[str, list[str]] = {}
        self.stream_tuples: dict[str, int] = {}
        self.stream_slices: dict[str, int] = {}  # slices mode: slice rows taken per stream
        for t in trees:
            self._host(t)
            self.spec["trees"].append(t)
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
            "answer_s": 0.0,
        }
        # one-off kernel loading (numba compile or cache load) per (tree, data kind), done
        # before a batch's busy timer starts and counted in ``compile_s``, never in ``busy_s``
        self._warm = KernelWarmup(input_mode)
        self.inbox = PieceInbox(self.node_id)  # the executor route's pushed pieces
        #: the data call running now and its progress, for the health check (``liveness``)
        self.calls = CallTracker()
        #: the newest event time (``ts_ms``) this node applied (``None``: none yet)
        self.event_time: int | None = None

    @classmethod
    def tree_class(cls, input_mode: str):
        """The executor tree this kind of node hosts for ``input_mode``."""
        return SlicedExecutionTree if input_mode == "slices" else ExecutionTree

    @property
    def _tree_cls(self):
        return self.tree_class(self.input_mode)

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
        self.pending.trees_changed()
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
        if isinstance(batch, PieceSource):  # a replay on the executor route: read the source
            batch = batch.read()
        todo = self._warm.needed(_as_table(batch), self.by_stream, trees)
        if todo:
            self.warmup(todo)
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
            newest = int(ts[-1] if in_order else ts.max())
            if self.event_time is None or newest > self.event_time:
                self.event_time = newest
            copy = not isinstance(raw, (pa.Table, pa.RecordBatch))
            for s in streams:
                tids = self._targets(s, seq, only)
                if not tids:
                    continue
                v = _column(batch, s)
                for tid in tids:
                    out = self.trees[tid].process_columns(ts, v, in_order=in_order, copy=copy)
                    produced += self.pending.keep(tid, out)
                    self.counters["tree_tuples"] += batch.num_rows
                    self.calls.step()
                if only is None:
                    self.stream_tuples[s] += batch.num_rows
        self._count_batch(batch.num_rows, only is not None)
        self.counters["answers"] += produced
        if seq is not None:
            self.last_seq = max(self.last_seq, int(seq))
        self.counters["busy_s"] += time.perf_counter() - t0
        return produced

    # -- the executor route: Spark tasks push pieces of the input (cluster.feeds.executors)
    def begin_pieces(
        self, base_seq: int, max_ahead: int = 4, first_piece: int = 0, epoch: int = 0
    ) -> None:
        """Start taking pushed pieces ``first_piece, ...`` (``PieceInbox``): sub-batch ``j`` of
        piece ``p`` is batch ``base_seq + p * SUBS_PER_PIECE + j``.  ``epoch`` numbers the
        feed's attempts: a task of an earlier, failed attempt may still be pushing (Spark
        cancels tasks lazily) and its sub-batches may carry other columns than this attempt's
        (trees moved meanwhile), so they are dropped."""
        self.inbox.begin(base_seq, max_ahead, first_piece, epoch)

    def piece_window(self, piece: int, epoch: int = 0) -> bool:
        """Whether ``piece`` may be pushed now (within ``max_ahead`` of the next piece to
        apply); once true it stays true.  Asked before any data is sent."""
        return self.inbox.window(piece, epoch)

    def push_piece(
        self,
        piece: int,
        sub: int,
        last: bool,
        data: bytes,
        epoch: int = 0,
        stream: str | None = None,
        seq_sub: int | None = None,
    ) -> bool:
        """One sub-batch from a Spark task, as Arrow IPC stream bytes (decoded here: the
        arrays live in this process, not in an object owned by the task).  Applied now if
        it is next in piece order, else buffered; ``False``: refused (too far ahead), the
        task offers it again later.  A push of a stale attempt is dropped (``True``)."""
        due = self.inbox.offer(piece, sub, last, data, epoch, stream, seq_sub)
        if due is None:
            return False
        for s, batch, seq in due:
            self.ingest(s, batch, seq)
        return True

    def end_pieces(self, pieces: int) -> dict[str, int]:
        """End of a pushed feed (or segment) up to piece ``pieces``: every piece before it
        must have been applied (else a task's push was lost: ``RuntimeError``)."""
        max_buffered = self.inbox.end(pieces)
        return {"last_seq": self.last_seq, "max_buffered": max_buffered}

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
            self.slice_edges.check(sb, stream, {tid: self.trees[tid] for tid in tids})
            for tid in tids:
                out = self.trees[tid].process_slice_batch(sb, edges_checked=True)
                produced += self.pending.keep(tid, out)
                self.counters["tree_tuples"] += cnt
                self.counters["tree_slices"] += n
                self.calls.step()
            newest = int(pc.max(batch.column("ts_max")).as_py())
            if self.event_time is None or newest > self.event_time:
                self.event_time = newest
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
            produced += self.pending.keep(tid, self.trees[tid].flush_columns())
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
        order, each block's windows in order (why blocks: ``node.answers.answer_blocks``).
        The time it takes is counted in ``answer_s`` (answers handed over), never in
        ``busy_s`` (the trees' own work)."""
        t0 = time.perf_counter()
        blocks = self.pending.take_blocks(self.trees)
        self._count_answer_time(t0)
        return blocks

    def _count_answer_time(self, t0: float) -> None:
        self.counters["answer_s"] = self.counters.get("answer_s", 0.0) + time.perf_counter() - t0

    def late(self, since: dict[str, int] | None = None) -> pa.Table:
        """Late tuples per tree (cumulative): node_id, tree_id, stream, ts_ms, value.

        ``since`` (tree id -> count) skips each tree's first ``count`` late tuples, so a
        driver writing late tuples as they come fetches only the new ones (a tree's late
        tuples only ever grow, in arrival order, and are part of its snapshots)."""
        return late_table(self.node_id, self.trees, self.tree_stream, since)

    def metrics(self) -> dict[str, Any]:
        """Counters for this node.  Queue depth is known only to the driver (in-flight calls);
        ``Deployment.metrics()`` adds it."""
        late = sum(t.late.count for t in self.trees.values())
        return {
            "node_id": self.node_id,
            **self.counters,
            "late_tuples": int(late),
            "pending_answers": self.pending.count(),
            "last_seq": self.last_seq,
            "event_time": self.event_time,
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
            "spec": self.spec,
            "last_seq": self.last_seq,
            "counters": self.counters,
            "stream_tuples": self.stream_tuples,
            "stream_slices": self.stream_slices,
            "trees": sorted(self.trees),
            "tree_seq": self.tree_seq,
            "event_time": self.event_time,
        }
        trees = {}
        for tid, t in self.trees.items():
            trees[tid] = t.snapshot()
            self.calls.step()
        return dump_snapshot(meta, trees)

    def checkpoint(self) -> tuple[bytes, pa.Table, int]:
        """``(snapshot, answers since the previous drain, last_seq)`` taken atomically (an actor
        runs one call at a time)."""
        return self.snapshot(), self.drain(), self.last_seq

    def checkpoint_blocks(self) -> tuple[bytes, AnswerBlocks, int]:
        """``checkpoint`` with the answers as ``AnswerBlocks`` (what the driver takes)."""
        return self.snapshot(), self.drain_blocks(), self.last_seq

    def checkpoint_write(
        self, root: str, part: str, value_type: str | None
    ) -> tuple[bytes, WrittenPart, int]:
        """``checkpoint`` on the actor route: the answers since the previous checkpoint are
        written by this node as ``root/node=<id>/part-<part>.parquet`` (``value_type`` fixes
        the value column's type, one schema for the run); only the part's name, rows and
        bytes go back with the snapshot (the commit protocol: ``cluster.answers.sink``)."""
        blob = self.snapshot()
        return blob, self.write_answers(root, part, value_type), self.last_seq

    def write_answers(self, root: str, part: str, value_type: str | None) -> WrittenPart:
        """Write (and forget) the answers since the previous checkpoint as
        ``root/node=<id>/part-<part>.parquet``, without a snapshot: ``checkpoint_write``
        and the actor route's end (after the last answers nothing is replayed).  The time it
        takes (grouping, the part's columns, Parquet) is counted in ``answer_s``."""
        t0 = time.perf_counter()
        if value_type in ("int64", "float64"):  # the run's type: one pass to the part's columns
            written = self.pending.write_part(self.trees, root, self.node_id, part, value_type)
        else:
            table = self.pending.take_blocks(self.trees).dictionary_table()
            written = write_part(root, self.node_id, part, table)
        self._count_answer_time(t0)
        return written

    def forget_answers(self) -> int:
        """Drop the answers produced since the last hand-over; returns how many.  For a node
        rebuilt after the run's last answers were written (the actor route's end): its replay
        regenerates answers that committed parts already hold, so they must go nowhere."""
        dropped = self.pending.count()
        self.pending.clear()
        return dropped

    def write_late(self, root: str, part: str = "final") -> WrittenPart:
        """Write every late tuple of the hosted trees as ``root/node=<id>/part-<part>.parquet``
        (a tree's late tuples are in its state, so the node hosting it at the end has them
        all, wherever it ran before)."""
        return write_part(root, self.node_id, part, self.late())

    def restore(self, data: bytes) -> int:
        """Replace this node's state by a snapshot (of a node with the same spec); returns the
        snapshot's ``last_seq`` so the caller can replay the batches after it."""
        arrays, meta = load_snapshot(data)
        if sorted(meta["trees"]) != sorted(self.trees):
            raise ValueError(
                f"snapshot of node {meta['spec']['node_id']!r} has trees "
                f"{meta['trees']}, this node has {sorted(self.trees)}"
            )
        seqs = meta.get("tree_seq") or {}
        for tid in self.trees:
            self.trees[tid] = self._tree_cls.restore(tree_snapshot(arrays, tid))
            self.tree_seq[tid] = int(seqs.get(tid, meta["last_seq"]))
            self.calls.step()
        self.pending.trees_changed()
        self.last_seq = int(meta["last_seq"])
        self.event_time = meta.get("event_time")
        self.counters = dict(meta["counters"])
        self.stream_tuples = dict(meta["stream_tuples"])
        self.stream_slices = {s: 0 for s in self.by_stream}
        self.stream_slices.update(meta.get("stream_slices") or {})
        self.pending.clear()
        return self.last_seq

    def add_trees(
        self, trees: list[dict[str, Any]], snapshot: bytes | None = None
    ) -> dict[str, int]:
        """Host more trees: fresh (``snapshot=None``: the initial state), or restored from a
        snapshot of another node that holds them (a lost node's last checkpoint).  Returns each
        added tree's ``tree_seq``: the batches after it must be replayed to it (``ingest(...,
        trees=)``).  Nothing is added if any tree is refused."""
        arrays, meta = load_snapshot(snapshot) if snapshot is not None else ({}, {})
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
                if f"tree/{tid}" not in arrays:
                    raise ValueError(
                        f"snapshot of node {meta['spec']['node_id']!r} has no tree "
                        f"{tid!r} (trees: {meta['trees']})"
                    )
                tree = self._tree_cls.restore(tree_snapshot(arrays, tid))
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
        pending = self.pending.held_by(gone)
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
        self.pending.trees_changed()
        self.slice_edges.reset()
        return len(gone)

    @classmethod
    def from_snapshot(cls, data: bytes) -> NodeCore:
        """A node rebuilt from its snapshot alone (its spec's queries from the trees' own
        snapshots, ``cluster.node.snapshot``)."""
        arrays, meta = load_snapshot(data)

        def queries_of(tid: str) -> list[dict]:
            tree_cls = cls.tree_class(meta["spec"].get("input_mode", "tuples"))
            tree = tree_cls.restore(tree_snapshot(arrays, tid))
            return [q.as_dict() for q in tree.queries]

        s = spec_with_queries(meta, queries_of)
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

    def vitals(self) -> dict[str, Any]:
        """The light counters a status page shows (``metrics`` without the per-tree detail,
        cheap enough for the health check every second): tuples, busy seconds, answers, the
        last batch applied and the newest event time applied."""
        c = self.counters
        return {
            "node_id": self.node_id,
            **{k: c[k] for k in ("batches", "tuples", "tree_tuples", "answers", "busy_s")},
            "last_seq": self.last_seq,
            "event_time": self.event_time,
            "late_tuples": int(sum(t.late.count for t in list(self.trees.values()))),
        }

    def warmup(self, which: Iterable[tuple[str, str]] | None = None) -> float:
        """Load the numba kernels this node's trees use (from the on-disk cache, or compile
        them) by running throwaway copies of the trees on a little synthetic data, and
        pyarrow's lazy imports, so that no batch's ``busy_s`` pays it.  ``which``: (tree id,
        ``"i"`` or ``"f"`` for int or float values) pairs, default every tree with int data;
        a kernel set already loaded is skipped.  Tree state is untouched; the seconds are
        returned and added to the ``compile_s`` counter (reported apart from ``busy_s``)."""
        if which is None:
            which = [(tid, "i") for tid in self.trees]
        with self.calls.compiling():  # no step inside a kernel's compilation
            dt = self._warm.warm(self.trees, self.tree_technique, which, self.calls.step)
        self.counters["compile_s"] = self.counters.get("compile_s", 0.0) + dt
        return dt


def _ops(tree) -> dict:
    """Final-aggregation operation counts of a tree built with ``count_ops`` (the cost
    model's ``E_t * Omega_t`` part, summed over time; docs/DESIGN.md s. 3)."""
    oc = tree.op_counts()
    return {"final_ops": int(oc["total"]), "omega": float(oc["omega"])}


def _plain(d: dict) -> dict:
    return {k: (v.item() if isinstance(v, np.generic) else v) for k, v in d.items()}
