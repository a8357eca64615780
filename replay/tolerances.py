"""Tolerances per resource: command-line defaults plus a TOML file of per-resource values.

The TOML file holds an optional ``[default]`` table and one table per resource uid, each with any of
``atol``, ``rtol``, ``ulp`` and ``dtype``, and one per field of a struct view (``UID.FIELD``: atol, rtol,
ulp; a field's type is its view's)::

    [default]
    ulp = 2

    [resources.output]
    atol = 1e-5
    dtype = "float32"

    [resources."particles.pos"]
    ulp = 4

A ULP or relative tolerance means nothing to a resource compared as raw bytes (no dtype, no format, no
shader view): :func:`replay.reading.bytes_tolerances` names those, and :func:`replay.reading.warn_bytes_tolerances` says so once per
resource (replay, diff, bisect; a suite manifest that sets one is refused instead).

A top-level ``preset = "NAME"`` (or ``--tolerance preset:NAME``) gives per-dtype defaults under everything
else (a resource's table, then the command line's ``--atol``/``--rtol``/``--ulp``, then ``[default]``):

- ``torch``: the rtol and atol of ``torch.testing.assert_close`` for each dtype (float16 1e-3/1e-5,
  bfloat16 1.6e-2/1e-5, float32 1.3e-6/1e-5, float64 1e-7/1e-7); every other dtype exact, as there
  (float8 types included: torch gives them no default either);
- ``strict``: every dtype exact.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Mapping

from vkcore.errors import UsageError
from vkcore.safe_text import shown

from .results import DTYPES, Tolerance, itemsize

KEYS = {"atol": float, "rtol": float, "ulp": int}
#: Per-dtype default tolerances by preset name (a dtype not listed is compared exactly).
PRESETS: dict[str, dict[str, Tolerance]] = {
    "torch": {"float16": Tolerance(atol=1e-5, rtol=1e-3), "bfloat16": Tolerance(atol=1e-5, rtol=1.6e-2),
              "float32": Tolerance(atol=1e-5, rtol=1.3e-6), "float64": Tolerance(atol=1e-7, rtol=1e-7)},
    "strict": {},
}

#: A trace's resources as :attr:`capture.trace.Trace.resources` describes them: uid -> its metadata
#: (``kind``, ``size`` in bytes, and ``format``/``dims`` for images and tensors).
Resources = Mapping[str, Mapping[str, Any]]


@dataclass(frozen=True)
class TolerancePolicy:
    """Defaults (the file's ``[default]`` under the command line's flags) and, per resource, only the
    keys its table sets: a table that sets ``dtype`` alone still gets the command line's tolerances."""

    default: Tolerance = Tolerance()
    per_resource: dict[str, Tolerance | dict[str, Any]] = field(default_factory=dict)
    dtypes: dict[str, str] = field(default_factory=dict)
    default_dtype: str = "bytes"
    top: int = 5  # offending elements listed per comparison (--top)
    preset: str = ""  # a key of PRESETS: per-dtype defaults under the keys set explicitly
    default_keys: dict[str, Any] = field(default_factory=dict)  # the keys [default] and the flags set

    def for_resource(self, uid: str, dtype: str) -> Tolerance:
        base = replace(PRESETS[self.preset].get(dtype, Tolerance()), **self.default_keys) if self.preset else self.default
        own = self.per_resource.get(uid)
        if own is None:
            return base
        if isinstance(own, Tolerance):  # a learned tolerance (--tolerance auto): complete
            return own
        return replace(base, **own)

    def dtype_of(self, uid: str) -> str:
        return self.dtypes.get(uid, self.default_dtype)

    def dtype_for(self, uid: str, meta: Mapping[str, Any]) -> str:
        """How a replay reads snapshots of ``uid`` (metadata ``meta``): the dtype given for it, else its
        format's, else the default (the order of :func:`replay.replayer.resource_dtype`)."""
        if uid in self.dtypes:
            return self.dtypes[uid]
        fmt = meta.get("format")
        if isinstance(fmt, str):
            # lazy: vkcap replay imports this module, not vkcore.resources.formats
            from vkcore.resources.formats import format_info

            try:
                return format_info(fmt).compare_dtype
            except KeyError:
                pass
        return self.default_dtype

    def with_defaults(self, atol: float | None, rtol: float | None, ulp: int | None) -> "TolerancePolicy":
        changes: dict[str, Any] = {k: v for k, v in (("atol", atol), ("rtol", rtol), ("ulp", ulp)) if v is not None}
        return replace(self, default=replace(self.default, **changes), default_keys={**self.default_keys, **changes})


def describe_tolerance(policy: TolerancePolicy) -> str:
    """One line: the preset, the defaults and each resource's own values (for report headers)."""
    def text(t: Tolerance | dict[str, Any]) -> str:
        items = t.items() if isinstance(t, dict) else (("atol", t.atol), ("rtol", t.rtol), ("ulp", t.ulp))
        return ", ".join(f"{k}={v:g}" for k, v in items if v) or "exact"

    parts = [f"preset {policy.preset}"] if policy.preset else []
    parts.append(f"default {text(policy.default_keys if policy.preset else policy.default)}")
    parts += [f"{uid}: {text(t)}" for uid, t in sorted(policy.per_resource.items())]
    return "; ".join(parts)


