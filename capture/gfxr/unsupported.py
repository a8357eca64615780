"""What the importer cannot carry into a scenario: calls it ignores safely, calls it lists, and the error
raised when compute depends on one of the latter.

Guarantees: :func:`kind_of` sorts every call name into one of ``"ignored"`` (queries, object lifetimes,
synchronisation the scenario's order already gives), ``"handled"`` (what :mod:`.model` imports) or a kind
of unsupported work (``"graphics"``, ``"other"``); :class:`Unsupported` collects one line per kind with
its calls' names and first index; :class:`DependsOnUnsupported` (exit 2) names the call and its index.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from vkcore.errors import ScenarioError

GRAPHICS_WORDS = ("Draw", "RenderPass", "Rendering", "Framebuffer", "GraphicsPipeline", "Swapchain", "Surface",
                  "Viewport", "Scissor", "VertexBuffer", "IndexBuffer", "BlendConstants", "DepthBias",
                  "DepthBounds", "Stencil", "LineWidth", "ClearAttachments", "BlitImage", "ResolveImage",
                  "ClearColorImage", "ClearDepthStencilImage", "Present")
IGNORED_PREFIXES = ("vkGet", "vkEnumerate", "vkDestroy", "vkFree", "vkWaitFor", "vkResetFences", "vkCreateFence",
                    "vkCreateSemaphore", "vkCreateEvent", "vkCreateInstance", "vkCreateDevice", "vkCreateCommandPool",
                    "vkCreateDescriptorPool", "vkCreatePipelineCache", "vkCreateSampler", "vkDeviceWaitIdle",
                    "vkQueueWaitIdle", "vkSetDebugUtils", "vkCmdBeginDebugUtils", "vkCmdEndDebugUtils",
                    "vkCmdInsertDebugUtils", "vkDebugMarker", "vkCmdDebugMarker", "vkCreateDebug",
                    "vkResetDescriptorPool", "vkFlushMappedMemoryRanges", "vkInvalidateMappedMemoryRanges",
                    "vkTrimCommandPool", "vkEndCommandBuffer", "vkMergePipelineCaches", "vkCmdSetEvent",
                    "vkCmdResetEvent", "vkCmdWaitEvents", "vkSetEvent", "vkResetEvent", "vkSignalSemaphore",
                    "vkCreateQueryPool", "vkCmdResetQueryPool", "vkCmdWriteTimestamp", "vkCmdBeginQuery",
                    "vkCmdEndQuery", "vkResetQueryPool", "vkCmdCopyQueryPoolResults", "vkCreateAndroidSurface")


def kind_of(name: str, handled: set[str]) -> str:
    if name in handled:
        return "handled"
    if name.startswith(IGNORED_PREFIXES):  # first: destroying a render pass is no graphics work to list
        return "ignored"
    if any(word in name for word in GRAPHICS_WORDS):
        return "graphics"
    return "other"


class DependsOnUnsupported(ScenarioError):
    """A dispatch needs what an unsupported call produced (or bytes the capture does not hold)."""


@dataclass
class Unsupported:
    """Unsupported calls by kind: name -> (count, first block index)."""

    kinds: dict[str, dict[str, tuple[int, int]]] = field(default_factory=dict)

    def note(self, kind: str, name: str, index: int) -> None:
        seen = self.kinds.setdefault(kind, {})
        count, first = seen.get(name, (0, index))
        seen[name] = (count + 1, first)

    def lines(self) -> list[str]:
        """One line per kind: ``not imported (graphics): vkCmdDraw x3 (first at call 120), ...``."""
        out = []
        for kind in sorted(self.kinds):
            calls = ", ".join(f"{name} x{count} (first at call {first})"
                              for name, (count, first) in sorted(self.kinds[kind].items(), key=lambda kv: kv[1][1]))
            out.append(f"not imported ({kind}): {calls}")
        return out
