"""What a test needs from the machine, and what becomes of the test when it is missing.

A missing tool, package or layer skips the test where a contributor runs pytest by hand on a partial
set-up, and FAILS it under ``make test`` (which sets ``VKCAP_TEST_STRICT=1``): ``make setup`` installs
every one of them, so a skip there could only hide a regression (a wheel that stopped installing, a
command no longer registered). What the device itself lacks (a format, a native extension) is not a
missing tool: those tests still skip, naming the device.
"""
from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest

STRICT = os.environ.get("VKCAP_TEST_STRICT") == "1"
LAVAPIPE = Path("/usr/share/vulkan/icd.d/lvp_icd.x86_64.json")
"""lavapipe's ICD manifest, as Debian's mesa-vulkan-drivers installs it."""


def missing(what: str) -> NoReturn:
    """Skip the current test (or module, at import) for lack of ``what``; fail it under ``make test``."""
    if STRICT:
        pytest.fail(f"{what} (make test requires it: VKCAP_TEST_STRICT=1)", pytrace=False)
    pytest.skip(what, allow_module_level=True)


def module(name: str, what: str) -> ModuleType:
    """The imported module ``name``, or :func:`missing` (``what``) when it cannot be imported."""
    try:
        return importlib.import_module(name)
    except ImportError:
        missing(what)
