"""Confinement of a scenario that came from a trace: every path it holds names a file inside its folder.

A trace's portable scenario is written into a temporary folder with the trace's embedded files and loaded
from there. Whatever it says is untrusted, so before anything looks at a path in it (no ``stat``, no
``open``: whether a host path exists must not show in any message), :func:`check_confined` requires
every path field to be a relative POSIX path without ``..``, without a NUL or a backslash, that stays
inside the folder. A user's own scenario (``run``, ``record``) is not confined: an absolute ``src`` is
legitimate there.
"""
from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any, Iterator

from ..errors import ScenarioError, json_path

# Resource fields holding one path, and those holding a list of paths (resolved against the scenario's
# folder, or the output folder for ``dst``).
PATH_FIELDS = ("src", "dst")
PATH_LIST_FIELDS = ("include_dirs",)


def path_problem(value: object) -> str | None:
    """Why ``value`` cannot be a path inside a confined folder, or None. Pure string checks: no file
    system access."""
    if not isinstance(value, str):
        return None  # not a path at all: the schema refuses it with its own message
    if "\0" in value:
        return "holds a NUL character"
    if "\\" in value:
        return "holds a backslash (paths in a trace use '/')"
    if any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        return "holds a lone surrogate (not a valid character)"
    p = PurePosixPath(value)
    if p.is_absolute():
        return "is an absolute path; a trace's paths are relative to its own files"
    if ".." in p.parts:
        return "goes up with '..'; a trace's paths stay inside its own files"
    return None


def _path_fields(document: dict[str, Any]) -> Iterator[tuple[str, object]]:
    """``(JSON path, value)`` of every path field of ``document``'s resources, tolerating any shape (the
    schema, which runs later, reports what is malformed)."""
    resources = document.get("resources")
    if not isinstance(resources, list):
        return
    for i, item in enumerate(resources):
        if not isinstance(item, dict):
            continue
        for kind, body in item.items():
            if not isinstance(body, dict):
                continue
            for name in PATH_FIELDS:
                if name in body:
                    yield json_path("resources", i, kind, name), body[name]
            for name in PATH_LIST_FIELDS:
                values = body.get(name)
                if isinstance(values, list):
                    for j, value in enumerate(values):
                        yield json_path("resources", i, kind, name, j), value


def check_confined(document: dict[str, Any], path: Path) -> None:
    """Raise :class:`ScenarioError` at the first path field of ``document`` (read from ``path``) that
    could name something outside ``path``'s folder. Checks strings only, so it runs before validation
    looks at any file."""
    for place, value in _path_fields(document):
        problem = path_problem(value)
        if problem is not None:
            raise ScenarioError(problem, file=path, place=place)


def confined_path(folder: Path, relative: str, place: str | None = None, file: Path | None = None) -> Path:
    """``folder / relative`` after :func:`path_problem` accepted ``relative`` and the result, resolved,
    is inside ``folder`` (resolving touches only ``folder``'s own entries: ``relative`` is checked
    first)."""
    problem = path_problem(relative)
    if problem is not None:
        raise ScenarioError(problem, file=file, place=place)
    target = folder / relative
    if not target.resolve().is_relative_to(folder.resolve()):
        raise ScenarioError("leaves the trace's folder (through a symbolic link)", file=file, place=place)
    return target
