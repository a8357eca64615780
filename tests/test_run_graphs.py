"""``dispatch_graph`` end to end: VGF files from ``tests/tosa/*.mlir`` (ARM's ``model-converter``, at test
time) run over ARM's emulation layer, checked against numpy and, where installed, byte for byte against the
reference runner.

Two levels:

- :class:`Harness` drives :class:`vkcore.graphs.dispatch.PreparedGraph` directly (a resource set whose
  graph-bound tensors have DATA_GRAPH usage, a pipeline factory, one submission per run);
- ``vkcap run`` / ``record`` / ``replay`` / ``bisect`` on scenarios through the session.

Models: add; conv2d (3x3, pad 1, 20 channels) with bias and clamp [0, 6]; max-pool 2x2; a GRAPH -> COMPUTE ->
GRAPH model with the custom shader as GLSL and as SPIR-V; and, written here, a custom shader that reads
push and specialization constants, and one with a placeholder shader node (no code) to substitute.
"""
from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pytest
import vulkan as vk

from capture.trace import Trace
from tests.builders import ScenarioBuilder, vkcap
from tests.reference import reference_runner, run_reference
from tests.vkharness import Submitter, convert_model, vulkan_context
from vkcore.errors import DeviceError, ScenarioError
from vkcore.graphs.dispatch import DATA_GRAPH_USAGE, PreparedGraph, SegmentWrites, graph_bound_tensors
from vkcore.scenario.npyio import read_header
from vkcore.shaders.pipelines import PipelineCache, PipelineFactory
from vkcore.exec.resource_set import ResourceSet
from vkcore.exec.tensor_factory import create_tensor
from vkcore.resources.buffers import free_staging, staging_buffer
from replay.replayer import rebuild_scenario
from vkcore.scenario.model import DispatchGraph, Shader, ShaderSubstitution, Tensor
from vkcore.scenario.load import load_scenario
from vkcore.shaders.compile import load_shader
from vkcore.device.sync import FULL_BARRIER, BarrierBatch, memory_barrier

pytestmark = pytest.mark.device

TOSA = Path(__file__).parent / "tosa"
F32 = "VK_FORMAT_R32_SFLOAT"
DIMS = [1, 4, 4, 2]
POOLED = [1, 2, 2, 2]

# --- models written here (beside tests/tosa): a custom shader with push and specialization constants, and a
# placeholder shader node ----------------------------------------------------------------------------------

PUSH_SPEC_GLSL = """#version 450
#extension GL_ARM_tensors : require
// y = MUL * x + pc.bias over a [1, H, W, C] float tensor; one invocation per element.
layout(local_size_x = 1, local_size_y = 1, local_size_z = 1) in;
layout(constant_id = 0) const float MUL = 2.0;
layout(push_constant) uniform PC { float bias; } pc;
layout(set = 0, binding = 0) uniform tensorARM<float, 4> X;
layout(set = 0, binding = 1) uniform tensorARM<float, 4> Y;
void main() {
    uint h = gl_GlobalInvocationID.x, w = gl_GlobalInvocationID.y, c = gl_GlobalInvocationID.z;
    float x;
    tensorReadARM(X, uint[](0, h, w, c), x);
    tensorWriteARM(Y, uint[](0, h, w, c), MUL * x + pc.bias);
}
"""

NEGATE_GLSL = """#version 450
#extension GL_ARM_tensors : require
layout(local_size_x = 1, local_size_y = 1, local_size_z = 1) in;
layout(set = 0, binding = 0) uniform tensorARM<float, 4> X;
layout(set = 0, binding = 1) uniform tensorARM<float, 4> Y;
void main() {
    uint h = gl_GlobalInvocationID.x, w = gl_GlobalInvocationID.y, c = gl_GlobalInvocationID.z;
    float x;
    tensorReadARM(X, uint[](0, h, w, c), x);
    tensorWriteARM(Y, uint[](0, h, w, c), -x);
}
"""


def _custom_attrs(code: str | None, language: str | None, push_constants: str | None = None) -> dict[str, Any]:
    attrs: dict[str, Any] = {"entry_point": "main", "workgroup_sizes": [4, 4, 2]}
    if language is not None:
        attrs["shader_language"] = language
    if code is not None:
        attrs["shader_code"] = code
    if push_constants:
        attrs["push_constants"] = push_constants
    for kind, index, binding in (("input", 0, 0), ("output", 0, 1)):
        attrs.update({
            f"{kind}_{index}_binding": binding, f"{kind}_{index}_descriptorset": 0, f"{kind}_{index}_type": "Tensor",
            f"{kind}_{index}_vkdescriptortype": "VK_DESCRIPTOR_TYPE_TENSOR_ARM", f"{kind}_{index}_vkformat": F32,
        })
    return attrs


