"""Driver crashes are findings: with ``--isolate`` (the default for bisect) the device work runs in a child
process, and a crash is reported with the frame, the signal and the last log lines.

The crash is a real fatal signal delivered to the child when it starts the chosen frame
(``VKCAP_TEST_CRASH_AT_FRAME``): the process dies exactly as it does when a driver segfaults. (lavapipe
checks buffer bounds and fails bad SPIR-V cleanly, so a shader cannot make it crash on demand.)
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.builders import ScenarioBuilder, vkcap

ACC = """#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer A { uint a[]; };
void main() { a[gl_GlobalInvocationID.x] += 1u; }
"""


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    b = ScenarioBuilder(tmp_path_factory.mktemp("isolate") / "scenario")
    b.shader("acc", ACC).buffer("a", 64)
    for f in range(24):
        b.dispatch("acc", [(0, 0, "a")], [16]).boundary(["a"], f)
    path = b.root / "t.vkt"
    assert vkcap("record", b.save(), "-o", path, "--checkpoint-every", "4").returncode == 0
    return path


def test_isolated_replay_reports_a_crash_as_a_finding(trace: Path, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    proc = vkcap("replay", trace, "--isolate", "--json", report, env={"VKCAP_TEST_CRASH_AT_FRAME": "9"})
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith(
        "vkcap: frame 9 crashed the driver (SIGSEGV, exit code -11); last log lines: ")
    doc = json.loads(report.read_text())
    assert (doc["crashed"], doc["frame"], doc["how"], doc["diverged"]) == (True, 9, "SIGSEGV", True)


def test_isolated_replay_without_a_crash_is_a_normal_replay(trace: Path, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    proc = vkcap("replay", trace, "--isolate", "--json", report)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(report.read_text())
    assert not doc["diverged"] and len(doc["frames"]) == 24


def test_bisect_counts_a_crash_as_a_divergence_and_finds_it(trace: Path, tmp_path: Path) -> None:
    report = tmp_path / "b.json"
    proc = vkcap("bisect", trace, "--json", report, env={"VKCAP_TEST_CRASH_AT_FRAME": "13"})
    assert proc.returncode == 1, proc.stderr
    assert "first divergence: frame 13 crashed the driver (SIGSEGV, exit code -11)" in proc.stdout
    doc = json.loads(report.read_text())
    assert (doc["crashed"], doc["frame"]) == (True, 13)
    assert any(p["diverged"] for p in doc["probes"])


def test_isolated_bisect_runs_every_probe_in_one_child_and_a_new_one_after_a_crash(trace: Path, tmp_path: Path) -> None:
    """24 frames, checkpoints every 4: six segments, and every boundary holds the whole state. The first
    probe (frame 11, the last of segment 2, alone) crashes; the search goes on in a fresh child, which
    serves the remaining probes, until segment 2 replayed whole crashes at frame 11 again."""
    report = tmp_path / "b.json"
    proc = vkcap("bisect", trace, "--json", report, env={"VKCAP_TEST_CRASH_AT_FRAME": "11"})
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(report.read_text())
    assert [(p["segment"], p["frames"], p["diverged"]) for p in doc["probes"]] == [
        (2, [11, 11], True), (0, [3, 3], False), (1, [7, 7], False), (2, [8, 11], True)]
    assert (doc["frame"], doc["replays"], doc["child_processes"]) == (11, 4, 2)
    assert ("search: 4 replay(s), 7 frame(s) at most, over 6 segment(s) in 2 child process(es), a new one after a crash"
            in proc.stdout)


def test_isolated_bisect_without_a_crash_uses_one_child_for_all_probes(trace: Path, tmp_path: Path) -> None:
    report = tmp_path / "b.json"
    proc = vkcap("bisect", trace, "--json", report)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(report.read_text())
    # the search (three last frames alone), then the scan (six segments whole)
    assert not doc["diverged"] and doc["child_processes"] == 1 and doc["replays"] == 3 + 6


def test_isolated_bisect_parent_loads_no_vulkan_trio_or_numpy(trace: Path, tmp_path: Path) -> None:
    """The parent of an isolated bisection only passes requests to its child and reads its answers: it
    must not pay for (or compete with the child over) loading Vulkan, trio or numpy."""
    import subprocess
    import sys

    from tests.builders import REPO

    report = tmp_path / "b.json"
    probe = ("import sys\nfrom vkcap.cli import main\ncode = main(sys.argv[1:])\n"
             "print(sorted(m for m in ('vulkan', 'trio', 'numpy') if m in sys.modules), code)")
    proc = subprocess.run([sys.executable, "-c", probe, "bisect", str(trace), "--json", str(report)],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "[] 0"
    doc = json.loads(report.read_text())
    assert not doc["diverged"] and doc["child_processes"] == 1 and doc["replays"] == 3 + 6
