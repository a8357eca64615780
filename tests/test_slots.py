"""vkcore/exec/slots.py: free slots given back from threads, taken by the trio task that submits."""
from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest
import trio

from vkcore.exec.slots import FreeSlots


class CountingToken:
    """A trio token that counts the calls made into trio from other threads."""

    def __init__(self) -> None:
        self.token = trio.lowlevel.current_trio_token()
        self.calls = 0

    def run_sync_soon(self, *args: object) -> None:
        self.calls += 1
        self.token.run_sync_soon(*args)


def test_a_slot_given_back_from_a_thread_wakes_the_waiting_task_and_otherwise_waits_to_be_taken() -> None:
    async def main() -> list[int]:
        token = CountingToken()
        free = FreeSlots(token, range(2))
        taken = [await free.take(), await free.take()]
        work: Future[None] = Future()
        free.hold(taken[0], work, lambda e: None)
        assert free.held() == [work]
        # nobody waits yet: completing the work queues the slot without a call into trio
        thread = threading.Thread(target=work.set_result, args=(None,))
        thread.start()
        thread.join()
        taken.append(await free.take())
        assert free.held() == [] and token.calls == 0
        # now the task waits, and a thread's completion wakes it
        later: Future[None] = Future()
        free.hold(taken[1], later, lambda e: None)
        timer = threading.Timer(0.05, later.set_result, args=(None,))
        timer.start()
        with trio.fail_after(5):
            taken.append(await free.take())
        assert token.calls == 1
        free.give(taken[2])
        taken.append(await free.take())
        return taken

    assert trio.run(main) == [0, 1, 0, 1, 0]


def test_failed_work_keeps_its_slot_and_reports_its_exception_in_the_trio_thread() -> None:
    async def main() -> tuple[list[BaseException], bool]:
        token = trio.lowlevel.current_trio_token()
        free = FreeSlots(token, range(1))
        slot = await free.take()
        seen: list[BaseException] = []
        trio_thread = threading.get_ident()
        in_trio: list[bool] = []

        def failed(e: BaseException) -> None:
            in_trio.append(threading.get_ident() == trio_thread)
            seen.append(e)

        work: Future[None] = Future()
        free.hold(slot, work, failed)
        thread = threading.Thread(target=work.set_exception, args=(OSError("disk full"),))
        thread.start()
        thread.join()
        await trio.sleep(0.01)
        with trio.move_on_after(0.1) as waited:
            await free.take()
        return seen, waited.cancelled_caught and in_trio == [True]

    seen, kept = trio.run(main)
    assert [str(e) for e in seen] == ["disk full"] and kept


def test_work_completing_after_the_run_is_over_is_ignored() -> None:
    work: Future[None] = Future()

    async def main() -> FreeSlots:
        free = FreeSlots(trio.lowlevel.current_trio_token(), range(1))
        free.hold(await free.take(), work, lambda e: pytest.fail("not in a run"))
        return free

    free = trio.run(main)
    work.set_exception(OSError("late"))  # run_sync_soon raises RunFinishedError: nothing to tell
    assert free.held() == []


def test_a_thread_takes_slots_given_back_by_other_threads_without_calling_into_trio_until_closed() -> None:
    async def main() -> tuple[list[int | None], int]:
        token = CountingToken()
        free = FreeSlots(token, range(1))
        taken: list[int | None] = []

        def submitting() -> None:  # as the executor's submitting thread: takes a slot per frame
            for _ in range(4):
                taken.append(free.take_in_thread())

        thread = threading.Thread(target=submitting)
        thread.start()
        for _ in range(3):  # each slot held by work that a third thread completes
            while len(taken) < 1 + _:
                await trio.sleep(0.001)
            work: Future[None] = Future()
            free.hold(taken[-1], work, lambda e: None)  # type: ignore[arg-type]
            done = threading.Thread(target=work.set_result, args=(None,))
            done.start()
            done.join()
        while len(taken) < 4:
            await trio.sleep(0.001)
        free.close()  # a closed FreeSlots gives a waiting thread None
        assert free.take_in_thread() is None
        thread.join()
        return taken, token.calls

    taken, calls = trio.run(main)
    assert taken == [0, 0, 0, 0] and calls == 0
