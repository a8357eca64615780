"""Choosing the Vulkan driver, which is only environment work: this module loads no Vulkan bindings, so
a process that merely passes the choice on (the parent of an isolated bisection) stays light."""
from __future__ import annotations

import json
import os
from pathlib import Path

from ..errors import UsageError


def check_manifest(icd: Path, flag: str = "--icd") -> Path:
    """Return ``icd`` if it is a usable Vulkan driver manifest, else raise :class:`UsageError`
    ``FLAG ICD: what is wrong``: no such file, not JSON, no ``ICD`` object with a ``library_path``
    string, or a library path (relative ones resolve against the manifest's folder, as the loader's
    do) naming no file. A bare library name is looked up by the loader on its search path: accepted."""
    where = f"{flag} {icd}"
    if not icd.is_file():
        raise UsageError(f"{where}: no such driver manifest (a Vulkan ICD .json file)")
    try:
        document = json.loads(icd.read_bytes())
    except OSError as exc:
        raise UsageError(f"{where}: cannot read the driver manifest: {exc.strerror or exc}") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise UsageError(f"{where}: not a Vulkan driver manifest: invalid JSON ({exc})") from None
    body = document.get("ICD") if isinstance(document, dict) else None
    if not isinstance(body, dict):
        raise UsageError(f"{where}: not a Vulkan driver manifest: no \"ICD\" object")
    library = body.get("library_path")
    if not isinstance(library, str) or not library:
        raise UsageError(f"{where}: ICD.library_path: missing or not a string, got {library!r}")
    if os.sep in library or (os.altsep and os.altsep in library):
        resolved = icd.resolve().parent / library
        if not resolved.is_file():
            raise UsageError(f"{where}: ICD.library_path: no such library: {resolved}")
    return icd


def use_driver(icd: Path | None, flag: str = "--icd") -> None:
    """Make the Vulkan loader use only the driver manifest ``icd`` (before any instance exists);
    :class:`UsageError` naming ``flag`` when it is not a usable manifest (:func:`check_manifest`).
    ``None`` leaves the loader's choice alone."""
    if icd is None:
        return
    check_manifest(icd, flag)
    os.environ["VK_DRIVER_FILES"] = str(icd.resolve())
    os.environ["VK_ICD_FILENAMES"] = str(icd.resolve())
