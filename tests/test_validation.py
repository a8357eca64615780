"""Scenario validation: the JSON Schema pass, its cache, and the semantic checks (vkcore/scenario/validate.py).

Each invalid scenario is a valid base scenario plus one mutation; the test asserts the exact one-line message
(``FILE: PLACE: problem``) and exit code 2.
"""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vkcore.errors import ScenarioError
from vkcore.scenario.model import Buffer, Image, ImageBarrier, MemoryBarrier, Tensor
from vkcore.scenario.load import load_scenario
from vkcore.scenario.validate import cache_dir, validate_document

REPO = Path(__file__).resolve().parent.parent

Doc = dict[str, Any]


# ---------------------------------------------------------------------------------------------------------
# The base scenarios
# ---------------------------------------------------------------------------------------------------------

def write_inputs(root: Path) -> None:
    """The files the base scenario names (contents only matter for .npy files)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "add.spv").write_bytes(b"\x03\x02\x23\x07" + bytes(16))
    (root / "pc.comp").write_text("#version 450\nvoid main() {}\n")
    (root / "inc").mkdir(exist_ok=True)
    (root / "g.vgf").write_bytes(b"VGF0")
    np.save(root / "a.npy", np.arange(10, dtype=np.float32))
    np.save(root / "b.npy", np.ones(10, dtype=np.float32))
    np.save(root / "pc.npy", np.zeros(4, dtype=np.float32))  # 16 bytes of push constants
    np.save(root / "gp.npy", np.zeros(2, dtype=np.float32))  # 8 bytes of graph push constants
    np.save(root / "t.npy", np.zeros((2, 2), dtype=np.float32))


def full_document() -> Doc:
    """A valid scenario with every resource kind, every command and most optional fields."""
    access = {"src_access": "ACCESS_COMPUTE_SHADER_WRITE", "dst_access": "ACCESS_COMPUTE_SHADER_READ"}
    return {
        "resources": [
            {"shader": {"uid": "add", "src": "add.spv", "type": "SPIR-V", "entry": "main"}},  # 0
            {"shader": {"uid": "pcs", "src": "pc.comp", "type": "GLSL", "push_constants_size": 16,  # 1
                        "include_dirs": ["inc"], "build_options": "-Os",
                        "specialization_constants": [{"id": 0, "value": 1}, {"id": 1, "value": 2.5}]}},
            {"buffer": {"uid": "A", "size": 40, "shader_access": "readonly", "src": "a.npy"}},  # 2
            {"buffer": {"uid": "B", "size": 40, "shader_access": "readonly", "src": "b.npy"}},  # 3
            {"buffer": {"uid": "C", "size": 40, "shader_access": "readwrite", "dst": "c.npy"}},  # 4
            {"raw_data": {"uid": "P", "src": "pc.npy"}},  # 5
            {"image": {"uid": "I", "format": "VK_FORMAT_R32_SFLOAT", "dims": [1, 4, 4, 1],  # 6
                       "shader_access": "readwrite", "mips": 2, "min_filter": "LINEAR", "mag_filter": "LINEAR",
                       "mip_filter": "NEAREST", "border_address_mode": "CLAMP_BORDER",
                       "border_color": "FLOAT_CUSTOM_EXT", "custom_border_color": [0, 0.5, 1, 1],
                       "tiling": "OPTIMAL", "dst": "i.dds"}},
            {"tensor": {"uid": "T", "dims": [2, 2], "format": "VK_FORMAT_R32_SFLOAT",  # 7
                        "shader_access": "readwrite", "src": "t.npy", "tiling": "LINEAR"}},
            {"graph": {"uid": "G", "src": "g.vgf", "push_constants_size": 8,  # 8
                       "shader_substitutions": [{"shader_ref": "add", "target": "node"}],
                       "specialization_constants_map": [
                           {"shader_target": "node", "specialization_constants": [{"id": 0, "value": 3}]}]}},
            {"memory_barrier": {"uid": "mb", **access, "src_stage": ["COMPUTE"], "dst_stage": ["ALL"]}},  # 9
            {"buffer_barrier": {"uid": "bb", "buffer_resource": "C", "size": 32, "offset": 8,  # 10
                                "src_access": "compute_shader_write", "dst_access": "memory_read",
                                "src_stage": ["compute"], "dst_stage": ["all"]}},
            {"image_barrier": {"uid": "ib", **access, "image_resource": "I",  # 11
                               "old_layout": "IMAGE_LAYOUT_UNDEFINED", "new_layout": "general",
                               "subresource_range": {"base_mip_level": 0, "level_count": 2}}},
            {"tensor_barrier": {"uid": "tb", **access, "tensor_resource": "T"}},  # 12
            {"raw_data": {"uid": "GP", "src": "gp.npy"}},  # 13
            {"buffer": {"uid": "D", "size": 64, "shader_access": "readwrite",  # 14
                        "memory_group": {"id": "shared", "offset": 0}}},
            {"buffer": {"uid": "E", "size": 64, "shader_access": "readwrite", "memory_group": {"uid": "shared"}}},
        ],
        "commands": [
            {"dispatch_compute": {"shader_ref": "add", "rangeND": [10], "bindings": [  # 0
                {"set": 0, "id": 0, "resource_ref": "A"}, {"set": 0, "id": 1, "resource_ref": "B"},
                {"set": 1, "id": 2, "resource_ref": "C"}]}},
            {"dispatch_compute": {"shader_ref": "pcs", "push_data_ref": "P", "rangeND": [4, 4, 1],  # 1
                                  "implicit_barrier": False, "bindings": [
                                      {"set": 0, "id": 0, "resource_ref": "I", "lod": 1,
                                       "descriptor_type": "VK_DESCRIPTOR_TYPE_STORAGE_IMAGE"},
                                      {"set": 0, "id": 1, "resource_ref": "T"}]}},
            {"dispatch_barrier": {"image_barrier_refs": ["ib"], "tensor_barrier_refs": ["tb"],  # 2
                                  "memory_barrier_refs": ["mb"], "buffer_barrier_refs": ["bb"]}},
            {"dispatch_graph": {"graph_ref": "G", "bindings": [{"set": 0, "id": 0, "resource_ref": "T"}],  # 3
                                "push_constants": [{"push_data_ref": "GP", "shader_target": "node"}]}},
            {"dispatch_vgf": {"graph_ref": "G", "bindings": [{"set": 0, "id": 0, "resource_ref": "T"}]}},  # 4
            {"mark_boundary": {"resources": ["C", "I", "T"], "frame_id": 0}},  # 5
            {"mark_boundary": {"resources": ["C"]}},  # 6
        ],
    }


def minimal_document() -> Doc:
    """A valid scenario with every resource kind and command, each with only its required fields."""
    access = {"src_access": "memory_write", "dst_access": "memory_read"}
    return {
        "resources": [
            {"shader": {"uid": "s", "src": "add.spv", "type": "SPIR-V"}},
            {"buffer": {"uid": "b", "size": 4, "shader_access": "writeonly"}},
            {"image": {"uid": "i", "format": "VK_FORMAT_R8G8B8A8_UNORM", "dims": [1, 8, 8, 4],
                       "shader_access": "image_read"}},
            {"tensor": {"uid": "t", "dims": [3], "format": "VK_FORMAT_R8_BOOL_ARM", "shader_access": "readonly"}},
            {"raw_data": {"uid": "r", "src": "pc.npy"}},
            {"graph": {"uid": "g", "src": "g.vgf"}},
            {"memory_barrier": {"uid": "mb", **access}},
            {"buffer_barrier": {"uid": "bb", **access, "buffer_resource": "b", "size": 4}},
            {"image_barrier": {"uid": "ib", **access, "image_resource": "i", "old_layout": "undefined",
                               "new_layout": "IMAGE_LAYOUT_GENERAL"}},
            {"tensor_barrier": {"uid": "tb", **access, "tensor_resource": "t"}},
        ],
        "commands": [
            {"dispatch_compute": {"shader_ref": "s", "rangeND": [1], "bindings": []}},
            {"dispatch_graph": {"graph_ref": "g", "bindings": []}},
            {"dispatch_barrier": {}},
            {"mark_boundary": {"resources": []}},
        ],
    }


def save(root: Path, doc: Doc, name: str = "scenario.json") -> Path:
    path = root / name
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture
def root(tmp_path: Path) -> Path:
    write_inputs(tmp_path)
    return tmp_path


# ---------------------------------------------------------------------------------------------------------
# Valid scenarios
# ---------------------------------------------------------------------------------------------------------

def test_full_scenario_is_valid(root: Path) -> None:
    scenario = load_scenario(save(root, full_document()))
    assert len(scenario.resources) == 16 and len(scenario.commands) == 7
    # Reference-runner spellings are normalized to the specification's.
    bb = scenario.by_uid["bb"]
    assert (bb.src_access, bb.dst_access, bb.src_stage, bb.dst_stage) == (
        "ACCESS_COMPUTE_SHADER_WRITE", "ACCESS_MEMORY_READ", ("COMPUTE",), ("ALL",))
    ib = scenario.by_uid["ib"]
    assert isinstance(ib, ImageBarrier)
    assert (ib.old_layout, ib.new_layout) == ("IMAGE_LAYOUT_UNDEFINED", "IMAGE_LAYOUT_GENERAL")
    # memory_group: "id" (reference runner) and "uid" (specification) name the same group.
    assert scenario.by_uid["D"].memory_group == scenario.by_uid["E"].memory_group == "shared"
    assert scenario.commands[4].KIND == "dispatch_graph"  # dispatch_vgf is dispatch_graph


def test_minimal_scenario_gets_defaults(root: Path) -> None:
    scenario = load_scenario(save(root, minimal_document()))
    image = scenario.by_uid["i"]
    assert isinstance(image, Image)
    assert (image.mips, image.min_filter, image.mag_filter, image.mip_filter) == (1, "NEAREST", "NEAREST", "NEAREST")
    assert (image.border_address_mode, image.border_color, image.src, image.memory_group) == (
        "CLAMP_EDGE", "FLOAT_TRANSPARENT_BLACK", "", "")
    tensor = scenario.by_uid["t"]
    assert isinstance(tensor, Tensor) and tensor.tiling == "LINEAR"
    buffer = scenario.by_uid["b"]
    assert isinstance(buffer, Buffer) and (buffer.src, buffer.dst) == ("", "")
    assert isinstance(scenario.by_uid["mb"], MemoryBarrier)
    assert scenario.commands[0].rangeND == (1, 1, 1)


def test_reference_example_is_valid(root: Path) -> None:
    """The spec's mark_boundary example (shape of a real reference-runner scenario)."""
    doc = {"commands": [{"dispatch_compute": {"bindings": [{"id": 0, "set": 0, "resource_ref": "inBufferA"}],
                                              "rangeND": [10], "shader_ref": "add_shader"}},
                        {"mark_boundary": {"resources": ["inBufferA"], "frame_id": 0}}],
           "resources": [{"shader": {"entry": "main", "src": "add.spv", "type": "SPIR-V", "uid": "add_shader"}},
                         {"buffer": {"shader_access": "readonly", "size": 40, "src": "a.npy", "uid": "inBufferA"}}]}
    scenario = load_scenario(save(root, doc))
    buffer = scenario.by_uid["inBufferA"]
    assert isinstance(buffer, Buffer) and (buffer.size, buffer.shader_access, buffer.src) == (40, "readonly", "a.npy")
    dispatch, boundary = scenario.commands
    assert (dispatch.shader_ref, dispatch.rangeND) == ("add_shader", (10, 1, 1))
    assert (boundary.frame_id, list(boundary.resources)) == (0, ["inBufferA"])


