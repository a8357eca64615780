"""The asynchronous frame executor: submits a session's frames in order and reports events.

One trio nursery per run. The GPU wait of each frame runs in a worker thread
(``trio.to_thread.run_sync``), so the event loop stays free for subscribers: the progress display,
and (when recording) the snapshot pipeline. Subscribers receive plain dataclass events through
``on_event``; a ``frame_hook`` runs after each frame's fence and may await (backpressure).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Awaitable, Callable, Union

from .plan import Frame
from .session import Session


@dataclass(frozen=True)
class FrameStarted:
    pass_index: int
    frame: Frame
    total_frames: int  # frames x repeats of the whole run


@dataclass(frozen=True)
class FrameFinished:
    pass_index: int
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
FrameHook = Callable[[int, Frame], Awaitable[None]]


async def execute(
    session: Session,
    *,
    repeat: int = 1,
    on_event: EventHandler | None = None,
    frame_hook: FrameHook | None = None,
    frame_timeout_s: float | None = None,
) -> None:
    """Run every frame of the session's plan ``repeat`` times, in order.

    Guarantees: frame N+1 is submitted only after frame N's fence signalled and ``frame_hook`` for
    frame N returned; events are delivered in order. A GPU failure raises ``DeviceError``.
    """
    import trio

    emit = on_event or (lambda event: None)
    timeout_ns = int(frame_timeout_s * 1e9) if frame_timeout_s else 2**63 - 1
    total = repeat * len(session.plan.frames)
    for pass_index in range(repeat):
        for frame in session.plan.frames:
            emit(FrameStarted(pass_index, frame, total))
            t0 = time.perf_counter()
            session.submit(frame)
            await trio.to_thread.run_sync(session.wait, frame, timeout_ns)
            emit(FrameFinished(pass_index, frame, time.perf_counter() - t0))
            for d, begin, end in session.dispatch_timings(frame):
                emit(DispatchTimed(pass_index, frame, d.pipeline.shader_uid, "ComputeDispatch", begin, end, session.ctx.timestamp_period))
            if frame_hook is not None:
                await frame_hook(pass_index, frame)
