"""An execution tree whose queries come and go while it runs: query churn (docs/DESIGN.md s. 9).

``ChurnTree`` has ``ExecutionTree``'s streaming interface (``process_columns``, ``flush_columns``,
``late``, ``snapshot``/``restore``, ``stats``) plus ``change(at, add=, remove=)``.

**How a running tree changes its slicing: generations.**  Adding or removing a query changes the
tree's edges (the union of its queries' residue classes).  Rather than re-slicing live state
(the final aggregators index windows by their length in slices, which the new edges change for
every query), a change at event time ``T`` (later than every tuple the tree has consumed):

* freezes the running tree as the *old generation*: from now on it only answers windows that
  start before ``T`` (and, for a query removed at ``T``, only windows ending at or before ``T``);
* starts a *new generation*, an ordinary ``ExecutionTree`` over the new query set, fed the
  tuples with ``ts >= T``; it answers every window of its queries that starts at or after ``T``;
* keeps feeding the old generation (it needs the tuples after ``T`` for its windows that span
  ``T``) until the watermark has passed the end of its last window starting before ``T``;
  then flushes it (those windows are complete: any later tuple for them is late) and drops it.

So every window of every query is answered by exactly one generation, computed over the same
tuples as in an uninterrupted tree: the other queries' answers do not change, an added query
answers exactly the windows with ``start >= T_reg = T``, a removed one exactly those with
``end <= T_unreg = T`` (docs/DESIGN.md s. 9).  The price: for at most the longest range after a
change, the stream is aggregated twice (both generations), and the old generation's memory is held
until then.  Lateness is each generation's own rule (docs/DESIGN.md s. 1 over its queries), so a
tuple arriving within ``allowed_lateness`` of the newest timestamp is never late; a late tuple is
kept once per generation that calls it late.  A tuple older than every running generation's start
(its generations were dropped) is late if a window of the generation that covered its time,
containing it, has ended; otherwise it lies outside every window (``stats()["outside_windows"]``).
Count windows (docs/DESIGN.md s. 1) change the same way on the positions axis: ``T`` is a
position (the tuples consumed so far, or later), every generation takes every tuple after its
creation and numbers it on from the tree's count (``position``), and nothing is late.
Oracles: ``executors.churn_oracle`` (section 9 itself, and the generations spelled out by brute
force); tests: ``tests/executors/test_churn_tree.py``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from .array_pack import pack, unpack
from .edges import INF, NEG_INF
from .query_spec import QueryColumns, meta_json, queries_json
from .slicing import QuerySpec, normalize_query
from .tree import ExecutionTree, LateTuples, fits, normalize_technique


def technique_for(technique: str, queries: list[QuerySpec], columns=None) -> str:
    """The requested technique, or ``slickdeque`` where it cannot run this query set (a new
    generation may gain a max query under ``slickdeque_inv``, or a second window length under a
    single-length technique).  ``columns``: the queries' ``QueryColumns``, when known."""
    t = normalize_technique(technique)
    if columns is None:
        columns = QueryColumns.of(queries)
    aggs = [queries[i].aggregate for i in columns.first_of_each_aggregate()]
    windows = zip(columns.range.tolist(), columns.slide.tolist())  # read only if single-length
    return t if fits(t, aggs, windows) else "slickdeque"


#: a generation's domain arrays, as its snapshot keeps them (``gen{i}/{name}``, version 2)
_DOMAIN = ("qmap", "lo", "hi", "ehi")


