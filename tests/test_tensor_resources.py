"""vkcore.resources.tensor_resources: scenario tensors as device resources, on real Vulkan (lavapipe + ARM's
emulation layer in CI), checked against ARM's reference ``scenario-runner`` byte for byte.

The layer rewrites every tensor shader at vkCreateShaderModule (100-200 ms on a CPU): one shader in
all. The reference runs once per module, on one scenario holding every case (it accepts a scenario
with no commands: it loads every ``src`` and writes every ``dst``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

from tests.needs import missing
import vulkan as vk

from tests.reference import reference_runner, run_reference
from tests.vkharness import Submitter, compile_tensor_glsl, vulkan_context
from vkcore.device import arm_ffi, memory
from vkcore.resources import tensors
from vkcore.scenario import npyio
from vkcore.errors import DeviceError, ScenarioError
from vkcore.resources.formats import tensor_formats
from vkcore.resources.base import DeviceResource
from vkcore.resources.buffers import free_staging, staging_buffer
from vkcore.scenario.model import Tensor as TensorSpec
from vkcore.device.sync import BarrierBatch, memory_barrier
from vkcore.resources.tensor_resources import TensorResource, accepted_dtypes

pytestmark = pytest.mark.device

# C = A + B over rank-2 float tensors.
ADD_F32 = """
#version 460
#extension GL_ARM_tensors : require
layout(local_size_x = 8, local_size_y = 8) in;
layout(set = 0, binding = 0) uniform tensorARM<float, 2> A;
layout(set = 0, binding = 1) uniform tensorARM<float, 2> B;
layout(set = 0, binding = 2) uniform tensorARM<float, 2> C;
void main() {
    uint i = gl_GlobalInvocationID.y, j = gl_GlobalInvocationID.x;
    if (i >= tensorSizeARM(C, 0) || j >= tensorSizeARM(C, 1)) return;
    float a, b;
    tensorReadARM(A, uint[](i, j), a);
    tensorReadARM(B, uint[](i, j), b);
    tensorWriteARM(C, uint[](i, j), a + b);
}
"""

NUMPY_DTYPES = {  # the specification's table: format -> numpy dtype
    "VK_FORMAT_R8_BOOL_ARM": np.bool_, "VK_FORMAT_R8_UINT": np.uint8, "VK_FORMAT_R8_SINT": np.int8,
    "VK_FORMAT_R16_UINT": np.uint16, "VK_FORMAT_R16_SINT": np.int16, "VK_FORMAT_R32_UINT": np.uint32,
    "VK_FORMAT_R32_SINT": np.int32, "VK_FORMAT_R64_SINT": np.int64, "VK_FORMAT_R16_SFLOAT": np.float16,
    "VK_FORMAT_R32_SFLOAT": np.float32,
    # no numpy type: the payload bytes (any dtype of the element's size loads)
    "VK_FORMAT_R16_SFLOAT_FPENCODING_BFLOAT16_ARM": np.uint16, "VK_FORMAT_R8_SFLOAT_FPENCODING_FLOAT8E4M3_ARM": np.uint8,
    "VK_FORMAT_R8_SFLOAT_FPENCODING_FLOAT8E5M2_ARM": np.uint8,
}
# The .npy dtype the reference writes where it is not the numpy type's (measured).
WRITTEN_DESCR = {"VK_FORMAT_R8_BOOL_ARM": "|b1", "VK_FORMAT_R16_SFLOAT_FPENCODING_BFLOAT16_ARM": "<V2",
                 "VK_FORMAT_R8_SFLOAT_FPENCODING_FLOAT8E4M3_ARM": "<V1"}
DIMS_CYCLE = [(2, 3, 4), (3, 5), (7,), (1, 2, 3, 4), (2, 1, 3, 1, 2)]


def random_array(fmt: str, dims: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    dtype = np.dtype(NUMPY_DTYPES[fmt])
    if dtype == np.bool_:
        return rng.integers(0, 2, dims).astype(np.bool_)
    if dtype.kind == "f":
        return (rng.standard_normal(dims) * 100).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, dims, dtype=dtype, endpoint=True)


def spec(uid: str, fmt: str, dims: tuple[int, ...], index: int = 0, **kw: Any) -> TensorSpec:
    return TensorSpec(uid=uid, index=index, dims=tuple(dims), format=fmt, **kw)


# ---------------------------------------------------------------------------------------------------
# Harness: context, one-time submissions, allocations, one compute pipeline


@pytest.fixture(scope="module")
def ctx() -> Iterator[Any]:
    yield from vulkan_context("tensor-capable", need_tensors=True)


@pytest.fixture(scope="module")
def api(ctx: Any) -> tensors.TensorApi:
    return tensors.TensorApi.load(ctx)


@pytest.fixture(scope="module")
def submit(ctx: Any) -> Iterator[Submitter]:
    s = Submitter(ctx)
    yield s
    s.destroy()


class Rig:
    """Creates resources, binds each to its own allocation (or a shared one), destroys all at the end."""

    def __init__(self, ctx: Any, api: tensors.TensorApi) -> None:
        self.ctx, self.api = ctx, api
        self.resources: list[TensorResource] = []
        self.allocations: list[memory.Allocation] = []

    def create(self, s: TensorSpec, strides: tuple[int, ...] | None = None, *, bind: bool = True,
               extra_usage: int = 0) -> TensorResource:
        r = TensorResource.create(self.ctx, self.api, s, strides, extra_usage=extra_usage)
        self.resources.append(r)
        if bind:
            req = r.requirements
            alloc = memory.allocate(self.ctx, req, req.size, host_access=r.host_access, what=r.uid)
            self.allocations.append(alloc)
            r.bind(alloc, 0)
        return r

    def group(self, members: list[TensorResource]) -> memory.Allocation:
        """Bind ``members`` one after the other (aligned) on one allocation, as a memory group would."""
        offsets, end, bits = [], 0, ~0
        for r in members:
            req = r.requirements
            end = -(-end // req.alignment) * req.alignment
            offsets.append(end)
            end += req.size
            bits &= req.memoryTypeBits
        alloc = memory.allocate(self.ctx, vk.VkMemoryRequirements(size=end, alignment=1, memoryTypeBits=bits & 0xFFFFFFFF),
                                end, host_access=True, what="group")
        self.allocations.append(alloc)
        for r, off in zip(members, offsets):
            r.bind(alloc, off)
        return alloc

    def snapshots(self, submit: Submitter, members: list[TensorResource]) -> list[bytes]:
        """Every member's snapshot, recorded into one staging buffer in one submission."""
        offsets, total = [], 0
        for r in members:
            offsets.append(total)
            total += -(-r.snapshot_size // 16) * 16
        handle, alloc = staging_buffer(self.ctx, total)
        try:
            submit(lambda cb: [r.record_snapshot(cb, handle, off) for r, off in zip(members, offsets)])
            assert alloc.view is not None
            return [bytes(alloc.view[off : off + r.snapshot_size]) for r, off in zip(members, offsets)]
        finally:
            free_staging(self.ctx, handle, alloc)

    def destroy(self) -> None:
        for r in self.resources:
            r.destroy()
        for a in self.allocations:
            memory.free(self.ctx, a)


@pytest.fixture
def rig(ctx: Any, api: tensors.TensorApi) -> Iterator[Rig]:
    r = Rig(ctx, api)
    yield r
    r.destroy()


class Pipeline:
    """One compute pipeline over ``bindings`` tensor descriptors in set 0."""

    def __init__(self, ctx: Any, spirv: bytes, bindings: int) -> None:
        self.ctx = ctx
        d = ctx.device
        t = arm_ffi.DESCRIPTOR_TYPE_TENSOR_ARM
        self.set_layout = vk.vkCreateDescriptorSetLayout(d, vk.VkDescriptorSetLayoutCreateInfo(pBindings=[
            vk.VkDescriptorSetLayoutBinding(binding=i, descriptorType=t, descriptorCount=1, stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT)
            for i in range(bindings)]), None)
        self.layout = vk.vkCreatePipelineLayout(d, vk.VkPipelineLayoutCreateInfo(pSetLayouts=[self.set_layout]), None)
        self.module = vk.vkCreateShaderModule(d, vk.VkShaderModuleCreateInfo(codeSize=len(spirv), pCode=spirv), None)
        stage = vk.VkPipelineShaderStageCreateInfo(stage=vk.VK_SHADER_STAGE_COMPUTE_BIT, module=self.module, pName="main")
        self.pipeline = vk.vkCreateComputePipelines(d, vk.VK_NULL_HANDLE, 1, [vk.VkComputePipelineCreateInfo(stage=stage, layout=self.layout)], None)[0]
        self.pool = vk.vkCreateDescriptorPool(d, vk.VkDescriptorPoolCreateInfo(
            maxSets=2, pPoolSizes=[vk.VkDescriptorPoolSize(type=t, descriptorCount=2 * bindings)]), None)

    def descriptor_set(self, resources: list[DeviceResource]) -> Any:
        ds = vk.vkAllocateDescriptorSets(self.ctx.device, vk.VkDescriptorSetAllocateInfo(
            descriptorPool=self.pool, pSetLayouts=[self.set_layout]))[0]
        writes = [r.descriptor(ds, i, 0, r.descriptor_type("VK_DESCRIPTOR_TYPE_AUTO")) for i, r in enumerate(resources)]
        vk.vkUpdateDescriptorSets(self.ctx.device, len(writes), [w.write for w in writes], 0, None)
        del writes
        return ds

    def destroy(self) -> None:
        d = self.ctx.device
        vk.vkDestroyDescriptorPool(d, self.pool, None)
        vk.vkDestroyPipeline(d, self.pipeline, None)
        vk.vkDestroyShaderModule(d, self.module, None)
        vk.vkDestroyPipelineLayout(d, self.layout, None)
        vk.vkDestroyDescriptorSetLayout(d, self.set_layout, None)


# ---------------------------------------------------------------------------------------------------
# The cases shared with the reference runner


@dataclass(frozen=True)
class Case:
    uid: str
    format: str
    dims: tuple[int, ...]
    data: np.ndarray | None  # None: no src
    tiling: str = "LINEAR"

    @property
    def expected(self) -> bytes:
        """The packed element bytes the tensor must hold after loading."""
        if self.data is None:
            return bytes(int(np.prod(self.dims)) * np.dtype(NUMPY_DTYPES[self.format]).itemsize)
        return np.ascontiguousarray(self.data).tobytes()


def make_cases() -> list[Case]:
    rng = np.random.default_rng(2024)
    cases = [Case(f"t{i}", fmt, DIMS_CYCLE[i % len(DIMS_CYCLE)], random_array(fmt, DIMS_CYCLE[i % len(DIMS_CYCLE)], rng))
             for i, fmt in enumerate(tensor_formats())]
    cases += [
        Case("bool_from_u8", "VK_FORMAT_R8_BOOL_ARM", (4, 6), rng.integers(0, 2, (4, 6)).astype(np.uint8)),
        Case("optimal_f16", "VK_FORMAT_R16_SFLOAT", (2, 3, 5), random_array("VK_FORMAT_R16_SFLOAT", (2, 3, 5), rng), "OPTIMAL"),
        Case("optimal_i64", "VK_FORMAT_R64_SINT", (3, 4), random_array("VK_FORMAT_R64_SINT", (3, 4), rng), "OPTIMAL"),
        Case("zeros", "VK_FORMAT_R32_SINT", (3, 3), None),
    ]
    return cases


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Case]]:
    """The cases' ``src`` files and a scenario with all of them (src + dst, no commands)."""
    folder = tmp_path_factory.mktemp("tensor-cases")
    resources = []
    all_cases = make_cases()
    for c in all_cases:
        body: dict[str, Any] = {"uid": c.uid, "dims": list(c.dims), "format": c.format, "shader_access": "readwrite",
                                "dst": f"{c.uid}_out.npy", "tiling": c.tiling}
        if c.data is not None:
            np.save(folder / f"{c.uid}.npy", c.data)
            body["src"] = f"{c.uid}.npy"
        resources.append({"tensor": body})
    (folder / "scenario.json").write_text(json.dumps({"resources": resources, "commands": []}))
    return folder, all_cases


