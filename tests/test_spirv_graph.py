"""``dispatch_spirv_graph`` and ``graph_constant``: data graphs from SPIR-V modules with no VGF (here,
the graph modules of the test models, taken out of their VGF files), against numpy and, byte for byte,
ARM's reference runner; recorded and replayed; bad input in one line."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.builders import ScenarioBuilder, vkcap
from tests.reference import assert_same_outputs, reference_runner, run_reference
from tests.test_run_graphs import TOSA, conv2d_reference
from tests.vkharness import convert_model
from vkcore.graphs.vgf import read_vgf

pytestmark = pytest.mark.device

F32 = "VK_FORMAT_R32_SFLOAT"


@pytest.fixture(scope="module")
def graph_modules(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The add and conv2d models' VGFs, read: {name: VgfFile}."""
    out = tmp_path_factory.mktemp("spirv-graphs")
    return {name: read_vgf(convert_model(TOSA / f"{name}.mlir", out / f"{name}.vgf")) for name in ("add", "conv2d")}


def spirv_graph(b: ScenarioBuilder, model: Any, tensors: list[tuple[str, list[int], str, np.ndarray | None]],
                constants: bool) -> Path:
    """A scenario dispatching ``model``'s graph module as SPIR-V, its constants as graph_constant
    resources (in id order), ``tensors`` (uid, dims, access, data) bound at set 0, binding = position."""
    module = model.modules[0]
    b.file("graph.spv", module.code)
    b.resources.append({"shader": {"uid": "g", "src": "graph.spv", "type": "SPIR-V", "entry": module.entry_point}})
    uids = []
    for c in model.constants if constants else ():
        r = model.resource_of(c)
        uid = f"k{c.graph_constant_id}"
        b.resources.append({"graph_constant": {"uid": uid, "dims": list(r.shape), "format": F32,
                                               "src": b.npy(f"{uid}.npy", np.frombuffer(c.read(), "<f4").reshape(r.shape))}})
        uids.append(uid)
    for uid, dims, access, data in tensors:
        body: dict[str, Any] = {"uid": uid, "dims": dims, "format": F32, "shader_access": access}
        body.update({"src": b.npy(f"{uid}.npy", data)} if data is not None else {"dst": f"{uid}.npy"})
        b.resources.append({"tensor": body})
    b.commands.append({"dispatch_spirv_graph": {
        "graph_ref": "g", "graph_constants": uids,
        "bindings": [{"set": 0, "id": i, "resource_ref": uid} for i, (uid, *_rest) in enumerate(tensors)]}})
    b.boundary([tensors[-1][0]], 0)
    return b.save()


@pytest.mark.slow
def test_an_add_graph_from_spirv(builder: ScenarioBuilder, tmp_path: Path, graph_modules: dict[str, Any]) -> None:
    a, b = (np.random.default_rng(s).random((1, 4, 4, 2), dtype=np.float32) for s in (1, 2))
    scenario = spirv_graph(builder, graph_modules["add"], [("a", [1, 4, 4, 2], "readonly", a),
                                                           ("b", [1, 4, 4, 2], "readonly", b),
                                                           ("c", [1, 4, 4, 2], "writeonly", None)], constants=False)
    trace = tmp_path / "t.vkt"
    proc = vkcap("record", scenario, "-o", trace, "--output", tmp_path / "ours")
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "ours" / "c.npy"), a + b)
    assert_same_outputs(scenario, tmp_path / "ours", tmp_path, ["c.npy"])
    report = tmp_path / "r.json"
    assert vkcap("replay", trace, "--json", report).returncode == 0
    assert json.loads(report.read_text())["frames"][0]["resources"][0]["differing"] == 0


@pytest.mark.slow
def test_graph_pipelines_are_counted_by_the_pipeline_cache(builder: ScenarioBuilder, tmp_path: Path,
                                                          graph_modules: dict[str, Any]) -> None:
    """A data graph pipeline misses on the first cached run and hits on the next."""
    a = np.ones((1, 4, 4, 2), np.float32)
    scenario = spirv_graph(builder, graph_modules["add"], [("a", [1, 4, 4, 2], "readonly", a),
                                                           ("b", [1, 4, 4, 2], "readonly", a),
                                                           ("c", [1, 4, 4, 2], "writeonly", None)], constants=False)
    common = ["run", scenario, "--output", tmp_path / "o", "--cache-path", tmp_path, "--fail-on-pipeline-cache-miss"]
    first = vkcap(*common)
    assert first.returncode == 0 and "pipeline cache: 0 hit(s), 1 miss(es)" in first.stderr, first.stderr
    second = vkcap(*common)
    assert second.returncode == 0 and "pipeline cache: 1 hit(s), 0 miss(es)" in second.stderr, second.stderr


@pytest.mark.slow
def test_a_conv2d_graph_with_graph_constants(builder: ScenarioBuilder, tmp_path: Path,
                                             graph_modules: dict[str, Any]) -> None:
    x = np.random.default_rng(3).random((1, 4, 4, 2), dtype=np.float32)
    scenario = spirv_graph(builder, graph_modules["conv2d"], [("x", [1, 4, 4, 2], "readonly", x),
                                                              ("y", [1, 4, 4, 20], "writeonly", None)], constants=True)
    proc = vkcap("run", scenario, "--output", tmp_path / "ours")
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "ours" / "y.npy"), conv2d_reference(x), atol=2e-6)
    assert_same_outputs(scenario, tmp_path / "ours", tmp_path, ["y.npy"])


