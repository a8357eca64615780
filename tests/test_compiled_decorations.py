"""Modules vkcap compiles from GLSL lose decorations glslang repeats word for word (``coherent volatile``
gives each member ``Coherent`` twice, which spirv-val refuses but the reference runner runs); a module
given as SPIR-V is validated as it is.

The property is checked in process on real modules with generated repeats; the CLI checks run a scenario
through ``vkcap run`` both ways.
"""
from __future__ import annotations

import json
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import ScenarioBuilder, vkcap
from vkcore.shaders.spirv_validate import DECORATION_OPCODES, validate, without_duplicate_decorations

COHERENT_VOLATILE = """#version 450
layout(local_size_x = 4) in;
layout(set = 0, binding = 0) coherent volatile buffer F { uint v[]; };
void main() { atomicAdd(v[gl_GlobalInvocationID.x], 1u); }
"""
PLAIN = COHERENT_VOLATILE.replace("coherent volatile ", "")


def compiled(tmp: Path, source: str) -> bytes:
    path = tmp / "m.comp"
    path.write_text(source)
    subprocess.run(["glslangValidator", "-V", "-o", str(tmp / "m.spv"), str(path)], check=True, capture_output=True)
    return (tmp / "m.spv").read_bytes()


def instructions(code: bytes) -> list[tuple[int, ...]]:
    words = struct.unpack(f"<{len(code) // 4}I", code)
    out, at = [], 5
    while at < len(words):
        count = words[at] >> 16
        out.append(words[at: at + count])
        at += count
    return out


@pytest.fixture(scope="module")
def modules(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    tmp = tmp_path_factory.mktemp("modules")
    return {"coherent volatile": compiled(tmp, COHERENT_VOLATILE), "plain": compiled(tmp, PLAIN)}


def test_glslang_repeats_coherent_and_the_repeat_is_dropped(modules: dict[str, bytes]) -> None:
    code = modules["coherent volatile"]
    assert "decorated with Coherent multiple times" in (validate(code) or "")
    fixed = without_duplicate_decorations(code)
    assert validate(fixed) is None
    listed = instructions(code)
    repeats = [i for k, i in enumerate(listed) if i in listed[:k]]
    assert repeats and all(i[0] & 0xFFFF == 72 and i[3] == 23 for i in repeats)  # OpMemberDecorate ... Coherent
    assert instructions(fixed) == [i for k, i in enumerate(listed) if i not in listed[:k]]
    assert without_duplicate_decorations(fixed) is fixed  # nothing left to drop: the same object
    assert without_duplicate_decorations(modules["plain"]) is modules["plain"]


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_only_word_for_word_repeats_of_decorations_go(modules: dict[str, bytes], data: st.DataObject) -> None:
    """Generated modules: decoration instructions of a real module repeated at generated places (and an
    instruction of another kind repeated too). Dropping the repeats gives back exactly the module with
    every decoration once, in its first place; other instructions are untouched."""
    code = modules["plain"]
    words = instructions(code)
    decorations = [i for i in words if i[0] & 0xFFFF in DECORATION_OPCODES]
    others = [i for i in words if i[0] & 0xFFFF not in DECORATION_OPCODES]
    first_decoration = words.index(decorations[0])
    extra = data.draw(st.lists(st.sampled_from(decorations), min_size=1, max_size=8))
    spots = data.draw(st.lists(st.integers(words.index(decorations[-1]) + 1, len(words) - 1),
                               min_size=len(extra), max_size=len(extra)))
    mutated = list(words)
    for instruction, spot in sorted(zip(extra, spots), key=lambda p: -p[1]):
        mutated.insert(spot, instruction)
    other = data.draw(st.sampled_from(others[:first_decoration] or others))
    mutated.insert(1, other)  # a repeated non-decoration (OpCapability, ...) stays
    header = code[:20]
    body = b"".join(struct.pack(f"<{len(i)}I", *i) for i in mutated)
    expected_body = b"".join(struct.pack(f"<{len(i)}I", *i) for i in [*mutated[:1], other, *words[1:]])
    assert without_duplicate_decorations(header + body) == header + expected_body


@pytest.mark.parametrize("damage", ["truncated", "zero word count", "not spir-v", "big-endian"])
def test_a_module_that_does_not_parse_is_returned_as_it_is(modules: dict[str, bytes], damage: str) -> None:
    """Cut inside an instruction, an instruction of no words, not SPIR-V, big-endian words: as it is."""
    code = modules["coherent volatile"]
    damaged = {"truncated": code[:24], "zero word count": code[:20] + b"\0\0\0\0" + code[24:], "not spir-v": b"x" * 40,
               "big-endian": b"".join(code[k:k + 4][::-1] for k in range(0, len(code), 4))}[damage]
    assert without_duplicate_decorations(damaged) is damaged


@pytest.mark.slow
@pytest.mark.device
def test_coherent_volatile_glsl_runs_and_the_same_spirv_given_is_refused(builder: ScenarioBuilder, tmp_path: Path,
                                                                         modules: dict[str, bytes]) -> None:
    """Through the CLI: the GLSL runs (each element incremented once); the module glslang made, given as a
    .spv, is refused in one line naming the repeat, nothing written."""
    builder.shader("s", COHERENT_VOLATILE).buffer("v", 16, np.array([1, 2, 3, 4], np.uint32), dst="v.npy")
    builder.dispatch("s", [(0, 0, "v")], [1])
    path = builder.save()
    proc = vkcap("run", path, "--output", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert np.load(tmp_path / "out" / "v.npy").view(np.uint32).tolist() == [2, 3, 4, 5]
    (builder.root / "given.spv").write_bytes(modules["coherent volatile"])
    doc = json.loads(path.read_text())
    doc["resources"][0]["shader"].update(src="given.spv", type="SPIR-V")
    path.write_text(json.dumps(doc))
    proc = vkcap("run", path, "--output", tmp_path / "out2")
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"vkcap: error: {path}: resources[0].shader: shader 's': invalid SPIR-V (spirv-val: "), line
    assert "decorated with Coherent multiple times" in line, line
    assert not (tmp_path / "out2").exists() or not any((tmp_path / "out2").iterdir())
