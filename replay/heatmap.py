"""``--heatmap DIR``: a PNG of |recorded - live| for each diverged resource of two or more dimensions.

The error is reduced to a 2-d map over the last two spatial dimensions (for NHWC images and tensors:
H x W, taking the largest error over batch and channels), scaled linearly from 0 to the largest error,
coloured with a perceptually ordered map, and drawn with a colour bar labelled with that range.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np

from capture.embed import check_trace_name
from vkcore.safe_text import shown

from .compare import DTYPES, _widen

# A perceptually ordered colour ramp (dark blue -> teal -> yellow), as control points for interpolation.
RAMP = np.array(
    [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]], dtype=np.float64
)
BAR_WIDTH = 24
MIN_SIDE = 128  # small maps are scaled up so a person can see them


def error_map(recorded: bytes | memoryview, live: bytes, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """|recorded - live| as float64, reduced to 2-d (rows, columns)."""
    storage = DTYPES[dtype][0]
    a = _widen(np.frombuffer(recorded, storage), dtype).astype(np.float64)
    b = _widen(np.frombuffer(live, storage), dtype).astype(np.float64)
    count = int(np.prod(shape))
    err = np.abs(a[:count] - b[:count]).reshape(shape)
    err = np.where(np.isnan(a[:count]) ^ np.isnan(b[:count]), np.inf, err.reshape(-1)).reshape(shape)
    if err.ndim == 2:
        return err
    if err.ndim == 4:  # NHWC
        return np.nanmax(err, axis=(0, 3))
    if err.ndim == 3:  # HWC
        return np.nanmax(err, axis=2)
    return np.nanmax(err.reshape(-1, shape[-2], shape[-1]), axis=0)


def value_map(data: bytes | memoryview, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """The values reduced to 2-d (rows, columns) as float64: the mean over batch and channels."""
    storage = DTYPES[dtype][0]
    values = _widen(np.frombuffer(data, storage), dtype).astype(np.float64)[: int(np.prod(shape))].reshape(shape)
    with np.errstate(invalid="ignore"):
        if values.ndim == 4:  # NHWC
            return np.nanmean(values, axis=(0, 3))
        if values.ndim == 3:  # HWC
            return np.nanmean(values, axis=2)
        return values if values.ndim == 2 else np.nanmean(values.reshape(-1, shape[-2], shape[-1]), axis=0)


def write_value_maps(paths: tuple[Path, Path], maps: tuple[np.ndarray, np.ndarray]) -> tuple[Path, Path]:
    """Both sides' values as PNGs on one scale (their common finite min..max), at the heatmaps' size."""
    from PIL import Image

    finite = np.concatenate([m[np.isfinite(m)] for m in maps])
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    span = high - low if high > low else 1.0
    for path, values in zip(paths, maps):
        image = Image.fromarray(colourise((values - low) / span), "RGB")
        factor = max(1, MIN_SIDE // max(1, min(values.shape)))
        if factor > 1:
            image = image.resize((values.shape[1] * factor, values.shape[0] * factor), Image.Resampling.NEAREST)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        image.save(tmp, format="PNG")
        tmp.replace(path)
    return paths


def colourise(values: np.ndarray) -> np.ndarray:
    """RGB uint8 image of ``values`` in [0, 1] (inf and nan shown at the top of the scale)."""
    v = np.clip(np.nan_to_num(values, nan=1.0, posinf=1.0), 0.0, 1.0)
    position = v * (len(RAMP) - 1)
    low = np.floor(position).astype(int).clip(0, len(RAMP) - 2)
    frac = (position - low)[..., None]
    return (RAMP[low] * (1 - frac) + RAMP[low + 1] * frac).astype(np.uint8)


def write_heatmap(path: Path, err: np.ndarray, title: str) -> Path:
    """Draw ``err`` with a colour bar and its range; write ``path`` (PNG) atomically."""
    from PIL import Image, ImageDraw

    finite = err[np.isfinite(err)]
    top = float(finite.max()) if finite.size else 1.0
    scaled = err / top if top > 0 else np.zeros_like(err)
    rgb = colourise(scaled)
    image = Image.fromarray(rgb, "RGB")
    factor = max(1, MIN_SIDE // max(1, min(err.shape)))
    if factor > 1:
        image = image.resize((err.shape[1] * factor, err.shape[0] * factor), Image.Resampling.NEAREST)
    width, height = image.size
    canvas = Image.new("RGB", (width + BAR_WIDTH + 110, max(height, 160) + 30), (255, 255, 255))
    canvas.paste(image, (0, 30))
    ramp = colourise(np.linspace(1, 0, max(height, 160))[:, None].repeat(BAR_WIDTH, axis=1))
    canvas.paste(Image.fromarray(ramp, "RGB"), (width + 10, 30))
    draw = ImageDraw.Draw(canvas)
    draw.text((2, 4), shown(title), fill=(0, 0, 0))  # the title holds a uid: no control or bidi character drawn
    draw.text((width + BAR_WIDTH + 14, 30), f"{top:.3g}", fill=(0, 0, 0))
    draw.text((width + BAR_WIDTH + 14, 30 + max(height, 160) - 12), "0", fill=(0, 0, 0))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    canvas.save(tmp, format="PNG")
    tmp.replace(path)
    return path


def heatmap_name(seq: int, uid: str) -> str:
    """A safe file name for a resource's heatmap (uids are free text): see
    :func:`vkcore.output_folders.unique_stem` (two uids never share one)."""
    from vkcore.output_folders import unique_stem

    return check_trace_name(f"frame{seq:05d}-{unique_stem(uid)}.png")
