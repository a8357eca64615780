"""VK_ARM_tensors declarations for Python: a second cffi FFI next to the `vulkan` package's.

The `vulkan` package (1.3.275) predates VK_ARM_tensors and its FFI is compiled out of line, so it
cannot be extended. The structs and function-pointer types vkcap needs are declared in
``cdefs/arm_tensors.h`` (copied from the Khronos header, Vulkan-Headers ``include/vulkan/vulkan_core.h``,
1.4.317 and later), with the graph and optical-flow extensions' beside it, and compiled by
:mod:`vkcore.device.ffi_build` into ``_arm_cdefs.py``: cffi's out-of-line ABI mode, nothing compiled to
machine code, the types parsed once at build time rather than in every process. Enum values and flag
bits are Python data below, not C declarations.

How the two FFIs meet:

- Handles the `vulkan` package owns (``VkDevice``, ``VkPhysicalDevice``, ``VkCommandBuffer``,
  ``VkDeviceMemory``) are declared here as ``void *``. On 64-bit platforms the header defines every
  handle, dispatchable or not, as a pointer to an opaque struct, and the `vulkan` package does the same
  (``vulkan.ffi.typeof('VkDeviceMemory')`` is ``struct VkDeviceMemory_T *``), so its handles pass to the
  functions and struct fields declared here unchanged: cffi accepts any pointer where ``void *`` is
  expected.
- Handles this extension creates (``VkTensorARM``, ``VkTensorViewARM``) are opaque-struct pointers, as
  in the header, so they cannot be confused with one another.
- A struct declared here goes into a `vulkan` struct's ``pNext`` as ``void *`` (:func:`as_void_p`), and
  a `vulkan` struct goes into ours the same way. cffi keeps a struct alive, not what its pointers point
  to: whoever builds a chain keeps every piece in a Python variable until the call returns.

Every struct's size and field offsets are checked at import against numbers computed by hand from the
header (``LAYOUT``): a wrong declaration fails loudly here instead of corrupting memory in a driver.
"""
from __future__ import annotations

import struct
from typing import Any

from ._arm_cdefs import ffi  # cdefs/arm_tensors.h and the others, compiled by ffi_build.py

# ---------------------------------------------------------------------------------------------------
# Constants (vulkan_core.h, VK_ARM_tensors, spec version 1)

EXTENSION_NAME = "VK_ARM_tensors"

# VkStructureType: 1000460000 + n.
STRUCTURE_TYPE: dict[str, int] = {
    "TENSOR_CREATE_INFO_ARM": 1000460000,
    "TENSOR_VIEW_CREATE_INFO_ARM": 1000460001,
    "BIND_TENSOR_MEMORY_INFO_ARM": 1000460002,
    "WRITE_DESCRIPTOR_SET_TENSOR_ARM": 1000460003,
    "PHYSICAL_DEVICE_TENSOR_PROPERTIES_ARM": 1000460004,
    "TENSOR_FORMAT_PROPERTIES_ARM": 1000460005,
    "TENSOR_DESCRIPTION_ARM": 1000460006,
    "TENSOR_MEMORY_REQUIREMENTS_INFO_ARM": 1000460007,
    "TENSOR_MEMORY_BARRIER_ARM": 1000460008,
    "PHYSICAL_DEVICE_TENSOR_FEATURES_ARM": 1000460009,
    "DEVICE_TENSOR_MEMORY_REQUIREMENTS_ARM": 1000460010,
    "COPY_TENSOR_INFO_ARM": 1000460011,
    "TENSOR_COPY_ARM": 1000460012,
    "TENSOR_DEPENDENCY_INFO_ARM": 1000460013,
    "MEMORY_DEDICATED_ALLOCATE_INFO_TENSOR_ARM": 1000460014,
    "PHYSICAL_DEVICE_EXTERNAL_TENSOR_INFO_ARM": 1000460015,
    "EXTERNAL_TENSOR_PROPERTIES_ARM": 1000460016,
    "EXTERNAL_MEMORY_TENSOR_CREATE_INFO_ARM": 1000460017,
    "PHYSICAL_DEVICE_DESCRIPTOR_BUFFER_TENSOR_FEATURES_ARM": 1000460018,
    "PHYSICAL_DEVICE_DESCRIPTOR_BUFFER_TENSOR_PROPERTIES_ARM": 1000460019,
    "DESCRIPTOR_GET_TENSOR_INFO_ARM": 1000460020,
    "TENSOR_CAPTURE_DESCRIPTOR_DATA_INFO_ARM": 1000460021,
    "TENSOR_VIEW_CAPTURE_DESCRIPTOR_DATA_INFO_ARM": 1000460022,
    "FRAME_BOUNDARY_TENSORS_ARM": 1000460023,
}
STRUCTURE_TYPE_MEMORY_REQUIREMENTS_2 = 1000146003  # core 1.1, for the struct declared here

