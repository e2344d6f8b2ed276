"""WeaveShare's lazy cost lookup table for additive Omega (Panes, FlatFIT), rows in numba.

Why: same plans as the paper's eager table, but a row holds *exact* benefits wherever they are
cheap (both trees single-modulus: ``placement.lazy_table.kernels``) and certified upper bounds
elsewhere, so the engine prices only the few bounded pairs that reach the top; and the table's
bookkeeping (rows, heaps) runs compiled, one kernel call per merge candidate.

A row keeps only its best ``ROW_CAP`` entries, a segment of a flat pool sorted by ``(-value,
partner uid)`` (the eager table's order); when they are used up (merged away or taken) and the
row had more, it is priced again after the last kept key, keeping twice as many (rows are nearly
full when almost every pair has a positive benefit, exp 5, and only their heads matter); a heap
holds each row's current head. An exact head on top of everything
is the eager algorithm's next merge (it beats every exact benefit of the other rows, which are
at most their bounds); a bound on top is priced by the engine and goes onto a second heap of
exact benefits (lazy greedy), unless it is of two large trees and their per-class bound already
shows it at most the floor (``_hopeless``). Each pair lives in exactly one row: that of the
later-filed tree, unless it was after the earlier tree's cut when the later one was priced
(``kernels.rows``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numba
import numpy as np

from placement.edges.fast import single_modulus
from placement.lazy_table import kernels as wk
from placement.lazy_table import spectra
from placement.trees import CostModel, Tree

# Slots hold ``e`` on the tree's axis (the kernels count common edges from its classes) and
# ``om`` = Omega x the tree's axis scale (lambda for count trees, ``placement.trees``): the
# benefit ``lambda + Ox (C - Ey) + Oy (C - Ex)`` is linear in Omega, so it comes out per time
# unit, exactly, for time and count keys alike.


ROW_CAP = 16  # entries a row keeps (its best; the rest is priced again when they are used up)
MASK_BUCKETS = 4096  # a fill bounds bucket pairs first when there are at most this many buckets
PARTS = 0  # parts a row's buckets are bounded and walked in, a thread each (0: numba's threads)
PAR_FROM = 1024  # ... for rows of at least this many buckets (a smaller row stays on one thread)
SORT_FIRST = 256  # buckets a part sorts at first, best bound first (a walk reads few of them)
DENSE = 1 << 16  # a row's tree spectrum goes into a dense scratch when its divisors are below
_NO_LIST = np.zeros(1, dtype=np.int64)
NO_PRUNE = wk.Prune(False, _NO_LIST, _NO_LIST, _NO_LIST, _NO_LIST, 1)  # rows outside a fill


def _grow(arr: np.ndarray, need: int) -> np.ndarray:
    if need <= len(arr):
        return arr
    new = np.zeros(max(need, 2 * len(arr)), dtype=arr.dtype)
    new[: len(arr)] = arr
    return new


_SLOT_DTYPES = {
    "alive": np.bool_,
    "key": np.int64,
    "uid": np.int64,
    "e": np.float64,
    "om": np.float64,
    "cost": np.float64,
    "smod": np.int64,
    "kcls": np.int64,
    "cstart": np.int64,
    "bucket": np.int64,
    "nxt": np.int64,
}
_BUCKET_DTYPES = {
    "key": np.int64,
    "mod": np.int64,
    "kmin": np.int64,
    "kmax": np.int64,
    "klo": np.float64,
    "khi": np.float64,
    "om": np.float64,
    "head": np.int64,
    "newest": np.int64,
    "cut": np.float64,
    "costmax": np.float64,
}
_ROW_DTYPES = {  # per slot (the pool: partner, negval, exact)
    "pos": np.int64,
    "end": np.int64,
    "cap": np.int64,
    "full": np.bool_,
    "cutv": np.float64,
    "cutu": np.int64,
    "chead": np.int64,
}
_CUT_DTYPES = {"ct": np.int64, "cv": np.float64, "cu": np.int64, "cnext": np.int64}


class KernelTable:
    """Alive trees in slots (struct of arrays), classes in a flat pool, buckets as linked lists:
    the ``kernels`` structures, replaced by grown copies when full (the kernels never
    grow them)."""

    def __init__(self, model: CostModel, trees: Sequence[Tree], floor: float):
        self.model = model
        self.floor = float(floor)
        self.trees: list[Tree | None] = []
        cap = max(16, len(trees) + 1)
        self.slots = wk.Slots(**{f: np.zeros(cap, dtype=dt) for f, dt in _SLOT_DTYPES.items()})
        pool = max(64, 2 * cap)
        self.classes = wk.Classes(np.zeros(pool, dtype=np.int64), np.zeros(pool, dtype=np.int64))
        self.npool = 0
        self.buckets = wk.Buckets(
            **{f: np.zeros(64, dtype=dt) for f, dt in _BUCKET_DTYPES.items()},
            env=np.zeros((wk.NENV, 64)),
        )
        self.nb = 0
        self._bucket_of: dict[tuple, int] = {}
        self._keys: dict[tuple, int] = {}
        self._rates: dict[tuple, float] = {}  # lambda per tree key
        self.wmax = 1
        # Rows: segments of a pool (partner, -value, exact); heads: one entry per row
        # (hv, hi = -value, uid lo, uid hi, slot, 0); exact benefits of bounds that reached the
        # top: (ev, ei = -benefit, uid lo, uid hi, a, b).
        self.rows = wk.Rows(
            **{f: np.zeros(cap, dtype=dt) for f, dt in _ROW_DTYPES.items()},
            partner=np.zeros(1024, dtype=np.int64),
            negval=np.zeros(1024),
            exact=np.zeros(1024, dtype=np.bool_),
            **{f: np.zeros(cap, dtype=dt) for f, dt in _CUT_DTYPES.items()},
        )
        sizes = np.zeros(wk.N_SIZES, dtype=np.int64)
        sizes[wk.SZ_PENDING] = -1
        sizes[wk.SZ_PARTS] = PARTS or numba.get_num_threads()
        self._hist = np.zeros((sizes[wk.SZ_PARTS], wk.HIST), dtype=np.int64)  # one per part
        sizes[wk.SZ_PAR_FROM] = PAR_FROM
        sizes[wk.SZ_SORT_FIRST] = SORT_FIRST
        self.heaps = wk.Heaps(
            hv=np.zeros(cap),
            hi=np.zeros((cap, 4), dtype=np.int64),
            ev=np.zeros(64),
            ei=np.zeros((64, 4), dtype=np.int64),
            sizes=sizes,
        )
        self.sizes = sizes  # the same array: the kernels update it in place
        self.spec = wk.Spectra(
            start=np.zeros(cap, dtype=np.int64),
            size=np.zeros(cap, dtype=np.int64),
            d=np.zeros(pool, dtype=np.int64),
            f=np.zeros(pool),
            phi=np.zeros(pool),
            dense=np.zeros(DENSE),
            bstart=np.zeros(64, dtype=np.int64),
            bsize=np.zeros(64, dtype=np.int64),
            bd=np.zeros(256, dtype=np.int64),
            gcds=np.zeros(DENSE, dtype=np.int64),
        )
        self.nbd = 0
        self.nspec = 0
        self.lams = np.zeros(4)  # lambda per key
        self.evaluations = 0  # exact benefits priced by the engine
        self.dropped = 0  # bounds at the top shown at most the floor without it (``_hopeless``)
        self._pop: Callable | None = None  # wk.pop's machine code (``kernels.compiled``)
        self._pending = list(trees)
        self._given = np.empty(0, np.int64)  # the slot of each initial tree (``fill``)

    # ---- slots, pool, buckets -----------------------------------------------------------
    def _grow_slots(self, need: int) -> None:
        if need > len(self.slots.alive):
            size = max(need, 2 * len(self.slots.alive))
            self.slots = wk.Slots(*(_grow(a, size) for a in self.slots))
            rw = self.rows
            self.rows = rw._replace(**{f: _grow(getattr(rw, f), size) for f in _ROW_DTYPES})
            hi = np.zeros((size, 4), dtype=np.int64)
            hi[: len(self.heaps.hi)] = self.heaps.hi
            self.heaps = self.heaps._replace(hv=_grow(self.heaps.hv, size), hi=hi)
            sp = self.spec
            self.spec = sp._replace(start=_grow(sp.start, size), size=_grow(sp.size, size))

    def _bucket(self, key: int, mod: int, k: int) -> int:
        """Bucket ``(key, modulus, #classes)`` of single-modulus trees, ``(key, 0, 0)`` else."""
        b = self._bucket_of.get((key, mod, k))
        if b is None:
            b = self._bucket_of[(key, mod, k)] = self.nb
            self.nb += 1
            if self.nb > len(self.buckets.key):
                env = self.buckets.env
                grown = np.zeros((wk.NENV, 2 * self.nb))  # slope first (``kernels.file_cut``)
                grown[:, : env.shape[1]] = env
                bk = self.buckets
                self.buckets = bk._replace(
                    **{f: _grow(getattr(bk, f), 2 * self.nb) for f in _BUCKET_DTYPES}, env=grown
                )
            bk = self.buckets
            bk.key[b], bk.mod[b], bk.head[b], bk.newest[b] = key, mod, -1, -1
            bk.kmin[b], bk.kmax[b], bk.om[b] = 1 << 62, 0, np.inf
            bk.cut[b], bk.costmax[b] = -np.inf, -np.inf
            bk.env[:, b] = np.inf
            sp = self.spec
            if self.nb > len(sp.bstart):
                sp = sp._replace(bstart=_grow(sp.bstart, self.nb), bsize=_grow(sp.bsize, self.nb))
            dv = spectra.divisors(mod)[0] if mod else _NO_LIST[:0]
            end = self.nbd + len(dv)
            if end > len(sp.bd):
                sp = sp._replace(bd=_grow(sp.bd, end))
            sp.bd[self.nbd : end] = dv
            sp.bstart[b], sp.bsize[b] = self.nbd, len(dv)
            self.spec = sp
            self.nbd = end
        return b

    def _add_many(self, trees: Sequence[Tree]) -> list[int]:
        """Slots for ``trees`` (not yet filed into their buckets' lists)."""
        first = len(self.trees)
        n = len(trees)
        self._grow_slots(first + n)
        ms: list[int] = []
        rs: list[int] = []
        smod, kcls, cstart, bucket = [], [], [], []
        keys, rate = self._keys, self._rates
        pos = self.npool
        for t in trees:
            cls = sorted(t.classes)
            m0 = single_modulus(cls)  # normalised residues: the kernels index by them
            k = keys.get(t.key)
            if k is None:
                k = keys[t.key] = len(keys)
                rate[t.key] = self.model.rate(t.stream)
                self.lams = _grow(self.lams, k + 1)
                self.lams[k] = rate[t.key]
            kk = len(cls)
            b = self._bucket(k, m0, kk if m0 else 0)
            if m0:
                bk = self.buckets
                if kk < bk.kmin[b]:
                    bk.kmin[b] = kk
                    bk.klo[b] = kk / m0  # correctly rounded, as the kernels' division was
                if kk > bk.kmax[b]:
                    bk.kmax[b] = kk
                    bk.khi[b] = kk / m0
                if t.omega * t.scale < bk.om[b]:
                    bk.om[b] = t.omega * t.scale
                bk.costmax[b] = max(bk.costmax[b], float(t.cost))
            smod.append(m0)
            kcls.append(kk)
            cstart.append(pos)
            bucket.append(b)
            pos += kk
            if kk > self.wmax:
                self.wmax = kk
            for m, r in cls:
                ms.append(m)
                rs.append(r)
        if pos > len(self.classes.mod):
            self.classes = wk.Classes(*(_grow(a, pos) for a in self.classes))
        sl = self.slots
        cl = self.classes
        if n == 1:  # a merged tree: scalar stores are cheaper than slices
            t = trees[0]
            self.trees.append(t)
            sl.alive[first] = True
            sl.key[first] = keys[t.key]
            sl.uid[first] = t.uid
            sl.e[first] = float(t.edge_rate)
            sl.om[first] = t.omega * t.scale
            sl.cost[first] = t.cost
            sl.smod[first] = smod[0]
            sl.kcls[first] = kcls[0]
            sl.cstart[first] = cstart[0]
            sl.bucket[first] = bucket[0]
            sl.nxt[first] = -1
            cl.mod[self.npool : pos] = ms
            cl.res[self.npool : pos] = rs
            self.npool = pos
            self._spectra(first, 1)
            self.sizes[wk.SZ_SLOTS] = first + 1
            return [first]
        at = slice(first, first + n)
        self.trees.extend(trees)
        sl.alive[at] = True
        sl.key[at] = [self._keys[t.key] for t in trees]
        sl.uid[at] = [t.uid for t in trees]
        sl.e[at] = [float(t.edge_rate) for t in trees]
        sl.om[at] = [t.omega * t.scale for t in trees]
        sl.cost[at] = [t.cost for t in trees]
        sl.smod[at] = smod
        sl.kcls[at] = kcls
        sl.cstart[at] = cstart
        sl.bucket[at] = bucket
        sl.nxt[at] = -1
        cl.mod[self.npool : pos] = ms
        cl.res[self.npool : pos] = rs
        self.npool = pos
        self._spectra(first, n)
        self.sizes[wk.SZ_SLOTS] = first + n
        return list(range(first, first + n))

    def _spectra(self, first: int, n: int) -> None:
        """File the divisor spectra of slots ``first .. first + n`` (``kernels._screen``)."""
        at = slice(first, first + n)
        sizes, d, f, phi = spectra.build(
            self.classes.mod, self.slots.cstart[at], self.slots.kcls[at]
        )
        sp = self.spec
        end = self.nspec + len(d)
        if end > len(sp.d):
            sp = self.spec = sp._replace(
                d=_grow(sp.d, end), f=_grow(sp.f, end), phi=_grow(sp.phi, end)
            )
        sp.d[self.nspec : end] = d
        sp.f[self.nspec : end] = f
        sp.phi[self.nspec : end] = phi
        sp.size[at] = sizes
        sp.start[at] = self.nspec + np.cumsum(sizes) - sizes
        self.nspec = end

    def _room(self, need: int, rows: int = 1) -> None:
        """Room for ``need`` more row entries in the pool and for the cut-history entries of
        ``rows`` pricings (the kernels never grow them)."""
        n = int(self.sizes[wk.SZ_POOL]) + need
        rw = self.rows
        if n > len(rw.partner):
            rw = self.rows = rw._replace(
                partner=_grow(rw.partner, n), negval=_grow(rw.negval, n), exact=_grow(rw.exact, n)
            )
        c = int(self.sizes[wk.SZ_CUTS]) + rows
        if c > len(rw.ct):
            self.rows = rw._replace(**{f: _grow(getattr(rw, f), c) for f in _CUT_DTYPES})

    def _price_rows(self, slots: list[int], lam: float, fill: bool = False) -> None:
        """Price and store the rows of ``slots`` (of one key), filing each after its row."""
        self._room(ROW_CAP * len(slots), len(slots))
        prune = NO_PRUNE
        if fill and 1 < self.nb <= MASK_BUCKETS:  # per bucket, the buckets it may weave with
            bk = self.buckets
            open_ = wk.bucket_pairs(
                self.nb, bk.key, bk.mod, bk.kmin, bk.kmax, bk.om, lam, self.floor
            )
            idx = np.nonzero(open_)[1].astype(np.int64)
            ptr = np.zeros(self.nb + 1, dtype=np.int64)
            np.cumsum(open_.sum(axis=1), out=ptr[1:])
            fkeys, fcnt, fmul = self._residue_counts()
            prune = wk.Prune(True, ptr, idx, fkeys, fcnt, fmul)
        wk.rows(
            np.asarray(slots, dtype=np.int64),
            self.floor,
            lam,
            self.slots,
            self.classes,
            self.buckets,
            self.nb,
            self.wmax,
            prune,
            self._hist,
            ROW_CAP,
            False,
            self.rows,
            self.heaps,
            self.spec,
        )

    def _residue_counts(self) -> tuple[np.ndarray, np.ndarray, int]:
        """Per single-modulus bucket and residue, how many alive trees hold it: sorted keys
        ``bucket * mul + residue`` and counts (for ``kernels.rows``)."""
        n = len(self.trees)
        sl = self.slots
        ok = sl.alive[:n] & (sl.smod[:n] > 0)
        slots = np.flatnonzero(ok)
        if not slots.size:
            return _NO_LIST, _NO_LIST, 1
        k = sl.kcls[slots]
        mul = int(sl.smod[slots].max()) + 1
        owner = np.repeat(slots, k)
        pos = np.repeat(sl.cstart[slots] - np.cumsum(k) + k, k) + np.arange(int(k.sum()))
        keys = sl.bucket[owner] * mul + self.classes.res[pos]
        fkeys, fcnt = np.unique(keys, return_counts=True)
        return fkeys, fcnt.astype(np.int64), mul

    def fill(self) -> None:
        """The initial trees' rows, the costliest tree filed first (``result`` gives the trees
        back in their given order).

        Why that order (issue 34): a row takes its pairs with the trees filed before it, except
        those behind their rows' cuts. A cheap tree is a good partner, so its row's best
        entries are high and it is cut early. A costly tree filed after the cheap ones finds
        its pairs with them behind their cuts: it walks thousands of buckets for entries of
        its own. Filed first, it meets only the trees filed before it. Which row holds a pair
        never changes the merges (ties go by uid, not by slot): the same plans, about a fifth
        less plan time at 30,000 queries of Smax 10,000 (BENCHMARKS.md)."""
        trees, self._pending = self._pending, []
        if not trees:
            return
        order = sorted(range(len(trees)), key=lambda i: (-trees[i].cost, i))
        first = len(self.trees)
        slots = self._add_many([trees[i] for i in order])
        self._given = np.empty(len(trees), np.int64)  # slot first + j holds trees[order[j]]
        self._given[order] = np.arange(first, first + len(trees))
        by_key: dict[int, list[int]] = {}
        for s in slots:
            by_key.setdefault(int(self.slots.key[s]), []).append(s)
        inv = {v: k for k, v in self._keys.items()}
        for k, ss in by_key.items():
            self._price_rows(ss, self._rates[inv[k]], fill=True)

    def pop_best(self) -> tuple[int, int] | None:
        """The pair to merge next (the eager table's): bounds that reach the top are priced
        by the engine and go back as exact benefits (lazy greedy)."""
        while True:
            args = (
                self.floor,
                self.lams,
                self.slots,
                self.classes,
                self.buckets,
                self.nb,
                self.wmax,
                self._hist,
                ROW_CAP,
                self.rows,
                self.heaps,
                self.spec,
            )
            if self._pop is None:
                self._pop = wk.compiled(wk.pop, args)
            kind, a, b = self._pop(*args)
            if kind == wk.POP_NONE:
                return None
            if kind == wk.POP_MERGE:
                return a, b
            if kind == wk.POP_GROW:
                self._room(a)
                continue
            if self._hopeless(a, b):
                continue
            self.evaluations += 1
            benefit = self.model.benefit(self.trees[a], self.trees[b])
            if benefit > self.floor:
                ne = int(self.sizes[wk.SZ_EXACT])
                h = self.heaps
                if ne == len(h.ev):
                    ei = np.zeros((2 * ne, 4), dtype=np.int64)
                    ei[:ne] = h.ei
                    h = self.heaps = h._replace(ev=_grow(h.ev, 2 * ne), ei=ei)
                ua, ub = int(self.slots.uid[a]), int(self.slots.uid[b])
                self.sizes[wk.SZ_EXACT] = wk.heap_push(h.ev, h.ei, ne, -benefit, ua, ub, a, b)

    def _hopeless(self, a: int, b: int) -> bool:
        """Whether the bound of ``a`` and ``b`` that reached the top, taken per class
        (``kernels.tight_bound``), is at most the floor: the engine's price would be too, so
        the pair is dropped as its price would drop it. Only for pairs over
        ``kernels.WORK_LIMIT`` class pairs, whose rows bounded them by ``C <= min(Ea, Eb)``
        alone; the others' bounds are per class already."""
        sl = self.slots
        if int(sl.kcls[a]) * int(sl.kcls[b]) <= wk.WORK_LIMIT:
            return False
        cl = self.classes
        lam = float(self.lams[sl.key[a]])
        args = (sl.e, sl.om, sl.cost, sl.kcls, sl.cstart, cl.mod, cl.res)
        if wk.tight_bound(a, b, lam, *args) > self.floor:
            return False
        self.dropped += 1
        return True

    @property
    def refills(self) -> int:
        """Rows priced again after their kept entries were used up."""
        return int(self.sizes[wk.SZ_REFILLS])

    def merge(self, a: int, b: int) -> int:
        ta, tb = self.trees[a], self.trees[b]
        assert ta is not None and tb is not None  # pop_best offers alive trees only
        merged = self.model.merge(ta, tb)
        self.slots.alive[a] = self.slots.alive[b] = False
        self.trees[a] = self.trees[b] = None  # free memory of dead trees
        return self._add_many([merged])[0]

    def row(self, slot: int) -> None:
        """The row of a merged tree: priced at the start of the next ``pop_best`` (one
        compiled call per merge instead of two)."""
        pending = int(self.sizes[wk.SZ_PENDING])
        if pending >= 0:  # two rows in a row: price the first now
            tree = self.trees[pending]
            assert tree is not None  # a pending row's tree is alive
            self._price_rows([pending], self._rates[tree.key])
        self.sizes[wk.SZ_PENDING] = slot

    def result(self) -> list[Tree]:
        """The alive trees: the initial ones in their given order, then the merged ones in the
        order they were made."""
        given = self._given.tolist()
        first = min(given, default=0)  # slots filed before the fill (none in ``weave``)
        after = first + len(given)
        order = (*range(first), *given, *range(after, len(self.trees)))
        alive = self.slots.alive
        return [self.trees[s] for s in order if alive[s] and self.trees[s] is not None]


def warm() -> float:
    """Load the compiled kernels now (numba's one-off cost per process, ~0.2-0.4 s: its type
    registry and the cached machine code), so that a timed plan does not pay it. Returns the
    seconds spent. Idempotent (a second call costs microseconds)."""
    import time

    from placement.queries import Query

    start = time.perf_counter()
    qs = [
        Query(f"w{i}", r, s)
        for i, (r, s) in enumerate([(7, 5), (12, 5), (9, 3), (10, 4), (14, 6), (11, 2)])
    ]
    model = CostModel("panes", 1.0, "fast")
    table = KernelTable(model, [model.tree([q]) for q in qs], 1e-12)
    table.fill()
    while (pair := table.pop_best()) is not None:
        table.row(table.merge(*pair))
    # pop_best pushes an engine-priced bound with heap_push and may first bound a pair per
    # class with tight_bound: load them with the same types.
    wk.heap_push(np.zeros(1), np.zeros((1, 4), dtype=np.int64), 0, -1.0, 0, 0, 0, 0)
    sl, cl = table.slots, table.classes
    wk.tight_bound(0, 1, 1.0, sl.e, sl.om, sl.cost, sl.kcls, sl.cstart, cl.mod, cl.res)
    return time.perf_counter() - start
