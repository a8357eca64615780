"""Untrusted SPIR-V: validated before a driver sees it, its limits checked, its constants typed.

- A module ``spirv-val`` rejects (one flipped byte used to be SIGSEGV or exit 1 naming nothing) is one
  line naming the scenario (or the trace) and the shader's place, exit 2, nothing written.
- Shared memory beyond ``maxComputeSharedMemorySize`` (``shared float big[1 << 30]`` was SIGSEGV) is one
  line naming the shader and the limit, exit 2.
- Specialization constants are packed as the type the module declares; a value that does not fit is
  refused naming the constant (``resources[i].shader.specialization_constants[j]``).
- Reflection of damaged words never raises anything but :class:`SpirvError` and always ends.
"""
from __future__ import annotations

import hashlib
import json
import math
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import ScenarioBuilder, vkcap
from vkcore.shaders import spirv_validate
from vkcore.shaders.spirv import SpecConstantType, SpirvError, reflect
from vkcore.shaders.specialization import encode, encode_undeclared, pack, UnfitConstant

FAST = settings(deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))

# out[i] = BIAS + (workgroup size as a float), every invocation of one workgroup.
TYPED = """#version 450
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const float BIAS = 0.0;
layout(constant_id = 2) const bool FLAG = false;
layout(constant_id = 3) const uint64_t BIG = 0;
layout(set = 0, binding = 0) buffer Out { float o[]; };
void main() { o[gl_LocalInvocationID.x] = BIAS + float(gl_WorkGroupSize.x) + (FLAG ? 1000.0 : 0.0) + float(BIG > 0ul ? 1 : 0); }
"""
SHARED = """#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer Out { float o[]; };
shared float big[SIZE];
void main() { big[0] = 1.0; barrier(); o[0] = big[0]; }
"""


