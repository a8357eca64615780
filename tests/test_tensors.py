"""VK_ARM_tensors end to end over ARM's emulation layer (lavapipe in CI): vkcore.device.arm_ffi + vkcore.resources.tensors.

The layer rewrites every tensor shader at vkCreateShaderModule (110-180 ms each on a CPU), so the device
tests share one context and compile two shaders in all. The layer aborts the whole process on some
mismatches; a crash here shows up as the pytest process dying (exit 134), not as a failed assertion.
"""
from __future__ import annotations

from typing import Any, Iterator, Sequence

import numpy as np
import pytest
import vulkan as vk

from tests.vkharness import compile_tensor_glsl, vulkan_context
from vkcore.device import arm_ffi
from vkcore.errors import DeviceError
from vkcore.resources.tensors import (
    LINEAR,
    OPTIMAL,
    DeviceTensor,
    TensorApi,
    TensorBarrier,
    TensorDescription,
    TensorLimits,
    cmd_copy_tensor,
    cmd_pipeline_barrier,
    copy_problems,
    description_problems,
    mapping_problems,
    packed_strides,
    stride_problems,
    tensor_descriptor_write,
    update_descriptor_sets,
)

F32 = vk.VK_FORMAT_R32_SFLOAT
F16 = vk.VK_FORMAT_R16_SFLOAT
I8 = vk.VK_FORMAT_R8_SINT

# Out = X * a + Y * b + c, elementwise over rank-3 float tensors; a, b, c are push constants.
AXPBY_F32 = """
#version 460
#extension GL_ARM_tensors : require
layout(local_size_x = 4, local_size_y = 4, local_size_z = 2) in;
layout(set = 0, binding = 0) uniform tensorARM<float, 3> X;
layout(set = 0, binding = 1) uniform tensorARM<float, 3> Y;
layout(set = 0, binding = 2) uniform tensorARM<float, 3> Out;
layout(push_constant) uniform Params { float a; float b; float c; } p;
void main() {
    uint i = gl_GlobalInvocationID.z, j = gl_GlobalInvocationID.y, k = gl_GlobalInvocationID.x;
    if (i >= tensorSizeARM(Out, 0) || j >= tensorSizeARM(Out, 1) || k >= tensorSizeARM(Out, 2)) return;
    float x, y;
    tensorReadARM(X, uint[](i, j, k), x);
    tensorReadARM(Y, uint[](i, j, k), y);
    tensorWriteARM(Out, uint[](i, j, k), x * p.a + y * p.b + p.c);
}
"""

# B = A * 2 - 3 (int8), H = float16(A) * 0.5, over rank-2 tensors.
INT8_HALF = """
#version 460
#extension GL_ARM_tensors : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(local_size_x = 8, local_size_y = 8) in;
layout(set = 0, binding = 0) uniform tensorARM<int8_t, 2> A;
layout(set = 0, binding = 1) uniform tensorARM<int8_t, 2> B;
layout(set = 0, binding = 2) uniform tensorARM<float16_t, 2> H;
void main() {
    uint i = gl_GlobalInvocationID.y, j = gl_GlobalInvocationID.x;
    if (i >= tensorSizeARM(A, 0) || j >= tensorSizeARM(A, 1)) return;
    int8_t a;
    tensorReadARM(A, uint[](i, j), a);
    tensorWriteARM(B, uint[](i, j), int8_t(a * int8_t(2) - int8_t(3)));
    tensorWriteARM(H, uint[](i, j), float16_t(a) * float16_t(0.5));
}
"""


# ---------------------------------------------------------------------------------------------------
# Pure checks: no device needed