def _custom_model(attrs: dict[str, Any], operator: str) -> str:
    """add(input_0, input_1) -> custom shader -> max_pool2d 2x2: GRAPH, COMPUTE, GRAPH segments."""
    literal = json.dumps(json.dumps(attrs))
    return f"""module {{
  func.func @main(%arg0: tensor<1x4x4x2xf32> {{tf_saved_model.index_path = ["input_0"]}}, %arg1: tensor<1x4x4x2xf32> {{tf_saved_model.index_path = ["input_1"]}}) -> (tensor<1x2x2x2xf32> {{tf_saved_model.index_path = ["output_0"]}}) attributes {{tf.entry_function = {{inputs = "input_0,input_1", outputs = "output_0"}}, tf_saved_model.exported_names = ["serving_default"]}} {{
    %0 = tosa.add %arg0, %arg1 : (tensor<1x4x4x2xf32>, tensor<1x4x4x2xf32>) -> tensor<1x4x4x2xf32>
    %1 = tosa.custom %0 {{domain_name = "com.arm.VulkanCustomShader", implementation_attrs = {literal}, operator_name = "{operator}"}} : (tensor<1x4x4x2xf32>) -> tensor<1x4x4x2xf32>
    %2 = tosa.max_pool2d %1 {{kernel = array<i64: 2, 2>, pad = array<i64: 0, 0, 0, 0>, stride = array<i64: 2, 2>}} : (tensor<1x4x4x2xf32>) -> tensor<1x2x2x2xf32>
    return %2 : tensor<1x2x2x2xf32>
  }}
}}
"""


EXTRA_MODELS = {
    "push_spec": _custom_model(_custom_attrs(PUSH_SPEC_GLSL, "GLSL", "bias: 4"), "push_spec_op"),
    "placeholder": _custom_model(_custom_attrs(None, None), "placeholder_op"),
    # model-converter embeds GLSL as it is: the error shows when vkcap compiles it
    "broken_glsl": _custom_model(_custom_attrs(NEGATE_GLSL.replace("-x);", "-undefined_thing);"), "GLSL"), "broken_op"),
}
SHADER_MODULE = "graph_partition_1"  # the custom shader's module in every model above (segment compute_segment_0)


# --- fixtures ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def vgfs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every tests/tosa/*.mlir, and the models above, converted to VGF: {stem: path}."""
    out = tmp_path_factory.mktemp("graph-vgf")
    sources = {p.stem: p for p in sorted(TOSA.glob("*.mlir"))}
    for name, text in EXTRA_MODELS.items():
        sources[name] = out / f"{name}.mlir"
        sources[name].write_text(text)
    return {name: convert_model(mlir, out / f"{name}.vgf") for name, mlir in sources.items()}


@pytest.fixture(scope="module")
def ctx() -> Iterator[Any]:
    yield from vulkan_context("graph-capable", need_tensors=True, need_graphs=True)


# --- the harness: PreparedGraph without the session -------------------------------------------------------


def tensor_factories(data_graph: frozenset[str] | None) -> dict[type, Callable[..., Any]]:
    """The resource set's factories, with the tensors bound by a dispatch_graph (``data_graph``) created with
    DATA_GRAPH usage (what the session's resource set does once graphs are wired in); ``None``: every tensor
    created without it, whatever the resource set does."""
    from vkcore.resources.tensor_resources import TensorResource
    from vkcore.resources.tensors import TensorApi

    def tensor(ctx: Any, spec: Tensor, scenario: Any, created: dict[str, Any], needs: dict[int, str]) -> Any:
        if data_graph is not None and spec.uid not in data_graph:
            return create_tensor(ctx, spec, scenario, created, needs)
        extra = DATA_GRAPH_USAGE if data_graph is not None else 0
        return TensorResource.create(ctx, TensorApi.load(ctx), spec, None, extra_usage=extra)

    return {Tensor: tensor}


class Harness:
    """The scenario's resources, a pipeline factory and a command pool on ``ctx``: prepare the scenario's
    dispatch_graph commands, record them all (in order) into one command buffer, submit, write the outputs."""

    def __init__(self, ctx: Any, scenario_path: Path, *, data_graph_usage: bool = True) -> None:
        self.ctx = ctx
        self.scenario = load_scenario(scenario_path)
        self.resources = ResourceSet(ctx, self.scenario, tensor_factories(graph_bound_tensors(self.scenario) if data_graph_usage else None))
        self.cache = PipelineCache(ctx, None)
        self.factory = PipelineFactory(ctx, self.cache)
        self.submitter = Submitter(ctx)
        self.prepared: list[PreparedGraph] = []

    def raw(self, uid: str) -> bytes:
        path = self.scenario.src_path(self.scenario.by_uid[uid].src)  # type: ignore[union-attr]
        header = read_header(path)
        return path.read_bytes()[header.data_offset : header.data_offset + header.nbytes]

    def submit(self, record: Callable[[Any], None]) -> None:
        """One submission of ``record``, with full barriers around it (as the session's setup submissions)."""

        def fenced(cb: Any) -> None:
            BarrierBatch(memory=[memory_barrier(*FULL_BARRIER)]).record(cb)
            record(cb)
            BarrierBatch(memory=[memory_barrier(*FULL_BARRIER)]).record(cb)

        self.submitter(fenced)

    def prepare(self) -> list[PreparedGraph]:
        for cmd in self.scenario.commands:
            if isinstance(cmd, DispatchGraph):
                self.prepared.append(PreparedGraph.create(self.ctx, self.scenario, cmd, self.resources, self.factory, self.raw))
        return self.prepared

    def run(self, output: Path, *, after_segment: Callable[[Any, PreparedGraph, int], None] | None = None) -> list[PreparedGraph]:
        self.resources.load_initial(self.submit)
        prepared = self.prepare()

        def record(cb: Any) -> None:
            for p in prepared:
                hook = None if after_segment is None else (lambda cb, i, p=p: after_segment(cb, p, i))
                p.record(cb, after_segment=hook)

        self.submit(record)
        output.mkdir(parents=True, exist_ok=True)
        for resource, path in self.resources.outputs(output):
            resource.write_dst(path, self.submit)
        return prepared

    def close(self) -> None:
        vk.vkDeviceWaitIdle(self.ctx.device)
        for p in self.prepared:
            p.destroy()
        self.factory.destroy()
        self.cache.destroy()
        self.resources.destroy()
        self.submitter.destroy()