def preset_policy(name: str, where: str) -> TolerancePolicy:
    """A policy of preset ``name``; :class:`UsageError` naming ``where`` for an unknown one."""
    if name not in PRESETS:
        raise UsageError(f"{where}: unknown tolerance preset {name!r} (known: {', '.join(PRESETS)})")
    return TolerancePolicy(preset=name)


def _values(table: Any, place: str, path: Path) -> dict[str, Any]:
    """The tolerance keys a table sets, checked by :func:`vkcore.bounded_numbers.check_number` (finite
    numbers >= 0; ulp a whole number below 2**63)."""
    # lazy: a replay's isolated child imports this module, not vkcore.bounded_numbers
    from vkcore.bounded_numbers import check_number

    if not isinstance(table, dict):
        raise UsageError(f"{path}: {place}: expected a table")
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key == "dtype":
            continue
        if key not in KEYS:
            raise UsageError(f"{path}: {place}.{key}: unknown key (expected atol, rtol, ulp or dtype)")
        values[key] = check_number(key, value, file=str(path), place=f"{place}.{key}")
    return values


def _dtype(table: Any, place: str, path: Path) -> str | None:
    dtype = table.get("dtype") if isinstance(table, dict) else None
    if dtype is not None and not isinstance(dtype, str):
        raise UsageError(f"{path}: {place}.dtype: must be a type name (a string), got {dtype!r} (known: {', '.join(DTYPES)})")
    if dtype is not None and dtype not in DTYPES:
        raise UsageError(f"{path}: {place}.dtype: unknown type {dtype!r} (known: {', '.join(DTYPES)})")
    return dtype


def check_resource(uid: str, resources: Resources, where: str) -> Mapping[str, Any]:
    """The metadata of resource ``uid``; :class:`UsageError` naming ``where`` (a flag or a TOML table)
    and listing the trace's uids when the trace has no such resource."""
    meta = resources.get(uid)
    if meta is None:
        raise UsageError(f"{where}: the trace has no resource '{uid}' (it has: {', '.join(sorted(resources)) or 'none'})")
    return meta


def split_key(key: str, resources: Resources, where: str) -> tuple[str, str]:
    """``key`` of a per-resource table as (uid, field): a resource uid (field ``""``), or ``UID.FIELD``
    where UID is one (the longest that is); :class:`UsageError` naming ``where`` otherwise, listing the
    trace's uids. Whether FIELD is a field of UID's view is :func:`check_field`'s question."""
    if key in resources:
        return key, ""
    dots = [i for i, c in enumerate(key) if c == "."]
    for at in reversed(dots):
        if key[:at] in resources and key[at + 1:]:
            return key[:at], key[at + 1:]
    check_resource(key, resources, where)  # raises, listing the uids
    return key, ""


def check_field(uid: str, name: str, how: Any, where: str) -> None:
    """:class:`UsageError` naming ``where`` unless ``name`` is a field of ``how`` (how resource ``uid``
    is read, :func:`replay.reading.reading`: a struct view's part names)."""
    # lazy: loaded while the Vulkan driver starts in its thread (vkcap replay; vkcap/vulkan_start.py)
    from capture.views import View

    parts = [p.name for p in how.parts if p.name] if isinstance(how, View) and how.scalar is None else []
    if name not in parts:
        read = getattr(how, "text", how)
        known = f"its fields: {', '.join(parts)}" if parts else "it has no fields"
        raise UsageError(f"{where}: '{shown(uid)}' has no field '{shown(name)}' (it is read as {shown(read)}; {known})")


def check_dtype(uid: str, dtype: str, resources: Resources, where: str) -> None:
    """:class:`UsageError` naming ``where`` unless ``uid`` is a resource of the trace whose size is a
    whole number of ``dtype`` elements."""
    size = int(check_resource(uid, resources, where).get("size", 0))
    if size % itemsize(dtype):
        raise UsageError(f"{where}: '{uid}' is {size} bytes, not a whole number of {dtype} elements "
                         f"({itemsize(dtype)} bytes each)")


