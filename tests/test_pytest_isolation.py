"""The pytest plugin replays in child processes: a driver crash fails its own item, never the session.

The crash is real: ``VKCAP_TEST_CRASH_AT_FRAME`` makes the replaying process kill itself with SIGSEGV
as it submits that frame (the fault injection ``suite run`` and ``--isolate`` are tested with), so a
trace with more frames than that dies exactly as it would in a crashing driver.
"""
from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.builders import REPO, ScenarioBuilder, with_repo_path
from tests.test_suite import record
from vkcap.pytest_plugin import check_tolerances


def pytest_in(project: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", *args],
                          cwd=project, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": with_repo_path(), **(env or {})})


@pytest.mark.slow
@pytest.mark.device
def test_a_crashing_trace_fails_its_item_and_the_session_goes_on(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """Three suite traces, the middle one dying in frame 2 (SIGSEGV): that item fails naming the frame and
    the signal, the other two and a fixture test after it pass, pytest exits 1 (not a signal); a fixture
    replay of the crashing trace fails that test only."""
    for name, frames in (("a", 2), ("long", 4), ("c", 2)):
        record(builder, tmp_path, frames, name)
    traces = tmp_path / "traces"
    manifest = traces / "suite.toml"
    manifest.write_text("".join(f'[[traces]]\npath = "{n}.vkt"\n\n' for n in ("a", "long", "c")))
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_mine.py").write_text(
        "def test_crashing(vkcap_replay):\n"
        f"    vkcap_replay({str(traces / 'long.vkt')!r})\n\n"
        "def test_fine(vkcap_replay):\n"
        f"    report = vkcap_replay({str(traces / 'a.vkt')!r}, atol=0.5, dtypes={{'c': 'float32'}})\n"
        "    assert not report.diverged and len(report.frames) == 2 and report.device\n")
    proc = pytest_in(project, "--vkcap-suite", str(manifest), "test_mine.py", env={"VKCAP_TEST_CRASH_AT_FRAME": "2"})
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "2 failed, 3 passed" in proc.stdout, proc.stdout[-3000:]
    failed = sorted(line.split()[1].split("::")[-1] for line in proc.stdout.splitlines() if line.startswith("FAILED"))
    assert failed == ["test_crashing", "vkcap[long.vkt]"], proc.stdout[-3000:]
    # each failure's section holds the crash line: the trace, the frame, the signal (counted outside the short
    # summary, which pytest truncates on a terminal and prints whole where CI is set)
    sections = proc.stdout.split("short test summary info")[0]
    assert sections.count("long.vkt: frame 2 crashed the driver (SIGSEGV") == 2, proc.stdout[-3000:]


@pytest.mark.slow
@pytest.mark.device
def test_a_damaged_trace_fails_its_item_with_the_childs_one_line(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """A trace the child refuses (exit 2: not a trace at all) fails its item with that one line; the next
    item passes. A fixture given ``atol=nan`` fails that test before anything runs, naming the key."""
    record(builder, tmp_path, 2, "a")
    traces = tmp_path / "traces"
    (traces / "junk.vkt").write_bytes(b"not a trace at all" * 10)
    manifest = traces / "suite.toml"
    manifest.write_text('[[traces]]\npath = "junk.vkt"\n\n[[traces]]\npath = "a.vkt"\n')
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_mine.py").write_text(
        "def test_nan(vkcap_replay):\n"
        f"    vkcap_replay({str(traces / 'a.vkt')!r}, atol=float('nan'))\n")
    proc = pytest_in(project, "--vkcap-suite", str(manifest), "test_mine.py")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "2 failed, 1 passed" in proc.stdout, proc.stdout[-3000:]
    failed = sorted(line.split()[1].split("::")[-1] for line in proc.stdout.splitlines() if line.startswith("FAILED"))
    assert failed == ["test_nan", "vkcap[junk.vkt]"], proc.stdout[-3000:]
    assert "junk.vkt: not a vkcap trace" in proc.stdout and "Traceback" not in proc.stdout, proc.stdout[-3000:]
    assert "vkcap_replay: atol: must be a finite number >= 0, got nan" in proc.stdout, proc.stdout[-3000:]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["atol", "rtol", "ulp"]),
       st.one_of(st.just(math.nan), st.just(math.inf), st.just(-math.inf), st.floats(max_value=-1e-300),
                 st.integers(max_value=-1), st.integers(min_value=1 << 63, max_value=1 << 70), st.booleans(),
                 st.text(max_size=3), st.none()))
def test_the_fixture_refuses_tolerances_that_are_not_finite_numbers(key: str, value: object) -> None:
    """Generated hostile tolerances (NaN, infinities, negatives, ULPs of 2**63 and more, bools, strings,
    None): each is refused naming its key, before any replay."""
    assume(key == "ulp" or not (isinstance(value, int) and value >= 1 << 63))  # a huge atol is finite
    given_values = {"atol": 0.0, "rtol": 0.0, "ulp": 0, key: value}
    with pytest.raises(ValueError, match=f"vkcap_replay: {key}: must be"):
        check_tolerances(given_values["atol"], given_values["rtol"], given_values["ulp"])


def test_the_fixture_accepts_finite_tolerances() -> None:
    check_tolerances(0.5, 1e-3, 4)
    check_tolerances(0, 0, 0)
    with pytest.raises(ValueError, match="ulp: must be a whole number"):
        check_tolerances(0, 0, 1.5)
