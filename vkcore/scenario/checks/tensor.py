"""A tensor's checks: the deprecated alias_target refused, and its .npy src of its dims and element size."""
from __future__ import annotations

from typing import Iterator

from ..checking import CheckContext, Entry, Problem, quote

#: Bytes per element of each tensor format (the .npy ``src`` of a tensor must use elements of this size).
TENSOR_ELEMENT_SIZE: dict[str, int] = {
    "VK_FORMAT_R8_BOOL_ARM": 1, "VK_FORMAT_R8_UINT": 1, "VK_FORMAT_R8_SINT": 1, "VK_FORMAT_R16_UINT": 2,
    "VK_FORMAT_R16_SINT": 2, "VK_FORMAT_R32_UINT": 4, "VK_FORMAT_R32_SINT": 4, "VK_FORMAT_R64_SINT": 8,
    "VK_FORMAT_R16_SFLOAT": 2, "VK_FORMAT_R32_SFLOAT": 4, "VK_FORMAT_R16_SFLOAT_FPENCODING_BFLOAT16_ARM": 2,
    "VK_FORMAT_R8_SFLOAT_FPENCODING_FLOAT8E4M3_ARM": 1, "VK_FORMAT_R8_SFLOAT_FPENCODING_FLOAT8E5M2_ARM": 1,
}


def deprecated_problems(ctx: CheckContext, entry: Entry) -> Iterator[Problem]:
    """What the reference runner refuses as deprecated, refused the same way."""
    if "alias_target" in entry.body:
        yield entry.place("alias_target"), ("the alias_target field is deprecated and refused (as the reference "
                                            "runner refuses it): share memory with a memory_group instead")


def payload_problems(ctx: CheckContext, entry: Entry) -> Iterator[Problem]:
    """The src has the tensor's dims and its format's element size."""
    header = ctx.npy.get(entry.body["uid"])
    if header is None:
        return
    src = entry.body["src"]
    dims = list(entry.body["dims"])
    if list(header.shape) != dims:
        yield entry.place("src"), f"{quote(src)} has shape {list(header.shape)} but dims are {dims}"
    fmt = entry.body["format"]
    need = TENSOR_ELEMENT_SIZE[fmt]
    if header.itemsize != need:
        yield entry.place("src"), (f"{quote(src)} has {header.itemsize}-byte elements ({header.descr}) but {fmt} needs "
                                   f"{need}-byte elements")


CHECKS = {"deprecated": deprecated_problems, "payloads": payload_problems}
