"""Device work in a child process, so a driver crash is a finding instead of a lost run.

ARM's emulation layer aborts the process on some mismatches and a new driver may segfault. With
``--isolate``, replay (and every bisection probe) runs in a child (``python -m vkcap.replay_child``) that
the parent sends its options to and that answers with the messages of :mod:`replay.worker_protocol` (the
whole report, or a probe's frames), writing a progress file naming each frame as it is submitted and as
it finishes. When the child dies without answering (a signal, an abort, a lost child), the parent
reports which frame was running (the oldest one submitted and not finished), how the child died and its
last log lines, and counts it as a divergence. A child that fails with its own error
(:class:`~replay.worker_protocol.Failed`, exit 1: a frame timeout, a lost device) is reported with that
error rather than as a crash, and counts as a divergence too.

A child whose :class:`~replay.worker_protocol.Failed` says exit 2 refused its input (a shader that does
not compile, an unknown uid or device, ...): that is not a crash. The parent raises
:class:`ChildInputError`, which prints the child's own one-line error and exits 2, as the same command
without isolation does; no report is written.

A child never isolates again: the parent marks its children with ``VKCAP_ISOLATED_CHILD`` in their
environment, and :func:`run_child` and :class:`ProbeServer` refuse to start a child from a child.
"""
from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from vkcore.errors import EXIT_BAD_INPUT, EXIT_FAILURE, VkcapError

from .options import ReplayOptions
from .progress_file import frame_running
from .worker_protocol import Done, Failed, ProbeRequest, Probed, ProtocolError, ReplayRequest, decode, encode

ABORT_CODES = {134: "SIGABRT", 135: "SIGBUS", 136: "SIGFPE", 139: "SIGSEGV"}  # 128 + signal, via a shell
LAST_LINES = 8
CHILD_ENV = "VKCAP_ISOLATED_CHILD"  # set (to "1") in the environment of every isolated child
ERROR_PREFIX = "vkcap: error: "  # how the CLI starts its one error line


def in_isolated_child() -> bool:
    """Whether this process is an isolated child (its device work must then run here, never in a child)."""
    return os.environ.get(CHILD_ENV) == "1"


def _child_environment() -> dict[str, str]:
    """The environment of a child: this one, unbuffered, marked as an isolated child. Raises
    ``RuntimeError`` in a child: isolation never nests, whatever the arguments."""
    if in_isolated_child():
        raise RuntimeError(f"an isolated child must not start another ({CHILD_ENV} is set)")
    return {**os.environ, "PYTHONUNBUFFERED": "1", CHILD_ENV: "1"}


def last_error(lines: list[str]) -> str | None:
    """The last of a child's stderr ``lines`` that is the CLI's error line, without its prefix."""
    return next((ln[len(ERROR_PREFIX):] for ln in reversed(lines) if ln.startswith(ERROR_PREFIX)), None)


def _one_line(text: str) -> str:
    """``text`` without control characters (a driver's output may hold any): they show as ``\\xNN``, so
    the result is one line that XML can carry too."""
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}"
                   for c in text)


class ChildInputError(VkcapError):
    """An isolated child refused its input (it exited 2): the child's own error, exit 2 here too.

    Renders as the child's one line without its ``vkcap: error:`` prefix, so the CLI prints exactly the
    line the same command prints without isolation."""

    exit_code = EXIT_BAD_INPUT

    @classmethod
    def from_lines(cls, lines: list[str]) -> "ChildInputError":
        """From a child's last stderr lines: its last error line, else what it printed last."""
        error = last_error(lines)
        if error is not None:
            return cls(_one_line(error))
        tail = " | ".join(lines[-3:]) or "no output"
        return cls(_one_line(f"the isolated child refused its input (exit {EXIT_BAD_INPUT}); last log lines: {tail}"))


