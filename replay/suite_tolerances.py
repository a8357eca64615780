"""A suite manifest entry's tolerances and dtypes: read and checked from the manifest, carried to the
worker as replay flags, and checked against the trace before any worker starts.

An entry sets the trace's own tolerance (a table of ``atol``, ``rtol``, ``ulp``, or a preset name) and,
per resource, its dtype and tolerance; a key ``UID.FIELD`` sets one field of a struct view::

    [[traces]]
    path = "particles.vkt"
    tolerance = { ulp = 4 }                            # every resource of the trace
    resources.out = { dtype = "float32", atol = 2e-6 } # one resource: dtype, atol, rtol, ulp
    resources."state.pos" = { ulp = 1 }                # one field of a struct view: atol, rtol, ulp

Guarantees:

- every key, type and number is checked where the manifest is read (:func:`entry_tolerance`: one line
  naming the manifest and the key, exit 2), before any trace is opened;
- :func:`check_suite` (before any worker starts) names a resource or field the trace lacks, a dtype
  given to a field or that does not divide its resource (:func:`check_names`), and a ``ulp`` or
  ``rtol`` the manifest sets for a resource (:func:`check_bytes`)
  compared as raw bytes (no dtype, no shader view: a tolerance that would silently judge nothing) as
  errors naming the manifest's key; the same tolerance given by ``suite run``'s flags is a warning,
  once per trace and resource;
- the flags a worker gets (:meth:`TraceTolerance.flags`) hold exactly what was checked: the trace's own
  settings come after the suite's flags, so they win.
"""
from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vkcore.bounded_numbers import check_number
from vkcore.errors import UsageError, VkcapError
from vkcore.safe_text import shown

from .results import DTYPES
from .tolerances import TolerancePolicy, check_dtype, check_field, preset_policy, split_key

#: The replay flag (hidden) that carries an entry's per-resource tolerances to a worker, as JSON
#: (:func:`vkcap.compare_flags.resource_tolerances` reads it).
RESOURCE_TOLERANCES = "--resource-tolerances"
#: The keys of an entry's ``tolerance`` table and of a resource's table.
TOLERANCE_KEYS = ("atol", "rtol", "ulp")
RESOURCE_KEYS = ("atol", "rtol", "ulp", "dtype")


@dataclass(frozen=True)
class TraceTolerance:
    """What one manifest entry (``place``, e.g. ``traces[3]``, of ``manifest``) sets: the trace's
    tolerance keys or preset, and per resource (or ``UID.FIELD``) its dtype and tolerance keys."""

    manifest: Path
    place: str
    defaults: tuple[tuple[str, float | int], ...] = ()
    preset: str = ""
    resources: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()

    def flags(self) -> tuple[str, ...]:
        """The replay flags that carry these settings to a worker (after the suite's own)."""
        out: list[str] = []
        for key, value in self.defaults:
            out += [f"--{key}", repr(value)]
        if self.preset:
            out += ["--tolerance", f"preset:{self.preset}"]
        numbers: dict[str, dict[str, Any]] = {}
        for uid, keys in self.resources:
            for key, value in keys:
                if key == "dtype":
                    out += ["--dtype", f"{uid}={value}"]
                else:
                    numbers.setdefault(uid, {})[key] = value
        if numbers:
            out += [RESOURCE_TOLERANCES, json.dumps(numbers, sort_keys=True)]
        return tuple(out)

    def setter(self, uid: str, key: str) -> str | None:
        """The manifest key that sets tolerance ``key`` of resource ``uid`` (its own table's, else the
        entry's ``tolerance``), or None when the manifest does not set it."""
        own = dict(dict(self.resources).get(uid, ()))
        if key in own:
            return f"{self.place}.resources.{_key(uid)}.{key}"
        if key in dict(self.defaults):
            return f"{self.place}.tolerance.{key}"
        return None


def _key(uid: str) -> str:
    """A uid as a TOML key in a place: bare when it can be, else quoted."""
    return uid if re.fullmatch(r"[A-Za-z0-9_-]+", uid) else json.dumps(uid)


def _shown(value: Any) -> str:
    text = "nothing" if value is None else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def entry_tolerance(entry: dict[str, Any], manifest: Path, where: str) -> TraceTolerance:
    """The tolerance settings of the manifest entry ``entry`` (at ``where``), every key and number checked
    (:func:`vkcore.bounded_numbers.check_number`, :data:`replay.results.DTYPES`)."""
    value = entry.get("tolerance")
    defaults: list[tuple[str, float | int]] = []
    preset = ""
    if isinstance(value, str):
        preset_policy(value, f"{manifest}: {where}.tolerance")
        preset = value
    elif value is not None:
        if not isinstance(value, dict) or not value:
            raise UsageError("a preset name or a table of atol, rtol and ulp", file=manifest, place=f"{where}.tolerance")
        for key, number in sorted(value.items()):
            if key not in TOLERANCE_KEYS:
                raise UsageError(f"unknown key {key!r} (known: {', '.join(TOLERANCE_KEYS)})", file=manifest,
                                 place=f"{where}.tolerance.{key}")
            defaults.append((key, check_number(key, number, file=str(manifest), place=f"{where}.tolerance.{key}")))
    tables = entry.get("resources", {})
    if not isinstance(tables, dict):
        raise UsageError(f"must be a table of resource uids, got {_shown(tables)}", file=manifest, place=f"{where}.resources")
    resources = []
    for uid, table in tables.items():
        place = f"{where}.resources.{_key(uid)}"
        if not isinstance(table, dict) or not table:
            raise UsageError(f"must be a table of {', '.join(RESOURCE_KEYS)}, got {_shown(table)}", file=manifest, place=place)
        keys: list[tuple[str, Any]] = []
        for key, item in table.items():
            if key not in RESOURCE_KEYS:
                raise UsageError(f"unknown key {key!r} (known: {', '.join(RESOURCE_KEYS)})", file=manifest,
                                 place=f"{place}.{key}")
            if key == "dtype":
                if not isinstance(item, str) or item not in DTYPES:
                    raise UsageError(f"must be a type name (one of: {', '.join(DTYPES)}), got {_shown(item)}",
                                     file=manifest, place=f"{place}.dtype")
                keys.append((key, item))
            else:
                keys.append((key, check_number(key, item, file=str(manifest), place=f"{place}.{key}")))
        resources.append((uid, tuple(keys)))
    return TraceTolerance(manifest, where, tuple(defaults), preset, tuple(resources))


