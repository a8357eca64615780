"""``dispatch_optical_flow``: motion vectors through VK_ARM_data_graph_optical_flow (ARM's Graph emulation
layer here), byte for byte ARM's reference runner on every grid size, performance level, optional
image, lod and frame count tried; recorded, replayed and bisected; bad input in one line."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.builders import ScenarioBuilder, vkcap
from tests.reference import assert_same_outputs, reference_runner, run_reference
from vkcore.resources.imageio import read_dds, write_dds

SHIFT = (3, 2)  # the template is the search image moved by this many pixels (x, y)
DXGI = {"VK_FORMAT_R8_UNORM": 61, "VK_FORMAT_R8G8B8A8_UNORM": 28, "VK_FORMAT_B8G8R8A8_UNORM": 87,
        "VK_FORMAT_R16G16_SFLOAT": 34}
CHANNELS = {"VK_FORMAT_R8_UNORM": 1, "VK_FORMAT_R8G8B8A8_UNORM": 4, "VK_FORMAT_B8G8R8A8_UNORM": 4}


def texture(width: int, height: int, seed: int = 1) -> np.ndarray:
    """A smooth random texture (uint8), large enough to cut shifted windows from."""
    rng = np.random.default_rng(seed)
    noise = rng.random((height + 16, width + 16))
    kernel = np.ones(5) / 5
    smooth = np.apply_along_axis(lambda r: np.convolve(r, kernel, "same"), 1, noise)
    smooth = np.apply_along_axis(lambda c: np.convolve(c, kernel, "same"), 0, smooth)
    return (255 * (smooth - smooth.min()) / np.ptp(smooth)).astype(np.uint8)


def image(b: ScenarioBuilder, uid: str, fmt: str, width: int, height: int, *, levels: list[np.ndarray] | None = None,
          **fields: Any) -> None:
    body: dict[str, Any] = {"uid": uid, "dims": [1, width, height, 1], "format": fmt,
                            "shader_access": fields.pop("shader_access", "readonly"), **fields}
    if levels is not None:
        write_dds(b.root / f"{uid}.dds", width, height, DXGI[fmt], levels)
        body["src"] = f"{uid}.dds"
        if len(levels) > 1:
            body["mips"] = len(levels)
    b.resources.append({"image": body})


def pair(b: ScenarioBuilder, width: int, height: int, fmt: str = "VK_FORMAT_R8_UNORM", levels: int = 1) -> None:
    """The search and template images: the template is the search moved by SHIFT."""
    base = texture(width, height)
    dx, dy = SHIFT

    def cut(x0: int, y0: int) -> list[np.ndarray]:
        out = []
        for level in range(levels):
            step = 1 << level
            window = base[y0 : y0 + height : step, x0 : x0 + width : step]
            out.append(np.repeat(window[..., None], CHANNELS[fmt], axis=2) if CHANNELS[fmt] > 1 else window)
        return [np.ascontiguousarray(level) for level in out]

    image(b, "search", fmt, width, height, levels=cut(8, 8))
    image(b, "template", fmt, width, height, levels=cut(8 - dx, 8 - dy))


def optical_flow(b: ScenarioBuilder, width: int, height: int, grid: int, *, hint: bool = False, cost: bool = False,
                 lod: int = 0, **fields: Any) -> dict[str, Any]:
    """The output images (and a hint) for a ``grid`` x ``grid`` flow of a ``width`` x ``height`` input at
    ``lod``, and the command (not yet appended)."""
    ow, oh = -(-(width >> lod) // grid), -(-(height >> lod) // grid)
    image(b, "flow", "VK_FORMAT_R16G16_SFLOAT", ow, oh, shader_access="writeonly", dst="flow.dds")
    bindings: dict[str, Any] = {"search_image": {"set": 0, "id": 0, "resource_ref": "search"},
                                "template_image": {"set": 0, "id": 1, "resource_ref": "template"},
                                "output_image": {"set": 0, "id": 2, "resource_ref": "flow"}}
    if lod:
        bindings["search_image"]["lod"] = bindings["template_image"]["lod"] = lod
    if hint:
        guess = np.full((oh, ow, 2), -1.0, np.float16)
        image(b, "hint", "VK_FORMAT_R16G16_SFLOAT", ow, oh, levels=[guess])
        bindings["hint_motion_vectors"] = {"set": 0, "id": 3, "resource_ref": "hint"}
    if cost:
        image(b, "cost", "VK_FORMAT_R16_UINT", ow, oh, shader_access="writeonly", dst="cost.dds")
        bindings["output_cost"] = {"set": 1, "id": 0, "resource_ref": "cost"}
    return {"dispatch_optical_flow": {"width": width >> lod, "height": height >> lod, "grid_size": f"{grid}x{grid}",
                                      "bindings": bindings, **fields}}


def flow_vectors(path: Path) -> np.ndarray:
    dds = read_dds(path)
    return np.frombuffer(dds.levels[0], np.float16).reshape(dds.height, dds.width, 2).astype(np.float32)


CASES: dict[str, dict[str, Any]] = {
    "8x8": dict(width=64, height=64, grid=8),
    "4x4 fast with cost": dict(width=64, height=64, grid=4, cost=True, performance_level="fast"),
    "2x2 slow with hint, 96x64": dict(width=96, height=64, grid=2, hint=True, performance_level="slow"),
    "1x1 with hint and cost": dict(width=64, height=64, grid=1, hint=True, cost=True),
    "8x8 of 72x72 (rounded up)": dict(width=72, height=72, grid=8),
    "4x4 at lod 1 of 128x128": dict(width=128, height=128, grid=4, lod=1, levels=2),
    "RGBA input, unknown level, mean-flow hint": dict(width=64, height=80, grid=4, fmt="VK_FORMAT_R8G8B8A8_UNORM",
                                                      performance_level="unknown", mean_flow_l1_norm_hint=5),
    "BGRA input, temporal hints off": dict(width=64, height=64, grid=8, fmt="VK_FORMAT_B8G8R8A8_UNORM",
                                           execution_flags=["disable_temporal_hints"]),
    "three frames through the cache": dict(width=64, height=64, grid=4, frames=3),
    "2x2 fast with hint and cost, 80x64": dict(width=80, height=64, grid=2, hint=True, cost=True,
                                               performance_level="fast"),
    "1x1 slow": dict(width=64, height=64, grid=1, performance_level="slow"),
    "4x4 of 100x70 (rounded up)": dict(width=100, height=70, grid=4),
    "BGRA 8x8 with hint and cost over two frames": dict(width=96, height=96, grid=8, fmt="VK_FORMAT_B8G8R8A8_UNORM",
                                                        hint=True, cost=True, frames=2),
}


@pytest.mark.slow
@pytest.mark.device
@pytest.mark.parametrize("case", list(CASES))
def test_optical_flow_matches_the_reference(builder: ScenarioBuilder, tmp_path: Path, case: str) -> None:
    spec = dict(CASES[case])
    width, height, grid = spec.pop("width"), spec.pop("height"), spec.pop("grid")
    frames, fmt, levels = spec.pop("frames", 1), spec.pop("fmt", "VK_FORMAT_R8_UNORM"), spec.pop("levels", 1)
    pair(builder, width, height, fmt, levels)
    command = optical_flow(builder, width, height, grid, **spec)
    for k in range(frames):
        builder.commands.append(command)
        builder.boundary(["flow"], k)
    scenario = builder.save()
    proc = vkcap("run", scenario, "--output", tmp_path / "ours")
    assert proc.returncode == 0, proc.stderr
    names = ["flow.dds"] + (["cost.dds"] if spec.get("cost") else [])
    flow = flow_vectors(tmp_path / "ours" / "flow.dds")
    assert flow.shape == (-(-(height >> spec.get("lod", 0)) // grid), -(-(width >> spec.get("lod", 0)) // grid), 2)
    assert np.isfinite(flow).all() and np.abs(flow).max() > 0
    assert_same_outputs(scenario, tmp_path / "ours", tmp_path, names)


@pytest.mark.slow
@pytest.mark.device
def test_the_flow_finds_the_shift(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """The template holds each search pixel SHIFT further on: the interior's flow vectors are SHIFT (a
    vector points from a search pixel to where the template has it), within half a pixel."""
    pair(builder, 128, 128)
    builder.commands.append(optical_flow(builder, 128, 128, 4, performance_level="slow"))
    proc = vkcap("run", builder.save(), "--output", tmp_path)
    assert proc.returncode == 0, proc.stderr
    interior = flow_vectors(tmp_path / "flow.dds")[4:-4, 4:-4].reshape(-1, 2)
    median = np.median(interior, axis=0)
    assert np.abs(median - SHIFT).max() < 0.5, median


@pytest.mark.slow
@pytest.mark.device
def test_a_first_dispatch_that_reads_the_cache_is_deterministic(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """``input_unchanged`` on the first dispatch reads the optical-flow cache before anything wrote it:
    vkcap zeroes it, so two runs agree byte for byte (the reference's answer changes from run to run)."""
    pair(builder, 64, 64)
    builder.commands.append(optical_flow(builder, 64, 64, 4, execution_flags=["input_unchanged"]))
    scenario = builder.save()
    for run in ("first", "second"):
        proc = vkcap("run", scenario, "--output", tmp_path / run)
        assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "first" / "flow.dds").read_bytes() == (tmp_path / "second" / "flow.dds").read_bytes()


