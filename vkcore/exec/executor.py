"""The asynchronous frame executor: pipelined submission, completion, snapshots, events.

One trio nursery per run holds the tasks of two worker threads and the emitter. The *submitting*
thread records (once) and submits frames in order, each signalling the fence of its ring slot; it takes
a slot only when the slot is free, so at most ``slots`` frames are in flight. The *completing* thread
waits for each fence in turn and, right after it, hands the frame's staging slot to the consumer (the
trace writer when recording, the comparer when replaying); the *emitter* reports both threads' events
in trio's. The slot is free when the consumer says so: at once, or when the work it handed to its own
threads is done. Frame N+1 therefore runs on the GPU while frame N's snapshot is hashed, compressed and
written, and memory in flight stays bounded however many frames there are.

No frame goes through trio on its way. On the GPU hosts we measured, a round trip through trio took
0.5-0.9 ms a frame, more than the GPU's 0.3 ms: the completing thread goes from one frame to the next
by itself (the frame loop of a thousand small frames took 20-30% less time), and a slot freed by the
consumer's threads wakes the submitting thread directly (:meth:`.slots.FreeSlots.take_in_thread`), not
trio. Events wait in an :class:`.slots.Outbox` that trio empties every few tens of milliseconds: a
frame costs trio's thread no wake-up at all.
"""
from __future__ import annotations

import queue
import sys
import threading
import time
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Protocol, Union

from .plan import Frame

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup
from .session import Session
from .slots import FreeSlots, Outbox
from .timing import PassTimes
from ..resources.staging import CaptureLayout, StagingSlot

DEFAULT_SLOTS = 2
NO_CAPTURE = CaptureLayout(())


@dataclass(frozen=True)
class FrameStarted:
    pass_index: int
    frame: Frame
    total_frames: int  # frames x repeats of the whole run
    seq: int = 0  # position in the whole run, repeats included


@dataclass(frozen=True)
class FrameFinished:
    pass_index: int
    seq: int  # position in the whole run, repeats included
    frame: Frame
    seconds: float  # submit to fence signalled, host clock


@dataclass(frozen=True)
class DispatchTimed:
    pass_index: int
    frame: Frame
    name: str
    kind: str
    begin_tick: int
    end_tick: int
    period_ns: float


Event = Union[FrameStarted, FrameFinished, DispatchTimed]
EventHandler = Callable[[Event], None]


@dataclass(frozen=True)
class FrameSnapshot:
    """A finished frame's captured bytes: ``slot.view(item)`` for each item of ``layout``.

    Valid until the consumer is done with it (see :meth:`FrameConsumer.consume`); the slot is then reused."""

    pass_index: int
    seq: int
    frame: Frame
    layout: CaptureLayout
    slot: StagingSlot


class FrameConsumer(Protocol):
    """What the executor needs from a capturer (the trace recorder implements it)."""

    def slot_size(self, session: Session) -> int:
        """Bytes one staging slot needs: the largest layout this consumer will ask for."""

    def layout(self, frame: Frame, seq: int) -> CaptureLayout:
        """What to copy for this execution of ``frame``."""

    def consume(self, snapshot: FrameSnapshot) -> Future[None] | None:
        """Read the snapshot, or hand it to threads of the consumer's own; None when done with its
        slot, else a future that completes when done with it (its exception fails the run).

        Called in the worker thread that waited for the frame's fence, right after the wait: one frame
        at a time, in frame order (so a consumer needs no ordering of its own). Blocking here holds the
        slot, which is how a consumer slows the submission down."""


