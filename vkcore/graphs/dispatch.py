"""``dispatch_graph``: a VGF file's segments prepared for one command, and recorded in order.

:meth:`PreparedGraph.create` builds, once per ``dispatch_graph`` (or ``dispatch_vgf``) command, everything
its execution needs: the scenario's tensors bound to the model's inputs and outputs, the model's
intermediate tensors, one data graph pipeline (with its session, memory and descriptor sets) per GRAPH
segment and one compute pipeline (with its descriptor sets, push constants and specialization constants)
per COMPUTE segment. :meth:`PreparedGraph.record` records the segments in order, with barriers between
them, and the command's implicit barrier at the end.

Guarantees:

- Everything that can be checked is checked before the first Vulkan call, and reported as one line that
  names the scenario file and the JSON place (:class:`~vkcore.errors.ScenarioError`, exit 2) or the VGF
  file and its table (:class:`~vkcore.graphs.vgf.VgfError`, exit 2): ARM's emulation layer aborts the whole
  process on a mismatch between a graph and its pipeline, so no mismatch may reach it. Checked: every model
  input and output is bound, once, to a scenario tensor of the same format, dims and byte size, at the
  set the model uses; no binding names something the model does not have; every resource a segment uses
  is a model input/output, an intermediate or (for graphs) a constant of a format vkcap can make a tensor
  of; every graph module's SPIR-V declares exactly what its segment describes (resource infos, graph
  constant ids, their types and shapes); every compute module has code (its own, or a substitution),
  an entry point of that name, every descriptor it declares provided by the segment (tensors of the
  element type and rank it declares), a workgroup size (after specialization) and a dispatch shape within
  the device's limits, and push constant data of exactly the size it declares (a module that reads push
  constants whose size nothing declares is refused: Vulkan leaves that undefined).
- The shader decides a compute segment's buffer bindings: a VGF buffer resource (descriptor type 6 or 7)
  is bound, per segment, as the uniform or storage buffer the segment's SPIR-V declares; the VGF's type is
  a hint (ARM's SDK writes 6 for storage buffers), and a binding it disagrees with gets a debug-level note.
  Refused, in one line: a tensor where the shader declares a buffer or another non-tensor descriptor, a
  buffer where it declares a tensor or an image.
- Matching of ``shader_substitutions[].target``, ``push_constants[].shader_target`` and
  ``specialization_constants_map[].shader_target`` is by **module name** (``graph_partition_1``), as ARM's
  reference runner does (0.11.0, measured); a target that names no compute module of the graph is an
  error (the reference ignores it silently). Substitutions are read from the graph resource (where the
  specification puts them) and, when the scenario model carries them, from the ``dispatch_graph`` command
  (where the reference reads them).
- The graph's ``push_constants_size`` (when > 0) is the size of every compute module's push constants, as
  in the reference; else a substituted shader's own ``push_constants_size``; else the segment's push
  constant ranges. A segment that declares ranges of another size is an error.
- Intermediates (INTERMEDIATE resources of the model) are this object's own: LINEAR, packed unless the VGF
  gives strides, usage SHADER | DATA_GRAPH | TRANSFER; the members of one alias group share one
  allocation. Each is a :class:`~vkcore.resources.tensor_resources.TensorResource`, so it can be snapshotted like a
  scenario tensor (named ``<graph uid>/intermediate_<resource index>``).
- Between two segments: one ``vkCmdPipelineBarrier2`` with a memory barrier from the producer's stage and
  writes (DATA_GRAPH or COMPUTE_SHADER) to the consumer's stage, reads and writes, and a tensor barrier on
  each tensor the producer writes. After the last segment: the command's implicit barrier when
  ``implicit_barrier`` is true (the same one ``dispatch_compute`` records).
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, NamedTuple

import vulkan as vk

from ..device import arm_ffi, memory
from ..resources import tensors
from ..device.context import VulkanContext
from ..errors import DeviceError, ScenarioError, UnsupportedDeviceFeature, VkcapError
from .data_graph import (
    DATA_GRAPH_USAGE,
    DataGraphPipeline,
    GraphApi,
    GraphConstant,
    GraphDescriptorSets,
    GraphLayout,
    GraphResource,
    SpirvTensorType,
    pipeline_problems,
    scan_graph_module,
)
from ..outputs import write_atomic
from ..paths import cache_root
from ..shaders.pipelines import ComputePipeline, PipelineFactory
from ..resources.base import MemoryRequirements
from ..scenario.model import Buffer, DispatchGraph, DispatchSpirvGraph, Graph, Scenario, Shader, SpecializationConstant, Tensor
from ..shaders.compile import SpirvModule, compile_glsl, load_shader
from ..shaders.spirv import KIND_TEXT, SpirvError, reflect
from ..device.sync import (
    ACCESS_2_DATA_GRAPH_READ_BIT_ARM,
    ACCESS_2_DATA_GRAPH_WRITE_BIT_ARM,
    PIPELINE_STAGE_2_DATA_GRAPH_BIT_ARM,
    implicit_barrier,
)
from ..resources.tensor_resources import TensorResource
from ..resources.buffers import DeviceBuffer
from ..resources.tensors import TENSOR_FORMATS, DeviceTensor, TensorBarrier, TensorDescription
from .vgf import check_graph_module, format_name
from .vgf import (
    CodeKind,
    Module,
    ModuleType,
    Resource as VgfResource,
    ResourceCategory,
    Segment,
    SequenceBinding,
    VgfError,
    VgfFile,
    descriptor_type_name,
    read_vgf,
)

__all__ = [
    "PreparedGraph", "SegmentWrites", "graph_bound_tensors", "graph_commands", "INTERMEDIATE_USAGE",
    "CONSTANT_USAGE", "DATA_GRAPH_USAGE", "compute_module_code",
]

INTERMEDIATE_USAGE = tensors.DEFAULT_USAGE | DATA_GRAPH_USAGE
CONSTANT_USAGE = DATA_GRAPH_USAGE
TENSOR_DESCRIPTOR = arm_ffi.DESCRIPTOR_TYPE_TENSOR_ARM
# The buffer descriptor types a VGF resource may have, as the reference runner maps them (VkDescriptorType).
BUFFER_DESCRIPTORS = {vk.VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER: "uniform_buffer", vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER: "storage_buffer"}

# Stage, read access and write access of each kind of segment (as the reference runner's barriers).
_STAGE = {ModuleType.GRAPH: PIPELINE_STAGE_2_DATA_GRAPH_BIT_ARM, ModuleType.COMPUTE: vk.VK_PIPELINE_STAGE_2_COMPUTE_SHADER_BIT}
_READ = {ModuleType.GRAPH: ACCESS_2_DATA_GRAPH_READ_BIT_ARM, ModuleType.COMPUTE: vk.VK_ACCESS_2_SHADER_READ_BIT}
_WRITE = {ModuleType.GRAPH: ACCESS_2_DATA_GRAPH_WRITE_BIT_ARM, ModuleType.COMPUTE: vk.VK_ACCESS_2_SHADER_WRITE_BIT}

_OP_ENTRY_POINT = 15
_EXECUTION_MODEL_GL_COMPUTE = 5
_OP_VARIABLE = 59
_STORAGE_CLASS_PUSH_CONSTANT = 9

SegmentCallback = Callable[[Any, int], None]

log = logging.getLogger("vkcap")


def _descriptor_contradiction(declared_kind: str, supplied: "_Bound") -> str | None:
    """What the segment gives a binding, when it contradicts the shader's declaration ``declared_kind``;
    ``None`` when the shader's declaration can be bound. The VGF's buffer descriptor type is a hint: a
    buffer is bound as the uniform or storage buffer the shader declares (ARM's SDK writes storage buffers
    with descriptor type 6, and the reference runner binds them as storage buffers). A tensor for a
    buffer, a buffer for a tensor or an image, are contradictions."""
    if supplied.is_buffer:
        return None if declared_kind in ("uniform_buffer", "storage_buffer") else "a buffer"
    return None if declared_kind == "tensor" else "a tensor"


class SegmentWrites(NamedTuple):
    """One segment, for capture: its index in the VGF's sequence, its name, its module's name, and what it
    writes (scenario uids for model outputs, intermediate names otherwise)."""

    index: int  # type: ignore[assignment]  # a field named index shadows tuple.index, as intended
    name: str
    module: str
    writes: tuple[str, ...]


def graph_commands(scenario: Scenario) -> list[Any]:
    """The commands that run data graphs: ``dispatch_graph`` (VGF) and ``dispatch_spirv_graph``."""
    return [c for c in scenario.commands if isinstance(c, (DispatchGraph, DispatchSpirvGraph))]


def graph_bound_tensors(scenario: Scenario) -> frozenset[str]:
    """The uids of the resources bound by any graph command: the tensors the resource set must create
    with ``TENSOR_USAGE_DATA_GRAPH_BIT_ARM`` (``TensorResource.create(..., extra_usage=DATA_GRAPH_USAGE)``)."""
    return frozenset(b.resource_ref for c in graph_commands(scenario) for b in c.bindings)


def _command_place(scenario: Scenario, command: DispatchGraph) -> str:
    """``commands[i].dispatch_graph``, or ``commands[i].dispatch_vgf`` where the file spells it so."""
    key = command.KIND
    try:
        item = scenario.document["commands"][command.index]
        if isinstance(item, dict) and len(item) == 1:
            key = next(iter(item))
    except (KeyError, IndexError, TypeError, AttributeError):
        pass
    return f"commands[{command.index}].{key}"


def _shape(dims: Iterable[int]) -> str:
    return str(list(dims))


def _format_name(value: int) -> str:
    t = TENSOR_FORMATS.get(value)
    if t is not None:
        return t.name

    return format_name(value) or f"VkFormat {value}"


def _describe(r: VgfResource) -> str:
    return f"{_format_name(r.format)} {_shape(r.shape)}"


# ---------------------------------------------------------------------------------------------------------
# What a SPIR-V compute module declares (entry points; tensor bindings come from graphs.scan_graph_module)


@dataclass(frozen=True)
class _ComputeInfo:
    entry_points: tuple[str, ...]  # GLCompute entry point names
    push_constants: bool  # whether the module declares a push constant block


def _scan_compute(code: bytes) -> _ComputeInfo | None:
    """What a SPIR-V compute module declares (``None``: not a SPIR-V binary)."""
    if len(code) < 20 or len(code) % 4:
        return None
    (magic,) = struct.unpack_from("<I", code)
    if magic == 0x07230203:
        order = "<"
    elif struct.unpack_from(">I", code)[0] == 0x07230203:
        order = ">"
    else:
        return None
    words = struct.unpack(f"{order}{len(code) // 4}I", code)
    names: list[str] = []
    push = False
    i = 5
    while i < len(words):
        count, opcode = words[i] >> 16, words[i] & 0xFFFF
        if count == 0 or i + count > len(words):
            return None
        if opcode == _OP_ENTRY_POINT and count >= 4 and words[i + 1] == _EXECUTION_MODEL_GL_COMPUTE:
            raw = struct.pack(f"<{count - 3}I", *words[i + 3 : i + count])
            names.append(raw.split(b"\0", 1)[0].decode("utf-8", "replace"))
        elif opcode == _OP_VARIABLE and count >= 4 and words[i + 3] == _STORAGE_CLASS_PUSH_CONSTANT:
            push = True
        i += count
    return _ComputeInfo(tuple(names), push)


def _tensor_type_problem(where: str, description: TensorDescription, declared: SpirvTensorType | None) -> str | None:
    if declared is None:
        return f"{where} is not a tensor in the shader"
    element = TENSOR_FORMATS[description.format]
    kind = "float" if element.dtype.startswith("float") else "bool" if element.dtype == "bool" else "int"
    if declared.kind != "?" and (declared.kind, declared.bits) != (kind, element.size * 8):
        return f"{where}: the shader declares {declared} but the tensor is {element.name}"
    if declared.rank is not None and declared.rank != len(description.dims):
        return f"{where}: the shader declares a rank {declared.rank} tensor but the tensor has dims {list(description.dims)}"
    return None


# ---------------------------------------------------------------------------------------------------------
# The prepared command


@dataclass
class _Bound:
    """What a model resource (by index in the resource table) is on the device: a tensor, or a buffer
    (VGF descriptor types 6 and 7, uniform and storage buffers, in compute segments only)."""

    resource_index: int
    name: str  # the scenario uid, or the intermediate's name
    resource: TensorResource | DeviceBuffer | None  # None until intermediates are created
    description: TensorDescription | None  # what the tensor is (or will be) created with; None for a buffer
    scenario: bool  # a scenario resource (True) or an intermediate of ours
    descriptor_type: int = TENSOR_DESCRIPTOR
    size: int = 0  # a buffer's bytes

    @property
    def is_buffer(self) -> bool:
        return self.descriptor_type in BUFFER_DESCRIPTORS


@dataclass
class _GraphStep:
    segment: Segment
    module: Module
    spirv: bytes
    resources: list[GraphResource]
    constants: list[GraphConstant]
    layout: GraphLayout | None = None
    pipeline: DataGraphPipeline | None = None
    sets: GraphDescriptorSets | None = None

    def record(self, cb: Any) -> None:
        assert self.pipeline is not None and self.sets is not None
        self.pipeline.record_dispatch(cb, self.sets)

    def destroy(self) -> None:
        if self.sets is not None:
            self.sets.destroy()
            self.sets = None
        if self.pipeline is not None:
            self.pipeline.destroy()
            self.pipeline = None
        if self.layout is not None:
            self.layout.destroy()
            self.layout = None


@dataclass
class _ComputeStep:
    segment: Segment
    module: Module
    spirv: SpirvModule
    spec: Shader  # entry, push constant size and specialization constants the pipeline is built with
    push_data: bytes
    groups: tuple[int, int, int]
    signature: tuple[tuple[int, tuple[tuple[int, int], ...]], ...]
    descriptor_types: dict[tuple[int, int], int]  # (set, binding) -> what it is bound as: the shader's declaration
    pipeline: ComputePipeline | None = None
    sets: dict[int, Any] = field(default_factory=dict)

    def record(self, cb: Any) -> None:
        p = self.pipeline
        assert p is not None
        vk.vkCmdBindPipeline(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, p.pipeline)
        for s, handle in sorted(self.sets.items()):
            vk.vkCmdBindDescriptorSets(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, s, 1, [handle], 0, None)
        if self.push_data:
            vk.vkCmdPushConstants(cb, p.layout, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0, len(self.push_data),
                                  vk.ffi.from_buffer(self.push_data))
        vk.vkCmdDispatch(cb, *self.groups)


@dataclass
class PreparedGraph:
    """One ``dispatch_graph`` command, ready to record. Create with :meth:`create`; :meth:`destroy` releases
    what it made (compute pipelines stay the :class:`~vkcore.shaders.pipelines.PipelineFactory`'s)."""

    ctx: VulkanContext
    scenario: Scenario
    command: DispatchGraph
    graph: Graph
    vgf: VgfFile
    bound: dict[int, _Bound]  # model resource index -> tensor or buffer
    steps: list[_GraphStep | _ComputeStep]
    intermediates: dict[str, TensorResource | DeviceBuffer] = field(default_factory=dict)  # by name
    _allocations: list[memory.Allocation] = field(default_factory=list, repr=False)
    _descriptor_pool: Any = None

    # -- building ----------------------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        ctx: VulkanContext,
        scenario: Scenario,
        command: DispatchGraph,
        resources: Any,
        pipeline_factory: PipelineFactory,
        raw_data: Callable[[str], bytes],
        *,
        timer: Any = None,
        model: tuple[VgfFile, str, Graph] | None = None,
        readable_sessions: bool = False,
        load_module: Callable[[Shader], SpirvModule] | None = None,
    ) -> "PreparedGraph":
        """Check everything against the VGF, then create intermediates, pipelines and descriptor sets.
        ``model``: (the model, how messages name it, the graph it stands for) where no VGF file is read
        (``dispatch_spirv_graph``: see :mod:`vkcore.graphs.spirv_graph`). ``readable_sessions``: graph sessions
        in host-visible memory (see :mod:`vkcore.graphs.dumps`).

        ``resources`` is the session's :class:`~vkcore.exec.resource_set.ResourceSet` (``resources[uid]``);
        ``raw_data(uid)`` returns the bytes of a ``raw_data`` resource. ``timer``, when given, is a
        :class:`vkcore.exec.session.HostTimer`. ``load_module(spec)`` gives the SPIR-V of a scenario shader
        that a ``shader_substitutions`` entry names (a session's, which a recording stores with the
        other shaders' SPIR-V); by default it is loaded (GLSL compiled) here.

        Raises :class:`ScenarioError` / :class:`VgfError` (exit 2) for anything wrong with the scenario or
        the VGF, before any Vulkan call; :class:`DeviceError` when the device fails.
        """
        checker = _Checker(ctx, scenario, command, resources, raw_data, timer, model,
                           load_module or (lambda spec: load_shader(scenario, spec)))
        prepared = checker.check()
        try:
            prepared._build(pipeline_factory, timer, readable_sessions)
        except BaseException:
            prepared.destroy()
            raise
        return prepared

    def _build(self, factory: PipelineFactory, timer: Any, readable_sessions: bool) -> None:
        self._create_intermediates()
        graph_api = GraphApi.load(self.ctx) if any(isinstance(s, _GraphStep) for s in self.steps) else None
        for step in self.steps:
            span = timer.measure("Pipeline Setup", f"Create Pipeline: {step.module.name}") if timer is not None else None
            with span or contextlib.nullcontext():
                if isinstance(step, _GraphStep):
                    assert graph_api is not None
                    self._build_graph_step(graph_api, step, readable_sessions, factory)
                else:
                    step.pipeline = factory.compute(step.spirv, step.spec, step.signature)
        self._allocate_compute_sets()

    def _tensor(self, resource_index: int) -> DeviceTensor:
        r = self.bound[resource_index].resource
        assert isinstance(r, TensorResource)
        return r.tensor

    def _create_intermediates(self) -> None:
        todo = [b for b in self.bound.values() if not b.scenario]
        if not todo:
            return
        api = tensors.TensorApi.load(self.ctx) if any(not b.is_buffer for b in todo) else None
        for b in todo:
            if b.is_buffer:
                b.resource = DeviceBuffer.create(self.ctx, Buffer(uid=b.name, index=self.graph.index, size=b.size))
                self.intermediates[b.name] = b.resource
                continue
            d = b.description
            assert d is not None and api is not None
            spec = Tensor(uid=b.name, index=self.graph.index, dims=d.dims, format=TENSOR_FORMATS[d.format].name,
                          shader_access="readwrite", tiling="LINEAR")
            b.resource = TensorResource.create(self.ctx, api, spec, d.strides, extra_usage=DATA_GRAPH_USAGE)
            self.intermediates[b.name] = b.resource
            if b.resource.tensor.description != d:  # the checks were made against ``d``
                raise DeviceError(f"intermediate '{b.name}': created as {b.resource.tensor.description}, expected {d}")
        # One allocation per alias group (a group holding a scenario tensor binds into its memory).
        groups: dict[Any, list[_Bound]] = {}
        for b in self.bound.values():
            alias = self.vgf.resources[b.resource_index].alias_group
            key = ("alias", alias) if alias is not None else ("own", b.resource_index)
            groups.setdefault(key, []).append(b)
        for key, members in sorted(groups.items(), key=lambda kv: str(kv[0])):
            mine = [m for m in members if not m.scenario]
            if not mine:
                continue
            theirs = [m for m in members if m.scenario]
            if theirs:
                host = theirs[0].resource
                assert host is not None
                placed = host.tensor if isinstance(host, TensorResource) else host
                assert placed.allocation is not None
                alloc, offset = placed.allocation, placed.offset
                for m in mine:
                    assert m.resource is not None
                    req = m.resource.requirements
                    if (not req.memoryTypeBits & (1 << alloc.type_index) or (req.alignment and offset % req.alignment)
                            or offset + req.size > alloc.size):
                        raise DeviceError(
                            f"intermediate '{m.name}' shares alias group {key[1]} with {host.kind} '{host.uid}', whose memory "
                            f"cannot hold it ({req.size} bytes at offset {offset} of {alloc.size}, memory type "
                            f"{alloc.type_index}, allowed types {req.memoryTypeBits:#x}, alignment {req.alignment})"
                        )
                    m.resource.bind(alloc, offset)
                continue
            size, align, bits = 0, 1, 0xFFFFFFFF
            for m in mine:
                assert m.resource is not None
                req = m.resource.requirements
                size, align, bits = max(size, req.size), max(align, req.alignment), bits & req.memoryTypeBits
            what = mine[0].name if len(mine) == 1 else f"alias group {key[1]} of graph '{self.graph.uid}'"
            if not bits:
                raise DeviceError(f"the intermediates of {what} accept no common memory type on this device")
            alloc = memory.allocate(self.ctx, MemoryRequirements(size, align, bits), size, host_access=False, what=what)
            self._allocations.append(alloc)
            for m in mine:
                assert m.resource is not None
                m.resource.bind(alloc, 0)

    def _build_graph_step(self, api: GraphApi, step: _GraphStep, readable_session: bool, factory: PipelineFactory) -> None:
        keys = {(ds.set_index, b.binding): 1 for ds in step.segment.descriptor_sets for b in ds.bindings}
        step.layout = GraphLayout(self.ctx, keys)
        step.pipeline = DataGraphPipeline.create(api, step.spirv, step.module.entry_point, step.layout, step.resources,
                                                 step.constants, session_host_readable=readable_session,
                                                 pipeline_cache=factory.cache.handle)
        factory.count_other(step.pipeline.cache_material(),
                            f"graph '{self.graph.uid}' segment '{step.segment.name}'")
        step.sets = step.layout.descriptor_sets({
            (ds.set_index, b.binding): self._tensor(b.resource_index)
            for ds in step.segment.descriptor_sets for b in ds.bindings
        })

    def _allocate_compute_sets(self) -> None:
        computes = [s for s in self.steps if isinstance(s, _ComputeStep) and s.signature]
        if not computes:
            return
        n_sets = sum(len(s.signature) for s in computes)
        counts: dict[int, int] = {}
        for step in computes:
            for _, bindings in step.signature:
                for _, descriptor_type in bindings:
                    counts[descriptor_type] = counts.get(descriptor_type, 0) + 1
        sizes = [vk.VkDescriptorPoolSize(type=t, descriptorCount=n) for t, n in sorted(counts.items())]
        self._descriptor_pool = vk.vkCreateDescriptorPool(
            self.ctx.device, vk.VkDescriptorPoolCreateInfo(maxSets=n_sets, pPoolSizes=sizes), None)
        writes: list[Any] = []
        buffer_writes: list[Any] = []
        for step in computes:
            assert step.pipeline is not None
            used = [s for s, _ in step.signature]
            handles = vk.vkAllocateDescriptorSets(self.ctx.device, vk.VkDescriptorSetAllocateInfo(
                descriptorPool=self._descriptor_pool, pSetLayouts=[step.pipeline.set_layouts[s] for s in used]))
            step.sets = dict(zip(used, handles))
            for ds in step.segment.descriptor_sets:
                for b in ds.bindings:
                    entry = self.bound[b.resource_index]
                    if entry.is_buffer:
                        assert isinstance(entry.resource, DeviceBuffer)
                        buffer_writes.append(entry.resource.descriptor(step.sets[ds.set_index], b.binding, None,
                                                                       step.descriptor_types[(ds.set_index, b.binding)]))
                    else:
                        writes.append(tensors.tensor_descriptor_write(step.sets[ds.set_index], b.binding,
                                                                      [self._tensor(b.resource_index)]))
        if writes:
            tensors.update_descriptor_sets(self.ctx, writes)
        if buffer_writes:
            vk.vkUpdateDescriptorSets(self.ctx.device, len(buffer_writes), [w.write for w in buffer_writes], 0, None)

    # -- what it does --------------------------------------------------------------------------------------

    @property
    def segments(self) -> list[SegmentWrites]:
        """Each segment in execution order: (index, name, module name, what it writes)."""
        out = []
        for step in self.steps:
            seg = step.segment
            writes = tuple(dict.fromkeys(self.bound[o.resource_index].name for o in seg.outputs if o.resource_index in self.bound))
            out.append(SegmentWrites(seg.index, seg.name, step.module.name, writes))
        return out

    @property
    def bindings(self) -> dict[str, str]:
        """Scenario uid -> model input/output name (``input_0``; ``binding N`` where the VGF has no names)."""
        names = {b.resource_index: (b.name or f"binding {b.binding}") for b in (*self.vgf.inputs, *self.vgf.outputs)}
        return {b.name: names.get(i, f"resource {i}") for i, b in self.bound.items() if b.scenario}

    def resource(self, name: str) -> TensorResource | DeviceBuffer:
        """A scenario tensor or buffer bound to the graph, or an intermediate, by the name :attr:`segments` uses."""
        for b in self.bound.values():
            if b.name == name and b.resource is not None:
                return b.resource
        raise KeyError(name)

    def _segment_barrier(self, cb: Any, previous: _GraphStep | _ComputeStep, following: _GraphStep | _ComputeStep) -> None:
        src, dst = previous.segment.type, following.segment.type
        mem = vk.VkMemoryBarrier2(srcStageMask=_STAGE[src], srcAccessMask=_WRITE[src],
                                  dstStageMask=_STAGE[dst], dstAccessMask=_READ[dst] | _WRITE[dst])
        written = {o.resource_index for o in previous.segment.outputs
                   if o.resource_index in self.bound and not self.bound[o.resource_index].is_buffer}  # buffers: ``mem``
        barriers = [TensorBarrier(self._tensor(i), _STAGE[src], _WRITE[src], _STAGE[dst], _READ[dst] | _WRITE[dst])
                    for i in sorted(written)]
        info = tensors.dependency_info(barriers, memory_barriers=[mem])
        vk.vkCmdPipelineBarrier2(cb, info.value)
        del info

    def record(self, cb: Any, *, after_segment: SegmentCallback | None = None,
               before_segment: SegmentCallback | None = None) -> None:
        """Record every segment in order into ``cb``, with barriers between segments and, when the command
        asks for it, the implicit barrier after the last one.

        ``before_segment(cb, i)`` / ``after_segment(cb, i)`` are called just before / just after segment
        ``i`` (its index in :attr:`segments`) is recorded, before the barrier to the next segment: a place
        for timestamps, or for snapshot copies of what the segment wrote (copies must bring their own
        barriers, as ``record_snapshot`` does).
        """
        for k, step in enumerate(self.steps):
            if k:
                self._segment_barrier(cb, self.steps[k - 1], step)
            if before_segment is not None:
                before_segment(cb, step.segment.index)
            step.record(cb)
            if after_segment is not None:
                after_segment(cb, step.segment.index)
        if self.command.implicit_barrier:
            implicit_barrier().record(cb)

    def graph_pipelines(self) -> list[DataGraphPipeline]:
        """The graph pipelines, in segment order (compute segments have none)."""
        return [step.pipeline for step in self.steps if isinstance(step, _GraphStep) and step.pipeline is not None]

    def destroy(self) -> None:
        """Release the graph pipelines, sessions, descriptor sets and intermediates. Idempotent."""
        for step in self.steps:
            if isinstance(step, _GraphStep):
                step.destroy()
            else:
                step.sets = {}
                step.pipeline = None  # the factory's
        if self._descriptor_pool is not None:
            vk.vkDestroyDescriptorPool(self.ctx.device, self._descriptor_pool, None)
            self._descriptor_pool = None
        for r in self.intermediates.values():
            r.destroy()
        self.intermediates.clear()
        for b in self.bound.values():
            if not b.scenario:
                b.resource = None
        for a in self._allocations:
            memory.free(self.ctx, a)
        self._allocations.clear()


