"""Cutty slicing (Carbone et al., CIKM 2016): slices start only where windows start.

Pairs cuts the stream at every window start *and* end (docs/DESIGN.md s. 2), so a query with
``r mod s != 0`` has ``2 floor(r/s) + 1`` slices per window.  Cutty cuts only at window starts
(classes ``(s, 0)``): ``ceil(r/s)`` partials per window (dissertation Table 1), i.e. fewer
slices for final aggregation to store and update.  A window that ends inside a slice is answered
as *(complete slices before its end, from the final aggregator) (+) (the open slice's partial up
to the end)*: one extra combine per such answer.

How, vectorised and without a second slicing engine: ``CuttySlicer`` is the ordinary
``StreamSlicer`` (Pairs cuts, watermark, lateness, sealing, skipping) whose sealed Pairs slices
become *sub-slices*.  A segmented running fold (``_segmented_prefix``) turns them into

* the Cutty slices: the fold of the sub-slices between two window starts, handed to the final
  aggregator when the last one is sealed;
* the open partial at each window end inside a Cutty slice: the fold of its sub-slices so far
  (Cutty's "current value of the partial"; carried between chunks, snapshotted).

Tuples are folded into sub-slices exactly as in Pairs (one ``reduce_slices`` per tuple); folding
sub-slices into slices and open partials is partial-aggregation work, not counted as final
aggregation operations (as Pairs' per-tuple folding is not).  Timing and lateness are the Pairs
slicer's, so answers and late tuples equal Pairs' and the oracle's.

Due windows carry, besides the query: ``due_n`` = complete Cutty slices (starts in ``(x, e]``
for the window ``[x, e)``; 0 when the window lies inside one slice), ``due_slice`` = the local
index of the last Cutty slice inserted before the answer (-1: inserted by an earlier chunk; the
tree then asks the aggregator's ``answer`` before this chunk's inserts), ``due_end`` and
``due_frag`` (whether the open partial ``frag[prim]`` is combined in).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .aggregates import combine2
from .slicing import SliceChunk, StreamSlicer, floor_edge, window_lengths


@njit(cache=True)
def _segmented_prefix(op, hi, lo, flags, open_hi, open_lo, ident_hi, ident_lo):
    """In place: sub-slice i becomes open (+) sub_i; after a flagged one (it ends at a window
    start) the open partial restarts from the identity.  ``open_*`` (length 1) carry over."""
    oh = open_hi[0]
    ol = open_lo[0]
    for i in range(hi.shape[0]):
        oh, ol = combine2(op, oh, ol, hi[i], lo[i])
        hi[i] = oh
        lo[i] = ol
        if flags[i]:
            oh = ident_hi
            ol = ident_lo
    open_hi[0] = oh
    open_lo[0] = ol


@njit(cache=True)
def combine_columns(op, ah, al, bh, bl):
    """In place: a_i = a_i (+) b_i (complete slices (+) open partial)."""
    for i in range(ah.shape[0]):
        h, l = combine2(op, ah[i], al[i], bh[i], bl[i])
        ah[i] = h
        al[i] = l


class CuttySlicer(StreamSlicer):
    """``StreamSlicer`` whose chunks hold Cutty slices (cut at window starts only)."""

    def __init__(self, queries, primitives, allowed_lateness: int = 0, is_int=None, columns=None):
        super().__init__(queries, primitives, allowed_lateness, is_int, columns)
        self.start_classes = sorted({(s, 0) for _, s in self.rs})
        mods = sorted({s for s, _ in self.start_classes})
        # a multiple of s starts nothing new: (2, 0) covers (4, 0)
        self._start_mods = np.array(
            [m for m in mods if not any(m % d == 0 for d in mods if d < m)], dtype=np.int64
        )
        self.wsize, self.ns, self.exact_ns = window_lengths(self.rs, self.start_classes, "cutty")
        self._hflags = self._is_start(self.hist)
        self._staged = None
        self.open: dict = {}  # prim -> (hi[1], lo[1]): the open slice's partial
        self.open_count = 0
        self.open_start: int | None = None  # window start where the open slice began
        self.n_cuts = 0  # Pairs sub-slices sealed

    # -- helpers ---------------------------------------------------------------
    def _is_start(self, t: np.ndarray) -> np.ndarray:
        """Whether each position of the sorted array ``t`` is a window start."""
        k = t.shape[0]
        if k == 0:
            return np.zeros(0, dtype=np.bool_)
        a = int(t[0])
        span = int(t[-1]) + 1 - a
        if span <= 8 * k + 1024:  # a bitmap of the span: one strided write per slide
            mark = np.zeros(span, dtype=np.bool_)
            for m in self._start_mods.tolist():
                mark[(-a) % m :: m] = True
            return mark[t - a]
        out = np.zeros(k, dtype=np.bool_)
        for m in self._start_mods.tolist():
            out |= t % m == 0
        return out

    def _set_hist(self, hist):
        self.hist = hist
        if self._staged is not None:  # flags of (old hist + chunk ends): keep the suffix
            self._hflags = self._staged[self._staged.shape[0] - hist.shape[0] :]
            self._staged = None
        else:
            self._hflags = self._is_start(hist)

    def _open(self, p):
        if p not in self.open:
            self.open[p] = p.identity_arrays(1)
        return self.open[p]

    def _on_skip(self):
        # Defensive: at a jump the open partial holds no data.  The slicer only jumps from a
        # cut ``cur`` >= last data + max_r, and a cut inside an open slice is the end of a
        # window starting at or before the slice's start, so data in the slice would still be
        # needed by that window.  Restart the open slice where the jump lands.
        for p in list(self.open):
            self.open[p] = p.identity_arrays(1)
        self.open_count = 0
        self.open_start = floor_edge(self.start_classes, self.cursor)

    # -- chunks ----------------------------------------------------------------
    def _make_chunk(self, starts: np.ndarray, ends: np.ndarray) -> SliceChunk:
        if self.open_start is None:
            self.open_start = floor_edge(self.start_classes, int(starts[0]))
        h = self.hist.shape[0]
        flags = self._is_start(ends)
        flag_all = np.concatenate([self._hflags, flags])
        self._staged = flag_all
        sub = super()._make_chunk(starts, ends)  # Pairs sub-slices, due windows, state
        self.n_cuts += ends.shape[0]
        self.n_slices -= ends.shape[0]
        done = np.flatnonzero(flags)  # sub-slices that complete a Cutty slice
        kc = done.shape[0]
        # Cutty slice partials and open partials: one segmented fold per primitive
        pref = {}
        for p, (hi, lo) in sub.partials.items():
            oh, ol = self._open(p)
            ih, il = p.identity_arrays(1)
            _segmented_prefix(p.op, hi, lo, flags, oh, ol, ih[0], il[0])
            pref[p] = (hi, lo)
        partials = {p: (hi[done], lo[done]) for p, (hi, lo) in pref.items()}
        # counts per Cutty slice (the open one's carried over)
        before = np.cumsum(flags) - flags  # completed Cutty slices before sub-slice i
        cnt = np.bincount(before, weights=sub.counts, minlength=kc + 1).astype(np.int64)
        cnt[0] += self.open_count
        self.open_count = int(cnt[kc])
        c_ends = ends[done]
        c_starts = np.empty(kc, dtype=np.int64)
        if kc:
            c_starts[0] = self.open_start
            c_starts[1:] = c_ends[:-1]
            self.open_start = int(c_ends[-1])
        self.n_slices += kc
        # due windows: complete slices = starts in (x, e], x = e - r (a cut, in hist + ends)
        i = sub.due_slice
        cum = np.zeros(flag_all.shape[0] + 1, dtype=np.int64)
        np.cumsum(flag_all, out=cum[1:])
        ie = h + i
        ix = ie - sub.due_n  # Pairs n = cuts in [x, e)
        fe = flags[i]
        nc = cum[ie] - cum[ix] - 1 + fe
        attach = np.cumsum(flags)[i] - 1
        end = ends[i]
        # order: attach ascending, n descending; the Pairs order (end, then n descending, then
        # query) is kept inside, as a stable sort on one int64 key is much cheaper than lexsort
        # (for one end, n under Cutty grows with n under Pairs: equal (end, n) stay adjacent)
        o = np.argsort((attach + 1) * (self.wsize + 2) + (self.wsize - nc), kind="stable")
        frag = {p: (hi[i[o]], lo[i[o]]) for p, (hi, lo) in pref.items()}
        ch = SliceChunk(
            c_starts,
            c_ends,
            cnt[:kc],
            partials,
            attach[o],
            sub.due_query[o],
            nc[o],
            sub.due_nonempty[o],
        )
        ch.due_end = end[o]
        ch.due_frag = ~fe[o]
        ch.frag = frag
        return ch

    # -- snapshot --------------------------------------------------------------
    def state_dict(self) -> dict:
        st = super().state_dict()
        st["open_count"] = np.array([self.open_count], dtype=np.int64)
        st["open_start"] = np.array(
            [] if self.open_start is None else [self.open_start], dtype=np.int64
        )
        st["n_cuts"] = np.array([self.n_cuts], dtype=np.int64)
        for j, p in enumerate(self.primitives):
            oh, ol = self._open(p)
            st[f"open_hi{j}"], st[f"open_lo{j}"] = oh.copy(), ol.copy()
        return st

    def load_state_dict(self, st: dict) -> None:
        super().load_state_dict(st)
        self.open_count = int(st["open_count"][0])
        self.open_start = int(st["open_start"][0]) if st["open_start"].shape[0] else None
        self.n_cuts = int(st["n_cuts"][0])
        for j, p in enumerate(self.primitives):
            self.open[p] = (st[f"open_hi{j}"].copy(), st[f"open_lo{j}"].copy())
