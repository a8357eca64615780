"""VK_ARM_data_graph from Python: graph pipelines from SPIR-V graph modules, sessions, dispatch.

Built on the second FFI (:mod:`vkcore.device.arm_ffi` + :mod:`vkcore.device.graph_ffi`) and on
:mod:`vkcore.resources.tensors` (graph inputs, outputs and constants are tensors). Guarantees:

- ARM's emulation layer checks almost nothing. Measured with layer 0.11.0 on lavapipe: a (set, binding)
  of the module without a resource info, a GraphConstantID without a constant, a constant id the module
  does not declare, descriptor sets not bound, or the COMPUTE bind point all abort the whole process
  (uncaught ``std::out_of_range``, "map::at" on stderr, exit 134); a wrong entry point name, resource
  shapes that differ from the module's, extra resource infos and extra constants are accepted silently.
  So every such mismatch is looked for *before* any Vulkan call:
  :func:`scan_graph_module` reads what the SPIR-V declares (graph entry points, tensor bindings with
  their element types and shapes, graph constants with their ids and types) and :func:`pipeline_problems`
  compares it with the resource infos and constants; :meth:`DataGraphPipeline.create` raises
  :class:`~vkcore.errors.DeviceError` listing every problem instead of reaching the layer.
  :meth:`DataGraphPipeline.record_dispatch` checks that every descriptor set the module uses is bound.
- A session's memory is always bound: the bind-point requirements are queried and memory is allocated
  and bound for every object of every bind point (skipping it makes the layer compute silently wrong
  results).
- The pipeline and the descriptor sets are bound at the DATA_GRAPH bind point (at the COMPUTE one the
  layer's behaviour is undefined and crashes).
- Every struct handed to a Vulkan call, and what it points to, is held in Python variables at least
  until the call returns; the shader module and the constants' data live as long as the pipeline.
"""
from __future__ import annotations

import functools
import hashlib
import struct
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import vulkan as vk

from ..device import arm_ffi, graph_ffi, memory
from ..device.arm_ffi import ffi
from ..device.context import GRAPH_EXT, VulkanContext
from ..errors import DeviceError
from ..resources.tensors import (
    LINEAR,
    TENSOR_FORMATS,
    DeviceTensor,
    MemoryRequirements,
    TensorDescription,
    description_problems,
    tensor_descriptor_write,
    update_descriptor_sets,
)

BIND_POINT = graph_ffi.PIPELINE_BIND_POINT_DATA_GRAPH_ARM
DATA_GRAPH_USAGE = arm_ffi.TENSOR_USAGE_DATA_GRAPH_BIT_ARM

# ---------------------------------------------------------------------------------------------------
# What a SPIR-V graph module declares (SPV_ARM_graph, SPV_ARM_tensors)

_MAGIC = 0x07230203
_OP = {
    "Name": 5,
    "TypeBool": 20,
    "TypeInt": 21,
    "TypeFloat": 22,
    "TypeArray": 28,
    "TypeRuntimeArray": 29,
    "TypePointer": 32,
    "Constant": 43,
    "ConstantComposite": 44,
    "Variable": 59,
    "Decorate": 71,
    "TypeTensorARM": 4163,
    "GraphConstantARM": 4181,
    "GraphEntryPointARM": 4182,
    "GraphARM": 4183,
}
_DECORATION_BINDING = 33
_DECORATION_DESCRIPTOR_SET = 34
_STORAGE_CLASS_UNIFORM_CONSTANT = 0


@dataclass(frozen=True)
class SpirvTensorType:
    """An ``OpTypeTensorARM``: element kind (``"float"``, ``"int"`` or ``"bool"``) and width in bits,
    rank and shape where the module gives them as constants (``None``: not given or not a constant)."""

    kind: str
    bits: int
    rank: int | None = None
    shape: tuple[int, ...] | None = None

    def __str__(self) -> str:
        dims = "?" if self.shape is None else "x".join(map(str, self.shape))
        return f"tensor<{dims} {self.kind}{self.bits}>"


@dataclass(frozen=True)
class SpirvBinding:
    """A descriptor the module declares: ``tensor`` is ``None`` when it is not a tensor;
    ``array_length`` is the length of an array of tensors (``None``: a single one)."""

    set: int
    binding: int
    tensor: SpirvTensorType | None
    array_length: int | None = None
    name: str = ""


@dataclass(frozen=True)
class GraphModuleInfo:
    """What :func:`scan_graph_module` found: graph entry point names, descriptors by (set, binding)
    and graph constants by GraphConstantID."""

    entry_points: tuple[str, ...]
    bindings: Mapping[tuple[int, int], SpirvBinding]
    constants: Mapping[int, SpirvTensorType | None]

    @property
    def sets(self) -> tuple[int, ...]:
        return tuple(sorted({s for s, _ in self.bindings}))


def _string(words: Sequence[int]) -> tuple[str, int]:
    """A SPIR-V literal string from ``words``; returns it and the number of words it takes."""
    raw = struct.pack(f"<{len(words)}I", *words)
    end = raw.find(b"\0")
    if end < 0:
        end = len(raw)
    return raw[:end].decode("utf-8", "replace"), end // 4 + 1


