"""Writing a trace's embedded files into an empty folder, where its portable scenario is loaded from.

Guarantees (a trace is untrusted input):

- Every file lands inside the folder: names are checked (:func:`capture.embed.safe_join`), files are
  created with ``O_EXCL | O_NOFOLLOW`` and folders with ``mkdir`` (an existing entry is never reused,
  nothing is followed), so materialising never follows and never creates a symbolic link.
- Names that clash (``x`` and ``x/y``: ``x`` both a file and a folder) are refused in one line before
  anything is written.
- The bytes written are bounded: the sizes the trace declares for the files written in full are summed
  and checked against :data:`MATERIALISE_LIMIT` (``$VKCAP_MATERIALISE_LIMIT`` overrides it) and against
  the free space of the folder's file system before the first byte is written. Inputs a replay never
  reads are written as a header and a hole, which take no space, and are not counted.
- Running out of space anyway (``ENOSPC``, ``EDQUOT``) is one line naming the folder's file system
  (``TMPDIR``), exit 1; the caller removes the folder.
"""
from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from capture.embed import safe_join
from vkcore.errors import TraceError, UsageError, VkcapError

if TYPE_CHECKING:
    from capture.trace import Trace

#: The most bytes a replay writes into its temporary folder for a trace's embedded files (shaders,
#: includes, inputs read when the session is built, VGF files): 4 GiB, ``$VKCAP_MATERIALISE_LIMIT`` (bytes)
#: to change it. Inputs whose initial state the trace restores cost nothing (see the module docstring).
MATERIALISE_LIMIT = 4 << 30
LIMIT_VARIABLE = "VKCAP_MATERIALISE_LIMIT"


class OutOfSpace(VkcapError):
    """The temporary folder's file system is full, or refuses a file (too large for it): a problem of this
    machine, not of the input (exit 1)."""


def materialise_limit() -> int:
    """:data:`MATERIALISE_LIMIT`, or ``$VKCAP_MATERIALISE_LIMIT`` when set (a whole number of bytes)."""
    text = os.environ.get(LIMIT_VARIABLE)
    if text is None or text == "":
        return MATERIALISE_LIMIT
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise UsageError(f"{LIMIT_VARIABLE}={text!r}: expected a whole number of bytes (0 or more)")
    return value


def check_name_clashes(names: Iterable[str], *, file: Path | None = None) -> None:
    """Refuse two names of which one is a folder of the other (``x`` and ``x/y``): both cannot be written."""
    ordered = sorted(names)
    taken = set(ordered)
    for name in ordered:
        parts = name.split("/")
        for n in range(1, len(parts)):
            folder = "/".join(parts[:n])
            if folder in taken:
                raise TraceError(f"embedded files '{folder}' and '{name}' clash: '{folder}' would be both a file and "
                                 "a folder", file=file)


def fresh_name(wanted: str, taken: Iterable[str]) -> str:
    """``wanted``, or ``_wanted``, ``__wanted``...: the first that is neither a name in ``taken`` nor a
    folder of one (vkcap's own files beside a trace's, whatever the trace names its files)."""
    used = set()
    for name in taken:
        used.add(name.split("/", 1)[0])
    name = wanted
    while name in used:
        name = "_" + name
    return name


def check_space(trace: Trace, folder: Path, planned: int) -> None:
    """Refuse ``planned`` bytes over the limit or over the free space of ``folder``'s file system."""
    limit = materialise_limit()
    if planned > limit:
        raise TraceError(f"its embedded files would take {planned} bytes in the temporary folder, more than the "
                         f"{limit} allowed (set {LIMIT_VARIABLE} to allow more)", file=trace.path)
    try:
        st = os.statvfs(folder)
    except OSError:
        return  # no figure to check against: writing will tell
    free = st.f_bavail * st.f_frsize
    if planned > free:
        raise OutOfSpace(f"its embedded files need {planned} bytes, and the temporary folder's file system "
                         f"({tempfile.gettempdir()}, TMPDIR) has {free} bytes free", file=trace.path)


