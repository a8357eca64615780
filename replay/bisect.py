"""``bisect``: the first divergent frame of a trace, then the first divergent dispatch inside it.

Checkpoints cut the trace into segments that replay on their own (each starts from its recorded
checkpoint). The search replays one segment per probe and asks whether it diverges. When a change
persists once it appears (a driver regression in a shader every frame runs), "segment k diverges" is
monotonic and a binary search needs about log2(segments) probes: that is the default, and its answer
is the first divergent segment *under that assumption*. When the search finds no divergent segment,
it scans the segments it did not probe, in order, so a lone one-off divergence is still found. With
``exhaustive=True`` every unprobed segment before the one found is probed too, which guarantees the
first divergent segment even when several one-off divergences exist, at the cost of more replays.
Probes are never repeated.

Inside the divergent segment, frames are compared one by one, and with a trace recorded with
``--dispatch-level`` every dispatch's output too, which names the first divergent dispatch without
another replay. Without dispatch-level snapshots and with a reference driver, the divergent frame is
run dispatch by dispatch on both drivers and the first dispatch whose outputs differ is named
(:mod:`replay.probe`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from capture.trace import Trace

from .compare import Comparison
from .replayer import FrameResult, ReplayOptions, ReplaySession, target_frames


@dataclass
class Segment:
    index: int
    first: int  # first frame (seq) of the segment
    last: int  # last frame (seq)


@dataclass
class BisectResult:
    segments: int
    replays: int = 0
    probes: list[tuple[int, bool]] = field(default_factory=list)  # (segment, diverged) in probe order
    frame: FrameResult | None = None
    resource: Comparison | None = None
    command: int | None = None  # command index of the first divergent dispatch
    dispatch_name: str | None = None  # its shader (or graph) uid
    dispatch_comparison: Comparison | None = None
    fallback_scan: bool = False
    exhaustive: bool = False
    side_by_side: bool = False  # the dispatch was found by running the frame on both drivers
    note: str = ""


def segments_of(trace: Trace) -> list[Segment]:
    """Frames grouped by checkpoint: each segment ends at a checkpoint (or at the last frame)."""
    seqs = [f.seq for f in trace.frames]
    cuts = sorted(c for c in trace.checkpoints if c >= 0 and c < seqs[-1])
    out, start = [], seqs[0]
    for c in cuts:
        if c >= start:
            out.append(Segment(len(out), start, c))
            start = c + 1
    out.append(Segment(len(out), start, seqs[-1]))
    return out


async def bisect_trace(trace: Trace, options: ReplayOptions, *, on_probe: Callable[[Segment, bool], None] | None = None,
                       exhaustive: bool = False, reference_icd: Path | None = None) -> BisectResult:
    """Find the first divergent frame and dispatch; see the module docstring."""
    segments = segments_of(trace)
    result = BisectResult(len(segments), exhaustive=exhaustive)
    outcomes: dict[int, FrameResult | None] = {}
    with ReplaySession(trace, options) as replay_session:
        return await _search(trace, options, replay_session, segments, result, outcomes, on_probe, exhaustive, reference_icd)


async def _search(trace: Trace, options: ReplayOptions, replay_session: ReplaySession, segments: list[Segment],
                  result: BisectResult, outcomes: dict[int, FrameResult | None],
                  on_probe: Callable[[Segment, bool], None] | None, exhaustive: bool, reference_icd: Path | None) -> BisectResult:
    async def probe(k: int) -> bool:
        if k not in outcomes:
            seg = segments[k]
            targets = target_frames(trace, seg.first, seg.last)
            report = await replay_session.run(targets, stop_at_first_divergence=True)
            result.replays += 1
            outcomes[k] = report.first_divergence
            result.probes.append((k, outcomes[k] is not None))
            if on_probe is not None:
                on_probe(seg, outcomes[k] is not None)
        return outcomes[k] is not None

    lo, hi, found = 0, len(segments) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        if await probe(mid):
            found, hi = mid, mid - 1
        else:
            lo = mid + 1
    if found is None:
        result.fallback_scan = True
        for k in range(len(segments)):
            if await probe(k):
                found = k
                break
    if found is None:
        result.note = "no divergence: every frame is within tolerance"
        return result
    if exhaustive:
        for k in range(found):
            if await probe(k):
                found = k
                break
    frame = outcomes[found]
    assert frame is not None
    result.frame = frame
    result.resource = next((c for c in frame.comparisons if c.diverged), None)
    first_dispatch = next(((cmd, c) for cmd, c in frame.dispatches if c.diverged), None)
    if first_dispatch is None and reference_icd is not None and not frame.dispatches:
        from .probe import capture_dispatches, capture_on_driver, first_divergent_dispatch

        live = await capture_dispatches(trace, options, frame.seq)
        reference = capture_on_driver(trace.path, frame.seq, reference_icd, options.device)
        result.replays += 2
        result.side_by_side = True
        first_dispatch = first_divergent_dispatch(live, reference, dict(options.dtypes))
    if first_dispatch is not None:
        result.command, result.dispatch_comparison = first_dispatch
        result.resource = result.resource or first_dispatch[1]
    return result


def dispatch_name(document: dict[str, Any], command: int) -> str | None:
    """The shader or graph uid of command ``command`` of a scenario document."""
    commands = document.get("commands", [])
    if not 0 <= command < len(commands):
        return None
    (kind, body), = commands[command].items()
    return body.get("shader_ref") or body.get("graph_ref")
