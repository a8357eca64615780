"""Writing output files safely: atomically, never over what must not be replaced, and with one-line errors.

:func:`write_atomic` is the one way vkcap writes a file (outputs, reports, caches): the destination holds
either its old content or the complete new one. :func:`check_output_target` says up front, without
creating anything, whether a path may be written at all (not a folder, device node or FIFO, not under a
file, in a writable folder), so commands can refuse a bad path before any work.
"""
from __future__ import annotations

import ctypes
import errno
import functools
import logging
import os
import stat
import sys
from pathlib import Path
from typing import Any, Callable, Iterable

from .errors import UsageError, VkcapError

log = logging.getLogger(__name__)


class OutputTargetError(UsageError, OSError):
    """An output path that cannot or must not be written: a folder, a device node or FIFO, a path under
    a file, a read-only or forbidden folder, an empty path. One line naming the path, exit 2. Also an
    :class:`OSError`, so callers that tolerate a cache they cannot write keep doing so."""


class OutputWriteFailed(VkcapError, OSError):
    """Writing an output failed while writing it (a full disk, an I/O error): one line naming the path,
    exit 1. Also an :class:`OSError`. The old content of the path, if any, is untouched."""


# Errors that say the path itself is unusable (bad input, exit 2), not that the write failed midway.
TARGET_ERRNOS = frozenset({errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EISDIR, errno.EEXIST,
                           errno.ENAMETOOLONG, errno.ELOOP, errno.ENOENT})
_NOT_REGULAR = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
                (stat.S_ISSOCK, "a socket"))


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether ``a`` and ``b`` name one file: the same file when both exist (links and hard links
    included), else the same resolved path."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def output_target_problem(path: str | Path) -> str | None:
    """Why an atomic write must not or cannot replace ``path`` (a phrase to follow ``PATH:``), or None.

    Refused: an empty path; an existing folder; an existing file that is not a regular file (a device
    node, FIFO or socket: renaming over it would destroy it); a path whose folder, or an ancestor of it,
    is a file; a folder (the nearest existing one, when folders are to be created) that this process
    cannot write into (a read-only file system, no permission). A symbolic link is judged by what it
    points to. Looks only (stat, access): creates and changes nothing."""
    text = os.fspath(path)
    if text == "":
        return "the path is empty: name a file"
    try:
        st = os.stat(text)
    except FileNotFoundError:
        st = None
    except NotADirectoryError:
        return _ancestor_problem(Path(text).parent) or "a folder on the way is a file"
    except OSError as exc:
        return f"cannot be examined: {exc.strerror or exc}"
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            where = " (the current folder)" if text in (".", "./") else ""
            return f"is a folder{where}, not a file"
        for test, noun in _NOT_REGULAR:
            if test(st.st_mode):
                return f"is {noun}, not a regular file: refusing to replace it"
        if not stat.S_ISREG(st.st_mode):
            return "is not a regular file: refusing to replace it"
    return _ancestor_problem(Path(os.path.abspath(text)).parent)


def output_folder_problem(folder: str | Path) -> str | None:
    """Why files cannot be written into ``folder`` (an ``--output``), or None: it is a file, lies under
    a file, or it (or, when it is to be created, its nearest existing ancestor) is not writable.
    An empty path means the current folder. Looks only: creates nothing."""
    absolute = Path(os.path.abspath(os.fspath(folder) or "."))
    problem = _ancestor_problem(absolute)
    if problem == f"{absolute} is a file, not a folder":
        return "is a file, not a folder"
    return problem


def _ancestor_problem(folder: Path) -> str | None:
    """Why files cannot be created in ``folder`` (created first, with its missing parents), or None."""
    nearest = folder
    while True:
        try:
            st = os.stat(nearest)
            break
        except FileNotFoundError:
            if nearest.parent == nearest:
                return f"no folder of {folder} exists"
            nearest = nearest.parent
        except NotADirectoryError:
            nearest = nearest.parent
        except OSError as exc:
            return f"cannot examine {nearest}: {exc.strerror or exc}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{nearest} is a file, not a folder"
    if not os.access(nearest, os.W_OK | os.X_OK):
        return f"cannot write into {nearest}: {_why_unwritable(nearest)}"
    return None


def _why_unwritable(folder: Path) -> str:
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return "read-only file system"
    except (OSError, AttributeError):
        pass
    return "permission denied"


def check_output_target(path: str | Path, *, place: str | None = None) -> Path:
    """Raise :class:`OutputTargetError` (``PATH: PLACE: why``) when :func:`output_target_problem` finds
    one; else return ``path`` as a :class:`Path`. ``place`` names the flag or field that gave the path."""
    problem = output_target_problem(path)
    if problem is not None:
        raise OutputTargetError(problem, file=os.fspath(path) or "''", place=place)
    return Path(path)


def check_output_folder(folder: str | Path, *, place: str | None = None) -> Path:
    """Raise :class:`OutputTargetError` (``FOLDER: PLACE: why``) when :func:`output_folder_problem` finds
    one; else return ``folder`` as a :class:`Path`. ``place`` names the flag that gave the folder."""
    problem = output_folder_problem(folder)
    if problem is not None:
        raise OutputTargetError(problem, file=str(folder), place=place)
    return Path(folder)