def test_layout_matches_header_and_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    arm_ffi.check_layout()
    assert arm_ffi.ffi.sizeof("VkTensorDescriptionARM") == 56
    assert arm_ffi.ffi.offsetof("VkTensorDescriptionARM", "usage") == 48
    assert arm_ffi.STRUCTURE_TYPE["TENSOR_DEPENDENCY_INFO_ARM"] == 1000460013
    assert arm_ffi.DESCRIPTOR_TYPE_TENSOR_ARM == 1000460000
    wrong = dict(arm_ffi.LAYOUT)
    wrong["VkTensorCopyARM"] = (48, {"pExtent": 36})
    monkeypatch.setattr(arm_ffi, "LAYOUT", wrong)
    with pytest.raises(AssertionError, match="VkTensorCopyARM.pExtent"):
        arm_ffi.check_layout()


def test_handles_and_structs_cross_between_ffis() -> None:
    ext = arm_ffi.new("VkWriteDescriptorSetTensorARM")
    write = vk.VkWriteDescriptorSet(pNext=arm_ffi.as_void_p(ext), descriptorType=arm_ffi.DESCRIPTOR_TYPE_TENSOR_ARM)
    assert arm_ffi.handle_to_int(write.pNext) == arm_ffi.handle_to_int(ext)
    fake_memory = vk.ffi.cast("VkDeviceMemory", 0x1234)  # a `vulkan` handle goes into our struct unchanged
    bind = arm_ffi.new("VkBindTensorMemoryInfoARM", memory=fake_memory)
    assert arm_ffi.handle_to_int(bind.memory) == 0x1234


def test_stride_and_description_checks() -> None:
    assert packed_strides(4, (2, 3, 4)) == (48, 16, 4)
    assert stride_problems(4, (2, 3, 4), (48, 16, 4)) == []
    assert stride_problems(4, (2, 3, 4), (64, 16, 4)) == []  # padded outer rows are fine
    assert any("innermost" in p for p in stride_problems(4, (2, 3, 4), (48, 16, 8)))
    assert any("overlap" in p for p in stride_problems(4, (2, 3, 4), (32, 16, 4)))
    assert any("multiple" in p for p in stride_problems(4, (2, 3, 4), (50, 16, 4)))
    assert any("3 strides" in p for p in stride_problems(4, (2, 3), (48, 16, 4)))
    assert description_problems(F32, (2, 3, 4)) == []
    limits = TensorLimits(max_dimension_count=4)
    assert any("1 to 4" in p for p in description_problems(F32, (), limits=limits))
    assert any("1 to 4" in p for p in description_problems(F32, (1,) * 5, limits=limits))
    assert any(">= 1" in p for p in description_problems(F32, (2, 0, 4)))
    assert any("one-component" in p for p in description_problems(vk.VK_FORMAT_R8G8B8A8_UNORM, (4,)))
    assert any("OPTIMAL" in p for p in description_problems(F32, (2, 3), tiling=OPTIMAL, strides=(12, 4)))
    assert any("usage" in p for p in description_problems(F32, (2,), usage=0))
    assert mapping_problems(LINEAR) == [] and mapping_problems(OPTIMAL)
    a = TensorDescription(F32, (2, 3))
    assert copy_problems(a, TensorDescription(vk.VK_FORMAT_R32_SINT, (2, 3))) == []
    assert copy_problems(a, TensorDescription(F32, (3, 2)))
    assert copy_problems(a, TensorDescription(F16, (2, 3)))


# ---------------------------------------------------------------------------------------------------
# Device plumbing


@pytest.fixture(scope="module")
def ctx() -> Iterator[Any]:
    yield from vulkan_context("tensor-capable", need_tensors=True)


@pytest.fixture(scope="module")
def api(ctx: Any) -> TensorApi:
    return TensorApi.load(ctx)