def out_of_space(trace: Trace, exc: OSError) -> OutOfSpace:
    return OutOfSpace(f"no space left in the temporary folder ({tempfile.gettempdir()}, TMPDIR) while writing "
                      f"its embedded files: {exc.strerror}", file=trace.path)


def make_parents(folder: Path, target: Path) -> None:
    """Create the folders between ``folder`` and ``target`` (both resolved, ``target`` inside), refusing
    any existing entry on the way that is not a real folder (a file, a link)."""
    for parent in reversed(target.relative_to(folder).parents[:-1]):
        path = folder / parent
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            if path.is_symlink() or not path.is_dir():
                raise TraceError(f"embedded file '{target.relative_to(folder).as_posix()}': "
                                 f"'{parent.as_posix()}' is already a file") from None


def create_file(folder: Path, name: str) -> tuple[Path, int]:
    """A new file ``name`` inside ``folder``: ``(path, fd)`` open for writing. Never follows or replaces an
    existing entry (``O_EXCL | O_NOFOLLOW``)."""
    root = folder.resolve()
    target = safe_join(root, name)
    make_parents(root, target)
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        raise TraceError(f"embedded file '{name}' is given twice or clashes with a folder") from None
    except IsADirectoryError:
        raise TraceError(f"embedded file '{name}' clashes with a folder") from None
    return target, fd


def write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_new_file(trace: Trace, folder: Path, name: str, data: bytes | memoryview) -> Path:
    """Write ``data`` as new file ``name`` inside ``folder`` (see :func:`create_file`); running out of
    space is :class:`OutOfSpace`."""
    target, fd = create_file(folder, name)
    try:
        write_all(fd, data)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise out_of_space(trace, exc) from None
        raise
    finally:
        os.close(fd)
    return target


def write_placeholder(trace: Trace, name: str, target: Path) -> None:
    """Write embedded .npy file ``name`` as its header followed by a hole the size of its payload.

    Validation reads only the header and the file's length; the payload, which a replay would
    decompress and write only for it to be overwritten by checkpoint -1, stays in the trace. Large
    inputs (weights) therefore cost a replay nothing before its first frame.
    """
    _, key, size = trace.files[name]
    header = trace.npy_headers[name]
    try:
        payload = trace.reader.blob_info(key).raw_len
    except KeyError:
        raise TraceError(f"embedded file '{name}': its payload blob is missing", file=trace.path) from None
    if size != len(header) + payload:
        raise TraceError(f"embedded file '{name}' is {len(header) + payload} bytes, the trace says {size}", file=trace.path)
    with open(target, "wb") as f:
        f.write(header)
        f.truncate(size)


def materialise(trace: Trace, folder: Path, placeholders: set[str]) -> None:
    """Write every embedded file of ``trace`` into ``folder``; those in ``placeholders`` (inputs a replay
    never reads) as their .npy header and a hole (:func:`write_placeholder`). See the module docstring for
    what is guaranteed."""
    check_name_clashes(trace.files, file=trace.path)
    folder.mkdir(parents=True, exist_ok=True)
    hollow = {name for name in trace.files if name in placeholders and name in trace.npy_headers}
    planned = sum(max(0, size) for name, (_, _, size) in trace.files.items() if name not in hollow)
    planned += sum(len(trace.npy_headers[name]) for name in hollow)
    check_space(trace, folder, planned)
    for name in sorted(trace.files):
        try:
            if name in hollow:
                target, fd = create_file(folder, name)
                os.close(fd)
                write_placeholder(trace, name, target)
            else:
                write_new_file(trace, folder, name, trace.file_bytes(name))
        except TraceError as exc:
            if exc.file is None:
                raise TraceError(exc.message, file=trace.path, place=exc.place) from None
            raise
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise out_of_space(trace, exc) from None
            raise OutOfSpace(f"cannot write its embedded file '{name}' into the temporary folder "
                             f"({tempfile.gettempdir()}, TMPDIR): {exc.strerror or exc}", file=trace.path) from None
