"""How a replay reads each resource's snapshots: a dtype, or the shader's view. No numpy here (a replay
whose snapshots are all identical never loads it).

The order, for every command that compares (replay, diff, bisect, suites, the pytest plugin): the dtype
given for the resource (``--dtype UID=TYPE``, ``UID=bytes`` included, or a tolerance file's), else its
format's (images, tensors), else the view of the shaders that bind it (:mod:`capture.views`), else the
policy's default (bytes unless a tolerance file says otherwise).

A ULP or relative tolerance means nothing to a resource read as raw bytes: :func:`bytes_tolerances`
names those, and :func:`warn_bytes_tolerances` says so once per resource.
"""
from __future__ import annotations

import json
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from capture.views import View, derive_views
from vkcore.errors import TraceError

from .results import IDENTICAL, Comparison, identical
from .tolerances import TolerancePolicy

if TYPE_CHECKING:
    from capture.trace import Trace

    from .options import ReplayOptions


def trace_views(trace: "Trace") -> dict[str, View]:
    """Each buffer's view in ``trace``: the views its ``views`` record holds (checked when the trace was
    opened), else, for a trace recorded before that record existed, a damaged record or a malformed view
    in it, derived once per trace from the SPIR-V and scenario it holds. Both give the same views: the
    recorder derives them with :func:`capture.views.derive_views` from the same scenario and SPIR-V."""
    known: dict[str, View] | None = vars(trace).get("_views")  # kept with the trace: one derivation each
    if known is None:
        recorded = trace.views
        if recorded is not None and not trace.views_malformed:
            known = dict(recorded)
        else:
            derived = _derived_views(trace)
            known = derived if recorded is None else {**{u: derived[u] for u in trace.views_malformed if u in derived},
                                                      **recorded}
        vars(trace)["_views"] = known
    return known


def _derived_views(trace: "Trace") -> dict[str, View]:
    try:
        document = json.loads(trace.portable_json) if trace.portable_json else {}
    except ValueError:
        raise TraceError("the trace's scenario is not valid JSON", file=trace.path) from None
    spirv = {uid: bytes(trace.blob(key, what=f"SPIR-V of shader '{uid}'")) for uid, key in trace.spirv.items()}
    return derive_views(document if isinstance(document, dict) else {}, spirv)


def effective_policy(options: "ReplayOptions") -> TolerancePolicy:
    """The options' tolerance policy with ``--dtype``'s types among its own (``--dtype`` wins)."""
    policy = options.tolerances
    return replace(policy, dtypes={**policy.dtypes, **dict(options.dtypes)}) if options.dtypes else policy


def reading(trace: "Trace", uid: str, policy: TolerancePolicy) -> str | View:
    """How snapshots of ``uid`` are read: the dtype given for it (``bytes`` included), else its format's
    (images, tensors), else the shader's view, else the policy's default dtype."""
    if uid in policy.dtypes:
        return policy.dtypes[uid]
    meta = trace.resources.get(uid, {})
    if isinstance(meta.get("format"), str):
        return policy.dtype_for(uid, meta)
    view = trace_views(trace).get(uid) if meta.get("kind", "buffer") == "buffer" else None
    return view if view is not None else policy.default_dtype


def dtype_name(how: str | View) -> str:
    """The element type a reading compares in: a dtype, a packed view's scalar type, or ``struct``."""
    if isinstance(how, str):
        return how
    scalar = how.scalar
    return scalar.dtype if scalar is not None else "struct"


def identical_in(uid: str, nbytes: int, how: str | View) -> Comparison:
    """The comparison of two equal snapshots of ``nbytes`` bytes read as ``how``: its count is the scalar
    values the view holds."""
    if isinstance(how, str):
        return identical(uid, nbytes, how)
    scalar = how.scalar
    if scalar is not None:
        result = identical(uid, nbytes, scalar.dtype)
    else:
        result = Comparison(uid, how.text, IDENTICAL, sum(p.elements(nbytes) * len(p.offsets) for p in how.parts))
    result.extras["view"] = how.text
    return result


def bytes_tolerances(trace: Any, policy: TolerancePolicy) -> list[tuple[str, dict[str, float]]]:
    """Each resource of ``trace`` that ``policy`` has compared as raw bytes (no dtype, no format, no
    shader view: :func:`replay.reading.reading` says ``bytes``) while its tolerance sets ``rtol`` or
    ``ulp``, which a bytes comparison never uses: (uid, those keys and values), by uid."""
    out = []
    for uid in sorted(trace.resources):
        if reading(trace, uid, policy) != "bytes":
            continue
        tolerance = policy.for_resource(uid, "bytes")
        keys = {k: v for k, v in (("rtol", tolerance.rtol), ("ulp", tolerance.ulp)) if v}
        if keys:
            out.append((uid, keys))
    return out


def warn_bytes_tolerances(trace: Any, policy: TolerancePolicy) -> None:
    """Log one warning per resource of :func:`bytes_tolerances`: its tolerance is not what judges it."""
    for uid, keys in bytes_tolerances(trace, policy):
        logging.getLogger("vkcap").warning(
            "%s: %s: %s does not apply: compared as bytes (%s); --dtype %s=TYPE reads it typed",
            trace.path, uid, " and ".join(f"{k} {v:g}" for k, v in keys.items()), why_bytes(uid, policy), uid)


def why_bytes(uid: str, policy: TolerancePolicy) -> str:
    """Why a resource :func:`bytes_tolerances` names is compared as bytes: its dtype says so, or
    nothing gives it a type."""
    return "its dtype is bytes" if policy.dtypes.get(uid) == "bytes" else "no shader view, no dtype"
