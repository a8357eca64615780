"""``vkcap run`` on real Vulkan (lavapipe in CI): every result checked against a numpy reference."""
from __future__ import annotations

import json
import os
import stat
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.needs import missing

from tests.builders import ADD_FLOAT, ADD_INT, REPO, ScenarioBuilder, load_output, vkcap
from vkcap.cli import main

pytestmark = pytest.mark.device

N = 256


def run_ok(*args: str | Path) -> None:
    code = main([str(a) for a in args])
    assert code == 0


def three_buffer_add(b: ScenarioBuilder, source: str, dtype: type, a: np.ndarray, bb: np.ndarray) -> Path:
    size = a.nbytes
    b.shader("add", source)
    b.buffer("A", size, a, shader_access="readonly").buffer("B", size, bb, shader_access="readonly")
    b.buffer("C", size, dst="c.npy")
    b.dispatch("add", [(0, 0, "A"), (0, 1, "B"), (0, 2, "C")], [len(a)])
    return b.save()


def test_float_add(builder: ScenarioBuilder, tmp_path: Path) -> None:
    a = np.random.default_rng(1).standard_normal(N).astype(np.float32)
    b = np.random.default_rng(2).standard_normal(N).astype(np.float32)
    scenario = three_buffer_add(builder, ADD_FLOAT, np.float32, a, b)
    run_ok("run", scenario, "--output", tmp_path / "out")
    np.testing.assert_array_equal(load_output(tmp_path / "out" / "c.npy", np.float32), a + b)


def test_int_add(builder: ScenarioBuilder, tmp_path: Path) -> None:
    a = np.arange(-N, N, 2, dtype=np.int32) * 1000
    b = np.full(N, 2**30, dtype=np.int32)
    scenario = three_buffer_add(builder, ADD_INT, np.int32, a, b)
    run_ok("run", scenario, "--output", tmp_path / "out")
    np.testing.assert_array_equal(load_output(tmp_path / "out" / "c.npy", np.int32), a + b)


def test_output_defaults_to_scenario_folder_and_reference_spelling(builder: ScenarioBuilder) -> None:
    a = np.ones(16, np.float32)
    scenario = three_buffer_add(builder, ADD_FLOAT, np.float32, a, a)
    proc = vkcap("--scenario", scenario)  # the reference runner's spelling, no subcommand
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(load_output(builder.root / "c.npy", np.float32), a * 2)


PUSH_SHADER = """#version 450
layout(local_size_x = 1) in;
layout(push_constant) uniform P { float scale; int offset; } pc;
layout(set = 0, binding = 0) buffer Out { float o[]; };
void main() { uint i = gl_GlobalInvocationID.x; o[i] = float(i) * pc.scale + float(pc.offset); }
"""


def test_push_constants(builder: ScenarioBuilder, tmp_path: Path) -> None:
    push = np.frombuffer(np.float32(2.5).tobytes() + np.int32(-7).tobytes(), dtype=np.uint8)
    builder.shader("s", PUSH_SHADER, push_constants_size=8).raw("pc", push)
    builder.buffer("out", N * 4, dst="o.npy")
    builder.dispatch("s", [(0, 0, "out")], [N], push_data_ref="pc")
    run_ok("run", builder.save(), "--output", tmp_path)
    np.testing.assert_array_equal(load_output(tmp_path / "o.npy", np.float32), np.arange(N, dtype=np.float32) * 2.5 - 7)


SPEC_SHADER = """#version 450
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const int ADD = 100;
layout(constant_id = 2) const float MUL = 1.0;
layout(set = 0, binding = 0) buffer Out { float o[]; };
void main() { uint i = gl_GlobalInvocationID.x; o[i] = float(i) * MUL + float(ADD); }
"""


