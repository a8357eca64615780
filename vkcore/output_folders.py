"""Output folders that vkcap fills (an extract), and the file names it derives from untrusted content.

A folder named by the user is theirs: :func:`check_folder_target` refuses, before any work, a folder that
holds anything, unless ``--force`` is given and everything in it is what vkcap itself wrote there before,
as listed by the marker file :data:`MARKER` it leaves in every folder it fills. :func:`publish_folder`
puts a complete folder built beside the target in place: a new path is one rename; an existing folder
keeps its own inode (it may be the current folder) and gets the new entries, the marker first, after
vkcap's earlier entries were moved out.

:class:`SafeNames` turns names taken from a trace (resource uids, module names, file names embedded in a
scenario) into file names that stay inside the folder they are written to, whatever the trace holds.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Iterable, Iterator

from .errors import UsageError
from .outputs import check_output_folder

log = logging.getLogger("vkcap")

#: The marker vkcap writes into every folder it fills: ``{"tool", "version", "what", "entries"}``.
MARKER = ".vkcap-extract"
_MARKER_MAX_BYTES = 1 << 20


class FolderTargetError(UsageError):
    """A folder that vkcap must not write into or replace: one line naming it and the flag, exit 2."""


def _walk(folder: Path) -> Iterator[str]:
    """Every entry under ``folder`` (files, folders, links and anything else) as a relative POSIX path,
    folder by folder, as found; links are listed, not followed."""
    for root, dirs, files in os.walk(folder, followlinks=False):
        rel = Path(root).relative_to(folder)
        for name in sorted((*dirs, *files)):
            yield (rel / name).as_posix()


def _entries(folder: Path) -> list[str]:
    """Every entry under ``folder``, sorted (see :func:`_walk`)."""
    return sorted(_walk(folder))


def _is_empty(folder: Path) -> bool:
    with os.scandir(folder) as entries:
        return next(entries, None) is None


def _marker_entries(folder: Path) -> set[str] | None:
    """The entries the marker in ``folder`` says vkcap wrote, or None when there is no valid marker (not a
    regular file, too large, not the JSON vkcap writes)."""
    marker = folder / MARKER
    try:
        st = os.lstat(marker)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _MARKER_MAX_BYTES:
            return None
        document = json.loads(marker.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    entries = document.get("entries") if isinstance(document, dict) and document.get("tool") == "vkcap" else None
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        return None
    return set(entries)


def _holds(folder: Path, path: Path) -> bool:
    """Whether ``path`` is ``folder`` or lies under it (both resolved)."""
    folder, path = Path(os.path.realpath(folder)), Path(os.path.realpath(path))
    return folder == path or folder in path.parents


def check_folder_target(folder: str | Path, *, place: str, force: bool = False, inputs: Iterable[Path] = (),
                        what: str = "extract") -> Path:
    """``folder`` as an absolute :class:`Path` when vkcap may fill it; else a one-line
    :class:`FolderTargetError` naming it and ``place`` (exit 2). Looks only: changes nothing.

    Refused: a path that exists and is not a folder; a folder that is, or holds, one of ``inputs`` (the
    command's input files); a folder that holds anything, unless ``force`` is given and it holds
    :data:`MARKER` listing every entry in it (anything else, a link included, is refused); a folder
    that cannot be created or written (see :func:`vkcore.outputs.check_output_folder`). A folder that
    does not exist, or is empty, may be used."""
    text = os.fspath(folder)
    absolute = Path(os.path.abspath(text or "."))
    for source in inputs:
        if _holds(absolute, source):
            raise FolderTargetError(f"holds {source}, an input of this command: write the {what} elsewhere",
                                    file=text, place=place)
    try:
        st = os.stat(absolute)
    except FileNotFoundError:
        return check_output_folder(absolute, place=place)
    except OSError as exc:
        raise FolderTargetError(f"cannot be examined: {exc.strerror or exc}", file=text, place=place) from None
    if not stat.S_ISDIR(st.st_mode):
        raise FolderTargetError("exists and is not a folder: refusing to replace it", file=text, place=place)
    try:
        empty = _is_empty(absolute)
    except OSError as exc:
        raise FolderTargetError(f"cannot be listed: {exc.strerror or exc}", file=text, place=place) from None
    if not empty:
        listed = _marker_entries(absolute)
        if not force:
            hint = (f"it holds an earlier {what}: --force replaces it" if listed is not None
                    else "choose a new or empty folder")
            raise FolderTargetError(f"is a folder that is not empty: refusing to write into it ({hint})",
                                    file=text, place=place)
        if listed is None:
            raise FolderTargetError(f"is not empty and holds no {MARKER} (vkcap did not write it): refusing to "
                                    "replace it", file=text, place=place)
        # the first entry vkcap did not write (a link, a FIFO, ... it never writes), found without listing more
        foreign = next((e for e in _walk(absolute)
                        if e != MARKER and (e not in listed or not _plain(absolute / e))), None)
        if foreign is not None:
            raise FolderTargetError(f"holds {foreign!r}, which vkcap did not write: refusing to replace it",
                                    file=text, place=place)
    check_output_folder(absolute, place=place)
    return absolute


def _plain(path: Path) -> bool:
    """Whether ``path`` is a regular file or a folder (not a link, device, FIFO or socket)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return False
    return stat.S_ISREG(mode) or stat.S_ISDIR(mode)


def staging_folder(target: Path) -> Path:
    """A new, empty folder to build ``target``'s content in: ``content`` in a private staging folder
    beside ``target`` (``.NAME.vkcap-PID-XXXX``). The caller removes the staging folder (the returned
    folder's parent) on every exit path; :func:`publish_folder` does. Only ``kill -9`` (or a power loss)
    leaves one: :func:`name_abandoned_staging` names it to the next command writing ``target``."""
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.vkcap-{os.getpid()}-", dir=target.parent))
    (staging / "content").mkdir()
    return staging / "content"


def name_abandoned_staging(target: str | Path) -> list[Path]:
    """Warn, one line each, of the staging folders a killed command writing ``target`` left beside it
    (the pattern of :func:`staging_folder`, the process gone), and return them. They are never removed:
    one may hold, under ``old``, the earlier extract that was being replaced."""
    absolute = Path(os.path.abspath(os.fspath(target) or "."))
    pattern = re.compile(rf"\.{re.escape(absolute.name)}\.vkcap-([0-9]{{1,10}})-[A-Za-z0-9_]+")
    found = []
    try:
        names = sorted(os.listdir(absolute.parent))
    except OSError:
        return []
    for name in names:
        match = pattern.fullmatch(name)
        if match and not process_runs(int(match.group(1))) and os.path.isdir(absolute.parent / name):
            found.append(absolute.parent / name)
            log.warning("a partial folder from an interrupted command: %s; delete it", absolute.parent / name)
    return found


def process_runs(pid: int) -> bool:
    """Whether another process ``pid`` runs (perhaps a writer at work): this process does not count, it
    is only about to write; a process of another user does."""
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):
        return True
    return True


