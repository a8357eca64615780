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

import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from vkcore.errors import UsageError

from .compare import DTYPES, Tolerance

KEYS = {"atol": float, "rtol": float, "ulp": int}


@dataclass(frozen=True)
class TolerancePolicy:
    default: Tolerance = Tolerance()
    per_resource: dict[str, Tolerance] = field(default_factory=dict)
    dtypes: dict[str, str] = field(default_factory=dict)

    def for_resource(self, uid: str, dtype: str) -> Tolerance:
        return self.per_resource.get(uid, self.default)

    def with_defaults(self, atol: float | None, rtol: float | None, ulp: int | None) -> "TolerancePolicy":
        changes = {k: v for k, v in (("atol", atol), ("rtol", rtol), ("ulp", ulp)) if v is not None}
        return replace(self, default=replace(self.default, **changes))


def _tolerance(table: Any, base: Tolerance, place: str, path: Path) -> Tolerance:
    if not isinstance(table, dict):
        raise UsageError(f"{path}: {place}: expected a table")
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key == "dtype":
            continue
        if key not in KEYS:
            raise UsageError(f"{path}: {place}.{key}: unknown key (expected atol, rtol, ulp or dtype)")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise UsageError(f"{path}: {place}.{key}: must be a number >= 0, got {value!r}")
        values[key] = KEYS[key](value)
    return replace(base, **values)


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
    default = _tolerance(data.get("default", {}), Tolerance(), "default", path)
    per: dict[str, Tolerance] = {}
    dtypes: dict[str, str] = {}
    resources = data.get("resources", {})
    if not isinstance(resources, dict):
        raise UsageError(f"{path}: resources: expected a table of resource uids")
    for uid, table in resources.items():
        per[uid] = _tolerance(table, default, f"resources.{uid}", path)
        dtype = table.get("dtype") if isinstance(table, dict) else None
        if dtype is not None:
            if dtype not in DTYPES:
                raise UsageError(f"{path}: resources.{uid}.dtype: unknown type {dtype!r} (known: {', '.join(DTYPES)})")
            dtypes[uid] = dtype
    unknown = set(data) - {"default", "resources"}
    if unknown:
        raise UsageError(f"{path}: unknown table(s): {', '.join(sorted(unknown))} (expected [default] and [resources.<uid>])")
    return TolerancePolicy(default, per, dtypes)
