"""Partial aggregation: queries -> edges -> slices, with event time and lateness.

Contract (docs/DESIGN.md s. 1-2):

* Window k of query (r, s) covers ``[k*s, k*s + r)``; its answer is due at
  ``end = k*s + r``; a window with no tuples produces no answer.
* Edges of a query are the positions ``t`` with ``t mod s == 0`` (starts) or
  ``t mod s == r mod s`` (ends): the residue classes ``(s, 0)`` and ``(s, r mod s)``
  (Pairs).  A tree's edge set is the union over its queries.  A slice is the span
  between two consecutive edges; every window is a whole number of slices.
* ``kind='count'``: the timestamp is the tuple's 0-based position in the stream.
* Event time: ``watermark = max_ts_seen - allowed_lateness``, tracked **per tuple**
  in arrival order (so splitting a batch never changes the result).  A window is
  emitted once the watermark reaches its end.  A tuple is *late* iff a window that
  contains it has already been emitted, i.e. iff the earliest end of a window
  containing it is <= the watermark when it arrives.  Late tuples are counted and
  kept (``late_ts`` / ``late_values``), never folded into answers.
  Tuples that fall in no window at all (the gaps of r < s) are not late: they
  cannot change any answer; they are counted in ``outside`` and discarded.
* A slice is *closed* (handed to final aggregation, immutable from then on) once
  the watermark reaches the earliest end of a window containing it **and every
  earlier slice is closed** (final aggregation takes slices in stream order).  The
  first condition is the exact moment its first window is due, so closing never
  makes a tuple late that the window rule would accept.  The second one only bites
  with hopping windows (r < s) next to longer windows: with (1, 5) and (100, 100)
  the slice [1, 5) belongs to [0, 100) alone and may still receive tuples when
  [5, 6) is due, so [5, 6)'s answer waits (same value, a later ``process`` call).

Long empty stretches (sparse streams, ``r < s`` gaps of hours) are skipped without
enumerating their edges: once no stored data can reach a window any more, the
slicer jumps to the next data and asks the final aggregators to ``reset``.

Everything per tuple is vectorised numpy or compiled: in-order batches (checked once, or
told by the caller) skip the per-tuple lateness test except for the prefix that could be
late, and the pending tuples being sorted, a closed chunk finds its slices' tuple ranges
with one search per slice; folding them into slice partials runs in the numba kernels of
``executors.slice_kernels`` (the combine sequence of ``aggregates.reduce_slices``:
double-double float sums, bit-identical).

This module is the slicer; the query record (``executors.query_spec``), the edge arithmetic
(``executors.edges``) and the compiled loops (``executors.slice_kernels``) have their own
modules, re-exported here for the callers that import them from ``executors.slicing``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .aggregates import OP_SUM, Primitive
from .edges import (
    EXACT_SCAN_LIMIT,
    INF,
    NEG_INF,
    cover_slide,
    edge_classes,
    edge_rate_bound,
    edges_between,
    estimate_edges,
    first_cover_end,
    floor_edge,
    next_edge,
    pairs_partials,
    window_lengths,
)
from .query_spec import QueryColumns, QuerySpec, normalize_query
from .slice_kernels import due_entries, due_rows, fold_runs, fold_runs_v, run_bounds

__all__ = [
    "CHUNK_EDGES",
    "EXACT_SCAN_LIMIT",
    "INF",
    "NEG_INF",
    "QuerySpec",
    "SliceChunk",
    "StreamSlicer",
    "cover_slide",
    "edge_classes",
    "edge_rate_bound",
    "edges_between",
    "estimate_edges",
    "first_cover_end",
    "floor_edge",
    "fold_runs",
    "fold_runs_v",
    "next_edge",
    "normalize_query",
    "pairs_partials",
    "window_lengths",
]

#: max edges generated per closing step (bounds memory of one step)
CHUNK_EDGES = 1 << 16


@dataclass
class SliceChunk:
    """Slices closed by one step, in stream order, with the windows due at their ends.

    ``reset_before``: the final aggregators must be reset before these slices
    (an empty stretch was skipped).  ``partials[prim] = (hi, lo)``.
    Due windows: ``due_slice`` (index into this chunk), ``due_query`` (index into
    the tree's query list), ``due_n`` (slices spanned), sorted by slice then n
    descending; ``due_nonempty`` tells whether the window holds a tuple.
    """

    starts: np.ndarray
    ends: np.ndarray
    counts: np.ndarray
    partials: dict
    due_slice: np.ndarray
    due_query: np.ndarray
    due_n: np.ndarray
    due_nonempty: np.ndarray
    reset_before: bool = False
    #: Cutty only (``executors.cutty``): window ends, whether the open partial is combined in,
    #: and that partial per primitive, aligned with the due arrays
    due_end: np.ndarray | None = None
    due_frag: np.ndarray | None = None
    frag: dict | None = None


@dataclass
class _LateBuf:
    ts: list = field(default_factory=list)
    values: list = field(default_factory=list)
    count: int = 0


class StreamSlicer:
    """Cuts one stream into the shared slices of a tree and closes them on time.

    ``ingest(ts, values)`` classifies tuples (late / outside every window / pending)
    and advances the watermark; ``close()`` returns the ``SliceChunk`` s whose
    slices are now closed; ``flush()`` closes everything that holds data.
    """

    def __init__(
        self,
        queries: list[QuerySpec],
        primitives: list[Primitive],
        allowed_lateness: int = 0,
        is_int: bool | None = None,
        columns: QueryColumns | None = None,
    ):
        """``columns``: the ``QueryColumns`` of ``queries`` when the caller has them."""
        if not queries:
            raise ValueError("a tree needs at least one query")
        if columns is None:
            columns = QueryColumns.of(queries)
        kinds = set(columns.kind.tolist())
        if len(kinds) > 1:
            raise ValueError(f"a tree cannot mix time and count windows: {sorted(kinds)}")
        if allowed_lateness < 0:
            raise ValueError(f"allowed_lateness must be >= 0, got {allowed_lateness}")
        self.queries = queries
        self.kind = queries[0].kind
        self.lateness = 0 if self.kind == "count" else int(allowed_lateness)
        self.primitives = primitives
        self.is_int = is_int
        # the queries of each (r, s), in query order, by one stable sort (a scan per (r, s)
        # took 0.1 s per tree of 1,400 queries over 166 windows, and a pass in Python ~4 ms
        # per tree of 800: every churn generation builds its slicer)
        n = len(queries)
        r, s = columns.range, columns.slide
        order = np.lexsort((s, r))  # by (r, s), ties in query order (lexsort is stable)
        rr, ss = r[order], s[order]
        new = np.ones(n, dtype=bool)
        new[1:] = (rr[1:] != rr[:-1]) | (ss[1:] != ss[:-1])
        starts = np.flatnonzero(new)
        self.rs = list(zip(rr[starts].tolist(), ss[starts].tolist()))
        ends = [*starts[1:].tolist(), n]
        self.rs_queries = {rs: order[a:b] for rs, a, b in zip(self.rs, starts.tolist(), ends)}
        # the same per (r, s) group as flat arrays (r, s, #queries, offset, query indices)
        self._groups = (rr[starts], ss[starts], np.diff(starts, append=n), starts, order)
        self.classes = edge_classes(self.rs)
        self.max_r = max(r for r, _ in self.rs)
        self.cover_slide = cover_slide(self.rs)
        self.wsize, self.ns, self.exact_ns = window_lengths(self.rs, self.classes)
        self.rate = edge_rate_bound(self.classes)
        self.skip_threshold = max(4 * self.wsize + 64, CHUNK_EDGES)
        self.gap = self.wsize + 2  # slice numbers skipped at a jump: no window spans the gap
        # mutable state (everything below goes into snapshots)
        self.max_ts = NEG_INF
        self.position = 0  # next position for count windows
        self.cursor: int | None = None  # start of the first open slice (an edge)
        self.hist = np.zeros(0, dtype=np.int64)  # recent edges, >= cursor - max_r
        # pending tuples: segments (ts, values), each sorted by ts, segment after segment (a
        # batch appends one instead of copying everything pending into a new array)
        self._pts: list[np.ndarray] = []
        self._pv: list[np.ndarray] = []
        self.last_data_end = NEG_INF  # 1 + largest ts folded into a closed slice
        self.g = 0  # global number of the next slice
        self.last_nonempty = -(1 << 62)
        self.late = _LateBuf()
        self.outside = 0
        self.n_slices = 0
        self.n_resets = 0

    # -- input ----------------------------------------------------------------
    @property
    def watermark(self) -> int:
        return NEG_INF if self.max_ts == NEG_INF else self.max_ts - self.lateness

    def _values(self, values):
        v = np.asarray(values)
        if v.ndim != 1:
            raise ValueError(f"values must be one-dimensional, got shape {v.shape}")
        if v.dtype == np.bool_:
            v = v.astype(np.int64)
        if self.is_int is None and v.shape[0]:
            if not (np.issubdtype(v.dtype, np.integer) or np.issubdtype(v.dtype, np.floating)):
                raise ValueError(f"values must be integers or floats, got {v.dtype}")
            self.is_int = bool(np.issubdtype(v.dtype, np.integer))
        if self.is_int:
            if v.shape[0] and not np.issubdtype(v.dtype, np.integer):
                raise ValueError(
                    f"this tree aggregates int64 values (first batch); got {v.dtype}: "
                    "create the tree with dtype='float64' to mix"
                )
            return v.astype(np.int64, copy=False)
        return v.astype(np.float64, copy=False)

    def ingest(self, ts, values, in_order: bool | None = None, copy: bool = True) -> None:
        """Classify one batch (late / outside every window / pending) and advance the watermark.

        ``in_order``: the caller knows whether ``ts`` is non-decreasing (a node computes it
        once per batch for all its trees); None: checked here.  ``copy=False``: the arrays are
        immutable (e.g. Arrow buffers), pending tuples may reference them instead of copying.
        Neither changes the outcome, only the work.
        """
        v = self._values(values)
        n = v.shape[0]
        if self.kind == "count":
            if ts is not None and len(ts) != n:
                raise ValueError("ts and values must have the same length")
            t = np.arange(self.position, self.position + n, dtype=np.int64)
            self.position += n
            in_order = True
        else:
            if ts is None:
                raise ValueError("time windows need timestamps")
            t = np.asarray(ts)
            if t.shape != (n,):
                raise ValueError(f"ts has shape {t.shape}, values {v.shape}: they must match")
            if n and not np.issubdtype(t.dtype, np.integer):
                raise ValueError(f"timestamps must be integers (time units), got {t.dtype}")
            t = t.astype(np.int64, copy=False)
        if n == 0:
            return
        if in_order is None:
            in_order = n == 1 or bool((t[1:] >= t[:-1]).all())
        wm_prev = self.max_ts
        if in_order:
            # cm = max(t, wm_prev); a tuple can only be late if t < its watermark cm - lateness,
            # i.e. (t sorted) if t < wm_prev - lateness: only a prefix can be
            self.max_ts = max(int(t[-1]), wm_prev)
            lim = wm_prev - self.lateness if wm_prev != NEG_INF else NEG_INF
            c = int(np.searchsorted(t, lim, side="left")) if int(t[0]) < lim else 0
            late, outside = self._classify(t[:c], np.full(c, lim, np.int64))
            if self.cover_slide is None:  # positions in no window may lie anywhere
                out_rest = first_cover_end(self.rs, t[c:]) == INF
                outside = np.concatenate([outside, out_rest])
                late = np.concatenate([late, np.zeros(n - c, dtype=np.bool_)])
            elif c:
                late = np.concatenate([late, np.zeros(n - c, dtype=np.bool_)])
                outside = np.concatenate([outside, np.zeros(n - c, dtype=np.bool_)])
        else:
            cm = np.maximum.accumulate(t)
            np.maximum(cm, wm_prev, out=cm)
            wm = cm - self.lateness if self.lateness else cm
            self.max_ts = int(cm[-1])
            late, outside = self._classify(t, wm)
        nl = int(late.sum()) if late.shape[0] else 0
        no = int(outside.sum()) if outside.shape[0] else 0
        self.outside += no
        if nl:
            self.late.ts.append(t[late].copy())
            self.late.values.append(v[late].copy())
            self.late.count += nl
        if nl or no:
            keep = ~(outside | late)
            kt, kv = t[keep], v[keep]
            copy = False  # fancy indexing made new arrays
        else:
            kt, kv = t, v
        if kt.shape[0] == 0:
            return
        if self._pv:
            kv = kv.astype(self._pv[0].dtype, copy=False)
        if in_order and (not self._pts or int(kt[0]) >= int(self._pts[-1][-1])):
            # pending stays sorted as one more segment
            self._pts.append(kt.copy() if copy else kt)
            self._pv.append(kv.copy() if copy else kv)
            if len(self._pts) > 8:
                self._set_pending(np.concatenate(self._pts), np.concatenate(self._pv))
            return
        ts_all = np.concatenate(self._pts + [kt])
        v_all = np.concatenate(self._pv + [kv])
        if ts_all.shape[0] > 1 and np.any(ts_all[1:] < ts_all[:-1]):
            o = np.argsort(ts_all, kind="stable")
            ts_all, v_all = ts_all[o], v_all[o]
        self._set_pending(ts_all, v_all)

    def _set_pending(self, ts: np.ndarray, v) -> None:
        """Pending tuples as one segment (none if empty)."""
        self._pts, self._pv = ([ts], [v]) if ts.shape[0] else ([], [])

    @property
    def pend_ts(self) -> np.ndarray:
        """Timestamps of the pending tuples, sorted (a copy when there are several segments)."""
        if len(self._pts) == 1:
            return self._pts[0]
        return np.concatenate(self._pts) if self._pts else np.zeros(0, dtype=np.int64)

    @property
    def n_pending(self) -> int:
        return sum(x.shape[0] for x in self._pts)

    @property
    def pend_v(self):
        """Values of the pending tuples (None if there are none)."""
        if len(self._pv) == 1:
            return self._pv[0]
        return np.concatenate(self._pv) if self._pv else None

    def _classify(self, t: np.ndarray, wm: np.ndarray):
        """(late, outside) masks of tuples ``t`` arriving at watermarks ``wm``."""
        if t.shape[0] == 0:
            z = np.zeros(0, dtype=np.bool_)
            return z, z
        cover = first_cover_end(self.rs, t)
        outside = cover == INF
        late = (~outside) & (cover <= wm)
        return late, outside

    # -- closing --------------------------------------------------------------
    def close(self, upto: int | None = None) -> list[SliceChunk]:
        """Close every slice whose first window is due at watermark ``upto``."""
        W = self.watermark if upto is None else upto
        chunks: list[SliceChunk] = []
        if W == NEG_INF:
            return chunks
        has_pending = bool(self._pts)
        if self.cursor is None:
            if not has_pending:
                return chunks
            self.cursor = floor_edge(self.classes, min(int(self._pts[0][0]), W - self.max_r))
            self._set_hist(edges_between(self.classes, self.cursor - self.max_r, self.cursor + 1))
        reset_next = False
        while True:
            cur = self.cursor
            t_min = int(self._pts[0][0]) if self._pts else INF
            # a tuple still to come that is not late has ts > W - max_r, and no
            # pending tuple lies before t_min: slices before B can only be empty
            B = min(t_min, W - self.max_r)
            A = (self.last_data_end + self.max_r) if self.last_data_end != NEG_INF else NEG_INF
            if cur >= A and B > cur and estimate_edges(self.classes, cur, B) > self.skip_threshold:
                # nothing closed can reach a window ending after cur (cur >= A), and
                # nothing pending or still to come lies before B: every window ending
                # in (cur, floor_edge(B)] is empty, so skip those slices.
                nc = floor_edge(self.classes, B)
                if nc > cur:
                    self.cursor = nc
                    self._set_hist(edges_between(self.classes, nc - self.max_r, nc + 1))
                    self.g += self.gap
                    self._on_skip()
                    self.n_resets += 1
                    reset_next = True
                    continue
            span = max(1, int(CHUNK_EDGES / self.rate))
            b = min(W, max(cur + span, next_edge(self.classes, cur)))
            new = edges_between(self.classes, cur + 1, b + 1)
            if new.shape[0] == 0:
                break  # the next edge lies beyond the watermark
            starts = np.empty_like(new)
            starts[0] = cur
            starts[1:] = new[:-1]
            k = self._closable(starts, new, W)
            if k == 0:
                break
            chunk = self._make_chunk(starts[:k], new[:k])
            chunk.reset_before = reset_next
            reset_next = False
            chunks.append(chunk)
            if k < new.shape[0]:
                break
        return chunks

    def _closable(self, starts: np.ndarray, ends: np.ndarray, W: int) -> int:
        """How many of these slices (in order) close at watermark ``W``: the leading ones whose
        earliest window end (``first_cover_end`` of the start; a slice in no window: its own
        end), running max, is <= W.

        Slices are sealed in stream order: a slice waits for every earlier one.  The cover end
        is not monotone with hopping windows (r < s) next to longer ones, e.g. (1, 5) and
        (100, 100): slice [1, 5) is in [0, 100) only and may still receive tuples after [5, 6)
        is due.  With a query ``r >= s`` (``cover_slide``) the cover end of ``t`` lies in
        ``(t, t + cover_slide]``: slices starting at or before ``W - cover_slide`` close, those
        starting at or after ``W`` do not, and only the ones in between are computed."""
        cs = self.cover_slide
        if cs is None:
            cl = first_cover_end(self.rs, starts)
            cl = np.where(cl == INF, ends, cl)
            np.maximum.accumulate(cl, out=cl)
            return int(np.searchsorted(cl, W, side="right"))
        j0 = int(np.searchsorted(starts, W - cs, side="right"))
        j1 = int(np.searchsorted(starts, W, side="left"))
        if j1 <= j0:
            return j0
        cl = first_cover_end(self.rs, starts[j0:j1])
        over = np.flatnonzero(cl > W)
        return j0 + (int(over[0]) if over.shape[0] else j1 - j0)

    def _fold(self, p: Primitive, vals, bounds: np.ndarray, counts: np.ndarray, hi, lo) -> None:
        """Fold the closed items ``vals`` (sorted by slice, slice j = ``bounds[j]:bounds[j+1]``)
        into the identity-filled partials ``hi, lo`` of primitive ``p``.  Raw tuples: counts
        need no pass, values are folded without materialising ``Primitive.lift``; other items
        (``executors.slice_input``) go through ``_lift``."""
        if p.source == "one" and p.op == OP_SUM and not self.lifted_items:
            hi += counts  # a sum of ones from 0: exactly the count (lo stays 0)
            return
        if p.source == "v" and not self.lifted_items:
            v = vals.astype(p.np_dtype, copy=False)
            fold_runs_v(p.op, bounds, v, v.dtype.type(0), hi, lo)
            return
        lh, ll = self._lift(p, vals)
        fold_runs(p.op, bounds, np.ascontiguousarray(lh), np.ascontiguousarray(ll), hi, lo)

    #: items are not raw tuples (``_lift`` must be used): ``executors.slice_input``
    lifted_items = False

    def _due_windows(self, ends: np.ndarray, allv: np.ndarray, h: int):
        """Windows ending at the slice ends ``ends`` (every edge in ``(cursor, ends[-1]]``;
        ``allv`` = recent edges ``hist`` + ``ends``): ``(due_slice, due_query, due_n)`` sorted
        by slice, then n descending (queries with the same slice and n, hence the same window,
        are adjacent, in (r, s) then query order).

        Vectorised over the tree's distinct (r, s) "groups": a group is due at the ends
        ``= r mod s``, which are edges of its class ``(s, r mod s)``, so they are enumerated
        with a stride (not tested on every end) and located by galloping searches in one
        compiled pass (``due_entries``); the (slice, group) entries are then sorted and
        expanded to queries in another (``due_rows``)."""
        g_r, g_s, g_nq, g_off, g_q = self._groups
        e0, e1 = int(ends[0]), int(ends[-1])
        first = e0 + (g_r - e0) % g_s
        cnt = np.where(first <= e1, (e1 - first) // g_s + 1, 0)
        M = int(cnt.sum())
        if M == 0:
            z = np.zeros(0, dtype=np.int64)
            return z, z, z
        due, n, ge = due_entries(ends, allv, h, g_r, g_s, first, cnt, M)
        return due_rows(due, n, ge, ends.shape[0], g_nq, g_off, g_q)

    def _make_chunk(self, starts: np.ndarray, ends: np.ndarray) -> SliceChunk:
        k = ends.shape[0]
        end_t = int(ends[-1])
        # tuples of the closed slices (pending is sorted by ts; all >= starts[0])
        # the closed slices' tuples, segment by segment (pending is sorted, all >= starts[0]):
        # in a segment, slice j holds ts[bounds[j]:bounds[j + 1]] (k searches, not one per tuple)
        segs = []
        while self._pts:
            st = self._pts[0]
            m = int(np.searchsorted(st, end_t, side="left"))
            if m == 0:
                break
            b = np.empty(k + 1, dtype=np.int64)
            run_bounds(st[:m], ends, b)
            segs.append((st[:m], self._pv[0][:m], b))
            if m < st.shape[0]:
                self._pts[0], self._pv[0] = st[m:], self._pv[0][m:]
                break
            self._pts.pop(0)
            self._pv.pop(0)
        if len(segs) == 1:
            counts = np.diff(segs[0][2])
        else:
            counts = np.zeros(k, dtype=np.int64)
            for _, _, b in segs:
                counts += np.diff(b)
        partials = {}
        for p in self.primitives:
            hi, lo = p.identity_arrays(k)
            for _, vals, b in segs:  # in order: the same fold sequence as one array
                self._fold(p, vals, b, counts if len(segs) == 1 else np.diff(b), hi, lo)
            partials[p] = (hi, lo)
        if segs:
            self.last_data_end = max(self.last_data_end, int(segs[-1][0][-1]) + 1)
        # global slice numbers and emptiness
        gidx = self.g + np.arange(k, dtype=np.int64)
        ne = np.where(counts > 0, gidx, -(1 << 62))
        last_ne = np.maximum.accumulate(ne)
        np.maximum(last_ne, self.last_nonempty, out=last_ne)
        # windows ending at each slice end
        allv = np.concatenate([self.hist, ends])
        h = self.hist.shape[0]
        due_slice, due_query, due_n = self._due_windows(ends, allv, h)
        nonempty = last_ne[due_slice] >= gidx[due_slice] - due_n + 1
        # advance
        self.cursor = end_t
        keep_from = int(np.searchsorted(allv, end_t - self.max_r, side="left"))
        self._set_hist(allv[keep_from:])
        self.g += k
        self.last_nonempty = int(last_ne[-1])
        self.n_slices += k
        return SliceChunk(starts, ends, counts, partials, due_slice, due_query, due_n, nonempty)

    def _set_hist(self, hist: np.ndarray) -> None:
        """Replace the recent-edge history (a subclass may keep data aligned with it)."""
        self.hist = hist

    def _on_skip(self) -> None:
        """An empty stretch was skipped (the final aggregators will be reset)."""

    def _lift(self, p: Primitive, vals):
        """Per-item (hi, lo) columns of primitive ``p`` for the pending items ``vals`` being
        folded into slices.  Items are raw tuples here; ``executors.slice_input`` overrides this
        to fold pre-aggregated slices instead."""
        return p.lift(vals)

    def flush_watermark(self) -> int:
        """A watermark past the end of every window that can hold a stored tuple."""
        hi = self.max_ts
        if self._pts:
            hi = max(hi, int(self._pts[-1][-1]))
        return hi + self.max_r

    # -- snapshot -------------------------------------------------------------
    SCALARS = (
        "max_ts",
        "position",
        "last_data_end",
        "g",
        "last_nonempty",
        "outside",
        "n_slices",
        "n_resets",
    )

    def state_dict(self) -> dict:
        late_ts = np.concatenate(self.late.ts) if self.late.ts else np.zeros(0, np.int64)
        vdt = np.int64 if self.is_int else np.float64
        late_v = np.concatenate(self.late.values) if self.late.values else np.zeros(0, vdt)
        st: dict[str, np.ndarray] = {
            k: np.array([getattr(self, k)], dtype=np.int64) for k in self.SCALARS
        }
        st.update(
            {
                "cursor": np.array([] if self.cursor is None else [self.cursor], dtype=np.int64),
                "hist": self.hist,
                "pend_ts": self.pend_ts,
                "pend_v": self.pend_v if self.pend_v is not None else np.zeros(0, vdt),
                "late_ts": late_ts,
                "late_v": late_v,
                "late_count": np.array([self.late.count], dtype=np.int64),
                "is_int": np.array([-1 if self.is_int is None else int(self.is_int)], np.int64),
            }
        )
        return st

    def load_state_dict(self, st: dict) -> None:
        for k in self.SCALARS:
            setattr(self, k, int(st[k][0]))
        self.cursor = int(st["cursor"][0]) if st["cursor"].shape[0] else None
        self._set_hist(st["hist"].astype(np.int64))
        ii = int(st["is_int"][0])
        self.is_int = None if ii < 0 else bool(ii)
        self._set_pending(
            st["pend_ts"].astype(np.int64), st["pend_v"].copy() if self.is_int is not None else None
        )
        self.late = _LateBuf(
            [st["late_ts"].copy()], [st["late_v"].copy()], int(st["late_count"][0])
        )
