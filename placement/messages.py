"""Messages for people kept to one line: an error's text with its line breaks folded, a value
quoted and cut short.

Why here, in the lowest layer: every layer reports mistakes as one line (a config key, a
control command's refusal, a file a stream rejects), and ``cluster`` may not import ``sim``;
placement is imported by all of them and imports nothing of theirs.
"""

from __future__ import annotations

from typing import Any


def _cut(text: str, limit: int | None) -> str:
    return text if limit is None or len(text) <= limit else text[: limit - 3] + "..."


def one_line(message: Any, limit: int | None = None) -> str:
    """``message`` (an exception, or any text) on one line: runs of whitespace, line breaks
    included, become one space; an exception without a message gives its type's name; past
    ``limit`` characters the text is cut to end with ``...``."""
    text = " ".join(str(message).split())
    if not text and isinstance(message, BaseException):
        text = type(message).__name__
    return _cut(text, limit)


def short_repr(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters: a user's value quoted in a one-line message
    (``repr`` already escapes line breaks, and keeps the value's spaces as they were)."""
    return _cut(repr(value), limit)
