"""``vkcap import CAPTURE.gfxr`` and ``vkcap record CAPTURE.gfxr`` (issue #40) with applications that are not
vkcap: ARM's reference ``scenario-runner`` runs a scenario under GFXReconstruct's capture layer; the capture
is imported, the scenario run with vkcap, and its outputs compared with the runner's own, byte for byte.
Then the imported trace is recorded, replayed and bisected (a replaced shader found at its dispatch), and bad
captures (truncated, garbage) are refused with exit 2 and one line, writing nothing. And a small C program
(``tests/data/gfxr/app.c``, built here with gcc against libvulkan, clean under the validation layer) is
captured over several frames; vkcap's output of each frame is compared with what the program read back."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.builders import vkcap
from tests.needs import missing
from tests.reference import SKIP_REASON, reference_command, reference_env, reference_runner, run_reference

REPO = Path(__file__).resolve().parent.parent
LAYER_FOLDER = "/usr/share/vulkan/explicit_layer.d"
if shutil.which("gfxrecon-convert") is None or not Path(LAYER_FOLDER, "VkLayer_gfxreconstruct.json").is_file():
    missing("GFXReconstruct (Debian's gfxreconstruct) is not installed")

ADD = (REPO / "examples" / "add" / "add.comp").read_text()


def capture_env(capture: Path, compression: str = "LZ4") -> dict[str, str]:
    """The reference's environment with GFXReconstruct's capture layer above its emulation layers."""
    env = reference_env()
    env["VK_LAYER_PATH"] += os.pathsep + LAYER_FOLDER
    env["VK_INSTANCE_LAYERS"] = "VK_LAYER_LUNARG_gfxreconstruct" + os.pathsep + env["VK_INSTANCE_LAYERS"]
    env.update(GFXRECON_CAPTURE_FILE=str(capture), GFXRECON_CAPTURE_FILE_TIMESTAMP="false",
               GFXRECON_LOG_LEVEL="warning", GFXRECON_CAPTURE_COMPRESSION_TYPE=compression)
    return env


def add_scenario(folder: Path) -> Path:
    """examples/add with one dispatch (buffers, push constants, an int and a float specialization constant)."""
    shutil.copytree(REPO / "examples" / "add", folder)
    doc = json.loads((folder / "scenario.json").read_text())
    doc["commands"] = doc["commands"][:1]
    (folder / "scenario.json").write_text(json.dumps(doc))
    return folder / "scenario.json"


def capture_reference(scenario: Path, capture: Path, output: Path, compression: str = "LZ4") -> None:
    if reference_runner() is None:
        pytest.skip(SKIP_REASON)
    proc = subprocess.run(reference_command(scenario, output), env=capture_env(capture, compression),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert capture.is_file()


def output_bytes(folder: Path, names: list[str]) -> list[bytes]:
    return sorted(np.load(folder / name).tobytes() for name in names)


def dsts(scenario: Path) -> list[str]:
    doc = json.loads(scenario.read_text())
    return [body["dst"] for item in doc["resources"] for body in item.values() if body.get("dst")]


@pytest.fixture(scope="module")
def add_capture(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("add")
    scenario = add_scenario(root / "app")
    capture_reference(scenario, root / "add.gfxr", root / "app_out")
    return {"root": root, "scenario": scenario, "capture": root / "add.gfxr", "app_out": root / "app_out"}


@pytest.mark.slow
@pytest.mark.reference
@pytest.mark.parametrize("compression", ["NONE", "ZSTD"])
def test_other_compressions_import_alike(tmp_path: Path, compression: str) -> None:
    scenario = add_scenario(tmp_path / "app")
    capture_reference(scenario, tmp_path / "c.gfxr", tmp_path / "app_out", compression)
    assert vkcap("import", tmp_path / "c.gfxr", "-o", tmp_path / "imported").returncode == 0
    assert vkcap("run", tmp_path / "imported" / "scenario.json", "--output", tmp_path / "ours").returncode == 0
    names = dsts(tmp_path / "imported" / "scenario.json")
    assert output_bytes(tmp_path / "ours", names) == output_bytes(tmp_path / "app_out", ["out.npy"])


@pytest.mark.slow
@pytest.mark.reference
def test_imported_capture_reproduces_the_application_byte_for_byte(add_capture: dict[str, Path], tmp_path: Path) -> None:
    proc = vkcap("import", add_capture["capture"], "-o", tmp_path / "imported")
    assert proc.returncode == 0, proc.stderr
    assert "imported 1 dispatch(es) in 1 frame(s): 3 buffer(s), 1 shader(s); outputs: buffer2" in proc.stderr
    scenario = tmp_path / "imported" / "scenario.json"
    doc = json.loads(scenario.read_text())
    shader = doc["resources"][0]["shader"]
    assert shader["specialization_constants"] == [{"id": 0, "value": 64}, {"id": 1, "value": 0.25}]
    assert shader["push_constants_size"] == 8
    run = vkcap("run", scenario, "--output", tmp_path / "ours")
    assert run.returncode == 0, run.stderr
    names = dsts(scenario)
    assert names == ["buffer2.npy"]
    assert (tmp_path / "ours" / "buffer2.npy").read_bytes() == (add_capture["app_out"] / "out.npy").read_bytes()
    # the imported scenario is the reference's format too: ARM's runner writes the same bytes from it
    theirs = run_reference(scenario, tmp_path / "theirs")
    assert theirs.returncode == 0, theirs.stdout + theirs.stderr
    assert (tmp_path / "theirs" / "buffer2.npy").read_bytes() == (add_capture["app_out"] / "out.npy").read_bytes()


@pytest.mark.reference
def test_import_never_overwrites(add_capture: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "keep.txt").write_text("mine")
    proc = vkcap("import", add_capture["capture"], "-o", tmp_path / "mine")
    assert proc.returncode == 2
    assert "exists and is not an empty folder" in proc.stderr
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["keep.txt"]


@pytest.mark.slow
@pytest.mark.reference
def test_record_replay_and_bisect_an_imported_capture(add_capture: dict[str, Path], tmp_path: Path) -> None:
    trace = tmp_path / "add.vkt"
    before = set(Path("/tmp").glob("vkcap-import-*"))
    rec = vkcap("record", add_capture["capture"], "-o", trace)
    assert rec.returncode == 0, rec.stderr
    assert set(Path("/tmp").glob("vkcap-import-*")) == before  # the temporary scenario is gone
    replay = vkcap("replay", trace)
    assert replay.returncode == 0, replay.stderr
    changed = tmp_path / "add_new.comp"
    changed.write_text(ADD.replace("b[i] * pc.scale", "b[i] * pc.scale * 1.5"))
    bisect = vkcap("bisect", trace, "--replace-shader", f"shader0={changed}")
    assert bisect.returncode == 1, bisect.stderr
    assert "first divergent dispatch: commands[0] (shader0)" in bisect.stdout + bisect.stderr


@pytest.mark.slow
@pytest.mark.reference
@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_bad_captures_are_refused_in_one_line(add_capture: dict[str, Path], tmp_path: Path, damage: str) -> None:
    data = add_capture["capture"].read_bytes()
    bad = tmp_path / "bad.gfxr"
    bad.write_bytes({"truncated": data[:len(data) // 2], "garbage": os.urandom(4096), "empty": b""}[damage])
    proc = vkcap("import", bad, "-o", tmp_path / "out")
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith(f"vkcap: error: {bad}: ")
    assert not (tmp_path / "out").exists()


IMAGE_SHADER = """#version 450
layout(local_size_x = 4, local_size_y = 4) in;
layout(constant_id = 0) const float GAIN = 1.0;
layout(push_constant) uniform Push { float bias; } pc;
layout(set = 0, binding = 0, r32f) uniform readonly image2D src;
layout(set = 0, binding = 1, r32f) uniform writeonly image2D dst;
void main() {
    ivec2 p = ivec2(gl_GlobalInvocationID.xy);
    imageStore(dst, p, vec4(imageLoad(src, p).x * GAIN + pc.bias));
}
"""


@pytest.mark.slow
@pytest.mark.reference
def test_storage_images_with_push_and_specialization_constants_reproduce_the_runner(tmp_path: Path) -> None:
    app = tmp_path / "app"
    app.mkdir()
    (app / "img.comp").write_text(IMAGE_SHADER)
    np.save(app / "in.npy", np.arange(32, dtype=np.float32).reshape(1, 4, 8, 1) / 3)
    np.save(app / "pc.npy", np.array([0.75], dtype=np.float32))
    (app / "scenario.json").write_text(json.dumps({
        "resources": [{"shader": {"uid": "s", "src": "img.comp", "type": "GLSL", "push_constants_size": 4,
                                  "specialization_constants": [{"id": 0, "value": 2.5}]}},
                      {"raw_data": {"uid": "pc", "src": "pc.npy"}},
                      {"image": {"uid": "in", "dims": [1, 8, 4, 1], "format": "VK_FORMAT_R32_SFLOAT",
                                 "shader_access": "image_read", "src": "in.npy"}},
                      {"image": {"uid": "out", "dims": [1, 8, 4, 1], "format": "VK_FORMAT_R32_SFLOAT",
                                 "shader_access": "writeonly", "dst": "out.dds"}}],
        "commands": [{"dispatch_compute": {"shader_ref": "s", "push_data_ref": "pc", "rangeND": [2, 1, 1],
                                           "bindings": [{"set": 0, "id": 0, "resource_ref": "in"},
                                                        {"set": 0, "id": 1, "resource_ref": "out"}]}}]}))
    capture_reference(app / "scenario.json", tmp_path / "img.gfxr", tmp_path / "app_out")
    proc = vkcap("import", tmp_path / "img.gfxr", "-o", tmp_path / "imported")
    assert proc.returncode == 0, proc.stderr
    assert "imported 1 dispatch(es) in 1 frame(s): 0 buffer(s), 2 image(s), 1 shader(s); outputs: image1" in proc.stderr
    run = vkcap("run", tmp_path / "imported" / "scenario.json", "--output", tmp_path / "ours")
    assert run.returncode == 0, run.stderr
    assert dsts(tmp_path / "imported" / "scenario.json") == ["image1.dds"]
    assert (tmp_path / "ours" / "image1.dds").read_bytes() == (tmp_path / "app_out" / "out.dds").read_bytes()
    theirs = run_reference(tmp_path / "imported" / "scenario.json", tmp_path / "theirs")
    assert theirs.returncode == 0, theirs.stdout + theirs.stderr
    assert (tmp_path / "theirs" / "image1.dds").read_bytes() == (tmp_path / "app_out" / "out.dds").read_bytes()


SAMPLED_SHADER = """#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) uniform sampler2D tex;
layout(set = 0, binding = 1) buffer Out { float o[]; };
void main() { o[gl_GlobalInvocationID.x] = texelFetch(tex, ivec2(gl_GlobalInvocationID.x, 0), 0).x; }
"""


@pytest.mark.reference
def test_compute_that_depends_on_what_is_not_imported_exits_2_naming_the_call(tmp_path: Path) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "tex.comp").write_text(SAMPLED_SHADER)
    scenario = tmp_path / "app" / "scenario.json"
    scenario.write_text(json.dumps({
        "resources": [{"shader": {"uid": "s", "src": "tex.comp", "type": "GLSL"}},
                      {"image": {"uid": "tex", "dims": [1, 4, 4, 1], "format": "VK_FORMAT_R32_SFLOAT",
                                 "shader_access": "readonly"}},
                      {"buffer": {"uid": "out", "size": 16, "shader_access": "readwrite", "dst": "out.npy"}}],
        "commands": [{"dispatch_compute": {"shader_ref": "s", "rangeND": [4, 1, 1],
                                           "bindings": [{"set": 0, "id": 0, "resource_ref": "tex"},
                                                        {"set": 0, "id": 1, "resource_ref": "out"}]}}]}))
    capture_reference(scenario, tmp_path / "tex.gfxr", tmp_path / "app_out")
    proc = vkcap("import", tmp_path / "tex.gfxr", "-o", tmp_path / "out")
    assert proc.returncode == 2, proc.stderr
    assert "vkUpdateDescriptorSets writes a VK_DESCRIPTOR_TYPE_COMBINED_IMAGE_SAMPLER descriptor (not imported)" \
        in proc.stderr
    assert re.search(r": call \d+: ", proc.stderr), proc.stderr
    assert not (tmp_path / "out").exists()


# --- a C application ------------------------------------------------------------------------------------

APP = REPO / "tests" / "data" / "gfxr"
FRAMES = 3


def run_app(app: dict[str, Path], out: Path, frames: int, *extra: str, env: dict[str, str] | None = None) -> str:
    out.mkdir()
    proc = subprocess.run([str(app["exe"]), str(app["scale"]), str(app["square"]), str(out), str(frames), *extra],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout + proc.stderr


def capture_app(app: dict[str, Path], capture: Path, out: Path, frames: int, *extra: str) -> None:
    env = {**os.environ, "VK_LAYER_PATH": os.pathsep.join(filter(None, [os.environ.get("VK_LAYER_PATH"), LAYER_FOLDER])),
           "VK_INSTANCE_LAYERS": "VK_LAYER_LUNARG_gfxreconstruct", "GFXRECON_CAPTURE_FILE": str(capture),
           "GFXRECON_CAPTURE_FILE_TIMESTAMP": "false", "GFXRECON_LOG_LEVEL": "warning"}
    run_app(app, out, frames, *extra, env=env)
    assert capture.is_file()


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """app.c built with gcc against libvulkan, its shaders compiled, and it run once under the Khronos
    validation layer (any message fails); then captured: FRAMES frames, FRAMES with graphics work, none."""
    if shutil.which("gcc") is None or not Path("/usr/include/vulkan/vulkan.h").is_file():
        pytest.skip("gcc and the Vulkan headers (libvulkan-dev) are needed to build the C application")
    root = tmp_path_factory.mktemp("app")
    built = {"exe": root / "app", "scale": root / "scale.spv", "square": root / "square.spv", "root": root}
    gcc = subprocess.run(["gcc", "-std=c11", "-Wall", "-Werror", "-O1", "-o", str(built["exe"]), str(APP / "app.c"),
                          "-lvulkan"], capture_output=True, text=True, timeout=120)
    assert gcc.returncode == 0, gcc.stderr
    for name in ("scale", "square"):
        glslang = subprocess.run(["glslangValidator", "-V", str(APP / f"{name}.comp"), "-o", str(built[name])],
                                 capture_output=True, text=True, timeout=60)
        assert glslang.returncode == 0, glslang.stdout + glslang.stderr
    from vkcore.device.validation import layer_folder

    validated = run_app(built, root / "validated", FRAMES, "graphics",
                        env={**os.environ, "VK_LAYER_PATH": str(layer_folder()),
                             "VK_INSTANCE_LAYERS": "VK_LAYER_KHRONOS_validation"})
    assert "Validation" not in validated, validated
    capture_app(built, root / "app.gfxr", root / "app_out", FRAMES)
    capture_app(built, root / "graphics.gfxr", root / "graphics_out", 2, "graphics")
    capture_app(built, root / "idle.gfxr", root / "idle_out", 0, "graphics")
    return built


@pytest.mark.slow
def test_c_application_reproduces_each_frame_byte_for_byte(app: dict[str, Path], tmp_path: Path) -> None:
    imported = tmp_path / "imported"
    proc = vkcap("import", app["root"] / "app.gfxr", "-o", imported, "--frames-per-submit")
    assert proc.returncode == 0, proc.stderr
    assert f"imported {2 * FRAMES} dispatch(es) in {FRAMES} frame(s)" in proc.stderr
    assert "not imported" not in proc.stderr  # nothing but compute in this application
    doc = json.loads((imported / "scenario.json").read_text())
    shaders = [item["shader"] for item in doc["resources"] if "shader" in item]
    assert shaders[0]["specialization_constants"] == [{"id": 0, "value": 3.0}]
    assert [s["push_constants_size"] for s in shaders] == [8, 8]
    (output,) = [body["uid"] for item in doc["resources"] for body in item.values() if body.get("dst")]
    trace = tmp_path / "app.vkt"
    rec = vkcap("record", imported / "scenario.json", "-o", trace)
    assert rec.returncode == 0, rec.stderr
    for frame in range(FRAMES):
        out = tmp_path / f"frame{frame}.npy"
        exported = vkcap("export", trace, "--frame", str(frame), "--resource", output, "-o", out)
        assert exported.returncode == 0, exported.stderr
        assert np.load(out).tobytes() == (app["root"] / "app_out" / f"frame{frame}.bin").read_bytes(), frame
    # Without --frames-per-submit (the application presents nothing): one frame, the last results.
    whole = vkcap("import", app["root"] / "app.gfxr", "-o", tmp_path / "one")
    assert whole.returncode == 0 and f"imported {2 * FRAMES} dispatch(es) in 1 frame(s)" in whole.stderr
    run = vkcap("run", tmp_path / "one" / "scenario.json", "--output", tmp_path / "ours")
    assert run.returncode == 0, run.stderr
    assert np.load(tmp_path / "ours" / f"{output}.npy").tobytes() == \
        (app["root"] / "app_out" / f"frame{FRAMES - 1}.bin").read_bytes()
    # ARM's runner runs both imports (frame boundaries and all) to the same last results
    for folder in ("imported", "one"):
        theirs = run_reference(tmp_path / folder / "scenario.json", tmp_path / f"theirs-{folder}")
        assert theirs.returncode == 0, theirs.stdout + theirs.stderr
        assert np.load(tmp_path / f"theirs-{folder}" / f"{output}.npy").tobytes() == \
            (app["root"] / "app_out" / f"frame{FRAMES - 1}.bin").read_bytes(), folder


@pytest.mark.slow
def test_graphics_work_is_listed_once_per_kind_and_compute_still_imported(app: dict[str, Path], tmp_path: Path) -> None:
    proc = vkcap("import", app["root"] / "graphics.gfxr", "-o", tmp_path / "imported", "--frames-per-submit")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    graphics = [line for line in lines if "not imported (graphics)" in line]
    assert len(graphics) == 1, proc.stderr
    for name in ("vkCreateRenderPass x1", "vkCreateFramebuffer x1", "vkCmdBeginRenderPass x2", "vkCmdEndRenderPass x2"):
        assert name in graphics[0]
    assert "vkDestroy" not in proc.stderr  # lifetimes are not work
    run = vkcap("run", tmp_path / "imported" / "scenario.json", "--output", tmp_path / "ours")
    assert run.returncode == 0, run.stderr
    (name,) = dsts(tmp_path / "imported" / "scenario.json")
    assert (np.load(tmp_path / "ours" / name).tobytes()
            == (app["root"] / "graphics_out" / "frame1.bin").read_bytes())


def test_a_capture_without_dispatches_says_what_it_holds(app: dict[str, Path], tmp_path: Path) -> None:
    proc = vkcap("import", app["root"] / "idle.gfxr", "-o", tmp_path / "out")
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "the capture holds no compute dispatch vkcap can import (not imported (graphics): vkCreateRenderPass x1" \
        in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_capture_of_vkcap_itself_is_whole(tmp_path: Path) -> None:
    """Where the environment asks for layers, vkcap destroys its instance before it exits, so a capture
    layer writes the end of its file (it was cut at the layer's last 4 KiB buffer, without the fast exit's
    teardown), and the capture imports with no flush setting."""
    env = {"VK_LAYER_PATH": LAYER_FOLDER, "VK_INSTANCE_LAYERS": "VK_LAYER_LUNARG_gfxreconstruct",
           "GFXRECON_CAPTURE_FILE": str(tmp_path / "add.gfxr"), "GFXRECON_CAPTURE_FILE_TIMESTAMP": "false",
           "GFXRECON_LOG_LEVEL": "error"}
    ran = vkcap("run", REPO / "examples" / "add" / "scenario.json", "--output", tmp_path / "out", env=env)
    assert ran.returncode == 0, ran.stderr
    imported = vkcap("import", tmp_path / "add.gfxr", "-o", tmp_path / "imported", "--frames-per-submit")
    assert imported.returncode == 0, imported.stderr
    assert imported.stderr.startswith("vkcap: imported 4 dispatch(es) in 4 frame(s)")
