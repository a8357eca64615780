"""``record``: run a scenario through the executor and write every frame boundary into a trace.

The recorder is the executor's frame consumer. For each finished frame it hashes and compresses the
captured bytes in a worker thread (zstd and xxhash release the GIL) while the GPU runs the next frame,
appends the blobs (stored once per content) and then one ``frame`` record naming them. The records of
the trace are described in ``docs/trace-format.md``.
"""
from __future__ import annotations

import datetime
import sys
import json
import platform
import signal
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import logging

from vkcore.errors import EXIT_FAILURE, VkcapError
from vkcore.executor import FrameSnapshot, StopRequest, raise_single
from vkcore.plan import Frame, Plan, written_resources
from vkcore.runner import RunOptions, RunResult, run_async
from vkcore.scenario import Buffer, DispatchCompute, Scenario, load_scenario
from vkcore.session import Session
from vkcore.staging import CaptureLayout, build_layout

from . import kinds
from .container import PreparedBlob, TraceWriter
from .embed import portable_scenario

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup

TRACE_SCHEMA = 1  # version of the META record layout described in docs/trace-format.md
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
    threads: int = 0


@dataclass
class RecordResult:
    run: RunResult
    trace: Path
    frames: int = 0
    raw_bytes: int = 0
    stored_bytes: int = 0
    dedup_bytes: int = 0
    file_bytes: int = 0


def describe_resource(scenario: Scenario, uid: str) -> dict[str, Any]:
    """What a snapshot of ``uid`` is: kind, size, format, dims (generic over resource kinds)."""
    r = scenario.by_uid[uid]
    desc: dict[str, Any] = {"kind": r.KIND}
    for name in ("size", "format", "dims", "mips", "tiling"):
        value = getattr(r, name, None)
        if value not in (None, "", ()):
            desc[name] = list(value) if isinstance(value, tuple) else value
    return desc


def dispatch_writes(scenario: Scenario, cmd: DispatchCompute) -> list[str]:
    """Resources a dispatch may write: bound with an access other than ``readonly``."""
    out = []
    for b in cmd.bindings:
        r = scenario.by_uid[b.resource_ref]
        if getattr(r, "shader_access", "readwrite") != "readonly" and b.resource_ref not in out:
            out.append(b.resource_ref)
    return out


class TraceRecorder:
    """The executor's frame consumer that writes snapshots into a :class:`TraceWriter`."""

    def __init__(self, writer: TraceWriter, plan: Plan, options: RecordOptions) -> None:
        self.writer = writer
        self.plan = plan
        self.scenario = plan.scenario
        self.options = options
        self.frames_written = 0
        sizes = {r.uid: r.size for r in self.scenario.of_kind(Buffer)}
        self._size = sizes.__getitem__
        bound = {b.resource_ref for c in self.scenario.commands if isinstance(c, DispatchCompute) for b in c.bindings}
        # A checkpoint stores every resource a dispatch binds: the declared access is advice, not a promise.
        self.checkpoint_set = tuple(r.uid for r in self.scenario.of_kind(Buffer) if r.uid in bound)
        self._layouts: dict[tuple[int, bool], CaptureLayout] = {}

    # -- FrameConsumer --------------------------------------------------------------------------

    def is_checkpoint(self, seq: int) -> bool:
        k = self.options.checkpoint_every
        return k > 0 and (seq + 1) % k == 0

    def _layout(self, frame: Frame, checkpoint: bool) -> CaptureLayout:
        key = (frame.index, checkpoint)
        if key not in self._layouts:
            entries: list[tuple[str, int, int | None]] = []
            if self.options.dispatch_level:
                for cmd in frame.dispatches:
                    if isinstance(cmd, DispatchCompute):
                        entries += [(uid, self._size(uid), cmd.index) for uid in dispatch_writes(self.scenario, cmd)]
            boundary = list(frame.capture)
            if checkpoint:
                boundary += [u for u in self.checkpoint_set if u not in boundary]
            entries += [(uid, self._size(uid), None) for uid in boundary]
            self._layouts[key] = build_layout(entries)
        return self._layouts[key]

    def slot_size(self, session: Session) -> int:
        variants = (False, True) if self.options.checkpoint_every > 0 else (False,)
        return max((self._layout(f, c).size for f in self.plan.frames for c in variants), default=0)

    def layout(self, frame: Frame, seq: int) -> CaptureLayout:
        return self._layout(frame, self.is_checkpoint(seq))

    async def consume(self, snapshot: FrameSnapshot) -> None:
        import trio

        items = snapshot.layout.items
        views = [snapshot.slot.view(i) for i in items]
        prepared: list[PreparedBlob] = await trio.to_thread.run_sync(self._compress_all, views)
        await trio.to_thread.run_sync(self._write_frame, snapshot, prepared)

    # -- work done in worker threads -------------------------------------------------------------

    def _compress_all(self, views: list[memoryview]) -> list[PreparedBlob]:
        return [self.writer.compress_blob(v) for v in views]

    def _write_frame(self, snapshot: FrameSnapshot, prepared: list[PreparedBlob]) -> None:
        try:
            self._append_frame(snapshot, prepared)
        except OSError as exc:
            raise TraceWriteFailed(
                f"cannot write the trace ({exc.strerror or exc}) at frame {snapshot.seq}; "
                f"frames 0-{snapshot.seq - 1} were complete", file=self.options.trace,
            ) from None

    def _append_frame(self, snapshot: FrameSnapshot, prepared: list[PreparedBlob]) -> None:
        for p in prepared:
            self.writer.write_prepared(p)
        frame = snapshot.frame
        boundary = {i.uid: p.key for i, p in zip(snapshot.layout.items, prepared) if i.after_command is None}
        body: dict[str, Any] = {
            "seq": snapshot.seq,
            "pass": snapshot.pass_index,
            "index": frame.index,
            "frame_id": frame.frame_id,
            "snapshots": {uid: boundary[uid] for uid in frame.capture},
        }
        dispatch_level = [
            {"command": i.after_command, "uid": i.uid, "blob": p.key}
            for i, p in zip(snapshot.layout.items, prepared)
            if i.after_command is not None
        ]
        if dispatch_level:
            body["dispatches"] = dispatch_level
        if self.is_checkpoint(snapshot.seq):
            self.writer.add_meta(kinds.CHECKPOINT, {"seq": snapshot.seq, "state": {u: boundary[u] for u in self.checkpoint_set}})
        self.writer.add_meta(kinds.FRAME, body)
        self.frames_written += 1

    # -- the start of a trace --------------------------------------------------------------------

    def write_preamble(self, session: Session, argv: list[str]) -> None:
        """Header, scenario (original and portable), embedded files, fingerprint, resources, and the
        initial state as checkpoint -1. Runs before the first frame."""
        scenario = self.scenario
        deps = {uid: m.dependencies for uid, m in session.modules.items()}
        portable, files = portable_scenario(scenario, deps)
        self.writer.add_meta(
            kinds.HEADER,
            {
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
            },
        )
        original = scenario.path.read_bytes()
        self.writer.add_meta(
            kinds.SCENARIO,
            {"name": scenario.path.name, "original": original.decode("utf8", "replace"), "portable": json.dumps(portable, indent=1)},
        )
        for f in files:
            key = self.writer.put_blob(f.source.read_bytes())
            self.writer.add_meta(kinds.FILE, {"name": f.name, "role": f.role, "blob": key, "size": f.source.stat().st_size})
        for uid, module in session.modules.items():
            self.writer.add_meta(kinds.SPIRV, {"shader": uid, "blob": self.writer.put_blob(module.code)})
        self.writer.add_meta(kinds.FINGERPRINT, session.ctx.fingerprint())
        uids = [r.uid for r in scenario.of_kind(Buffer)]
        self.writer.add_meta(kinds.RESOURCES, {"resources": {u: describe_resource(scenario, u) for u in uids}})
        state = {u: self.writer.put_blob(session.resource_bytes(u)) for u in uids}
        self.writer.add_meta(kinds.CHECKPOINT, {"seq": -1, "state": state})


