"""Compiled rows of WeaveShare's lazy table when Omega is additive (Panes, FlatFIT).

Why: with ~10^3 trees the table's time went to Python overhead, per pair and per row. These
numba kernels price a whole row (one tree against every alive tree of its key) in one call.

For additive Omega the benefit of weaving x and y is ``lambda + Ox (C - Ey) + Oy (C - Ex)``
with ``C`` the density of common edges. Per pair the kernel gives either

- the **exact benefit**, when both trees are *single-modulus* (every class has one modulus
  ``m``: ``k`` pairwise disjoint classes, density ``k/m``). Classes ``(m1, r1)`` and
  ``(m2, r2)`` meet iff ``r1 = r2 (mod g)``, ``g = gcd(m1, m2)``, in one class mod
  ``L = lcm(m1, m2)`` (CRT), and the meets of distinct pairs are disjoint (their parents are),
  so ``C = cnt / L`` exactly and ``E_xy = (k1 L/m1 + k2 L/m2 - cnt) / L``. Numerator and ``L``
  are integers below 2^53, so one float division is the correctly rounded value that
  ``float(Fraction)`` gives, and the benefit is computed with the very float operations of
  ``CostModel.benefit``: bit for bit the same number, hence the same plans;
- otherwise a **certified upper bound**: ``C`` is at most ``min(Ex, Ey)`` and, per class ``a``
  of either tree, at most ``min(1/m_a, sum over compatible classes b of the other tree of
  1/lcm(a, b))`` (union bound), summed over the classes. The bound is inflated by a relative
  1e-9 against float rounding; the table prices it exactly with the engine when it reaches the
  top (lazy greedy). Before it, ``_screen`` bounds ``C`` by the gcd-free spectral sum
  (``lazy_table.spectra``) and drops the pairs it already shows not to be kept (behind a cut,
  below the floor): the same rows as pricing them, without their gcds.

Buckets: trees are linked (``nxt``) into buckets ``(key, modulus, #classes)`` for
single-modulus trees and ``(key, 0, 0)`` for the others. A row first bounds a whole
single-modulus bucket from its extremes (fewest/most classes and largest cost of all ever filed,
its head's Omega: conservative) and skips it when no member can reach a positive benefit; dead
trees are unlinked on the way. A single-modulus bucket's list is in Omega order, and a member's
bound falls as its Omega grows (``bucket_value``), so a row stops walking a bucket at the first
member behind its kept entries (issue 34: at 10^5 trees a row checked ~3x10^4 members), and
does not price a member whose bound is already after that member's own cut: the pair is the
member's row's (at 10,000 queries 97 % of the buckets a new row walks give it nothing). A
bucket is also skipped when its *cut envelope* (``cut_envelope``) shows every member behind
its own row's cut at the member's own bound, not only at the bucket's least Omega (at 100,000
queries a new row walked ~1,900 buckets, nine in ten with nothing of its own); not in a fill,
whose rows it cost more than it saved. A single-modulus row first screens a bucket without
the gcd (``gcd_free_bound``: the gcd is small unless the moduli share a large divisor,
``row_split``) and skips it where the screen already shows the bucket bound would (behind
their members' cuts, mostly: about two thirds of a new single-modulus row's buckets at 30,000
queries, a twelfth of a fill row's). A fill's or a refill's row lists a bucket the screen
keeps at the screen's bound and leaves its bucket bound to the walk (``DEFERRED``): at 100,000
queries such a row lists ~7,800 buckets and walks 50 to 300 of them. A fill (many
rows at once) first bounds bucket *pairs* the same way (``bucket_pairs``) and, within one
modulus, counts only the residues some other tree holds, so that 10^5..10^6 initial trees only
visit the buckets that can hold a merge.

Threads: a row of many buckets (``SZ_PAR_FROM``, 1,024 from ``lazy_table.table``) bounds,
sorts and walks them in ``SZ_PARTS`` contiguous parts, one per thread: ``_bucket_part`` only
reads the table, ``_walk_part`` writes only its own buckets' lists (it unlinks dead members)
and keeps its own best entries, and the row keeps the best of the parts'. Each part keeps at
least the row's best entries among its buckets, and a row of ``cap`` entries counts as cut
whether a walk was cut or not: the very same rows in any number of parts. The walk was two
thirds of a new single-modulus tree's row on one thread (BENCHMARKS.md, issue 34). A part's
walk reads few of its buckets, so a part sorts only its best ``SZ_SORT_FIRST`` at first, and
the walk sorts the next run (twice as many) when it gets there (``_sort_next``: the order of
one stable sort);
and a single-modulus row takes its gcds with every modulus from one sieve over its modulus's
divisors (``gcd_table``) instead of a Euclid per bucket: the screen reads whether the gcd is
above ``Dz``, the bucket bound the gcd itself. Sorting was about half of bounding and sorting;
with both, a single-modulus row bounds and sorts in about two fifths of the time.

A row keeps its best ``cap`` entries only (a bounded heap while pricing, then sorted), plus the
key of the last one kept; ``pop`` prices a used-up row again after that key (twice the cap).
The lazy greedy's two heaps (row heads; exact benefits of priced bounds) live here too
(``pop``), keyed ``(-value, uid lo, uid hi)`` like the eager table, so one call finds the next
merge or the next bound to price.

Interface: the table's arrays travel grouped in NamedTuples (``Slots``, ``Classes``,
``Buckets``, ``Rows``, ``Heaps``, ``Prune``; numba compiles field access to the same loads as
separate arguments), with named codes (``POP_*`` answers, ``SZ_*`` size slots, ``H_*`` heap
columns). ``pop`` runs once per merge, so ``lazy_table.table`` calls it through ``compiled``:
numba's dispatch would type every field of the structures at each call.

One file (over 600 lines) on purpose: numba's cache keys a kernel on its own source file only,
so the inlined helpers ``rows`` and ``pop`` compile in (pricing, bounds, heaps) live here; in
another module an edit to them would leave stale machine code in the cache.
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import numba
import numpy as np
from numba import njit
from numba.core.errors import NumbaPerformanceWarning

# ``_walk_part`` has no prange of its own: it is compiled with ``parallel=True`` for the parfor
# pipeline's passes over its code, which make its walk much faster than plain ``njit`` does
# (BENCHMARKS.md, issue 34). So numba's warning that nothing ran in parallel is expected there.
warnings.filterwarnings(
    "ignore", message=r"(?s).*def _walk_part\(", category=NumbaPerformanceWarning
)

EXACT_LIMIT = 1 << 50  # lcm up to which single-modulus pairs are priced exactly in floats
WORK_LIMIT = 1 << 12  # class pairs per tree pair for the per-class bound (else min(Ex, Ey))
INFLATE = 1e-9
HIST = 1 << 16  # residue histogram size for single-modulus rows
MAX_CAP = 1 << 16  # most entries a refilled row keeps (its cap doubles with each refill)
ALPHA_DIV = 32  # a single-modulus row's gcd-free screen: gcd with a bucket <= m / (32 k) ...
DLOW = 64  # ... or <= 64 (``row_split``; fewer moduli to mark as sharing a larger divisor)
NENV = 64  # slopes of a bucket's cut envelope: 2^(-k/ENV_STEP), k < NENV (``cut_envelope``)
ENV_STEP = 4.0
DEFERRED = -1.0  # a listed bucket's C bound when the walk is to bound it (``_bucket_part``)
SLOPES = 0.5 ** (np.arange(NENV) / ENV_STEP)  # one table for filing and reading them

# ``pop``'s answer kinds
POP_NONE = 0  # no merge left
POP_MERGE = 1  # the eager table's next merge (an exact benefit on top of everything)
POP_PRICE = 2  # a bound on top: the caller prices it and pushes it with ``heap_push``
POP_GROW = 4  # the row pool needs room for ``a`` more entries (and the cut history for one):
# grow them and call again

# ``Heaps.sizes`` slots
SZ_HEADS = 0  # entries of the heads heap
SZ_EXACT = 1  # entries of the exact heap
SZ_POOL = 2  # row pool entries used
SZ_REFILLS = 3  # rows priced again so far
SZ_PENDING = 4  # a new slot whose row is still to price (-1: none)
SZ_CUTS = 5  # entries of the rows' cut histories used
SZ_SLOTS = 6  # slots filed so far (the table keeps it)
SZ_PARTS = 7  # parts a row's buckets are bounded in, one per thread (the table sets it) ...
SZ_PAR_FROM = 8  # ... when it has this many buckets at least (else one part)
SZ_SORT_FIRST = 9  # buckets a part sorts at first (the walk sorts more, twice as many, on demand)
N_SIZES = 10

# columns of a heap entry's integer part (``Heaps.hi``, ``Heaps.ei``): the order's uids, then
# the payload: (slot, marker) on the heads heap, (a, b) on the exact heap
H_UID_LO = 0
H_UID_HI = 1
H_SLOT = H_A = 2
H_MARKER = H_B = 3


class Slots(NamedTuple):
    """One entry per tree ever filed (struct of arrays, indexed by slot)."""

    alive: np.ndarray  # bool: not merged away
    key: np.ndarray  # int64: index of the tree's key (lambda per key: ``pop``'s ``lams``)
    uid: np.ndarray  # int64: the tree's uid (tie-break of the eager order)
    e: np.ndarray  # float64: edge rate on the tree's axis
    om: np.ndarray  # float64: Omega x axis scale
    cost: np.ndarray  # float64
    smod: np.ndarray  # int64: the one modulus of a single-modulus tree, 0 otherwise
    kcls: np.ndarray  # int64: number of classes
    cstart: np.ndarray  # int64: first class in ``Classes``
    bucket: np.ndarray  # int64: the slot's bucket
    nxt: np.ndarray  # int64: next slot of the bucket's list (-1: end)


class Classes(NamedTuple):
    """The slots' residue classes ``(mod, res)``, sorted per slot, in one flat pool."""

    mod: np.ndarray  # int64
    res: np.ndarray  # int64