def test_schema_is_a_valid_2020_12_schema() -> None:
    from jsonschema import Draft202012Validator

    schema = json.loads((REPO / "vkcore" / "scenario" / "schema" / "scenario.schema.json").read_text())
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)


# ---------------------------------------------------------------------------------------------------------
# Invalid scenarios: base + one mutation -> exact message
# ---------------------------------------------------------------------------------------------------------

Mutation = Callable[[Doc, Path], None]


@dataclass(frozen=True)
class Case:
    name: str
    mutate: Mutation
    expected: str  # "PLACE: message" ("{root}" = the scenario folder); "" place for root-level errors


def res(i: int, kind: str) -> Callable[[Doc], dict[str, Any]]:
    return lambda doc: doc["resources"][i][kind]


def cmd(i: int, kind: str) -> Callable[[Doc], dict[str, Any]]:
    return lambda doc: doc["commands"][i][kind]


def setf(get: Callable[[Doc], dict[str, Any]], **fields: Any) -> Mutation:
    return lambda doc, _root: get(doc).update(fields)


def delf(get: Callable[[Doc], dict[str, Any]], name: str) -> Mutation:
    return lambda doc, _root: get(doc).pop(name)


def add_resource(item: dict[str, Any]) -> Mutation:
    return lambda doc, _root: doc["resources"].append(item)


