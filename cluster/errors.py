"""The error a user sees when a stream or its outputs cannot go on, for every cluster package.

Why a module of its own: the directory stream (``cluster.feeds``) and the part writer that
refuses to delete files weaveplace did not write (``cluster.answers.parts``) raise the same
one-line error, and ``answers`` sits below ``feeds`` in the package order, so the error lives
below both.
"""


class StreamError(RuntimeError):
    """A directory stream that cannot start or could not go on, or an output directory that
    holds files weaveplace did not write (one line, no traceback for users)."""
