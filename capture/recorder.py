"""``record``: run a scenario through the executor and write every frame boundary into a trace.

The recording is a three-stage pipeline, all in one trio nursery:

1. the executor runs frames on the GPU and copies each frame's captures into a staging slot;
2. the recorder's ``consume`` hashes and compresses the slot's blobs in worker threads, in parallel
   (zstd and xxhash release the GIL), and frees the slot as soon as that is done;
3. a writer task appends the compressed blobs (each content stored once) and the frame's records, in
   frame order, in a worker thread.

So the GPU runs frame N+2 while frame N+1 is compressed and frame N is written. Bounded channels keep
the memory in flight to a few frames however long the recording. The records of the trace are
described in ``docs/trace-format.md``.
"""
from __future__ import annotations

import datetime
import importlib
import json
import logging
import os
import platform
import signal
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from vkcore.errors import EXIT_FAILURE, VkcapError
from vkcore.exec.executor import Event, FrameSnapshot, StopRequest, raise_single
from vkcore.scenario.npyio import NpyFormatError, read_header
from vkcore.exec.plan import Frame, Plan
from vkcore.exec.runner import RunOptions, RunResult, run_async
from vkcore.exec.resource_set import ResourceSet
from vkcore.commands import kind_of
from vkcore.scenario.model import Scenario, load_scenario
from vkcore.exec.session import Session
from vkcore.resources.staging import CaptureLayout, build_layout

from . import kinds, records
from .container import PreparedBlob, TraceWriter
from .embed import EmbeddedFile, portable_scenario

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup

TRACE_SCHEMA = 1  # version of the META record layout described in docs/trace-format.md
WRITE_QUEUE = 2  # compressed frames waiting for the writer (bounds memory in flight)
# The writer flushes to disk (and releases the flushed bytes from the page cache) every this many
# bytes, so closing does not wait long and the trace never crowds memory.
SYNC_EVERY = 32 << 20
log = logging.getLogger("vkcap")


class TraceWriteFailed(VkcapError):
    """Writing the trace failed (a full disk, a vanished folder); what was complete is kept."""

    exit_code = EXIT_FAILURE


@dataclass(frozen=True)
class RecordOptions:
    run: RunOptions
    trace: Path
    checkpoint_every: int = 8
    dispatch_level: bool = False
    level: int = 3
    threads: int = -1  # zstd worker threads for a large blob (-1: one per core, 0: none)
    compress_workers: int = max(1, os.cpu_count() or 1)  # blobs of one frame compressed in parallel


@dataclass
class RecordResult:
    run: RunResult
    trace: Path
    frames: int = 0
    raw_bytes: int = 0
    stored_bytes: int = 0
    dedup_bytes: int = 0
    file_bytes: int = 0


@dataclass
class Preamble:
    """The content of a trace's first records, gathered from the session before the first frame so
    that writing them can overlap the frames and need not outlive the session."""

    header: dict[str, Any]
    portable: str  # the portable scenario, as JSON
    files: list[EmbeddedFile]
    initial: dict[str, bytes | memoryview]  # uid -> content before the first frame (a live mapping: unwritable)
    spirv: dict[str, bytes]  # shader uid -> its SPIR-V
    fingerprint: dict[str, Any]
    described: dict[str, Any]  # uid -> resource description, graph intermediates included


@dataclass
class CompressedFrame:
    """A frame whose blobs are compressed and ready to append (the staging slot is already free)."""

    seq: int
    pass_index: int
    frame: Frame
    layout: CaptureLayout
    prepared: list[PreparedBlob]


