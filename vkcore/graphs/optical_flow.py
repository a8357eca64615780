"""VK_ARM_data_graph_optical_flow from Python: what a device supports, and optical-flow pipelines.

An optical-flow pipeline is a data graph pipeline of one node, no SPIR-V: its images (search, template,
optional hint; flow vectors, optional cost) are ordinary image descriptors at (set, binding) pairs the
node's connections name, each in layout ``GENERAL`` at dispatch. The session gets the optical-flow cache
bind point (``OPTICAL_FLOW_CACHE``, as ARM's reference runner creates it), which carries temporal hints
from one dispatch to the next; it is bound with the rest of the session's memory by
:class:`vkcore.graphs.data_graph.GraphSession`.

Guarantees: :func:`query_support` never raises (``None`` when the device cannot say);
:meth:`OpticalFlowPipeline.create` makes no Vulkan call until its arguments are checked, and destroys
what it made when a call fails.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import vulkan as vk

from ..device import arm_ffi, graph_ffi
from ..device import optical_flow_ffi as off
from ..device.arm_ffi import ffi
from ..device.context import OPTICAL_FLOW_EXT, VulkanContext
from ..errors import DeviceError
from ..resources.formats import FORMATS
from .data_graph import BIND_POINT, GraphApi, GraphSession, _result_name

EXTENSION = OPTICAL_FLOW_EXT


@dataclass(frozen=True)
class OpticalFlowSupport:
    """What one queue family of a device offers for optical flow."""

    output_grid_sizes: int  # VkDataGraphOpticalFlowGridSizeFlagsARM
    hint_grid_sizes: int
    hint: bool
    cost: bool
    min_extent: tuple[int, int]
    max_extent: tuple[int, int]
    formats: dict[str, tuple[int, ...]]  # usage name (input, output, hint, cost) -> VkFormat values

    def describe(self) -> dict[str, Any]:
        """JSON-ready, for ``vkcap devices``."""
        names = {f.vk_value: f.name for f in FORMATS.values()}
        grids = [name for name, bit in off.GRID_SIZE.items() if self.output_grid_sizes & bit]
        return {"grid_sizes": grids, "hint": self.hint, "cost": self.cost,
                "min_extent": list(self.min_extent), "max_extent": list(self.max_extent),
                "formats": {usage: [names.get(f, str(f)) for f in fmts] for usage, fmts in self.formats.items()}}


def _optical_flow_operation(api: GraphApi, family: int) -> Any:
    """The queue family's ``VkQueueFamilyDataGraphPropertiesARM`` for optical flow, or ``None``."""
    fn = api.vkGetPhysicalDeviceQueueFamilyDataGraphPropertiesARM
    if fn is None:
        return None
    count = ffi.new("uint32_t *")
    if fn(api.ctx.physical, family, count, ffi.NULL) != vk.VK_SUCCESS or not count[0]:
        return None
    props = graph_ffi.new_array("VkQueueFamilyDataGraphPropertiesARM", count[0])
    if fn(api.ctx.physical, family, count, props) not in (vk.VK_SUCCESS, vk.VK_INCOMPLETE):
        return None
    for i in range(count[0]):
        op = props[i].operation
        if op.operationType == off.OPERATION_TYPE_OPTICAL_FLOW or ffi.string(op.name) == off.OPERATION_NAME.encode():
            found = graph_ffi.new("VkQueueFamilyDataGraphPropertiesARM")
            ffi.memmove(found, props + i, ffi.sizeof("VkQueueFamilyDataGraphPropertiesARM"))
            return found
    return None