def snapshot(folder: Path) -> dict[str, tuple[int, int, str]]:
    """Every file under ``folder``: size, mtime, content hash."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(folder.rglob("*")) if p.is_file()}


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in proc.stderr and len([ln for ln in lines if "error" in ln]) == 1, proc.stderr
    return next(ln for ln in lines if "error" in ln)


@pytest.fixture(scope="module")
def typed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    """A scenario of the typed shader (stored as SPIR-V), and that SPIR-V."""
    b = ScenarioBuilder(tmp_path_factory.mktemp("typed") / "scenario")
    source = b.file("typed.comp", TYPED)
    spv = b.root / "typed.spv"
    subprocess.run(["glslangValidator", "-V", "--target-env", "vulkan1.3", "--quiet", "-o", str(spv), str(source)], check=True)
    b.resource("shader", uid="s", src="typed.spv", type="SPIR-V",
               specialization_constants=[{"id": 0, "value": 4}, {"id": 1, "value": 0.5}])
    b.buffer("o", 64, dst="o.npy")
    b.dispatch("s", [(0, 0, "o")], [1])
    b.save()
    return b.root, spv.read_bytes()


def with_constants(root: Path, constants: list[dict[str, object]], name: str) -> Path:
    document = json.loads((root / "scenario.json").read_text())
    document["resources"][0]["shader"]["specialization_constants"] = constants
    target = root / name
    target.write_text(json.dumps(document))
    return target


# --- spirv-val before the driver ---------------------------------------------------------------------

def test_the_validator_is_the_wheels_and_knows_arm() -> None:
    validator = spirv_validate.find_validator()
    assert validator is not None and validator.knows_arm, validator


def rejected_flip(code: bytes, k: int) -> bytes:
    """The ``k``-th one-byte change (every 13th byte from the header on, inverted) that spirv-val rejects."""
    found = 0
    for offset in range(20, len(code), 13):
        damaged = bytearray(code)
        damaged[offset] ^= 0xFF
        if spirv_validate.validate(bytes(damaged)) is not None:
            if found == k:
                return bytes(damaged)
            found += 1
    raise AssertionError("no rejected flip")


@pytest.mark.slow
@pytest.mark.device
@pytest.mark.parametrize("k", range(3))
def test_a_module_with_one_flipped_byte_is_one_line_and_exit_2(typed: tuple[Path, bytes], tmp_path: Path, k: int) -> None:
    """Bytes the validator rejects (each was exit 1 naming no file, or SIGSEGV): exit 2, the scenario and
    the shader's place named with the validator's message, nothing written or changed."""
    root, code = typed
    work = tmp_path / "w"
    work.mkdir()
    (work / "scenario.json").write_text((root / "scenario.json").read_text())
    (work / "typed.spv").write_bytes(rejected_flip(code, k))
    before = snapshot(work)
    proc = vkcap("run", work / "scenario.json")
    assert proc.returncode == 2, proc.stderr
    line = one_error_line(proc)
    assert f"{work / 'scenario.json'}: resources[0].shader: shader 's': invalid SPIR-V (spirv-val: " in line, line
    assert snapshot(work) == before


def with_module(source: Path, target: Path, code: bytes) -> None:
    """A copy of trace ``source`` whose shader file and stored SPIR-V are ``code`` (record by record)."""
    from capture.reader import TraceReader
    from capture.writer import TraceWriter

    with TraceReader(source) as reader, TraceWriter(target) as writer:
        for key in reader.blob_keys():
            writer.write_prepared(reader.read_prepared(key))
        key = writer.put_blob(code)
        for _, body in reader.metas():
            kind = body.pop("kind")
            if kind == "spirv" or (kind == "file" and str(body.get("name", "")).endswith(".spv")):
                body = {**body, "blob": key, **({"size": len(code)} if kind == "file" else {})}
            writer.add_meta(kind, body)


@pytest.mark.slow
@pytest.mark.device
def test_replay_validates_the_traces_own_modules(typed: tuple[Path, bytes], tmp_path: Path) -> None:
    """A trace whose stored module is damaged: replay exits 2 with one line naming the trace and the
    shader; so does the same trace's module given by --replace-shader (the user's file named)."""
    root, code = typed
    trace, damaged = tmp_path / "t.vkt", tmp_path / "damaged.vkt"
    proc = vkcap("record", root / "scenario.json", "-o", trace, "--output", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    bad = rejected_flip(code, 0)
    with_module(trace, damaged, bad)
    before = snapshot(tmp_path)
    proc = vkcap("replay", damaged)
    assert proc.returncode == 2, proc.stderr
    line = one_error_line(proc)
    assert f"{damaged}: resources[0].shader: shader 's': invalid SPIR-V (spirv-val: " in line, line
    assert snapshot(tmp_path) == before
    (tmp_path / "bad.spv").write_bytes(bad)
    before = snapshot(tmp_path)
    proc = vkcap("replay", trace, "--replace-shader", f"s={tmp_path / 'bad.spv'}")
    assert proc.returncode == 2, proc.stderr
    line = one_error_line(proc)
    assert f"{trace}: resources[0].shader: with --replace-shader s={tmp_path / 'bad.spv'}: shader 's': invalid SPIR-V" in line, line
    assert snapshot(tmp_path) == before


@pytest.mark.slow
@pytest.mark.device
def test_a_damaged_fragment_module_is_refused_before_the_driver(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """Graphics stages take the same path: a fragment shader given as SPIR-V with one rejected byte is
    one line naming the scenario and the fragment shader's place, exit 2, nothing written."""
    from tests.test_fragment import FULL_SCREEN, GRADIENT, draw, target

    source = builder.file("fs.frag", GRADIENT)
    spv = builder.root / "fs.spv"
    subprocess.run(["glslangValidator", "-V", "--target-env", "vulkan1.3", "--quiet", "-o", str(spv), str(source)], check=True)
    spv.write_bytes(rejected_flip(spv.read_bytes(), 0))
    builder.shader("vs", FULL_SCREEN, file="vs.vert", stage="vertex")
    builder.resource("shader", uid="fs", src="fs.spv", type="SPIR-V", stage="fragment", push_constants_size=16)
    builder.raw("tint", np.ones(4, np.float32))
    target(builder, dst="out.dds")
    draw(builder, color_attachment_refs=["out"], push_data_ref="tint")
    scenario = builder.save()
    before = snapshot(builder.root)
    proc = vkcap("run", scenario, "--output", tmp_path / "out")
    assert proc.returncode == 2, proc.stderr
    line = one_error_line(proc)
    assert f"{scenario}: resources[1].shader: shader 'fs': invalid SPIR-V (spirv-val: " in line, line
    assert snapshot(builder.root) == before and not (tmp_path / "out").exists()


