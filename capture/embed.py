"""Which files a scenario needs, the names they get inside a trace, and the portable scenario.

A trace is self-contained: every file the scenario references (shader sources and the files they
include, ``src`` inputs, VGF files) is stored in it under a *trace name*, and the trace also stores a
*portable* copy of the scenario whose paths are those trace names. Replay writes the files into an
empty folder and runs the portable scenario from there; the original files are never needed.

Trace names are relative POSIX paths without ``..``: the path relative to the scenario's folder when
the file lies inside it, else ``external/<n>/...``. :func:`safe_join` refuses anything else when
files are written back, so a hostile trace cannot write outside the folder it is given.
"""
from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from vkcore.errors import TraceError

if TYPE_CHECKING:  # readers of traces (which check names) need not load the scenario model
    from vkcore.scenario.model import Scenario

PATH_FIELDS = ("src",)


@dataclass(frozen=True)
class EmbeddedFile:
    role: str  # "shader", "include", "input", "graph"
    source: Path  # where it is on this machine
    name: str  # its trace name


@dataclass
class _Namer:
    base: Path
    external: dict[Path, str] = field(default_factory=dict)

    def folder(self, folder: Path) -> str:
        """Trace name of a folder: relative to the scenario's folder, else ``external/<n>``."""
        resolved = folder.resolve()
        try:
            rel = resolved.relative_to(self.base.resolve()).as_posix()
            return "" if rel == "." else rel
        except ValueError:
            if resolved not in self.external:
                self.external[resolved] = f"external/{len(self.external)}"
            return self.external[resolved]

    def file(self, path: Path) -> str:
        resolved = path.resolve()
        return posixpath.join(self.folder(resolved.parent), resolved.name)


def _under(path: Path, folder: Path) -> str | None:
    try:
        return path.resolve().relative_to(folder.resolve()).as_posix()
    except ValueError:
        return None


def portable_scenario(scenario: Scenario, shader_dependencies: dict[str, tuple[Path, ...]]) -> tuple[dict[str, Any], list[EmbeddedFile]]:
    """The scenario document with every path replaced by its trace name, and the files to embed.

    Include files keep their place relative to the include folder (or the shader's folder) they were
    found in, so ``#include`` resolves the same way after replay.
    """
    # lazy: vkcap info imports this module, not vkcore.scenario.model
    from vkcore.scenario.model import Shader

    namer = _Namer(scenario.base_dir)
    # Only the resources' entries change: they are copied, the rest is shared with the scenario's document
    # (a deep copy of every command took 2.5 ms of the recording's start for 100 frames).
    document = dict(scenario.document)
    if "resources" in document:
        document["resources"] = [{kind: dict(body) for kind, body in item.items()} for item in document["resources"]]
    files: dict[str, EmbeddedFile] = {}

    def add(role: str, path: Path, name: str | None = None) -> str:
        name = name or namer.file(path)
        files.setdefault(name, EmbeddedFile(role, path, name))
        return name

    for r, item in zip(scenario.resources, document.get("resources", [])):
        (kind, body), = item.items()
        src = getattr(r, "src", "")
        if not src:
            continue
        source = scenario.src_path(src)
        if isinstance(r, Shader) and not source.is_file():
            # A shader no command uses may lack its file (validation warned): nothing to embed, and its
            # path, perhaps absolute, becomes a name inside the trace's folder (a replay is confined to it).
            body["src"] = posixpath.join("missing", str(r.index), source.name or "shader")
            body["include_dirs"] = []
            continue
        role = {"shader": "shader", "graph": "graph"}.get(kind, "input")
        body["src"] = add(role, source)
        if isinstance(r, Shader):
            folders = [scenario.src_path(d) for d in r.include_dirs]
            body["include_dirs"] = [namer.folder(f) or "." for f in folders]
            for dep in shader_dependencies.get(r.uid, ()):
                for folder in [*folders, source.parent]:
                    rel = _under(dep, folder)
                    if rel is not None:
                        add("include", dep, posixpath.join(namer.folder(folder), rel))
                        break
                else:
                    add("include", dep)
    return document, list(files.values())


def check_trace_name(name: str) -> str:
    """Return ``name`` if it is a safe relative POSIX path, else raise :class:`TraceError`."""
    if not isinstance(name, str) or not name or "\\" in name or "\0" in name:
        raise TraceError(f"unsafe file name in trace: {name!r}")
    p = PurePosixPath(name)
    if p.is_absolute() or any(part == ".." for part in p.parts) or posixpath.normpath(name) != name or name == ".":
        raise TraceError(f"unsafe file name in trace (escapes its folder): {name!r}")
    return name


def safe_join(root: Path, name: str) -> Path:
    """``root / name`` after checking that the result stays inside ``root``."""
    check_trace_name(name)
    target = (root / name).resolve()
    if not target.is_relative_to(root.resolve()):
        raise TraceError(f"unsafe file name in trace (escapes its folder): {name!r}")
    return target