def scan_graph_module(spirv: bytes) -> GraphModuleInfo:
    """Read what a SPIR-V graph module declares (no validation of the module as a whole).

    Raises :class:`DeviceError` when ``spirv`` is not a SPIR-V binary (size, magic, a truncated
    instruction).
    """
    data = bytes(spirv)
    if len(data) < 20 or len(data) % 4:
        raise DeviceError(f"graph module: {len(data)} bytes is not a SPIR-V binary (a multiple of 4, at least 20)")
    (magic,) = struct.unpack_from("<I", data)
    order = "<" if magic == _MAGIC else ">" if struct.unpack_from(">I", data)[0] == _MAGIC else None
    if order is None:
        raise DeviceError(f"graph module: bad SPIR-V magic number {magic:#010x}")
    words = struct.unpack(f"{order}{len(data) // 4}I", data)

    names: dict[int, str] = {}
    decorations: dict[int, dict[int, int]] = {}
    scalars: dict[int, tuple[str, int]] = {}  # type id -> (kind, bits)
    int_constants: dict[int, int] = {}
    composites: dict[int, tuple[int, ...]] = {}
    arrays: dict[int, tuple[int, int | None]] = {}  # type id -> (element type, length constant id)
    tensor_types: dict[int, tuple[int, int | None, int | None]] = {}
    pointers: dict[int, int] = {}  # pointer type id -> pointee type id
    variables: list[tuple[int, int]] = []  # (pointer type id, result id) in UniformConstant
    graph_constants: list[tuple[int, int]] = []  # (type id, GraphConstantID)
    entry_points: list[str] = []

    i = 5
    while i < len(words):
        count, opcode = words[i] >> 16, words[i] & 0xFFFF
        if count == 0 or i + count > len(words):
            raise DeviceError(f"graph module: truncated or malformed instruction at word {i}")
        ops = words[i + 1 : i + count]
        if opcode == _OP["Name"] and ops:
            names[ops[0]] = _string(ops[1:])[0]
        elif opcode == _OP["Decorate"] and len(ops) >= 3 and ops[1] in (_DECORATION_BINDING, _DECORATION_DESCRIPTOR_SET):
            decorations.setdefault(ops[0], {})[ops[1]] = ops[2]
        elif opcode == _OP["TypeBool"] and ops:
            scalars[ops[0]] = ("bool", 8)
        elif opcode == _OP["TypeInt"] and len(ops) >= 2:
            scalars[ops[0]] = ("int", ops[1])
        elif opcode == _OP["TypeFloat"] and len(ops) >= 2:
            scalars[ops[0]] = ("float", ops[1])
        elif opcode == _OP["Constant"] and len(ops) >= 3:
            value = ops[2] if len(ops) == 3 else ops[2] | (ops[3] << 32)
            int_constants[ops[1]] = value
        elif opcode == _OP["ConstantComposite"] and len(ops) >= 2:
            composites[ops[1]] = tuple(ops[2:])
        elif opcode == _OP["TypeArray"] and len(ops) >= 3:
            arrays[ops[0]] = (ops[1], ops[2])
        elif opcode == _OP["TypeRuntimeArray"] and len(ops) >= 2:
            arrays[ops[0]] = (ops[1], None)
        elif opcode == _OP["TypeTensorARM"] and len(ops) >= 2:
            tensor_types[ops[0]] = (ops[1], ops[2] if len(ops) > 2 else None, ops[3] if len(ops) > 3 else None)
        elif opcode == _OP["TypePointer"] and len(ops) >= 3:
            pointers[ops[0]] = ops[2]
        elif opcode == _OP["Variable"] and len(ops) >= 3 and ops[2] == _STORAGE_CLASS_UNIFORM_CONSTANT:
            variables.append((ops[0], ops[1]))
        elif opcode == _OP["GraphConstantARM"] and len(ops) >= 3:
            graph_constants.append((ops[0], ops[2]))
        elif opcode == _OP["GraphEntryPointARM"] and len(ops) >= 2:
            entry_points.append(_string(ops[1:])[0])
        i += count

    def tensor_of(type_id: int) -> SpirvTensorType | None:
        t = tensor_types.get(type_id)
        if t is None:
            return None
        kind, bits = scalars.get(t[0], ("?", 0))
        rank = int_constants.get(t[1]) if t[1] is not None else None
        shape = None
        if t[2] is not None and t[2] in composites:
            dims = [int_constants.get(c) for c in composites[t[2]]]
            if all(d is not None for d in dims):
                shape = tuple(int(d) for d in dims)  # type: ignore[arg-type]
        return SpirvTensorType(kind, bits, rank, shape)

    bindings: dict[tuple[int, int], SpirvBinding] = {}
    for ptr_type, var in variables:
        deco = decorations.get(var, {})
        if _DECORATION_BINDING not in deco or _DECORATION_DESCRIPTOR_SET not in deco:
            continue
        pointee = pointers.get(ptr_type, -1)
        length: int | None = None
        if pointee in arrays:
            element, length_id = arrays[pointee]
            length = int_constants.get(length_id, 0) if length_id is not None else 0
            pointee = element
        key = (deco[_DECORATION_DESCRIPTOR_SET], deco[_DECORATION_BINDING])
        bindings[key] = SpirvBinding(key[0], key[1], tensor_of(pointee), length, names.get(var, ""))
    constants = {cid: tensor_of(type_id) for type_id, cid in graph_constants}
    return GraphModuleInfo(tuple(entry_points), bindings, constants)


# ---------------------------------------------------------------------------------------------------
# Resource infos and constants, and the checks the layer does not make


@dataclass(frozen=True)
class GraphResource:
    """One ``VkDataGraphPipelineResourceInfoARM``: a (set, binding) of the module and its tensor."""

    set: int
    binding: int
    description: TensorDescription
    array_element: int = 0


@dataclass(frozen=True)
class GraphConstant:
    """One ``VkDataGraphPipelineConstantARM``: ``id`` is the module's GraphConstantID (the VGF's
    ``graph_constant_id``, not the constant's index in the VGF's table); ``data`` is laid out as the
    (LINEAR) description says: packed row-major when it has no strides."""

    id: int
    description: TensorDescription
    data: bytes = field(repr=False)


def _as_resource(r: GraphResource | Sequence[Any]) -> GraphResource:
    if isinstance(r, GraphResource):
        return r
    return GraphResource(int(r[0]), int(r[1]), r[2], *(int(x) for x in r[3:]))


def _as_constant(c: GraphConstant | Sequence[Any]) -> GraphConstant:
    if isinstance(c, GraphConstant):
        return c
    cid, desc, data = c
    return GraphConstant(int(cid), desc, bytes(data))


