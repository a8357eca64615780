"""``record``: run a scenario through the executor and write every frame boundary into a trace.

The recording is a three-stage pipeline:

1. the executor runs frames on the GPU and copies each frame's captures into a staging slot;
2. the recorder's ``consume``, called in the thread that waited for the frame, in frame order, hashes
   the slot's blobs and computes their residuals against the same resources' previous snapshots
   (``plan_blobs``), then hands them to compressing threads, in parallel (zstd, xxhash and the
   compiled kernels release the GIL); the slot is free as soon as they are compressed;
3. a writer thread appends the compressed blobs (each content stored once) and the frame's records,
   in frame order.

So the GPU runs frame N+2 while frame N+1 is compressed and frame N is written, and no frame goes
through trio on its way. A bounded queue keeps the memory in flight to a few frames
however long the recording. The records of the trace are described in ``docs/trace-format.md``.

Temporal deltas: the recorder keeps a copy of each captured resource's last two snapshots (the
initial state first). A snapshot of the same length is offered to the writer as a delta against them
(DIFF against the last, or LINEAR through both), which the writer keeps when it is smaller than the
snapshot's own encoding. Snapshots of a checkpoint frame are stored whole (key frames), and so is a
snapshot that would take more than ``DELTA_CHAIN`` deltas to decode, so that reading any snapshot
decodes at most the frames since the last checkpoint.
"""
from __future__ import annotations

import importlib
import json
import logging
import os
import platform
import queue
import signal
import socket
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from vkcore.errors import EXIT_FAILURE, VkcapError
from vkcore.exec.executor import Event, FrameSnapshot, StopRequest, raise_single, when_all
from vkcore.scenario.npyio import NpyFormatError, read_header
from vkcore.exec.plan import Frame, Plan
from vkcore.exec.runner import RunOptions, RunResult, run_async
from vkcore.exec.resource_set import ResourceSet
from vkcore.commands import kind_of
from vkcore.scenario.model import Scenario
from vkcore.scenario.load import load_scenario
from vkcore.exec.session import Session
from vkcore.resources.staging import CaptureLayout, build_layout
from vkcore.version import vkcap_version

from .format import kinds, records
from .clock import creation_time
from .format.codecs.delta import PROBE_BYTES
from .writer import DELTA_MIN_BYTES, PARALLEL_PLANES_MIN_BYTES, PLANE_WIDTH, PreparedBlob, TraceWriter
from .embed import EmbeddedFile, portable_scenario
from .tally import SnapshotTally
from .views import derive_views

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup

TRACE_SCHEMA = 1  # version of the META record layout described in docs/trace-format.md
# The writer flushes to disk (and releases the flushed bytes from the page cache) every this many
# bytes, so closing does not wait long and the trace never crowds memory.
SYNC_EVERY = 32 << 20
#: the most deltas that decoding one snapshot takes (at most records.DELTA_MAX_BLOBS): a snapshot is
#: stored whole when a delta would need more, as at every checkpoint
DELTA_CHAIN = 16
#: previous snapshots kept for deltas, at most this many bytes in all (two per captured resource);
#: a resource that does not fit is stored whole
DELTA_KEEP_BYTES = 512 << 20
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
    threads: int = -1  # zstd worker threads for a large blob (-1: one per core, 0: none); never changes the bytes
    #: threads that share the snapshot work (hashes, residuals, planes, zstd) of the frames in flight
    #: (0: one per core); whatever their number, the trace's bytes are the same
    record_threads: int = 0
    fsync: bool = False  # sync the trace before publishing it (survives a power loss, not just a kill)
    deltas: bool = True  # store snapshots as deltas of the previous ones when smaller


def record_threads(options: RecordOptions) -> int:
    """The threads of a recording's snapshot work: ``options.record_threads``, or one per core."""
    return options.record_threads if options.record_threads > 0 else max(1, os.cpu_count() or 1)


