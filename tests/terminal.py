"""The real ``vkcap`` command line on a terminal: its stderr (and, if asked, its stdout) on a pseudo-terminal,
so that rich draws what a user sees there."""
from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.builders import REPO


def on_pty(*args: str | Path, env: dict[str, str] | None = None, unset: tuple[str, ...] = (),
           stdout_too: bool = False, interrupt_when: bytes | None = None, timeout: float = 120,
           errors: str = "replace") -> tuple[int, str, str]:
    """Run ``vkcap ARGS`` in the repository with stderr on a pty (``stdout_too``: stdout as well, else a
    pipe), ``env`` over this process's environment (COLUMNS=200, TERM=xterm unless it says otherwise) and
    the ``unset`` variables removed; with ``interrupt_when``, send SIGINT once the terminal has shown those
    bytes. Returns the exit code, stdout ("" when it is on the pty) and the terminal's text, decoded with
    ``errors`` ("strict": anything but UTF-8 fails the caller)."""
    full_env = {**os.environ, "COLUMNS": "200", "TERM": "xterm", **(env or {})}
    for name in unset:
        full_env.pop(name, None)
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "vkcap", *map(str, args)], cwd=REPO, env=full_env,
                            stdin=subprocess.DEVNULL, stdout=slave if stdout_too else subprocess.PIPE, stderr=slave)
    os.close(slave)
    raw, interrupted, deadline = b"", False, time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            raw += chunk
            if interrupt_when is not None and not interrupted and interrupt_when in raw:
                proc.send_signal(signal.SIGINT)
                interrupted = True
        elif proc.poll() is not None:
            break
    os.close(master)
    out = ""
    if proc.stdout is not None:
        out = proc.stdout.read().decode()
        proc.stdout.close()
    return proc.wait(timeout=30), out, raw.decode("utf-8", errors=errors)
