"""Slice-fed execution trees: answers from pre-aggregated slices instead of raw tuples.

Why: in the cluster's ``sliced`` feed mode (``cluster.feeds.sliced.feed_sliced``) Spark cuts each
stream at the **union of the edges of every tree on that stream** and ships one row per
non-empty slice (count, sum, min, max, sum of squares, ``[slice_start, slice_end)`` and the
largest timestamp in it) instead of every tuple.  A tree's own edges are a subset of that union,
so every incoming slice lies inside exactly one of the tree's slices; the tree folds consecutive
incoming slices into its own slice partials and runs its final aggregation unchanged.

How, without a second slicing engine: ``SliceStreamSlicer`` is the ordinary ``StreamSlicer``
whose pending "items" are incoming slices (a numpy structured array, one record per slice)
carrying the timestamp ``ts_max``; ``_lift`` hands the slicer the slice's pre-aggregated
primitive instead of lifting a raw value.  Everything else (watermark, closing, due windows,
empty-window detection, snapshots) is the tuple path's code, so answers are those of raw mode:

* **int streams: identical answers** (int64 count/sum/min/max are exact, sums of squares are
  exact int64 sums converted to a double-double, which is how the tuple path represents the same
  exact number);
* **float streams**: the producer keeps sums and sums of squares as double-doubles
  (``sum``+``sum_lo``, ``sq``+``sq_lo``, error-free ``two_sum``/``two_prod`` as the tuple path
  does), so min/max/count are identical and sums/avg/stddev differ from the tuple path only by
  the re-association of double-double additions (~1e-30 relative before rounding to float64;
  the tests check 1e-9).

Contract and limitation (event time):

* The slices of one stream must arrive in event-time order (non-decreasing ``ts_max``; several
  rows for the same slice are allowed, e.g. one per Spark partition: they are folded together).
  A slice's ``ts_max`` advances the watermark exactly as its last tuple would have in an
  **in-order** stream, so with in-order data nothing is late and the answers equal raw mode's.
* Per-tuple arrival order is lost in pre-aggregation, so sliced mode cannot reproduce the
  lateness of a disordered replay: a producer must aggregate the data as if sorted by time (raw
  mode with ``order="auto"``/``"sort"``).  A slice that does arrive behind the watermark is
  handled as a whole: it is *late* (one late record per slice, ``late`` reports ``ts_max`` and
  the slice's sum) and never folded in.
* Time windows only (count windows need tuple positions, which slices do not carry).
* Slice boundaries must be a superset of the tree's edges; ``process_slices`` checks it
  (``check_edges=True``) and raises ``ValueError`` otherwise.
* Cutty slicing (``slicing="cutty"``) works the same way: ``SliceCuttySlicer`` is the Cutty
  slicer (``executors.cutty``) over this slice-fed slicer, so incoming slices fold into Pairs
  sub-slices and those into Cutty slices and open partials.  The input must still be cut at
  the tree's *Pairs* edges (window starts and ends): a window ending inside a Cutty slice
  needs the partial up to its end, so the union of Pairs edges on a stream (what the cluster's
  sliced feed cuts at) serves Pairs and Cutty trees alike.

``slice_aggregates`` is the reference producer (pure numpy): the Spark feed runs it inside
``mapInArrow`` and the tests use it directly.
"""

from __future__ import annotations

import numpy as np

from .aggregates import OP_MAX, OP_MIN, OP_SUM, Primitive, lift_square, reduce_slices
from .cutty import CuttySlicer
from .edges import INF, NEG_INF
from .query_spec import QueryColumns
from .slicing import (
    StreamSlicer,
    edges_between,
    estimate_edges,
    floor_edge,
    next_edge,
    normalize_query,
)
from .tree import ExecutionTree, LateTuples

#: columns of a slice batch (``sum``, ``min``, ``max``, ``sq`` are int64 for int streams,
#: float64 for float streams, which add ``sum_lo`` and ``sq_lo``: the low words of
#: double-double sums)
SLICE_COLUMNS = ("slice_start", "slice_end", "ts_max", "count", "sum", "min", "max", "sq")
FLOAT_LO_COLUMNS = ("sum_lo", "sq_lo")


