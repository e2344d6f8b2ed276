"""Messages for people kept to one line: an error's text with its line breaks folded, a value
quoted and cut short, showing its start and its length.

Why here, in the lowest layer: every layer reports mistakes as one line (a config key, a
control command's refusal, a file a stream rejects), and ``cluster`` may not import ``sim``;
placement is imported by all of them and imports nothing of theirs.

Why values are cut twice: where a message quotes a user's value it uses ``short_repr``; and
``one_line``, which every printer of an error line goes through (the CLI, the control API's
refusals), cuts any value still longer than ``LONG_VALUE`` (a quoted string or a run of
non-blank characters), so a 5,000-character name never makes a 5,000-character line whatever
path raised it.
"""

from __future__ import annotations

import re
from typing import Any

#: a value longer than this (characters) in a one-line message is cut to its start and length
LONG_VALUE = 160
#: characters of a cut value shown
KEEP = 60

#: a quoted value opens with a quote not preceded by a letter or digit and closes with one not
#: followed by one, so the apostrophes of prose ("the node's token") never pair up as quotes
_LONG = re.compile(
    rf"(?<!\w)'[^'\n]{{{LONG_VALUE - 1},}}'(?!\w)"
    rf"|(?<!\w)\"[^\"\n]{{{LONG_VALUE - 1},}}\"(?!\w)"
    rf"|\S{{{LONG_VALUE + 1},}}"
)


def _cut(text: str, limit: int | None) -> str:
    return text if limit is None or len(text) <= limit else text[: limit - 3] + "..."


def cut_value(text: str, keep: int = KEEP) -> str:
    """``text`` as its first ``keep`` characters and its length, when it is longer."""
    if len(text) <= keep:
        return text
    return f"{text[:keep]}... ({len(text):,} characters)"


def cut_long_values(text: str) -> str:
    """Every quoted string or run of non-blank characters above ``LONG_VALUE`` characters
    in ``text`` cut to its start and length (``cut_value``); the rest as it is."""
    return _LONG.sub(_cut_match, text)


def _cut_match(m: re.Match) -> str:
    text = m.group()
    if text[0] in "'\"" and text[-1] == text[0]:  # a quoted value: quoted still, its own length
        return f"{text[0]}{text[1 : KEEP + 1]}...{text[0]} ({len(text) - 2:,} characters)"
    return cut_value(text)


def one_line(message: Any, limit: int | None = None) -> str:
    """``message`` (an exception, or any text) on one line: runs of whitespace, line breaks
    included, become one space; an exception without a message gives its type's name; values
    longer than ``LONG_VALUE`` are cut to their start and length; past ``limit`` characters
    the text is cut to end with ``...``."""
    text = " ".join(str(message).split())
    if not text and isinstance(message, BaseException):
        text = type(message).__name__
    return _cut(cut_long_values(text), limit)


def short_repr(value: Any, limit: int = 60) -> str:
    """``repr(value)``, or when longer than ``limit`` its first ``limit`` characters and the
    value's length: a user's value quoted in a one-line message (``repr`` already escapes line
    breaks, and keeps the value's spaces as they were)."""
    r = repr(value)
    if len(r) <= limit:
        return r
    if isinstance(value, (str, bytes)):  # quoted still: the start, ..., the closing quote
        return f"{r[:limit]}...{r[-1]} ({len(value):,} characters)"
    elif isinstance(value, (list, tuple, dict, set, frozenset)):
        size = f"{len(value):,} item{'' if len(value) == 1 else 's'}"
    else:
        size = f"{len(r):,} characters"
    return f"{r[:limit]}... ({size})"