class Buckets(NamedTuple):
    """Buckets ``(key, modulus, #classes)``: extremes of every tree ever filed, list heads."""

    key: np.ndarray  # int64
    mod: np.ndarray  # int64: 0 for the multi-modulus bucket of a key
    kmin: np.ndarray  # int64: fewest classes
    kmax: np.ndarray  # int64: most classes
    klo: np.ndarray  # float64: kmin / mod (single-modulus; a row reads it, not divides)
    khi: np.ndarray  # float64: kmax / mod
    om: np.ndarray  # float64: at most the Omega of every member (single-modulus: its head's)
    head: np.ndarray  # int64: first slot of the list (-1: empty)
    newest: np.ndarray  # int64: the latest slot ever filed (-1: none)
    cut: np.ndarray  # float64: -value of the lowest cut any member's row had (inf: a full row)
    costmax: np.ndarray  # float64: largest cost
    env: np.ndarray  # float64 (NENV, n): members' cuts against their Omega (``cut_envelope``)


class Rows(NamedTuple):
    """Each slot's row, a segment ``[pos, end)`` of the entry pool, and where it was cut."""

    pos: np.ndarray  # int64 per slot: next entry to offer
    end: np.ndarray  # int64 per slot
    cap: np.ndarray  # int64 per slot: entries the row was priced to keep
    full: np.ndarray  # bool per slot: the row kept all its entries (fewer than its cap)
    cutv: np.ndarray  # float64 per slot: key (-value, partner uid) of its last kept entry
    cutu: np.ndarray  # int64 per slot
    partner: np.ndarray  # int64 per pool entry
    negval: np.ndarray  # float64 per pool entry: -value
    exact: np.ndarray  # bool per pool entry: an exact benefit (else a bound)
    chead: np.ndarray  # int64 per slot: its newest cut-history entry
    ct: np.ndarray  # int64 per history entry: the cut holds for slots filed from ``ct`` on
    cv: np.ndarray  # float64 per history entry: the cut's -value (inf: the row was full)
    cu: np.ndarray  # int64 per history entry: the cut's partner uid
    cnext: np.ndarray  # int64 per history entry: the slot's previous entry (-1: none)


class Heaps(NamedTuple):
    """The lazy greedy's two heaps, keyed ``(-value, uid lo, uid hi)``, and their sizes."""

    hv: np.ndarray  # float64: heads heap (one entry per row), -value
    hi: np.ndarray  # int64 (n, 4): uid lo, uid hi, slot, marker
    ev: np.ndarray  # float64: exact benefits of bounds that reached the top, -benefit
    ei: np.ndarray  # int64 (n, 4): uid lo, uid hi, a, b
    sizes: np.ndarray  # int64: the ``SZ_*`` slots


def compiled(kernel, args: tuple):
    """``kernel``'s machine code for the types of ``args`` (compiled, or loaded from the cache,
    now), to call without numba's dispatch: that types every argument at each call, and for
    NamedTuples more slowly than for arrays (40 arrays in 5 NamedTuples: ~6 us per call against
    ~2 us as 40 arguments, ~1.4 us through this), while ``pop`` runs once per merge. Later calls
    must pass arguments of these very types (``lazy_table.table`` only ever replaces a structure
    by a grown copy, same dtypes).

    Looked up by ``_type_key`` first: typing the NamedTuples of a table costs ~1.5 ms, paid
    at every table (every WeaveShare run) while the types are nearly always the same."""
    key = (kernel, _type_key(args))
    hit = _COMPILED.get(key)
    if hit is None:
        hit = _COMPILED[key] = kernel.compile(tuple(numba.typeof(a) for a in args))
    return hit


_COMPILED: dict = {}


def _type_key(a):
    """What numba's type of ``a`` depends on, cheaply: an array's dtype, dimensions and flags
    (layout, writable, aligned), a tuple's class and items; any other value its numba type."""
    if isinstance(a, np.ndarray):
        f = a.flags
        return (a.dtype.str, a.ndim, f.c_contiguous, f.f_contiguous, f.writeable, f.aligned)
    if isinstance(a, tuple):
        return (type(a), tuple(_type_key(x) for x in a))
    return numba.typeof(a)


class Prune(NamedTuple):
    """A fill's bucket filter (``bucket_pairs``, residue counts); ``use`` False: none."""

    use: bool
    ptr: np.ndarray  # int64: buckets a slot of bucket b may weave with, CSR
    idx: np.ndarray  # int64
    fkeys: np.ndarray  # int64: sorted keys ``bucket * fmul + residue``
    fcnt: np.ndarray  # int64: alive trees holding each key
    fmul: int


class Spectra(NamedTuple):
    """Each slot's divisor spectrum (``lazy_table.spectra``), a segment of a flat pool sorted
    by ``d``, and a dense scratch that holds one row's tree spectrum (zeros between rows)."""

    start: np.ndarray  # int64 per slot
    size: np.ndarray  # int64 per slot
    d: np.ndarray  # int64 per pool entry: a divisor of some modulus of the slot
    f: np.ndarray  # float64 per pool entry: F(d), the sum of 1/m over its classes with d | m
    phi: np.ndarray  # float64 per pool entry: Euler's phi(d)
    dense: np.ndarray  # float64 scratch: phi(d) F(d) of the row's slot at index d
    bstart: np.ndarray  # int64 per bucket: its modulus's divisors in ``bd`` (none: modulus 0)
    bsize: np.ndarray  # int64 per bucket
    bd: np.ndarray  # int64 pool: divisors of the buckets' moduli
    gcds: np.ndarray  # int64 scratch: gcd of each modulus with the row's (``gcd_table``)


@njit(cache=True, inline="always")
def _gcd(a, b):
    while b:
        a, b = b, a % b
    return a


@njit(cache=True, inline="always")
def _count(z, s, kcls, cstart, pr, g, mb, hist, use_hist):
    """Compatible class pairs of two single-modulus slots (``s`` of modulus ``mb``):
    ``r_z = r_s (mod g)``. ``hist``: z's residues mod ``g`` counted (when ``use_hist``)."""
    ss = cstart[s]
    sn = kcls[s]
    if g == 1:
        return kcls[z] * sn
    cnt = 0
    if use_hist:
        if g == mb:  # residues of s are below g already
            for j in range(ss, ss + sn):
                cnt += hist[pr[j]]
        else:
            for j in range(ss, ss + sn):
                cnt += hist[pr[j] % g]
        return cnt
    zs = cstart[z]
    for i in range(zs, zs + kcls[z]):
        for j in range(ss, ss + sn):
            if (pr[i] - pr[j]) % g == 0:
                cnt += 1
    return cnt


@njit(cache=True, inline="always")
def _exact(z, s, lam, om, cost, kcls, cnt, lz, ls, big):
    """Exact benefit from the compatible pair count ``cnt`` (``lz = L/m_z``, ``ls = L/m_s``)."""
    num = kcls[z] * lz + kcls[s] * ls - cnt
    exy = np.float64(num) / np.float64(big)
    return (cost[s] + cost[z]) - (lam + exy * (om[s] + om[z]))


@njit(cache=True, inline="always")
def _bound(z, s, lam, e, om, cost, kcls, cstart, pm, pr, colsum, gs, ts):
    """Certified upper bound of the benefit (per-class union bounds on C, both ways) when the
    trees have at most ``WORK_LIMIT`` class pairs, else with only ``C <= min(Ez, Es)``."""
    return _class_bound(z, s, lam, e, om, cost, kcls, cstart, pm, pr, colsum, gs, ts, WORK_LIMIT)


@njit(cache=True)
def tight_bound(z, s, lam, e, om, cost, kcls, cstart, pm, pr):
    """``_bound`` however many class pairs the trees have (``O(k_z k_s)``, tens of
    microseconds at 70 classes each). Why (issue 34): a pair of two large merged trees
    enters its row at ``C <= min(Ez, Es)``, near ``lambda``, and reaches the top; its exact
    price then took the engine up to 340 ms, to find a benefit far below zero (at 10,000
    queries of Smax 10,000, 30 prices below zero were a third of the engine's time, 28 of
    them of such pairs: BENCHMARKS.md).
    ``KernelTable.pop_best`` first asks this bound whether the pair can beat the floor."""
    n = max(kcls[s], 1)
    colsum = np.empty(n)
    gs = np.empty(n, np.int64)
    ts = np.empty(n)
    return _class_bound(z, s, lam, e, om, cost, kcls, cstart, pm, pr, colsum, gs, ts, 1 << 62)


@njit(cache=True, inline="always")
def _class_bound(z, s, lam, e, om, cost, kcls, cstart, pm, pr, colsum, gs, ts, limit):
    """``_bound`` with per-class union bounds on C up to ``limit`` class pairs.

    Classes are sorted by modulus, so the gcd and the term ``g / (m_i m_j)`` are computed once
    per run of equal moduli (``gs``, ``ts``: scratch of ``kcls[s]``) and the residue test is
    skipped for coprime moduli: the same floats, summed in the same order, as one gcd per class
    pair (these bounds were most of a large plan's time: issue 34)."""
    zs = cstart[z]
    zn = kcls[z]
    ss = cstart[s]
    sn = kcls[s]
    ez = e[z]
    es = e[s]
    c = min(ez, es)
    if zn * sn <= limit:
        for j in range(sn):
            colsum[j] = 0.0
        cz = 0.0
        last = 0
        for i in range(zs, zs + zn):
            mi = pm[i]
            ri = pr[i]
            if mi != last:  # a new modulus of z: the gcds and terms of this run
                last = mi
                lastj = 0
                g = 1
                t = 0.0
                for j in range(sn):
                    mj = pm[ss + j]
                    if mj != lastj:
                        lastj = mj
                        g = _gcd(mi, mj)
                        t = g / (np.float64(mi) * np.float64(mj))
                    gs[j] = g
                    ts[j] = t
            rowsum = 0.0
            for j in range(sn):
                g = gs[j]
                if g == 1 or (ri - pr[ss + j]) % g == 0:
                    rowsum += ts[j]
                    colsum[j] += ts[j]
            cz += min(1.0 / mi, rowsum)
        cs = 0.0
        for j in range(sn):
            cs += min(1.0 / pm[ss + j], colsum[j])
        c = min(c, cz, cs)
    bound = lam + om[z] * (c - es) + om[s] * (c - ez)
    return bound + INFLATE * (abs(bound) + cost[s] + cost[z])


