"""The VGF reader (vkcore.graphs.vgf) and ``vkcap vgf``.

Real files come from ARM's ``model-converter`` run on the TOSA MLIR texts in ``tests/tosa`` (skipped where
the converter is not installed: it ships for CPython 3.11 only). Synthetic files, with every field the
converter does not write (push constants, alias groups, samplers, explicit set indexes, placeholders, HLSL,
legacy constant sections, older versions), come from a small FlatBuffers writer below whose vtable slots are
written out by hand, independently of the reader's schema table. Hostile files: random bytes, every
truncation, huge offsets and counts, wrong versions, random byte flips: always a VgfError, quickly, with no
large allocation.
"""
from __future__ import annotations

import base64
import json
import re
import struct
import sys
import time
import tracemalloc
from pathlib import Path

import flatbuffers
import pytest

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.vkharness import convert_model
from vkcore.errors import EXIT_BAD_INPUT, VkcapError
from vkcore.graphs.vgf import (
    CodeKind, ModuleType, ResourceCategory, VgfError, VgfVersion, parse_vgf, read_vgf,
)

TOSA = Path(__file__).parent / "tosa"
SPIRV_MAGIC = 0x07230203
OP_GRAPH_CONSTANT_ARM = 4181  # SPV_ARM_graph: OpGraphConstantARM <result type> <result id> <GraphConstantID>
VK_FORMAT_R8_SINT = 14
VK_FORMAT_R32_SFLOAT = 100
VK_FORMAT_R32G32B32A32_SFLOAT = 109
VK_DESCRIPTOR_TYPE_STORAGE_IMAGE = 3
VK_DESCRIPTOR_TYPE_TENSOR_ARM = 1000460000
NONE32 = 0xFFFFFFFF


# --- model-converter ----------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def vgfs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every tests/tosa/*.mlir converted to VGF: {stem: path}."""
    out = tmp_path_factory.mktemp("vgf")
    return {mlir.stem: convert_model(mlir, out / f"{mlir.stem}.vgf") for mlir in sorted(TOSA.glob("*.mlir"))}


def _mlir_attrs(name: str) -> dict:
    """The implementation_attrs JSON of the custom op in tests/tosa/<name>.mlir."""
    text = (TOSA / f"{name}.mlir").read_text()
    literal = re.search(r'implementation_attrs = ("(?:[^"\\]|\\.)*")', text)
    assert literal, name
    return json.loads(json.loads(literal.group(1)))


def _mlir_constant(name: str, value: str) -> tuple[bytes, list[int]]:
    """Bytes and shape of the hex dense constant %<value> in tests/tosa/<name>.mlir."""
    text = (TOSA / f"{name}.mlir").read_text()
    m = re.search(rf'%{value} = "tosa.const"\(\) {{values = dense<"0x([0-9A-F]+)"> : tensor<([0-9x]+)xf32>}}', text)
    assert m, value
    return bytes.fromhex(m.group(1)), [int(d) for d in m.group(2).split("x")]


def _spirv_graph_constant_ids(code: bytes) -> list[int]:
    words = struct.unpack(f"<{len(code) // 4}I", code)
    assert words[0] == SPIRV_MAGIC
    ids, at = [], 5
    while at < len(words):
        count, opcode = words[at] >> 16, words[at] & 0xFFFF
        if opcode == OP_GRAPH_CONSTANT_ARM:
            ids.append(words[at + 3])
        at += max(count, 1)
    return sorted(ids)


def _tensor_inputs(vgf, shape: list[int], count: int) -> None:
    assert len(vgf.inputs) == count
    for b in vgf.inputs:
        r = vgf.resources[b.resource_index]
        assert r.category is ResourceCategory.INPUT
        assert r.format == VK_FORMAT_R32_SFLOAT and r.format_name == "VK_FORMAT_R32_SFLOAT"
        assert list(r.shape) == shape
        assert r.descriptor_type == VK_DESCRIPTOR_TYPE_TENSOR_ARM
        assert r.strides is None and r.alias_group is None


def _single_output(vgf, shape: list[int]):
    (out,) = vgf.outputs
    r = vgf.resources[out.resource_index]
    assert r.category is ResourceCategory.OUTPUT and r.format == VK_FORMAT_R32_SFLOAT and list(r.shape) == shape
    return out


