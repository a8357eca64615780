"""VK_ARM_tensors from Python: tensors, views, tensor descriptors, tensor barriers and copies.

Built on the second FFI of :mod:`vkcore.device.arm_ffi`. Guarantees:

- Every struct handed to a Vulkan call, and everything it points to (dims, strides, view arrays,
  chained structs), is held in a Python object that lives at least until the call returns; objects
  that outlive the call (a descriptor write, a dependency info) carry their own ``keep`` list.
- ARM's emulation layer validates almost nothing and aborts the process on some mismatches, so the
  checks the layer does not make are here (measured with layer 0.11.0 on lavapipe: it creates tensors
  with a zero dimension, a wrong innermost stride, overlapping strides (reporting too small a memory
  size) or strides on an OPTIMAL tensor, all with VK_SUCCESS), as functions returning error strings
  (:func:`description_problems`, :func:`stride_problems`, :func:`mapping_problems`,
  :func:`copy_problems`); :meth:`DeviceTensor.create` and :meth:`DeviceTensor.host_view` raise
  :class:`~vkcore.errors.DeviceError` with those strings before any Vulkan call.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np
import vulkan as vk

from ..device import arm_ffi
from ..device import memory
from ..device.arm_ffi import ffi
from ..device.context import TENSORS_EXT, VulkanContext
from ..errors import DeviceError

LINEAR = arm_ffi.TENSOR_TILING_LINEAR_ARM
OPTIMAL = arm_ffi.TENSOR_TILING_OPTIMAL_ARM
DEFAULT_USAGE = (
    arm_ffi.TENSOR_USAGE_SHADER_BIT_ARM
    | arm_ffi.TENSOR_USAGE_TRANSFER_SRC_BIT_ARM
    | arm_ffi.TENSOR_USAGE_TRANSFER_DST_BIT_ARM
)
ALL_USAGE = sum(arm_ffi.USAGE.values())


@dataclass(frozen=True)
class TensorFormat:
    """A one-component format a tensor may use: its element size and the numpy dtype of its data."""

    name: str
    size: int
    dtype: str


# VkFormat -> element. The extension allows one-component formats only.
TENSOR_FORMATS: dict[int, TensorFormat] = {
    vk.VK_FORMAT_R8_UINT: TensorFormat("VK_FORMAT_R8_UINT", 1, "uint8"),
    vk.VK_FORMAT_R8_SINT: TensorFormat("VK_FORMAT_R8_SINT", 1, "int8"),
    arm_ffi.FORMAT_R8_BOOL_ARM: TensorFormat("VK_FORMAT_R8_BOOL_ARM", 1, "bool"),
    vk.VK_FORMAT_R16_UINT: TensorFormat("VK_FORMAT_R16_UINT", 2, "uint16"),
    vk.VK_FORMAT_R16_SINT: TensorFormat("VK_FORMAT_R16_SINT", 2, "int16"),
    vk.VK_FORMAT_R16_SFLOAT: TensorFormat("VK_FORMAT_R16_SFLOAT", 2, "float16"),
    vk.VK_FORMAT_R32_UINT: TensorFormat("VK_FORMAT_R32_UINT", 4, "uint32"),
    vk.VK_FORMAT_R32_SINT: TensorFormat("VK_FORMAT_R32_SINT", 4, "int32"),
    vk.VK_FORMAT_R32_SFLOAT: TensorFormat("VK_FORMAT_R32_SFLOAT", 4, "float32"),
    vk.VK_FORMAT_R64_UINT: TensorFormat("VK_FORMAT_R64_UINT", 8, "uint64"),
    vk.VK_FORMAT_R64_SINT: TensorFormat("VK_FORMAT_R64_SINT", 8, "int64"),
    vk.VK_FORMAT_R64_SFLOAT: TensorFormat("VK_FORMAT_R64_SFLOAT", 8, "float64"),
    # bfloat16 and float8 (numpy has neither): their payload bytes, element by element
    1000460001: TensorFormat("VK_FORMAT_R16_SFLOAT_FPENCODING_BFLOAT16_ARM", 2, "uint16"),
    1000460002: TensorFormat("VK_FORMAT_R8_SFLOAT_FPENCODING_FLOAT8E4M3_ARM", 1, "uint8"),
    1000460003: TensorFormat("VK_FORMAT_R8_SFLOAT_FPENCODING_FLOAT8E5M2_ARM", 1, "uint8"),
}


@dataclass(frozen=True)
class TensorLimits:
    """The limits the checks use (``VkPhysicalDeviceTensorPropertiesARM``; defaults are the spec minima)."""

    max_dimension_count: int = 4
    max_per_dimension_elements: int = 1 << 16
    max_elements: int = 1 << 32
    max_stride: int = (1 << 31) - 1
    max_size: int = 1 << 32

    @classmethod
    def from_properties(cls, props: Any) -> "TensorLimits":
        return cls(
            max_dimension_count=int(props.maxTensorDimensionCount),
            max_per_dimension_elements=int(props.maxPerDimensionTensorElements),
            max_elements=int(props.maxTensorElements),
            max_stride=int(props.maxTensorStride),
            max_size=int(props.maxTensorSize),
        )


# ---------------------------------------------------------------------------------------------------
# Checks the emulation layer does not make. Each returns a list of problems; empty means fine.


def packed_strides(element_size: int, dims: Sequence[int]) -> tuple[int, ...]:
    """Byte strides of a packed (row-major, innermost last) tensor."""
    strides = [element_size] * len(dims)
    for i in range(len(dims) - 2, -1, -1):
        strides[i] = strides[i + 1] * dims[i + 1]
    return tuple(strides)


def stride_problems(element_size: int, dims: Sequence[int], strides: Sequence[int], limits: TensorLimits | None = None) -> list[str]:
    """What is wrong with byte ``strides`` for ``dims`` of ``element_size``-byte elements."""
    problems: list[str] = []
    if len(strides) != len(dims):
        return [f"{len(strides)} strides for {len(dims)} dimensions"]
    if not strides:
        return problems
    if strides[-1] != element_size:
        problems.append(f"the innermost stride is {strides[-1]}, it must be the element size ({element_size})")
    for i, s in enumerate(strides):
        if s <= 0 or s % element_size:
            problems.append(f"stride {i} ({s}) is not a positive multiple of the element size ({element_size})")
        if limits is not None and s > limits.max_stride:
            problems.append(f"stride {i} ({s}) exceeds the device limit maxTensorStride ({limits.max_stride})")
    for i in range(len(strides) - 1):
        need = strides[i + 1] * dims[i + 1]
        if strides[i] < need:
            problems.append(f"stride {i} ({strides[i]}) is less than stride {i + 1} x dimension {i + 1} ({need}): rows overlap")
    return problems


def description_problems(
    format: int,
    dims: Sequence[int],
    tiling: int = LINEAR,
    usage: int = DEFAULT_USAGE,
    strides: Sequence[int] | None = None,
    limits: TensorLimits | None = None,
) -> list[str]:
    """What is wrong with a tensor description (before ``vkCreateTensorARM``, which checks nothing)."""
    limits = limits or TensorLimits()
    problems: list[str] = []
    element = TENSOR_FORMATS.get(format)
    if element is None:
        problems.append(f"format {format} is not a one-component format usable for tensors")
    if tiling not in (LINEAR, OPTIMAL):
        problems.append(f"tiling {tiling} is neither OPTIMAL (0) nor LINEAR (1)")
    if not usage or usage & ~ALL_USAGE:
        problems.append(f"usage {usage:#x} is empty or has bits outside VkTensorUsageFlagBitsARM")
    if not 1 <= len(dims) <= limits.max_dimension_count:
        problems.append(f"{len(dims)} dimensions, the device allows 1 to {limits.max_dimension_count}")
    for i, d in enumerate(dims):
        if not isinstance(d, int) or d < 1:
            problems.append(f"dimension {i} is {d!r}, it must be an integer >= 1")
        elif d > limits.max_per_dimension_elements:
            problems.append(f"dimension {i} ({d}) exceeds maxPerDimensionTensorElements ({limits.max_per_dimension_elements})")
    if problems:
        return problems
    count = 1
    for d in dims:
        count *= d
    if count > limits.max_elements:
        problems.append(f"{count} elements exceed maxTensorElements ({limits.max_elements})")
    if strides is not None:
        if tiling != LINEAR:
            problems.append("strides are given for an OPTIMAL tensor; only LINEAR tensors may have strides")
        assert element is not None
        problems += stride_problems(element.size, dims, strides, limits)
    return problems


def mapping_problems(tiling: int) -> list[str]:
    """Why the host may not read or write a tensor's memory directly (only LINEAR layouts are defined)."""
    if tiling != LINEAR:
        return ["only LINEAR tensors can be mapped: an OPTIMAL tensor's memory layout is the driver's"]
    return []


