"""Device work in a child process, so a driver crash is a finding instead of a lost run.

ARM's emulation layer aborts the process on some mismatches and a new driver may segfault. With
``--isolate``, replay (and every bisection probe) runs as a child ``vkcap replay`` that writes its JSON
report and a progress file naming each frame as it starts. When the child dies by a signal or an abort,
the parent reports which frame was running, how the child died and its last log lines, and counts it
as a divergence.
"""
from __future__ import annotations

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

ABORT_CODES = {134: "SIGABRT", 135: "SIGBUS", 136: "SIGFPE", 139: "SIGSEGV"}  # 128 + signal, via a shell
LAST_LINES = 8


@dataclass
class ChildOutcome:
    """How an isolated replay ended: its report, or the crash."""

    returncode: int
    report: dict[str, Any] | None = None
    crashed_frame: int | None = None
    how: str = ""
    last_lines: list[str] = field(default_factory=list)

    @property
    def crashed(self) -> bool:
        return self.report is None and (self.returncode < 0 or self.returncode in ABORT_CODES)

    def crash_line(self) -> str:
        where = f"frame {self.crashed_frame}" if self.crashed_frame is not None else "setup, before the first frame"
        tail = " | ".join(self.last_lines[-3:]) or "no output"
        return f"{where} crashed the driver ({self.how}, exit code {self.returncode}); last log lines: {tail}"

    def crash_document(self) -> dict[str, Any]:
        return {"crashed": True, "frame": self.crashed_frame, "how": self.how, "exit_code": self.returncode,
                "last_lines": self.last_lines, "diverged": True}


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return ABORT_CODES.get(code, f"exit {code}")


def run_child(args: list[str], *, echo: bool = True) -> ChildOutcome:
    """Run ``vkcap replay <args>`` in a child with ``--json`` and ``--progress-file`` added; stream its
    stderr through (when ``echo``), keep its last lines, and read its report or its last frame."""
    with tempfile.TemporaryDirectory(prefix="vkcap-isolate-") as tmp:
        report_path, progress = Path(tmp) / "report.json", Path(tmp) / "progress"
        cmd = [sys.executable, "-m", "vkcap", "replay", *args, "--json", str(report_path), "--progress-file", str(progress)]
        last: deque[str] = deque(maxlen=LAST_LINES)
        with subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=None if echo else subprocess.DEVNULL, text=True,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"}) as proc:
            assert proc.stderr is not None
            for line in proc.stderr:
                last.append(line.rstrip("\n"))
                if echo:
                    sys.stderr.write(line)
            code = proc.wait()
        outcome = ChildOutcome(code, last_lines=list(last), how=describe_exit(code))
        if report_path.is_file() and code in (0, 1):
            outcome.report = json.loads(report_path.read_text())
        else:
            outcome.crashed_frame = last_started_frame(progress)
        return outcome


def last_started_frame(progress: Path) -> int | None:
    """The last frame a child's progress file says it started (None: none, or no file)."""
    try:
        lines = progress.read_text().splitlines()
    except FileNotFoundError:
        return None
    frames = [ln.split()[1] for ln in lines if ln.startswith("frame ")]
    return int(frames[-1]) if frames else None


class ProbeServer:
    """Isolated probes without a process each: one child ``vkcap replay --serve-probes`` replays frame
    range after frame range in one Vulkan session (start-up, trace opening and pipelines paid once).

    Requests go to the child's stdin as ``FIRST LAST START`` lines; each answer is one JSON line (the report's
    frames) on a pipe of its own, so nothing a driver prints can be mistaken for it. When the child dies
    instead of answering, that probe's outcome is the crash (frame, signal, last lines) and the next
    probe starts a fresh child: the search goes on. :meth:`start` may be called early, so the child's
    start-up (Python, Vulkan, pipelines) overlaps the caller's own; the first probe starts it otherwise.
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
        read_fd, write_fd = os.pipe()
        cmd = [sys.executable, "-m", "vkcap", "replay", *self.args, "--serve-probes", "--probe-fd", str(write_fd),
               "--progress-file", str(self.progress)]
        try:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                         text=True, pass_fds=(write_fd,), env={**os.environ, "PYTHONUNBUFFERED": "1"})
        finally:
            os.close(write_fd)
        self.children += 1
        self.answers = os.fdopen(read_fd, "r")
        self.last: deque[str] = deque(maxlen=LAST_LINES)
        self._drain = threading.Thread(target=self._keep_last_lines, args=(self.proc.stderr,), daemon=True)
        self._drain.start()

    def _keep_last_lines(self, stream: Any) -> None:
        for line in stream:
            self.last.append(line.rstrip("\n"))

    def probe(self, first: int, last: int, start: int) -> ChildOutcome:
        """Replay frames ``first..last`` from the recorded state after frame ``start`` (stopping at the
        first divergence) in the child."""
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
            return ChildOutcome(0, report=json.loads(answer))
        code = self._stop()
        return ChildOutcome(code, last_lines=list(self.last), how=describe_exit(code),
                            crashed_frame=last_started_frame(self.progress))

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


def serve_probes(options: Any, answer_fd: int) -> int:
    """The child side of :class:`ProbeServer`: answer ``FIRST LAST START`` lines from stdin until it closes."""
    import trio

    from capture.trace import Trace

    from vkcore.driver import use_driver

    from .replayer import ReplaySession, target_frames
    from .report import frames_document

    use_driver(options.icd)
    with Trace.open(options.trace) as trace, ReplaySession(trace, options) as session, os.fdopen(answer_fd, "w") as out:
        for line in sys.stdin:
            first, last, start = (int(v) for v in line.split())
            targets = target_frames(trace, first, last)
            report = trio.run(lambda: session.run(targets, stop_at_first_divergence=True, start=start))
            out.write(json.dumps({"frames": frames_document(report.frames)}) + "\n")
            out.flush()
    return 0


class ProgressFile:
    """What a child writes as it goes: one ``frame SEQ`` line per frame started, flushed at once."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.crash_at = os.environ.get("VKCAP_TEST_CRASH_AT_FRAME")  # fault injection for crash tests

    def frame_started(self, seq: int) -> None:
        os.write(self.fd, f"frame {seq}\n".encode())
        if self.crash_at is not None and int(self.crash_at) == seq:
            os.kill(os.getpid(), signal.SIGSEGV)  # a real fatal signal, as a crashing driver delivers it
