"""Drop-in parity with ARM's reference ``scenario-runner`` (issue #35, items 2-6), differentially.

Each class runs the reference binary (ai-ml-sdk-scenario-runner 0.11, through :mod:`tests.reference`) and
``vkcap run`` on the same input and asserts byte-identical outputs where both run, or the same refusal
phrase where both refuse:

- GLSL without ``#version`` (a licence comment, then ``#extension``) compiles as the reference's (GLSL 460);
- what the reference accepts with a well-defined result: a buffer's ``format`` key (ignored, one warning),
  a tensor over an image reaching past it into another member of its memory group, a shader that needs
  ``shaderStorageImageReadWithoutFormat`` on a device without it (one warning; ``--validate`` refuses);
- pipeline caches (one file in ``--cache-path``), the reference's log lines on stdout at its levels,
  ``--log-level`` values, the profiling and perf-counter documents' key trees, dump paths checked before
  the scenario is read;
- :data:`PHRASES`: for each bad input both refuse, the reference's key phrase in both runners' messages;
- :data:`CORPUS`: 43 scenarios from small templates (buffers, push and specialization constants, images of
  eight formats, barriers (``pipeline_barrier`` too), several frames, memory-group aliasing, tensors), byte-identical outputs.

Scenarios are tiny; vkcap runs without ``--validate`` here only where the point is what happens without it
(the storage-image feature), and the suite's validation layer watches every other run.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import ADD_FLOAT, READ_TENSOR, WRITE_PATTERN, ScenarioBuilder, image_pattern, load_output, vkcap
from tests.reference import (dst_paths, reference_command, reference_env, reference_runner, requires_reference,
                             run_reference)
from vkcore.reference_log import LINES
from vkcore.resources.imageio import write_dds

pytestmark = requires_reference

W, H = 8, 4
N = 64
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} \[Scenario-Runner\] (DEBUG|INFO|WARNING|ERROR): (.*)$")


def run_both(scenario: Path, tmp_path: Path, *extra: str | Path, env: dict[str, str] | None = None,
             make_dst_dirs: bool = True) -> tuple[Any, Any]:
    """The reference into ``tmp_path/reference``, vkcap into ``tmp_path/ours``, with the same flags, side by
    side (the reference mostly waits for its driver to start: running both at once keeps the module fast)."""
    output = tmp_path / "reference"
    output.mkdir(parents=True, exist_ok=True)
    if make_dst_dirs and scenario.is_file():
        for dst in dst_paths(scenario):
            (output / dst).parent.mkdir(parents=True, exist_ok=True)
    with subprocess.Popen(reference_command(scenario, output, *extra), env=reference_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as reference:
        ours = vkcap("run", scenario, "--output", tmp_path / "ours", *extra, env=env)
        stdout, stderr = reference.communicate(timeout=300)
    return subprocess.CompletedProcess(reference.args, reference.returncode, stdout, stderr), ours


def assert_identical(scenario: Path, tmp_path: Path, *extra: str | Path, env: dict[str, str] | None = None) -> Any:
    """Both runners exit 0 and write every ``dst`` byte for byte alike; returns vkcap's process."""
    ref, ours = run_both(scenario, tmp_path, *extra, env=env)
    assert ref.returncode == 0, ref.stdout[-3000:] + ref.stderr[-2000:]
    assert ours.returncode == 0, ours.stderr
    names = dst_paths(scenario)
    assert names
    for name in names:
        theirs, mine = (tmp_path / "reference" / name).read_bytes(), (tmp_path / "ours" / name).read_bytes()
        assert mine == theirs, f"{name}: vkcap's bytes differ from the reference's"
    return ours


def log_messages(stdout: str, level: str | None = None) -> list[str]:
    """The reference-style lines of ``stdout`` (``LEVEL: text``), optionally of one level."""
    found = [LOG_LINE.match(line) for line in stdout.splitlines()]
    return [f"{m[1]}: {m[2]}" for m in found if m and (level is None or m[1] == level)]


def three_buffers(b: ScenarioBuilder, shader: str, a: np.ndarray, c: np.ndarray, **fields: Any) -> Path:
    b.shader("op", shader, **fields)
    b.buffer("a", a.nbytes, a, shader_access="readonly").buffer("b", c.nbytes, c, shader_access="readonly")
    b.buffer("c", a.nbytes, dst="c.npy")
    b.dispatch("op", [(0, 0, "a"), (0, 1, "b"), (0, 2, "c")], [len(a)])
    return b.save()


# ------------------------------------------------------------------------------------ 2. GLSL without #version

LICENCE = """/*
 * SPDX-FileCopyrightText: Copyright 2025 Example Ltd.
 * SPDX-License-Identifier: Apache-2.0
 */
"""
NO_VERSION = {
    "int8-arithmetic": LICENCE + """#extension GL_EXT_shader_explicit_arithmetic_types : require
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) readonly buffer A { float a[]; };
layout(set = 0, binding = 1) readonly buffer B { float b[]; };
layout(set = 0, binding = 2) buffer C { float c[]; };
void main() { uint i = gl_GlobalInvocationID.x; c[i] = a[i] * b[i] + float(int8_t(i) * int8_t(3)); }
""",
    "8bit-storage": LICENCE + """// a line comment before the extensions too
#extension GL_EXT_shader_8bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) readonly buffer A { int8_t a[]; };
layout(set = 0, binding = 1) readonly buffer B { int8_t b[]; };
layout(set = 0, binding = 2) buffer C { int8_t c[]; };
void main() { uint i = gl_GlobalInvocationID.x; c[i] = a[i] + b[i]; }
""",
}


