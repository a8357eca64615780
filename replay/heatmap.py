"""Pictures of a diverged resource: ``--heatmap DIR`` files, and the images ``--html`` pages show.

:func:`draw_comparison` is the one entry point (replay, bisect's probes and diff call it). A resource of
two or more dimensions (its shape: ``--shape``, an image's level 0, a tensor's dims) gets:

- ``--heatmap`` file: |recorded - live| reduced to a 2-d map over the last two spatial dimensions (for
  NHWC images and tensors H x W, the largest error over batch and channels), scaled linearly from 0 to
  the largest error, coloured with a perceptually ordered map and drawn with a colour bar and its range,
  the canvas wide enough for every label;
- with ``sides`` (for ``--html``): both sides and their difference as bare images (the page writes the
  labels as text). Colour data (a last dimension of 3 or 4 channels: an RGBA8 image, a ``vec4`` buffer
  with ``--shape HxW``) is drawn in true colour: RGB, floats clipped to [0, 1], integers of more than 8
  bits scaled to their common range, alpha left out (the caption says when it differs), and the
  difference as |recorded - live| per channel, amplified so the largest difference is full intensity.
  Single channels (and anything else) are drawn in false colour on one common scale.

A shape that counts elements of 3 or 4 values (``--shape 32x32`` of a ``vec4`` buffer of 4096 floats)
is read as those elements' channels (:func:`image_shape`), never as the first quarter of the values.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from capture.embed import check_trace_name
from vkcore.output_folders import unique_stem
from vkcore.safe_text import shown

from .compare import DTYPES, _widen

# A perceptually ordered colour ramp (dark blue -> teal -> yellow), as control points for interpolation.
RAMP = np.array(
    [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]], dtype=np.float64
)
BAR_WIDTH = 24
MIN_SIDE = 128  # small maps are scaled up so a person can see them
COLOUR_CHANNELS = (3, 4)  # a last dimension of this many values is a pixel's colour (RGB, RGBA)
LABEL_GAP, TEXT_MARGIN = 6, 4  # pixels around the heatmap file's labels
HEADER = 30  # pixels above the map, for its title


def _values(data: bytes | memoryview, dtype: str, count: int) -> np.ndarray:
    storage = DTYPES[dtype][0]
    return _widen(np.frombuffer(data, storage), dtype)[:count]


def image_shape(shape: tuple[int, ...] | None, values: int) -> tuple[int, ...] | None:
    """The shape to draw ``values`` values in: ``shape`` itself, or ``shape`` plus a channel dimension
    when ``shape`` counts elements of 3 or 4 values each; None when it has fewer than two dimensions
    or fits neither way."""
    if not shape or len(shape) < 2 or any(d <= 0 for d in shape):
        return None
    elements = int(np.prod(shape))
    if elements <= values < 2 * elements:
        return tuple(shape)
    for channels in COLOUR_CHANNELS:
        if elements * channels == values:
            return (*shape, channels)
    return None


def is_colour(shape: tuple[int, ...]) -> bool:
    """Whether data of ``shape`` is pixels of colour: three or more dimensions, the last of 3 or 4."""
    return len(shape) >= 3 and shape[-1] in COLOUR_CHANNELS


def error_map(recorded: bytes | memoryview, live: bytes, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """|recorded - live| as float64, reduced to 2-d (rows, columns)."""
    count = int(np.prod(shape))
    a, b = _values(recorded, dtype, count).astype(np.float64), _values(live, dtype, count).astype(np.float64)
    err = np.where(np.isnan(a) ^ np.isnan(b), np.inf, np.abs(a - b)).reshape(shape)
    if err.ndim == 2:
        return err
    if err.ndim == 4:  # NHWC
        return np.nanmax(err, axis=(0, 3))
    if err.ndim == 3:  # HWC
        return np.nanmax(err, axis=2)
    return np.nanmax(err.reshape(-1, shape[-2], shape[-1]), axis=0)


def value_map(data: bytes | memoryview, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """The values reduced to 2-d (rows, columns) as float64: the mean over batch and channels."""
    values = _values(data, dtype, int(np.prod(shape))).astype(np.float64).reshape(shape)
    with np.errstate(invalid="ignore"):
        if values.ndim == 4:  # NHWC
            return np.nanmean(values, axis=(0, 3))
        if values.ndim == 3:  # HWC
            return np.nanmean(values, axis=2)
        return values if values.ndim == 2 else np.nanmean(values.reshape(-1, shape[-2], shape[-1]), axis=0)


def colour_pixels(data: bytes | memoryview, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """Pixels of colour data as float64 (rows, columns, channels) on a 0..255 scale: 8-bit values as
    they are, floats from [0, 1] (clipped; NaN as 0), wider integers as read (see :func:`to_rgb`). The
    first image of a batch (NHWC)."""
    values = _values(data, dtype, int(np.prod(shape))).reshape(shape)
    if values.ndim > 3:
        values = values.reshape(-1, *shape[-3:])[0]
    values = values.astype(np.float64)
    if DTYPES[dtype][1]:
        return np.clip(np.nan_to_num(values, nan=0.0, posinf=1.0, neginf=0.0), 0.0, 1.0) * 255.0
    return values


def to_rgb(pixels: tuple[np.ndarray, ...], dtype: str) -> tuple[np.ndarray, ...]:
    """Both sides' colour pixels (from :func:`colour_pixels`) as RGB uint8 images: 8-bit data and floats
    as they are; wider integers scaled together from their common min..max."""
    rgb = [p[..., :3] for p in pixels]
    if dtype not in ("uint8", "bytes", "int8") and not DTYPES[dtype][1]:
        low = min(float(p.min()) for p in rgb)
        high = max(float(p.max()) for p in rgb)
        span = high - low if high > low else 1.0
        rgb = [(p - low) * (255.0 / span) for p in rgb]
    return tuple(np.clip(np.rint(p), 0, 255).astype(np.uint8) for p in rgb)


def _enlarged(image: Any, rows: int, columns: int) -> Any:
    # lazy: vkcap diff imports this module, not PIL
    from PIL import Image

    factor = max(1, MIN_SIDE // max(1, min(rows, columns)))
    if factor > 1:
        image = image.resize((columns * factor, rows * factor), Image.Resampling.NEAREST)
    return image


def _save(path: Path, image: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    image.save(tmp, format="PNG")
    tmp.replace(path)
    return path


def write_value_maps(paths: tuple[Path, Path], maps: tuple[np.ndarray, np.ndarray]) -> tuple[Path, Path]:
    """Both sides' values as PNGs on one scale (their common finite min..max), at the heatmaps' size."""
    # lazy: vkcap diff imports this module, not PIL
    from PIL import Image

    finite = np.concatenate([m[np.isfinite(m)] for m in maps])
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    span = high - low if high > low else 1.0
    for path, values in zip(paths, maps):
        _save(path, _enlarged(Image.fromarray(colourise((values - low) / span), "RGB"), *values.shape))
    return paths


def colourise(values: np.ndarray) -> np.ndarray:
    """RGB uint8 image of ``values`` in [0, 1] (inf and nan shown at the top of the scale)."""
    v = np.clip(np.nan_to_num(values, nan=1.0, posinf=1.0), 0.0, 1.0)
    position = v * (len(RAMP) - 1)
    low = np.floor(position).astype(int).clip(0, len(RAMP) - 2)
    frac = (position - low)[..., None]
    return (RAMP[low] * (1 - frac) + RAMP[low + 1] * frac).astype(np.uint8)


def _top(err: np.ndarray) -> float:
    finite = err[np.isfinite(err)]
    return float(finite.max()) if finite.size else 1.0


def _error_image(err: np.ndarray) -> Any:
    # lazy: vkcap diff imports this module, not PIL
    from PIL import Image

    top = _top(err)
    scaled = err / top if top > 0 else np.zeros_like(err)
    return _enlarged(Image.fromarray(colourise(scaled), "RGB"), *err.shape)


def write_heatmap(path: Path, err: np.ndarray, title: str) -> Path:
    """Draw ``err`` with a colour bar and its range, every label inside the canvas (its width measured
    from the labels' text); write ``path`` (PNG) atomically."""
    # lazy: vkcap diff imports this module, not PIL
    from PIL import Image, ImageDraw, ImageFont

    top = _top(err)
    image = _error_image(err)
    width, height = image.size
    bar_height = max(height, 160)
    font = ImageFont.load_default(size=12)
    title = shown(title)  # the title holds a uid: no control or bidi character drawn
    measure = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    label_width = max(measure.textlength(text, font=font) for text in (f"{top:.3g}", "0"))
    title_box = measure.textbbox((0, 0), title, font=font)
    canvas_width = max(int(width + LABEL_GAP + BAR_WIDTH + LABEL_GAP + label_width + TEXT_MARGIN),
                       int(title_box[2] + 2 * TEXT_MARGIN))
    header = max(HEADER, int(title_box[3] + 2 * TEXT_MARGIN))
    canvas = Image.new("RGB", (canvas_width, bar_height + header + TEXT_MARGIN), (255, 255, 255))
    canvas.paste(image, (0, header))
    ramp = colourise(np.linspace(1, 0, bar_height)[:, None].repeat(BAR_WIDTH, axis=1))
    canvas.paste(Image.fromarray(ramp, "RGB"), (width + LABEL_GAP, header))
    draw = ImageDraw.Draw(canvas)
    draw.text((TEXT_MARGIN, TEXT_MARGIN), title, fill=(0, 0, 0), font=font)
    labels_x = width + LABEL_GAP + BAR_WIDTH + LABEL_GAP
    draw.text((labels_x, header), f"{top:.3g}", fill=(0, 0, 0), font=font)
    draw.text((labels_x, header + bar_height), "0", fill=(0, 0, 0), font=font, anchor="ls")
    return _save(path, canvas)


def draw_comparison(folder: Path, name: str, recorded: bytes | memoryview, live: bytes, dtype: str,
                    shape: tuple[int, ...] | None, title: str, *, sides: bool = False) -> dict[str, Any]:
    """The pictures of one diverged comparison (see the module docstring), written into ``folder``
    under names that start with ``name`` (from :func:`heatmap_name`); returns what a
    :class:`~replay.results.Comparison`'s extras keep of them: ``heatmap`` (the file), and with
    ``sides`` ``recorded_map``, ``live_map``, ``difference_map`` (the page's images), ``error_max``,
    and for colour data ``colour`` (the channels drawn), ``difference_gain`` and ``alpha_differs``.
    Nothing (an empty dict) for data without a 2-d+ shape."""
    if dtype not in DTYPES:  # a struct is compared field by field: no picture of the whole
        return {}
    values = len(recorded) // np.dtype(DTYPES[dtype][0]).itemsize
    full = image_shape(shape, values)
    if full is None or len(live) != len(recorded):
        return {}
    err = error_map(recorded, live, dtype, full)
    path = write_heatmap(folder / name, err, title)
    out: dict[str, Any] = {"heatmap": str(path), "error_max": _top(err)}
    if not sides:
        return out
    stem = path.stem
    paths = {key: folder / f"{stem}-{suffix}.png" for key, suffix in
             (("recorded_map", "recorded"), ("live_map", "live"), ("difference_map", "difference"))}
    if is_colour(full):
        out.update(_write_colour(paths, recorded, live, dtype, full))
    else:
        write_value_maps((paths["recorded_map"], paths["live_map"]),
                         (value_map(recorded, dtype, full), value_map(live, dtype, full)))
        _save(paths["difference_map"], _error_image(err))
    out.update({key: str(p) for key, p in paths.items()})
    return out


def _write_colour(paths: dict[str, Path], recorded: bytes | memoryview, live: bytes, dtype: str,
                  shape: tuple[int, ...]) -> dict[str, Any]:
    # lazy: vkcap diff imports this module, not PIL
    from PIL import Image

    a, b = colour_pixels(recorded, dtype, shape), colour_pixels(live, dtype, shape)
    rgb_a, rgb_b = to_rgb((a, b), dtype)
    difference = np.abs(rgb_a.astype(np.int32) - rgb_b.astype(np.int32))
    largest = int(difference.max())
    gain = 255.0 / largest if largest else 1.0
    rows, columns = rgb_a.shape[:2]
    for key, pixels in (("recorded_map", rgb_a), ("live_map", rgb_b),
                        ("difference_map", np.clip(np.rint(difference * gain), 0, 255).astype(np.uint8))):
        _save(paths[key], _enlarged(Image.fromarray(pixels, "RGB"), rows, columns))
    alpha = shape[-1] == 4 and bool(np.any(a[..., 3] != b[..., 3]))
    return {"colour": "RGBA" if shape[-1] == 4 else "RGB", "difference_gain": gain, "alpha_differs": alpha}


def heatmap_name(seq: int, uid: str) -> str:
    """A safe file name for a resource's heatmap (uids are free text): see
    :func:`vkcore.output_folders.unique_stem` (two uids never share one)."""
    return check_trace_name(f"frame{seq:05d}-{unique_stem(uid)}.png")
