"""A :class:`Session` holds every Vulkan object of one scenario on one device.

Building a session validates what only the device can tell, creates resources, pipelines and descriptor
sets; each frame is recorded into a command buffer once, on first use. Running a frame is then a
single ``vkQueueSubmit2`` on a ring of fences; ``--repeat`` re-submits the same command buffers.
The asynchronous driver in :mod:`vkcore.executor` sequences frames; this module never blocks on
anything but the GPU.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Hashable, Iterable

import vulkan as vk

from .buffers import DeviceBuffer
from .device import FRAME_BOUNDARY_EXT, VulkanContext
from .errors import DeviceError, ScenarioError, UnsupportedDeviceFeature
from .npyio import read_header
from .pipelines import ComputePipeline, PipelineCache, PipelineFactory
from .plan import Frame, Plan, unwritable_resources
from .scenario import (
    BufferBarrier,
    DispatchBarrier,
    DispatchCompute,
    DispatchGraph,
    ImageBarrier,
    MemoryBarrier,
    RawData,
    Shader,
    TensorBarrier,
)
from . import validation
from .limits import refuse_beyond_limits, refuse_beyond_stage_limits
from .resource_set import ResourceSet
from .resources import free_staging, staging_buffer
from .shaders import SpirvModule, load_shader
from .shader_bindings import LayoutBinding, image_usage_needs, resolve_bindings, signature
from .spirv import CAPABILITY_FEATURES, Reflection, SpirvError, reflect
from .staging import CaptureItem, CaptureLayout, StagingRing, StagingSlot, build_layout
from .sync import (
    ACCESS,
    LAYOUT,
    FULL_BARRIER,
    BarrierBatch,
    buffer_barrier,
    implicit_barrier,
    memory_barrier,
    stage_mask,
)

if TYPE_CHECKING:  # the graph machinery (cffi declarations, numpy) loads only for graph scenarios
    from .graph_dispatch import PreparedGraph

@dataclass(frozen=True)
class SessionOptions:
    profiling: bool = False
    pipeline_cache_path: Path | None = None
    clear_pipeline_cache: bool = False
    fail_on_pipeline_cache_miss: bool = False


@dataclass
class PreparedDispatch:
    """A dispatch_compute with its pipeline, descriptor sets and push constant bytes resolved."""

    command: DispatchCompute
    pipeline: ComputePipeline
    sets: dict[int, Any]
    push_data: bytes
    query_base: int = -1


@dataclass
class HostTimer:
    """Named host timings in microseconds, grouped by phase, for ``--perf-counters-dump-path``."""

    phases: dict[str, list[tuple[str, int]]] = field(default_factory=dict)

    def add(self, phase: str, name: str, seconds: float) -> None:
        self.phases.setdefault(phase, []).append((name, int(round(seconds * 1e6))))

    def measure(self, phase: str, name: str) -> "_Span":
        return _Span(self, phase, name)


class _Span:
    def __init__(self, timer: HostTimer, phase: str, name: str) -> None:
        self.timer, self.phase, self.name = timer, phase, name

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.timer.add(self.phase, self.name, time.perf_counter() - self.t0)


class FrameTimeout(DeviceError):
    """A frame ran longer than ``--timeout``."""


def command_key(cmd: Any) -> Hashable:
    """A command without its position in the scenario: equal keys record equal GPU work."""
    return dataclasses.replace(cmd, index=-1)


class Session:
    """All Vulkan objects of a plan on one context. ``close()`` releases them (the context stays)."""

    def __init__(self, ctx: VulkanContext, plan: Plan, options: SessionOptions, timer: HostTimer | None = None) -> None:
        refuse_beyond_limits(ctx, plan.scenario)
        self.ctx = ctx
        self.plan = plan
        self.scenario = plan.scenario
        self.options = options
        self.timer = timer or HostTimer()
        # Everything close() releases exists (empty) before anything can fail, so a failed set-up
        # releases exactly what it created before the device goes away.
        self.resources: ResourceSet | None = None
        self.cache: PipelineCache | None = None
        self.factory: PipelineFactory | None = None
        self.modules: dict[str, SpirvModule] = {}
        self.read_only_bindings: dict[str, set[tuple[int, int]]] = {}  # shader uid -> what it cannot write
        self.layouts: dict[int, tuple[LayoutBinding, ...]] = {}  # command index -> its resolved bindings
        self.raw_data: dict[str, bytes] = {}
        self.dispatches: dict[int, PreparedDispatch] = {}  # by command index
        self.graphs: dict[int, PreparedGraph] = {}  # by command index
        self.graph_queries: dict[int, int] = {}  # command index -> first of its two timestamp queries
        self.query_pool = None
        self.query_count = 0
        self.pool = None
        self.fences: list[Any] = []
        self.ring = StagingRing(ctx)
        self.descriptor_pool = None
        self._command_buffers: dict[Hashable, Any] = {}
        try:
            self.layouts = self._resolve_layouts()
            self.resources = ResourceSet(ctx, self.scenario, image_usage=image_usage_needs(
                b for layout in self.layouts.values() for b in layout))
            self.cache = PipelineCache(
                ctx,
                options.pipeline_cache_path,
                clear=options.clear_pipeline_cache,
                fail_on_miss=options.fail_on_pipeline_cache_miss,
            )
            self.factory = PipelineFactory(ctx, self.cache)
            self.pool = vk.vkCreateCommandPool(ctx.device, vk.VkCommandPoolCreateInfo(queueFamilyIndex=ctx.queue_family), None)
            self._prepare_dispatches()
            self._prepare_graphs()
            self._create_query_pool()
            validation.check()
        except BaseException:
            self.close()
            raise

    @property
    def _resources(self) -> ResourceSet:
        """``resources``, set whenever a method runs (``None`` only for ``close()`` after a failed ``__init__``)."""
        resources = self.resources
        assert resources is not None
        return resources

    # -- building -------------------------------------------------------------------------------

    def _raw(self, uid: str) -> bytes:
        if uid not in self.raw_data:
            spec = self.scenario.by_uid[uid]
            assert isinstance(spec, RawData)
            path = self.scenario.src_path(spec.src)
            header = read_header(path)
            with open(path, "rb") as f:
                f.seek(header.data_offset)
                self.raw_data[uid] = f.read(header.nbytes)
        return self.raw_data[uid]

    def _module(self, spec: Shader) -> SpirvModule:
        if spec.uid not in self.modules:
            with self.timer.measure("Scenario Setup", f"Load Shader: {spec.uid}"):
                self.modules[spec.uid] = load_shader(self.scenario, spec)
        return self.modules[spec.uid]

    def _prepare_dispatches(self) -> None:
        assert self.factory is not None
        computes = [c for c in self.scenario.commands if isinstance(c, DispatchCompute)]
        counts: dict[int, int] = {}
        total_sets = 0
        if not self.options.profiling:  # identical dispatches share one prepared dispatch (and its sets)
            computes = list({command_key(c): c for c in reversed(computes)}.values())[::-1]
        for cmd in computes:
            total_sets += len({b.set for b in cmd.bindings})
            for lb in self.layouts[cmd.index]:
                counts[lb.descriptor_type] = counts.get(lb.descriptor_type, 0) + 1
        if total_sets:
            sizes = [vk.VkDescriptorPoolSize(type=t, descriptorCount=n) for t, n in counts.items()]
            self.descriptor_pool = vk.vkCreateDescriptorPool(
                self.ctx.device, vk.VkDescriptorPoolCreateInfo(maxSets=total_sets, pPoolSizes=sizes), None
            )
        for cmd in computes:
            spec = self.scenario.by_uid[cmd.shader_ref]
            assert isinstance(spec, Shader)
            module = self._module(spec)
            layout = self.layouts[cmd.index]
            for lb in layout:
                try:
                    self._resources[lb.resource].check_binding(lb)
                except (ScenarioError, UnsupportedDeviceFeature) as exc:
                    exc.file = exc.file or str(self.scenario.path)
                    raise
            with self.timer.measure("Pipeline Setup", f"Create Pipeline: {spec.uid}"), validation.at(cmd.place):
                pipeline = self.factory.compute(module, spec, signature(layout))
            push = self._raw(cmd.push_data_ref) if cmd.push_data_ref else b""
            if len(push) > spec.push_constants_size:
                raise ScenarioError(
                    f"push constant data '{cmd.push_data_ref}' is {len(push)} bytes, more than shader '{spec.uid}' "
                    f"declares ({spec.push_constants_size})", file=self.scenario.path, place=f"{cmd.place}.push_data_ref",
                )
            push = push.ljust(spec.push_constants_size, b"\0")  # shorter data is zero-padded, as the reference does
            with validation.at(cmd.place):
                sets = self._allocate_sets(cmd, pipeline)
            prepared = PreparedDispatch(cmd, pipeline, sets, push)
            if self.options.profiling:
                prepared.query_base = self.query_count
                self.query_count += 2
            self.dispatches[cmd.index] = prepared
        if not self.options.profiling:
            by_key = {command_key(d.command): d for d in self.dispatches.values()}
            for c in self.scenario.commands:
                if isinstance(c, DispatchCompute):
                    self.dispatches[c.index] = by_key[command_key(c)]

    def _create_query_pool(self) -> None:
        """Two timestamps per dispatch and per graph dispatch, when profiling."""
        if self.query_count:
            info = vk.VkQueryPoolCreateInfo(queryType=vk.VK_QUERY_TYPE_TIMESTAMP, queryCount=self.query_count)
            self.query_pool = vk.vkCreateQueryPool(self.ctx.device, info, None)

    def _resolve_layouts(self) -> dict[int, tuple[LayoutBinding, ...]]:
        """Every compute dispatch's bindings resolved against its shader's SPIR-V (see
        :mod:`vkcore.shader_bindings`), and the shader checked against the device's workgroup limits,
        before any resource or pipeline exists."""
        layouts: dict[int, tuple[LayoutBinding, ...]] = {}
        reflections: dict[str, Reflection | None] = {}
        for cmd in self.scenario.commands:
            if not isinstance(cmd, DispatchCompute):
                continue
            spec = self.scenario.by_uid[cmd.shader_ref]
            assert isinstance(spec, Shader)
            if spec.uid not in reflections:
                reflections[spec.uid] = self._reflect(spec)
            layouts[cmd.index] = resolve_bindings(self.scenario, cmd.place, cmd.bindings, spec.uid, reflections[spec.uid])
            refuse_beyond_stage_limits(self.ctx, self.scenario, cmd.place, [b.kind for b in layouts[cmd.index]])
        return layouts

    def pipeline_layouts(self) -> list[dict[str, Any]]:
        """Each compute dispatch's pipeline layout as resolved from its shader (JSON-ready, for traces):
        the command, its shader and stage, push constant size, and every binding's descriptor type."""
        out = []
        for index, layout in sorted(self.layouts.items()):
            cmd = self.scenario.commands[index]
            spec = self.scenario.by_uid[cmd.shader_ref]  # type: ignore[union-attr]
            out.append({"command": index, "shader": spec.uid, "stage": "compute",
                        "push_constants_size": spec.push_constants_size,  # type: ignore[union-attr]
                        "bindings": [b.describe() for b in layout]})
        return out

    def _reflect(self, spec: Shader) -> Reflection | None:
        """The shader's reflection, its entry point and workgroup size checked; ``None`` when its
        SPIR-V cannot be read (then only the scenario decides, and the driver reports the rest)."""
        module = self._module(spec)
        try:
            r = reflect(module.code, {c.id: c.value for c in spec.specialization_constants})
        except SpirvError:
            return None
        self.read_only_bindings[spec.uid] = r.read_only
        if r.entry_points and r.entry_points.get(spec.entry) != "compute":
            found = ", ".join(f"'{n}' ({m})" for n, m in sorted(r.entry_points.items()))
            raise ScenarioError(f"shader '{spec.uid}' has no compute entry point '{spec.entry}' (it has {found})",
                                file=self.scenario.path, place=f"{spec.place}.entry")
        for capability in sorted(r.capabilities & CAPABILITY_FEATURES.keys()):
            name, feature = CAPABILITY_FEATURES[capability]
            if not getattr(self.ctx.features.features, feature):
                raise UnsupportedDeviceFeature(
                    f"shader '{spec.uid}' declares the SPIR-V capability {name}, which needs {feature}, a feature device "
                    f"'{self.ctx.info.name}' lacks", file=self.scenario.path, place=spec.place,
                )
        if r.local_size is not None:
            limits = self.ctx.limits
            size = r.local_size
            worst = [i for i in range(3) if not 1 <= size[i] <= limits.maxComputeWorkGroupSize[i]]
            invocations = size[0] * size[1] * size[2]
            if worst or invocations > limits.maxComputeWorkGroupInvocations:
                raise UnsupportedDeviceFeature(
                    f"shader '{spec.uid}' has workgroup size {size[0]}x{size[1]}x{size[2]} ({invocations} invocations) "
                    f"after specialization; this device allows {tuple(int(v) for v in limits.maxComputeWorkGroupSize)} and "
                    f"{int(limits.maxComputeWorkGroupInvocations)} invocations",
                    file=self.scenario.path, place=spec.place,
                )
        return r

    def _prepare_graphs(self) -> None:
        """One PreparedGraph per dispatch_graph command (identical commands share one, as dispatches do)."""
        assert self.resources is not None and self.factory is not None
        if not any(isinstance(c, DispatchGraph) for c in self.scenario.commands):
            return
        from .graph_dispatch import PreparedGraph
        by_key: dict[Hashable, PreparedGraph] = {}
        for cmd in self.scenario.commands:
            if not isinstance(cmd, DispatchGraph):
                continue
            key = command_key(cmd)
            if key not in by_key:
                with validation.at(cmd.place):
                    by_key[key] = PreparedGraph.create(self.ctx, self.scenario, cmd, self.resources, self.factory,
                                                       self._raw, timer=self.timer)
            self.graphs[cmd.index] = by_key[key]
            if self.options.profiling:
                self.graph_queries[cmd.index] = self.query_count
                self.query_count += 2

    def _allocate_sets(self, cmd: DispatchCompute, pipeline: ComputePipeline) -> dict[int, Any]:
        used = sorted({b.set for b in cmd.bindings})
        if not used:
            return {}
        layouts = [pipeline.set_layouts[s] for s in used]
        handles = vk.vkAllocateDescriptorSets(
            self.ctx.device, vk.VkDescriptorSetAllocateInfo(descriptorPool=self.descriptor_pool, pSetLayouts=layouts)
        )
        sets = dict(zip(used, handles))
        parts = [self._resources[b.resource].descriptor(sets[b.set], b.binding, b.lod, b.descriptor_type)
                 for b in self.layouts[cmd.index]]
        writes = [p.write for p in parts]
        vk.vkUpdateDescriptorSets(self.ctx.device, len(writes), writes, 0, None)
        return sets

    def _barrier_batch(self, cmd: DispatchBarrier) -> BarrierBatch:
        batch = BarrierBatch()
        for uid in cmd.memory_barrier_refs:
            b = self.scenario.by_uid[uid]
            assert isinstance(b, MemoryBarrier)
            batch.memory.append(
                memory_barrier(stage_mask(b.src_stage), ACCESS[b.src_access], stage_mask(b.dst_stage), ACCESS[b.dst_access])
            )
        for uid in cmd.buffer_barrier_refs:
            b = self.scenario.by_uid[uid]
            assert isinstance(b, BufferBarrier)
            buf = self._resources[b.buffer_resource]
            assert isinstance(buf, DeviceBuffer)
            batch.buffer.append(
                buffer_barrier(
                    buf.handle, b.offset, b.size,
                    stage_mask(b.src_stage), ACCESS[b.src_access], stage_mask(b.dst_stage), ACCESS[b.dst_access],
                )
            )
        for uid in cmd.image_barrier_refs:
            ib = self.scenario.by_uid[uid]
            assert isinstance(ib, ImageBarrier)
            image = self._resources[ib.image_resource]
            r = ib.subresource_range
            old, new = LAYOUT[ib.old_layout], LAYOUT[ib.new_layout]
            batch.image.append(image._barrier(  # type: ignore[attr-defined]
                stage_mask(ib.src_stage), ACCESS[ib.src_access], stage_mask(ib.dst_stage), ACCESS[ib.dst_access],
                old, new, r.base_mip_level, r.level_count))
            if new != vk.VK_IMAGE_LAYOUT_UNDEFINED:
                image.layout = new  # type: ignore[attr-defined]  # later copies of this image start from it
        tensor_barriers = []
        for uid in cmd.tensor_barrier_refs:
            t = self.scenario.by_uid[uid]
            assert isinstance(t, TensorBarrier)
            resource = self._resources[t.tensor_resource]
            tensor_barriers.append(resource.barrier(  # type: ignore[attr-defined]
                stage_mask(t.src_stage), ACCESS[t.src_access], stage_mask(t.dst_stage), ACCESS[t.dst_access]))
        if tensor_barriers:
            from .tensors import tensor_dependency

            chained = tensor_dependency(tensor_barriers)
            batch.extra_next = chained.value
            batch.keepalive += [chained, *chained.keep]
        return batch

    # -- command buffers ----------------------------------------------------------------------

    def prepare_ring(self, slots: int, slot_size: int) -> None:
        """Create ``slots`` fences (and staging slots of ``slot_size`` bytes) for pipelined frames.

        A session can run several times (bisection probes): an existing ring that fits is kept;
        otherwise it is replaced, and the command buffers recorded against it are dropped.
        """
        if self.fences and len(self.fences) == slots and all(s.size >= slot_size for s in self.ring.slots):
            return
        if self.fences:
            vk.vkDeviceWaitIdle(self.ctx.device)
            for fence in self.fences:
                vk.vkDestroyFence(self.ctx.device, fence, None)
            self.ring.destroy()
            if self._command_buffers:
                vk.vkFreeCommandBuffers(self.ctx.device, self.pool, len(self._command_buffers), list(self._command_buffers.values()))
            self._command_buffers.clear()
        self.ring = StagingRing.create(self.ctx, slots, slot_size)
        self.fences = [vk.vkCreateFence(self.ctx.device, vk.VkFenceCreateInfo(flags=vk.VK_FENCE_CREATE_SIGNALED_BIT), None) for _ in range(slots)]

    def _frame_key(self, frame: Frame, layout: CaptureLayout, slot: int) -> Hashable:
        """Frames with the same commands (up to their positions in the scenario) and the same copies
        share a command buffer; with timestamp queries each frame has its own."""
        if self.query_pool is not None:
            return (frame.index, layout.items, slot)
        position = {c.index: n for n, c in enumerate(frame.commands)}
        copies = tuple((i.uid, i.offset, i.size, position.get(i.after_command, -1) if i.after_command is not None else None,
                        i.segment) for i in layout.items)
        return (tuple(command_key(c) for c in frame.commands), copies, slot)

    def command_buffer(self, frame: Frame, layout: CaptureLayout, slot: int) -> Any:
        """The command buffer of ``frame`` copying ``layout`` into staging ``slot``: recorded on first
        use, then reused for every frame with the same commands and copies (``--repeat`` included)."""
        key = self._frame_key(frame, layout, slot)
        cb = self._command_buffers.get(key)
        if cb is None:
            info = vk.VkCommandBufferAllocateInfo(commandPool=self.pool, level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, commandBufferCount=1)
            cb = vk.vkAllocateCommandBuffers(self.ctx.device, info)[0]
            vk.vkBeginCommandBuffer(cb, vk.VkCommandBufferBeginInfo())
            self._record_frame(frame, cb, layout, self.ring.slots[slot] if self.ring.slots else None)
            vk.vkEndCommandBuffer(cb)
            self._command_buffers[key] = cb
            validation.check()
        return cb

    def _record_frame(self, frame: Frame, cb: Any, layout: CaptureLayout, slot: StagingSlot | None) -> None:
        # Order this frame after everything submitted before it (frames are pipelined).
        BarrierBatch(memory=[memory_barrier(*FULL_BARRIER)]).record(cb)
        for c in frame.commands:
            d = self.dispatches.get(c.index)
            if d is not None and self.query_pool is not None:
                vk.vkCmdResetQueryPool(cb, self.query_pool, d.query_base, 2)
            if c.index in self.graph_queries:
                vk.vkCmdResetQueryPool(cb, self.query_pool, self.graph_queries[c.index], 2)
        for cmd in frame.commands:
            with validation.at(cmd.place):
                self._record_command(cb, cmd, layout, slot)
        if slot is not None:
            self._record_copies(cb, layout.at(None), slot)

    def _record_command(self, cb: Any, cmd: Any, layout: CaptureLayout, slot: StagingSlot | None) -> None:
        """Record one command (with the snapshots taken right after it, for dispatch-level captures)."""
        if isinstance(cmd, DispatchCompute):
            self._record_dispatch(cb, self.dispatches[cmd.index])
        elif isinstance(cmd, DispatchGraph):
            index = cmd.index
            after = (lambda cb_, i, index=index: self._record_copies(cb_, layout.at(index, i), slot)) if slot is not None else None
            query = self.graph_queries.get(index)
            if query is not None:
                vk.vkCmdWriteTimestamp2(cb, vk.VK_PIPELINE_STAGE_2_TOP_OF_PIPE_BIT, self.query_pool, query)
            self.graphs[cmd.index].record(cb, after_segment=after)
            if query is not None:
                vk.vkCmdWriteTimestamp2(cb, vk.VK_PIPELINE_STAGE_2_BOTTOM_OF_PIPE_BIT, self.query_pool, query + 1)
        elif isinstance(cmd, DispatchBarrier):
            self._barrier_batch(cmd).record(cb)
        if slot is not None:
            self._record_copies(cb, layout.at(cmd.index), slot)

    def _record_copies(self, cb: Any, items: tuple[CaptureItem, ...], slot: StagingSlot) -> None:
        for item in items:
            self.capturable(item.uid, item.after_command).record_snapshot(cb, slot.buffer, item.offset)

    def capturable(self, uid: str, command: int | None = None) -> Any:
        """A scenario resource by uid, or an intermediate of the graph dispatched by ``command``."""
        if uid in self._resources:
            return self._resources[uid]
        if command is not None and command in self.graphs:
            return self.graphs[command].resource(uid)
        raise KeyError(uid)

    def _record_dispatch(self, cb: Any, d: PreparedDispatch) -> None:
        p = d.pipeline
        vk.vkCmdBindPipeline(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, p.pipeline)
        for s, handle in d.sets.items():
            vk.vkCmdBindDescriptorSets(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, s, 1, [handle], 0, None)
        if d.push_data:
            vk.vkCmdPushConstants(cb, p.layout, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0, len(d.push_data), vk.ffi.from_buffer(d.push_data))
        if d.query_base >= 0:
            vk.vkCmdWriteTimestamp2(cb, vk.VK_PIPELINE_STAGE_2_TOP_OF_PIPE_BIT, self.query_pool, d.query_base)
        x, y, z = d.command.rangeND
        vk.vkCmdDispatch(cb, x, y, z)
        if d.query_base >= 0:
            vk.vkCmdWriteTimestamp2(cb, vk.VK_PIPELINE_STAGE_2_BOTTOM_OF_PIPE_BIT, self.query_pool, d.query_base + 1)
        if d.command.implicit_barrier:
            implicit_barrier().record(cb)

    # -- running --------------------------------------------------------------------------------

    def load_inputs(self) -> None:
        """Every resource's initial content: its ``src``, else zeros."""
        self._resources.load_initial(self.one_time_submit, self.timer)

    def one_time_submit(self, record: Callable[[Any], None]) -> None:
        """Record commands with ``record(cb)``, submit them alone and wait (setup and read-back work)."""
        info = vk.VkCommandBufferAllocateInfo(commandPool=self.pool, level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, commandBufferCount=1)
        cb = vk.vkAllocateCommandBuffers(self.ctx.device, info)[0]
        fence = vk.vkCreateFence(self.ctx.device, vk.VkFenceCreateInfo(), None)
        try:
            vk.vkBeginCommandBuffer(cb, vk.VkCommandBufferBeginInfo(flags=vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT))
            BarrierBatch(memory=[memory_barrier(*FULL_BARRIER)]).record(cb)
            record(cb)
            BarrierBatch(memory=[memory_barrier(*FULL_BARRIER)]).record(cb)
            vk.vkEndCommandBuffer(cb)
            vk.vkQueueSubmit2(self.ctx.queue, 1, [vk.VkSubmitInfo2(pCommandBufferInfos=[vk.VkCommandBufferSubmitInfo(commandBuffer=cb)])], fence)
            result = vk.lib.vkWaitForFences(self.ctx.device, 1, [fence], vk.VK_TRUE, 2**63 - 1)
            if result != vk.VK_SUCCESS:
                raise DeviceError(f"a setup submission failed (VkResult {result})")
        finally:
            vk.vkDestroyFence(self.ctx.device, fence, None)
            vk.vkFreeCommandBuffers(self.ctx.device, self.pool, 1, [cb])

    def submit(self, frame: Frame, cb: Any, slot: int) -> None:
        """Submit ``cb`` (a frame) signalling the fence of ``slot``, which must be idle."""
        fence = self.fences[slot]
        vk.vkResetFences(self.ctx.device, 1, [fence])
        cb_info = vk.VkCommandBufferSubmitInfo(commandBuffer=cb)
        boundary = self._frame_boundary(frame)
        submit = vk.VkSubmitInfo2(pNext=boundary if boundary is not None else vk.ffi.NULL, pCommandBufferInfos=[cb_info])
        try:
            with validation.at(f"frame {frame.frame_id}"):
                vk.vkQueueSubmit2(self.ctx.queue, 1, [submit], fence)
        except vk.VkError as exc:
            raise DeviceError(f"frame {frame.frame_id}: vkQueueSubmit2 failed ({type(exc).__name__})") from None
        validation.check()

    def _frame_boundary(self, frame: Frame) -> Any:
        """A VkFrameBoundaryEXT naming the captured buffers, for tools like RenderDoc (when the device has it)."""
        if frame.boundary is None or not self.ctx.has_extension(FRAME_BOUNDARY_EXT):
            return None
        handles = [r.handle for u in frame.capture if isinstance(r := self._resources[u], DeviceBuffer)]
        return vk.VkFrameBoundaryEXT(
            flags=vk.VK_FRAME_BOUNDARY_FRAME_END_BIT_EXT, frameID=frame.frame_id, pBuffers=handles or None,
        )

    def wait(self, frame: Frame, slot: int, timeout_ns: int = 2**63 - 1) -> None:
        """Block until the submission of ``slot`` finished. Raises :class:`DeviceError` on device loss or timeout."""
        result = vk.lib.vkWaitForFences(self.ctx.device, 1, [self.fences[slot]], vk.VK_TRUE, timeout_ns)
        if result == vk.VK_TIMEOUT:
            self.ctx.mark_hung()
            raise FrameTimeout(
                f"frame {frame.frame_id} did not finish within {timeout_ns / 1e9:g} s (--timeout): a hung or very slow "
                "shader; the frames before it completed"
            )
        if result != vk.VK_SUCCESS:
            raise DeviceError(f"frame {frame.frame_id}: the device was lost or failed (VkResult {result})")

    def dispatch_timings(self, frame: Frame) -> list[tuple[str, str, int, int]]:
        """(name, kind, begin tick, end tick) of each dispatch and graph dispatch of ``frame``'s last
        execution (named by shader or graph uid, kinds as the reference runner's profiling file)."""
        if self.query_pool is None:
            return []
        out = []
        for c in frame.commands:
            d = self.dispatches.get(c.index)
            if d is not None:
                base, name, kind = d.query_base, d.pipeline.shader_uid, "ComputeDispatch"
            elif c.index in self.graph_queries:
                base, name, kind = self.graph_queries[c.index], c.graph_ref, "DataGraphDispatch"  # type: ignore[attr-defined]
            else:
                continue
            data = vk.ffi.new("uint64_t[2]")
            vk.lib.vkGetQueryPoolResults(
                self.ctx.device, self.query_pool, base, 2, 16, data, 8,
                vk.VK_QUERY_RESULT_64_BIT | vk.VK_QUERY_RESULT_WAIT_BIT,
            )
            out.append((name, kind, int(data[0]), int(data[1])))
        return out

    def restore(self, uid: str, data: bytes | memoryview) -> None:
        """Overwrite the content of a resource (replay from a checkpoint). Sizes must match."""
        resource = self._resources[uid]
        if len(data) != resource.snapshot_size:
            raise DeviceError(f"cannot restore '{uid}': {len(data)} bytes for a resource of {resource.snapshot_size}")
        if isinstance(resource, DeviceBuffer) and resource.mapped:
            resource.restore(data)
            return
        staging, alloc = staging_buffer(self.ctx, len(data))
        try:
            assert alloc.view is not None
            alloc.view[: len(data)] = data
            self.one_time_submit(lambda cb: resource.record_restore(cb, staging, 0))
        finally:
            free_staging(self.ctx, staging, alloc)

    def unwritable_resources(self) -> frozenset[str]:
        """The data resources no command of the scenario can write (see :func:`unwritable_resources`)."""
        return unwritable_resources(self.scenario, self.read_only_bindings)

    def contents(self, uids: Iterable[str], *, live: frozenset[str] = frozenset()) -> dict[str, bytes | memoryview]:
        """The current content of several resources in their snapshot layout. Buffers the host maps
        directly come from the mapping: as a copy, or for those in ``live`` as the mapping itself
        (valid while the session is open). All others come back as copies, in one submission through
        one staging buffer (one allocation, one wait, however many resources)."""
        uids = list(uids)
        resources = self._resources
        out: dict[str, bytes | memoryview] = {}
        device_side = []
        for uid in uids:
            resource = resources[uid]
            if isinstance(resource, DeviceBuffer) and resource.mapped:
                out[uid] = resource.view if uid in live else bytes(resource.view)
            else:
                device_side.append((uid, resource.snapshot_size, None))
        if device_side:
            layout = build_layout(device_side, align_of={u: getattr(resources[u], "snapshot_alignment", 1)
                                                          for u, _, _ in device_side})
            staging, alloc = staging_buffer(self.ctx, layout.size)

            def record_copies(cb: Any) -> None:
                for item in layout.items:
                    resources[item.uid].record_snapshot(cb, staging, item.offset)

            try:
                self.one_time_submit(record_copies)
                assert alloc.view is not None
                out.update((i.uid, bytes(alloc.view[i.offset : i.offset + i.size])) for i in layout.items)
            finally:
                free_staging(self.ctx, staging, alloc)
        return {uid: out[uid] for uid in uids}

    def write_outputs(self, output_dir: Path | None) -> list[Path]:
        """Write every ``dst`` (atomically, each through a temporary name); returns the paths written."""
        written = []
        for resource, path in self._resources.outputs(output_dir):
            with self.timer.measure("Save Results", f"Save Resource: {resource.uid}"):
                resource.write_dst(path, self.one_time_submit)
            written.append(path)
        return written

    def close(self) -> None:
        dev = self.ctx.device
        if dev is None or getattr(self.ctx, "hung", False):
            return  # a hung device is left to the process's exit: destroying would wait forever
        vk.vkDeviceWaitIdle(dev)
        if self.query_pool is not None:
            vk.vkDestroyQueryPool(dev, self.query_pool, None)
            self.query_pool = None
        if self.descriptor_pool is not None:
            vk.vkDestroyDescriptorPool(dev, self.descriptor_pool, None)
            self.descriptor_pool = None
        for fence in self.fences:
            vk.vkDestroyFence(dev, fence, None)
        self.fences = []
        self.ring.destroy()
        if self.pool is not None:
            vk.vkDestroyCommandPool(dev, self.pool, None)
            self.pool = None
        for graph in {id(g): g for g in self.graphs.values()}.values():
            graph.destroy()
        self.graphs = {}
        for part in (self.factory, self.cache, self.resources):
            if part is not None:
                part.destroy()
        self.factory = self.cache = self.resources = None