# The sType each declared struct must carry (filled in by :func:`new`).
STYPE_OF: dict[str, int] = {
    "VkTensorCreateInfoARM": STRUCTURE_TYPE["TENSOR_CREATE_INFO_ARM"],
    "VkTensorViewCreateInfoARM": STRUCTURE_TYPE["TENSOR_VIEW_CREATE_INFO_ARM"],
    "VkBindTensorMemoryInfoARM": STRUCTURE_TYPE["BIND_TENSOR_MEMORY_INFO_ARM"],
    "VkWriteDescriptorSetTensorARM": STRUCTURE_TYPE["WRITE_DESCRIPTOR_SET_TENSOR_ARM"],
    "VkPhysicalDeviceTensorPropertiesARM": STRUCTURE_TYPE["PHYSICAL_DEVICE_TENSOR_PROPERTIES_ARM"],
    "VkTensorFormatPropertiesARM": STRUCTURE_TYPE["TENSOR_FORMAT_PROPERTIES_ARM"],
    "VkTensorDescriptionARM": STRUCTURE_TYPE["TENSOR_DESCRIPTION_ARM"],
    "VkTensorMemoryRequirementsInfoARM": STRUCTURE_TYPE["TENSOR_MEMORY_REQUIREMENTS_INFO_ARM"],
    "VkTensorMemoryBarrierARM": STRUCTURE_TYPE["TENSOR_MEMORY_BARRIER_ARM"],
    "VkPhysicalDeviceTensorFeaturesARM": STRUCTURE_TYPE["PHYSICAL_DEVICE_TENSOR_FEATURES_ARM"],
    "VkDeviceTensorMemoryRequirementsARM": STRUCTURE_TYPE["DEVICE_TENSOR_MEMORY_REQUIREMENTS_ARM"],
    "VkCopyTensorInfoARM": STRUCTURE_TYPE["COPY_TENSOR_INFO_ARM"],
    "VkTensorCopyARM": STRUCTURE_TYPE["TENSOR_COPY_ARM"],
    "VkTensorDependencyInfoARM": STRUCTURE_TYPE["TENSOR_DEPENDENCY_INFO_ARM"],
    "VkMemoryDedicatedAllocateInfoTensorARM": STRUCTURE_TYPE["MEMORY_DEDICATED_ALLOCATE_INFO_TENSOR_ARM"],
    "VkFrameBoundaryTensorsARM": STRUCTURE_TYPE["FRAME_BOUNDARY_TENSORS_ARM"],
    "VkMemoryRequirements2": STRUCTURE_TYPE_MEMORY_REQUIREMENTS_2,
}

DESCRIPTOR_TYPE_TENSOR_ARM = 1000460000
IMAGE_LAYOUT_TENSOR_ALIASING_ARM = 1000460000
OBJECT_TYPE_TENSOR_ARM = 1000460000
OBJECT_TYPE_TENSOR_VIEW_ARM = 1000460001
IMAGE_USAGE_TENSOR_ALIASING_BIT_ARM = 0x00800000
FORMAT_FEATURE_2_TENSOR_SHADER_BIT_ARM = 0x8000000000
FORMAT_FEATURE_2_TENSOR_IMAGE_ALIASING_BIT_ARM = 0x80000000000

# VkFormat values added by VK_ARM_tensors (and extensions used with it).
FORMAT_R8_BOOL_ARM = 1000460000
FORMAT_R16_SFLOAT_FPENCODING_BFLOAT16_ARM = 1000460001
FORMAT_R8_SFLOAT_FPENCODING_FLOAT8E4M3_ARM = 1000460002
FORMAT_R8_SFLOAT_FPENCODING_FLOAT8E5M2_ARM = 1000460003

# VkTensorTilingARM
TILING: dict[str, int] = {"OPTIMAL": 0, "LINEAR": 1}
TENSOR_TILING_OPTIMAL_ARM = TILING["OPTIMAL"]
TENSOR_TILING_LINEAR_ARM = TILING["LINEAR"]

