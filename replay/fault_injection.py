"""A crash drill: ``VKCAP_TEST_CRASH_AT_FRAME=N`` makes a process doing device work for another (one that
writes a progress file: an isolated child, a probe server, a suite worker, a fleet actor, the pytest
plugin's child) kill itself with SIGSEGV while frame N runs, exactly as a crashing driver kills it.

This is the one place the variable is read. It is a documented debugging knob rather than a test hook
hidden in the replay: the crash handling it rehearses (the frame named, the signal, a replacement worker,
``--retries``, a fleet's rescheduling) spans processes that a test cannot reach into (Ray's actors, a
suite's workers), and an engineer wiring vkcap into CI can use it the same way to see a crash reported.
A process that replays in itself, without a progress file, never crashes on it.
"""
from __future__ import annotations

import os
import signal

CRASH_AT_FRAME = "VKCAP_TEST_CRASH_AT_FRAME"


def crash_if_asked(seq: int) -> None:
    """Die of SIGSEGV now when ``$VKCAP_TEST_CRASH_AT_FRAME`` is ``seq`` (called as frame ``seq``
    finishes on the device, before the progress file says so: the frame is the one running)."""
    asked = os.environ.get(CRASH_AT_FRAME)
    if asked is not None and asked.strip().lstrip("-").isdigit() and int(asked) == seq:
        os.kill(os.getpid(), signal.SIGSEGV)  # a real fatal signal, as a crashing driver delivers it