class ComputeRig:
    """Minimal compute plumbing for tensor shaders: one set of ``bindings`` TENSOR_ARM descriptors,
    optional push constants, a pipeline, a command buffer and a fence."""

    def __init__(self, ctx: Any, spirv: bytes, bindings: int, push_size: int = 0, max_sets: int = 4) -> None:
        self.ctx = ctx
        d = ctx.device
        layout_bindings = [
            vk.VkDescriptorSetLayoutBinding(binding=i, descriptorType=arm_ffi.DESCRIPTOR_TYPE_TENSOR_ARM,
                                            descriptorCount=1, stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT)
            for i in range(bindings)
        ]
        self.set_layout = vk.vkCreateDescriptorSetLayout(d, vk.VkDescriptorSetLayoutCreateInfo(pBindings=layout_bindings), None)
        ranges = [vk.VkPushConstantRange(stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT, offset=0, size=push_size)] if push_size else None
        self.layout = vk.vkCreatePipelineLayout(
            d, vk.VkPipelineLayoutCreateInfo(pSetLayouts=[self.set_layout], pPushConstantRanges=ranges), None
        )
        self.module = vk.vkCreateShaderModule(d, vk.VkShaderModuleCreateInfo(codeSize=len(spirv), pCode=spirv), None)
        stage = vk.VkPipelineShaderStageCreateInfo(stage=vk.VK_SHADER_STAGE_COMPUTE_BIT, module=self.module, pName="main")
        self.pipeline = vk.vkCreateComputePipelines(
            d, vk.VK_NULL_HANDLE, 1, [vk.VkComputePipelineCreateInfo(stage=stage, layout=self.layout)], None
        )[0]
        sizes = [vk.VkDescriptorPoolSize(type=arm_ffi.DESCRIPTOR_TYPE_TENSOR_ARM, descriptorCount=bindings * max_sets)]
        self.pool = vk.vkCreateDescriptorPool(d, vk.VkDescriptorPoolCreateInfo(maxSets=max_sets, pPoolSizes=sizes), None)
        self.cmd_pool = vk.vkCreateCommandPool(d, vk.VkCommandPoolCreateInfo(queueFamilyIndex=ctx.queue_family), None)
        self.cmd = vk.vkAllocateCommandBuffers(
            d, vk.VkCommandBufferAllocateInfo(commandPool=self.cmd_pool, level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, commandBufferCount=1)
        )[0]
        self.fence = vk.vkCreateFence(d, vk.VkFenceCreateInfo(), None)

    def descriptor_set(self, tensors: Sequence[DeviceTensor]) -> Any:
        """A set with binding i = tensors[i], written through VkWriteDescriptorSetTensorARM."""
        ds = vk.vkAllocateDescriptorSets(
            self.ctx.device, vk.VkDescriptorSetAllocateInfo(descriptorPool=self.pool, pSetLayouts=[self.set_layout])
        )[0]
        update_descriptor_sets(self.ctx, [tensor_descriptor_write(ds, i, [t]) for i, t in enumerate(tensors)])
        return ds

    def begin(self) -> Any:
        vk.vkBeginCommandBuffer(self.cmd, vk.VkCommandBufferBeginInfo(flags=vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT))
        return self.cmd

    def dispatch(self, ds: Any, groups: tuple[int, int, int], push: bytes = b"") -> None:
        vk.vkCmdBindPipeline(self.cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, self.pipeline)
        vk.vkCmdBindDescriptorSets(self.cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, self.layout, 0, 1, [ds], 0, None)
        if push:
            data = vk.ffi.new("char[]", push)
            vk.vkCmdPushConstants(self.cmd, self.layout, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0, len(push), data)
        vk.vkCmdDispatch(self.cmd, *groups)

    def submit_and_wait(self) -> None:
        vk.vkEndCommandBuffer(self.cmd)
        vk.vkQueueSubmit(self.ctx.queue, 1, [vk.VkSubmitInfo(pCommandBuffers=[self.cmd])], self.fence)
        vk.vkWaitForFences(self.ctx.device, 1, [self.fence], vk.VK_TRUE, 10_000_000_000)

    def destroy(self) -> None:
        d = self.ctx.device
        vk.vkDestroyFence(d, self.fence, None)
        vk.vkDestroyCommandPool(d, self.cmd_pool, None)
        vk.vkDestroyDescriptorPool(d, self.pool, None)
        vk.vkDestroyPipeline(d, self.pipeline, None)
        vk.vkDestroyShaderModule(d, self.module, None)
        vk.vkDestroyPipelineLayout(d, self.layout, None)
        vk.vkDestroyDescriptorSetLayout(d, self.set_layout, None)