@pytest.mark.slow
@pytest.mark.reference
def test_graph_dumps_match_the_reference(builder: ScenarioBuilder, tmp_path: Path,
                                         graph_modules: dict[str, Any]) -> None:
    """``--session-memory-dump-dir``: the conv2d graph has session memory; dispatched twice, it makes two
    files (the reference makes a pipeline per dispatch), each the hex text of that memory, byte for
    byte the reference's. ``--emulation-layer-profiling-dump-dir``: the emulation layer has no profiling
    property, so one warning per pipeline and no file, as the reference. A dump folder that is a file is
    refused in one line before any work."""
    x = np.random.default_rng(5).random((1, 4, 4, 2), dtype=np.float32)
    scenario = spirv_graph(builder, graph_modules["conv2d"], [("x", [1, 4, 4, 2], "readonly", x),
                                                              ("y", [1, 4, 4, 20], "writeonly", None)], constants=True)
    doc = json.loads(scenario.read_text())
    doc["commands"].insert(0, doc["commands"][0])
    scenario.write_text(json.dumps(doc))
    ours = tmp_path / "ours-dump"
    profiling = tmp_path / "profiling"
    proc = vkcap("run", scenario, "--output", tmp_path / "ours", "--session-memory-dump-dir", ours,
                 "--emulation-layer-profiling-dump-dir", profiling)
    assert proc.returncode == 0, proc.stderr
    assert [line for line in proc.stderr.splitlines() if "profiling" in line] == [
        f"vkcap: --emulation-layer-profiling-dump-dir: skipping graph pipeline {n}: property 0x7ffffffe is not available"
        for n in (0, 1)]
    assert not profiling.exists()
    names = sorted(p.name for p in ours.iterdir())
    assert names == ["Graph_Pipeline_0_Session_RAM_0.txt", "Graph_Pipeline_1_Session_RAM_0.txt"]
    text = (ours / names[0]).read_text()
    lines = text.split("\n")
    assert lines[0] == "" and all(line == f"{16 * k:08X}:   " + line[12:] for k, line in enumerate(lines[1:]))
    assert all(len(bytes.fromhex(line[12:])) == 16 for line in lines[1:-1])
    if reference_runner() is not None:
        theirs = tmp_path / "ref-dump"
        theirs.mkdir()
        ref = run_reference(scenario, tmp_path / "reference", "--session-memory-dump-dir", theirs)
        assert ref.returncode == 0, ref.stdout[-2000:]
        assert sorted(p.name for p in theirs.iterdir()) == names
        for name in names:
            assert (ours / name).read_bytes() == (theirs / name).read_bytes(), name
    blocker = builder.root / "a-file"
    blocker.write_text("")
    for flag in ("--session-memory-dump-dir", "--emulation-layer-profiling-dump-dir"):
        proc = vkcap("run", scenario, "--output", tmp_path / "again", flag, blocker)
        assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
            f"vkcap: error: {blocker}: {flag}: is a file, not a folder"], proc.stderr
    assert not (tmp_path / "again").exists()


@pytest.mark.slow
def test_bad_spirv_graphs_are_one_line(builder: ScenarioBuilder, tmp_path: Path, graph_modules: dict[str, Any]) -> None:
    x = np.zeros((1, 4, 4, 2), np.float32)
    scenario = spirv_graph(builder, graph_modules["conv2d"], [("x", [1, 4, 4, 2], "readonly", x),
                                                              ("y", [1, 4, 4, 20], "writeonly", None)], constants=True)
    doc = json.loads(scenario.read_text())
    missing = json.loads(json.dumps(doc))
    missing["commands"][0]["dispatch_spirv_graph"]["graph_constants"] = []
    wrong_dims = json.loads(json.dumps(doc))
    wrong_dims["resources"][2]["graph_constant"]["dims"] = [10, 2]
    cases = {
        "no constants": (missing, "commands[0].dispatch_spirv_graph: the SPIR-V graph 'g' does not match this command: "
                                  "graph constant id 0 (tensor<20x3x3x2 float32>) of the module has no data"),
        "dims": (wrong_dims, "resources[2].graph_constant.src: 'k1.npy' has shape [20] but dims are [10, 2]"),
    }
    for name, (document, expected) in cases.items():
        path = builder.root / f"{name}.json"
        path.write_text(json.dumps(document))
        proc = vkcap("run", path, "--output", tmp_path)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and expected in lines[0], (name, proc.stderr)
    builder.file("g.comp", "#version 450\nvoid main() {}\n")
    doc["resources"][0] = {"shader": {"uid": "g", "src": "g.comp", "type": "GLSL"}}
    glsl = builder.root / "glsl.json"
    glsl.write_text(json.dumps(doc))
    proc = vkcap("run", glsl, "--output", tmp_path)
    assert (proc.returncode, proc.stderr.strip()) == (2, (
        f"vkcap: error: {glsl}: commands[0].dispatch_spirv_graph.graph_ref: shader 'g' is GLSL; a SPIR-V graph must "
        "be given as SPIR-V"))