class TraceRecorder:
    """The executor's frame consumer, feeding a :class:`TraceWriter` through a writer task."""

    def __init__(self, writer: TraceWriter, plan: Plan, options: RecordOptions, resources: ResourceSet,
                 graphs: dict[int, Any] | None = None, unwritable: frozenset[str] = frozenset()) -> None:
        self.writer = writer
        self.plan = plan
        self.scenario = plan.scenario
        self.options = options
        self.frames_written = 0
        self.resources = resources
        self.graphs = graphs or {}
        self._size = lambda uid: resources[uid].snapshot_size
        self._align = {uid: getattr(r, "snapshot_alignment", 1) for uid, r in resources.resources.items()}
        bound = {b.resource_ref for c in self.scenario.commands for b in kind_of(c).bindings(c)}
        # A checkpoint stores every resource a dispatch (compute or graph) binds: the declared access is
        # advice, not a promise.
        self.checkpoint_set = tuple(uid for uid in resources.resources if uid in bound)
        # What no command can write keeps its initial content: its boundary snapshots and checkpoint
        # entries name the initial state's blob, and are never copied back from the device.
        self.unwritable = unwritable
        self._unwritable_size = {uid: self._size(uid) for uid in unwritable}  # the writer may outlive the resources
        self.initial_keys: dict[str, str] = {}  # set by write_preamble
        self.reused_bytes = 0  # snapshot bytes named by reference to the initial state
        self._layouts: dict[tuple[int, bool], CaptureLayout] = {}
        self._pool = ThreadPoolExecutor(max_workers=options.compress_workers, thread_name_prefix="vkcap-compress")
        self.queue: Any = None  # the send side of the writer channel, set by record_async
        self._turns: dict[int, Any] = {}  # seq -> trio.Event set when that frame may be queued
        self._next_seq = 0  # a recording always starts at frame 0
        self._synced = 0
        self._sync_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vkcap-sync")
        self._syncing: Any = None  # the Future of the fsync in flight
        # Staging slots: one frame on the GPU while the others are compressed in parallel, as many as
        # the cores can compress at once (each blob's planes run in parallel too).
        self.slots = 1 + min(8, max(2, os.cpu_count() or 1))

    def close(self) -> None:
        """Wait for the compressors and the fsync in flight (the writer may be closed after this)."""
        self._pool.shutdown(wait=True)
        self._sync_pool.shutdown(wait=True)

    # -- FrameConsumer --------------------------------------------------------------------------

    def is_checkpoint(self, seq: int) -> bool:
        k = self.options.checkpoint_every
        return k > 0 and (seq + 1) % k == 0

    def _layout(self, frame: Frame, checkpoint: bool) -> CaptureLayout:
        key = (frame.index, checkpoint)
        if key not in self._layouts:
            entries: list[tuple[Any, ...]] = []
            if self.options.dispatch_level:
                for cmd in frame.dispatches:
                    entries += kind_of(cmd).dispatch_snapshots(self.scenario, cmd, self.graphs, self._size)
            boundary = list(frame.capture)
            if checkpoint:
                boundary += [u for u in self.checkpoint_set if u not in boundary]
            entries += [(uid, self._size(uid), None) for uid in boundary if uid not in self.unwritable]
            self._layouts[key] = build_layout(entries, align_of=self._align)
        return self._layouts[key]

    def slot_size(self, session: Session) -> int:
        variants = (False, True) if self.options.checkpoint_every > 0 else (False,)
        return max((self._layout(f, c).size for f in self.plan.frames for c in variants), default=0)

    def layout(self, frame: Frame, seq: int) -> CaptureLayout:
        return self._layout(frame, self.is_checkpoint(seq))

    async def consume(self, snapshot: FrameSnapshot) -> None:
        """Compress the slot's blobs (in parallel) and queue them for the writer, in frame order.

        Frames are consumed concurrently; the one with the next sequence number is queued first.
        The slot is free when this returns."""
        import trio

        views = [snapshot.slot.view(i) for i in snapshot.layout.items]
        prepared = await trio.to_thread.run_sync(self.compress_all, views)
        if snapshot.seq != self._next_seq:
            await self._turns.setdefault(snapshot.seq, trio.Event()).wait()
        await self.queue.send(CompressedFrame(snapshot.seq, snapshot.pass_index, snapshot.frame, snapshot.layout, prepared))
        self._next_seq = snapshot.seq + 1
        self._turns.pop(snapshot.seq, None)
        self._turns.setdefault(self._next_seq, trio.Event()).set()

    def compress_all(self, views: list[Any], keys: list[bytes] | None = None) -> list[PreparedBlob]:
        """Hash (unless their content ``keys`` are given) and compress every view; the results never
        alias the views (safe to reuse them)."""
        known: list[bytes | None] = list(keys) if keys is not None else [None] * len(views)
        if len(views) <= 1:
            return [self.writer.compress_blob(v, key=k) for v, k in zip(views, known)]
        return list(self._pool.map(lambda v, k: self.writer.compress_blob(v, key=k), views, known))

    # -- the writer stage ------------------------------------------------------------------------

    async def writer_loop(self, receive: Any, preamble: Preamble, preamble_done: Any) -> None:
        """Write the preamble, then append queued frames in order, in a worker thread, until the
        channel closes. The frames run on the GPU (and are compressed) while the preamble is written;
        ``preamble_done`` (a trio.Event) is set once it is, or could not be, written."""
        import trio

        async with receive:
            try:
                await trio.to_thread.run_sync(self.write_preamble, preamble)
            finally:
                preamble_done.set()
            async for compressed in receive:
                await trio.to_thread.run_sync(self.write_frame, compressed)

    def write_frame(self, compressed: CompressedFrame) -> None:
        try:
            self._append_frame(compressed)
        except OSError as exc:
            raise TraceWriteFailed(
                f"cannot write the trace ({exc.strerror or exc}) at frame {compressed.seq}; "
                f"frames 0-{compressed.seq - 1} were complete", file=self.options.trace,
            ) from None

    def _append_frame(self, c: CompressedFrame) -> None:
        for p in c.prepared:
            self.writer.write_prepared(p)
        written = self.writer.stats.file_bytes
        if written - self._synced >= SYNC_EVERY and (self._syncing is None or self._syncing.done()):
            if self._syncing is not None:
                self._syncing.result()  # an fsync that failed (EIO, ENOSPC) fails the recording here
            # in its own thread: the writer goes on appending while the disk works
            self._syncing = self._sync_pool.submit(self.writer.sync, release_cache=True)
            self._synced = written
        boundary = {i.uid: p.key for i, p in zip(c.layout.items, c.prepared) if i.after_command is None}
        unchanged = [u for u in c.frame.capture if u in self.unwritable]
        if self.is_checkpoint(c.seq):
            unchanged += [u for u in self.checkpoint_set if u in self.unwritable and u not in unchanged]
        for uid in unchanged:
            boundary[uid] = self.initial_keys[uid]
            self.reused_bytes += self._unwritable_size[uid]
        body: dict[str, Any] = {
            "seq": c.seq,
            "pass": c.pass_index,
            "index": c.frame.index,
            "frame_id": c.frame.frame_id,
            "snapshots": {uid: boundary[uid] for uid in c.frame.capture},
        }
        dispatch_level = [
            self._dispatch_entry(i, p.key) for i, p in zip(c.layout.items, c.prepared) if i.after_command is not None
        ]
        if dispatch_level:
            body["dispatches"] = dispatch_level
        if self.is_checkpoint(c.seq):
            self.writer.add_meta(kinds.CHECKPOINT, {"seq": c.seq, "state": {u: boundary[u] for u in self.checkpoint_set}})
        self.writer.add_meta(kinds.FRAME, body)
        self.frames_written += 1

    def _dispatch_entry(self, item: Any, key: str) -> dict[str, Any]:
        entry: dict[str, Any] = {"command": item.after_command, "uid": item.uid, "blob": key}
        if item.segment is not None:
            segment = next(s for s in self.graphs[item.after_command].segments if s.index == item.segment)
            entry.update(segment=item.segment, module=segment.module)
        return entry

    # -- the start of a trace --------------------------------------------------------------------

    def _put_all(self, payloads: list[Any]) -> list[str]:
        """Store several blobs: compressed in parallel (each content once: an input file's payload
        and the initial state it gave are usually equal), appended in order; returns their keys."""
        keys = [records.content_key(p) for p in payloads]
        first = {key: i for i, key in reversed(list(enumerate(keys)))}
        unique = sorted(first.values())
        for p in self.compress_all([payloads[i] for i in unique], [keys[i] for i in unique]):
            self.writer.write_prepared(p)
        return [key.hex() for key in keys]

    def gather_preamble(self, session: Session, argv: list[str]) -> Preamble:
        """Everything the preamble needs from the session, taken before the first frame. The initial
        state is copied, as frames change it, except where no command can write it: a buffer the
        host maps is then read from its mapping, which the session keeps until the preamble is
        written (``record_async`` holds it open)."""
        scenario = self.scenario
        deps = {uid: m.dependencies for uid, m in session.modules.items()}
        portable, files = portable_scenario(scenario, deps)
        resources = session.resources
        assert resources is not None
        initial = session.contents(resources.resources, live=self.unwritable)
        described = {u: resources[u].meta() for u in initial}
        for graph in session.graphs.values():  # intermediates, snapshotted after segments
            for seg in graph.segments:
                for name in seg.writes:
                    if name not in described:
                        described[name] = graph.resource(name).meta()
        return Preamble(
            header={
                "schema": TRACE_SCHEMA,
                "vkcap_version": _version(),
                "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "host": socket.gethostname(),
                "platform": platform.platform(),
                "python": platform.python_version(),
                "argv": argv,
                "checkpoint_every": self.options.checkpoint_every,
                "dispatch_level": self.options.dispatch_level,
                "capture_all": self.options.run.capture_all,
                "repeat": self.options.run.repeat,
                "pipeline_layouts": session.pipeline_layouts(),
            },
            portable=json.dumps(portable, separators=(",", ":")),
            files=files,
            initial=initial,
            spirv={uid: m.code for uid, m in session.modules.items()},
            fingerprint=session.ctx.fingerprint(),
            described=described,
        )

    def write_preamble(self, preamble: Preamble) -> None:
        """Header, scenario (original and portable), embedded files, fingerprint, resources, and the
        initial state as checkpoint -1: the records before the first frame's."""
        try:
            self._write_preamble(preamble)
        except OSError as exc:
            raise TraceWriteFailed(f"cannot write the trace ({exc.strerror or exc}) before its first frame",
                                   file=self.options.trace) from None

    def _write_preamble(self, p: Preamble) -> None:
        self.writer.add_meta(kinds.HEADER, p.header)
        original = self.scenario.path.read_bytes()
        self.writer.add_meta(
            kinds.SCENARIO,
            {"name": self.scenario.path.name, "original": original.decode("utf8", "replace"), "portable": p.portable},
        )
        parts = [_file_parts(f) for f in p.files]
        # Initial state and .npy payloads are usually the same bytes: one blob serves both.
        keys = self._put_all([payload for _, payload in parts] + list(p.initial.values()))
        for f, (header, _), key in zip(p.files, parts, keys):
            body: dict[str, Any] = {"name": f.name, "role": f.role, "blob": key, "size": f.source.stat().st_size}
            if header is not None:
                body["npy_header"] = header
            self.writer.add_meta(kinds.FILE, body)
        spirv_keys = self._put_all(list(p.spirv.values()))
        for uid, key in zip(p.spirv, spirv_keys):
            self.writer.add_meta(kinds.SPIRV, {"shader": uid, "blob": key})
        self.writer.add_meta(kinds.FINGERPRINT, p.fingerprint)
        self.writer.add_meta(kinds.RESOURCES, {"resources": p.described})
        self.initial_keys = dict(zip(p.initial, keys[len(p.files):]))
        self.writer.add_meta(kinds.CHECKPOINT, {"seq": -1, "state": self.initial_keys})
        p.initial.clear()  # some are live mappings, valid only while the session is open