def output_error(path: str | Path, exc: OSError) -> VkcapError:
    """The one-line error for an :class:`OSError` met while writing ``path``: an
    :class:`OutputTargetError` when the path is unusable (read-only, forbidden, a folder, ...), else
    :class:`OutputWriteFailed`. An error that already is one of them is returned as it is."""
    if isinstance(exc, VkcapError):
        return exc
    reason = exc.strerror or str(exc)
    cls = OutputTargetError if exc.errno in TARGET_ERRNOS else OutputWriteFailed
    error = cls(f"cannot write: {reason}", file=os.fspath(path))
    error.errno = exc.errno
    return error


def write_atomic(path: str | Path, chunks: Iterable[bytes | memoryview]) -> None:
    """Write ``chunks`` to ``path`` so that ``path`` is either its old content or the complete new one.

    The data goes to a unique temporary file beside ``path`` and is renamed over it after an fsync-free
    flush; a failure removes the temporary file. Missing parent folders are created. The new file's mode
    is ``0o666`` less the process umask, as for a file opened with ``open(path, "wb")`` (``0644`` under
    the usual umask), not the private ``0600`` of :func:`tempfile.mkstemp`.

    Before anything is created, :func:`check_output_target` refuses a path that must not be replaced
    (a folder, a device node, a FIFO, ...) or cannot be written. Every failure is a one-line
    :class:`OutputTargetError` or :class:`OutputWriteFailed` naming ``path`` (both are OSErrors).
    """
    target = check_output_target(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = _create_temporary(target)
    except OSError as exc:
        raise output_error(target, exc) from None
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                _write_chunk(f, chunk)
        replace_file(tmp, target)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError):
            raise output_error(target, exc) from None
        raise


def replace_file(source: str | Path, target: str | Path) -> None:
    """Put the finished file ``source`` at ``target`` in one atomic step, as :func:`os.replace` does:
    ``target`` names the old file or the new one at every moment, never neither.

    Over an existing regular file, the two names are exchanged (``renameat2`` with
    ``RENAME_EXCHANGE``) and the old file, now at ``source``, is then removed. Renaming over a file
    makes ext4 start writing the new file back and free the old one's blocks before the rename returns
    (12 ms for a trace of 22 MiB on the 2-core machine, against 5 ms for the exchange and the removal):
    what was written without ``fsync`` is left to the kernel's writeback, as for a new path. Where
    exchanging is not supported (another system or C library, an older kernel, a file system without
    it), or nothing is at ``target``, this is :func:`os.replace`. The durability is the same either way:
    a caller that needs the new file on disk syncs it first and the folder after.
    """
    exchange = _renameat2()
    try:
        existing = stat.S_ISREG(os.lstat(target).st_mode)
    except FileNotFoundError:
        existing = False
    if exchange is None or not existing:
        os.replace(source, target)
        return
    if exchange(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), _RENAME_EXCHANGE) != 0:
        failed = ctypes.get_errno()
        if failed not in _RENAME_INSTEAD:
            raise OSError(failed, os.strerror(failed), os.fspath(target))
        os.replace(source, target)
        return
    try:
        os.unlink(source)
    except OSError as exc:  # published: the old file is left under the temporary name
        log.warning("%s is in place; its previous content could not be removed from %s (%s)",
                    target, source, exc.strerror or exc)


# renameat2(2): the current folder as the base of a relative path, and the flag that swaps two names
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
# what an exchange may fail with where a rename would not: the flag is unknown to the kernel or the
# file system (EINVAL, ENOSYS, EOPNOTSUPP), a layered file system would rather copy (EXDEV), or the
# target went meanwhile (ENOENT)
_RENAME_INSTEAD = frozenset({errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV, errno.ENOENT})


@functools.cache
def _renameat2() -> Callable[..., int] | None:
    """glibc's ``renameat2``, or None where the C library has none (it needs glibc 2.28) or this is
    not Linux."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
    function.restype = ctypes.c_int
    renameat2: Callable[..., int] = function
    return renameat2


def _write_chunk(f: Any, chunk: bytes | memoryview) -> None:
    """``f.write(chunk)``; where the kernel may not read the chunk's memory (EFAULT: a capture layer such as
    GFXReconstruct write-protects mapped device memory to track writes), again through a copy, which the
    layer's fault handler lets through."""
    start = f.tell()
    try:
        f.write(chunk)
    except OSError as exc:
        if exc.errno != errno.EFAULT:
            raise
        f.seek(start)
        f.truncate()
        f.write(bytes(chunk))


def _create_temporary(target: Path) -> tuple[int, str]:
    """Create and open a new, unique file beside ``target``, with the mode the umask gives ``0o666``."""
    while True:
        tmp = os.path.join(target.parent, f".{target.name}.{os.urandom(6).hex()}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666), tmp
        except FileExistsError:
            continue


def check_outputs_apart(outputs: Iterable[tuple[str, str | Path | None]],
                        inputs: Iterable[tuple[str | Path, str]]) -> None:
    """Refuse (:class:`OutputTargetError`: ``PATH: FLAG: is WHAT, an input of this command``, exit 2),
    before any work, an output (``(flag, path)``; None: not asked for) that is one of the command's
    ``inputs`` (``(path, what it is)``) or another of the outputs (see :func:`same_file`)."""
    seen: list[tuple[str | Path, str]] = []
    known = list(inputs)
    for flag, path in outputs:
        if path is None:
            continue
        for other, what in known:
            if same_file(path, other):
                raise OutputTargetError(f"is {what}, an input of this command: refusing to overwrite it",
                                        file=os.fspath(path), place=flag)
        for other, other_flag in seen:
            if same_file(path, other):
                raise OutputTargetError(f"is also {other_flag}: name two different files", file=os.fspath(path),
                                        place=flag)
        seen.append((path, flag))