def test_add(vgfs: dict[str, Path]) -> None:
    vgf = read_vgf(vgfs["add"])
    assert vgf.version >= VgfVersion(0, 3, 0) and vgf.path == vgfs["add"]
    (module,) = vgf.modules
    assert module.type is ModuleType.GRAPH and module.code_kind is CodeKind.SPIRV
    assert isinstance(module.code, bytes) and module.code_size == len(module.code) and len(module.code) % 4 == 0
    assert int.from_bytes(module.code[:4], "little") == SPIRV_MAGIC
    (seg,) = vgf.segments
    assert seg.type is ModuleType.GRAPH and vgf.module_of(seg) is module
    _tensor_inputs(vgf, [1, 4, 4, 2], 2)
    out = _single_output(vgf, [1, 4, 4, 2])
    assert [b.name for b in vgf.inputs] == ["input_0", "input_1"] and out.name == "output_0"
    # what a scenario's dispatch_graph binds: set 0, one binding per model input/output
    (dset,) = seg.descriptor_sets
    assert dset.set_index == 0
    assert {b.binding: b.resource_index for b in dset.bindings} == {b: r.index for b, r in vgf.bindings.items()}
    assert all(b.descriptor_type == VK_DESCRIPTOR_TYPE_TENSOR_ARM for b in dset.bindings)
    assert vgf.constants == () and seg.constant_bindings == () and seg.push_constant_ranges == ()


def test_maxpool(vgfs: dict[str, Path]) -> None:
    vgf = read_vgf(vgfs["maxpool"])
    assert [s.type for s in vgf.segments] == [ModuleType.GRAPH]
    _tensor_inputs(vgf, [1, 4, 4, 2], 1)
    _single_output(vgf, [1, 2, 2, 2])
    assert vgf.constants == ()


def test_conv2d_constants(vgfs: dict[str, Path]) -> None:
    vgf = read_vgf(vgfs["conv2d"])
    (seg,) = vgf.segments
    _tensor_inputs(vgf, [1, 4, 4, 2], 1)
    _single_output(vgf, [1, 4, 4, 20])
    weights, wshape = _mlir_constant("conv2d", "weights")
    bias, bshape = _mlir_constant("conv2d", "bias")
    assert len(vgf.constants) == 2
    by_shape = {tuple(vgf.resource_of(c).shape): c for c in vgf.constants}
    assert set(by_shape) == {tuple(wshape), tuple(bshape)}
    for data, shape in ((weights, wshape), (bias, bshape)):
        c = by_shape[tuple(shape)]
        r = vgf.resource_of(c)
        assert r.category is ResourceCategory.CONSTANT and r.format == VK_FORMAT_R32_SFLOAT and r.descriptor_type is None
        assert c.size == len(data) == r.packed_nbytes and c.sparsity_dimension is None
        assert c.read() == data
    # graph constant ids: bound by the segment, and the ids the SPIR-V graph declares
    assert seg.explicit_constant_ids
    assert sorted(cb.constant_index for cb in seg.constant_bindings) == [0, 1] == sorted(seg.constants)
    ids = sorted(cb.graph_constant_id for cb in seg.constant_bindings)
    assert ids == _spirv_graph_constant_ids(vgf.module_of(seg).code)
    assert sorted(c.graph_constant_id for c in vgf.constants) == ids


@pytest.mark.parametrize("variant", ["custom_glsl", "custom_spirv"])
def test_custom_shader_between_graphs(vgfs: dict[str, Path], variant: str) -> None:
    vgf = read_vgf(vgfs[variant])
    attrs = _mlir_attrs(variant)
    assert [s.type for s in vgf.segments] == [ModuleType.GRAPH, ModuleType.COMPUTE, ModuleType.GRAPH]
    assert [vgf.module_of(s).type for s in vgf.segments] == [s.type for s in vgf.segments]
    compute = vgf.segments[1]
    shader = vgf.module_of(compute)
    assert shader.entry_point == attrs["entry_point"] == "main"
    if attrs["shader_language"] == "SPIR-V":
        assert shader.code_kind is CodeKind.SPIRV and shader.code == base64.b64decode(attrs["shader_code"])
        assert int.from_bytes(shader.code[:4], "little") == SPIRV_MAGIC
    else:  # model-converter 0.11 stores GLSL as source: the runner compiles it
        assert shader.code_kind is CodeKind.GLSL and shader.code == attrs["shader_code"]
    for s in (vgf.segments[0], vgf.segments[2]):
        assert vgf.module_of(s).code_kind is CodeKind.SPIRV
    assert compute.dispatch_shape == tuple(attrs["workgroup_sizes"])
    # the shader's descriptor set: the custom op's input_0/output_0 bindings, on the intermediate tensors
    (dset,) = compute.descriptor_sets
    assert dset.set_index == attrs["input_0_descriptorset"] == 0
    bound = {b.binding: vgf.resources[b.resource_index] for b in dset.bindings}
    assert set(bound) == {attrs["input_0_binding"], attrs["output_0_binding"]}
    for r in bound.values():
        assert r.category is ResourceCategory.INTERMEDIATE and list(r.shape) == [1, 4, 4, 2]
        assert r.descriptor_type == VK_DESCRIPTOR_TYPE_TENSOR_ARM and r.format_name == attrs["input_0_vkformat"]
    # data flows graph -> shader -> graph through those intermediates
    assert {b.resource_index for b in vgf.segments[0].outputs} == {bound[attrs["input_0_binding"]].index}
    assert {b.resource_index for b in vgf.segments[2].inputs} == {bound[attrs["output_0_binding"]].index}
    _tensor_inputs(vgf, [1, 4, 4, 2], 2)
    _single_output(vgf, [1, 2, 2, 2])
    assert vgf.constants == ()


