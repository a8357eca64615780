"""Reading the small text files people hand vkcap (suite manifests, tolerance files, suite result
files) without trusting them: only a regular file is read (a FIFO, a device or a folder is refused
without blocking), never more than a cap, and only as UTF-8.

Guarantee: :func:`read_small_text` returns the whole file's text or raises a one-line
:class:`~vkcore.errors.UsageError` (exit 2) naming the file; it never blocks on a special file and never
reads more than ``cap + 1`` bytes.
"""
from __future__ import annotations

import os
from pathlib import Path

from vkcore.errors import UsageError
from vkcore.paths import NotARegularFile, open_regular

#: The largest manifest, tolerance file or result file read (a hand-written file is a few KiB; a result
#: file with a long retry spread a few hundred).
SMALL_FILE_CAP = 4 << 20


def read_small_text(path: Path, what: str, cap: int = SMALL_FILE_CAP) -> str:
    """The text of ``path`` (``what`` it should be, for messages: "suite manifest"); refused in one line
    when it is missing, not a regular file, larger than ``cap`` bytes or not UTF-8."""
    try:
        fd, _ = open_regular(path)
    except FileNotFoundError:
        raise UsageError(f"no such {what}", file=path) from None
    except IsADirectoryError:
        raise UsageError(f"is a folder, not a {what}", file=path) from None
    except NotARegularFile:
        raise UsageError(f"is not a regular file (a FIFO, device or socket), not a {what}", file=path) from None
    except OSError as exc:
        raise UsageError(f"cannot read the {what}: {exc.strerror or exc}", file=path) from None
    try:
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(cap + 1)
    except OSError as exc:
        raise UsageError(f"cannot read the {what}: {exc.strerror or exc}", file=path) from None
    finally:
        os.close(fd)
    if len(data) > cap:
        raise UsageError(f"larger than {cap >> 20} MiB: too large for a {what}", file=path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"not UTF-8 text (byte {exc.start}): not a {what}", file=path) from None
