"""``trim``: a new, self-contained trace holding frames A..B of another, starting from the state before A.

Guarantees of :func:`trim_trace` (the format is docs/trace-format.md's; "Trimmed traces" there says what
changes):

- **Self-contained.** OUT holds the source's scenario (original and portable), every embedded file
  (shaders, includes, inputs, VGF graphs), the SPIR-V that ran, the device fingerprint and the resource
  descriptions, copied as they are: replaying OUT reads nothing but OUT.
- **Initial state.** OUT's checkpoint -1 is the state of every resource just before frame A: the source's
  checkpoint -1 overlaid with its state after frame A-1. When the source holds that state (A is its first
  frame, a checkpoint after frame A-1, or a boundary of frame A-1 that captured every checkpointed
  resource) it is copied. Otherwise it is rebuilt on the device through the replay path (a
  :class:`replay.replayer.ReplaySession`): restore the latest state the source holds before A, execute
  the frames up to A-1, and read back every resource a checkpoint holds after frame A-1, as the
  recorder reads a checkpoint. Every snapshot the source recorded for those frames must come back
  byte for byte (same content key), or nothing is written (:class:`StateNotReproduced`, exit 1): the
  rebuilt state then is the recorded one as far as the recording can tell, never this device's own.
- **Same frames, same numbers.** Frames A..B keep their ``frame`` records unchanged (sequence numbers,
  pass, index, frame_id, boundary and dispatch-level snapshots), and so do the source's checkpoints after
  frames A..B. Frames keep their numbers because a frame's number says which frame of the scenario
  runs: a replay of OUT executes and reports frames A..B, as a replay of those frames of the source does.
  OUT also holds a checkpoint after frame A-1 (the state before A again, for the resources checkpoints
  hold), so every reader that seeks frame N from "the latest checkpoint before N" starts at A-1 or later,
  never at frame 0.
- **Provenance.** OUT's ``header`` is the source's, plus ``trimmed_from``: the source's path, size and
  xxh3-128 of its bytes, the range, how the initial state was obtained, and the trim's own date, vkcap
  version and command line.
- **Minimal.** Blobs are content-addressed and copied as they are stored (no recompression, each checked
  against its key first); OUT holds exactly the blobs its records name.
- **Atomic.** OUT is written by a :class:`~capture.writer.TraceWriter` (a partial file renamed onto OUT
  once complete): a failed or interrupted trim leaves whatever was at OUT untouched and no partial file.
- **Refusals.** Bad input is a one-line :class:`vkcore.errors.VkcapError` naming the file, exit 2, before
  anything is written: a malformed range, B < A, a frame outside the trace, OUT naming the source, a
  damaged source lacking a record OUT needs (which frame or checkpoint), a damaged blob, an OUT that exists
  and is not a vkcap trace. The partial file of an earlier trim to OUT that was killed is removed when
  provably a trim's and abandoned; any other partial file of OUT (a killed recording's, whose frames are
  recoverable) is named in a warning (:mod:`capture.trace_target`).
"""
from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from vkcore.bounded_numbers import BOUNDS, check_number
from vkcore.commands import kind_of
from vkcore.errors import EXIT_FAILURE, TraceError, UsageError, VkcapError
from vkcore.outputs import check_output_target, same_file
from vkcore.version import vkcap_version

from capture.clock import creation_time
from capture.format import kinds, records
from capture.format.errors import ContainerError
from capture.trace import REPLAY_KINDS, FrameRecord, Trace, seq_ranges
from capture.trace_target import check_replaceable, clear_partials
from capture.writer import TraceWriter

from .options import ReplayOptions
from .replayer import ReplaySession
from .results import DIVERGED, IDENTICAL, Comparison

if TYPE_CHECKING:
    from .replayer import LiveSnapshot