def query_support(ctx: VulkanContext) -> OpticalFlowSupport | None:
    """Optical flow on ``ctx``'s queue family, or ``None`` when the extension is not enabled or the
    queries are missing or fail."""
    if EXTENSION not in getattr(ctx, "extensions", ()):
        return None
    try:
        api = GraphApi.load(ctx)
    except DeviceError:
        return None
    fns = {}
    for name in off.INSTANCE_FUNCTIONS:
        raw = vk.lib.vkGetInstanceProcAddr(ctx.instance, name.encode())
        if raw == vk.ffi.NULL:
            return None
        fns[name] = ffi.cast(f"PFN_{name}", raw)
    operation = _optical_flow_operation(api, ctx.queue_family)
    if operation is None:
        return None
    props = off.new("VkQueueFamilyDataGraphOpticalFlowPropertiesARM")
    result = fns["vkGetPhysicalDeviceQueueFamilyDataGraphEngineOperationPropertiesARM"](
        ctx.physical, ctx.queue_family, operation, props)
    if result != vk.VK_SUCCESS:
        return None
    formats: dict[str, tuple[int, ...]] = {}
    query = fns["vkGetPhysicalDeviceQueueFamilyDataGraphOpticalFlowImageFormatsARM"]
    for usage, bit in off.IMAGE_USAGE.items():
        info = off.new("VkDataGraphOpticalFlowImageFormatInfoARM", usage=bit)
        count = ffi.new("uint32_t *")
        if query(ctx.physical, ctx.queue_family, operation, info, count, ffi.NULL) != vk.VK_SUCCESS:
            return None
        arr = graph_ffi.new_array("VkDataGraphOpticalFlowImageFormatPropertiesARM", count[0])
        for i in range(count[0]):
            arr[i].sType = off.STYPE_OF["VkDataGraphOpticalFlowImageFormatPropertiesARM"]
        if count[0] and query(ctx.physical, ctx.queue_family, operation, info, count, arr) not in (vk.VK_SUCCESS, vk.VK_INCOMPLETE):
            return None
        formats[usage] = tuple(int(arr[i].format) for i in range(count[0]))
    p = props[0]
    return OpticalFlowSupport(int(p.supportedOutputGridSizes), int(p.supportedHintGridSizes), bool(p.hintSupported),
                              bool(p.costSupported), (int(p.minWidth), int(p.minHeight)),
                              (int(p.maxWidth), int(p.maxHeight)), formats)


@dataclass(frozen=True)
class Connection:
    """One image of the node: its descriptor (set, binding, VkDescriptorType) and connection type name."""

    set: int
    binding: int
    descriptor_type: int
    connection: str  # a key of optical_flow_ffi.CONNECTION


@dataclass(frozen=True)
class OpticalFlowConfig:
    """What ``VkDataGraphPipelineOpticalFlowCreateInfoARM`` says."""

    width: int
    height: int
    image_format: int
    flow_vector_format: int
    cost_format: int  # 0: no cost output
    grid_size: int  # a GRID_SIZE bit
    hint_grid_size: int  # 0: no hint input
    performance_level: int


