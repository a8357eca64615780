"""The pytest plugin as pytest users expect it: suite traces collected and counted as items, expected
divergences XFAIL (XPASS when fixed, a failure under ``xfail_strict``), a failure message of a few lines
(verdict, resources, first indices, the page) and never the plugin's source, manifest errors a usage
error (exit 4, one line, no INTERNALERROR), manifest paths confined unless allowed.

pytest runs in a subprocess on a small project (the plugin comes from the ``pytest11`` entry point). A
trace that diverges for real is a recorded trace whose stored SPIR-V is replaced by a module computing
``a + 2b`` instead of ``a + b``: its replay runs the new module against the recorded outputs.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.builders import ADD_FLOAT, REPO, ScenarioBuilder, with_repo_path
from tests.test_suite import record
from tests.test_untrusted_spirv import with_module


def pytest_in(project: Path, *args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """pytest on ``project`` (its root folder: pytest would otherwise root it where the manifest is too)."""
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(project),
                           *map(str, args)], cwd=project, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": with_repo_path(), **(env or {})})


def diverging_copy(trace: Path, target: Path) -> Path:
    """``trace`` with its shader computing ``c = a + 2b``: every value of ``c`` diverges in every frame."""
    source = target.with_suffix(".comp")
    source.write_text(ADD_FLOAT.replace("a[i] + b[i]", "a[i] + b[i] * 2.0"))
    spv = target.with_suffix(".spv")
    subprocess.run(["glslangValidator", "-V", "-o", str(spv), str(source)], check=True, capture_output=True)
    with_module(trace, target, spv.read_bytes())
    source.unlink()
    spv.unlink()
    return target


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of traces: ``good`` (2 frames) and ``bad`` (``good`` diverging from frame 0)."""
    root = tmp_path_factory.mktemp("plugin")
    builder = ScenarioBuilder(root / "scenario")
    good = record(builder, root, 2, "good")
    diverging_copy(good, good.with_name("bad.vkt"))
    return good.parent


def project_with(traces: Path, tmp_path: Path, manifest_text: str) -> tuple[Path, Path]:
    manifest = traces / f"{tmp_path.name}.toml"
    manifest.write_text(manifest_text)
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_mine.py").write_text("def test_mine():\n    pass\n")
    return project, manifest


EXPECT_DIVERGED = '[[traces.expect]]\ndevice = "*"\nstatus = "diverged"\nreason = "a + 2b is a known bug"\n'


@pytest.mark.slow
@pytest.mark.device
def test_items_are_collected_and_counted(traces: Path, tmp_path: Path) -> None:
    """``-q --co`` lists the suite's items with the project's test, and says how many."""
    project, manifest = project_with(traces, tmp_path, '[[traces]]\npath = "good.vkt"\n\n[[traces]]\npath = "bad.vkt"\n'
                                     + EXPECT_DIVERGED)
    proc = pytest_in(project, "-q", "--co", "--vkcap-suite", manifest, "test_mine.py")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert [line for line in lines if "::" in line] == ["test_mine.py::test_mine", "vkcap-suite::vkcap[bad.vkt]",
                                                         "vkcap-suite::vkcap[good.vkt]"], proc.stdout
    assert "3 tests collected" in proc.stdout, proc.stdout


@pytest.mark.slow
@pytest.mark.device
def test_an_expected_divergence_is_xfail_and_a_fixed_one_xpass(traces: Path, tmp_path: Path) -> None:
    """``bad`` expected to diverge: XFAIL with the expectation's reason; ``good`` expected to diverge (it
    was fixed): XPASS, and under ``xfail_strict`` a failure saying so. The run's counts are pytest's."""
    project, manifest = project_with(traces, tmp_path, '[[traces]]\npath = "*.vkt"\n' + EXPECT_DIVERGED)
    proc = pytest_in(project, "-q", "-rxX", "--vkcap-suite", manifest, "test_mine.py")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "1 passed, 1 xfailed, 1 xpassed" in proc.stdout, proc.stdout
    assert "XFAIL vkcap-suite::vkcap[bad.vkt] - expected diverged: a + 2b is a known bug" in proc.stdout, proc.stdout
    assert "XPASS vkcap-suite::vkcap[good.vkt] - expected diverged: a + 2b is a known bug" in proc.stdout, proc.stdout
    strict = pytest_in(project, "-q", "-o", "xfail_strict=true", "--vkcap-suite", manifest, "test_mine.py")
    assert strict.returncode == 1, strict.stdout[-3000:]
    assert "1 failed, 1 passed, 1 xfailed" in strict.stdout, strict.stdout
    assert "[XPASS(strict)] expected diverged: a + 2b is a known bug" in strict.stdout, strict.stdout