#: The header key a trimmed trace's provenance is under (docs/trace-format.md, "Trimmed traces").
TRIMMED_FROM = "trimmed_from"
#: Records OUT copies; damage to one of these (beyond the essential ones) makes trimming impossible.
NEEDED_KINDS: frozenset[str] = REPLAY_KINDS | {kinds.FINGERPRINT}
_PREAMBLE_KINDS = (kinds.HEADER, kinds.SCENARIO, kinds.FILE, kinds.SPIRV, kinds.FINGERPRINT, kinds.RESOURCES,
                   kinds.VIEWS)
_HASH_CHUNK = 8 << 20
_RANGE = re.compile(r"([0-9]+)(?:(-)([0-9]*))?")


class StateNotReproduced(VkcapError):
    """Replaying up to frame A-1 did not give back what the source recorded: the state before A cannot be
    rebuilt faithfully on this device (a failure while running, exit 1)."""

    exit_code = EXIT_FAILURE


@dataclass(frozen=True)
class FrameSpan:
    """``--frames`` as given: ``first`` to ``last`` inclusive (``last`` None: to the end)."""

    text: str
    first: int
    last: int | None


@dataclass
class TrimResult:
    source: Path
    out: Path
    first: int
    last: int
    state: str  # how OUT's initial state was obtained: initial, checkpoint, frame or replayed
    replayed_from: int | None = None  # the state the replay started from (after this frame; -1: initial)
    device: str = ""  # the device the replay ran on
    source_bytes: int = 0
    out_bytes: int = 0
    blobs: int = 0
    checkpoints: list[int] = field(default_factory=list)  # OUT's checkpoints after frames

    @property
    def frames(self) -> int:
        return self.last - self.first + 1

    def describe_state(self) -> str:
        """How the initial state was obtained, in words."""
        return state_words(self.state, self.first, self.replayed_from, self.device)


def state_words(state: str, first: int, replayed_from: int | None, device: str) -> str:
    """How the state before frame ``first`` was obtained (``state``: a ``trimmed_from`` state), in words."""
    before = first - 1
    if state == "initial":
        return "the trace's initial state"
    if state == "checkpoint":
        return f"copied from the checkpoint after frame {before}"
    if state == "frame":
        return f"copied from frame {before}'s snapshots"
    if state == "replayed" and isinstance(replayed_from, int):
        start = "the initial state" if replayed_from == -1 else f"the state after frame {replayed_from}"
        frames = f"frame {before}" if replayed_from == before - 1 else f"frames {replayed_from + 1}-{before}"
        return f"rebuilt by replaying {frames} from {start} on {device}, every snapshot identical to the recording"
    return f"obtained as '{state}'"


def describe_provenance(provenance: Any) -> str:
    """A trimmed trace's ``trimmed_from`` in words, for ``vkcap info``; tolerant of a damaged or newer value."""
    if not isinstance(provenance, dict):
        return "yes (no details)"
    frames = provenance.get("frames")
    if not (isinstance(frames, list) and len(frames) == 2 and all(isinstance(f, int) for f in frames)):
        return f"from {provenance.get('path')}"
    state = state_words(str(provenance.get("state")), frames[0], provenance.get("replayed_from"),
                        str(provenance.get("device")))
    return (f"frames {frames[0]}-{frames[1]} of {provenance.get('path')} ({provenance.get('size')} bytes, "
            f"xxh3-128 {provenance.get('xxh3_128')}) on {provenance.get('created')}; initial state: {state}")


def parse_frames(text: str, trace: Path) -> FrameSpan:
    """``A-B``, ``A-`` (to the last frame) or ``A``; :class:`UsageError` naming ``trace`` and the flag."""
    place = f"--frames {text}"
    match = _RANGE.fullmatch(text)
    if match is None:
        raise UsageError("expected A-B, A- or A (frame numbers, 0 or more)", file=trace, place=place)
    first = _frame_number(match.group(1), trace, place)
    if match.group(2) is None:
        return FrameSpan(text, first, first)
    if not match.group(3):
        return FrameSpan(text, first, None)
    last = _frame_number(match.group(3), trace, place)
    if last < first:
        raise UsageError(f"the last frame ({last}) comes before the first ({first})", file=trace, place=place)
    return FrameSpan(text, first, last)


