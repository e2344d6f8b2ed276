"""ExecutionTree: run a group of queries over one stream sharing one slicing.

Pipeline per batch: ``StreamSlicer.ingest`` (lateness, pending buffer) ->
``StreamSlicer.close`` (slices whose first window is due, with their partials
and due windows) -> one final aggregator per *primitive* (queries needing the
same primitive share it: count and avg share ``sum 1``) -> ``lower`` per aggregate
-> answers ``query_id, window_start, window_end, value``.

Technique per primitive (``technique=``):

* ``slickdeque`` (default): SlickDeque Inv for sums, SlickDeque Non-Inv for min/max
  (the dissertation's split by invertibility);
* ``slickdeque_inv`` / ``panes_inv``: invertible aggregates only;
* ``slickdeque_noninv``: selective aggregates only (min, max, range);
* ``panes``, ``flatfat``, ``bint``, ``flatfit``: any aggregate, any queries;
* ``panes_inv``, ``twostacks``, ``daba``: one distinct (range, slide) per tree
  (they answer a single window length).

Slicing (``slicing=``): ``pairs`` (default; docs/DESIGN.md s. 2) or ``cutty`` (slices cut at
window starts only, windows ending inside a slice add the open slice's partial:
``executors.cutty``).  Every technique works with both: a lone (range, slide) still has one
length under Cutty (``floor(r/s)`` complete slices).

The ``value`` column is int64 when every query of the tree has an integer answer
(sum/count/min/max/range over integer input), float64 otherwise; a tree mixing
integer sums beyond 2^53 with float aggregates should be split.

One idea, one file (~640 lines): the pipeline above, its checks of which technique fits which
queries, and the two answer paths (table and per-query blocks) that share its state.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from .aggregates import OP_SUM, Aggregate, Primitive, require_invertible, require_selective
from .array_pack import pack, unpack
from .base import FAMILIES, TECHNIQUES, FinalAggregator, register_family, technique_class
from .cutty import CuttySlicer, combine_columns
from .edges import NEG_INF
from .query_spec import QueryColumns, meta_json
from .slicing import QuerySpec, SliceChunk, StreamSlicer, normalize_query

TECHNIQUE_ALIASES = {
    "naive": "panes",
    "soe": "panes_inv",
    "subtract_on_evict": "panes_inv",
    "b-int": "bint",
    "b_int": "bint",
    "slickdeque-inv": "slickdeque_inv",
    "slickdeque-noninv": "slickdeque_noninv",
    "slickdeque_non_inv": "slickdeque_noninv",
    "two_stacks": "twostacks",
}
register_family("slickdeque", lambda p: "slickdeque_inv" if p.op == OP_SUM else "slickdeque_noninv")
SLICINGS = ("pairs", "cutty")


def all_techniques() -> tuple[str, ...]:
    """Every technique an execution tree runs now (families first; registrations included)."""
    return tuple(FAMILIES) + tuple(sorted(TECHNIQUES))


#: the built-in techniques (``all_techniques()`` also lists later registrations)
ALL_TECHNIQUES = all_techniques()
#: the built-in techniques that answer one window length per tree (class flag ``multi_query``)
SINGLE_LENGTH = {t for t, cls in TECHNIQUES.items() if not cls.multi_query}


def fits(technique: str, aggregates: Iterable[Aggregate], windows: Iterable = ()) -> bool:
    """Whether ``technique`` (normalized) runs a tree of these aggregates and distinct
    ``(range, slide)`` windows, by its class flags (a family runs anything)."""
    cls = TECHNIQUES.get(technique)
    if cls is None:
        return True
    aggs = list(aggregates)
    if cls.requires_inverse and not all(a.invertible for a in aggs):
        return False
    if cls.requires_selective and not all(a.selective for a in aggs):
        return False
    return cls.multi_query or len(set(windows)) <= 1


def _check_priced_techniques() -> None:
    """Every technique a plan may be priced with (``placement.cost.TECHNIQUES``, the registry
    config validation reads) runs here, and both sides know the same slicings."""
    from placement.cost import TECHNIQUES as PRICED
    from placement.slicing import SLICINGS as PRICED_SLICINGS

    missing = [t for t in PRICED if t not in ALL_TECHNIQUES]
    if missing or tuple(PRICED_SLICINGS) != SLICINGS:
        raise ImportError(
            f"executors.tree cannot run priced technique(s) {missing} or "
            f"slicings {PRICED_SLICINGS} != {SLICINGS}"
        )


_check_priced_techniques()


@dataclass
class LateTuples:
    """Tuples that arrived after a window containing them was emitted."""

    count: int
    ts: np.ndarray
    values: np.ndarray

    def __len__(self):
        return self.count


class Answers:
    """Columnar answers (``as_arrow=False``)."""

    def __init__(self, query_id, window_start, window_end, value):
        self.query_id = query_id
        self.window_start = window_start
        self.window_end = window_end
        self.value = value

    @property
    def num_rows(self):
        return len(self.window_end)

    def to_pydict(self):
        return {
            "query_id": list(self.query_id),
            "window_start": self.window_start.tolist(),
            "window_end": self.window_end.tolist(),
            "value": self.value.tolist(),
        }


def normalize_technique(t: str) -> str:
    key = str(t).strip().lower()
    key = TECHNIQUE_ALIASES.get(key, key)
    if key not in TECHNIQUES and key not in FAMILIES:
        raise ValueError(f"unknown technique {t!r}; known: {list(all_techniques())}")
    return key


class ExecutionTree:
    """One execution tree: queries over the same stream sharing one slicing.

    ``process(ts, values)`` consumes a batch and returns the answers it made due;
    ``flush()`` ends the input and returns every pending answer; ``late`` holds the
    late tuples; ``snapshot()`` / ``ExecutionTree.restore()`` checkpoint the state.
    """

    #: the partial-aggregation stage (``executors.slice_input`` substitutes a slice-fed one)
    slicer_cls = StreamSlicer
    #: the same under Cutty slicing (a subclass of ``CuttySlicer``)
    cutty_slicer_cls = CuttySlicer

    def __init__(
        self,
        queries,
        technique: str = "slickdeque",
        allowed_lateness: int = 0,
        count_ops: bool = False,
        dtype=None,
        as_arrow: bool = True,
        slicing: str = "pairs",
        columns: QueryColumns | None = None,
    ):
        """``columns``: the ``QueryColumns`` of ``queries``, which are then ``QuerySpec`` s
        with distinct ids (a churn tree's generation, gathered from its lineage's)."""
        if columns is None:
            qs = [normalize_query(q) for q in queries]
            columns = QueryColumns.of(qs)
            if len(set(columns.ids.tolist())) != len(qs):
                raise ValueError(f"duplicate query ids in one tree: {columns.ids.tolist()}")
        else:
            qs = list(queries)
        self.queries: list[QuerySpec] = qs
        slicing = str(slicing).strip().lower()
        if slicing not in SLICINGS:
            raise ValueError(f"unknown slicing {slicing!r}; known: {list(SLICINGS)}")
        self.slicing = slicing
        # the aggregates in the order queries first use them
        self._agg_list = [qs[i].aggregate for i in columns.first_of_each_aggregate()]
        self.technique = normalize_technique(technique)
        self.count_ops = bool(count_ops)
        self.as_arrow = bool(as_arrow)
        self._check_technique()
        is_int = None
        if dtype is not None:
            dt = np.dtype(dtype)
            is_int = bool(np.issubdtype(dt, np.integer))
        cls = self.cutty_slicer_cls if slicing == "cutty" else self.slicer_cls
        self.slicer = cls(self.queries, [], allowed_lateness, is_int, columns=columns)
        self.allowed_lateness = self.slicer.lateness
        self.kind = self.slicer.kind
        self._ids = columns.ids
        self._ids_arrow = None
        if len(self._agg_list) == 1:  # a tree's queries share their key's aggregate
            self._agg_idx = np.zeros(len(qs), np.int64)
        else:
            agg_at = {a.name: i for i, a in enumerate(self._agg_list)}
            names = columns.aggregate.tolist()
            self._agg_idx = np.fromiter(map(agg_at.__getitem__, names), np.int64, len(qs))
        self._r = columns.range
        self.aggs: dict[Primitive, FinalAggregator] = {}
        self._built = False
        self._ops_total: dict[str, int] = {}
        self._ops_slices: list[np.ndarray] = []
        self._ops_unattached = 0  # Cutty: answers before the first slice was inserted
        if is_int is not None:
            self._build(is_int)

    # -- setup ----------------------------------------------------------------
    def _check_technique(self):
        t = self.technique
        cls = TECHNIQUES.get(t)  # None: a family, which runs any aggregate
        if cls is None:
            return
        for a in self._agg_list:  # in the order queries first use them: the first query's
            if cls.requires_inverse:  # aggregate that cannot run is the one refused
                require_invertible(a, t)
            if cls.requires_selective:
                require_selective(a, t)
        if not cls.multi_query:
            rs = {(q.range, q.slide) for q in self.queries}
            if len(rs) > 1:
                raise ValueError(
                    f"{t} answers one window length per tree; this tree has "
                    f"{len(rs)} distinct (range, slide): {sorted(rs)}"
                )

    def _technique_for(self, prim: Primitive) -> type[FinalAggregator]:
        return technique_class(self.technique, prim)

    def _build(self, is_int: bool):
        self.is_int = is_int
        # per aggregate, not per query (a tree's queries share one or a few aggregates): the
        # primitives in the order the queries first need them, and which queries use each
        prims: list[Primitive] = []
        users: dict[Primitive, list[int]] = {}
        for k, a in enumerate(self._agg_list):  # in the order of first appearance
            for p in a.primitives(is_int):
                if p not in users:
                    prims.append(p)
                    users[p] = []
                users[p].append(k)
        uses = {p: np.isin(self._agg_idx, users[p]) for p in prims}
        self.prims = prims
        self.uses = uses
        sl = self.slicer
        sl.primitives = prims
        sl.is_int = is_int
        for p in prims:
            if len(users[p]) == len(self._agg_list):  # every query
                rs = set(sl.rs)
            else:
                qs = [self.queries[i] for i in np.nonzero(uses[p])[0]]
                rs = {(q.range, q.slide) for q in qs}
            ns = sorted({n for k in rs for n in sl.ns[k]})
            if sl.exact_ns:
                wsize = max(1, max(ns))  # Cutty: n = 0 (window inside one slice) is possible
            else:
                wsize = sl.wsize
            cls = self._technique_for(p)
            self.aggs[p] = cls(p, wsize, known_ns=ns)
            self._ops_total[str(p)] = 0
        self.out_int = all(a.output_is_int(is_int) for a in self._agg_list)
        self._built = True

    # -- streaming ------------------------------------------------------------
    def process(self, ts, values):
        """Consume one batch (numpy arrays); return the answers it made due.

        For ``kind='count'`` trees ``ts`` may be None (positions are implicit).
        """
        cols = self.process_columns(ts, values, ordered=True)
        return self._empty() if cols is None else self._table(*cols)

    def flush(self):
        """End of input: emit every pending window (the watermark jumps past them)."""
        cols = self.flush_columns(ordered=True)
        return self._empty() if cols is None else self._table(*cols)

    def process_columns(
        self, ts, values, *, ordered: bool = False, in_order: bool | None = None, copy: bool = True
    ):
        """``process`` without building a table: ``(qidx, window_start, window_end, value)``
        numpy arrays (``qidx`` indexes ``queries``) or None when nothing is due.

        Why: a node hosting many trees gathers the answers of all its trees and calls and
        builds one table per drain (``cluster.node.core``), instead of one small Arrow table
        per tree and call.  ``ordered=False`` leaves each closed chunk's answers in slice order
        (window end ascending, then window length descending) instead of sorting them by
        ``(window_end, query)``: a query's answers are still in window order, which is all a
        sort by query needs.  ``in_order`` / ``copy``: see ``StreamSlicer.ingest``.
        """
        self.slicer.ingest(ts, values, in_order=in_order, copy=copy)
        if not self._built:
            if self.slicer.is_int is None:
                return None
            self._build(self.slicer.is_int)
        return self._emit(self.slicer.close(), ordered)

    def flush_columns(self, *, ordered: bool = False):
        """``flush`` as ``process_columns`` returns answers."""
        sl = self.slicer
        if not self._built or sl.max_ts == NEG_INF:
            return None
        W = sl.flush_watermark()
        sl.max_ts = max(sl.max_ts, W + sl.lateness)
        return self._emit(sl.close(W), ordered)

    @property
    def late(self) -> LateTuples:
        lb = self.slicer.late
        vdt = np.int64 if self.slicer.is_int else np.float64
        ts = np.concatenate(lb.ts) if lb.ts else np.zeros(0, np.int64)
        v = np.concatenate(lb.values) if lb.values else np.zeros(0, vdt)
        return LateTuples(lb.count, ts, v)

    @property
    def watermark(self) -> int:
        return self.slicer.watermark

    @property
    def wsize(self) -> int:
        return self.slicer.wsize

    def stats(self) -> dict:
        sl = self.slicer
        extra = {"cuts": getattr(sl, "n_cuts", 0)} if self.slicing == "cutty" else {}
        return {
            "slices": sl.n_slices,
            **extra,
            "resets": sl.n_resets,
            "late": sl.late.count,
            "outside_windows": sl.outside,
            "pending": int(sl.n_pending),
            "wsize": sl.wsize,
            "exact_wsize": sl.exact_ns,
            "memory_bytes": sum(a.memory_bytes() for a in self.aggs.values()),
        }

    def op_counts(self) -> dict:
        """Exact combine/inverse counts of final aggregation (needs count_ops=True).

        ``omega`` = operations per slice (= per edge), the cost model's Omega.  Under Cutty
        slicing, per Cutty slice, including the one combine with the open partial per answer
        of a window ending inside a slice; ``per_slice[j]`` holds slice j's insert and the
        answers given before the next insert (``total`` also counts answers given before
        the first slice ever was inserted).
        """
        if not self.count_ops:
            raise ValueError("create the tree with count_ops=True to count operations")
        per_slice = np.concatenate(self._ops_slices) if self._ops_slices else np.zeros(0, np.int64)
        total = int(sum(self._ops_total.values()))
        n = self.slicer.n_slices
        return {
            "slices": n,
            "total": total,
            "per_primitive": dict(self._ops_total),
            "per_slice": per_slice,
            "omega": total / n if n else 0.0,
        }

    # -- internals ------------------------------------------------------------
    def _empty(self):
        vdt = np.int64 if (self._built and self.out_int) else np.float64
        return self._table(
            np.zeros(0, dtype=np.int64),
            np.zeros(0, np.int64),
            np.zeros(0, np.int64),
            np.zeros(0, vdt),
        )

    def _table(self, qidx, start, end, value):
        """Build the answers; ``qidx`` indexes the tree's queries."""
        if self.as_arrow:
            if self._ids_arrow is None:
                self._ids_arrow = pa.array([q.id for q in self.queries], type=pa.string())
            return pa.table(
                {
                    "query_id": self._ids_arrow.take(pa.array(qidx, type=pa.int64())),
                    "window_start": pa.array(start, type=pa.int64()),
                    "window_end": pa.array(end, type=pa.int64()),
                    "value": pa.array(
                        value, type=pa.int64() if value.dtype == np.int64 else pa.float64()
                    ),
                }
            )
        return Answers(self._ids[qidx], start, end, value)

    def _emit(self, chunks: list[SliceChunk], ordered: bool = True):
        """The answers of the closed chunks as columns (None if there are none)."""
        parts = [self._answer_chunk(c, ordered) for c in chunks]
        parts = [p for p in parts if p is not None]
        if not parts:
            return None
        if len(parts) == 1:
            return parts[0]
        return tuple(np.concatenate([p[i] for p in parts]) for i in range(4))

    def _answer_chunk(self, ch: SliceChunk, ordered: bool = True):
        if ch.frag is None:
            return self._answer_pairs(ch, ordered)
        return self._answer_cutty(ch)

    def _answer_pairs(self, ch: SliceChunk, ordered: bool = True):
        """Final aggregation of one chunk of Pairs slices: every primitive's aggregator takes
        the slices and answers each distinct (slice, n) once; answers are lowered per row.

        The distinct (slice, n) pairs are found once for all primitives (due windows are
        sorted by slice then n, so equal pairs are adjacent); a primitive that only some
        queries use gets the pairs of those queries, in the same order, as the aggregator
        would see them one primitive at a time."""
        if ch.reset_before:
            for fa in self.aggs.values():
                fa.reset()
        k = ch.ends.shape[0]
        ds, dn, dq = ch.due_slice, ch.due_n, ch.due_query
        D = dn.shape[0]
        if D:
            first = np.empty(D, dtype=bool)
            first[0] = True
            np.not_equal(ds[1:], ds[:-1], out=first[1:])
            first[1:] |= dn[1:] != dn[:-1]
            inv = np.cumsum(first) - 1
            us, un = ds[first], dn[first]
        else:
            inv = us = un = np.zeros(0, np.int64)
        ans = {}
        ops_sum = np.zeros(k, dtype=np.int64) if self.count_ops else None
        for p, fa in self.aggs.items():
            need = self.uses[p]
            if need.all():
                usp, unp, needu = us, un, None
            else:
                needu = np.zeros(us.shape[0], dtype=bool)
                needu[inv[need[dq]]] = True
                usp, unp = us[needu], un[needu]
            ptr = np.zeros(k + 1, dtype=np.int64)
            np.cumsum(np.bincount(usp, minlength=k), out=ptr[1:])
            hi, lo = ch.partials[p]
            oh, ol, ops = fa.run(hi, lo, ptr, unp, count_ops=self.count_ops)
            if needu is not None:  # answers at every pair (those not needed stay 0, unread)
                fh = np.zeros(us.shape[0], dtype=oh.dtype)
                fl = np.zeros(us.shape[0], dtype=ol.dtype)
                fh[needu], fl[needu] = oh, ol
                oh, ol = fh, fl
            if ops_sum is not None:
                ops_sum += ops
                self._ops_total[str(p)] += int(ops.sum())
            ans[p] = (oh, ol)
        if ops_sum is not None:
            self._ops_slices.append(ops_sum)
        if D == 0:
            return None
        keep = ch.due_nonempty
        if keep.all():
            rows_u, rows_s = inv, ds
        else:
            idx = np.flatnonzero(keep)
            if idx.shape[0] == 0:
                return None
            rows_u, rows_s, dq = inv[idx], ds[idx], dq[idx]
        values = np.empty(dq.shape[0], dtype=np.int64 if self.out_int else np.float64)
        if len(self._agg_list) == 1:
            agg = self._agg_list[0]
            values[:] = agg.lower_columns(
                self.is_int,
                [(ans[p][0][rows_u], ans[p][1][rows_u]) for p in agg.primitives(self.is_int)],
            )
        else:
            agg_of = self._agg_idx[dq]
            for a, agg in enumerate(self._agg_list):
                rows = np.flatnonzero(agg_of == a)
                if rows.shape[0] == 0:
                    continue
                ru = rows_u[rows]
                values[rows] = agg.lower_columns(
                    self.is_int,
                    [(ans[p][0][ru], ans[p][1][ru]) for p in agg.primitives(self.is_int)],
                )
        end = ch.ends[rows_s]
        start = self._r[dq]
        np.subtract(end, start, out=start)  # no temporary: millions of answers at scale
        if ordered and len(self.queries) > 1:  # (window_end, query): slice, then query
            o = np.argsort(rows_s * len(self.queries) + dq, kind="stable")
            dq, start, end, values = dq[o], start[o], end[o], values[o]
        return dq, start, end, values

    def _answer_cutty(self, ch: SliceChunk):
        """Final aggregation of one chunk of Cutty slices (``executors.cutty``)."""
        if ch.reset_before:
            for fa in self.aggs.values():
                fa.reset()
        k = ch.ends.shape[0]
        D = ch.due_n.shape[0]
        ans = {}
        ops_sum = np.zeros(k, dtype=np.int64) if self.count_ops else None
        ops_before = 0  # answers from the state left by an earlier chunk (Cutty)
        for p, fa in self.aggs.items():
            sel = np.nonzero(self.uses[p][ch.due_query])[0] if D else np.zeros(0, np.int64)
            fh = np.zeros(D, dtype=p.np_dtype)
            fl = np.zeros(D, dtype=p.np_dtype)
            # windows spanning n >= 1 slices ask the aggregator (Cutty: n may be 0)
            sa = sel[ch.due_n[sel] > 0]
            ds, dn = ch.due_slice[sa], ch.due_n[sa]
            # one answer per (slice, n): queries with the same length share it
            if sa.shape[0]:
                first = np.ones(sa.shape[0], dtype=bool)
                first[1:] = (ds[1:] != ds[:-1]) | (dn[1:] != dn[:-1])
                inv = np.cumsum(first) - 1
                us, un = ds[first], dn[first]
            else:
                inv = us = un = np.zeros(0, np.int64)
            npre = int(np.searchsorted(us, 0))  # Cutty: before this chunk's first insert
            ptr = np.zeros(k + 1, dtype=np.int64)
            np.cumsum(np.bincount(us[npre:], minlength=k), out=ptr[1:])
            hi, lo = ch.partials[p]
            if npre:
                ph, pl, pops = fa.answer(un[:npre], count_ops=self.count_ops)
            oh, ol, ops = fa.run(hi, lo, ptr, un[npre:], count_ops=self.count_ops)
            if npre:
                oh, ol = np.concatenate([ph, oh]), np.concatenate([pl, ol])
            fh[sa] = oh[inv]
            fl[sa] = ol[inv]
            ops_frag = self._combine_open(p, ch, sel, fh, fl)
            if ops_sum is not None:
                t = int(ops.sum()) + (pops if npre else 0)
                ops_sum += ops
                ops_before += pops if npre else 0
                ops_sum += ops_frag[1:]
                ops_before += int(ops_frag[0])
                t += int(ops_frag.sum())
                self._ops_total[str(p)] += t
            ans[p] = (fh, fl)
        if ops_sum is not None:
            if ops_before:  # to the last slice inserted (chunks may insert none)
                last = next((x for x in reversed(self._ops_slices) if x.shape[0]), None)
                if last is not None:
                    last[-1] += ops_before
                else:
                    self._ops_unattached += ops_before
            self._ops_slices.append(ops_sum)
        if D == 0:
            return None
        keep = ch.due_nonempty
        if not keep.any():
            return None
        idx = np.nonzero(keep)[0]
        dq = ch.due_query[idx]
        values = np.empty(idx.shape[0], dtype=np.int64 if self.out_int else np.float64)
        agg_of = self._agg_idx[dq]
        for a, agg in enumerate(self._agg_list):
            rows = np.nonzero(agg_of == a)[0] if len(self._agg_list) > 1 else np.arange(dq.shape[0])
            if rows.shape[0] == 0:
                continue
            cols = [
                (ans[p][0][idx[rows]], ans[p][1][idx[rows]]) for p in agg.primitives(self.is_int)
            ]
            values[rows] = agg.lower_columns(self.is_int, cols)
        assert ch.due_end is not None  # Cutty chunks carry their windows' ends
        end = ch.due_end[idx]
        start = self._r[dq]
        np.subtract(end, start, out=start)
        o = np.lexsort((dq, end))  # the due order is by insert, not by end
        dq, start, end, values = dq[o], start[o], end[o], values[o]
        return dq, start, end, values

    @staticmethod
    def _combine_open(p, ch, sel, fh, fl) -> np.ndarray:
        """Cutty: windows ending inside the open slice take its partial: ``(complete slices)
        (+) open`` (one combine per distinct (end, n)), or the open partial alone when the
        window lies inside that slice (n = 0, no operation).  Returns the combines per
        attachment slice, index 0 standing for "before this chunk's first insert"."""
        k = ch.ends.shape[0]
        fr = sel[ch.due_frag[sel]]
        gh, gl = ch.frag[p]
        alone = fr[ch.due_n[fr] == 0]
        fh[alone] = gh[alone]
        fl[alone] = gl[alone]
        both = fr[ch.due_n[fr] > 0]
        if both.shape[0] == 0:
            return np.zeros(k + 1, dtype=np.int64)
        ah, al = fh[both], fl[both]
        combine_columns(p.op, ah, al, gh[both], gl[both])
        fh[both] = ah
        fl[both] = al
        e, n = ch.due_end[both], ch.due_n[both]
        first = np.ones(both.shape[0], dtype=bool)
        first[1:] = (e[1:] != e[:-1]) | (n[1:] != n[:-1])
        return np.bincount(ch.due_slice[both][first] + 1, minlength=k + 1).astype(np.int64)

    # -- snapshot -------------------------------------------------------------
    def snapshot(self, with_queries: bool = True) -> bytes:
        """Serialise the whole state (``executors.array_pack``; no pickle) to bytes.  ``with_queries=False``:
        without the query list, for an owner that keeps it and hands it to ``restore`` (a
        churn tree's generations: their queries are its lineage's, listed once)."""
        meta = {
            "version": 1,
            "technique": self.technique,
            "slicing": self.slicing,
            "allowed_lateness": self.allowed_lateness,
            "count_ops": self.count_ops,
            "as_arrow": self.as_arrow,
            "built": self._built,
            "is_int": self.slicer.is_int,
            "prims": [str(p) for p in self.prims] if self._built else [],
            "ops_total": self._ops_total,
            "ops_unattached": self._ops_unattached,
        }
        if with_queries:
            text, self._queries_json = meta_json(
                meta, self.queries, getattr(self, "_queries_json", None)
            )
        else:
            text = json.dumps(meta)
        arrays: dict[str, np.ndarray] = {"meta": np.frombuffer(text.encode(), dtype=np.uint8)}
        for k, v in self.slicer.state_dict().items():
            arrays[f"slicer/{k}"] = v
        if self._built:
            for i, p in enumerate(self.prims):
                for k, v in self.aggs[p].state_dict().items():
                    arrays[f"agg{i}/{k}"] = v
        if self.count_ops and self._ops_slices:
            arrays["ops_slices"] = np.concatenate(self._ops_slices)
        return pack(arrays)

    @classmethod
    def restore(cls, data: bytes, queries: list | None = None) -> ExecutionTree:
        """Rebuild a tree from ``snapshot()`` bytes; replaying the rest of the input
        then gives exactly the answers of an uninterrupted run.  ``queries``: the tree's
        queries, for a snapshot taken without them (``with_queries=False``)."""
        arrays = unpack(data)
        meta = json.loads(arrays["meta"].tobytes().decode())
        if meta.get("version") != 1:
            raise ValueError(f"unsupported snapshot version {meta.get('version')!r}")
        is_int = meta["is_int"]
        extra = {"slicing": meta["slicing"]} if meta.get("slicing", "pairs") != "pairs" else {}
        qs = meta.get("queries", queries)
        if qs is None:
            raise ValueError("the snapshot does not list its queries: restore needs them")
        tree = cls(
            qs,
            technique=meta["technique"],
            allowed_lateness=meta["allowed_lateness"],
            count_ops=meta["count_ops"],
            dtype=None if is_int is None else (np.int64 if is_int else np.float64),
            as_arrow=meta["as_arrow"],
            **extra,
        )
        tree.load_state(meta, arrays)
        return tree

    def load_state(self, meta: dict, arrays: dict[str, np.ndarray]) -> None:
        """Load the running state ``snapshot`` saved (slicer, final aggregators, operation
        counters) into this tree, just built from the same ``meta`` by ``restore``."""
        self.slicer.load_state_dict(
            {k[len("slicer/") :]: v for k, v in arrays.items() if k.startswith("slicer/")}
        )
        if self._built:
            if [str(p) for p in self.prims] != meta["prims"]:
                raise ValueError("snapshot primitives do not match the queries")
            for i, p in enumerate(self.prims):
                pre = f"agg{i}/"
                self.aggs[p].load_state_dict(
                    {k[len(pre) :]: v for k, v in arrays.items() if k.startswith(pre)}
                )
            self._ops_total.update(meta["ops_total"])
            self._ops_unattached = int(meta.get("ops_unattached", 0))
        if "ops_slices" in arrays:
            self._ops_slices = [arrays["ops_slices"]]
