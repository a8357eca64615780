"""A fleet node's cache of traces: ``<root>/<content hash>/<name>``, fetched once per node.

Guarantees:

- :func:`cached_trace` returns a complete file (written atomically) and marks it used (its folder's
  modification time), whether it fetched it now or found it;
- after a fetch, :func:`prune` removes whole entries, least recently used first, until the cache holds
  at most ``limit_bytes``; it never removes an entry used within ``keep_recent_s`` (another actor of the
  node may be replaying it: a suite's traces are all used within minutes of each other), so the cache
  may stay above the limit while a suite bigger than it runs;
- removing is by rename into a ``.trash-*`` folder first, then deletion, so no reader ever sees an entry
  half-deleted, and a failure to remove leaves the cache as it was (pruning is best effort: an error is
  never the replay's).
"""
from __future__ import annotations

import os
import secrets
import shutil
import time
from pathlib import Path
from typing import Callable

from vkcore.outputs import write_atomic

#: the cache's size limit when a run does not give one
DEFAULT_LIMIT_BYTES = 20 << 30
#: entries used within this many seconds are never pruned
KEEP_RECENT_S = 600.0


def cached_trace(root: Path, digest: str, name: str, fetch: Callable[[], bytes], *, limit_bytes: int = DEFAULT_LIMIT_BYTES,
                 keep_recent_s: float = KEEP_RECENT_S) -> Path:
    """The path of trace ``digest`` in the cache at ``root``, fetched with ``fetch`` (its bytes) when the
    cache lacks it, after which the cache is pruned to ``limit_bytes``."""
    entry = root / digest
    path = entry / name
    try:
        os.utime(entry)  # first: a prune running beside this one now spares it
    except FileNotFoundError:
        pass
    if path.is_file():
        return path
    write_atomic(path, [fetch()])
    prune(root, limit_bytes, keep_recent_s)
    return path


def prune(root: Path, limit_bytes: int, keep_recent_s: float = KEEP_RECENT_S) -> list[str]:
    """Remove the least recently used entries of the cache at ``root`` until it holds at most
    ``limit_bytes``, sparing those used within ``keep_recent_s``; the digests removed, oldest first."""
    entries = []
    try:
        for entry in root.iterdir():
            if entry.is_dir() and not entry.name.startswith("."):
                size = sum(f.stat().st_size for f in entry.iterdir() if f.is_file())
                entries.append((entry.stat().st_mtime, size, entry))
    except OSError:
        return []
    total = sum(size for _, size, _ in entries)
    now = time.time()
    removed: list[str] = []
    for used, size, entry in sorted(entries, key=lambda e: e[0]):
        if total <= limit_bytes:
            break
        if now - used < keep_recent_s:
            continue
        trash = root / f".trash-{secrets.token_hex(4)}"
        try:
            entry.rename(trash)
        except OSError:
            continue  # another actor pruned or used it first
        shutil.rmtree(trash, ignore_errors=True)
        total -= size
        removed.append(entry.name)
    return removed
