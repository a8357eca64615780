"""Reference runner flags with device effects: ``--disable-extension``, ``--enable-robustness-features``,
and the key-stroke pauses."""
from __future__ import annotations

import pytest

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from tests.builders import ScenarioBuilder, load_output, vkcap

pytestmark = pytest.mark.device

SPILL = """#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer A { float a[]; };
void main() { for (int i = 0; i < 32; i++) a[i] = 1.0; }
"""


@pytest.mark.slow
def test_a_disabled_extension_is_not_enabled(builder: ScenarioBuilder, tmp_path: Path) -> None:
    builder.resources.append({"image": {"uid": "img", "dims": [1, 4, 4, 1], "format": "VK_FORMAT_R32G32B32A32_SFLOAT",
                                        "shader_access": "readonly", "border_address_mode": "CLAMP_BORDER",
                                        "border_color": "FLOAT_CUSTOM_EXT", "custom_border_color": [1, 0, 0, 1]}})
    scenario = builder.save()
    assert vkcap("run", scenario, "--output", tmp_path).returncode == 0
    proc = vkcap("run", scenario, "--output", tmp_path, "--disable-extension", "VK_EXT_custom_border_color")
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith(
        f"vkcap: error: {scenario}: resources[0].image.border_color: image 'img': border_color FLOAT_CUSTOM_EXT needs "
        "VK_EXT_custom_border_color, which is not enabled on device"), proc.stderr
    bad = vkcap("run", scenario, "--disable-extension", "VK_EXT_unheard_of")
    assert bad.returncode == 2 and "invalid choice: 'VK_EXT_unheard_of'" in bad.stderr


