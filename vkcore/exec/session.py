"""A :class:`Session` holds every Vulkan object of one scenario on one device.

Building a session validates what only the device can tell, creates resources, pipelines and descriptor
sets; each frame is recorded into a command buffer once, on first use. Running a frame is then a
single ``vkQueueSubmit2`` on a ring of fences; ``--repeat`` re-submits the same command buffers.
The asynchronous driver in :mod:`vkcore.exec.executor` sequences frames; this module never blocks on
anything but the GPU.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Hashable, Iterable

import vulkan as vk

from ..device import validation
from ..resources.buffers import DeviceBuffer
from ..commands import PreparedDispatch, by_kind, kind_of
from ..commands.base import command_key
from ..commands.base import AfterSegment
from ..device.context import FRAME_BOUNDARY_EXT, VulkanContext
from ..errors import DeviceError
from ..commands.limits import refuse_beyond_limits
from ..scenario.npyio import read_header
from ..shaders.pipelines import PipelineCache, PipelineFactory
from ..device.debug_labels import DebugLabels, command_label
from ..device.renderdoc import RenderDoc
from .plan import Frame, Plan, unwritable_resources
from .resource_set import ResourceSet
from ..resources.buffers import free_staging, staging_buffer
from ..scenario.model import RawData, Shader
from ..shaders.bindings import LayoutBinding, image_usage_needs
from ..shaders.compile import SpirvModule, load_shader
from ..resources.staging import CaptureItem, CaptureLayout, StagingRing, StagingSlot, build_layout
from ..device.sync import FULL_BARRIER, BarrierBatch, memory_barrier
from .timing import HostTimer

if TYPE_CHECKING:  # the graph machinery (cffi declarations, numpy) loads only for graph scenarios
    from ..graphs.dispatch import PreparedGraph

@dataclass(frozen=True)
class SessionOptions:
    profiling: bool = False
    pipeline_cache_path: Path | None = None
    clear_pipeline_cache: bool = False
    fail_on_pipeline_cache_miss: bool = False
    readable_graph_sessions: bool = False  # graph session memory host-visible (--session-memory-dump-dir)
    debug_labels: bool = False  # --enable-gpu-debug-markers (see vkcore.device.debug_labels)
    renderdoc_captures: bool = False  # --capture-frame: each frame a RenderDoc capture (vkcore.device.renderdoc)


class FrameTimeout(DeviceError):
    """A frame ran longer than ``--timeout``."""


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
        self.warned_features: set[tuple[str, str]] = set()  # (shader uid, feature) said once (see reflect_shader)
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
        self.descriptor_pools: list[Any] = []  # made by the command kinds, destroyed by close()
        self.draws: dict[int, Any] = {}  # by command index: dispatch_fragment's prepared draws
        self.optical_flows: dict[int, Any] = {}  # by command index: dispatch_optical_flow's prepared pipelines
        self.owned: list[Any] = []  # what the command kinds made that has a destroy(), destroyed by close()
        self._command_buffers: dict[Hashable, Any] = {}
        self.labels = DebugLabels.load(ctx) if options.debug_labels else None
        self.renderdoc = RenderDoc.attach(ctx.instance) if options.renderdoc_captures else None
        try:
            for kind, commands in by_kind(self.scenario.commands):
                kind.resolve(self, commands)
            self.resources = ResourceSet(ctx, self.scenario, image_usage=image_usage_needs(
                b for layout in self.layouts.values() for b in layout))
            if self.labels is not None:
                self._name_resources(self.labels)
            with self._cache_span("Load Pipeline Cache", "Load Pipeline Cache."):
                self.cache = PipelineCache(
                    ctx,
                    options.pipeline_cache_path,
                    clear=options.clear_pipeline_cache,
                    fail_on_miss=options.fail_on_pipeline_cache_miss,
                )
            self.factory = PipelineFactory(ctx, self.cache)
            self.pool = vk.vkCreateCommandPool(ctx.device, vk.VkCommandPoolCreateInfo(queueFamilyIndex=ctx.queue_family), None)
            for kind, commands in by_kind(self.scenario.commands):
                kind.prepare(self, commands)
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

    def reserve_queries(self, count: int) -> int:
        """The first of ``count`` timestamp queries for a command (profiling); the pool is made after
        every command is prepared."""
        first = self.query_count
        self.query_count += count
        return first

    def raw(self, uid: str) -> bytes:
        """The payload of raw_data ``uid`` (push constants), read once."""
        if uid not in self.raw_data:
            spec = self.scenario.by_uid[uid]
            assert isinstance(spec, RawData)
            path = self.scenario.src_path(spec.src)
            header = read_header(path)
            with open(path, "rb") as f:
                f.seek(header.data_offset)
                self.raw_data[uid] = f.read(header.nbytes)
        return self.raw_data[uid]

    def module(self, spec: Shader) -> SpirvModule:
        """The SPIR-V of shader ``spec``, loaded (GLSL compiled) once."""
        if spec.uid not in self.modules:
            with self.timer.measure("Scenario Setup", f"Load Shader: {spec.uid}"):
                self.modules[spec.uid] = load_shader(self.scenario, spec)
        return self.modules[spec.uid]

    def _create_query_pool(self) -> None:
        """Two timestamps per dispatch and per graph dispatch, when profiling."""
        if self.query_count:
            info = vk.VkQueryPoolCreateInfo(queryType=vk.VK_QUERY_TYPE_TIMESTAMP, queryCount=self.query_count)
            self.query_pool = vk.vkCreateQueryPool(self.ctx.device, info, None)

    def pipeline_layouts(self) -> list[dict[str, Any]]:
        """Each pipeline layout the shaders decided (JSON-ready, for traces): the command, its last shader
        (compute or fragment) and that shader's stage, the push constant size, and every binding's
        descriptor type."""
        out = []
        for index, layout in sorted(self.layouts.items()):
            cmd = self.scenario.commands[index]
            specs = [self.scenario.by_uid[uid] for uid in kind_of(cmd).shaders(cmd)]
            if not specs:  # no shader decided it (an optical-flow node's images)
                continue
            out.append({"command": index, "shader": specs[-1].uid, "stage": specs[-1].stage,  # type: ignore[union-attr]
                        "push_constants_size": max(s.push_constants_size for s in specs),  # type: ignore[union-attr]
                        "bindings": [b.describe() for b in layout]})
        return out

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
        share a command buffer; with timestamp queries or debug labels (which name the frame and its
        commands) each frame has its own."""
        if self.query_pool is not None or self.labels is not None:
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
        labels = self.labels
        if labels is not None:
            labels.begin(cb, f"frame {frame.frame_id}")
        # Order this frame after everything submitted before it (frames are pipelined).
        BarrierBatch(memory=[memory_barrier(*FULL_BARRIER)]).record(cb)
        for c in frame.commands:
            timing = kind_of(c).timing(self, c)
            if timing is not None:
                vk.vkCmdResetQueryPool(cb, self.query_pool, timing[0], 2)
        for cmd in frame.commands:
            if labels is not None:
                labels.begin(cb, command_label(cmd.place, kind_of(cmd).name(cmd)))
            with validation.at(cmd.place):
                self._record_command(cb, cmd, layout, slot)
            if labels is not None:
                labels.end(cb)
        if slot is not None:
            self._record_copies(cb, layout.at(None), slot)
        if labels is not None:
            labels.end(cb)

    def _name_resources(self, labels: DebugLabels) -> None:
        """Buffers and images named by their uids, for capture tools (tensors are the emulation layer's)."""
        kinds = {"buffer": vk.VK_OBJECT_TYPE_BUFFER, "image": vk.VK_OBJECT_TYPE_IMAGE}
        for resource in self._resources:
            object_type = kinds.get(getattr(resource, "kind", ""))
            handle = getattr(resource, "handle", None)
            if object_type is not None and handle is not None:
                labels.name(object_type, handle, resource.uid)

    def _record_command(self, cb: Any, cmd: Any, layout: CaptureLayout, slot: StagingSlot | None) -> None:
        """Record one command, with the snapshots taken right after it (and after each of its segments)
        for dispatch-level captures."""
        after: AfterSegment | None = None
        if slot is not None:
            index = cmd.index
            after = lambda cb_, segment: self._record_copies(cb_, layout.at(index, segment), slot)  # noqa: E731
        kind_of(cmd).record(self, cb, cmd, after)
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
        if self.renderdoc is not None:
            self.renderdoc.start()
        try:
            with validation.at(f"frame {frame.frame_id}"):
                vk.vkQueueSubmit2(self.ctx.queue, 1, [submit], fence)
        except vk.VkError as exc:
            raise DeviceError(f"frame {frame.frame_id}: vkQueueSubmit2 failed ({type(exc).__name__})") from None
        finally:
            if self.renderdoc is not None:
                self.renderdoc.end()
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
            timing = kind_of(c).timing(self, c)
            if timing is None:
                continue
            base, name, kind = timing
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
            layout = build_layout(device_side, align_of={u: resources[u].snapshot_alignment
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

    def _cache_span(self, phase: str, name: str) -> Any:
        """A host timing of the pipeline cache's file work, taken only when there is a cache file
        (the reference's ``--perf-counters-dump-path`` has these phases only then)."""
        if self.options.pipeline_cache_path is None:
            return contextlib.nullcontext()
        return self.timer.measure(phase, name)

    def save_pipeline_cache(self, counter: str = "Save Pipeline Cache") -> None:
        """Write the pipeline cache's file, if it has one (see :meth:`vkcore.shaders.pipelines.PipelineCache.save`),
        timed as ``counter`` (the reference's names: ``Save Pipeline Cache (setup)``, then ``Save Pipeline Cache``)."""
        assert self.cache is not None
        with self._cache_span("Save Pipeline Cache", counter):
            self.cache.save()

    def close(self) -> None:
        dev = self.ctx.device
        if dev is None or getattr(self.ctx, "hung", False):
            return  # a hung device is left to the process's exit: destroying would wait forever
        vk.vkDeviceWaitIdle(dev)
        if self.query_pool is not None:
            vk.vkDestroyQueryPool(dev, self.query_pool, None)
            self.query_pool = None
        for pool in self.descriptor_pools:
            vk.vkDestroyDescriptorPool(dev, pool, None)
        self.descriptor_pools = []
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
        for part in reversed(self.owned):
            part.destroy()
        self.owned = []
        for part in (self.factory, self.cache, self.resources):
            if part is not None:
                part.destroy()
        self.factory = self.cache = self.resources = None