# --- vkcap vgf ----------------------------------------------------------------------------------------------


def _vkcap_vgf(argv: list[str]) -> int:
    """``vkcap vgf ...`` through the command module (whether or not cli.py has wired it yet)."""
    from vkcap import commands_vgf
    from vkcap.cli import _Parser, _add_common

    parser = _Parser(prog="vkcap")
    commands_vgf.register(parser.add_subparsers(dest="command", parser_class=_Parser), _add_common)
    try:
        args = parser.parse_args(argv)
        return args.handler(args)
    except VkcapError as exc:
        print(f"vkcap: error: {exc.render()}", file=sys.stderr)
        return exc.exit_code


def test_cli_json_custom(vgfs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert _vkcap_vgf(["vgf", str(vgfs["custom_spirv"]), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["file"] == str(vgfs["custom_spirv"]) and doc["version"].startswith("0.")
    assert [m["type"] for m in doc["modules"]] == ["GRAPH", "COMPUTE", "GRAPH"]
    assert [m["code"] for m in doc["modules"]] == ["SPIR-V"] * 3
    assert doc["modules"][1]["entry_point"] == "main" and doc["modules"][1]["code_size"] > 0
    segs = doc["segments"]
    assert [s["type"] for s in segs] == ["GRAPH", "COMPUTE", "GRAPH"] and [s["module"] for s in segs] == [0, 1, 2]
    assert segs[1]["dispatch_shape"] == [4, 4, 2] and segs[1]["push_constant_ranges"] == []
    (dset,) = segs[1]["descriptor_sets"]
    assert dset["set"] == 0 and [b["binding"] for b in dset["bindings"]] == [0, 1]
    assert {b["descriptor_type"] for b in dset["bindings"]} == {"VK_DESCRIPTOR_TYPE_TENSOR_ARM"}
    cats = [r["category"] for r in doc["resources"]]
    assert cats.count("INPUT") == 2 and cats.count("OUTPUT") == 1 and cats.count("INTERMEDIATE") == 2
    for r in doc["resources"]:
        assert r["format"] == "VK_FORMAT_R32_SFLOAT" and r["format_value"] == VK_FORMAT_R32_SFLOAT
        assert r["strides"] is None and r["alias_group"] is None
    assert [i["name"] for i in doc["inputs"]] == ["input_0", "input_1"]
    (out,) = doc["outputs"]
    assert doc["resources"][out["resource"]]["shape"] == [1, 2, 2, 2]
    assert doc["constants"] == []


def test_cli_json_conv2d(vgfs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert _vkcap_vgf(["vgf", str(vgfs["conv2d"]), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    weights, _ = _mlir_constant("conv2d", "weights")
    bias, _ = _mlir_constant("conv2d", "bias")
    assert sorted(c["size"] for c in doc["constants"]) == sorted([len(weights), len(bias)])
    for c in doc["constants"]:
        r = doc["resources"][c["resource"]]
        assert r["category"] == "CONSTANT" and r["descriptor_type"] is None and len(c["graph_constant_ids"]) == 1
        assert c["sparsity_dimension"] is None
    (seg,) = doc["segments"]
    assert sorted(x["graph_constant_id"] for x in seg["constants"]) == sorted(c["graph_constant_ids"][0] for c in doc["constants"])


def test_cli_tree(vgfs: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # no wrapping
    assert _vkcap_vgf(["vgf", str(vgfs["custom_glsl"])]) == 0
    text = capsys.readouterr().out
    for needle in ("modules (3)", "COMPUTE", "GLSL", "segments (3", "dispatch 4 x 4 x 2", "INTERMEDIATE",
                   "R32_SFLOAT", "constants (0)", "input 'input_0': binding 0"):
        assert needle in text, needle


def test_cli_bad_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    junk = tmp_path / "junk.vgf"
    junk.write_bytes(b"GIF89a" + bytes(200))
    assert _vkcap_vgf(["vgf", str(junk), "--json"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"vkcap: error: {junk}: not a VGF file")
    assert _vkcap_vgf(["vgf", str(tmp_path / "missing.vgf")]) == EXIT_BAD_INPUT
    assert "no such file" in capsys.readouterr().err


def test_cli_wired(vgfs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    from vkcap import cli

    assert cli.main(["vgf", str(vgfs["add"]), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["modules"][0]["type"] == "GRAPH"


# --- synthetic files: a hand-slotted FlatBuffers writer -----------------------------------------------------


class _W:
    """Writes VGF tables with explicit vtable slots (from ARM's schema/vgf.fbs, 0.5 fields included)."""

    def __init__(self) -> None:
        self.b = flatbuffers.Builder(1024)

    def obj(self, slots: int, fields: list[tuple[int, str, int]]) -> int:
        b = self.b
        b.StartObject(slots)
        for slot, kind, value in fields:
            if kind == "off":
                b.PrependUOffsetTRelativeSlot(slot, value, 0)
            elif kind == "u8":
                b.PrependUint8Slot(slot, value, value + 1)  # a default unequal to the value: always written
            elif kind == "u32":
                b.PrependUint32Slot(slot, value, (value + 1) % 2**32)
            elif kind == "i64":
                b.PrependInt64Slot(slot, value, value + 1)
            else:
                raise AssertionError(kind)
        return b.EndObject()

    def vec(self, kind: str, items: list[int]) -> int:
        b = self.b
        size = {"u32": 4, "i64": 8, "off": 4, "u8": 1}[kind]
        b.StartVector(size, len(items), max(size, 4))
        for x in reversed(items):
            {"u32": b.PrependUint32, "i64": b.PrependInt64, "off": b.PrependUOffsetTRelative, "u8": b.PrependUint8}[kind](x)
        return b.EndVector()

    def strings(self, items: list[str]) -> int:
        return self.vec("off", [self.b.CreateString(s) for s in items])

    def finish(self, root: int) -> bytes:
        self.b.Finish(root)
        return bytes(self.b.Output())


def _modules_section(modules: list[tuple[int, str, str, int, object]]) -> bytes:
    """(type, name, entry, code type 0..3, payload: list of words / source / None)."""
    w = _W()
    offs = []
    for mtype, name, entry, code_type, payload in modules:
        code = None
        if code_type == 1:
            code = w.obj(1, [(0, "off", w.vec("u32", payload))] if payload is not None else [])
        elif code_type in (2, 3):
            code = w.obj(1, [(0, "off", w.b.CreateString(payload))])
        n, e = w.b.CreateString(name), w.b.CreateString(entry)
        fields = [(0, "u8", mtype), (1, "off", n), (2, "off", e)]
        if code_type:
            fields += [(3, "u8", code_type), (4, "off", code)]
        offs.append(w.obj(5, fields))
    return w.finish(w.obj(1, [(0, "off", w.vec("off", offs))]))


def _resources_section(entries: list[dict]) -> bytes:
    w = _W()
    offs = []
    for e in entries:
        shape = w.vec("i64", e["shape"])
        strides = w.vec("i64", e.get("strides", []))
        desc = w.obj(2, [(0, "off", shape), (1, "off", strides)])
        fields = [(0, "u32", e["dtype"]), (1, "u32", e["format"]), (2, "u8", e["category"]), (3, "off", desc)]
        if "sampler" in e:
            sampler = w.obj(5, [(i, "u32", v) for i, v in enumerate(e["sampler"])])
            fields += [(4, "u8", 1), (5, "off", sampler)]
        if "alias" in e:
            fields.append((6, "u32", e["alias"]))
        offs.append(w.obj(7, fields))
    return w.finish(w.obj(1, [(0, "off", w.vec("off", offs))]))


def _sequence_section(segments: list[dict], inputs: list[tuple[int, int]], outputs: list[tuple[int, int]],
                      names: tuple[list[str], list[str]] | None = None) -> bytes:
    w = _W()

    def slots(pairs: list[tuple[int, int]]) -> int:
        return w.vec("off", [w.obj(2, [(0, "u32", b), (1, "u32", m)]) for b, m in pairs])

    offs = []
    for s in segments:
        sets = []
        for d in s["sets"]:
            fields = [(0, "off", slots(d["bindings"]))]
            if "set" in d:
                fields.append((1, "u32", d["set"]))
            sets.append(w.obj(2, fields))
        set_vec = w.vec("off", sets)
        ins, outs = slots(s["inputs"]), slots(s["outputs"])
        consts = w.vec("u32", s.get("constants", []))
        shape = w.vec("u32", s["dispatch"])
        pcr = w.vec("off", [w.obj(3, [(0, "u32", f), (1, "u32", o), (2, "u32", z)]) for f, o, z in s.get("push", [])])
        name = w.b.CreateString(s["name"])
        fields = [(0, "u8", s["type"]), (1, "off", name), (2, "u32", s["module"]), (3, "off", set_vec),
                  (4, "off", ins), (5, "off", outs), (6, "off", consts), (7, "off", shape), (8, "off", pcr)]
        if "ids" in s:
            fields.append((9, "off", w.vec("off", [w.obj(2, [(0, "u32", g), (1, "u32", c)]) for g, c in s["ids"]])))
        offs.append(w.obj(10, fields))
    seg_vec = w.vec("off", offs)
    ins, outs = slots(inputs), slots(outputs)
    fields = [(0, "off", seg_vec), (1, "off", ins), (2, "off", outs)]
    if names is not None:
        fields += [(3, "off", w.strings(names[0])), (4, "off", w.strings(names[1]))]
    return w.finish(w.obj(5, fields))


def _const00(records: list[tuple[int, int, bytes]]) -> bytes:
    head, payload = b"CONST00\x00" + struct.pack("<Q", len(records)), b""
    meta = b""
    for mrt, sparsity, data in records:
        meta += struct.pack("<IiQQ", mrt, sparsity, len(data), len(payload))
        payload += data + bytes(-len(data) % 8)
    return head + meta + payload


def _legacy_constants(records: list[tuple[int, int, bytes]]) -> bytes:
    w = _W()
    offs = []
    for mrt, sparsity, data in records:
        w.b.StartVector(1, len(data), 8)  # raw: [ubyte] (force_align: 8)
        for x in reversed(data):
            w.b.PrependUint8(x)
        raw = w.b.EndVector()
        offs.append(w.obj(3, [(0, "u32", mrt), (1, "i64", sparsity), (2, "off", raw)]))
    return w.finish(w.obj(1, [(0, "off", w.vec("off", offs))]))


def _assemble(sections: list[bytes], version: tuple[int, int, int] = (0, 5, 0), magic: bytes = b"VGF1",
              vk_header: int = 290) -> bytes:
    body, table, at = b"", b"", 128
    for s in sections:
        table += struct.pack("<QQ", at, len(s))
        pad = bytes(-len(s) % 8)
        body += s + pad
        at += len(s) + len(pad)
    header = magic + struct.pack("<HH", vk_header, 0) + bytes(version) + bytes(5) + table + bytes(48)
    assert len(header) == 128
    return header + body


SPIRV_STUB = [SPIRV_MAGIC, 0x00010600, 0, 8, 0]
C0 = bytes(range(18))  # R8_SINT [9, 2], 2:4 sparse on dimension 1
C1 = struct.pack("<3f", 1.0, 2.0, 3.0)  # R32_SFLOAT [3]


def synthetic(*, legacy_constants: bool = False, ids: bool = True, version: tuple[int, int, int] = (0, 5, 0),
              magic: bytes = b"VGF1", segment_module: int = 0, binding_mrt: int = 1, constant_index: int = 1,
              constant_mrt: int = 4) -> bytes:
    modules = _modules_section([
        (1, "gmod", "gentry", 1, SPIRV_STUB),
        (0, "cmod", "main", 2, "#version 450\nvoid main() {}\n"),
        (0, "pmod", "pentry", 0, None),  # no code at all
        (0, "hmod", "hentry", 3, "[numthreads(1,1,1)] void main() {}"),
        (0, "emod", "eentry", 1, None),  # SPIR-V without words: a placeholder too
    ])
    resources = _resources_section([
        {"dtype": VK_DESCRIPTOR_TYPE_TENSOR_ARM, "format": VK_FORMAT_R32_SFLOAT, "category": 0, "shape": [1, 2, 3, 4],
         "strides": [96, 48, 16, 4], "alias": 7},
        {"dtype": VK_DESCRIPTOR_TYPE_TENSOR_ARM, "format": VK_FORMAT_R8_SINT, "category": 1, "shape": [8], "alias": 0},
        {"dtype": VK_DESCRIPTOR_TYPE_STORAGE_IMAGE, "format": VK_FORMAT_R32G32B32A32_SFLOAT, "category": 2,
         "shape": [1, 8, 8, 4], "sampler": [1, 0, 3, 2, 5]},
        {"dtype": NONE32, "format": VK_FORMAT_R8_SINT, "category": 3, "shape": [9, 2]},
        {"dtype": NONE32, "format": VK_FORMAT_R32_SFLOAT, "category": 3, "shape": [3]},
    ])
    seg0 = {"type": 1, "name": "seg0", "module": segment_module, "dispatch": [1, 2, 3],
            "sets": [{"set": 5, "bindings": [(11, 0), (12, binding_mrt)]}, {"bindings": [(13, 2)]}],
            "inputs": [(11, 0)], "outputs": [(12, 1)], "constants": [0, constant_index], "push": [(0x20, 4, 16)]}
    if ids:
        seg0["ids"] = [(42, 0), (7, constant_index)]
    seg1 = {"type": 0, "name": "seg1", "module": 2, "dispatch": [4, 5, 6], "sets": [{"set": 0, "bindings": [(0, 1), (1, 2)]}],
            "inputs": [(0, 1)], "outputs": [(1, 2)]}
    sequence = _sequence_section([seg0, seg1], [(11, 0)], [(12, 1)], (["in0"], ["out0"]))
    records = [(3, 1, C0), (constant_mrt, -1, C1)]
    constants = _legacy_constants(records) if legacy_constants else _const00(records)
    return _assemble([modules, sequence, resources, constants], version=version, magic=magic)


@pytest.mark.parametrize("legacy", [False, True], ids=["CONST00", "legacy-flatbuffer-constants"])
def test_synthetic_everything(legacy: bool) -> None:
    vgf = parse_vgf(synthetic(legacy_constants=legacy), "synthetic.vgf")
    assert vgf.version == (0, 5, 0) and vgf.vk_header_version == 290 and vgf.path is None
    kinds = [(m.type, m.code_kind) for m in vgf.modules]
    assert kinds == [
        (ModuleType.GRAPH, CodeKind.SPIRV), (ModuleType.COMPUTE, CodeKind.GLSL), (ModuleType.COMPUTE, CodeKind.PLACEHOLDER),
        (ModuleType.COMPUTE, CodeKind.HLSL), (ModuleType.COMPUTE, CodeKind.PLACEHOLDER),
    ]
    assert vgf.modules[0].code == struct.pack("<5I", *SPIRV_STUB) and vgf.modules[0].entry_point == "gentry"
    assert vgf.modules[1].code == "#version 450\nvoid main() {}\n" and vgf.modules[1].entry_point == "main"
    assert vgf.modules[2].code is None and vgf.modules[2].is_placeholder and vgf.modules[2].code_size is None
    assert vgf.modules[3].code.startswith("[numthreads")

    r = vgf.resources
    assert r[0].category is ResourceCategory.INPUT and r[0].strides == (96, 48, 16, 4) and r[0].alias_group == 7
    assert r[1].category is ResourceCategory.OUTPUT and r[1].alias_group == 0 and r[1].format_name == "VK_FORMAT_R8_SINT"
    assert r[2].category is ResourceCategory.INTERMEDIATE and r[2].alias_group is None
    assert r[2].sampler is not None and (r[2].sampler.min_filter, r[2].sampler.address_mode_u, r[2].sampler.border_color) == (1, 3, 5)
    assert r[3].category is ResourceCategory.CONSTANT and r[3].descriptor_type is None and r[3].sampler is None

    s0, s1 = vgf.segments
    assert (s0.type, s0.module_index, s0.dispatch_shape) == (ModuleType.GRAPH, 0, (1, 2, 3))
    assert [(d.set_index, d.explicit) for d in s0.descriptor_sets] == [(5, True), (1, False)]  # unset: its position
    assert [(b.binding, b.resource_index, b.descriptor_type) for b in s0.descriptor_sets[1].bindings] == [
        (13, 2, VK_DESCRIPTOR_TYPE_STORAGE_IMAGE)]
    assert [(p.stage_flags, p.offset, p.size) for p in s0.push_constant_ranges] == [(0x20, 4, 16)]
    assert [(c.graph_constant_id, c.constant_index) for c in s0.constant_bindings] == [(42, 0), (7, 1)]
    assert s0.explicit_constant_ids and s1.constant_bindings == () and s1.type is ModuleType.COMPUTE
    assert vgf.module_of(s1).is_placeholder

    c0, c1 = vgf.constants
    assert (c0.resource_index, c0.sparsity_dimension, c0.size, c0.graph_constant_id) == (3, 1, 18, 42)
    assert (c1.resource_index, c1.sparsity_dimension, c1.size, c1.graph_constant_ids) == (4, None, 12, (7,))
    assert c0.read() == C0 and c1.read() == C1
    assert [(b.binding, b.resource_index, b.name) for b in vgf.inputs] == [(11, 0, "in0")]
    assert {k: v.index for k, v in vgf.bindings.items()} == {11: 0, 12: 1}
    doc = vgf.to_dict()
    json.dumps(doc)
    assert doc["segments"][0]["push_constant_ranges"] == [{"stage_flags": 32, "stages": "COMPUTE", "offset": 4, "size": 16}]
    assert doc["resources"][2]["sampler"]["border_color"] == "VK_BORDER_COLOR_INT_OPAQUE_WHITE"
    assert doc["resources"][0]["alias_group"] == 7 and doc["resources"][3]["descriptor_type"] is None


def test_older_files() -> None:
    """0.3/0.4 files: old magic, no constant bindings (graph constant id = constant index), legacy constants."""
    vgf = parse_vgf(synthetic(ids=False, legacy_constants=True, version=(0, 3, 0), magic=bytes((0xC3, 0xD2, 0xE1, 0xF0))))
    assert vgf.version == (0, 3, 0)
    s0 = vgf.segments[0]
    assert not s0.explicit_constant_ids and [(c.graph_constant_id, c.constant_index) for c in s0.constant_bindings] == [(0, 0), (1, 1)]
    assert [c.graph_constant_id for c in vgf.constants] == [0, 1] and vgf.constants[0].read() == C0
    assert parse_vgf(synthetic(version=(0, 4, 3))).version == (0, 4, 3)


def test_read_from_file_is_lazy(tmp_path: Path) -> None:
    path = tmp_path / "s.vgf"
    path.write_bytes(synthetic())
    vgf = read_vgf(path)
    assert vgf.path == path and vgf.constants[1].read() == C1
    path.write_bytes(path.read_bytes()[:200])  # the file changed under us: a clear error, not garbage
    with pytest.raises(VgfError, match="truncated"):
        vgf.constants[1].read()


@pytest.mark.parametrize("kwargs, place, message", [
    ({"segment_module": 9}, "segments[0].module_index", "module index 9 is out of range"),
    ({"segment_module": 1}, "segments[0].module_index", "a GRAPH segment runs module 1, which is a COMPUTE module"),
    ({"binding_mrt": 99}, "segments[0].set_infos[0].bindings[1].mrt_index", "resource index 99 is out of range"),
    ({"constant_index": 5}, "segments[0].constants[1]", "constant index 5 is out of range"),
    ({"constant_mrt": 0}, "constants[1]", "its resource 0 is INPUT, not CONSTANT"),
    ({"constant_mrt": 3}, "constants[1]", "holds 12 bytes but its resource 3"),
])
def test_inconsistent_tables(kwargs: dict, place: str, message: str) -> None:
    with pytest.raises(VgfError) as info:
        parse_vgf(synthetic(**kwargs), "bad.vgf")
    assert place in info.value.render() and message in info.value.render()
    assert info.value.exit_code == EXIT_BAD_INPUT


# --- hostile files ------------------------------------------------------------------------------------------


def _bounded(data: bytes, *, measure_memory: bool = True) -> VgfError | None:
    """Parse; any failure must be a VgfError, in bounded time and memory."""
    if measure_memory:
        tracemalloc.start()
    t0 = time.perf_counter()
    try:
        vgf = parse_vgf(data)
        vgf.to_dict()
        for c in vgf.constants:
            assert len(c.read()) == c.size
        return None
    except VgfError as exc:
        return exc
    finally:
        elapsed = time.perf_counter() - t0
        assert elapsed < 2.0, f"took {elapsed:.2f} s"
        if measure_memory:
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            assert peak < 4 * len(data) + (2 << 20), f"peak {peak} bytes for a {len(data)}-byte file"


def test_not_a_vgf() -> None:
    for data in (b"", b"VG", b"\x89PNG\r\n\x1a\n" + bytes(300), bytes(4096)):
        with pytest.raises(VgfError, match="not a VGF file"):
            parse_vgf(data)


def test_every_truncation() -> None:
    data = synthetic()
    for n in range(len(data)):
        exc = _bounded(data[:n])
        assert exc is not None, n
        assert ("truncated" in str(exc)) if n >= 4 else ("not a VGF" in str(exc)), (n, str(exc))


def test_every_truncation_of_real_files(vgfs: dict[str, Path]) -> None:
    for path in vgfs.values():
        data = path.read_bytes()
        for n in range(0, len(data), 7):
            assert _bounded(data[:n]) is not None, (path.name, n)


@pytest.mark.parametrize("version", [(0, 2, 9), (0, 6, 0), (1, 0, 0), (255, 255, 255)])
def test_unsupported_version(version: tuple[int, int, int]) -> None:
    exc = _bounded(synthetic(version=version))
    assert exc is not None and f"unsupported VGF format version {'.'.join(map(str, version))}" in str(exc)


@pytest.mark.parametrize("section", range(4))
@pytest.mark.parametrize("field, value, message", [
    (0, 2**63, "past the end of the file"),
    (0, 2**64 - 1, "past the end of the file"),
    (1, 2**63, "runs past the end of the file"),
    (0, 64, "inside the 128-byte header"),
])
def test_huge_or_bad_section_offsets(section: int, field: int, value: int, message: str) -> None:
    data = bytearray(synthetic())
    struct.pack_into("<Q", data, 16 + 16 * section + 8 * field, value)
    exc = _bounded(bytes(data))
    assert exc is not None and message in str(exc)


def _section(data: bytes, i: int) -> tuple[int, int]:
    return struct.unpack_from("<QQ", data, 16 + 16 * i)


def test_huge_counts() -> None:
    data = bytearray(synthetic())
    off, _ = _section(data, 3)
    struct.pack_into("<Q", data, off + 8, 2**62)  # CONST00 count
    exc = _bounded(bytes(data))
    assert exc is not None and "declares 4611686018427387904 constants" in str(exc)

    data = bytearray(synthetic())
    off, _ = _section(data, 0)
    root = off + struct.unpack_from("<I", data, off)[0]
    vtable = root - struct.unpack_from("<i", data, root)[0]
    field = root + struct.unpack_from("<H", data, vtable + 4)[0]
    vec = field + struct.unpack_from("<I", data, field)[0]
    struct.pack_into("<I", data, vec, 0x7FFFFFFF)  # the modules vector claims 2^31 - 1 entries
    exc = _bounded(bytes(data))
    assert exc is not None and "module table modules" in str(exc) and "outside the section" in str(exc)

    data = bytearray(synthetic())
    off, _ = _section(data, 3)
    struct.pack_into("<Q", data, off + 16 + 8, 2**40)  # constant 0's size
    exc = _bounded(bytes(data))
    assert exc is not None and "constants[0]" in str(exc)


def test_read_vgf_errors(tmp_path: Path) -> None:
    with pytest.raises(VgfError, match="no such file"):
        read_vgf(tmp_path / "nope.vgf")
    with pytest.raises(VgfError, match="directory"):
        read_vgf(tmp_path)


_FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_FUZZ
@given(st.binary(max_size=600))
def test_fuzz_random_bytes(data: bytes) -> None:
    assert _bounded(data) is not None


@_FUZZ
@given(st.binary(min_size=124, max_size=600))
def test_fuzz_random_after_a_valid_magic_and_version(rest: bytes) -> None:
    _bounded(b"VGF1" + bytes(4) + bytes((0, 5, 0)) + rest)


@pytest.mark.slow
@_FUZZ
@given(st.lists(st.tuples(st.integers(min_value=0), st.integers(min_value=0, max_value=255)), min_size=1, max_size=12),
       st.booleans())
def test_fuzz_byte_flips(flips: list[tuple[int, int]], legacy: bool) -> None:
    data = bytearray(synthetic(legacy_constants=legacy))
    for pos, value in flips:
        data[128 + pos % (len(data) - 128)] = value  # the header has its own tests: flip table bytes
    _bounded(bytes(data))


@pytest.mark.slow
def test_real_file_byte_flips(vgfs: dict[str, Path]) -> None:
    """Every table byte of a real file set to 0xFF, then to 0x7F, one at a time: VgfError or a valid read."""
    data = vgfs["custom_glsl"].read_bytes()
    end = max(o + s for o, s in (_section(data, i) for i in range(3)))
    for pos in range(128, end, 3):
        for value in (0xFF, 0x7F):
            flipped = bytearray(data)
            flipped[pos] = value
            _bounded(bytes(flipped), measure_memory=False)