@pytest.fixture
def harness(ctx: Any) -> Iterator[Callable[..., Harness]]:
    made: list[Harness] = []

    def make(scenario: Path, **kw: Any) -> Harness:
        h = Harness(ctx, scenario, **kw)
        made.append(h)
        return h

    yield make
    for h in reversed(made):
        h.close()


# --- scenarios and numpy references ---------------------------------------------------------------------------


def tensor(b: ScenarioBuilder, uid: str, dims: list[int], data: np.ndarray | None = None, fmt: str = F32, **fields: Any) -> None:
    body: dict[str, Any] = {"uid": uid, "dims": dims, "format": fmt, "shader_access": "readwrite", **fields}
    if data is not None:
        body["src"] = b.npy(f"{uid}.npy", data)
    b.resources.append({"tensor": body})


def inputs(seed: int = 5) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal(DIMS).astype(np.float32), rng.standard_normal(DIMS).astype(np.float32)


def graph_scenario(
    b: ScenarioBuilder,
    vgf: Path,
    bindings: list[tuple[int, int, str]],
    *,
    graph: dict[str, Any] | None = None,
    command: dict[str, Any] | None = None,
    key: str = "dispatch_graph",
) -> Path:
    shutil.copy(vgf, b.root / vgf.name)
    b.resources.insert(0, {"graph": {"uid": "g", "src": vgf.name, **(graph or {})}})
    body = {"graph_ref": "g", "bindings": [{"set": s, "id": i, "resource_ref": r} for s, i, r in bindings], **(command or {})}
    b.commands.append({key: body})
    return b.save()


def two_input_scenario(b: ScenarioBuilder, vgf: Path, out_dims: list[int], out_binding: int, **kw: Any) -> tuple[Path, np.ndarray, np.ndarray]:
    a, bb = inputs()
    tensor(b, "A", DIMS, a, shader_access="readonly")
    tensor(b, "B", DIMS, bb, shader_access="readonly")
    tensor(b, "O", out_dims, dst="o.npy", shader_access="writeonly")
    return graph_scenario(b, vgf, [(0, 0, "A"), (0, 1, "B"), (0, out_binding, "O")], **kw), a, bb


