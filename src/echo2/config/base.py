"""What every echo2 schema shares: the one pydantic base, one-line errors, YAML files, dotted overrides.

The run config (``echo2 train``), the inventory (``echo2 plan``) and the scenario
(``echo2 simulate``) are all :class:`Section` models read from YAML: unknown or ill-typed keys
fail with a one-line message naming the key, and ``a.b.c=value`` overrides (list items by index,
``fleet.0.count=50``) change them from the command line.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError


class ConfigError(ValueError):
    """A config problem, stated in one line that names the offending key."""


#: A value naming code of the user's own: ``package.module:name``.
IMPORT_PATH = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


def import_path(path: str, what: str) -> Any:
    """The object ``module:name`` names (a task, an objective, an engine of the user's own, imported
    where it is used), or a ValueError saying ``what`` could not be imported."""
    module_name, _, name = path.partition(":")
    try:
        return getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"{what}: cannot import it ({error})") from None


def builtin_or_path(value: str, builtins: Iterable[str], key: str, kind: str) -> str:
    """``value`` if it is one of ``builtins`` or an import path (:data:`IMPORT_PATH`), else the
    error naming ``key`` and what it may be (a ``kind``)."""
    if value in builtins or IMPORT_PATH.fullmatch(value):
        return value
    raise ValueError(f"{key}={value!r}: not a built-in {kind} ({', '.join(builtins)}) nor a module:name path")


class Section(BaseModel):
    """Base of every schema: unknown keys are errors, the docstring under a field is its description."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True)


def describe(error: ValidationError) -> tuple[str, str]:
    """``(dotted key, what is wrong)`` of the first problem pydantic found."""
    first = error.errors()[0]
    key = ".".join(str(p) for p in first["loc"]) or "(root)"
    if first["type"] == "extra_forbidden":
        return key, "unknown key"
    got, what = first.get("input"), first["msg"].removeprefix("Value error, ")
    if isinstance(got, (dict, list, BaseModel)):  # a whole section: naming the key says enough
        return key, what
    return key, f"{what} (got {got!r})"


def first_error(error: ValidationError) -> str:
    """``key: what`` of the first problem pydantic found (one line for a YAML input file)."""
    key, what = describe(error)
    return f"{key}: {what}"


def read_yaml(path: str | Path, what: str = "config file") -> dict[str, Any]:
    """The mapping at the top of a YAML file (empty file: ``{}``); :class:`ConfigError` otherwise."""
    try:
        loaded = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"{what} {path}: not found") from None
    except OSError as error:
        raise ConfigError(f"{what} {path}: cannot read ({error})") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{what} {path}: not valid YAML ({str(error).splitlines()[0]})") from None
    if loaded is not None and not isinstance(loaded, dict):
        raise ConfigError(f"{what} {path}: expected a mapping at the top level")
    return loaded or {}


def parse_value(text: str) -> Any:
    """``key=value`` values are YAML scalars/collections: ``3``, ``1e-4``, ``true``, ``[1, 2]``."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply one dotted ``a.b.c=value`` override to the nested dict ``data`` in place; an integer
    part indexes a list already there (``fleet.0.count=50``)."""
    key, sep, value = assignment.partition("=")
    if not sep or not key:
        raise ConfigError(f"override {assignment!r}: expected key=value, e.g. learner.lr=1e-4")
    node: Any = data
    *parents, last = key.split(".")
    for part in parents:
        if isinstance(node, list):
            node = node[_index(node, part, key)]
            continue
        child = node.setdefault(part, {})
        if not isinstance(child, (dict, list)):
            raise ConfigError(f"config key '{key}': '{part}' is not a section")
        node = child
    if isinstance(node, list):
        node[_index(node, last, key)] = parse_value(value)
    else:
        node[last] = parse_value(value)


def _index(items: list, part: object, key: str) -> int:
    if not str(part).isdigit() or int(part) >= len(items):
        raise ConfigError(f"config key '{key}': '{part}' is not an index of a list of {len(items)}")
    return int(part)


def merge(base: Any, changes: Any, _key: str = "") -> Any:
    """Nested ``changes`` over ``base`` (neither is modified); a list in ``base`` is indexed by
    integer keys (``{"fleet": {"0": {"count": 7}}}``)."""
    if not isinstance(changes, dict):
        return changes
    if isinstance(base, list):
        merged = list(base)
        for part, value in changes.items():
            index = _index(merged, part, f"{_key}{part}")
            merged[index] = merge(merged[index], value, f"{_key}{part}.")
        return merged
    merged = dict(base or {})
    for part, value in changes.items():
        merged[part] = merge(merged.get(part), value, f"{_key}{part}.")
    return merged