def check_names(trace: Any, tolerance: TraceTolerance) -> None:
    """:class:`UsageError` naming the manifest's key for a resource or field of ``tolerance`` that the
    opened ``trace`` lacks, a dtype given to a field, or a dtype that does not divide its resource."""
    # lazy: loaded while the Vulkan driver starts in its thread (vkcap replay; vkcap/vulkan_start.py)
    from .reading import reading

    name = shown(Path(trace.path).name)
    dtypes = {uid: dict(keys)["dtype"] for uid, keys in tolerance.resources if "dtype" in dict(keys)}
    for uid, keys in tolerance.resources:
        place = f"{tolerance.place}.resources.{_key(uid)}"
        where = f"{tolerance.manifest}: {place}: in {name}"
        resource, field = split_key(uid, trace.resources, where)
        if field and "dtype" in dict(keys):
            raise UsageError(f"in {name}: a field is read in its view's type; a dtype is for a whole resource",
                             file=tolerance.manifest, place=f"{place}.dtype")
        if field:
            check_field(resource, field, reading(trace, resource, TolerancePolicy(dtypes=dtypes)), where)
        elif uid in dtypes:
            check_dtype(uid, dtypes[uid], trace.resources, f"{where}.dtype")


def check_bytes(trace: Any, tolerance: TraceTolerance | None, policy: Any) -> list[str]:
    """For each resource of the opened ``trace`` that ``policy`` (the one its worker compares with: the
    suite's flags, then the entry's) compares as raw bytes while its tolerance sets ``ulp`` or ``rtol``:
    a :class:`UsageError` naming the manifest's key when ``tolerance`` (the manifest entry's; None for a
    trace of a suite folder) sets it, else a warning line (the suite's flags set it)."""
    # lazy: loaded while the Vulkan driver starts in its thread (vkcap replay; vkcap/vulkan_start.py)
    from .reading import bytes_tolerances, why_bytes

    name = shown(Path(trace.path).name)
    warnings = []
    for uid, keys in bytes_tolerances(trace, policy):
        for key, value in keys.items():
            setter = tolerance.setter(uid, key) if tolerance is not None else None
            said = f"{key} {value:g} does not apply to '{shown(uid)}' of {name}: it is compared as bytes ({why_bytes(uid, policy)})"
            if tolerance is not None and setter is not None:
                raise UsageError(f"{said}; give it a dtype ({tolerance.place}.resources.{_key(uid)}.dtype)",
                                 file=tolerance.manifest, place=setter)
            warnings.append(f"--{key}: {said}; give it a dtype (a manifest's resources.{_key(uid)}.dtype, or --dtype)")
    return warnings


def needs_check(flags: list[str] | tuple[str, ...], tolerance: TraceTolerance | None) -> bool:
    """Whether a trace replayed with ``flags`` (the suite's, then its own) needs opening before the run:
    its entry names resources, or a ``ulp`` or ``rtol`` may meet a bytes comparison."""
    return bool(tolerance is not None and tolerance.resources) or any(
        f in ("--ulp", "--rtol", RESOURCE_TOLERANCES) for f in flags)


def check_suite(traces: list[Any], suite_flags: list[str], policy_of: Any, log: logging.Logger | None = None) -> None:
    """:func:`check_names` and :func:`check_bytes` for every trace of a suite that :func:`needs_check`
    (the others are not opened here), before any worker starts; a trace that cannot be opened is left to
    its worker, which reports it. ``policy_of(suite_trace, opened)`` is the policy its worker will use;
    the warnings go to ``log``."""
    # lazy: loaded while the Vulkan driver starts in its thread (vkcap replay; vkcap/vulkan_start.py)
    from capture.trace import Trace

    log = log or logging.getLogger("vkcap")
    for suite_trace in traces:
        tolerance = suite_trace.tolerance
        if not needs_check([*suite_flags, *suite_trace.flags], tolerance):
            continue
        try:
            with Trace.open(suite_trace.path) as opened:
                if tolerance is not None:
                    check_names(opened, tolerance)
                for line in check_bytes(opened, tolerance, policy_of(suite_trace, opened)):
                    log.warning("%s", line)
        except UsageError:
            raise
        except (VkcapError, OSError):  # the trace's own fault: its worker reports it, as for any trace
            continue
