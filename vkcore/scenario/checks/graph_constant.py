"""A graph_constant's check: its .npy src holds its dims and its format's element size."""
from __future__ import annotations

from typing import Iterator

from ..checking import CheckContext, Entry, Problem, quote
from .tensor import TENSOR_ELEMENT_SIZE


def payload_problems(ctx: CheckContext, entry: Entry) -> Iterator[Problem]:
    header = ctx.npy[entry.body["uid"]]
    dims, fmt = list(entry.body["dims"]), entry.body["format"]
    if list(header.shape) != dims:
        yield entry.place("src"), f"{quote(entry.body['src'])} has shape {list(header.shape)} but dims are {dims}"
    if header.itemsize != TENSOR_ELEMENT_SIZE[fmt]:
        yield entry.place("src"), (f"{quote(entry.body['src'])} has {header.itemsize}-byte elements but {fmt} "
                                   f"needs {TENSOR_ELEMENT_SIZE[fmt]}-byte elements")


CHECKS = {"graph_constants": payload_problems}
