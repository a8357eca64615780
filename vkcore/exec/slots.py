"""Hand-offs between the executor's trio task and its completing thread that cost trio a wake-up only
while it waits: the ring's free slots, and the events the thread reports.

A thread that tells trio something (``run_sync_soon``) wakes the trio thread, which then runs a
callback under the GIL that every thread of a recording needs: 0.1 ms or more a frame on the GPU hosts
we measured. So the executor's submitting thread takes free slots without trio
(:meth:`FreeSlots.take_in_thread`: a slot given back wakes it through a condition variable), and events
are put without waking trio, which looks for them every few tens of milliseconds (:meth:`Outbox.take`).
"""
from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future
from typing import Any, Callable, Iterable, TypeVar

T = TypeVar("T")
_CLOSED = object()  # what a closed FreeSlots gives a thread that waits for a slot


def _tell(token: Any, fn: Callable[..., None], *args: Any) -> None:
    """``fn(*args)`` soon in the trio thread; nothing when the run is over (nobody is listening)."""
    try:
        token.run_sync_soon(fn, *args)
    except RuntimeError:  # trio.RunFinishedError
        pass


class _Wakeup:
    """State that threads change and one trio task, or threads, wait on, under one lock."""

    def __init__(self, token: Any) -> None:
        self.token = token
        self.lock = threading.Lock()
        self.changes = threading.Condition(self.lock)  # for threads that wait
        self._event: Any = None  # the trio.Event the task waits on, while it waits

    def changed(self, change: Callable[[], None], wake: bool = True) -> None:
        """Run ``change()`` under the lock, then wake the waiting threads, and the task if it waits
        (unless not ``wake``: it then sees the change when it next looks). Any thread."""
        with self.lock:
            change()
            self.changes.notify_all()
            event = None
            if wake:
                event, self._event = self._event, None
        if event is not None:
            _tell(self.token, event.set)

    async def until(self, ready: Callable[[], T | None], poll_s: float | None = None) -> T:
        """The first value of ``ready()`` (called under the lock) that is not None, waiting for changes
        in between (and looking again every ``poll_s`` seconds, when given: for changes made without
        a wake-up). In the trio thread; not a checkpoint when ``ready()`` has a value at once."""
        # lazy: vkcap reproduce imports this module, not trio (with attr, attrs, idna, outcome, sniffio, sortedcontainers)
        import trio

        while True:
            with self.lock:
                value = ready()
                if value is not None:
                    return value
                self._event = event = trio.Event()
            with trio.move_on_after(float("inf") if poll_s is None else poll_s):
                await event.wait()

    def until_in_thread(self, ready: Callable[[], T | None]) -> T:
        """:meth:`until` for a thread that is not trio's: blocks until ``ready()`` has a value."""
        with self.changes:
            while (value := ready()) is None:
                self.changes.wait()
            return value


class FreeSlots:
    """Free slot numbers, and the consumers' work that still holds slots. :meth:`take` belongs to the
    trio thread of ``token``'s run; the other methods are thread-safe."""

    def __init__(self, token: Any, slots: Iterable[int]) -> None:
        self._state = _Wakeup(token)
        self._free = deque(slots)
        self._held: set[Future[Any]] = set()
        self._closed = False

    async def take(self) -> int:
        """The next free slot, waiting for one when none is free."""
        return await self._state.until(lambda: self._free.popleft() if self._free else None)

    def take_in_thread(self) -> int | None:
        """The next free slot, waiting for one when none is free, in a thread that is not trio's (no
        call into trio, whichever thread frees it); None once :meth:`close` was called."""
        def ready() -> object:
            if self._closed:
                return _CLOSED
            return self._free.popleft() if self._free else None

        slot = self._state.until_in_thread(ready)
        return None if slot is _CLOSED else slot  # type: ignore[return-value]

    def close(self) -> None:
        """:meth:`take_in_thread` returns None from now on (the run is ending). Any thread."""
        self._state.changed(lambda: setattr(self, "_closed", True))

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
        """Queue ``item`` without waking trio: :meth:`take` finds it within ``poll_s``."""
        self._state.changed(lambda: self._items.append(item), wake=False)

    def close(self) -> None:
        """No more items: :meth:`take` returns what is left, then an empty list."""
        self._state.changed(lambda: setattr(self, "_closed", True))

    async def take(self, poll_s: float = 0.05) -> list[Any]:
        """Every item put since the last call (waiting for one, looking every ``poll_s`` seconds: items
        are put without a wake-up, which costs trio's thread the GIL once per item); empty once closed
        and emptied."""
        def ready() -> list[Any] | None:
            if not self._items and not self._closed:
                return None
            items, self._items = self._items, []
            return items

        return await self._state.until(ready, poll_s)