# ---------------------------------------------------------------------------------------------------------
# The checks (no Vulkan calls)


class _Checker:
    def __init__(self, ctx: VulkanContext, scenario: Scenario, command: DispatchGraph, resources: Any,
                 raw_data: Callable[[str], bytes], timer: Any, model: tuple[VgfFile, str, Graph] | None,
                 load_module: Callable[[Shader], SpirvModule]) -> None:
        self.ctx = ctx
        self.load_module = load_module
        self.scenario = scenario
        self.command = command
        self.resources = resources
        self.raw_data = raw_data
        self.timer = timer
        self.place = _command_place(scenario, command)
        self.model = model
        graph = model[2] if model is not None else scenario.by_uid.get(command.graph_ref)
        if not isinstance(graph, Graph):
            raise ScenarioError(f"'{command.graph_ref}' is not a graph resource", file=scenario.path,
                                place=f"{self.place}.graph_ref")
        self.graph = graph
        self.gplace = graph.place

    def fail(self, message: str, place: str | None) -> ScenarioError:
        return ScenarioError(message, file=self.scenario.path, place=place)

    # -- the VGF ---------------------------------------------------------------------------------------------

    def check(self) -> PreparedGraph:
        if self.model is not None:
            vgf, label, _ = self.model
        else:
            path = self.scenario.src_path(self.graph.src)
            with self.timer.measure("Scenario Setup", f"Parse VGF: {self.graph.uid}") if self.timer is not None else contextlib.nullcontext():
                vgf = read_vgf(path)
            label = str(path)
        self.vgf = vgf
        self.vgf_label = label
        if not vgf.segments:
            raise VgfError("the model sequence has no segments: nothing to dispatch", file=label)
        self._check_targets()
        bound = self._bind()
        self._intermediates(bound)
        steps: list[_GraphStep | _ComputeStep] = []
        for seg in vgf.segments:
            self._segment_resources(seg, bound)
            if seg.type is ModuleType.GRAPH:
                steps.append(self._graph_step(seg, bound))
            else:
                steps.append(self._compute_step(seg, bound))
        return PreparedGraph(self.ctx, self.scenario, self.command, self.graph, vgf, bound, steps)

    def _model_name(self, b: SequenceBinding, kind: str) -> str:
        return f"{kind} '{b.name}'" if b.name else kind

    # -- scenario bindings ↔ model inputs and outputs ---------------------------------------------------

    def _expected_sets(self, resource_index: int, binding: int) -> set[int]:
        sets = {ds.set_index for seg in self.vgf.segments for ds in seg.descriptor_sets for b in ds.bindings
                if b.resource_index == resource_index and b.binding == binding}
        return sets or {0}

    def _bind(self) -> dict[int, _Bound]:
        vgf, g = self.vgf, self.graph.uid
        io: dict[int, tuple[SequenceBinding, str]] = {}
        for kind, items in (("input", vgf.inputs), ("output", vgf.outputs)):
            for b in items:
                io.setdefault(b.binding, (b, kind))
        listing = "; ".join(
            f"{self._model_name(b, kind)} binding {b.binding}: {_describe(vgf.resources[b.resource_index])}"
            for b, kind in sorted(io.values(), key=lambda x: x[0].binding)
        ) or "none"
        bound: dict[int, _Bound] = {}
        for j, binding in enumerate(self.command.bindings):  # each (set, id) once: vkcore.scenario.checks.bindings
            place = f"{self.place}.bindings[{j}]"
            if binding.id not in io:
                raise self.fail(f"graph '{g}' has no input or output at binding {binding.id} (it has: {listing})", place)
            model, kind = io[binding.id]
            what = f"graph '{g}' {self._model_name(model, kind)} (binding {binding.id})"
            sets = self._expected_sets(model.resource_index, binding.id)
            if binding.set not in sets:
                raise self.fail(f"{what} is in set {', '.join(map(str, sorted(sets)))}, not set {binding.set}", place)
            r = vgf.resources[model.resource_index]
            uid = binding.resource_ref
            if uid not in self.resources:
                raise self.fail(f"'{uid}' is not a buffer, image or tensor resource", f"{place}.resource_ref")
            res = self.resources[uid]
            previous = bound.get(model.resource_index)
            if previous is not None and previous.name != uid:
                raise self.fail(f"{what} is bound to both '{previous.name}' and '{uid}'", place)
            if r.descriptor_type in BUFFER_DESCRIPTORS:
                bound[model.resource_index] = self._bind_buffer(r, res, uid, what, place)
                continue
            if r.descriptor_type != TENSOR_DESCRIPTOR:
                raise self.fail(f"{what} is a {descriptor_type_name(r.descriptor_type) or 'resource without descriptor type'};"
                                " vkcap runs graphs whose inputs and outputs are tensors or buffers", place)
            if getattr(res, "kind", None) != "tensor" or not isinstance(res, TensorResource):
                raise self.fail(f"'{uid}' is a {getattr(res, 'kind', 'resource')}, but {what} is a tensor "
                                f"({_describe(r)})", f"{place}.resource_ref")
            try:
                res.descriptor_type(binding.descriptor_type)
            except VkcapError as exc:
                raise self.fail(exc.message, f"{place}.descriptor_type") from None
            d = res.tensor.description
            if d.format != r.format:
                raise self.fail(f"tensor '{uid}' is {TENSOR_FORMATS[d.format].name} but {what} is {_format_name(r.format)}", place)
            if tuple(d.dims) != tuple(r.shape):
                raise self.fail(f"tensor '{uid}' has dims {_shape(d.dims)} but {what} has dims {_shape(r.shape)}", place)
            need = r.packed_nbytes
            if need is None or need != res.snapshot_size:
                raise self.fail(f"tensor '{uid}' holds {res.snapshot_size} bytes but {what} holds "
                                f"{'an unknown number of' if need is None else need} bytes", place)
            if r.strides is not None and tuple(r.strides) != tuple(d.effective_strides):
                raise self.fail(f"tensor '{uid}' has strides {list(d.effective_strides)} but {what} is laid out with "
                                f"strides {list(r.strides)}", place)
            bound[model.resource_index] = _Bound(model.resource_index, uid, res, d, True)
        missing = [(b, kind) for b, kind in sorted(io.values(), key=lambda x: x[0].binding)
                   if b.resource_index not in bound]
        if missing:
            parts = [
                f"{self._model_name(b, kind)} (set {min(self._expected_sets(b.resource_index, b.binding))}, binding "
                f"{b.binding}: {_describe(vgf.resources[b.resource_index])})" for b, kind in missing
            ]
            noun = "is" if len(parts) == 1 else "are"
            raise self.fail(f"graph '{g}' {' and '.join(parts)} {noun} not bound", f"{self.place}.bindings")
        return bound

    def _bind_buffer(self, r: VgfResource, res: Any, uid: str, what: str, place: str) -> _Bound:
        """A scenario buffer for a VGF buffer input or output: at least as large as the VGF says. (Whether it
        is bound as a uniform or a storage buffer is each segment's shader's to say.)"""
        kind = "buffer"
        if not isinstance(res, DeviceBuffer):
            raise self.fail(f"'{uid}' is a {getattr(res, 'kind', 'resource')}, but {what} is a {kind} ({_describe(r)})",
                            f"{place}.resource_ref")
        need = r.packed_nbytes
        if need is None:
            raise VgfError(f"resource {r.index} ({_describe(r)}) has no size: a buffer needs a known format and shape",
                           file=self.vgf_label, place=f"model resource table mrt_entry[{r.index}]")
        if res.size < need:
            raise self.fail(f"buffer '{uid}' holds {res.size} bytes but {what} is a {kind} of {need} bytes", place)
        return _Bound(r.index, uid, res, None, True, int(r.descriptor_type or 0), res.size)

    def _intermediates(self, bound: dict[int, _Bound]) -> None:
        for r in self.vgf.resources:
            if r.category is not ResourceCategory.INTERMEDIATE:
                continue
            place = f"model resource table mrt_entry[{r.index}]"
            name = f"{self.graph.uid}/intermediate_{r.index}"
            if r.descriptor_type in BUFFER_DESCRIPTORS:
                if not r.packed_nbytes:
                    raise VgfError(f"intermediate resource {r.index} ({_describe(r)}) has no size: a buffer needs a known "
                                   "format and shape", file=self.vgf_label, place=place)
                bound[r.index] = _Bound(r.index, name, None, None, False, int(r.descriptor_type or 0), r.packed_nbytes)
                continue
            if r.descriptor_type != TENSOR_DESCRIPTOR:
                raise VgfError(f"intermediate resource {r.index} is a {descriptor_type_name(r.descriptor_type)}; vkcap "
                               "runs graphs whose intermediates are tensors or buffers", file=self.vgf_label, place=place)
            if r.format not in TENSOR_FORMATS:
                raise VgfError(f"intermediate resource {r.index} has format {_format_name(r.format)}, which vkcap cannot "
                               "make a tensor of", file=self.vgf_label, place=place)
            description = TensorDescription(r.format, tuple(r.shape), tensors.LINEAR, INTERMEDIATE_USAGE, r.strides)
            problems = description.problems()
            if problems:
                raise VgfError(f"intermediate resource {r.index} ({_describe(r)}): {'; '.join(problems)}",
                               file=self.vgf_label, place=place)
            bound[r.index] = _Bound(r.index, name, None, description, False)

    def _segment_resources(self, seg: Segment, bound: dict[int, _Bound]) -> None:
        """Every resource a segment's descriptor sets name is bound (scenario) or made (intermediate)."""
        for ds in seg.descriptor_sets:
            for b in ds.bindings:
                if b.resource_index in bound:
                    continue
                r = self.vgf.resources[b.resource_index]
                place = f"model sequence table segments[{seg.index}]"
                if r.category is ResourceCategory.CONSTANT:
                    raise VgfError(f"set {ds.set_index} binding {b.binding} names resource {r.index}, a CONSTANT: "
                                   "constants are given to the pipeline, not bound", file=self.vgf_label, place=place)
                raise VgfError(f"set {ds.set_index} binding {b.binding} names resource {r.index} ({r.category.name}), "
                               "which the model sequence does not list as an input or output", file=self.vgf_label,
                               place=place)

    # -- graph segments ----------------------------------------------------------------------------------

    def _graph_step(self, seg: Segment, bound: dict[int, _Bound]) -> _GraphStep:
        module = self.vgf.module_of(seg)
        place = f"model sequence table segments[{seg.index}]"
        if module.code_kind is not CodeKind.SPIRV or not isinstance(module.code, bytes):
            raise VgfError(f"graph segment '{seg.name}' runs module '{module.name}', which holds "
                           f"{'no code' if module.is_placeholder else module.code_kind.value}: a graph module must be "
                           "SPIR-V", file=self.vgf_label, place=place)
        for ds in seg.descriptor_sets:
            for b in ds.bindings:
                entry = bound[b.resource_index]
                if entry.description is None:
                    raise VgfError(f"graph segment '{seg.name}' binds resource {b.resource_index} (set {ds.set_index} "
                                   f"binding {b.binding}), a {descriptor_type_name(entry.descriptor_type)}: data graphs "
                                   "take tensors; buffers belong to compute segments", file=self.vgf_label, place=place)
                if entry.scenario and not entry.description.usage & DATA_GRAPH_USAGE:
                    raise DeviceError(
                        f"tensor '{entry.name}' was created without TENSOR_USAGE_DATA_GRAPH_BIT_ARM, which graph "
                        f"'{self.graph.uid}' needs (vkcap's resource set must create graph-bound tensors with it)",
                        file=self.scenario.path, place=self.place,
                    )
        resources = [GraphResource(ds.set_index, b.binding, bound[b.resource_index].description)  # type: ignore[arg-type]
                     for ds in seg.descriptor_sets for b in ds.bindings]
        constants = []
        for cb in seg.constant_bindings:
            c = self.vgf.constants[cb.constant_index]
            r = self.vgf.resource_of(c)
            cplace = f"constants[{c.index}]"
            if c.sparsity_dimension is not None:
                raise VgfError(f"constant {c.index} is 2:4 sparse along dimension {c.sparsity_dimension}, which vkcap does "
                               "not support", file=self.vgf_label, place=cplace)
            if r.format not in TENSOR_FORMATS:
                raise VgfError(f"constant {c.index} has format {_format_name(r.format)}, which vkcap cannot make a tensor of",
                               file=self.vgf_label, place=cplace)
            constants.append(GraphConstant(cb.graph_constant_id,
                                           TensorDescription(r.format, tuple(r.shape), tensors.LINEAR, CONSTANT_USAGE, r.strides),
                                           c.read()))
        try:
            info = scan_graph_module(module.code)
        except DeviceError as exc:
            raise VgfError(f"module '{module.name}': {exc.message}", file=self.vgf_label,
                           place=f"module table modules[{module.index}]") from None
        check_graph_module(module, self.vgf_label)  # spirv-val, before the driver sees the module
        keys = [(ds.set_index, b.binding) for ds in seg.descriptor_sets for b in ds.bindings]
        problems = pipeline_problems(info, module.entry_point, resources, constants, keys)
        if problems:
            raise VgfError(f"graph segment '{seg.name}' does not match its module '{module.name}': " + "; ".join(problems),
                           file=self.vgf_label, place=place)
        return _GraphStep(seg, module, module.code, resources, constants)

    # -- compute segments ---------------------------------------------------------------------------------

    def _compute_modules(self) -> dict[str, Module]:
        return {self.vgf.modules[s.module_index].name: self.vgf.modules[s.module_index]
                for s in self.vgf.segments if s.type is ModuleType.COMPUTE}

    def _substitutions(self) -> list[tuple[Any, str]]:
        """(substitution, JSON place) from the graph resource and, where the model has it, the command."""
        out = [(s, f"{self.gplace}.shader_substitutions[{k}]") for k, s in enumerate(self.graph.shader_substitutions)]
        out += [(s, f"{self.place}.shader_substitutions[{k}]")
                for k, s in enumerate(getattr(self.command, "shader_substitutions", ()) or ())]
        return out

    def _check_targets(self) -> None:
        """Every target of a substitution, push constant map and specialization constant map names a compute
        module of the graph, at most once each."""
        modules = self._compute_modules()
        segment_of = {self.vgf.modules[s.module_index].name: s.name for s in self.vgf.segments if s.type is ModuleType.COMPUTE}
        known = ", ".join(f"'{m}' (segment '{segment_of[m]}')" for m in modules) or "none"
        lists = (
            [(s.target, p + ".target", "shader_substitutions") for s, p in self._substitutions()],
            [(p.shader_target, f"{self.place}.push_constants[{k}].shader_target", "push_constants")
             for k, p in enumerate(self.command.push_constants)],
            [(m.shader_target, f"{self.gplace}.specialization_constants_map[{k}].shader_target", "specialization_constants_map")
             for k, m in enumerate(self.graph.specialization_constants_map)],
        )
        for entries in lists:
            first: dict[str, str] = {}
            for target, place, what in entries:
                if target not in modules:
                    hint = ""
                    by_segment = [m for m, s in segment_of.items() if s == target]
                    if by_segment:
                        hint = f" ('{target}' is a segment name: target its module '{by_segment[0]}')"
                    raise self.fail(f"'{target}' is not a shader module of graph '{self.graph.uid}' (its shader modules: "
                                    f"{known}){hint}", place)
                if target in first:
                    raise self.fail(f"{what} targets module '{target}' twice ({first[target]} and here)", place)
                first[target] = place.rsplit(".", 1)[0]

    def _compute_step(self, seg: Segment, bound: dict[int, _Bound]) -> _ComputeStep:
        module = self.vgf.module_of(seg)
        g = self.graph.uid
        splace = f"model sequence table segments[{seg.index}]"
        what = f"shader module '{module.name}' (segment '{seg.name}') of graph '{g}'"
        substitution = next(((s, p) for s, p in self._substitutions() if s.target == module.name), None)

        # Code: a substitution wins (as in the reference), else the module's own.
        shader_spec: Shader | None = None
        if substitution is not None:
            sub, sub_place = substitution
            shader_spec = self.scenario.by_uid.get(sub.shader_ref)  # type: ignore[assignment]
            if not isinstance(shader_spec, Shader):
                raise self.fail(f"'{sub.shader_ref}' is not a shader resource", f"{sub_place}.shader_ref")
            spirv = self.load_module(shader_spec)
            code_label = f"shader '{shader_spec.uid}' (substituted for {what})"
            entry = shader_spec.entry
            uid = f"{g}::{module.name}={shader_spec.uid}"
        elif module.is_placeholder:
            given = ", ".join(f"'{s.target}' -> shader '{s.shader_ref}'" for s, _ in self._substitutions()) or "none"
            raise self.fail(f"{what} is a placeholder and no shader_substitutions entry targets it (given: {given})",
                            f"{self.gplace}.shader_substitutions")
        else:
            uid = f"{g}::{module.name}"
            entry = module.entry_point or "main"
            code_label = what
            spirv = self._module_code(module, seg, uid)

        # The entry point and the tensors the shader declares.
        scanned = _scan_compute(spirv.code)
        if scanned is None:
            raise self.fail(f"{code_label} is not a SPIR-V binary", self.gplace)
        names = scanned.entry_points
        if entry not in names:
            raise self.fail(f"{code_label} has no compute entry point '{entry}' (it has: "
                            f"{', '.join(map(repr, names)) or 'none'})", self.gplace)
        provided = {(ds.set_index, b.binding): bound[b.resource_index] for ds in seg.descriptor_sets for b in ds.bindings}
        described = {key: entry.description for key, entry in provided.items() if entry.description is not None}
        try:
            declared = scan_graph_module(spirv.code).bindings
        except DeviceError as exc:
            raise self.fail(f"{code_label}: {exc.message}", self.gplace) from None
        problems = []
        for key, b in sorted(declared.items()):
            if b.tensor is None:
                continue
            where = f"set {key[0]} binding {key[1]}"
            if key in provided and key not in described:
                problems.append(f"the shader uses tensor {where} ({b.tensor}) but segment '{seg.name}' gives it a "
                                f"buffer (resource {provided[key].resource_index})")
                continue
            if key not in described:
                have = ", ".join(f"set {s} binding {i}" for s, i in sorted(described)) or "none"
                problems.append(f"the shader uses tensor {where} ({b.tensor}) but segment '{seg.name}' describes only {have}")
                continue
            problem = _tensor_type_problem(where, described[key], b.tensor)
            if problem:
                problems.append(problem)
        if problems:
            raise self.fail(f"{code_label} does not match the VGF: " + "; ".join(problems),
                            f"{self.gplace}.shader_substitutions" if substitution else self.gplace)

        # Workgroups.
        shape = seg.dispatch_shape
        if shape is None or len(shape) != 3 or any(int(n) < 1 for n in shape):
            raise VgfError(f"compute segment '{seg.name}' has dispatch_shape {list(shape) if shape else None}: it needs at "
                           "least one workgroup in each dimension", file=self.vgf_label, place=splace)
        limits = getattr(self.ctx, "limits", None)
        if limits is not None:
            for axis, n in enumerate(shape):
                most = int(limits.maxComputeWorkGroupCount[axis])
                if n > most:
                    raise VgfError(f"compute segment '{seg.name}' dispatches {n} workgroups along {'xyz'[axis]}, more than "
                                   f"this device's maxComputeWorkGroupCount ({most})", file=self.vgf_label, place=splace)

        # Push constants.
        size = self._push_constant_size(seg, module, shader_spec)
        push = b""
        maps = [(k, p) for k, p in enumerate(self.command.push_constants) if p.shader_target == module.name]
        if maps:
            k, pmap = maps[0]
            pplace = f"{self.place}.push_constants[{k}].push_data_ref"
            push = bytes(self.raw_data(pmap.push_data_ref))
            if size == 0:
                raise self.fail(f"push constant data '{pmap.push_data_ref}' is {len(push)} bytes but {what} declares no push "
                                f"constants (set push_constants_size of graph '{g}')", pplace)
            if len(push) != size:
                raise self.fail(f"push constant data '{pmap.push_data_ref}' is {len(push)} bytes, {what} expects {size}", pplace)
        elif size:
            raise self.fail(f"{what} takes {size} bytes of push constants but no push_constants entry targets it",
                            f"{self.place}.push_constants")
        if scanned.push_constants and not size:
            raise self.fail(f"{code_label} reads push constants but their size is unknown: set push_constants_size of "
                            f"graph '{g}' and give the data with a push_constants entry targeting '{module.name}'",
                            f"{self.gplace}.push_constants_size")

        # Specialization constants: the graph's map for this module, else the substituted shader's own.
        constants: tuple[SpecializationConstant, ...] = shader_spec.specialization_constants if shader_spec else ()
        for m in self.graph.specialization_constants_map:
            if m.shader_target == module.name:
                constants = m.specialization_constants

        # What Vulkan leaves undefined (as for dispatch_compute): a declared descriptor the segment does not
        # provide, a workgroup size (after specialization) beyond the device's limits.
        try:
            reflection = reflect(spirv.code, {c.id: c.value for c in constants})
        except SpirvError:
            reflection = None
        # The shader decides a buffer's descriptor type; the VGF's is a hint (see _descriptor_contradiction).
        types = {key: entry.descriptor_type for key, entry in provided.items()}
        if reflection is not None:
            missing = sorted(reflection.bindings - set(provided))
            for key, declared_descriptor in sorted(reflection.descriptors.items()):
                supplied = provided.get(key)
                if supplied is None:
                    continue
                problem = _descriptor_contradiction(declared_descriptor.kind, supplied)
                if problem:
                    raise self.fail(f"{code_label} declares set {key[0]} binding {key[1]} as "
                                    f"{KIND_TEXT[declared_descriptor.kind]}, but segment '{seg.name}' gives it "
                                    f"{problem} (resource {supplied.resource_index})",
                                    f"{self.gplace}.shader_substitutions" if substitution else self.gplace)
                if supplied.is_buffer and declared_descriptor.descriptor_type != supplied.descriptor_type:
                    log.debug("%s: %s: set %d binding %d is bound as %s, as the shader declares it (the VGF's resource "
                              "%d says %s)", self.vgf_label, code_label, key[0], key[1],
                              descriptor_type_name(declared_descriptor.descriptor_type), supplied.resource_index,
                              descriptor_type_name(supplied.descriptor_type))
                if supplied.is_buffer:
                    types[key] = declared_descriptor.descriptor_type
            if missing:
                have = ", ".join(f"set {s} binding {i}" for s, i in sorted(provided)) or "none"
                need = ", ".join(f"set {s} binding {i}" for s, i in missing)
                raise self.fail(f"{code_label} uses {need}, which segment '{seg.name}' does not provide (it provides: {have})",
                                f"{self.gplace}.shader_substitutions" if substitution else self.gplace)
            local = reflection.local_size
            if local is not None and limits is not None:
                invocations = local[0] * local[1] * local[2]
                if (any(not 1 <= local[i] <= limits.maxComputeWorkGroupSize[i] for i in range(3))
                        or invocations > limits.maxComputeWorkGroupInvocations):
                    raise UnsupportedDeviceFeature(
                        f"{code_label} has workgroup size {local[0]}x{local[1]}x{local[2]} ({invocations} invocations) after "
                        f"specialization; this device allows {tuple(int(v) for v in limits.maxComputeWorkGroupSize)} and "
                        f"{int(limits.maxComputeWorkGroupInvocations)} invocations",
                        file=self.scenario.path, place=self.gplace,
                    )
        base = shader_spec if shader_spec is not None else Shader(
            uid=uid, index=self.graph.index, src=str(self.vgf_label), entry=entry,
            type="GLSL" if module.code_kind is CodeKind.GLSL else "SPIR-V",
        )
        spec = dataclasses.replace(base, uid=uid, push_constants_size=size, specialization_constants=constants)
        spirv = dataclasses.replace(spirv, uid=uid)
        by_set: dict[int, list[tuple[int, int]]] = {}
        for (set_index, binding), descriptor_type in types.items():
            by_set.setdefault(set_index, []).append((binding, descriptor_type))
        signature = tuple(sorted((s, tuple(sorted(v))) for s, v in by_set.items()))
        return _ComputeStep(seg, module, spirv, spec, push, (int(shape[0]), int(shape[1]), int(shape[2])), signature,
                            types)

    def _push_constant_size(self, seg: Segment, module: Module, shader: Shader | None) -> int:
        from_ranges = max((r.offset + r.size for r in seg.push_constant_ranges), default=None)
        size = self.graph.push_constants_size or (shader.push_constants_size if shader is not None else 0) or from_ranges or 0
        if from_ranges is not None and size != from_ranges:
            source = (f"graph '{self.graph.uid}' declares push_constants_size {self.graph.push_constants_size}"
                      if self.graph.push_constants_size else
                      f"shader '{shader.uid}' declares push_constants_size {shader.push_constants_size}" if shader else "")
            raise self.fail(f"segment '{seg.name}' of the VGF declares {from_ranges} bytes of push constants for module "
                            f"'{module.name}' but {source}", f"{self.gplace}.push_constants_size")
        return int(size)

    def _module_code(self, module: Module, seg: Segment, uid: str) -> SpirvModule:
        """The SPIR-V of a compute module: its own, or its GLSL compiled (and cached) like a shader resource's."""
        return compute_module_code(self.scenario, self.graph, module, seg, uid, self.vgf_label)