def maxpool(x: np.ndarray) -> np.ndarray:
    n, h, w, c = x.shape
    return x.reshape(n, h // 2, 2, w // 2, 2, c).max(axis=(2, 4))


def mlir_constant(value: str) -> np.ndarray:
    text = (TOSA / "conv2d.mlir").read_text()
    m = re.search(rf'%{value} = "tosa.const"\(\) {{values = dense<"0x([0-9A-F]+)"> : tensor<([0-9x]+)xf32>}}', text)
    assert m, value
    return np.frombuffer(bytes.fromhex(m.group(1)), dtype="<f4").reshape([int(d) for d in m.group(2).split("x")])


def conv2d_reference(x: np.ndarray) -> np.ndarray:
    """conv2d 3x3, pad 1, stride 1, NHWC input, OHWI weights, plus bias, clamped to [0, 6] (float64)."""
    weights, bias = mlir_constant("weights").astype(np.float64), mlir_constant("bias").astype(np.float64)
    padded = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    out = np.zeros((1, 4, 4, weights.shape[0]))
    for h in range(4):
        for w in range(4):
            out[0, h, w] = np.einsum("khi,okhi->o", padded[0, h : h + 3, w : w + 3], weights) + bias
    return np.clip(out, 0.0, 6.0)


def same_as_reference(scenario: Path, ours: Path, tmp: Path, names: list[str]) -> None:
    """Byte-identical outputs to ARM's reference runner, where it is installed."""
    if reference_runner() is None:
        return
    ref = run_reference(scenario, tmp / "reference")
    assert ref.returncode == 0, ref.stdout[-2000:] + ref.stderr[-2000:]
    for name in names:
        assert (ours / name).read_bytes() == (tmp / "reference" / name).read_bytes(), name


# Each model: (scenario maker, expected output (a, b) -> array, tolerance or None for exact).
def _add(b: ScenarioBuilder, v: dict[str, Path]) -> tuple[Path, np.ndarray]:
    scenario, a, bb = two_input_scenario(b, v["add"], DIMS, 2)
    return scenario, a + bb


def _maxpool(b: ScenarioBuilder, v: dict[str, Path]) -> tuple[Path, np.ndarray]:
    a, _ = inputs()
    tensor(b, "A", DIMS, a, shader_access="readonly")
    tensor(b, "O", POOLED, dst="o.npy", shader_access="writeonly")
    return graph_scenario(b, v["maxpool"], [(0, 0, "A"), (0, 1, "O")]), maxpool(a)


def _conv2d(b: ScenarioBuilder, v: dict[str, Path]) -> tuple[Path, np.ndarray]:
    a, _ = inputs()
    a = (a * 2).astype(np.float32)  # enough spread that the clamp cuts at both ends
    tensor(b, "A", DIMS, a, shader_access="readonly")
    tensor(b, "O", [1, 4, 4, 20], dst="o.npy", shader_access="writeonly")
    return graph_scenario(b, v["conv2d"], [(0, 0, "A"), (0, 1, "O")]), conv2d_reference(a)


def _custom(name: str) -> Callable[[ScenarioBuilder, dict[str, Path]], tuple[Path, np.ndarray]]:
    def make(b: ScenarioBuilder, v: dict[str, Path]) -> tuple[Path, np.ndarray]:
        scenario, a, bb = two_input_scenario(b, v[name], POOLED, 4)
        return scenario, maxpool(np.float32(2) * (a + bb) + np.float32(1))

    return make


MODELS = {
    "add": (_add, None),
    "conv2d": (_conv2d, 2e-6),
    "maxpool": (_maxpool, None),
    "custom_glsl": (_custom("custom_glsl"), None),
    "custom_spirv": (_custom("custom_spirv"), None),
}


def check_output(path: Path, expected: np.ndarray, tolerance: float | None) -> None:
    out = np.load(path)
    assert out.dtype == np.float32 and out.shape == expected.shape
    if tolerance is None:
        np.testing.assert_array_equal(out, expected)
    else:
        np.testing.assert_allclose(out, expected, rtol=0, atol=tolerance)


# --- PreparedGraph through the harness -----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("model", sorted(MODELS))
def test_models(model: str, vgfs: dict[str, Path], harness: Callable[..., Harness], builder: ScenarioBuilder, tmp_path: Path) -> None:
    make, tolerance = MODELS[model]
    scenario, expected = make(builder, vgfs)
    harness(scenario).run(tmp_path / "out")
    check_output(tmp_path / "out" / "o.npy", expected, tolerance)
    if model == "conv2d":
        out = np.load(tmp_path / "out" / "o.npy")
        assert (out == 0).any() and (out == 6).any() and ((out > 0) & (out < 6)).any()  # both clamp ends and between
    same_as_reference(scenario, tmp_path / "out", tmp_path, ["o.npy"])


def test_segments_and_intermediates(vgfs: dict[str, Path], harness: Callable[..., Harness], builder: ScenarioBuilder, tmp_path: Path) -> None:
    scenario, _, _ = two_input_scenario(builder, vgfs["custom_glsl"], POOLED, 4)
    (prepared,) = harness(scenario).run(tmp_path / "out")
    assert prepared.segments == [
        SegmentWrites(0, "graph_segment_0", "graph_partition_0", ("g/intermediate_2",)),
        SegmentWrites(1, "compute_segment_0", "graph_partition_1", ("g/intermediate_3",)),
        SegmentWrites(2, "graph_segment_1", "graph_partition_2", ("O",)),
    ]
    assert sorted(prepared.intermediates) == ["g/intermediate_2", "g/intermediate_3"]
    assert prepared.bindings == {"A": "input_0", "B": "input_1", "O": "output_0"}
    assert prepared.resource("O") is prepared.resource("O") and prepared.resource("g/intermediate_2").dims == (1, 4, 4, 2)


def test_snapshot_after_each_segment(vgfs: dict[str, Path], harness: Callable[..., Harness], builder: ScenarioBuilder, tmp_path: Path) -> None:
    """``record(cb, after_segment=...)``: copies recorded after each segment see what it wrote, intermediates
    included (they are TensorResources, snapshotted like scenario tensors)."""
    scenario, a, bb = two_input_scenario(builder, vgfs["custom_spirv"], POOLED, 4)
    h = harness(scenario)
    nbytes = int(np.prod(DIMS)) * 4
    staging, alloc = staging_buffer(h.ctx, 3 * nbytes)
    seen: list[tuple[int, str]] = []
    try:
        def after(cb: Any, prepared: PreparedGraph, index: int) -> None:
            (name,) = prepared.segments[index].writes
            prepared.resource(name).record_snapshot(cb, staging, index * nbytes)
            seen.append((index, name))

        h.run(tmp_path / "out", after_segment=after)
        assert seen == [(0, "g/intermediate_2"), (1, "g/intermediate_3"), (2, "O")]
        view = np.frombuffer(bytes(alloc.view[: 3 * nbytes]), dtype=np.float32)
        np.testing.assert_array_equal(view[: a.size].reshape(DIMS), a + bb)
        np.testing.assert_array_equal(view[a.size : 2 * a.size].reshape(DIMS), np.float32(2) * (a + bb) + np.float32(1))
        np.testing.assert_array_equal(view[2 * a.size : 2 * a.size + 8].reshape(POOLED), np.load(tmp_path / "out" / "o.npy"))
    finally:
        free_staging(h.ctx, staging, alloc)


@pytest.mark.slow
def test_push_and_specialization_constants_by_module_name(vgfs: dict[str, Path], harness: Callable[..., Harness],
                                                           builder: ScenarioBuilder, tmp_path: Path) -> None:
    """The reference (0.11.0) applies push_constants and specialization_constants_map whose shader_target is
    the module name; the graph's push_constants_size sizes the push constant range."""
    builder.raw("bias", np.array([10.0], dtype=np.float32))
    scenario, a, bb = two_input_scenario(
        builder, vgfs["push_spec"], POOLED, 4,
        graph={"push_constants_size": 4, "specialization_constants_map": [
            {"shader_target": SHADER_MODULE, "specialization_constants": [{"id": 0, "value": 3.0}]}]},
        command={"push_constants": [{"push_data_ref": "bias", "shader_target": SHADER_MODULE}]},
    )
    harness(scenario).run(tmp_path / "out")
    expected = maxpool(np.float32(3) * (a + bb) + np.float32(10))
    np.testing.assert_allclose(np.load(tmp_path / "out" / "o.npy"), expected, rtol=1e-6, atol=0)
    same_as_reference(scenario, tmp_path / "out", tmp_path, ["o.npy"])


def test_placeholder_substituted_from_the_graph_resource(vgfs: dict[str, Path], harness: Callable[..., Harness],
                                                          builder: ScenarioBuilder, tmp_path: Path) -> None:
    # The specification puts shader_substitutions on the graph resource (the reference 0.11.0 reads them from
    # the dispatch_graph command only, and fails this scenario: no reference comparison here).
    builder.shader("negate", NEGATE_GLSL)
    scenario, a, bb = two_input_scenario(
        builder, vgfs["placeholder"], POOLED, 4, graph={"shader_substitutions": [{"shader_ref": "negate", "target": SHADER_MODULE}]})
    (prepared,) = harness(scenario).run(tmp_path / "out")
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "o.npy"), maxpool(-(a + bb)))
    assert prepared.segments[1].module == SHADER_MODULE


