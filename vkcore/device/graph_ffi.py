"""VK_ARM_data_graph declarations for Python, added to the second FFI of :mod:`vkcore.device.arm_ffi`.

The graph extension builds on VK_ARM_tensors (graph resources and constants are described by
``VkTensorDescriptionARM``), so its declarations (``cdefs/arm_data_graph.h``) are compiled into the same
FFI, :data:`vkcore.device.arm_ffi.ffi`, after VK_ARM_tensors' (:mod:`vkcore.device.ffi_build`). The
structs and function-pointer types are copied from the Khronos header (Vulkan-Headers
``include/vulkan/vulkan_core.h``, 1.4.317 and later; checked against header version 339). Enum values
and flag bits are Python data below, not C declarations.

Handles follow :mod:`vkcore.device.arm_ffi`'s rules:

- handles the `vulkan` package owns (``VkPipeline``, ``VkPipelineLayout``, ``VkShaderModule``,
  ``VkPipelineCache``, and the ones arm_ffi already declares) are ``void *`` here, so the package's
  handles go into our fields and arguments unchanged. A ``VkPipeline`` *created* here comes back as a
  ``void *``: :func:`to_vk_handle` turns it into the `vulkan` package's type for ``vkCmdBindPipeline``
  and ``vkDestroyPipeline``;
- the one handle this extension creates, ``VkDataGraphPipelineSessionARM``, is an opaque-struct pointer
  as in the header.

Every struct's size and field offsets are checked at import against numbers computed by hand from the
header (``LAYOUT``), as arm_ffi does for its own.
"""
from __future__ import annotations

from typing import Any

import vulkan as vk

from . import arm_ffi
from .arm_ffi import ffi


# ---------------------------------------------------------------------------------------------------
# Constants (vulkan_core.h, VK_ARM_data_graph, spec version 1)

EXTENSION_NAME = "VK_ARM_data_graph"
MAX_OPERATION_SET_NAME_SIZE = 128

# VkStructureType: 1000507000 + n.
STRUCTURE_TYPE: dict[str, int] = {
    "DATA_GRAPH_PIPELINE_CREATE_INFO_ARM": 1000507000,
    "DATA_GRAPH_PIPELINE_SESSION_CREATE_INFO_ARM": 1000507001,
    "DATA_GRAPH_PIPELINE_RESOURCE_INFO_ARM": 1000507002,
    "DATA_GRAPH_PIPELINE_CONSTANT_ARM": 1000507003,
    "DATA_GRAPH_PIPELINE_SESSION_MEMORY_REQUIREMENTS_INFO_ARM": 1000507004,
    "BIND_DATA_GRAPH_PIPELINE_SESSION_MEMORY_INFO_ARM": 1000507005,
    "PHYSICAL_DEVICE_DATA_GRAPH_FEATURES_ARM": 1000507006,
    "DATA_GRAPH_PIPELINE_SHADER_MODULE_CREATE_INFO_ARM": 1000507007,
    "DATA_GRAPH_PIPELINE_PROPERTY_QUERY_RESULT_ARM": 1000507008,
    "DATA_GRAPH_PIPELINE_INFO_ARM": 1000507009,
    "DATA_GRAPH_PIPELINE_COMPILER_CONTROL_CREATE_INFO_ARM": 1000507010,
    "DATA_GRAPH_PIPELINE_SESSION_BIND_POINT_REQUIREMENTS_INFO_ARM": 1000507011,
    "DATA_GRAPH_PIPELINE_SESSION_BIND_POINT_REQUIREMENT_ARM": 1000507012,
    "DATA_GRAPH_PIPELINE_IDENTIFIER_CREATE_INFO_ARM": 1000507013,
    "DATA_GRAPH_PIPELINE_DISPATCH_INFO_ARM": 1000507014,
    "DATA_GRAPH_PIPELINE_CONSTANT_TENSOR_SEMI_STRUCTURED_SPARSITY_INFO_ARM": 1000507015,
    "DATA_GRAPH_PROCESSING_ENGINE_CREATE_INFO_ARM": 1000507016,
    "QUEUE_FAMILY_DATA_GRAPH_PROCESSING_ENGINE_PROPERTIES_ARM": 1000507017,
    "QUEUE_FAMILY_DATA_GRAPH_PROPERTIES_ARM": 1000507018,
    "PHYSICAL_DEVICE_QUEUE_FAMILY_DATA_GRAPH_PROCESSING_ENGINE_INFO_ARM": 1000507019,
}

