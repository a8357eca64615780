"""Bisect finds the dispatch by itself (#36 item 1): on a trace recorded WITHOUT --dispatch-level, the first
divergent frame is replayed twice from its checkpoint, dispatch by dispatch, as the reference and as the
candidate, and the first dispatch whose outputs differ is named, with one line saying how. Where no
reference side exists, one line says why and asks for --dispatch-level."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from capture.trace import Trace
from replay.options import ReplayOptions
from tests.builders import ScenarioBuilder, vkcap
from vkcap.cli import main

pytestmark = pytest.mark.device

N = 256
CHAIN = """#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) buffer C { float c[]; };
void main() { uint i = gl_GlobalInvocationID.x; c[i] = c[i] * 0.5 + float(i % 7u); }
"""
MIX = """#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer C { float c[]; };
layout(set = 0, binding = 1) buffer F { float f[]; };
void main() { uint i = gl_GlobalInvocationID.x; f[i] = f[i] * 0.25 + c[i] * 2.0; }
"""
SCALE = """#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) buffer F { float f[]; };
void main() { uint i = gl_GlobalInvocationID.x; f[i] = f[i] * 0.5; }
"""
FRAMES = 12


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Per frame: chain (commands[4k]), mix (4k+1), scale (4k+2), then the boundary naming f and c;
    recorded without --dispatch-level, a checkpoint every 4 frames. ``mix2`` changes mix from frame 5 on
    (c grows past 13 there) in every fifth element: its frames diverge, and inside them mix, the second
    dispatch, is the first that differs (chain's output is the same; scale's differs only through mix)."""
    work = tmp_path_factory.mktemp("chain")
    b = ScenarioBuilder(work / "scenario")
    b.shader("chain", CHAIN).shader("mix", MIX).shader("scale", SCALE)
    b.buffer("c", N * 4, np.zeros(N, np.float32))
    b.buffer("f", N * 4, np.zeros(N, np.float32))
    for k in range(FRAMES):
        b.dispatch("chain", [(0, 0, "c")], [N // 64, 1, 1])
        b.dispatch("mix", [(0, 0, "c"), (0, 1, "f")], [N // 64, 1, 1])
        b.dispatch("scale", [(0, 0, "f")], [N // 64, 1, 1])
        b.boundary(["f", "c"], k)
    trace = work / "chain.vkt"
    proc = vkcap("record", b.save(), "-o", trace, "--output", work / "out", "--checkpoint-every", "4")
    assert proc.returncode == 0, proc.stderr
    mix2 = work / "mix2.comp"
    mix2.write_text(MIX.replace("c[i] * 2.0", "c[i] * (c[i] > 6.5 && i % 5u == 0u ? 2.5 : 2.0)"))
    return {"trace": trace, "mix2": mix2, "work": work}


@pytest.mark.slow
def test_the_recorded_shaders_are_the_reference_of_a_replaced_shader(chain: dict[str, Path], tmp_path: Path) -> None:
    """Through the CLI (isolated probes, the default): the frame, then commands[4*frame + 1] (mix), named
    from two replays of that frame; the JSON says how, and no --dispatch-level was needed."""
    with Trace.open(chain["trace"]) as trace:
        assert not any(f.dispatches for f in trace.frames)  # recorded without --dispatch-level
    report = tmp_path / "b.json"
    proc = vkcap("bisect", chain["trace"], "--replace-shader", f"mix={chain['mix2']}", "--json", report)
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(report.read_text())
    frame = doc["frame"]
    assert frame >= 1 and doc["command"] == 4 * frame + 1 and doc["dispatch"] == "mix"
    how = f"replaying frame {frame} with the recorded shaders and with the replacement"
    assert doc["found_by"] == how and doc["unnamed"] is None
    assert f"first divergent dispatch: commands[{doc['command']}] (mix), found by {how}" in proc.stdout.splitlines()
    assert doc["replays"] == len(doc["probes"]) + 2  # the search's probes, then the frame twice
    assert "--dispatch-level" not in proc.stdout


def test_without_a_reference_side_bisect_asks_for_dispatch_level(chain: dict[str, Path], tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no reference side exists (here made so: the choice answers as for a trace of this very device
    with no shader replaced), the frame is still named and one line says why the dispatch is not, and
    that --dispatch-level would name it."""
    import replay.probe

    why = "the candidate is the recording device (llvmpipe) and no shader is replaced: no reference side to replay it against"
    monkeypatch.setattr(replay.probe, "reference_side", lambda *args: why)
    report = tmp_path / "b.json"
    capsys.readouterr()
    assert main(["bisect", str(chain["trace"]), "--replace-shader", f"mix={chain['mix2']}", "--no-isolate",
                 "--json", str(report)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert (f"first divergent dispatch: unknown: {why}; record with --dispatch-level (or give --replace-shader or "
            "--reference-icd) to name it") in lines
    doc = json.loads(report.read_text())
    assert doc["command"] is None and doc["unnamed"] == why and doc["found_by"] is None


def _options(trace: Path, **changes: Any) -> ReplayOptions:
    return ReplayOptions(trace=trace, **changes)


def test_which_reference_side(chain: dict[str, Path]) -> None:
    """The order of docs/guide.md: --reference-icd, else the recorded shaders when shaders are replaced,
    else the recording device unless it is the candidate itself (or the loader's variables are unknown)."""
    from replay.probe import ReferenceSide, reference_side

    with Trace.open(chain["trace"]) as trace:
        recorded = dict(trace.fingerprint)
        replaced = _options(chain["trace"], replace_shaders=(("mix", chain["mix2"]),))
        icd = Path("/usr/share/vulkan/icd.d/lvp_icd.x86_64.json")
        side = reference_side(trace, replaced, icd, {}, recorded)
        assert isinstance(side, ReferenceSide) and side.words.startswith(f"on the reference driver ({icd}) with the recorded shaders")
        side = reference_side(trace, replaced, None, {}, recorded)
        assert isinstance(side, ReferenceSide) and side.words == "with the recorded shaders and with the replacement"
        plain = _options(chain["trace"])
        name = recorded["device_name"]
        assert reference_side(trace, plain, None, {}, recorded) == (
            f"the candidate is the recording device ({name}) and no shader is replaced: no reference side to replay it against")
        assert isinstance(reference_side(trace, plain, None, None, None), str)
        other = {**recorded, "driver_version": "another"}
        side = reference_side(trace, plain, None, {}, other)
        assert isinstance(side, ReferenceSide) and side.words.startswith(f"on the recording device ({name}) and on ")


@pytest.mark.slow
def test_the_recording_device_is_found_by_its_fingerprint_in_a_child(chain: dict[str, Path], tmp_path: Path) -> None:
    """The recording device side runs in a child process that picks the device whose fingerprint is the
    trace's: here this machine's own, giving what the in-process replay gives; under a loader that offers
    no driver, there is none (None, not an error)."""
    import trio

    from replay.probe import Shot, capture_dispatches, capture_on_recording_device

    env = {k: os.environ.get(k) for k in ("VK_DRIVER_FILES", "VK_ICD_FILENAMES", "VK_ADD_DRIVER_FILES")}
    child = capture_on_recording_device(chain["trace"], 6, env)
    assert child is not None
    with Trace.open(chain["trace"]) as trace:
        here = trio.run(capture_dispatches, trace, _options(chain["trace"]), 6)
    assert sorted(child, key=Shot.order) == sorted(here, key=Shot.order)
    assert {Shot(24, None, "", "c"), Shot(25, None, "", "f"), Shot(26, None, "", "f")} <= set(here)
    assert all(bytes(child[k]) == bytes(here[k]) for k in here)
    none = str(tmp_path / "no-such-driver.json")
    assert capture_on_recording_device(chain["trace"], 6, {"VK_DRIVER_FILES": none, "VK_ICD_FILENAMES": none}) is None


@pytest.mark.slow
def test_the_reference_drivers_outputs_are_the_extracts_expected(chain: dict[str, Path], tmp_path: Path) -> None:
    """--reference-icd (this machine's driver again: the replaced shader is the only difference) with
    --extract: the dispatch is named from the two drivers' replays, and expected/ holds what the
    reference driver wrote after it (the trace holds no value there: f is written again by scale)."""
    chosen = os.environ.get("VK_DRIVER_FILES", "").split(os.pathsep)[0]
    manifests = [Path(chosen)] if chosen else sorted(Path("/usr/share/vulkan/icd.d").glob("lvp_icd*.json"))
    assert manifests and manifests[0].is_file()
    bug = tmp_path / "bug"
    proc = vkcap("bisect", chain["trace"], "--replace-shader", f"mix={chain['mix2']}", "--reference-icd", manifests[0],
                 "--no-isolate", "--extract", bug)
    assert proc.returncode == 1, proc.stderr
    meta = json.loads((bug / "vkcap.json").read_text())
    assert meta["name"] == "mix"
    assert meta["expected"]["f"] == (f"bisect's reference side (the reference driver {manifests[0]}, with the recorded "
                                     f"shaders), right after commands[{meta['command']}]")
    assert meta["divergence"]["found_by"].startswith(f"replaying frame {meta['frame']} on the reference driver")
    from tests.test_reproducer import check

    assert check(bug, tmp=tmp_path / "tmp").returncode == 1
    assert check(bug, "--recorded", tmp=tmp_path / "tmp").returncode == 0


@pytest.mark.slow
def test_the_segment_of_a_graph_dispatch_is_named_side_by_side(tmp_path: Path) -> None:
    """A graph dispatch (examples/graph_custom: GRAPH -> COMPUTE -> GRAPH, its custom shader substituted)
    in a trace recorded without --dispatch-level: with the substituted shader replaced, the two replays
    of the frame snapshot every segment, and bisect names segment 1 (its module) of commands[1]; its
    extract substitutes the candidate for the module in scenario.json, and check.sh fails on it and passes
    on scenario.recorded.json."""
    import shutil

    from tests.test_extract_segment import EXAMPLE, HARDSWISH, MODULES, STEP  # skips without vgfpy

    b = ScenarioBuilder(tmp_path / "scenario")
    shutil.copy(EXAMPLE / "graph_custom.vgf", b.root / "graph_custom.vgf")
    b.shader("step", STEP).shader("hs", HARDSWISH)
    b.raw("bias", np.array([0.25], np.float32))
    b.resources.insert(0, {"graph": {
        "uid": "g", "src": "graph_custom.vgf", "push_constants_size": 4,
        "shader_substitutions": [{"shader_ref": "hs", "target": MODULES[1]}],
        "specialization_constants_map": [{"shader_target": MODULES[1], "specialization_constants": [{"id": 0, "value": 0.5}]}],
    }})
    b.resource("tensor", uid="x", dims=[1, 4, 4, 4], format="VK_FORMAT_R32_SFLOAT", shader_access="readwrite",
               src=b.npy("x.npy", np.load(EXAMPLE / "x.npy")))
    b.resource("tensor", uid="y", dims=[1, 2, 2, 8], format="VK_FORMAT_R32_SFLOAT", shader_access="writeonly", dst="y.npy")
    for f in range(2):
        b.dispatch("step", [(0, 0, "x")], [4, 4, 4])
        b.commands.append({"dispatch_vgf": {
            "graph_ref": "g", "bindings": [{"set": 0, "id": 0, "resource_ref": "x"}, {"set": 0, "id": 3, "resource_ref": "y"}],
            "push_constants": [{"push_data_ref": "bias", "shader_target": MODULES[1]}]}})
        b.boundary(["y"], f)
    trace = tmp_path / "g.vkt"
    proc = vkcap("record", b.save(), "-o", trace, "--output", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    changed = tmp_path / "changed.comp"
    changed.write_text(HARDSWISH.replace("+ pc.bias);", "+ pc.bias + (c == 5u ? 5.0 : 0.0));"))  # reaches y
    report = tmp_path / "b.json"
    proc = vkcap("bisect", trace, "--no-isolate", "--replace-shader", f"hs={changed}", "--json", report)
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(report.read_text())
    assert (doc["frame"], doc["command"], doc["segment"], doc["module"]) == (0, 1, 1, MODULES[1])
    assert (f"first divergent dispatch: commands[1] (g), segment 1 (module {MODULES[1]}), found by replaying frame 0 "
            "with the recorded shaders and with the replacement") in proc.stdout.splitlines()
    # extracted alone, the segment's expected output is the reference side's (the trace holds none there)
    bug = tmp_path / "bug"
    proc = vkcap("bisect", trace, "--no-isolate", "--replace-shader", f"hs={changed}", "--extract", bug)
    assert proc.returncode == 1, proc.stderr
    meta = json.loads((bug / "vkcap.json").read_text())
    assert meta["segment"]["index"] == 1 and list(meta["expected"].values()) == [
        "bisect's reference side (the recorded shaders on this device), right after segment 1 of commands[1]"]
    from tests.test_reproducer import check

    assert (bug / "shaders" / "hs.candidate.spv").is_file()
    assert json.loads((bug / "scenario.json").read_text())["commands"][0]["dispatch_vgf"]["shader_substitutions"] == [
        {"shader_ref": "hs", "target": MODULES[1]}]
    assert check(bug, tmp=tmp_path / "tmp").returncode == 1  # the candidate substituted for the module diverges
    assert check(bug, "--recorded", tmp=tmp_path / "tmp").returncode == 0  # the recorded module reproduces it