def test_substitution_replaces_a_module_with_code(vgfs: dict[str, Path], harness: Callable[..., Harness],
                                                  builder: ScenarioBuilder, tmp_path: Path) -> None:
    builder.shader("negate", NEGATE_GLSL)
    scenario, a, bb = two_input_scenario(
        builder, vgfs["custom_glsl"], POOLED, 4, graph={"shader_substitutions": [{"shader_ref": "negate", "target": SHADER_MODULE}]})
    harness(scenario).run(tmp_path / "out")
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "o.npy"), maxpool(-(a + bb)))


@dataclasses.dataclass(frozen=True)
class _DispatchGraphWithSubstitutions(DispatchGraph):
    """A dispatch_graph carrying shader_substitutions, as the reference reads them (until the scenario model has
    the field itself)."""

    shader_substitutions: tuple[ShaderSubstitution, ...] = ()


@pytest.mark.reference
def test_substitution_given_on_the_command_as_the_reference_reads_it(
        vgfs: dict[str, Path], harness: Callable[..., Harness], builder: ScenarioBuilder, tmp_path: Path) -> None:
    builder.shader("negate", NEGATE_GLSL)
    scenario, a, bb = two_input_scenario(builder, vgfs["placeholder"], POOLED, 4)
    substitution = ShaderSubstitution("negate", SHADER_MODULE)
    h = harness(scenario)
    h.resources.load_initial(h.submit)
    (command,) = h.scenario.commands
    if "shader_substitutions" in {f.name for f in dataclasses.fields(command)}:
        command = dataclasses.replace(command, shader_substitutions=(substitution,))
    else:
        command = _DispatchGraphWithSubstitutions(**{f.name: getattr(command, f.name) for f in dataclasses.fields(command)},
                                                  shader_substitutions=(substitution,))
    prepared = PreparedGraph.create(h.ctx, h.scenario, command, h.resources, h.factory, h.raw)
    h.prepared.append(prepared)
    h.submit(prepared.record)
    out = tmp_path / "out"
    out.mkdir()
    h.resources["O"].write_dst(out / "o.npy", h.submit)
    np.testing.assert_array_equal(np.load(out / "o.npy"), maxpool(-(a + bb)))
    if reference_runner() is not None:  # the same scenario, with the substitution where the reference reads it
        doc = json.loads(scenario.read_text())
        doc["commands"][0]["dispatch_graph"]["shader_substitutions"] = [{"shader_ref": "negate", "target": SHADER_MODULE}]
        ref_scenario = scenario.with_name("reference.json")
        ref_scenario.write_text(json.dumps(doc))
        ref = run_reference(ref_scenario, tmp_path / "reference")
        assert ref.returncode == 0, ref.stdout[-2000:] + ref.stderr[-2000:]
        assert (out / "o.npy").read_bytes() == (tmp_path / "reference" / "o.npy").read_bytes()


def test_no_implicit_barrier_keeps_the_barriers_between_segments(
        vgfs: dict[str, Path], harness: Callable[..., Harness], builder: ScenarioBuilder, tmp_path: Path) -> None:
    scenario, a, bb = two_input_scenario(builder, vgfs["custom_glsl"], POOLED, 4, command={"implicit_barrier": False})
    (prepared,) = harness(scenario).run(tmp_path / "out")
    assert prepared.command.implicit_barrier is False
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "o.npy"), maxpool(np.float32(2) * (a + bb) + np.float32(1)))