# The sType each declared struct must carry (filled in by :func:`new`).
STYPE_OF: dict[str, int] = {
    "VkDataGraphPipelineCreateInfoARM": STRUCTURE_TYPE["DATA_GRAPH_PIPELINE_CREATE_INFO_ARM"],
    "VkDataGraphPipelineSessionCreateInfoARM": STRUCTURE_TYPE["DATA_GRAPH_PIPELINE_SESSION_CREATE_INFO_ARM"],
    "VkDataGraphPipelineResourceInfoARM": STRUCTURE_TYPE["DATA_GRAPH_PIPELINE_RESOURCE_INFO_ARM"],
    "VkDataGraphPipelineConstantARM": STRUCTURE_TYPE["DATA_GRAPH_PIPELINE_CONSTANT_ARM"],
    "VkDataGraphPipelineSessionMemoryRequirementsInfoARM": STRUCTURE_TYPE["DATA_GRAPH_PIPELINE_SESSION_MEMORY_REQUIREMENTS_INFO_ARM"],
    "VkBindDataGraphPipelineSessionMemoryInfoARM": STRUCTURE_TYPE["BIND_DATA_GRAPH_PIPELINE_SESSION_MEMORY_INFO_ARM"],
    "VkPhysicalDeviceDataGraphFeaturesARM": STRUCTURE_TYPE["PHYSICAL_DEVICE_DATA_GRAPH_FEATURES_ARM"],
    "VkDataGraphPipelineShaderModuleCreateInfoARM": STRUCTURE_TYPE["DATA_GRAPH_PIPELINE_SHADER_MODULE_CREATE_INFO_ARM"],
    "VkDataGraphPipelinePropertyQueryResultARM": STRUCTURE_TYPE["DATA_GRAPH_PIPELINE_PROPERTY_QUERY_RESULT_ARM"],
    "VkDataGraphPipelineInfoARM": STRUCTURE_TYPE["DATA_GRAPH_PIPELINE_INFO_ARM"],
    "VkDataGraphPipelineCompilerControlCreateInfoARM": STRUCTURE_TYPE["DATA_GRAPH_PIPELINE_COMPILER_CONTROL_CREATE_INFO_ARM"],
    "VkDataGraphPipelineSessionBindPointRequirementsInfoARM": STRUCTURE_TYPE["DATA_GRAPH_PIPELINE_SESSION_BIND_POINT_REQUIREMENTS_INFO_ARM"],
    "VkDataGraphPipelineSessionBindPointRequirementARM": STRUCTURE_TYPE["DATA_GRAPH_PIPELINE_SESSION_BIND_POINT_REQUIREMENT_ARM"],
    "VkDataGraphPipelineIdentifierCreateInfoARM": STRUCTURE_TYPE["DATA_GRAPH_PIPELINE_IDENTIFIER_CREATE_INFO_ARM"],
    "VkDataGraphPipelineDispatchInfoARM": STRUCTURE_TYPE["DATA_GRAPH_PIPELINE_DISPATCH_INFO_ARM"],
    "VkDataGraphPipelineConstantTensorSemiStructuredSparsityInfoARM": STRUCTURE_TYPE["DATA_GRAPH_PIPELINE_CONSTANT_TENSOR_SEMI_STRUCTURED_SPARSITY_INFO_ARM"],
    "VkDataGraphProcessingEngineCreateInfoARM": STRUCTURE_TYPE["DATA_GRAPH_PROCESSING_ENGINE_CREATE_INFO_ARM"],
    "VkQueueFamilyDataGraphProcessingEnginePropertiesARM": STRUCTURE_TYPE["QUEUE_FAMILY_DATA_GRAPH_PROCESSING_ENGINE_PROPERTIES_ARM"],
    "VkQueueFamilyDataGraphPropertiesARM": STRUCTURE_TYPE["QUEUE_FAMILY_DATA_GRAPH_PROPERTIES_ARM"],
    "VkPhysicalDeviceQueueFamilyDataGraphProcessingEngineInfoARM": STRUCTURE_TYPE["PHYSICAL_DEVICE_QUEUE_FAMILY_DATA_GRAPH_PROCESSING_ENGINE_INFO_ARM"],
}