def copy_problems(src: "TensorDescription", dst: "TensorDescription") -> list[str]:
    """What is wrong with a whole-tensor ``vkCmdCopyTensorARM`` from ``src`` to ``dst``."""
    problems: list[str] = []
    if len(src.dims) != len(dst.dims):
        problems.append(f"source has {len(src.dims)} dimensions, destination {len(dst.dims)}")
    elif tuple(src.dims) != tuple(dst.dims):
        problems.append(f"source dims {list(src.dims)} differ from destination dims {list(dst.dims)}")
    if src.element.size != dst.element.size:
        problems.append(f"formats {src.element.name} and {dst.element.name} differ in size")
    if not src.usage & arm_ffi.TENSOR_USAGE_TRANSFER_SRC_BIT_ARM:
        problems.append("the source tensor lacks TRANSFER_SRC usage")
    if not dst.usage & arm_ffi.TENSOR_USAGE_TRANSFER_DST_BIT_ARM:
        problems.append("the destination tensor lacks TRANSFER_DST usage")
    return problems


# ---------------------------------------------------------------------------------------------------
# Device functions


def _result_name(code: int) -> str:
    for name in dir(vk):
        if name.startswith(("VK_ERROR_", "VK_SUCCESS", "VK_INCOMPLETE", "VK_NOT_READY")) and getattr(vk, name) == code:
            return name
    return str(code)