@dataclass
class _Gen:
    """One generation: a plain tree, the first timestamp it takes, and per query (local order)
    its index in the lineage, its domain ``lo <= start < hi``, ``end <= ehi`` and its columns
    (``QueryColumns``)."""

    tree: ExecutionTree
    t_start: int  # NEG_INF: every tuple
    qmap: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    ehi: np.ndarray
    columns: QueryColumns
    late_seen: int = 0
    identity: bool = field(default=False)

    def bounded(self) -> bool:
        return bool((self.lo != NEG_INF).any() or (self.hi != INF).any() or (self.ehi != INF).any())

    def last_end(self) -> int:
        """An upper bound of the end of every window in the domain (INF: open ended): per
        query, the end of the last window starting before ``hi``, capped at ``ehi``.

        In numpy, one pass over the generation's queries (a change retires generations of
        ~1,000 queries per tree at 100,000 queries); its tests hold the loop it replaced."""
        hi, ehi = self.hi, self.ehi
        open_ended = (hi == INF) & (ehi == INF)
        if open_ended.any():
            return INF
        if not len(hi):
            return NEG_INF
        s, r = self.slides_ranges()
        capped = hi != INF
        h = np.where(capped, hi, 0)  # no overflow where hi is INF (the end is INF there)
        end = np.where(capped, (-(-h // s) - 1) * s + r, INF)
        return int(np.minimum(end, ehi).max())

    def slides_ranges(self) -> tuple[np.ndarray, np.ndarray]:
        """The generation's queries' slides and ranges (int64, local order)."""
        c = self.columns
        return c.slide, c.range

    def keep(self, cols):
        """Lineage-indexed answer columns inside the domain (None when nothing is left)."""
        if cols is None:
            return None
        q, st, en, va = cols
        if not self.identity:
            q = self.qmap[q]
        if self.bounded():
            j = np.searchsorted(self._lineage_order, q)
            m = (st >= self.lo[j]) & (st < self.hi[j]) & (en <= self.ehi[j])
            if not m.all():
                q, st, en, va = q[m], st[m], en[m], va[m]
        return (q, st, en, va) if q.shape[0] else None

    @property
    def _lineage_order(self):
        # qmap is increasing (a generation lists its queries in lineage order), so a lineage
        # index maps back to the local one by binary search
        return self.qmap


class ChurnTree:
    """A tree over one stream whose query set changes at event times (see module doc).

    ``ChurnTree(queries, technique, allowed_lateness, count_ops, dtype, slicing, t_start)``;
    ``t_start`` (``T_reg`` of every initial query) makes a tree that answers only windows
    starting at or after it (a tree started for queries added to a running deployment).
    ``queries`` lists every query the tree has answered or answers (answer columns index it);
    ``active`` the ids registered now.
    """

    #: the tree class of a generation (a slice-fed churn tree swaps in a slice-fed tree)
    gen_tree_cls = ExecutionTree

    def __init__(
        self,
        queries,
        technique: str = "slickdeque",
        allowed_lateness: int = 0,
        count_ops: bool = False,
        dtype=None,
        slicing: str = "pairs",
        t_start: int | None = None,
        as_arrow: bool = True,
    ):
        qs = [normalize_query(q) for q in queries]
        if not qs:
            raise ValueError("a tree needs at least one query")
        self.technique = normalize_technique(technique)
        self.allowed_lateness = int(allowed_lateness)
        self.count_ops = bool(count_ops)
        self.slicing = slicing
        self.dtype = dtype
        self.queries: list[QuerySpec] = []
        self._index: dict[str, int] = {}
        self._columns = QueryColumns.of([])  # the lineage's (``queries``)
        self.active: list[str] = []
        self.gens: list[_Gen] = []
        self.retired: list[tuple[int, list[tuple[int, int]]]] = []  # (t_start, [(r, s)])
        self.max_ts = NEG_INF
        self.outside = 0
        self._late_ts: list[np.ndarray] = []
        self._late_v: list[np.ndarray] = []
        self._late_count = 0
        self.flushed = False
        t0 = NEG_INF if t_start is None else int(t_start)
        kinds = {q.kind for q in qs}
        if len(kinds) > 1:
            raise ValueError(f"a tree cannot mix time and count windows: {sorted(kinds)}")
        self.kind = kinds.pop()
        # count windows: the position of the next tuple (a tree started later, for queries
        # added to a running deployment, starts at the stream's count so far: ``t_start``)
        self.position = 0 if t_start is None or self.kind != "count" else int(t_start)
        if len({q.id for q in qs}) != len(qs):
            raise ValueError(f"duplicate query ids in one tree: {[q.id for q in qs]}")
        self._start_gen(np.zeros(0, np.int64), qs, t0, lo=t0)

    # -- generations -----------------------------------------------------------------------
    def _start_gen(self, keep: np.ndarray, add: list[QuerySpec], t0: int, lo: int) -> None:
        """Start a generation at ``t0`` over the lineage's queries ``keep`` (indices, increasing)
        and the new queries ``add`` (distinct ids, none in the lineage), which the lineage gains
        at its end: so the generation lists its queries in lineage order, and its columns are
        the lineage's, gathered, not read from each query again (``QueryColumns``)."""
        base = len(self.queries)
        if add:
            for i, q in enumerate(add, base):
                self._index[q.id] = i
            self.queries.extend(add)
            self._columns = self._columns.concat(QueryColumns.of(add))
        qmap = np.concatenate([keep, np.arange(base, base + len(add), dtype=np.int64)])
        qs = list(map(self.queries.__getitem__, qmap.tolist()))
        cols = self._columns.take(qmap)
        tree = self.gen_tree_cls(
            qs,  # normalised already: not as dicts to be normalised again
            technique=technique_for(self.technique, qs, cols),
            allowed_lateness=self.allowed_lateness,
            count_ops=self.count_ops,
            dtype=self._dtype(),
            slicing=self.slicing,
            columns=cols,
        )
        n = len(qs)
        if n == len(self.queries):  # the generation runs the whole lineage, in order
            self._queries_json = queries_json(self.queries, getattr(self, "_queries_json", None))
            tree._queries_json = self._queries_json  # its snapshot lists the same queries
        if self.kind == "count":  # positions go on from the stream's count so far
            tree.slicer.position = self.position
        los = np.full(n, lo, np.int64)
        g = _Gen(tree, t0, qmap, los, np.full(n, INF, np.int64), np.full(n, INF, np.int64), cols)
        g.identity = n == len(self.queries)  # qmap is increasing: the whole lineage
        self.gens.append(g)
        self.active = cols.ids.tolist()

    def _dtype(self):
        if self.dtype is not None:
            return self.dtype
        for g in reversed(self.gens):
            isi = g.tree.slicer.is_int
            if isi is not None:
                return np.int64 if isi else np.float64
        return None

    @property
    def newest(self) -> _Gen | None:
        """The generation that takes changes (None once every query was removed)."""
        return self.gens[-1] if self.active and self.gens else None

    def change(self, at: int, add=(), remove=(), handoff=()) -> int:
        """Add queries (registered at ``at``: windows starting at or after it) and remove
        queries (unregistered at ``at``: windows ending at or before it).  ``handoff``: queries
        that leave this tree for another one that takes them from ``at`` on (re-weaving): this
        tree still answers their windows *starting* before ``at``, so together the two trees
        answer every window once; a handed-off query removed later (at the tree that took it)
        must be removed here too, which only caps its windows left here.  ``at`` must be later
        than every timestamp consumed; for count windows it is a position, later than every
        position consumed (the new generation numbers its first tuple ``self.position``, the
        tuples consumed so far).  Returns ``at``."""
        at = int(at)
        add = [normalize_query(q) for q in add]
        capped = [str(r) for r in remove]
        # a query this tree handed off earlier still has windows here (starting before the
        # hand-off): its removal caps them too, and changes nothing else in this tree
        running = set(self.active) if capped or handoff else set()
        handed = {r for r in capped if r not in running and r in self._index}
        remove = [r for r in capped if r not in handed] + [str(r) for r in handoff]
        if self.flushed:
            raise ValueError("the tree was flushed (end of input)")
        if self.max_ts != NEG_INF and at <= self.max_ts:  # count windows: positions
            what = "position" if self.kind == "count" else "timestamp"
            raise ValueError(
                f"change at {at} must be later than every {what} consumed (newest: {self.max_ts})"
            )
        if self.gens and at < self.gens[-1].t_start:
            raise ValueError(
                f"change at {at} is before the newest generation's start {self.gens[-1].t_start}"
            )
        ids = [q.id for q in add]
        if len(set(ids)) != len(ids):
            raise ValueError(f"duplicate query ids in one change: {sorted(ids)}")
        for qid in ids:
            if qid in self._index:
                raise ValueError(f"query id {qid!r} was already used in this tree")
        for q in add:
            if q.kind != self.kind:
                raise ValueError(
                    f"query {q.id!r}: a {q.kind}-window query cannot join a tree of "
                    f"{self.kind} windows"
                )
        unknown = [r for r in remove if r not in running]
        if unknown:
            raise ValueError(f"unknown query ids (not running in this tree): {unknown}")
        # a removed query answers no window ending after T_unreg, in any generation
        for old in self.gens if capped else ():
            rm = np.isin(
                np.array([q.id for q in old.tree.queries], dtype=object),
                np.array(capped, dtype=object),
            )
            old.ehi = np.where(rm, np.minimum(old.ehi, at), old.ehi)
        if not add and not remove:
            return at
        g = self.newest
        keep = np.zeros(0, np.int64)
        if g is not None:
            g.hi = np.minimum(g.hi, at)
            keep = g.qmap
            if remove:
                gone = np.fromiter(map(self._index.__getitem__, remove), np.int64, len(remove))
                keep = keep[~np.isin(keep, gone)]
        if len(keep) or add:
            self._start_gen(keep, add, at, lo=at)
        else:
            self.active = []
        self._retire()
        return at

    def _retire(self, W: int | None = None) -> list:
        """Flush and drop every non-newest generation whose domain has closed; returns their
        answer columns (lineage indexed)."""
        if W is None:
            W = self.watermark
        out, alive = [], []
        newest = self.newest
        for g in self.gens:
            if g is not newest and g.last_end() <= W:
                c = g.keep(g.tree.flush_columns())
                if c is not None:
                    out.append(c)
                self._take_late(g)
                # its distinct windows: what late tuples and cut plans read (every change
                # retires a generation per changed tree, and snapshots carry them all)
                rs = sorted({(q.range, q.slide) for q in g.tree.queries})
                self.retired.append((g.t_start, rs))
                self.retired.sort(key=lambda x: x[0])
            else:
                alive.append(g)
        self.gens = alive
        return out

    def _take_late(self, g: _Gen) -> None:
        n = g.tree.slicer.late.count
        if n > g.late_seen:
            lt = g.tree.late
            self._late_ts.append(lt.ts[g.late_seen :])
            self._late_v.append(lt.values[g.late_seen :])
            self._late_count += n - g.late_seen
            g.late_seen = n

    # -- streaming --------------------------------------------------------------------------
    @property
    def watermark(self) -> int:
        return NEG_INF if self.max_ts == NEG_INF else self.max_ts - self.gens_lateness

    @property
    def gens_lateness(self) -> int:
        return 0 if self.kind == "count" else self.allowed_lateness

    def process_columns(
        self, ts, values, *, ordered: bool = False, in_order: bool | None = None, copy: bool = True
    ):
        """As ``ExecutionTree.process_columns``; ``qidx`` indexes ``queries``."""
        if self.kind == "count":
            return self._process_positions(values, ordered, copy)
        if (
            len(self.gens) == 1
            and self.gens[0].t_start == NEG_INF
            and self.gens[0].identity
            and not self.gens[0].bounded()
        ):
            g = self.gens[0]
            cols = g.tree.process_columns(ts, values, ordered=ordered, in_order=in_order, copy=copy)
            if ts is not None and len(ts):
                self.max_ts = max(self.max_ts, int(np.max(ts)))
            else:
                self.max_ts = max(self.max_ts, g.tree.slicer.max_ts)
            self._take_late(g)
            return cols
        ts = np.asarray(ts, dtype=np.int64)
        values = np.asarray(values)
        if not ts.shape[0]:
            return None
        prev = self.max_ts
        out = []
        t_min = int(ts.min())
        first_start = min((g.t_start for g in self.gens), default=INF)
        for g in list(self.gens):
            if g.t_start == NEG_INF or t_min >= g.t_start:
                cols = g.tree.process_columns(
                    ts, values, ordered=ordered, in_order=in_order, copy=copy
                )
            else:
                m = ts >= g.t_start
                if not m.any():
                    continue
                cols = g.tree.process_columns(
                    ts[m], values[m], ordered=ordered, in_order=in_order, copy=False
                )
            c = g.keep(cols)
            if c is not None:
                out.append(c)
            self._take_late(g)
        if t_min < first_start:
            self._unrouted(ts, values, prev, first_start)
        self.max_ts = max(prev, int(ts.max()))
        out += self._retire()
        return _concat(out, ordered)

    def _process_positions(self, values, ordered: bool, copy: bool):
        """Count windows: every generation takes every tuple (a tuple's position is its
        arrival number, so none is older than a generation's start and none is late)."""
        values = np.asarray(values)
        if not values.shape[0]:
            return None
        out = []
        for g in self.gens:
            c = g.keep(g.tree.process_columns(None, values, ordered=ordered, copy=copy))
            if c is not None:
                out.append(c)
        self.position += int(values.shape[0])
        self.max_ts = self.position - 1  # the newest position: the count trees' watermark
        out += self._retire()
        return _concat(out, ordered)

    def _unrouted(self, ts, values, prev: int, first_start: int) -> None:
        """Tuples older than every running generation: late or outside every window."""
        run = np.maximum.accumulate(ts)
        if prev != NEG_INF:
            run = np.maximum(run, prev)
        W = run - self.gens_lateness
        m = ts < first_start
        t, v, w = ts[m], values[m], W[m]
        late = np.zeros(t.shape[0], dtype=bool)
        starts = np.array([s for s, _ in self.retired], dtype=np.int64)
        owner = np.searchsorted(starts, t, side="right") - 1
        for gi, (_, rs) in enumerate(self.retired):
            sel = owner == gi
            if not sel.any():
                continue
            tt, ww = t[sel], w[sel]
            hit = np.zeros(tt.shape[0], dtype=bool)
            for r, s in rs:
                k_lo = (tt - r) // s + 1
                hit |= (k_lo <= tt // s) & (k_lo * s + r <= ww)
            late[np.flatnonzero(sel)[hit]] = True
        if late.any():
            self._late_ts.append(t[late])
            self._late_v.append(v[late])
            self._late_count += int(late.sum())
        self.outside += int((~late).sum())

    def flush_columns(self, *, ordered: bool = False):
        """End of input: every generation emits its pending windows (domains applied)."""
        out = []
        for g in self.gens:
            c = g.keep(g.tree.flush_columns(ordered=ordered))
            if c is not None:
                out.append(c)
            self._take_late(g)
        self.flushed = True
        return _concat(out, ordered)

    def process(self, ts, values):
        """``process_columns`` as a pyarrow table (tests, small uses)."""
        return self._table(self.process_columns(ts, values, ordered=True))

    def flush(self):
        return self._table(self.flush_columns(ordered=True))

    def _table(self, cols):
        import pyarrow as pa

        if cols is None:
            return pa.table(
                {
                    "query_id": pa.array([], pa.string()),
                    "window_start": pa.array([], pa.int64()),
                    "window_end": pa.array([], pa.int64()),
                    "value": pa.array([], pa.float64()),
                }
            )
        q, st, en, va = cols
        ids = np.array([x.id for x in self.queries], dtype=object)
        return pa.table(
            {
                "query_id": pa.array(ids[q], pa.string()),
                "window_start": pa.array(st, pa.int64()),
                "window_end": pa.array(en, pa.int64()),
                "value": pa.array(va),
            }
        )

    def _late_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The kept late items as stored (a slice-fed subclass keeps slice records)."""
        isi = self._dtype()
        vdt = np.float64 if isi is np.float64 else np.int64
        ts = np.concatenate(self._late_ts) if self._late_ts else np.zeros(0, np.int64)
        v = np.concatenate(self._late_v) if self._late_v else np.zeros(0, vdt)
        return ts, v

    @property
    def late(self) -> LateTuples:
        ts, v = self._late_arrays()
        return LateTuples(self._late_count, ts, v)

    def stats(self) -> dict:
        st: dict = {}
        for g in self.gens:
            for k, v in g.tree.stats().items():
                if isinstance(v, (bool, np.bool_)):
                    st[k] = bool(st.get(k, True)) and bool(v)
                elif isinstance(v, (int, np.integer)):
                    st[k] = st.get(k, 0) + int(v)
        st["late"] = self._late_count
        st["outside_windows"] = st.get("outside_windows", 0) + self.outside
        st["generations"] = len(self.gens)
        st["active_queries"] = len(self.active)
        return st

    def op_counts(self) -> dict:
        total = slices = 0
        for g in self.gens:
            oc = g.tree.op_counts()
            total += int(oc["total"])
            slices += int(oc["slices"])
        return {"slices": slices, "total": total, "omega": total / slices if slices else 0.0}

    def done(self) -> bool:
        """Every query removed and every generation dropped: the tree can go."""
        return not self.active and not self.gens

    # -- snapshot -------------------------------------------------------------------------
    def snapshot(self) -> bytes:
        """numpy .npz bytes: JSON metadata + each running generation's own snapshot and its
        domain arrays.  Version 2: a generation's snapshot lists no queries (they are the
        lineage's at ``qmap``, listed once here) and its domain (``qmap``, ``lo``, ``hi``,
        ``ehi``) is arrays, not JSON lists; version 1 had both in JSON, which at 100,000
        queries made 35 of a node's 51 MB snapshot."""
        meta = {
            "version": 2,
            "live": True,
            "technique": self.technique,
            "allowed_lateness": self.allowed_lateness,
            "count_ops": self.count_ops,
            "slicing": self.slicing,
            "active": self.active,
            "max_ts": int(self.max_ts),
            "kind": self.kind,
            "position": int(self.position),
            "outside": self.outside,
            "late_count": self._late_count,
            "flushed": self.flushed,
            "dtype": None if self._dtype() is None else np.dtype(self._dtype()).name,
            "retired": [[int(t), [list(x) for x in rs]] for t, rs in self.retired],
            "gens": [{"t_start": int(g.t_start), "late_seen": g.late_seen} for g in self.gens],
        }
        text, self._queries_json = meta_json(
            meta, self.queries, getattr(self, "_queries_json", None)
        )
        arrays = {"meta": np.frombuffer(text.encode(), np.uint8)}
        arrays["late_ts"], arrays["late_v"] = self._late_arrays()
        for i, g in enumerate(self.gens):
            arrays[f"gen{i}"] = np.frombuffer(g.tree.snapshot(with_queries=False), np.uint8)
            for k in _DOMAIN:
                arrays[f"gen{i}/{k}"] = getattr(g, k)
        return pack(arrays)

    @classmethod
    def restore(cls, data: bytes) -> ChurnTree:
        arrays = unpack(data)
        meta = json.loads(arrays["meta"].tobytes().decode())
        if not meta.get("live"):
            raise ValueError("not a ChurnTree snapshot")
        self = cls.__new__(cls)
        self.technique = meta["technique"]
        self.allowed_lateness = int(meta["allowed_lateness"])
        self.count_ops = bool(meta["count_ops"])
        self.slicing = meta["slicing"]
        self.dtype = None if meta["dtype"] is None else np.dtype(meta["dtype"]).type
        self.queries = [normalize_query(q) for q in meta["queries"]]
        self._index = {q.id: i for i, q in enumerate(self.queries)}
        self._columns = QueryColumns.of(self.queries)
        self.active = list(meta["active"])
        self.max_ts = int(meta["max_ts"])
        self.outside = int(meta["outside"])
        self.flushed = bool(meta["flushed"])
        self.retired = [(int(t), [tuple(x) for x in rs]) for t, rs in meta["retired"]]
        self._late_ts, self._late_v = [arrays["late_ts"].copy()], [arrays["late_v"].copy()]
        self._late_count = int(meta["late_count"])
        self.gens = []
        for i, gm in enumerate(meta["gens"]):
            # version 1: the domain in the JSON, the queries in the generation's snapshot
            dom = {
                k: np.array(gm[k], np.int64) if k in gm else arrays[f"gen{i}/{k}"].copy()
                for k in _DOMAIN
            }
            qs = [self.queries[j] for j in dom["qmap"].tolist()]
            tree = cls.gen_tree_cls.restore(arrays[f"gen{i}"].tobytes(), queries=qs)
            g = _Gen(
                tree,
                int(gm["t_start"]),
                dom["qmap"],
                dom["lo"],
                dom["hi"],
                dom["ehi"],
                self._columns.take(dom["qmap"]),
                int(gm["late_seen"]),
            )
            g.identity = bool(np.array_equal(g.qmap, np.arange(len(g.qmap))))
            self.gens.append(g)
        kinds = [g.tree.kind for g in self.gens]
        self.kind = meta.get("kind") or (kinds[0] if kinds else "time")
        self.position = int(meta.get("position", 0))
        return self


def _concat(parts: list, ordered: bool):
    if not parts:
        return None
    if len(parts) == 1:
        cols = parts[0]
    else:
        cols = tuple(np.concatenate([p[i] for p in parts]) for i in range(4))
    if ordered:
        o = np.lexsort((cols[0], cols[2]))
        cols = tuple(c[o] for c in cols)
    return cols