def shader_barrier(tensor: DeviceTensor, dst_stage: int = vk.VK_PIPELINE_STAGE_2_COMPUTE_SHADER_BIT,
                   dst_access: int = vk.VK_ACCESS_2_SHADER_READ_BIT) -> TensorBarrier:
    return TensorBarrier(tensor, vk.VK_PIPELINE_STAGE_2_COMPUTE_SHADER_BIT, vk.VK_ACCESS_2_SHADER_WRITE_BIT, dst_stage, dst_access)


TO_TRANSFER = dict(dst_stage=vk.VK_PIPELINE_STAGE_2_COPY_BIT, dst_access=vk.VK_ACCESS_2_TRANSFER_READ_BIT)


# ---------------------------------------------------------------------------------------------------
# Device tests


@pytest.mark.device
def test_api_loads_and_reports_device(ctx: Any, api: TensorApi) -> None:
    mp = ctx.memory_properties
    host_visible = [i for i in range(mp.memoryTypeCount) if mp.memoryTypes[i].propertyFlags & vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT]
    assert host_visible  # tensors can be mapped on every device vkcap runs on (lavapipe: type 0 only)
    assert api.limits.max_dimension_count >= 4
    assert api.features().tensors == 1
    optimal, linear = api.format_features(F32)
    assert linear & arm_ffi.FORMAT_FEATURE_2_TENSOR_SHADER_BIT_ARM
    assert TensorApi.load(ctx) is api
    t = DeviceTensor.create(api, F32, (2, 3, 4))
    try:
        assert t.requirements.size >= 2 * 3 * 4 * 4
        assert t.requirements.memoryTypeBits & 1
        assert api.device_memory_requirements(t.description) == t.requirements
        with pytest.raises(DeviceError, match="innermost stride"):
            DeviceTensor.create(api, F32, (2, 3, 4), strides=(48, 16, 8))
        with pytest.raises(DeviceError, match="dimension 1"):
            DeviceTensor.create(api, F32, (2, 0, 4))
        transposed = DeviceTensor.create(api, F32, (4, 3, 2))
        with pytest.raises(DeviceError, match="differ"):  # the layer would abort the process instead
            cmd_copy_tensor(api, None, t, transposed)
        transposed.destroy()
        optimal_tensor = DeviceTensor.create(api, F32, (2, 3, 4), tiling=OPTIMAL)
        optimal_tensor.allocate_and_bind()
        with pytest.raises(DeviceError, match="only LINEAR"):
            optimal_tensor.host_view()
        optimal_tensor.destroy()
    finally:
        t.destroy()


