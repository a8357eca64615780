"""What a command that writes a trace (``record -o``, ``trim -o``) checks at its target first.

- :func:`check_replaceable` refuses an existing file that is not a vkcap trace: a trace is replaced only
  by a trace, never a user's notes.
- :func:`clear_partials` deals with the partial files an interrupted writer left beside the target (a
  :class:`~capture.writer.TraceWriter` writes ``.NAME.PID.RANDOM.partial`` and renames it onto
  ``NAME`` once complete; ``kill -9`` leaves the partial file). The policy: a partial file is removed
  only when it is provably an abandoned trim of this very target: its name is the writer's pattern for
  this target, it is a vkcap trace whose first record is a header saying it was trimmed (a trim is
  re-run from its source at no loss), and the process that wrote it (the PID in its name) is gone. Any
  other file of that pattern is left where it is and named in one warning, for the user to delete: the
  partial file of a killed recording holds the frames it completed, which ``info``, ``export`` and
  ``replay`` read (README, "kill -9 of a recording"); a PID that runs may be a writer at work (or a PID
  reused); a file that does not read as a trim's may be anything. Nothing else is ever touched.
"""
from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from capture.format import kinds, records
from vkcore.errors import UsageError
from vkcore.output_folders import process_runs

from .format.records import MAGIC

log = logging.getLogger("vkcap")


def is_abandoned_trim(path: str | Path) -> bool:
    """Whether the file at ``path`` is a vkcap trace whose first record is a ``header`` META holding
    ``trimmed_from`` (what :mod:`replay.trim` writes first). Reads at most the file header and one
    record of up to 1 MiB; False on any doubt."""
    try:
        with open(path, "rb") as f:
            head = f.read(records.FILE_HEADER.size + records.RECORD_HEADER.size)
            records.unpack_file_header(head)
            record = records.unpack_record_header(head[records.FILE_HEADER.size:])
            if record.rtype != records.RecordType.META or record.payload_len > (1 << 20):
                return False
            payload = f.read(record.payload_len)
        if len(payload) != record.payload_len or records.checksum(payload) != record.payload_checksum:
            return False
        meta = records.unpack_meta(payload)
    except (OSError, ValueError):
        return False
    return meta.get("kind") == kinds.HEADER and "trimmed_from" in meta


def is_trace_file(path: str | Path) -> bool:
    """Whether the file at ``path`` starts with the trace magic (docs/trace-format.md §3). An
    :class:`OSError` when it cannot be read."""
    with open(path, "rb") as f:
        return f.read(len(MAGIC)) == MAGIC


def check_replaceable(path: str | Path, *, place: str = "-o") -> None:
    """Refuse (one line naming ``path`` and ``place``, exit 2) an existing ``path`` that is not a vkcap
    trace (it does not start with the trace magic), or that cannot be read to tell."""
    try:
        trace = is_trace_file(path)
    except OSError as exc:
        raise UsageError(f"cannot read it to check that it is a trace ({exc.strerror or exc})", file=path,
                         place=place) from None
    if not trace:
        raise UsageError("exists and is not a vkcap trace: refusing to replace it (delete it, or choose another "
                         "name)", file=path, place=place)


def partials_of(target: str | Path) -> list[tuple[Path, int]]:
    """The partial files a :class:`~capture.writer.TraceWriter` for ``target`` may have left in its
    folder, with the PID each name carries, sorted by name; [] when the folder cannot be listed."""
    folder, name = os.path.split(os.path.abspath(os.fspath(target)))
    pattern = re.compile(rf"\.{re.escape(name)}\.([0-9]{{1,10}})\.[0-9a-f]{{12}}\.partial")
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    found = []
    for entry in names:
        match = pattern.fullmatch(entry)
        if match:
            found.append((Path(folder) / entry, int(match.group(1))))
    return found


def clear_partials(target: str | Path) -> list[Path]:
    """Remove the partial files of ``target`` that are provably abandoned trims (see the module
    docstring) and warn, one line each, of the others; returns those left (named in the warnings)."""
    left = []
    for path, pid in partials_of(target):
        ours = os.path.isfile(path) and not os.path.islink(path) and is_abandoned_trim(path)
        if ours and not process_runs(pid):
            try:
                os.unlink(path)
                log.info("removed %s: the partial trace of an interrupted command (process %d) writing %s",
                         path, pid, target)
                continue
            except OSError:
                pass
        left.append(path)
        log.warning("a partial file from an interrupted command: %s; delete it (unless process %d still writes it)",
                    path, pid)
    return left