def _version() -> str:
    from vkcap import __version__

    return __version__


def default_trace_path(scenario: Path) -> Path:
    return Path("traces") / f"{scenario.stem}.vkt"


async def _watch_interrupts(stop: StopRequest, task_status: Any) -> None:
    """First Ctrl-C: stop submitting, finish the frames in flight, close the trace. Second: abort."""
    import trio

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for _ in signals:
            if stop.requested:
                raise KeyboardInterrupt
            stop.set()


async def record_async(options: RecordOptions, argv: list[str]) -> RecordResult:
    """Record a trace. Nothing is written before the scenario is validated and the session built;
    the trace appears at its path only once complete (or, after Ctrl-C, closed with what was done)."""
    import trio

    scenario = load_scenario(options.run.scenario)
    stop = StopRequest()
    state: dict[str, Any] = {}

    async def on_session(session: Session) -> None:
        options.trace.parent.mkdir(parents=True, exist_ok=True)
        writer = TraceWriter(options.trace, level=options.level, threads=options.threads)
        state["writer"] = writer
        recorder = TraceRecorder(writer, session.plan, options)
        state["recorder"] = recorder
        recorder.write_preamble(session, argv)

    class _Consumer:
        """Forwards to the recorder created in ``on_session``."""

        def slot_size(self, session: Session) -> int:
            return state["recorder"].slot_size(session)

        def layout(self, frame: Frame, seq: int) -> CaptureLayout:
            return state["recorder"].layout(frame, seq)

        async def consume(self, snapshot: FrameSnapshot) -> None:
            await state["recorder"].consume(snapshot)

    result: RunResult | None = None
    status, error = "complete", ""
    try:
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(_watch_interrupts, stop)
                try:
                    result = await run_async(options.run, consumer=_Consumer(), on_session=on_session, stop=stop, scenario=scenario)
                finally:
                    nursery.cancel_scope.cancel()
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
        writer: TraceWriter | None = state.get("writer")
        if writer is not None and not writer.closed:
            recorder: TraceRecorder = state["recorder"]
            if status == "failed" and recorder.frames_written == 0:
                writer.abort()  # nothing worth keeping: leave whatever was at the path before
            else:
                _finish(writer, {"status": status, "frames": recorder.frames_written, "error": error})
    assert result is not None
    writer = state["writer"]
    stats = writer.stats
    return RecordResult(
        run=result,
        trace=options.trace,
        frames=state["recorder"].frames_written,
        raw_bytes=stats.raw_bytes + stats.dedup_bytes,
        stored_bytes=stats.stored_bytes,
        dedup_bytes=stats.dedup_bytes,
        file_bytes=stats.file_bytes,
    )


def _finish(writer: TraceWriter, end: dict[str, Any]) -> None:
    """Write the end record and publish the trace; when even that fails (a full disk), keep the
    partial file, which readers recover up to its last complete frame, and say where it is."""
    try:
        writer.add_meta(kinds.END, end)
        writer.close()
    except OSError as exc:
        log.error(
            "could not finish the trace (%s); %d complete frame(s) are in %s (vkcap info reads it)",
            exc.strerror or exc, end["frames"], writer.partial_path,
        )
        writer.release()


def record(options: RecordOptions, argv: list[str]) -> RecordResult:
    import trio

    return trio.run(record_async, options, argv)
