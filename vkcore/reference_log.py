"""The reference runner's log lines, for scripts and CI logs that grep them.

ARM's ``scenario-runner`` logs ``2026-11-28 11:43:25,223 [Scenario-Runner] INFO: Pipeline Cache stored`` on
stdout. ``vkcap run`` writes the lines that carry meaning (:data:`LINES`: the scenario parsed, the device,
the pipeline cache's fate, the results stored) the same way, on stdout and at the reference's level, so that
a script written for the reference finds them; vkcap's own lines stay on stderr (``vkcap: ...``).

Nothing is written unless a command attaches :func:`to_stdout` (``vkcap run`` does; ``record`` and
``replay`` do not: their stdout is theirs). The text is fixed here; only the arguments vary, and each
textual argument is escaped (:func:`vkcore.safe_text.shown`), so a device name or uid cannot forge a line.
"""
from __future__ import annotations

import logging
import os
import sys

from .safe_text import shown

LOGGER_NAME = "scenario_runner"
log = logging.getLogger(LOGGER_NAME)
log.addHandler(logging.NullHandler())
log.propagate = False  # never into vkcap's stderr log: these lines are the reference's, on stdout

#: Each line vkcap writes as the reference does: (level, text), keyed by what it says. The texts are the
#: reference's (ai-ml-sdk-scenario-runner 0.11), word for word.
LINES: dict[str, tuple[int, str]] = {
    "parsed": (logging.INFO, "Scenario file parsed"),
    "resources": (logging.INFO, "Setup resources, count: %d"),
    "device": (logging.INFO, "Device: %s, Type: %s, Vendor: 0x%x"),
    "cache load": (logging.INFO, "Load Pipeline Cache"),
    "cache loaded": (logging.INFO, "Pipeline Cache loaded and validated."),
    "cache cleared": (logging.INFO, "Pipeline Cache cleared"),
    "cache header size": (logging.WARNING, "Pipeline validation: Incorrect pipeline cache header size"),
    "cache skipped": (logging.WARNING, "Pipeline Cache skipped: failed to validate."),
    "commands": (logging.INFO, "Setup commands"),
    "no frame boundary": (logging.WARNING, "Frame boundary extension not present"),
    "cache stored": (logging.INFO, "Pipeline Cache stored"),
    "results stored": (logging.INFO, "Results stored"),
}

#: Vulkan's VkPhysicalDeviceType as the reference names it.
DEVICE_TYPES = {"other": "Other", "integrated GPU": "IntegratedGpu", "discrete GPU": "DiscreteGpu",
                "virtual GPU": "VirtualGpu", "CPU": "Cpu"}


def say(key: str, *args: object) -> None:
    """Log the reference's line ``key`` of :data:`LINES` with ``args``."""
    level, text = LINES[key]
    log.log(level, text, *args)


class ReferenceFormatter(logging.Formatter):
    """``%(asctime)s [Scenario-Runner] LEVEL: message``, the reference's layout, textual arguments escaped."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s [Scenario-Runner] %(levelname)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        if isinstance(record.args, tuple) and record.args:
            record = logging.makeLogRecord(record.__dict__)
            record.args = tuple(shown(a) if isinstance(a, (str, os.PathLike)) else a for a in record.args)
        return super().format(record)


def to_stdout(level: int) -> None:
    """Write the reference's lines at ``level`` and above on stdout (once per process)."""
    log.setLevel(level)
    if not any(getattr(h, "reference_stdout", False) for h in log.handlers):
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(ReferenceFormatter())
        handler.reference_stdout = True  # type: ignore[attr-defined]
        log.addHandler(handler)