def _frame_number(digits: str, trace: Path, place: str) -> int:
    """A frame number within the bounds every command uses (vkcore.bounded_numbers: ``frame``); digits too
    many for ``int()`` (Python refuses over 4300) are out of those bounds anyway."""
    if len(digits) > 18:
        raise UsageError(f"must be {BOUNDS['frame'].wanted}, got a number of {len(digits)} digits", file=trace,
                         place=place if len(place) <= 60 else place[:57] + "...")
    return int(check_number("frame", int(digits), file=str(trace), place=place))


def check_out(source: Path, out: Path) -> None:
    """Refuse, before any work, an OUT that is the source itself, that cannot be written (see
    :func:`vkcore.outputs.check_output_target`), or that exists and is not a vkcap trace (see
    :func:`capture.trace_target.check_replaceable`); then deal with the partial files an interrupted
    trim or record to OUT left (:func:`capture.trace_target.clear_partials`)."""
    if same_file(source, out):
        raise UsageError(f"is the trace being trimmed ({source}): write the trimmed trace to another file",
                         file=out, place="-o")
    check_output_target(out, place="-o")
    if os.path.exists(out):
        check_replaceable(out, place="-o")
    clear_partials(out)


def resolve_span(trace: Trace, span: FrameSpan) -> tuple[int, int]:
    """(first, last) of ``span`` in ``trace``; :class:`UsageError` when a frame is outside the trace's frames."""
    seqs = sorted(trace.by_seq)
    if not seqs:
        raise TraceError("the trace holds no complete frame", file=trace.path)
    last = seqs[-1] if span.last is None else span.last
    for seq in (span.first, last):
        if not seqs[0] <= seq <= seqs[-1]:
            raise UsageError(f"frame {seq} is not in the trace (it has frames {seq_ranges(seqs)})",
                             file=trace.path, place=f"--frames {span.text}")
    return span.first, last


def check_records(trace: Trace, first: int, last: int) -> None:
    """Refuse (:class:`TraceError`, naming what is missing) a damaged trace that lacks a record OUT needs:
    its embedded files, SPIR-V or fingerprint, its initial state, a frame of first..last, or a checkpoint
    its recording took after one of those frames."""
    purpose = f"trim frames {first}-{last}"
    trace.require_intact(NEEDED_KINDS, purpose)

    def lost(kind: str, after: int | None = None) -> str:
        """` (damaged ... record at offset ...)`: the damaged record of ``kind`` read right after frame
        ``after``, else the first of that kind; "" when none was damaged."""
        same = [d for d in trace.damaged if d.kind == kind]
        why = [d for d in same if d.after_frame == after] or same
        return f" ({why[0].describe()})" if why else ""

    if -1 not in trace.checkpoints:
        raise TraceError(f"cannot {purpose}: checkpoint -1 (the initial state) is missing{lost(kinds.CHECKPOINT)}",
                         file=trace.path)
    for seq in range(first, last + 1):
        if seq not in trace.by_seq:
            raise TraceError(f"cannot {purpose}: frame {seq} is missing{lost(kinds.FRAME, seq - 1)}", file=trace.path)
    every = trace.header.get("checkpoint_every")
    if isinstance(every, int) and not isinstance(every, bool) and every > 0:
        for seq in range(first, last + 1):
            if (seq + 1) % every == 0 and seq not in trace.checkpoints:
                raise TraceError(f"cannot {purpose}: the checkpoint after frame {seq} is missing"
                                 f"{lost(kinds.CHECKPOINT, seq - 1)}", file=trace.path)


def checkpointed(trace: Trace) -> list[str] | None:
    """The resources a checkpoint after a frame holds (every resource a dispatch binds), in the order the
    recorder wrote them; None when the trace has no such checkpoint to tell."""
    return next((list(state) for seq, state in sorted(trace.checkpoints.items()) if seq >= 0), None)