PIPELINE_BIND_POINT_DATA_GRAPH_ARM = 1000507000  # VkPipelineBindPoint
OBJECT_TYPE_DATA_GRAPH_PIPELINE_SESSION_ARM = 1000507000  # VkObjectType
QUEUE_DATA_GRAPH_BIT_ARM = 0x400  # VkQueueFlagBits
PIPELINE_STAGE_2_DATA_GRAPH_BIT_ARM = 0x40000000000
ACCESS_2_DATA_GRAPH_READ_BIT_ARM = 0x800000000000
ACCESS_2_DATA_GRAPH_WRITE_BIT_ARM = 0x1000000000000
FORMAT_FEATURE_2_TENSOR_DATA_GRAPH_BIT_ARM = 0x1000000000000
DATA_GRAPH_PIPELINE_SESSION_CREATE_PROTECTED_BIT_ARM = 0x1
SHADER_STAGE_ALL = 0x7FFFFFFF  # what descriptor set layout bindings of graph pipelines use (no graph stage bit exists)

# VkDataGraphPipelineSessionBindPointARM / ...TypeARM
BIND_POINT: dict[str, int] = {"TRANSIENT": 0}
BIND_POINT_TYPE: dict[str, int] = {"MEMORY": 0}
DATA_GRAPH_PIPELINE_SESSION_BIND_POINT_TRANSIENT_ARM = BIND_POINT["TRANSIENT"]
DATA_GRAPH_PIPELINE_SESSION_BIND_POINT_TYPE_MEMORY_ARM = BIND_POINT_TYPE["MEMORY"]

# VkDataGraphPipelinePropertyARM
PROPERTY: dict[str, int] = {"CREATION_LOG": 0, "IDENTIFIER": 1}
# VkPhysicalDeviceDataGraphProcessingEngineTypeARM / VkPhysicalDeviceDataGraphOperationTypeARM
PROCESSING_ENGINE_TYPE: dict[str, int] = {"DEFAULT": 0, "NEURAL_QCOM": 1000629000, "COMPUTE_QCOM": 1000629001}
OPERATION_TYPE: dict[str, int] = {"SPIRV_EXTENDED_INSTRUCTION_SET": 0, "NEURAL_MODEL_QCOM": 1000629000, "BUILTIN_MODEL_QCOM": 1000629001}

# Device functions and their pointer types (resolved with vkGetDeviceProcAddr).
DEVICE_FUNCTIONS: tuple[str, ...] = (
    "vkCreateDataGraphPipelinesARM",
    "vkCreateDataGraphPipelineSessionARM",
    "vkGetDataGraphPipelineSessionBindPointRequirementsARM",
    "vkGetDataGraphPipelineSessionMemoryRequirementsARM",
    "vkBindDataGraphPipelineSessionMemoryARM",
    "vkDestroyDataGraphPipelineSessionARM",
    "vkCmdDispatchDataGraphARM",
)
# Optional queries: a device or layer may lack them; they are resolved when present.
OPTIONAL_DEVICE_FUNCTIONS: tuple[str, ...] = (
    "vkGetDataGraphPipelineAvailablePropertiesARM",
    "vkGetDataGraphPipelinePropertiesARM",
)
INSTANCE_FUNCTIONS: tuple[str, ...] = (
    "vkGetPhysicalDeviceQueueFamilyDataGraphPropertiesARM",
    "vkGetPhysicalDeviceQueueFamilyDataGraphProcessingEnginePropertiesARM",
)

# ---------------------------------------------------------------------------------------------------
# Layout check: (size, {field: offset}) for LP64, computed from the header by hand.

