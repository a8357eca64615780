"""``dispatch_fragment``: a full-screen draw (three vertices, no vertex input) with a vertex and a
fragment shader, through dynamic rendering into the color attachments (a view of one mip level each,
loaded and stored, in layout GENERAL) or over ``render_extent`` without any. The shaders' descriptors,
together, decide the layout as for a compute dispatch (:mod:`vkcore.shaders.bindings`), visible to both
stages; push constants are one range for both, as large as the larger of their sizes."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import vulkan as vk

from ..device import validation
from .stage_limits import refuse_beyond_stage_limits
from ..shaders.pipelines import ComputePipeline
from ..scenario.model import Binding, DispatchFragment, Scenario, Shader
from ..shaders.bindings import resolve_bindings, signature
from ..shaders.spirv import Reflection
from ..device.sync import FULL_BARRIER, BarrierBatch, memory_barrier
from .base import AfterSegment, SnapshotEntry, declared_writes
from .descriptors import allocate_sets, check_bindings, create_pool, reflect_shader
from .context import CommandContext

DRAWN_VERTICES = 3  # one triangle that covers the viewport, its corners made by the vertex shader


@dataclass
class PreparedDraw:
    command: DispatchFragment
    pipeline: ComputePipeline
    sets: dict[int, Any]
    push_data: bytes
    views: list[Any]
    extent: tuple[int, int]
    query_base: int = -1


class FragmentKind:
    command_type: type = DispatchFragment
    dispatch = True
    boundary = False
    features: frozenset[str] = frozenset()

    def bindings(self, cmd: DispatchFragment) -> tuple[Binding, ...]:
        return cmd.bindings

    def shaders(self, cmd: DispatchFragment) -> tuple[str, ...]:
        return (cmd.vertex_shader_ref, cmd.fragment_shader_ref)

    def may_write(self, cmd: DispatchFragment, read_only: Mapping[str, set[tuple[int, int]]]) -> set[str]:
        cannot = read_only.get(cmd.fragment_shader_ref, set()) & read_only.get(cmd.vertex_shader_ref, set())
        return ({b.resource_ref for b in cmd.bindings if (b.set, b.id) not in cannot}
                | {a.resource_ref for a in cmd.color_attachment_refs})

    def declared_writes(self, scenario: Scenario, cmd: DispatchFragment) -> list[str]:
        written = declared_writes(scenario, cmd.bindings)
        return written + [a.resource_ref for a in cmd.color_attachment_refs if a.resource_ref not in written]

    def dispatch_snapshots(self, scenario: Scenario, cmd: DispatchFragment, session_graphs: Mapping[int, Any],
                           size: Callable[[str], int]) -> list[SnapshotEntry]:
        return [(uid, size(uid), cmd.index) for uid in self.declared_writes(scenario, cmd)]

    def resolve(self, session: CommandContext, commands: list[DispatchFragment]) -> None:
        """Both shaders reflected (entry points of their stages), their descriptors together resolved
        against the command's bindings: fills ``session.layouts``."""
        for cmd in commands:
            merged = Reflection()
            for ref in (cmd.vertex_shader_ref, cmd.fragment_shader_ref):
                spec = session.scenario.by_uid[ref]
                assert isinstance(spec, Shader)
                r = reflect_shader(session, spec)
                if r is None:
                    merged = None  # type: ignore[assignment]
                    break
                merged.descriptors.update(r.descriptors)
            layout = resolve_bindings(session.scenario, cmd.place, cmd.bindings, cmd.fragment_shader_ref, merged)
            refuse_beyond_stage_limits(session.ctx, session.scenario, cmd.place, [b.kind for b in layout])
            session.layouts[cmd.index] = layout

    def prepare(self, session: CommandContext, commands: list[DispatchFragment]) -> None:
        pool = create_pool(session, commands)
        for cmd in commands:
            session.draws[cmd.index] = _prepare_one(session, cmd, pool)
            if session.options.profiling:
                session.draws[cmd.index].query_base = session.reserve_queries(2)

    def record(self, session: CommandContext, cb: Any, cmd: DispatchFragment, after_segment: AfterSegment | None) -> None:
        d = session.draws[cmd.index]
        p = d.pipeline
        width, height = d.extent
        attachments = [vk.VkRenderingAttachmentInfo(imageView=view, imageLayout=vk.VK_IMAGE_LAYOUT_GENERAL,
                                                    loadOp=vk.VK_ATTACHMENT_LOAD_OP_LOAD,
                                                    storeOp=vk.VK_ATTACHMENT_STORE_OP_STORE) for view in d.views]
        rendering = vk.VkRenderingInfo(renderArea=vk.VkRect2D(vk.VkOffset2D(0, 0), vk.VkExtent2D(width, height)),
                                       layerCount=1, pColorAttachments=attachments or None)
        if d.query_base >= 0:
            vk.vkCmdWriteTimestamp2(cb, vk.VK_PIPELINE_STAGE_2_TOP_OF_PIPE_BIT, session.query_pool, d.query_base)
        vk.vkCmdBeginRendering(cb, rendering)
        vk.vkCmdBindPipeline(cb, vk.VK_PIPELINE_BIND_POINT_GRAPHICS, p.pipeline)
        for s, handle in d.sets.items():
            vk.vkCmdBindDescriptorSets(cb, vk.VK_PIPELINE_BIND_POINT_GRAPHICS, p.layout, s, 1, [handle], 0, None)
        if d.push_data:
            vk.vkCmdPushConstants(cb, p.layout, vk.VK_SHADER_STAGE_VERTEX_BIT | vk.VK_SHADER_STAGE_FRAGMENT_BIT, 0,
                                  len(d.push_data), vk.ffi.from_buffer(d.push_data))
        vk.vkCmdDraw(cb, DRAWN_VERTICES, 1, 0, 0)
        vk.vkCmdEndRendering(cb)
        if d.query_base >= 0:
            vk.vkCmdWriteTimestamp2(cb, vk.VK_PIPELINE_STAGE_2_BOTTOM_OF_PIPE_BIT, session.query_pool, d.query_base + 1)
        if cmd.implicit_barrier:  # fragment and attachment writes before anything after
            BarrierBatch(memory=[memory_barrier(*FULL_BARRIER)]).record(cb)

    def limit_problems(self, limits: Any, cmd: DispatchFragment) -> list[tuple[str, str]]:
        if not cmd.render_extent or cmd.color_attachment_refs:
            return []
        most = (int(limits.maxFramebufferWidth), int(limits.maxFramebufferHeight))
        return [(f"{cmd.place}.render_extent[{axis}]", f"{n} exceeds this device's maxFramebuffer{side} ({m})")
                for axis, (n, m, side) in enumerate(zip(cmd.render_extent, most, ("Width", "Height"))) if n > m]

    def name(self, cmd: DispatchFragment) -> str:
        return cmd.debug_name or cmd.fragment_shader_ref

    def timing(self, session: CommandContext, cmd: DispatchFragment) -> tuple[int, str, str] | None:
        d = session.draws.get(cmd.index)
        if d is None or d.query_base < 0:
            return None
        return d.query_base, cmd.debug_name or cmd.fragment_shader_ref, "FragmentDispatch"


