"""VK_ARM_data_graph_optical_flow declarations for Python (``cdefs/arm_optical_flow.h``), compiled into the
FFI of :mod:`vkcore.device.arm_ffi` by :mod:`vkcore.device.ffi_build`.

The extension builds an optical-flow data graph pipeline from one node (no SPIR-V): a
``VkDataGraphPipelineSingleNodeCreateInfoARM`` with its connections (each a descriptor set and binding of
an image) and a ``VkDataGraphPipelineOpticalFlowCreateInfoARM`` chained to it; each image resource info
carries the layout the image is in at dispatch; a dispatch may carry a
``VkDataGraphPipelineOpticalFlowDispatchInfoARM``. Layouts are from the Khronos registry (extension 632,
revision 1, 2026-04-08), checked at import against offsets computed by hand (``LAYOUT``), as
:mod:`vkcore.device.graph_ffi` does. Enum values are Python data below.
"""
from __future__ import annotations

from typing import Any

from . import arm_ffi, graph_ffi
from .arm_ffi import ffi


OPERATION_NAME = "OpticalFlow"  # the operation set name a queue family reports for optical flow

# VkStructureType: 1000631000 + n.
STYPE_OF: dict[str, int] = {
    "VkQueueFamilyDataGraphOpticalFlowPropertiesARM": 1000631001,
    "VkDataGraphPipelineOpticalFlowCreateInfoARM": 1000631002,
    "VkDataGraphOpticalFlowImageFormatInfoARM": 1000631003,
    "VkDataGraphOpticalFlowImageFormatPropertiesARM": 1000631004,
    "VkDataGraphPipelineOpticalFlowDispatchInfoARM": 1000631005,
    "VkDataGraphPipelineResourceInfoImageLayoutARM": 1000631006,
    "VkDataGraphPipelineSingleNodeCreateInfoARM": 1000631007,
    "VkDataGraphPipelineSingleNodeConnectionARM": 1000631008,
}
NODE_TYPE_OPTICAL_FLOW = 1000631000  # VkDataGraphPipelineNodeTypeARM
OPERATION_TYPE_OPTICAL_FLOW = 1000631000  # VkPhysicalDeviceDataGraphOperationTypeARM
BIND_POINT_OPTICAL_FLOW_CACHE = 1000631001  # VkDataGraphPipelineSessionBindPointARM
SESSION_CREATE_OPTICAL_FLOW_CACHE_BIT = 0x2  # VkDataGraphPipelineSessionCreateFlagBitsARM

# VkDataGraphPipelineNodeConnectionTypeARM
CONNECTION: dict[str, int] = {"input": 1000631000, "reference": 1000631001, "hint": 1000631002,
                              "flow_vector": 1000631003, "cost": 1000631004}
# VkDataGraphOpticalFlowGridSizeFlagBitsARM, by the scenario's spelling; the value is also the grid's side.
GRID_SIZE: dict[str, int] = {"1x1": 0x1, "2x2": 0x2, "4x4": 0x4, "8x8": 0x8}
# VkDataGraphOpticalFlowImageUsageFlagBitsARM
IMAGE_USAGE: dict[str, int] = {"input": 0x1, "output": 0x2, "hint": 0x4, "cost": 0x8}
# VkDataGraphOpticalFlowPerformanceLevelARM
PERFORMANCE_LEVEL: dict[str, int] = {"unknown": 0, "slow": 1, "medium": 2, "fast": 3}
# VkDataGraphOpticalFlowCreateFlagBitsARM
CREATE_ENABLE_HINT, CREATE_ENABLE_COST = 0x1, 0x2
# VkDataGraphOpticalFlowExecuteFlagBitsARM, by the scenario's spelling.
EXECUTE_FLAG: dict[str, int] = {"disable_temporal_hints": 0x1, "input_unchanged": 0x2, "reference_unchanged": 0x4,
                                "input_is_previous_reference": 0x8, "reference_is_previous_input": 0x10}

INSTANCE_FUNCTIONS: tuple[str, ...] = (
    "vkGetPhysicalDeviceQueueFamilyDataGraphOpticalFlowImageFormatsARM",
    "vkGetPhysicalDeviceQueueFamilyDataGraphEngineOperationPropertiesARM",
)

LAYOUT: dict[str, tuple[int, dict[str, int]]] = {
    "VkDataGraphPipelineResourceInfoImageLayoutARM": (24, {"pNext": 8, "layout": 16}),
    "VkDataGraphPipelineSingleNodeConnectionARM": (32, {"set": 16, "binding": 20, "connection": 24}),
    "VkDataGraphPipelineSingleNodeCreateInfoARM": (32, {"nodeType": 16, "connectionCount": 20, "pConnections": 24}),
    "VkDataGraphPipelineOpticalFlowCreateInfoARM": (
        56,
        {"width": 16, "height": 20, "imageFormat": 24, "flowVectorFormat": 28, "costFormat": 32, "outputGridSize": 36,
         "hintGridSize": 40, "performanceLevel": 44, "flags": 48},
    ),
    "VkDataGraphPipelineOpticalFlowDispatchInfoARM": (24, {"flags": 16, "meanFlowL1NormHint": 20}),
    "VkQueueFamilyDataGraphOpticalFlowPropertiesARM": (
        48,
        {"supportedOutputGridSizes": 16, "supportedHintGridSizes": 20, "hintSupported": 24, "costSupported": 28,
         "minWidth": 32, "minHeight": 36, "maxWidth": 40, "maxHeight": 44},
    ),
    "VkDataGraphOpticalFlowImageFormatInfoARM": (24, {"usage": 16}),
    "VkDataGraphOpticalFlowImageFormatPropertiesARM": (24, {"format": 16}),
}


def check_layout() -> None:
    """Raise ``AssertionError`` when a declaration disagrees with the registry's layout (LP64 only)."""
    arm_ffi.check_struct_layouts("vkcore.device.optical_flow_ffi", LAYOUT, {}, frozenset())
    if set(STYPE_OF) != set(LAYOUT):
        raise AssertionError("optical_flow_ffi: STYPE_OF and LAYOUT name different structs")


check_layout()


def new(ctype: str, **fields: Any) -> Any:
    """A zeroed ``ctype *`` with its ``sType`` (this extension's structs, or graph_ffi's and arm_ffi's) and
    ``fields`` assigned; the caller keeps what pointer fields point to alive."""
    stype = STYPE_OF.get(ctype)
    return graph_ffi.new(ctype, **fields) if stype is None else graph_ffi.new(ctype, sType=stype, **fields)
