"""Partial aggregation: queries -> edges -> slices, with event time and lateness.

Contract (DESIGN.md sections 1-2):

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

Everything per tuple is vectorised numpy (``np.searchsorted``, ``np.maximum
.accumulate``, ``np.bincount``); folding tuples into slice partials runs in the
numba kernel ``aggregates.reduce_slices`` (double-double float sums).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import reduce

import numpy as np

from placement.slicing import window_lengths as _shared_window_lengths

from .aggregates import Aggregate, Primitive, get_aggregate, reduce_slices

INF = np.iinfo(np.int64).max
NEG_INF = np.iinfo(np.int64).min
#: max edges generated per closing step (bounds memory of one step)
CHUNK_EDGES = 1 << 16
#: max work (edges of one composite slide + windows in it) for the exact window lengths
EXACT_SCAN_LIMIT = 4_000_000


# ----------------------------------------------------------------------------- queries
@dataclass(frozen=True)
class QuerySpec:
    """A normalised ACQ: id, aggregate, range r, slide s, kind ('time' | 'count')."""

    id: str
    aggregate: Aggregate
    range: int
    slide: int
    kind: str = "time"

    def as_dict(self) -> dict:
        return {"id": self.id, "aggregate": self.aggregate.name, "range": self.range,
                "slide": self.slide, "kind": self.kind}


def normalize_query(q) -> QuerySpec:
    """Accept a dict or any object with id/aggregate/range/slide[/kind] attributes."""
    if isinstance(q, QuerySpec):
        return q
    get = (lambda k, d=None: q.get(k, d)) if isinstance(q, dict) else \
        (lambda k, d=None: getattr(q, k, d))
    qid = get("id")
    if qid is None:
        raise ValueError(f"query {q!r} has no id")
    agg = get("aggregate")
    r, s = get("range"), get("slide")
    kind = get("kind", "time") or "time"
    for name, v in (("range", r), ("slide", s)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"query {qid!r}: {name} must be an integer >= 1, got {v!r}")
    kind = str(getattr(kind, "value", kind)).lower()
    if kind not in ("time", "count"):
        raise ValueError(f"query {qid!r}: kind must be 'time' or 'count', got {kind!r}")
    agg_name = getattr(agg, "value", agg)
    return QuerySpec(str(qid), get_aggregate(agg_name), int(r), int(s), kind)


# ----------------------------------------------------------------------------- edges
def edge_classes(rs_pairs) -> list[tuple[int, int]]:
    """Residue classes (s, c) of the union of the queries' edges (Pairs)."""
    out = set()
    for r, s in rs_pairs:
        out.add((s, 0))
        out.add((s, r % s))
    return sorted(out)


def composite_slide(slides) -> int:
    return reduce(math.lcm, slides, 1)


def edges_between(classes, a: int, b: int) -> np.ndarray:
    """Sorted distinct edges t with a <= t < b (one arange per residue class).

    The union is taken with a bitmap over [a, b) when that span is short compared
    with the number of generated edges (the common case), else by sorting.
    """
    if b <= a:
        return np.zeros(0, dtype=np.int64)
    parts = []
    for s, c in classes:
        first = a + ((c - a) % s)
        if first < b:
            parts.append(np.arange(first, b, s, dtype=np.int64))
    if not parts:
        return np.zeros(0, dtype=np.int64)
    if len(parts) == 1:
        return parts[0]
    allp = np.concatenate(parts)
    span = b - a
    if span <= 8 * allp.shape[0] + 1024:
        mark = np.zeros(span, dtype=np.bool_)
        mark[allp - a] = True
        return np.flatnonzero(mark).astype(np.int64) + a
    allp.sort()
    keep = np.ones(allp.shape[0], dtype=np.bool_)
    keep[1:] = allp[1:] != allp[:-1]
    return allp[keep]


def floor_edge(classes, t: int) -> int:
    """Largest edge <= t."""
    return max(t - ((t - c) % s) for s, c in classes)


def next_edge(classes, t: int) -> int:
    """Smallest edge > t."""
    return min(t + 1 + ((c - t - 1) % s) for s, c in classes)