def _file_parts(f: EmbeddedFile) -> tuple[bytes | None, bytes]:
    """(npy header, payload) for a ``.npy`` input whose payload fills the rest of the file, so the
    payload is stored as a blob shared with the resource's initial state; else (None, whole file)."""
    data = f.source.read_bytes()
    if f.role == "input" and f.source.suffix.lower() == ".npy":
        try:
            header = read_header(f.source)
        except (NpyFormatError, OSError):
            return None, data
        if header.data_offset + header.nbytes == len(data):
            return data[: header.data_offset], data[header.data_offset :]
    return None, data


def _version() -> str:
    from vkcap import __version__

    return __version__


def default_trace_path(scenario: Path) -> Path:
    return Path("traces") / f"{scenario.stem}.vkt"


class InterruptHandler:
    """Ctrl-C (or SIGTERM) during a recording: the first stops submitting frames (those in flight are
    finished and the trace is closed); a second aborts, unless it comes within ``grace_s`` of the
    first (a double press is one request: finishing takes milliseconds, and aborting would leave the
    frames in the hidden partial file). Installed before trio starts, so trio keeps it (trio only
    replaces Python's default handler) and no signal is lost at any moment."""

    def __init__(self, stop: StopRequest, grace_s: float = 1.0) -> None:
        self.stop = stop
        self.grace_s = grace_s
        self.first_at: float | None = None
        self.saved: dict[int, Any] = {}

    def __enter__(self) -> "InterruptHandler":
        for sig in (signal.SIGINT, signal.SIGTERM):
            self.saved[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.saved.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, frame: Any) -> None:
        now = time.monotonic()
        if self.first_at is None:
            self.first_at = now
            self.stop.set()
        elif now - self.first_at > self.grace_s:
            raise KeyboardInterrupt


