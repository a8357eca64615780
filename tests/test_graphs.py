"""VK_ARM_data_graph end to end over ARM's emulation layer (lavapipe in CI): vkcore.device.graph_ffi + vkcore.graphs.data_graph.

Graph modules are made here: TOSA MLIR text -> ARM's ``model-converter`` (ai-ml-sdk-model-converter) -> a
VGF file, read with :mod:`vkcore.graphs.vgf` (SPIR-V module, descriptor sets, resource table, constants with their
graph constant ids). The emulation layer aborts the whole process (exit 134) on a mismatch between a module
and its pipeline: the refusals tested here all happen in vkcore.graphs.data_graph' own checks, before any Vulkan
call; a crash would show up as the pytest process dying, not as a failed assertion.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
import vulkan as vk

from tests.vkharness import convert_model, vulkan_context
from vkcore.device import arm_ffi, graph_ffi
from vkcore.errors import DeviceError
from vkcore.graphs.data_graph import (
    DataGraphPipeline,
    GraphApi,
    GraphConstant,
    GraphLayout,
    GraphModuleInfo,
    GraphResource,
    SessionMemoryRequirement,
    pipeline_problems,
    scan_graph_module,
)
from vkcore.resources.tensors import DEFAULT_USAGE, DeviceTensor, TensorApi, TensorDescription

F32 = vk.VK_FORMAT_R32_SFLOAT
GRAPH_USAGE = DEFAULT_USAGE | arm_ffi.TENSOR_USAGE_DATA_GRAPH_BIT_ARM  # inputs and outputs: mapped, bound to graphs
CONSTANT_USAGE = arm_ffi.TENSOR_USAGE_DATA_GRAPH_BIT_ARM

ADD_MLIR = """
module {
  func.func @main(%arg0: tensor<1x4x4x2xf32>, %arg1: tensor<1x4x4x2xf32>) -> tensor<1x4x4x2xf32> {
    %0 = tosa.add %arg0, %arg1 : (tensor<1x4x4x2xf32>, tensor<1x4x4x2xf32>) -> tensor<1x4x4x2xf32>
    return %0 : tensor<1x4x4x2xf32>
  }
}
"""

# conv2d (3x3, pad 1, 20 output channels, NHWC input, OHWI weights) + bias, then clamp: two operations, so
# the layer needs transient session memory for the intermediate. Weights and bias hold more than 16
# elements each: model-converter keeps them as graph constants (smaller ones are inlined in the SPIR-V).
CONV_MLIR = """
module {
  func.func @main(%arg0: tensor<1x4x4x2xf32>) -> tensor<1x4x4x20xf32> {
    %w = "tosa.const"() <{values = dense<"0x{weights}"> : tensor<20x3x3x2xf32>}> : () -> tensor<20x3x3x2xf32>
    %b = "tosa.const"() <{values = dense<"0x{bias}"> : tensor<20xf32>}> : () -> tensor<20xf32>
    %izp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
    %wzp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
    %0 = tosa.conv2d %arg0, %w, %b, %izp, %wzp {acc_type = f32, dilation = array<i64: 1, 1>, pad = array<i64: 1, 1, 1, 1>, stride = array<i64: 1, 1>} : (tensor<1x4x4x2xf32>, tensor<20x3x3x2xf32>, tensor<20xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x4x4x20xf32>
    %1 = tosa.clamp %0 {min_val = -1.0 : f32, max_val = 1.5 : f32} : (tensor<1x4x4x20xf32>) -> tensor<1x4x4x20xf32>
    return %1 : tensor<1x4x4x20xf32>
  }
}
"""
CLAMP = (-1.0, 1.5)


# ---------------------------------------------------------------------------------------------------
# A hand-assembled SPIR-V graph module (no converter needed) for the pure checks

OP_NAME, OP_TYPE_INT, OP_TYPE_FLOAT, OP_TYPE_ARRAY, OP_TYPE_POINTER = 5, 21, 22, 28, 32
OP_CONSTANT, OP_CONSTANT_COMPOSITE, OP_VARIABLE, OP_DECORATE = 43, 44, 59, 71
OP_TYPE_TENSOR, OP_GRAPH_CONSTANT, OP_GRAPH_ENTRY_POINT = 4163, 4181, 4182


def _words(text: str) -> list[int]:
    raw = text.encode() + b"\0"
    raw += b"\0" * (-len(raw) % 4)
    return list(struct.unpack(f"<{len(raw) // 4}I", raw))


def assemble(*instructions: tuple[int, ...] | list[int]) -> bytes:
    words = [0x07230203, 0x00010600, 0, 100, 0]
    for op, *operands in instructions:
        words += [(len(operands) + 1) << 16 | op, *operands]
    return struct.pack(f"<{len(words)}I", *words)


def tiny_graph_module(constant_id: int = 7) -> bytes:
    """Graph "main": set 0 bindings 0 (input) and 1 (output), float32 [1,4,4,2]; one graph constant of the
    same type with GraphConstantID ``constant_id``."""
    f32, u32, c4, c1, c2, arr, shape, tensor, ptr, x, y, const = range(1, 13)
    return assemble(
        (OP_NAME, x, *_words("input")),
        (OP_DECORATE, x, 34, 0), (OP_DECORATE, x, 33, 0),
        (OP_DECORATE, y, 34, 0), (OP_DECORATE, y, 33, 1),
        (OP_TYPE_FLOAT, f32, 32), (OP_TYPE_INT, u32, 32, 0),
        (OP_CONSTANT, u32, c4, 4), (OP_CONSTANT, u32, c1, 1), (OP_CONSTANT, u32, c2, 2),
        (OP_TYPE_ARRAY, arr, u32, c4), (OP_CONSTANT_COMPOSITE, arr, shape, c1, c4, c4, c2),
        (OP_TYPE_TENSOR, tensor, f32, c4, shape), (OP_TYPE_POINTER, ptr, 0, tensor),
        (OP_VARIABLE, ptr, x, 0), (OP_VARIABLE, ptr, y, 0),
        (OP_GRAPH_CONSTANT, tensor, const, constant_id),
        (OP_GRAPH_ENTRY_POINT, 50, *_words("main"), x, y),
    )


DIMS = (1, 4, 4, 2)
GOOD_RESOURCES = [GraphResource(0, 0, TensorDescription(F32, DIMS, usage=GRAPH_USAGE)),
                  GraphResource(0, 1, TensorDescription(F32, DIMS, usage=GRAPH_USAGE))]
GOOD_CONSTANTS = [GraphConstant(7, TensorDescription(F32, DIMS, usage=CONSTANT_USAGE), bytes(4 * 32))]


def test_layout_matches_header_and_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    graph_ffi.check_layout()
    ffi = graph_ffi.ffi
    assert ffi.sizeof("VkDataGraphPipelineCreateInfoARM") == 48
    assert ffi.offsetof("VkDataGraphPipelineCreateInfoARM", "pResourceInfos") == 40
    assert ffi.sizeof("VkDataGraphPipelineShaderModuleCreateInfoARM") == 56
    assert ffi.sizeof("VkBindDataGraphPipelineSessionMemoryInfoARM") == 48
    assert ffi.offsetof("VkBindDataGraphPipelineSessionMemoryInfoARM", "memoryOffset") == 40
    assert ffi.sizeof("VkQueueFamilyDataGraphPropertiesARM") == 160
    assert graph_ffi.STRUCTURE_TYPE["DATA_GRAPH_PIPELINE_DISPATCH_INFO_ARM"] == 1000507014
    assert graph_ffi.PIPELINE_BIND_POINT_DATA_GRAPH_ARM == 1000507000
    assert graph_ffi.QUEUE_DATA_GRAPH_BIT_ARM == 0x400
    # The graph structs live in arm_ffi's FFI: a tensor description chains into a resource info directly.
    desc = arm_ffi.new("VkTensorDescriptionARM")
    info = graph_ffi.new("VkDataGraphPipelineResourceInfoARM", pNext=desc)
    assert info.sType == 1000507002 and arm_ffi.handle_to_int(info.pNext) == arm_ffi.handle_to_int(desc)
    wrong = dict(graph_ffi.LAYOUT)
    wrong["VkDataGraphPipelineConstantARM"] = (32, {"pConstantData": 20})
    monkeypatch.setattr(graph_ffi, "LAYOUT", wrong)
    with pytest.raises(AssertionError, match="VkDataGraphPipelineConstantARM.pConstantData"):
        graph_ffi.check_layout()


def test_scan_reads_bindings_constants_and_entry_points() -> None:
    info = scan_graph_module(tiny_graph_module())
    assert info.entry_points == ("main",)
    assert sorted(info.bindings) == [(0, 0), (0, 1)]
    assert info.bindings[(0, 0)].name == "input"
    t = info.bindings[(0, 1)].tensor
    assert t is not None and (t.kind, t.bits, t.rank, t.shape) == ("float", 32, 4, DIMS)
    assert list(info.constants) == [7] and info.constants[7] == t
    assert info.sets == (0,)
    for bad in (b"", b"\x03\x02\x23\x07" * 3, b"not spirv at all, no", tiny_graph_module()[:-2]):
        with pytest.raises(DeviceError, match="graph module"):
            scan_graph_module(bad)


def test_pipeline_problems_name_what_the_layer_would_abort_on() -> None:
    info = scan_graph_module(tiny_graph_module())
    assert pipeline_problems(info, "main", GOOD_RESOURCES, GOOD_CONSTANTS) == []

    def problems(**changes: Any) -> str:
        args: dict[str, Any] = {"entry": "main", "resources": GOOD_RESOURCES, "constants": GOOD_CONSTANTS}
        args.update(changes)
        found = pipeline_problems(info, args["entry"], args["resources"], args["constants"], args.get("layout"))
        assert found, changes
        return "; ".join(found)

    # A constant id that is the VGF table index rather than the module's GraphConstantID (the layer aborts).
    wrong_id = problems(constants=[GraphConstant(0, GOOD_CONSTANTS[0].description, GOOD_CONSTANTS[0].data)])
    assert "constant id 0 is not a GraphConstantID of the module (it declares 7)" in wrong_id
    assert "graph constant id 7" in wrong_id and "has no data" in wrong_id
    # A binding of the module without a resource info (the layer aborts).
    assert "set 0 binding 1 (tensor<1x4x4x2 float32>) is used by the module but has no resource info" in problems(
        resources=GOOD_RESOURCES[:1])
    assert "no resource info" in problems(resources=[])
    assert "pipeline layout does not declare" in problems(layout=[(0, 0)])
    # What the layer accepts silently (and then computes garbage or reads out of bounds).
    assert "dims [1, 4, 4, 8] but the module declares [1, 4, 4, 2]" in problems(
        resources=[GOOD_RESOURCES[0], GraphResource(0, 1, TensorDescription(F32, (1, 4, 4, 8), usage=GRAPH_USAGE))])
    assert "rank 4" in problems(resources=[GOOD_RESOURCES[0], GraphResource(0, 1, TensorDescription(F32, (32,), usage=GRAPH_USAGE))])
    assert "VK_FORMAT_R16_SFLOAT (float16)" in problems(
        resources=[GOOD_RESOURCES[0], GraphResource(0, 1, TensorDescription(vk.VK_FORMAT_R16_SFLOAT, DIMS, usage=GRAPH_USAGE))])
    assert "entry point 'nope' is not a graph of the module (it has 'main')" in problems(entry="nope")
    assert "names nothing the module declares" in problems(
        resources=[*GOOD_RESOURCES, GraphResource(1, 0, GOOD_RESOURCES[0].description)])
    assert "lacks DATA_GRAPH" in problems(
        resources=[GOOD_RESOURCES[0], GraphResource(0, 1, TensorDescription(F32, DIMS, usage=DEFAULT_USAGE))])
    assert "given twice" in problems(resources=[*GOOD_RESOURCES, GOOD_RESOURCES[1]])
    assert "arrayElement is 1" in problems(resources=[GOOD_RESOURCES[0], GraphResource(0, 1, GOOD_RESOURCES[1].description, 1)])
    c = GOOD_CONSTANTS[0]
    assert "constant id 7 is given twice" in problems(constants=[c, c])
    assert "100 bytes of data, but VK_FORMAT_R32_SFLOAT [1, 4, 4, 2] needs 128" in problems(
        constants=[GraphConstant(7, c.description, bytes(100))])
    assert "tiling must be LINEAR" in problems(constants=[GraphConstant(7, TensorDescription(F32, DIMS, tiling=0, usage=CONSTANT_USAGE), c.data)])
    # Tuples are accepted where dataclasses are.
    assert pipeline_problems(info, "main", GOOD_RESOURCES, GOOD_CONSTANTS, [(0, 0), (0, 1)]) == []


# ---------------------------------------------------------------------------------------------------
# Device and converter plumbing


@pytest.fixture(scope="module")
def ctx() -> Iterator[Any]:
    yield from vulkan_context("graph-capable", need_tensors=True, need_graphs=True)


@pytest.fixture(scope="module")
def tensor_api(ctx: Any) -> TensorApi:
    return TensorApi.load(ctx)


@pytest.fixture(scope="module")
def api(ctx: Any) -> GraphApi:
    return GraphApi.load(ctx)


def convert(mlir: str, folder: Path, name: str) -> Path:
    src = folder / f"{name}.mlir"
    src.write_text(mlir)
    return convert_model(src, folder / f"{name}.vgf")


def graph_parts(vgf_path: Path) -> tuple[bytes, str, list[GraphResource], list[GraphConstant], Any]:
    """The one GRAPH segment of a VGF as DataGraphPipeline.create's arguments: SPIR-V, entry point,
    resource infos from the segment's descriptor sets and the resource table, constants with their graph
    constant ids (not their table indexes) and data."""
    from vkcore.graphs.vgf import ModuleType, read_vgf

    vgf = read_vgf(vgf_path)
    (segment,) = [s for s in vgf.segments if s.type is ModuleType.GRAPH]
    module = vgf.module_of(segment)
    assert isinstance(module.code, bytes)
    resources = []
    for ds in segment.descriptor_sets:
        for b in ds.bindings:
            r = vgf.resources[b.resource_index]
            resources.append(GraphResource(ds.set_index, b.binding, TensorDescription(r.format, r.shape, usage=GRAPH_USAGE, strides=r.strides)))
    constants = []
    for cb in segment.constant_bindings:
        c = vgf.constants[cb.constant_index]
        r = vgf.resource_of(c)
        constants.append(GraphConstant(cb.graph_constant_id, TensorDescription(r.format, r.shape, usage=CONSTANT_USAGE), c.read()))
    return module.code, module.entry_point, resources, constants, vgf


class Rig:
    """A command buffer, a fence and the queue: record, submit, wait."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.pool = vk.vkCreateCommandPool(ctx.device, vk.VkCommandPoolCreateInfo(queueFamilyIndex=ctx.queue_family), None)
        self.cmd = vk.vkAllocateCommandBuffers(
            ctx.device, vk.VkCommandBufferAllocateInfo(commandPool=self.pool, level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, commandBufferCount=1)
        )[0]
        self.fence = vk.vkCreateFence(ctx.device, vk.VkFenceCreateInfo(), None)

    def begin(self) -> Any:
        vk.vkBeginCommandBuffer(self.cmd, vk.VkCommandBufferBeginInfo(flags=vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT))
        return self.cmd

    def submit_and_wait(self) -> None:
        vk.vkEndCommandBuffer(self.cmd)
        vk.vkQueueSubmit(self.ctx.queue, 1, [vk.VkSubmitInfo(pCommandBuffers=[self.cmd])], self.fence)
        vk.vkWaitForFences(self.ctx.device, 1, [self.fence], vk.VK_TRUE, 30_000_000_000)

    def destroy(self) -> None:
        vk.vkDestroyFence(self.ctx.device, self.fence, None)
        vk.vkDestroyCommandPool(self.ctx.device, self.pool, None)


def mapped_tensor(tensor_api: TensorApi, dims: tuple[int, ...], fill: np.ndarray | float) -> DeviceTensor:
    t = DeviceTensor.create(tensor_api, F32, dims, usage=GRAPH_USAGE)
    t.allocate_and_bind()
    t.array()[...] = fill
    return t


@dataclass
class GraphRun:
    output: np.ndarray
    module: GraphModuleInfo
    create_seconds: float
    session_requirements: list[SessionMemoryRequirement]
    session_allocations: int


def run_graph(ctx: Any, api: GraphApi, tensor_api: TensorApi, vgf_path: Path, inputs: list[np.ndarray]) -> GraphRun:
    """Create the pipeline of the VGF's graph, bind inputs (in binding order) and one output, dispatch once,
    destroy everything."""
    spirv, entry, resources, constants, vgf = graph_parts(vgf_path)
    module = scan_graph_module(spirv)
    # vkcore.graphs.vgf and the SPIR-V agree on every binding's shape.
    for r in resources:
        declared = module.bindings[(r.set, r.binding)].tensor
        assert declared is not None and declared.shape == r.description.dims
    layout = GraphLayout.for_module(ctx, module)
    pipeline = DataGraphPipeline.create(api, spirv, entry, layout, resources, constants)
    tensors: dict[tuple[int, int], DeviceTensor] = {}
    for r in resources:
        k = len(tensors)
        tensors[(r.set, r.binding)] = mapped_tensor(tensor_api, r.description.dims, inputs[k] if k < len(inputs) else -7.0)
    sets = layout.descriptor_sets(tensors)
    rig = Rig(ctx)
    try:
        pipeline.record_dispatch(rig.begin(), sets)
        rig.submit_and_wait()
        output = np.array(tensors[(resources[-1].set, resources[-1].binding)].array())
        assert pipeline.session is not None
        return GraphRun(output, module, pipeline.create_seconds, list(pipeline.session.requirements),
                        len(pipeline.session.allocations))
    finally:
        rig.destroy()
        sets.destroy()
        pipeline.destroy()
        layout.destroy()
        for t in tensors.values():
            t.destroy()


# ---------------------------------------------------------------------------------------------------
# Device tests


@pytest.mark.device
def test_api_reports_graph_support(ctx: Any, api: GraphApi) -> None:
    assert GraphApi.load(ctx) is api
    assert api.features().dataGraph == 1
    assert api.queue_flags() & graph_ffi.QUEUE_DATA_GRAPH_BIT_ARM
    props = api.queue_properties()
    if props is not None:  # the emulation layer 0.11 reports the TOSA operation set
        assert any(p.operation_set.startswith("TOSA") for p in props)


@pytest.mark.device
def test_add_graph_is_bit_exact(ctx: Any, api: GraphApi, tensor_api: TensorApi, tmp_path: Path) -> None:
    vgf = convert(ADD_MLIR, tmp_path, "add")
    rng = np.random.default_rng(11)
    a = rng.standard_normal(DIMS).astype(np.float32)
    b = rng.standard_normal(DIMS).astype(np.float32)
    run = run_graph(ctx, api, tensor_api, vgf, [a, b])
    np.testing.assert_array_equal(run.output, a + b)
    assert sorted(run.module.bindings) == [(0, 0), (0, 1), (0, 2)] and not run.module.constants
    assert run.create_seconds > 0


@pytest.mark.device
def test_conv2d_with_constants_and_session_memory(ctx: Any, api: GraphApi, tensor_api: TensorApi, tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    weights = rng.standard_normal((20, 3, 3, 2)).astype(np.float32)
    bias = rng.standard_normal(20).astype(np.float32)
    x = rng.standard_normal(DIMS).astype(np.float32)
    mlir = CONV_MLIR.replace("{weights}", weights.astype("<f4").tobytes().hex().upper()).replace(
        "{bias}", bias.astype("<f4").tobytes().hex().upper())
    vgf = convert(mlir, tmp_path, "conv")
    _, _, _, constants, _ = graph_parts(vgf)
    assert sorted(c.description.dims for c in constants) == [(20,), (20, 3, 3, 2)]  # both kept as constants
    run = run_graph(ctx, api, tensor_api, vgf, [x])
    assert set(run.module.constants) == {c.id for c in constants}

    padded = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    want = np.empty((1, 4, 4, 20))
    for i in range(4):
        for j in range(4):
            want[0, i, j] = np.einsum("hwc,ohwc->o", padded[0, i:i + 3, j:j + 3], weights.astype(np.float64)) + bias
    want = np.clip(want, *CLAMP)
    assert np.abs(run.output - want).max() <= 2e-6
    assert (np.abs(want) < 1.0).any() and (want == CLAMP[1]).any()  # both clamped and unclamped values checked
    # Two operations: the layer asks for transient memory for the intermediate (1280 bytes on lavapipe) and
    # computes wrong results without it. Every object of every bind point with a size got an allocation.
    assert sum(r.requirements.size for r in run.session_requirements) > 0
    assert run.session_allocations == sum(1 for r in run.session_requirements if r.requirements.size)


@pytest.mark.device
def test_mismatches_are_refused_before_any_vulkan_call(
    ctx: Any, api: GraphApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(5)
    mlir = CONV_MLIR.replace("{weights}", rng.standard_normal(360).astype("<f4").tobytes().hex()).replace(
        "{bias}", rng.standard_normal(20).astype("<f4").tobytes().hex())
    spirv, entry, resources, constants, _ = graph_parts(convert(mlir, tmp_path, "conv"))
    module = scan_graph_module(spirv)
    layout = GraphLayout.for_module(ctx, module)

    def never(*args: Any) -> Any:
        raise AssertionError("a Vulkan call was made")

    monkeypatch.setattr(api, "vkCreateDataGraphPipelinesARM", never)
    monkeypatch.setattr(vk, "vkCreateShaderModule", never)
    try:
        # The constant's id is replaced by an id the module does not have.
        bad_id = [GraphConstant(c.id + 40, c.description, c.data) if c is constants[1] else c for c in constants]
        with pytest.raises(DeviceError, match=rf"constant id {constants[1].id + 40} is not a GraphConstantID of the module") as err:
            DataGraphPipeline.create(api, spirv, entry, layout, resources, bad_id)
        assert f"graph constant id {constants[1].id}" in str(err.value)
        # The output's resource info is missing.
        out = resources[-1]
        with pytest.raises(DeviceError, match=rf"set {out.set} binding {out.binding} .* has no resource info"):
            DataGraphPipeline.create(api, spirv, entry, layout, resources[:-1], constants)
        # A constant missing altogether, given as a tuple.
        with pytest.raises(DeviceError, match="has no data"):
            DataGraphPipeline.create(api, spirv, entry, layout, resources, [(c.id, c.description, c.data) for c in constants[:1]])
    finally:
        layout.destroy()


@pytest.mark.device
def test_dispatch_without_descriptor_sets_is_refused(ctx: Any, api: GraphApi, tmp_path: Path) -> None:
    spirv, entry, resources, constants, _ = graph_parts(convert(ADD_MLIR, tmp_path, "add"))
    layout = GraphLayout.for_module(ctx, scan_graph_module(spirv))
    pipeline = DataGraphPipeline.create(api, spirv, entry, layout, resources, constants)
    try:
        assert pipeline.session is not None and pipeline.session.requirements == []  # one op: no transient memory
        extra = pipeline.new_session()  # a second session of the same pipeline
        assert extra.handle is not None and extra.memory_size == 0
        extra.destroy()
        with pytest.raises(DeviceError, match=r"descriptor set\(s\) 0 used by graph .* are not bound"):
            pipeline.record_dispatch(None, [])  # refused before anything is recorded
        with pytest.raises(DeviceError, match="set 0 binding 2 has no tensor"):
            layout.descriptor_sets({})
    finally:
        pipeline.destroy()
        pipeline.destroy()  # idempotent
        layout.destroy()
