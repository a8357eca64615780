"""The error types every layer of vkcap raises, and the exit codes the CLI maps them to.

Each error renders as one line: ``FILE: PLACE: what is wrong``. The CLI prints that line and
exits with the error's ``exit_code``; no traceback unless ``--log-level debug``.
"""
from __future__ import annotations

from pathlib import Path

EXIT_OK = 0
EXIT_FAILURE = 1  # a failure while running (device error, divergence found, ...)
EXIT_BAD_INPUT = 2  # invalid scenario, unreadable trace, bad arguments
EXIT_INTERRUPTED = 130  # Ctrl-C


class VkcapError(Exception):
    """Base class of the errors vkcap reports to the user as one line."""

    exit_code: int = EXIT_FAILURE

    def __init__(self, message: str, *, file: str | Path | None = None, place: str | None = None) -> None:
        self.message = message
        self.file = str(file) if file is not None else None
        self.place = place or None
        super().__init__(self.render())

    def render(self) -> str:
        """The one line shown to the user: ``file: place: message`` with absent parts left out (line
        breaks that came from the input are escaped: it is always one line)."""
        parts = [p for p in (self.file, self.place) if p]
        line = ": ".join([*parts, self.message])
        return line.replace("\r", "\\r").replace("\n", "\\n")


class ScenarioError(VkcapError):
    """The scenario (or a file it names) is invalid. Raised before any Vulkan work or output."""

    exit_code = EXIT_BAD_INPUT


class UsageError(VkcapError):
    """Bad command-line arguments."""

    exit_code = EXIT_BAD_INPUT


class DeviceError(VkcapError):
    """The device cannot do what the scenario needs, or a Vulkan call failed while running."""

    exit_code = EXIT_FAILURE


class UnsupportedDeviceFeature(VkcapError):
    """The scenario needs a feature the chosen device lacks: an input problem, reported before running."""

    exit_code = EXIT_BAD_INPUT


class TraceError(VkcapError):
    """A trace is unreadable, corrupted, truncated beyond recovery or hostile."""

    exit_code = EXIT_BAD_INPUT


def json_path(*parts: str | int) -> str:
    """Render a JSON location like ``resources[3].buffer.size`` from ``("resources", 3, "buffer", "size")``."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out
