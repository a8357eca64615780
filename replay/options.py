"""What a replay is asked to do: the options every replay, bisection probe and isolated child share."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .tolerances import TolerancePolicy, policy_from_dict, policy_to_dict


@dataclass(frozen=True)
class ReplayOptions:
    trace: Path
    first: int | None = None  # first frame (seq) to compare; None: from the first recorded frame
    last: int | None = None  # last frame to compare (inclusive); None: to the last recorded frame
    device: str | None = None
    icd: Path | None = None
    emulation: str = "auto"
    replace_shaders: tuple[tuple[str, Path], ...] = ()
    dtypes: tuple[tuple[str, str], ...] = ()
    tolerances: TolerancePolicy = field(default_factory=TolerancePolicy)
    frame_timeout_s: float | None = None
    dispatch_level: bool = True  # compare dispatch-level snapshots when the trace has them
    shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()  # uid -> shape, for raw buffers
    heatmap_dir: Path | None = None
    value_maps: bool = False  # with heatmaps, both sides' values too (for --html)
    progress_file: Path | None = None  # an isolated child names each frame here as it starts
    stop_at_first_divergence: bool = False

    def to_dict(self) -> dict[str, Any]:
        """These options as JSON-able data, for a process that replays for this one
        (:mod:`replay.worker_protocol`); :meth:`from_dict` reads them back equal."""
        path = lambda p: None if p is None else str(p)  # noqa: E731
        return {"trace": str(self.trace), "first": self.first, "last": self.last, "device": self.device,
                "icd": path(self.icd), "emulation": self.emulation,
                "replace_shaders": [[uid, str(p)] for uid, p in self.replace_shaders],
                "dtypes": [list(pair) for pair in self.dtypes], "tolerances": policy_to_dict(self.tolerances),
                "frame_timeout_s": self.frame_timeout_s, "dispatch_level": self.dispatch_level,
                "shapes": [[uid, list(shape)] for uid, shape in self.shapes], "heatmap_dir": path(self.heatmap_dir),
                "value_maps": self.value_maps, "progress_file": path(self.progress_file),
                "stop_at_first_divergence": self.stop_at_first_divergence}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ReplayOptions":
        """The options :meth:`to_dict` wrote."""
        path = lambda p: None if p is None else Path(p)  # noqa: E731
        return cls(trace=Path(data["trace"]), first=data["first"], last=data["last"], device=data["device"],
                   icd=path(data["icd"]), emulation=data["emulation"],
                   replace_shaders=tuple((uid, Path(p)) for uid, p in data["replace_shaders"]),
                   dtypes=tuple((uid, dtype) for uid, dtype in data["dtypes"]),
                   tolerances=policy_from_dict(data["tolerances"]), frame_timeout_s=data["frame_timeout_s"],
                   dispatch_level=data["dispatch_level"],
                   shapes=tuple((uid, tuple(shape)) for uid, shape in data["shapes"]),
                   heatmap_dir=path(data["heatmap_dir"]), value_maps=data["value_maps"],
                   progress_file=path(data["progress_file"]),
                   stop_at_first_divergence=data["stop_at_first_divergence"])
