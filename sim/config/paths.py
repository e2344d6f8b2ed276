"""Paths a config names (``data.path``, ``data.directory.path``, ``run.output_dir``) or a command
takes (``--out``, ``--resume RUN_DIR``), checked against what the operating system accepts
before anything touches them.

Why a module: a path the OS refuses for its length (``ENAMETOOLONG``) or its characters (a NUL
byte, a character the file system's encoding cannot write) makes ``os.stat`` and friends raise
instead of answering "not found", far from the key that named it; checked here first, the
mistake is one line naming the key.  An output directory that does not exist yet is checked
too: the kernel only says its name is too long once its parent exists.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from placement.messages import short_repr
from sim.config.base import ConfigError

#: Linux's limits, used when ``pathconf`` cannot tell (no existing ancestor, another OS)
NAME_MAX, PATH_MAX = 255, 4096


def _limit(path: str, name: str, default: int) -> int:
    """``os.pathconf`` of the nearest existing directory above ``path`` (the file system the
    path would land on), or ``default``."""
    p = os.path.dirname(os.path.abspath(path))
    while True:
        try:
            if os.path.isdir(p):
                return int(os.pathconf(p, name))
        except (OSError, ValueError):
            pass
        parent = os.path.dirname(p)
        if parent == p:
            return default
        p = parent


def path_problem(path: str) -> str | None:
    """Why the OS would refuse ``path`` as a name (``None`` when it would not): a NUL byte,
    characters the file system encoding cannot write, a name (one component) or the whole
    absolute path longer than the file system allows."""
    if "\0" in path:
        return "contains a NUL byte, which no path may hold"
    try:
        raw = os.fsencode(path)
    except UnicodeEncodeError as e:
        return (
            f"character {short_repr(e.object[e.start : e.end])} cannot be written in the file "
            f"system's encoding ({sys.getfilesystemencoding()})"
        )
    name_max = _limit(path, "PC_NAME_MAX", NAME_MAX)
    for part in Path(path).parts:
        n = len(os.fsencode(part))
        if n > name_max:
            which = "" if part == path else f" ({short_repr(part, 30)})"
            return (
                f"{'is' if part == path else 'has'} a name of {n:,} bytes{which}; the file "
                f"system allows at most {name_max} bytes per name"
            )
    full = len(os.fsencode(os.path.abspath(path))) if not os.path.isabs(path) else len(raw)
    path_max = _limit(path, "PC_PATH_MAX", PATH_MAX)
    if full >= path_max:
        return (
            f"is {full:,} bytes long as an absolute path; the system allows at most {path_max - 1}"
        )
    return None


def check_path(key: str, path: str | Path) -> None:
    """A one-line ``ConfigError`` naming ``key`` when the OS would refuse ``path``."""
    why = path_problem(str(path))
    if why is not None:
        raise ConfigError(f"{key}: {short_repr(str(path))} {why}")


def user_path(key: str, path: str) -> Path:
    """``path`` with a leading ``~`` or ``~user`` expanded, after ``check_path``; an unknown
    user is a one-line ``ConfigError`` naming ``key``."""
    check_path(key, path)
    try:
        return Path(path).expanduser()
    except RuntimeError:  # ~nosuchuser
        raise ConfigError(
            f"{key}: {short_repr(path)}: cannot expand {path.split('/')[0]!r} (no such user)"
        ) from None


def os_error(key: str, path: str | Path, exc: OSError, doing: str = "cannot access") -> ConfigError:
    """``exc`` (raised on ``path``) as a one-line ``ConfigError`` naming ``key``."""
    why = exc.strerror or type(exc).__name__
    return ConfigError(f"{key}: {doing} {short_repr(str(path))}: {why}")


def make_output_dir(key: str, path: str | Path) -> Path:
    """Create the output directory ``path`` (and its parents), or a one-line ``ConfigError``
    naming ``key`` (a file in the way, no permission, a name too long)."""
    check_path(key, path)
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ConfigError(f"{key}: {short_repr(str(path))} is a file, not a directory") from None
    except OSError as e:
        raise os_error(key, path, e, "cannot create") from None
    return p