def slice_dtype(is_int: bool) -> np.dtype:
    """The structured record of one incoming slice."""
    t = np.int64 if is_int else np.float64
    return np.dtype(
        [
            ("c", np.int64),
            ("s", t),
            ("sl", np.float64),
            ("mn", t),
            ("mx", t),
            ("q", t),
            ("ql", np.float64),
        ]
    )


# ----------------------------------------------------------------------------- producer
def _next_edges(classes, t: np.ndarray) -> np.ndarray:
    """Smallest edge > t, per element (vectorised over t, loop over classes)."""
    out = np.full(t.shape, INF, dtype=np.int64)
    for s, c in classes:
        np.minimum(out, t + 1 + ((c - t - 1) % s), out=out)
    return out


def _floor_edges(classes, t: np.ndarray) -> np.ndarray:
    """Largest edge <= t, per element."""
    out = np.full(t.shape, NEG_INF, dtype=np.int64)
    for s, c in classes:
        np.maximum(out, t - ((t - c) % s), out=out)
    return out


#: tuples per piece of the time axis when locating slices (bounds the edges enumerated at once)
PIECE_ROWS = 1 << 16


def _slice_bounds(ts: np.ndarray, classes) -> tuple[np.ndarray, np.ndarray]:
    """Start and end of the slice of every tuple of the **sorted** ``ts``.

    Piece by piece along the time axis (``PIECE_ROWS`` tuples): where the piece's span holds
    few edges compared with its tuples (the common case, however many classes), its edges are
    enumerated (one ``arange`` per class) and located with one search; a sparse piece (long
    gaps) takes the per-tuple path, ``O(tuples x classes)``.  Why pieces: a whole partition's
    edges can be many millions (hundreds of classes over hours of data), and the per-tuple
    path then cost ~10 s per million tuples with 356 classes."""
    n = ts.shape[0]
    start = np.empty(n, dtype=np.int64)
    end = np.empty(n, dtype=np.int64)
    for a in range(0, n, PIECE_ROWS):
        b = min(n, a + PIECE_ROWS)
        t = ts[a:b]
        lo, hi = floor_edge(classes, int(t[0])), next_edge(classes, int(t[-1]))
        if estimate_edges(classes, lo, hi + 1) <= 8 * (b - a) + 4096:
            e = edges_between(classes, lo, hi + 1)  # hi: an edge after every tuple
            i = np.searchsorted(e, t, side="right") - 1
            start[a:b] = e[i]
            end[a:b] = e[i + 1]
        else:
            st = _floor_edges(classes, t)
            first = np.flatnonzero(np.r_[True, st[1:] != st[:-1]])
            start[a:b] = st
            end[a:b] = np.repeat(_next_edges(classes, st[first]), np.diff(np.r_[first, b - a]))
    return start, end


