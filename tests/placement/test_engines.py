"""Edge engines (fast, f1, bitset) against the brute-force oracle and against each other.

Query sets are drawn with slides 1..40 and ranges 1..120, so most queries have two fragments
(r mod s != 0). The composite slide is kept <= LCM_CAP so that the pure-Python oracle stays cheap;
large composite slides are covered with an independent closed form (distinct prime slides).
"""

from __future__ import annotations

from fractions import Fraction
from math import gcd, lcm, prod

import pytest
from helpers import examples
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from placement.edges import EdgeCountLimit, get_engine
from placement.edges.fast import (
    FULL,
    MASK_MODULUS_LIMIT,
    canonical,
    canonical_by_sets,
    components,
    fraction_sum,
)
from placement.queries import Query
from placement.slicing import (
    brute_force_edges,
    divisors,
    prime_factors,
    query_classes,
    tree_classes,
)

LCM_CAP = 30_000

# Every engine configuration that must be exact. "fast-condition" switches off the sieve, the
# one-modulus shortcut and nearly all inclusion-exclusion so the prime-conditioning path does the
# work.
CONFIGS = {
    "fast": dict(name="fast"),
    "fast-condition": dict(
        name="fast", sieve_limit=0, ie_max_terms=3, small_classes=0, one_modulus=False
    ),
    "fast-no-ie": dict(
        name="fast", sieve_limit=0, ie_max_terms=0, small_classes=0, one_modulus=False
    ),
    "f1": dict(name="f1"),
    "bitset": dict(name="bitset"),
}


def make(config: str):
    opts = dict(CONFIGS[config])
    return get_engine(opts.pop("name"), **opts)


@st.composite
def query_sets(draw, min_size=1, max_size=8, cap=LCM_CAP, prefix="q"):
    """1..8 queries (slides 1..40, ranges 1..120) whose composite slide stays <= cap."""
    n = draw(st.integers(min_size, max_size))
    qs, period = [], 1
    for i in range(n):
        allowed = [d for d in range(1, 41) if lcm(period, d) <= cap]
        s = draw(st.sampled_from(allowed))
        period = lcm(period, s)
        qs.append(Query(f"{prefix}{i}", draw(st.integers(1, 120)), s))
    return qs


# ---- exact counts ------------------------------------------------------------------------------


@settings(max_examples=examples(300))
@given(query_sets())
def test_every_engine_count_matches_brute_force(qs):
    cls = tree_classes(qs)
    period = lcm(*(q.slide for q in qs))
    expected = brute_force_edges(cls)
    for config in CONFIGS:
        count = make(config).count(cls)
        assert (count.edges, count.composite_slide) == (expected, period), config
        assert count.rate == Fraction(expected, period)


def test_conditioning_path_is_exercised_and_exact():
    # Moduli 4, 6, 9, 10 share primes 2 and 3: one component, conditioning on a prime needed.
    qs = [Query("a", 7, 4), Query("b", 5, 6), Query("c", 4, 9), Query("d", 11, 10)]
    cls = tree_classes(qs)
    eng = make("fast-condition")
    count = eng.count(cls)
    assert (count.edges, count.composite_slide) == (144, 180)
    assert brute_force_edges(cls) == 144
    assert eng.stats["condition"] >= 1


@given(query_sets(min_size=2))
def test_conditioning_engine_really_conditions(qs):
    """With sieve and inclusion-exclusion disabled, any component of >= 2 classes conditions."""
    cls = tree_classes(qs)
    canon = canonical(cls)
    assume(canon != FULL and any(len(c) >= 2 for c in components(canon)))
    eng = make("fast-no-ie")
    assert eng.count(cls).edges == brute_force_edges(cls)
    assert eng.stats["condition"] >= 1
    assert eng.stats["sieve"] == 0


