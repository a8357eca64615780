"""Reading a trace back: the recording's metadata, frames, checkpoints and snapshots.

:class:`Trace` validates the shape of every META record it uses (types, sizes, names) before use, so a
hostile or damaged file gives a :class:`vkcore.errors.TraceError` with the reason, never a crash or a
large allocation. Snapshots are read lazily, one blob at a time.
"""
from __future__ import annotations

import logging
import os
import re
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterable, Sequence

from vkcore.errors import EXIT_FAILURE, TraceError, VkcapError

from .format import kinds
from .format.errors import NotATrace, TraceCorrupt, UnsupportedVersion
from .reader import TraceReader
from .format.errors import ContainerError, NotARegularFile
from .embed import check_trace_name
from .format.limits import MAX_LOST_LISTED, NestingTooDeep, check_json_nesting
from .format.records import RecordType
from .views import View, ViewError


class FramesNotJudged(VkcapError):
    """A comparison (replay, diff, suite) could not judge every frame it was asked to: some are lost to
    damaged records. A failure (exit 1), never a pass: the message names the frames."""

    exit_code = EXIT_FAILURE


@dataclass(frozen=True)
class DispatchSnapshot:
    """A resource right after a dispatch, or after one segment of a dispatch_graph (``segment`` and
    its ``module`` name set)."""

    command: int
    uid: str
    blob: str
    segment: int | None = None
    module: str = ""


@dataclass(frozen=True)
class FrameRecord:
    seq: int
    pass_index: int
    index: int
    frame_id: int
    snapshots: dict[str, str]  # uid -> blob key
    dispatches: tuple["DispatchSnapshot", ...] = ()  # what each dispatch (or graph segment) wrote
    offset: int = 0


@dataclass(frozen=True)
class DamagedRecord:
    """A META record that could not be read (checksum, structure or content): it is skipped."""

    kind: str  # the kind the index (or the recovery scan) lists for it
    offset: int
    reason: str
    after_frame: int | None  # the last frame read before it (None: before any frame)

    def describe(self) -> str:
        where = f"after frame {self.after_frame}" if self.after_frame is not None else "before the first frame"
        return f"damaged {self.kind} record at offset {self.offset} ({where}): {self.reason}"


# Records without which nothing in a trace means anything: damage to one of them makes the trace
# unreadable. Damage to any other record costs only what it describes (a frame, a checkpoint, ...).
ESSENTIAL_KINDS: frozenset[str] = frozenset({kinds.HEADER, kinds.SCENARIO, kinds.RESOURCES})
# What replaying needs beyond the essential records.
REPLAY_KINDS: frozenset[str] = frozenset({kinds.FILE, kinds.SPIRV})