# VkTensorUsageFlagBitsARM (64-bit)
USAGE: dict[str, int] = {
    "SHADER": 0x02,
    "TRANSFER_SRC": 0x04,
    "TRANSFER_DST": 0x08,
    "IMAGE_ALIASING": 0x10,
    "DATA_GRAPH": 0x20,
}
TENSOR_USAGE_SHADER_BIT_ARM = USAGE["SHADER"]
TENSOR_USAGE_TRANSFER_SRC_BIT_ARM = USAGE["TRANSFER_SRC"]
TENSOR_USAGE_TRANSFER_DST_BIT_ARM = USAGE["TRANSFER_DST"]
TENSOR_USAGE_IMAGE_ALIASING_BIT_ARM = USAGE["IMAGE_ALIASING"]
TENSOR_USAGE_DATA_GRAPH_BIT_ARM = USAGE["DATA_GRAPH"]

# VkTensorCreateFlagBitsARM / VkTensorViewCreateFlagBitsARM (64-bit)
TENSOR_CREATE_MUTABLE_FORMAT_BIT_ARM = 0x1
TENSOR_CREATE_PROTECTED_BIT_ARM = 0x2
TENSOR_CREATE_DESCRIPTOR_BUFFER_CAPTURE_REPLAY_BIT_ARM = 0x4
TENSOR_VIEW_CREATE_DESCRIPTOR_BUFFER_CAPTURE_REPLAY_BIT_ARM = 0x1

# Device functions and their pointer types.
DEVICE_FUNCTIONS: tuple[str, ...] = (
    "vkCreateTensorARM",
    "vkDestroyTensorARM",
    "vkCreateTensorViewARM",
    "vkDestroyTensorViewARM",
    "vkGetTensorMemoryRequirementsARM",
    "vkBindTensorMemoryARM",
    "vkGetDeviceTensorMemoryRequirementsARM",
    "vkCmdCopyTensorARM",
)

# ---------------------------------------------------------------------------------------------------
# Layout check: (size, {field: offset}) for LP64, computed from the header by hand.

LAYOUT: dict[str, tuple[int, dict[str, int]]] = {
    "VkMemoryRequirements": (24, {"size": 0, "alignment": 8, "memoryTypeBits": 16}),
    "VkMemoryRequirements2": (40, {"pNext": 8, "memoryRequirements": 16}),
    "VkTensorDescriptionARM": (
        56,
        {"pNext": 8, "tiling": 16, "format": 20, "dimensionCount": 24, "pDimensions": 32, "pStrides": 40, "usage": 48},
    ),
    "VkTensorCreateInfoARM": (
        48,
        {"flags": 16, "pDescription": 24, "sharingMode": 32, "queueFamilyIndexCount": 36, "pQueueFamilyIndices": 40},
    ),
    "VkTensorViewCreateInfoARM": (40, {"flags": 16, "tensor": 24, "format": 32}),
    "VkTensorMemoryRequirementsInfoARM": (24, {"tensor": 16}),
    "VkBindTensorMemoryInfoARM": (40, {"tensor": 16, "memory": 24, "memoryOffset": 32}),
    "VkWriteDescriptorSetTensorARM": (32, {"tensorViewCount": 16, "pTensorViews": 24}),
    "VkTensorFormatPropertiesARM": (32, {"optimalTilingTensorFeatures": 16, "linearTilingTensorFeatures": 24}),
    "VkPhysicalDeviceTensorPropertiesARM": (
        88,
        {
            "maxTensorDimensionCount": 16,
            "maxTensorElements": 24,
            "maxPerDimensionTensorElements": 32,
            "maxTensorStride": 40,
            "maxTensorSize": 48,
            "maxTensorShaderAccessArrayLength": 56,
            "maxTensorShaderAccessSize": 60,
            "maxDescriptorSetStorageTensors": 64,
            "maxPerStageDescriptorSetStorageTensors": 68,
            "maxDescriptorSetUpdateAfterBindStorageTensors": 72,
            "maxPerStageDescriptorUpdateAfterBindStorageTensors": 76,
            "shaderStorageTensorArrayNonUniformIndexingNative": 80,
            "shaderTensorSupportedStages": 84,
        },
    ),
    "VkTensorMemoryBarrierARM": (
        64,
        {
            "srcStageMask": 16,
            "srcAccessMask": 24,
            "dstStageMask": 32,
            "dstAccessMask": 40,
            "srcQueueFamilyIndex": 48,
            "dstQueueFamilyIndex": 52,
            "tensor": 56,
        },
    ),
    "VkTensorDependencyInfoARM": (32, {"tensorMemoryBarrierCount": 16, "pTensorMemoryBarriers": 24}),
    "VkPhysicalDeviceTensorFeaturesARM": (
        40,
        {
            "tensorNonPacked": 16,
            "shaderTensorAccess": 20,
            "shaderStorageTensorArrayDynamicIndexing": 24,
            "shaderStorageTensorArrayNonUniformIndexing": 28,
            "descriptorBindingStorageTensorUpdateAfterBind": 32,
            "tensors": 36,
        },
    ),
    "VkDeviceTensorMemoryRequirementsARM": (24, {"pCreateInfo": 16}),
    "VkTensorCopyARM": (48, {"dimensionCount": 16, "pSrcOffset": 24, "pDstOffset": 32, "pExtent": 40}),
    "VkCopyTensorInfoARM": (48, {"srcTensor": 16, "dstTensor": 24, "regionCount": 32, "pRegions": 40}),
    "VkMemoryDedicatedAllocateInfoTensorARM": (24, {"tensor": 16}),
    "VkFrameBoundaryTensorsARM": (32, {"tensorCount": 16, "pTensors": 24}),
}
# 64-bit fields that must not have been declared narrower (the mistake some public headers make).
WIDE_FIELDS: dict[str, tuple[str, ...]] = {
    "VkTensorDescriptionARM": ("usage",),
    "VkTensorCreateInfoARM": ("flags",),
    "VkTensorViewCreateInfoARM": ("flags",),
    "VkTensorMemoryBarrierARM": ("srcStageMask", "srcAccessMask", "dstStageMask", "dstAccessMask"),
}