@pytest.mark.slow
def test_robust_buffer_access_keeps_writes_inside_the_bound_range(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """A shader writes 32 floats through a binding of 4: with robustness the 28 beyond are discarded, so the
    buffer that follows in the same memory keeps its content; the trace's fingerprint says robustness was on
    (lavapipe discards such writes either way, so the fingerprint is what tells the two runs apart)."""
    builder.shader("spill", SPILL)
    group = {"memory_group": {"id": "g", "offset": 0}}
    builder.buffer("small", 16, dst="small.npy", **group)
    builder.buffer("next", 16, np.full(4, 7, np.float32), dst="next.npy",
                   memory_group={"id": "g", "offset": 64})
    builder.dispatch("spill", [(0, 0, "small")], [1, 1, 1])
    scenario = builder.save()
    robust, plain = tmp_path / "robust.vkt", tmp_path / "plain.vkt"
    proc = vkcap("record", scenario, "--output", tmp_path, "-o", robust, "--enable-robustness-features")
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(load_output(tmp_path / "small.npy", np.float32), np.ones(4))
    np.testing.assert_array_equal(load_output(tmp_path / "next.npy", np.float32), np.full(4, 7))
    assert vkcap("record", scenario, "--output", tmp_path, "-o", plain).returncode == 0
    fingerprints = [json.loads(vkcap("info", t, "--json").stdout)["fingerprint"] for t in (robust, plain)]
    assert [f["robust_buffer_access"] for f in fingerprints] == [True, False]


@pytest.mark.slow
def test_key_stroke_pauses_read_standard_input(builder: ScenarioBuilder, tmp_path: Path) -> None:
    builder.shader("spill", SPILL).buffer("a", 128, dst="a.npy").dispatch("spill", [(0, 0, "a")], [1, 1, 1])
    proc = subprocess.run([sys.executable, "-m", "vkcap", "run", str(builder.save()), "--output", str(tmp_path),
                           "--wait-for-key-stroke-before-run", "--pause-on-exit"],
                          input="\n\n", capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0] == "vkcap: press Enter to run" and lines[-1] == "vkcap: press Enter to exit"
    np.testing.assert_array_equal(load_output(tmp_path / "a.npy", np.float32), np.ones(32))


def test_neural_accelerator_flags_say_plainly_that_nothing_is_written(builder: ScenarioBuilder, tmp_path: Path) -> None:
    builder.shader("spill", SPILL).buffer("a", 128, dst="a.npy").dispatch("spill", [(0, 0, "a")], [1, 1, 1])
    proc = vkcap("run", builder.save(), "--output", tmp_path, "--neural-statistics-dump-dir", tmp_path / "stats",
                 "--neural-statistics-mode", "1", "--neural-debug-database-dump-dir")
    assert proc.returncode == 0, proc.stderr
    first = proc.stderr.splitlines()[0]
    assert first.startswith("vkcap: --neural-debug-database-dump-dir, --neural-statistics-dump-dir, "
                            "--neural-statistics-mode: "), first
    assert first.endswith("; nothing is written") and not (tmp_path / "stats").exists()
    np.testing.assert_array_equal(load_output(tmp_path / "a.npy", np.float32), np.ones(32))


def test_capture_frame_says_plainly_whether_renderdoc_is_there(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """RenderDoc is not installed here: the run goes on, and one line says that nothing is captured."""
    from vkcore.device.renderdoc import loaded_library

    assert loaded_library() is None
    builder.shader("spill", SPILL).buffer("a", 128, dst="a.npy").dispatch("spill", [(0, 0, "a")], [1, 1, 1])
    proc = vkcap("run", builder.save(), "--output", tmp_path, "--capture-frame")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[0] == ("vkcap: --capture-frame: RenderDoc is not loaded in this process (start "
                                           "vkcap from RenderDoc or with 'renderdoccmd capture'); nothing is captured")
    np.testing.assert_array_equal(load_output(tmp_path / "a.npy", np.float32), np.ones(32))


@pytest.mark.slow
def test_a_replay_opens_the_device_as_the_recording_did(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """A trace recorded with ``--enable-robustness-features`` and ``--disable-extension`` replays on a device
    opened the same way (the trace's fingerprint says how: robust buffer access, the extensions enabled), so
    out-of-bounds accesses behave as they did when recorded, and the replay matches."""
    builder.shader("spill", SPILL)
    builder.buffer("small", 16, dst="small.npy", memory_group={"id": "g", "offset": 0})
    builder.buffer("next", 16, np.full(4, 7, np.float32), dst="next.npy", memory_group={"id": "g", "offset": 64})
    builder.dispatch("spill", [(0, 0, "small")], [1, 1, 1])
    scenario, trace, report = builder.save(), tmp_path / "robust.vkt", tmp_path / "replay.json"
    proc = vkcap("record", scenario, "--output", tmp_path, "-o", trace, "--enable-robustness-features",
                 "--disable-extension", "VK_EXT_frame_boundary")
    assert proc.returncode == 0, proc.stderr
    recorded = json.loads(vkcap("info", trace, "--json").stdout)["fingerprint"]
    assert recorded["robust_buffer_access"] and "VK_EXT_frame_boundary" not in recorded["extensions_enabled"]
    proc = vkcap("replay", trace, "--json", report)
    assert proc.returncode == 0, proc.stderr
    document = json.loads(report.read_text())
    assert not document["diverged"]
    assert document["device"]["robust_buffer_access"] is True
    assert document["device"]["extensions_enabled"] == recorded["extensions_enabled"]


def test_the_recorded_fingerprint_says_how_a_replay_opens_the_device(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """What lavapipe cannot show (it has no VK_EXT_frame_boundary to disable): an optional extension the
    recording did not enable stays disabled on replay; robustness follows the recording's; a fingerprint
    that does not list the enabled extensions (an older trace) disables none."""
    from replay.options import ReplayOptions
    from replay.replayer import device_as_recorded
    from vkcore.scenario.load import load_scenario

    scenario = load_scenario(builder.shader("spill", SPILL).buffer("a", 128).dispatch("spill", [(0, 0, "a")], [1, 1, 1]).save())
    options = ReplayOptions(trace=tmp_path / "t.vkt", device="0")
    robust = device_as_recorded({"extensions_enabled": [], "robust_buffer_access": True}, scenario, options)
    assert (robust.device, robust.robust, robust.disabled_extensions) == ("0", True, ("VK_EXT_frame_boundary",))
    plain = device_as_recorded({"extensions_enabled": ["VK_EXT_frame_boundary"], "robust_buffer_access": False},
                               scenario, options)
    assert (plain.robust, plain.disabled_extensions) == (False, ())
    assert device_as_recorded({}, scenario, options).disabled_extensions == ()
