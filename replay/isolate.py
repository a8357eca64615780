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
        elif progress.is_file():
            frames = [ln.split()[1] for ln in progress.read_text().splitlines() if ln.startswith("frame ")]
            outcome.crashed_frame = int(frames[-1]) if frames else None
        return outcome


class ProgressFile:
    """What a child writes as it goes: one ``frame SEQ`` line per frame started, flushed at once."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.crash_at = os.environ.get("VKCAP_TEST_CRASH_AT_FRAME")  # fault injection for crash tests

    def frame_started(self, seq: int) -> None:
        os.write(self.fd, f"frame {seq}\n".encode())
        if self.crash_at is not None and int(self.crash_at) == seq:
            os.kill(os.getpid(), signal.SIGSEGV)  # a real fatal signal, as a crashing driver delivers it