@pytest.mark.slow
@pytest.mark.device
def test_record_replay_and_bisect_an_optical_flow(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """Four frames, each: count, brighten the template (by nothing), optical flow. Recorded at dispatch
    level with checkpoints, replayed within tolerance; a brightening shader replaced by one that changes
    one texel from frame 2 on is found there, before the optical flow that reads it."""
    pair(builder, 64, 64)
    builder.resources[1]["image"]["shader_access"] = "readwrite"
    brighten = """#version 450
layout(local_size_x = 8, local_size_y = 8) in;
layout(set = 0, binding = 0, r8) uniform image2D t;
layout(set = 0, binding = 1) buffer N { uint n; };
void main() { ivec2 q = ivec2(gl_GlobalInvocationID.xy); imageStore(t, q, imageLoad(t, q) + vec4(EXTRA)); }
"""
    builder.shader("brighten", brighten.replace("EXTRA", "0.0"))
    builder.shader("count", "#version 450\nlayout(local_size_x = 1) in;\nlayout(set = 0, binding = 0) buffer N { uint n; };"
                            "\nvoid main() { n += 1u; }\n")
    builder.buffer("n", 4, np.zeros(1, np.uint32))
    command = optical_flow(builder, 64, 64, 8)
    for k in range(4):
        builder.dispatch("count", [(0, 0, "n")], [1, 1, 1])
        builder.dispatch("brighten", [(0, 0, "template"), (0, 1, "n")], [8, 8, 1])
        builder.commands.append(command)
        builder.boundary(["flow"], k)
    scenario = builder.save()
    trace = tmp_path / "t.vkt"
    proc = vkcap("record", scenario, "-o", trace, "--output", tmp_path, "--dispatch-level", "--checkpoint-every", "2")
    assert proc.returncode == 0, proc.stderr
    replay = vkcap("replay", trace, "--json", tmp_path / "replay.json")
    assert replay.returncode == 0, replay.stderr
    frames = json.loads((tmp_path / "replay.json").read_text())["frames"]
    assert [f["diverged"] for f in frames] == [False] * 4
    # snapshots after the count, the brightening (n and the template) and the flow
    assert [d["status"] for d in frames[1]["dispatches"]] == ["identical"] * 4, frames[1]
    changed = builder.file("changed.comp", brighten.replace("EXTRA", "(n >= 3u && q == ivec2(40, 30)) ? 0.5 : 0.0"))
    report = tmp_path / "bisect.json"
    proc = vkcap("bisect", trace, "--replace-shader", f"brighten={changed}", "--json", report)
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(report.read_text())
    assert (doc["frame"], doc["command"]) == (2, 9)  # frame 2: count 8, brighten 9, optical flow 10, boundary 11


BAD: list[tuple[str, Any, str]] = [
    ("too small", lambda c, r: c.update(width=32, height=32),
     "commands[0].dispatch_optical_flow.bindings.search_image: image 'search' is 64x64 at the bound lod; width and "
     "height say 32x32"),
    ("flow vectors of the wrong size", lambda c, r: r[2]["image"].update(dims=[1, 8, 7, 1]),
     "commands[0].dispatch_optical_flow.bindings.output_image: image 'flow' is 8x7 at the bound lod; a 64x64 input on "
     "a 8x8 grid gives 8x8 flow vectors"),
    ("template of another format", lambda c, r: r[1]["image"].update(format="VK_FORMAT_R8G8B8A8_UNORM", src=None),
     "commands[0].dispatch_optical_flow.bindings.template_image: image 'template' is VK_FORMAT_R8G8B8A8_UNORM; the "
     "search image is VK_FORMAT_R8_UNORM"),
    ("mean-flow hint too large", lambda c, r: c.update(mean_flow_l1_norm_hint=64),
     "commands[0].dispatch_optical_flow.mean_flow_l1_norm_hint: must be 0 or below max(width, height) = 64, got 64"),
    ("a flag twice", lambda c, r: c.update(execution_flags=["input_unchanged", "input_unchanged"]),
     "commands[0].dispatch_optical_flow.execution_flags: each value may appear once, 'input_unchanged' appears 2 "
     "times"),
    ("no output", lambda c, r: c["bindings"].pop("output_image"),
     "commands[0].dispatch_optical_flow.bindings: missing required field 'output_image'"),
    ("an unknown grid", lambda c, r: c.update(grid_size="3x3"),
     "commands[0].dispatch_optical_flow.grid_size: unknown value '3x3' (expected one of: 1x1, 2x2, 4x4, 8x8)"),
]


@pytest.mark.slow
@pytest.mark.parametrize("name", [name for name, *_ in BAD])
def test_bad_optical_flows_are_one_line(builder: ScenarioBuilder, tmp_path: Path, name: str) -> None:
    _, change, message = next(case for case in BAD if case[0] == name)
    pair(builder, 64, 64)
    builder.commands.append(optical_flow(builder, 64, 64, 8))
    change(builder.commands[0]["dispatch_optical_flow"], builder.resources)
    for r in builder.resources:
        if r["image"].get("src", "") is None:
            del r["image"]["src"]
    scenario = builder.save()
    proc = vkcap("run", scenario, "--output", tmp_path)
    assert (proc.returncode, proc.stderr.strip()) == (2, f"vkcap: error: {scenario}: {message}")


@pytest.mark.slow
@pytest.mark.device
@pytest.mark.parametrize("change, message", [
    (dict(width=32, height=32, images=(32, 4)),
     "commands[0].dispatch_optical_flow.width: width 32 is outside the optical-flow range 64..8192 on device"),
    (dict(flow_format="VK_FORMAT_R16G16B16A16_SFLOAT"),
     "commands[0].dispatch_optical_flow.bindings.output_image: image 'flow' is VK_FORMAT_R16G16B16A16_SFLOAT; optical-flow "
     "output images can be VK_FORMAT_R16G16_SFLOAT on device"),
])
def test_what_the_device_cannot_do_is_one_line(builder: ScenarioBuilder, tmp_path: Path, change: dict[str, Any],
                                               message: str) -> None:
    """Below the emulation layer's smallest extent (where the reference runner fails inside pipeline
    creation with ErrorUnknown), or a flow format it does not offer: refused before any pipeline."""
    side, out = change.get("images", (64, 8))
    pair(builder, side, side)
    builder.commands.append(optical_flow(builder, side, side, 8))
    if "flow_format" in change:
        builder.resources[2]["image"]["format"] = change["flow_format"]
    scenario = builder.save()
    proc = vkcap("run", scenario, "--output", tmp_path)
    assert proc.returncode == 2 and proc.stderr.strip().startswith(f"vkcap: error: {scenario}: {message}"), proc.stderr
    assert not (tmp_path / "flow.dds").exists()


@pytest.mark.slow
@pytest.mark.device
def test_optical_flow_pipelines_are_counted_by_the_pipeline_cache(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """An optical-flow pipeline misses on the first cached run and hits on the next; another grid
    size is another pipeline, refused with ``--fail-on-pipeline-cache-miss``."""
    pair(builder, 64, 64)
    builder.commands.append(optical_flow(builder, 64, 64, 8))
    scenario = builder.save()
    common = ["run", scenario, "--output", tmp_path / "o", "--cache-path", tmp_path, "--fail-on-pipeline-cache-miss"]
    first = vkcap(*common)
    assert first.returncode == 0 and "pipeline cache: 0 hit(s), 1 miss(es)" in first.stderr, first.stderr
    second = vkcap(*common)
    assert second.returncode == 0 and "pipeline cache: 1 hit(s), 0 miss(es)" in second.stderr, second.stderr
    doc = json.loads(scenario.read_text())
    doc["commands"][0]["dispatch_optical_flow"]["grid_size"] = "4x4"
    doc["resources"][2]["image"]["dims"] = [1, 16, 16, 1]
    scenario.write_text(json.dumps(doc))
    refused = vkcap(*common)
    assert refused.returncode == 1 and refused.stderr.strip().splitlines()[-1] == (
        "vkcap: error: pipeline cache miss for the optical flow of commands[0].dispatch_optical_flow "
        "(--fail-on-pipeline-cache-miss)"), refused.stderr


@pytest.mark.slow
@pytest.mark.device
@pytest.mark.reference
def test_session_memory_dumps_and_memory_usage_as_the_reference(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """``--session-memory-dump-dir``: one file per memory object of the optical flow's session (its
    transient memory and its cache), named and sized as the reference's (their bytes differ from run to
    run in the reference too); ``--profiling-dump-path``'s "Memory Usage" as the reference's. Where the
    device cannot map that memory (NVIDIA's H100), one warning per object and no file: the reference dies
    there with SIGSEGV."""
    pair(builder, 64, 64)
    builder.commands.append(optical_flow(builder, 64, 64, 8, cost=True))
    scenario = builder.save()
    ours, theirs = tmp_path / "ours-dump", tmp_path / "ref-dump"
    proc = vkcap("run", scenario, "--output", tmp_path / "ours", "--session-memory-dump-dir", ours,
                 "--profiling-dump-path", tmp_path / "ours.json")
    assert proc.returncode == 0, proc.stderr
    if "cannot map it" in proc.stderr:  # NVIDIA: this session memory is device-local only (the reference dies there)
        assert [line for line in proc.stderr.splitlines() if "session-memory" in line] == [
            f"vkcap: --session-memory-dump-dir: skipping session memory {n}: the device cannot map it" for n in (0, 1)]
        assert not ours.exists()
        usage = json.loads((tmp_path / "ours.json").read_text())["Memory Usage"]
        assert [(u["Command name"], u["Command type"]) for u in usage] == [("dispatch_optical_flow", "DataGraphDispatch")]
        return
    sizes = {p.name: len(p.read_text().split("\n")) - 1 for p in ours.iterdir()}  # lines of 16 bytes
    assert set(sizes) == {"Graph_Pipeline_0_Session_RAM_0.txt", "Graph_Pipeline_1_Session_RAM_1.txt"}
    usage = json.loads((tmp_path / "ours.json").read_text())["Memory Usage"]
    assert usage == [{"Command name": "dispatch_optical_flow", "Command type": "DataGraphDispatch", "Iteration": 0,
                      "Session memory [bytes]": 16 * max(sizes.values())}]
    if reference_runner() is not None:
        theirs.mkdir()
        ref = run_reference(scenario, tmp_path / "reference", "--session-memory-dump-dir", theirs,
                            "--profiling-dump-path", tmp_path / "ref.json")
        assert ref.returncode == 0, ref.stdout[-2000:]
        assert {p.name: len(p.read_text().split("\n")) - 1 for p in theirs.iterdir()} == sizes
        assert json.loads((tmp_path / "ref.json").read_text())["Memory Usage"] == usage
