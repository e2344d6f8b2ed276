"""Why a command was refused, by kind: the request is wrong, names nothing the deployment has,
comes at the wrong time, hit a bug caught before anything changed, or found the data path
busy or a node silent for longer than a command may wait.

Why its own module: the commands (``cluster.service.service``) say what went wrong without
knowing how it is reported; the control API (``cluster.service.control.HTTP_STATUS``) turns
each kind into an HTTP code.
"""

from __future__ import annotations


class CommandRefused(Exception):
    """A refused command: a one-line ``message``; nothing was changed."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class InvalidRequest(CommandRefused):
    """The request itself is malformed or asks for something impossible."""


class NotFound(CommandRefused):
    """The request names a query or node the deployment does not have."""


class Conflict(CommandRefused):
    """The request is fine but not now: the deployment's state refuses it."""


class InternalError(CommandRefused):
    """A bug caught before anything was changed."""


class Unavailable(CommandRefused):
    """The data path did not come free within the command's wait, or a node is silent: try
    again (``cluster.service.gate``)."""