@pytest.mark.slow
@pytest.mark.device
@pytest.mark.parametrize("name", sorted(NO_VERSION))
def test_glsl_without_version_compiles_as_the_reference_compiles_it(name: str, builder: ScenarioBuilder,
                                                                     tmp_path: Path) -> None:
    rng = np.random.default_rng(35)
    dtype = np.int8 if name == "8bit-storage" else np.float32
    a = rng.integers(-50, 50, 32).astype(dtype)
    b = rng.integers(-50, 50, 32).astype(dtype)
    scenario = three_buffers(builder, NO_VERSION[name], a, b)
    assert_identical(scenario, tmp_path)
    got = load_output(tmp_path / "ours" / "c.npy", dtype)
    if dtype == np.int8:
        np.testing.assert_array_equal(got, a + b)
    else:
        i = np.arange(32)
        np.testing.assert_array_equal(got, a * b + ((i * 3 + 128) % 256 - 128).astype(np.float32))


COMMENT_TEXT = st.text(st.characters(blacklist_characters="*/\n\r", blacklist_categories=("Cs",)), max_size=30)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(comments=st.lists(st.tuples(st.booleans(), COMMENT_TEXT), max_size=6), code=st.sampled_from(
    ["", "#extension GL_EXT_shader_8bit_storage : require\n", "layout(local_size_x = 1) in;\nvoid main() {}\n"]),
       version=st.sampled_from(["#version 450", "  #  version 310 es", "#version 460 core"]))
def test_a_version_counts_only_outside_comments(comments: list[tuple[bool, str]], code: str, version: str) -> None:
    """However comments hide ``#version`` (block or line, with any text around), they hide it; a directive
    line outside them is found wherever it stands among them."""
    from vkcore.shaders.compile import declares_version

    hidden = "".join(f"/* {text} {version} */\n" if block else f"// {text} {version}\n" for block, text in comments)
    assert not declares_version((hidden + code).encode())
    assert declares_version((hidden + version + "\n" + code).encode())


# -------------------------------------------------------------------- 3. what the reference accepts, well defined


@pytest.mark.slow
@pytest.mark.device
def test_a_buffer_format_key_is_ignored_with_one_warning(builder: ScenarioBuilder, tmp_path: Path) -> None:
    a = np.arange(16, dtype=np.float32)
    builder.shader("op", ADD_FLOAT)
    builder.buffer("a", 64, a, shader_access="readonly", format="VK_FORMAT_R32_SFLOAT")
    builder.buffer("b", 64, a, shader_access="readonly", format=7)
    builder.buffer("c", 64, dst="c.npy")
    builder.dispatch("op", [(0, 0, "a"), (0, 1, "b"), (0, 2, "c")], [16])
    scenario = builder.save()
    ours = assert_identical(scenario, tmp_path)
    assert [line for line in ours.stderr.splitlines() if "format" in line] == [
        f"vkcap: {scenario}: resources[1].buffer.format: ignored: a buffer has no format (the shader decides how its "
        "bytes are read) (and 1 more)"]
    np.testing.assert_array_equal(load_output(tmp_path / "ours" / "c.npy", np.float32), a * 2)


