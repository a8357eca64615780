"""Comparisons in the shader's view: a buffer read as what its shader declares, a struct field by field.

:func:`compare_in_view` is :func:`replay.compare.compare` for a resource whose bytes have a
:class:`~capture.views.View`. A view that is one packed array (``float result[]``, ``vec4 v[]``) is compared
exactly as ``--dtype`` would (the same code, the same speed). A struct, or an array with padding, is
compared one part at a time, each in its own type under its own tolerance (``out.pos`` before ``out``),
and the resource's comparison adds them up:

- ``count``, ``differing`` and ``beyond_tolerance`` count scalar values of every field together;
- the maxima (absolute, relative, ULP) are the largest of the fields', NaN and Inf mismatches summed;
- ``extras["fields"]`` holds each field's own verdict and statistics (name, dtype, shape, counts);
- the offending values are named by element and field: ``[41].pos[1]`` (``top`` entries carry ``where``).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from capture.views import Part, View

from .compare import TOP, compare
from .results import DIVERGED, IDENTICAL, WITHIN, Comparison, Tolerance
from .tolerances import TolerancePolicy

def compare_as(uid: str, recorded: bytes | memoryview, live: bytes | memoryview, how: str | View,
               policy: TolerancePolicy, *, shape: tuple[int, ...] | None = None, top: int = TOP) -> Comparison:
    """``live`` against ``recorded`` read as ``how`` (:func:`replay.reading.reading`): a dtype (with the
    resource's ``shape`` for indices) or a view, under ``policy``'s tolerance for ``uid``."""
    if isinstance(how, str):
        return compare(uid, recorded, live, dtype=how, tolerance=policy.for_resource(uid, how), shape=shape, top=top)
    return compare_in_view(uid, recorded, live, how, policy, top=top)


def field_tolerance(policy: TolerancePolicy, uid: str, name: str, dtype: str) -> Tolerance:
    """The tolerance of field ``name`` of ``uid``: the keys set for ``uid.name`` over those of ``uid``."""
    base = policy.for_resource(uid, dtype)
    own = policy.per_resource.get(f"{uid}.{name}") if name else None
    if own is None:
        return base
    return own if isinstance(own, Tolerance) else replace(base, **own)


def where(part: Part, index: tuple[int, ...]) -> str:
    """How a report names value ``index`` of ``part``: ``[41].pos[1]``, ``count`` for a header member,
    ``[7][2]`` for an unnamed vector."""
    element, inner = index[0], index[1:]
    head = part.name if part.count == 1 else f"[{element}]" + (f".{part.name}" if part.name else "")
    return head + "".join(f"[{i}]" for i in inner)


def compare_in_view(uid: str, recorded: bytes | memoryview, live: bytes | memoryview, view: View,
                    policy: TolerancePolicy, *, top: int = TOP) -> Comparison:
    """``live`` against ``recorded`` in ``view`` (see the module docstring)."""
    scalar = view.scalar
    if scalar is not None or len(recorded) != len(live):
        part = scalar or view.parts[0]
        per_element = int(np.prod(part.shape)) if part.shape else 1
        n = len(recorded) // (per_element * np.dtype(part.dtype).itemsize) if scalar else None
        result = compare(uid, recorded, live, dtype=part.dtype, tolerance=field_tolerance(policy, uid, "", part.dtype),
                         shape=(n, *part.shape) if scalar and part.shape and n else None, top=top)
        result.extras["view"] = view.text
        return result
    result = Comparison(uid, view.text, IDENTICAL, 0)
    fields: list[dict[str, Any]] = []
    offending: list[dict[str, Any]] = []
    for part in view.parts:
        a, b = part.extract(recorded), part.extract(live)
        c = compare(f"{uid}.{part.name}", memoryview(a.reshape(-1).view(np.uint8)), memoryview(b.reshape(-1).view(np.uint8)),
                    dtype=part.dtype, tolerance=field_tolerance(policy, uid, part.name, part.dtype), shape=a.shape, top=top)
        fields.append({"name": part.name, "dtype": part.dtype, "shape": list(part.shape), "status": c.status,
                       "count": c.count, "differing": c.differing, "beyond_tolerance": c.beyond_tolerance,
                       "max_abs": c.max_abs, "max_rel": c.max_rel, "max_ulp": c.max_ulp, "statistics": c.statistics})
        result.count += c.count
        result.differing += c.differing
        result.beyond_tolerance += c.beyond_tolerance
        result.nan_mismatches += c.nan_mismatches
        result.inf_mismatches += c.inf_mismatches
        result.max_abs, result.max_rel = max(result.max_abs, c.max_abs), max(result.max_rel, c.max_rel)
        result.max_ulp = max(result.max_ulp, c.max_ulp)
        result.beyond_max_abs, result.beyond_max_rel = max(result.beyond_max_abs, c.beyond_max_abs), max(result.beyond_max_rel, c.beyond_max_rel)
        result.beyond_max_ulp = max(result.beyond_max_ulp, c.beyond_max_ulp)
        for entry in c.top:
            offending.append({**entry, "field": part.name, "where": where(part, tuple(entry["index"])),
                              "beyond": c.beyond_tolerance > 0})
    # the first offending values: those beyond the tolerance first, in field order, then the others
    offending.sort(key=lambda e: not e.pop("beyond"))
    result.top = offending[:top]
    if result.top:
        first = result.top[0]
        result.first_index, result.first_recorded, result.first_live = tuple(first["index"]), first["recorded"], first["live"]
        result.extras["first_where"] = first["where"]
    result.status = DIVERGED if result.beyond_tolerance else WITHIN if result.differing else IDENTICAL
    result.extras.update(view=view.text, fields=fields)
    return result
