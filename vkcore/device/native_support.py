"""Remembering which device extensions the installed drivers provide natively.

To learn whether a device has VK_ARM_tensors / VK_ARM_data_graph itself (or needs ARM's emulation
layers), vkcap creates a Vulkan instance without layers; for a tensor or graph scenario that then needs
the layers, a second instance follows. Some drivers take a quarter of a second to start, twice. The
answer depends only on the installed drivers, so it is kept in the cache under a key made of the
driver manifests (ICD .json files) in effect and the files they point to: installing, updating or
removing a driver changes the key, and the answer is learnt again.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ..outputs import write_atomic
from ..paths import cache_root

ICD_DIRS = ("/etc/vulkan/icd.d", "/usr/share/vulkan/icd.d", "/usr/local/share/vulkan/icd.d")


def _manifests() -> list[Path]:
    explicit = os.environ.get("VK_DRIVER_FILES") or os.environ.get("VK_ICD_FILENAMES")
    if explicit:
        return [Path(p) for p in explicit.split(os.pathsep) if p]
    found: list[Path] = []
    for folder in ICD_DIRS:
        try:
            found += sorted(Path(folder).glob("*.json"))
        except OSError:
            continue
    return found


def _stamp(path: Path) -> list[object]:
    try:
        st = path.stat()
        return [str(path), st.st_size, st.st_mtime_ns]
    except OSError:
        return [str(path), None]


def drivers_key() -> str:
    """A digest of the driver manifests in effect and the libraries they name (where absolute)."""
    parts: list[object] = []
    for manifest in _manifests():
        parts.append(_stamp(manifest))
        try:
            library = json.loads(manifest.read_text()).get("ICD", {}).get("library_path", "")
        except (OSError, ValueError, AttributeError):
            library = ""
        if library and os.path.isabs(library):
            parts.append(_stamp(Path(library)))
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:24]


def _file() -> Path:
    return cache_root() / "native" / f"{drivers_key()}.json"


def known_native(extensions: list[str]) -> bool | None:
    """True when some device provides all ``extensions`` natively, False when none does, None if unknown."""
    try:
        devices = json.loads(_file().read_text())["devices"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return any(all(e in d.get("extensions", []) for e in extensions) for d in devices)


def remember(device_extensions: list[list[str]]) -> None:
    """Store, for each device in enumeration order, its native extensions of interest."""
    document = {"devices": [{"extensions": sorted(e)} for e in device_extensions]}
    try:
        write_atomic(_file(), [json.dumps(document).encode()])
    except OSError:
        pass  # a cache we cannot write only costs time