@pytest.mark.parametrize(
    "constants, add, mul, local",
    [
        ([{"id": 0, "value": 8}, {"id": 1, "value": -3}, {"id": 2, "value": 0.5}], -3, 0.5, 8),
        ([{"id": 0, "value": 4}], 100, 1.0, 4),  # ADD and MUL keep the shader's defaults
    ],
)
def test_specialization_constants(builder: ScenarioBuilder, tmp_path: Path, constants: list, add: int, mul: float, local: int) -> None:
    builder.shader("s", SPEC_SHADER, specialization_constants=constants)
    builder.buffer("out", N * 4, dst="o.npy")
    builder.dispatch("s", [(0, 0, "out")], [N // local])
    run_ok("run", builder.save(), "--output", tmp_path)
    expected = np.arange(N, dtype=np.float32) * np.float32(mul) + np.float32(add)
    np.testing.assert_array_equal(load_output(tmp_path / "o.npy", np.float32), expected)


def test_glsl_define_and_include_folder(builder: ScenarioBuilder, tmp_path: Path) -> None:
    builder.file("inc/helpers.glsl", "float twice(float x) { return 2.0 * x; }\n")
    source = """#version 450
#extension GL_GOOGLE_include_directive : require
#include "helpers.glsl"
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer Out { float o[]; };
void main() { uint i = gl_GlobalInvocationID.x; o[i] = twice(float(i)) + FACTOR; }
"""
    builder.shader("s", source, build_options="-DFACTOR=3.0", include_dirs=["inc"])
    builder.buffer("out", N * 4, dst="o.npy")
    builder.dispatch("s", [(0, 0, "out")], [N])
    run_ok("run", builder.save(), "--output", tmp_path)
    np.testing.assert_array_equal(load_output(tmp_path / "o.npy", np.float32), np.arange(N, dtype=np.float32) * 2 + 3)


INCLUDING_SHADER = """#version 450
#extension GL_GOOGLE_include_directive : require
#include "helpers.glsl"
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer Out { float o[]; };
void main() { uint i = gl_GlobalInvocationID.x; o[i] = scale(float(i)); }
"""


def test_spirv_cache_is_shared_by_copies_of_a_shader_but_not_across_includes(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A shader without #include compiles to the same SPIR-V wherever it lies, so copies share one cache
    entry; one with #include depends on its folder: the same text beside another helpers.glsl compiles anew."""
    monkeypatch.setenv("VKCAP_CACHE_DIR", str(tmp_path / "cache"))
    spv = tmp_path / "cache" / "spirv"
    for k in (1, 2):
        b = ScenarioBuilder(tmp_path / f"plain{k}")
        b.shader("s", SCALE_SHADER).buffer("x", N * 4, np.ones(N, np.float32)).buffer("y", N * 4, dst="y.npy")
        b.dispatch("s", [(0, 0, "x"), (0, 1, "y")], [N])
        run_ok("run", b.save(), "--output", tmp_path / f"out{k}")
        np.testing.assert_array_equal(load_output(tmp_path / f"out{k}" / "y.npy", np.float32), np.full(N, 4, np.float32))
    assert len(list(spv.glob("*.spv"))) == 1
    for k, factor in ((1, 2), (2, 5)):
        b = ScenarioBuilder(tmp_path / f"inc{k}")
        b.file("helpers.glsl", f"float scale(float x) {{ return {factor}.0 * x; }}\n")
        b.shader("s", INCLUDING_SHADER).buffer("out", N * 4, dst="o.npy")
        b.dispatch("s", [(0, 0, "out")], [N])
        run_ok("run", b.save(), "--output", tmp_path / f"inc_out{k}")
        expected = np.arange(N, dtype=np.float32) * np.float32(factor)
        np.testing.assert_array_equal(load_output(tmp_path / f"inc_out{k}" / "o.npy", np.float32), expected)
    assert len(list(spv.glob("*.spv"))) == 3


SCALE_SHADER = """#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) readonly buffer I { float i_[]; };
layout(set = 0, binding = 1) buffer O { float o[]; };
void main() { uint i = gl_GlobalInvocationID.x; o[i] = i_[i] * 3.0 + 1.0; }
"""


@pytest.mark.parametrize("explicit", [False, True], ids=["implicit-barriers", "explicit-barriers"])
def test_chained_dispatches(builder: ScenarioBuilder, tmp_path: Path, explicit: bool) -> None:
    x = np.linspace(0, 1, N, dtype=np.float32)
    builder.shader("s", SCALE_SHADER)
    builder.buffer("x", N * 4, x, shader_access="readonly").buffer("y", N * 4).buffer("z", N * 4, dst="z.npy")
    if explicit:
        builder.resource(
            "buffer_barrier", uid="yb", buffer_resource="y", size=N * 4,
            src_access="ACCESS_COMPUTE_SHADER_WRITE", dst_access="ACCESS_COMPUTE_SHADER_READ",
            src_stage=["COMPUTE"], dst_stage=["COMPUTE"],
        )
        builder.resource(
            "memory_barrier", uid="mb", src_access="ACCESS_MEMORY_WRITE", dst_access="ACCESS_MEMORY_READ",
            src_stage=["ALL"], dst_stage=["ALL"],
        )
    builder.dispatch("s", [(0, 0, "x"), (0, 1, "y")], [N], implicit_barrier=not explicit)
    if explicit:
        builder.barrier(buffer_barrier_refs=["yb"], memory_barrier_refs=["mb"])
    builder.dispatch("s", [(0, 0, "y"), (0, 1, "z")], [N], implicit_barrier=not explicit)
    run_ok("run", builder.save(), "--output", tmp_path)
    expected = (x * np.float32(3) + np.float32(1)) * np.float32(3) + np.float32(1)
    np.testing.assert_allclose(load_output(tmp_path / "z.npy", np.float32), expected, rtol=1e-6)


ACCUMULATE = """#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) readonly buffer I { float inc[]; };
layout(set = 0, binding = 1) buffer O { float acc[]; };
void main() { uint i = gl_GlobalInvocationID.x; acc[i] += inc[i]; }
"""


def accumulating(builder: ScenarioBuilder, frames: int) -> np.ndarray:
    inc = np.arange(N, dtype=np.float32) / 4
    builder.shader("accumulate", ACCUMULATE)
    builder.buffer("inc", N * 4, inc, shader_access="readonly").buffer("acc", N * 4, dst="acc.npy")
    for f in range(frames):
        builder.dispatch("accumulate", [(0, 0, "inc"), (0, 1, "acc")], [N])
        builder.boundary(["acc"], f)
    return inc


def test_repeat(builder: ScenarioBuilder, tmp_path: Path) -> None:
    inc = accumulating(builder, 1)
    run_ok("run", builder.save(), "--output", tmp_path, "--repeat", "5")
    np.testing.assert_array_equal(load_output(tmp_path / "acc.npy", np.float32), inc * 5)


def test_several_frames(builder: ScenarioBuilder, tmp_path: Path) -> None:
    inc = accumulating(builder, 7)
    perf = tmp_path / "perf.json"
    prof = tmp_path / "prof.json"
    run_ok("run", builder.save(), "--output", tmp_path, "--profiling-dump-path", prof, "--perf-counters-dump-path", perf)
    np.testing.assert_array_equal(load_output(tmp_path / "acc.npy", np.float32), inc * 7)
    stamps = json.loads(prof.read_text())["Timestamps"]
    assert len(stamps) == 7 and "Frame" not in stamps[0]  # the reference's keys: no frame number
    assert all(s["Command name"] == "accumulate" and s["Cycle count for command"] >= 0 for s in stamps)
    counters = json.loads(perf.read_text())
    assert counters["unit"] == "microseconds"
    assert {"Scenario Setup", "Pipeline Setup", "Run Scenario", "Save Results"} <= counters.keys()
    assert not {"Load Pipeline Cache", "Save Pipeline Cache"} & counters.keys()
    # the reference's names for each pass (vkcap adds the wall time of the whole execution)
    assert [c["name"] for c in counters["Run Scenario"]["counters"]] == [
        "Reset Query Pool. Iteration: 1", "Creating Command Buffer. Iteration: 1", "Submit Commands. Iteration: 1",
        "Wait for Fence. Iteration: 1", "Execute Frames"]
    # with --repeat, each pass its counters, in pass order; the time of each is the one measured
    run_ok("run", builder.save(), "--output", tmp_path, "--perf-counters-dump-path", perf, "--repeat", "3")
    run = json.loads(perf.read_text())["Run Scenario"]
    names = ("Reset Query Pool", "Creating Command Buffer", "Submit Commands", "Wait for Fence")
    assert [c["name"] for c in run["counters"]] == [f"{n}. Iteration: {i}" for i in (1, 2, 3) for n in names] + ["Execute Frames"]
    assert all(c["value"] == 0 for c in run["counters"] if c["name"].startswith("Reset Query Pool"))
    assert all(c["value"] > 0 for c in run["counters"] if c["name"].startswith(("Creating", "Submit", "Wait")))
    assert run["total time"] == sum(c["value"] for c in run["counters"])
    run_ok("run", builder.save(), "--output", tmp_path, "--perf-counters-dump-path", perf, "--pipeline-caching",
           "--cache-path", tmp_path / "cache")
    counters = json.loads(perf.read_text())
    assert [c["name"] for c in counters["Load Pipeline Cache"]["counters"]] == ["Load Pipeline Cache."]
    assert [c["name"] for c in counters["Save Pipeline Cache"]["counters"]] == [  # as the reference names them
        "Save Pipeline Cache (setup)", "Save Pipeline Cache"]


ALIAS_WRITE = """#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer W { uint w[]; };
void main() { uint i = gl_GlobalInvocationID.x; w[i] = i * 7u + 1u; }
"""
ALIAS_READ = """#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) readonly buffer R { uint r[]; };
layout(set = 0, binding = 1) buffer O { uint o[]; };
void main() { uint i = gl_GlobalInvocationID.x; o[i] = r[i] * 2u; }
"""


def test_memory_group_aliases_buffers(builder: ScenarioBuilder, tmp_path: Path) -> None:
    builder.shader("w", ALIAS_WRITE).shader("r", ALIAS_READ)
    builder.buffer("first", N * 4, memory_group={"uid": "g"}, dst="first.npy")
    builder.buffer("second", N * 4, memory_group={"uid": "g"}, shader_access="readonly")
    builder.buffer("out", N * 4, dst="out.npy")
    builder.dispatch("w", [(0, 0, "first")], [N])
    builder.dispatch("r", [(0, 0, "second"), (0, 1, "out")], [N])
    run_ok("run", builder.save(), "--output", tmp_path)
    written = np.arange(N, dtype=np.uint32) * 7 + 1
    np.testing.assert_array_equal(load_output(tmp_path / "first.npy", np.uint32), written)
    np.testing.assert_array_equal(load_output(tmp_path / "out.npy", np.uint32), written * 2)


@pytest.mark.slow
def test_pipeline_cache_hit_on_second_run(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """The cache file is the reference's (``<stem>.cache`` in ``--cache-path``, the driver's data), with
    vkcap's record in its own cache folder. A first run has no cache: not a miss failure; the second hits; a changed
    shader misses and ``--fail-on-pipeline-cache-miss`` refuses it before writing anything."""
    a = np.ones(32, np.float32)
    scenario = three_buffer_add(builder, ADD_FLOAT, np.float32, a, a)
    cache = tmp_path / "cache"
    common = ["run", scenario, "--output", tmp_path / "o", "--cache-path", cache]
    first = vkcap(*common, "--fail-on-pipeline-cache-miss")
    assert first.returncode == 0 and "pipeline cache: 0 hit(s), 1 miss(es)" in first.stderr, first.stderr
    assert sorted(p.name for p in cache.iterdir()) == ["scenario.cache"]  # one file, as the reference leaves
    second = vkcap(*common, "--fail-on-pipeline-cache-miss")
    assert second.returncode == 0 and "pipeline cache: 1 hit(s), 0 miss(es)" in second.stderr
    cleared = vkcap(*common, "--pipeline-caching", "--clear-pipeline-cache")
    assert cleared.returncode == 0 and "pipeline cache: 0 hit(s), 1 miss(es)" in cleared.stderr
    builder.file("add.comp", ADD_FLOAT.replace("a[i] + b[i]", "a[i] + b[i] + 1.0"))
    (tmp_path / "o" / "c.npy").unlink()
    changed = vkcap(*common, "--fail-on-pipeline-cache-miss")
    assert changed.returncode == 1
    assert "pipeline cache miss for shader 'add' (--fail-on-pipeline-cache-miss)" in changed.stderr
    assert not (tmp_path / "o" / "c.npy").exists()


@pytest.mark.slow
@pytest.mark.reference
def test_the_reference_and_vkcap_share_a_pipeline_cache(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """A cache the reference wrote is read by vkcap (and kept, not replaced by another format), and the
    reference reads the one vkcap wrote."""
    from tests.reference import reference_env, reference_command, reference_runner

    if reference_runner() is None:
        missing("the reference runner is not installed")
    a = np.ones(32, np.float32)
    scenario = three_buffer_add(builder, ADD_FLOAT, np.float32, a, a)
    cache = tmp_path / "cache"
    cache.mkdir()
    ref = subprocess.run(reference_command(scenario, tmp_path / "r", "--pipeline-caching", "--cache-path", cache),
                         env=reference_env(), capture_output=True, text=True)
    assert ref.returncode == 0, ref.stdout[-2000:]
    written = (cache / "scenario.cache").read_bytes()
    ours = vkcap("run", scenario, "--output", tmp_path / "o", "--pipeline-caching", "--cache-path", cache)
    assert ours.returncode == 0, ours.stderr
    assert (cache / "scenario.cache").read_bytes()[:16] == written[:16]  # the driver's header, not another format
    again = subprocess.run(reference_command(scenario, tmp_path / "r", "--pipeline-caching", "--cache-path", cache),
                           env=reference_env(), capture_output=True, text=True)
    assert again.returncode == 0, again.stdout[-2000:]


def test_dry_run_builds_and_caches_but_writes_no_output(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """As the reference: the pipeline cache is filled, the dump paths get the set-up (the profiling
    document is empty: nothing ran), no dst is written."""
    a = np.ones(32, np.float32)
    scenario = three_buffer_add(builder, ADD_FLOAT, np.float32, a, a)
    out = tmp_path / "out"
    run_ok("run", scenario, "--output", out, "--dry-run", "--perf-counters-dump-path", tmp_path / "perf.json",
           "--profiling-dump-path", tmp_path / "prof.json", "--pipeline-caching", "--cache-path", tmp_path)
    assert not out.exists()
    assert json.loads((tmp_path / "prof.json").read_text()) == {}
    perf = json.loads((tmp_path / "perf.json").read_text())
    assert [c["name"] for c in perf["Pipeline Setup"]["counters"]] == ["Create Pipeline: add"]
    assert (tmp_path / "scenario.cache").is_file()
    hit = vkcap("run", scenario, "--output", out, "--fail-on-pipeline-cache-miss", "--cache-path", tmp_path)
    assert hit.returncode == 0 and "pipeline cache: 1 hit(s), 0 miss(es)" in hit.stderr


def test_failed_run_keeps_previous_output(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """A run that fails leaves an existing dst file exactly as it was (outputs are renamed into place)."""
    a = np.ones(32, np.float32)
    scenario = three_buffer_add(builder, ADD_FLOAT, np.float32, a, a)
    out = tmp_path / "out"
    out.mkdir()
    (out / "c.npy").write_bytes(b"previous")
    primed = tmp_path / "primed"  # a cache of this device holding other pipelines: this one misses
    primed.mkdir()
    device = json.loads(vkcap("devices", "--json").stdout)[0]
    header = struct.pack("<4I", 32, 1, device["vendor_id"], device["device_id"]) + bytes.fromhex(device["pipeline_cache_uuid"])
    (primed / "scenario.cache").write_bytes(header)
    proc = vkcap("run", scenario, "--output", out, "--cache-path", primed, "--fail-on-pipeline-cache-miss")
    assert proc.returncode == 1, proc.stderr
    assert (out / "c.npy").read_bytes() == b"previous"
    assert sorted(p.name for p in out.iterdir()) == ["c.npy"]


def test_outputs_reports_and_traces_get_the_mode_the_umask_gives(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """Files are created as ``open(path, "wb")`` would (0666 less the umask), not private to the user."""
    a = np.ones(32, np.float32)
    scenario = three_buffer_add(builder, ADD_FLOAT, np.float32, a, a)
    old = os.umask(0o027)
    try:
        run_ok("run", scenario, "--output", tmp_path / "run", "--perf-counters-dump-path", tmp_path / "perf.json")
        run_ok("record", scenario, "--output", tmp_path / "rec", "-o", tmp_path / "t.vkt")
    finally:
        os.umask(old)
    written = [tmp_path / "run" / "c.npy", tmp_path / "perf.json", tmp_path / "rec" / "c.npy", tmp_path / "t.vkt"]
    modes = {str(p.relative_to(tmp_path)): oct(stat.S_IMODE(p.stat().st_mode)) for p in written}
    assert modes == {str(p.relative_to(tmp_path)): "0o640" for p in written}
    np.testing.assert_array_equal(load_output(tmp_path / "rec" / "c.npy", np.float32), a * 2)


def test_shader_compile_error_names_file_and_line(builder: ScenarioBuilder) -> None:
    builder.shader("bad", "#version 450\nlayout(local_size_x = 1) in;\nvoid main() { undefined_thing = 1; }\n")
    builder.buffer("o", 16, dst="o.npy")
    builder.dispatch("bad", [(0, 0, "o")], [1])
    scenario = builder.save()
    proc = vkcap("run", scenario)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"vkcap: error: {scenario}: resources[0].shader.src: shader compilation failed: "
        "ERROR: bad.comp:3: 'undefined_thing' : undeclared identifier"
    )
    assert "Traceback" not in proc.stderr


def test_tensor_without_emulation_layers_is_refused(builder: ScenarioBuilder) -> None:
    builder.resource("tensor", uid="t", dims=[4], format="VK_FORMAT_R32_SFLOAT", shader_access="readwrite")
    scenario = builder.save()
    proc = vkcap("run", scenario, "--no-emulation-layers")
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("vkcap: error: device '")
    assert proc.stderr.strip().endswith("lacks VK_ARM_tensors and --no-emulation-layers was given")


def test_devices_lists_lavapipe_with_emulated_tensors() -> None:
    proc = vkcap("devices", "--json")
    assert proc.returncode == 0, proc.stderr
    devices = json.loads(proc.stdout)
    assert devices and {"device_name", "driver_name", "driver_version", "api_version", "tensors", "graphs"} <= devices[0].keys()
    assert all(d["tensors"] in ("native", "emulated") for d in devices)


def test_sizes_beyond_the_device_are_refused_before_allocation(builder: ScenarioBuilder) -> None:
    builder.shader("add", ADD_FLOAT)
    builder.buffer("huge", 1 << 50)  # a petabyte
    builder.dispatch("add", [(0, 0, "huge"), (0, 1, "huge2"), (0, 2, "huge3")], [1])
    builder.buffer("huge2", 16).buffer("huge3", 16)
    scenario = builder.save()
    proc = vkcap("run", scenario)
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip()
    assert line.startswith(f"vkcap: error: {scenario}: resources[1].buffer.size: 1048576.0 GiB exceeds this device's "
                           "largest storage buffer (maxStorageBufferRange ")
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_too_many_workgroups_are_refused(builder: ScenarioBuilder) -> None:
    a = np.ones(4, np.float32)
    scenario = three_buffer_add(builder, ADD_FLOAT, np.float32, a, a)
    doc = json.loads(scenario.read_text())
    doc["commands"][0]["dispatch_compute"]["rangeND"] = [1 << 31]
    scenario.write_text(json.dumps(doc))
    proc = vkcap("run", scenario)
    assert proc.returncode == 2
    assert f"commands[0].dispatch_compute.rangeND[0]: {1 << 31} workgroups exceed this device's maxComputeWorkGroupCount[0]" in proc.stderr


class CapturingNothing:
    """A frame consumer (vkcore.exec.executor.FrameConsumer) that asks for no copies: tests of the
    protocol define ``slots`` and ``consume``."""

    def slot_size(self, session: object) -> int:
        return 0

    def layout(self, frame: object, seq: int) -> object:
        from vkcore.exec.executor import NO_CAPTURE

        return NO_CAPTURE


def test_a_consumers_work_holds_its_slot_until_done_and_its_failure_ends_the_run(tmp_path: Path) -> None:
    """The executor's consumer protocol: ``consume`` sees the frames in order, one at a time; the work
    it hands to its own threads keeps the frame's slot (never more frames in flight than slots); the
    run waits for all of it, and fails with the first failure."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    import trio

    from vkcore.exec.runner import RunOptions, run_async

    pool = ThreadPoolExecutor(max_workers=8)
    seen: list[int] = []
    running: set[int] = set()
    finished: list[int] = []
    most = [0]
    lock = threading.Lock()

    def work(seq: int) -> None:
        with lock:
            running.add(seq)
            most[0] = max(most[0], len(running))
        time.sleep(0.02)
        with lock:
            running.discard(seq)
            finished.append(seq)
        if seq == 5:
            raise ValueError("frame 5 failed")

    class Consumer(CapturingNothing):
        slots = 3

        def consume(self, snapshot: object) -> object:
            seen.append(snapshot.seq)  # type: ignore[attr-defined]
            return pool.submit(work, snapshot.seq)  # type: ignore[attr-defined]

    options = RunOptions(REPO / "examples" / "add" / "scenario.json", output=tmp_path, repeat=10)
    with pytest.raises(ValueError, match="frame 5 failed"):
        trio.run(lambda: run_async(options, consumer=Consumer()))  # type: ignore[arg-type]
    assert seen == list(range(len(seen))) and 6 <= len(seen) <= 6 + Consumer.slots
    assert sorted(finished) == seen and not running  # nothing left reading a slot
    assert most[0] <= Consumer.slots
    pool.shutdown()


def test_frames_complete_without_trio_and_their_events_reach_trio_in_order(tmp_path: Path) -> None:
    """The completing thread goes from one frame to the next by itself: with trio's thread held up in
    an event handler (at frame 2's start), frames 0 and 1 are still waited for and consumed, in one
    thread that is not trio's. The events it reports are emitted in trio's thread, each frame's
    FrameStarted before its FrameFinished, the finished ones in frame order, all before the run
    returns."""
    import threading

    import trio

    from vkcore.exec.executor import FrameFinished, FrameStarted
    from vkcore.exec.runner import RunOptions, run_async

    consumers: set[int] = set()
    consumed = {1: threading.Event()}
    emitted: list[tuple[str, int, int]] = []
    held_up: list[bool] = []

    class Consumer(CapturingNothing):
        slots = 3

        def consume(self, snapshot: object) -> None:
            consumers.add(threading.get_ident())
            if snapshot.seq in consumed:  # type: ignore[attr-defined]
                consumed[snapshot.seq].set()  # type: ignore[attr-defined]

    def on_event(event: object) -> None:
        if isinstance(event, (FrameStarted, FrameFinished)):
            emitted.append((type(event).__name__, event.seq, threading.get_ident()))
        if isinstance(event, FrameStarted) and event.seq == 2:
            held_up.append(consumed[1].wait(timeout=20))

    options = RunOptions(REPO / "examples" / "add" / "scenario.json", output=tmp_path, repeat=30)
    trio_thread = threading.get_ident()
    trio.run(lambda: run_async(options, on_event=on_event, consumer=Consumer()))  # type: ignore[arg-type]
    assert held_up == [True]
    assert len(consumers) == 1 and trio_thread not in consumers
    assert {thread for _, _, thread in emitted} == {trio_thread}
    finished = [seq for kind, seq, _ in emitted if kind == "FrameFinished"]
    started = [seq for kind, seq, _ in emitted if kind == "FrameStarted"]
    assert finished == started == list(range(len(finished))) and len(finished) % 30 == 0
    assert all(emitted.index(("FrameStarted", seq, trio_thread)) < emitted.index(("FrameFinished", seq, trio_thread))
               for seq in finished)


@pytest.mark.slow
def test_a_consumers_error_is_the_runs_error_whatever_the_submitter_was_doing(tmp_path: Path) -> None:
    """A failing ``consume`` ends the completing thread while the submitter may still be submitting:
    the run fails with the consumer's error. (When the two met through a trio channel, the submitter
    could meet its closed end first, and a recording whose preamble hit a full disk was reported as an
    internal error, BrokenResourceError; 40 runs lost that race about 20 times.)"""
    from concurrent.futures import Future

    import trio

    from vkcore.exec.runner import RunOptions, run_async

    class Failing(CapturingNothing):
        slots = 2
        held: Future[None] = Future()

        def consume(self, snapshot: object) -> Future[None] | None:
            seq = snapshot.seq  # type: ignore[attr-defined]
            if seq == 1:
                return self.held  # holds its slot until frame 2's consume
            if seq == 2:  # frees frame 1's slot, so the submitter runs on while the completer ends
                self.held.set_result(None)
                raise ValueError("no room left")
            return None

    options = RunOptions(REPO / "examples" / "add" / "scenario.json", output=tmp_path, repeat=20)
    for _ in range(40):
        consumer = Failing()
        consumer.held = Future()
        with pytest.raises(ValueError, match="no room left"):
            trio.run(lambda: run_async(options, consumer=consumer))  # type: ignore[arg-type]


def test_frames_cost_trio_no_wake_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A slot freed by the consumer's threads wakes the submitting thread, not trio, and events wait
    for trio to look: 60 frames whose slots are held by work in a pool make no call into trio through
    the slots and the outbox (each was a wake-up of trio's thread: 1.7 a frame before)."""
    from concurrent.futures import ThreadPoolExecutor

    import trio

    import vkcore.exec.slots as slots
    from vkcore.exec.runner import RunOptions, run_async

    calls: list[object] = []
    tell = slots._tell
    monkeypatch.setattr(slots, "_tell", lambda token, fn, *args: (calls.append(fn), tell(token, fn, *args)))
    pool = ThreadPoolExecutor(max_workers=2)
    events: list[object] = []

    class Consumer(CapturingNothing):
        slots = 3

        def consume(self, snapshot: object) -> object:
            return pool.submit(lambda: None)

    options = RunOptions(REPO / "examples" / "add" / "scenario.json", output=tmp_path, repeat=60)
    trio.run(lambda: run_async(options, on_event=events.append, consumer=Consumer()))  # type: ignore[arg-type]
    pool.shutdown()
    assert len(events) >= 2 * 60  # every FrameStarted and FrameFinished emitted
    assert len(calls) <= 2  # the closing of the outbox, the slots: once a run, not once a frame