def publish_folder(built: Path, target: Path, *, what: str, version: str, place: str, force: bool,
                   inputs: Iterable[Path] = ()) -> None:
    """Put the complete folder ``built`` (made by :func:`staging_folder`) at ``target`` with a
    :data:`MARKER` listing its entries, then remove ``built``'s staging folder.

    ``target`` is checked again first (:func:`check_folder_target`: it may have changed while the
    content was built). A new ``target`` is ``built`` renamed (one step). An existing one keeps its
    inode: the entries vkcap wrote there before (``force``) move out into the staging folder, then the
    new ones move in, the marker first, so that a folder left half-filled by a crash still lists what is
    in it and ``--force`` can replace it. What moved out is removed last."""
    staging = built.parent
    try:
        check_folder_target(target, place=place, force=force, inputs=inputs, what=what)
        entries = _entries(built)
        marker = {"tool": "vkcap", "version": version, "what": what, "entries": entries}
        (built / MARKER).write_text(json.dumps(marker, indent=1) + "\n")
        os.chmod(built, 0o755)
        if not target.exists():
            os.rename(built, target)
            return
        old = staging / "old"
        old.mkdir()
        for name in sorted(os.listdir(target), key=lambda n: n != MARKER):  # the old marker goes last
            os.rename(target / name, old / name)
        for name in sorted(os.listdir(built), key=lambda n: n != MARKER):  # the new marker goes first
            os.rename(built / name, target / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# Characters a derived file name keeps; anything else becomes "_".
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")
# Names Windows reserves whatever the extension (a folder is carried to other machines).
_RESERVED = re.compile(r"(CON|PRN|AUX|NUL|COM[0-9]|LPT[0-9]|CONIN\$|CONOUT\$)(\..*)?", re.IGNORECASE)
#: The longest stem a derived name keeps (bytes; the suffix and a uniquifier come on top, within 255).
MAX_STEM = 96


def _sanitised(raw: str) -> str:
    """``raw`` with the characters, the leading and trailing dots and the reserved names of
    :func:`safe_stem` replaced, at any length."""
    name = _UNSAFE.sub("_", raw)
    name = re.sub(r"^\.", "_", name).rstrip(".") or "_"
    return f"_{name}" if _RESERVED.fullmatch(name) else name


def safe_stem(raw: str) -> str:
    """``raw`` as a file name stem that names one file inside a folder: only ``A-Z a-z 0-9 . _ + -``
    (anything else, ``/``, ``\\``, NUL and control characters included, becomes ``_``), no leading dot
    (``..`` and hidden names cannot occur), no trailing dot, not a name Windows reserves, never empty, at
    most :data:`MAX_STEM` characters (a longer one keeps its start and a hash of the whole)."""
    name = _sanitised(raw)
    if len(name) > MAX_STEM:
        digest = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        name = f"{name[:MAX_STEM - 13]}~{digest}"
    return name


def unique_stem(raw: str) -> str:
    """:func:`safe_stem`, with ``~`` and a hash of ``raw`` added when it had to change ``raw``: distinct
    raws give distinct stems with no state kept (a name that needed no change holds no ``~``, one that
    did always does), for writers that name files one at a time (heatmaps)."""
    stem = safe_stem(raw)
    if stem == raw:
        return stem
    digest = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"{_sanitised(raw)[:MAX_STEM - 11]}~{digest}"


class SafeNames:
    """The file names of one output folder, derived from untrusted names: each ``(group, raw)`` gets one
    name (asked again, the same), distinct from every other name given in the same subfolder, also
    when compared case-insensitively (the folder may be copied to such a file system)."""

    def __init__(self) -> None:
        self._given: dict[tuple[str, str, str], str] = {}
        self._taken: set[tuple[str, str]] = set()

    def name(self, subfolder: str, raw: str, suffix: str = "", *, like: str | None = None) -> str:
        """The file name for ``raw`` with ``suffix`` (a fixed, safe extension such as ``.npy``), unique
        among the names given for ``subfolder`` (a namespace: the names of one folder). ``like``: derive
        the name from this instead (a path's last part), still one name per ``raw``."""
        key = (subfolder, raw, suffix)
        if key not in self._given:
            stem = safe_stem(raw if like is None else like)
            candidate, n = stem + suffix, 1
            while (subfolder, candidate.casefold()) in self._taken:
                n += 1
                candidate = f"{stem}~{n}{suffix}"
            self._taken.add((subfolder, candidate.casefold()))
            self._given[key] = candidate
        return self._given[key]


def confined(folder: Path, relative: str) -> Path:
    """``folder / relative``, checked to stay inside ``folder`` (no absolute path, no ``..``, no link
    on the way out): the last guard of every write of a derived name. A :class:`ValueError` otherwise
    (a bug: names come from :class:`SafeNames`)."""
    if not relative or os.path.isabs(relative) or "\0" in relative or ".." in Path(relative).parts:
        raise ValueError(f"derived file name {relative!r} would leave {folder}")
    path = folder / relative
    if not _holds(folder, path) or os.path.realpath(path) == os.path.realpath(folder):
        raise ValueError(f"derived file name {relative!r} would leave {folder}")
    return path