def _kind_of_format(fmt: int) -> tuple[str, int] | None:
    element = TENSOR_FORMATS.get(fmt)
    if element is None:
        return None
    kind = "float" if element.dtype.startswith("float") else "bool" if element.dtype == "bool" else "int"
    return kind, element.size * 8


def _type_problems(what: str, description: TensorDescription, spirv: SpirvTensorType | None) -> list[str]:
    """Where ``description`` disagrees with the module's tensor type."""
    if spirv is None:
        return [f"{what} is not a tensor in the module"]
    problems: list[str] = []
    ours = _kind_of_format(description.format)
    if ours is not None and spirv.kind != "?" and ours != (spirv.kind, spirv.bits):
        problems.append(
            f"{what}: format {TENSOR_FORMATS[description.format].name} ({ours[0]}{ours[1]}) but the module declares {spirv}"
        )
    if spirv.rank is not None and spirv.rank != len(description.dims):
        problems.append(f"{what}: {len(description.dims)} dimensions {list(description.dims)} but the module declares rank {spirv.rank} ({spirv})")
    elif spirv.shape is not None and tuple(spirv.shape) != tuple(description.dims):
        problems.append(f"{what}: dims {list(description.dims)} but the module declares {list(spirv.shape)}")
    return problems


def pipeline_problems(
    module: GraphModuleInfo,
    entry: str,
    resources: Sequence[GraphResource],
    constants: Sequence[GraphConstant],
    layout_bindings: Iterable[tuple[int, int]] | None = None,
) -> list[str]:
    """Everything wrong with creating a graph pipeline of ``module`` at ``entry`` with these resource
    infos and constants (and, when given, a pipeline layout declaring ``layout_bindings``).

    Empty means the layer has what it needs. Each problem is one sentence naming the (set, binding)
    or constant id concerned.
    """
    problems: list[str] = []
    if not module.entry_points:
        problems.append("the module declares no graph (no OpGraphEntryPointARM): not a SPV_ARM_graph module")
    elif entry not in module.entry_points:
        problems.append(f"entry point {entry!r} is not a graph of the module (it has {', '.join(map(repr, module.entry_points))})")

    # Resource infos
    seen: set[tuple[int, int, int]] = set()
    for r in resources:
        where = f"resource info for set {r.set} binding {r.binding}"
        slot = (r.set, r.binding, r.array_element)
        if slot in seen:
            problems.append(f"{where} (array element {r.array_element}) is given twice")
        seen.add(slot)
        if r.array_element != 0:
            problems.append(f"{where}: arrayElement is {r.array_element}; VK_ARM_data_graph requires 0")
        d = r.description
        problems += [f"{where}: {p}" for p in description_problems(d.format, d.dims, d.tiling, d.usage, d.strides)]
        if not d.usage & DATA_GRAPH_USAGE:
            problems.append(f"{where}: the tensor description's usage {d.usage:#x} lacks DATA_GRAPH ({DATA_GRAPH_USAGE:#x})")
        declared = module.bindings.get((r.set, r.binding))
        if declared is None:
            problems.append(f"{where} names nothing the module declares (it declares {_binding_list(module)})")
        elif d.format in TENSOR_FORMATS and all(isinstance(x, int) and x >= 1 for x in d.dims):
            problems += _type_problems(where, d, declared.tensor)
    described = {(r.set, r.binding) for r in resources}
    for key, b in sorted(module.bindings.items()):
        if key not in described:
            what = f" ({b.tensor})" if b.tensor is not None else ""
            problems.append(
                f"set {b.set} binding {b.binding}{what} is used by the module but has no resource info "
                "(the emulation layer would abort the process)"
            )
    if layout_bindings is not None:
        declared_in_layout = set(layout_bindings)
        for key in sorted(set(module.bindings) - declared_in_layout):
            problems.append(f"set {key[0]} binding {key[1]} is used by the module but the pipeline layout does not declare it")

    # Constants
    ids: set[int] = set()
    for c in constants:
        where = f"constant id {c.id}"
        if c.id in ids:
            problems.append(f"{where} is given twice")
        ids.add(c.id)
        d = c.description
        desc_problems = description_problems(d.format, d.dims, d.tiling, d.usage, d.strides)
        problems += [f"{where}: {p}" for p in desc_problems]
        if d.tiling != LINEAR:
            problems.append(f"{where}: tiling must be LINEAR (the layout of OPTIMAL data is the driver's)")
        if not desc_problems:
            want = d.span  # packed: element count x element size; with strides, up to the last element
            if len(c.data) != want:
                problems.append(
                    f"{where}: {len(c.data)} bytes of data, but {d.element.name} {list(d.dims)}"
                    f"{'' if d.strides is None else f' strides {list(d.strides)}'} needs {want}"
                )
        if c.id not in module.constants:
            have = ", ".join(map(str, sorted(module.constants))) or "none"
            problems.append(
                f"{where} is not a GraphConstantID of the module (it declares {have}); "
                "ids are the module's, not indexes in the VGF's constant table"
            )
        elif not desc_problems:
            problems += _type_problems(where, d, module.constants[c.id])
    for cid in sorted(set(module.constants) - ids):
        problems.append(f"graph constant id {cid} ({module.constants[cid]}) of the module has no data (the emulation layer would abort the process)")
    return problems


def _binding_list(module: GraphModuleInfo) -> str:
    return ", ".join(f"set {s} binding {b}" for s, b in sorted(module.bindings)) or "none"


# ---------------------------------------------------------------------------------------------------
# Device functions


def _result_name(code: int) -> str:
    for name in dir(vk):
        if name.startswith(("VK_ERROR_", "VK_SUCCESS", "VK_INCOMPLETE", "VK_NOT_READY")) and getattr(vk, name) == code:
            return name
    return str(code)