def latest_state_before(trace: Trace, seq: int) -> int:
    """The latest frame ``s < seq`` whose complete state after it the trace holds (-1: the initial state).
    A trace that starts after frame 0 (a trimmed one) must hold the state before its first frame: its
    checkpoint -1 is that state, so no replay can start before it."""
    floor = min(trace.by_seq) - 1  # -1 for a recording
    for s in range(seq - 1, floor - 1, -1):
        if s == -1 or trace.state_after(s) is not None:
            return s
    raise TraceError(f"cannot rebuild the state before frame {seq}: the trace starts at frame {floor + 1} and its "
                     f"checkpoint after frame {floor} is missing", file=trace.path)


def source_hash(path: Path) -> str:
    """xxh3-128 of a file's bytes, as 32 hex digits (``xxhsum -H2`` prints the same)."""
    return records.file_content_key(path, chunk=_HASH_CHUNK).hex()


class _Hasher(threading.Thread):
    """:func:`source_hash` in a background thread: it reads the source while the state is rebuilt."""

    def __init__(self, path: Path) -> None:
        super().__init__(name="vkcap-trim-hash", daemon=True)
        self.path = path
        self.digest = ""
        self.error: OSError | None = None
        self.start()

    def run(self) -> None:
        try:
            self.digest = source_hash(self.path)
        except OSError as exc:
            self.error = exc

    def result(self) -> str:
        self.join()
        if self.error is not None:
            raise TraceError(f"cannot read the trace: {self.error.strerror or self.error}", file=self.path)
        return self.digest


def trim_trace(source: Path, out: Path, span: FrameSpan, *, replay_options: ReplayOptions | None = None,
               argv: Iterable[str] = ()) -> TrimResult:
    """Write frames ``span`` of the trace ``source`` as the new trace ``out``; see the module docstring.
    ``replay_options`` choose the device (and driver, emulation layers, frame timeout) when the initial
    state must be rebuilt on one; their frames, shaders and tolerances are not used. ``argv`` is recorded
    in ``trimmed_from``."""
    check_out(source, out)
    with Trace.open(source) as trace:
        first, last = resolve_span(trace, span)
        check_records(trace, first, last)
        hasher = _Hasher(source)
        result = TrimResult(source, out, first, last, state="initial")
        base = dict(trace.checkpoints[-1])  # uid -> key: the state before `first`, being built
        fresh: dict[str, bytes] = {}  # uid -> bytes rebuilt on the device (not in the source)
        before = first - 1
        held = trace.state_after(before) if before >= 0 else None
        order = checkpointed(trace)
        if before >= 0 and held is not None:
            base.update(held)
            result.state = "checkpoint" if before in trace.checkpoints else "frame"
            order = order or list(held)
        elif before >= 0:
            start = latest_state_before(trace, first)
            if start >= 0:
                base.update(trace.state_after(start) or {})
            fresh, order, result.device = rebuild_state(trace, start, before, order, replay_options, source)
            result.state, result.replayed_from = "replayed", start
        digest = hasher.result()
        provenance = {
            "path": str(source.resolve()), "size": source.stat().st_size, "xxh3_128": digest,
            "frames": [first, last], "state": result.state,
            **({"replayed_from": result.replayed_from, "device": result.device} if result.state == "replayed" else {}),
            "created": creation_time(),
            "vkcap_version": vkcap_version(), "argv": list(argv),
        }
        previous = trace.header.get(TRIMMED_FROM)
        if previous is not None:
            provenance["source_trimmed_from"] = previous
        _write(trace, out, first, last, base, fresh, order or [], provenance, result)
    result.source_bytes = source.stat().st_size
    result.out_bytes = out.stat().st_size
    return result