def slice_aggregates(ts, values, classes, *, with_sq: bool = True) -> dict[str, np.ndarray]:
    """Pre-aggregate tuples into the slices of the edge set ``classes`` (residue classes
    ``(s, c)``, e.g. ``slicing.edge_classes`` of every (r, s) on the stream).

    Returns the ``SLICE_COLUMNS`` as numpy arrays, one row per **non-empty** slice, sorted by
    ``slice_start``.  Tuples need not be sorted (they are sorted by time first, stably, the
    order in which a tree folds tuples).  int input gives int64 sum/min/max/sq (exact, int64
    wrap-around on overflow), float input float64.  Slices are located piece by piece along
    the time axis (``_slice_bounds``), so cost stays ~linear in tuples for hundreds of classes
    and sparse data with long gaps stays cheap.
    """
    ts = np.asarray(ts).astype(np.int64, copy=False)
    v = np.asarray(values)
    if v.dtype == np.bool_:
        v = v.astype(np.int64)
    is_int = bool(np.issubdtype(v.dtype, np.integer))
    v = v.astype(np.int64 if is_int else np.float64, copy=False)
    n = ts.shape[0]
    if n == 0:
        t = np.int64 if is_int else np.float64
        z = np.zeros(0, np.int64)
        out = {
            "slice_start": z,
            "slice_end": z,
            "ts_max": z,
            "count": z,
            "sum": np.zeros(0, t),
            "min": np.zeros(0, t),
            "max": np.zeros(0, t),
            "sq": np.zeros(0, t),
        }
        if not is_int:
            out.update(sum_lo=np.zeros(0), sq_lo=np.zeros(0))
        return out
    classes = list(classes)
    if n > 1 and np.any(ts[1:] < ts[:-1]):
        o = np.argsort(ts, kind="stable")
        ts, v = ts[o], v[o]
    key, ends = _slice_bounds(ts, classes)
    first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    start, end = key[first], ends[first]
    count = np.diff(np.r_[first, n]).astype(np.int64)
    out = {
        "slice_start": start,
        "slice_end": end,
        "ts_max": ts[np.r_[first[1:], n] - 1],
        "count": count,
        "min": np.minimum.reduceat(v, first),
        "max": np.maximum.reduceat(v, first),
    }
    if is_int:
        out["sum"] = np.add.reduceat(v, first)
        out["sq"] = np.add.reduceat(v * v, first) if with_sq else np.zeros_like(out["sum"])
        return out
    # float: double-double sums, as the tuple path computes them
    g = np.cumsum(np.r_[False, key[1:] != key[:-1]]).astype(np.int64)
    m = first.shape[0]
    sh, sl = np.zeros(m), np.zeros(m)
    reduce_slices(OP_SUM, g, v, np.zeros(n), sh, sl)
    qh, ql = np.zeros(m), np.zeros(m)
    if with_sq:
        hi, lo = np.empty(n), np.empty(n)
        lift_square(v, hi, lo)
        reduce_slices(OP_SUM, g, hi, lo, qh, ql)
    out.update(sum=sh, sum_lo=sl, sq=qh, sq_lo=ql)
    return out


# ----------------------------------------------------------------------------- consumer
def _dd_from_int(x: np.ndarray):
    """An exact int64 as a normalised double-double (hi = nearest double, lo = remainder)."""
    hi = x.astype(np.float64)
    lo = (x - hi.astype(np.int64)).astype(np.float64)
    return hi, lo


class SliceStreamSlicer(StreamSlicer):
    """``StreamSlicer`` whose items are incoming slices (records of ``slice_dtype``) stamped
    with their ``ts_max``: they are folded into the tree's slices like tuples would be."""

    lifted_items = True  # items are slice records: fold them through ``_lift``

    def _values(self, values):
        v = np.asarray(values)
        if v.dtype.names is None or not {"c", "s", "sl", "mn", "mx", "q", "ql"} <= set(
            v.dtype.names
        ):
            raise ValueError(
                "a slice-fed tree takes slice records (use "
                "SlicedExecutionTree.process_slices), not raw values"
            )
        if v.ndim != 1:
            raise ValueError(f"slice records must be one-dimensional, got shape {v.shape}")
        is_int = bool(np.issubdtype(v.dtype["s"], np.integer))
        if self.is_int is None and v.shape[0]:
            self.is_int = is_int
        if self.is_int is not None and v.shape[0] and is_int != self.is_int:
            raise ValueError(
                f"this tree aggregates {'int64' if self.is_int else 'float64'} "
                f"slices; got {v.dtype['s']}"
            )
        return v.astype(slice_dtype(self.is_int if self.is_int is not None else is_int), copy=False)

    def _lift(self, p: Primitive, vals):
        dt = p.np_dtype
        n = vals.shape[0]
        zeros = np.zeros(n, dtype=dt)
        if p.source == "one":
            return vals["c"].astype(dt), zeros
        if p.source == "v" and p.op == OP_MIN:
            return vals["mn"].astype(dt), zeros
        if p.source == "v" and p.op == OP_MAX:
            return vals["mx"].astype(dt), zeros
        if p.op != OP_SUM or p.source not in ("v", "v2"):
            raise ValueError(f"primitive {p} cannot be fed from slices")
        x = vals["s" if p.source == "v" else "q"]
        if dt == np.int64:
            return x.astype(np.int64), zeros
        if np.issubdtype(x.dtype, np.integer):  # exact int sum -> the same exact dd value
            return _dd_from_int(x)
        return x.astype(np.float64), vals["sl" if p.source == "v" else "ql"].copy()

    def state_dict(self) -> dict:
        st = super().state_dict()
        rec = slice_dtype(bool(self.is_int)) if self.is_int is not None else slice_dtype(True)
        for k in ("pend_v", "late_v"):
            if st[k].dtype.names is None:
                st[k] = np.zeros(0, rec)
        return st