_APIS: "weakref.WeakKeyDictionary[VulkanContext, TensorApi]" = weakref.WeakKeyDictionary()


class TensorApi:
    """VK_ARM_tensors device functions of one device, resolved with ``vkGetDeviceProcAddr``.

    Each function is an attribute named as in C (``api.vkCreateTensorARM(...)``), typed with the
    second FFI's ``PFN_*`` so cffi checks argument types.
    """

    vkCreateTensorARM: Any
    vkDestroyTensorARM: Any
    vkCreateTensorViewARM: Any
    vkDestroyTensorViewARM: Any
    vkGetTensorMemoryRequirementsARM: Any
    vkBindTensorMemoryARM: Any
    vkGetDeviceTensorMemoryRequirementsARM: Any
    vkCmdCopyTensorARM: Any

    def __init__(self, ctx: VulkanContext, functions: dict[str, Any]) -> None:
        self.ctx = ctx
        self.device = ctx.device
        for name, fn in functions.items():
            setattr(self, name, fn)
        self._limits: TensorLimits | None = None

    @classmethod
    def load(cls, ctx: VulkanContext) -> "TensorApi":
        """The functions for ``ctx`` (resolved once per context).

        Raises :class:`DeviceError` when VK_ARM_tensors is not enabled or a function is missing.
        """
        cached = _APIS.get(ctx)
        if cached is not None and cached.device == ctx.device:
            return cached
        if TENSORS_EXT not in getattr(ctx, "extensions", ()):
            raise DeviceError(f"{TENSORS_EXT} is not enabled on '{ctx.info.name}' (create the context with need_tensors=True)")
        functions: dict[str, Any] = {}
        missing: list[str] = []
        for name in arm_ffi.DEVICE_FUNCTIONS:
            raw = vk.lib.vkGetDeviceProcAddr(ctx.device, name.encode())
            if raw == vk.ffi.NULL:
                missing.append(name)
                continue
            functions[name] = ffi.cast(f"PFN_{name}", raw)
        if missing:
            raise DeviceError(
                f"'{ctx.info.name}' enables {TENSORS_EXT} but does not provide {', '.join(missing)}"
                + (f" (layers: {', '.join(ctx.layers)})" if ctx.layers else "")
            )
        api = cls(ctx, functions)
        _APIS[ctx] = api
        return api

    # -- physical-device queries (core entry points with our structs chained in) -----------------

    def properties(self) -> Any:
        """``VkPhysicalDeviceTensorPropertiesARM`` of the device (a second-FFI struct)."""
        props = arm_ffi.new("VkPhysicalDeviceTensorPropertiesARM")
        chain = vk.VkPhysicalDeviceProperties2(sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, pNext=arm_ffi.as_void_p(props))
        vk.vkGetPhysicalDeviceProperties2(self.ctx.physical, chain)
        return props[0]

    def features(self) -> Any:
        """``VkPhysicalDeviceTensorFeaturesARM`` of the device (a second-FFI struct)."""
        feats = arm_ffi.new("VkPhysicalDeviceTensorFeaturesARM")
        chain = vk.VkPhysicalDeviceFeatures2(sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, pNext=arm_ffi.as_void_p(feats))
        vk.vkGetPhysicalDeviceFeatures2(self.ctx.physical, chain)
        return feats[0]

    def format_features(self, format: int) -> tuple[int, int]:
        """(optimal, linear) tiling tensor feature flags (``VkFormatFeatureFlags2``) of ``format``."""
        tprops = arm_ffi.new("VkTensorFormatPropertiesARM")
        chain = vk.VkFormatProperties2(sType=vk.VK_STRUCTURE_TYPE_FORMAT_PROPERTIES_2, pNext=arm_ffi.as_void_p(tprops))
        vk.vkGetPhysicalDeviceFormatProperties2(self.ctx.physical, format, chain)
        return int(tprops.optimalTilingTensorFeatures), int(tprops.linearTilingTensorFeatures)

    @property
    def limits(self) -> TensorLimits:
        if self._limits is None:
            props = self.properties()
            # A layer that leaves the struct untouched reports zeros: keep the spec minima then.
            self._limits = TensorLimits.from_properties(props) if props.maxTensorDimensionCount else TensorLimits()
        return self._limits

    def device_memory_requirements(self, description: "TensorDescription") -> "MemoryRequirements":
        """Memory requirements of a tensor that does not exist yet."""
        parts = description.build()
        create = _create_info(parts[0])
        query = arm_ffi.new("VkDeviceTensorMemoryRequirementsARM", pCreateInfo=create)
        out = arm_ffi.new("VkMemoryRequirements2")
        self.vkGetDeviceTensorMemoryRequirementsARM(self.device, query, out)
        del parts, create
        return MemoryRequirements.from_struct(out.memoryRequirements)


