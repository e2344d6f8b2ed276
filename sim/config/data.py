"""The ``data`` section: a DEBS file, a watched directory of arriving files, or a synthetic feed.

Why a module: input paths are resolved here, relative to the config file (inputs travel with
the config), and the one-input rule is checked in one place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from placement.messages import short_repr
from sim.config.base import ConfigError, PosInt, Strict
from sim.config.paths import check_path, os_error, user_path


class DirectorySpec(Strict):
    """A directory watched by Spark Structured Streaming: DEBS files (text or Parquet) are fed
    as they arrive, answers written as they come out (``cluster.feeds.directory``).  At least
    Ctrl-C stops it; ``idle_timeout_s``, ``max_files`` and ``timeout_s`` stop it by themselves."""

    path: Annotated[str, Field(min_length=1)]
    pattern: Annotated[str, Field(min_length=1)] = "*"
    files_per_batch: Annotated[int, Field(ge=1, le=100_000)] = 8
    poll_s: Annotated[float, Field(gt=0, le=3600)] = 1.0
    idle_timeout_s: Annotated[float, Field(gt=0)] | None = None
    max_files: PosInt | None = None
    timeout_s: Annotated[float, Field(gt=0)] | None = None

    @field_validator("pattern", mode="after")
    @classmethod
    def _file_glob(cls, v: str) -> str:
        if "/" in v:
            raise ConfigError(
                f"data.directory.pattern: {short_repr(v)} is a path; expected a glob over "
                "file names such as '*.tsv' (the directory is data.directory.path)"
            )
        return v

    @model_validator(mode="after")
    def _idle_after_poll(self) -> DirectorySpec:
        if self.idle_timeout_s is not None and self.idle_timeout_s <= self.poll_s:
            raise ConfigError(
                f"data.directory.idle_timeout_s: {self.idle_timeout_s:g} must "
                f"exceed poll_s ({self.poll_s:g}): Spark looks for new files once "
                "per poll"
            )
        return self


class Data(Strict):
    """Input tuples for live runs: a file, a directory of arriving files, or a synthetic
    DEBS-style feed (``cluster.debs.format``)."""

    path: Annotated[str, Field(min_length=1)] | None = None
    directory: DirectorySpec | None = None
    # a trailing 57th field on a DEBS text line (e.g. a machine id): drop it or reject the line
    extra_columns: Literal["reject", "ignore"] = "reject"
    # the order a file (data.path) is read in: as recorded (its arrival order, on every route,
    # so run.allowed_lateness means the same everywhere) or sorted by time first (feed: driver)
    order: Literal["file", "time"] = "file"
    duration_s: Annotated[float, Field(gt=0)] = 60.0
    rate_hz: Annotated[float, Field(gt=0)] = 100.0
    seed: Annotated[int, Field(ge=0)] = 0

    @model_validator(mode="after")
    def _resolve(self, info: ValidationInfo) -> Data:
        if self.path is None and "order" in self.model_fields_set:
            raise ConfigError(
                "data.order: applies to a file (data.path); "
                + (
                    "a watched directory's files are read in arrival order, each file's "
                    "rows in time order"
                    if self.directory is not None
                    else "generated data is in time order"
                )
            )
        if self.path is None and self.directory is None:
            if "extra_columns" in self.model_fields_set:
                raise ConfigError(
                    "data.extra_columns: applies to DEBS text input; give "
                    "data.path or data.directory (generated data has no "
                    "extra columns)"
                )
            return self
        if self.path is not None and self.directory is not None:
            raise ConfigError(
                "data.directory: next to data.path; give one input: a file "
                "(data.path) or a directory of arriving files (data.directory)"
            )
        key = "data.path" if self.path is not None else "data.directory"
        synthetic = self.model_fields_set & {"duration_s", "rate_hz", "seed"}
        if synthetic:
            raise ConfigError(
                f"data.{sorted(synthetic)[0]}: a synthetic-feed parameter next to "
                f"{key}; give either {key} or {{duration_s, rate_hz, seed}}"
            )
        base = Path((info.context or {}).get("base_dir", "."))
        if self.directory is not None:
            key = "data.directory.path"
            p = user_path(key, self.directory.path)
            p = p if p.is_absolute() else base / p
            check_path(key, p)
            try:
                p = p.resolve()
                is_file, is_dir = p.is_file(), p.is_dir()
            except OSError as e:  # e.g. a parent without search permission
                raise os_error(key, p, e) from None
            except RuntimeError:  # a symlink loop
                raise ConfigError(f"{key}: {str(p)!r}: a symbolic link loop") from None
            if is_file:
                raise ConfigError(
                    f"data.directory.path: {str(p)!r} is a file; a directory is "
                    "watched for arriving files (one file: data.path)"
                )
            if not is_dir:
                raise ConfigError(
                    f"data.directory.path: directory not found: {str(p)!r} "
                    "(create it first; relative paths are relative to the "
                    "config file)"
                )
            object.__setattr__(self.directory, "path", str(p))
            return self
        assert self.path is not None  # neither or both were handled above
        p = user_path("data.path", self.path)
        p = p if p.is_absolute() else base / p
        check_path("data.path", p)
        try:
            is_file = p.is_file()
        except OSError as e:  # e.g. a parent without search permission
            raise os_error("data.path", p, e) from None
        if not is_file:
            raise ConfigError(
                f"data.path: file not found: {str(p)!r} (relative paths are "
                "relative to the config file)"
            )
        object.__setattr__(self, "path", str(p.resolve()))  # a file: no loop
        return self
