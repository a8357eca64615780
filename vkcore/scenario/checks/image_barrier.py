"""An image_barrier's check: its subresource range stays inside its image's mips and layers."""
from __future__ import annotations

from typing import Iterator

from ..checking import CheckContext, Entry, Problem, quote

IMAGE_ARRAY_LAYERS = 1  # images are created with one array layer, like the reference runner


def range_problems(ctx: CheckContext, entry: Entry) -> Iterator[Problem]:
    image = ctx.target(entry.body["image_resource"])
    rng = entry.body.get("subresource_range", {})
    mips = image.get("mips", 1)
    base, count = rng.get("base_mip_level", 0), rng.get("level_count", 1)
    if base + count > mips:
        yield entry.place("subresource_range"), (
            f"mip levels {base} to {base + count - 1} are outside image {quote(image['uid'])}, "
            f"which has {mips} mip level{'s' if mips != 1 else ''}")
    base, count = rng.get("base_array_layer", 0), rng.get("layer_count", 1)
    if base + count > IMAGE_ARRAY_LAYERS:
        yield entry.place("subresource_range"), (
            f"array layers {base} to {base + count - 1} are outside image {quote(image['uid'])}, "
            f"which has {IMAGE_ARRAY_LAYERS} array layer")


CHECKS = {"barrier_ranges": range_problems}