@pytest.mark.device
def test_float32_shader_barrier_copy(ctx: Any, api: TensorApi) -> None:
    dims = (2, 3, 4)
    rng = np.random.default_rng(7)
    a_data = rng.standard_normal(dims).astype(np.float32)
    a = DeviceTensor.create(api, F32, dims)
    b = DeviceTensor.create(api, F32, dims)
    c = DeviceTensor.create(api, F32, dims)
    d = DeviceTensor.create(api, F32, dims)
    a.allocate_and_bind()
    d.allocate_and_bind()
    # B and C share one allocation, C at the next aligned offset (as a memory group would place them).
    c_offset = -(-b.size // c.requirements.alignment) * c.requirements.alignment
    from vkcore.device import memory

    shared = memory.allocate(ctx, b.requirements, c_offset + c.size, host_access=True, what="B and C")
    b.bind(shared, 0)
    c.bind(shared, c_offset)
    assert b.requirements.memoryTypeBits & (1 << shared.type_index)  # a type the tensor accepts (lavapipe: 0)
    assert shared.flags & vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT
    for t in (b, c, d):
        t.array()[...] = -1.0
    a.array()[...] = a_data
    rig = ComputeRig(ctx, compile_tensor_glsl(AXPBY_F32), bindings=3, push_size=12)
    try:
        set_b = rig.descriptor_set([a, a, b])  # B = A * 2 + A * 0 + 1
        set_c = rig.descriptor_set([b, a, c])  # C = B * 1 + A * 1 + 0
        cmd = rig.begin()
        rig.dispatch(set_b, (1, 1, 1), np.array([2, 0, 1], np.float32).tobytes())
        cmd_pipeline_barrier(cmd, [shader_barrier(b)])
        rig.dispatch(set_c, (1, 1, 1), np.array([1, 1, 0], np.float32).tobytes())
        cmd_pipeline_barrier(cmd, [shader_barrier(c, **TO_TRANSFER)])
        cmd_copy_tensor(api, cmd, c, d)
        rig.submit_and_wait()
        want_b = a_data * np.float32(2) + np.float32(1)
        want_c = want_b + a_data
        np.testing.assert_array_equal(b.array(), want_b)
        np.testing.assert_array_equal(c.array(), want_c)
        np.testing.assert_array_equal(d.array(), want_c)
        np.testing.assert_array_equal(a.array(), a_data)  # read-only input untouched
    finally:
        rig.destroy()
        for t in (a, b, c, d):
            t.destroy()
        memory.free(ctx, shared)


@pytest.mark.device
def test_int8_strided_and_float16(ctx: Any, api: TensorApi) -> None:
    dims = (5, 6)
    rng = np.random.default_rng(11)
    a_data = rng.integers(-60, 60, size=dims, dtype=np.int8)
    # A is LINEAR with padded rows (8 bytes for 6 elements): the shader must follow the strides.
    a = DeviceTensor.create(api, I8, dims, strides=(8, 1))
    b = DeviceTensor.create(api, I8, dims)
    h = DeviceTensor.create(api, F16, dims)
    packed = DeviceTensor.create(api, I8, dims)
    for t in (a, b, h, packed):
        t.allocate_and_bind()
    assert a.array().strides == (8, 1)
    a.host_view()[:] = b"\x7f" * a.description.span  # padding bytes must stay as they are
    a.array()[...] = a_data
    b.array()[...] = 0
    h.array()[...] = 0
    packed.array()[...] = 0
    rig = ComputeRig(ctx, compile_tensor_glsl(INT8_HALF), bindings=3)
    try:
        ds = rig.descriptor_set([a, b, h])
        cmd = rig.begin()
        rig.dispatch(ds, (1, 1, 1))
        cmd_copy_tensor(api, cmd, a, packed)  # strided -> packed
        rig.submit_and_wait()
        np.testing.assert_array_equal(b.array(), (a_data * np.int8(2) - np.int8(3)).astype(np.int8))
        np.testing.assert_array_equal(h.array(), a_data.astype(np.float16) * np.float16(0.5))
        np.testing.assert_array_equal(packed.array(), a_data)
        raw = np.frombuffer(a.host_view(), np.uint8).copy()
        pad = np.ones(a.description.span, bool)
        for i in range(dims[0]):
            pad[i * 8 : i * 8 + dims[1]] = False
        assert (raw[pad] == 0x7F).all()
    finally:
        rig.destroy()
        for t in (a, b, h, packed):
            t.destroy()


@pytest.mark.device
def test_load_refuses_a_context_without_tensors() -> None:
    from vkcore.device.context import VulkanContext

    try:
        plain = VulkanContext(emulation="off")
    except Exception as exc:
        pytest.skip(f"no Vulkan device: {exc}")
    try:
        if "VK_ARM_tensors" in plain.extensions:
            pytest.skip("the device has VK_ARM_tensors natively")
        with pytest.raises(DeviceError, match="VK_ARM_tensors is not enabled"):
            TensorApi.load(plain)
    finally:
        plain.close()
