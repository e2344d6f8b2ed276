"""WeaveShare's lazy cost lookup table for additive Omega (Panes, FlatFIT), rows in numba.

Why: same plans as the paper's eager table, but a row holds *exact* benefits wherever they are
cheap (both trees single-modulus: ``placement.weave_kernels``) and certified upper bounds
elsewhere, so the engine prices only the few bounded pairs that reach the top; and the table's
bookkeeping (rows, heaps) runs compiled, one kernel call per merge candidate.

A row keeps only its best ``ROW_CAP`` entries, a segment of a flat pool sorted by ``(-value,
partner uid)`` (the eager table's order); when they are used up (merged away or taken) and the
row had more, it is priced again after the last kept key, keeping twice as many (rows are nearly
full when almost every pair has a positive benefit, exp 5, and only their heads matter); a heap
holds each row's current head. An exact head on top of everything
is the eager algorithm's next merge (it beats every exact benefit of the other rows, which are
at most their bounds); a bound on top is priced by the engine and goes onto a second heap of
exact benefits (lazy greedy). Each pair lives in exactly one row: that of the later-filed tree.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from placement import weave_kernels as wk
from placement.edges.fast import single_modulus
from placement.trees import CostModel, Tree

Progress = Callable[[int], None] | None

# Slots hold ``e`` on the tree's axis (the kernels count common edges from its classes) and
# ``om`` = Omega x the tree's axis scale (lambda for count trees, ``placement.trees``): the
# benefit ``lambda + Ox (C - Ey) + Oy (C - Ex)`` is linear in Omega, so it comes out per time
# unit, exactly, for time and count keys alike.


ROW_CAP = 16  # entries a row keeps (its best; the rest is priced again when they are used up)
MASK_BUCKETS = 4096  # a fill bounds bucket pairs first when there are at most this many buckets
_NO_LIST = np.zeros(1, dtype=np.int64)


def _grow(arr: np.ndarray, need: int) -> np.ndarray:
    if need <= len(arr):
        return arr
    new = np.zeros(max(need, 2 * len(arr)), dtype=arr.dtype)
    new[: len(arr)] = arr
    return new


class KernelTable:
    """Alive trees in slots (struct of arrays), classes in a flat pool, buckets as linked lists."""

    _SLOT_ARRAYS = (
        ("alive", np.bool_),
        ("key", np.int64),
        ("uid", np.int64),
        ("e", np.float64),
        ("om", np.float64),
        ("cost", np.float64),
        ("smod", np.int64),
        ("kcls", np.int64),
        ("cstart", np.int64),
        ("bucket", np.int64),
        ("nxt", np.int64),
        ("rpos", np.int64),
        ("rn", np.int64),
        ("rcap", np.int64),
        ("rfull", np.bool_),
        ("cutv", np.float64),
        ("cutu", np.int64),
        ("hv", np.float64),
    )
    _BUCKET_ARRAYS = (
        ("b_key", np.int64),
        ("b_mod", np.int64),
        ("b_kmin", np.int64),
        ("b_kmax", np.int64),
        ("b_om", np.float64),
        ("b_head", np.int64),
    )

    def __init__(self, model: CostModel, trees: Sequence[Tree], floor: float):
        self.model = model
        self.floor = floor
        self.trees: list[Tree | None] = []
        cap = max(16, len(trees) + 1)
        for name, dt in self._SLOT_ARRAYS:
            setattr(self, name, np.zeros(cap, dtype=dt))
        self.pm = np.zeros(max(64, 2 * cap), dtype=np.int64)
        self.pr = np.zeros(max(64, 2 * cap), dtype=np.int64)
        self.npool = 0
        for name, dt in self._BUCKET_ARRAYS:
            setattr(self, name, np.zeros(64, dtype=dt))
        self.nb = 0
        self._bucket_of: dict[tuple, int] = {}
        self._keys: dict[tuple, int] = {}
        self._rates: dict[str, float] = {}
        self.wmax = 1
        self._hist = np.zeros(wk.HIST, dtype=np.int64)
        # Rows: segments of a pool (partner, -value, exact); heads: one entry per row
        # (hv, hi = -value, uid lo, uid hi, slot, 0); exact benefits of bounds that reached the
        # top: (ev, ei = -benefit, uid lo, uid hi, a, b). sizes: [heads, exact heap, pool used,
        # refills so far, slot whose row the next pop prices first].
        self.hi = np.zeros((cap, 4), dtype=np.int64)
        self.ev = np.zeros(64)
        self.ei = np.zeros((64, 4), dtype=np.int64)
        self.sizes = np.array([0, 0, 0, 0, -1], dtype=np.int64)
        self.lams = np.zeros(4)  # lambda per key
        self.rj = np.zeros(1024, dtype=np.int64)
        self.rv = np.zeros(1024)
        self.rx = np.zeros(1024, dtype=np.bool_)
        self.evaluations = 0  # exact benefits priced by the engine
        self._pending = list(trees)

    # ---- slots, pool, buckets -----------------------------------------------------------
    def _grow_slots(self, need: int) -> None:
        if need > len(self.alive):
            size = max(need, 2 * len(self.alive))
            for name, _ in self._SLOT_ARRAYS:
                setattr(self, name, _grow(getattr(self, name), size))
            hi = np.zeros((size, 4), dtype=np.int64)
            hi[: len(self.hi)] = self.hi
            self.hi = hi

    def _bucket(self, key: int, mod: int, k: int) -> int:
        """Bucket ``(key, modulus, #classes)`` of single-modulus trees, ``(key, 0, 0)`` else."""
        b = self._bucket_of.get((key, mod, k))
        if b is None:
            b = self._bucket_of[(key, mod, k)] = self.nb
            self.nb += 1
            if self.nb > len(self.b_key):
                for name, _ in self._BUCKET_ARRAYS:
                    setattr(self, name, _grow(getattr(self, name), 2 * self.nb))
            self.b_key[b], self.b_mod[b], self.b_head[b] = key, mod, -1
            self.b_kmin[b], self.b_kmax[b], self.b_om[b] = 1 << 62, 0, np.inf
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
                if kk < self.b_kmin[b]:
                    self.b_kmin[b] = kk
                if kk > self.b_kmax[b]:
                    self.b_kmax[b] = kk
                if t.omega * t.scale < self.b_om[b]:
                    self.b_om[b] = t.omega * t.scale
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
        if pos > len(self.pm):
            self.pm = _grow(self.pm, pos)
            self.pr = _grow(self.pr, pos)
        if n == 1:  # a merged tree: scalar stores are cheaper than slices
            t = trees[0]
            self.trees.append(t)
            self.alive[first] = True
            self.key[first] = keys[t.key]
            self.uid[first] = t.uid
            self.e[first] = float(t.edge_rate)
            self.om[first] = t.omega * t.scale
            self.cost[first] = t.cost
            self.smod[first] = smod[0]
            self.kcls[first] = kcls[0]
            self.cstart[first] = cstart[0]
            self.bucket[first] = bucket[0]
            self.nxt[first] = -1
            self.pm[self.npool : pos] = ms
            self.pr[self.npool : pos] = rs
            self.npool = pos
            return [first]
        sl = slice(first, first + n)
        self.trees.extend(trees)
        self.alive[sl] = True
        self.key[sl] = [self._keys[t.key] for t in trees]
        self.uid[sl] = [t.uid for t in trees]
        self.e[sl] = [float(t.edge_rate) for t in trees]
        self.om[sl] = [t.omega * t.scale for t in trees]
        self.cost[sl] = [t.cost for t in trees]
        self.smod[sl] = smod
        self.kcls[sl] = kcls
        self.cstart[sl] = cstart
        self.bucket[sl] = bucket
        self.nxt[sl] = -1
        self.pm[self.npool : pos] = ms
        self.pr[self.npool : pos] = rs
        self.npool = pos
        return list(range(first, first + n))

    def _room(self, need: int) -> None:
        """Room for ``need`` more row entries in the pool (the kernels never grow it)."""
        n = int(self.sizes[2]) + need
        if n > len(self.rj):
            self.rj, self.rv, self.rx = _grow(self.rj, n), _grow(self.rv, n), _grow(self.rx, n)

    def _rows(self, slots: list[int], lam: float, fill: bool = False) -> None:
        """Price and store the rows of ``slots`` (of one key), filing each after its row."""
        self._room(ROW_CAP * len(slots))
        use_open = fill and 1 < self.nb <= MASK_BUCKETS
        ptr, idx = _NO_LIST, _NO_LIST
        if use_open:  # per bucket, the buckets it may weave with (CSR)
            open_ = wk.bucket_pairs(
                self.nb,
                self.b_key,
                self.b_mod,
                self.b_kmin,
                self.b_kmax,
                self.b_om,
                lam,
                self.floor,
            )
            idx = np.nonzero(open_)[1].astype(np.int64)
            ptr = np.zeros(self.nb + 1, dtype=np.int64)
            np.cumsum(open_.sum(axis=1), out=ptr[1:])
            fkeys, fcnt, fmul = self._residue_counts()
        else:
            fkeys, fcnt, fmul = _NO_LIST, _NO_LIST, 1
        wk.rows(
            np.asarray(slots, dtype=np.int64),
            self.floor,
            lam,
            self.alive,
            self.key,
            self.uid,
            self.e,
            self.om,
            self.cost,
            self.smod,
            self.kcls,
            self.cstart,
            self.pm,
            self.pr,
            self.bucket,
            self.nxt,
            self.b_key,
            self.b_mod,
            self.b_kmin,
            self.b_kmax,
            self.b_om,
            self.b_head,
            self.nb,
            self.wmax,
            ptr,
            idx,
            use_open,
            fkeys,
            fcnt,
            fmul,
            self._hist,
            ROW_CAP,
            False,
            self.rcap,
            self.cutv,
            self.cutu,
            self.rfull,
            self.rj,
            self.rv,
            self.rx,
            self.rpos,
            self.rn,
            self.hv,
            self.hi,
            self.sizes,
        )

    def _residue_counts(self) -> tuple[np.ndarray, np.ndarray, int]:
        """Per single-modulus bucket and residue, how many alive trees hold it: sorted keys
        ``bucket * mul + residue`` and counts (for ``weave_kernels.rows``)."""
        n = len(self.trees)
        ok = self.alive[:n] & (self.smod[:n] > 0)
        slots = np.flatnonzero(ok)
        if not slots.size:
            return _NO_LIST, _NO_LIST, 1
        k = self.kcls[slots]
        mul = int(self.smod[slots].max()) + 1
        owner = np.repeat(slots, k)
        pos = np.repeat(self.cstart[slots] - np.cumsum(k) + k, k) + np.arange(int(k.sum()))
        keys = self.bucket[owner] * mul + self.pr[pos]
        fkeys, fcnt = np.unique(keys, return_counts=True)
        return fkeys, fcnt.astype(np.int64), mul

    def fill(self, progress: Progress = None) -> None:
        trees, self._pending = self._pending, []
        if not trees:
            return
        slots = self._add_many(trees)
        by_key: dict[int, list[int]] = {}
        for s in slots:
            by_key.setdefault(int(self.key[s]), []).append(s)
        inv = {v: k for k, v in self._keys.items()}
        for k, ss in by_key.items():
            self._rows(ss, self._rates[inv[k]], fill=True)
        if progress:
            progress(len(trees))

    def pop_best(self) -> tuple[int, int] | None:
        """The pair to merge next (the eager table's): bounds that reach the top are priced
        by the engine and go back as exact benefits (lazy greedy)."""
        while True:
            kind, a, b = wk.pop(
                self.floor,
                self.lams,
                self.alive,
                self.key,
                self.uid,
                self.e,
                self.om,
                self.cost,
                self.smod,
                self.kcls,
                self.cstart,
                self.pm,
                self.pr,
                self.bucket,
                self.nxt,
                self.b_key,
                self.b_mod,
                self.b_kmin,
                self.b_kmax,
                self.b_om,
                self.b_head,
                self.nb,
                self.wmax,
                self._hist,
                ROW_CAP,
                self.rcap,
                self.cutv,
                self.cutu,
                self.rfull,
                self.rj,
                self.rv,
                self.rx,
                self.rpos,
                self.rn,
                self.hv,
                self.hi,
                self.ev,
                self.ei,
                self.sizes,
            )
            if kind == 0:
                return None
            if kind == 1:
                return a, b
            if kind == 4:
                self._room(a)
                continue
            self.evaluations += 1
            benefit = self.model.benefit(self.trees[a], self.trees[b])
            if benefit > self.floor:
                ne = int(self.sizes[1])
                if ne == len(self.ev):
                    self.ev = _grow(self.ev, 2 * ne)
                    ei = np.zeros((2 * ne, 4), dtype=np.int64)
                    ei[:ne] = self.ei
                    self.ei = ei
                ua, ub = int(self.uid[a]), int(self.uid[b])
                self.sizes[1] = wk.heap_push(self.ev, self.ei, ne, -benefit, ua, ub, a, b)

    @property
    def refills(self) -> int:
        """Rows priced again after their kept entries were used up."""
        return int(self.sizes[3])

    def merge(self, a: int, b: int) -> int:
        merged = self.model.merge(self.trees[a], self.trees[b])
        self.alive[a] = self.alive[b] = False
        self.trees[a] = self.trees[b] = None  # free memory of dead trees
        return self._add_many([merged])[0]

    def row(self, slot: int) -> None:
        """The row of a merged tree: priced at the start of the next ``pop_best`` (one
        compiled call per merge instead of two)."""
        if self.sizes[4] >= 0:  # two rows in a row: price the first now
            self._rows([int(self.sizes[4])], self._rates[self.trees[int(self.sizes[4])].key])
        self.sizes[4] = slot

    def result(self) -> list[Tree]:
        return [t for t, ok in zip(self.trees, self.alive) if ok and t is not None]


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
    # pop_best pushes an engine-priced bound with heap_push: load it with the same types.
    wk.heap_push(np.zeros(1), np.zeros((1, 4), dtype=np.int64), 0, -1.0, 0, 0, 0, 0)
    return time.perf_counter() - start