@dataclass
class Trace:
    """A trace opened for reading. Use as a context manager or call :meth:`close`.

    A damaged META record of a kind outside :data:`ESSENTIAL_KINDS` is skipped and listed in
    ``damaged``: the other frames stay readable, and what needs the lost record says so."""

    path: Path
    reader: TraceReader
    header: dict[str, Any] = field(default_factory=dict)
    scenario_name: str = ""
    original_json: str = ""
    portable_json: str = ""
    files: dict[str, tuple[str, str, int]] = field(default_factory=dict)  # name -> (role, blob, size)
    npy_headers: dict[str, bytes] = field(default_factory=dict)  # name -> .npy header stored apart from its payload blob
    spirv: dict[str, str] = field(default_factory=dict)  # shader uid -> blob
    fingerprint: dict[str, Any] = field(default_factory=dict)
    resources: dict[str, dict[str, Any]] = field(default_factory=dict)
    # each buffer's view as the recorder derived it (None: no intact views record, as in traces recorded
    # before it existed: readers derive them, see replay.reading.trace_views); views_malformed: the uids
    # whose recorded view failed View.from_json (the record is listed as damaged; those are derived)
    views: dict[str, View] | None = None
    views_malformed: frozenset[str] = frozenset()
    checkpoints: dict[int, dict[str, str]] = field(default_factory=dict)  # seq -> uid -> blob
    frames: list[FrameRecord] = field(default_factory=list)
    end: dict[str, Any] | None = None
    by_seq: dict[int, FrameRecord] = field(default_factory=dict, repr=False)  # the frames by seq, built with them
    damaged: list[DamagedRecord] = field(default_factory=list)

    @classmethod
    def open(cls, path: str | Path) -> "Trace":
        p = Path(path)
        try:
            reader = TraceReader(p)
        except FileNotFoundError:
            raise TraceError(missing_trace_message(p), file=p) from None
        except IsADirectoryError:
            raise TraceError("is a folder, not a trace", file=p) from None
        except NotARegularFile as exc:
            raise TraceError(exc.detail, file=p) from None
        except (NotATrace, UnsupportedVersion, TraceCorrupt, ContainerError) as exc:
            raise TraceError(str(exc), file=None) from None
        except OSError as exc:
            raise TraceError(f"cannot be read ({exc.strerror or type(exc).__name__})", file=p) from None
        trace = cls(p, reader)
        try:
            trace._load()
        except BaseException:
            reader.close()
            raise
        if reader.trailer_note:  # whatever the command, the user learns that part of the file is ignored

            logging.getLogger("vkcap").warning("%s: %s", p, reader.trailer_note)
        return trace

    @classmethod
    def reuse_or_open(cls, path: str | Path, opened: "Trace | None") -> "ContextManager[Trace]":
        """A context manager giving ``opened`` when it is not None (left open: whoever opened it closes
        it), else the trace at ``path``, opened here and closed on exit."""
        return nullcontext(opened) if opened is not None else cls.open(path)

    def __enter__(self) -> "Trace":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.reader.close()

    # -- loading ----------------------------------------------------------------------------------

    def _damaged(self, kind: str, offset: int, reason: str) -> None:
        """Skip a record that cannot be read, or fail when the trace means nothing without it."""
        record = DamagedRecord(kind, offset, reason, self.frames[-1].seq if self.frames else None)
        if kind in ESSENTIAL_KINDS:
            raise TraceError(f"{record.describe()}; the trace cannot be read without it", file=self.path)
        self.damaged.append(record)

    def require_intact(self, needed: frozenset[str], purpose: str) -> None:
        """Raise :class:`TraceError` if a record of a kind in ``needed`` was damaged, naming ``purpose``."""
        lost = [d for d in self.damaged if d.kind in needed]
        if lost:
            raise TraceError(f"cannot {purpose}: {lost[0].describe()}", file=self.path)

    def _load(self) -> None:
        handlers: dict[str | None, Callable[[dict[str, Any], int], None]] = {
            kinds.HEADER: self._on_header,
            kinds.SCENARIO: self._on_scenario,
            kinds.FILE: self._on_file,
            kinds.SPIRV: self._on_spirv,
            kinds.FINGERPRINT: self._on_fingerprint,
            kinds.RESOURCES: self._on_resources,
            kinds.VIEWS: self._on_views,
            kinds.CHECKPOINT: self._on_checkpoint,
            kinds.FRAME: self._on_frame,
            kinds.END: self._on_end,
        }
        for offset, kind in self.reader.meta_index():
            handler = handlers.get(kind)
            if handler is None:
                continue  # a newer writer's record kind: ignored
            try:
                handler(self.reader.read_meta(offset), offset)
            except (TraceCorrupt, ContainerError) as exc:
                self._damaged(kind, offset, exc.detail)
            except NestingTooDeep as exc:
                self._damaged(kind, offset, f"its scenario JSON {exc}")
            except (KeyError, TypeError, ValueError, AttributeError, RecursionError):
                self._damaged(kind, offset, "malformed content")
        if not self.header or not self.portable_json:
            raise TraceError("the trace holds no scenario (recording died before its first records)", file=self.path)
        self._drop_impossible_frames()
        self.by_seq = {f.seq: f for f in self.frames}

    def _drop_impossible_frames(self) -> None:
        """Treat as damaged a FRAME record whose number no recording gives: frames are numbered from
        the first (0, or a trimmed trace's first) with one FRAME record each, so a number beyond the
        count of FRAME records, or one seen twice, is forged (and a replay would run up to it)."""
        first = self._first_seq()
        # a recovery scan does not know the kind of a record it skipped: any of them may be a frame
        listed = len(self.reader.meta_index(kinds.FRAME)) + len(self.reader.corrupt_records)
        seen: set[int] = set()
        kept = []
        for f in self.frames:
            if not first <= f.seq < first + listed:
                why = f"frame number {f.seq} is outside the trace's {listed} frames from {first}"
            elif f.seq in seen:
                why = f"frame number {f.seq} is repeated"
            else:
                seen.add(f.seq)
                kept.append(f)
                continue
            self.damaged.append(DamagedRecord(kinds.FRAME, f.offset, why, kept[-1].seq if kept else None))
        self.frames = kept

    def _first_seq(self) -> int:
        """The number of the trace's first frame: 0, or what a trimmed trace's header says."""
        trimmed = self.header.get("trimmed_from")
        span = trimmed.get("frames") if isinstance(trimmed, dict) else None
        first = span[0] if isinstance(span, list) and span else 0
        return first if isinstance(first, int) and not isinstance(first, bool) and 0 <= first < 1 << 62 else 0

    def _on_header(self, body: dict[str, Any], offset: int) -> None:
        self.header = dict(body)

    def _on_scenario(self, body: dict[str, Any], offset: int) -> None:
        self.scenario_name = _str(body["name"])
        self.original_json = _str(body["original"])
        self.portable_json = _str(body["portable"])
        for text in (self.original_json, self.portable_json):  # json.loads would recurse into it
            check_json_nesting(text)

    def _on_file(self, body: dict[str, Any], offset: int) -> None:
        name = check_trace_name(_str(body["name"]))
        self.files[name] = (_str(body["role"]), _key(body["blob"]), _int(body["size"]))
        header = body.get("npy_header")
        if header is not None:
            if not isinstance(header, bytes) or len(header) > 1 << 20:
                raise ValueError
            self.npy_headers[name] = header

    def _on_spirv(self, body: dict[str, Any], offset: int) -> None:
        self.spirv[_str(body["shader"])] = _key(body["blob"])

    def _on_fingerprint(self, body: dict[str, Any], offset: int) -> None:
        self.fingerprint = {k: v for k, v in body.items() if k != "kind"}

    def _on_resources(self, body: dict[str, Any], offset: int) -> None:
        resources = body["resources"]
        if not isinstance(resources, dict):
            raise TypeError
        self.resources = {_str(k): dict(v) for k, v in resources.items()}

    def _on_views(self, body: dict[str, Any], offset: int) -> None:
        """Each view checked by :meth:`View.from_json`; a malformed one makes the record damaged (listed
        once, naming the uids) and leaves the others in use."""
        recorded = body["views"]
        if not isinstance(recorded, dict) or self.views is not None:
            raise ValueError  # a second views record is no recording's either
        views: dict[str, View] = {}
        malformed: dict[str, str] = {}
        for uid, obj in recorded.items():
            try:
                views[_str(uid)] = View.from_json(obj)
            except ViewError as exc:
                malformed[uid] = str(exc)
        self.views = views
        if malformed:
            self.views_malformed = frozenset(malformed)
            first = next(iter(malformed))
            others = f" and {len(malformed) - 1} more" if len(malformed) > 1 else ""
            name = first if len(first) <= 64 else f"{first[:64]}..."  # a uid from the trace: any length
            self.damaged.append(DamagedRecord(kinds.VIEWS, offset, f"the view of '{name}'{others} is malformed "
                                              f"({malformed[first]}); derived from the SPIR-V instead",
                                              self.frames[-1].seq if self.frames else None))

    def _on_checkpoint(self, body: dict[str, Any], offset: int) -> None:
        self.checkpoints[_int(body["seq"], minimum=-1)] = {_str(k): _key(v) for k, v in body["state"].items()}

    def _on_frame(self, body: dict[str, Any], offset: int) -> None:
        dispatches = tuple(
            DispatchSnapshot(_int(d["command"]), _str(d["uid"]), _key(d["blob"]),
                             None if d.get("segment") is None else _int(d["segment"]), str(d.get("module", "")))
            for d in body.get("dispatches", ())
        )
        self.frames.append(
            FrameRecord(
                seq=_int(body["seq"]),
                pass_index=_int(body["pass"]),
                index=_int(body["index"]),
                frame_id=_int(body["frame_id"], minimum=-(2**63)),
                snapshots={_str(k): _key(v) for k, v in body["snapshots"].items()},
                dispatches=dispatches,
                offset=offset,
            )
        )

    def _on_end(self, body: dict[str, Any], offset: int) -> None:
        self.end = dict(body)

    # -- queries ----------------------------------------------------------------------------------

    @property
    def recovered(self) -> bool:
        return self.reader.recovered

    @property
    def complete(self) -> bool:
        return self.end is not None and self.end.get("status") == "complete"

    @property
    def expected_frames(self) -> range | None:
        """The frame numbers the trace says it holds: its END record's count from its first frame (a
        trimmed trace's first is in its header's ``trimmed_from``), or None when it does not say (a
        recording cut short has no END record)."""
        count = (self.end or {}).get("frames")
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            return None
        first = self._first_seq()
        return range(first, first + count)

    @property
    def lost_frames(self) -> list[int]:
        """Frame numbers the trace should hold but does not (their FRAME record damaged or missing):
        the gaps between its frames, and the frames its END record counts that are not there; the
        first ``limits.MAX_LOST_LISTED`` of them (a forged count could name billions)."""
        present = sorted(self.by_seq)
        expected = self.expected_frames
        if expected is None:
            if not present:
                return []
            expected = range(present[0], present[-1] + 1)
        lost: list[int] = []
        at = expected.start
        for seq in [*present, expected.stop]:
            stop = min(seq, expected.stop)
            lost.extend(range(at, max(at, min(stop, at + MAX_LOST_LISTED - len(lost)))))
            if len(lost) >= MAX_LOST_LISTED or seq >= expected.stop:
                break
            at = max(at, seq + 1)
        return lost

    def not_judged(self, first: int | None = None, last: int | None = None) -> str:
        """Why a comparison of frames ``first``..``last`` (None: from the first, to the last) cannot
        judge every frame: ``frames 3, 7 not judged: damaged records in the trace`` (or ``missing
        from the trace`` when nothing is damaged); "" when every frame can be judged."""
        lost = [s for s in self.lost_frames if (first is None or s >= first) and (last is None or s <= last)]
        if not lost:
            return ""
        damaged = self.damaged or self.reader.corrupt_records
        return (f"frame{'s' if len(lost) > 1 else ''} {seq_ranges(lost)} not judged: "
                f"{'damaged records in the trace' if damaged else 'missing from the trace'}")

    def damaged_records(self) -> list[dict[str, Any]]:
        """Every damaged record of the trace (see :meth:`TraceReader.damaged_records`; this reads the
        whole file once), in file order, as plain data: ``offset``, ``type`` (META, BLOB, or the code
        of a record a scan skipped), ``kind`` (a META's kind, ``blob``, or ``unknown``), ``frames``
        (the frames it belongs to, where known: those whose snapshots are a damaged blob, the lost
        frame a damaged FRAME record held) and ``reason``."""
        by_offset = {d.offset: d for d in self.damaged}
        lost = set(self.lost_frames)
        users: dict[str, list[int]] = {}
        for f in self.frames:
            for key in {*f.snapshots.values(), *(d.blob for d in f.dispatches)}:
                users.setdefault(key, []).append(f.seq)
        out = []
        for rec in self.reader.damaged_records():
            meta = by_offset.pop(rec.offset, None)
            kind = rec.what if rec.rtype == RecordType.META else "blob" if rec.rtype == RecordType.BLOB else "unknown"
            frames = users.get(rec.what, []) if rec.rtype == RecordType.BLOB else []
            if meta is not None or kind == kinds.FRAME:
                frames = _lost_frame(meta or DamagedRecord(kind, rec.offset, rec.reason, None), self.frames, lost)
            type_name = RecordType(rec.rtype).name if rec.rtype in RecordType._value2member_map_ else str(rec.rtype)
            out.append({"offset": rec.offset, "type": type_name, "kind": kind, "frames": frames, "reason": rec.reason})
        for d in by_offset.values():  # records intact in the file whose content is not what vkcap wrote
            out.append({"offset": d.offset, "type": "META", "kind": d.kind, "frames": _lost_frame(d, self.frames, lost),
                        "reason": d.reason})
        return sorted(out, key=lambda r: r["offset"])

    def frame(self, seq: int) -> FrameRecord:
        found = self.by_seq.get(seq)
        if found is not None:
            return found
        lost = [d.describe() for d in self.damaged if d.kind == kinds.FRAME]
        hint = f"; {'; '.join(lost)}" if lost else ""
        raise TraceError(f"no frame {seq} in this trace (frames: {seq_ranges([f.seq for f in self.frames])}){hint}", file=self.path)

    def file_bytes(self, name: str) -> bytes:
        """The content of embedded file ``name`` (a .npy input is its stored header + payload blob)."""
        _, key, size = self.files[name]
        header = self.npy_headers.get(name, b"")
        if self.reader.has_blob(key) and len(header) + self.reader.blob_info(key).raw_len != size:  # before reading it
            declared = len(header) + self.reader.blob_info(key).raw_len
            raise TraceError(f"embedded file '{name}' is {declared} bytes, the trace says {size}", file=self.path)
        data = header + self.blob(key, what=f"embedded file '{name}'")
        if len(data) != size:
            raise TraceError(f"embedded file '{name}' is {len(data)} bytes, the trace says {size}", file=self.path)
        return data

    def blob(self, key: str, *, what: str) -> bytes | memoryview:
        """The bytes of blob ``key``; a damaged blob raises :class:`TraceError` naming ``what``."""
        try:
            return self.reader.read_blob(key)
        except ContainerError as exc:  # its text repeats the path: say it once
            where = f"record at offset {exc.offset}: " if exc.offset is not None else ""
            raise TraceError(f"{what}: {where}{exc.detail}", file=self.path) from None
        except KeyError as exc:
            raise TraceError(f"{what}: {exc.args[0] if exc.args else exc}", file=self.path) from None

    def snapshot(self, seq: int, uid: str) -> bytes | memoryview:
        frame = self.frame(seq)
        if uid not in frame.snapshots:
            have = ", ".join(sorted(frame.snapshots)) or "none"
            raise TraceError(f"frame {seq} has no snapshot of '{uid}' (it has: {have})", file=self.path)
        key = frame.snapshots[uid]
        expected = self.resources.get(uid, {}).get("size")
        if isinstance(expected, int) and self.reader.has_blob(key):  # checked before it is decoded
            declared = self.reader.blob_info(key).raw_len
            if declared != expected:
                raise TraceError(f"frame {seq}, resource '{uid}': snapshot is {declared} bytes, resource is {expected}",
                                 file=self.path)
        data = self.blob(key, what=f"frame {seq}, resource '{uid}'")
        if isinstance(expected, int) and expected != len(data):
            raise TraceError(f"frame {seq}, resource '{uid}': snapshot is {len(data)} bytes, resource is {expected}", file=self.path)
        return data

    def state_after(self, seq: int) -> dict[str, str] | None:
        """The complete recorded state after frame ``seq`` (uid -> blob key; -1: the initial state), or
        None when the trace does not hold it. A checkpoint holds it; so does a frame whose boundary
        captured every resource a checkpoint holds (always the case with ``--capture all``), because a
        checkpoint is nothing but those boundary snapshots. A trace without checkpoints after the
        initial state does not say which resources a state needs: only its checkpoint -1 counts."""
        if seq in self.checkpoints:
            return self.checkpoints[seq]
        needed = next((set(state) for c, state in self.checkpoints.items() if c >= 0), None)
        frame = self.by_seq.get(seq)
        if needed is None or frame is None or not needed <= frame.snapshots.keys():
            return None
        return {uid: frame.snapshots[uid] for uid in needed}

    def nearest_checkpoint(self, seq: int) -> int:
        """The latest checkpoint taken at or before the state *before* frame ``seq`` (i.e. after seq-1)."""
        usable = [c for c in self.checkpoints if c <= seq - 1]
        if not usable:
            self.require_intact(frozenset({kinds.CHECKPOINT}), "restore the initial state")
            raise TraceError("the trace has no initial state checkpoint", file=self.path)
        return max(usable)