def failure_section(stdout: str, item: str) -> list[str]:
    """The lines of ``item``'s section of pytest's FAILURES."""
    lines = stdout.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("_") and f" {item} " in line)
    end = next((k for k in range(start + 1, len(lines)) if lines[k].startswith(("_", "="))), len(lines))
    return [line for line in lines[start + 1:end] if line.strip()]


@pytest.mark.slow
@pytest.mark.device
def test_a_divergence_fails_in_a_few_lines(traces: Path, tmp_path: Path) -> None:
    """An unexpected divergence: the failure says the verdict, each frame's diverged resource with its
    first indices, and the page (``--vkcap-html``); no source line of the plugin, no traceback. An
    expected divergence from another first frame fails the same way, naming both frames."""
    project, manifest = project_with(traces, tmp_path, '[[traces]]\npath = "bad.vkt"\n')
    pages = tmp_path / "pages"
    proc = pytest_in(project, "-q", "--vkcap-html", pages, "--vkcap-suite", manifest, "test_mine.py")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "1 failed, 1 passed" in proc.stdout, proc.stdout
    lines = failure_section(proc.stdout, "vkcap[bad.vkt]")
    assert lines[0].startswith("bad.vkt on ") and lines[0].endswith(": diverged from frame 0 (expected pass)"), lines
    for k in (0, 1):
        assert lines[1 + k].startswith(f"  frame {k}: c: DIVERGED: 16/16 float32 elements differ (100.00%)"), lines
        assert "first at [0]: recorded 1.0, live 2.0" in lines[1 + k], lines
    (page,) = pages.glob("bad.vkt.*.html")
    assert lines[3:] == [f"  page: {page}"], lines
    assert "pytest_plugin.py" not in proc.stdout and "def runtest" not in proc.stdout, proc.stdout
    assert "FAILED vkcap-suite::vkcap[bad.vkt] - bad.vkt on " in proc.stdout, proc.stdout
    # expected to diverge from frame 1, it diverges from frame 0: a failure naming both
    manifest.write_text('[[traces]]\npath = "bad.vkt"\n[[traces.expect]]\ndevice = "*"\nstatus = "diverged"\nframe = 1\n')
    moved = pytest_in(project, "-q", "--vkcap-suite", manifest, "test_mine.py")
    assert moved.returncode == 1 and "1 failed, 1 passed" in moved.stdout, moved.stdout[-3000:]
    assert failure_section(moved.stdout, "vkcap[bad.vkt]")[0].endswith(
        ": diverged from frame 0 (expected diverged from frame 1)"), moved.stdout


@pytest.mark.slow
@pytest.mark.device
@pytest.mark.parametrize("case", ["missing", "bad toml"])
def test_manifest_errors_are_usage_errors(traces: Path, tmp_path: Path, case: str) -> None:
    """Exit 4 (pytest's usage error), one line naming the manifest and what is wrong, no INTERNALERROR, no
    traceback, nothing collected or run."""
    project, manifest = project_with(traces, tmp_path, {"missing": "", "bad toml": "[[traces]\npath = 1\n"}[case])
    if case == "missing":
        manifest.unlink()
    proc = pytest_in(project, "-q", "--vkcap-suite", manifest, "test_mine.py")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out[-3000:]
    assert "INTERNALERROR" not in out and "Traceback" not in out and "passed" not in out, out[-3000:]
    (line,) = [line for line in proc.stderr.splitlines() if line.strip()]
    assert line.startswith(f"ERROR: --vkcap-suite: {manifest}"), line
    expected = {"missing": "no such suite folder or manifest", "bad toml": "", "outside": "outside",
                "bad status": "traces[0].expect[0]: needs device (a pattern) and status"}[case]
    assert expected in line, line