_APIS: "weakref.WeakKeyDictionary[VulkanContext, GraphApi]" = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class GraphQueueProperties:
    """One ``VkQueueFamilyDataGraphPropertiesARM`` entry: an engine and an operation set it runs."""

    engine_type: int
    foreign: bool
    operation_type: int
    operation_set: str
    version: int


class GraphApi:
    """VK_ARM_data_graph functions of one device, resolved with ``vkGetDeviceProcAddr``.

    Each function is an attribute named as in C (``api.vkCreateDataGraphPipelinesARM(...)``), typed with
    graph_ffi's ``PFN_*`` so cffi checks argument types. Optional queries the layer may lack are
    ``None`` when absent.
    """

    vkCreateDataGraphPipelinesARM: Any
    vkCreateDataGraphPipelineSessionARM: Any
    vkGetDataGraphPipelineSessionBindPointRequirementsARM: Any
    vkGetDataGraphPipelineSessionMemoryRequirementsARM: Any
    vkBindDataGraphPipelineSessionMemoryARM: Any
    vkDestroyDataGraphPipelineSessionARM: Any
    vkCmdDispatchDataGraphARM: Any
    vkGetDataGraphPipelineAvailablePropertiesARM: Any = None
    vkGetDataGraphPipelinePropertiesARM: Any = None
    vkGetPhysicalDeviceQueueFamilyDataGraphPropertiesARM: Any = None
    vkGetPhysicalDeviceQueueFamilyDataGraphProcessingEnginePropertiesARM: Any = None

    def __init__(self, ctx: VulkanContext, functions: dict[str, Any]) -> None:
        self.ctx = ctx
        self.device = ctx.device
        for name, fn in functions.items():
            setattr(self, name, fn)

    @classmethod
    def load(cls, ctx: VulkanContext) -> "GraphApi":
        """The functions for ``ctx`` (resolved once per context).

        Raises :class:`DeviceError` when VK_ARM_data_graph is not enabled, a required function is
        missing, or the context's queue family cannot run data graphs.
        """
        cached = _APIS.get(ctx)
        if cached is not None and cached.device == ctx.device:
            return cached
        if GRAPH_EXT not in getattr(ctx, "extensions", ()):
            raise DeviceError(f"{GRAPH_EXT} is not enabled on '{ctx.info.name}' (create the context with need_graphs=True)")
        functions: dict[str, Any] = {}
        missing: list[str] = []
        for name in (*graph_ffi.DEVICE_FUNCTIONS, *graph_ffi.OPTIONAL_DEVICE_FUNCTIONS):
            raw = vk.lib.vkGetDeviceProcAddr(ctx.device, name.encode())
            if raw == vk.ffi.NULL:
                if name in graph_ffi.DEVICE_FUNCTIONS:
                    missing.append(name)
                continue
            functions[name] = ffi.cast(f"PFN_{name}", raw)
        for name in graph_ffi.INSTANCE_FUNCTIONS:
            raw = vk.lib.vkGetInstanceProcAddr(ctx.instance, name.encode())
            if raw != vk.ffi.NULL:
                functions[name] = ffi.cast(f"PFN_{name}", raw)
        if missing:
            raise DeviceError(
                f"'{ctx.info.name}' enables {GRAPH_EXT} but does not provide {', '.join(missing)}"
                + (f" (layers: {', '.join(ctx.layers)})" if ctx.layers else "")
            )
        api = cls(ctx, functions)
        flags = api.queue_flags()
        if not flags & graph_ffi.QUEUE_DATA_GRAPH_BIT_ARM:
            raise DeviceError(
                f"queue family {ctx.queue_family} of '{ctx.info.name}' lacks VK_QUEUE_DATA_GRAPH_BIT_ARM (flags {flags:#x}): "
                "data graphs cannot be dispatched on it"
            )
        _APIS[ctx] = api
        return api

    def queue_flags(self, family: int | None = None) -> int:
        """``VkQueueFlags`` of ``family`` (default: the context's queue family)."""
        families = vk.vkGetPhysicalDeviceQueueFamilyProperties(self.ctx.physical)
        return int(families[self.ctx.queue_family if family is None else family].queueFlags)

    def features(self) -> Any:
        """``VkPhysicalDeviceDataGraphFeaturesARM`` of the device (a second-FFI struct)."""
        feats = graph_ffi.new("VkPhysicalDeviceDataGraphFeaturesARM")
        chain = vk.VkPhysicalDeviceFeatures2(sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, pNext=arm_ffi.as_void_p(feats))
        vk.vkGetPhysicalDeviceFeatures2(self.ctx.physical, chain)
        return feats[0]

    def queue_properties(self, family: int | None = None) -> list[GraphQueueProperties] | None:
        """The engines and operation sets of ``family``; ``None`` when the query is not provided."""
        fn = self.vkGetPhysicalDeviceQueueFamilyDataGraphPropertiesARM
        if fn is None:
            return None
        index = self.ctx.queue_family if family is None else family
        count = ffi.new("uint32_t *")
        if fn(self.ctx.physical, index, count, ffi.NULL) != vk.VK_SUCCESS:
            return None
        arr = graph_ffi.new_array("VkQueueFamilyDataGraphPropertiesARM", count[0])
        result = fn(self.ctx.physical, index, count, arr)
        if result not in (vk.VK_SUCCESS, vk.VK_INCOMPLETE):
            return None
        return [
            GraphQueueProperties(
                int(p.engine.type), bool(p.engine.isForeign), int(p.operation.operationType),
                ffi.string(p.operation.name).decode("utf-8", "replace"), int(p.operation.version),
            )
            for p in arr[0 : count[0]]
        ]


# ---------------------------------------------------------------------------------------------------
# Layouts and descriptor sets