def _create_info(desc_ptr: Any) -> Any:
    return arm_ffi.new(
        "VkTensorCreateInfoARM",
        flags=0,
        pDescription=desc_ptr,
        sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE,
        queueFamilyIndexCount=0,
        pQueueFamilyIndices=ffi.NULL,
    )


# ---------------------------------------------------------------------------------------------------
# Tensors


@dataclass(frozen=True)
class MemoryRequirements:
    """Plain memory requirements; ``memoryTypeBits`` is spelled as :func:`vkcore.device.memory.allocate` reads it."""

    size: int
    alignment: int
    memoryTypeBits: int

    @classmethod
    def from_struct(cls, r: Any) -> "MemoryRequirements":
        return cls(int(r.size), int(r.alignment), int(r.memoryTypeBits))


@dataclass(frozen=True)
class TensorDescription:
    """What ``VkTensorDescriptionARM`` says: format (a ``VkFormat``), dims (outermost first), tiling,
    usage (``VkTensorUsageFlagsARM``) and byte strides (``None``: packed)."""

    format: int
    dims: tuple[int, ...]
    tiling: int = LINEAR
    usage: int = DEFAULT_USAGE
    strides: tuple[int, ...] | None = None

    @property
    def element(self) -> TensorFormat:
        return TENSOR_FORMATS[self.format]

    @property
    def effective_strides(self) -> tuple[int, ...]:
        return self.strides if self.strides is not None else packed_strides(self.element.size, self.dims)

    @property
    def element_count(self) -> int:
        n = 1
        for d in self.dims:
            n *= d
        return n

    @property
    def span(self) -> int:
        """Bytes from the first element to one past the last (LINEAR layouts)."""
        strides = self.effective_strides
        return sum((d - 1) * s for d, s in zip(self.dims, strides)) + self.element.size

    def problems(self, limits: TensorLimits | None = None) -> list[str]:
        return description_problems(self.format, self.dims, self.tiling, self.usage, self.strides, limits)

    def build(self) -> tuple[Any, Any, Any]:
        """(``VkTensorDescriptionARM *``, dims array, strides array or NULL): keep all three alive together."""
        dims = ffi.new("int64_t[]", list(self.dims))
        strides = ffi.new("int64_t[]", list(self.strides)) if self.strides is not None else ffi.NULL
        desc = arm_ffi.new(
            "VkTensorDescriptionARM",
            tiling=self.tiling,
            format=self.format,
            dimensionCount=len(self.dims),
            pDimensions=dims,
            pStrides=strides,
            usage=self.usage,
        )
        return desc, dims, strides