@pytest.mark.slow
@pytest.mark.device
def test_outside_paths_need_the_option(traces: Path, tmp_path: Path) -> None:
    """A manifest naming a trace in another folder: refused by default (exit 4, one line); allowed by the
    command-line option or by the ini option (collected: the confinement is a collection matter)."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    manifest = elsewhere / "suite.toml"
    manifest.write_text(f'[[traces]]\npath = "{traces / "good.vkt"}"\n')
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_mine.py").write_text("def test_mine():\n    pass\n")
    refused = pytest_in(project, "-q", "--vkcap-suite", manifest)
    assert refused.returncode == 4, refused.stdout[-2000:] + refused.stderr[-2000:]
    assert refused.stderr.strip() == (
        f"ERROR: --vkcap-suite: {manifest}: traces[0].path: {str(traces / 'good.vkt')!r} is absolute: a manifest names "
        "its traces relative to its own folder (--vkcap-allow-outside-manifest or the ini option "
        "vkcap_allow_outside_manifest allows it)"), refused.stderr
    allowed = pytest_in(project, "-q", "--co", "--vkcap-allow-outside-manifest", "--vkcap-suite", manifest)
    assert allowed.returncode == 0 and "2 tests collected" in allowed.stdout, allowed.stdout[-3000:]
    (project / "pytest.ini").write_text("[pytest]\nvkcap_allow_outside_manifest = true\n")
    by_ini = pytest_in(project, "-q", "--co", "-c", "pytest.ini", "--vkcap-suite", manifest)
    assert by_ini.returncode == 0 and "2 tests collected" in by_ini.stdout, by_ini.stdout[-3000:]


@pytest.mark.slow
@pytest.mark.device
def test_an_expected_crash_is_xfail(traces: Path, tmp_path: Path) -> None:
    """A trace that kills its replay (SIGSEGV in frame 1, injected) and is expected to crash: XFAIL; the
    same crash unexpected: a one-line failure naming the frame and the signal."""
    project, manifest = project_with(traces, tmp_path, '[[traces]]\npath = "good.vkt"\n[[traces.expect]]\n'
                                     'device = "*"\nstatus = "crash"\nreason = "dies"\n\n[[traces]]\npath = "bad.vkt"\n')
    proc = pytest_in(project, "-q", "-rx", "--vkcap-suite", manifest, "test_mine.py", env={"VKCAP_TEST_CRASH_AT_FRAME": "1"})
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "1 failed, 1 passed, 1 xfailed" in proc.stdout, proc.stdout
    assert "XFAIL vkcap-suite::vkcap[good.vkt] - dies" in proc.stdout, proc.stdout
    assert "bad.vkt: frame 1 crashed the driver (SIGSEGV" in proc.stdout, proc.stdout


def test_the_fixture_checks_tolerances_as_the_command_line_does() -> None:
    from vkcap.pytest_plugin import check_tolerances

    with pytest.raises(ValueError, match=r"^vkcap_replay: atol: must be a finite number >= 0, got nan$"):
        check_tolerances(float("nan"), 0, 0)
    with pytest.raises(ValueError, match=r"^vkcap_replay: ulp: must be a whole number >= 0 and below 2\*\*63, got 1.5$"):
        check_tolerances(0, 0, 1.5)
    check_tolerances(0.5, np.float64(1e-3).item(), 4)


@pytest.mark.slow
@pytest.mark.device
def test_an_expectation_names_the_resources_that_may_diverge(traces: Path, tmp_path: Path) -> None:
    """An expected divergence limited to ``resources``: XFAIL when only those diverged, a failure when
    another one did (``bad`` diverges in ``c``), as ``suite run`` judges it."""
    for allowed, summary in (('["c"]', "1 passed, 1 xfailed"), ('["a"]', "1 failed, 1 passed")):
        (tmp_path / allowed.strip('[]"')).mkdir()
        project, manifest = project_with(traces, tmp_path / allowed.strip('[]"'), '[[traces]]\npath = "bad.vkt"\n'
                                         + EXPECT_DIVERGED + f"resources = {allowed}\n")
        proc = pytest_in(project, "-q", "--vkcap-suite", manifest, "test_mine.py")
        assert summary in proc.stdout, proc.stdout[-3000:]