@dataclass
class Throughput:
    """What the snapshot work of a recording went through, and how fast: ``captured_bytes`` is every
    snapshot copied back from the device, ``changed_bytes`` those whose content was new (hashed,
    compared with the previous snapshot, encoded); ``seconds`` from the first frame handed to the
    recorder to the last one written."""

    threads: int
    captured_bytes: int = 0
    changed_bytes: int = 0
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        rate = (lambda n: n / self.seconds / 1e9 if self.seconds > 0 else 0.0)
        return {"threads": self.threads, "captured_bytes": self.captured_bytes, "changed_bytes": self.changed_bytes,
                "seconds": self.seconds, "captured_gb_s": rate(self.captured_bytes),
                "changed_gb_s": rate(self.changed_bytes)}


@dataclass
class RecordResult:
    run: RunResult
    trace: Path
    frames: int = 0
    file_bytes: int = 0
    snapshots: dict[str, Any] = field(default_factory=dict)  # the snapshot totals, as capture.tally defines them
    throughput: Throughput | None = None


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
    views: dict[str, Any]  # uid -> the buffer's view (capture.views.View.to_json)


@dataclass
class _History:
    """The latest snapshots of one resource, as the next snapshot's delta references."""

    key: bytes  # the latest snapshot's content key
    data: memoryview  # its bytes (a copy, writable)
    bound: int  # decoding it decodes at most this many deltas
    prev_key: bytes | None = None  # the one before, when ``key`` was offered as a delta of it (LINEAR needs both)
    prev_data: Any = None  # its bytes; kept (as a spare buffer) after prev_key is dropped
    # (transform, residual codec) that a probe chose for this chain with two references, and the
    # whole snapshot's size that probe predicted: the chain's next deltas reuse both without a probe
    # (the writer still stores a snapshot whole when its delta is not clearly smaller)
    choice: tuple[int, int] | None = None
    whole_estimate: int | None = None


@dataclass
class _Plan:
    """What ``plan_blobs`` decided for one blob of a frame."""

    key: bytes
    residual: Any = None  # a capture.format.codecs.delta.Residual to offer the writer, or None
    known: bool = False  # the same content was planned before: written by then, nothing to compress


@dataclass
class QueuedFrame:
    """A frame handed to the writer, in frame order: its blobs being compressed (one future each)."""

    seq: int
    pass_index: int
    frame: Frame
    layout: CaptureLayout
    blobs: list[Future[PreparedBlob]]