@settings(max_examples=examples(80))
@given(query_sets())
def test_canonical_form_preserves_the_edge_set(qs):
    cls = tree_classes(qs)
    canon = canonical(cls)
    period = lcm(*(q.slide for q in qs))
    if canon == FULL:
        assert brute_force_edges(cls) == period
    else:
        assert brute_force_edges(canon, period) == brute_force_edges(cls)
        assert len(canon) <= len(cls)


@st.composite
def dense_class_sets(draw):
    """Up to 4 moduli of 2..60 (lcm <= 2,000: the oracle walks a period) with many residues each (some out of range, some repeated), so
    that coarsening full sets of lifts, subsuming and collapsing to FULL all happen."""
    out, period, moduli = [], 1, set()
    for _ in range(draw(st.integers(1, 4))):
        allowed = [d for d in range(2, 61) if d not in moduli and lcm(period, d) <= 2_000]
        if not allowed:
            break
        m = draw(st.sampled_from(allowed))
        moduli.add(m)
        period = lcm(period, m)
        k = draw(st.integers(1, m))
        out += [(m, r) for r in draw(st.lists(st.integers(-m, 2 * m), min_size=k, max_size=k))]
    return out


@settings(max_examples=examples(300))
@given(dense_class_sets(), st.booleans())
def test_canonical_bitmasks_match_the_set_version(cls, as_frozenset):
    """The bitmask canonical form is the set version's, class for class (not only the same
    positions): the engine's memo keys, and so its step counts, do not change."""
    given_ = frozenset(cls) if as_frozenset else cls
    out = canonical(given_)
    assert out == canonical_by_sets(cls)
    assert canonical(out) == out
    period = lcm(*(m for m, _ in cls))
    covered = brute_force_edges([(m, r % m) for m, r in cls], period)
    if out == FULL:  # (a set covering everything need not be reduced to FULL: "cheaply")
        assert covered == period
    else:
        assert brute_force_edges(out, period) == covered


WIDE = (4104, 4800, 6000, 7560, 9240, 10000, 12600, 16380)  # moduli of a 10,000-slide menu


