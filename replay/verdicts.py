"""What a suite verdict says: per resource, what was compared and how it came out (``out (float32): 12
beyond ulp 4, up to 9 ULP``), and per trace, what was expected against what happened (``expected
divergence from frame 1, diverged from frame 0 in a``).

A resource's verdict (:func:`resource_verdicts`) is plain JSON data, worst over the frames compared:
``uid``, ``dtype`` (the type or view it was read as), ``tolerance`` (the one in force, as text),
``status``, ``first_frame`` and ``frames_beyond`` (where it was beyond the tolerance), ``beyond_tolerance``
and ``differing`` (scalar values, in its worst frame), ``max_abs``, ``max_ulp`` and, for a struct view,
``fields`` (the same per field). Result files carry them, so :func:`resource_line` reads them back
after ``suite merge`` as it read them in the run.
"""
from __future__ import annotations

import math
from typing import Any, Iterable

from .results import DIVERGED, DTYPES, IDENTICAL, WITHIN, Tolerance

_RANK = {IDENTICAL: 0, WITHIN: 1, DIVERGED: 2}


def tolerance_text(t: Tolerance, dtype: str = "") -> str:
    """``ulp 4``, ``atol 2e-06, ulp 4``, or ``exact``: the keys that judge ``dtype`` (integers and bytes
    only know ``atol``)."""
    keys = ("atol", "rtol", "ulp") if DTYPES.get(dtype, ("", True))[1] else ("atol",)
    return ", ".join(f"{k} {getattr(t, k):g}" for k in keys if getattr(t, k)) or "exact"


def _finite(value: Any) -> float:
    number = float(value) if isinstance(value, (int, float)) else 0.0
    return number if math.isfinite(number) else 0.0


def _merge(entry: dict[str, Any], seq: int, c: Any) -> None:
    """Fold comparison ``c`` (frame ``seq``) into ``entry``: the worst status, values and frame."""
    if _RANK.get(c.status, 0) > _RANK.get(entry["status"], 0):
        entry["status"] = c.status
    if c.status == DIVERGED:
        entry["frames_beyond"] += 1
        if entry["first_frame"] is None:
            entry["first_frame"] = seq
    entry["beyond_tolerance"] = max(entry["beyond_tolerance"], int(c.beyond_tolerance))
    entry["differing"] = max(entry["differing"], int(c.differing))
    entry["max_abs"] = max(entry["max_abs"], _finite(c.max_abs))
    entry["max_ulp"] = max(entry["max_ulp"], int(c.max_ulp))


def resource_verdicts(frames: Iterable[Any], policy: Any) -> list[dict[str, Any]]:
    """Each resource's verdict over the frame-level comparisons of ``frames`` (in the order first
    compared), with the tolerance ``policy`` (a :class:`replay.tolerances.TolerancePolicy`) gave it."""
    # lazy: vkcap suite run imports this module, not replay.typed (with numpy)
    from .typed import field_tolerance

    out: dict[str, dict[str, Any]] = {}
    for f in frames:
        for c in f.comparisons:
            entry = out.get(c.uid)
            if entry is None:
                fields = c.extras.get("fields")
                entry = out[c.uid] = {
                    "uid": c.uid, "dtype": c.dtype, "status": IDENTICAL, "first_frame": None, "frames_beyond": 0,
                    "beyond_tolerance": 0, "differing": 0, "max_abs": 0.0, "max_ulp": 0,
                    "tolerance": "" if fields else tolerance_text(policy.for_resource(c.uid, c.dtype), c.dtype)}
                if fields:
                    entry["fields"] = [{"name": fd["name"], "dtype": fd["dtype"], "status": IDENTICAL,
                                        "tolerance": tolerance_text(field_tolerance(policy, c.uid, fd["name"], fd["dtype"]), fd["dtype"]),
                                        "first_frame": None, "frames_beyond": 0, "beyond_tolerance": 0, "differing": 0,
                                        "max_abs": 0.0, "max_ulp": 0} for fd in fields]
            _merge(entry, f.seq, c)
            by_name = {fd["name"]: fd for fd in c.extras.get("fields", ())}
            for field_entry in entry.get("fields", ()):
                seen = by_name.get(field_entry["name"])
                if seen is not None:
                    _merge(field_entry, f.seq, _Seen(seen))
    return list(out.values())


