"""Hand-offs between the executor's trio task and its completing thread that cost trio a wake-up only
while it waits: the ring's free slots, and the events the thread reports.

A thread that tells trio something (``run_sync_soon``) wakes the trio thread, which then runs a
callback under the GIL that every thread of a recording needs: 0.1 ms or more a frame on the GPU hosts
we measured. A slot given back while the submitter has slots to spare, as in a steady pipeline, is taken on
its next frame without one; events that arrive before trio has emitted the last ones join them.
"""
from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future
from typing import Any, Callable, Iterable, TypeVar

T = TypeVar("T")


def _tell(token: Any, fn: Callable[..., None], *args: Any) -> None:
    """``fn(*args)`` soon in the trio thread; nothing when the run is over (nobody is listening)."""
    try:
        token.run_sync_soon(fn, *args)
    except RuntimeError:  # trio.RunFinishedError
        pass


class _Wakeup:
    """State that threads change and one trio task waits on, under one lock."""

    def __init__(self, token: Any) -> None:
        self.token = token
        self.lock = threading.Lock()
        self._event: Any = None  # the trio.Event the task waits on, while it waits

    def changed(self, change: Callable[[], None]) -> None:
        """Run ``change()`` under the lock, then wake the task if it waits. Any thread."""
        with self.lock:
            change()
            event, self._event = self._event, None
        if event is not None:
            _tell(self.token, event.set)

    async def until(self, ready: Callable[[], T | None]) -> T:
        """The first value of ``ready()`` (called under the lock) that is not None, waiting for changes
        in between. In the trio thread; not a checkpoint when ``ready()`` has a value at once."""
        import trio

        while True:
            with self.lock:
                value = ready()
                if value is not None:
                    return value
                self._event = event = trio.Event()
            await event.wait()


class FreeSlots:
    """Free slot numbers, and the consumers' work that still holds slots. :meth:`take` belongs to the
    trio thread of ``token``'s run; the other methods are thread-safe."""

    def __init__(self, token: Any, slots: Iterable[int]) -> None:
        self._state = _Wakeup(token)
        self._free = deque(slots)
        self._held: set[Future[Any]] = set()

    async def take(self) -> int:
        """The next free slot, waiting for one when none is free."""
        return await self._state.until(lambda: self._free.popleft() if self._free else None)

    def give(self, slot: int) -> None:
        """Free ``slot``."""
        self._state.changed(lambda: self._free.append(slot))

    def hold(self, slot: int, work: Future[Any], failed: Callable[[BaseException], None]) -> None:
        """Keep ``slot`` until ``work`` completes, then free it; if ``work`` fails, call
        ``failed(exception)`` in the trio thread instead (the slot stays taken)."""
        with self._state.lock:
            self._held.add(work)
        work.add_done_callback(lambda done: self._done(slot, done, failed))

    def _done(self, slot: int, work: Future[Any], failed: Callable[[BaseException], None]) -> None:
        exception = work.exception()
        with self._state.lock:
            self._held.discard(work)
        if exception is None:
            self.give(slot)
        else:
            _tell(self._state.token, failed, exception)

    def held(self) -> list[Future[Any]]:
        """The work that still holds slots."""
        with self._state.lock:
            return list(self._held)


class Outbox:
    """Items put by threads, taken in order by a trio task: :meth:`put` and :meth:`close` are
    thread-safe, :meth:`take` belongs to the trio thread of ``token``'s run."""

    def __init__(self, token: Any) -> None:
        self._state = _Wakeup(token)
        self._items: list[Any] = []
        self._closed = False

    def put(self, item: Any) -> None:
        self._state.changed(lambda: self._items.append(item))

    def close(self) -> None:
        """No more items: :meth:`take` returns what is left, then an empty list."""
        self._state.changed(lambda: setattr(self, "_closed", True))

    async def take(self) -> list[Any]:
        """Every item put since the last call (waiting for one); empty once closed and emptied."""
        def ready() -> list[Any] | None:
            if not self._items and not self._closed:
                return None
            items, self._items = self._items, []
            return items

        return await self._state.until(ready)
