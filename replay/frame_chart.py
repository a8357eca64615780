"""The per-frame chart of an HTML page: each frame's largest ULP distance (log scale) over the share of
its values beyond the tolerance, as geometry an inline SVG template draws (no script, no network).

Every frame is one column linking to its section (``#frame-N``), coloured by its state, with a tooltip
(``<title>``) that states its numbers; both panels have numbered axes: ULP in decades (0, 1, 10, 100,
1k...), the share in percent on a linear scale up to a round number above the largest share; the frame
numbers below, at a round step that keeps at most :data:`MAX_X_LABELS` labels. A crash adds one last
column. The chart is :data:`WIDTH` pixels wide whatever the number of frames (columns get thinner; at most
:data:`MAX_COLUMN` wide).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

WIDTH = 960
LEFT, RIGHT = 72, 16  # room for the y labels; the last x label's half
ULP_TOP, ULP_HEIGHT = 28, 130  # the ULP panel: its top (under its title) and height
SHARE_TOP, SHARE_HEIGHT = ULP_TOP + ULP_HEIGHT + 36, 80
X_LABELS_Y = SHARE_TOP + SHARE_HEIGHT + 16
HEIGHT = X_LABELS_Y + 24
MAX_X_LABELS = 16
MAX_COLUMN = 40  # pixels: a few frames get bars of a readable width, from the left, not the whole width
SI = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


@dataclass(frozen=True)
class FramePoint:
    """One frame's numbers: its position, state (identical, within, diverged, crashed), largest ULP
    distance, and values beyond the tolerance out of those compared."""

    seq: int
    state: str
    max_ulp: int
    beyond: int
    count: int

    @property
    def share(self) -> float:
        return self.beyond / self.count if self.count else 0.0


def decade_label(power: int) -> str:
    """``10**power`` as an axis label: 1, 10, 100, 1k, 10k, ... 1G."""
    value = 10 ** power
    for scale, suffix in SI:
        if value >= scale:
            return f"{value / scale:g}{suffix}"
    return str(value)


def round_step(span: float, most: int) -> float:
    """The smallest step of 1, 2 or 5 times a power of ten that cuts ``span`` into at most ``most`` parts."""
    if span <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(span / most))
    return next(m * power for m in (1, 2, 5, 10) if span / (m * power) <= most)


def percent(value: float) -> str:
    """A share as a label: 50%, 2.5%, 0.05%: as many decimals as the value needs, at most 4."""
    text = f"{value * 100:.4f}".rstrip("0").rstrip(".")
    return f"{text}%"


def ulp_height(ulp: int, decades: int) -> float:
    """A bar's height in the ULP panel: 0 for 0 ULP, one step for 1 ULP, a step more per decade."""
    if ulp <= 0:
        return 0.0
    return ULP_HEIGHT * (1 + math.log10(ulp)) / (decades + 1)


def chart(points: Iterable[FramePoint]) -> dict[str, Any]:
    """The SVG's geometry (see the module docstring): ``columns`` with their bars, ``ulp_ticks``,
    ``share_ticks`` and ``x_ticks`` (position and label), panel positions, width and height."""
    points = list(points)
    largest = max((p.max_ulp for p in points), default=0)
    decades = max(1, math.ceil(math.log10(largest)) if largest > 1 else 1)
    label_every = max(1, math.ceil((decades + 1) / 8))
    top_share = max((p.share for p in points), default=0.0)
    share_step = round_step(top_share, 4) if top_share > 0 else 0.25
    share_top = share_step * max(1, math.ceil(top_share / share_step - 1e-9)) if top_share > 0 else 1.0
    share_top = min(share_top, 1.0) if top_share <= 1.0 else share_top
    plot = WIDTH - LEFT - RIGHT
    column = min(MAX_COLUMN, plot / max(1, len(points)))
    bar = max(1.0, column * 0.8 if column >= 3 else column)
    columns = []
    for i, p in enumerate(points):
        x = LEFT + i * column
        ulp = ulp_height(p.max_ulp, decades)
        share = SHARE_HEIGHT * min(1.0, p.share / share_top) if p.share > 0 else 0.0
        share = max(share, 1.5) if p.beyond else share  # a value beyond the tolerance is never invisible
        columns.append({
            "seq": p.seq, "state": p.state, "x": round(x, 2), "width": round(column, 2), "bar_x": round(x + (column - bar) / 2, 2),
            "bar_width": round(bar, 2), "middle": round(x + column / 2, 2),
            "ulp_y": round(ULP_TOP + ULP_HEIGHT - ulp, 2), "ulp_height": round(ulp, 2),
            "share_y": round(SHARE_TOP + SHARE_HEIGHT - share, 2), "share_height": round(share, 2),
            "tip": (f"frame {p.seq}: crashed" if p.state == "crashed" else
                    f"frame {p.seq}: {p.state}, max {p.max_ulp} ULP, {p.beyond} of {p.count} values beyond the "
                    f"tolerance ({percent(p.share)})"),
        })
    ulp_ticks = [{"y": round(ULP_TOP + ULP_HEIGHT, 2), "label": "0"}]
    ulp_ticks += [{"y": round(ULP_TOP + ULP_HEIGHT - ULP_HEIGHT * (1 + d) / (decades + 1), 2), "label": decade_label(d)}
                  for d in range(0, decades + 1) if d % label_every == 0 or d == decades]
    steps = round(share_top / share_step)
    share_ticks = [{"y": round(SHARE_TOP + SHARE_HEIGHT - SHARE_HEIGHT * k / steps, 2), "label": percent(k * share_step)}
                   for k in range(steps + 1)]
    x_ticks = []
    if points:
        every = int(round_step(points[-1].seq - points[0].seq + 1, MAX_X_LABELS)) if len(points) > MAX_X_LABELS else 1
        x_ticks = [{"x": c["middle"], "label": str(c["seq"])} for c in columns if c["seq"] % max(1, every) == 0]
    return {"width": WIDTH, "height": HEIGHT, "left": LEFT, "plot_width": plot, "columns": columns,
            "ulp_top": ULP_TOP, "ulp_bottom": ULP_TOP + ULP_HEIGHT, "share_top": SHARE_TOP,
            "share_bottom": SHARE_TOP + SHARE_HEIGHT, "x_labels_y": X_LABELS_Y, "ulp_ticks": ulp_ticks,
            "share_ticks": share_ticks, "x_ticks": x_ticks}