class GraphLayout:
    """Descriptor set layouts (one TENSOR_ARM descriptor per binding, stages ALL) and the pipeline layout
    over them. Sets are numbered from 0; a set with no bindings between used ones gets an empty layout.

    ``bindings`` maps (set, binding) to a descriptor count (1 for a single tensor).
    """

    def __init__(self, ctx: VulkanContext, bindings: Mapping[tuple[int, int], int] | Iterable[tuple[int, int]]) -> None:
        counts = dict(bindings) if isinstance(bindings, Mapping) else {tuple(k): 1 for k in bindings}  # type: ignore[misc]
        self.ctx = ctx
        self.bindings: dict[tuple[int, int], int] = {(int(s), int(b)): int(n) for (s, b), n in counts.items()}
        self.set_layouts: list[Any] = []
        self.handle: Any = None
        set_count = max((s for s, _ in self.bindings), default=-1) + 1
        try:
            for s in range(set_count):
                layout_bindings = [
                    vk.VkDescriptorSetLayoutBinding(binding=b, descriptorType=arm_ffi.DESCRIPTOR_TYPE_TENSOR_ARM,
                                                    descriptorCount=n, stageFlags=graph_ffi.SHADER_STAGE_ALL)
                    for (ss, b), n in sorted(self.bindings.items()) if ss == s
                ]
                info = vk.VkDescriptorSetLayoutCreateInfo(pBindings=layout_bindings or None)
                self.set_layouts.append(vk.vkCreateDescriptorSetLayout(ctx.device, info, None))
            self.handle = vk.vkCreatePipelineLayout(
                ctx.device, vk.VkPipelineLayoutCreateInfo(pSetLayouts=self.set_layouts or None), None
            )
        except BaseException:
            self.destroy()
            raise

    @classmethod
    def for_module(cls, ctx: VulkanContext, module: GraphModuleInfo) -> "GraphLayout":
        """A layout declaring exactly the module's tensor bindings."""
        return cls(ctx, {key: (b.array_length or 1) for key, b in module.bindings.items()})

    def descriptor_sets(self, tensors: Mapping[tuple[int, int], DeviceTensor | Sequence[DeviceTensor]]) -> "GraphDescriptorSets":
        """A pool with one set per set layout, every binding written with ``tensors[(set, binding)]``.

        Raises :class:`DeviceError` when a binding of the layout has no tensor (an unwritten descriptor)
        or a tensor is given for a binding the layout lacks.
        """
        given = {k: ([v] if isinstance(v, DeviceTensor) else list(v)) for k, v in tensors.items()}
        problems = [f"set {s} binding {b} has no tensor" for (s, b) in sorted(set(self.bindings) - set(given))]
        problems += [f"set {s} binding {b} is not in the layout" for (s, b) in sorted(set(given) - set(self.bindings))]
        problems += [
            f"set {s} binding {b}: {len(v)} tensors for {self.bindings[(s, b)]} descriptors"
            for (s, b), v in sorted(given.items()) if (s, b) in self.bindings and len(v) != self.bindings[(s, b)]
        ]
        for (s, b), v in sorted(given.items()):
            for t in v:
                if not t.description.usage & DATA_GRAPH_USAGE:
                    problems.append(f"set {s} binding {b}: the tensor lacks DATA_GRAPH usage")
                if t.allocation is None:
                    problems.append(f"set {s} binding {b}: the tensor has no memory bound")
        if problems:
            raise DeviceError("graph descriptor sets: " + "; ".join(problems))
        return GraphDescriptorSets.allocate(self, given)

    def destroy(self) -> None:
        """Destroy the pipeline layout and the set layouts. Idempotent."""
        if self.handle is not None:
            vk.vkDestroyPipelineLayout(self.ctx.device, self.handle, None)
            self.handle = None
        for layout in self.set_layouts:
            vk.vkDestroyDescriptorSetLayout(self.ctx.device, layout, None)
        self.set_layouts = []


@dataclass
class GraphDescriptorSets:
    """A descriptor pool and one written set per set layout of a :class:`GraphLayout` (``sets[i]`` is set i)."""

    ctx: VulkanContext
    pool: Any
    sets: list[Any]
    written: frozenset[tuple[int, int]]

    @classmethod
    def allocate(cls, layout: GraphLayout, tensors: Mapping[tuple[int, int], Sequence[DeviceTensor]]) -> "GraphDescriptorSets":
        ctx = layout.ctx
        n_sets = len(layout.set_layouts)
        total = sum(layout.bindings.values())
        sizes = [vk.VkDescriptorPoolSize(type=arm_ffi.DESCRIPTOR_TYPE_TENSOR_ARM, descriptorCount=max(total, 1))]
        pool = vk.vkCreateDescriptorPool(ctx.device, vk.VkDescriptorPoolCreateInfo(maxSets=max(n_sets, 1), pPoolSizes=sizes), None)
        try:
            sets = list(vk.vkAllocateDescriptorSets(
                ctx.device, vk.VkDescriptorSetAllocateInfo(descriptorPool=pool, pSetLayouts=layout.set_layouts)
            )) if n_sets else []
            writes = [tensor_descriptor_write(sets[s], b, ts) for (s, b), ts in sorted(tensors.items())]
            update_descriptor_sets(ctx, writes)
        except BaseException:
            vk.vkDestroyDescriptorPool(ctx.device, pool, None)
            raise
        return cls(ctx, pool, sets, frozenset(tensors))

    def destroy(self) -> None:
        if self.pool is not None:
            vk.vkDestroyDescriptorPool(self.ctx.device, self.pool, None)
            self.pool = None
            self.sets = []


# ---------------------------------------------------------------------------------------------------
# Sessions


# Bind points whose memory is read before anything writes it: the optical-flow cache, which an
# execute flag such as INPUT_UNCHANGED reads on a first dispatch. Zeroed, a run is deterministic
# (ARM's reference runner leaves it as allocated and gives a different answer each run).
ZEROED_BIND_POINTS = frozenset({1000631001})  # DATA_GRAPH_PIPELINE_SESSION_BIND_POINT_OPTICAL_FLOW_CACHE_ARM


def _fill_zero(buffer: Any, size: int, cb: Any) -> None:
    vk.vkCmdFillBuffer(cb, buffer, 0, size & ~3, 0)  # a fill's size is a multiple of 4