def _prepare_one(session: CommandContext, cmd: DispatchFragment, pool: Any) -> PreparedDraw:
    assert session.factory is not None and session.resources is not None
    vs, fs = (session.scenario.by_uid[cmd.vertex_shader_ref], session.scenario.by_uid[cmd.fragment_shader_ref])
    assert isinstance(vs, Shader) and isinstance(fs, Shader)
    layout = session.layouts[cmd.index]
    check_bindings(session, layout)
    images = [session.resources[a.resource_ref] for a in cmd.color_attachment_refs]
    views = [image.level_views[a.lod] for image, a in zip(images, cmd.color_attachment_refs)]  # type: ignore[attr-defined]
    if images:
        extent = images[0].level_extent(cmd.color_attachment_refs[0].lod)  # type: ignore[attr-defined]
    else:
        extent = (int(cmd.render_extent[0]), int(cmd.render_extent[1]))
    formats = [image.vk_format for image in images]  # type: ignore[attr-defined]
    push_size = max(vs.push_constants_size, fs.push_constants_size)
    with session.timer.measure("Pipeline Setup", f"Create Pipeline: {fs.uid}"), validation.at(cmd.place):
        pipeline = session.factory.graphics(session.module(vs), session.module(fs), vs, fs, signature(layout), push_size,
                                            formats, extent)
    push = (session.raw(cmd.push_data_ref) if cmd.push_data_ref else b"").ljust(push_size, b"\0")
    with validation.at(cmd.place):
        sets = allocate_sets(session, pool, cmd, pipeline.set_layouts, layout)
    return PreparedDraw(cmd, pipeline, sets, push, views, extent)