@dataclass
class DeviceTensor:
    """A ``VkTensorARM``, its memory binding and (optionally) one ``VkTensorViewARM``.

    Create with :meth:`create`; bind with :meth:`bind` (to part of a shared allocation) or
    :meth:`allocate_and_bind` (its own allocation, freed by :meth:`destroy`).
    """

    api: TensorApi
    description: TensorDescription
    handle: Any
    requirements: MemoryRequirements
    allocation: memory.Allocation | None = None
    offset: int = 0
    view: Any = None
    owns_allocation: bool = False
    _keep: list[Any] = field(default_factory=list, repr=False)

    @classmethod
    def create(
        cls,
        api: TensorApi,
        format: int,
        dims: Sequence[int],
        tiling: int = LINEAR,
        usage: int = DEFAULT_USAGE,
        strides: Sequence[int] | None = None,
        *,
        limits: TensorLimits | None = None,
    ) -> "DeviceTensor":
        """Check the description, create the tensor and query its memory requirements.

        Raises :class:`DeviceError` listing every problem, before any Vulkan call, or when
        ``vkCreateTensorARM`` fails.
        """
        description = TensorDescription(int(format), tuple(int(d) for d in dims), int(tiling), int(usage),
                                        tuple(int(s) for s in strides) if strides is not None else None)
        problems = description.problems(limits if limits is not None else api.limits)
        if problems:
            raise DeviceError("invalid tensor: " + "; ".join(problems))
        desc, dims_arr, strides_arr = description.build()
        info = _create_info(desc)
        out = ffi.new("VkTensorARM *")
        result = api.vkCreateTensorARM(api.device, info, ffi.NULL, out)
        del dims_arr, strides_arr  # alive until here: the call has returned
        if result != vk.VK_SUCCESS:
            raise DeviceError(f"vkCreateTensorARM failed ({_result_name(result)}) for {description.element.name} {list(description.dims)}")
        handle = out[0]
        query = arm_ffi.new("VkTensorMemoryRequirementsInfoARM", tensor=handle)
        reqs = arm_ffi.new("VkMemoryRequirements2")
        api.vkGetTensorMemoryRequirementsARM(api.device, query, reqs)
        return cls(api, description, handle, MemoryRequirements.from_struct(reqs.memoryRequirements))

    @property
    def size(self) -> int:
        return self.requirements.size

    def bind(self, allocation: memory.Allocation, offset: int = 0) -> None:
        """Bind to ``allocation`` at ``offset`` (aligned and in range, checked here)."""
        r = self.requirements
        if self.allocation is not None:
            raise DeviceError("tensor memory is already bound")
        if r.alignment and offset % r.alignment:
            raise DeviceError(f"tensor memory offset {offset} is not a multiple of its alignment {r.alignment}")
        if offset + r.size > allocation.size:
            raise DeviceError(f"tensor needs {r.size} bytes at offset {offset}; the allocation has {allocation.size}")
        if not r.memoryTypeBits & (1 << allocation.type_index):
            raise DeviceError(f"memory type {allocation.type_index} is not allowed for this tensor (bits {r.memoryTypeBits:#x})")
        info = arm_ffi.new("VkBindTensorMemoryInfoARM", tensor=self.handle, memory=allocation.memory, memoryOffset=offset)
        result = self.api.vkBindTensorMemoryARM(self.api.device, 1, info)
        if result != vk.VK_SUCCESS:
            raise DeviceError(f"vkBindTensorMemoryARM failed ({_result_name(result)})")
        self.allocation = allocation
        self.offset = offset

    def allocate_and_bind(self, *, host_access: bool = True, what: str = "a tensor") -> memory.Allocation:
        """Allocate memory for this tensor alone (host-visible and mapped when ``host_access``) and bind it."""
        alloc = memory.allocate(self.api.ctx, self.requirements, self.requirements.size, host_access=host_access, what=what)
        try:
            self.bind(alloc, 0)
        except DeviceError:
            memory.free(self.api.ctx, alloc)
            raise
        self.owns_allocation = True
        return alloc

    def create_view(self, format: int | None = None) -> Any:
        """Create (once) and return a ``VkTensorViewARM`` of the whole tensor, in ``format`` or its own."""
        if self.view is not None:
            return self.view
        if self.allocation is None:
            raise DeviceError("bind memory to a tensor before creating its view")
        info = arm_ffi.new("VkTensorViewCreateInfoARM", flags=0, tensor=self.handle,
                           format=self.description.format if format is None else format)
        out = ffi.new("VkTensorViewARM *")
        result = self.api.vkCreateTensorViewARM(self.api.device, info, ffi.NULL, out)
        if result != vk.VK_SUCCESS:
            raise DeviceError(f"vkCreateTensorViewARM failed ({_result_name(result)})")
        self.view = out[0]
        return self.view

    def host_view(self) -> memoryview:
        """The tensor's bytes in the mapping (``span`` bytes from its offset). LINEAR and host-visible only."""
        problems = mapping_problems(self.description.tiling)
        if self.allocation is None or self.allocation.view is None:
            problems.append("the tensor is not bound to host-visible, mapped memory")
        if self.description.span > self.requirements.size:
            problems.append(f"its layout spans {self.description.span} bytes but the driver asked for {self.requirements.size}")
        if problems:
            raise DeviceError("cannot map the tensor: " + "; ".join(problems))
        assert self.allocation is not None and self.allocation.view is not None
        return self.allocation.view[self.offset : self.offset + self.description.span]

    def array(self) -> Any:
        """A numpy array over the mapping (no copy), with the tensor's shape, dtype and strides."""
        d = self.description
        return np.ndarray(d.dims, dtype=np.dtype(d.element.dtype), buffer=self.host_view(), strides=d.effective_strides)

    def destroy(self) -> None:
        """Destroy the view and the tensor; free the allocation when this tensor owns it. Idempotent."""
        if self.view is not None:
            self.api.vkDestroyTensorViewARM(self.api.device, self.view, ffi.NULL)
            self.view = None
        if self.handle is not None:
            self.api.vkDestroyTensorARM(self.api.device, self.handle, ffi.NULL)
            self.handle = None
        if self.owns_allocation and self.allocation is not None:
            memory.free(self.api.ctx, self.allocation)
        self.allocation = None
        self.owns_allocation = False


