"""``dispatch_compute``: a compute pipeline whose layout the shader decides (:mod:`vkcore.shaders.bindings`),
its descriptor sets, push constants, the dispatch and its implicit barrier. Identical commands (up to
their position) share one prepared dispatch, unless profiling times each."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import vulkan as vk

from ..device import validation
from ..errors import ScenarioError, UnsupportedDeviceFeature
from .stage_limits import refuse_beyond_stage_limits
from ..shaders.pipelines import ComputePipeline, check_shared_memory
from ..scenario.model import Binding, DispatchCompute, Scenario, Shader
from ..shaders.bindings import resolve_bindings, signature
from ..shaders.spirv import Reflection
from ..device.sync import implicit_barrier
from .base import AfterSegment, SnapshotEntry, command_key, declared_writes
from .descriptors import allocate_sets, check_bindings, create_pool, reflect_shader
from .context import CommandContext


@dataclass
class PreparedDispatch:
    """A dispatch_compute with its pipeline, descriptor sets and push constant bytes resolved."""

    command: DispatchCompute
    pipeline: ComputePipeline
    sets: dict[int, Any]
    push_data: bytes
    query_base: int = -1


class ComputeKind:
    command_type: type = DispatchCompute
    dispatch = True
    boundary = False
    features: frozenset[str] = frozenset()

    def bindings(self, cmd: DispatchCompute) -> tuple[Binding, ...]:
        return cmd.bindings

    def shaders(self, cmd: DispatchCompute) -> tuple[str, ...]:
        return (cmd.shader_ref,)

    def may_write(self, cmd: DispatchCompute, read_only: Mapping[str, set[tuple[int, int]]]) -> set[str]:
        """What the shader can write through (a shader never reflected counts as writing all it binds)."""
        cannot = read_only.get(cmd.shader_ref, set())
        return {b.resource_ref for b in cmd.bindings if (b.set, b.id) not in cannot}

    def declared_writes(self, scenario: Scenario, cmd: DispatchCompute) -> list[str]:
        return declared_writes(scenario, cmd.bindings)

    def dispatch_snapshots(self, scenario: Scenario, cmd: DispatchCompute, session_graphs: Mapping[int, Any],
                           size: Callable[[str], int]) -> list[SnapshotEntry]:
        return [(uid, size(uid), cmd.index) for uid in declared_writes(scenario, cmd.bindings)]

    def resolve(self, session: CommandContext, commands: list[DispatchCompute]) -> None:
        """Every command's bindings resolved against its shader's SPIR-V, and the shader checked against
        the device (entry point, capabilities, workgroup size, per-stage limits), before any resource or
        pipeline exists: fills ``session.layouts``."""
        reflections: dict[str, Reflection | None] = {}
        for cmd in commands:
            spec = session.scenario.by_uid[cmd.shader_ref]
            assert isinstance(spec, Shader)
            if spec.uid not in reflections:
                reflections[spec.uid] = _reflect(session, spec)
            layout = resolve_bindings(session.scenario, cmd.place, cmd.bindings, spec.uid, reflections[spec.uid])
            refuse_beyond_stage_limits(session.ctx, session.scenario, cmd.place, [b.kind for b in layout])
            session.layouts[cmd.index] = layout

    def prepare(self, session: CommandContext, commands: list[DispatchCompute]) -> None:
        """One descriptor pool for every set, then per command (or per distinct command): the bindings
        checked against the resources, the pipeline, the sets, the push data (zero-padded)."""
        profiling = session.options.profiling
        distinct = commands if profiling else list({command_key(c): c for c in reversed(commands)}.values())[::-1]
        pool = create_pool(session, distinct)
        prepared: dict[Any, PreparedDispatch] = {}
        for cmd in distinct:
            prepared[command_key(cmd)] = p = _prepare_one(session, cmd, pool)
            if profiling:
                p.query_base = session.reserve_queries(2)
                session.dispatches[cmd.index] = p
        if not profiling:
            for cmd in commands:
                session.dispatches[cmd.index] = prepared[command_key(cmd)]

    def record(self, session: CommandContext, cb: Any, cmd: DispatchCompute, after_segment: AfterSegment | None) -> None:
        d = session.dispatches[cmd.index]
        p = d.pipeline
        vk.vkCmdBindPipeline(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, p.pipeline)
        for s, handle in d.sets.items():
            vk.vkCmdBindDescriptorSets(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, s, 1, [handle], 0, None)
        if d.push_data:
            vk.vkCmdPushConstants(cb, p.layout, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0, len(d.push_data),
                                  vk.ffi.from_buffer(d.push_data))
        if d.query_base >= 0:
            vk.vkCmdWriteTimestamp2(cb, vk.VK_PIPELINE_STAGE_2_TOP_OF_PIPE_BIT, session.query_pool, d.query_base)
        x, y, z = d.command.rangeND
        vk.vkCmdDispatch(cb, x, y, z)
        if d.query_base >= 0:
            vk.vkCmdWriteTimestamp2(cb, vk.VK_PIPELINE_STAGE_2_BOTTOM_OF_PIPE_BIT, session.query_pool, d.query_base + 1)
        if d.command.implicit_barrier:
            implicit_barrier().record(cb)

    def limit_problems(self, limits: Any, cmd: DispatchCompute) -> list[tuple[str, str]]:
        return [(f"{cmd.place}.rangeND[{axis}]", f"{n} workgroups exceed this device's maxComputeWorkGroupCount[{axis}] "
                 f"({int(most)})") for axis, (n, most) in enumerate(zip(cmd.rangeND, limits.maxComputeWorkGroupCount))
                if n > most]

    def name(self, cmd: DispatchCompute) -> str:
        return cmd.shader_ref

    def timing(self, session: CommandContext, cmd: DispatchCompute) -> tuple[int, str, str] | None:
        d = session.dispatches.get(cmd.index)
        if d is None or d.query_base < 0:
            return None
        return d.query_base, d.pipeline.shader_uid, "ComputeDispatch"


def _reflect(session: CommandContext, spec: Shader) -> Reflection | None:
    """:func:`reflect_shader`, and the workgroup size (after specialization) checked against the device."""
    r = reflect_shader(session, spec)
    if r is None:
        return None
    ctx, path = session.ctx, session.scenario.path
    check_shared_memory(ctx, session.module(spec).code, spec, path)
    if r.local_size is not None:
        limits = ctx.limits
        size = r.local_size
        worst = [i for i in range(3) if not 1 <= size[i] <= limits.maxComputeWorkGroupSize[i]]
        invocations = size[0] * size[1] * size[2]
        if worst or invocations > limits.maxComputeWorkGroupInvocations:
            raise UnsupportedDeviceFeature(
                f"shader '{spec.uid}' has workgroup size {size[0]}x{size[1]}x{size[2]} ({invocations} invocations) "
                f"after specialization; this device allows {tuple(int(v) for v in limits.maxComputeWorkGroupSize)} and "
                f"{int(limits.maxComputeWorkGroupInvocations)} invocations",
                file=path, place=spec.place,
            )
    return r


def _prepare_one(session: CommandContext, cmd: DispatchCompute, pool: Any) -> PreparedDispatch:
    assert session.factory is not None and session.resources is not None
    spec = session.scenario.by_uid[cmd.shader_ref]
    assert isinstance(spec, Shader)
    module = session.module(spec)
    layout = session.layouts[cmd.index]
    check_bindings(session, layout)
    with session.timer.measure("Pipeline Setup", f"Create Pipeline: {spec.uid}"), validation.at(cmd.place):
        pipeline = session.factory.compute(module, spec, signature(layout))
    push = session.raw(cmd.push_data_ref) if cmd.push_data_ref else b""
    if len(push) > spec.push_constants_size:
        raise ScenarioError(
            f"push constant data '{cmd.push_data_ref}' is {len(push)} bytes, more than shader '{spec.uid}' "
            f"declares ({spec.push_constants_size})", file=session.scenario.path, place=f"{cmd.place}.push_data_ref",
        )
    push = push.ljust(spec.push_constants_size, b"\0")  # shorter data is zero-padded, as the reference does
    with validation.at(cmd.place):
        sets = allocate_sets(session, pool, cmd, pipeline.set_layouts, layout)
    return PreparedDispatch(cmd, pipeline, sets, push)
