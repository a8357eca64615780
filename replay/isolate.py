"""Device work in a child process, so a driver crash is a finding instead of a lost run.

ARM's emulation layer aborts the process on some mismatches and a new driver may segfault. With
``--isolate``, replay (and every bisection probe) runs as a child ``vkcap replay`` that writes its JSON
report and a progress file naming each frame as it is submitted and as it finishes. When the child
dies without a report (a signal, an abort, any exit but 2, a lost child), the parent reports which frame
was running (the oldest one submitted and not finished), how the child died and its last log lines, and
counts it as a divergence. A child that fails with its own error (exit 1: a frame timeout, a lost
device) is reported with that error rather than as a crash, and counts as a divergence too.

A child that exits 2 refused its input (a shader that does not compile, an unknown uid or device, ...):
that is not a crash. The parent raises :class:`ChildInputError`, which prints the child's own one-line
error and exits 2, as the same command without isolation does; no report is written.

A child never isolates again: the parent marks its children with ``VKCAP_ISOLATED_CHILD`` in their
environment, and :func:`run_child` and :class:`ProbeServer` refuse to start a child from a child.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vkcore.errors import EXIT_BAD_INPUT, EXIT_FAILURE, VkcapError

from .progress_file import frame_running

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

    @property
    def crashed(self) -> bool:
        """The child ended without a report: a signal, an abort, an exit other than 2, or a lost child."""
        return self.report is None

    @property
    def error(self) -> str | None:
        """The child's own error line (without ``vkcap: error:``) when it failed with exit 1 (a frame
        timeout, a lost device, a failed Vulkan call) rather than dying of a signal or an abort."""
        return last_error(self.last_lines) if self.returncode == EXIT_FAILURE else None

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


PARENT_DESTS = frozenset({"isolate", "json", "junit", "html", "progress_file", "serve_probes", "probe_fd"})  # the parent's business


def child_arguments(args: argparse.Namespace, replay_parser: argparse.ArgumentParser) -> list[str]:
    """The arguments of the child ``vkcap replay`` that does the device work of the command parsed into
    ``args`` (a replay's or a bisection's).

    Made from the parsed values, not from the command line as typed, so the child accepts whatever the
    parent accepted (abbreviations, ``--flag=value``, values starting with ``-``): the trace, then every
    option of ``replay_parser`` that ``args`` holds with a value other than its default, spelled in full,
    each value in one token (``--flag=value``) where it starts with ``-``. Options ``replay_parser``
    lacks (a bisection's ``--exhaustive``) stay with the parent, and so do isolation, the reports and
    the child's plumbing (:data:`PARENT_DESTS`): the arguments never ask the child to isolate again.
    """
    trace = str(args.trace)
    out = [f"./{trace}" if trace.startswith("-") else trace]
    for action in replay_parser._actions:
        if not action.option_strings or action.dest in PARENT_DESTS or not hasattr(args, action.dest):
            continue
        value = getattr(args, action.dest)
        if value == action.default:
            continue
        flag = max(action.option_strings, key=len)
        if action.nargs == 0:  # store_true / store_false / store_const: the flag is the value
            out.append(flag)
            continue
        for item in value if isinstance(action, argparse._AppendAction) else [value]:
            text = str(item)
            out += [f"{flag}={text}"] if text.startswith("-") else [flag, text]
    return out


def run_child(args: list[str], *, echo: bool = True) -> ChildOutcome:
    """Run ``vkcap replay <args>`` in a child with ``--json`` and ``--progress-file`` added; stream its
    stderr through (when ``echo``), keep its last lines, and read its report or its last frame.

    A child that exits 2 raises :class:`ChildInputError` carrying its error line, which is then not
    echoed (the CLI prints it once). Raises ``RuntimeError`` when called in an isolated child."""
    env = _child_environment()
    with tempfile.TemporaryDirectory(prefix="vkcap-isolate-") as tmp:
        report_path, progress = Path(tmp) / "report.json", Path(tmp) / "progress"
        cmd = [sys.executable, "-m", "vkcap", "replay", *args, "--json", str(report_path), "--progress-file", str(progress)]
        last: deque[str] = deque(maxlen=LAST_LINES)
        # An error line, echoed only once the child turns out neither to refuse its input (exit 2: the
        # CLI prints it) nor to have failed with it (exit 1: the crash line quotes it).
        held: str | None = None
        with subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=None if echo else subprocess.DEVNULL, text=True,
                              errors="replace", env=env) as proc:
            assert proc.stderr is not None
            for line in proc.stderr:
                last.append(line.rstrip("\n"))
                if echo:
                    if held is not None:
                        sys.stderr.write(held)
                    held = line if line.startswith(ERROR_PREFIX) else None
                    if held is None:
                        sys.stderr.write(line)
            code = proc.wait()
        if code == EXIT_BAD_INPUT:
            raise ChildInputError.from_lines(list(last))
        if held is not None and code != EXIT_FAILURE:
            sys.stderr.write(held)
        outcome = ChildOutcome(code, last_lines=list(last), how=describe_exit(code))
        if report_path.is_file() and code in (0, 1):
            outcome.report = json.loads(report_path.read_text())
        else:
            outcome.crashed_frame = frame_running(progress)
        return outcome


class ProbeServer:
    """Isolated probes without a process each: one child ``vkcap replay --serve-probes`` replays frame
    range after frame range in one Vulkan session (start-up, trace opening and pipelines paid once).

    Requests go to the child's stdin as ``FIRST LAST START`` lines; each answer is one JSON line (the report's
    frames) on a pipe of its own, so nothing a driver prints can be mistaken for it. When the child dies
    instead of answering, that probe's outcome is the crash (frame, signal, last lines) and the next
    probe starts a fresh child: the search goes on. A child that exits 2 instead refused its input
    (a shader, a uid, a device, the trace): :meth:`probe` raises :class:`ChildInputError` and the search
    ends as it would without isolation. :meth:`start` may be called early, so the child's start-up
    (Python, Vulkan, pipelines) overlaps the caller's own; the first probe starts it otherwise.
    Use as a context manager.
    """

    def __init__(self, args: list[str]) -> None:
        self.args = args
        self._tmp = tempfile.TemporaryDirectory(prefix="vkcap-probes-")
        self.progress = Path(self._tmp.name) / "progress"
        self.proc: subprocess.Popen[str] | None = None
        self.children = 0  # started so far (one, unless a probe crashed)

    def __enter__(self) -> "ProbeServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Start the child now (it waits for its first request)."""
        if self.proc is None:
            self._start()

    def _start(self) -> None:
        env = _child_environment()  # raises in an isolated child: before any pipe is made
        read_fd, write_fd = os.pipe()
        cmd = [sys.executable, "-m", "vkcap", "replay", *self.args, "--serve-probes", "--probe-fd", str(write_fd),
               "--progress-file", str(self.progress)]
        try:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                         text=True, errors="replace", pass_fds=(write_fd,), env=env)
        finally:
            os.close(write_fd)
        self.children += 1
        self.answered = 0  # probes this child answered
        self.answers = os.fdopen(read_fd, "r")
        self.last: deque[str] = deque(maxlen=LAST_LINES)
        self._drain = threading.Thread(target=self._keep_last_lines, args=(self.proc.stderr,), daemon=True)
        self._drain.start()

    def _keep_last_lines(self, stream: Any) -> None:
        for line in stream:
            self.last.append(line.rstrip("\n"))

    def probe(self, first: int, last: int, start: int) -> ChildOutcome:
        """Replay frames ``first..last`` from the recorded state after frame ``start`` (stopping at the
        first divergence) in the child. Its report, or the crash when the child died instead of answering
        (the next probe starts a fresh child); raises :class:`ChildInputError` when it exited 2."""
        if self.proc is None:
            self._start()
        assert self.proc is not None and self.proc.stdin is not None
        self.progress.write_text("")
        try:
            self.proc.stdin.write(f"{first} {last} {start}\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # it died already: the answer below is empty
        answer = self.answers.readline()
        if answer:
            self.answered += 1
            return ChildOutcome(0, report=json.loads(answer))
        stage = "during setup" if self.answered == 0 else "while restoring the recorded state"
        code = self._stop()
        if code == EXIT_BAD_INPUT:
            raise ChildInputError.from_lines(list(self.last))
        return ChildOutcome(code, last_lines=list(self.last), how=describe_exit(code),
                            crashed_frame=frame_running(self.progress), before_frame=start + 1, stage=stage)

    def _stop(self) -> int:
        """Close the child's stdin (a healthy child then exits), wait for it, return its exit code."""
        assert self.proc is not None
        proc, self.proc = self.proc, None
        try:
            assert proc.stdin is not None
            proc.stdin.close()
        except BrokenPipeError:
            pass
        code = proc.wait()
        self._drain.join()
        self.answers.close()
        return code

    def close(self) -> None:
        if self.proc is not None:
            self._stop()
        self._tmp.cleanup()


def serve_probes(options: Any, answer_fd: int, opened: Any = None) -> int:
    """The child side of :class:`ProbeServer`: answer ``FIRST LAST START`` lines from stdin until it
    closes. ``opened``: the trace, when the caller has it open already."""
    import trio

    from capture.trace import Trace

    from vkcore.device.driver import use_driver

    from .replayer import ReplaySession, target_frames
    from .report import frames_document

    use_driver(options.icd)
    with Trace.reuse_or_open(options.trace, opened) as trace, ReplaySession(trace, options) as session, os.fdopen(answer_fd, "w") as out:
        for line in sys.stdin:
            first, last, start = (int(v) for v in line.split())
            targets = target_frames(trace, first, last)
            report = trio.run(lambda: session.run(targets, stop_at_first_divergence=True, start=start))
            out.write(json.dumps({"frames": frames_document(report.frames)}) + "\n")
            out.flush()
    return 0
