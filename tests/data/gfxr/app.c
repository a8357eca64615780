/* A small Vulkan compute application, written the way applications are (not through vkcap), for
 * tests/test_import_gfxr.py: it is captured under GFXReconstruct's layer, imported, and vkcap's outputs
 * are compared with what this program read back itself.
 *
 * Each frame (one queue submit): write the inputs through mapped memory (staging), copy them into the
 * input buffer, barrier, dispatch scale.comp (push constants, specialization constant FACTOR = 3),
 * barrier, dispatch square.comp, barrier, copy the output into a host-visible buffer, submit with a
 * fence, wait, read it back through mapped memory and write it to OUTDIR/frameK.bin.
 * With "graphics", each frame also clears a small colour attachment in a render pass: graphics work the
 * compute does not depend on.
 *
 * usage: app SCALE.spv SQUARE.spv OUTDIR FRAMES [graphics] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vulkan/vulkan.h>

#define N 256
#define BYTES (N * sizeof(float))
#define CHECK(call)                                                              \
    do {                                                                         \
        VkResult r_ = (call);                                                    \
        if (r_ != VK_SUCCESS) {                                                  \
            fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #call, r_); \
            exit(1);                                                             \
        }                                                                        \
    } while (0)

static VkDevice device;
static VkPhysicalDeviceMemoryProperties memory_properties;
static VkBuffer buffers[8];
static VkDeviceMemory memories[8];
static int buffer_count;

static uint32_t memory_type(uint32_t bits, VkMemoryPropertyFlags wanted) {
    for (uint32_t i = 0; i < memory_properties.memoryTypeCount; i++)
        if ((bits & (1u << i)) && (memory_properties.memoryTypes[i].propertyFlags & wanted) == wanted) return i;
    fprintf(stderr, "no memory type with flags %#x\n", wanted);
    exit(1);
}

/* A buffer in its own allocation; *mapped is set (persistently mapped) when it is host-visible. */
static VkBuffer make_buffer(VkBufferUsageFlags usage, VkMemoryPropertyFlags flags, void **mapped) {
    VkBufferCreateInfo info = {VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, NULL, 0, BYTES, usage, VK_SHARING_MODE_EXCLUSIVE};
    VkBuffer buffer;
    CHECK(vkCreateBuffer(device, &info, NULL, &buffer));
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(device, buffer, &req);
    VkMemoryAllocateInfo alloc = {VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, NULL, req.size,
                                  memory_type(req.memoryTypeBits, flags)};
    VkDeviceMemory memory;
    CHECK(vkAllocateMemory(device, &alloc, NULL, &memory));
    CHECK(vkBindBufferMemory(device, buffer, memory, 0));
    if (mapped) CHECK(vkMapMemory(device, memory, 0, VK_WHOLE_SIZE, 0, mapped));
    buffers[buffer_count] = buffer;
    memories[buffer_count++] = memory;
    return buffer;
}

static VkShaderModule load_shader(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(1); }
    static uint32_t code[16384];
    size_t size = fread(code, 1, sizeof code, f);
    fclose(f);
    VkShaderModuleCreateInfo info = {VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, NULL, 0, size, code};
    VkShaderModule module;
    CHECK(vkCreateShaderModule(device, &info, NULL, &module));
    return module;
}

static void barrier(VkCommandBuffer cb, VkPipelineStageFlags from, VkAccessFlags written,
                    VkPipelineStageFlags to, VkAccessFlags read) {
    VkMemoryBarrier b = {VK_STRUCTURE_TYPE_MEMORY_BARRIER, NULL, written, read};
    vkCmdPipelineBarrier(cb, from, to, 0, 1, &b, 0, NULL, 0, NULL);
}

