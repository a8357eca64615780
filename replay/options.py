"""What a replay is asked to do: the options every replay, bisection probe and isolated child share."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .tolerances import TolerancePolicy


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
