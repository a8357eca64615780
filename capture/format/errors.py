"""The errors of reading a trace: what the reader raises for a file that is not a trace, of a version
it cannot read, damaged, over a limit, or not a regular file. Every one is a :class:`ContainerError`,
whose ``path``, ``offset`` and ``detail`` say where and what."""
from __future__ import annotations


class ContainerError(Exception):
    """Base of the container's errors. ``path`` and ``offset`` (or None) say where; str() says both.

    Independent of ``vkcore.errors`` (the format imports nothing of vkcap): the CLI wraps these into
    ``vkcore.errors.TraceError`` with ``file=e.path`` and ``place=f"offset {e.offset}"``, using ``e.detail``.
    """

    def __init__(self, message: str, *, path: str | None = None, offset: int | None = None) -> None:
        self.path = path
        self.offset = offset
        self.detail = message
        where = f"{path}: " if path else ""
        at = f"record at offset {offset}: " if offset is not None else ""
        super().__init__(f"{where}{at}{message}")


class NotATrace(ContainerError):
    """The file is not a vkcap trace (wrong magic, or too short to hold the file header)."""


class UnsupportedVersion(ContainerError):
    """The file is a vkcap trace of a major format version this code cannot read."""

    def __init__(self, message: str, *, path: str | None = None, version: tuple[int, int] = (0, 0)) -> None:
        super().__init__(message, path=path, offset=0)
        self.version = version


class TraceCorrupt(ContainerError):
    """A record is damaged: a checksum, length, key or structure does not match. ``key`` names the blob."""

    def __init__(
        self, message: str, *, path: str | None = None, offset: int | None = None, key: str | None = None
    ) -> None:
        if key is not None:
            message = f"blob {key}: {message}"
        super().__init__(message, path=path, offset=offset)
        self.key = key


class NotARegularFile(ContainerError):
    """The path names a FIFO, a device, a socket or a folder: nothing a trace can be read from."""


class LimitExceeded(TraceCorrupt):
    """A record declares more than a reader limit allows (``max_blob_bytes``, ``max_meta_bytes``...).

    A subclass of TraceCorrupt so that callers handling damaged files also handle hostile ones; the
    message names the limit so a user who trusts the file can raise it.
    """