def check_struct_layouts(module: str, layout: dict[str, tuple[int, dict[str, int]]], wide_fields: dict[str, tuple[str, ...]],
                         plain: frozenset[str]) -> None:
    """Raise ``AssertionError`` unless every struct of ``layout`` has, in :data:`ffi`, the size and field
    offsets given there and ``sType`` first (but the ``plain`` ones), and every field of ``wide_fields``
    is 64-bit. ``module`` names the declaring module in the 64-bit-only message (LP64 layouts only)."""
    if struct.calcsize("P") != 8:
        raise AssertionError(f"{module} supports 64-bit platforms only")
    for name, (size, offsets) in layout.items():
        got = ffi.sizeof(name)
        if got != size:
            raise AssertionError(f"{name}: sizeof is {got}, the header gives {size}")
        if name not in plain and ffi.offsetof(name, "sType") != 0:
            raise AssertionError(f"{name}: sType is not first")
        for field, offset in offsets.items():
            got = ffi.offsetof(name, field)
            if got != offset:
                raise AssertionError(f"{name}.{field}: offset {got}, the header gives {offset}")
    for name, fields in wide_fields.items():
        for field in fields:
            if ffi.sizeof(dict(ffi.typeof(name).fields)[field].type) != 8:
                raise AssertionError(f"{name}.{field} must be 64-bit")


def check_layout() -> None:
    """Raise ``AssertionError`` when a declaration disagrees with the header's layout (LP64 only)."""
    check_struct_layouts("vkcore.device.arm_ffi", LAYOUT, WIDE_FIELDS, frozenset({"VkMemoryRequirements"}))
    description = dict(ffi.typeof("VkTensorDescriptionARM").fields)
    if ffi.sizeof(description["pDimensions"].type.item) != 8 or ffi.sizeof(description["pStrides"].type.item) != 8:
        raise AssertionError("VkTensorDescriptionARM.pDimensions and pStrides must point to int64_t")


check_layout()

# ---------------------------------------------------------------------------------------------------
# Helpers


def new(ctype: str, **fields: Any) -> Any:
    """A zeroed ``ctype *`` (owning its memory) with ``sType`` set and ``fields`` assigned.

    Pointer fields are assigned as given: the caller keeps whatever they point to alive.
    """
    p = ffi.new(f"{ctype} *")
    if ctype in STYPE_OF:
        p.sType = STYPE_OF[ctype]
    for name, value in fields.items():
        setattr(p, name, value)
    return p


def as_void_p(cdata: Any) -> Any:
    """``cdata`` (a pointer from either FFI) as this FFI's ``void *``, e.g. for a `vulkan` struct's ``pNext``."""
    return ffi.cast("void *", cdata)


def handle_to_int(handle: Any) -> int:
    """The integer value of a handle from either FFI (``0`` for NULL)."""
    return int(ffi.cast("uintptr_t", handle))
