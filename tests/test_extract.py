"""``vkcap extract`` and ``bisect --extract``: one dispatch of a trace as a standalone scenario that both
vkcap and ARM's reference runner run, starting from the state just before that dispatch and giving,
byte for byte, what the trace recorded after it."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.builders import ScenarioBuilder, load_output, vkcap
from tests.reference import reference_runner, run_reference

pytestmark = pytest.mark.device

TRACES = Path(__file__).resolve().parent.parent / "traces"


def run_both(folder: Path, tmp_path: Path, scenario: str = "scenario.json") -> dict[str, Path]:
    """Run the extract with vkcap and (where installed) the reference; the output folders by name."""
    outs = {"vkcap": tmp_path / "out-vkcap"}
    proc = vkcap("run", folder / scenario, "--output", outs["vkcap"])
    assert proc.returncode == 0, proc.stderr
    if reference_runner() is not None:
        outs["reference"] = tmp_path / "out-reference"
        ref = run_reference(folder / scenario, outs["reference"])
        assert ref.returncode == 0, ref.stdout[-2000:] + ref.stderr[-2000:]
    return outs


def assert_reproduces(folder: Path, tmp_path: Path, scenario: str = "scenario.json") -> dict[str, str]:
    """Both runners write the same bytes for every recorded output of the extract, and, on the driver
    the trace was recorded with, the recorded bytes (on another, test_an_extract_diverges_where_the_full_
    replay_does checks the differences); what ``vkcap.json`` says of the expectations."""
    meta = json.loads((folder / "vkcap.json").read_text())
    expected = {p.name: p.read_bytes() for p in (folder / "expected").iterdir()}
    assert expected, "nothing recorded to compare with"
    same = [meta[side].get(k) for side in ("recorded_device", "extract_device") for k in ("device_name", "driver_info")]
    outs = run_both(folder, tmp_path, scenario)
    for runner, out in outs.items():
        for name, data in expected.items():
            ours = (out / name).read_bytes()
            assert ours == (outs["vkcap"] / name).read_bytes(), f"{runner}: {name}"
            if same[:2] == same[2:]:
                assert ours == data, f"{runner}: {name}"
    return meta["expected"]


@pytest.mark.slow
def test_a_dispatch_from_the_middle_of_a_100_frame_trace(tmp_path: Path) -> None:
    """The heat example's golden trace (100 frames, two ping-pong steps each, no dispatch-level
    snapshots): the second step of frame 50. Its inputs are replayed (the frame's first step runs
    before it); its output ``a`` is the frame's boundary snapshot, ``b`` (which the recording holds
    no value of there) a replay's, both reproduced by both runners."""
    out = tmp_path / "extract"
    proc = vkcap("extract", TRACES / "heat.vkt", "--frame", "50", "--command", "151", "-o", out)
    assert proc.returncode == 0, proc.stderr
    scenario = json.loads((out / "scenario.json").read_text())
    assert [next(iter(r.values()))["uid"] for r in scenario["resources"]] == ["step", "a", "b"]
    assert [next(iter(c)) for c in scenario["commands"]] == ["dispatch_compute"]
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        ".vkcap-extract", "README.md", "check.sh", "expected/a.npy", "expected/b.npy", "inputs/a.npy", "inputs/b.npy",
        "scenario.json", "shaders/source/step.comp", "shaders/step.spv", "vkcap.json"]
    where = assert_reproduces(out, tmp_path)
    assert where["a"] == "the boundary snapshot of frame 50 (no later command of the frame writes it)"
    assert where["b"].startswith("a replay on ") and where["b"].endswith(
        "with the recorded shaders, right after commands[151] (the recording holds no value there)")
    meta = json.loads((out / "vkcap.json").read_text())
    assert (meta["frame"], meta["command"], meta["kind"], meta["name"]) == (50, 151, "dispatch_compute", "step")
    assert meta["inputs"] == {"a": "unrecorded", "b": "unrecorded"}
    # the one step, in numpy, from the extracted inputs (b is the grid before the step, a after it)
    u = np.load(out / "inputs" / "b.npy").view(np.float32).reshape(64, 64)
    step = u.copy()
    around = (u[1:-1, :-2] + u[1:-1, 2:]) + (u[:-2, 1:-1] + u[2:, 1:-1])
    step[1:-1, 1:-1] = u[1:-1, 1:-1] + np.float32(0.2) * (around - np.float32(4.0) * u[1:-1, 1:-1])
    np.testing.assert_allclose(np.load(out / "expected" / "a.npy").view(np.float32).reshape(64, 64)[1:-1, 1:-1],
                               step[1:-1, 1:-1], rtol=1e-6)
    readme = (out / "README.md").read_text()
    assert "frame 50 (frame_id 50), `commands[151]`" in readme and "scenario_runner --scenario" in readme