class _Seen:
    """A struct field's statistics (``extras["fields"]`` of a comparison) read as a comparison."""

    def __init__(self, fd: dict[str, Any]) -> None:
        self.status, self.beyond_tolerance, self.differing = fd["status"], fd["beyond_tolerance"], fd["differing"]
        self.max_abs, self.max_ulp = fd["max_abs"], fd["max_ulp"]


def _one(name: str, v: dict[str, Any]) -> str:
    """``out (float32): 12 beyond ulp 4, up to 9 ULP (1.9e-06 abs)``: one resource or field."""
    head = f"{name} ({v.get('dtype', '?')})"
    if v.get("status") == IDENTICAL:
        return f"{head}: identical"
    tolerance = v.get("tolerance") or "exact"
    if v.get("status") == DIVERGED:
        text = f"{head}: {v.get('beyond_tolerance', 0)} beyond {tolerance}"
        if v.get("frames_beyond", 0) > 1:
            text += f" (the worst of {v['frames_beyond']} frames)"
    else:
        text = f"{head}: {v.get('differing', 0)} differ, within {tolerance}"
    if v.get("max_ulp"):
        text += f", up to {v['max_ulp']} ULP ({v.get('max_abs', 0):.3g} abs)"
    elif v.get("max_abs"):
        text += f", up to {v['max_abs']:.6g} apart"
    return text


def resource_line(v: dict[str, Any]) -> str:
    """One resource's verdict as text; a struct's names each field that differs (``out.pos (float32):
    ...``), or says it is identical."""
    fields = [f for f in v.get("fields", ()) if f.get("status") != IDENTICAL]
    if not v.get("fields"):
        return _one(str(v.get("uid", "?")), v)
    if not fields:
        return f"{v.get('uid', '?')} ({v.get('dtype', '?')}): identical"
    return "; ".join(_one(f"{v.get('uid', '?')}.{f.get('name', '?')}", f) for f in fields)


def diverged_uids(resources: Iterable[dict[str, Any]]) -> list[str]:
    """The uids of the resources beyond their tolerance, in order."""
    return [str(v.get("uid")) for v in resources if v.get("status") == DIVERGED]


def _frames(frame: Any, uids: Iterable[str]) -> str:
    text = "" if frame is None else f" from frame {frame}"
    names = list(uids)
    return text + (f" in {', '.join(names)}" if names else "")


def explain(result: Any) -> str:
    """What a :class:`replay.suite.TraceResult` judged, in one line: what was expected (unless a pass),
    what happened (its first divergent frame and resources), and the resources that decided it."""
    outcome, expected = result.outcome, result.expected
    if outcome == "skipped":
        return "skipped here"
    diverged = diverged_uids(result.resources)
    happened = {"identical": "identical", "within": "within tolerance",
                "diverged": "diverged" + _frames(result.first_divergence, diverged),
                "crash": "crashed " + ("during set-up" if result.first_divergence is None else f"in frame {result.first_divergence}"),
                "error": "not replayed"}.get(outcome, outcome)
    wanted = {"pass": "", "flaky": "expected flaky", "skip": "expected a skip",
              "diverged": "expected divergence" + _frames(result.expected_frame, result.expected_resources),
              "crash": "expected crash" + ("" if result.expected_frame is None else f" in frame {result.expected_frame}")
              }.get(expected, "")
    text = f"{wanted}, {happened}" if wanted else happened
    shown = [v for v in result.resources if v.get("status") == (DIVERGED if diverged else WITHIN)]
    if shown:
        text += ": " + "; ".join(resource_line(v) for v in shown)
    elif outcome in ("crash", "error") and result.detail:
        text += f": {result.detail}"
    return text
