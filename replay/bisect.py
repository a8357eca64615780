"""``bisect``: the first divergent frame of a trace, then the first divergent dispatch inside it.

Checkpoints cut the trace into segments that replay on their own (each starts from its recorded
checkpoint). The search asks of segments whether they diverge. When a change persists once it
appears (a driver regression in a shader every frame runs), "segment k diverges" is monotonic and a
binary search needs about log2(segments) probes: that is the default, and its answer is the first
divergent segment *under that assumption*.

A probe is cheap when the trace holds the complete state before a segment's last frame (a frame whose
boundary captured every resource a checkpoint holds, as with ``--capture all`` or a boundary naming
every written resource): then the search replays that last frame alone, from that state, which under
the same assumption answers for the whole segment. The segment found is then replayed whole, from its
checkpoint, to name its first divergent frame. Without such a state a probe replays the whole segment.

When the search finds no divergent segment, it replays whole, in order, every segment not yet replayed
whole, so a lone one-off divergence is still found. With ``exhaustive=True`` every earlier segment is
replayed whole too, which guarantees the first divergent segment even when several one-off divergences
exist, at the cost of more replays. No replay is ever repeated.

Inside the divergent segment, frames are compared one by one, and with a trace recorded with
``--dispatch-level`` every dispatch's output too, which names the first divergent dispatch without
another replay. Without dispatch-level snapshots the divergent frame is replayed twice from its
checkpoint, dispatch by dispatch, as a reference (the recorded shaders when shaders are replaced, else
a reference driver, else the recording device when this machine has it) and as the candidate, and the
first dispatch whose outputs differ is named (:mod:`replay.probe`), with a graph dispatch's segment: the
two replays snapshot what ``--dispatch-level`` would have. Only where no reference side exists
is the dispatch left unnamed, with the reason.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from capture.trace import FramesNotJudged, Trace

from .options import ReplayOptions
from .reading import effective_policy
from .report import frames_from_document
from .results import Comparison, FrameResult

if TYPE_CHECKING:
    from .isolate import ProbeServer


@dataclass
class Segment:
    index: int
    first: int  # first frame (seq) of the segment
    last: int  # last frame (seq)
    last_alone: bool = False  # the trace holds the complete state before ``last`` (and ``last > first``)


@dataclass(frozen=True)
class Span:
    """One replay: frames ``first..last`` from the recorded state after frame ``start``."""

    segment: int
    first: int
    last: int
    start: int
    whole: bool  # the whole segment from its checkpoint, or its last frame alone


@dataclass
class BisectResult:
    segments: int
    replays: int = 0
    probes: list[tuple[Span, bool]] = field(default_factory=list)  # (what was replayed, diverged) in order
    frame: FrameResult | None = None
    resource: Comparison | None = None
    command: int | None = None  # command index of the first divergent dispatch
    dispatch_name: str | None = None  # its shader (or graph) uid
    dispatch_comparison: Comparison | None = None
    fallback_scan: bool = False
    exhaustive: bool = False
    side_by_side: bool = False  # the frame was replayed twice, dispatch by dispatch (replay.probe)
    found_by: str = ""  # how: "replaying frame 50 with the recorded shaders and with the replacement"
    unnamed: str = ""  # why no dispatch is named, when the frame diverged but none is
    reference_side: str = ""  # the side-by-side run's reference ("the recorded shaders on this device")
    reference_outputs: dict[str, bytes] = field(default_factory=dict)  # its outputs of the dispatch named
    crash: str = ""  # the first divergent segment crashed the driver (isolated probes): what happened
    crash_frame: int | None = None
    child_processes: int = 0  # isolated probes: children started (one, plus one after each crash)
    note: str = ""

    @property
    def frames_executed(self) -> int:
        """Frames the probes asked for, at most (a probe stops at its first divergent frame)."""
        return sum(span.last - span.start for span, _ in self.probes)


def segments_of(trace: Trace) -> list[Segment]:
    """Frames grouped by checkpoint: each segment ends at a checkpoint (or at the last frame)."""
    seqs = [f.seq for f in trace.frames]
    cuts = sorted(c for c in trace.checkpoints if c >= 0 and c < seqs[-1])
    bounds, start = [], seqs[0]
    for c in cuts:
        if c >= start:
            bounds.append((start, c))
            start = c + 1
    bounds.append((start, seqs[-1]))
    return [Segment(k, first, last, last > first and trace.state_after(last - 1) is not None)
            for k, (first, last) in enumerate(bounds)]


# A probe replays a span and returns its first divergent frame (None: clean), or raises
# SegmentCrashed when the device work crashed.
Probe = Callable[[Span], "FrameResult | None"]


class SegmentCrashed(Exception):
    """An isolated probe's child process crashed: a finding, counted as a divergence."""

    def __init__(self, line: str, frame: int | None) -> None:
        super().__init__(line)
        self.line, self.frame = line, frame