class SliceCuttySlicer(CuttySlicer, SliceStreamSlicer):
    """Cutty slicing over incoming slices (MRO: Cutty's chunk folding, then the slice-fed
    items, then ``StreamSlicer``)."""


class SlicedExecutionTree(ExecutionTree):
    """An ``ExecutionTree`` fed with pre-aggregated slices (time windows only).

    ``process_slices(slices)`` takes a pyarrow Table/RecordBatch or a dict of numpy arrays
    with ``SLICE_COLUMNS`` (``sq`` optional unless a query needs stddev), in event-time order,
    and returns the answers it made due, exactly like ``ExecutionTree.process``; ``flush``,
    ``snapshot``/``restore``, ``op_counts`` and ``stats`` are inherited (``stats()["slices"]``
    counts the tree's own slices).  ``late`` holds late *slices* (see the module docstring).
    """

    slicer_cls = SliceStreamSlicer
    cutty_slicer_cls = SliceCuttySlicer

    def __init__(
        self,
        queries,
        technique: str = "slickdeque",
        allowed_lateness: int = 0,
        count_ops: bool = False,
        dtype=None,
        as_arrow: bool = True,
        check_edges: bool = True,
        slicing: str = "pairs",
        columns: QueryColumns | None = None,
    ):
        if columns is None:
            qs = [normalize_query(q) for q in queries]
            bad = [q.id for q in qs if q.kind != "time"]
        else:  # ``ExecutionTree`` 's contract: normalised queries with distinct ids
            qs = list(queries)
            bad = columns.ids[columns.kind != "time"].tolist()
        if bad:
            raise ValueError(f"slice-fed trees run time windows only; count windows: {bad}")
        super().__init__(
            qs,
            technique=technique,
            allowed_lateness=allowed_lateness,
            count_ops=count_ops,
            dtype=dtype,
            as_arrow=as_arrow,
            slicing=slicing,
            columns=columns,
        )
        self.check_edges = bool(check_edges)
        self.slices_in = 0

    def process(self, ts, values):
        """Low-level entry: ``values`` are ``slice_dtype`` records stamped with ``ts``."""
        return super().process(ts, values)

    def process_slices(self, slices):
        cols = self.process_slices_columns(slices, ordered=True)
        return self._empty() if cols is None else self._table(*cols)

    def process_slices_columns(self, slices, *, ordered: bool = False):
        """``process_slices`` returning answer columns, as ``ExecutionTree.process_columns``."""
        return self.process_slice_batch(SliceBatch.of(slices), ordered=ordered)

    def process_slice_batch(
        self, sb: SliceBatch, *, ordered: bool = False, edges_checked: bool = False
    ):
        """Take a prepared ``SliceBatch`` (a node prepares one per stream batch for all its
        trees: the record array is built once).  ``edges_checked``: the caller checked the
        slices against a superset of this tree's edges (a node checks the union of its trees'
        edges once), so this tree's check is skipped."""
        if sb.n == 0:
            return None
        if self.check_edges and not edges_checked:
            self._check_edges(sb.start, sb.end, sb.ts)
        if not sb.has_sq and any(q.aggregate.name == "stddev" for q in self.queries):
            raise ValueError("stddev needs the slices' 'sq' column (sum of squares)")
        self.slices_in += sb.n
        return self.process_columns(sb.ts, sb.rec, ordered=ordered, copy=sb.copy)

    def _check_edges(self, start, end, ts):
        check_slice_edges(self.slicer.classes, start, end, ts, "this tree")

    @property
    def late(self) -> LateTuples:
        """Late slices: ``ts`` = their ``ts_max``, ``values`` = their sums (float64)."""
        lb = self.slicer.late
        if not lb.values:
            return LateTuples(0, np.zeros(0, np.int64), np.zeros(0, np.float64))
        rec = np.concatenate(lb.values)
        return LateTuples(
            lb.count,
            np.concatenate(lb.ts),
            rec["s"].astype(np.float64) if rec.shape[0] else np.zeros(0),
        )