def test_two_graphs_chained_through_a_tensor(vgfs: dict[str, Path], harness: Callable[..., Harness],
                                             builder: ScenarioBuilder, tmp_path: Path) -> None:
    """add then max-pool in one command buffer: the first command's implicit barrier orders the second."""
    a, bb = inputs()
    tensor(builder, "A", DIMS, a, shader_access="readonly")
    tensor(builder, "B", DIMS, bb, shader_access="readonly")
    tensor(builder, "S", DIMS, dst="s.npy")
    tensor(builder, "O", POOLED, dst="o.npy", shader_access="writeonly")
    for name in ("add", "maxpool"):
        shutil.copy(vgfs[name], builder.root / f"{name}.vgf")
    builder.resources += [{"graph": {"uid": "add", "src": "add.vgf"}}, {"graph": {"uid": "pool", "src": "maxpool.vgf"}}]
    builder.commands += [
        {"dispatch_graph": {"graph_ref": "add", "bindings": [{"set": 0, "id": 0, "resource_ref": "A"},
                                                              {"set": 0, "id": 1, "resource_ref": "B"},
                                                              {"set": 0, "id": 2, "resource_ref": "S"}]}},
        {"dispatch_vgf": {"graph_ref": "pool", "bindings": [{"set": 0, "id": 0, "resource_ref": "S"},
                                                             {"set": 0, "id": 1, "resource_ref": "O"}]}},
    ]
    scenario = builder.save()
    harness(scenario).run(tmp_path / "out")
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "s.npy"), a + bb)
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "o.npy"), maxpool(a + bb))
    same_as_reference(scenario, tmp_path / "out", tmp_path, ["s.npy", "o.npy"])


def test_graph_tensors_need_data_graph_usage(vgfs: dict[str, Path], harness: Callable[..., Harness], builder: ScenarioBuilder) -> None:
    scenario, _, _ = two_input_scenario(builder, vgfs["add"], DIMS, 2)
    h = harness(scenario, data_graph_usage=False)
    with pytest.raises(DeviceError) as info:
        h.prepare()
    assert info.value.message == (
        "tensor 'A' was created without TENSOR_USAGE_DATA_GRAPH_BIT_ARM, which graph 'g' needs (vkcap's resource set "
        "must create graph-bound tensors with it)"
    )


# --- bad input: one line, exit 2, before any Vulkan call ---------------------------------------------------


def _bad(kind: str, b: ScenarioBuilder, v: dict[str, Path]) -> tuple[Path, str]:
    """A broken scenario and the exact ``place: message`` it must be refused with."""
    a, bb = inputs()
    if kind == "shape":
        tensor(b, "A", DIMS, a)
        tensor(b, "B", DIMS, bb)
        tensor(b, "O", [1, 4, 4, 3], dst="o.npy")
        s = graph_scenario(b, v["add"], [(0, 0, "A"), (0, 1, "B"), (0, 2, "O")])
        return s, ("commands[0].dispatch_graph.bindings[2]: tensor 'O' has dims [1, 4, 4, 3] but graph 'g' output "
                   "'output_0' (binding 2) has dims [1, 4, 4, 2]")
    if kind == "format":
        tensor(b, "A", DIMS, fmt="VK_FORMAT_R32_SINT")
        tensor(b, "B", DIMS, bb)
        tensor(b, "O", DIMS, dst="o.npy")
        s = graph_scenario(b, v["add"], [(0, 0, "A"), (0, 1, "B"), (0, 2, "O")])
        return s, ("commands[0].dispatch_graph.bindings[0]: tensor 'A' is VK_FORMAT_R32_SINT but graph 'g' input "
                   "'input_0' (binding 0) is VK_FORMAT_R32_SFLOAT")
    if kind == "unbound":
        tensor(b, "A", DIMS, a)
        tensor(b, "O", DIMS, dst="o.npy")
        s = graph_scenario(b, v["add"], [(0, 0, "A"), (0, 2, "O")])
        return s, ("commands[0].dispatch_graph.bindings: graph 'g' input 'input_1' (set 0, binding 1: "
                   "VK_FORMAT_R32_SFLOAT [1, 4, 4, 2]) is not bound")
    if kind == "unknown_binding":
        tensor(b, "A", DIMS, a)
        tensor(b, "O", POOLED, dst="o.npy")
        s = graph_scenario(b, v["maxpool"], [(0, 0, "A"), (0, 1, "O"), (0, 5, "A")])
        return s, ("commands[0].dispatch_graph.bindings[2]: graph 'g' has no input or output at binding 5 (it has: "
                   "input 'input_0' binding 0: VK_FORMAT_R32_SFLOAT [1, 4, 4, 2]; output 'output_0' binding 1: "
                   "VK_FORMAT_R32_SFLOAT [1, 2, 2, 2])")
    if kind == "wrong_set":
        tensor(b, "A", DIMS, a)
        tensor(b, "O", POOLED, dst="o.npy")
        s = graph_scenario(b, v["maxpool"], [(1, 0, "A"), (0, 1, "O")])
        return s, "commands[0].dispatch_graph.bindings[0]: graph 'g' input 'input_0' (binding 0) is in set 0, not set 1"
    if kind == "placeholder":
        s, _, _ = two_input_scenario(b, v["placeholder"], POOLED, 4)
        return s, ("resources[0].graph.shader_substitutions: shader module 'graph_partition_1' (segment "
                   "'compute_segment_0') of graph 'g' is a placeholder and no shader_substitutions entry targets it "
                   "(given: none)")
    if kind == "segment_name_target":
        b.shader("negate", NEGATE_GLSL)
        s, _, _ = two_input_scenario(b, v["placeholder"], POOLED, 4, graph={
            "shader_substitutions": [{"shader_ref": "negate", "target": "compute_segment_0"}]})
        return s, ("resources[0].graph.shader_substitutions[0].target: 'compute_segment_0' is not a shader module of "
                   "graph 'g' (its shader modules: 'graph_partition_1' (segment 'compute_segment_0')) "
                   "('compute_segment_0' is a segment name: target its module 'graph_partition_1')")
    if kind == "push_size":
        b.raw("bias", np.array([1.0, 2.0], dtype=np.float32))
        s, _, _ = two_input_scenario(b, v["push_spec"], POOLED, 4, graph={"push_constants_size": 4}, command={
            "push_constants": [{"push_data_ref": "bias", "shader_target": SHADER_MODULE}]})
        return s, ("commands[0].dispatch_graph.push_constants[0].push_data_ref: push constant data 'bias' is 8 bytes, "
                   "shader module 'graph_partition_1' (segment 'compute_segment_0') of graph 'g' expects 4")
    if kind == "push_missing":
        s, _, _ = two_input_scenario(b, v["push_spec"], POOLED, 4)
        return s, ("resources[0].graph.push_constants_size: shader module 'graph_partition_1' (segment "
                   "'compute_segment_0') of graph 'g' reads push constants but their size is unknown: set "
                   "push_constants_size of graph 'g' and give the data with a push_constants entry targeting "
                   "'graph_partition_1'")
    if kind == "dispatch_vgf_place":
        tensor(b, "A", DIMS, a)
        tensor(b, "O", [1, 2, 2, 3], dst="o.npy")
        s = graph_scenario(b, v["maxpool"], [(0, 0, "A"), (0, 1, "O")], key="dispatch_vgf")
        return s, ("commands[0].dispatch_vgf.bindings[1]: tensor 'O' has dims [1, 2, 2, 3] but graph 'g' output "
                   "'output_0' (binding 1) has dims [1, 2, 2, 2]")
    if kind == "not_a_tensor":
        b.buffer("A", 128)
        tensor(b, "O", POOLED, dst="o.npy")
        s = graph_scenario(b, v["maxpool"], [(0, 0, "A"), (0, 1, "O")])
        return s, ("commands[0].dispatch_graph.bindings[0].resource_ref: 'A' is a buffer, but graph 'g' input 'input_0' "
                   "(binding 0) is a tensor (VK_FORMAT_R32_SFLOAT [1, 4, 4, 2])")
    if kind == "compile_error":
        s, _, _ = two_input_scenario(b, v["broken_glsl"], POOLED, 4)
        return s, ("resources[0].graph.src: shader module 'graph_partition_1' (segment 'compute_segment_0') of graph 'g': "
                   "shader compilation failed: ERROR: graph_partition_1:10: 'undefined_thing' : undeclared identifier")
    if kind == "unprovided_descriptor":
        b.shader("extra", NEGATE_GLSL.replace("void main() {", "layout(set = 0, binding = 2) buffer E { float e[]; };\nvoid main() {")
                 .replace("-x);", "-x * e[0]);"))
        s, _, _ = two_input_scenario(b, v["placeholder"], POOLED, 4, graph={
            "shader_substitutions": [{"shader_ref": "extra", "target": SHADER_MODULE}]})
        return s, ("resources[0].graph.shader_substitutions: shader 'extra' (substituted for shader module "
                   "'graph_partition_1' (segment 'compute_segment_0') of graph 'g') uses set 0 binding 2, which segment "
                   "'compute_segment_0' does not provide (it provides: set 0 binding 0, set 0 binding 1)")
    raise AssertionError(kind)