@dataclass(frozen=True)
class SessionMemoryRequirement:
    """The memory one object of one session bind point needs."""

    bind_point: int
    object_index: int
    requirements: MemoryRequirements


@dataclass
class GraphSession:
    """A ``VkDataGraphPipelineSessionARM`` with memory bound at every bind point it reports."""

    api: GraphApi
    handle: Any
    requirements: list[SessionMemoryRequirement]
    allocations: list[memory.Allocation] = field(default_factory=list)
    unzeroed: list[memory.Allocation] = field(default_factory=list)  # of ZEROED_BIND_POINTS, not mappable

    @classmethod
    def create(cls, api: GraphApi, pipeline_handle: Any, *, host_readable: bool = False, flags: int = 0) -> "GraphSession":
        """Create a session of ``pipeline_handle`` with ``flags`` (``VkDataGraphPipelineSessionCreateFlagsARM``)
        and allocate and bind its memory at every bind point (host-visible and mapped with
        ``host_readable`` where the device allows, for ``--session-memory-dump-dir``; device-local otherwise).

        Raises :class:`DeviceError` when a call fails or a bind point is of a type other than MEMORY.
        """
        info = graph_ffi.new("VkDataGraphPipelineSessionCreateInfoARM", flags=flags, dataGraphPipeline=pipeline_handle)
        out = ffi.new("VkDataGraphPipelineSessionARM *")
        result = api.vkCreateDataGraphPipelineSessionARM(api.device, info, ffi.NULL, out)
        if result != vk.VK_SUCCESS:
            raise DeviceError(f"vkCreateDataGraphPipelineSessionARM failed ({_result_name(result)})")
        session = cls(api, out[0], [])
        try:
            session._bind_memory(host_readable)
        except BaseException:
            session.destroy()
            raise
        return session

    def _bind_memory(self, host_readable: bool) -> None:
        api = self.api
        query = graph_ffi.new("VkDataGraphPipelineSessionBindPointRequirementsInfoARM", session=self.handle)
        count = ffi.new("uint32_t *")
        result = api.vkGetDataGraphPipelineSessionBindPointRequirementsARM(api.device, query, count, ffi.NULL)
        if result != vk.VK_SUCCESS:
            raise DeviceError(f"vkGetDataGraphPipelineSessionBindPointRequirementsARM failed ({_result_name(result)})")
        points = graph_ffi.new_array("VkDataGraphPipelineSessionBindPointRequirementARM", count[0])
        if count[0]:
            result = api.vkGetDataGraphPipelineSessionBindPointRequirementsARM(api.device, query, count, points)
            if result != vk.VK_SUCCESS:
                raise DeviceError(f"vkGetDataGraphPipelineSessionBindPointRequirementsARM failed ({_result_name(result)})")
        binds: list[Any] = []
        for p in points[0 : count[0]]:
            if p.bindPointType != graph_ffi.DATA_GRAPH_PIPELINE_SESSION_BIND_POINT_TYPE_MEMORY_ARM:
                raise DeviceError(f"graph session bind point {p.bindPoint} has type {p.bindPointType}; only MEMORY is supported")
            for obj in range(p.numObjects):
                info = graph_ffi.new("VkDataGraphPipelineSessionMemoryRequirementsInfoARM",
                                     session=self.handle, bindPoint=p.bindPoint, objectIndex=obj)
                reqs = graph_ffi.new("VkMemoryRequirements2")
                api.vkGetDataGraphPipelineSessionMemoryRequirementsARM(api.device, info, reqs)
                r = MemoryRequirements.from_struct(reqs.memoryRequirements)
                self.requirements.append(SessionMemoryRequirement(int(p.bindPoint), obj, r))
                if r.size == 0:
                    continue
                zeroed = p.bindPoint in ZEROED_BIND_POINTS
                mapped = (host_readable or zeroed) and memory.can_map(api.ctx, r.memoryTypeBits)
                alloc = memory.allocate(api.ctx, r, r.size, host_access=mapped,
                                        what=f"graph session memory (bind point {p.bindPoint}, object {obj})")
                self.allocations.append(alloc)
                if zeroed and mapped:
                    alloc.zero(0, r.size)
                elif zeroed:
                    self.unzeroed.append(alloc)
                binds.append((p.bindPoint, obj, alloc))
        if binds:
            infos = ffi.new("VkBindDataGraphPipelineSessionMemoryInfoARM[]", len(binds))
            for k, (point, obj, alloc) in enumerate(binds):
                e = infos[k]
                e.sType = graph_ffi.STYPE_OF["VkBindDataGraphPipelineSessionMemoryInfoARM"]
                e.session = self.handle
                e.bindPoint = point
                e.objectIndex = obj
                e.memory = alloc.memory
                e.memoryOffset = 0
            result = api.vkBindDataGraphPipelineSessionMemoryARM(api.device, len(binds), infos)
            if result != vk.VK_SUCCESS:
                raise DeviceError(f"vkBindDataGraphPipelineSessionMemoryARM failed ({_result_name(result)})")

    def zero_on_device(self, submit: Callable[[Callable[[Any], None]], None]) -> None:
        """Zero the memory of :data:`ZEROED_BIND_POINTS` that no host mapping could reach (a device-local
        optical-flow cache): a transfer fill through a buffer bound over it, run with ``submit`` (the
        session's one-time submission). Memory a buffer cannot be bound to is left as allocated."""
        device = self.api.device
        for alloc in self.unzeroed:
            buffer = vk.vkCreateBuffer(device, vk.VkBufferCreateInfo(size=alloc.size, usage=vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                                                                     sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE), None)
            try:
                needs = vk.vkGetBufferMemoryRequirements(device, buffer)
                if needs.memoryTypeBits & (1 << alloc.type_index) and needs.size <= alloc.size:
                    vk.vkBindBufferMemory(device, buffer, alloc.memory, 0)
                    submit(functools.partial(_fill_zero, buffer, alloc.size))
            finally:
                vk.vkDestroyBuffer(device, buffer, None)
        self.unzeroed = []

    @property
    def memory_size(self) -> int:
        return sum(r.requirements.size for r in self.requirements)

    def destroy(self) -> None:
        """Destroy the session and free its memory. Idempotent."""
        if self.handle is not None:
            self.api.vkDestroyDataGraphPipelineSessionARM(self.api.device, self.handle, ffi.NULL)
            self.handle = None
        for alloc in self.allocations:
            memory.free(self.api.ctx, alloc)
        self.allocations = []


