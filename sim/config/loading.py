"""Reading a config: YAML (as ``yaml.safe_load`` reads it: ``safe_load``) into ``Config``, every problem one line that names
the key path, the bad value and what is allowed, never a pydantic dump.

Why a module: turning pydantic's error lists into one line (unknown keys with a close match,
list positions, union tags dropped) is one idea, apart from what the sections mean.
"""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from placement.messages import short_repr
from sim.config.base import ConfigError
from sim.config.model import SECTIONS, Config
from sim.config.paths import check_path, os_error

_PLAIN_KEY = re.compile(r"[A-Za-z_][\w-]*")


def safe_load(text: str) -> Any:
    """``yaml.safe_load(text)``, faster.  A config in JSON (a JSON document is YAML) is read
    by ``json`` when that reads it exactly as YAML would (``json_as_yaml``); anything else is
    parsed by libyaml when PyYAML has it (``CSafeLoader``: the same safe constructor and
    resolver, no Python tags).  Why: a config listing 100,000 queries takes ~100 s in the
    pure-Python parser, ~13 s in libyaml's, ~0.3 s as JSON.  A text libyaml refuses is parsed
    again by the pure-Python parser, so a problem is reported as it always was."""
    if text.lstrip().startswith(("{", "[")):
        found = json_as_yaml(text)
        if found is not _NOT_JSON:
            return found
    fast = getattr(yaml, "CSafeLoader", None)
    if fast is not None and "\t" not in text:  # libyaml takes tabs the pure parser refuses
        try:
            return yaml.load(text, Loader=fast)  # noqa: S506 (a safe loader)
        except Exception:
            pass
    return yaml.safe_load(text)


_NOT_JSON = object()
#: a float as PyYAML's (YAML 1.1) resolver reads one: a dot, and an exponent only with a sign
#: (``1e5`` and ``1.0e5`` are strings to it, floats to JSON)
_YAML_FLOAT = re.compile(r"-?[0-9]+\.[0-9]*(?:[eE][-+][0-9]+)?")
#: tabs, and the line breaks YAML folds inside a quoted string (JSON keeps them)
_YAML_APART = re.compile("[\t\x85\u2028\u2029]")
#: an escaped surrogate pair: JSON joins it into one character, PyYAML keeps two
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abAB]")


class _NotYamlEqual(Exception):
    pass


def _yaml_float(literal: str) -> float:
    if not _YAML_FLOAT.fullmatch(literal):
        raise _NotYamlEqual
    return float(literal)


def _no_constant(name: str):
    raise _NotYamlEqual  # NaN, Infinity: strings to PyYAML


def json_as_yaml(text: str) -> Any:
    """``json.loads(text)`` if that is exactly what ``yaml.safe_load(text)`` gives, else
    ``_NOT_JSON``: not JSON, or JSON where YAML 1.1 reads something else (exponent floats
    without a dot or a sign, NaN and Infinity, escaped surrogate pairs, tabs and characters
    PyYAML's reader refuses)."""
    if _YAML_APART.search(text) or yaml.reader.Reader.NON_PRINTABLE.search(text):
        return _NOT_JSON
    if _SURROGATE_ESCAPE.search(text):
        return _NOT_JSON
    try:
        found = json.loads(text, parse_float=_yaml_float, parse_constant=_no_constant)
        _check_keys_fit(found)
    except Exception:  # not JSON, nested too deep, or read otherwise by YAML
        return _NOT_JSON
    return found


def _check_keys_fit(node: Any) -> None:
    """PyYAML refuses a flow mapping key over 1024 characters (a "simple key")."""
    stack = [node]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            if any(len(json.dumps(k)) > 1000 for k in x):
                raise _NotYamlEqual
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)