# ---------------------------------------------------------------------------------------------------
# Descriptors, barriers, copies


@dataclass
class Chained:
    """A `vulkan` struct (``value``) and every cffi object it points to, directly or through ``pNext``."""

    value: Any
    keep: list[Any] = field(default_factory=list, repr=False)


def _view_of(t: DeviceTensor | Any) -> Any:
    if isinstance(t, DeviceTensor):
        return t.create_view()
    return t


def tensor_descriptor_write(dst_set: Any, binding: int, tensors: Sequence[DeviceTensor | Any], *, array_element: int = 0) -> Chained:
    """A ``VkWriteDescriptorSet`` (descriptorType TENSOR_ARM) with a ``VkWriteDescriptorSetTensorARM``
    in its ``pNext`` naming one view per array element (``tensors``: :class:`DeviceTensor` or view handles).

    The second-FFI struct goes into the `vulkan` struct's ``pNext`` cast to ``void *``; the result's
    ``keep`` holds it and the view array.
    """
    views = ffi.new("VkTensorViewARM[]", [_view_of(t) for t in tensors])
    ext = arm_ffi.new("VkWriteDescriptorSetTensorARM", tensorViewCount=len(tensors), pTensorViews=views)
    write = vk.VkWriteDescriptorSet(
        pNext=arm_ffi.as_void_p(ext),
        dstSet=dst_set,
        dstBinding=binding,
        dstArrayElement=array_element,
        descriptorCount=len(tensors),
        descriptorType=arm_ffi.DESCRIPTOR_TYPE_TENSOR_ARM,
    )
    return Chained(write, [ext, views])


def update_descriptor_sets(ctx: VulkanContext, writes: Iterable[Chained | Any]) -> None:
    """``vkUpdateDescriptorSets`` with tensor writes (:class:`Chained`) and plain `vulkan` writes mixed."""
    items = list(writes)
    structs = [w.value if isinstance(w, Chained) else w for w in items]
    if structs:
        vk.vkUpdateDescriptorSets(ctx.device, len(structs), structs, 0, None)
    del items  # keep-alives held until the call returned