def bisect_trace(trace: Trace, options: ReplayOptions, *, on_probe: Callable[[Span, bool], None] | None = None,
                 exhaustive: bool = False, reference_icd: Path | None = None,
                 probe_server: "ProbeServer | None" = None,
                 loader_env: dict[str, str | None] | None = None,
                 on_probe_start: Callable[[Span], None] | None = None) -> BisectResult:
    """Find the first divergent frame and dispatch; see the module docstring.

    With ``probe_server`` the probes run in its child process (one for all of them, a new one after a
    crash) and a crash counts as a divergence; a child that refuses its input (exits 2: a shader, uid
    or device it cannot use) is no crash: its error is raised as
    :class:`~replay.isolate.ChildInputError` (exit 2), as the same input raises it without isolation,
    and the search ends without a result. This process loads neither Vulkan nor trio nor
    numpy unless the dispatch must be found side by side. Without ``probe_server`` all
    probes share one Vulkan session in this process, each probe one ``trio.run``.

    Without dispatch-level snapshots the frame found is replayed side by side (:mod:`replay.probe`):
    ``reference_icd`` is a known-good driver; ``loader_env``, the Vulkan loader's variables as they were
    before ``--icd`` (None: do not look for the recording device). ``result.found_by`` says how the
    dispatch was found, ``result.unnamed`` why it was not. ``on_probe_start`` is told of each probe
    before it runs, ``on_probe`` of its outcome after.
    """
    not_judged = trace.not_judged()
    if not_judged:  # a lost frame may hold the first divergence, and probes replay frame ranges whole
        raise FramesNotJudged(f"{not_judged}; bisect needs every frame (replay judges the others)", file=trace.path)
    segments = segments_of(trace)
    result = BisectResult(len(segments), exhaustive=exhaustive)
    if probe_server is not None:
        try:
            return _search(trace, options, _isolated_probe(probe_server, options), segments, result, on_probe,
                           exhaustive, reference_icd, loader_env, on_probe_start)
        finally:
            result.child_processes = probe_server.children
    # lazy: vkcap bisect imports this module, not replay.replayer, trio (with attr, attrs, idna, outcome, sniffio, sortedcontainers, vulkan)
    import trio

    from .replayer import ReplaySession, target_frames

    with ReplaySession(trace, options) as replay_session:
        def probe(span: Span) -> FrameResult | None:
            report = trio.run(lambda: replay_session.run(target_frames(trace, span.first, span.last),
                                                         stop_at_first_divergence=True, start=span.start))
            return report.first_divergence

        return _search(trace, options, probe, segments, result, on_probe, exhaustive, reference_icd, loader_env,
                       on_probe_start)


def _isolated_probe(server: "ProbeServer", options: ReplayOptions) -> Probe:
    def probe(span: Span) -> FrameResult | None:
        outcome = server.probe(options, span.first, span.last, span.start)
        if outcome.report is None:
            raise SegmentCrashed(outcome.crash_line(), outcome.crashed_frame)
        frames = frames_from_document(outcome.report["frames"])
        return next((f for f in frames if f.diverged), None)

    return probe