def _lost_frame(record: DamagedRecord, frames: list[FrameRecord], lost: set[int]) -> list[int]:
    """The frame a damaged FRAME record held, where the frames around it say: the lost frame right
    after the frame read before it (frames are recorded in order)."""
    if record.kind != kinds.FRAME:
        return []
    before = max((f.seq for f in frames if f.offset < record.offset), default=None)
    after = min((f.seq for f in frames if f.offset > record.offset), default=None)
    guess = [s for s in sorted(lost) if (before is None or s > before) and (after is None or s < after)]
    return guess[:1] if len(guess) == 1 else []


def seq_ranges(seqs: list[int]) -> str:
    """Ascending frame numbers as ranges: ``0-4, 6-12``; ``none`` when empty."""
    if not seqs:
        return "none"
    spans: list[list[int]] = []
    for seq in seqs:
        if spans and seq == spans[-1][1] + 1:
            spans[-1][1] = seq
        else:
            spans.append([seq, seq])
    return spans_text(spans)


def spans_text(spans: Iterable[Sequence[int]]) -> str:
    """Inclusive ``(first, last)`` spans as ``0-4, 6, 8-12``."""
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError
    return v


def _int(v: Any, minimum: int = 0) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
        raise ValueError
    return v


def _key(v: Any) -> str:
    v = _str(v)
    if len(v) != 32 or any(c not in "0123456789abcdef" for c in v):
        raise ValueError
    return v


def missing_trace_message(path: Path) -> str:
    """What to say when no trace exists at ``path``: ``no such file``, and, when a recording of it was
    cut short (``kill -9``, a crash), the partial files it left beside it (``.NAME.PID.RAND.partial``,
    see docs/trace-format.md §7), newest first, named as the user can pass them back to vkcap."""
    folder = path.parent
    pattern = re.compile(rf"^\.{re.escape(path.name)}\.\d+\.[0-9a-f]+\.partial$")
    try:
        names = [e for e in os.scandir(folder) if pattern.match(e.name) and e.is_file()]
        names.sort(key=lambda e: e.stat().st_mtime_ns, reverse=True)
    except OSError:
        names = []
    if not names:
        return "no such file"
    left = ", ".join(str(folder / e.name) if str(folder) != "." else e.name for e in names)
    return f"no such file; a recording cut short left {left}: vkcap info/export/replay read it as it is"