@dataclass
class OpticalFlowPipeline:
    """A pipeline layout, an optical-flow data graph pipeline over it and a session with its memory.

    :meth:`destroy` releases all of them. The descriptor set layouts are ``set_layouts[set]``.
    """

    api: GraphApi
    set_layouts: dict[int, Any]
    layout: Any
    handle: Any = None
    session: GraphSession | None = None
    create_seconds: float = 0.0
    _keep: list[Any] = field(default_factory=list, repr=False)

    @classmethod
    def create(cls, api: GraphApi, connections: Sequence[Connection], config: OpticalFlowConfig, *,
               pipeline_cache: Any = None, session_host_readable: bool = False) -> "OpticalFlowPipeline":
        """Create the layouts, the pipeline (with ``pipeline_cache``, a ``VkPipelineCache``, when given) and
        its session. Raises :class:`DeviceError` when a call fails."""
        kinds = [c.connection for c in connections]
        for needed in ("input", "reference", "flow_vector"):
            if kinds.count(needed) != 1:
                raise DeviceError(f"an optical-flow pipeline needs exactly one {needed} connection")
        device = api.device
        pipeline = cls(api, {}, None)
        try:
            for s in sorted({c.set for c in connections}):
                bindings = [vk.VkDescriptorSetLayoutBinding(binding=c.binding, descriptorType=c.descriptor_type,
                                                            descriptorCount=1, stageFlags=graph_ffi.SHADER_STAGE_ALL)
                            for c in sorted(connections, key=lambda c: c.binding) if c.set == s]
                pipeline.set_layouts[s] = vk.vkCreateDescriptorSetLayout(
                    device, vk.VkDescriptorSetLayoutCreateInfo(pBindings=bindings), None)
            # Sets between used ones get empty layouts: a pipeline layout's set layouts are numbered from 0.
            for s in range(max(pipeline.set_layouts) + 1):
                if s not in pipeline.set_layouts:
                    pipeline.set_layouts[s] = vk.vkCreateDescriptorSetLayout(
                        device, vk.VkDescriptorSetLayoutCreateInfo(), None)
            ordered = [pipeline.set_layouts[s] for s in range(len(pipeline.set_layouts))]
            pipeline.layout = vk.vkCreatePipelineLayout(device, vk.VkPipelineLayoutCreateInfo(pSetLayouts=ordered), None)
            pipeline._create_pipeline(connections, config, pipeline_cache)
            flags = off.SESSION_CREATE_OPTICAL_FLOW_CACHE_BIT
            pipeline.session = GraphSession.create(api, ffi.cast("VkPipeline", arm_ffi.handle_to_int(pipeline.handle)),
                                                   host_readable=session_host_readable, flags=flags)
        except BaseException:
            pipeline.destroy()
            raise
        return pipeline

    def _create_pipeline(self, connections: Sequence[Connection], config: OpticalFlowConfig, pipeline_cache: Any) -> None:
        n = len(connections)
        image_layout = off.new("VkDataGraphPipelineResourceInfoImageLayoutARM", layout=vk.VK_IMAGE_LAYOUT_GENERAL)
        infos = ffi.new("VkDataGraphPipelineResourceInfoARM[]", n)
        links = ffi.new("VkDataGraphPipelineSingleNodeConnectionARM[]", n)
        for k, c in enumerate(connections):
            infos[k].sType = graph_ffi.STYPE_OF["VkDataGraphPipelineResourceInfoARM"]
            infos[k].pNext = image_layout
            infos[k].descriptorSet, infos[k].binding, infos[k].arrayElement = c.set, c.binding, 0
            links[k].sType = off.STYPE_OF["VkDataGraphPipelineSingleNodeConnectionARM"]
            links[k].set, links[k].binding, links[k].connection = c.set, c.binding, off.CONNECTION[c.connection]
        flags = (off.CREATE_ENABLE_HINT if config.hint_grid_size else 0) | (off.CREATE_ENABLE_COST if config.cost_format else 0)
        flow = off.new("VkDataGraphPipelineOpticalFlowCreateInfoARM", width=config.width, height=config.height,
                       imageFormat=config.image_format, flowVectorFormat=config.flow_vector_format,
                       costFormat=config.cost_format, outputGridSize=config.grid_size,
                       hintGridSize=config.hint_grid_size, performanceLevel=config.performance_level, flags=flags)
        node = off.new("VkDataGraphPipelineSingleNodeCreateInfoARM", pNext=flow, nodeType=off.NODE_TYPE_OPTICAL_FLOW,
                       connectionCount=n, pConnections=links)
        create = graph_ffi.new("VkDataGraphPipelineCreateInfoARM", pNext=node, flags=0,
                               layout=self.layout,
                               resourceInfoCount=n, pResourceInfos=infos)
        out = ffi.new("VkPipeline *")
        start = time.perf_counter()
        cache = ffi.NULL if pipeline_cache is None else ffi.cast("VkPipelineCache", arm_ffi.handle_to_int(pipeline_cache))
        result = self.api.vkCreateDataGraphPipelinesARM(self.api.device, ffi.NULL, cache, 1, create, ffi.NULL, out)
        self.create_seconds = time.perf_counter() - start
        if result != vk.VK_SUCCESS:
            raise DeviceError(f"vkCreateDataGraphPipelinesARM failed ({_result_name(result)}) for an optical-flow pipeline")
        self.handle = graph_ffi.to_vk_handle("VkPipeline", out[0])

    def record_dispatch(self, cb: Any, sets: dict[int, Any], execute_flags: int, mean_flow_hint: int) -> None:
        """Bind the pipeline and ``sets`` (set index -> handle) at the data graph bind point and dispatch
        with the execute flags and the mean-flow hint."""
        assert self.session is not None and self.session.handle is not None and self.handle is not None
        vk.vkCmdBindPipeline(cb, BIND_POINT, self.handle)
        for s, handle in sorted(sets.items()):
            vk.vkCmdBindDescriptorSets(cb, BIND_POINT, self.layout, s, 1, [handle], 0, None)
        hint = off.new("VkDataGraphPipelineOpticalFlowDispatchInfoARM", flags=execute_flags,
                       meanFlowL1NormHint=mean_flow_hint)
        info = graph_ffi.new("VkDataGraphPipelineDispatchInfoARM", pNext=hint, flags=0)
        self.api.vkCmdDispatchDataGraphARM(cb, self.session.handle, info)

    def destroy(self) -> None:
        """Destroy the session, the pipeline and the layouts. Idempotent."""
        device = self.api.device
        if self.session is not None:
            self.session.destroy()
            self.session = None
        if self.handle is not None:
            vk.vkDestroyPipeline(device, self.handle, None)
            self.handle = None
        if self.layout is not None:
            vk.vkDestroyPipelineLayout(device, self.layout, None)
            self.layout = None
        for handle in self.set_layouts.values():
            vk.vkDestroyDescriptorSetLayout(device, handle, None)
        self.set_layouts = {}