def rebuild_state(trace: Trace, start: int, before: int, order: list[str] | None,
                  options: ReplayOptions | None, source: Path) -> tuple[dict[str, bytes], list[str], str]:
    """Replay frames ``start+1..before`` from the state the trace holds after ``start`` and read back
    every checkpointed resource after frame ``before``: (uid -> bytes, the checkpointed uids in order,
    the device's name). The resources no command can write are not read back (they hold the initial
    state, which the caller has). Every recorded boundary snapshot of those frames must come back
    identical (:class:`StateNotReproduced` otherwise)."""
    # lazy: trio's C extensions load after the Vulkan driver's libraries, not behind them on glibc's loader lock (at runner.py's top: vkcap run +12 ms)
    import trio

    options = replace(options or ReplayOptions(trace=source), trace=source, dispatch_level=False,
                      replace_shaders=(), first=None, last=None)
    with ReplaySession(trace, options) as replay_session:
        session, plan = replay_session.session, replay_session.plan
        assert session is not None and session.resources is not None
        if order is None:  # no checkpoint after a frame says which: those the recorder would keep
            bound = {b.resource_ref for cmd in plan.scenario.commands for b in kind_of(cmd).bindings(cmd)}
            order = [uid for uid in session.resources.resources if uid in bound]
        unwritable = session.unwritable_resources()
        wanted = frozenset(uid for uid in order if uid not in unwritable)
        targets = {seq: replace(trace.by_seq[seq], dispatches=()) for seq in range(start + 1, before + 1)
                   if seq in trace.by_seq}
        count = len(plan.frames)
        record = targets.get(before) or FrameRecord(before, before // count, before % count, before % count, {})
        # the resources to read back, beside what frame `before` recorded (compared too); "" = nothing recorded
        targets[before] = replace(record, snapshots={**record.snapshots, **{u: "" for u in order if u in wanted
                                                                            and u not in record.snapshots}})

        judge = _StateReader(before, wanted)
        report = trio.run(lambda: replay_session.run(targets, judge=judge, stop_at_first_divergence=True, start=start))
        device = str(report.device.get("device_name", "this device"))
    captured, differed = judge.captured, judge.differed
    if differed:
        seq, uid = min(differed)
        frames = f"frame {before}" if start == before - 1 else f"frames {start + 1}-{before}"
        starts = "the initial state" if start == -1 else f"the state after frame {start}"
        usable = [c + 1 for c in sorted(trace.checkpoints) if c + 1 in trace.by_seq]
        raise StateNotReproduced(
            f"cannot rebuild the state before frame {before + 1}: replaying {frames} from {starts} on {device} "
            f"gave a '{uid}' different from the recording at frame {seq}; trim from a frame right after a "
            f"checkpoint (frames {seq_ranges(usable)}), or on the device that recorded the trace", file=trace.path)
    missing = wanted - captured.keys()
    if missing:  # pragma: no cover - the replay reads back every resource asked for
        raise StateNotReproduced(f"the replay did not read back {', '.join(sorted(missing))}", file=trace.path)
    return captured, order, device


class _StateReader:
    """Trim's judge (:class:`replay.replayer.Judge`): keeps the bytes of the resources ``wanted`` after frame
    ``before``, and notes each snapshot that differs from its recorded one (by content key)."""

    def __init__(self, before: int, wanted: frozenset[str]) -> None:
        self.before = before
        self.wanted = wanted
        self.captured: dict[str, bytes] = {}
        self.differed: list[tuple[int, str]] = []

    def judge(self, shot: LiveSnapshot) -> Comparison:
        if shot.seq == self.before and shot.uid in self.wanted:
            self.captured[shot.uid] = bytes(shot.live)
        if shot.recorded_key and records.content_key(shot.live).hex() != shot.recorded_key:
            self.differed.append((shot.seq, shot.uid))
            return Comparison(shot.uid, "bytes", DIVERGED, len(shot.live))
        return Comparison(shot.uid, "bytes", IDENTICAL, len(shot.live))


def _write(trace: Trace, out: Path, first: int, last: int, base: dict[str, str], fresh: dict[str, bytes],
           order: list[str], provenance: dict[str, Any], result: TrimResult) -> None:
    """Write OUT: the preamble's records as they are, checkpoint -1 (``base`` overlaid with ``fresh``), the
    checkpoint after ``first - 1``, the frames first..last with their checkpoints, and the END record.
    Each blob is written before the first record naming it, as the recorder does."""
    reader = trace.reader
    out.parent.mkdir(parents=True, exist_ok=True)
    with TraceWriter(out, level=3, threads=0) as writer:

        def copy(key: str, what: str) -> str:
            if not writer.has_blob(key):
                try:
                    writer.write_prepared(reader.read_prepared(key))
                except ContainerError as exc:
                    at = f"record at offset {exc.offset}: " if exc.offset is not None else ""
                    raise TraceError(f"{what}: {at}{exc.detail}", file=trace.path) from None
                except KeyError:
                    raise TraceError(f"{what}: its blob {key} is missing", file=trace.path) from None
            return key

        for kind, body in _bodies(trace, _PREAMBLE_KINDS):
            if kind == kinds.HEADER:
                body[TRIMMED_FROM] = provenance
            elif kind == kinds.FILE:
                copy(body["blob"], f"embedded file '{body['name']}'")
            elif kind == kinds.SPIRV:
                copy(body["blob"], f"SPIR-V of shader '{body['shader']}'")
            writer.add_meta(kind, body)
        state = {uid: writer.put_blob(fresh[uid]) if uid in fresh else copy(key, f"state before frame {first}, resource '{uid}'")
                 for uid, key in base.items()}
        state.update((uid, writer.put_blob(data)) for uid, data in fresh.items() if uid not in state)
        writer.add_meta(kinds.CHECKPOINT, {"seq": -1, "state": state})
        if first > 0:
            writer.add_meta(kinds.CHECKPOINT, {"seq": first - 1, "state": {uid: state[uid] for uid in order if uid in state}})
            result.checkpoints.append(first - 1)
        checkpoints = {body["seq"]: body for _, body in _bodies(trace, (kinds.CHECKPOINT,))
                       if isinstance(body.get("seq"), int) and first <= body["seq"] <= last}
        for seq in range(first, last + 1):
            held = checkpoints.get(seq)
            if held is not None:
                for uid, key in held["state"].items():
                    copy(key, f"checkpoint {seq}, resource '{uid}'")
                writer.add_meta(kinds.CHECKPOINT, held)
                result.checkpoints.append(seq)
            body = _body(trace, trace.by_seq[seq].offset)
            for uid, key in body["snapshots"].items():
                copy(key, f"frame {seq}, resource '{uid}'")
            for d in body.get("dispatches", ()):
                copy(d["blob"], f"frame {seq}, command {d['command']}, resource '{d['uid']}'")
            writer.add_meta(kinds.FRAME, body)
        writer.add_meta(kinds.END, {"status": "complete", "frames": last - first + 1, "error": ""})
        result.blobs = writer.stats.blob_count


def _bodies(trace: Trace, wanted: Iterable[str]) -> list[tuple[str, dict[str, Any]]]:
    """(kind, body) of the intact META records of the ``wanted`` kinds, in file order (a damaged one,
    which :meth:`Trace.open` listed in ``trace.damaged``, is left out)."""
    damaged = {d.offset for d in trace.damaged}
    return [(kind, _body(trace, offset)) for offset, kind in trace.reader.meta_index()
            if kind in wanted and offset not in damaged]


def _body(trace: Trace, offset: int) -> dict[str, Any]:
    """The body of the META record at ``offset`` without its ``kind``, copied as it is (keys this version
    does not know included)."""
    try:
        body = trace.reader.read_meta(offset)
    except ContainerError as exc:  # it was read when the trace was opened: the file changed since
        raise TraceError(f"record at offset {offset}: {exc.detail}", file=trace.path) from None
    body.pop("kind", None)
    return body
