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
    "float32": ("<f4", True),
    "float64": ("<f8", True),
    "bool": ("u1", False),
}


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
    differing: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    max_ulp: int = 0
    nan_mismatches: int = 0
    inf_mismatches: int = 0
    first_index: tuple[int, ...] | None = None
    first_recorded: Any = None
    first_live: Any = None
    size_mismatch: str = ""
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def share(self) -> float:
        return self.differing / self.count if self.count else 0.0

    @property
    def diverged(self) -> bool:
        return self.status == DIVERGED

    def as_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "extras"}
        d.update(self.extras)
        d["share"] = self.share
        d["first_index"] = list(self.first_index) if self.first_index is not None else None
        for k in ("first_recorded", "first_live"):
            v = d[k]
            d[k] = v.item() if hasattr(v, "item") else v
            if isinstance(d[k], float) and not math.isfinite(d[k]):
                d[k] = repr(d[k])
        return d


@dataclass
class FrameResult:
    seq: int
    frame_id: int
    comparisons: list[Comparison]
    dispatches: list[tuple[int, Comparison]] = field(default_factory=list)  # (command index, comparison)

    @property
    def diverged(self) -> bool:
        return any(c.diverged for c in self.comparisons) or any(c.diverged for _, c in self.dispatches)
