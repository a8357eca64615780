"""The asynchronous frame executor: pipelined submission, completion, snapshots, events.

One trio nursery per run holds two tasks. The *submitter* records (once) and submits frames in order,
each signalling the fence of its ring slot; it takes a slot only when the slot is free, so at most
``slots`` frames are in flight. The *completer* waits for each fence in a worker thread
(``trio.to_thread.run_sync``), reports events, hands the frame's staging slot to the consumer (the
trace writer when recording), and frees the slot when the consumer returns. Frame N+1 therefore runs
on the GPU while frame N's snapshot is hashed, compressed and written, and memory in flight stays
bounded however many frames there are.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Callable, Protocol, Union

from .plan import Frame

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup
from .session import Session
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

    Valid only until the consumer's ``consume`` returns (the slot is then reused)."""

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

    async def consume(self, snapshot: FrameSnapshot) -> None:
        """Read the snapshot (in worker threads as needed); return when done with its slot.

        Several frames may be consumed at once (one task each, up to the number of slots); a
        consumer that needs frame order restores it itself (``snapshot.seq``)."""


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
    ends the run early; consumers of different frames may run concurrently (``slots`` bounds them);
    a GPU failure or timeout raises ``DeviceError``.
    """
    import trio

    emit = on_event or (lambda event: None)
    frames = session.plan.frames
    slots = getattr(consumer, "slots", slots)  # a consumer may ask for more frames in flight
    if session.query_pool is not None:
        slots = max(1, min(slots, len(frames)))  # a frame's queries must not be reset while unread
    session.prepare_ring(slots, consumer.slot_size(session) if consumer else 0)
    timeout_ns = int(frame_timeout_s * 1e9) if frame_timeout_s else 2**63 - 1
    # Free staging slots travel through a channel: consumers may finish out of order.
    free_send, free_receive = trio.open_memory_channel(slots)
    for i in range(slots):
        free_send.send_nowait(i)
    completed = 0
    order = seqs if seqs is not None else range(repeat * len(frames))
    total = len(order)
    # Host time per pass of the run, in the reference runner's --perf-counters-dump-path names.
    spent: dict[tuple[int, str], float] = {}

    def count(pass_index: int, name: str, since: float) -> None:
        spent[(pass_index, name)] = spent.get((pass_index, name), 0.0) + time.perf_counter() - since

    async def submitter(send: trio.MemorySendChannel) -> None:
        async with send:
            for n, seq in enumerate(order):
                pass_index, index = divmod(seq, len(frames))
                frame = frames[index]
                if stop is not None and stop.requested:
                    return
                slot = await free_receive.receive()
                if stop is not None and stop.requested:  # set while this waited for a free slot
                    return
                layout = consumer.layout(frame, seq) if consumer else NO_CAPTURE
                t = time.perf_counter()
                cb = session.command_buffer(frame, layout, slot)
                count(pass_index, "Creating Command Buffer", t)
                emit(FrameStarted(pass_index, frame, total, seq))
                t = time.perf_counter()
                session.submit(frame, cb, slot)
                count(pass_index, "Submit Commands", t)
                await send.send((pass_index, seq, frame, slot, layout, time.perf_counter()))

    async def consume(snapshot: FrameSnapshot, slot: int) -> None:
        nonlocal completed
        assert consumer is not None
        await consumer.consume(snapshot)
        completed += 1
        free_send.send_nowait(slot)

    async def completer(receive: trio.MemoryReceiveChannel, consumers: trio.Nursery) -> None:
        nonlocal completed
        async with receive:
            async for pass_index, seq, frame, slot, layout, t0 in receive:
                t = time.perf_counter()
                await trio.to_thread.run_sync(session.wait, frame, slot, timeout_ns)
                count(pass_index, "Wait for Fence", t)
                emit(FrameFinished(pass_index, seq, frame, time.perf_counter() - t0))
                for name, kind, begin, end in session.dispatch_timings(frame):
                    emit(DispatchTimed(pass_index, frame, name, kind, begin, end, session.ctx.timestamp_period))
                if consumer is None:
                    completed += 1
                    free_send.send_nowait(slot)
                else:  # frames are consumed concurrently; each frees its slot when done
                    consumers.start_soon(consume, FrameSnapshot(pass_index, seq, frame, layout, session.ring.slots[slot]), slot)

    send, receive = trio.open_memory_channel(slots)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(completer, receive, nursery)
            nursery.start_soon(submitter, send)
    except BaseExceptionGroup as group:
        raise_single(group)
    for pass_index in sorted({p for p, _ in spent}):
        # Queries are reset inside each frame's command buffer: no host time, as the reference measures it.
        for name in ("Reset Query Pool", "Creating Command Buffer", "Submit Commands", "Wait for Fence"):
            session.timer.add("Run Scenario", f"{name}. Iteration: {pass_index + 1}", spent.get((pass_index, name), 0.0))
    return completed


def leaves(exc: BaseException) -> list[BaseException]:
    """The non-group exceptions inside ``exc`` (itself when it is not a group)."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]


def raise_single(group: BaseExceptionGroup) -> None:
    """Re-raise the one real error of a nursery's group (tasks cancelled because of it do not count),
    so callers see ``DeviceError`` or ``KeyboardInterrupt`` rather than a group; else the group."""
    import trio

    real = [e for e in leaves(group) if not isinstance(e, trio.Cancelled)]
    if len(real) == 1:
        raise real[0] from None
    raise group
