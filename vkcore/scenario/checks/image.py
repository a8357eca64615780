"""An image's check: a custom border color goes with a custom border_color of its type."""
from __future__ import annotations

from typing import Iterator

from ..checking import CheckContext, Entry, Problem

CUSTOM_BORDER_COLORS = ("FLOAT_CUSTOM_EXT", "INT_CUSTOM_EXT")


def field_problems(ctx: CheckContext, entry: Entry) -> Iterator[Problem]:
    body = entry.body
    if "custom_border_color" not in body:
        return
    color = body.get("border_color")
    if color not in CUSTOM_BORDER_COLORS:
        yield entry.place("custom_border_color"), f"needs border_color FLOAT_CUSTOM_EXT or INT_CUSTOM_EXT, got {color or 'none'}"
    if color == "INT_CUSTOM_EXT" and not all(isinstance(v, int) for v in body["custom_border_color"]):
        yield entry.place("custom_border_color"), "must hold integers with border_color INT_CUSTOM_EXT"


CHECKS = {"fields": field_problems}
