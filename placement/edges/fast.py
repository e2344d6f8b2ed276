"""The production edge engine: exact union density of residue classes, fast in common cases.

We compute the *uncovered* density ``U`` (fraction of positions that are not edges); ``E = 1 - U``.
The steps, each exact:

0. **One modulus.** Classes ``(m, r)`` of a single modulus are disjoint: ``E = #classes / m``
   (``single_modulus``; every tree of one slide, so most of WeaveShare's merges).
1. **Canonical form.** Drop duplicates and subsumed classes (``(m', r')`` covers ``(m, r)`` when
   ``m' | m`` and ``r = r' mod m'``) and coarsen full sets of lifts (all ``p`` lifts of ``a`` mod
   ``m/p`` present at modulus ``m`` are the class ``(m/p, a)``). A class of modulus 1 covers all.
2. **Components.** Classes whose moduli share no prime are independent (Chinese remainder
   theorem): the uncovered density of the union is the product over components sharing primes.
3. **Per component**, the cheapest exact method: a sieve over the lcm when it is small (a numba
   kernel on a bitmap, ``placement.edges.sieve``);
   signed inclusion-exclusion over CRT-merged classes keyed by ``(modulus, residue)`` while the
   term count stays small; otherwise **condition on a prime** ``p``: for each residue ``u`` of the
   highest power ``p^k``, the classes compatible with ``u`` lose their ``p``-part, so the residual
   problem falls apart into smaller components again. Residues leading to the same residual set are
   grouped (a trie over base-``p`` digits) and residual sets are memoised.

Results are memoised per canonical component, so merging two trees reuses the components that the
merge does not touch. When a step budget runs out, ``EdgeCountLimit`` is raised with certified
bounds: never a silent approximation.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from fractions import Fraction
from functools import lru_cache
from math import gcd, lcm

from placement.edges.base import Deadline, EdgeCountLimit, EdgeEngine, trivial_bounds
from placement.edges.f1 import remove_covered
from placement.edges.sieve import uncovered_count
from placement.edges.small import union_density
from placement.slicing import ResidueClass, crt_merge, divisors, prime_factors

FULL = frozenset({(1, 0)})


# Moduli up to it take the bitmask path (``canonical``): it covers menus of 10,000 slides, where
# the set version took a fifth of a plan's profile at 3,000 queries. Above it, masks and their
# cached repunits (``_repunit``, ``m`` bits each) grow large: the set version.
MASK_MODULUS_LIMIT = 1 << 14


def canonical(classes) -> frozenset[ResidueClass]:
    """Smallest equivalent class set we can find cheaply (same union of positions).

    The residues of each modulus ``m`` are one integer bitmask, so coarsening and subsuming are
    a few shifts and ANDs per (modulus, prime or divisor) instead of a pass over the residues;
    the steps and their order are ``canonical_by_sets``'s, so the result is the same set. A
    frozenset that is already canonical (a third of the engine's calls) is returned as is."""
    masks: dict[int, int] = {}
    get = masks.get
    size = 0
    same = isinstance(classes, frozenset)
    for m, r in classes:
        if not (1 < m <= MASK_MODULUS_LIMIT and 0 <= r < m):  # one test for the usual class
            if m == 1:
                return FULL
            if m > MASK_MODULUS_LIMIT:
                return canonical_by_sets(classes)
            r %= m
            same = False
        masks[m] = get(m, 0) | 1 << r
        size += 1
    same = same and size == sum(res.bit_count() for res in masks.values())
    changed = True
    while changed:
        changed = False
        # Coarsen: all p lifts of a residue a (mod m/p) present at m -> (m/p, a).
        for m in sorted(masks, reverse=True):
            res = masks[m]
            if not res:
                continue
            n = res.bit_count()
            for p, _ in prime_factors(m):
                if n < p:
                    continue
                d = m // p
                full = res & ((1 << d) - 1)
                for k in range(1, p):
                    full &= res >> k * d
                if full:
                    if d == 1:
                        return FULL
                    res &= ~(full * _repunit(d, m))
                    masks[m] = res
                    same = False
                    masks[d] = masks.get(d, 0) | full
                    changed = True
                    if not res:
                        break
                    n = res.bit_count()
        # Subsume: drop (m, r) when some (d, r mod d) with d | m, d < m is present.
        for m in sorted(masks):
            res = masks[m]
            if not res:
                continue
            for d in _between(m):
                low = masks.get(d)
                if low:
                    drop = res & low * _repunit(d, m)
                    if drop:
                        res ^= drop
                        masks[m] = res
                        same = False
                        if not res:
                            break
    if same:
        return classes
    return _from_masks(masks)


def _from_masks(masks: dict[int, int]) -> frozenset[ResidueClass]:
    """The classes of residue bitmasks. Wide masks are read through their binary digits:
    peeling off the lowest bit costs a pass over the whole integer per residue."""
    out = []
    for m, res in masks.items():
        if m <= 64:
            while res:
                bit = res & -res
                out.append((m, bit.bit_length() - 1))
                res ^= bit
        elif res:
            digits = format(res, "b")[::-1]
            i = digits.find("1")
            while i >= 0:
                out.append((m, i))
                i = digits.find("1", i + 1)
    return frozenset(out)


@lru_cache(maxsize=MASK_MODULUS_LIMIT)
def _between(m: int) -> tuple[int, ...]:
    """The divisors of ``m`` other than 1 and ``m``: the moduli that can subsume a class of ``m``
    in a mask set (a modulus 1 never stays in one: it is the full set)."""
    return divisors(m)[1:-1]


@lru_cache(maxsize=65_536)
def _repunit(d: int, m: int) -> int:
    """A bit at every multiple of ``d`` below ``m`` (``d | m``): times a residue mask mod ``d``,
    that mask's lifts to modulus ``m``."""
    return ((1 << m) - 1) // ((1 << d) - 1)


def canonical_by_sets(classes) -> frozenset[ResidueClass]:
    """``canonical`` on Python sets of residues: the reference and the path for large moduli."""
    by_mod: dict[int, set[int]] = defaultdict(set)
    for m, r in classes:
        if m == 1:
            return FULL
        by_mod[m].add(r % m)
    changed = True
    while changed:
        changed = False
        # Coarsen: all p lifts of a residue a (mod m/p) present at m -> (m/p, a).
        for m in sorted(by_mod, reverse=True):
            res = by_mod.get(m)
            if not res:
                continue
            for p, _ in prime_factors(m):
                if len(res) < p:
                    continue
                d = m // p
                full = [a for a, c in Counter(r % d for r in res).items() if c == p]
                if full:
                    if d == 1:
                        return FULL
                    fs = set(full)
                    res.difference_update([r for r in res if r % d in fs])
                    by_mod[d].update(full)
                    changed = True
                    if not res:
                        break
        # Subsume: drop (m, r) when some (d, r mod d) with d | m, d < m is present.
        for m in sorted(by_mod):
            res = by_mod[m]
            if not res:
                continue
            for d in divisors(m)[:-1]:
                low = by_mod.get(d)
                if low:
                    drop = [r for r in res if r % d in low]
                    if drop:
                        res.difference_update(drop)
                        if not res:
                            break
    return frozenset((m, r) for m, res in by_mod.items() for r in res)


def single_modulus(classes) -> int:
    """``m`` when every class is ``(m, r)`` with ``0 <= r < m`` (0 otherwise). Such classes are
    pairwise disjoint, so their union has density exactly ``#classes / m``: no engine work.
    Every tree of one slide is such a set (all trees before WeaveShare merges slides)."""
    it = iter(classes)
    m, r = next(it)
    if not 0 <= r < m:
        return 0
    for mm, r in it:
        if mm != m or not 0 <= r < m:
            return 0
    return m


def components(classes: frozenset[ResidueClass]) -> list[frozenset[ResidueClass]]:
    """Split classes into groups whose moduli share no prime across groups (union-find on primes)."""
    roots, count = _modulus_groups(frozenset({m for m, _ in classes}))
    if count == 1:
        return [frozenset(classes)]
    groups: dict[int, list[ResidueClass]] = defaultdict(list)
    for c in classes:
        groups[roots[c[0]]].append(c)
    return [frozenset(g) for g in groups.values()]


@lru_cache(maxsize=65_536)
def _modulus_groups(moduli: frozenset[int]) -> tuple[dict[int, int], int]:
    """Each modulus's group (a prime standing for it) and the number of groups: they depend on
    the moduli only, and the engine's many class sets share few sets of moduli. (Read only.)"""
    parent: dict[int, int] = {}

    def find(p: int) -> int:
        while parent[p] != p:
            parent[p] = parent[parent[p]]
            p = parent[p]
        return p

    firsts = {}
    for m in moduli:
        ps = [p for p, _ in prime_factors(m)]
        for p in ps:
            parent.setdefault(p, p)
        root = find(ps[0])
        for p in ps[1:]:
            other = find(p)
            if other != root:
                parent[other] = root
        firsts[m] = ps[0]
    roots = {m: find(p) for m, p in firsts.items()}
    return roots, len(set(roots.values()))


def fraction_sum(parts: list[tuple[int, int]]) -> Fraction:
    """``sum(n / d)`` over ``(n, d)`` pairs (``d > 0``) over one common denominator, reduced
    once: ``Fraction``'s ``+=`` is Python code that reduces at every step."""
    den = lcm(*{d for _, d in parts})
    return Fraction(sum(n * (den // d) for n, d in parts), den)


class _TooManyTerms(Exception):
    pass


class _Decomposition:
    """A class set split into independent components, each with its uncovered density.

    Kept per tree so that weaving two trees recomputes only the components that share primes.
    """

    __slots__ = ("comps", "prime_root", "root_primes", "unc", "full")

    def __init__(self):
        self.comps: dict[int, frozenset] = {}
        self.prime_root: dict[int, int] = {}
        self.root_primes: dict[int, frozenset] = {}
        self.unc: dict[int, Fraction] = {}
        self.full = False


class FastEngine(EdgeEngine):
    name = "fast"

    def __init__(
        self,
        sieve_limit: int = 1 << 21,
        sieve_work: int = 1 << 24,
        ie_max_terms: int = 1024,
        ie_max_classes: int = 10,
        residual_max_classes: int = 3,
        small_classes: int = 6,
        max_steps: int = 2_000_000,
        time_budget_s: float | None = None,
        memo_size: int = 1_000_000,
        one_modulus: bool = True,
    ):
        self.sieve_limit = sieve_limit
        self.sieve_work = sieve_work
        self.ie_max_terms = ie_max_terms
        self.ie_max_classes = ie_max_classes
        self.residual_max_classes = residual_max_classes
        self.small_classes = small_classes
        self.max_steps = max_steps
        self.time_budget_s = time_budget_s
        self.memo_size = memo_size
        self.one_modulus = one_modulus  # step 0 (off only to exercise the general paths)
        self._memo: dict[frozenset, Fraction] = {}
        self._memo_epoch = 0  # how many times _memo was cleared
        self._decomp: dict[frozenset, _Decomposition] = {}
        self._canon: dict[frozenset, frozenset] = {}
        self._merged: dict[tuple[frozenset, frozenset], Fraction] = {}
        self._restricted: dict[tuple[frozenset, int, int], Fraction | None] = {}
        self.stats: Counter = Counter()
        self._steps = 0
        self._deadline: Deadline | None = None
        self._top: frozenset = frozenset()

    # ---- public -------------------------------------------------------------------------
    def density(self, classes: frozenset[ResidueClass]) -> Fraction:
        if not classes:
            return Fraction(0)
        m = self.one_modulus and single_modulus(classes)
        if m:
            return Fraction(len(classes), m)
        if len(classes) <= self.small_classes:
            return self._small(classes)
        return 1 - self._top_uncovered(self._canonical(frozenset(classes)))

    def _small(self, classes) -> Fraction:
        """A handful of classes: inclusion-exclusion over compatible groups after dropping
        covered classes is cheaper than any set-up, so do just that."""
        return union_density(remove_covered(classes))

    def merged_density(self, x: frozenset[ResidueClass], y: frozenset[ResidueClass]) -> Fraction:
        """Density of ``x | y`` recomputing only the components of x and y that share a prime.

        Memoised per pair: the optimizers of one workload (and its node layouts) price the
        same pairs of trees again and again, and an exact density never changes."""
        key = (x, y)
        hit = self._merged.get(key)
        if hit is None:
            hit = self._merged.get((y, x))
        if hit is not None:
            self.stats["merged_hits"] += 1
            return hit
        out = self._merged_density(x, y)
        if len(self._merged) > self.memo_size:
            self._merged.clear()
        self._merged[key] = out
        return out

    def _merged_density(self, x: frozenset, y: frozenset) -> Fraction:
        m = self.one_modulus and single_modulus(x)
        if m and m == single_modulus(y):
            return Fraction(len(x | y), m)
        if len(x) + len(y) <= self.small_classes:
            return self._small(x | y)
        dx, dy = self._decomposition(x), self._decomposition(y)
        if dx.full or dy.full:
            return Fraction(1)
        touched_x: set[int] = set()
        touched_y: set[int] = set()
        frontier = dx.prime_root.keys() & dy.prime_root.keys()
        while frontier:
            new: set[int] = set()
            for p in frontier:
                rx = dx.prime_root.get(p)
                if rx is not None and rx not in touched_x:
                    touched_x.add(rx)
                    new |= dx.root_primes[rx]
                ry = dy.prime_root.get(p)
                if ry is not None and ry not in touched_y:
                    touched_y.add(ry)
                    new |= dy.root_primes[ry]
            frontier = {
                p
                for p in new
                if (p in dx.prime_root and dx.prime_root[p] not in touched_x)
                or (p in dy.prime_root and dy.prime_root[p] not in touched_y)
            }
        num, den = 1, 1
        for d, touched in ((dx, touched_x), (dy, touched_y)):
            for root, u in d.unc.items():
                if root not in touched:
                    num *= u.numerator
                    den *= u.denominator
        if touched_x:
            big_x = frozenset().union(*(dx.comps[r] for r in touched_x))
            big_y = frozenset().union(*(dy.comps[r] for r in touched_y))
            if len(big_y) > len(big_x):
                big_x, big_y, dx, touched_x = big_y, big_x, dy, touched_y
            if len(big_y) <= self.residual_max_classes < len(big_x):
                u_big = Fraction(1)
                for r in touched_x:
                    u_big *= dx.unc[r]
                u = self._with_few(big_x, u_big, sorted(big_y))
            else:
                u = self._top_uncovered(self._canonical(big_x | big_y))
            num *= u.numerator
            den *= u.denominator
        return 1 - Fraction(num, den)

    def _with_few(self, big: frozenset, u_big: Fraction, few: list) -> Fraction:
        """``U(big | few)`` from the known ``U(big)``: subtract, by inclusion-exclusion over the
        few classes, the part of each intersection class ``(M, R)`` that ``big`` leaves
        uncovered, i.e. ``U(big restricted to t = R mod M) / M``. The restricted problem lives on
        ``t'`` with ``t = R + M t'``, where class ``(m, r)`` becomes ``(m/g, (r-R)/g * (M/g)^-1)``
        (``g = gcd(m, M)``), or disappears when ``g`` does not divide ``r - R``.

        A restricted problem's density is kept per ``(big, M, R)``: the moves of one search
        weave many queries of one slide into the same tree (four in ten terms repeat)."""
        self._steps = 0
        self._deadline = Deadline(self.time_budget_s)
        self._top = big
        parts = [(u_big.numerator, u_big.denominator)]
        restricted = self._restricted
        terms: list[tuple[ResidueClass, int]] = []
        for c in few:
            new = [(c, 1)]
            for t, sign in terms:
                x = crt_merge(t, c)
                if x is not None:
                    new.append((x, -sign))
            terms.extend(new)
        for (mod, res), sign in terms:
            key = (big, mod, res)
            u = restricted.get(key, False)
            if u is False:
                u = self._restricted_uncovered(big, mod, res)
                if len(restricted) > self.memo_size:
                    restricted.clear()
                restricted[key] = u
            else:
                self.stats["restricted_hits"] += 1
                if u is not None:
                    self._tick()  # as when computed: the step budget does not depend on the cache
            if u is not None:
                parts.append((-sign * u.numerator, u.denominator * mod))
        return fraction_sum(parts)

    def _restricted_uncovered(self, big: frozenset, mod: int, res: int) -> Fraction | None:
        """``U(big restricted to t = res mod mod)`` (``_with_few``), None when one class of
        ``big`` covers all of it. One ``gcd`` and one inverse per modulus of ``big``, not per
        class; the residual classes in ``big``'s order (equal sets built in another order may
        iterate in another order, and the order of components decides where a budget stops)."""
        residual = []
        per_modulus: dict[int, tuple[int, int, int]] = {}
        for m, r in big:
            step = per_modulus.get(m)
            if step is None:
                g = gcd(m, mod)
                mm = m // g
                step = per_modulus[m] = (g, mm, pow(mod // g, -1, mm))
            g, mm, inv = step
            if (r - res) % g:
                continue
            if mm == 1:
                return None
            residual.append((mm, (r - res) // g * inv % mm))
        self._tick()
        return self._uncovered(self._canonical(frozenset(residual)))

    def _decomposition(self, classes: frozenset) -> _Decomposition:
        d = self._decomp.get(classes)
        if d is not None:
            return d
        d = _Decomposition()
        canon = self._canonical(frozenset(classes))
        if canon == FULL:
            d.full = True
        elif canon:
            self._steps = 0
            self._deadline = Deadline(self.time_budget_s)
            self._top = canon
            for comp in components(canon):
                primes = frozenset(p for m, _ in comp for p, _ in prime_factors(m))
                root = min(primes)
                d.comps[root] = comp
                d.root_primes[root] = primes
                for p in primes:
                    d.prime_root[p] = root
                d.unc[root] = self._uncovered_one(comp)
        if len(self._decomp) > self.memo_size // 4:
            self._decomp.clear()
        self._decomp[classes] = d
        return d

    # ---- internals ----------------------------------------------------------------------
    def _canonical(self, classes: frozenset) -> frozenset:
        hit = self._canon.get(classes)
        if hit is None:
            hit = canonical(classes)
            if len(self._canon) > self.memo_size:
                self._canon.clear()
            self._canon[classes] = hit
        return hit

    def _top_uncovered(self, cset: frozenset) -> Fraction:
        self._steps = 0
        self._deadline = Deadline(self.time_budget_s)
        self._top = cset
        return self._uncovered(cset)

    def _tick(self) -> None:
        self._steps += 1
        dl = self._deadline
        if self._steps > self.max_steps or (
            self._steps % 1024 == 0 and dl is not None and dl.expired()
        ):
            lo, hi = trivial_bounds(self._top)
            raise EdgeCountLimit(
                f"fast: exact count of {len(self._top)} classes exceeded its budget "
                f"({self.max_steps} steps or {self.time_budget_s}s); certified bounds "
                f"[{float(lo):.6g}, {float(hi):.6g}]",
                lo,
                hi,
            )

    def _uncovered(self, cset: frozenset) -> Fraction:
        if not cset:
            return Fraction(1)
        if cset == FULL:
            return Fraction(0)
        hit = self._memo.get(cset)
        if hit is not None:
            self.stats["memo_hits"] += 1
            return hit
        self._tick()
        comps = components(cset)
        if len(comps) > 1:
            self.stats["split"] += 1
            num = den = 1
            for comp in comps:
                u = self._uncovered_one(comp)
                num *= u.numerator
                if not num:
                    break
                den *= u.denominator
            out = Fraction(num, den)
        else:
            out = self._component(cset)
        if len(self._memo) > self.memo_size:
            self._memo.clear()
            self._memo_epoch += 1
        self._memo[cset] = out
        return out

    def _uncovered_one(self, comp: frozenset) -> Fraction:
        """``_uncovered`` of one of ``components()``'s groups: the same memo and step, without
        splitting it again (it is one component)."""
        hit = self._memo.get(comp)
        if hit is not None:
            self.stats["memo_hits"] += 1
            return hit
        self._tick()
        out = self._component(comp)
        if len(self._memo) > self.memo_size:
            self._memo.clear()
            self._memo_epoch += 1
        self._memo[comp] = out
        return out

    def _component(self, cset: frozenset) -> Fraction:
        moduli = {m for m, _ in cset}
        period = lcm(*moduli)
        if len(cset) == 1:
            return Fraction(period - 1, period)
        if period <= self.sieve_limit and sum(period // m for m, _ in cset) <= self.sieve_work:
            self.stats["sieve"] += 1
            return Fraction(uncovered_count(cset, period), period)
        if len(cset) <= self.ie_max_classes:
            try:
                out = self._inclusion_exclusion(cset, period)
                self.stats["ie"] += 1
                return out
            except _TooManyTerms:
                pass
        self.stats["condition"] += 1
        return self._condition(cset)

    def _inclusion_exclusion(self, cset: frozenset, period: int) -> Fraction:
        """Union indicator as a signed sum of CRT-merged classes; equal keys merge, zeros drop."""
        terms: dict[ResidueClass, int] = {}
        for c in sorted(cset):
            new: dict[ResidueClass, int] = defaultdict(int)
            new[c] += 1
            for t, coef in terms.items():
                x = crt_merge(t, c)
                if x is not None:
                    new[x] -= coef
            for k, v in new.items():
                v += terms.get(k, 0)
                if v:
                    terms[k] = v
                else:
                    terms.pop(k, None)
            if len(terms) > self.ie_max_terms:
                raise _TooManyTerms
            self._tick()
        covered = sum(coef * (period // m) for (m, _), coef in terms.items())
        return Fraction(period - covered, period)

    def _condition(self, cset: frozenset) -> Fraction:
        """Average, over residues u of p^k, of the uncovered density of the residual problem."""
        count: Counter = Counter()
        for m, _ in cset:
            for p, _ in prime_factors(m):
                count[p] += 1
        p = max(count, key=lambda q: (count[q], q))
        base: list[ResidueClass] = []
        groups: dict[tuple[int, int], list[ResidueClass]] = defaultdict(list)
        k = 0
        for m, r in cset:
            j, mm = 0, m
            while mm % p == 0:
                mm //= p
                j += 1
            if j == 0:
                base.append((m, r))
            else:
                k = max(k, j)
                groups[(j, r % p**j)].append((mm, r % mm))
        # prefixes[j]: residues mod p^j below which some deeper group key exists.
        prefixes: list[set[int]] = [set() for _ in range(k + 1)]
        for j, b in groups:
            for i in range(j):
                prefixes[i].add(b % p**i)
        powers = [p**i for i in range(k + 1)]
        keys_at: list[set[int]] = [set() for _ in range(k + 1)]  # group residues per level
        for j, b in groups:
            keys_at[j].add(b)
        weight: dict[int, int] = {}  # the leaves' weighted numerators, per denominator
        stack: list[tuple[int, int, tuple]] = [(0, 0, ())]
        # Leaves with the same active groups have the same residual: its density is taken once
        # per call. A repeat still counts its step, and its memo hit, as when it was looked up
        # (while the memo is not cleared in between, when the lookup would compute it again).
        seen: dict[tuple, tuple[Fraction, bool, int]] = {}
        while stack:
            j, a, active = stack.pop()
            if j == k or a not in prefixes[j]:
                self._tick()
                hit = seen.get(active)
                if hit is not None and hit[2] == self._memo_epoch:
                    u, memoised, _ = hit
                    if memoised:
                        self.stats["memo_hits"] += 1
                else:
                    residual = list(base)
                    for key in active:
                        residual.extend(groups[key])
                    canon = self._canonical(frozenset(residual))
                    u = self._uncovered(canon)
                    seen[active] = (u, bool(canon) and canon != FULL, self._memo_epoch)
                den = u.denominator
                weight[den] = weight.get(den, 0) + u.numerator * powers[k - j]
                continue
            pj = powers[j]
            deeper = j + 1
            present = keys_at[deeper]
            for t in range(p):
                a2 = a + t * pj
                stack.append((deeper, a2, active + ((deeper, a2),) if a2 in present else active))
        total = fraction_sum([(n, d) for d, n in weight.items()])
        pk = powers[k]
        return Fraction(total.numerator, total.denominator * pk)
