"""dispatch_optical_flow's checks: its bindings, and its images against its width, height and grid."""
from __future__ import annotations

from typing import Iterator

from ..checking import CheckContext, Entry, Problem, quote
from .bindings import binding_problems, bindings_of


def image_problems(ctx: CheckContext, entry: Entry) -> Iterator[Problem]:
    """The images fit the command's width, height and grid at their lods, as the reference runner checks
    them (its words): search and template are width x height and of one format; flow vectors are the
    input divided by the grid, rounded up; hint and cost are the flow vectors' size. The mean-flow hint
    is 0 or below the larger side, as the reference requires."""
    body = entry.body
    width, height = body["width"], body["height"]
    hint = body.get("mean_flow_l1_norm_hint", 0)
    if hint and hint >= max(width, height):
        yield entry.place("mean_flow_l1_norm_hint"), (f"must be 0 or below max(width, height) = {max(width, height)}, "
                                                      f"got {hint}")
    images = {role: (ctx.target(b["resource_ref"]), b.get("lod", 0)) for role, b in bindings_of(body)}

    def extent(role: str) -> tuple[int, int]:
        image, lod = images[role]
        return max(image["dims"][1] >> lod, 1), max(image["dims"][2] >> lod, 1)

    def uid(role: str) -> str:
        return quote(images[role][0]["uid"])

    grid = int(body["grid_size"].split("x")[0])
    output = (-(-width // grid), -(-height // grid))
    if extent("search_image") != (width, height):
        yield entry.place("bindings", "search_image"), (
            f"image {uid('search_image')} is {_wxh(extent('search_image'))} at the bound lod; width and height say "
            f"{width}x{height}")
    if extent("template_image") != extent("search_image"):
        yield entry.place("bindings", "template_image"), (
            f"image {uid('template_image')} is {_wxh(extent('template_image'))} at the bound lod; the search image is "
            f"{_wxh(extent('search_image'))}")
    if images["template_image"][0]["format"] != images["search_image"][0]["format"]:
        yield entry.place("bindings", "template_image"), (
            f"image {uid('template_image')} is {images['template_image'][0]['format']}; the search image is "
            f"{images['search_image'][0]['format']}")
    if extent("output_image") != output:
        yield entry.place("bindings", "output_image"), (
            f"image {uid('output_image')} is {_wxh(extent('output_image'))} at the bound lod; a {width}x{height} input "
            f"on a {body['grid_size']} grid gives {_wxh(output)} flow vectors")
    for role in ("hint_motion_vectors", "output_cost"):
        if role in images and extent(role) != output:
            yield entry.place("bindings", role), (f"image {uid(role)} is {_wxh(extent(role))} at the bound lod; the "
                                                  f"flow vectors are {_wxh(output)}")


def _wxh(extent: tuple[int, int]) -> str:
    return f"{extent[0]}x{extent[1]}"


CHECKS = {"bindings": binding_problems, "optical_flow": image_problems}
