"""The progress file: how a process doing device work for another (an isolated child, a suite worker, a
fleet actor) leaves, line by line, which frame it was running, so that its parent can say where it died.

A writer (:class:`ProgressFile`) appends ``frame SEQ`` when a frame is submitted and ``done SEQ`` when the
device has finished it, each line at once (one ``write``: nothing is buffered in the process that may
die). Frames are pipelined (the next one is submitted while one runs), so the frame a dead process's
device was running is the oldest one submitted and not done (:func:`frame_running`), not the last one
submitted.
"""
from __future__ import annotations

import os
from pathlib import Path

from .fault_injection import crash_if_asked


class ProgressFile:
    """The writer's side (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def frame_started(self, seq: int) -> None:
        os.write(self.fd, f"frame {seq}\n".encode())

    def frame_finished(self, seq: int) -> None:
        crash_if_asked(seq)
        os.write(self.fd, f"done {seq}\n".encode())

    def close(self) -> None:
        os.close(self.fd)


def frame_running(progress: Path) -> int | None:
    """The frame a dead process was running, from its progress file: the oldest frame submitted and not
    finished; the last one submitted when all were finished (it died after the device's work, reading or
    comparing that frame); None when none was submitted (or no file)."""
    try:
        lines = progress.read_text().splitlines()
    except FileNotFoundError:
        return None
    started = [int(ln.split()[1]) for ln in lines if ln.startswith("frame ")]
    done = {int(ln.split()[1]) for ln in lines if ln.startswith("done ")}
    return next((seq for seq in started if seq not in done), started[-1] if started else None)