@dataclass
class _Recording:
    """What ``record_async`` builds once the session exists."""

    writer: TraceWriter | None = None
    recorder: TraceRecorder | None = None
    preamble_done: Any = None  # a trio.Event, once the writer task runs
    end: dict[str, Any] | None = None  # the END record, once the run ended without failing

    async def before_close(self, result: RunResult | None) -> None:
        """Return once nothing reads the session's memory any more (the preamble is written). When the
        run did not fail (``result``), close the frame queue and set the END record: the writer task
        then finishes the trace (index, fsync, rename) while the session and the device close."""
        if self.preamble_done is not None:
            await self.preamble_done.wait()
        if result is not None and self.recorder is not None:
            self.end = {"status": "interrupted" if result.interrupted else "complete", "error": ""}
            await self.recorder.queue.aclose()


class _Consumer:
    """Forwards to the recorder, which exists only once the session is built."""

    def __init__(self, state: _Recording) -> None:
        self.state = state

    def _recorder(self) -> TraceRecorder:
        assert self.state.recorder is not None
        return self.state.recorder

    def slot_size(self, session: Session) -> int:
        return self._recorder().slot_size(session)

    @property
    def slots(self) -> int:
        return self._recorder().slots

    def layout(self, frame: Frame, seq: int) -> CaptureLayout:
        return self._recorder().layout(frame, seq)

    async def consume(self, snapshot: FrameSnapshot) -> None:
        await self._recorder().consume(snapshot)