@pytest.fixture(scope="module")
def reference_outputs(cases: tuple[Path, list[Case]]) -> Path:
    if reference_runner() is None:
        missing("ai-ml-sdk-scenario-runner is not installed")
    folder, _ = cases
    out = folder / "reference"
    proc = run_reference(folder / "scenario.json", out, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def load_case(rig: Rig, submit: Submitter, folder: Path, c: Case, index: int = 0) -> TensorResource:
    r = rig.create(spec(c.uid, c.format, c.dims, index, tiling=c.tiling))
    r.load_initial(folder / f"{c.uid}.npy" if c.data is not None else None, submit)
    return r


# ---------------------------------------------------------------------------------------------------
# Tests


def reference_rule_header(descr: str, dims: tuple[int, ...]) -> bytes:
    """The header the reference writes, as measured: npyio's text, then 1 to 16 spaces (never 0) and a newline
    so that the header ends on a multiple of 16 bytes."""
    shape = f"({dims[0]},)" if len(dims) == 1 else "(" + ", ".join(map(str, dims)) + ")"
    text = "{'descr': '" + descr + "','fortran_order': False,'shape': " + shape + "}"
    pad = 16 - (10 + len(text) + 1) % 16
    body = (text + " " * pad + "\n").encode("latin1")
    return b"\x93NUMPY\x01\x00" + len(body).to_bytes(2, "little") + body


@pytest.mark.reference
def test_every_format_loads_snapshots_and_writes_as_the_reference(
    rig: Rig, submit: Submitter, cases: tuple[Path, list[Case]], reference_outputs: Path, tmp_path: Path
) -> None:
    folder, all_cases = cases
    resources = [load_case(rig, submit, folder, c, i) for i, c in enumerate(all_cases)]
    assert {c.format for c in all_cases} == set(tensor_formats())
    for r, c, snap in zip(resources, all_cases, rig.snapshots(submit, resources)):
        assert r.snapshot_size == len(c.expected)
        assert snap == c.expected, c.uid
        ours = tmp_path / f"{c.uid}_out.npy"
        r.write_dst(ours, submit)
        theirs = (reference_outputs / f"{c.uid}_out.npy").read_bytes()
        descr = WRITTEN_DESCR.get(c.format, np.dtype(NUMPY_DTYPES[c.format]).str)
        assert theirs == reference_rule_header(descr, c.dims) + c.expected, c.uid
        back = np.load(ours)
        assert back.shape == c.dims and back.dtype == np.dtype(descr)
        assert back.tobytes() == c.expected
        assert ours.read_bytes() == theirs, c.uid  # byte-identical to the reference runner
    assert (reference_outputs / "t3_out.npy").read_bytes()[:80] == (
        b"\x93NUMPY\x01\x00F\x00{'descr': '<u2','fortran_order': False,'shape': (1, 2, 3, 4)}        \n")
    assert (reference_outputs / "t2_out.npy").read_bytes()[:80] == (
        b"\x93NUMPY\x01\x00F\x00{'descr': '|i1','fortran_order': False,'shape': (7,)}" + b" " * 16 + b"\n")


def test_meta_usage_and_paths(rig: Rig, submit: Submitter, cases: tuple[Path, list[Case]]) -> None:
    folder, all_cases = cases
    by_uid = {c.uid: c for c in all_cases}
    linear = load_case(rig, submit, folder, by_uid["t9"])  # R32_SFLOAT (2, 3, 4)
    optimal = load_case(rig, submit, folder, by_uid["optimal_f16"])
    assert linear.kind == "tensor" and linear.uid == "t9"
    assert linear.meta() == {"kind": "tensor", "format": "VK_FORMAT_R32_SFLOAT", "dims": [2, 1, 3, 1, 2],
                             "dtype": "<f4", "size": 48, "tiling": "LINEAR"}
    assert optimal.meta()["tiling"] == "OPTIMAL" and optimal.meta()["size"] == 2 * 3 * 5 * 2
    assert linear.host_access and linear.mapped and linear.packed
    assert not optimal.host_access and not optimal.packed
    assert linear.tensor.description.usage == tensors.DEFAULT_USAGE
    assert linear.requirements.size >= linear.snapshot_size
    rig.snapshots(submit, [linear, optimal])
    assert linear._path == "direct" and optimal._path == "copy"
    aliased = rig.create(spec("al", "VK_FORMAT_R8_UINT", (4, 4)), bind=False,
                         extra_usage=arm_ffi.TENSOR_USAGE_IMAGE_ALIASING_BIT_ARM)
    assert aliased.tensor.description.usage & arm_ffi.TENSOR_USAGE_IMAGE_ALIASING_BIT_ARM
    assert linear.descriptor_type("VK_DESCRIPTOR_TYPE_AUTO") == arm_ffi.DESCRIPTOR_TYPE_TENSOR_ARM
    assert accepted_dtypes("VK_FORMAT_R8_BOOL_ARM") == ("|b1", "|u1")


def test_restore_round_trip_direct_and_copy_paths(rig: Rig, submit: Submitter, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(5)
    linear = rig.create(spec("lin", "VK_FORMAT_R16_SINT", (3, 7)))
    optimal = rig.create(spec("opt", "VK_FORMAT_R32_UINT", (2, 2, 5), tiling="OPTIMAL"))
    strided = rig.create(spec("str", "VK_FORMAT_R8_SINT", (5, 6)), strides=(8, 1))
    # a packed LINEAR tensor whose memory takes no aliasing buffer falls back to the copy tensor
    unaliased = rig.create(spec("una", "VK_FORMAT_R32_SFLOAT", (4, 3)))
    real = TensorResource._bind_alias_buffer
    monkeypatch.setattr(TensorResource, "_bind_alias_buffer",
                        lambda self, alloc, off: None if self is unaliased and alloc is self.tensor.allocation else real(self, alloc, off))
    members = [linear, optimal, strided, unaliased]
    strided.tensor.host_view()[:] = b"\x55" * strided.tensor.description.span  # padding must survive
    payloads = [rng.integers(0, 256, r.snapshot_size, dtype=np.uint8).tobytes() for r in members]
    offsets = [0, 256, 512, 768]
    handle, alloc = staging_buffer(rig.ctx, 1024)
    try:
        assert alloc.view is not None
        for data, off in zip(payloads, offsets):
            alloc.view[off : off + len(data)] = data
        submit(lambda cb: [r.record_restore(cb, handle, off) for r, off in zip(members, offsets)])
    finally:
        free_staging(rig.ctx, handle, alloc)
    assert [r._path for r in members] == ["direct", "copy", "copy", "copy"]
    assert rig.snapshots(submit, members) == payloads
    assert bytes(linear.tensor.host_view()) == payloads[0]
    assert bytes(unaliased.tensor.host_view()) == payloads[3]
    raw = np.frombuffer(strided.tensor.host_view(), np.uint8)
    for i in range(5):
        assert raw[i * 8 : i * 8 + 6].tobytes() == payloads[2][i * 6 : i * 6 + 6]
        if i < 4:
            assert raw[i * 8 + 6 : i * 8 + 8].tobytes() == b"\x55\x55"


def test_strided_and_optimal_load_and_write(rig: Rig, submit: Submitter, tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    data = random_array("VK_FORMAT_R16_SFLOAT", (3, 4, 5), rng)
    np.save(tmp_path / "in.npy", data)
    strided = rig.create(spec("s", "VK_FORMAT_R16_SFLOAT", (3, 4, 5)), strides=(64, 12, 2))
    optimal = rig.create(spec("o", "VK_FORMAT_R16_SFLOAT", (3, 4, 5), tiling="OPTIMAL"))
    before = submit.count
    strided.load_initial(tmp_path / "in.npy", submit)  # in place, through the mapping
    assert submit.count == before
    np.testing.assert_array_equal(strided.tensor.array(), data)
    optimal.load_initial(tmp_path / "in.npy", submit)  # through staging and a tensor copy
    assert submit.count == before + 1
    assert rig.snapshots(submit, [strided, optimal]) == [data.tobytes()] * 2
    expected = npyio.reference_header("<f2", (3, 4, 5)) + data.tobytes()
    for r in (strided, optimal):
        r.write_dst(tmp_path / f"{r.uid}.npy", submit)
        assert (tmp_path / f"{r.uid}.npy").read_bytes() == expected
    optimal.load_initial(None, submit)  # no src: zeros
    assert rig.snapshots(submit, [optimal]) == [bytes(optimal.snapshot_size)]


def test_no_src_zeroes_alone_and_keeps_memory_group_content(rig: Rig, submit: Submitter, tmp_path: Path) -> None:
    data = np.arange(12, dtype=np.int32).reshape(3, 4)
    np.save(tmp_path / "in.npy", data)
    first = rig.create(spec("g1", "VK_FORMAT_R32_SINT", (3, 4), memory_group="g"), bind=False)
    second = rig.create(spec("g2", "VK_FORMAT_R32_SINT", (3, 4), memory_group="g"), bind=False)
    alloc = memory.allocate(rig.ctx, first.requirements, first.requirements.size, host_access=True, what="g")
    rig.allocations.append(alloc)
    first.bind(alloc, 0)
    second.bind(alloc, 0)
    first.load_initial(tmp_path / "in.npy", submit)
    second.load_initial(None, submit)  # as the reference: the group's memory keeps g1's data
    assert rig.snapshots(submit, [second]) == [data.tobytes()]
    alone = rig.create(spec("alone", "VK_FORMAT_R32_SINT", (3, 4)))
    alone.tensor.host_view()[:] = b"\xff" * alone.snapshot_size
    alone.load_initial(None, submit)
    assert bytes(alone.tensor.host_view()) == bytes(alone.snapshot_size)


def test_glsl_add_through_descriptors_and_tensor_barrier(rig: Rig, submit: Submitter, tmp_path: Path) -> None:
    dims = (9, 13)
    rng = np.random.default_rng(3)
    a_data, b_data = (rng.standard_normal(dims).astype(np.float32) for _ in range(2))
    np.save(tmp_path / "a.npy", a_data)
    np.save(tmp_path / "b.npy", b_data)
    a = rig.create(spec("A", "VK_FORMAT_R32_SFLOAT", dims, 0))
    b = rig.create(spec("B", "VK_FORMAT_R32_SFLOAT", dims, 1), bind=False)
    c = rig.create(spec("C", "VK_FORMAT_R32_SFLOAT", dims, 2, tiling="OPTIMAL"), bind=False)
    rig.group([b, c])  # B at 0, C at the next aligned offset of the same allocation
    assert c.tensor.offset > 0
    for r, src in ((a, "a.npy"), (b, "b.npy"), (c, None)):
        r.load_initial(tmp_path / src if src else None, submit)
    pipe = Pipeline(rig.ctx, compile_tensor_glsl(ADD_F32), 3)
    try:
        ds = pipe.descriptor_set([a, b, c])

        def record(cb: Any) -> None:
            vk.vkCmdBindPipeline(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipe.pipeline)
            vk.vkCmdBindDescriptorSets(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipe.layout, 0, 1, [ds], 0, None)
            vk.vkCmdDispatch(cb, 2, 2, 1)
            # a scenario tensor_barrier, as the executor records it
            chained = c.tensor_barrier(vk.VK_PIPELINE_STAGE_2_COMPUTE_SHADER_BIT, vk.VK_ACCESS_2_SHADER_WRITE_BIT,
                                       vk.VK_PIPELINE_STAGE_2_COMPUTE_SHADER_BIT, vk.VK_ACCESS_2_SHADER_READ_BIT)
            batch = BarrierBatch(memory=[memory_barrier(vk.VK_PIPELINE_STAGE_2_COMPUTE_SHADER_BIT, vk.VK_ACCESS_2_SHADER_WRITE_BIT,
                                                        vk.VK_PIPELINE_STAGE_2_COMPUTE_SHADER_BIT, vk.VK_ACCESS_2_SHADER_READ_BIT)],
                                 extra_next=chained.value, keepalive=[chained, *chained.keep])
            batch.record(cb)

        submit(record)
    finally:
        pipe.destroy()
    want = a_data + b_data
    snap_a, snap_b, snap_c = rig.snapshots(submit, [a, b, c])
    assert snap_c == want.tobytes()
    assert (snap_a, snap_b) == (a_data.tobytes(), b_data.tobytes())
    c.write_dst(tmp_path / "c.npy", submit)
    np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), want)


def test_bad_inputs_are_scenario_errors(rig: Rig, submit: Submitter, tmp_path: Path) -> None:
    f32 = rig.create(spec("w", "VK_FORMAT_R32_SFLOAT", (2, 3), 4))
    flag = rig.create(spec("flag", "VK_FORMAT_R8_BOOL_ARM", (2, 3), 5))
    f32.load_initial(None, submit)

    def refused(r: TensorResource, array: np.ndarray, name: str) -> str:
        path = tmp_path / name
        np.save(path, array)
        with pytest.raises(ScenarioError) as info:
            r.load_initial(path, submit)
        assert info.value.exit_code == 2
        return str(info.value)

    place = "resources[4].tensor.src: tensor 'w': "
    assert refused(f32, np.zeros((2, 3)), "f64.npy") == (
        f"{place}{tmp_path / 'f64.npy'}: dtype <f8 is not <f4 (VK_FORMAT_R32_SFLOAT)")
    assert refused(f32, np.zeros((3, 2), np.float32), "t.npy") == (
        f"{place}{tmp_path / 't.npy'}: shape [3, 2] is not the tensor's dims [2, 3]")
    assert refused(f32, np.zeros(6, np.int32), "both.npy") == (
        f"{place}{tmp_path / 'both.npy'}: dtype <i4 is not <f4 (VK_FORMAT_R32_SFLOAT); shape [6] is not the tensor's dims [2, 3]")
    assert refused(f32, np.asfortranarray(np.zeros((2, 3), np.float32)), "f.npy") == (
        f"{place}{tmp_path / 'f.npy'}: the array is in Fortran order; only C order is read (as by the reference runner)")
    assert refused(flag, np.zeros((2, 3), np.int8), "i8.npy") == (
        f"resources[5].tensor.src: tensor 'flag': {tmp_path / 'i8.npy'}: dtype |i1 is not |b1 or |u1 (VK_FORMAT_R8_BOOL_ARM)")
    with pytest.raises(ScenarioError, match=r"tensor 'w': input file .*missing\.npy does not exist"):
        f32.load_initial(tmp_path / "missing.npy", submit)
    (tmp_path / "junk.npy").write_bytes(b"not numpy")
    with pytest.raises(ScenarioError, match=r"tensor 'w': cannot read .*junk\.npy: not a \.npy file \(bad magic\)"):
        f32.load_initial(tmp_path / "junk.npy", submit)
    assert bytes(f32.tensor.host_view()) == bytes(24)  # nothing was copied
    # bool accepts uint8 (bytes copied as they are) and big-endian data is refused
    np.save(tmp_path / "u8.npy", np.array([[0, 1, 2], [1, 0, 1]], np.uint8))
    flag.load_initial(tmp_path / "u8.npy", submit)
    assert bytes(flag.tensor.host_view()) == b"\x00\x01\x02\x01\x00\x01"
    assert "dtype >f4 is not <f4" in refused(f32, np.zeros((2, 3), ">f4"), "be.npy")
    with pytest.raises(ScenarioError, match="tensor 'w' cannot be bound as VK_DESCRIPTOR_TYPE_STORAGE_IMAGE"):
        f32.descriptor_type("VK_DESCRIPTOR_TYPE_STORAGE_IMAGE")
    with pytest.raises(ScenarioError, match=r"resources\[0\]\.tensor\.format: tensor 'x': VK_FORMAT_R8G8B8A8_UNORM is not a tensor format"):
        TensorResource.create(rig.ctx, rig.api, spec("x", "VK_FORMAT_R8G8B8A8_UNORM", (2,)))
    with pytest.raises(DeviceError, match=r"tensor 'y': invalid tensor: the innermost stride is 8"):
        TensorResource.create(rig.ctx, rig.api, spec("y", "VK_FORMAT_R32_SFLOAT", (2, 3)), strides=(24, 8))
