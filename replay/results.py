"""What a comparison found, as plain data: the statuses, the element types snapshots are read as, the
tolerance, one resource's :class:`Comparison` and one frame's :class:`FrameResult`.

No numpy here: a process that only reads a comparison back (the parent of an isolated bisection,
which gets its probes' answers as JSON) imports nothing heavy. :mod:`replay.compare` computes them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

IDENTICAL = "identical"
WITHIN = "within tolerance"
DIVERGED = "DIVERGED"

# Element types a snapshot can be read as: name -> (numpy storage dtype, is float, bits view dtype)
DTYPES: dict[str, tuple[str, bool]] = {
    "bytes": ("u1", False),
    "int8": ("i1", False),
    "uint8": ("u1", False),
    "int16": ("<i2", False),
    "uint16": ("<u2", False),
    "int32": ("<i4", False),
    "uint32": ("<u4", False),
    "int64": ("<i8", False),
    "uint64": ("<u8", False),
    "float16": ("<f2", True),
    "bfloat16": ("<u2", True),  # stored as its 16 bits; widened to float32 for arithmetic
    "float8e4m3": ("u1", True),  # OCP FP8 E4M3 (no Inf; S.1111.111 is NaN), decoded through a table
    "float8e5m2": ("u1", True),  # OCP FP8 E5M2 (IEEE-like: Inf and NaN at exponent 31)
    "float32": ("<f4", True),
    "float64": ("<f8", True),
    "bool": ("u1", False),
}


def itemsize(dtype: str) -> int:
    """Bytes per element of ``dtype`` (a key of :data:`DTYPES`), read from its storage code (``<f4``: 4)
    without numpy."""
    return int(DTYPES[dtype][0].lstrip("<>|=")[1:])


# Non-finite floats in reports: JSON has no spelling for them, so they are these strings, everywhere.
NON_FINITE: dict[str, float] = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float (in dicts, lists and tuples too, numpy scalars included)
    replaced by its :data:`NON_FINITE` string: what :func:`json.dumps` then writes is strict JSON."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def from_json_number(value: Any) -> Any:
    """The inverse of :func:`json_safe` for one number: a :data:`NON_FINITE` string back to its float."""
    return NON_FINITE[value] if isinstance(value, str) and value in NON_FINITE else value


@dataclass(frozen=True)
class Tolerance:
    atol: float = 0.0
    rtol: float = 0.0
    ulp: int = 0

    @property
    def exact(self) -> bool:
        return self.atol == 0 and self.rtol == 0 and self.ulp == 0


@dataclass
class Comparison:
    """Statistics of one resource compared in one frame."""

    uid: str
    dtype: str
    status: str
    count: int
    differing: int = 0  # elements that differ at all (any bit)
    beyond_tolerance: int = 0  # elements outside the tolerance in force: what decides the verdict
    max_abs: float = 0.0
    max_rel: float = 0.0
    max_ulp: int = 0
    nan_mismatches: int = 0
    inf_mismatches: int = 0
    first_index: tuple[int, ...] | None = None
    first_recorded: Any = None
    first_live: Any = None
    beyond_max_abs: float = 0.0  # the statistics of the elements beyond the tolerance
    beyond_max_rel: float = 0.0
    beyond_max_ulp: int = 0
    size_mismatch: str = ""
    statistics: dict[str, Any] = field(default_factory=dict)  # see replay.compare.compare
    top: list[dict[str, Any]] = field(default_factory=list)  # the first offending elements: index, recorded, live
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def share(self) -> float:
        return self.differing / self.count if self.count else 0.0

    @property
    def beyond_share(self) -> float:
        return self.beyond_tolerance / self.count if self.count else 0.0

    @property
    def diverged(self) -> bool:
        return self.status == DIVERGED

    def as_dict(self) -> dict[str, Any]:
        """Plain, strictly JSON-serialisable data: every non-finite float (``max_rel`` when a recorded
        value is 0, ``first_recorded`` or ``first_live`` when NaN or Inf, ...) is ``"inf"``, ``"-inf"``
        or ``"nan"`` (:func:`json_safe`), the same for every field; :func:`from_json_number` reverses it."""
        d = {k: v for k, v in self.__dict__.items() if k != "extras"}
        d.update(self.extras)
        d["share"] = self.share
        d["beyond_share"] = self.beyond_share
        d["first_index"] = list(self.first_index) if self.first_index is not None else None
        return json_safe(d)


def identical(uid: str, nbytes: int, dtype: str = "bytes") -> Comparison:
    """The comparison of two equal snapshots of ``nbytes`` bytes read as ``dtype``."""
    return Comparison(uid, dtype, IDENTICAL, nbytes // itemsize(dtype))


@dataclass
class FrameResult:
    seq: int
    frame_id: int
    comparisons: list[Comparison]
    dispatches: list[tuple[int, Comparison]] = field(default_factory=list)  # (command index, comparison)

    @property
    def diverged(self) -> bool:
        return any(c.diverged for c in self.comparisons) or any(c.diverged for _, c in self.dispatches)
