"""A file object that logs every read, for tests that assert which bytes a trace reader touches."""
from __future__ import annotations

import io
from typing import BinaryIO


class ReadLog(io.RawIOBase):
    """Reads from ``raw`` (any seekable binary file) and records the (offset, size) of every read."""

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        if hasattr(raw, "name"):
            self.name = str(raw.name)
        self.reads: list[tuple[int, int]] = []

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._raw.seek(offset, whence)

    def read(self, n: int = -1) -> bytes:
        at = self._raw.tell()
        data = self._raw.read(n)
        self.reads.append((at, len(data)))
        return data

    def bytes_read(self) -> int:
        return sum(n for _, n in self.reads)

    def close(self) -> None:
        self._raw.close()
        super().close()