@dataclass
class ChildOutcome:
    """How an isolated replay ended: its report, or the crash. (A child that refused its input raised
    :class:`ChildInputError` instead: no outcome is made of it.)"""

    returncode: int
    report: dict[str, Any] | None = None
    crashed_frame: int | None = None  # the frame the child was running (:func:`frame_running`), if any
    how: str = ""
    last_lines: list[str] = field(default_factory=list)
    before_frame: int | None = None  # the first frame the child was to run, when known
    stage: str = "during setup"  # what the child did before its first frame, for :meth:`crash_line`
    #: The child's own error (its :class:`~replay.worker_protocol.Failed`) when it failed (a frame
    #: timeout, a lost device, a failed Vulkan call) rather than dying of a signal or an abort.
    error: str | None = None

    @property
    def crashed(self) -> bool:
        """The child ended without a report: a signal, an abort, a failure of its own, or a lost child."""
        return self.report is None

    def crash_line(self) -> str:
        """One line (no control characters): where the child died, how, and its last log lines, e.g.
        ``frame 9 crashed the driver (SIGSEGV, exit code -11); last log lines: ...`` or ``the driver
        crashed during setup, before frame 0 (...)``; for a child that failed with its own error, that
        error: ``frame 2 failed in the isolated child: frame 2 did not finish within 1 s ... (exit code 1)``."""
        error = self.error
        if self.crashed_frame is not None:
            where = f"frame {self.crashed_frame} " + ("failed in the isolated child" if error else "crashed the driver")
        else:
            before = f"frame {self.before_frame}" if self.before_frame is not None else "its first frame"
            who = "the isolated child failed" if error else "the driver crashed"
            where = f"{who} {self.stage}, before {before}"
        if error:
            return _one_line(f"{where}: {error} (exit code {self.returncode})")
        tail = " | ".join(self.last_lines[-3:]) or "no output"
        return _one_line(f"{where} ({self.how}, exit code {self.returncode}); last log lines: {tail}")

    def crash_document(self) -> dict[str, Any]:
        return {"crashed": True, "frame": self.crashed_frame, "how": self.how, "exit_code": self.returncode,
                "last_lines": self.last_lines, "crash": self.crash_line(), "diverged": True}


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return ABORT_CODES.get(code, f"exit {code}")


CHILD_MODULE = "vkcap.replay_child"  # the child's entry: it reads the messages of replay.worker_protocol


class _Child:
    """One child process speaking :mod:`replay.worker_protocol`: requests on its stdin, answers on a pipe
    of their own (so nothing a driver prints can be mistaken for one), its stderr kept (its last lines)
    and, with ``echo``, passed through byte for byte, as its stdout is. Raises ``RuntimeError`` in an
    isolated child (before any pipe is made): isolation never nests."""

    def __init__(self, echo: bool) -> None:
        env = _child_environment()
        read_fd, write_fd = os.pipe()
        level = logging.getLevelName(logging.getLogger().getEffectiveLevel()).lower()
        cmd = [sys.executable, "-m", CHILD_MODULE, str(write_fd), level]
        try:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=None if echo else subprocess.DEVNULL,
                                         stderr=subprocess.PIPE, text=True, errors="replace", pass_fds=(write_fd,),
                                         env=env)
        finally:
            os.close(write_fd)
        self.answers = os.fdopen(read_fd, "r")
        self.last: deque[str] = deque(maxlen=LAST_LINES)
        self._drain = threading.Thread(target=self._keep_last_lines, args=(self.proc.stderr, echo), daemon=True)
        self._drain.start()

    def _keep_last_lines(self, stream: Any, echo: bool) -> None:
        for line in stream:
            self.last.append(line.rstrip("\n"))
            if echo:
                sys.stderr.write(line)
                sys.stderr.flush()

    def ask(self, request: Any, *expected: type, timeout: float | None = None) -> Any:
        """The child's answer to ``request`` (one of ``expected``, or :class:`Failed`); None when it
        ended without answering. A line that is no such answer is the child's :class:`Failed`. With
        ``timeout`` (seconds), the child is killed when it has not answered by then: ``TimeoutError``."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(encode(request))
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # it died already: the answer below is empty
        if timeout is not None and not select.select([self.answers], [], [], timeout)[0]:
            self.proc.kill()
            self.stop()
            raise TimeoutError(f"no answer within {timeout:g} s")
        line = self.answers.readline()
        if not line:
            return None
        try:
            return decode(line, *expected, Failed)
        except ProtocolError as exc:
            return Failed(str(exc), EXIT_FAILURE)

    def stop(self) -> int:
        """Close the child's stdin (a healthy child then exits), wait for it, return its exit code."""
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        code = self.proc.wait()
        self._drain.join()
        self.answers.close()
        return code