class TraceRecorder:
    """The executor's frame consumer, feeding a :class:`TraceWriter` through a writer thread."""

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
        self._align = {uid: r.snapshot_alignment for uid, r in resources.resources.items()}
        bound = {b.resource_ref for c in self.scenario.commands for b in kind_of(c).bindings(c)}
        # A checkpoint stores every resource a dispatch (compute or graph) binds: the declared access is
        # advice, not a promise.
        self.checkpoint_set = tuple(uid for uid in resources.resources if uid in bound)
        # What no command can write keeps its initial content: its boundary snapshots and checkpoint
        # entries name the initial state's blob, and are never copied back from the device.
        self.unwritable = unwritable
        self.initial_keys: dict[str, str] = {}  # set by write_preamble
        self.tally = SnapshotTally(per_resource=False)  # the frames' snapshots as written, for record's closing figures
        self._layouts: dict[tuple[int, bool], CaptureLayout] = {}
        self.threads = record_threads(options)
        self._pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="vkcap-compress")
        self.throughput = Throughput(self.threads)
        self._first_frame_at: float | None = None
        self._writer_thread: threading.Thread | None = None
        self._frames_ended = False
        self.preamble_done = threading.Event()  # set once the preamble is written, or failed to be
        self.write_failure: BaseException | None = None  # what stopped the writer thread, if anything
        self._write_stopped = False  # a write or a compression failed: the remaining frames are dropped
        self._synced = 0
        self._sync_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vkcap-sync")
        self._syncing: Any = None  # the Future of the fsync (or cache release) in flight
        # Deltas: blobs are planned (hashed, residuals computed) in frame order as the executor hands the
        # frames over, then compressed in parallel.
        self._history: dict[str, _History] = {}  # uid -> its latest snapshots
        self._kept = 0  # bytes of snapshots held in _history
        # content key -> at most how many deltas decode it, for every blob planned or in the preamble
        # (its first plan is the one written first: planning and writing both go in frame order)
        self._bounds: dict[bytes, int] = {}
        # Residuals (and snapshot copies) go in the writer's blob buffers: on the VMs we measured, a page
        # written for the first time costs about 9 us (2.3 ms/MiB), and those buffers are written already.
        self._buffers = writer.blob_buffers
        # Staging slots: one frame on the GPU while the others are compressed in parallel, as many as
        # the cores can compress at once (each blob's planes run in parallel too).
        self.slots = 1 + min(8, max(2, self.threads))
        # Frames go to the writer thread in frame order, each as soon as it is planned: it waits in the
        # queue while its blobs compress, so the queue holds as many frames as there are slots (with 2,
        # only three frames of 16 MiB compressed at once on the GPU hosts, about 10 ms each: 20 such
        # frames recorded in 0.759 s against 0.684 s, an H200 host, medians of 7). A full queue holds
        # the executor's slots, which slows the submission down to what the disk takes.
        self._to_write: queue.Queue[QueuedFrame | None] = queue.Queue(self.slots)

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

    def consume(self, snapshot: FrameSnapshot) -> Future[None] | None:
        """Plan the slot's blobs (here: frames come in order), hand them to the compressing threads and
        the frame to the writer thread; the slot is free once they are compressed. Raises the writer
        thread's failure, if it stopped, which ends the run."""
        if self.write_failure is not None:
            raise self.write_failure
        if self._first_frame_at is None:
            self._first_frame_at = time.perf_counter()
        views = [snapshot.slot.view(i) for i in snapshot.layout.items]
        if self.options.deltas:
            plans: list[_Plan | None] = list(self.plan_blobs(snapshot.layout.items, views, self.is_checkpoint(snapshot.seq)))
        else:
            plans = [None] * len(views)
        blobs = [self._pool.submit(self._compress, view, plan) for view, plan in zip(views, plans)]
        self._to_write.put(QueuedFrame(snapshot.seq, snapshot.pass_index, snapshot.frame, snapshot.layout, blobs))
        return when_all(blobs)

    def compress_all(self, views: list[Any], keys: list[bytes]) -> list[PreparedBlob]:
        """Compress every view, whose content keys are ``keys``, in parallel; the results never alias
        the views (safe to reuse them)."""
        plans = [_Plan(k) for k in keys]
        if len(views) <= 1:
            return [self._compress(v, p) for v, p in zip(views, plans)]
        return list(self._pool.map(self._compress, views, plans))

    def _compress(self, view: Any, plan: _Plan | None) -> PreparedBlob:
        if plan is None:
            return self.writer.compress_blob(view)
        if plan.known:  # the blob planned first is written first: this one counts as a duplicate
            return PreparedBlob(plan.key.hex(), len(view), records.Codec.NONE, None, 0)
        try:
            return self.writer.compress_blob(view, key=plan.key, delta=plan.residual)
        finally:
            if plan.residual is not None:
                plan.residual.done()

    def plan_blobs(self, items: tuple[Any, ...], views: list[Any], checkpoint: bool) -> list[_Plan]:
        """Hash a frame's blobs and compute the residuals of those that may be stored as deltas of the
        same resource's previous snapshots; remember each as the next one's reference. Called in frame
        order (``consume`` sees to it), one frame at a time.

        Whether a blob may be a delta, and how many deltas decoding it takes at most (its bound): the
        snapshots of a checkpoint frame are key frames (whole, bound 0), and so is one whose bound
        would exceed ``DELTA_CHAIN``. Otherwise its bound is one more than its DIFF reference's. A
        LINEAR delta's second reference is the first one's own reference (or in its closure when the
        writer stored the first whole), so it adds nothing. Content planned before (a duplicate) is
        whatever was written then, with that bound, and starts the resource's chain afresh."""
        plans = []
        for item, view in zip(items, views):
            key = records.content_key(view)
            known = self._bounds.get(key)
            if known is not None:
                self._remember(item.uid, key, view, known)
                plans.append(_Plan(key, known=True))
                continue
            h = self._history.get(item.uid)
            size = memoryview(view).nbytes
            if (h is None or checkpoint or size < DELTA_MIN_BYTES or h.data.nbytes != size
                    or h.bound >= DELTA_CHAIN):
                self._bounds[key] = 0
                self._remember(item.uid, key, view, 0)
                plans.append(_Plan(key))
                continue
            spare = h.prev_data  # the reference before the last, or a free buffer: receives this snapshot
            if spare is None and self._kept + size <= DELTA_KEEP_BYTES:
                spare = self._buffers.take(size)
                self._kept += size
            refs = [(h.key, h.data)] + ([(h.prev_key, h.prev_data)] if h.prev_key is not None else [])
            out = self._buffers.take(size)
            reuse = h.choice if len(refs) == 2 else None
            residual = self.writer.residual(view, refs, out, keep=spare, choice=reuse)
            residual.release = lambda out=out: self._buffers.give(out)
            if reuse is not None:
                residual.whole_estimate = h.whole_estimate
            elif len(refs) == 2 and residual.inner is not None and residual.whole_probe is not None:
                h.choice = (residual.transform, residual.inner)
                h.whole_estimate = min(residual.whole_probe) * size // PROBE_BYTES
            bound = self._bounds[key] = h.bound + 1
            if spare is None:
                self._remember(item.uid, key, view, bound)
            else:  # the next snapshot may be LINEAR through this one and the last
                h.prev_key, h.prev_data = h.key, h.data
                h.key, h.data, h.bound = key, spare, bound
            plans.append(_Plan(key, residual))
        return plans

    def _remember(self, uid: str, key: bytes, view: Any, bound: int) -> None:
        """Keep a copy of ``view`` as ``uid``'s latest snapshot, the first of a new chain: the next
        snapshot may be a DIFF of it, not LINEAR (what it was stored as is not known here)."""
        size = memoryview(view).nbytes
        h = self._history.get(uid)
        if h is None or h.data.nbytes != size:
            if h is not None:
                self._kept -= h.data.nbytes + (0 if h.prev_data is None else h.prev_data.nbytes)
                del self._history[uid]
            if size < DELTA_MIN_BYTES or self._kept + size > DELTA_KEEP_BYTES:
                return
            h = self._history[uid] = _History(b"", self._buffers.take(size), bound)
            self._kept += size
        if h.key != key:  # else unchanged (captured, not written): h.data holds it already
            h.data[:] = memoryview(view).cast("B")
        h.key, h.bound, h.prev_key, h.choice = key, bound, None, None  # prev_data stays, as a spare buffer
        h.whole_estimate = None

    # -- the writer stage ------------------------------------------------------------------------

    def start_writer(self, preamble: Preamble) -> None:
        """Write the preamble, then the frames :meth:`consume` queues, in frame order, in a thread of
        their own until :meth:`end_frames`. The frames run on the GPU (and are compressed) while the
        preamble is written; :attr:`preamble_done` is set once it is, or could not be, written."""
        self._writer_thread = threading.Thread(target=self._write_all, args=(preamble,), name="vkcap-writer", daemon=True)
        self._writer_thread.start()

    def end_frames(self) -> None:
        """No frame follows: the writer thread ends once it has written those queued. Idempotent."""
        if self._writer_thread is not None and not self._frames_ended:
            self._frames_ended = True
            self._to_write.put(None)

    def wait_preamble(self) -> None:
        """Wait until the preamble is written or failed to be (at once when the writer never started)."""
        if self._writer_thread is not None:
            self.preamble_done.wait()

    def join_writer(self) -> None:
        """Wait for the writer thread (after :meth:`end_frames`)."""
        if self._writer_thread is not None:
            self._writer_thread.join()

    def _write_all(self, preamble: Preamble) -> None:
        try:
            self.write_preamble(preamble)
        except BaseException as exc:
            self._stop_writing(exc)
        finally:
            self.preamble_done.set()
        while (queued := self._to_write.get()) is not None:
            if self._write_stopped:
                continue  # drained, so that consume() never waits on a full queue
            try:
                prepared = [blob.result() for blob in queued.blobs]
            except BaseException:  # the run fails with this error: the executor has it too
                self._write_stopped = True
                continue
            try:
                self.write_frame(queued, prepared)
            except BaseException as exc:
                self._stop_writing(exc)

    def _stop_writing(self, failure: BaseException) -> None:
        self.write_failure = failure
        self._write_stopped = True

    def write_frame(self, queued: QueuedFrame, prepared: list[PreparedBlob]) -> None:
        try:
            self._append_frame(queued, prepared)
        except OSError as exc:
            raise TraceWriteFailed(
                f"cannot write the trace ({exc.strerror or exc}) at frame {queued.seq}; "
                f"frames 0-{queued.seq - 1} were complete", file=self.options.trace,
            ) from None

    def _append_frame(self, c: QueuedFrame, prepared: list[PreparedBlob]) -> None:
        before = self.writer.stats.raw_bytes
        for p in prepared:
            self.writer.write_prepared(p)
        stats = self.writer.stats
        written = stats.file_bytes
        self.throughput.captured_bytes += sum(p.raw_len for p in prepared)
        self.throughput.changed_bytes += stats.raw_bytes - before  # new content: each blob's first occurrence
        if self._first_frame_at is not None:
            self.throughput.seconds = time.perf_counter() - self._first_frame_at
        if written - self._synced >= SYNC_EVERY and (self._syncing is None or self._syncing.done()):
            if self._syncing is not None:
                self._syncing.result()  # an fsync that failed (EIO, ENOSPC) fails the recording here
            # in its own thread: the writer goes on appending while the disk works
            if self.options.fsync:
                self._syncing = self._sync_pool.submit(self.writer.sync, release_cache=True)
            else:
                self._syncing = self._sync_pool.submit(self.writer.release_cache)
            self._synced = written
        boundary = {i.uid: p.key for i, p in zip(c.layout.items, prepared) if i.after_command is None}
        unchanged = [u for u in c.frame.capture if u in self.unwritable]
        if self.is_checkpoint(c.seq):
            unchanged += [u for u in self.checkpoint_set if u in self.unwritable and u not in unchanged]
        for uid in unchanged:
            boundary[uid] = self.initial_keys[uid]
        body: dict[str, Any] = {
            "seq": c.seq,
            "pass": c.pass_index,
            "index": c.frame.index,
            "frame_id": c.frame.frame_id,
            "snapshots": {uid: boundary[uid] for uid in c.frame.capture},
        }
        dispatch_level = [
            self._dispatch_entry(i, p.key) for i, p in zip(c.layout.items, prepared) if i.after_command is not None
        ]
        if dispatch_level:
            body["dispatches"] = dispatch_level
        if self.is_checkpoint(c.seq):
            self.writer.add_meta(kinds.CHECKPOINT, {"seq": c.seq, "state": {u: boundary[u] for u in self.checkpoint_set}})
        self.writer.add_meta(kinds.FRAME, body)
        self.frames_written += 1
        self.tally.add_frame(body["snapshots"], ((e["uid"], e["blob"]) for e in dispatch_level), self.writer.blob_info)

    def _dispatch_entry(self, item: Any, key: str) -> dict[str, Any]:
        entry: dict[str, Any] = {"command": item.after_command, "uid": item.uid, "blob": key}
        if item.segment is not None:
            segment = next(s for s in self.graphs[item.after_command].segments if s.index == item.segment)
            entry.update(segment=item.segment, module=segment.module)
        return entry

    # -- the start of a trace --------------------------------------------------------------------

    def _put_all(self, payloads: list[Any]) -> list[str]:
        """Store several blobs, each content once; returns their keys. Small blobs are compressed in
        parallel. Large ones, whose planes are compressed in parallel already, go a few at a time (one
        per ``PLANE_WIDTH`` cores) and are written before the next few: on a machine of few cores they
        then split their planes into one buffer, which the frames' residuals reuse after them."""
        keys = [records.content_key(p) for p in payloads]
        first = {key: i for i, key in reversed(list(enumerate(keys)))}
        unique = sorted(first.values())
        small = [i for i in unique if memoryview(payloads[i]).nbytes < PARALLEL_PLANES_MIN_BYTES]
        large = [i for i in unique if memoryview(payloads[i]).nbytes >= PARALLEL_PLANES_MIN_BYTES]
        at_once = max(1, self.threads // PLANE_WIDTH)
        for batch in [small] + [large[k : k + at_once] for k in range(0, len(large), at_once)]:
            for p in self.compress_all([payloads[i] for i in batch], [keys[i] for i in batch]):
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
        if self.options.deltas:
            self._seed(initial)
        described = {u: resources[u].meta() for u in initial}
        for graph in session.graphs.values():  # intermediates, snapshotted after segments
            for seg in graph.segments:
                for name in seg.writes:
                    if name not in described:
                        described[name] = graph.resource(name).meta()
        spirv = {uid: m.code for uid, m in session.modules.items()}
        portable_text = json.dumps(portable, separators=(",", ":"))
        # derived from the JSON a reader loads, so that reading derives the same views from an older trace
        views = derive_views(json.loads(portable_text), spirv)
        return Preamble(
            header={
                "schema": TRACE_SCHEMA,
                "vkcap_version": vkcap_version(),
                "created": creation_time(),
                "host": socket.gethostname(),
                "platform": _platform(),
                "python": platform.python_version(),
                "argv": argv,
                "checkpoint_every": self.options.checkpoint_every,
                "dispatch_level": self.options.dispatch_level,
                "capture_all": self.options.run.capture_all,
                "repeat": self.options.run.repeat,
                "pipeline_layouts": session.pipeline_layouts(),
            },
            portable=portable_text,
            files=files,
            initial=initial,
            spirv=spirv,
            fingerprint=session.ctx.fingerprint(),
            described=described,
            views={uid: view.to_json() for uid, view in views.items()},
        )

    def _seed(self, initial: dict[str, bytes | memoryview]) -> None:
        """Make the initial state of every resource a frame captures its first delta reference (it is
        written whole, before the frames)."""
        variants = (False, True) if self.options.checkpoint_every > 0 else (False,)
        captured = {i.uid for f in self.plan.frames for c in variants for i in self._layout(f, c).items}
        for uid, content in initial.items():
            if uid in captured and uid not in self.unwritable:
                key = records.content_key(content)
                self._bounds[key] = 0
                self._remember(uid, key, content, 0)

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
        # An input file's payload is usually the initial state it gave: the file is then only hashed
        # (streamed through a small buffer), not read into memory, and one blob serves both.
        initial_keys = self._put_all(list(p.initial.values()))
        held = set(initial_keys)
        files = [_file_payload(f) for f in p.files]
        missing = [i for i, f in enumerate(files) if f.key not in held]
        keys = [f.key for f in files]
        for i, key in zip(missing, self._put_all([files[i].payload() for i in missing])):
            keys[i] = key  # what was read and stored, should the file have changed since it was hashed
        for embedded, f, key in zip(p.files, files, keys):
            body: dict[str, Any] = {"name": embedded.name, "role": embedded.role, "blob": key, "size": f.size}
            if f.npy_header is not None:
                body["npy_header"] = f.npy_header
            self.writer.add_meta(kinds.FILE, body)
        spirv_keys = self._put_all(list(p.spirv.values()))
        for uid, key in zip(p.spirv, spirv_keys):
            self.writer.add_meta(kinds.SPIRV, {"shader": uid, "blob": key})
        self.writer.add_meta(kinds.FINGERPRINT, p.fingerprint)
        self.writer.add_meta(kinds.RESOURCES, {"resources": p.described})
        self.writer.add_meta(kinds.VIEWS, {"views": p.views})  # even empty: readers then derive nothing
        self.initial_keys = dict(zip(p.initial, initial_keys))
        self.writer.add_meta(kinds.CHECKPOINT, {"seq": -1, "state": self.initial_keys})
        p.initial.clear()  # some are live mappings, valid only while the session is open


@dataclass
class _FilePayload:
    """An embedded file as the trace stores it: the content key of its payload (the data after a
    ``.npy`` header, or the whole file), that header, the file's size and how to read the payload."""

    source: Path
    key: str
    npy_header: bytes | None
    offset: int
    size: int

    def payload(self) -> memoryview:
        data = self.source.read_bytes()
        return memoryview(data)[self.offset:]


def _file_payload(f: EmbeddedFile) -> _FilePayload:
    """Hash ``f`` without holding it in memory. A ``.npy`` input whose payload fills the rest of the
    file is hashed from the end of its header (the header is kept apart, the payload stored as a
    blob shared with the resource's initial state); any other file whole."""
    size = f.source.stat().st_size
    offset, header = 0, None
    if f.role == "input" and f.source.suffix.lower() == ".npy":
        try:
            npy = read_header(f.source)
        except (NpyFormatError, OSError):
            npy = None
        if npy is not None and npy.data_offset + npy.nbytes == size:
            offset = npy.data_offset
            with open(f.source, "rb") as stream:
                header = stream.read(offset)
    return _FilePayload(f.source, records.file_content_key(f.source, offset).hex(), header, offset, size)


def _platform() -> str:
    """The host as ``platform.platform()`` names it on Linux (``Linux-6.1.0-18-amd64-x86_64-with-glibc2.36``),
    without what that costs: it runs ``uname -p`` in a child process and scans the interpreter's binary
    for the C library's version (2-12 ms before the first frame could run)."""
    u = platform.uname()  # its processor field, the one that runs ``uname -p``, is not read
    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError, AttributeError):  # not glibc, or no confstr
        libc = ""
    name = "-".join(part for part in (u.system, u.release, u.machine) if part)
    return f"{name}-with-{libc.replace(' ', '')}" if libc else name


