"""The fast engine's compiled sieve against a position-by-position count."""

from __future__ import annotations

from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.edges.sieve import uncovered_count
from placement.slicing import brute_force_edges, divisors


@st.composite
def classes_of_a_period(draw):
    """A period of 1..6,000 and classes of its divisors: small moduli repeat a pattern over many
    64-bit words, moduli of a word or more are marked one position at a time, and periods that
    are not a multiple of 64 end inside a word."""
    period = draw(st.integers(1, 6_000))
    moduli = draw(st.lists(st.sampled_from(divisors(period)), min_size=1, max_size=6))
    return period, {(m, draw(st.integers(0, m - 1))) for m in moduli}


@settings(max_examples=examples(300))
@given(classes_of_a_period())
def test_sieve_counts_the_uncovered_positions(case):
    period, classes = case
    assert uncovered_count(classes, period) == period - brute_force_edges(classes, period)


def test_sieve_both_marking_routes_and_the_last_word():
    # 2 repeats a 2-word pattern over 1,563 words; 50,003 and 100,006 mark one position at a
    # time; 100,006 positions end 38 bits into the last word.
    period = 2 * 50_003
    classes = {(2, 1), (50_003, 4), (50_003, 7), (period, 10)}
    # the odd positions, and the even ones of the other classes: 4, 50,010 and 10
    covered = 50_003 + len({4, 50_007, 50_010, 10, 7} - set(range(1, period, 2)))
    assert uncovered_count(classes, period) == period - covered


def test_sieve_groups_short_patterns_and_passes_long_ones_alone():
    # 42,688 positions = 667 words, groups of at most 333 (half the map): 2 and 23 share a
    # 46-word pattern; 29, 46 and 232 each start a group of their own (the joint pattern with
    # the group before would exceed 333 words); 667 and 42,688 mark one position at a time.
    period = 64 * 23 * 29
    classes = {(23, 5), (46, 1), (29, 3), (2, 0), (232, 7), (667, 100), (period, 9)}
    assert uncovered_count(classes, period) == period - brute_force_edges(classes, period)
    assert uncovered_count({(2, 1), (23, 0)}, period) == period // 2 - period // 46