async def record_async(options: RecordOptions, argv: list[str], on_event: Callable[[Event], None] | None = None,
                       stop: StopRequest | None = None, scenario: Scenario | None = None) -> RecordResult:
    """Record a trace. Nothing is written before the scenario is validated and the session built;
    the trace appears at its path only once complete (or, after Ctrl-C, closed with what was done).
    ``scenario`` is ``options.run.scenario`` already loaded, if the caller has it."""
    import trio

    scenario = scenario or load_scenario(options.run.scenario)
    prefetch = _prefetch_codec()
    stop = stop or StopRequest()
    state = _Recording()
    send, receive = trio.open_memory_channel(WRITE_QUEUE)

    nursery: Any = None

    async def on_session(session: Session) -> None:
        options.trace.parent.mkdir(parents=True, exist_ok=True)
        state.writer = TraceWriter(options.trace, level=options.level, threads=options.threads)
        resources = session.resources
        assert resources is not None
        state.recorder = TraceRecorder(state.writer, session.plan, options, resources, session.graphs,
                                       session.unwritable_resources())
        state.recorder.queue = send
        preamble = await trio.to_thread.run_sync(state.recorder.gather_preamble, session, argv)
        state.preamble_done = trio.Event()
        nursery.start_soon(write_and_finish, state.recorder, state.writer, preamble)

    async def write_and_finish(recorder: TraceRecorder, writer: TraceWriter, preamble: Preamble) -> None:
        await recorder.writer_loop(receive, preamble, state.preamble_done)
        if state.end is not None and recorder.frames_written:
            failure = await trio.to_thread.run_sync(_finish, writer, {**state.end, "frames": recorder.frames_written},
                                                    options.trace)
            if failure is not None:
                raise failure

    result: RunResult | None = None
    status, error = "complete", ""
    try:
        try:
            async with trio.open_nursery() as nursery:
                async with send:
                    result = await run_async(options.run, consumer=_Consumer(state), on_session=on_session,
                                             before_close=state.before_close, stop=stop,
                                             scenario=scenario, on_event=on_event)
        except BaseExceptionGroup as group:
            raise_single(group)
        if result is not None and result.interrupted:
            status = "interrupted"
    except VkcapError as exc:
        status, error = "failed", exc.render()
        raise
    except BaseException as exc:
        status, error = "failed", f"{type(exc).__name__}: {exc}"
        raise
    finally:
        prefetch.join()
        if state.recorder is not None:
            state.recorder.close()
        writer = state.writer
        if writer is not None and not writer.closed:
            frames = state.recorder.frames_written if state.recorder else 0
            with _sigint_ignored():
                if status in ("failed", "interrupted") and frames == 0:
                    writer.abort()  # nothing worth keeping: leave whatever was at the path before
                else:
                    failure = _finish(writer, {"status": status, "frames": frames, "error": error}, options.trace)
                    if failure is not None:
                        if status != "failed":
                            raise failure
                        log.error("%s", failure.render())  # the recording's own error is the one raised
    if options.run.dry_run and result is not None:  # built, nothing executed: no trace, no writer
        return RecordResult(run=result, trace=options.trace)
    assert result is not None and state.writer is not None and state.recorder is not None
    stats = state.writer.stats
    return RecordResult(
        run=result,
        trace=options.trace,
        frames=state.recorder.frames_written,
        raw_bytes=stats.raw_bytes + stats.dedup_bytes + state.recorder.reused_bytes,
        stored_bytes=stats.stored_bytes,
        dedup_bytes=stats.dedup_bytes + state.recorder.reused_bytes,
        file_bytes=stats.file_bytes,
    )


