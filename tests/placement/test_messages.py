"""One-line messages (``placement.messages``): what every layer's errors are built from."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from placement.messages import LONG_VALUE, cut_long_values, one_line, short_repr


def test_one_line_folds_whitespace_and_names_a_silent_exception():
    assert one_line(ValueError("bad\n  value\there")) == "bad value here"
    assert one_line(ValueError()) == "ValueError"
    assert one_line("") == ""  # plain text has no type to fall back on
    assert one_line(KeyError("q1")) == "'q1'"


def test_one_line_and_short_repr_cut_at_the_limit():
    assert one_line("x " * 150, 200) == "x " * 98 + "x..."
    assert one_line("x" * 150, 200) == "x" * 150  # one value within LONG_VALUE: kept whole
    assert short_repr("y" * 100) == repr("y" * 100)[:60] + "...' (100 characters)"
    assert short_repr(list(range(50))) == repr(list(range(50)))[:60] + "... (50 items)"
    assert short_repr("a  b") == "'a  b'"  # a value's own spaces are kept
    assert short_repr("a\nb", 120) == "'a\\nb'"


def test_long_values_show_their_start_and_length():
    long = "X" * 5000
    assert one_line(f"unknown optimizer {long!r}; allowed: A, B") == (
        "unknown optimizer '" + "X" * 60 + "...' (5,000 characters); allowed: A, B"
    )
    spaced = "a b " * 100
    text = one_line(f"stream {spaced!r} unknown")
    assert text.startswith("stream 'a b a b") and text.endswith("...' (400 characters) unknown")
    assert one_line(f"path /{'p' * 150}/x") == f"path /{'p' * 150}/x"  # 154 <= LONG_VALUE


@given(st.lists(st.text(alphabet="ab '\"/x", min_size=0, max_size=400), max_size=6))
def test_cut_long_values_bounds_every_value(parts):
    """Oracle: no run of non-blank characters is longer than LONG_VALUE after the cut, and a
    text whose runs and quoted strings are all short comes back unchanged."""
    text = " ".join(parts)
    got = cut_long_values(text)
    assert all(len(w) <= LONG_VALUE for w in got.split())
    quoted = re.findall(r"'[^'\n]*'|\"[^\"\n]*\"", text)
    if all(len(w) <= LONG_VALUE for w in text.split()) and all(len(q) < LONG_VALUE for q in quoted):
        assert got == text


def test_apostrophes_of_prose_are_not_quotes():
    """A long error whose words carry apostrophes ("node's") is kept whole: only a quote that
    opens after a blank or a bracket and closes before one delimits a value."""
    text = (
        "cluster.ray.address '127.0.0.1:6379': cannot connect to Ray (InvalidAuthToken: the "
        "cluster refused the connection: no token; copy the head node's ~/.ray/auth_token to this "
        "machine, or set RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH to a file holding it), then start "
        "the run again with the same config and the same address); the driver's token was not sent"
    )
    assert one_line(text) == text