def add_command(item: dict[str, Any]) -> Mutation:
    return lambda doc, _root: doc["commands"].append(item)


def both(*mutations: Mutation) -> Mutation:
    def run(doc: Doc, root: Path) -> None:
        for m in mutations:
            m(doc, root)
    return run


def write_file(name: str, data: bytes) -> Mutation:
    return lambda _doc, root: (root / name).write_bytes(data)


def npy_file(name: str, array: np.ndarray) -> Mutation:
    return lambda _doc, root: np.save(root / name, array)


CASES = [
    # --- schema: types, ranges, required and unknown fields ---
    Case("buffer size negative", setf(res(2, "buffer"), size=-4),
         "resources[2].buffer.size: must be an integer >= 1, got -4"),
    Case("buffer size float", setf(res(2, "buffer"), size=40.0),
         "resources[2].buffer.size: must be an integer, got 40.0"),
    Case("buffer size string", setf(res(2, "buffer"), size="40"),
         'resources[2].buffer.size: must be an integer, got "40"'),
    Case("buffer missing size", delf(res(2, "buffer"), "size"),
         "resources[2].buffer: missing required field 'size'"),
    Case("typo in a field name", both(delf(res(2, "buffer"), "size"), setf(res(2, "buffer"), sise=40)),
         "resources[2].buffer: unknown field 'sise' (did you mean 'size'?)"),
    Case("unknown field, nothing close", setf(res(5, "raw_data"), colour="red"),
         "resources[5].raw_data: unknown field 'colour' (allowed: uid, src)"),
    Case("unknown resource kind", add_resource({"bufer": {"uid": "X"}}),
         "resources[16]: unknown resource kind 'bufer' (expected one of: image, tensor, buffer, raw_data, shader, "
         "graph, graph_constant, memory_barrier, buffer_barrier, image_barrier, tensor_barrier); did you mean "
         "'buffer'?"),
    Case("resource item with two kinds", setf(lambda d: d["resources"][5], buffer={"uid": "Z"}),
         "resources[5]: expected exactly one key (the resource kind), got 2: raw_data, buffer"),
    Case("empty resource item", add_resource({}),
         "resources[16]: expected exactly one key (the resource kind), got none"),
    Case("unknown command kind", add_command({"dispatch_computer": {}}),
         "commands[7]: unknown command kind 'dispatch_computer' (expected one of: dispatch_compute, "
         "dispatch_fragment, dispatch_graph, dispatch_vgf, dispatch_spirv_graph, dispatch_optical_flow, "
         "dispatch_barrier, dispatch_data_graph, pipeline_barrier, frame_boundary, mark_boundary); did you mean 'dispatch_compute'?"),
    Case("a pipeline_barrier's unknown field", add_command({"pipeline_barrier": {"image_barrier_ref": []}}),
         "commands[7].pipeline_barrier: unknown field 'image_barrier_ref' (did you mean 'image_barrier_refs'?)"),
    Case("enum typo", setf(res(2, "buffer"), shader_access="readonyl"),
         "resources[2].buffer.shader_access: Unknown shader_access value 'readonyl' (expected one of: readonly, writeonly, "
         "readwrite); did you mean 'readonly'?"),
    Case("image format outside the spec's list", setf(res(6, "image"), format="VK_FORMAT_R8G8B8A8_SRGB"),
         "resources[6].image.format: Unknown VkFormat 'VK_FORMAT_R8G8B8A8_SRGB' (not one of the 29 allowed values); "
         "did you mean 'VK_FORMAT_R8G8B8A8_SNORM'?"),
    Case("image-only format on a tensor", setf(res(7, "tensor"), format="VK_FORMAT_R8G8B8A8_UNORM"),
         "resources[7].tensor.format: Unknown VkFormat 'VK_FORMAT_R8G8B8A8_UNORM' (not one of the 13 allowed values)"),
    Case("barrier access misspelled", setf(res(9, "memory_barrier"), src_access="ACCESS_SHADER_WRITE"),
         "resources[9].memory_barrier.src_access: unknown value 'ACCESS_SHADER_WRITE' (expected one of: "
         "ACCESS_MEMORY_WRITE, ACCESS_MEMORY_READ, ACCESS_GRAPH_WRITE, ACCESS_GRAPH_READ, "
         "ACCESS_COMPUTE_SHADER_WRITE, ACCESS_COMPUTE_SHADER_READ, memory_write, memory_read, graph_write, "
         "graph_read, compute_shader_write, compute_shader_read); did you mean 'ACCESS_COMPUTE_SHADER_WRITE'?"),
    Case("empty stage list", setf(res(9, "memory_barrier"), dst_stage=[]),
         "resources[9].memory_barrier.dst_stage: must have at least 1 item, got 0"),
    Case("rangeND too long", setf(cmd(0, "dispatch_compute"), rangeND=[10, 1, 1, 1]),
         "commands[0].dispatch_compute.rangeND: must have 1 to 3 items, got 4"),
    Case("rangeND zero", setf(cmd(0, "dispatch_compute"), rangeND=[0]),
         "commands[0].dispatch_compute.rangeND[0]: must be an integer >= 1, got 0"),
    Case("negative descriptor set", lambda d, r: d["commands"][0]["dispatch_compute"]["bindings"][1].update(set=-1),
         "commands[0].dispatch_compute.bindings[1].set: must be an integer >= 0, got -1"),
    Case("push_constants_size not a multiple of 4", setf(res(1, "shader"), push_constants_size=6),
         "resources[1].shader.push_constants_size: must be a multiple of 4, got 6"),
    Case("implicit_barrier not a boolean", setf(cmd(0, "dispatch_compute"), implicit_barrier="yes"),
         'commands[0].dispatch_compute.implicit_barrier: must be true or false, got "yes"'),
    Case("empty uid", setf(res(4, "buffer"), uid=""), "resources[4].buffer.uid: must not be empty"),
    Case("tensor with 7 dimensions", setf(res(7, "tensor"), dims=[1] * 7),
         "resources[7].tensor.dims: must have 1 to 6 items, got 7"),
    Case("alias_target of the wrong type", setf(res(7, "tensor"), alias_target=5),
         "resources[7].tensor.alias_target: must be a string or an object, got 5"),
    Case("custom border color of 3 values", setf(res(6, "image"), custom_border_color=[0, 0, 0]),
         "resources[6].image.custom_border_color: must have 4 items, got 3"),
    Case("memory_group with an unknown key", setf(res(14, "buffer"), memory_group={"name": "shared"}),
         "resources[14].buffer.memory_group: unknown field 'name' (allowed: uid, id, offset)"),
    Case("mark_boundary without resources", delf(cmd(5, "mark_boundary"), "resources"),
         "commands[5].mark_boundary: missing required field 'resources'"),
    Case("missing commands", lambda d, r: d.pop("commands"), "missing required field 'commands'"),
    Case("unknown top-level field", lambda d, r: d.update(version=1),
         "unknown field 'version' (allowed: resources, commands)"),
    # --- uniqueness ---
    Case("duplicate uid", add_resource({"buffer": {"uid": "A", "size": 4, "shader_access": "readonly"}}),
         "resources[16].buffer.uid: Not unique uid: 'A' is a duplicate (first defined at resources[2].buffer)"),
    Case("duplicate binding", lambda d, r: d["commands"][0]["dispatch_compute"]["bindings"][2].update(set=0, id=0),
         "commands[0].dispatch_compute.bindings[2]: binding set 0, id 0 used twice (bindings[0] and bindings[2])"),
    Case("duplicate specialization constant id",
         setf(res(1, "shader"), specialization_constants=[{"id": 3, "value": 1}, {"id": 3, "value": 2}]),
         "resources[1].shader.specialization_constants[1].id: specialization constant id 3 is set twice "
         "(specialization_constants[0] and specialization_constants[1])"),
    Case("duplicate specialization constant id in a graph map",
         lambda d, r: d["resources"][8]["graph"]["specialization_constants_map"][0]["specialization_constants"]
         .append({"id": 0, "value": 1}),
         "resources[8].graph.specialization_constants_map[0].specialization_constants[1].id: specialization "
         "constant id 0 is set twice (specialization_constants[0] and specialization_constants[1])"),
    # --- references ---
    Case("unknown binding resource", lambda d, r: d["commands"][0]["dispatch_compute"]["bindings"][0].update(
        resource_ref="AA"),
         "commands[0].dispatch_compute.bindings[0].resource_ref: Memory resource not found: unknown resource 'AA' (did you mean 'A'?)"),
    Case("binding a shader", lambda d, r: d["commands"][0]["dispatch_compute"]["bindings"][0].update(
        resource_ref="add"),
         "commands[0].dispatch_compute.bindings[0].resource_ref: 'add' is a shader, expected a buffer, image or "
         "tensor"),
    Case("shader_ref to a buffer", setf(cmd(0, "dispatch_compute"), shader_ref="A"),
         "commands[0].dispatch_compute.shader_ref: 'A' is a buffer, expected a shader"),
    Case("graph_ref to a shader", setf(cmd(4, "dispatch_vgf"), graph_ref="add"),
         "commands[4].dispatch_vgf.graph_ref: 'add' is a shader, expected a graph"),
    Case("graph push data from a buffer",
         lambda d, r: d["commands"][3]["dispatch_graph"]["push_constants"][0].update(push_data_ref="A"),
         "commands[3].dispatch_graph.push_constants[0].push_data_ref: 'A' is a buffer, expected a raw_data"),
    Case("dispatch_barrier naming the wrong barrier kind", setf(cmd(2, "dispatch_barrier"), memory_barrier_refs=["bb"]),
         "commands[2].dispatch_barrier.memory_barrier_refs[0]: 'bb' is a buffer_barrier, expected a memory_barrier"),
    Case("buffer barrier on an image", setf(res(10, "buffer_barrier"), buffer_resource="I"),
         "resources[10].buffer_barrier.buffer_resource: 'I' is an image, expected a buffer"),
    Case("tensor barrier on an unknown tensor", setf(res(12, "tensor_barrier"), tensor_resource="nope"),
         "resources[12].tensor_barrier.tensor_resource: unknown resource 'nope'"),
    Case("substitution with a missing shader",
         lambda d, r: d["resources"][8]["graph"]["shader_substitutions"][0].update(shader_ref="ad"),
         "resources[8].graph.shader_substitutions[0].shader_ref: Shader resource not found: unknown resource 'ad' (did you mean 'add'?)"),
    Case("capturing a shader", setf(cmd(5, "mark_boundary"), resources=["C", "add"]),
         "commands[5].mark_boundary.resources[1]: 'add' is a shader, expected a buffer, image or tensor"),
    Case("alias_target (deprecated)", setf(res(7, "tensor"), alias_target={"resource_ref": "A"}),
         "resources[7].tensor.alias_target: the alias_target field is deprecated and refused (as the reference runner "
         "refuses it): share memory with a memory_group instead"),
    # --- push constants ---
    Case("push constants without push data", delf(cmd(1, "dispatch_compute"), "push_data_ref"),
         "commands[1].dispatch_compute: shader 'pcs' has push_constants_size 16 but no push_data_ref is given"),
    Case("push data for a shader without push constants", setf(cmd(0, "dispatch_compute"), push_data_ref="P"),
         "commands[0].dispatch_compute.push_data_ref: shader 'add' declares no push constants "
         "(push_constants_size 0)"),
    Case("push data longer than push_constants_size", setf(res(1, "shader"), push_constants_size=8),
         "commands[1].dispatch_compute.push_data_ref: raw_data 'P' holds 16 bytes (pc.npy), more than the "
         "push_constants_size 8 of shader 'pcs' (shorter data is zero-padded, longer is refused)"),
    # --- files ---
    Case("missing src file", setf(res(2, "buffer"), src="missing.npy"),
         "resources[2].buffer.src: Could not open file: file not found: {root}/missing.npy"),
    Case("missing VGF file", setf(res(8, "graph"), src="sub/model.vgf"),
         "resources[8].graph.src: Could not open file: file not found: {root}/sub/model.vgf"),
    Case("src is a folder", setf(res(0, "shader"), src="inc"),
         "resources[0].shader.src: Could not open file: is a folder, not a file: {root}/inc"),
    Case("missing include folder", setf(res(1, "shader"), include_dirs=["inc", "nope"]),
         "resources[1].shader.include_dirs[1]: include folder not found: {root}/nope"),
    Case("src not a .npy file", setf(res(5, "raw_data"), src="add.spv"),
         "resources[5].raw_data.src: cannot read {root}/add.spv as .npy: not a .npy file (bad magic)"),
    Case("truncated .npy file", both(write_file("cut.npy", b"\x93NUMPY\x01\x00\x76\x00{'descr': '<f4'"),
                                     setf(res(2, "buffer"), src="cut.npy")),
         "resources[2].buffer.src: cannot read {root}/cut.npy as .npy: truncated .npy header"),
    Case("buffer larger than its data", setf(res(2, "buffer"), size=80),
         "resources[2].buffer.size: size mismatch: 80 bytes, but src 'a.npy' holds 40 bytes of data (they must be equal)"),
    Case("buffer smaller than its data", setf(res(3, "buffer"), size=20),
         "resources[3].buffer.size: size mismatch: 20 bytes, but src 'b.npy' holds 40 bytes of data (they must be equal)"),
    Case("tensor data of another shape", both(npy_file("t4.npy", np.zeros(4, np.float32)),
                                              setf(res(7, "tensor"), src="t4.npy")),
         "resources[7].tensor.src: 't4.npy' has shape [4] but dims are [2, 2]"),
    Case("tensor data of another element size", both(npy_file("t8.npy", np.zeros((2, 2), np.uint8)),
                                                     setf(res(7, "tensor"), src="t8.npy")),
         "resources[7].tensor.src: 't8.npy' has 1-byte elements (|u1) but VK_FORMAT_R32_SFLOAT needs 4-byte "
         "elements"),
    # --- ranges and field combinations ---
    Case("buffer barrier past the end", setf(res(10, "buffer_barrier"), offset=16),
         "resources[10].buffer_barrier: offset 16 + size 32 = 48 exceeds the 40 bytes of buffer 'C'"),
    Case("image barrier past the last mip",
         setf(res(11, "image_barrier"), subresource_range={"base_mip_level": 1, "level_count": 2}),
         "resources[11].image_barrier.subresource_range: mip levels 1 to 2 are outside image 'I', which has 2 "
         "mip levels"),
    Case("image barrier on a second array layer", setf(res(11, "image_barrier"),
                                                       subresource_range={"base_array_layer": 1}),
         "resources[11].image_barrier.subresource_range: array layers 1 to 1 are outside image 'I', which has 1 "
         "array layer"),
    Case("binding a mip level the image lacks",
         lambda d, r: d["commands"][1]["dispatch_compute"]["bindings"][0].update(lod=2),
         "commands[1].dispatch_compute.bindings[0].lod: Requested level of details for the Image is greater than configured mipmaps: image 'I' has 2 mip levels, so lod must be below 2, got 2"),
    Case("two sources in one memory group", both(setf(res(14, "buffer"), src="a.npy", size=40),
                                                 setf(res(15, "buffer"), src="b.npy", size=40)),
         "resources[15].buffer.src: memory group 'shared' already takes its initial data from "
         "resources[14].buffer.src; only one resource of a group may have a src"),
    Case("memory group named twice", setf(res(14, "buffer"), memory_group={"uid": "shared", "id": "shared"}),
         "resources[14].buffer.memory_group: name the group with 'uid' or 'id', not both"),
    Case("GLSL entry point other than main", setf(res(1, "shader"), entry="compute_main"),
         "resources[1].shader.entry: a GLSL shader's entry point must be 'main', got 'compute_main'"),
    Case("custom border color without a custom border_color", setf(res(6, "image"), border_color="INT_OPAQUE_BLACK"),
         "resources[6].image.custom_border_color: needs border_color FLOAT_CUSTOM_EXT or INT_CUSTOM_EXT, got "
         "INT_OPAQUE_BLACK"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_invalid_scenario(root: Path, case: Case) -> None:
    doc = full_document()
    case.mutate(doc, root)
    path = save(root, doc)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    expected = case.expected.replace("{root}", str(root))
    assert str(info.value) == f"{path}: {expected}"
    assert info.value.exit_code == 2
    assert info.value.file == str(path)


def test_cases_are_distinct() -> None:
    assert len(CASES) >= 25
    assert len({c.name for c in CASES}) == len(CASES)
    assert len({c.expected for c in CASES}) == len(CASES)


# ---------------------------------------------------------------------------------------------------------
# The validated-document cache
# ---------------------------------------------------------------------------------------------------------

PROBE = """
import json, sys
from pathlib import Path
from vkcore.scenario.validate import validate_document
path = Path(sys.argv[1])
validate_document(json.loads(path.read_text()), path)
print(json.dumps({"jsonschema": "jsonschema" in sys.modules}))
"""


def probe(path: Path, cache: Path) -> bool:
    """Validate ``path`` in a fresh interpreter; return whether jsonschema was imported."""
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "VKCAP_CACHE_DIR": str(cache), "PYTHONPATH": pythonpath}
    out = subprocess.run([sys.executable, "-c", PROBE, str(path)], capture_output=True, text=True, env=env,
                         cwd=REPO, check=True).stdout
    return bool(json.loads(out.splitlines()[-1])["jsonschema"])


def test_cache_skips_the_schema_pass_and_notices_changes(root: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    path = save(root, full_document())
    assert probe(path, cache) is True  # first time: schema pass
    assert len(list((cache / "validated").iterdir())) == 1
    assert probe(path, cache) is False  # same document: jsonschema not even imported
    changed = full_document()
    changed["resources"][4]["buffer"]["dst"] = "other.npy"
    assert probe(save(root, changed), cache) is True  # a changed document is validated again
    assert len(list((cache / "validated").iterdir())) == 2


def test_import_does_not_import_jsonschema() -> None:
    code = "import sys, vkcore.scenario.validate; print('jsonschema' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "False"


def test_cached_document_still_gets_semantic_checks(root: Path, monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    monkeypatch.setenv("VKCAP_CACHE_DIR", str(tmp_path / "cache"))
    doc = full_document()
    path = save(root, doc)
    validate_document(doc, path)
    (root / "a.npy").unlink()  # same document, but an input file disappeared
    with pytest.raises(ScenarioError, match="file not found"):
        validate_document(doc, path)


def test_invalid_documents_are_not_cached(root: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VKCAP_CACHE_DIR", str(tmp_path / "cache"))
    doc = full_document()
    doc["resources"][2]["buffer"]["size"] = -1
    with pytest.raises(ScenarioError):
        validate_document(doc, save(root, doc))
    assert not (tmp_path / "cache" / "validated").exists()


def test_unwritable_cache_never_fails_validation(root: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("VKCAP_CACHE_DIR", str(blocker / "cache"))  # mkdir fails: a file is in the way
    doc = full_document()
    assert validate_document(doc, save(root, doc)) is None
    assert validate_document(doc, save(root, doc)) is None
    assert blocker.is_file() and blocker.read_bytes() == b""  # left as it was, nothing made under it
    bad = copy.deepcopy(doc)
    bad["resources"][2]["buffer"]["size"] = -1
    with pytest.raises(ScenarioError, match="size"):  # still checked: nothing was cached as valid
        validate_document(bad, save(root, bad))


def test_cache_location(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VKCAP_CACHE_DIR", str(tmp_path / "x"))
    assert cache_dir() == tmp_path / "x" / "validated"
    monkeypatch.delenv("VKCAP_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "vkcap" / "validated"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "vkcap" / "validated"


# ---------------------------------------------------------------------------------------------------------
# Random mutations only ever raise ScenarioError (from validation or the model builder)
# ---------------------------------------------------------------------------------------------------------

FIELD_NAMES = sorted({k for item in full_document()["resources"] + full_document()["commands"]
                      for body in item.values() for k in body} | {"memory_group", "alias_target", "lod", "frame_id"})
UIDS = ["add", "pcs", "A", "B", "C", "P", "I", "T", "G", "mb", "bb", "ib", "tb", "GP", "D", "E", "nope"]
ENUM_VALUES = ["readonly", "image_read", "SPIR-V", "GLSL", "VK_FORMAT_R32_SFLOAT", "compute", "ALL", "general",
               "FLOAT_CUSTOM_EXT", "INT_CUSTOM_EXT", "a.npy", "t.npy", "pc.npy", "inc", "/", "main"]

scalars = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.integers(-2, 100)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=6)
           | st.sampled_from(UIDS + ENUM_VALUES + FIELD_NAMES))
json_values = st.deferred(lambda: scalars | st.lists(json_values, max_size=3)
                          | st.dictionaries(st.sampled_from(FIELD_NAMES) | st.text(max_size=5), json_values, max_size=3))


def containers(node: Any, parts: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths of every dict and list inside ``node`` (``()`` is the root)."""
    found = []
    if isinstance(node, (dict, list)):
        found.append(parts)
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, child in items:
            found.extend(containers(child, parts + (key,)))
    return found


def at(node: Any, parts: tuple[Any, ...]) -> Any:
    for p in parts:
        node = node[p]
    return node


values = st.one_of(scalars, json_values)  # plain scalars half of the time: they get past the schema more often


@st.composite
def mutated_documents(draw: st.DrawFn) -> Doc:
    """The full document after 1 to 3 random edits (replace, delete, insert or duplicate a value)."""
    doc = full_document()
    for _ in range(draw(st.integers(1, 3))):
        target = at(doc, draw(st.sampled_from(containers(doc))))
        op = draw(st.sampled_from(["replace", "delete", "insert", "duplicate"]))
        if isinstance(target, dict):
            keys = sorted(target)
            if op == "insert" or not keys:
                target[draw(st.sampled_from(FIELD_NAMES) | st.text(max_size=5))] = draw(values)
            elif op == "delete":
                del target[draw(st.sampled_from(keys))]
            else:
                target[draw(st.sampled_from(keys))] = draw(values)
        else:
            if op == "insert" or not target:
                target.insert(draw(st.integers(0, len(target))), draw(values))
            elif op == "delete":
                del target[draw(st.integers(0, len(target) - 1))]
            elif op == "duplicate":
                target.append(copy.deepcopy(target[draw(st.integers(0, len(target) - 1))]))
            else:
                target[draw(st.integers(0, len(target) - 1))] = draw(values)
    return doc


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(doc=mutated_documents())
def test_random_mutations_only_raise_scenario_errors(root: Path, doc: Doc) -> None:
    path = save(root, doc, "mutated.json")
    try:
        load_scenario(path)
    except ScenarioError as err:
        assert err.exit_code == 2
        assert err.file == str(path)