def check_shape(uid: str, shape: tuple[int, ...], policy: TolerancePolicy, resources: Resources, where: str) -> None:
    """:class:`UsageError` naming ``where`` unless ``shape`` holds as many elements as resource ``uid``
    read as its dtype (:meth:`TolerancePolicy.dtype_for`), or, for an image, as its level 0."""
    meta = check_resource(uid, resources, where)
    dtype = policy.dtype_for(uid, meta)
    size, step = int(meta.get("size", 0)), itemsize(dtype)
    counts = [size // step]
    dims = meta.get("dims")
    if meta.get("kind") == "image" and isinstance(dims, list) and len(dims) == 4:
        counts.append(int(dims[1]) * int(dims[2]) * int(meta.get("texel_bytes", 0)) // step)
    wanted = math.prod(shape)
    if wanted not in counts:
        level0 = f" (level 0: {counts[1]})" if len(counts) > 1 else ""
        raise UsageError(f"{where}: {wanted} elements, but '{uid}' ({size} bytes read as {dtype}) holds {counts[0]}{level0}")


def load_tolerance_file(path: Path, resources: Resources | None = None) -> TolerancePolicy:
    """Parse a tolerance file; errors name the file and the key. With ``resources`` (the trace's),
    every ``[resources.UID]`` table must name one of them, and its ``dtype`` must divide its size."""
    if sys.version_info >= (3, 11):
        # lazy: vkcap replay imports this module, not tomllib
        import tomllib
    else:  # pragma: no cover
        # lazy: vkcap replay imports this module, not tomli
        import tomli as tomllib  # type: ignore[no-redef]
    # lazy: vkcap replay imports this module, not replay.small_files
    from .small_files import read_small_text

    text = read_small_text(path, "tolerance file")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: invalid TOML: {exc}") from None
    preset = data.get("preset", "")
    if not isinstance(preset, str) or (preset and preset not in PRESETS):
        raise UsageError(f"{path}: preset: unknown tolerance preset {preset!r} (known: {', '.join(PRESETS)})")
    default_table = data.get("default", {})
    default_keys = _values(default_table, "default", path)
    default = Tolerance(**default_keys)
    default_dtype = _dtype(default_table, "default", path) or "bytes"
    per: dict[str, Tolerance | dict[str, float]] = {}
    dtypes: dict[str, str] = {}
    tables = data.get("resources", {})
    if not isinstance(tables, dict):
        raise UsageError(f"{path}: resources: expected a table of resource uids")
    for uid, table in tables.items():
        per[uid] = _values(table, f"resources.{uid}", path)
        dtype = _dtype(table, f"resources.{uid}", path)
        field_name = ""
        if resources is not None:
            field_name = split_key(uid, resources, f"{path}: resources.{uid}")[1]
        if dtype is not None and field_name:
            raise UsageError(f"{path}: resources.{uid}.dtype: a field is read in its view's type; a dtype is for a whole resource")
        if dtype is not None:
            dtypes[uid] = dtype
            if resources is not None:
                check_dtype(uid, dtype, resources, f"{path}: resources.{uid}.dtype")
    unknown = set(data) - {"default", "resources", "preset"}
    if unknown:
        raise UsageError(f"{path}: unknown table(s): {', '.join(sorted(unknown))} (expected preset, [default] and "
                         "[resources.<uid>])")
    return TolerancePolicy(default, per, dtypes, default_dtype, preset=preset, default_keys=default_keys)


def resource_shape(trace: Any, uid: str, shapes: Iterable[tuple[str, tuple[int, ...]]] = ()) -> tuple[int, ...] | None:
    """The shape indices are reported in, the same in replay, diff and bisect: ``--shape``, a tensor's
    dims, an image's level 0 as (height, width, components) (later mip levels follow it in the
    snapshot); ``None`` for raw buffers without ``--shape``."""
    given = dict(shapes)
    if uid in given:
        return given[uid]
    meta = trace.resources.get(uid, {})
    dims = meta.get("dims")
    if not (isinstance(dims, list) and dims):
        return None
    if meta.get("kind") == "image" and len(dims) == 4:
        # lazy: vkcap replay imports this module, not vkcore.resources.formats
        from vkcore.resources.formats import format_info

        try:
            components = format_info(str(meta.get("format"))).components
        except KeyError:
            return None
        return (int(dims[2]), int(dims[1]), components)
    return tuple(int(d) for d in dims)


def policy_to_dict(policy: TolerancePolicy) -> dict[str, Any]:
    """``policy`` as JSON-able data (:func:`policy_from_dict` reads it back equal): a resource's learned
    :class:`Tolerance` (complete) and its table of keys (partial) stay told apart."""
    return {"default": vars(policy.default).copy(),
            "per_resource": {uid: ["tolerance", vars(own).copy()] if isinstance(own, Tolerance) else ["keys", dict(own)]
                             for uid, own in policy.per_resource.items()},
            "dtypes": dict(policy.dtypes), "default_dtype": policy.default_dtype, "top": policy.top,
            "preset": policy.preset, "default_keys": dict(policy.default_keys)}


def policy_from_dict(data: dict[str, Any]) -> TolerancePolicy:
    """The policy :func:`policy_to_dict` wrote."""
    return TolerancePolicy(
        default=Tolerance(**data["default"]),
        per_resource={uid: Tolerance(**own) if how == "tolerance" else dict(own)
                      for uid, (how, own) in data["per_resource"].items()},
        dtypes=dict(data["dtypes"]), default_dtype=data["default_dtype"], top=data["top"], preset=data["preset"],
        default_keys=dict(data["default_keys"]))
