"""No output of a run may be one of its inputs: a ``dst`` is checked, before any work, against every file
the run reads (the scenario, each ``src``, the files shader sources ``#include``) and every other
``dst`` of the run (:func:`check_dst_clashes`)."""
from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any, Iterator

from ..errors import ScenarioError
from ..outputs import same_file

_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"\r\n]+)[>"]', re.MULTILINE)
_SOURCE_MAX_BYTES = 16 << 20  # a larger "source" is not scanned for #include (the compiler refuses it)


def _included(scenario: Any, shader: Any) -> Iterator[Path]:
    """The files the GLSL/HLSL source of ``shader`` names in ``#include`` lines, resolved against its
    folder and its include folders (each candidate that exists; the compiler takes the first)."""
    if not shader.src or str(getattr(shader, "type", "")).upper() == "SPIR-V":
        return
    source = scenario.src_path(shader.src)
    try:
        st = os.stat(source)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _SOURCE_MAX_BYTES:  # never open a FIFO or device
            return
        text = source.read_bytes()
    except OSError:
        return
    folders = [source.parent, *(scenario.src_path(d) for d in getattr(shader, "include_dirs", ()) or ())]
    for match in _INCLUDE.finditer(text):
        name = os.fsdecode(match.group(1))
        for folder in folders:
            candidate = folder / name
            if os.path.isfile(candidate):
                yield candidate


def run_inputs(scenario: Any) -> Iterator[tuple[Path, str]]:
    """Every file the run reads, with what it is to the scenario (for a refusal's words)."""
    yield scenario.path, "the scenario itself"
    for resource in scenario.resources:
        src = getattr(resource, "src", "")
        if src:
            yield scenario.src_path(src), f"{resource.place}.src, a file the scenario reads"
        if hasattr(resource, "include_dirs"):
            for path in _included(scenario, resource):
                yield path, f"a file {resource.place}.src includes"


def check_dst_clashes(scenario: Any, output: Path | None) -> None:
    """Refuse (a :class:`ScenarioError` at the resource's ``dst``, exit 2) a ``dst`` that names a file
    the run reads or another resource's ``dst``."""
    inputs = list(run_inputs(scenario))
    written: list[tuple[Path, str]] = []
    for resource in scenario.resources:
        dst = getattr(resource, "dst", "")
        if not dst:
            continue
        target = scenario.dst_path(dst, output)
        for path, what in (*inputs, *written):
            if same_file(target, path):
                raise ScenarioError(f"{target}: is {what}: refusing to overwrite it", file=scenario.path,
                                    place=f"{resource.place}.dst")
        written.append((target, f"{resource.place}.dst too"))