def compute_module_code(scenario: Scenario, graph: Graph, module: Module, seg: Segment, uid: str,
                        label: str) -> SpirvModule:
    """The SPIR-V a compute module of ``graph`` runs without substitution: its own, or its GLSL compiled
    (and cached) like a shader resource's. ``uid`` names the result, ``label`` the VGF. Raises
    :class:`ScenarioError` for a placeholder, HLSL, or GLSL that does not compile (the compiler's message
    naming the module)."""
    def fail(message: str, place: str) -> ScenarioError:
        return ScenarioError(message, file=scenario.path, place=place)

    what = f"shader module '{module.name}' (segment '{seg.name}') of graph '{graph.uid}'"
    if module.code_kind is CodeKind.SPIRV:
        assert isinstance(module.code, bytes)
        return SpirvModule(uid, module.code, module.entry_point or "main", Path(label))
    if module.code_kind is CodeKind.GLSL:
        assert isinstance(module.code, str)
        source = module.code.encode("utf-8")
        path = cache_root() / "vgf-glsl" / f"{hashlib.sha256(source).hexdigest()[:32]}.comp"
        try:
            if not path.is_file() or path.read_bytes() != source:
                write_atomic(path, [source])
        except OSError as exc:
            raise fail(f"cannot write the GLSL of module '{module.name}' for compilation: {exc}", graph.place) from None
        spec = Shader(uid=uid, index=graph.index, src=str(path), entry=module.entry_point or "main", type="GLSL")
        try:
            return compile_glsl(scenario, spec, path)
        except ScenarioError as exc:
            # the compiler names the source by its cache file, or as string 0 ("ERROR: 0:10: ..."): name the module
            message = re.sub(r"(?<![\w.])0:(\d+):", lambda m: f"{module.name}:{m.group(1)}:",
                             exc.message.replace(path.name, module.name))
            raise fail(f"{what}: {message}", f"{graph.place}.src") from None
    if module.is_placeholder:
        raise fail(f"{what} is a placeholder: it has no code of its own", f"{graph.place}.shader_substitutions")
    raise fail(f"{what} is HLSL, which vkcap does not compile: substitute a GLSL or SPIR-V shader with "
               "shader_substitutions", f"{graph.place}.shader_substitutions")
