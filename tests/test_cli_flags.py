"""The replay flags that choose the driver and the tolerance, and ``--version``, through the real
command line (subprocesses: ``--icd`` sets the loader's environment for the whole process)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.builders import REPO, ScenarioBuilder, vkcap
from vkcap import __version__

N = 256
FRAMES = 3
# x *= 1.5 every frame (exact in float32 for these values)
SCALE = """#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) buffer X { float x[]; };
void main() { uint i = gl_GlobalInvocationID.x; x[i] *= FACTOR; }
"""
START = np.arange(1, N + 1, dtype=np.float32)


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("flags")
    b = ScenarioBuilder(root / "scenario")
    b.shader("scale", SCALE, build_options="-DFACTOR=1.5").buffer("x", START.nbytes, START)
    for k in range(FRAMES):
        b.dispatch("scale", [(0, 0, "x")], [N // 64]).boundary(["x"], k)
    path = root / "t.vkt"
    proc = vkcap("record", b.save(), "-o", path)
    assert proc.returncode == 0, proc.stderr
    return path


def driver_manifest() -> Path:
    """The manifest of the driver the tests run on: VK_DRIVER_FILES where set (the GPU machine), else lavapipe's."""
    chosen = os.environ.get("VK_DRIVER_FILES", "").split(os.pathsep)[0]
    manifests = [Path(chosen)] if chosen else sorted(Path("/usr/share/vulkan/icd.d").glob("lvp_icd*.json"))
    assert manifests and manifests[0].is_file(), "no driver manifest (make setup installs mesa-vulkan-drivers)"
    return manifests[0]


def replay_json(trace: Path, tmp_path: Path, *flags: str | Path, expect: int = 0) -> dict:
    out = tmp_path / "r.json"
    proc = vkcap("replay", trace, "--json", out, *flags)
    assert proc.returncode == expect, proc.stderr
    return json.loads(out.read_text())


def test_version() -> None:
    proc = vkcap("--version")
    assert (proc.returncode, proc.stdout.strip()) == (0, f"vkcap {__version__}")


@pytest.mark.slow
@pytest.mark.device
@pytest.mark.parametrize("command, flag", [("replay", "--iso"), ("bisect", "--exh"), ("record", "--checkpoint")])
def test_abbreviated_flags_are_refused(trace: Path, command: str, flag: str) -> None:
    """Flags count only as spelled in full (``--iso`` used to reach an isolated child as ``--isolate``'s
    abbreviation, which the child did not strip, so every child isolated again)."""
    proc = vkcap(command, trace, flag)
    assert proc.returncode == 2
    assert proc.stderr == f"vkcap: error: unrecognized arguments: {flag} (see 'vkcap --help')\n"


INTERRUPT_WHILE_IMPORTING = """
import builtins, runpy
real_import = builtins.__import__
def interrupted(name, *args, **kwargs):
    if name == "argparse":  # the first module vkcap.cli imports
        raise KeyboardInterrupt
    return real_import(name, *args, **kwargs)
builtins.__import__ = interrupted
runpy.run_module("vkcap", run_name="__main__")
"""


def test_ctrl_c_while_the_command_line_is_imported_exits_130_without_a_traceback() -> None:
    proc = subprocess.run([sys.executable, "-c", INTERRUPT_WHILE_IMPORTING, "--version"], capture_output=True, text=True,
                          cwd=REPO)
    assert (proc.returncode, proc.stderr, proc.stdout) == (130, "vkcap: interrupted\n", "")


@pytest.mark.slow
@pytest.mark.device
def test_device_by_index_and_by_name(trace: Path, tmp_path: Path) -> None:
    name = replay_json(trace, tmp_path)["device"]["device_name"]
    for selector in ("0", name.split()[0].upper()):  # an index, or any part of the name in any case
        doc = replay_json(trace, tmp_path, "--device", selector)
        assert doc["device"]["device_name"] == name and doc["diverged"] is False


@pytest.mark.device
def test_a_device_that_does_not_exist_is_bad_input_not_a_divergence(trace: Path, tmp_path: Path) -> None:
    proc = vkcap("replay", trace, "--device", "no-such-gpu")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("vkcap: error: no device matches --device 'no-such-gpu' (devices: 0: ")


@pytest.mark.slow
@pytest.mark.device
def test_icd_chooses_the_driver(trace: Path, tmp_path: Path) -> None:
    """The manifest given is the only driver the loader sees: the real one replays; one whose library
    is no Vulkan driver (zlib) leaves no driver at all (so the flag really decides which driver runs);
    one whose library does not exist is refused before Vulkan starts."""
    doc = replay_json(trace, tmp_path, "--icd", driver_manifest())
    assert doc["diverged"] is False and doc["device"]["driver_name"] == doc["recorded_device"]["driver_name"]
    fake = tmp_path / "fake_icd.json"

    def manifest(library: str) -> Path:
        fake.write_text(json.dumps({"file_format_version": "1.0.0", "ICD": {"library_path": library, "api_version": "1.3.0"}}))
        return fake

    proc = vkcap("replay", trace, "--icd", manifest("libz.so.1"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == ("vkcap: error: cannot create a Vulkan instance (VkErrorIncompatibleDriver); "
                                   "is a Vulkan driver installed?")
    proc = vkcap("replay", trace, "--icd", manifest(str(tmp_path / "libvulkan_missing.so")))
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"vkcap: error: --icd {fake}: ICD.library_path: no such library: {tmp_path}/libvulkan_missing.so"
    missing = tmp_path / "missing.json"
    proc = vkcap("replay", trace, "--icd", missing)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"vkcap: error: --icd {missing}: no such driver manifest (a Vulkan ICD .json file)"


@pytest.mark.slow
@pytest.mark.device
def test_rtol_accepts_a_small_relative_change_and_no_more(trace: Path, tmp_path: Path) -> None:
    """A shader that scales by 1.5 * (1 + 2^-16): after frame k every element is off by about
    (k + 1) * 2^-16 relatively (1.5e-5 to 4.6e-5), which --rtol 1e-4 accepts and --rtol 1e-5 does not."""
    edited = tmp_path / "scale.comp"
    edited.write_text(SCALE.replace("FACTOR", "(1.5 * (1.0 + 1.0 / 65536.0))"))
    replace = ("--replace-shader", f"scale={edited}", "--dtype", "x=float32")
    doc = replay_json(trace, tmp_path, *replace, "--rtol", "1e-4")
    statuses = [f["resources"][0]["status"] for f in doc["frames"]]
    assert statuses == ["within tolerance"] * FRAMES and doc["diverged"] is False
    live = START * np.float32(1.5 * (1 + 2**-16))
    worst = doc["frames"][0]["resources"][0]["max_rel"]
    assert worst == pytest.approx(float(np.max(np.abs(live - START * np.float32(1.5)) / (START * np.float32(1.5)))), rel=1e-3)
    doc = replay_json(trace, tmp_path, *replace, "--rtol", "1e-5", expect=1)
    assert [f["frame"] for f in doc["frames"] if f["diverged"]] == list(range(FRAMES))
