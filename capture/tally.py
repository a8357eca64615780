"""The snapshot figures of a trace, as ``vkcap info`` shows them and ``vkcap record`` sums them up.

One definition, fed either by a trace read back (``info``) or by the recorder as it writes its frames
(``record``, which then need not read the trace back: that took 5 ms for 100 frames and 49 ms for
1000). Snapshot figures count every snapshot the frames took: at each frame boundary and, with
``--dispatch-level``, after each dispatch (or graph segment).

Per resource: ``snapshots`` (of which ``dispatch_snapshots`` after dispatches), ``raw_bytes`` (their
size uncompressed), ``unique`` (distinct contents among them), ``deltas`` (how many of those are stored
as temporal deltas of earlier blobs), ``stored_bytes`` (what the blobs of those distinct contents occupy
in the file) and ``ratio`` = raw_bytes / stored_bytes. A blob shared by several resources (or with the
initial state, or an embedded input file) is counted in full for each resource that has it, so the rows
can add up to more than the totals.

Totals: ``snapshot_raw_bytes`` ("captured") = the sum of the rows' raw_bytes; ``snapshot_stored_bytes``
("stored") = the distinct blobs of all snapshots, each counted once; ``ratio`` = captured / stored;
``dedup_saved_bytes`` = captured - the raw size of those distinct blobs; ``snapshot_deltas`` = how many
of them are deltas.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

from .format.records import Codec, key_bytes


def ratio(raw: int, stored: int) -> float | None:
    """raw / stored, the one ratio ``info`` and ``record`` show; None when nothing is stored."""
    return raw / stored if stored else None


class SnapshotTally:
    """Snapshots counted one at a time, each with what its blob is in the file. With ``per_resource``
    False, only the totals are kept: memory then grows by one 16-byte key per distinct content (a
    recorder's tally of a long recording), not by a row entry per resource and content."""

    def __init__(self, *, per_resource: bool = True) -> None:
        self.rows: dict[str, dict[str, Any]] | None = {} if per_resource else None
        self._seen: dict[str, set[bytes]] = {}  # uid -> its distinct keys (per_resource only)
        self._distinct: set[bytes] = set()  # the distinct keys of all snapshots
        self._raw = self._stored = self._unique_raw = self._deltas = 0

    def add(self, uid: str, key: str | bytes, blob: Any, *, after_dispatch: bool = False) -> None:
        """One snapshot of ``uid``, whose content key is ``key`` (hex or 16 bytes) and whose blob
        ``blob`` is a :class:`capture.format.records.BlobInfo`."""
        k = key_bytes(key)
        delta = blob.codec == Codec.DELTA
        self._raw += blob.raw_len
        if k not in self._distinct:
            self._distinct.add(k)
            self._stored += blob.stored_len
            self._unique_raw += blob.raw_len
            self._deltas += delta
        if self.rows is None:
            return
        row = self.rows.get(uid)
        if row is None:
            row = self.rows[uid] = {"snapshots": 0, "dispatch_snapshots": 0, "raw_bytes": 0, "unique": 0,
                                    "deltas": 0, "stored_bytes": 0, "ratio": None}
        row["snapshots"] += 1
        row["dispatch_snapshots"] += after_dispatch
        row["raw_bytes"] += blob.raw_len
        seen = self._seen.setdefault(uid, set())
        if k not in seen:
            seen.add(k)
            row["unique"] += 1
            row["deltas"] += delta
            row["stored_bytes"] += blob.stored_len

    def add_frame(self, snapshots: dict[str, str], after_dispatches: Iterable[tuple[str, str]],
                  blob_info: Callable[[str], Any]) -> None:
        """A frame's snapshots: ``snapshots`` (uid -> key) at its boundary and ``after_dispatches``
        ((uid, key) pairs), each blob as ``blob_info(key)`` describes it."""
        for uid, key in snapshots.items():
            self.add(uid, key, blob_info(key))
        for uid, key in after_dispatches:
            self.add(uid, key, blob_info(key), after_dispatch=True)

    def resources(self) -> dict[str, dict[str, Any]]:
        """The per-resource rows, ratios filled in (a tally made with ``per_resource``)."""
        assert self.rows is not None
        for row in self.rows.values():
            row["ratio"] = ratio(row["raw_bytes"], row["stored_bytes"])
        return self.rows

    def totals(self) -> dict[str, Any]:
        return {
            "snapshot_raw_bytes": self._raw,
            "snapshot_stored_bytes": self._stored,
            "ratio": ratio(self._raw, self._stored),
            "dedup_saved_bytes": self._raw - self._unique_raw,
            "snapshot_deltas": self._deltas,
        }