@njit(cache=True, inline="always")
def _loose(z, s, lam, e, om, cost):
    """``_bound`` with only ``C <= min(Ex, Ey)``, inflated twice as much: never below it, in
    O(1) (screens pairs that stay behind a partner's cut before the class-pair bound)."""
    c = min(e[z], e[s])
    bound = lam + om[z] * (c - e[s]) + om[s] * (c - e[z])
    return bound + 2.0 * INFLATE * (abs(bound) + cost[s] + cost[z])


@njit(cache=True)
def _scatter(z, sp):
    """Write ``z``'s spectrum into ``sp.dense`` (as ``phi(d) F(d)``) when its divisors fit;
    returns whether they did (else ``_spec_dot`` merges the two sorted spectra)."""
    lo = sp.start[z]
    hi = lo + sp.size[z]
    if hi > lo and sp.d[hi - 1] >= len(sp.dense):
        return False
    for k in range(lo, hi):
        sp.dense[sp.d[k]] = sp.phi[k] * sp.f[k]
    return True


@njit(cache=True)
def _unscatter(z, sp):
    for k in range(sp.start[z], sp.start[z] + sp.size[z]):
        sp.dense[sp.d[k]] = 0.0


@njit(cache=True, inline="always")
def _spec_dot(z, s, sp, zdense):
    """``sum over d of phi(d) F_z(d) F_s(d)``: at least the class-pair sum of ``g / (m_i m_j)``
    over compatible pairs (``lazy_table.spectra``). ``zdense``: ``z`` is in ``sp.dense``."""
    sd = sp.d
    sf = sp.f
    acc = 0.0
    k = sp.start[s]
    ke = k + sp.size[s]
    if zdense:
        dense = sp.dense
        top = len(dense)
        while k < ke:
            d = sd[k]
            if d >= top:
                break
            acc += dense[d] * sf[k]
            k += 1
        return acc
    i = sp.start[z]
    ie = i + sp.size[z]
    while i < ie and k < ke:
        di = sd[i]
        dk = sd[k]
        if di == dk:
            acc += sp.phi[i] * sf[i] * sf[k]
            i += 1
            k += 1
        elif di < dk:
            i += 1
        else:
            k += 1
    return acc


@njit(cache=True, inline="always")
def _screen(z, s, lam, e, om, cost, kcls, sp, zdense):
    """``_bound`` with ``C <= min(Ez, Es, spectral sum)`` and inflated twice as much: never
    below it (the spectral sum is at least both of its per-class sums, the benefit grows with
    ``C``), without a gcd. Screens pairs that stay behind a cut before the class-pair bound."""
    c = min(e[z], e[s])
    if kcls[z] * kcls[s] <= WORK_LIMIT:
        c = min(c, _spec_dot(z, s, sp, zdense))
    bound = lam + om[z] * (c - e[s]) + om[s] * (c - e[z])
    return bound + 2.0 * INFLATE * (abs(bound) + cost[s] + cost[z])