def edge_rate_bound(classes) -> float:
    """Upper bound of edges per time unit (sum over classes of 1/s)."""
    return sum(1.0 / s for s, _ in classes)


def estimate_edges(classes, a: int, b: int) -> int:
    """Upper bound of the number of edges in [a, b)."""
    if b <= a:
        return 0
    return sum((b - a) // s + 1 for s, _ in classes)


def first_cover_end(rs_pairs, t: np.ndarray) -> np.ndarray:
    """Earliest end of a window containing t (over all queries); INF if none."""
    t = np.asarray(t, dtype=np.int64)
    out = np.full(t.shape, INF, dtype=np.int64)
    for r, s in rs_pairs:
        start = ((t - r) // s + 1) * s
        end = start + r
        cov = start <= t
        np.minimum(out, np.where(cov, end, INF), out=out)
    return out


def window_lengths(rs_pairs, classes, slicing: str = "pairs"):
    """Number of slices ("partials") per window, per distinct (r, s).

    Returns ``(wsize, {(r, s): sorted distinct n}, exact)``.  The exact set comes from
    ``placement.slicing.window_lengths`` (shared with the cost model, so the model's Omega
    and the executor's running aggregates agree); it scans one composite slide in
    O(edges + windows) and is exact when that work is at most EXACT_SCAN_LIMIT.
    Otherwise an upper bound (edges of each class in a span of r) and no distinct
    lengths: SlickDeque Inv then registers lengths lazily.  ``classes`` are the
    classes that cut the slices (Pairs: starts and ends; Cutty: starts only), used for
    the bound.  Under Cutty n counts the complete slices before a window's end (the open
    slice's partial is added apart) and can be 0; ``wsize`` is at least 1.
    """
    ns = _shared_window_lengths(rs_pairs, slicing, EXACT_SCAN_LIMIT)
    if ns is not None:
        ns = {k: list(v) for k, v in ns.items()}
        wsize = max(1, max(max(v) for v in ns.values()))
        return wsize, ns, True
    bounds = {}
    for r, s in rs_pairs:
        b = min(r, sum(-(-r // s2) for s2, _ in classes))
        bounds[(r, s)] = b
    return max(1, max(bounds.values())), {k: [] for k in bounds}, False


def pairs_partials(r: int, s: int) -> int:
    """Partials per window of a lone query under Pairs (dissertation Table 1)."""
    return r // s if r % s == 0 else 2 * (r // s) + 1


# ----------------------------------------------------------------------------- closed slices
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

    def __init__(self, queries: list[QuerySpec], primitives: list[Primitive],
                 allowed_lateness: int = 0, is_int: bool | None = None):
        if not queries:
            raise ValueError("a tree needs at least one query")
        kinds = {q.kind for q in queries}
        if len(kinds) > 1:
            raise ValueError(f"a tree cannot mix time and count windows: {sorted(kinds)}")
        if allowed_lateness < 0:
            raise ValueError(f"allowed_lateness must be >= 0, got {allowed_lateness}")
        self.queries = queries
        self.kind = queries[0].kind
        self.lateness = 0 if self.kind == "count" else int(allowed_lateness)
        self.primitives = primitives
        self.is_int = is_int
        self.rs = sorted({(q.range, q.slide) for q in queries})
        self.rs_queries = {rs: np.array([i for i, q in enumerate(queries)
                                         if (q.range, q.slide) == rs], dtype=np.int64)
                           for rs in self.rs}
        self.classes = edge_classes(self.rs)
        self.max_r = max(r for r, _ in self.rs)
        self.wsize, self.ns, self.exact_ns = window_lengths(self.rs, self.classes)
        self.rate = edge_rate_bound(self.classes)
        self.skip_threshold = max(4 * self.wsize + 64, CHUNK_EDGES)
        self.gap = self.wsize + 2  # slice numbers skipped at a jump: no window spans the gap
        # mutable state (everything below goes into snapshots)
        self.max_ts = NEG_INF
        self.position = 0              # next position for count windows
        self.cursor = None             # start of the first open slice (an edge)
        self.hist = np.zeros(0, dtype=np.int64)   # recent edges, >= cursor - max_r
        self.pend_ts = np.zeros(0, dtype=np.int64)
        self.pend_v = None
        self.last_data_end = NEG_INF   # 1 + largest ts folded into a closed slice
        self.g = 0                     # global number of the next slice
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
                    "create the tree with dtype='float64' to mix")
            return v.astype(np.int64, copy=False)
        return v.astype(np.float64, copy=False)

    def ingest(self, ts, values) -> None:
        v = self._values(values)
        n = v.shape[0]
        if self.kind == "count":
            if ts is not None and len(ts) != n:
                raise ValueError("ts and values must have the same length")
            t = np.arange(self.position, self.position + n, dtype=np.int64)
            self.position += n
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
        wm_prev = self.max_ts
        cm = np.maximum.accumulate(t)
        np.maximum(cm, wm_prev, out=cm)
        wm = cm - self.lateness if self.lateness else cm
        cover = first_cover_end(self.rs, t)
        outside = cover == INF
        late = (~outside) & (cover <= wm)
        keep = ~(outside | late)
        self.max_ts = int(cm[-1])
        self.outside += int(outside.sum())
        nl = int(late.sum())
        if nl:
            self.late.ts.append(t[late].copy())
            self.late.values.append(v[late].copy())
            self.late.count += nl
        if keep.all():
            kt, kv = t, v
        else:
            kt, kv = t[keep], v[keep]
        if kt.shape[0] == 0:
            return
        if self.pend_v is None or self.pend_ts.shape[0] == 0:
            self.pend_ts, self.pend_v = kt.copy(), kv.copy()
        else:
            self.pend_ts = np.concatenate([self.pend_ts, kt])
            self.pend_v = np.concatenate([self.pend_v, kv.astype(self.pend_v.dtype)])
        if self.pend_ts.shape[0] > 1 and np.any(self.pend_ts[1:] < self.pend_ts[:-1]):
            o = np.argsort(self.pend_ts, kind="stable")
            self.pend_ts, self.pend_v = self.pend_ts[o], self.pend_v[o]

    # -- closing --------------------------------------------------------------
    def close(self, upto: int | None = None) -> list[SliceChunk]:
        """Close every slice whose first window is due at watermark ``upto``."""
        W = self.watermark if upto is None else upto
        chunks: list[SliceChunk] = []
        if W == NEG_INF:
            return chunks
        has_pending = self.pend_ts.shape[0] > 0
        if self.cursor is None:
            if not has_pending:
                return chunks
            self.cursor = floor_edge(self.classes, min(int(self.pend_ts[0]), W - self.max_r))
            self._set_hist(edges_between(self.classes, self.cursor - self.max_r,
                                         self.cursor + 1))
        reset_next = False
        while True:
            cur = self.cursor
            t_min = int(self.pend_ts[0]) if self.pend_ts.shape[0] else INF
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
            cl = first_cover_end(self.rs, starts)
            cl = np.where(cl == INF, new, cl)
            # slices are sealed in stream order: a slice waits for every earlier one.  cl is not
            # monotone with hopping windows (r < s) next to longer ones, e.g. (1, 5) and (100, 100):
            # slice [1, 5) is in [0, 100) only and may still receive tuples after [5, 6) is due.
            np.maximum.accumulate(cl, out=cl)
            k = int(np.searchsorted(cl, W, side="right"))
            if k == 0:
                break
            chunk = self._make_chunk(starts[:k], new[:k])
            chunk.reset_before = reset_next
            reset_next = False
            chunks.append(chunk)
            if k < new.shape[0]:
                break
        return chunks

    def _make_chunk(self, starts: np.ndarray, ends: np.ndarray) -> SliceChunk:
        k = ends.shape[0]
        end_t = int(ends[-1])
        # tuples of the closed slices (pending is sorted by ts; all >= starts[0])
        m = int(np.searchsorted(self.pend_ts, end_t, side="left"))
        ts = self.pend_ts[:m]
        vals = self.pend_v[:m] if self.pend_v is not None else np.zeros(0)
        self.pend_ts = self.pend_ts[m:]
        if self.pend_v is not None:
            self.pend_v = self.pend_v[m:]
        sidx = np.searchsorted(ends, ts, side="right")
        counts = np.bincount(sidx, minlength=k).astype(np.int64)
        partials = {}
        for p in self.primitives:
            hi, lo = p.identity_arrays(k)
            if m:
                lh, ll = self._lift(p, vals)
                reduce_slices(p.op, sidx, lh, ll, hi, lo)
            partials[p] = (hi, lo)
        if m:
            self.last_data_end = max(self.last_data_end, int(ts[-1]) + 1)
        # global slice numbers and emptiness
        gidx = self.g + np.arange(k, dtype=np.int64)
        ne = np.where(counts > 0, gidx, -(1 << 62))
        last_ne = np.maximum.accumulate(ne)
        np.maximum(last_ne, self.last_nonempty, out=last_ne)
        # windows ending at each slice end
        allv = np.concatenate([self.hist, ends])
        h = self.hist.shape[0]
        ds, dq, dn = [], [], []
        for (r, s), qidx in self.rs_queries.items():
            due = np.nonzero((ends - r) % s == 0)[0]
            if due.shape[0] == 0:
                continue
            n = (h + due) - np.searchsorted(allv, ends[due] - r, side="left")
            nq = qidx.shape[0]
            ds.append(np.repeat(due, nq))
            dq.append(np.tile(qidx, due.shape[0]))
            dn.append(np.repeat(n, nq))
        if ds:
            due_slice = np.concatenate(ds)
            due_query = np.concatenate(dq)
            due_n = np.concatenate(dn)
            o = np.lexsort((due_query, -due_n, due_slice))
            due_slice, due_query, due_n = due_slice[o], due_query[o], due_n[o]
            nonempty = last_ne[due_slice] >= gidx[due_slice] - due_n + 1
        else:
            due_slice = due_query = due_n = np.zeros(0, dtype=np.int64)
            nonempty = np.zeros(0, dtype=bool)
        # advance
        self.cursor = end_t
        keep_from = int(np.searchsorted(allv, end_t - self.max_r, side="left"))
        self._set_hist(allv[keep_from:])
        self.g += k
        self.last_nonempty = int(last_ne[-1])
        self.n_slices += k
        return SliceChunk(starts, ends, counts, partials, due_slice, due_query, due_n,
                          nonempty)

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
        if self.pend_ts.shape[0]:
            hi = max(hi, int(self.pend_ts[-1]))
        return hi + self.max_r

    # -- snapshot -------------------------------------------------------------
    SCALARS = ("max_ts", "position", "last_data_end", "g", "last_nonempty", "outside",
               "n_slices", "n_resets")

    def state_dict(self) -> dict:
        late_ts = np.concatenate(self.late.ts) if self.late.ts else np.zeros(0, np.int64)
        vdt = np.int64 if self.is_int else np.float64
        late_v = np.concatenate(self.late.values) if self.late.values else np.zeros(0, vdt)
        st = {k: np.array([getattr(self, k)], dtype=np.int64) for k in self.SCALARS}
        st.update({
            "cursor": np.array([] if self.cursor is None else [self.cursor], dtype=np.int64),
            "hist": self.hist, "pend_ts": self.pend_ts,
            "pend_v": self.pend_v if self.pend_v is not None else np.zeros(0, vdt),
            "late_ts": late_ts, "late_v": late_v,
            "late_count": np.array([self.late.count], dtype=np.int64),
            "is_int": np.array([-1 if self.is_int is None else int(self.is_int)], np.int64),
        })
        return st

    def load_state_dict(self, st: dict) -> None:
        for k in self.SCALARS:
            setattr(self, k, int(st[k][0]))
        self.cursor = int(st["cursor"][0]) if st["cursor"].shape[0] else None
        self._set_hist(st["hist"].astype(np.int64))
        ii = int(st["is_int"][0])
        self.is_int = None if ii < 0 else bool(ii)
        self.pend_ts = st["pend_ts"].astype(np.int64)
        self.pend_v = st["pend_v"].copy() if self.is_int is not None else None
        self.late = _LateBuf([st["late_ts"].copy()], [st["late_v"].copy()],
                             int(st["late_count"][0]))