def test_results_are_cached_by_content(typed: tuple[Path, bytes], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The second look at a module starts no process: from this process's dict, then from the disk cache
    (VKCAP_CACHE_DIR) in a fresh process's place (the dict emptied)."""
    _, code = typed
    monkeypatch.setenv("VKCAP_CACHE_DIR", str(tmp_path / "cache"))
    damaged = code[:40] + b"\xff" + code[41:]
    first = spirv_validate.validate(damaged)
    assert first is not None and spirv_validate.validate(code) is None
    spirv_validate._RESULTS.clear()

    def no_process(*args: object, **kwargs: object) -> None:
        raise AssertionError("spirv-val started again")

    monkeypatch.setattr(spirv_validate.subprocess, "run", no_process)
    assert spirv_validate.validate(damaged) == first and spirv_validate.validate(code) is None
    assert len(list((tmp_path / "cache" / "spirv-val").glob("*.json"))) == 2


def test_an_old_validator_is_not_run_on_arm_modules(typed: tuple[Path, bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    """Debian's spirv-val (2023.1) rejects the ARM capabilities it does not know: a module declaring an
    SPV_ARM_* extension is then passed on unvalidated (said at debug level); others are validated."""
    _, code = typed
    words = "SPV_ARM_tensors".encode() + b"\0"
    words += b"\0" * (-len(words) % 4)
    extension = struct.pack("<I", (1 + len(words) // 4) << 16 | 10) + words
    arm = code[:20] + extension + code[20:]
    assert spirv_validate.declares_arm_extension(arm) and not spirv_validate.declares_arm_extension(code)
    old = spirv_validate.Validator(Path("/usr/bin/spirv-val"), (2023, 1), (0, 0))
    monkeypatch.setattr(spirv_validate, "find_validator", lambda: old)
    ran: list[object] = []
    monkeypatch.setattr(spirv_validate.subprocess, "run", lambda *a, **k: ran.append(a))
    assert spirv_validate.validate(arm) is None and ran == []


def test_the_validators_message_is_one_printable_line() -> None:
    out = spirv_validate.first_message(b"error: line 0: The following forward referenced IDs have not been defined:\n"
                                       b"13[%13]\n\x1b[31mmore\n")
    assert out == "line 0: The following forward referenced IDs have not been defined: 13[%13]"
    assert spirv_validate.first_message(b"\xff\xfe error \x07" * 100).isprintable()
    assert len(spirv_validate.first_message(b"error: " + b"x" * 5000)) == spirv_validate.MESSAGE_CHARS


@pytest.mark.slow
@settings(FAST, max_examples=400)
@given(st.data())
def test_reflection_of_damaged_words_ends_and_raises_only_spirv_error(typed: tuple[Path, bytes], data: st.DataObject) -> None:
    """Flipped bytes, truncations and words replaced by hostile values (self-referencing types, huge
    counts): :func:`reflect` ends and raises nothing but :class:`SpirvError`."""
    _, code = typed
    damaged = bytearray(code)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(damaged) // 4 - 1)) * 4
        word = data.draw(st.one_of(st.integers(0, 0xFFFFFFFF), st.sampled_from([0, 1, 0x10000, 0xFFFF0000, 0x0004001C])))
        damaged[at:at + 4] = struct.pack("<I", word)
    cut = data.draw(st.integers(0, len(damaged)))
    try:
        r = reflect(bytes(damaged[:cut]) if data.draw(st.booleans()) else bytes(damaged), {0: math.inf, 1: math.nan})
    except SpirvError:
        return
    assert r.workgroup_bytes >= 0


# --- shared memory against the device --------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.device
@pytest.mark.parametrize("size, fits", [("1 << 30", False), ("64", True)])
def test_shared_memory_beyond_the_device_is_refused(builder: ScenarioBuilder, size: str, fits: bool) -> None:
    """``shared float big[1 << 30]`` (SIGSEGV before): exit 2, the shader and the limit named; 256 bytes run."""
    builder.shader("s", SHARED.replace("SIZE", size))
    builder.buffer("o", 16, dst="o.npy")
    builder.dispatch("s", [(0, 0, "o")], [1])
    scenario = builder.save()
    proc = vkcap("run", scenario)
    if fits:
        assert proc.returncode == 0, proc.stderr
        return
    assert proc.returncode == 2, proc.stderr
    line = one_error_line(proc)
    assert f"{scenario}: resources[0].shader: shader 's' declares " in line and "(maxComputeSharedMemorySize)" in line, line
    assert not (builder.root / "o.npy").exists()


def test_shared_memory_is_reflected_with_the_specialization() -> None:
    code = subprocess.run(["glslangValidator", "-V", "--quiet", "--stdin", "-S", "comp", "-o", "/dev/stdout"],
                          input=SHARED.replace("SIZE", "N").replace("#version 450", "#version 450\nlayout(constant_id = 7) const int N = 8;").encode(),
                          capture_output=True, check=True).stdout
    assert reflect(code).workgroup_bytes == 32
    assert reflect(code, {7: 1000}).workgroup_bytes == 4000
    assert reflect(code, {7: 64.5}).workgroup_bytes == 32  # not an integer: the module's default


# --- specialization constants typed by the module --------------------------------------------------

def test_constants_are_reflected_with_their_declared_types(typed: tuple[Path, bytes]) -> None:
    declared = reflect(typed[1]).spec_constants
    assert {k: (v.kind, v.width) for k, v in declared.items()} == {0: ("uint", 32), 1: ("float", 32), 2: ("bool", 32),
                                                                   3: ("uint", 64)}
    assert declared[1].name == "BIAS"


@pytest.mark.slow
@pytest.mark.device
@pytest.mark.parametrize("constants, expected", [
    ([{"id": 0, "value": 4.0}, {"id": 1, "value": 0.5}], 4.5),   # an integral float is that integer
    ([{"id": 0, "value": 4}, {"id": 1, "value": 2}], 6.0),       # an int for a float is that float
    ([{"id": 0, "value": 4}, {"id": 2, "value": 1}, {"id": 3, "value": 4294967299}], 1005.0),  # bool 1; 2**32+3 fits a uint64
])
def test_values_are_packed_as_the_declared_type(typed: tuple[Path, bytes], tmp_path: Path, constants: list[dict[str, object]],
                                                expected: float) -> None:
    """Each ran with exit 0 and wrong output before (64.0 packed as float bits, 2 as int bits)."""
    root, _ = typed
    scenario = with_constants(root, constants, f"c{abs(hash(json.dumps(constants)))}.json")
    proc = vkcap("run", scenario, "--output", tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = np.load(tmp_path / "o.npy").view(np.float32)
    assert out[:4].tolist() == [expected] * 4


REFUSALS = [
    (0, 64.5, "64.5 is not an integer, which uint32 needs"),
    (0, -1, "-1 is out of the range of uint32 (0 to 4294967295)"),
    (0, 4294967296, "4294967296 is out of the range of uint32"),
    (0, 1e308, "1e+308 is out of the range of uint32"),
    (1, 1e308, "1e+308 is out of the range of float32"),
    (1, 1e39, "1e+39 is out of the range of float32"),
    (2, 2, "2 is not a bool (true, false, 0 or 1)"),
    (3, -5, "-5 is out of the range of uint64"),
    (3, 1 << 64, "18446744073709551616 is out of the range of uint64"),
]
CONSTANTS = [{"id": 0, "value": 4}, {"id": 1, "value": 0.5}, {"id": 2, "value": 0}, {"id": 3, "value": 1}]


@pytest.mark.slow
@pytest.mark.device
@pytest.mark.parametrize("index, value, reason", [REFUSALS[0], REFUSALS[4], REFUSALS[6]])
def test_a_value_that_does_not_fit_is_refused_naming_the_constant(typed: tuple[Path, bytes], index: int, value: object,
                                                                  reason: str) -> None:
    """Through the CLI: exit 2, one line naming the scenario and the constant's place, nothing written."""
    root, _ = typed
    constants = [dict(c) for c in CONSTANTS]
    constants[index]["value"] = value
    scenario = with_constants(root, constants, f"bad{index}.json")
    before = snapshot(root)
    proc = vkcap("run", scenario)
    assert proc.returncode == 2, proc.stderr
    line = one_error_line(proc)
    assert f"{scenario}: resources[0].shader.specialization_constants[{index}]: shader 's': specialization constant {index} (" in line, line
    assert reason in line, line
    assert snapshot(root) == before


@pytest.mark.parametrize("index, value, reason", REFUSALS)
def test_every_misfit_is_refused_with_its_place_and_reason(typed: tuple[Path, bytes], index: int, value: object, reason: str) -> None:
    """The same check in process, for every class of misfit (what the CLI prints is its render)."""
    from vkcore.errors import ScenarioError
    from vkcore.scenario.model import SpecializationConstant
    from vkcore.shaders.pipelines import pack_specialization

    constants = [SpecializationConstant(c["id"], value if k == index else c["value"]) for k, c in enumerate(CONSTANTS)]  # type: ignore[arg-type]
    with pytest.raises(ScenarioError) as caught:
        pack_specialization(tuple(constants), typed[1], "s", "resources[0].shader")
    line = caught.value.render()
    assert line.startswith(f"resources[0].shader.specialization_constants[{index}]: shader 's': specialization constant {index} ("), line
    assert reason in line and caught.value.exit_code == 2, line


INT_TYPES = [SpecConstantType(kind, width) for kind in ("int", "uint") for width in (8, 16, 32, 64)]


@pytest.mark.slow
@settings(FAST, max_examples=600)
@given(st.sampled_from(INT_TYPES), st.integers(-(1 << 70), 1 << 70), st.booleans())
def test_integers_pack_exactly_when_they_fit(declared: SpecConstantType, number: int, as_float: bool) -> None:
    """Every int/uint width: a value in range packs to its own bytes (as an integral float too, where
    the float is exact), one out of range is refused."""
    low = -(1 << (declared.width - 1)) if declared.kind == "int" else 0
    high = (1 << (declared.width - 1)) - 1 if declared.kind == "int" else (1 << declared.width) - 1
    value: object = float(number) if as_float and abs(number) < 1 << 53 else number
    if low <= number <= high:
        raw = encode(value, declared)
        assert len(raw) == declared.width // 8
        assert int.from_bytes(raw, "little", signed=declared.kind == "int") == number
    else:
        with pytest.raises(ValueError, match="out of the range"):
            encode(value, declared)


@pytest.mark.slow
@settings(FAST, max_examples=600)
@given(st.sampled_from([16, 32, 64]), st.one_of(st.floats(), st.integers(-(1 << 1100), 1 << 1100)))
def test_floats_pack_when_finite_and_in_range(width: int, value: float | int) -> None:
    declared = SpecConstantType("float", width)
    fmt = {16: "<e", 32: "<f", 64: "<d"}[width]
    limit = {16: 65504.0, 32: 3.4028234663852886e38, 64: 1.7976931348623157e308}[width]
    try:
        raw = encode(value, declared)
    except ValueError as exc:
        assert not (isinstance(value, float) and math.isfinite(value) and abs(value) <= limit) or "range" in str(exc), exc
        return
    decoded = struct.unpack(fmt, raw)[0]
    assert math.isfinite(decoded) and len(raw) == width // 8


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, "1", None, [1], True])
def test_non_numbers_and_non_finite_values_are_refused_for_every_number_type(value: object) -> None:
    for declared in [*INT_TYPES, SpecConstantType("float", 32), SpecConstantType("float", 64)]:
        with pytest.raises(ValueError):
            encode(value, declared)


def test_undeclared_constants_keep_32_bits_and_refuse_what_does_not_fit() -> None:
    assert encode_undeclared(7) == struct.pack("<I", 7) and encode_undeclared(-7) == struct.pack("<i", -7)
    assert encode_undeclared(0.5) == struct.pack("<f", 0.5)
    for bad in (1 << 32, -(1 << 31) - 1, 1e308, math.nan):
        with pytest.raises(ValueError):
            encode_undeclared(bad)
    with pytest.raises(UnfitConstant) as caught:
        pack([(0, 1), (9, math.inf)], {0: SpecConstantType("int", 32)})
    assert caught.value.index == 1 and "specialization constant 9: " in caught.value.describe("s")


# --- VGF files: refused before any Vulkan call -----------------------------------------------------

VGF = Path(__file__).resolve().parent.parent / "examples" / "conv2d"


@pytest.mark.slow
@settings(FAST, max_examples=600)
@given(st.lists(st.tuples(st.integers(0, 3671), st.integers(1, 255)), min_size=1, max_size=3))
def test_parsing_a_damaged_vgf_raises_only_vgf_error(flips: list[tuple[int, int]]) -> None:
    """Flipped bytes anywhere in a real VGF: parsing (and validating its graph modules) either succeeds
    or raises :class:`VgfError`, which the CLI prints as one line with exit 2."""
    from vkcore.graphs.vgf import VgfError, check_graph_module, parse_vgf

    data = bytearray((VGF / "conv2d.vgf").read_bytes())
    for at, mask in flips:
        data[at % len(data)] ^= mask
    try:
        vgf = parse_vgf(bytes(data), "conv2d.vgf")
        for module in vgf.modules:
            check_graph_module(module, "conv2d.vgf")
    except VgfError as exc:
        assert "\n" not in exc.render()


@pytest.mark.slow
@pytest.mark.device
@settings(FAST, max_examples=4)
@given(st.integers(0, 3671))
def test_running_a_damaged_vgf_succeeds_or_is_one_line(tmp_path_factory: pytest.TempPathFactory, at: int) -> None:
    """A one-byte change of a VGF (an abort of the emulation layer before): run exits 0 or 2 with one
    line, never a signal; nothing but the output is written."""
    work = tmp_path_factory.mktemp("vgf")
    for f in VGF.iterdir():
        (work / f.name).write_bytes(f.read_bytes())
    data = bytearray((work / "conv2d.vgf").read_bytes())
    data[at] ^= 0xFF
    (work / "conv2d.vgf").write_bytes(bytes(data))
    before = snapshot(work)
    proc = vkcap("run", work / "scenario.json", "--output", work / "out")
    assert proc.returncode in (0, 2), (at, proc.returncode, proc.stderr[-2000:])
    if proc.returncode == 2:
        one_error_line(proc)
    assert {k: v for k, v in snapshot(work).items() if not k.startswith("out")} == before