@dataclass(frozen=True)
class TensorBarrier:
    """One ``VkTensorMemoryBarrierARM`` (synchronization2 stages and accesses)."""

    tensor: DeviceTensor | Any
    src_stage: int
    src_access: int
    dst_stage: int
    dst_access: int
    src_queue_family: int = vk.VK_QUEUE_FAMILY_IGNORED
    dst_queue_family: int = vk.VK_QUEUE_FAMILY_IGNORED


def tensor_dependency(barriers: Sequence[TensorBarrier]) -> Chained:
    """A ``VkTensorDependencyInfoARM`` holding ``barriers``; ``value`` is its address as ``void *``,
    ready for ``VkDependencyInfo.pNext`` (or a :class:`vkcore.device.sync.BarrierBatch`'s ``extra_next``)."""
    array = ffi.new("VkTensorMemoryBarrierARM[]", len(barriers))
    for i, b in enumerate(barriers):
        e = array[i]
        e.sType = arm_ffi.STYPE_OF["VkTensorMemoryBarrierARM"]
        e.srcStageMask = b.src_stage
        e.srcAccessMask = b.src_access
        e.dstStageMask = b.dst_stage
        e.dstAccessMask = b.dst_access
        e.srcQueueFamilyIndex = b.src_queue_family
        e.dstQueueFamilyIndex = b.dst_queue_family
        e.tensor = b.tensor.handle if isinstance(b.tensor, DeviceTensor) else b.tensor
    info = arm_ffi.new("VkTensorDependencyInfoARM", tensorMemoryBarrierCount=len(barriers), pTensorMemoryBarriers=array)
    return Chained(arm_ffi.as_void_p(info), [info, array])


def dependency_info(
    tensor_barriers: Sequence[TensorBarrier] = (),
    *,
    memory_barriers: Sequence[Any] = (),
    buffer_barriers: Sequence[Any] = (),
    image_barriers: Sequence[Any] = (),
) -> Chained:
    """A `vulkan` ``VkDependencyInfo`` with the tensor barriers chained in its ``pNext``."""
    keep: list[Any] = []
    pnext = vk.ffi.NULL
    if tensor_barriers:
        dep = tensor_dependency(tensor_barriers)
        keep += [dep, *dep.keep]
        pnext = dep.value
    info = vk.VkDependencyInfo(
        pNext=pnext,
        pMemoryBarriers=list(memory_barriers) or None,
        pBufferMemoryBarriers=list(buffer_barriers) or None,
        pImageMemoryBarriers=list(image_barriers) or None,
    )
    return Chained(info, keep + [list(memory_barriers), list(buffer_barriers), list(image_barriers)])


def cmd_pipeline_barrier(cmd: Any, tensor_barriers: Sequence[TensorBarrier], **other: Sequence[Any]) -> None:
    """Record ``vkCmdPipelineBarrier2`` with tensor barriers (and optional memory/buffer/image barriers)."""
    info = dependency_info(tensor_barriers, **other)
    vk.vkCmdPipelineBarrier2(cmd, info.value)
    del info


def cmd_copy_tensor(api: TensorApi, cmd: Any, src: DeviceTensor, dst: DeviceTensor) -> None:
    """Record ``vkCmdCopyTensorARM`` of the whole of ``src`` into ``dst`` (same dims, same element size).

    Raises :class:`DeviceError` when they do not match: ARM's emulation layer aborts the process on
    mismatched dims or element sizes ("Src tensor and dst tensor should have same dimensions and element
    size", uncaught C++ exception, exit 134). Only whole-tensor copies are offered because the layer
    ignores a region's offsets and extent and always copies everything.
    """
    problems = copy_problems(src.description, dst.description)
    if problems:
        raise DeviceError("invalid tensor copy: " + "; ".join(problems))
    n = len(src.description.dims)
    zeros = ffi.new("uint64_t[]", n)
    extent = ffi.new("uint64_t[]", list(src.description.dims))
    region = arm_ffi.new("VkTensorCopyARM", dimensionCount=n, pSrcOffset=zeros, pDstOffset=zeros, pExtent=extent)
    info = arm_ffi.new("VkCopyTensorInfoARM", srcTensor=src.handle, dstTensor=dst.handle, regionCount=1, pRegions=region)
    api.vkCmdCopyTensorARM(cmd, info)
    del zeros, extent, region, info
