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


class SuiteProgress:
    """A suite's progress on a terminal: traces done of all, failures so far, time left; on anything
    else, one log line per trace."""

    def __init__(self, total: int, log: Any) -> None:
        self.total, self.log = total, log
        self.done = self.failures = 0
        self._progress: Any = None
        self._task: Any = None
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._progress = Progress(TextColumn("[bold]traces"), BarColumn(), MofNCompleteColumn(),
                                      TextColumn("{task.fields[failures]} failure(s)"), TimeRemainingColumn(),
                                      console=Console(stderr=True), transient=True)
            self._progress.start()
            self._task = self._progress.add_task("traces", total=total, failures=0)

    def __enter__(self) -> "SuiteProgress":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def on_result(self, r: Any) -> None:
        from pathlib import Path

        self.done += 1
        self.failures += r.status == "fail"
        if self._progress is not None:
            self._progress.update(self._task, completed=self.done, failures=self.failures)
        else:
            self.log.info("%s: %s (%s%s, %d frame(s), %.2f s)", Path(r.trace).name, r.status, r.outcome,
                          f", expected {r.expected}" if r.expected != "pass" else "", r.frames, r.seconds)
