"""Progress of long work on a terminal: what is happening and how far, on stderr.

Guarantees:

- Nothing is drawn unless stderr is a terminal: in a pipe, a log, a CI job or beside ``--json`` the
  command's output is byte for byte what it is without this module.
- Nothing is drawn for work that ends within :data:`DELAY_S` seconds (no flicker on fast commands);
  the display is transient: it is erased when the work ends, leaving only the command's own lines.
- A description is plain text, never markup, and is shown through :func:`vkcore.safe_text.shown`: a
  trace's name ``[red]x`` or ``\x1b]0;t\x07`` is printed as written, escaped, never obeyed. Nothing of
  rich is imported unless the display is drawn (a clean replay off a terminal stays as fast as it was).
- On every exit path, Ctrl-C included, the display is stopped (the cursor comes back) before the
  exception goes on, so ``vkcap`` still exits 130 with no traceback.
"""
from __future__ import annotations

import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vkcore.safe_text import shown

if TYPE_CHECKING:
    from vkcore.exec.executor import Event

DELAY_S = float(os.environ.get("VKCAP_PROGRESS_DELAY_S", "1.0"))  # how long work runs before it is shown


def on_terminal() -> bool:
    """Whether progress may be drawn: stderr is a terminal."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


class Activity:
    """One piece of long work: a line that says what is happening (``describe``) and, when ``total``
    is known, how far (``advance``/``update``). Use as a context manager; see the module docstring.

    ``description`` is plain text (untrusted parts may be in it as they are: see the module docstring)."""

    def __init__(self, description: str, total: int | None = None, *, enabled: bool | None = None,
                 delay_s: float | None = None) -> None:
        self.enabled = on_terminal() if enabled is None else enabled
        self.delay_s = DELAY_S if delay_s is None else delay_s
        self.description, self.total, self.completed = shown(description), total, 0
        self._lock = threading.Lock()
        self._progress: Any = None
        self._task: Any = None
        self._timer: threading.Timer | None = None
        self._ended = False
        self._handlers: list[tuple[logging.StreamHandler[Any], Any]] = []
        self.started_at = time.monotonic()

    def __enter__(self) -> "Activity":
        if self.enabled and self.delay_s <= 0:
            self._show()  # at once (VKCAP_PROGRESS_DELAY_S=0): no thread that a short run could outpace
        elif self.enabled:
            self._timer = threading.Timer(self.delay_s, self._show)
            self._timer.daemon = True  # never keeps a finished or interrupted command alive
            self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the display (or the timer that would have started it); safe to call twice."""
        with self._lock:
            self._ended = True
            if self._timer is not None:
                self._timer.cancel()
            if self._progress is not None:
                for handler, stream in self._handlers:
                    handler.setStream(stream)
                self._progress.stop()
                self._progress = None

    @property
    def shown(self) -> bool:
        """Whether the display is on the terminal now."""
        return self._progress is not None

    def columns(self) -> list[Any]:
        """What the display shows: a spinner, the description as plain text (``markup=False``), a bar
        and ``done/total`` when the total is known, the time spent."""
        # lazy: vkcap run imports this module, not rich.progress
        from rich.progress import BarColumn, MofNCompleteColumn, SpinnerColumn, TextColumn, TimeElapsedColumn

        columns: list[Any] = [SpinnerColumn(), TextColumn("{task.description}", markup=False)]
        if self.total is not None:
            columns += [BarColumn(), MofNCompleteColumn()]
        return [*columns, TimeElapsedColumn()]

    def _show(self) -> None:
        # lazy: vkcap run imports this module, not rich.console, rich.progress
        from rich.console import Console
        from rich.progress import Progress

        with self._lock:
            if self._ended:
                return
            self._progress = Progress(*self.columns(), console=Console(stderr=True), transient=True)
            self._task = self._progress.add_task(self.description, total=self.total, completed=self.completed)
            self._progress.start()  # sys.stderr is now rich's proxy, which prints above the display
            self._handlers = _log_through(sys.stderr)

    def update(self, *, description: str | None = None, completed: int | None = None, total: int | None = None) -> None:
        """New words, a new count or a new total; drawn if the display is on, kept for it otherwise."""
        with self._lock:
            if description is not None:
                self.description = shown(description)
            if completed is not None:
                self.completed = completed
            if total is not None:
                self.total = total
            if self._progress is not None:
                self._progress.update(self._task, description=self.description, completed=self.completed,
                                      total=self.total)

    def advance(self, step: int = 1, *, description: str | None = None) -> None:
        self.update(description=description, completed=self.completed + step)


def _log_through(proxy: Any) -> list[tuple[logging.StreamHandler[Any], Any]]:
    """Point the root logger's stderr handlers at ``proxy`` (rich's stand-in for stderr while a display
    is on), so a log line is printed above the display rather than torn by it; returns what to restore."""
    swapped = []
    original = getattr(proxy, "rich_proxied_file", None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler) and original is not None and handler.stream is original:
            swapped.append((handler, handler.stream))
            handler.setStream(proxy)
    return swapped


def frames_text(first: int, last: int) -> str:
    return f"frame {first}" if first == last else f"frames {first}-{last}"


class FrameProgress:
    """A run's or a recording's frames: ``frame 37/100`` once it has run for a while; counts finished
    frames whether drawn or not."""

    def __init__(self, enabled: bool, what: str = "frame") -> None:
        self.what = what
        self.activity = Activity(what, enabled=enabled)
        self.finished = 0

    @classmethod
    def for_terminal(cls, what: str = "frame") -> "FrameProgress":
        return cls(on_terminal(), what)

    def __enter__(self) -> "FrameProgress":
        self.activity.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.activity.close()

    def on_event(self, event: "Event") -> None:
        # lazy: vkcap suite run imports this module, not vkcore.exec.executor
        from vkcore.exec.executor import FrameFinished, FrameStarted

        if isinstance(event, FrameFinished):
            self.finished += 1
            self.activity.update(completed=self.finished)
        elif isinstance(event, FrameStarted):
            self.activity.update(description=f"{self.what} {event.seq + 1}/{event.total_frames}",
                                 total=event.total_frames)


class SuiteProgress:
    """A suite's progress on a terminal: ``replaying trace 3/8``, failures so far, the trace's name;
    on anything else, one log line per trace (as before this display existed)."""

    def __init__(self, total: int, log: Any) -> None:
        self.total, self.log = total, log
        self.done = self.failures = 0
        self.activity = Activity(self._words(), total, enabled=on_terminal())

    def _words(self, last: str = "") -> str:
        text = f"replaying trace {min(self.done + 1, self.total)}/{self.total}, {self.failures} failure(s)"
        return text + (f" (last: {last})" if last else "")

    def __enter__(self) -> "SuiteProgress":
        self.activity.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.activity.close()

    def on_result(self, r: Any) -> None:
        self.done += 1
        self.failures += r.status == "fail"
        if self.activity.enabled:
            self.activity.update(completed=self.done, description=self._words(f"{Path(r.trace).name}: {r.status}"))
        else:
            self.log.info("%s: %s (%s%s, %d frame(s), %.2f s)", Path(r.trace).name, r.status, r.outcome,
                          f", expected {r.expected}" if r.expected != "pass" else "", r.frames, r.seconds)