def default_trace_path(scenario: Path) -> Path:
    """``traces/<stem>.vkt``; a file called ``scenario.json`` is named after its folder
    (``examples/heat/scenario.json`` -> ``traces/heat.vkt``), so that examples laid out alike do not collide."""
    name = scenario.stem
    if scenario.name == "scenario.json":
        name = Path(os.path.abspath(scenario)).parent.name or name
    return Path("traces") / f"{name}.vkt"


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


class _Recording:
    """The recorder's part in the run: the frame consumer (forwarding to the :class:`TraceRecorder`, which
    exists once the session is built) and the run's start and finish (:class:`vkcore.exec.runner.SessionUser`).
    ``nursery`` is where the task that finishes the trace once written runs."""

    def __init__(self, options: RecordOptions, argv: list[str]) -> None:
        self.options = options
        self.argv = argv
        self.nursery: Any = None
        self.writer: TraceWriter | None = None
        self.recorder: TraceRecorder | None = None
        self.end: dict[str, Any] | None = None  # the END record, once the run ended without failing

    async def start(self, session: Session) -> None:
        """Open the trace, gather the preamble (the initial state) and start the writer thread."""
        # lazy: trio's C extensions load after the Vulkan driver's libraries, not behind them on glibc's loader lock (at runner.py's top: vkcap run +12 ms)
        import trio

        options = self.options
        options.trace.parent.mkdir(parents=True, exist_ok=True)
        self.writer = TraceWriter(options.trace, level=options.level, threads=options.threads, fsync=options.fsync,
                                  workers=record_threads(options))
        resources = session.resources
        assert resources is not None
        self.recorder = TraceRecorder(self.writer, session.plan, options, resources, session.graphs,
                                      session.unwritable_resources())
        preamble = await trio.to_thread.run_sync(self.recorder.gather_preamble, session, self.argv)
        self.recorder.start_writer(preamble)
        self.nursery.start_soon(self._finish_when_written, self.recorder, self.writer)

    async def finish(self, result: RunResult | None) -> None:
        """Return once nothing reads the session's memory any more (the preamble is written). When the
        run did not fail (``result``), end the frames and set the END record: the writer thread then
        writes the last ones and the trace is finished (index, fsync, rename) while the session and
        the device close."""
        # lazy: trio's C extensions load after the Vulkan driver's libraries, not behind them on glibc's loader lock (at runner.py's top: vkcap run +12 ms)
        import trio

        if self.recorder is not None:
            await trio.to_thread.run_sync(self.recorder.wait_preamble)
        if result is not None and self.recorder is not None:
            self.end = {"status": "interrupted" if result.interrupted else "complete", "error": ""}
            self.recorder.end_frames()

    async def _finish_when_written(self, recorder: TraceRecorder, writer: TraceWriter) -> None:
        # lazy: trio's C extensions load after the Vulkan driver's libraries, not behind them on glibc's loader lock (at runner.py's top: vkcap run +12 ms)
        import trio

        await trio.to_thread.run_sync(recorder.join_writer)
        if self.end is None:  # the run failed: with the writer's error when that was its cause
            return
        if recorder.write_failure is not None:
            raise recorder.write_failure
        if recorder.frames_written:
            failure = await trio.to_thread.run_sync(_finish, writer, {**self.end, "frames": recorder.frames_written},
                                                    self.options.trace)
            if failure is not None:
                raise failure

    def _recorder(self) -> TraceRecorder:
        assert self.recorder is not None
        return self.recorder

    def slot_size(self, session: Session) -> int:
        return self._recorder().slot_size(session)

    @property
    def slots(self) -> int:
        return self._recorder().slots

    def layout(self, frame: Frame, seq: int) -> CaptureLayout:
        return self._recorder().layout(frame, seq)

    def consume(self, snapshot: FrameSnapshot) -> Future[None] | None:
        return self._recorder().consume(snapshot)


