"""Tolerances per resource: command-line defaults plus a TOML file of per-resource values.

The TOML file holds an optional ``[default]`` table and one table per resource uid, each with any of
``atol``, ``rtol``, ``ulp`` and ``dtype``::

    [default]
    ulp = 2

    [resources.output]
    atol = 1e-5
    dtype = "float32"
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from vkcore.errors import UsageError

from .results import DTYPES, Tolerance

KEYS = {"atol": float, "rtol": float, "ulp": int}


@dataclass(frozen=True)
class TolerancePolicy:
    """Defaults (the file's ``[default]`` under the command line's flags) and, per resource, only the
    keys its table sets: a table that sets ``dtype`` alone still gets the command line's tolerances."""

    default: Tolerance = Tolerance()
    per_resource: dict[str, Tolerance | dict[str, Any]] = field(default_factory=dict)
    dtypes: dict[str, str] = field(default_factory=dict)
    default_dtype: str = "bytes"

    def for_resource(self, uid: str, dtype: str) -> Tolerance:
        own = self.per_resource.get(uid)
        if own is None:
            return self.default
        if isinstance(own, Tolerance):  # a learned tolerance (--tolerance auto): complete
            return own
        return replace(self.default, **own)

    def dtype_of(self, uid: str) -> str:
        return self.dtypes.get(uid, self.default_dtype)

    def with_defaults(self, atol: float | None, rtol: float | None, ulp: int | None) -> "TolerancePolicy":
        changes: dict[str, Any] = {k: v for k, v in (("atol", atol), ("rtol", rtol), ("ulp", ulp)) if v is not None}
        return replace(self, default=replace(self.default, **changes))


def _values(table: Any, place: str, path: Path) -> dict[str, Any]:
    """The tolerance keys a table sets, checked (finite numbers >= 0; ulp an integer)."""
    if not isinstance(table, dict):
        raise UsageError(f"{path}: {place}: expected a table")
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key == "dtype":
            continue
        if key not in KEYS:
            raise UsageError(f"{path}: {place}.{key}: unknown key (expected atol, rtol, ulp or dtype)")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise UsageError(f"{path}: {place}.{key}: must be a finite number >= 0, got {value!r}")
        if key == "ulp" and value != int(value):
            raise UsageError(f"{path}: {place}.ulp: must be a whole number, got {value!r}")
        values[key] = KEYS[key](value)
    return values


def _dtype(table: Any, place: str, path: Path) -> str | None:
    dtype = table.get("dtype") if isinstance(table, dict) else None
    if dtype is not None and dtype not in DTYPES:
        raise UsageError(f"{path}: {place}.dtype: unknown type {dtype!r} (known: {', '.join(DTYPES)})")
    return dtype


def load_tolerance_file(path: Path) -> TolerancePolicy:
    """Parse a tolerance file; errors name the file and the key."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"{path}: no such tolerance file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: invalid TOML: {exc}") from None
    default_table = data.get("default", {})
    default = Tolerance(**_values(default_table, "default", path))
    default_dtype = _dtype(default_table, "default", path) or "bytes"
    per: dict[str, Tolerance | dict[str, float]] = {}
    dtypes: dict[str, str] = {}
    resources = data.get("resources", {})
    if not isinstance(resources, dict):
        raise UsageError(f"{path}: resources: expected a table of resource uids")
    for uid, table in resources.items():
        per[uid] = _values(table, f"resources.{uid}", path)
        dtype = _dtype(table, f"resources.{uid}", path)
        if dtype is not None:
            dtypes[uid] = dtype
    unknown = set(data) - {"default", "resources"}
    if unknown:
        raise UsageError(f"{path}: unknown table(s): {', '.join(sorted(unknown))} (expected [default] and [resources.<uid>])")
    return TolerancePolicy(default, per, dtypes, default_dtype)
