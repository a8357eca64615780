/* VK_ARM_data_graph_optical_flow: the declarations of vkcore/device/optical_flow_ffi.py (cffi cdef syntax), compiled by
   vkcore/device/ffi_build.py into vkcore/device/_arm_cdefs.py. */
typedef VkFlags VkDataGraphOpticalFlowGridSizeFlagsARM;
typedef VkFlags VkDataGraphOpticalFlowImageUsageFlagsARM;
typedef VkFlags VkDataGraphOpticalFlowCreateFlagsARM;
typedef VkFlags VkDataGraphOpticalFlowExecuteFlagsARM;
typedef int32_t VkDataGraphOpticalFlowPerformanceLevelARM;
typedef int32_t VkDataGraphPipelineNodeTypeARM;
typedef int32_t VkDataGraphPipelineNodeConnectionTypeARM;
typedef int32_t VkImageLayout;

typedef struct VkDataGraphPipelineResourceInfoImageLayoutARM {
    VkStructureType    sType;
    const void*        pNext;
    VkImageLayout      layout;
} VkDataGraphPipelineResourceInfoImageLayoutARM;

typedef struct VkDataGraphPipelineSingleNodeConnectionARM {
    VkStructureType                             sType;
    const void*                                 pNext;
    uint32_t                                    set;
    uint32_t                                    binding;
    VkDataGraphPipelineNodeConnectionTypeARM    connection;
} VkDataGraphPipelineSingleNodeConnectionARM;

typedef struct VkDataGraphPipelineSingleNodeCreateInfoARM {
    VkStructureType                                      sType;
    const void*                                          pNext;
    VkDataGraphPipelineNodeTypeARM                       nodeType;
    uint32_t                                             connectionCount;
    const VkDataGraphPipelineSingleNodeConnectionARM*    pConnections;
} VkDataGraphPipelineSingleNodeCreateInfoARM;

typedef struct VkDataGraphPipelineOpticalFlowCreateInfoARM {
    VkStructureType                              sType;
    void*                                        pNext;
    uint32_t                                     width;
    uint32_t                                     height;
    VkFormat                                     imageFormat;
    VkFormat                                     flowVectorFormat;
    VkFormat                                     costFormat;
    VkDataGraphOpticalFlowGridSizeFlagsARM       outputGridSize;
    VkDataGraphOpticalFlowGridSizeFlagsARM       hintGridSize;
    VkDataGraphOpticalFlowPerformanceLevelARM    performanceLevel;
    VkDataGraphOpticalFlowCreateFlagsARM         flags;
} VkDataGraphPipelineOpticalFlowCreateInfoARM;

typedef struct VkDataGraphPipelineOpticalFlowDispatchInfoARM {
    VkStructureType                          sType;
    void*                                    pNext;
    VkDataGraphOpticalFlowExecuteFlagsARM    flags;
    uint32_t                                 meanFlowL1NormHint;
} VkDataGraphPipelineOpticalFlowDispatchInfoARM;

typedef struct VkQueueFamilyDataGraphOpticalFlowPropertiesARM {
    VkStructureType                           sType;
    void*                                     pNext;
    VkDataGraphOpticalFlowGridSizeFlagsARM    supportedOutputGridSizes;
    VkDataGraphOpticalFlowGridSizeFlagsARM    supportedHintGridSizes;
    VkBool32                                  hintSupported;
    VkBool32                                  costSupported;
    uint32_t                                  minWidth;
    uint32_t                                  minHeight;
    uint32_t                                  maxWidth;
    uint32_t                                  maxHeight;
} VkQueueFamilyDataGraphOpticalFlowPropertiesARM;

typedef struct VkDataGraphOpticalFlowImageFormatInfoARM {
    VkStructureType                             sType;
    const void*                                 pNext;
    VkDataGraphOpticalFlowImageUsageFlagsARM    usage;
} VkDataGraphOpticalFlowImageFormatInfoARM;

typedef struct VkDataGraphOpticalFlowImageFormatPropertiesARM {
    VkStructureType    sType;
    void*              pNext;
    VkFormat           format;
} VkDataGraphOpticalFlowImageFormatPropertiesARM;

typedef VkResult (*PFN_vkGetPhysicalDeviceQueueFamilyDataGraphOpticalFlowImageFormatsARM)(VkPhysicalDevice physicalDevice, uint32_t queueFamilyIndex, const VkQueueFamilyDataGraphPropertiesARM* pQueueFamilyDataGraphProperties, const VkDataGraphOpticalFlowImageFormatInfoARM* pOpticalFlowImageFormatInfo, uint32_t* pFormatCount, VkDataGraphOpticalFlowImageFormatPropertiesARM* pImageFormatProperties);
typedef VkResult (*PFN_vkGetPhysicalDeviceQueueFamilyDataGraphEngineOperationPropertiesARM)(VkPhysicalDevice physicalDevice, uint32_t queueFamilyIndex, const VkQueueFamilyDataGraphPropertiesARM* pQueueFamilyDataGraphProperties, void* pProperties);
