"""Where vkcap keeps its caches (compiled shaders, layer manifests, validated scenarios, pipeline caches), and
how it opens a path it was given: regular files only, bounded (:func:`read_regular`, :func:`check_regular`)."""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


def cache_root() -> Path:
    """``$VKCAP_CACHE_DIR``, else ``$XDG_CACHE_HOME/vkcap``, else ``~/.cache/vkcap``. Not created here."""
    explicit = os.environ.get("VKCAP_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "vkcap"


# ---------------------------------------------------------------------------------------------------------
# Opening a path a user or a file named: regular files only, bounded
# ---------------------------------------------------------------------------------------------------------

class NotARegularFile(OSError):
    """``path`` is a FIFO, a device, a socket, or a file whose size is not what it holds (a
    ``/proc`` or sysfs file): refused before anything is read from it. An :class:`OSError`, so that code
    reporting ``exc.strerror`` for unreadable files reports this too."""

    def __init__(self, path: str | os.PathLike[str], what: str, kind: str = "not a regular file") -> None:
        super().__init__(errno.EINVAL, what, str(path))
        self.kind = kind  # what it is instead: "a FIFO", "a socket", "a character device"... (see _kind_of)


class FileTooLarge(OSError):
    """``path`` holds more than the limit its reader allows: refused before it is read."""

    def __init__(self, path: str | os.PathLike[str], size: int, limit: int) -> None:
        super().__init__(errno.EFBIG, f"{size} bytes, more than the {limit} bytes allowed", str(path))


def _kind_of(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: str | os.PathLike[str], *, follow_symlinks: bool = True) -> tuple[int, os.stat_result]:
    """Open ``path`` for reading and return ``(fd, fstat)`` when it is a regular file; the caller closes
    the fd. Guarantees: opening never blocks (``O_NONBLOCK``, so a FIFO without a writer is refused, not
    waited on), a FIFO, device or socket raises :class:`NotARegularFile` and a folder
    :class:`IsADirectoryError`, without one byte read,
    and with ``follow_symlinks=False`` a symbolic link as the last component is refused (``O_NOFOLLOW``).
    Other failures are the usual :class:`OSError` (``FileNotFoundError``, ``PermissionError``...)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a socket (or a FIFO opened otherwise): no such device
            try:
                kind = _kind_of(os.stat(path).st_mode)
            except OSError:
                kind = "not a regular file"
            raise NotARegularFile(path, "not a regular file (a socket?)", kind) from None
        if exc.errno == errno.ELOOP and not follow_symlinks:
            raise NotARegularFile(path, "is a symbolic link") from None
        raise
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a folder, not a file", str(path))
        if not stat.S_ISREG(st.st_mode):
            raise NotARegularFile(path, f"{_kind_of(st.st_mode)}: not a regular file", _kind_of(st.st_mode))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def check_regular(path: str | os.PathLike[str], limit: int | None = None, *, follow_symlinks: bool = True) -> os.stat_result:
    """The ``fstat`` of ``path`` after :func:`open_regular` accepted it (and, with ``limit``, its size is at
    most ``limit`` bytes: else :class:`FileTooLarge`). Nothing is read; for callers that hand the path
    to another reader (numpy, a compiler) after checking it."""
    fd, st = open_regular(path, follow_symlinks=follow_symlinks)
    os.close(fd)
    if limit is not None and st.st_size > limit:
        raise FileTooLarge(path, st.st_size, limit)
    return st


def read_regular(path: str | os.PathLike[str], limit: int, *, follow_symlinks: bool = True) -> bytes:
    """The bytes of regular file ``path``, at most ``limit`` of them. Guarantees beyond
    :func:`open_regular`'s: a file over ``limit`` raises :class:`FileTooLarge` before it is read (so
    ``/dev/zero`` or a huge file never fills memory), and a file holding more than its ``fstat`` size (a
    ``/proc`` or sysfs file, a file growing while read) raises :class:`NotARegularFile`."""
    fd, st = open_regular(path, follow_symlinks=follow_symlinks)
    try:
        if st.st_size > limit:
            raise FileTooLarge(path, st.st_size, limit)
        chunks = []
        left = st.st_size + 1  # one byte more than the size: a file that holds more is not what it says
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 24))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > st.st_size:
        raise NotARegularFile(path, "holds more than its size says (a /proc or sysfs file?): not a regular file")
    return data
