"""``--enable-gpu-debug-markers``: VK_EXT_debug_utils labels around every frame and command and names on
buffers and images, as a capture tool sees them: the scenario runs under GFXReconstruct's capture
layer (Debian's ``gfxreconstruct``) and the capture, converted to JSON, is read back."""
from __future__ import annotations

import json
import os
import shutil
import sys
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.builders import ADD_FLOAT, ScenarioBuilder, load_output, vkcap

pytestmark = pytest.mark.device

LAYER = "VK_LAYER_LUNARG_gfxreconstruct"


def captured_calls(builder: ScenarioBuilder, tmp_path: Path, *flags: str) -> list[dict]:
    """The Vulkan calls of one ``vkcap run`` with ``flags``, as GFXReconstruct captured them."""
    if shutil.which("gfxrecon-convert") is None:
        pytest.fail("gfxreconstruct is not installed (make setup installs it)")
    capture = tmp_path / "capture.gfxr"
    env = {**os.environ, "VK_INSTANCE_LAYERS": LAYER, "GFXRECON_CAPTURE_FILE": str(capture),
           "GFXRECON_CAPTURE_FILE_TIMESTAMP": "false", "GFXRECON_CAPTURE_FILE_FLUSH": "true"}
    proc = vkcap("run", builder.save(), "--output", tmp_path / "out", *flags, env=env)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(load_output(tmp_path / "out" / "c.npy", np.float32), np.full(8, 3, np.float32))
    text = subprocess.run(["gfxrecon-convert", "--output", "stdout", str(capture)], capture_output=True, text=True,
                          check=True).stdout
    return [json.loads(line)["vkFunc"] for line in text.splitlines() if '"vkFunc"' in line]


def two_frames(builder: ScenarioBuilder) -> None:
    builder.shader("add", ADD_FLOAT)
    builder.buffer("a", 32, np.ones(8, np.float32), shader_access="readonly")
    builder.buffer("b", 32, np.full(8, 2, np.float32), shader_access="readonly")
    builder.buffer("c", 32, dst="c.npy")
    builder.resources.append({"memory_barrier": {"uid": "mb", "src_access": "compute_shader_write",
                                                 "dst_access": "compute_shader_read"}})
    for k in range(2):
        builder.dispatch("add", [(0, 0, "a"), (0, 1, "b"), (0, 2, "c")], [8, 1, 1]).barrier(memory_barrier_refs=["mb"])
        builder.boundary(["c"], k)


@pytest.mark.slow
def test_labels_and_names_as_a_capture_tool_sees_them(builder: ScenarioBuilder, tmp_path: Path) -> None:
    two_frames(builder)
    calls = captured_calls(builder, tmp_path, "--enable-gpu-debug-markers")
    labels = [c["args"]["pLabelInfo"]["pLabelName"] if c["name"] == "vkCmdBeginDebugUtilsLabelEXT" else "end"
              for c in calls if c["name"] in ("vkCmdBeginDebugUtilsLabelEXT", "vkCmdEndDebugUtilsLabelEXT")]
    frame = lambda k: [f"frame {k}", f"commands[{3 * k}].dispatch_compute (add)", "end",  # noqa: E731
                       f"commands[{3 * k + 1}].dispatch_barrier", "end", "end"]  # a boundary ends the frame's label
    assert labels == frame(0) + frame(1), json.dumps(labels)
    names = {(c["args"]["pNameInfo"]["objectType"], c["args"]["pNameInfo"]["pObjectName"])
             for c in calls if c["name"] == "vkSetDebugUtilsObjectNameEXT"}
    assert names == {("VK_OBJECT_TYPE_BUFFER", uid) for uid in "abc"}


def test_no_labels_without_the_flag(builder: ScenarioBuilder, tmp_path: Path) -> None:
    two_frames(builder)
    calls = captured_calls(builder, tmp_path)
    assert not [c for c in calls if "DebugUtilsLabel" in c["name"] or "DebugUtilsObjectName" in c["name"]]


def test_capture_frame_makes_one_renderdoc_capture_per_frame(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """``--capture-frame`` under RenderDoc (Debian's ``renderdoccmd capture``): each frame is one capture,
    holding that frame's dispatch and, with ``--enable-gpu-debug-markers``, its labels."""
    if shutil.which("renderdoccmd") is None:
        pytest.fail("renderdoccmd is not installed (make setup installs it)")
    two_frames(builder)
    scenario = builder.save()
    captures = tmp_path / "captures"
    captures.mkdir()
    repo = Path(__file__).resolve().parent.parent
    launch = subprocess.run(
        ["renderdoccmd", "capture", "-w", "-d", str(repo), "-c", str(captures / "vkcap"), sys.executable, "-m", "vkcap",
         "run", str(scenario), "--output", str(tmp_path / "out"), "--capture-frame", "--enable-gpu-debug-markers"],
        capture_output=True, text=True, timeout=300)
    assert "vkcap: --capture-frame: RenderDoc is loaded; each frame becomes one capture" in launch.stdout + launch.stderr, (
        launch.stdout + launch.stderr)
    np.testing.assert_array_equal(load_output(tmp_path / "out" / "c.npy", np.float32), np.full(8, 3, np.float32))
    files = sorted(captures.glob("*.rdc"))
    assert len(files) == 2, files
    for frame, capture in enumerate(files):
        xml = capture.with_suffix(".xml")
        subprocess.run(["renderdoccmd", "convert", "-f", str(capture), "-o", str(xml), "-c", "xml"], check=True,
                       capture_output=True, timeout=120)
        text = xml.read_text(errors="replace")
        assert text.count("vkCmdDispatch") == 1 and f"commands[{3 * frame}].dispatch_compute (add)" in text
