"""Every Vulkan call of a capture, as GFXReconstruct's own ``gfxrecon-convert`` prints it (JSON Lines),
joined with the bytes it prints only as addresses (shader code, specialization data, push constants,
update data) and the fill-memory commands it does not print, both from :mod:`.blocks`.

Guarantees: ``gfxrecon-convert`` runs on the capture with its output in a private temporary folder that is
always removed, under a time limit; its lines are bounded in number and length; a call is a :class:`Call`
with ``index`` (the capture's block index), ``name`` and ``args`` (a dict); nothing else of the JSON is
trusted (types are checked where used).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from vkcore.paths import NotARegularFile, open_regular

from .blocks import Blocks, CaptureError, FillMemory, read_blocks

CONVERT = "gfxrecon-convert"
MAX_LINES = 5_000_000
MAX_LINE = 64 << 20
TIMEOUT_S = 600
MAX_FILE = 8 << 30


@dataclass(frozen=True)
class Call:
    index: int
    name: str
    args: dict[str, Any]
    result: str | None = None


@dataclass
class Capture:
    """The capture's calls in order, and the binary's blocks for the bytes they point to."""

    calls: list[Call]
    blocks: Blocks
    events: list[Call | FillMemory] = field(default_factory=list)  # calls and fills merged by index


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="vkcap-gfxr-") as scratch:
        out = Path(scratch) / "calls.jsonl"
        # The capture is copied by name only: gfxrecon-convert derives nothing from our output path.
        try:
            proc = subprocess.run([CONVERT, "--output", str(out), str(path)], capture_output=True, text=True,
                                  timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise CaptureError(f"{CONVERT} did not finish within {TIMEOUT_S} s") from None
        if proc.returncode != 0 or not out.is_file():
            said = " ".join((proc.stderr or proc.stdout).split())[-300:]
            raise CaptureError(f"{CONVERT} could not read it (exit {proc.returncode}){': ' + said if said else ''}")
        with out.open("rb") as stream:
            for number, raw in enumerate(stream):
                if number >= MAX_LINES or len(raw) > MAX_LINE:
                    raise CaptureError(f"{CONVERT} printed more than vkcap reads (line {number + 1})")
                try:
                    item = json.loads(raw)
                except ValueError:
                    raise CaptureError(f"{CONVERT} printed a line that is not JSON (line {number + 1})") from None
                if isinstance(item, dict):
                    yield item


def _read_file(path: Path) -> bytes:
    """The capture's bytes, when it is a regular file of at most :data:`MAX_FILE` bytes."""
    try:
        fd, st = open_regular(path)
    except (OSError, NotARegularFile) as exc:
        raise CaptureError(f"cannot read the capture: {getattr(exc, 'strerror', None) or exc}") from None
    with os.fdopen(fd, "rb") as stream:
        if st.st_size > MAX_FILE:
            raise CaptureError(f"the capture has {st.st_size} bytes, more than vkcap imports ({MAX_FILE})")
        return stream.read(MAX_FILE + 1)


def read_capture(path: Path) -> Capture:
    """The capture at ``path`` (a regular file), read with ``gfxrecon-convert`` and :func:`read_blocks`."""
    if shutil.which(CONVERT) is None:
        raise CaptureError(f"{CONVERT} is not installed (Debian/Ubuntu: apt-get install gfxreconstruct)")
    blocks = read_blocks(_read_file(path))  # first: a garbled file is refused with the block it breaks at
    calls = []
    for item in _lines(path):
        func, index = item.get("vkFunc"), item.get("index")
        if not isinstance(func, dict) or not isinstance(index, int) or not isinstance(func.get("name"), str):
            continue
        args = func.get("args") if isinstance(func.get("args"), dict) else {}
        calls.append(Call(index, func["name"], args, func.get("return") if isinstance(func.get("return"), str) else None))
    events: list[Call | FillMemory] = sorted([*calls, *blocks.fills.values()], key=lambda e: e.index)
    return Capture(calls, blocks, events)