def _prefetch_codec() -> threading.Thread:
    """Import the PLANES codec (and with it numpy, which a plain run never loads) in a background
    thread, so that the import overlaps the driver's start-up instead of delaying the first snapshot."""
    thread = threading.Thread(target=importlib.import_module, args=("capture.planes",), name="vkcap-prefetch", daemon=True)
    thread.start()
    return thread


class _sigint_ignored:
    """Finishing a trace takes milliseconds and must not be cut short by a second Ctrl-C."""

    def __enter__(self) -> None:
        self.saved: Any = None
        try:
            self.saved = signal.signal(signal.SIGINT, signal.SIG_IGN)
        except ValueError:  # not the main thread
            self.saved = None

    def __exit__(self, *exc: object) -> None:
        if self.saved is not None:
            signal.signal(signal.SIGINT, self.saved)


def _finish(writer: TraceWriter, end: dict[str, Any], trace: Path) -> TraceWriteFailed | None:
    """Write the end record and publish the trace (a failed recording beside a file already at the
    path, never over it). When even that fails (a full disk at the index, a failed rename), keep the
    partial file, which readers recover up to its last complete frame, and return the error, which
    says where that file is; None when the trace was published."""
    try:
        writer.add_meta(kinds.END, end)
        writer.close(keep_existing=end["status"] == "failed")
    except OSError as exc:
        writer.release()
        return TraceWriteFailed(
            f"could not finish the trace ({exc.strerror or exc}); its {end['frames']} complete frame(s) "
            f"are in {writer.partial_path} (vkcap info reads it)", file=trace,
        )
    return None


def record(options: RecordOptions, argv: list[str], on_event: Callable[[Event], None] | None = None,
           scenario: Scenario | None = None) -> RecordResult:
    import trio

    stop = StopRequest()
    with InterruptHandler(stop):
        return trio.run(record_async, options, argv, on_event, stop, scenario)