CHAIN = """#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer A { float a[]; };
layout(set = 0, binding = 1) buffer C { float c[]; };
void main() { uint i = gl_GlobalInvocationID.x; c[i] = c[i] * 0.5 + a[i] + float(i % 7u); }
"""
MIX = """#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer C { float c[]; };
layout(set = 0, binding = 1) readonly buffer E { float e[]; };
layout(set = 0, binding = 2) writeonly buffer F { float f[]; };
void main() { uint i = gl_GlobalInvocationID.x; f[i] = c[i] + e[i] * 2.0; }
"""
CHURN = """#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) buffer Z { float z[]; };
void main() { uint i = gl_GlobalInvocationID.x; z[i] = z[i] * 1.0001 + float(i); }
"""


def chain_trace(builder: ScenarioBuilder, tmp_path: Path, frames: int = 100) -> Path:
    """Per frame: c = c/2 + a + i%7 (commands 3k), f = c + 2e (3k+1), and a 40 KiB buffer z that
    changes every frame (3k+2) and has nothing to do with f; dispatch-level snapshots."""
    n = 1024
    builder.shader("chain", CHAIN).shader("mix", MIX).shader("churn", CHURN)
    builder.buffer("a", n * 4, np.linspace(0, 1, n, dtype=np.float32), shader_access="readonly")
    builder.buffer("c", n * 4, np.zeros(n, np.float32))
    builder.buffer("e", n * 4, np.arange(n, dtype=np.float32), shader_access="readonly")
    builder.buffer("f", n * 4, shader_access="writeonly", dst="f.npy")
    builder.buffer("z", 10240 * 4, np.ones(10240, np.float32))
    for k in range(frames):
        builder.dispatch("chain", [(0, 0, "a"), (0, 1, "c")], [n // 64, 1, 1])
        builder.dispatch("mix", [(0, 0, "c"), (0, 1, "e"), (0, 2, "f")], [n // 64, 1, 1])
        builder.dispatch("churn", [(0, 0, "z")], [10240 // 64, 1, 1])
        builder.boundary(["f", "z"], k)
    trace = tmp_path / "chain.vkt"
    proc = vkcap("record", builder.save(), "-o", trace, "--output", tmp_path / "recorded", "--dispatch-level",
                 "--checkpoint-every", "25")
    assert proc.returncode == 0, proc.stderr
    return trace


@pytest.mark.slow
def test_an_extract_holds_only_its_dispatch_and_checks_its_inputs(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """From a 100-frame trace of 4 MiB of snapshots (dispatch-level): ``mix`` of frame 60 binds c, e
    and f only; the 40 KiB ``z`` the frame also churns is not in the extract. c, as the dispatch before
    it left it, matches the recording's dispatch-level snapshot; f comes out as recorded after it."""
    trace = chain_trace(builder, tmp_path)
    out = tmp_path / "extract"
    proc = vkcap("extract", trace, "--frame", "60", "--command", str(4 * 60 + 1), "-o", out)
    assert proc.returncode == 0, proc.stderr
    meta = json.loads((out / "vkcap.json").read_text())
    assert meta["resources"] == ["mix", "c", "e", "f"]
    assert meta["inputs"] == {"c": "matches", "e": "unrecorded", "f": "unrecorded"}
    # c is declared readwrite (the scenario's word, not the shader's): an output too, as recorded
    assert meta["expected"] == {u: f"the dispatch-level snapshot after commands[{4 * 60 + 1}]" for u in "cf"}
    inputs = sum(p.stat().st_size for p in (out / "inputs").iterdir())
    assert sorted(p.name for p in (out / "inputs").iterdir()) == ["c.npy", "e.npy", "f.npy"] and inputs < 3 * 4096 + 512
    assert_reproduces(out, tmp_path)
    c, e = (load_output(out / "inputs" / f"{u}.npy", np.float32) for u in "ce")
    np.testing.assert_array_equal(load_output(out / "expected" / "f.npy", np.float32), c + e * np.float32(2))


@pytest.mark.slow
@pytest.mark.parametrize("example", ["fragment", "blur", "tensor_op", "conv2d", "graph_custom"])
def test_fragment_passes_images_tensors_and_graphs_extract(example: str, tmp_path: Path) -> None:
    """Every kind of the golden traces: the dispatch of frame 0 (a fragment pass; a sampled image,
    written as DDS; tensors; VGF graphs, one with a custom shader segment) reproduces its recorded
    output in both runners, its inputs taken from the trace's initial state."""
    trace = TRACES / f"{example}.vkt"
    from capture.trace import Trace

    with Trace.open(trace) as t:
        commands = json.loads(t.portable_json)["commands"]
    index = next(i for i, c in enumerate(commands) if next(iter(c)).startswith("dispatch_") and "barrier" not in next(iter(c)))
    out = tmp_path / "extract"
    proc = vkcap("extract", trace, "--frame", "0", "--command", str(index), "-o", out)
    assert proc.returncode == 0, proc.stderr
    meta = json.loads((out / "vkcap.json").read_text())
    assert set(meta["inputs"].values()) == {"recorded"}
    assert all(where == "the boundary snapshot of frame 0 (no later command of the frame writes it)"
               for where in meta["expected"].values() if where)
    assert_reproduces(out, tmp_path)


@pytest.mark.slow
def test_bisect_extracts_the_first_divergent_dispatch(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """bisect with a replaced ``mix`` (which differs once c grows past 13, a few frames in) names the
    first divergent ``mix`` and extracts it: the extract reproduces the recording with the trace's
    shader, and with the replaced one shows the divergence bisect reported, in the same elements."""
    trace = chain_trace(builder, tmp_path, frames=10)
    changed = builder.file("changed.comp", MIX.replace("e[i] * 2.0", "e[i] * (c[i] > 13.0 && i % 5u == 0u ? 2.5 : 2.0)"))
    out = tmp_path / "bug"
    report = tmp_path / "bisect.json"
    proc = vkcap("bisect", trace, "--replace-shader", f"mix={changed}", "--dtype", "f=float32", "--json", report,
                 "--extract", out)
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(report.read_text())
    first = doc["resource"]  # f, compared as float32
    meta = json.loads((out / "vkcap.json").read_text())
    assert (meta["frame"], meta["command"]) == (doc["frame"], doc["command"])
    assert meta["divergence"]["replaced_shaders"] == {"mix": str(changed)}
    readme = (out / "README.md").read_text()
    assert "## The divergence" in readme and f"`mix` replaced by `{changed}`" in readme
    assert_reproduces(out, tmp_path, "scenario.recorded.json")
    # scenario.json runs the replaced shader (the candidate): the elements bisect found differ, and only those
    proc = vkcap("run", out / "scenario.json", "--output", tmp_path / "changed")
    assert proc.returncode == 0, proc.stderr
    got = load_output(tmp_path / "changed" / "f.npy", np.float32)
    want = load_output(out / "expected" / "f.npy", np.float32)
    differing = np.flatnonzero(got != want)
    assert len(differing) == first["differing"] > 0 and list(differing[:1]) == first["first_index"]


@pytest.mark.slow
def test_bad_requests_are_one_line(builder: ScenarioBuilder, tmp_path: Path) -> None:
    trace = chain_trace(builder, tmp_path, frames=3)
    out = tmp_path / "x"
    cases = [
        (["--frame", "7", "--command", "1"], f"vkcap: error: {trace}: --frame: no frame 7 in this trace (frames: 0-2)"),
        (["--frame", "1", "--command", "40"], f"vkcap: error: {trace}: --command 40: the scenario's commands are "
                                              "commands[0] to commands[11]"),
        (["--frame", "1", "--command", "1"], f"vkcap: error: {trace}: --command 1: commands[1] is not a command of "
                                             "frame 1 (its dispatches: commands[4], commands[5], commands[6])"),
        (["--frame", "1", "--command", "7"], f"vkcap: error: {trace}: --command 7: commands[7] is a frame_boundary, "
                                             "not a dispatch: there is nothing to extract"),
    ]
    for flags, line in cases:
        proc = vkcap("extract", trace, *flags, "-o", out)
        assert (proc.returncode, proc.stderr.strip()) == (2, line), flags
        assert not out.exists()
    out.write_text("keep me")
    proc = vkcap("extract", trace, "--frame", "1", "--command", "5", "-o", out)
    assert (proc.returncode, proc.stderr.strip()) == (2, f"vkcap: error: {out}: -o: exists and is not a folder: refusing to replace it")
    assert out.read_text() == "keep me"


@pytest.mark.slow
@pytest.mark.parametrize("example, dtype", [("add", "out=float32"), ("graph_custom", None), ("fragment", "pixels=float32")])
def test_an_extract_diverges_where_the_full_replay_does(example: str, dtype: str | None, tmp_path: Path) -> None:
    """The extract of frame 0's dispatch of a golden trace (recorded on lavapipe), run on this device,
    differs from what was recorded in exactly the elements a replay of the whole trace finds differing
    in that frame: none on lavapipe; on NVIDIA's driver, the divergences traces/suite.toml expects."""
    trace = TRACES / f"{example}.vkt"
    out = tmp_path / "extract"
    assert vkcap("extract", trace, "--frame", "0", "--command", "0", "-o", out).returncode == 0
    report = tmp_path / "replay.json"
    flags = ["--dtype", dtype] if dtype else []
    vkcap("replay", trace, "--frame", "0", *flags, "--json", report)
    (frame,) = json.loads(report.read_text())["frames"]
    ran = tmp_path / "ran"
    assert vkcap("run", out / "scenario.json", "--output", ran).returncode == 0
    for c in frame["resources"]:
        got, want = (np.load(folder / f"{c['uid']}.npy") for folder in (ran, out / "expected"))
        if dtype:
            got, want = got.view(np.float32), want.view(np.float32)
        differing = np.flatnonzero(got.reshape(-1) != want.reshape(-1))
        assert len(differing) == c["differing"], c["uid"]
        if len(differing):
            assert np.unravel_index(differing[0], want.shape) == tuple(c["first_index"]) or [differing[0]] == c["first_index"]


@pytest.mark.slow
def test_an_optical_flow_extracts(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """``dispatch_optical_flow`` (ARM's emulation): frame 1 of two, temporal hints off (with them, a
    frame's flow depends on the frames before it, which an extract of one command does not hold): the
    search and template images become DDS inputs, the flow comes out as recorded in both runners."""
    from tests.test_optical_flow import optical_flow, pair

    pair(builder, 64, 64, "VK_FORMAT_R8_UNORM", 1)
    command = optical_flow(builder, 64, 64, 8, execution_flags=["disable_temporal_hints"])
    for k in range(2):
        builder.commands.append(command)
        builder.boundary(["flow"], k)
    trace = tmp_path / "flow.vkt"
    assert vkcap("record", builder.save(), "-o", trace, "--output", tmp_path / "recorded").returncode == 0
    out = tmp_path / "extract"
    proc = vkcap("extract", trace, "--frame", "1", "--command", "2", "-o", out)
    assert proc.returncode == 0, proc.stderr
    meta = json.loads((out / "vkcap.json").read_text())
    assert (meta["kind"], meta["resources"]) == ("dispatch_optical_flow", ["search", "template", "flow"])
    assert sorted(p.name for p in (out / "inputs").iterdir()) == ["flow.dds", "search.dds", "template.dds"]
    assert assert_reproduces(out, tmp_path) == {"flow": "the boundary snapshot of frame 1 (no later command of the frame writes it)"}