def when_all(futures: Iterable[Future[Any]]) -> Future[None] | None:
    """A future that completes when every one of ``futures`` has (with the first exception among them,
    if any); None when there are none."""
    pending = list(futures)
    if not pending:
        return None
    done: Future[None] = Future()
    left = len(pending)
    lock = threading.Lock()

    def one_done(_: Future[Any]) -> None:
        nonlocal left
        with lock:
            left -= 1
            last = left == 0
        if last:
            failed = next((f.exception() for f in pending if f.exception() is not None), None)
            pending.clear()  # the futures hold their results: let them go with their owner
            if failed is not None:
                done.set_exception(failed)
            else:
                done.set_result(None)

    for f in pending:
        f.add_done_callback(one_done)
    return done


class StopRequest:
    """Set by a signal handler: no frame is submitted after it is set; frames in flight finish."""

    def __init__(self) -> None:
        self.requested = False

    def set(self) -> None:
        self.requested = True


async def execute(
    session: Session,
    *,
    repeat: int = 1,
    on_event: EventHandler | None = None,
    consumer: FrameConsumer | None = None,
    frame_timeout_s: float | None = None,
    stop: StopRequest | None = None,
    slots: int = DEFAULT_SLOTS,
    seqs: range | None = None,
) -> int:
    """Run every frame of the plan ``repeat`` times in order; return the number of frames completed.

    ``seqs`` restricts the run to those positions of the whole run (``seq = pass * frames + index``),
    e.g. a replay starting from a checkpoint; the session's state must then match the state before
    the first of them.

    Guarantees: frames execute in submission order, each ordered after the previous one by a full
    barrier; every submitted frame is waited for and consumed before this returns, also when ``stop``
    ends the run early; the consumer sees the frames one at a time, in order, while the work it hands
    to its own threads may overlap later frames (``slots`` bounds them); a GPU failure or timeout
    raises ``DeviceError``, a consumer's failure (its ``consume`` or the work it returned) its error.
    """
    # lazy: vkcap reproduce imports this module, not trio (with attr, attrs, idna, outcome, sniffio, sortedcontainers)
    import trio

    emit = on_event or (lambda event: None)
    frames = session.plan.frames
    slots = getattr(consumer, "slots", slots)  # a consumer may ask for more frames in flight
    if session.query_pool is not None:
        slots = max(1, min(slots, len(frames)))  # a frame's queries must not be reset while unread
    session.prepare_ring(slots, consumer.slot_size(session) if consumer else 0)
    timeout_ns = int(frame_timeout_s * 1e9) if frame_timeout_s else 2**63 - 1
    token = trio.lowlevel.current_trio_token()
    free = FreeSlots(token, range(slots))  # consumers may finish out of order, in their own threads
    # Submitted frames go to the completing thread in order; None ends it.
    submitted: queue.SimpleQueue[tuple[int, int, Frame, int, CaptureLayout, float] | None] = queue.SimpleQueue()
    outbox = Outbox(token)  # the completing thread's events, emitted by a trio task
    order = seqs if seqs is not None else range(repeat * len(frames))
    total = len(order)
    # Host time per pass of the run, in the reference runner's --perf-counters-dump-path names; queries
    # are reset inside each frame's command buffer: no host time, as the reference measures it. "Wait for
    # Fence" is the completing thread's, the others the submitter's.
    spent = PassTimes(("Reset Query Pool", "Creating Command Buffer", "Submit Commands", "Wait for Fence"),
                      first=order[0] // len(frames) if order else 0)
    completed = 0
    submitting_done = trio.Event()
    scope = trio.CancelScope()  # cancelled when a consumer's work fails
    failures: list[BaseException] = []  # from then on, the completing thread waits for no more frames

    def stopping() -> bool:
        return bool(failures) or (stop is not None and stop.requested)

    def submit_in_order() -> None:
        """Record and submit each frame in order as soon as a slot is free, in this one thread: a
        slot given back wakes it without a round trip through trio."""
        try:
            for seq in order:
                pass_index, index = divmod(seq, len(frames))
                frame = frames[index]
                if stopping():
                    return
                slot = free.take_in_thread()
                if slot is None or stopping():  # the run ends, or a stop came while this waited
                    return
                layout = consumer.layout(frame, seq) if consumer else NO_CAPTURE
                t = time.perf_counter()
                cb = session.command_buffer(frame, layout, slot)
                spent.add(pass_index, "Creating Command Buffer", time.perf_counter() - t)
                outbox.put(FrameStarted(pass_index, frame, total, seq))
                t = time.perf_counter()
                session.submit(frame, cb, slot)
                spent.add(pass_index, "Submit Commands", time.perf_counter() - t)
                submitted.put((pass_index, seq, frame, slot, layout, time.perf_counter()))
        finally:
            submitted.put(None)

    async def submitter() -> None:
        # not abandoned on cancellation: the thread stops at its next frame once the slots are closed
        await trio.to_thread.run_sync(submit_in_order)
        submitting_done.set()

    async def close_slots_when_done() -> None:
        """Close the free slots once the submitting thread is done, or at once when the run is
        cancelled (a consumer, the completer or an event handler failed; Ctrl-C), so that the thread
        never waits for a slot that will not come."""
        try:
            await submitting_done.wait()
        finally:
            free.close()

    def consumer_failed(failure: BaseException) -> None:  # in the trio thread
        failures.append(failure)
        free.close()
        scope.cancel()

    def complete_in_order() -> None:
        """Wait for each submitted frame and hand it to the consumer, in this one thread: the next
        frame is waited for as soon as the consumer returns, without a round trip through trio."""
        nonlocal completed
        while (item := submitted.get()) is not None:
            if failures:
                continue  # the run is being cancelled: drain
            pass_index, seq, frame, slot, layout, t0 = item
            t = time.perf_counter()
            session.wait(frame, slot, timeout_ns)
            spent.add(pass_index, "Wait for Fence", time.perf_counter() - t)
            pending = (consumer.consume(FrameSnapshot(pass_index, seq, frame, layout, session.ring.slots[slot]))
                       if consumer is not None else None)
            outbox.put(FrameFinished(pass_index, seq, frame, time.perf_counter() - t0))
            for name, kind, begin, end in session.dispatch_timings(frame):
                outbox.put(DispatchTimed(pass_index, frame, name, kind, begin, end, session.ctx.timestamp_period))
            completed += 1
            if pending is None:
                free.give(slot)
            else:
                free.hold(slot, pending, consumer_failed)

    async def completer() -> None:
        try:
            # not abandoned on cancellation: the thread finishes the frames submitted, then sees None
            await trio.to_thread.run_sync(complete_in_order)
        finally:
            free.close()  # (the submitting thread is done, or must stop: nothing completes its frames)
            outbox.close()

    async def emitter() -> None:
        while events := await outbox.take():
            for event in events:
                emit(event)

    try:
        with scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(emitter)
                nursery.start_soon(completer)
                nursery.start_soon(close_slots_when_done)
                nursery.start_soon(submitter)
    except BaseExceptionGroup as group:
        raise_single(group)
    finally:
        last = free.held()
        if last:  # the slots may be reused (or freed) only once the consumers are done with them
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(wait_futures, last)
    errors = failures or [e for e in (f.exception() for f in last) if e is not None]
    if errors:
        raise errors[0]
    session.timer.add_passes("Run Scenario", spent)
    return completed


def leaves(exc: BaseException) -> list[BaseException]:
    """The non-group exceptions inside ``exc`` (itself when it is not a group)."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]


def raise_single(group: BaseExceptionGroup) -> None:
    """Re-raise the one real error of a nursery's group (tasks cancelled because of it do not count),
    so callers see ``DeviceError`` or ``KeyboardInterrupt`` rather than a group; else the group."""
    # lazy: vkcap reproduce imports this module, not trio (with attr, attrs, idna, outcome, sniffio, sortedcontainers)
    import trio

    real = [e for e in leaves(group) if not isinstance(e, trio.Cancelled)]
    if len(real) == 1:
        raise real[0] from None
    raise group