int main(int argc, char **argv) {
    if (argc != 5 && argc != 6) { fprintf(stderr, "usage: %s SCALE.spv SQUARE.spv OUTDIR FRAMES [graphics]\n", argv[0]); return 2; }
    int frames = atoi(argv[4]), graphics = argc == 6 && !strcmp(argv[5], "graphics");

    VkApplicationInfo app = {VK_STRUCTURE_TYPE_APPLICATION_INFO, NULL, "gfxr-test-app", 1, NULL, 0, VK_API_VERSION_1_1};
    VkInstanceCreateInfo instance_info = {VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, NULL, 0, &app};
    VkInstance instance;
    CHECK(vkCreateInstance(&instance_info, NULL, &instance));
    uint32_t count = 1;
    VkPhysicalDevice gpu;
    VkResult listed = vkEnumeratePhysicalDevices(instance, &count, &gpu);
    if ((listed != VK_SUCCESS && listed != VK_INCOMPLETE) || count == 0) { fprintf(stderr, "no Vulkan device\n"); return 1; }
    vkGetPhysicalDeviceMemoryProperties(gpu, &memory_properties);
    VkQueueFamilyProperties families[16];
    uint32_t family_count = 16, family = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(gpu, &family_count, families);
    while (family < family_count && !(families[family].queueFlags & VK_QUEUE_COMPUTE_BIT)) family++;
    float priority = 1.0f;
    VkDeviceQueueCreateInfo queue_info = {VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, NULL, 0, family, 1, &priority};
    VkDeviceCreateInfo device_info = {VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, NULL, 0, 1, &queue_info};
    CHECK(vkCreateDevice(gpu, &device_info, NULL, &device));
    VkQueue queue;
    vkGetDeviceQueue(device, family, 0, &queue);

    const VkMemoryPropertyFlags host = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    float *staging_data, *readback_data;
    VkBuffer staging = make_buffer(VK_BUFFER_USAGE_TRANSFER_SRC_BIT, host, (void **)&staging_data);
    VkBuffer input = make_buffer(VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT, 0, NULL);
    VkBuffer mid = make_buffer(VK_BUFFER_USAGE_STORAGE_BUFFER_BIT, 0, NULL);
    VkBuffer output = make_buffer(VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT, 0, NULL);
    VkBuffer readback = make_buffer(VK_BUFFER_USAGE_TRANSFER_DST_BIT, host, (void **)&readback_data);

    /* One set layout (binding 0 read, binding 1 written), two sets: (input, mid) and (mid, output). */
    VkDescriptorSetLayoutBinding bindings[2] = {
        {0, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL},
        {1, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL}};
    VkDescriptorSetLayoutCreateInfo set_layout_info = {VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, NULL, 0, 2, bindings};
    VkDescriptorSetLayout set_layout;
    CHECK(vkCreateDescriptorSetLayout(device, &set_layout_info, NULL, &set_layout));
    VkPushConstantRange push_range = {VK_SHADER_STAGE_COMPUTE_BIT, 0, 8};
    VkPipelineLayoutCreateInfo layout_info = {VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, NULL, 0, 1, &set_layout, 1, &push_range};
    VkPipelineLayout layout;
    CHECK(vkCreatePipelineLayout(device, &layout_info, NULL, &layout));

    VkDescriptorPoolSize pool_size = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 4};
    VkDescriptorPoolCreateInfo pool_info = {VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, NULL, 0, 2, 1, &pool_size};
    VkDescriptorPool pool;
    CHECK(vkCreateDescriptorPool(device, &pool_info, NULL, &pool));
    VkDescriptorSetLayout set_layouts[2] = {set_layout, set_layout};
    VkDescriptorSetAllocateInfo set_info = {VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, NULL, pool, 2, set_layouts};
    VkDescriptorSet sets[2];
    CHECK(vkAllocateDescriptorSets(device, &set_info, sets));
    VkDescriptorBufferInfo infos[4] = {{input, 0, VK_WHOLE_SIZE}, {mid, 0, VK_WHOLE_SIZE},
                                       {mid, 0, VK_WHOLE_SIZE}, {output, 0, VK_WHOLE_SIZE}};
    VkWriteDescriptorSet writes[4];
    for (int k = 0; k < 4; k++)
        writes[k] = (VkWriteDescriptorSet){VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, NULL, sets[k / 2], k % 2, 0, 1,
                                           VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, NULL, &infos[k], NULL};
    vkUpdateDescriptorSets(device, 4, writes, 0, NULL);

    float factor = 3.0f;
    VkSpecializationMapEntry entry = {0, 0, sizeof factor};
    VkSpecializationInfo spec = {1, &entry, sizeof factor, &factor};
    VkComputePipelineCreateInfo pipeline_infos[2];
    for (int k = 0; k < 2; k++) {
        VkPipelineShaderStageCreateInfo stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, NULL, 0,
                                                 VK_SHADER_STAGE_COMPUTE_BIT, load_shader(argv[1 + k]), "main",
                                                 k == 0 ? &spec : NULL};
        pipeline_infos[k] = (VkComputePipelineCreateInfo){VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO, NULL, 0,
                                                          stage, layout, VK_NULL_HANDLE, -1};
    }
    VkPipeline pipelines[2];
    CHECK(vkCreateComputePipelines(device, VK_NULL_HANDLE, 2, pipeline_infos, NULL, pipelines));

    VkCommandPoolCreateInfo cmd_pool_info = {VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, NULL,
                                             VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, family};
    VkCommandPool cmd_pool;
    CHECK(vkCreateCommandPool(device, &cmd_pool_info, NULL, &cmd_pool));
    VkCommandBufferAllocateInfo cb_info = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, NULL, cmd_pool,
                                           VK_COMMAND_BUFFER_LEVEL_PRIMARY, 1};
    VkCommandBuffer cb;
    CHECK(vkAllocateCommandBuffers(device, &cb_info, &cb));
    /* The graphics part: a 16x16 colour attachment, cleared by a render pass. */
    VkImage image = VK_NULL_HANDLE;
    VkDeviceMemory image_memory = VK_NULL_HANDLE;
    VkImageView view = VK_NULL_HANDLE;
    VkRenderPass render_pass = VK_NULL_HANDLE;
    VkFramebuffer framebuffer = VK_NULL_HANDLE;
    if (graphics) {
        VkImageCreateInfo image_info = {VK_STRUCTURE_TYPE_IMAGE_CREATE_INFO, NULL, 0, VK_IMAGE_TYPE_2D,
                                        VK_FORMAT_R8G8B8A8_UNORM, {16, 16, 1}, 1, 1, VK_SAMPLE_COUNT_1_BIT,
                                        VK_IMAGE_TILING_OPTIMAL, VK_IMAGE_USAGE_COLOR_ATTACHMENT_BIT,
                                        VK_SHARING_MODE_EXCLUSIVE, 0, NULL, VK_IMAGE_LAYOUT_UNDEFINED};
        CHECK(vkCreateImage(device, &image_info, NULL, &image));
        VkMemoryRequirements req;
        vkGetImageMemoryRequirements(device, image, &req);
        VkMemoryAllocateInfo alloc = {VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, NULL, req.size,
                                      memory_type(req.memoryTypeBits, 0)};
        CHECK(vkAllocateMemory(device, &alloc, NULL, &image_memory));
        CHECK(vkBindImageMemory(device, image, image_memory, 0));
        VkImageViewCreateInfo view_info = {VK_STRUCTURE_TYPE_IMAGE_VIEW_CREATE_INFO, NULL, 0, image, VK_IMAGE_VIEW_TYPE_2D,
                                           VK_FORMAT_R8G8B8A8_UNORM, {0}, {VK_IMAGE_ASPECT_COLOR_BIT, 0, 1, 0, 1}};
        CHECK(vkCreateImageView(device, &view_info, NULL, &view));
        VkAttachmentDescription colour = {0, VK_FORMAT_R8G8B8A8_UNORM, VK_SAMPLE_COUNT_1_BIT, VK_ATTACHMENT_LOAD_OP_CLEAR,
                                          VK_ATTACHMENT_STORE_OP_STORE, VK_ATTACHMENT_LOAD_OP_DONT_CARE,
                                          VK_ATTACHMENT_STORE_OP_DONT_CARE, VK_IMAGE_LAYOUT_UNDEFINED,
                                          VK_IMAGE_LAYOUT_COLOR_ATTACHMENT_OPTIMAL};
        VkAttachmentReference ref = {0, VK_IMAGE_LAYOUT_COLOR_ATTACHMENT_OPTIMAL};
        VkSubpassDescription subpass = {0, VK_PIPELINE_BIND_POINT_GRAPHICS, 0, NULL, 1, &ref, NULL, NULL, 0, NULL};
        VkRenderPassCreateInfo pass_info = {VK_STRUCTURE_TYPE_RENDER_PASS_CREATE_INFO, NULL, 0, 1, &colour, 1, &subpass, 0, NULL};
        CHECK(vkCreateRenderPass(device, &pass_info, NULL, &render_pass));
        VkFramebufferCreateInfo fb_info = {VK_STRUCTURE_TYPE_FRAMEBUFFER_CREATE_INFO, NULL, 0, render_pass, 1, &view, 16, 16, 1};
        CHECK(vkCreateFramebuffer(device, &fb_info, NULL, &framebuffer));
    }

    VkFenceCreateInfo fence_info = {VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    VkFence fence;
    CHECK(vkCreateFence(device, &fence_info, NULL, &fence));

    for (int frame = 0; frame < frames; frame++) {
        for (int i = 0; i < N; i++) staging_data[i] = (float)(i + 100 * frame) / 8.0f;
        struct { float bias; uint32_t n; } push[2] = {{0.5f * (float)frame, N}, {1.0f + (float)frame, N}};

        VkCommandBufferBeginInfo begin = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO, NULL,
                                          VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
        CHECK(vkBeginCommandBuffer(cb, &begin));
        if (graphics) {
            VkClearValue clear = {{{0.25f, 0.5f, 0.75f, 1.0f}}};
            VkRenderPassBeginInfo pass = {VK_STRUCTURE_TYPE_RENDER_PASS_BEGIN_INFO, NULL, render_pass, framebuffer,
                                          {{0, 0}, {16, 16}}, 1, &clear};
            vkCmdBeginRenderPass(cb, &pass, VK_SUBPASS_CONTENTS_INLINE);
            vkCmdEndRenderPass(cb);
        }
        VkBufferCopy whole = {0, 0, BYTES};
        vkCmdCopyBuffer(cb, staging, input, 1, &whole);
        barrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
                VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT);
        for (int k = 0; k < 2; k++) {
            if (k) barrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
                           VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT);
            vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipelines[k]);
            vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, 1, &sets[k], 0, NULL);
            vkCmdPushConstants(cb, layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof push[k], &push[k]);
            vkCmdDispatch(cb, N / 64, 1, 1);
        }
        barrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
                VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_READ_BIT);
        vkCmdCopyBuffer(cb, output, readback, 1, &whole);
        barrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
                VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
        CHECK(vkEndCommandBuffer(cb));

        VkSubmitInfo submit = {VK_STRUCTURE_TYPE_SUBMIT_INFO, NULL, 0, NULL, NULL, 1, &cb};
        CHECK(vkQueueSubmit(queue, 1, &submit, fence));
        CHECK(vkWaitForFences(device, 1, &fence, VK_TRUE, UINT64_MAX));
        CHECK(vkResetFences(device, 1, &fence));

        char path[4096];
        snprintf(path, sizeof path, "%s/frame%d.bin", argv[3], frame);
        FILE *out = fopen(path, "wb");
        if (!out || fwrite(readback_data, 1, BYTES, out) != BYTES) { perror(path); return 1; }
        fclose(out);
    }

    vkDeviceWaitIdle(device);
    vkDestroyFence(device, fence, NULL);
    if (graphics) {
        vkDestroyFramebuffer(device, framebuffer, NULL);
        vkDestroyRenderPass(device, render_pass, NULL);
        vkDestroyImageView(device, view, NULL);
        vkDestroyImage(device, image, NULL);
        vkFreeMemory(device, image_memory, NULL);
    }
    vkDestroyCommandPool(device, cmd_pool, NULL);
    for (int k = 0; k < 2; k++) {
        vkDestroyPipeline(device, pipelines[k], NULL);
        vkDestroyShaderModule(device, pipeline_infos[k].stage.module, NULL);
    }
    vkDestroyDescriptorPool(device, pool, NULL);
    vkDestroyPipelineLayout(device, layout, NULL);
    vkDestroyDescriptorSetLayout(device, set_layout, NULL);
    for (int k = 0; k < buffer_count; k++) {
        vkDestroyBuffer(device, buffers[k], NULL);
        vkFreeMemory(device, memories[k], NULL);
    }
    vkDestroyDevice(device, NULL);
    vkDestroyInstance(instance, NULL);
    return 0;
}