LAYOUT: dict[str, tuple[int, dict[str, int]]] = {
    "VkPhysicalDeviceDataGraphFeaturesARM": (
        40,
        {
            "pNext": 8,
            "dataGraph": 16,
            "dataGraphUpdateAfterBind": 20,
            "dataGraphSpecializationConstants": 24,
            "dataGraphDescriptorBuffer": 28,
            "dataGraphShaderModule": 32,
        },
    ),
    "VkDataGraphPipelineConstantARM": (32, {"pNext": 8, "id": 16, "pConstantData": 24}),
    "VkDataGraphPipelineResourceInfoARM": (32, {"pNext": 8, "descriptorSet": 16, "binding": 20, "arrayElement": 24}),
    "VkDataGraphPipelineCompilerControlCreateInfoARM": (24, {"pVendorOptions": 16}),
    "VkDataGraphPipelineCreateInfoARM": (48, {"pNext": 8, "flags": 16, "layout": 24, "resourceInfoCount": 32, "pResourceInfos": 40}),
    "VkDataGraphPipelineShaderModuleCreateInfoARM": (
        56,
        {"module": 16, "pName": 24, "pSpecializationInfo": 32, "constantCount": 40, "pConstants": 48},
    ),
    "VkDataGraphPipelineSessionCreateInfoARM": (32, {"flags": 16, "dataGraphPipeline": 24}),
    "VkDataGraphPipelineSessionBindPointRequirementsInfoARM": (24, {"session": 16}),
    "VkDataGraphPipelineSessionBindPointRequirementARM": (32, {"bindPoint": 16, "bindPointType": 20, "numObjects": 24}),
    "VkDataGraphPipelineSessionMemoryRequirementsInfoARM": (32, {"session": 16, "bindPoint": 24, "objectIndex": 28}),
    "VkBindDataGraphPipelineSessionMemoryInfoARM": (
        48,
        {"session": 16, "bindPoint": 24, "objectIndex": 28, "memory": 32, "memoryOffset": 40},
    ),
    "VkDataGraphPipelineInfoARM": (24, {"dataGraphPipeline": 16}),
    "VkDataGraphPipelinePropertyQueryResultARM": (40, {"property": 16, "isText": 20, "dataSize": 24, "pData": 32}),
    "VkDataGraphPipelineIdentifierCreateInfoARM": (32, {"identifierSize": 16, "pIdentifier": 24}),
    "VkDataGraphPipelineDispatchInfoARM": (24, {"flags": 16}),
    "VkPhysicalDeviceDataGraphProcessingEngineARM": (8, {"type": 0, "isForeign": 4}),
    "VkPhysicalDeviceDataGraphOperationSupportARM": (136, {"operationType": 0, "name": 4, "version": 132}),
    "VkQueueFamilyDataGraphPropertiesARM": (160, {"engine": 16, "operation": 24}),
    "VkDataGraphProcessingEngineCreateInfoARM": (32, {"processingEngineCount": 16, "pProcessingEngines": 24}),
    "VkPhysicalDeviceQueueFamilyDataGraphProcessingEngineInfoARM": (24, {"queueFamilyIndex": 16, "engineType": 20}),
    "VkQueueFamilyDataGraphProcessingEnginePropertiesARM": (
        24,
        {"foreignSemaphoreHandleTypes": 16, "foreignMemoryHandleTypes": 20},
    ),
    "VkDataGraphPipelineConstantTensorSemiStructuredSparsityInfoARM": (32, {"dimension": 16, "zeroCount": 20, "groupSize": 24}),
}
# 64-bit fields that must not have been declared narrower.
WIDE_FIELDS: dict[str, tuple[str, ...]] = {
    "VkDataGraphPipelineCreateInfoARM": ("flags",),
    "VkDataGraphPipelineSessionCreateInfoARM": ("flags",),
    "VkDataGraphPipelineDispatchInfoARM": ("flags",),
    "VkBindDataGraphPipelineSessionMemoryInfoARM": ("memoryOffset",),
}
# Structs without sType/pNext (plain members of others).
_PLAIN = frozenset({"VkPhysicalDeviceDataGraphProcessingEngineARM", "VkPhysicalDeviceDataGraphOperationSupportARM"})


def check_layout() -> None:
    """Raise ``AssertionError`` when a declaration disagrees with the header's layout (LP64 only)."""
    arm_ffi.check_struct_layouts("vkcore.device.graph_ffi", LAYOUT, WIDE_FIELDS, _PLAIN)
    if set(STYPE_OF) | _PLAIN != set(LAYOUT):
        raise AssertionError("graph_ffi: STYPE_OF and LAYOUT name different structs")


check_layout()

# ---------------------------------------------------------------------------------------------------
# Helpers


def new(ctype: str, **fields: Any) -> Any:
    """A zeroed ``ctype *`` (owning its memory) with ``sType`` set and ``fields`` assigned.

    Knows the sTypes of both extensions (VK_ARM_data_graph here, VK_ARM_tensors in arm_ffi). Pointer
    fields are assigned as given: the caller keeps whatever they point to alive.
    """
    p = ffi.new(f"{ctype} *")
    stype = STYPE_OF.get(ctype, arm_ffi.STYPE_OF.get(ctype))
    if stype is not None:
        p.sType = stype
    for name, value in fields.items():
        setattr(p, name, value)
    return p


def new_array(ctype: str, count: int) -> Any:
    """A zeroed ``ctype[count]`` with every element's ``sType`` set (for two-call queries and arrays)."""
    arr = ffi.new(f"{ctype}[]", count)
    stype = STYPE_OF.get(ctype, arm_ffi.STYPE_OF.get(ctype))
    if stype is not None:
        for i in range(count):
            arr[i].sType = stype
    return arr


def to_vk_handle(vk_type: str, handle: Any) -> Any:
    """A handle from this FFI (``void *``) as the `vulkan` package's ``vk_type`` (e.g. ``"VkPipeline"``)."""
    return vk.ffi.cast(vk_type, arm_ffi.handle_to_int(handle))
