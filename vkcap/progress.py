"""A rich progress bar for long runs, silent when stderr is not a terminal."""
from __future__ import annotations

import sys
from typing import Any

from vkcore.exec.executor import Event, FrameFinished, FrameStarted

LONG_RUN_FRAMES = 2  # show a bar once a run has more frames (frames x repeats) than this


class FrameProgress:
    """Counts finished frames; draws a bar only on a terminal and only for runs of several frames."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._progress: Any = None
        self._task: Any = None
        self.finished = 0

    @classmethod
    def for_terminal(cls) -> "FrameProgress":
        return cls(sys.stderr.isatty())

    def __enter__(self) -> "FrameProgress":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def _start(self, total: int) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self._progress = Progress(
            TextColumn("[bold]frames"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
            console=Console(stderr=True), transient=True,
        )
        self._progress.start()
        self._task = self._progress.add_task("frames", total=total)

    def on_event(self, event: Event) -> None:
        if isinstance(event, FrameFinished):
            self.finished += 1
            if self._progress is not None:
                self._progress.update(self._task, completed=self.finished)
        elif isinstance(event, FrameStarted) and self.enabled and self._progress is None:
            if event.total_frames > LONG_RUN_FRAMES:
                self._start(event.total_frames)
