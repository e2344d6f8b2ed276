"""One-line messages (``placement.messages``): what every layer's errors are built from."""

from __future__ import annotations

from placement.messages import one_line, short_repr


def test_one_line_folds_whitespace_and_names_a_silent_exception():
    assert one_line(ValueError("bad\n  value\there")) == "bad value here"
    assert one_line(ValueError()) == "ValueError"
    assert one_line("") == ""  # plain text has no type to fall back on
    assert one_line(KeyError("q1")) == "'q1'"


def test_one_line_and_short_repr_cut_at_the_limit():
    assert one_line("x" * 300, 200) == "x" * 197 + "..."
    assert one_line("x" * 200, 200) == "x" * 200
    assert short_repr("y" * 100) == repr("y" * 100)[:57] + "..."
    assert short_repr("a  b") == "'a  b'"  # a value's own spaces are kept
    assert short_repr("a\nb", 120) == "'a\\nb'"