def _unanswered(child: _Child, code: int, answer: Failed | None, progress: Path, **where: Any) -> ChildOutcome:
    """The outcome of a child that answered :class:`Failed` (``answer``) or nothing (it died with exit
    ``code``): a :class:`ChildInputError` for its input refused (exit 2), else the crash or its error."""
    last = list(child.last)
    if answer is not None:
        if answer.exit_code == EXIT_BAD_INPUT:
            raise ChildInputError(_one_line(answer.error))
        return ChildOutcome(answer.exit_code, last_lines=last, how=describe_exit(answer.exit_code),
                            crashed_frame=frame_running(progress), error=answer.error, **where)
    if code == EXIT_BAD_INPUT:
        raise ChildInputError.from_lines(last)
    return ChildOutcome(code, last_lines=last, how=describe_exit(code), crashed_frame=frame_running(progress), **where)


def run_child(options: ReplayOptions, *, echo: bool = True, auto_tolerance: bool = False, page: Path | None = None,
              command_line: Sequence[str] = ()) -> ChildOutcome:
    """Replay ``options`` in a child (:class:`~replay.worker_protocol.ReplayRequest` asking for the whole
    report, with a progress file of its own); pass its output through (when ``echo``), keep its last
    stderr lines, and return its report or its crash. ``auto_tolerance``: the child measures the
    tolerances first (``--tolerance auto``); ``page``: it also writes the replay's HTML page there.

    A child that refuses its input (its :class:`~replay.worker_protocol.Failed` says exit 2) raises
    :class:`ChildInputError` carrying its error line. Raises ``RuntimeError`` in an isolated child."""
    with tempfile.TemporaryDirectory(prefix="vkcap-isolate-") as tmp:
        progress = Path(tmp) / "progress"
        request = ReplayRequest(replace(options, progress_file=progress).to_dict(), "" if page is None else str(page),
                                list(command_line), report=True, auto_tolerance=auto_tolerance)
        child = _Child(echo)
        answer = child.ask(request, Done)
        code = child.stop()
        if isinstance(answer, Done):
            return ChildOutcome(EXIT_FAILURE if answer.result.get("diverged") else 0, report=answer.result,
                                last_lines=list(child.last))
        return _unanswered(child, code, answer, progress)


class ProbeServer:
    """Isolated probes without a process each: one child replays frame range after frame range in one
    Vulkan session (start-up, trace opening and pipelines paid once).

    Each probe is a :class:`~replay.worker_protocol.ProbeRequest`, answered with
    :class:`~replay.worker_protocol.Probed` (the report's frames) on a pipe of its own, so nothing a driver
    prints can be mistaken for it. When the child dies instead of answering, or fails with its own error
    (a frame timeout), that probe's outcome is the crash (frame, signal or error, last lines) and the next
    probe starts a fresh child: the search goes on. A child that refuses its input (exit 2: a shader, a
    uid, a device, the trace) makes :meth:`probe` raise :class:`ChildInputError` and the search ends as
    it would without isolation. :meth:`start` may be called early, so the child's start-up (Python, its
    modules) overlaps the caller's own; the first probe starts it otherwise. Use as a context manager.
    """

    def __init__(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="vkcap-probes-")
        self.progress = Path(self._tmp.name) / "progress"
        self.child: _Child | None = None
        self.children = 0  # started so far (one, unless a probe crashed)
        self.answered = 0  # probes the running child answered

    def __enter__(self) -> "ProbeServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Start the child now (it waits for its first request)."""
        if self.child is None:
            self._start()

    def _start(self) -> _Child:
        self.child = _Child(echo=False)
        self.children += 1
        self.answered = 0
        return self.child

    def probe(self, options: ReplayOptions, first: int, last: int, start: int) -> ChildOutcome:
        """Replay frames ``first..last`` of ``options``' trace from the recorded state after frame
        ``start`` (stopping at the first divergence) in the child. Its report (``{"frames": [...]}``), or
        the crash when the child died or failed instead (the next probe starts a fresh child); raises
        :class:`ChildInputError` when it refused its input."""
        child = self.child or self._start()
        self.progress.write_text("")
        answer = child.ask(ProbeRequest(replace(options, progress_file=self.progress).to_dict(), first, last, start),
                           Probed)
        if isinstance(answer, Probed):
            self.answered += 1
            return ChildOutcome(0, report={"frames": answer.frames})
        stage = "during setup" if self.answered == 0 else "while restoring the recorded state"
        code = self._stop()
        return _unanswered(child, code, answer, self.progress, before_frame=start + 1, stage=stage)

    def _stop(self) -> int:
        assert self.child is not None
        child, self.child = self.child, None
        return child.stop()

    def close(self) -> None:
        if self.child is not None:
            self._stop()
        self._tmp.cleanup()