def _search(trace: Trace, options: ReplayOptions, run_probe: Probe, segments: list[Segment],
            result: BisectResult, on_probe: Callable[[Span, bool], None] | None, exhaustive: bool,
            reference_icd: Path | None, loader_env: dict[str, str | None] | None,
            on_probe_start: Callable[[Span], None] | None = None) -> BisectResult:
    outcomes: dict[Span, FrameResult | SegmentCrashed | None] = {}

    def replay(span: Span) -> FrameResult | SegmentCrashed | None:
        if span not in outcomes:
            if on_probe_start is not None:
                on_probe_start(span)
            try:
                outcomes[span] = run_probe(span)
            except SegmentCrashed as crash:
                outcomes[span] = crash
            result.replays += 1
            result.probes.append((span, outcomes[span] is not None))
            if on_probe is not None:
                on_probe(span, outcomes[span] is not None)
        return outcomes[span]

    def whole(k: int) -> Span:
        seg = segments[k]
        return Span(k, seg.first, seg.last, seg.first - 1, True)

    def quick(k: int) -> Span:
        seg = segments[k]
        return Span(k, seg.last, seg.last, seg.last - 1, False) if seg.last_alone else whole(k)

    lo, hi, found = 0, len(segments) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        if replay(quick(mid)) is not None:
            found, hi = mid, mid - 1
        else:
            lo = mid + 1
    if found is not None and replay(whole(found)) is None:
        # Its last frame diverged from the state recorded before it, but not after the whole segment
        # (a result that varies between runs): that frame is the answer.
        outcomes[whole(found)] = outcomes[quick(found)]
    if found is None:
        result.fallback_scan = True
        for k in range(len(segments)):
            if replay(whole(k)) is not None:
                found = k
                break
    if found is None:
        result.note = "no divergence: every frame is within tolerance"
        return result
    if exhaustive:
        for k in range(found):
            if replay(whole(k)) is not None:
                found = k
                break
    outcome = outcomes[whole(found)]
    if isinstance(outcome, SegmentCrashed):
        result.crash, result.crash_frame = outcome.line, outcome.frame
        return result
    assert outcome is not None
    frame = outcome
    result.frame = frame
    result.resource = next((c for c in frame.comparisons if c.diverged), None)
    first_dispatch = next(((cmd, c) for cmd, c in frame.dispatches if c.diverged), None)
    if first_dispatch is None and not frame.dispatches:
        first_dispatch = _side_by_side(trace, options, frame.seq, result, reference_icd, loader_env)
    if first_dispatch is not None:
        result.command, result.dispatch_comparison = first_dispatch
        result.resource = result.resource or first_dispatch[1]
    return result


def _side_by_side(trace: Trace, options: ReplayOptions, seq: int, result: BisectResult,
                  reference_icd: Path | None, loader_env: dict[str, str | None] | None) -> tuple[int, Comparison] | None:
    """Frame ``seq`` replayed dispatch by dispatch as the reference and as the candidate; the first
    dispatch whose outputs differ (None, with ``result.unnamed`` saying why, when there is none)."""
    # lazy: vkcap bisect imports this module, not replay.probe (with numpy, vulkan)
    from .probe import ReferenceSide, first_divergent_dispatch, live_fingerprint, reference_side, trio_capture

    side = reference_side(trace, options, reference_icd, loader_env,
                          None if options.replace_shaders or reference_icd else live_fingerprint(options))
    if not isinstance(side, ReferenceSide):
        result.unnamed = side
        return None
    reference = side.capture(seq)
    if reference is None:
        result.unnamed = (f"the recording device ({trace.fingerprint.get('device_name', '?')}) is not on this machine: "
                          "no reference side to replay the frame against")
        return None
    live = trio_capture(trace, options, seq)
    result.replays += 2
    result.side_by_side = True
    result.found_by = f"replaying frame {seq} {side.words}"
    found = first_divergent_dispatch(live, reference, trace, effective_policy(options))
    result.reference_side = side.reference
    if found is not None:
        segment = found[1].extras.get("segment")  # a graph's: what the reference wrote after that segment
        result.reference_outputs = {shot.uid: bytes(data) for shot, data in reference.items()
                                    if shot.command == found[0] and shot.segment == segment}
    if found is None:
        result.unnamed = (f"replaying frame {seq} {side.words}, every dispatch wrote the same bytes "
                          "(the frame diverges from the recording only)")
    return found


def dispatch_name(document: dict[str, Any], command: int) -> str | None:
    """The shader or graph uid of command ``command`` of a scenario document."""
    commands = document.get("commands", [])
    if not 0 <= command < len(commands):
        return None
    (kind, body), = commands[command].items()
    return body.get("shader_ref") or body.get("graph_ref")
