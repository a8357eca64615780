"""``diff``: two recordings of the same scenario, frame by frame and resource by resource.

Two traces are of the same scenario when their portable scenario documents have the same resources
and commands (uids, kinds, bindings, sizes); the *content* of embedded files may differ (that is what
a shader edit is) and is listed. Their device fingerprints are compared field by field.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from capture.trace import FramesNotJudged, Trace
from vkcore.errors import TraceError

from .heatmap import draw_comparison, heatmap_name
from .reading import dtype_name, identical_in, reading
from .results import Comparison, FrameResult
from .tolerances import TolerancePolicy, resource_shape
from .typed import compare_as

# Fields of a resource that may differ between two recordings of the same scenario.
CONTENT_FIELDS = {"src"}


@dataclass
class DiffReport:
    frames: list[FrameResult] = field(default_factory=list)
    fingerprint_changes: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    file_changes: list[str] = field(default_factory=list)
    only_in_a: list[int] = field(default_factory=list)
    only_in_b: list[int] = field(default_factory=list)

    @property
    def diverged(self) -> bool:
        return any(f.diverged for f in self.frames) or bool(self.only_in_a or self.only_in_b)


def _structure(doc: dict[str, Any]) -> dict[str, Any]:
    """The scenario without content-bearing paths: what must match for two traces to be comparable."""
    strip = json.loads(json.dumps(doc))
    for item in strip.get("resources", []):
        for body in item.values():
            if isinstance(body, dict):
                for f in CONTENT_FIELDS:
                    body.pop(f, None)
    return strip


def _first_difference(a: Any, b: Any, place: str = "") -> str:
    if type(a) is not type(b):
        return place or "the root"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{place}.{k}".lstrip(".")
            if a[k] != b[k]:
                return _first_difference(a[k], b[k], f"{place}.{k}".lstrip("."))
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{place} (length {len(a)} vs {len(b)})"
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return _first_difference(x, y, f"{place}[{i}]")
    return place or "the root"


def check_same_scenario(a: Trace, b: Trace) -> None:
    """Raise :class:`TraceError` naming the first structural difference when the scenarios differ."""
    da, db = _structure(json.loads(a.portable_json)), _structure(json.loads(b.portable_json))
    if da != db:
        raise TraceError(
            f"{a.path} and {b.path} record different scenarios: they first differ at {_first_difference(da, db)}"
        )


def diff_traces(a: Trace, b: Trace, policy: TolerancePolicy,
                shapes: Iterable[tuple[str, tuple[int, ...]]] = (), pictures: Path | None = None,
                on_frame: Callable[[int, int], None] | None = None) -> DiffReport:
    """Compare every snapshot the two traces share: at each frame boundary and, where both were
    recorded at dispatch level, after each dispatch (or graph segment). Indices are reported in the
    resources' shapes (``shapes``: ``--shape`` for raw buffers), as replay reports them. With
    ``pictures`` (a folder: ``--html``), each diverged 2-d+ resource is drawn there, A as recorded and
    B as live (:func:`replay.heatmap.draw_comparison`). ``on_frame(seq, total)`` is told of each shared
    frame once it is compared (the terminal's progress)."""
    check_same_scenario(a, b)
    shapes = tuple(shapes)

    def compare_keys(uid: str, key_a: str, key_b: str, what: str, name: str) -> Comparison:
        how = reading(a, uid, policy)  # A's view: both record one scenario (checked above)
        if key_a == key_b:  # equal content keys: equal bytes, nothing to read
            return identical_in(uid, a.reader.blob_info(key_a).raw_len, how)
        blob_a, blob_b, shape = a.blob(key_a, what=what), b.blob(key_b, what=what), resource_shape(a, uid, shapes)
        result = compare_as(uid, blob_a, blob_b, how, policy, shape=shape, top=policy.top)
        if pictures is not None and result.diverged and not result.size_mismatch:
            result.extras.update(draw_comparison(pictures, name, blob_a, bytes(blob_b), dtype_name(how), shape, what, sides=True))
        return result

    report = DiffReport()
    for key in sorted(set(a.fingerprint) | set(b.fingerprint)):
        if a.fingerprint.get(key) != b.fingerprint.get(key):
            report.fingerprint_changes[key] = (a.fingerprint.get(key), b.fingerprint.get(key))
    for name in sorted(set(a.files) | set(b.files)):
        ka, kb = a.files.get(name, (None, None, 0))[1], b.files.get(name, (None, None, 0))[1]
        if ka != kb:
            report.file_changes.append(name)
    frames_a = {f.seq: f for f in a.frames}
    frames_b = {f.seq: f for f in b.frames}
    report.only_in_a = sorted(set(frames_a) - set(frames_b))
    report.only_in_b = sorted(set(frames_b) - set(frames_a))
    shared = sorted(set(frames_a) & set(frames_b))
    for seq in shared:
        fa, fb = frames_a[seq], frames_b[seq]
        result = FrameResult(seq, fa.frame_id, [])
        for uid in fa.snapshots:
            if uid in fb.snapshots:
                result.comparisons.append(compare_keys(uid, fa.snapshots[uid], fb.snapshots[uid],
                                                       f"frame {seq}, resource '{uid}'", heatmap_name(seq, uid)))
        in_b = {(d.command, d.segment, d.uid): d for d in fb.dispatches}
        for d in fa.dispatches:
            other = in_b.get((d.command, d.segment, d.uid))
            if other is None:
                continue
            c = compare_keys(d.uid, d.blob, other.blob, f"frame {seq}, command {d.command}, resource '{d.uid}'",
                             heatmap_name(seq, f"{d.uid}-{d.command}"))
            if d.segment is not None:
                c.extras.update(segment=d.segment, module=d.module)
            result.dispatches.append((d.command, c))
        report.frames.append(result)
        if on_frame is not None:
            on_frame(seq, len(shared))
    for trace in (a, b):  # a frame lost to damage is never silently left out: the diff fails, naming it
        not_judged = trace.not_judged()
        if not_judged:
            first = next((f.seq for f in report.frames if f.diverged), None)
            found = f"first divergence at frame {first}" if first is not None else "all within tolerance"
            raise FramesNotJudged(f"{not_judged}; of the {len(report.frames)} frame(s) compared: {found}", file=trace.path)
    return report
