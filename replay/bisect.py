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
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from capture.trace import Trace

from .compare import Comparison
from .replayer import FrameResult, ReplayOptions, ReplaySession, target_frames

if TYPE_CHECKING:
    from .isolate import ProbeServer


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
    crash: str = ""  # the first divergent segment crashed the driver (isolated probes): what happened
    crash_frame: int | None = None
    child_processes: int = 0  # isolated probes: children started (one, plus one after each crash)
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


# A probe replays one segment and returns its first divergent frame (None: the segment is clean), or
# raises SegmentCrashed when the device work crashed.
Probe = Callable[[Segment], Awaitable["FrameResult | None"]]


class SegmentCrashed(Exception):
    """An isolated probe's child process crashed: a finding, counted as a divergence."""

    def __init__(self, line: str, frame: int | None) -> None:
        super().__init__(line)
        self.line, self.frame = line, frame


async def bisect_trace(trace: Trace, options: ReplayOptions, *, on_probe: Callable[[Segment, bool], None] | None = None,
                       exhaustive: bool = False, reference_icd: Path | None = None,
                       isolate_args: list[str] | None = None) -> BisectResult:
    """Find the first divergent frame and dispatch; see the module docstring.

    With ``isolate_args`` (the child's ``vkcap replay`` arguments, the trace first) the probes run in a
    child process (one for all of them, a new one after a crash) and a crash counts as a divergence;
    otherwise all probes share one Vulkan session in this process.
    """
    segments = segments_of(trace)
    result = BisectResult(len(segments), exhaustive=exhaustive)
    if isolate_args is not None:
        from .isolate import ProbeServer

        with ProbeServer(isolate_args) as server:
            try:
                return await _search(trace, options, _isolated_probe(server), segments, result, on_probe, exhaustive, reference_icd)
            finally:
                result.child_processes = server.children
    with ReplaySession(trace, options) as replay_session:
        async def probe(seg: Segment) -> FrameResult | None:
            report = await replay_session.run(target_frames(trace, seg.first, seg.last), stop_at_first_divergence=True)
            return report.first_divergence

        return await _search(trace, options, probe, segments, result, on_probe, exhaustive, reference_icd)


def _isolated_probe(server: "ProbeServer") -> Probe:
    async def probe(seg: Segment) -> FrameResult | None:
        import trio

        from .report import frames_from_document

        outcome = await trio.to_thread.run_sync(server.probe, seg.first, seg.last)
        if outcome.report is None:
            raise SegmentCrashed(outcome.crash_line(), outcome.crashed_frame)
        frames = frames_from_document(outcome.report["frames"])
        return next((f for f in frames if f.diverged), None)

    return probe


async def _search(trace: Trace, options: ReplayOptions, run_probe: Probe, segments: list[Segment],
                  result: BisectResult, on_probe: Callable[[Segment, bool], None] | None, exhaustive: bool,
                  reference_icd: Path | None) -> BisectResult:
    outcomes: dict[int, FrameResult | SegmentCrashed | None] = {}

    async def probe(k: int) -> bool:
        if k not in outcomes:
            seg = segments[k]
            try:
                outcomes[k] = await run_probe(seg)
            except SegmentCrashed as crash:
                outcomes[k] = crash
            result.replays += 1
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
    outcome = outcomes[found]
    if isinstance(outcome, SegmentCrashed):
        result.crash, result.crash_frame = outcome.line, outcome.frame
        return result
    assert outcome is not None
    frame = outcome
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
