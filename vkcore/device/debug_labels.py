"""``--enable-gpu-debug-markers``: VK_EXT_debug_utils labels around each command, and names on the
resources, for frame debuggers and capture tools (RenderDoc, GFXReconstruct, Nsight) to show.

Every instance vkcap creates enables VK_EXT_debug_utils where the loader offers it (it implements the
extension itself), so labels need nothing more. A command's label is its JSON path and, where it has
one, its shader, graph or pass (``commands[3].dispatch_compute (add)``); each frame is a label around
its commands (``frame 2``). Labels are recorded only when asked: without the flag a command buffer is
the same as before.
"""
from __future__ import annotations

import logging
from typing import Any

import vulkan as vk

EXTENSION = "VK_EXT_debug_utils"
log = logging.getLogger("vkcap")


class DebugLabels:
    """The label and naming functions of one context's instance; :meth:`load` returns ``None`` (and
    says so once) where the instance lacks them."""

    def __init__(self, ctx: Any, begin: Any, end: Any, name_object: Any) -> None:
        self.ctx = ctx
        self._begin, self._end, self._name = begin, end, name_object

    @classmethod
    def load(cls, ctx: Any) -> "DebugLabels | None":
        try:
            begin = vk.vkGetInstanceProcAddr(ctx.instance, "vkCmdBeginDebugUtilsLabelEXT")
            end = vk.vkGetInstanceProcAddr(ctx.instance, "vkCmdEndDebugUtilsLabelEXT")
            name_object = vk.vkGetInstanceProcAddr(ctx.instance, "vkSetDebugUtilsObjectNameEXT")
        except (vk.ProcedureNotFoundError, vk.ExtensionNotSupportedError):
            log.warning("--enable-gpu-debug-markers: the Vulkan loader has no %s; no labels are recorded", EXTENSION)
            return None
        return cls(ctx, begin, end, name_object)

    def begin(self, cb: Any, text: str) -> None:
        self._begin(cb, vk.VkDebugUtilsLabelEXT(pLabelName=text, color=[0.0, 0.0, 0.0, 0.0]))

    def end(self, cb: Any) -> None:
        self._end(cb)

    def name(self, object_type: int, handle: Any, text: str) -> None:
        """Name one object (``VkObjectType``, the `vulkan` package's handle)."""
        value = int(vk.ffi.cast("uint64_t", handle))
        self._name(self.ctx.device, vk.VkDebugUtilsObjectNameInfoEXT(objectType=object_type, objectHandle=value,
                                                                     pObjectName=text))


def command_label(place: str, name: str) -> str:
    return f"{place} ({name})" if name else place
