"""The configs shipped with weaveplace (the quickstart's among them), wherever it is installed.

Why a module: in a checkout they are the top-level ``configs/``; an installed weaveplace
(``pip install .``, not editable) has no checkout to find them in, so they are package data of
``sim`` (``sim/configs`` is a link to ``configs/``, and ``pyproject.toml`` ships its YAML files),
read through ``importlib.resources`` in both cases: one set of files, one way to read them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from importlib.resources import as_file, files
from pathlib import Path


class MissingConfig(FileNotFoundError):
    """A shipped config is not where the installation should have put it."""


@contextmanager
def bundled_config(name: str) -> Iterator[Path]:
    """The shipped config ``name`` (e.g. ``quickstart.yaml``) as a file path while the block
    runs (a temporary copy if the installation is zipped); ``MissingConfig`` naming where it
    was looked for when it is not there."""
    res = files("sim") / "configs" / name
    if not res.is_file():
        raise MissingConfig(
            f"the shipped config {name} is missing ({res}); reinstall weaveplace "
            "(pip install .) or run from a checkout"
        )
    with as_file(res) as path:
        yield Path(path)
