"""The fast engine's shortcuts against the paths they replace: same densities, same steps.

``OldPaths`` is the engine with the straightforward versions of the methods that now take
shortcuts (restricted problems built class by class, components split again, every leaf of a
conditioning looked up). Both engines answer the same random sequences of densities and merges,
with budgets small enough to run out and memos small enough to be cleared: every answer, every
``EdgeCountLimit`` (with its bounds), the steps counted and the statistics must agree, because
the step budget decides where ``EdgeCountLimit`` comes, and so the plans.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from fractions import Fraction
from math import gcd, lcm

from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.edges import EdgeCountLimit
from placement.edges.fast import (
    FULL,
    FastEngine,
    canonical,
    canonical_by_sets,
    components,
    fraction_sum,
)
from placement.queries import Query
from placement.slicing import (
    ResidueClass,
    brute_force_edges,
    divisors,
    prime_factors,
    tree_classes,
)


@st.composite
def trees(draw):
    """The classes of 1..6 queries (slides 1..40, ranges 1..120), composite slide <= 5,000."""
    qs, period = [], 1
    for i in range(draw(st.integers(1, 6))):
        s = draw(st.sampled_from([d for d in range(1, 41) if lcm(period, d) <= 5_000]))
        period = lcm(period, s)
        qs.append(Query(f"q{i}", draw(st.integers(1, 120)), s))
    return tree_classes(qs)


class Counting(FastEngine):
    """Counts every step it takes (``steps``), across calls."""

    def __init__(self, **options):
        super().__init__(**options)
        self.steps = 0

    def _tick(self) -> None:
        self.steps += 1
        super()._tick()


class OldPaths(Counting):
    """The reference: the paths as they were before the shortcuts."""

    def _uncovered_one(self, comp: frozenset) -> Fraction:
        return self._uncovered(comp)

    def _uncovered(self, cset: frozenset) -> Fraction:
        if not cset:
            return Fraction(1)
        if len(cset) == 1 and next(iter(cset))[0] == 1:
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
                u = self._uncovered(comp)
                num *= u.numerator
                if not num:
                    break
                den *= u.denominator
            out = Fraction(num, den)
        else:
            out = self._component(cset)
        if len(self._memo) > self.memo_size:
            self._memo.clear()
        self._memo[cset] = out
        return out

    def _restricted_uncovered(self, big: frozenset, mod: int, res: int) -> Fraction | None:
        residual = []
        for m, r in big:
            g = gcd(m, mod)
            if (r - res) % g:
                continue
            mm = m // g
            if mm == 1:
                return None
            residual.append((mm, (r - res) // g * pow(mod // g, -1, mm) % mm))
        self._tick()
        return self._uncovered(self._canonical(frozenset(residual)))

    def _condition(self, cset: frozenset) -> Fraction:
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
        prefixes: list[set[int]] = [set() for _ in range(k + 1)]
        for j, b in groups:
            for i in range(j):
                prefixes[i].add(b % p**i)
        parts: list[tuple[int, int]] = []
        pk = p**k
        stack: list[tuple[int, int, tuple]] = [(0, 0, ())]
        while stack:
            j, a, active = stack.pop()
            if j == k or a not in prefixes[j]:
                residual = list(base)
                for key in active:
                    residual.extend(groups[key])
                self._tick()
                u = self._uncovered(self._canonical(frozenset(residual)))
                parts.append((u.numerator * p ** (k - j), u.denominator))
                continue
            pj = p**j
            for t in range(p):
                a2 = a + t * pj
                key = (j + 1, a2)
                stack.append((j + 1, a2, active + (key,) if key in groups else active))
        total = fraction_sum(parts)
        return Fraction(total.numerator, total.denominator * pk)


def old_canonical(classes) -> frozenset[ResidueClass]:
    """``canonical`` as it was: the reference for the set and its iteration order."""
    masks: dict[int, int] = {}
    size = 0
    same = isinstance(classes, frozenset)
    for m, r in classes:
        if m == 1:
            return FULL
        if m > 4096:
            return canonical_by_sets(classes)
        if not 0 <= r < m:
            r %= m
            same = False
        masks[m] = masks.get(m, 0) | 1 << r
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
                    res &= ~(full * ((1 << m) - 1) // ((1 << d) - 1))
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
            for d in divisors(m)[:-1]:
                low = masks.get(d)
                if low:
                    drop = res & low * ((1 << m) - 1) // ((1 << d) - 1)
                    if drop:
                        res ^= drop
                        masks[m] = res
                        same = False
                        if not res:
                            break
    if same:
        return classes
    out = []
    for m, res in masks.items():
        while res:
            bit = res & -res
            out.append((m, bit.bit_length() - 1))
            res ^= bit
    return frozenset(out)


# moduli with many divisors (coarsening and subsuming at several levels); residues past a
# modulus are reduced first
MODULI = [2, 3, 4, 5, 6, 8, 9, 10, 12, 15, 18, 20, 24, 30, 36, 40, 45, 60]


@settings(max_examples=examples(300))
@given(
    st.lists(st.tuples(st.sampled_from(MODULI), st.integers(0, 59)), max_size=40),
    st.booleans(),
)
def test_canonical_gives_the_old_set_in_the_old_order(classes, as_frozenset):
    """The same classes in the same iteration order (it decides the order of components, so
    where a budget stops), and the given set itself when it is canonical already."""
    given_ = frozenset(classes) if as_frozenset else classes
    new, old = canonical(given_), old_canonical(given_)
    assert list(new) == list(old)
    assert (new is given_) == (old is given_)


def answer(engine, kind, args):
    """The density (``"d"``) or merged density (``"m"``), or the limit with its bounds."""
    try:
        return engine.density(*args) if kind == "d" else engine.merged_density(*args)
    except EdgeCountLimit as e:
        return ("limit", e.lower, e.upper)


# Conditioning does the work (no sieve, little inclusion-exclusion), or the default paths with
# restricted problems for merges with up to 3 classes on one side.
OPTIONS = [
    dict(sieve_limit=0, ie_max_terms=3, small_classes=0, one_modulus=False),
    dict(small_classes=0, one_modulus=False, residual_max_classes=4),
    dict(sieve_limit=64, ie_max_classes=0, small_classes=0, residual_max_classes=6),
]


@settings(max_examples=examples(150), deadline=None)
@given(
    st.lists(trees(), min_size=2, max_size=5),
    st.sampled_from(OPTIONS),
    st.sampled_from([None, 5, 40, 400]),
    st.sampled_from([1, 4, 1_000_000]),
    st.data(),
)
def test_shortcuts_give_the_old_answers_and_steps(sets, options, max_steps, memo_size, data):
    opts = dict(options, memo_size=memo_size)
    if max_steps is not None:
        opts["max_steps"] = max_steps
    old, new = OldPaths(**opts), Counting(**opts)
    pairs = data.draw(
        st.lists(st.tuples(*[st.integers(0, len(sets) - 1)] * 2), min_size=1, max_size=6)
    )
    calls = [("d", (s,)) for s in sets] + [("m", (sets[i], sets[j])) for i, j in pairs]
    for kind, args in calls:
        got = [answer(e, kind, args) for e in (old, new)]
        assert got[1] == got[0]
        assert new.steps == old.steps
        assert new.stats == old.stats
        union = args[0] | args[-1]
        period = lcm(*(m for m, _ in union))
        if max_steps is None and period <= 20_000:  # and the answer is the truth
            assert got[1] == Fraction(brute_force_edges(union, period), period)