BAD = ["shape", "format", "unbound", "unknown_binding", "wrong_set", "placeholder", "segment_name_target",
       "push_size", "push_missing", "dispatch_vgf_place", "not_a_tensor", "compile_error", "unprovided_descriptor"]


@pytest.mark.parametrize("kind", BAD)
def test_bad_input_is_refused(kind: str, vgfs: dict[str, Path], harness: Callable[..., Harness], builder: ScenarioBuilder) -> None:
    scenario, expected = _bad(kind, builder, vgfs)
    h = harness(scenario)
    with pytest.raises(ScenarioError) as info:
        h.prepare()
    assert info.value.exit_code == 2
    assert str(info.value) == f"{scenario}: {expected}"


# --- vkcap run (once the session runs graphs) -------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("model", sorted(MODELS))
def test_vkcap_run(model: str, vgfs: dict[str, Path], builder: ScenarioBuilder, tmp_path: Path) -> None:
    make, tolerance = MODELS[model]
    scenario, expected = make(builder, vgfs)
    proc = vkcap("run", scenario, "--output", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    check_output(tmp_path / "out" / "o.npy", expected, tolerance)
    same_as_reference(scenario, tmp_path / "out", tmp_path, ["o.npy"])


@pytest.mark.slow
def test_vkcap_run_push_and_specialization_constants(vgfs: dict[str, Path], builder: ScenarioBuilder, tmp_path: Path) -> None:
    builder.raw("bias", np.array([10.0], dtype=np.float32))
    scenario, a, bb = two_input_scenario(
        builder, vgfs["push_spec"], POOLED, 4,
        graph={"push_constants_size": 4, "specialization_constants_map": [
            {"shader_target": SHADER_MODULE, "specialization_constants": [{"id": 0, "value": 3.0}]}]},
        command={"push_constants": [{"push_data_ref": "bias", "shader_target": SHADER_MODULE}]},
    )
    proc = vkcap("run", scenario, "--output", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "out" / "o.npy"), maxpool(np.float32(3) * (a + bb) + np.float32(10)), rtol=1e-6)
    same_as_reference(scenario, tmp_path / "out", tmp_path, ["o.npy"])


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["shape", "format", "unbound", "placeholder", "dispatch_vgf_place"])
def test_vkcap_run_bad_input(kind: str, vgfs: dict[str, Path], builder: ScenarioBuilder, tmp_path: Path) -> None:
    scenario, expected = _bad(kind, builder, vgfs)
    proc = vkcap("run", scenario, "--output", tmp_path / "out")
    assert proc.returncode == 2, proc.stderr
    *warnings, error = proc.stderr.strip().splitlines()
    assert error == f"vkcap: error: {scenario}: {expected}"
    # the reference's warning, for scenarios that got past validation
    assert warnings in ([], [f"vkcap: {scenario}: commands[0].dispatch_graph: 'dispatch_graph' is deprecated; use "
                             "'dispatch_vgf'"]), warnings
    assert not (tmp_path / "out" / "o.npy").exists()