# ---------------------------------------------------------------------------------------------------
# Pipelines


@dataclass
class DataGraphPipeline:
    """A data graph pipeline of one graph entry point of a SPIR-V module, with one session.

    Create with :meth:`create`; record with :meth:`record_dispatch`; :meth:`destroy` frees the session,
    the pipeline and the shader module (the layout stays the caller's).
    """

    api: GraphApi
    module: GraphModuleInfo
    entry: str
    layout_handle: Any
    resources: tuple[GraphResource, ...]
    constants: tuple[GraphConstant, ...]
    shader_module: Any
    handle: Any  # the `vulkan` package's VkPipeline
    session: GraphSession | None = None
    create_seconds: float = 0.0
    _keep: list[Any] = field(default_factory=list, repr=False)
    _spirv: bytes = field(default=b"", repr=False)

    @classmethod
    def create(
        cls,
        api: GraphApi,
        spirv: bytes,
        entry: str,
        layout: GraphLayout | Any,
        resources: Sequence[GraphResource | tuple[Any, ...]],
        constants: Sequence[GraphConstant | tuple[Any, ...]] = (),
        *,
        session: bool = True,
        session_host_readable: bool = False,
        pipeline_cache: Any = None,
    ) -> "DataGraphPipeline":
        """Check, then create the pipeline (and, with ``session``, a session with its memory, host-readable
        with ``session_host_readable``).

        ``pipeline_cache``: a ``VkPipelineCache`` to create it with (default none).
        ``layout`` is a :class:`GraphLayout` (its bindings are checked against the module too) or a
        ``VkPipelineLayout`` handle. ``resources`` are :class:`GraphResource` or ``(set, binding,
        TensorDescription)`` tuples, ``constants`` :class:`GraphConstant` or ``(graph constant id,
        TensorDescription, data)`` tuples.

        Raises :class:`DeviceError` listing every problem :func:`pipeline_problems` finds, before any
        Vulkan call, or when a Vulkan call fails.
        """
        res = tuple(_as_resource(r) for r in resources)
        consts = tuple(_as_constant(c) for c in constants)
        module = scan_graph_module(spirv)
        layout_handle = layout.handle if isinstance(layout, GraphLayout) else layout
        layout_bindings = layout.bindings if isinstance(layout, GraphLayout) else None
        problems = pipeline_problems(module, entry, res, consts, layout_bindings)
        if layout_handle is None:
            problems.append("the pipeline layout is missing (destroyed?)")
        if problems:
            raise DeviceError("invalid graph pipeline: " + "; ".join(problems))

        device = api.device
        code = bytes(spirv)
        shader = vk.vkCreateShaderModule(device, vk.VkShaderModuleCreateInfo(codeSize=len(code), pCode=code), None)
        keep: list[Any] = []
        try:
            # Resource infos, each with its tensor description in pNext.
            infos = ffi.new("VkDataGraphPipelineResourceInfoARM[]", max(len(res), 1))
            for k, r in enumerate(res):
                desc, dims, strides = r.description.build()
                keep += [desc, dims, strides]
                e = infos[k]
                e.sType = graph_ffi.STYPE_OF["VkDataGraphPipelineResourceInfoARM"]
                e.pNext = desc
                e.descriptorSet = r.set
                e.binding = r.binding
                e.arrayElement = r.array_element
            # Constants, each with its tensor description in pNext and its data kept with the pipeline.
            cinfos = ffi.new("VkDataGraphPipelineConstantARM[]", max(len(consts), 1))
            for k, c in enumerate(consts):
                desc, dims, strides = c.description.build()
                data = ffi.from_buffer(c.data)
                keep += [desc, dims, strides, data]
                e = cinfos[k]
                e.sType = graph_ffi.STYPE_OF["VkDataGraphPipelineConstantARM"]
                e.pNext = desc
                e.id = c.id
                e.pConstantData = data
            name = ffi.new("char[]", entry.encode())
            module_info = graph_ffi.new(
                "VkDataGraphPipelineShaderModuleCreateInfoARM",
                module=shader,
                pName=name,
                pSpecializationInfo=ffi.NULL,
                constantCount=len(consts),
                pConstants=cinfos if consts else ffi.NULL,
            )
            create = graph_ffi.new(
                "VkDataGraphPipelineCreateInfoARM",
                pNext=module_info,
                flags=0,
                layout=layout_handle,
                resourceInfoCount=len(res),
                pResourceInfos=infos if res else ffi.NULL,
            )
            out = ffi.new("VkPipeline *")
            start = time.perf_counter()
            cache = ffi.NULL if pipeline_cache is None else ffi.cast("VkPipelineCache", arm_ffi.handle_to_int(pipeline_cache))
            result = api.vkCreateDataGraphPipelinesARM(device, ffi.NULL, cache, 1, create, ffi.NULL, out)
            seconds = time.perf_counter() - start
            del infos, cinfos, name, module_info, create  # alive until here: the call has returned
            if result != vk.VK_SUCCESS:
                raise DeviceError(f"vkCreateDataGraphPipelinesARM failed ({_result_name(result)}) for graph {entry!r}")
        except BaseException:
            vk.vkDestroyShaderModule(device, shader, None)
            raise
        pipeline = cls(api, module, entry, layout_handle, res, consts, shader,
                       graph_ffi.to_vk_handle("VkPipeline", out[0]), None, seconds, keep, code)
        if session:
            try:
                pipeline.session = GraphSession.create(api, out[0], host_readable=session_host_readable)
            except BaseException:
                pipeline.destroy()
                raise
        return pipeline

    def cache_material(self) -> list[Any]:
        """What makes this pipeline (JSON-ready), for pipeline cache accounting: the module's code, the
        entry point, the resources and the constants."""
        return [hashlib.sha256(self._spirv).hexdigest(), self.entry,
                [[r.set, r.binding, r.array_element, repr(r.description)] for r in self.resources],
                [[c.id, repr(c.description), hashlib.sha256(bytes(c.data)).hexdigest()] for c in self.constants]]

    def new_session(self) -> GraphSession:
        """Another session of this pipeline (for dispatches in flight at the same time); the caller destroys it."""
        return GraphSession.create(self.api, self.handle)

    def dispatch_problems(self, descriptor_sets: Sequence[Any], first_set: int = 0) -> list[str]:
        """What is wrong with dispatching with ``descriptor_sets`` bound from set ``first_set``."""
        problems: list[str] = []
        bound = {first_set + i for i, ds in enumerate(descriptor_sets) if ds is not None and ds != vk.VK_NULL_HANDLE}
        missing = [s for s in self.module.sets if s not in bound]
        if missing:
            problems.append(
                f"descriptor set(s) {', '.join(map(str, missing))} used by graph {self.entry!r} are not bound "
                "(the emulation layer would abort the process)"
            )
        return problems

    def record_dispatch(self, cb: Any, descriptor_sets: Sequence[Any] | GraphDescriptorSets, *,
                        session: GraphSession | None = None, first_set: int = 0) -> None:
        """Record: bind the pipeline and ``descriptor_sets`` (from set ``first_set``) at the DATA_GRAPH
        bind point, then ``vkCmdDispatchDataGraphARM`` with ``session`` (default: the pipeline's own).

        Raises :class:`DeviceError` before recording anything when a set the module uses is not bound,
        a :class:`GraphDescriptorSets` left a binding of the module unwritten, or there is no session.
        """
        sets = descriptor_sets.sets if isinstance(descriptor_sets, GraphDescriptorSets) else list(descriptor_sets)
        problems = self.dispatch_problems(sets, first_set)
        if isinstance(descriptor_sets, GraphDescriptorSets):
            unwritten = sorted(set(self.module.bindings) - set(descriptor_sets.written))
            problems += [f"set {s} binding {b} was never written" for s, b in unwritten]
        use = session if session is not None else self.session
        if use is None or use.handle is None:
            problems.append("no session to dispatch with (create the pipeline with session=True or pass one)")
        if self.handle is None:
            problems.append("the pipeline was destroyed")
        if problems:
            raise DeviceError("invalid graph dispatch: " + "; ".join(problems))
        assert use is not None
        vk.vkCmdBindPipeline(cb, BIND_POINT, self.handle)
        if sets:
            vk.vkCmdBindDescriptorSets(cb, BIND_POINT, self.layout_handle, first_set, len(sets), sets, 0, None)
        self.api.vkCmdDispatchDataGraphARM(cb, use.handle, ffi.NULL)

    def _info(self) -> Any:
        return graph_ffi.new("VkDataGraphPipelineInfoARM",
                             dataGraphPipeline=ffi.cast("VkPipeline", arm_ffi.handle_to_int(self.handle)))

    def available_properties(self) -> list[int]:
        """The ``VkDataGraphPipelinePropertyARM`` values the implementation reports for this pipeline
        (empty when it lacks ``vkGetDataGraphPipelineAvailablePropertiesARM``).
        Raises :class:`DeviceError` when the query fails."""
        fn = self.api.vkGetDataGraphPipelineAvailablePropertiesARM
        if fn is None:
            return []
        info = self._info()
        count = ffi.new("uint32_t *")
        result = fn(self.api.device, info, count, ffi.NULL)
        if result == vk.VK_SUCCESS and count[0]:
            values = ffi.new("VkDataGraphPipelinePropertyARM[]", count[0])
            result = fn(self.api.device, info, count, values)
            if result == vk.VK_SUCCESS:
                return [int(v) for v in values[0 : count[0]]]
        if result != vk.VK_SUCCESS:
            raise DeviceError(f"vkGetDataGraphPipelineAvailablePropertiesARM failed ({_result_name(result)})")
        return []

    def property_data(self, prop: int) -> bytes:
        """The data of property ``prop`` (one of :meth:`available_properties`): its size is asked first,
        then the data. Raises :class:`DeviceError` when a query fails."""
        fn = self.api.vkGetDataGraphPipelinePropertiesARM
        if fn is None:
            raise DeviceError("vkGetDataGraphPipelinePropertiesARM is not available")
        info = self._info()
        query = graph_ffi.new("VkDataGraphPipelinePropertyQueryResultARM", property=prop, dataSize=0, pData=ffi.NULL)
        result = fn(self.api.device, info, 1, query)
        if result == vk.VK_SUCCESS and query.dataSize:
            data = ffi.new("char[]", query.dataSize)
            query.pData = data
            result = fn(self.api.device, info, 1, query)
            if result == vk.VK_SUCCESS:
                return bytes(ffi.buffer(data, query.dataSize))
        if result != vk.VK_SUCCESS:
            raise DeviceError(f"vkGetDataGraphPipelinePropertiesARM failed ({_result_name(result)}) for property {prop:#x}")
        return b""

    def destroy(self) -> None:
        """Destroy the session, the pipeline and the shader module. Idempotent."""
        if self.session is not None:
            self.session.destroy()
            self.session = None
        if self.handle is not None:
            vk.vkDestroyPipeline(self.api.device, self.handle, None)
            self.handle = None
        if self.shader_module is not None:
            vk.vkDestroyShaderModule(self.api.device, self.shader_module, None)
            self.shader_module = None
        self._keep.clear()