@settings(max_examples=examples(100))
@given(st.sampled_from(WIDE), st.data())
def test_canonical_bitmasks_match_the_set_version_for_wide_slides(m, data):
    """Moduli of a 10,000-slide menu take the bitmask path too (it was the set version's
    above 4,096): the same classes, and full sets of lifts coarsened, as the set version."""
    assert m <= MASK_MODULUS_LIMIT
    cls = []
    for _ in range(data.draw(st.integers(1, 5))):
        d = data.draw(st.sampled_from(divisors(m)[1:]))
        if data.draw(st.booleans()):  # every lift to d of one residue mod d / p
            p = data.draw(st.sampled_from([q for q, _ in prime_factors(d)]))
            a = data.draw(st.integers(0, d // p - 1))
            cls += [(d, a + k * (d // p)) for k in range(p)]
        else:
            cls += [(d, r) for r in data.draw(st.lists(st.integers(-d, 2 * d), max_size=4))]
    assume(cls)
    out = canonical(cls)
    assert out == canonical_by_sets(cls)
    covered = brute_force_edges([(mm, r % mm) for mm, r in cls], m)
    assert out == FULL or brute_force_edges(out, m) == covered


def test_canonical_above_the_mask_limit_uses_the_set_version():
    big = MASK_MODULUS_LIMIT * 2
    cls = [(big, r) for r in range(0, big, 2)] + [(big // 2, 1), (3, 0)]
    assert canonical(cls) == canonical_by_sets(cls) == frozenset({(2, 0), (big // 2, 1), (3, 0)})


PRIMES = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73]


@settings(max_examples=examples(40))
@given(st.lists(st.sampled_from(PRIMES), min_size=1, max_size=12, unique=True), st.data())
def test_large_composite_slides_distinct_primes(primes, data):
    """Pairwise coprime slides are independent (CRT): uncovered density = prod(1 - k_p / p).

    Composite slides reach ~10^17 here: far beyond a bitmap, exact for fast (and for f1, which
    is 2^n in the number of classes, while n <= 14)."""
    qs = [Query(f"p{p}", data.draw(st.integers(1, 3 * p)), p) for p in primes]
    expected = 1 - prod(
        (Fraction(p - len(query_classes(q)), p) for p, q in zip(primes, qs)), start=Fraction(1)
    )
    period = prod(primes)
    cls = tree_classes(qs)
    configs = ("fast", "fast-condition", "f1") if len(cls) <= 14 else ("fast", "fast-condition")
    for config in configs:
        count = make(config).count(cls)
        assert count.composite_slide == period
        assert count.rate == expected, config
    if period > 1 << 20:
        with pytest.raises(EdgeCountLimit) as info:
            get_engine("bitset", max_bytes=1 << 20).density(cls)
        assert info.value.lower <= expected <= info.value.upper


# ---- merged density ----------------------------------------------------------------------------


@settings(max_examples=examples(150))
@given(st.data())
def test_merged_density_equals_density_of_union(data):
    x = data.draw(query_sets(max_size=4, prefix="x"))
    cap_y = LCM_CAP // lcm(*(q.slide for q in x))
    y = data.draw(query_sets(max_size=4, cap=max(cap_y, 1), prefix="y"))
    cx, cy = tree_classes(x), tree_classes(y)
    period = lcm(*(q.slide for q in x + y))
    truth = Fraction(brute_force_edges(cx | cy), period)
    for config in CONFIGS:
        cold = make(config)
        assert cold.merged_density(cx, cy) == truth, config
        warm = make(config)  # parts already priced and cached, as in WeaveShare
        warm.density(cx)
        warm.density(cy)
        assert warm.merged_density(cx, cy) == truth, config
        memo = config.startswith("fast")  # the fast engine memoises pairs, either order
        hits = warm.stats["merged_hits"] if memo else 0
        assert warm.merged_density(cy, cx) == truth, config
        assert not memo or warm.stats["merged_hits"] == hits + 1, config
        assert make(config).merged_density(cy, cx) == truth, config
        assert warm.density(cx | cy) == truth, config


@given(st.data())
def test_merged_density_big_tree_with_one_query(data):
    """WeaveShare's common case: a multi-query tree (many classes) weaves with one query
    (<= 2 classes); the fast engine may then update the big tree's known density instead of
    recounting the union."""
    x = data.draw(query_sets(min_size=3, max_size=8, cap=LCM_CAP // 40, prefix="x"))
    y = data.draw(query_sets(min_size=1, max_size=1, prefix="y"))
    cx, cy = tree_classes(x), tree_classes(y)
    truth = Fraction(brute_force_edges(cx | cy), lcm(*(q.slide for q in x + y)))
    for config in ("fast", "fast-condition", "fast-no-ie"):
        eng = make(config)
        eng.density(cx)
        eng.density(cy)
        assert eng.merged_density(cx, cy) == truth, config
        assert eng.merged_density(cy, cx) == truth, config
        assert make(config).merged_density(cx, cy) == truth, config


@settings(max_examples=examples(30))
@given(st.data())
def test_one_engine_weaves_many_queries_into_one_tree(data):
    """A search's moves: many one-query trees (several of one slide) woven into the same big
    tree by one engine, so its restricted problems ``(big, M, R)`` are met again from its cache:
    each merged density still equals the brute-force one and a fresh engine's."""
    x = data.draw(query_sets(min_size=3, max_size=8, cap=LCM_CAP // 40, prefix="x"))
    cx = tree_classes(x)
    slides = data.draw(st.lists(st.integers(1, 40), min_size=1, max_size=3))
    ys = [
        tree_classes([Query(f"y{i}", data.draw(st.integers(1, 120)), s)])
        for i, s in enumerate(slides * 3)
    ]
    for config in ("fast", "fast-condition"):
        eng = make(config)
        eng.density(cx)
        for cy in ys:
            period = lcm(*(m for m, _ in cx | cy))
            truth = Fraction(brute_force_edges(cx | cy, period), period)
            assert eng.merged_density(cx, cy) == truth, config
            assert make(config).merged_density(cx, cy) == truth, config


@settings(max_examples=examples(200))
@given(dense_class_sets())
def test_components_are_the_classes_linked_by_shared_primes(cls):
    """Against a walk of the graph "moduli share a prime" (gcd > 1) over the classes."""
    cls = frozenset((m, r % m) for m, r in cls)
    expected, left = [], set(cls)
    while left:
        comp, todo = set(), [left.pop()]
        while todo:
            c = todo.pop()
            comp.add(c)
            near = {d for d in left if gcd(c[0], d[0]) > 1}
            left -= near
            todo += near
        expected.append(frozenset(comp))
    assert sorted(components(cls), key=sorted) == sorted(expected, key=sorted)


def test_restricted_problems_are_reused_across_moves():
    # Components mod 3, 5, 7 and 11; queries of slide 35 touch the 5 and 7 ones (four classes),
    # and every such query has the class (35, 0): its restricted problem is computed once.
    cx = tree_classes([Query("a", 7, 5), Query("b", 10, 7), Query("c", 4, 3), Query("d", 13, 11)])
    eng = make("fast")
    eng.density(cx)
    for i, r in enumerate([36, 37, 38]):
        cy = tree_classes([Query(f"y{i}", r, 35)])
        truth = Fraction(brute_force_edges(cx | cy, 1155), 1155)
        assert eng.merged_density(cx, cy) == truth
    assert eng.stats["restricted_hits"] == 2


@given(st.lists(st.tuples(st.integers(-(10**6), 10**6), st.integers(1, 10**4)), min_size=1))
def test_fraction_sum_is_the_sum_of_the_fractions(parts):
    assert fraction_sum(parts) == sum((Fraction(n, d) for n, d in parts), Fraction(0))


def test_empty_class_sets():
    for config in CONFIGS:
        eng = make(config)
        assert eng.density(frozenset()) == 0
        assert eng.count(frozenset()).edges == 0
    assert make("fast").density(frozenset({(1, 0)})) == 1


# ---- honest limits -----------------------------------------------------------------------------


def exact_density(qs):
    cls = tree_classes(qs)
    return Fraction(brute_force_edges(cls), lcm(*(q.slide for q in qs)))


@settings(max_examples=examples(60))
@given(query_sets(min_size=2))
def test_fast_budget_exhausted_raises_with_certified_bounds(qs):
    cls = tree_classes(qs)
    canon = canonical(cls)
    assume(canon != FULL and len(canon) >= 2)  # a set that needs real work
    eng = get_engine(
        "fast", sieve_limit=0, ie_max_terms=1, max_steps=1, small_classes=0, one_modulus=False
    )
    with pytest.raises(EdgeCountLimit) as info:
        eng.density(cls)
    truth = exact_density(qs)
    assert info.value.lower <= truth <= info.value.upper
    assert "budget" in str(info.value)
    # The failure is not cached as an answer: a generous engine still counts exactly.
    assert get_engine("fast").density(cls) == truth


@settings(max_examples=examples(60))
@given(query_sets())
def test_bitset_memory_cap_raises_with_certified_bounds(qs):
    period = lcm(*(q.slide for q in qs))
    assume(period > 10)
    cls = tree_classes(qs)
    eng = get_engine("bitset", max_bytes=10)
    with pytest.raises(EdgeCountLimit) as info:
        eng.density(cls)
    truth = exact_density(qs)
    assert info.value.lower <= truth <= info.value.upper
    assert str(period) in str(info.value)


def test_bitset_merge_over_cap_raises():
    eng = get_engine("bitset", max_bytes=40)
    x, y = tree_classes([Query("a", 7, 5)]), tree_classes([Query("b", 10, 9)])
    assert eng.density(x) == Fraction(2, 5) and eng.density(y) == Fraction(2, 9)
    with pytest.raises(EdgeCountLimit) as info:
        eng.merged_density(x, y)  # composite slide 45 > 40
    truth = Fraction(brute_force_edges(x | y), 45)
    assert info.value.lower <= truth <= info.value.upper


def test_f1_time_budget_raises_with_bounds():
    qs = [Query("a", 7, 4), Query("b", 5, 6), Query("c", 4, 9), Query("d", 11, 10)]
    eng = get_engine("f1", time_budget_s=-1.0, check_every=1)  # deadline already passed
    with pytest.raises(EdgeCountLimit) as info:
        eng.density(tree_classes(qs))
    assert info.value.lower <= exact_density(qs) <= info.value.upper


def test_unknown_engine_name():
    with pytest.raises(ValueError, match="unknown edge engine 'slow'"):
        get_engine("slow")


@settings(max_examples=examples(150))
@given(m=st.integers(1, 60), data=st.data())
def test_single_modulus_shortcut_matches_brute_force(m, data):
    """One modulus: disjoint classes, density #classes/m (also for merges of two such sets);
    unnormalised residues or mixed moduli are not taken by the shortcut."""
    from placement.edges.fast import single_modulus

    rs = st.frozensets(st.integers(0, m - 1), min_size=1, max_size=m)
    x = frozenset((m, r) for r in data.draw(rs))
    y = frozenset((m, r) for r in data.draw(rs))
    assert single_modulus(x) == m
    eng = get_engine("fast")
    assert eng.density(x) == Fraction(brute_force_edges(x), m) == Fraction(len(x), m)
    assert eng.merged_density(x, y) == Fraction(brute_force_edges(x | y), m)
    assert single_modulus(frozenset({(m, m)})) == 0
    assert single_modulus(x | {(m + 1, 0)}) == 0
    assert eng.density(frozenset({(4, 1), (4, 5)})) == Fraction(1, 4)


@st.composite
def small_class_lists(draw, max_modulus=60):
    """1..6 distinct classes (m, r), 0 <= r < m, sorted as ``remove_covered`` leaves them."""
    n = draw(st.integers(1, 6))
    ms = draw(st.lists(st.integers(1, max_modulus), min_size=n, max_size=n))
    return sorted({(m, draw(st.integers(0, m - 1))) for m in ms})


@settings(max_examples=examples(300))
@given(small_class_lists())
def test_compiled_small_path_equals_the_python_sums_and_the_brute_force(cls):
    """``edges.small.union_density`` (the fast engine's small path, in numba) gives the Python
    inclusion-exclusion's Fraction, and the brute force's count when its period is small."""
    from placement.edges.f1 import group_inclusion_exclusion
    from placement.edges.small import union_density

    got = union_density(cls)
    assert got == group_inclusion_exclusion(cls)
    period = lcm(*(m for m, _ in cls))
    if period <= 50_000:
        assert got == Fraction(brute_force_edges(frozenset(cls)), period)


def test_compiled_small_path_falls_back_beyond_int64_safe_numbers():
    """Moduli or periods too large for the int64 sums go the Python way, still exact."""
    from placement.edges import small
    from placement.edges.f1 import group_inclusion_exclusion

    big = [(small.MODULUS_LIMIT + 1, 5), (small.MODULUS_LIMIT + 3, 7)]
    huge = [(p, 1) for p in (1_000_003, 1_000_033, 1_000_037)]  # period > PERIOD_LIMIT
    for cls in (big, huge, [(6, 7)]):  # (6, 7): a residue not below its modulus
        assert small.union_density(cls) == group_inclusion_exclusion(cls)
    assert small.union_density(big) == 1 - Fraction(
        small.MODULUS_LIMIT, small.MODULUS_LIMIT + 1
    ) * Fraction(small.MODULUS_LIMIT + 2, small.MODULUS_LIMIT + 3)