SCALE_TENSOR = """#version 450
#extension GL_ARM_tensors : require
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) uniform tensorARM<float, 4> X;
layout(set = 0, binding = 1) uniform tensorARM<float, 4> Y;
void main() {
    uint h = gl_GlobalInvocationID.x, w = gl_GlobalInvocationID.y, c = gl_GlobalInvocationID.z;
    float x;
    tensorReadARM(X, uint[](0, h, w, c), x);
    tensorWriteARM(Y, uint[](0, h, w, c), x * FACTOR);
}
"""


@pytest.mark.slow
def test_compute_graph_compute_recorded_replayed_and_bisected(vgfs: dict[str, Path], builder: ScenarioBuilder,
                                                              tmp_path: Path) -> None:
    """A shader before the model, the model (GRAPH -> COMPUTE -> GRAPH, its compute node substituted by a
    scenario shader), a shader after it; recorded at dispatch level over 12 frames. Replaying with the
    substituted shader changed diverges inside the graph: bisect names the command, the segment and its
    module."""
    a, bb = inputs()
    builder.shader("pre", SCALE_TENSOR, build_options="-DFACTOR=2.0").shader("post", SCALE_TENSOR, build_options="-DFACTOR=0.5")
    builder.shader("negate", NEGATE_GLSL)
    tensor(builder, "A", DIMS, a, shader_access="readonly")
    tensor(builder, "B", DIMS, bb, shader_access="readonly")
    tensor(builder, "A2", DIMS)
    tensor(builder, "O", POOLED, shader_access="writeonly")
    tensor(builder, "P", POOLED, dst="p.npy")
    shutil.copy(vgfs["custom_glsl"], builder.root / "m.vgf")
    builder.resources.insert(0, {"graph": {"uid": "g", "src": "m.vgf",
                                           "shader_substitutions": [{"shader_ref": "negate", "target": SHADER_MODULE}]}})
    for f in range(12):
        builder.dispatch("pre", [(0, 0, "A"), (0, 1, "A2")], [DIMS[1], DIMS[2], DIMS[3]])
        builder.commands.append({"dispatch_graph": {"graph_ref": "g", "bindings": [
            {"set": 0, "id": 0, "resource_ref": "A2"}, {"set": 0, "id": 1, "resource_ref": "B"}, {"set": 0, "id": 4, "resource_ref": "O"}]}})
        builder.dispatch("post", [(0, 0, "O"), (0, 1, "P")], [POOLED[1], POOLED[2], POOLED[3]])
        builder.boundary(["P"], f)
    scenario = builder.save()
    trace = tmp_path / "t.vkt"
    proc = vkcap("record", scenario, "-o", trace, "--output", tmp_path, "--dispatch-level", "--checkpoint-every", "4")
    assert proc.returncode == 0, proc.stderr
    expected = np.float32(0.5) * maxpool(-(np.float32(2) * a + bb))
    np.testing.assert_allclose(np.load(tmp_path / "p.npy"), expected, rtol=1e-6)
    assert vkcap("replay", trace).returncode == 0
    with Trace.open(trace) as t:  # B is bound by the graph alone: a checkpoint must hold it too
        assert set(t.checkpoints[3]) == {"A", "A2", "B", "O", "P"}
        # the substituted shader's SPIR-V is recorded, and a replay runs it as recorded (nothing recompiled)
        original = load_scenario(scenario)
        compiled = load_shader(original, original.by_uid["negate"]).code  # type: ignore[arg-type]
        assert bytes(t.blob(t.spirv["negate"], what="negate")) == compiled
        rebuilt = rebuild_scenario(t, tmp_path / "rebuilt")
        negate = rebuilt.by_uid["negate"]
        assert isinstance(negate, Shader) and negate.type == "SPIR-V"
        assert rebuilt.src_path(negate.src).read_bytes() == compiled
    bad = builder.file("bad.comp", NEGATE_GLSL.replace("-x);", "-x + ((h == 1u && w == 2u && c == 1u) ? 0.25 : 0.0));"))
    proc = vkcap("bisect", trace, "--no-isolate", "--replace-shader", f"negate={bad}", "--json", tmp_path / "b.json")
    assert proc.returncode == 1, proc.stderr
    doc = json.loads((tmp_path / "b.json").read_text())
    assert (doc["frame"], doc["command"], doc["dispatch"], doc["segment"], doc["module"]) == (0, 1, "g", 1, SHADER_MODULE)
    assert f"first divergent dispatch: commands[1] (g), segment 1 (module {SHADER_MODULE})" in proc.stdout
