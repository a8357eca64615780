"""Choosing the Vulkan driver, which is only environment work: this module loads no Vulkan bindings, so
a process that merely passes the choice on (the parent of an isolated bisection) stays light."""
from __future__ import annotations

import os
from pathlib import Path

from .errors import UsageError


def use_driver(icd: Path | None) -> None:
    """Make the Vulkan loader use only the driver manifest ``icd`` (before any instance exists);
    :class:`UsageError` when there is no such file. ``None`` leaves the loader's choice alone."""
    if icd is None:
        return
    if not icd.is_file():
        raise UsageError(f"--icd {icd}: no such driver manifest (a Vulkan ICD .json file)")
    os.environ["VK_DRIVER_FILES"] = str(icd.resolve())
    os.environ["VK_ICD_FILENAMES"] = str(icd.resolve())