async def record_async(options: RecordOptions, argv: list[str], on_event: Callable[[Event], None] | None = None,
                       stop: StopRequest | None = None, scenario: Scenario | None = None) -> RecordResult:
    """Record a trace. Nothing is written before the scenario is validated and the session built;
    the trace appears at its path only once complete (or, after Ctrl-C, closed with what was done).
    ``scenario`` is ``options.run.scenario`` already loaded, if the caller has it."""
    # lazy: trio's C extensions load after the Vulkan driver's libraries, not behind them on glibc's loader lock (at runner.py's top: vkcap run +12 ms)
    import trio

    scenario = scenario or load_scenario(options.run.scenario)
    prefetch = _prefetch_codec()
    stop = stop or StopRequest()
    state = _Recording(options, argv)

    result: RunResult | None = None
    status, error = "complete", ""
    try:
        try:
            async with trio.open_nursery() as state.nursery:
                try:
                    result = await run_async(options.run, consumer=state, user=state, stop=stop,
                                             scenario=scenario, on_event=on_event)
                finally:
                    if state.recorder is not None:
                        state.recorder.end_frames()
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
        file_bytes=stats.file_bytes,
        snapshots=state.recorder.tally.totals(),
        throughput=state.recorder.throughput,
    )


def _prefetch_codec() -> threading.Thread:
    """Import the PLANES codec (zstandard, the compiled kernels) in a background thread, so that the
    import overlaps the driver's start-up instead of delaying the first snapshot."""
    thread = threading.Thread(target=importlib.import_module, args=("capture.format.codecs.planes",), name="vkcap-prefetch", daemon=True)
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
    # lazy: trio's C extensions load after the Vulkan driver's libraries, not behind them on glibc's loader lock (at runner.py's top: vkcap run +12 ms)
    import trio

    stop = StopRequest()
    with InterruptHandler(stop):
        return trio.run(record_async, options, argv, on_event, stop, scenario)