def _join(path: str, key: Any) -> str:
    """``a.b`` for plain keys, ``a[3]`` for list positions, ``a['odd key']`` otherwise."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    if isinstance(key, str) and _PLAIN_KEY.fullmatch(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{short_repr(key, 40)}]"


def _loc_path(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, str) and part.startswith("__") and part.endswith("__"):
            continue  # union tags
        out = _join(out, part)
    return out or "config"


def _unwrap_model(annotation: Any) -> list[type[BaseModel]]:
    """Models reachable from a field annotation (through Annotated, Union, list, dict)."""
    found: list[type[BaseModel]] = []
    stack = [annotation]
    while stack:
        a = stack.pop()
        if isinstance(a, type) and issubclass(a, BaseModel):
            found.append(a)
            continue
        for arg in getattr(a, "__args__", ()) or ():
            stack.append(arg)
        meta = getattr(a, "__metadata__", None)
        origin = getattr(a, "__origin__", None)
        if meta is not None and origin is not None:
            stack.append(origin)
    return found


def _allowed_keys(loc: tuple) -> list[str]:
    """Field names of the model at ``loc`` (for 'unknown key' messages)."""
    models: list[type[BaseModel]] = [Config]
    for part in loc:
        if isinstance(part, int) or (isinstance(part, str) and part.startswith("__")):
            continue
        nxt: list[type[BaseModel]] = []
        for m in models:
            f = m.model_fields.get(part)
            if f is not None:
                nxt += _unwrap_model(f.annotation)
        if not nxt:
            # dict values (streams.<name>) keep the dict's value model
            continue
        models = nxt
    keys: list[str] = []
    for m in models:
        keys += [k for k in m.model_fields if k not in keys]
    return keys


def _message(err: dict[str, Any]) -> str:
    loc = tuple(err.get("loc", ()))
    typ = err.get("type", "")
    path = _loc_path(loc)
    if typ == "extra_forbidden":
        allowed = _allowed_keys(loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"{path}: unknown key{hint}; allowed keys here: {', '.join(allowed)}"
    if typ == "missing":
        return f"{path}: required key is missing"
    msg = err.get("msg", "invalid value")
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    msg = msg.replace("Input should be", "expected").replace("Input", "value")
    if typ == "too_short":
        msg = "expected a non-empty list"
    elif typ == "string_too_short":
        msg = "expected a non-empty string"
    msg = re.sub(r"a valid dictionary or instance of \w+", "a mapping", msg)
    return f"{path}: {msg} (got {short_repr(err.get('input'))})"


def _from_validation(exc: ValidationError) -> ConfigError:
    errors = exc.errors()
    for e in errors:  # our own cross-field checks already carry a full message
        inner = (e.get("ctx") or {}).get("error")
        if isinstance(inner, ConfigError):
            return inner
    # An unknown key is usually a typo that also causes a "missing" error: report it first.
    errors.sort(key=lambda e: e.get("type") != "extra_forbidden")
    first = _message(dict(errors[0]))
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    return ConfigError(first + more)


def _check_keys(node: Any, path: str = "", seen: set[int] | None = None) -> None:
    """Refuse non-string keys (YAML allows ``1: x`` or ``null: x``) with their path, and walk
    shared/recursive YAML aliases only once."""
    seen = set() if seen is None else seen
    if id(node) in seen:
        return
    if isinstance(node, (dict, list)):
        seen.add(id(node))
    if isinstance(node, dict):
        for k, v in node.items():
            if not isinstance(k, str):
                raise ConfigError(
                    f"{path or 'config'}: keys must be strings, got key {short_repr(k)}"
                )
            _check_keys(v, _join(path, k), seen)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _check_keys(v, _join(path, i), seen)


def config_from_mapping(raw: Any, base_dir: str | Path = ".") -> Config:
    """Validate an already-parsed mapping; ``base_dir`` resolves ``data.path``."""
    if raw is None:
        raise ConfigError(
            "config: the file is empty; expected a mapping with sections " + ", ".join(SECTIONS)
        )
    if not isinstance(raw, dict):
        raise ConfigError(
            f"config: expected a mapping with sections {', '.join(SECTIONS)}; "
            f"got {type(raw).__name__} {short_repr(raw)}"
        )
    _check_keys(raw)
    try:
        return Config.model_validate(raw, context={"base_dir": str(base_dir)})
    except ValidationError as exc:
        raise _from_validation(exc) from None
    except RecursionError:
        raise ConfigError("config: nesting too deep (recursive YAML aliases?)") from None


def load_config_text(text: str, base_dir: str | Path = ".", source: str = "config") -> Config:
    """Parse YAML text (``safe_load`` only) and validate it."""
    try:
        raw = safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{source}: invalid YAML{where}: {problem}") from None
    except (RecursionError, ValueError, TypeError) as exc:  # e.g. absurd !!int or nesting
        raise ConfigError(f"{source}: invalid YAML: {short_repr(str(exc), 120)}") from None
    return config_from_mapping(raw, base_dir)


def load_config(path: str | Path) -> Config:
    """Load and validate a YAML config file; every problem is a one-line ``ConfigError``."""
    p = Path(path)
    check_path("config file", p)
    try:
        if not p.is_file():
            raise ConfigError(f"config file not found: {str(p)!r}")
    except OSError as e:  # e.g. a parent without search permission
        raise os_error("config file", p, e) from None
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: cannot read config: {exc}") from None
    return load_config_text(text, p.parent, str(p))
