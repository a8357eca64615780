"""The traces a suite manifest's ``path`` names, kept inside the manifest's folder.

A manifest may come from someone else (a suite shared by another team), so its paths are untrusted:
unless the user allows it (``--allow-outside-manifest``), every path and glob stays under the folder the
manifest is in, after resolving symbolic links.

Guarantees, without the permission:

- an absolute path or glob, or one with a ``..`` part, is refused before the file system is looked at;
- a glob is expanded one part at a time, and each folder is resolved and found inside before it is
  listed; ``**`` does not follow symbolic links;
- every match is resolved and found inside before anything about its target is looked at (whether it
  exists, what kind of file it is), so the one refusal (``leads outside the manifest's folder``) is the
  same whether the outside path exists or not.
"""
from __future__ import annotations

import fnmatch
import glob
import os
from pathlib import Path, PurePosixPath

from vkcore.errors import UsageError

WILDCARDS = "*?["
ALLOW_FLAG = "--allow-outside-manifest"


def is_glob(pattern: str) -> bool:
    return any(c in pattern for c in WILDCARDS)


def manifest_matches(manifest: Path, pattern: str, place: str, *, allow_outside: bool = False) -> list[Path]:
    """The paths ``pattern`` (a manifest entry's ``path``, at ``place``) names, sorted: for a glob the
    entries it matches, for a plain path that path (which may not exist: the caller says so). Confined
    to the manifest's folder unless ``allow_outside``; a :class:`UsageError` naming the manifest and
    ``place`` otherwise."""
    if not pattern or "\0" in pattern:
        raise UsageError("must be a trace path or glob (not empty, no NUL)", file=manifest, place=place)
    root = manifest.parent
    if allow_outside:
        if os.path.isabs(pattern):
            return sorted(Path(p) for p in glob.glob(pattern)) if is_glob(pattern) else [Path(pattern)]
        return sorted(root.glob(pattern)) if is_glob(pattern) else [root / pattern]
    if os.path.isabs(pattern):
        raise UsageError(f"{pattern!r} is absolute: a manifest names its traces relative to its own folder "
                         f"({ALLOW_FLAG} allows it)", file=manifest, place=place)
    parts = [p for p in PurePosixPath(pattern).parts if p != "."]
    if ".." in parts:
        raise _outside(manifest, pattern, place)
    inside = root.resolve()
    current = [root]
    for part in parts:
        current = [_check_inside(p, inside, manifest, pattern, place) for p in _step(current, part)]
    return sorted(current)


def _step(folders: list[Path], part: str) -> list[Path]:
    """The paths one pattern ``part`` leads to from each of ``folders`` (each already found inside)."""
    if part == "**":
        return [sub for folder in folders for sub in _folders_under(folder)]
    if not is_glob(part):
        return [folder / part for folder in folders]
    out = []
    for folder in folders:
        try:
            with os.scandir(folder) as entries:
                names = sorted(e.name for e in entries)
        except OSError:  # not a folder, or unreadable: it matches nothing
            continue
        out += [folder / name for name in names if fnmatch.fnmatchcase(name, part)]
    return out


def _folders_under(folder: Path) -> list[Path]:
    """``folder`` and every folder below it (``**``), not following symbolic links (a link could lead
    outside, or back up into a loop)."""
    out, todo = [], [folder]
    while todo:
        here = todo.pop()
        out.append(here)
        try:
            with os.scandir(here) as entries:
                todo += sorted((here / e.name for e in entries if e.is_dir(follow_symlinks=False)), reverse=True)
        except OSError:
            continue
    return out


def resolves_inside(path: Path, inside: Path) -> bool:
    """Whether ``path``, its links resolved, lies in the (resolved) folder ``inside``; a link loop does not."""
    try:
        return path.resolve().is_relative_to(inside)
    except (OSError, RuntimeError):  # a link loop
        return False


def _check_inside(path: Path, inside: Path, manifest: Path, pattern: str, place: str) -> Path:
    if not resolves_inside(path, inside):
        # the link's own name is inside (the manifest's folder is the user's); where it leads is not said
        raise _outside(manifest, pattern, place, via=path.relative_to(manifest.parent))
    return path


def _outside(manifest: Path, pattern: str, place: str, via: Path | None = None) -> UsageError:
    through = f" (through the link {str(via)!r})" if via is not None and str(via) != pattern else ""
    return UsageError(f"{pattern!r} leads outside the manifest's folder{through}; {ALLOW_FLAG} allows it",
                      file=manifest, place=place)
