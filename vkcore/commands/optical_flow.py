"""``dispatch_optical_flow``: motion vectors between a search and a template image through
VK_ARM_data_graph_optical_flow (ARM's Graph emulation layer provides it on devices without it).

The images are bound as the node reads and writes them: search, template and hint as sampled images,
flow vectors and cost as storage images, each at the binding's ``lod`` (level 0 without one), in layout
``GENERAL``. What the device supports (extent range, grid sizes, formats per use, hint and cost) is
checked before any pipeline is made; each problem is one line at the command's JSON path. Identical
commands share nothing: each has its own pipeline and session, whose optical-flow cache carries the
temporal hints of that command from one frame to the next, as in the reference runner.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import vulkan as vk

from ..device import optical_flow_ffi as off
from ..device import validation
from ..errors import ScenarioError, UnsupportedDeviceFeature
from ..graphs.data_graph import GraphApi
from ..resources.formats import FORMATS
from ..graphs.optical_flow import EXTENSION, Connection, OpticalFlowConfig, OpticalFlowPipeline, OpticalFlowSupport, query_support
from ..resources.kinds import DATA_GRAPH, OPTICAL_FLOW
from ..scenario.model import OPTICAL_FLOW_OUTPUTS, Binding, DispatchOpticalFlow, Scenario
from ..shaders.bindings import LayoutBinding
from ..device.sync import FULL_BARRIER, BarrierBatch, memory_barrier
from .base import AfterSegment, SnapshotEntry
from .descriptors import allocate_sets, check_bindings, create_pool
from .context import CommandContext

# role -> (how the node connects it, the descriptor kind it is bound as, the format use the device is asked about)
ROLES: dict[str, tuple[str, str, str]] = {
    "search_image": ("input", "sampled_image", "input"),
    "template_image": ("reference", "sampled_image", "input"),
    "hint_motion_vectors": ("hint", "sampled_image", "hint"),
    "output_image": ("flow_vector", "storage_image", "output"),
    "output_cost": ("cost", "storage_image", "cost"),
}
REPORT_KIND = "DataGraphDispatch"  # the reference's profiling reports an optical-flow dispatch as a graph's


@dataclass
class PreparedOpticalFlow:
    pipeline: OpticalFlowPipeline
    sets: dict[int, Any]
    execute_flags: int
    query_base: int = -1

    def destroy(self) -> None:
        self.pipeline.destroy()


class OpticalFlowKind:
    command_type: type = DispatchOpticalFlow
    dispatch = True
    boundary = False
    features = frozenset({DATA_GRAPH, OPTICAL_FLOW})

    def bindings(self, cmd: DispatchOpticalFlow) -> tuple[Binding, ...]:
        return cmd.bindings

    def shaders(self, cmd: DispatchOpticalFlow) -> tuple[str, ...]:
        return ()

    def may_write(self, cmd: DispatchOpticalFlow, read_only: Mapping[str, set[tuple[int, int]]]) -> set[str]:
        return {b.resource_ref for b in cmd.bindings if b.role in OPTICAL_FLOW_OUTPUTS}

    def declared_writes(self, scenario: Scenario, cmd: DispatchOpticalFlow) -> list[str]:
        return list(dict.fromkeys(b.resource_ref for b in cmd.bindings if b.role in OPTICAL_FLOW_OUTPUTS))

    def dispatch_snapshots(self, scenario: Scenario, cmd: DispatchOpticalFlow, session_graphs: Mapping[int, Any],
                           size: Callable[[str], int]) -> list[SnapshotEntry]:
        return [(uid, size(uid), cmd.index) for uid in self.declared_writes(scenario, cmd)]

    def resolve(self, session: CommandContext, commands: list[DispatchOpticalFlow]) -> None:
        for cmd in commands:
            session.layouts[cmd.index] = tuple(
                LayoutBinding(b.set, b.id, ROLES[b.role][1], b.resource_ref, b.lod or 0, f"{cmd.place}.bindings.{b.role}",
                              None)
                for b in cmd.bindings)

    def prepare(self, session: CommandContext, commands: list[DispatchOpticalFlow]) -> None:
        support = query_support(session.ctx)
        if support is None:
            raise UnsupportedDeviceFeature(f"device '{session.ctx.info.name}' has no {EXTENSION} (dispatch_optical_flow "
                                           "needs it; ARM's Graph emulation layer 0.11 provides it)",
                                           file=session.scenario.path, place=commands[0].place)
        api = GraphApi.load(session.ctx)
        assert session.factory is not None
        pool = create_pool(session, commands)
        for cmd in commands:
            layout = session.layouts[cmd.index]
            check_bindings(session, layout)
            config = _config(session, cmd, support)
            connections = [Connection(lb.set, lb.binding, lb.descriptor_type, ROLES[b.role][0])
                           for b, lb in zip(cmd.bindings, layout)]
            with session.timer.measure("Pipeline Setup", f"Create Optical Flow Pipeline: {cmd.KIND}"), \
                    validation.at(cmd.place):
                pipeline = OpticalFlowPipeline.create(
                    api, connections, config, pipeline_cache=session.factory.cache.handle,
                    session_host_readable=session.options.readable_graph_sessions)
            session.owned.append(pipeline)
            session.factory.count_other(
                ["optical flow", dataclasses.asdict(config), [dataclasses.astuple(c) for c in connections]],
                f"the optical flow of {cmd.place}")
            assert pipeline.session is not None
            pipeline.session.zero_on_device(session.one_time_submit)
            with validation.at(cmd.place):
                sets = allocate_sets(session, pool, cmd, pipeline.set_layouts, layout)
            flags = 0
            for name in cmd.execution_flags:
                flags |= off.EXECUTE_FLAG[name]
            prepared = PreparedOpticalFlow(pipeline, sets, flags)
            if session.options.profiling:
                prepared.query_base = session.reserve_queries(2)
            session.optical_flows[cmd.index] = prepared

    def record(self, session: CommandContext, cb: Any, cmd: DispatchOpticalFlow, after_segment: AfterSegment | None) -> None:
        p = session.optical_flows[cmd.index]
        if p.query_base >= 0:
            vk.vkCmdWriteTimestamp2(cb, vk.VK_PIPELINE_STAGE_2_TOP_OF_PIPE_BIT, session.query_pool, p.query_base)
        p.pipeline.record_dispatch(cb, p.sets, p.execute_flags, cmd.mean_flow_l1_norm_hint)
        if p.query_base >= 0:
            vk.vkCmdWriteTimestamp2(cb, vk.VK_PIPELINE_STAGE_2_BOTTOM_OF_PIPE_BIT, session.query_pool, p.query_base + 1)
        if cmd.implicit_barrier:
            BarrierBatch(memory=[memory_barrier(*FULL_BARRIER)]).record(cb)

    def name(self, cmd: DispatchOpticalFlow) -> str:
        return f"optical flow {cmd.grid_size}"

    def timing(self, session: CommandContext, cmd: DispatchOpticalFlow) -> tuple[int, str, str] | None:
        p = session.optical_flows.get(cmd.index)
        if p is None or p.query_base < 0:
            return None
        return p.query_base, cmd.KIND, REPORT_KIND  # the reference's names

    def limit_problems(self, limits: Any, cmd: DispatchOpticalFlow) -> list[tuple[str, str]]:
        return []


def _config(session: CommandContext, cmd: DispatchOpticalFlow, support: OpticalFlowSupport) -> OpticalFlowConfig:
    """The pipeline's settings from the command and its images, refused where the device says no."""
    assert session.resources is not None
    device, path = session.ctx.info.name, session.scenario.path

    def refuse(where: str, what: str) -> ScenarioError:
        return ScenarioError(f"{what} on device '{device}'", file=path, place=f"{cmd.place}.{where}")

    for axis, (n, low, high) in enumerate(zip((cmd.width, cmd.height), support.min_extent, support.max_extent)):
        if not low <= n <= high:
            name = ("width", "height")[axis]
            raise refuse(name, f"{name} {n} is outside the optical-flow range {low}..{high}")
    grid = off.GRID_SIZE[cmd.grid_size]
    if not support.output_grid_sizes & grid:
        raise refuse("grid_size", f"grid size {cmd.grid_size} is not supported")
    formats: dict[str, int] = {}
    for b in cmd.bindings:
        use = ROLES[b.role][2]
        if use == "hint" and not support.hint:
            raise refuse(f"bindings.{b.role}", "hint motion vectors are not supported")
        if use == "cost" and not support.cost:
            raise refuse(f"bindings.{b.role}", "cost output is not supported")
        image = session.resources[b.resource_ref]
        fmt = image.format  # type: ignore[attr-defined]
        if fmt.vk_value not in support.formats.get(use, ()):
            names = {f.vk_value: f.name for f in FORMATS.values()}
            allowed = ", ".join(names.get(v, str(v)) for v in support.formats.get(use, ())) or "none"
            raise refuse(f"bindings.{b.role}", f"image '{b.resource_ref}' is {fmt.name}; optical-flow {use} images "
                                               f"can be {allowed}")
        formats[b.role] = fmt.vk_value
    if "hint_motion_vectors" in formats and not support.hint_grid_sizes & grid:
        raise refuse("bindings.hint_motion_vectors", f"hint motion vectors on a {cmd.grid_size} grid are not supported")
    return OpticalFlowConfig(
        width=cmd.width, height=cmd.height, image_format=formats["search_image"],
        flow_vector_format=formats["output_image"], cost_format=formats.get("output_cost", 0), grid_size=grid,
        hint_grid_size=grid if "hint_motion_vectors" in formats else 0,
        performance_level=off.PERFORMANCE_LEVEL[cmd.performance_level])