def aliased_image_and_tensor(b: ScenarioBuilder, offset: int, rows: int, *, other: int) -> None:
    """A LINEAR W x H rgba32f image (no src), a LINEAR tensor of ``rows`` rows at ``offset`` in its group,
    and (``other`` > 0) a buffer of ``other`` bytes with a src in the same group."""
    group = {"id": "g"}
    b.resources.append({"image": {"uid": "img", "dims": [1, W, H, 1], "format": "VK_FORMAT_R32G32B32A32_SFLOAT",
                                  "shader_access": "readwrite", "tiling": "LINEAR", "memory_group": group}})
    b.resources.append({"tensor": {"uid": "t", "dims": [1, rows, W, 4], "format": "VK_FORMAT_R32_SFLOAT",
                                   "shader_access": "readonly", "dst": "t.npy", "tiling": "LINEAR",
                                   "memory_group": {"id": "g", "offset": offset}}})
    if other:
        b.buffer("big", other, np.arange(other // 4, dtype=np.float32), memory_group=group, shader_access="readonly")


@pytest.mark.slow
@pytest.mark.device
@pytest.mark.parametrize("offset, rows, other", [(384, 2, 1024), (256, 4, 1024), (448, 1, 640)],
                         ids=["half-past", "all-past", "to-the-byte"])
def test_a_tensor_past_its_image_inside_the_group(builder: ScenarioBuilder, tmp_path: Path, offset: int, rows: int,
                                                  other: int) -> None:
    """The reference runs it, and the bytes past the image are the buffer's: the same bytes from both."""
    aliased_image_and_tensor(builder, offset, rows, other=other)
    assert_identical(builder.save(), tmp_path)
    got = np.load(tmp_path / "ours" / "t.npy").reshape(-1)
    np.testing.assert_array_equal(got, np.arange(other // 4, dtype=np.float32)[offset // 4: offset // 4 + rows * W * 4])


@pytest.mark.slow
@pytest.mark.device
def test_a_tensor_past_every_member_of_its_group_is_refused(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """Past the image and past the buffer: memory no member defines (the reference reads whatever is there)."""
    aliased_image_and_tensor(builder, 384, 2, other=600)
    scenario = builder.save()
    proc = vkcap("run", scenario, "--output", tmp_path)
    assert (proc.returncode, proc.stderr.strip()) == (2, (
        f"vkcap: error: {scenario}: resources[1].tensor.memory_group.offset: tensor 't' starts 384 bytes into the "
        "image 'img' it aliases and covers 2 row(s) of 128 bytes: it must lie within the image's 4 rows, or within "
        "another member of memory group 'g'"))


READ_WITHOUT_FORMAT = """#version 450
#extension GL_EXT_shader_image_load_formatted : require
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) uniform image2D img;
layout(set = 0, binding = 1) buffer O { vec4 o[]; };
void main() { ivec2 p = ivec2(gl_GlobalInvocationID.xy); o[p.y * 8 + p.x] = imageLoad(img, p); }
"""


def device_lacks_read_without_format() -> tuple[str, bool]:
    proc = vkcap("devices", "--json")
    assert proc.returncode == 0, proc.stderr
    name = json.loads(proc.stdout)[0]["device_name"]
    import vulkan as vk

    instance = vk.vkCreateInstance(vk.VkInstanceCreateInfo(
        pApplicationInfo=vk.VkApplicationInfo(apiVersion=vk.VK_MAKE_VERSION(1, 3, 0))), None)
    try:
        physical = vk.vkEnumeratePhysicalDevices(instance)[0]
        return name, not vk.vkGetPhysicalDeviceFeatures(physical).shaderStorageImageReadWithoutFormat
    finally:
        vk.vkDestroyInstance(instance, None)


@pytest.mark.slow
@pytest.mark.device
def test_storage_image_read_without_format_on_a_device_without_the_feature(builder: ScenarioBuilder,
                                                                            tmp_path: Path) -> None:
    """lavapipe lacks shaderStorageImageReadWithoutFormat: both runners run the shader and read the image
    right (vkcap with one warning naming the feature and the device); ``--validate`` refuses it."""
    name, lacking = device_lacks_read_without_format()
    builder.shader("write", WRITE_PATTERN).shader("read", READ_WITHOUT_FORMAT)
    builder.resources.append({"image": {"uid": "img", "dims": [1, W, H, 1], "format": "VK_FORMAT_R32G32B32A32_SFLOAT",
                                        "shader_access": "writeonly"}})
    builder.buffer("out", W * H * 16, dst="out.npy")
    builder.dispatch("write", [(0, 0, "img")], [W, H, 1]).dispatch("read", [(0, 0, "img"), (0, 1, "out")], [W, H, 1])
    scenario = builder.save()
    ours = assert_identical(scenario, tmp_path, env={"VKCAP_VALIDATE": "0"})
    np.testing.assert_array_equal(load_output(tmp_path / "ours" / "out.npy", np.float32).reshape(H, W, 4),
                                  image_pattern(W, H))
    warnings = [line for line in ours.stderr.splitlines() if "StorageImageReadWithoutFormat" in line]
    if not lacking:
        assert warnings == []
        return
    assert warnings == [
        f"vkcap: {scenario}: resources[1].shader: shader 'read' declares the SPIR-V capability "
        f"StorageImageReadWithoutFormat, which needs shaderStorageImageReadWithoutFormat, a feature device '{name}' "
        "lacks: run anyway, as the reference runner does (--validate refuses it)"]
    refused = vkcap("run", scenario, "--output", tmp_path / "validated", "--validate")
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        f"vkcap: error: {scenario}: resources[1].shader: shader 'read' declares the SPIR-V capability "
        f"StorageImageReadWithoutFormat, which needs shaderStorageImageReadWithoutFormat, a feature device '{name}' lacks")


@pytest.fixture(scope="module")
def add_graph(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tests.test_run_graphs import TOSA
    from tests.vkharness import convert_model
    from vkcore.graphs.vgf import read_vgf

    return read_vgf(convert_model(TOSA / "add.mlir", tmp_path_factory.mktemp("graph") / "add.vgf"))


@pytest.mark.slow
@pytest.mark.device
def test_dispatch_data_graph_is_dispatch_spirv_graph(builder: ScenarioBuilder, tmp_path: Path, add_graph: Any) -> None:
    """The reference 0.11's name for dispatch_spirv_graph: the same outputs from both runners."""
    from tests.test_spirv_graph import spirv_graph

    a, b = (np.random.default_rng(s).random((1, 4, 4, 2), dtype=np.float32) for s in (3, 4))
    scenario = spirv_graph(builder, add_graph, [("a", [1, 4, 4, 2], "readonly", a), ("b", [1, 4, 4, 2], "readonly", b),
                                                ("c", [1, 4, 4, 2], "writeonly", None)], constants=False)
    document = json.loads(scenario.read_text())
    document["commands"][0] = {"dispatch_data_graph": document["commands"][0]["dispatch_spirv_graph"]}
    scenario.write_text(json.dumps(document))
    assert_identical(scenario, tmp_path)
    np.testing.assert_array_equal(np.load(tmp_path / "ours" / "c.npy"), a + b)


# ------------------------------------------------------------------- 4. caches, logs and documents as the reference's


def add_scenario(b: ScenarioBuilder) -> Path:
    a = np.arange(32, dtype=np.float32)
    return three_buffers(b, ADD_FLOAT, a, a)


@pytest.mark.slow
@pytest.mark.device
def test_one_cache_file_and_the_reference_cache_lines(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """Each runner keeps exactly ``<stem>.cache`` in its --cache-path, and says the same about it on stdout:
    nothing loaded, then loaded and validated, then cleared; stored each time."""
    scenario = add_scenario(builder)
    caches = {"reference": tmp_path / "ref-cache", "ours": tmp_path / "our-cache"}
    for folder in caches.values():
        folder.mkdir()
    said: dict[str, list[list[str]]] = {"reference": [], "ours": []}
    for flags in ([], [], ["--clear-pipeline-cache"]):
        ref = run_reference(scenario, tmp_path / "reference", "--pipeline-caching", "--cache-path", caches["reference"],
                            *flags)
        ours = vkcap("run", scenario, "--output", tmp_path / "ours", "--pipeline-caching", "--cache-path",
                     caches["ours"], *flags)
        assert ref.returncode == 0 and ours.returncode == 0, ref.stdout[-2000:] + ours.stderr
        for who, proc in (("reference", ref), ("ours", ours)):
            said[who].append([m for m in log_messages(proc.stdout) if "Pipeline Cache" in m])
        for folder in caches.values():
            assert sorted(p.name for p in folder.iterdir()) == ["scenario.cache"]
    stored = ["INFO: Pipeline Cache stored"] * 2  # after set-up and after the frames
    assert said["reference"] == said["ours"] == [
        ["INFO: Load Pipeline Cache", *stored],
        ["INFO: Load Pipeline Cache", "INFO: Pipeline Cache loaded and validated.", *stored],
        ["INFO: Load Pipeline Cache", "INFO: Pipeline Cache cleared", *stored]]


@pytest.mark.slow
@pytest.mark.device
@pytest.mark.parametrize("junk", [b"junkjunkjunk", bytes(range(100))], ids=["short", "bad-header-size"])
def test_a_junk_cache_file(builder: ScenarioBuilder, tmp_path: Path, junk: bytes) -> None:
    """Both skip it with the reference's warning(s) and run; the reference then replaces it, vkcap leaves
    it as it is (not a pipeline cache: not a file a runner wrote) and says so."""
    scenario = add_scenario(builder)
    for who in ("reference", "ours"):
        (tmp_path / f"{who}-cache").mkdir()
        (tmp_path / f"{who}-cache" / "scenario.cache").write_bytes(junk)
    ref = run_reference(scenario, tmp_path / "reference", "--pipeline-caching", "--cache-path", tmp_path / "reference-cache")
    ours = vkcap("run", scenario, "--output", tmp_path / "ours", "--pipeline-caching", "--cache-path",
                 tmp_path / "ours-cache")
    assert ref.returncode == 0 and ours.returncode == 0, ref.stdout[-2000:] + ours.stderr
    warned = [log_messages(p.stdout, "WARNING") for p in (ref, ours)]
    assert warned[0] == warned[1] and "WARNING: Pipeline Cache skipped: failed to validate." in warned[0]
    assert (tmp_path / "reference-cache" / "scenario.cache").read_bytes() != junk
    assert (tmp_path / "ours-cache" / "scenario.cache").read_bytes() == junk
    assert f"vkcap: {tmp_path / 'ours-cache' / 'scenario.cache'}: not a Vulkan pipeline cache: not loaded and left as " \
           "it is (no pipeline cache is stored this run)" in ours.stderr.splitlines()


@pytest.mark.slow
@pytest.mark.device
@pytest.mark.parametrize("what", ["folder", "fifo"])
def test_a_cache_path_that_is_no_file_is_left_alone(builder: ScenarioBuilder, tmp_path: Path, what: str) -> None:
    """vkcap alone (what the reference does with these is not the point): skipped, never replaced, one warning."""
    scenario = add_scenario(builder)
    cache = tmp_path / "cache" / "scenario.cache"
    cache.parent.mkdir()
    if what == "folder":
        cache.mkdir()
        (cache / "keep").write_text("mine")
    else:
        os.mkfifo(cache)
    ours = vkcap("run", scenario, "--output", tmp_path / "ours", "--pipeline-caching", "--clear-pipeline-cache",
                 "--cache-path", cache.parent, timeout=60)
    assert ours.returncode == 0, ours.stderr
    assert f"vkcap: {cache}: not a Vulkan pipeline cache: not loaded and left as it is (no pipeline cache is stored " \
           "this run)" in ours.stderr.splitlines()
    assert "WARNING: Pipeline Cache skipped: failed to validate." in log_messages(ours.stdout)
    assert sorted(p.name for p in cache.parent.iterdir()) == ["scenario.cache"]
    assert (cache / "keep").read_text() == "mine" if what == "folder" else cache.is_fifo()


@pytest.mark.slow
@pytest.mark.device
@pytest.mark.parametrize("level", ["debug", "info", "warning", "error"])
def test_the_reference_lines_on_stdout_at_each_log_level(builder: ScenarioBuilder, tmp_path: Path, level: str) -> None:
    """Every line vkcap writes in the reference's format, the reference writes too (at that level); and the
    lines that carry meaning (the scenario parsed, the resources, the device, results stored) are in both, and
    the same warnings (here: a frame boundary lavapipe cannot mark, once per boundary)."""
    scenario = two_frames(builder)
    ref, ours = run_both(scenario, tmp_path, "--log-level", level)
    assert ref.returncode == 0 and ours.returncode == 0, ref.stdout[-2000:] + ours.stderr
    theirs, mine = log_messages(ref.stdout), log_messages(ours.stdout)
    assert set(mine) <= set(theirs), set(mine) - set(theirs)
    shown = {"debug": {"DEBUG", "INFO", "WARNING", "ERROR"}, "info": {"INFO", "WARNING", "ERROR"},
             "warning": {"WARNING", "ERROR"}, "error": {"ERROR"}}[level]
    assert {m.split(":")[0] for m in mine} <= shown
    meaning = ["INFO: Scenario file parsed", "INFO: Setup resources, count: 4", "INFO: Results stored"]
    for message in meaning:
        assert (message in theirs) == (message in mine) == ("INFO" in shown), message
    assert any(m.startswith("INFO: Device: ") for m in mine) == ("INFO" in shown)
    assert [m for m in mine if m.startswith("WARNING")] == [m for m in theirs if m.startswith("WARNING")]
    assert all(text.split("%")[0] in {m.split(": ", 1)[1] for m in theirs} or level != "debug"
               for key, (_, text) in LINES.items() if key in ("parsed", "commands", "results stored"))


@pytest.mark.device
def test_log_level_with_an_equals_sign(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """``--log-level=warning``, as both runners take it: no INFO line from either, nor on vkcap's stderr."""
    scenario = add_scenario(builder)
    ref, ours = run_both(scenario, tmp_path, "--log-level=warning")
    assert ref.returncode == 0 and ours.returncode == 0, ref.stdout[-2000:] + ours.stderr
    assert not [m for m in log_messages(ref.stdout) + log_messages(ours.stdout) if m.startswith("INFO")]
    assert ours.stderr == ""


@settings(max_examples=200, deadline=None)
@given(name=st.text(max_size=40), vendor=st.integers(0, 2**32 - 1))
def test_a_reference_line_is_one_line_whatever_the_device_says(name: str, vendor: int) -> None:
    """The device's name (the driver's text) cannot break or forge a line: it is escaped."""
    import logging

    from vkcore.reference_log import LINES, ReferenceFormatter

    level, text = LINES["device"]
    record = logging.LogRecord("scenario_runner", level, __file__, 1, text, (name, "Cpu", vendor), None)
    line = ReferenceFormatter().format(record)
    assert LOG_LINE.match(line) and not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in line), repr(line)
    assert line.endswith(f", Type: Cpu, Vendor: {vendor:#x}")


@pytest.mark.parametrize("value", ["trace", "INFO", "critical2"])
def test_a_log_level_both_refuse(builder: ScenarioBuilder, tmp_path: Path, value: str) -> None:
    scenario = add_scenario(builder)
    ref, ours = run_both(scenario, tmp_path, "--log-level", value)
    assert ref.returncode == 255 and f'Invalid argument "{value}"' in ref.stdout + ref.stderr
    assert ours.returncode == 2 and f"--log-level: invalid choice: '{value}'" in ours.stderr
    assert not (tmp_path / "ours" / "c.npy").exists()


def key_tree(document: Any, prefix: str = "") -> set[str]:
    """Every key path of a JSON document (list items as ``[]``)."""
    keys: set[str] = set()
    if isinstance(document, dict):
        for key, value in document.items():
            keys |= {f"{prefix}/{key}"} | key_tree(value, f"{prefix}/{key}")
    elif isinstance(document, list):
        for value in document:
            keys |= key_tree(value, f"{prefix}[]")
    return keys


def two_frames(b: ScenarioBuilder) -> Path:
    add_scenario(b)
    b.boundary(["c"], 0)
    b.commands.append(b.commands[0])
    b.boundary(["c"], 1)
    return b.save()


EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.slow
@pytest.mark.device
@pytest.mark.parametrize("source", ["two-frames", "conv2d", "graph_custom"])
def test_profiling_and_perf_counter_documents_have_the_reference_keys(builder: ScenarioBuilder, tmp_path: Path,
                                                                      source: str) -> None:
    """The same key trees; for graphs, "Memory Usage" names each segment as the reference does."""
    scenario = two_frames(builder) if source == "two-frames" else EXAMPLES / source / "scenario.json"
    ref = run_reference(scenario, tmp_path / "reference", "--profiling-dump-path", tmp_path / "ref-prof.json",
                        "--perf-counters-dump-path", tmp_path / "ref-perf.json")
    ours = vkcap("run", scenario, "--output", tmp_path / "ours", "--profiling-dump-path", tmp_path / "our-prof.json",
                 "--perf-counters-dump-path", tmp_path / "our-perf.json")
    assert ref.returncode == 0 and ours.returncode == 0, ref.stdout[-2000:] + ours.stderr
    for kind in ("prof", "perf"):
        theirs = json.loads((tmp_path / f"ref-{kind}.json").read_text())
        mine = json.loads((tmp_path / f"our-{kind}.json").read_text())
        assert key_tree(mine) == key_tree(theirs), kind
        if "Memory Usage" in theirs:
            assert [(u["Command name"], u["Session memory [bytes]"]) for u in mine["Memory Usage"]] == \
                [(u["Command name"], u["Session memory [bytes]"]) for u in theirs["Memory Usage"]]


@pytest.mark.slow
@pytest.mark.parametrize("flag, phrase", [("--profiling-dump-path", "Unable to open profiling data file for writing"),
                                          ("--perf-counters-dump-path", "Unable to open perf counters file for writing")])
def test_a_dump_path_is_checked_before_the_scenario_is_read(tmp_path: Path, flag: str, phrase: str) -> None:
    """A dump path that is a folder, with a scenario that does not exist: both name the dump path."""
    missing = tmp_path / "missing.json"
    ref = run_reference(missing, tmp_path / "reference", flag, tmp_path, make_dst_dirs=False)
    ours = vkcap("run", missing, "--output", tmp_path / "ours", flag, tmp_path)
    assert ref.returncode == 255 and f"{phrase} {tmp_path}" in ref.stdout + ref.stderr
    assert (ours.returncode, ours.stderr.strip()) == (2, f"vkcap: error: {tmp_path}: {flag}: {phrase}: is a folder, "
                                                         "not a file")


# --------------------------------------------------------------------------------- 5. the reference's phrases


def base_scenario(b: ScenarioBuilder) -> None:
    add_scenario(b)


def add_image(**fields: Any) -> Callable[[ScenarioBuilder], None]:
    def mutate(b: ScenarioBuilder) -> None:
        b.resources.append({"image": {"uid": "img", "dims": [1, W, H, 1], "format": "VK_FORMAT_R32G32B32A32_SFLOAT",
                                      "shader_access": "readonly", **fields}})
    return mutate


def alias(image_fields: dict[str, Any], tensor_fields: dict[str, Any]) -> Callable[[ScenarioBuilder], None]:
    def mutate(b: ScenarioBuilder) -> None:
        group = {"memory_group": {"id": "g"}}
        b.resources.append({"image": {"uid": "img", "dims": [1, W, H, 1], "format": "VK_FORMAT_R32G32B32A32_SFLOAT",
                                      "shader_access": "readwrite", **group, **image_fields}})
        b.resources.append({"tensor": {"uid": "t", "dims": [1, H, W, 4], "format": "VK_FORMAT_R32_SFLOAT",
                                       "shader_access": "readonly", "dst": "t.npy", **group, **tensor_fields}})
    return mutate


def bind_lod(b: ScenarioBuilder) -> None:
    b.shader("w", WRITE_PATTERN)
    add_image(mips=2, shader_access="writeonly")(b)
    b.commands.append({"dispatch_compute": {"shader_ref": "w", "rangeND": [W, H, 1], "bindings": [
        {"set": 0, "id": 0, "resource_ref": "img", "lod": 5}]}})


def body(kind: str, index: int, **fields: Any) -> Callable[[ScenarioBuilder], None]:
    return lambda b: b.resources[index][kind].update(fields)


def binding(**fields: Any) -> Callable[[ScenarioBuilder], None]:
    return lambda b: b.commands[0]["dispatch_compute"]["bindings"][2].update(fields)


@dataclass(frozen=True)
class Phrase:
    """A bad input both runners refuse: how to make it, the reference's phrase, vkcap's place and detail."""

    mutate: Callable[[ScenarioBuilder], None]
    phrase: str
    place: str
    detail: str  # the rest of vkcap's line after the phrase (a fragment of it)


PHRASES: dict[str, Phrase] = {
    "alias-tiling": Phrase(alias({"tiling": "LINEAR"}, {"tiling": "OPTIMAL"}), "Aliased resources must have identical "
                           "tiling", "resources[5].tensor.tiling", "tensor 't' is OPTIMAL but the image 'img' it aliases is LINEAR"),
    "alias-mipped": Phrase(alias({"mips": 2}, {}), "A mipped image cannot be aliased", "resources[4].image.mips", ""),
    "alias-innermost": Phrase(alias({}, {"dims": [1, H, W, 2]}), "Aliased tensor innermost dimension: 2, must match "
                              "number of components of image: 4", "resources[5].tensor.dims",
                              "tensor dims [1, 4, 8, 2] do not describe the image 'img'"),
    "lod-beyond-mips": Phrase(bind_lod, "Requested level of details for the Image is greater than configured mipmaps",
                              "commands[1].dispatch_compute.bindings[0].lod", "image 'img' has 2 mip levels, so lod "
                              "must be below 2, got 5"),
    "alias-target": Phrase(lambda b: (alias({}, {"alias_target": {"resource_ref": "img"}})(b),
                                      b.resources[5]["tensor"].pop("memory_group")),
                           "alias_target field is deprecated", "resources[5].tensor.alias_target", "memory_group"),
    "no-mips": Phrase(add_image(mips=0), "Number of mips cannot be 0", "resources[4].image.mips",
                      "must be an integer >= 1, got 0"),
    "unknown-format": Phrase(add_image(format="VK_FORMAT_BOGUS"), "Unknown VkFormat", "resources[4].image.format",
                             "'VK_FORMAT_BOGUS'"),
    "missing-src": Phrase(body("buffer", 1, src="nothere.npy"), "Could not open file", "resources[1].buffer.src",
                          "file not found:"),
    "missing-glsl": Phrase(body("shader", 0, src="nothere.comp"), "Cannot open GLSL shader file",
                           "resources[0].shader.src", "file not found:"),
    "unknown-memory-resource": Phrase(binding(resource_ref="zzz"), "Memory resource not found",
                                      "commands[0].dispatch_compute.bindings[2].resource_ref", "unknown resource 'zzz'"),
    "unknown-shader": Phrase(lambda b: b.commands[0]["dispatch_compute"].update(shader_ref="zzz"),
                             "Shader resource not found", "commands[0].dispatch_compute.shader_ref", "unknown resource 'zzz'"),
    "shader-access": Phrase(body("buffer", 1, shader_access="sometimes"), "Unknown shader_access value",
                            "resources[1].buffer.shader_access", "'sometimes' (expected one of: readonly, writeonly, readwrite)"),
    "size-mismatch": Phrase(body("buffer", 1, size=256), "size mismatch", "resources[1].buffer.size",
                            "256 bytes, but src 'a.npy' holds 128 bytes of data"),
    "tiling-value": Phrase(add_image(tiling="DIAGONAL"), "Unknown tiling value", "resources[4].image.tiling", "'DIAGONAL'"),
    "shader-stage": Phrase(body("shader", 0, stage="geometry"), "Unknown shader stage value", "resources[0].shader.stage",
                           "'geometry'"),
    "descriptor-type": Phrase(binding(descriptor_type="VK_DESCRIPTOR_TYPE_BOGUS"), "Unknown descriptor_type value",
                              "commands[0].dispatch_compute.bindings[2].descriptor_type", "'VK_DESCRIPTOR_TYPE_BOGUS'"),
    "not-unique-uid": Phrase(body("buffer", 2, uid="a"), "Not unique uid", "resources[2].buffer.uid",
                             "first defined at resources[1].buffer"),
    "min-filter": Phrase(add_image(min_filter="CUBIC"), "Unknown min_filter value", "resources[4].image.min_filter", "'CUBIC'"),
    "border-color": Phrase(add_image(border_color="PURPLE"), "Unknown border_color value",
                           "resources[4].image.border_color", "'PURPLE'"),
}


@pytest.mark.slow
@pytest.mark.device
@pytest.mark.parametrize("name", sorted(PHRASES))
def test_a_bad_input_is_refused_in_the_reference_words(name: str, builder: ScenarioBuilder, tmp_path: Path) -> None:
    case = PHRASES[name]
    base_scenario(builder)
    case.mutate(builder)
    scenario = builder.save()
    ref, ours = run_both(scenario, tmp_path, make_dst_dirs=False)
    assert ref.returncode == 255, ref.stdout[-2000:]
    assert case.phrase in ref.stdout + ref.stderr, ref.stdout[-2000:]
    line = ours.stderr.strip()
    assert ours.returncode == 2 and "\n" not in line, ours.stderr
    assert line.startswith(f"vkcap: error: {scenario}: {case.place}: "), line
    assert case.phrase in line and case.detail in line.split(case.phrase, 1)[1], line


# ------------------------------------------------------------------------------------ 6. the differential corpus

SEED = 20251128


def glsl(body_text: str, *decls: str, local: str = "layout(local_size_x = 1) in;") -> str:
    return "#version 450\n" + local + "\n" + "\n".join(decls) + "\nvoid main() {\n    " + body_text + "\n}\n"


def buffers_decl(t: str) -> tuple[str, ...]:
    return (f"layout(set = 0, binding = 0) readonly buffer A {{ {t} a[]; }};",
            f"layout(set = 0, binding = 1) readonly buffer B {{ {t} b[]; }};",
            f"layout(set = 0, binding = 2) buffer C {{ {t} c[]; }};")


TYPES = {"float": np.float32, "int": np.int32, "uint": np.uint32}
OPS = {"add": "a[i] + b[i]", "mul": "a[i] * b[i]", "sub": "a[i] - b[i]", "max": "max(a[i], b[i])"}


def inputs(dtype: Any, n: int = N, *, salt: int = 0) -> np.ndarray:
    rng = np.random.default_rng(SEED + salt)
    if dtype == np.float32:
        return rng.standard_normal(n).astype(np.float32)
    low = 0 if dtype == np.uint32 else -1000
    return rng.integers(low, 1000, n).astype(dtype)


def arithmetic(t: str, op: str) -> Callable[[ScenarioBuilder], None]:
    def build(b: ScenarioBuilder) -> None:
        three_buffers(b, glsl(f"uint i = gl_GlobalInvocationID.x; c[i] = {OPS[op]};", *buffers_decl(t)),
                      inputs(TYPES[t]), inputs(TYPES[t], salt=1))
    return build


def push_constants(t: str, scale: float, bias: float) -> Callable[[ScenarioBuilder], None]:
    def build(b: ScenarioBuilder) -> None:
        shader = glsl("uint i = gl_GlobalInvocationID.x; c[i] = a[i] * pc.scale + b[i] + pc.bias;",
                      f"layout(push_constant) uniform P {{ {t} scale; {t} bias; }} pc;", *buffers_decl(t))
        three_buffers(b, shader, inputs(TYPES[t]), inputs(TYPES[t], salt=2), push_constants_size=8)
        b.raw("push", np.array([scale, bias], dtype=TYPES[t]))
        b.commands[0]["dispatch_compute"]["push_data_ref"] = "push"
    return build


def specialization(t: str, local: int, factor: float) -> Callable[[ScenarioBuilder], None]:
    def build(b: ScenarioBuilder) -> None:
        shader = glsl("uint i = gl_GlobalInvocationID.x; c[i] = a[i] * F + b[i];",
                      f"layout(constant_id = 1) const {t} F = {t}(1);", *buffers_decl(t),
                      local="layout(local_size_x_id = 0) in;")
        value = float(factor) if t == "float" else int(factor)
        three_buffers(b, shader, inputs(TYPES[t]), inputs(TYPES[t], salt=3),
                      specialization_constants=[{"id": 0, "value": local}, {"id": 1, "value": value}])
        b.commands[0]["dispatch_compute"]["rangeND"] = [N // local]
    return build


# format -> (GLSL layout qualifier, image type prefix, the stored value for texel p)
IMAGE_FORMATS = {
    "R32G32B32A32_SFLOAT": ("rgba32f", "", "vec4(p.x, p.y, p.x * 10 + p.y, 1.0)"),
    "R16G16B16A16_SFLOAT": ("rgba16f", "", "vec4(p.x * 0.5, p.y * 0.25, -p.x, 2.0)"),
    "R32_SFLOAT": ("r32f", "", "vec4(p.x * 3.5 - p.y, 0, 0, 0)"),
    "R16G16_SFLOAT": ("rg16f", "", "vec4(p.x, -p.y, 0, 0)"),
    "R8G8B8A8_UNORM": ("rgba8", "", "vec4(p.x / 8.0, p.y / 4.0, 0.5, 1.0)"),
    "R32_UINT": ("r32ui", "u", "uvec4(p.x * 1000 + p.y, 0, 0, 0)"),
    "R16G16B16A16_SINT": ("rgba16i", "i", "ivec4(p.x, -p.y, p.x * p.y, -7)"),
    "R8G8_UINT": ("rg8ui", "u", "uvec4(p.x, p.y + 200, 0, 0)"),
}


def image_store(fmt: str) -> Callable[[ScenarioBuilder], None]:
    def build(b: ScenarioBuilder) -> None:
        q, prefix, value = IMAGE_FORMATS[fmt]
        b.shader("store", glsl(f"ivec2 p = ivec2(gl_GlobalInvocationID.xy); imageStore(img, p, {value});",
                               f"layout(set = 0, binding = 0, {q}) uniform writeonly {prefix}image2D img;"))
        b.resources.append({"image": {"uid": "img", "dims": [1, W, H, 1], "format": f"VK_FORMAT_{fmt}",
                                      "shader_access": "writeonly", "dst": "img.dds"}})
        b.dispatch("store", [(0, 0, "img")], [W, H, 1])
    return build


def barrier(n: int, kind: str = "dispatch_barrier") -> Callable[[ScenarioBuilder], None]:
    """tmp = a * 2 in one dispatch; an explicit buffer barrier (command ``kind``: the specification's
    dispatch_barrier or the reference 0.11's pipeline_barrier); c = tmp + b in the next."""
    def build(b: ScenarioBuilder) -> None:
        b.shader("double", glsl("uint i = gl_GlobalInvocationID.x; t[i] = a[i] * 2.0;",
                                "layout(set = 0, binding = 0) readonly buffer A { float a[]; };",
                                "layout(set = 0, binding = 1) buffer T { float t[]; };"))
        b.shader("add", ADD_FLOAT)
        a = inputs(np.float32, n)
        b.buffer("a", a.nbytes, a, shader_access="readonly").buffer("tmp", a.nbytes)
        b.buffer("b", a.nbytes, inputs(np.float32, n, salt=4), shader_access="readonly").buffer("c", a.nbytes, dst="c.npy")
        b.resource("buffer_barrier", uid="bb", buffer_resource="tmp", offset=0, size=a.nbytes, src_access="compute_shader_write",
                   dst_access="compute_shader_read", src_stage=["compute"], dst_stage=["compute"])
        b.dispatch("double", [(0, 0, "a"), (0, 1, "tmp")], [n], implicit_barrier=False)
        b.commands.append({kind: {"memory_barrier_refs": [], "image_barrier_refs": [], "tensor_barrier_refs": [],
                                  "buffer_barrier_refs": ["bb"]}})
        b.dispatch("add", [(0, 0, "tmp"), (0, 1, "b"), (0, 2, "c")], [n])
    return build


def frames(count: int) -> Callable[[ScenarioBuilder], None]:
    """acc += a each frame, ``count`` frames, acc written after each."""
    def build(b: ScenarioBuilder) -> None:
        b.shader("acc", glsl("uint i = gl_GlobalInvocationID.x; s[i] += a[i] * float(i % 3 + 1);",
                             "layout(set = 0, binding = 0) readonly buffer A { float a[]; };",
                             "layout(set = 0, binding = 1) buffer S { float s[]; };"))
        a = inputs(np.float32)
        b.buffer("a", a.nbytes, a, shader_access="readonly").buffer("s", a.nbytes, dst="s.npy")
        for frame in range(count):
            b.dispatch("acc", [(0, 0, "a"), (0, 1, "s")], [N])
            b.boundary(["s"], frame)
    return build


def group_alias(offset: int) -> Callable[[ScenarioBuilder], None]:
    """One buffer of a memory group written, another at ``offset`` into it read back doubled."""
    def build(b: ScenarioBuilder) -> None:
        b.shader("write", glsl("uint i = gl_GlobalInvocationID.x; w[i] = i * 7u + 1u;",
                               "layout(set = 0, binding = 0) buffer Wr { uint w[]; };"))
        b.shader("read", glsl("uint i = gl_GlobalInvocationID.x; o[i] = r[i] * 2u;",
                              "layout(set = 0, binding = 0) readonly buffer R { uint r[]; };",
                              "layout(set = 0, binding = 1) buffer O { uint o[]; };"))
        b.buffer("first", N * 4, memory_group={"id": "g"}, dst="first.npy")
        b.buffer("second", N * 4 - offset, memory_group={"id": "g", "offset": offset}, shader_access="readonly")
        b.buffer("out", N * 4 - offset, dst="out.npy")
        b.dispatch("write", [(0, 0, "first")], [N])
        b.dispatch("read", [(0, 0, "second"), (0, 1, "out")], [(N * 4 - offset) // 4])
    return build


TENSOR_COPY = """#version 450
#extension GL_ARM_tensors : require
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) uniform tensorARM<{t}, 2> T;
layout(set = 0, binding = 1) buffer O {{ {t} o[]; }};
void main() {{
    uint r = gl_GlobalInvocationID.y, c = gl_GlobalInvocationID.x;
    {t} v; tensorReadARM(T, uint[](r, c), v); o[r * {cols} + c] = v * {t}(3);
}}
"""
TENSOR_FORMATS = {"float": ("VK_FORMAT_R32_SFLOAT", np.float32), "int": ("VK_FORMAT_R32_SINT", np.int32),
                  "uint": ("VK_FORMAT_R32_UINT", np.uint32)}


def tensor_read(t: str, rows: int, cols: int) -> Callable[[ScenarioBuilder], None]:
    def build(b: ScenarioBuilder) -> None:
        fmt, dtype = TENSOR_FORMATS[t]
        b.shader("copy", TENSOR_COPY.format(t=t, cols=cols))
        x = inputs(dtype, rows * cols, salt=5).reshape(rows, cols)
        b.resources.append({"tensor": {"uid": "x", "dims": [rows, cols], "format": fmt, "shader_access": "readonly",
                                       "src": b.npy("x.npy", x), "dst": "x_out.npy"}})
        b.buffer("o", x.nbytes, dst="o.npy")
        b.dispatch("copy", [(0, 0, "x"), (0, 1, "o")], [cols, rows, 1])
    return build


def tensor_over_image(b: ScenarioBuilder) -> None:
    """A shader writes an image; a tensor of its memory group reads it (READ_TENSOR), written as .npy."""
    b.shader("write", WRITE_PATTERN).shader("read", READ_TENSOR, build_options=f"-DWIDTH={W}")
    aliased_image_and_tensor(b, 0, H, other=0)
    next(r["image"] for r in b.resources if "image" in r)["shader_access"] = "writeonly"
    b.buffer("out", W * H * 16, dst="out.npy")
    b.dispatch("write", [(0, 0, "img")], [W, H])
    b.dispatch("read", [(0, 0, "t"), (0, 1, "out")], [W, H])


CORPUS: dict[str, Callable[[ScenarioBuilder], None]] = {
    **{f"arith-{t}-{op}": arithmetic(t, op) for t in TYPES for op in OPS},
    **{f"push-{t}-{i}": push_constants(t, s, o) for t in ("float", "int") for i, (s, o) in enumerate([(3, -2), (-1, 5)])},
    **{f"spec-{t}-{local}": specialization(t, local, f) for t, local, f in
       [("float", 1, 0.5), ("float", 16, -3), ("int", 4, 7), ("uint", 64, 9)]},
    **{f"image-{fmt}": image_store(fmt) for fmt in IMAGE_FORMATS},
    **{f"barrier-{n}": barrier(n) for n in (1, 16, 64)},
    **{f"barrier-pipeline-{n}": barrier(n, "pipeline_barrier") for n in (8, 32)},
    **{f"frames-{n}": frames(n) for n in (2, 3, 5)},
    **{f"group-alias-{offset}": group_alias(offset) for offset in (0, 64, 128)},
    **{f"tensor-{t}-{r}x{c}": tensor_read(t, r, c) for t, r, c in [("float", 4, 8), ("int", 2, 16), ("uint", 8, 8)]},
    "tensor-over-image": tensor_over_image,
}


def test_the_corpus_is_wide_enough() -> None:
    assert len(CORPUS) >= 40
    kinds = {name.split("-")[0] for name in CORPUS}
    assert kinds == {"arith", "push", "spec", "image", "barrier", "frames", "group", "tensor"}


@pytest.mark.slow
@pytest.mark.device
@pytest.mark.parametrize("name", sorted(CORPUS))
def test_the_corpus_through_both_runners(name: str, builder: ScenarioBuilder, tmp_path: Path) -> None:
    CORPUS[name](builder)
    assert_identical(builder.save(), tmp_path)


def test_the_reference_is_found() -> None:
    assert reference_runner() is not None and os.access(reference_runner(), os.X_OK)