def pair_value(z, s, lam, e, om, cost, smod, kcls, cstart, pm, pr):
    """``(value, exact)`` for slots ``z`` and ``s`` (reference entry point for tests)."""
    colsum = np.zeros(max(1, int(kcls[s])))
    gs = np.zeros(len(colsum), np.int64)
    ts = np.zeros(len(colsum))
    mz, ms = int(smod[z]), int(smod[s])
    if mz > 0 and ms > 0:
        g = int(np.gcd(mz, ms))
        big = mz // g * ms
        if big <= EXACT_LIMIT:
            cnt = _count(z, s, kcls, cstart, pr, g, ms, np.zeros(1, np.int64), False)
            return _exact(z, s, lam, om, cost, kcls, cnt, big // mz, big // ms, big), True
    return _bound(z, s, lam, e, om, cost, kcls, cstart, pm, pr, colsum, gs, ts), False


@njit(cache=True, inline="always")
def bucket_bound(z, lam, e, om, cost, kcls, cstart, pm, mb, kmin, kmax, ommin):
    """Upper bound of the benefit of ``z`` with any tree of a single-modulus bucket."""
    c = bucket_c(z, e, kcls, cstart, pm, mb, kmax, 0)
    return bucket_value(lam, om[z], e[z], cost[z], c, kmin / mb, ommin)


@njit(cache=True, inline="always")
def bucket_value(lam, oz, ez, cz, c, klo, ommin):
    """``bucket_bound`` from the bucket's common-edge bound ``c`` (``bucket_c``): it falls as
    ``ommin`` grows (``c <= ez``), so with ``ommin`` a member's own Omega it bounds that member
    and every member of larger Omega (``rows`` walks single-modulus buckets in Omega order)."""
    bound = lam + oz * min(c - klo, 0.0) + ommin * (c - ez)
    return bound + INFLATE * (abs(bound) + 2.0 * cz)


@njit(cache=True, inline="always")
def bucket_c(z, e, kcls, cstart, pm, mb, kmax, gz):
    """Upper bound of the common-edge density ``C`` of ``z`` with any tree of a
    single-modulus bucket (modulus ``mb``, at most ``kmax`` classes); ``gz``: the gcd of
    ``mb`` and ``z``'s one modulus when known (``_row_gcd``), else 0."""
    zs = cstart[z]
    zn = kcls[z]
    cub = 0.0
    last = 0
    t = 0.0
    for i in range(zs, zs + zn):
        mi = pm[i]
        if mi != last:  # classes are sorted: one gcd per modulus
            last = mi
            g = gz if gz > 0 else _gcd(mi, mb)
            t = min(kmax, mb // g) * g / (np.float64(mi) * np.float64(mb))
        cub += t
    return min(cub, kmax / mb, e[z])


@njit(cache=True, inline="always")
def bucket_screen(z, lam, e, om, cost, b, mb, kmin, kmax, ommin, costmax, sp):
    """``bucket_margin(bucket_bound(..))`` from above without a gcd, for ``z`` in ``sp.dense``:
    per class ``min(kmax, m_b/g) g / (m_i m_b) <= kmax g / (m_i m_b)``, whose sum over the
    classes is ``kmax / m_b`` times ``sum over d | m_b of phi(d) F_z(d)`` (``lazy_table.spectra``);
    inflated twice, like ``_screen``. A bucket it skips (floor, cut), the bound would skip."""
    h = 0.0
    dense = sp.dense
    top = len(dense)
    for k in range(sp.bstart[b], sp.bstart[b] + sp.bsize[b]):
        d = sp.bd[k]
        if d < top:
            h += dense[d]
    ez = e[z]
    c = min(kmax * h / mb, kmax / mb, ez)
    bound = lam + om[z] * min(c - kmin / mb, 0.0) + ommin * (c - ez)
    return bucket_margin(bound + 2.0 * INFLATE * (abs(bound) + 2.0 * cost[z]), cost[z], costmax)


@njit(cache=True, inline="always")
def bucket_margin(bb, cost_z, costmax):
    """``bucket_bound`` raised to bound the *values* a member gets, not only its benefit: a
    class-pair bound (``_bound``) is inflated by both trees' costs, the bucket bound by twice
    ``z``'s, so a costlier member's value can exceed the bucket bound by ``INFLATE`` times the
    difference (a skipped bucket, or a row cut before it, would then lose a pair whose value
    its refill no longer takes: issue 34, ties at Smax 100). Another ``INFLATE`` for rounding."""
    return bb + INFLATE * (max(costmax - cost_z, 0.0) + abs(bb) + cost_z)


@njit(cache=True, inline="always")
def file_cut(env, b, cv, omz):
    """Record a member's cut (``-value`` ``cv``, ``inf`` for a full row) in single-modulus
    bucket ``b``'s envelope: ``env[k, b] = min over every cut ever filed of its value +
    Omega x slope k`` (the member's Omega; dead members stay in it: conservative). Slope
    first: a row reads two slopes for most buckets, in bucket order."""
    cutval = -cv
    for k in range(NENV):
        x = cutval + omz * SLOPES[k]
        if x < env[k, b]:
            env[k, b] = x


@njit(cache=True, inline="always")
def env_start(ez):
    """The first slope at or below ``ez (1 - 1e-6)`` (``NENV``: none), for a row of edge density
    ``ez``: every ``beta`` its ``cut_envelope`` reads is at most that (``c >= 0``, and float
    rounding is monotone), so its slope is there or after. Once per row: ``log2`` per bucket
    was about a third of the envelope's time (BENCHMARKS.md, issue 34)."""
    beta = ez * (1.0 - 1e-6)
    if not beta > 0.0:
        return NENV
    k = int(math.ceil(-ENV_STEP * math.log2(beta)))
    k = min(max(k, 0), NENV)
    while k < NENV and SLOPES[k] > beta:  # log2's rounding
        k += 1
    while k > 0 and SLOPES[k - 1] <= beta:
        k -= 1
    return k


@njit(cache=True, inline="always")
def cut_envelope(env, b, k0, lam, oz, ez, cz, c, klo, costmax):
    """Whether every member of single-modulus bucket ``b`` is behind its own row's cut at the
    bound the walk gives it (``bucket_margin(bucket_value(.., c, klo, Omega_s))``), so the
    whole bucket is the members' (``_theirs``) and a row need not walk it.

    Why (issue 34): the bucket's cut (``Buckets.cut``) compares the bound at the bucket's
    least Omega with its members' lowest cut; members of larger Omega have lower bounds, so a
    bucket passed that test and its walk then found every member the member's own: about
    nine in ten of the buckets a new row walked at 30,000 queries of Smax 10,000.

    A member ``s``'s bound is ``P - Omega_s beta`` (``P = lam + oz min(c - klo, 0)``,
    ``beta = ez - c >= 0``) plus margins; the pair is ``s``'s when that is below ``s``'s cut
    value ``v_s``, for every member when ``P`` is below ``f(beta) = min_s (v_s + Omega_s
    beta)``. ``f`` is a minimum of lines, so concave: between two of its slopes it lies
    above the chord of the envelope's values there (``env[k, b] = f(slope k)``, dead members'
    lines included: only lower). So with ``beta`` taken as ``beta (1 - 1e-6)``, ``P`` (plus
    the margins, bounded without ``Omega_s``: the ``Omega_s`` terms they add are far below
    ``1e-6 Omega_s beta``) strictly below the chord puts every member behind its cut, ties of
    uid aside. The chord, not the slope below: at 100,000 queries a new single-modulus row
    walked 1,940 buckets reading the slope below at a step of 2^(1/2), 1,200 at 2^(1/8), 1,030
    reading the chord at 2^(1/4), most of them for nothing still (BENCHMARKS.md). ``k0``: the
    row's ``env_start(ez)``."""
    beta = (ez - c) * (1.0 - 1e-6)
    if not beta > 0.0:
        return False
    k = k0  # the first slope <= beta (NENV: none)
    while k < NENV and SLOPES[k] > beta:
        k += 1
    if k >= NENV:
        return False
    g = env[k, b]
    gh = g
    if k > 0:
        gh = env[k - 1, b]
        if gh < np.inf and g > -np.inf:  # the chord from slope k to slope k - 1 > beta
            g += (beta - SLOPES[k]) / (SLOPES[k - 1] - SLOPES[k]) * (gh - g)
    p = lam + oz * min(c - klo, 0.0)
    margin = INFLATE * (3.0 * abs(p) + 4.0 * cz + max(costmax - cz, 0.0) + abs(g) + abs(gh))
    return p + 2.0 * margin < g


@njit(cache=True, inline="always")
def _members_own(buckets, b, z, bb, cmem, k0, refill, envelope, lam, oz, ez, cz):
    """Whether single-modulus bucket ``b`` (bound ``bb``, ``C`` bound ``cmem``) holds only its
    members' pairs with row ``z``: its bound behind every member's cut, or its cut envelope
    says so (``cut_envelope``). Not for a refill's partners filed after ``z``, which are its
    own. One test for the listing (``_bucket_part``) and a ``DEFERRED`` bucket's walk."""
    if refill and buckets.newest[b] >= z:
        return False
    if -bb > buckets.cut[b]:
        return True
    return envelope and cut_envelope(
        buckets.env, b, k0, lam, oz, ez, cz, cmem, buckets.klo[b], buckets.costmax[b]
    )


@njit(cache=True, inline="always")
def row_split(mz, kz, sp, bz):
    """``(Dz, alpha)`` of a single-modulus row (modulus ``mz``, ``kz`` classes, bucket ``bz``):
    a bucket whose modulus shares no divisor above ``Dz`` with ``mz`` has ``gcd <= G``, the
    largest divisor of ``mz`` up to ``Dz``, so its common-edge density with the row is at most
    ``alpha k_b / m_b``, ``alpha = kz G / mz`` (``bucket_bound``'s per-class term)."""
    dz = max(DLOW, mz // (ALPHA_DIV * kz))
    g = 1
    for k in range(sp.bstart[bz], sp.bstart[bz] + sp.bsize[bz]):
        d = sp.bd[k]
        if g < d <= dz:
            g = d
    return dz, kz * g / np.float64(mz)


@njit(cache=True)
def gcd_table(mz, sp, bz, top):
    """``sp.gcds[m] = gcd(mz, m)`` for every ``m < top`` (the divisors of ``mz`` are those of
    its bucket ``bz``): the largest divisor of ``mz`` that divides ``m``, by marking the
    multiples of each. About ``top (sigma(mz)/mz - 1)`` steps (8 us at Smax 10,000), for a row
    of thousands of buckets much less than one Euclid per bucket (their divisions were about a
    fifth of its bounds). A modulus shares a divisor above ``Dz`` with ``mz`` (``row_split``)
    exactly when its gcd with ``mz`` is above ``Dz``: the table also says which buckets the
    gcd-free screen may skip."""
    g = sp.gcds
    for m in range(top):
        g[m] = 1
    for k in range(sp.bstart[bz], sp.bstart[bz] + sp.bsize[bz]):
        d = sp.bd[k]
        if d > 1:
            for m in range(d, top, d):
                if d > g[m]:
                    g[m] = d


@njit(cache=True, inline="always")
def _row_gcd(mz, mb, sp, htop):
    """``gcd(mz, mb)`` for a single-modulus row of modulus ``mz``: from its sieve
    (``gcd_table``, filled up to ``htop``), else Euclid."""
    return sp.gcds[mb] if mb < htop else _gcd(mz, mb)


@njit(cache=True, inline="always")
def gcd_free_bound(lam, oz, ez, cz, alpha, klo, khi, olo, costmax):
    """At least ``bucket_margin(bucket_bound(..))`` of a single-modulus row (Omega ``oz``,
    edge density ``ez``, cost ``cz``) with a bucket (or every bucket of a group) of
    ``kmin / m_b >= klo``, ``kmax / m_b <= khi``, Omega ``>= olo``, cost ``<= costmax`` whose
    gcd with the row's modulus is at most ``G`` (``row_split``), without that gcd: the bucket
    bound grows with ``C <= min(alpha, 1) kmax / m_b, ez``, falls with ``kmin / m_b`` and with
    the bucket's Omega (times ``C - ez <= 0``). Margins as the bucket bound's, and twice more
    for rounding."""
    a = min(alpha, 1.0)
    cmax = min(a * khi, ez)
    bound = lam + oz * min(a * khi - klo, 0.0) + olo * (cmax - ez)
    bound += INFLATE * (abs(bound) + 2.0 * cz)
    bound = bucket_margin(bound, cz, costmax)
    return bound + 2.0 * INFLATE * (abs(bound) + cz + costmax + abs(lam))


@njit(cache=True)
def bucket_pairs(nb, b_key, b_mod, b_kmin, b_kmax, b_om, lam, floor):
    """``open[a, b]``: whether a tree of bucket ``a`` may weave at a benefit above ``floor``
    with a tree of bucket ``b`` (always for the multi-modulus buckets, modulus 0). From the
    bucket extremes: ``C <= cmax`` (pair counts, ``k/m``), ``C <= E`` of either side, so
    ``benefit <= lambda + Om_a min(cmax - kmin_b/m_b, 0) + Om_b min(cmax - kmin_a/m_a, 0)``."""
    out = np.zeros((nb, nb), np.bool_)
    for a in range(nb):
        for b in range(a, nb):
            if b_key[a] != b_key[b]:
                continue
            ma = b_mod[a]
            mb = b_mod[b]
            if ma == 0 or mb == 0:
                out[a, b] = out[b, a] = True
                continue
            ka = b_kmax[a] / ma
            kb = b_kmax[b] / mb
            c0 = min(ka, kb)  # without the gcd first: most pairs stop here
            scale = abs(lam) + b_om[a] * ka + b_om[b] * kb
            bound = (
                lam
                + b_om[a] * min(c0 - b_kmin[b] / mb, 0.0)
                + b_om[b] * min(c0 - b_kmin[a] / ma, 0.0)
            )
            if bound + INFLATE * (abs(bound) + scale) <= floor:
                continue
            g = _gcd(ma, mb)
            den = np.float64(ma) * np.float64(mb)
            cmax = min(
                b_kmax[a] * min(b_kmax[b], mb // g) * g / den,
                b_kmax[b] * min(b_kmax[a], ma // g) * g / den,
                b_kmax[a] / ma,
                b_kmax[b] / mb,
            )
            bound = (
                lam
                + b_om[a] * min(cmax - b_kmin[b] / mb, 0.0)
                + b_om[b] * min(cmax - b_kmin[a] / ma, 0.0)
            )
            scale = abs(bound) + lam + b_om[a] * b_kmax[a] / ma + b_om[b] * b_kmax[b] / mb
            if bound + INFLATE * scale > floor:
                out[a, b] = out[b, a] = True
    return out


# ---- a row's best entries: a bounded max-heap keyed (-value, partner uid) -------------------


@njit(cache=True, inline="always")
def _worse(v, u, w, x):
    """Key ``(v, u)`` after ``(w, x)`` (keys are ``(-value, partner uid)``: unique per row)."""
    return v > w or (v == w and u > x)


@njit(cache=True, inline="always")
def _sift_down(tv, tu, tj, tx, end, v, u, j, x):
    """Put ``(v, u, j, x)`` at the root of the worst-on-top heap ``[0, end)`` and sift it down
    (shared by the bounded heap's replace-top and its heapsort)."""
    i = 0
    while True:
        c = 2 * i + 1
        if c >= end:
            break
        if c + 1 < end and _worse(tv[c + 1], tu[c + 1], tv[c], tu[c]):
            c += 1
        if _worse(tv[c], tu[c], v, u):
            tv[i] = tv[c]
            tu[i] = tu[c]
            tj[i] = tj[c]
            tx[i] = tx[c]
            i = c
        else:
            break
    tv[i] = v
    tu[i] = u
    tj[i] = j
    tx[i] = x


@njit(cache=True)
def _keep(tv, tu, tj, tx, cnt, cap, v, u, j, x):
    """Offer ``(v, u | j, x)`` to the best-``cap`` heap of size ``cnt`` (root: the worst kept);
    returns the new size."""
    if cnt < cap:
        i = cnt
        while i > 0:
            parent = (i - 1) >> 1
            if _worse(v, u, tv[parent], tu[parent]):
                tv[i] = tv[parent]
                tu[i] = tu[parent]
                tj[i] = tj[parent]
                tx[i] = tx[parent]
                i = parent
            else:
                break
        tv[i] = v
        tu[i] = u
        tj[i] = j
        tx[i] = x
        return cnt + 1
    if not _worse(tv[0], tu[0], v, u):
        return cnt  # the offered entry is not among the best
    _sift_down(tv, tu, tj, tx, cnt, v, u, j, x)  # the old root leaves
    return cnt


@njit(cache=True)
def _sorted_out(tv, tu, tj, tx, cnt, rj, rv, rx, n):
    """Write the kept entries to ``[n, n + cnt)`` of the pool, best first (heapsort of the
    best-``cap`` heap, which it consumes)."""
    for end in range(cnt - 1, 0, -1):
        v = tv[end]
        u = tu[end]
        j = tj[end]
        x = tx[end]
        tv[end] = tv[0]
        tu[end] = tu[0]
        tj[end] = tj[0]
        tx[end] = tx[0]
        _sift_down(tv, tu, tj, tx, end, v, u, j, x)
    for i in range(cnt):
        rj[n + i] = tj[i]
        rv[n + i] = tv[i]
        rx[n + i] = tx[i]


# ---- heaps keyed by (-value, uid lo, uid hi): the eager table's order -----------------------


@njit(cache=True, inline="always")
def _less(v, a1, a2, w, b1, b2):
    return v < w or (v == w and (a1 < b1 or (a1 == b1 and a2 < b2)))


@njit(cache=True)
def heap_push(hv, hi, n, v, u1, u2, x, y):
    """Push ``(v, u1, u2 | x, y)`` onto the heap of size ``n`` (``hi[:, 0:2]`` = uids,
    ``hi[:, 2:4]`` = payload); returns the new size. The caller keeps capacity."""
    i = n
    while i > 0:
        parent = (i - 1) >> 1
        if _less(v, u1, u2, hv[parent], hi[parent, 0], hi[parent, 1]):
            hv[i] = hv[parent]
            hi[i, :] = hi[parent, :]
            i = parent
        else:
            break
    hv[i] = v
    hi[i, 0] = u1
    hi[i, 1] = u2
    hi[i, 2] = x
    hi[i, 3] = y
    return n + 1


@njit(cache=True)
def _heap_pop(hv, hi, n):
    """Remove the top of a heap of size ``n``; returns the new size."""
    n -= 1
    if n <= 0:
        return 0
    v = hv[n]
    u1 = hi[n, 0]
    u2 = hi[n, 1]
    x = hi[n, 2]
    y = hi[n, 3]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and _less(hv[c + 1], hi[c + 1, 0], hi[c + 1, 1], hv[c], hi[c, 0], hi[c, 1]):
            c += 1
        if _less(hv[c], hi[c, 0], hi[c, 1], v, u1, u2):
            hv[i] = hv[c]
            hi[i, :] = hi[c, :]
            i = c
        else:
            break
    hv[i] = v
    hi[i, 0] = u1
    hi[i, 1] = u2
    hi[i, 2] = x
    hi[i, 3] = y
    return n


# ---- a heap of positions keyed (v, t), read only as far as a row goes -----------------------


@njit(cache=True, inline="always")
def _pos_before(v, t, a, b):
    return v[a] < v[b] or (v[a] == v[b] and t[a] < t[b])


@njit(cache=True)
def _pos_sift(v, t, hp, n, i):
    x = hp[i]
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and _pos_before(v, t, hp[c + 1], hp[c]):
            c += 1
        if _pos_before(v, t, hp[c], x):
            hp[i] = hp[c]
            i = c
        else:
            break
    hp[i] = x


@njit(cache=True)
def _pos_heapify(v, t, hp, n):
    """Min-heap of the positions ``hp[:n]`` (``hp[i] = i``) by ``(v, t)``."""
    for i in range(n):
        hp[i] = i
    for i in range(n // 2 - 1, -1, -1):
        _pos_sift(v, t, hp, n, i)


@njit(cache=True)
def _pos_pop(v, t, hp, n):
    """Remove the heap's first position; returns the new size."""
    n -= 1
    if n > 0:
        hp[0] = hp[n]
        _pos_sift(v, t, hp, n, 0)
    return n


@njit(cache=True, inline="always")
def _offer(z, s, v, refill, floor, uid, full, cutv, cutu, cv, cu, rw, tv, tu, tj, tx, cnt, tcap):
    """Offer the pair ``(z, s)`` of bounded value ``v`` to ``z``'s row (its best-``tcap`` heap
    ``tv, tu, tj, tx`` of size ``cnt``) if it is the row's and among its best so far; returns
    the new ``cnt``. The members' loop in ``_walk_part`` keeps these steps inline: it is the
    hot path of exact pairs (calling ``_offer`` with the row's state in one tuple, in a change
    with one more edit, made a plan a fifth slower: BENCHMARKS.md)."""
    mine = v > floor and not _theirs(s, z, v, refill, uid, full, cutv, cutu, rw)
    if mine and (not refill or _worse(-v, uid[s], cv, cu)):
        if cnt < tcap or _worse(tv[0], tu[0], -v, uid[s]):
            cnt = _keep(tv, tu, tj, tx, cnt, tcap, -v, uid[s], s, False)
    return cnt


@njit(cache=True, inline="always")
def _theirs(s, z, v, refill, uid, full, cutv, cutu, rw):
    """Whether the pair of ``s`` and ``z`` at value ``v`` is ``s``'s, not ``z``'s: ``s`` filed
    first and the pair after ``s``'s cut (then, for a refill of ``z``); ``s``'s refills price
    it. Monotone: true at a bound of the value, it is true at the value."""
    if s >= z:
        return False
    if refill:
        return _after_cut_then(s, z, v, uid[z], rw)
    return not full[s] and _worse(-v, uid[z], cutv[s], cutu[s])


@njit(cache=True, inline="always")
def _after_cut_then(s, z, v, uz, rw):
    """Whether the pair of ``s`` and the later slot ``z`` (value ``v``) was after ``s``'s
    cut when ``z`` was priced: then it is ``s``'s (its refills price it), else ``z``'s."""
    c = rw.chead[s]
    while rw.ct[c] > z:
        c = rw.cnext[c]
    return _worse(-v, uz, rw.cv[c], rw.cu[c])


@njit(cache=True)
def _advance(slot, alive, uid, rw, hv, hi, nh):
    """Push the row's first entry whose partner is alive or, when its kept entries are used up
    but it had more, a *marker* ``(cut value, -1, -1 | slot, 1)``: no later than any of the
    row's other entries in the heap order, it says when they must be priced (``pop``);
    returns the heads heap's new size."""
    rj = rw.partner
    rpos = rw.pos
    p = rpos[slot]
    n = rw.end[slot]
    while p < n and not alive[rj[p]]:
        p += 1
    rpos[slot] = p
    if p < n:
        uo = uid[rj[p]]
        us = uid[slot]
        return heap_push(hv, hi, nh, rw.negval[p], min(uo, us), max(uo, us), slot, 0)
    if not rw.full[slot]:
        return heap_push(hv, hi, nh, rw.cutv[slot], -1, -1, slot, 1)
    return nh


@njit(cache=True)
def _sort_next(vb, order, a, end, k):
    """Move the ``k`` best positions of ``order[a:end]`` by ``vb`` (and every other one equal to
    the ``k``-th) to its front, sorted, ties in their order there; returns the end of that
    sorted run. ``order[a:end]`` holds positions in increasing order, and so does the rest left
    after the run: so runs sorted one after another give the order of one stable sort of all.
    Why: a row's walk reads about a tenth of its buckets (BENCHMARKS.md, issue 34), and sorting
    all of them was half of a row's bounding and sorting."""
    n = end - a
    if n <= 0:
        return end
    m = 0
    if n > k:
        vals = np.empty(n, np.float64)
        for i in range(n):
            vals[i] = vb[order[a + i]]
        top = np.partition(vals, k - 1)[k - 1]
        tmp = np.empty(n, np.int64)
        for i in range(n):
            if vb[order[a + i]] <= top:
                tmp[m] = order[a + i]
                m += 1
        if m > 0:  # none only if NaNs are among the k best: then all at once, as below
            r = m
            for i in range(n):
                if not vb[order[a + i]] <= top:
                    tmp[r] = order[a + i]
                    r += 1
            for i in range(n):
                order[a + i] = tmp[i]
    if m == 0:
        m = n
        tmp = order[a:end].copy()
    sub = np.empty(m, np.float64)
    for i in range(m):
        sub[i] = vb[tmp[i]]
    rank = np.argsort(sub, kind="mergesort")
    for i in range(m):
        order[a + i] = tmp[rank[i]]
    return a + m


@njit(cache=True)
def _bucket_part(
    t, parts, lo, hi_, row, floor, lam, refill, slots, classes, buckets, prune, sp, out
):
    """Part ``t`` of ``parts`` of a row's buckets ``lo .. hi_`` (``rows``; ``row`` = its slot
    ``z``, screen ``(alpha, dz, htop, zdense)``, the run to sort first and whether to read
    the buckets' cut envelopes, ``cut_envelope``; a single-modulus
    ``z``'s gcds with the moduli below ``htop`` in ``sp.gcds``): each bucket the row does not
    skip as ``(-bound, bucket, C bound)`` in ``out = (vb, ob, cb, order, pstart, pend,
    psorted)`` from the part's start on, its first ``first`` positions by ``-bound`` (stable:
    ties by bucket) sorted into ``order`` there (``_sort_next``; the rest after them, for the
    walk to sort when it gets there), its start and end in ``pstart[t]``, ``pend[t]``, the end
    of the sorted run in ``psorted[t]``. In a fill's or a refill's row, a bucket that passes the
    gcd-free screen is listed at the screen's bound with C bound ``DEFERRED``: its bucket bound
    (``bucket_c``'s loop over the row's classes) and the tests after it are the walk's, for the
    few buckets it reaches. Reads the table only, so the parts run on threads of their own."""
    z, alpha, dz, htop, zdense, first, envelope = row
    vb, ob, cb, order, pstart, pend, psorted = out
    e = slots.e
    om = slots.om
    cost = slots.cost
    kcls = slots.kcls
    cstart = slots.cstart
    mz = slots.smod[z]
    zn = kcls[z]
    zs = cstart[z]
    bz = slots.bucket[z]
    pm = classes.mod
    pr = classes.res
    b_key = buckets.key
    b_mod = buckets.mod
    b_kmin = buckets.kmin
    b_kmax = buckets.kmax
    b_klo = buckets.klo
    b_khi = buckets.khi
    b_om = buckets.om
    b_head = buckets.head
    b_newest = buckets.newest
    b_cut = buckets.cut
    b_costmax = buckets.costmax
    b_env = buckets.env
    use_open = prune.use
    kz = b_key[bz]  # z's key
    k0 = env_start(e[z]) if envelope else NENV
    defer = not envelope or refill  # rows that list many more buckets than they walk
    start = (hi_ - lo) * t // parts
    w = start
    for bi in range(lo + start, lo + (hi_ - lo) * (t + 1) // parts):
        b = prune.idx[bi] if use_open else bi
        if b_key[b] != kz or b_head[b] < 0:
            continue
        mb = b_mod[b]
        bb = np.inf
        cmem = np.inf
        if mb > 0:
            if mz == 0:  # a merged tree: many moduli, one gcd each in the bucket bound
                if zdense == 1:
                    pb = bucket_screen(
                        z, lam, e, om, cost, b, mb, b_kmin[b], b_kmax[b], b_om[b], b_costmax[b], sp
                    )
                    if pb <= floor or (-pb > b_cut[b] and (not refill or b_newest[b] < z)):
                        continue
            elif mb < htop and sp.gcds[mb] <= dz:
                pb = gcd_free_bound(
                    lam,
                    om[z],
                    e[z],
                    cost[z],
                    alpha,
                    b_klo[b],
                    b_khi[b],
                    b_om[b],
                    b_costmax[b],
                )
                if pb <= floor or (-pb > b_cut[b] and (not refill or b_newest[b] < z)):
                    continue  # the bucket bound would skip it too
                if (
                    envelope
                    and (not refill or b_newest[b] < z)
                    and cut_envelope(
                        b_env,
                        b,
                        k0,
                        lam,
                        om[z],
                        e[z],
                        cost[z],
                        min(min(alpha, 1.0) * b_khi[b], e[z]),  # at least its C bound
                        b_klo[b],
                        b_costmax[b],
                    )
                ):
                    continue  # every member at its own bound: theirs
                if defer and not (use_open and mb == mz):
                    vb[w] = -pb  # at least the bucket bound: the walk prices it (``DEFERRED``)
                    ob[w] = b
                    cb[w] = DEFERRED
                    w += 1
                    continue
            gz = _row_gcd(mz, mb, sp, htop) if mz > 0 else 0
            cmem = bucket_c(z, e, kcls, cstart, pm, mb, b_kmax[b], gz)
            bb = bucket_value(lam, om[z], e[z], cost[z], cmem, b_klo[b], b_om[b])
            bb = bucket_margin(bb, cost[z], b_costmax[b])
            if bb <= floor:
                continue
            if use_open and mb == mz:  # residues shared with some other tree of b
                fkeys = prune.fkeys
                shared = 0
                for i in range(zs, zs + zn):
                    kk = b * prune.fmul + pr[i]
                    at = np.searchsorted(fkeys, kk)
                    c = prune.fcnt[at] if at < len(fkeys) and fkeys[at] == kk else 0
                    if c - (1 if b == bz else 0) >= 1:
                        shared += 1
                c = min(shared / mb, b_khi[b], e[z])
                bound = bucket_value(lam, om[z], e[z], cost[z], c, b_klo[b], b_om[b])
                if bound <= floor:
                    continue
                bb = min(bb, bound)
                cmem = min(cmem, c)
            # Below every member's cut (now, so also when a later z was priced): theirs.
            # A refill's later partners are its own: only for buckets filed before z.
            if _members_own(
                buckets, b, z, bb, cmem, k0, refill, envelope, lam, om[z], e[z], cost[z]
            ):
                continue
        vb[w] = -bb
        ob[w] = b
        cb[w] = cmem
        w += 1
    pstart[t] = start
    pend[t] = w
    for i in range(start, w):
        order[i] = i
    psorted[t] = _sort_next(vb, order, start, w, first)


@njit(cache=True, parallel=True)
def _walk_part(t, row, cut, floor, lam, refill, slots, classes, buckets, rw, sp, out, keep, scr):
    """Walk part ``t`` of a row's buckets (``_bucket_part``'s output ``out``) best bound first,
    unlinking dead members and keeping the row's best entries in part ``t`` of ``keep = (tv,
    tu, tj, tx)`` (a bounded heap, ``_keep``); returns how many it kept and ``zdense`` (1 once
    it put ``z``'s spectrum into ``sp.dense`` for its screen, if ``row`` had not). Once the
    part's kept entries all beat a bucket's bound, they beat every later bucket of the part
    too: the part is cut there. A ``DEFERRED`` bucket gets its bucket bound here, and is
    passed over (the part is not cut: its listed bound is the screen's, above it) where the
    listing's tests would have dropped it or the kept entries beat it. ``cut``: a refill's
    previous cut; ``scr = (hist, colsum, gs, ts, qv, qu, qs, qh)``: the part's scratch
    (``hist`` left zeroed). Reads the table and writes only the lists of the part's own
    buckets, so the parts run on threads of their own; each part keeps at least the row's best
    entries among its buckets, so the best of the parts' kept entries are the row's (``rows``).
    ``parallel=True`` for its speed (the note after the imports), not for a prange."""
    z, alpha, dz, htop, zdense, first, envelope = row
    cv, cu = cut
    vb, ob, cb, order, ppos, pend, psorted = out
    tv = keep[0][t]
    tu = keep[1][t]
    tj = keep[2][t]
    tx = keep[3][t]
    hist = scr[0][t]
    colsum = scr[1][t]
    gs = scr[2][t]
    ts = scr[3][t]
    qv = scr[4][t]
    qu = scr[5][t]
    qs = scr[6][t]
    qh = scr[7][t]
    tcap = len(tv)
    alive = slots.alive
    uid = slots.uid
    e = slots.e
    om = slots.om
    cost = slots.cost
    kcls = slots.kcls
    cstart = slots.cstart
    nxt = slots.nxt
    pm = classes.mod
    pr = classes.res
    b_mod = buckets.mod
    b_kmin = buckets.kmin
    b_kmax = buckets.kmax
    b_om = buckets.om
    b_head = buckets.head
    b_costmax = buckets.costmax
    b_klo = buckets.klo
    full = rw.full
    cutv = rw.cutv
    cutu = rw.cutu
    mz = slots.smod[z]
    zs = cstart[z]
    zn = kcls[z]
    k0 = env_start(e[z]) if envelope else NENV
    cnt = 0
    nextk = 2 * first
    end = pend[t]
    while ppos[t] < end:
        if ppos[t] == psorted[t]:  # the part's next sorted run
            psorted[t] = _sort_next(vb, order, ppos[t], end, nextk)
            nextk *= 2
        at = order[ppos[t]]
        ppos[t] += 1
        if cnt == tcap and vb[at] > tv[0]:
            break
        b = ob[at]
        mb = b_mod[b]
        cmem = cb[at]
        klo = b_klo[b] if mb > 0 else 0.0
        if cmem == DEFERRED:  # the bound ``_bucket_part`` would have given it, and its tests
            cmem = bucket_c(z, e, kcls, cstart, pm, mb, b_kmax[b], _row_gcd(mz, mb, sp, htop))
            bb = bucket_margin(
                bucket_value(lam, om[z], e[z], cost[z], cmem, klo, b_om[b]), cost[z], b_costmax[b]
            )
            if bb <= floor or (cnt == tcap and -bb > tv[0]):
                continue
            if _members_own(
                buckets, b, z, bb, cmem, k0, refill, envelope, lam, om[z], e[z], cost[z]
            ):
                continue
        g = 1
        big = 0
        exact = mz > 0 and mb > 0
        if exact:
            g = _row_gcd(mz, mb, sp, htop)
            big = mz // g * mb
            exact = big <= EXACT_LIMIT
        lz = big // mz if exact else 0
        ls = big // mb if exact else 0
        use_hist = exact and 1 < g <= HIST
        # Coprime moduli and one #classes in the bucket: every pair has the same E_xy.
        flat = exact and g == 1 and b_kmin[b] == b_kmax[b]
        exy = 0.0
        if flat:
            exy = np.float64(zn * lz + b_kmin[b] * ls - zn * b_kmin[b]) / np.float64(big)
            cz = cost[z]
            oz = om[z]
        if use_hist:
            for i in range(zs, zs + zn):
                hist[pr[i] % g] += 1
        nqb = 0  # pairs of the multi-modulus bucket left to price, best screen first
        later = False
        prev = -1
        s = b_head[b]
        while s >= 0:
            nx = nxt[s]
            if not alive[s]:  # unlink
                if prev < 0:
                    b_head[b] = nx
                    if mb > 0 and nx >= 0:
                        b_om[b] = om[nx]
                else:
                    nxt[prev] = nx
                s = nx
                continue
            if mb > 0 and s != z:
                w = bucket_margin(
                    bucket_value(lam, om[z], e[z], cost[z], cmem, klo, om[s]),
                    cost[z],
                    b_costmax[b],
                )
                # Omega order: once a member's bound is behind the worst kept entry, so
                # are the values of it and of every later member (``bucket_value``).
                if cnt == tcap and -w > tv[0]:
                    break
                # After s's cut (then) even at its bound: s's pair, not priced here.
                if _theirs(s, z, w, refill, uid, full, cutv, cutu, rw):
                    prev = s
                    s = nx
                    continue
            if s != z:
                if flat:  # _exact's operations, E_xy hoisted
                    v = (cost[s] + cz) - (lam + exy * (om[s] + oz))
                elif exact:
                    pc = _count(z, s, kcls, cstart, pr, g, mb, hist, use_hist)
                    v = _exact(z, s, lam, om, cost, kcls, pc, lz, ls, big)
                else:  # later slot first: the same float whichever row prices the pair
                    hi_s, lo_s = (z, s) if s < z else (s, z)
                    if (
                        s < z
                        and not full[s]
                        and _worse(-_loose(hi_s, lo_s, lam, e, om, cost), uid[z], cutv[s], cutu[s])
                    ):
                        v = -np.inf  # after s's cut even with C = min(Ez, Es): s's pair
                    else:
                        if zdense < 0:
                            zdense = 1 if _scatter(z, sp) else 0
                        w = _screen(z, s, lam, e, om, cost, kcls, sp, zdense == 1)
                        # Where the screen (never below the value) says the pair is not
                        # kept, the value would say so too: it is not priced.
                        if w <= floor:
                            v = -np.inf
                        elif _theirs(s, z, w, refill, uid, full, cutv, cutu, rw):
                            v = -np.inf  # s's pair
                        elif cnt == tcap and not _worse(tv[0], tu[0], -w, uid[s]):
                            v = -np.inf  # not among the best kept
                        elif mb == 0:
                            qv[nqb] = -w
                            qu[nqb] = uid[s]
                            qs[nqb] = s
                            nqb += 1
                            later = True  # priced below, in screen order
                        else:
                            v = _bound(
                                hi_s,
                                lo_s,
                                lam,
                                e,
                                om,
                                cost,
                                kcls,
                                cstart,
                                pm,
                                pr,
                                colsum,
                                gs,
                                ts,
                            )
                if later:
                    later = False
                else:
                    mine = v > floor and not _theirs(s, z, v, refill, uid, full, cutv, cutu, rw)
                    if mine and (not refill or _worse(-v, uid[s], cv, cu)):
                        if cnt < tcap or _worse(tv[0], tu[0], -v, uid[s]):
                            cnt = _keep(tv, tu, tj, tx, cnt, tcap, -v, uid[s], s, exact)
            prev = s
            s = nx
        # The multi-modulus bucket's pairs by screen, best first: once the row holds ``tcap``
        # entries and a screen is behind its worst kept one, so are all the rest (values are
        # at most their screens): the same kept entries as pricing all.
        _pos_heapify(qv, qu, qh, nqb)
        while nqb > 0:
            q = qh[0]
            if cnt == tcap and not _worse(tv[0], tu[0], qv[q], qu[q]):
                break
            nqb = _pos_pop(qv, qu, qh, nqb)
            s = qs[q]
            hi_s, lo_s = (z, s) if s < z else (s, z)
            v = _bound(hi_s, lo_s, lam, e, om, cost, kcls, cstart, pm, pr, colsum, gs, ts)
            cnt = _offer(
                z,
                s,
                v,
                refill,
                floor,
                uid,
                full,
                cutv,
                cutu,
                cv,
                cu,
                rw,
                tv,
                tu,
                tj,
                tx,
                cnt,
                tcap,
            )
        if use_hist:
            for i in range(zs, zs + zn):
                hist[pr[i] % g] = 0
    return cnt, zdense


@njit(cache=True)
def _part(t, parts, job, sp, out, keep, scr):
    """Part ``t`` of ``parts`` of a row: its buckets bounded and sorted (``_bucket_part``),
    then walked (``_walk_part``); ``job``: the row's buckets ``lo, hi_``, ``row``, cut, and the
    table. Returns ``_walk_part``'s answer."""
    lo, hi_, row, cut, floor, lam, refill, slots, classes, buckets, prune, rw = job
    _bucket_part(
        t, parts, lo, hi_, row, floor, lam, refill, slots, classes, buckets, prune, sp, out
    )
    return _walk_part(
        t, row, cut, floor, lam, refill, slots, classes, buckets, rw, sp, out, keep, scr
    )


@njit(cache=True, parallel=True)
def rows(
    zs_, floor, lam, slots, classes, buckets, nb, wmax, prune, hist, cap, refill, rw, heaps, sp
):
    """Rows of the slots ``zs_`` (in order): for each, the alive filed partners whose value
    (exact benefit or bound) is above ``floor``; then the slot is filed into its bucket, so a
    fill of many slots prices every pair once. With ``prune.use`` only the buckets
    ``prune.idx[prune.ptr[b]:prune.ptr[b + 1]]`` are visited for a slot of bucket ``b``
    (``bucket_pairs``); otherwise all ``nb``. With ``prune.use`` also ``prune.fkeys, fcnt``:
    how many trees of bucket ``b`` hold residue ``r`` (sorted keys ``b * fmul + r``), which
    bounds the common classes with a bucket of the same modulus: only residues some *other*
    tree holds. ``wmax``: the most classes of any alive tree; ``hist``: ``HIST`` zeros
    (scratch, left zeroed).

    A row keeps only its best ``cap`` entries: a segment of the pool ``rw.partner, negval,
    exact`` from ``rw.pos`` to ``rw.end``, sorted by ``(-value, partner uid)`` (the eager
    table's order within a row). ``rw.full[z]``: the row kept all its entries (fewer than
    ``cap``); otherwise
    ``(cutv, cutu)[z]`` is the key of its last kept entry, and once the kept ones are used up
    and its marker reaches the top (``pop``) the row is priced again with ``refill``: the slot
    ``zs_[0]`` (filed already) against its alive partners whose key comes after the cut; the
    entries in between were consumed or died. Its first entry goes onto the heads heap. The
    pool must have room for ``cap`` entries per slot (``2 rw.cap[z]`` up to ``MAX_CAP`` with
    ``refill``), the cut history for one entry per slot.

    Whose row a pair is in: a slot ``z`` priced when filed takes its pairs with the earlier
    slots ``s``, except those after ``s``'s cut at that moment (``s``'s own refills will price
    them). Why (issue 34): every row's best partners are the same few good trees, which the first
    merges use up; when the later tree owned those pairs, nearly every row ran dry and was
    priced again, several times, each time in O(#trees). Now the pairs with a good tree stay
    behind its cut, the good tree's to price, and leave with it when it merges. A refill of
    ``z`` so takes its pairs with later slots after its cut, and with an earlier ``s`` only those
    that were ``z``'s when ``z`` was priced: ``s``'s cut then is in its history (``rw.chead``,
    ``ct``, ``cv``, ``cu``, ``cnext``: one entry per pricing, valid for the slots filed from
    ``ct`` on). Each pair is so in exactly one row (or after exactly one cut).
    """
    alive = slots.alive
    uid = slots.uid
    om = slots.om
    smod = slots.smod
    kcls = slots.kcls
    nxt = slots.nxt
    b_mod = buckets.mod
    b_cut = buckets.cut
    use_open = prune.use
    open_ptr = prune.ptr
    rcap = rw.cap
    cutv = rw.cutv
    cutu = rw.cutu
    full = rw.full
    rj = rw.partner
    rv = rw.negval
    hv = heaps.hv
    hi = heaps.hi
    sizes = heaps.sizes
    n = sizes[SZ_POOL]
    nh = sizes[SZ_HEADS]
    tcap = cap
    if refill:
        tcap = min(2 * rcap[zs_[0]], MAX_CAP)
    tv = np.empty(tcap, np.float64)  # the row's best entries (the parts' best)
    tu = np.empty(tcap, np.int64)
    tj = np.empty(tcap, np.int64)
    tx = np.empty(tcap, np.bool_)
    vb = np.empty(max(nb, 1), np.float64)  # a row's buckets: -bound, bucket, C bound
    ob = np.empty(max(nb, 1), np.int64)
    cb = np.empty(max(nb, 1), np.float64)
    order = np.empty(max(nb, 1), np.int64)  # each part's positions, best bound first
    nthr = max(sizes[SZ_PARTS], 1)
    ppos = np.empty(nthr, np.int64)  # each part's start, then the walk's place in it
    pend = np.empty(nthr, np.int64)  # each part's end
    psorted = np.empty(nthr, np.int64)  # the end of each part's sorted run
    pcnt = np.empty(nthr, np.int64)  # entries each part kept
    out = (vb, ob, cb, order, ppos, pend, psorted)
    ktv = np.empty((nthr, tcap), np.float64)  # each part's best entries
    ktu = np.empty((nthr, tcap), np.int64)
    ktj = np.empty((nthr, tcap), np.int64)
    ktx = np.empty((nthr, tcap), np.bool_)
    keep = (ktv, ktu, ktj, ktx)
    first = max(sizes[SZ_SORT_FIRST], 1)
    # A fill's rows see buckets of trees just filed, seldom behind their cuts: reading the
    # envelope cost a fill more than it saved it (BENCHMARKS.md, issue 34).
    envelope = len(zs_) == 1
    htop = 1  # moduli below this have their gcd with a single-modulus row's in ``sp.gcds``
    for b in range(nb):
        if b_mod[b] >= htop:
            htop = b_mod[b] + 1
    htop = min(htop, len(sp.gcds))
    nq = len(alive)  # screened pairs of the multi-modulus bucket: -screen, partner uid, slot
    scr = (  # each part's scratch: hist (the caller's zeros), _bound's, the screened pairs'
        hist,
        np.empty((nthr, wmax), np.float64),
        np.empty((nthr, wmax), np.int64),
        np.empty((nthr, wmax), np.float64),
        np.empty((nthr, nq), np.float64),
        np.empty((nthr, nq), np.int64),
        np.empty((nthr, nq), np.int64),
        np.empty((nthr, nq), np.int64),
    )
    for zi in range(len(zs_)):
        z = zs_[zi]
        mz = smod[z]
        zn = kcls[z]
        bz = slots.bucket[z]
        cnt = 0
        rcap[z] = tcap
        cv = cutv[z]
        cu = cutu[z]
        zdense = -1  # z's spectrum in sp.dense: -1 not yet (on its first screened pair), 0, 1
        lo, hi_ = (open_ptr[bz], open_ptr[bz + 1]) if use_open else (0, nb)
        # A single-modulus row screens a bucket by ``gcd_free_bound`` before its bucket bound,
        # unless their moduli share a divisor above ``dz`` (their gcd is above it) or that of
        # the bucket is beyond the scratch.
        alpha = 0.0
        dz = 0
        if mz > 0:
            dz, alpha = row_split(mz, zn, sp, bz)
            gcd_table(mz, sp, bz, htop)
        else:  # a merged tree: its spectrum screens the buckets (read by every part)
            zdense = 1 if _scatter(z, sp) else 0
        # The buckets' bounds, a contiguous part of ``lo .. hi_`` per thread, each part
        # compacted and its best run sorted in place: ``order[part start + i]`` its i-th best
        # position (the walk sorts the next runs when it gets to them).
        parts = nthr if hi_ - lo >= sizes[SZ_PAR_FROM] else 1
        # Each part walks its own buckets, best bound first (on its thread when there are
        # parts), and the row keeps the best of the parts' kept entries.
        if parts > 1 and mz > 0 and zdense < 0:  # the walk's screen reads it on every thread
            zdense = 1 if _scatter(z, sp) else 0
        row = (z, alpha, dz, htop, zdense, first, envelope)
        cut = (cv, cu)
        if parts > 1:
            for t in numba.prange(parts):
                # the job's tuple made here: numba's threads do not take a tuple of tuples
                job = (lo, hi_, row, cut, floor, lam, refill, slots, classes, buckets, prune, rw)
                kept, _ = _part(t, parts, job, sp, out, keep, scr)
                pcnt[t] = kept
            for t in range(parts):
                for i in range(pcnt[t]):
                    cnt = _keep(
                        tv, tu, tj, tx, cnt, tcap, ktv[t, i], ktu[t, i], ktj[t, i], ktx[t, i]
                    )
        else:
            job = (lo, hi_, row, cut, floor, lam, refill, slots, classes, buckets, prune, rw)
            cnt, zdense = _part(0, 1, job, sp, out, keep, scr)
            for i in range(cnt):
                tv[i] = ktv[0, i]
                tu[i] = ktu[0, i]
                tj[i] = ktj[0, i]
                tx[i] = ktx[0, i]
        # A row of ``cap`` entries may have had more: cut (whether the walk was cut or not, so
        # the rows are the same in any number of parts; a refill that finds no more is rare).
        dropped = cnt == tcap
        if zdense == 1:
            _unscatter(z, sp)
        _sorted_out(tv, tu, tj, tx, cnt, rj, rv, rw.exact, n)
        rw.pos[z] = n
        rw.end[z] = n + cnt
        full[z] = not dropped
        if cnt > 0:
            uo = uid[rj[n]]
            nh = heap_push(hv, hi, nh, rv[n], min(uo, uid[z]), max(uo, uid[z]), z, 0)
            if dropped:
                cutv[z] = rv[n + cnt - 1]
                cutu[z] = uid[rj[n + cnt - 1]]
        n += cnt
        c = sizes[SZ_CUTS]  # this cut holds for the slots filed from now on
        rw.ct[c] = sizes[SZ_SLOTS] if refill else z
        rw.cv[c] = np.inf if not dropped else cutv[z]
        rw.cu[c] = cutu[z]
        rw.cnext[c] = rw.chead[z] if refill else -1
        rw.chead[z] = c
        sizes[SZ_CUTS] = c + 1
        if rw.cv[c] > b_cut[bz]:
            b_cut[bz] = rw.cv[c]
        if b_mod[bz] > 0:
            file_cut(buckets.env, bz, rw.cv[c], om[z])
        if not refill:
            _file(z, bz, om, nxt, buckets)
    sizes[SZ_HEADS] = nh
    sizes[SZ_POOL] = n


@njit(cache=True, inline="always")
def _file(z, b, om, nxt, buckets):
    """Link slot ``z`` into bucket ``b``'s list: a single-modulus bucket in order of Omega
    (then slot), its head's Omega kept as the bucket's; the multi-modulus bucket at its head."""
    head = buckets.head
    if buckets.newest[b] < z:
        buckets.newest[b] = z
    prev = -1
    s = head[b]
    if buckets.mod[b] > 0:
        while s >= 0 and om[s] <= om[z]:
            prev = s
            s = nxt[s]
    nxt[z] = s
    if prev < 0:
        head[b] = z
        if buckets.mod[b] > 0:
            buckets.om[b] = om[z]
    else:
        nxt[prev] = z


@njit(cache=True)
def pop(floor, lams, slots, classes, buckets, nb, wmax, hist, cap, rw, heaps, sp):
    """The next candidate of the lazy table: ``(kind, a, b)`` with kind ``POP_NONE`` (none
    left), ``POP_MERGE`` (the eager table's next merge: an exact benefit on top of everything),
    ``POP_PRICE`` (a bound on top, to be priced exactly by the caller and pushed with
    ``heap_push`` onto ``heaps.ev, ei``) or ``POP_GROW`` (the pool needs room for ``a`` more
    entries: grow it and call again). ``a`` is the tree of lower uid. A row's marker on top
    (its kept entries used up) has the rest of the row priced here (``rows`` with ``refill``;
    ``lams``: lambda per key). ``heaps.sizes[SZ_PENDING]``: a new slot whose row is still to
    price (-1: none); that row (``cap`` entries) comes first, as ``rows`` would have priced it
    right after the merge."""
    alive = slots.alive
    uid = slots.uid
    rj = rw.partner
    rpos = rw.pos
    hv = heaps.hv
    hi = heaps.hi
    ev = heaps.ev
    ei = heaps.ei
    sizes = heaps.sizes
    one = np.empty(1, np.int64)
    none = np.zeros(1, np.int64)
    no_prune = Prune(False, none, none, none, none, 1)
    z = sizes[SZ_PENDING]
    if z >= 0:
        if sizes[SZ_POOL] + cap > len(rj) or sizes[SZ_CUTS] >= len(rw.ct):
            return POP_GROW, cap, -1
        one[0] = z
        rows(
            one,
            floor,
            lams[slots.key[z]],
            slots,
            classes,
            buckets,
            nb,
            wmax,
            no_prune,
            hist,
            cap,
            False,
            rw,
            heaps,
            sp,
        )
        sizes[SZ_PENDING] = -1
    while True:
        nh = sizes[SZ_HEADS]
        ne = sizes[SZ_EXACT]
        while ne > 0 and not (alive[ei[0, H_A]] and alive[ei[0, H_B]]):
            ne = _heap_pop(ev, ei, ne)
        while nh > 0:
            slot = hi[0, H_SLOT]
            if not alive[slot]:
                nh = _heap_pop(hv, hi, nh)
                continue
            if hi[0, H_MARKER] == 1 or alive[rj[rpos[slot]]]:
                break
            nh = _heap_pop(hv, hi, nh)  # partner died: advance the row
            nh = _advance(slot, alive, uid, rw, hv, hi, nh)
        sizes[SZ_HEADS] = nh
        sizes[SZ_EXACT] = ne
        if nh == 0 or (
            ne > 0
            and not _less(
                hv[0], hi[0, H_UID_LO], hi[0, H_UID_HI], ev[0], ei[0, H_UID_LO], ei[0, H_UID_HI]
            )
        ):
            if ne > 0:
                a = ei[0, H_A]
                b = ei[0, H_B]
                sizes[SZ_EXACT] = _heap_pop(ev, ei, ne)
                return POP_MERGE, a, b
            return POP_NONE, -1, -1
        slot = hi[0, H_SLOT]
        if hi[0, H_MARKER] == 1:  # the rest of a row reaches the top: price it now
            need = min(2 * rw.cap[slot], MAX_CAP)
            if sizes[SZ_POOL] + need > len(rj) or sizes[SZ_CUTS] >= len(rw.ct):
                return POP_GROW, need, -1
            sizes[SZ_HEADS] = _heap_pop(hv, hi, nh)
            sizes[SZ_REFILLS] += 1
            one[0] = slot
            rows(
                one,
                floor,
                lams[slots.key[slot]],
                slots,
                classes,
                buckets,
                nb,
                wmax,
                no_prune,
                hist,
                0,
                True,
                rw,
                heaps,
                sp,
            )
            continue
        nh = _heap_pop(hv, hi, nh)
        p = rpos[slot]
        other = rj[p]
        exact = rw.exact[p]
        rpos[slot] = p + 1
        sizes[SZ_HEADS] = _advance(slot, alive, uid, rw, hv, hi, nh)
        a, b = (other, slot) if uid[other] < uid[slot] else (slot, other)
        return (POP_MERGE if exact else POP_PRICE), a, b