def check_slice_edges(classes, start, end, ts, what: str = "this tree") -> None:
    """Raise ``ValueError`` unless every slice ``[start, end)`` holds its ``ts`` and contains
    no edge of ``classes`` but its start (its boundaries include every edge).  Piece by piece
    (``PIECE_ROWS`` slices): a piece's edges are enumerated when its span holds few, else
    each slice's next edge is computed per class."""
    if np.any(end <= start) or np.any(ts < start) or np.any(ts >= end):
        raise ValueError("each slice needs slice_start <= ts_max < slice_end")
    classes = list(classes)
    n = start.shape[0]
    for p in range(0, n, PIECE_ROWS):
        q = min(n, p + PIECE_ROWS)
        st, en = start[p:q], end[p:q]
        a, b = int(st.min()), int(en.max())
        if estimate_edges(classes, a + 1, b) <= 8 * (q - p) + 4096:
            e = edges_between(classes, a + 1, b)
            inside = np.searchsorted(e, en, side="left") - np.searchsorted(e, st, "right")
            bad = np.nonzero(inside)[0]
        else:
            bad = np.nonzero(_next_edges(classes, st) < en)[0]
        if bad.shape[0]:
            i = p + int(bad[0])
            raise ValueError(
                f"slice [{int(start[i])}, {int(end[i])}) straddles an edge of {what}: the "
                f"slice boundaries must include every edge of the tree's queries "
                f"(classes {classes[:6]}{' ...' if len(classes) > 6 else ''})"
            )


class SliceBatch:
    """One batch of incoming slices, validated, as the slicer's items: ``ts`` (``ts_max``),
    ``rec`` (``slice_dtype`` records), ``start``/``end``, ``has_sq``; ``copy`` tells the
    slicer whether the arrays belong to a caller (a dict's) or are immutable (Arrow's)."""

    __slots__ = ("ts", "rec", "start", "end", "has_sq", "copy", "n")
    ts: np.ndarray
    rec: np.ndarray
    start: np.ndarray
    end: np.ndarray
    has_sq: bool
    copy: bool
    n: int

    @classmethod
    def of(cls, slices) -> SliceBatch:
        cols = _columns(slices)
        sb = cls()
        sb.start, sb.end, sb.ts = cols["slice_start"], cols["slice_end"], cols["ts_max"]
        sb.n = int(sb.ts.shape[0])
        sb.has_sq = "sq" in cols
        sb.copy = isinstance(slices, dict)
        is_int = bool(np.issubdtype(cols["sum"].dtype, np.integer))
        rec = np.empty(sb.n, dtype=slice_dtype(is_int))
        rec["c"] = cols["count"]
        rec["s"] = cols["sum"]
        rec["mn"] = cols["min"]
        rec["mx"] = cols["max"]
        rec["q"] = cols["sq"] if "sq" in cols else 0
        rec["sl"] = cols["sum_lo"] if "sum_lo" in cols else 0.0
        rec["ql"] = cols["sq_lo"] if "sq_lo" in cols else 0.0
        sb.rec = rec
        return sb


def _columns(slices) -> dict[str, np.ndarray]:
    if isinstance(slices, dict):
        get = slices.__getitem__
        names = set(slices)
    else:  # pyarrow Table / RecordBatch
        names = set(slices.schema.names)

        def get(k):
            c = slices.column(k)
            if hasattr(c, "combine_chunks"):
                c = c.combine_chunks()
            if c.null_count:
                raise ValueError(f"slice column {k!r} contains nulls")
            return c.to_numpy(zero_copy_only=False)

    need = [c for c in SLICE_COLUMNS if c != "sq"]
    missing = [c for c in need if c not in names]
    if missing:
        raise KeyError(f"slice batch lacks column(s) {missing}; need {list(SLICE_COLUMNS)}")
    out = {k: np.asarray(get(k)) for k in SLICE_COLUMNS + FLOAT_LO_COLUMNS if k in names}
    for k in ("slice_start", "slice_end", "ts_max", "count"):
        out[k] = out[k].astype(np.int64, copy=False)
    return out
