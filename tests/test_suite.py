"""``vkcap suite run``: traces of folders and manifests replayed by long-lived workers, each outcome
judged against the expectation for the device; a crashing replay kills only its worker (fault
injection: ``VKCAP_TEST_CRASH_AT_FRAME``, the real fatal signal a driver crash delivers)."""
from __future__ import annotations

import json

import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from replay.suite import SuiteTrace, load_suite, shard
from tests.builders import ADD_FLOAT, ScenarioBuilder, vkcap
from vkcore.errors import UsageError


def record(builder: ScenarioBuilder, tmp_path: Path, frames: int, name: str) -> Path:
    b = ScenarioBuilder(builder.root.parent / f"scenario-{name}")
    b.shader("add", ADD_FLOAT)
    b.buffer("a", 64, np.arange(16, dtype=np.float32), shader_access="readonly")
    b.buffer("b", 64, np.ones(16, np.float32), shader_access="readonly").buffer("c", 64)
    for k in range(frames):
        b.dispatch("add", [(0, 0, "a"), (0, 1, "b"), (0, 2, "c")], [16, 1, 1]).boundary(["c"], k)
    trace = tmp_path / "traces" / f"{name}.vkt"
    trace.parent.mkdir(exist_ok=True)
    proc = vkcap("record", b.save(), "-o", trace, "--output", tmp_path / "out" / name)
    assert proc.returncode == 0, proc.stderr
    return trace


@pytest.mark.slow
@pytest.mark.device
def test_a_suite_with_expectations_and_a_crash(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """Six traces on two workers, the replay of every 4-frame trace killed at frame 2: a crash expected
    on this device is ``expected``, one expected nowhere ``fail``; a trace expected to diverge that
    passes is ``fixed``; one skipped here is ``skip``; the rest pass. Every trace is reported, in order,
    in the table, the JSON, the JUnit and one result file each."""
    short = [record(builder, tmp_path, 2, name) for name in ("p1", "p2", "fixed", "skipped")]
    long = [record(builder, tmp_path, 4, name) for name in ("crash_expected", "crash_unexpected")]
    manifest = tmp_path / "traces" / "suite.toml"
    manifest.write_text('''
[[traces]]
path = "p*.vkt"

[[traces]]
path = "fixed.vkt"
[[traces.expect]]
device = "*"
status = "diverged"
reason = "a driver bug"

[[traces]]
path = "skipped.vkt"
[[traces.expect]]
device = "*"
status = "skip"
reason = "too slow on CPUs"

[[traces]]
path = "crash_expected.vkt"
[[traces.expect]]
device = "No such GPU*"
status = "pass"
[[traces.expect]]
device = "*"
status = "crash"
reason = "dies in frame 2"

[[traces]]
path = "crash_unexpected.vkt"
''')
    report, junit, results = tmp_path / "suite.json", tmp_path / "suite.xml", tmp_path / "results"
    proc = vkcap("suite", "run", manifest, "-j", "2", "--json", report, "--junit", junit, "--results", results,
                 env={"VKCAP_TEST_CRASH_AT_FRAME": "2"})
    assert proc.returncode == 1, proc.stderr
    rows = {Path(r["trace"]).name: r for r in json.loads(report.read_text())["results"]}
    assert list(rows) == sorted(p.name for p in short + long)
    assert {name: (r["status"], r["outcome"], r["expected"]) for name, r in rows.items()} == {
        "crash_expected.vkt": ("expected", "crash", "crash"),
        "crash_unexpected.vkt": ("fail", "crash", "pass"),
        "fixed.vkt": ("fixed", "identical", "diverged"),
        "p1.vkt": ("pass", "identical", "pass"),
        "p2.vkt": ("pass", "identical", "pass"),
        "skipped.vkt": ("skip", "skipped", "skip"),
    }, {name: r.get("detail") for name, r in rows.items()}  # what went wrong, where a row is not as expected
    assert rows["crash_unexpected.vkt"]["detail"] == "the replay died in frame 2: SIGSEGV"
    assert rows["crash_unexpected.vkt"]["first_divergence"] == 2 and rows["p1.vkt"]["frames"] == 2
    assert len({r["device"] for n, r in rows.items() if n != "skipped.vkt"}) == 1
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("6", "1", "1")
    assert sorted(p.name.split(".")[0] for p in results.glob("*.json")) == sorted(n.split(".")[0] for n in rows)
    # beside them, the page of each replay that finished (not the skipped one's, nor the crashes')
    assert sorted(p.name.split(".")[0] for p in results.glob("*.html")) == ["fixed", "p1", "p2"]
    assert "suite: 2 pass, 1 expected, 1 fixed, 1 fail, 1 skip" in proc.stderr


@pytest.mark.slow
@pytest.mark.device
def test_a_folder_of_traces_all_pass_in_one_worker(builder: ScenarioBuilder, tmp_path: Path) -> None:
    traces = [record(builder, tmp_path, 3, f"t{k}") for k in range(3)]
    proc = vkcap("suite", "run", traces[0].parent, "--json", tmp_path / "r.json")
    assert proc.returncode == 0, proc.stderr
    results = json.loads((tmp_path / "r.json").read_text())["results"]
    assert [(Path(r["trace"]).name, r["status"], r["frames"]) for r in results] == [
        ("t0.vkt", "pass", 3), ("t1.vkt", "pass", 3), ("t2.vkt", "pass", 3)]


def test_shards_are_balanced_disjoint_and_complete(tmp_path: Path) -> None:
    sizes = [5000, 4000, 3000, 2000, 1000, 900, 800, 100]
    for k, size in enumerate(sizes):
        (tmp_path / f"t{k}.vkt").write_bytes(b"x" * size)
    traces = load_suite([tmp_path])
    parts = [shard(traces, i, 3) for i in (1, 2, 3)]
    names = [[t.path.name for t in part] for part in parts]
    assert sorted(sum(names, [])) == sorted(t.path.name for t in traces)  # nothing lost, nothing twice
    loads = [sum(t.path.stat().st_size for t in part) for part in parts]
    assert loads == [5900, 5800, 5100]  # largest first, each to the lightest shard
    assert [[t.path.name for t in shard(traces, i, 3)] for i in (1, 2, 3)] == names  # deterministic


@pytest.mark.slow
def test_bad_manifests_are_one_line(tmp_path: Path) -> None:
    manifest = tmp_path / "suite.toml"
    manifest.write_text('[[traces]]\npath = "none*.vkt"\n')
    with pytest.raises(UsageError, match=r"suite.toml: traces\[0\].path: no trace matches 'none\*.vkt'"):
        load_suite([manifest])
    (tmp_path / "a.vkt").write_bytes(b"")
    manifest.write_text('[[traces]]\npath = "a.vkt"\n[[traces.expect]]\ndevice = "*"\nstatus = "broken"\n')
    with pytest.raises(UsageError, match=r"traces\[0\].expect\[0\]: needs device .* and status"):
        load_suite([manifest])
    proc = vkcap("suite", "run", tmp_path / "missing")
    assert (proc.returncode, proc.stderr.strip()) == (2, f"vkcap: error: {tmp_path / 'missing'}: no such suite folder or manifest")
    assert SuiteTrace(tmp_path / "a.vkt").expected_on("any").status == "pass"
    for bad in ("580", "=>580", ">=580.x", ">=580,", "~580"):
        manifest.write_text(f'[[traces]]\npath = "a.vkt"\n[[traces.expect]]\ndevice = "*"\nstatus = "skip"\ndriver = "{bad}"\n')
        proc = vkcap("suite", "run", manifest)
        assert (proc.returncode, proc.stderr.strip()) == (2, f"vkcap: error: {manifest}: traces[0].expect[0].driver: "
                                                             f"a driver-version range such as \">=580.100, <590\", got '{bad}'")


@pytest.mark.slow
@pytest.mark.device
def test_expectations_by_driver_version(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """An expectation can hold for a range of driver versions only (lavapipe's version is Mesa's);
    the first expectation whose device and range match is the one that judges, in the run, the result
    (its ``driver``) and after a bless, which keeps the range."""
    from replay.suite import in_range, version_key

    assert version_key("580.159.04") == (580, 159, 4) and version_key("Mesa 22.3.6") == (22, 3, 6)
    assert in_range("580.159.04", ">=580.100, <590") and not in_range("580.65.06", ">=580.100, <590")
    assert in_range("580.159.04", "") and not in_range("", ">=1")
    trace = record(builder, tmp_path, 2, "t")
    manifest = trace.parent / "suite.toml"
    assert vkcap("suite", "run", trace.parent, "--json", tmp_path / "plain.json").returncode == 0
    (plain,) = json.loads((tmp_path / "plain.json").read_text())["results"]
    major = version_key(plain["driver"])[0]  # this device's driver (lavapipe: Mesa's version)
    manifest.write_text('[[traces]]\npath = "t.vkt"\n'
                        f'[[traces.expect]]\ndevice = "*"\nstatus = "skip"\ndriver = "<{major}"\n\n'
                        f'[[traces.expect]]\ndevice = "*"\nstatus = "diverged"\ndriver = ">={major}.0, <{major + 1}"\n'
                        'reason = "an old bug"\n')
    proc = vkcap("suite", "run", manifest, "--json", tmp_path / "r.json", "--results", tmp_path / "res")
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads((tmp_path / "r.json").read_text())["results"]
    assert (row["status"], row["expected"], row["reason"]) == ("fixed", "diverged", "an old bug")
    assert row["driver"] == plain["driver"] and in_range(row["driver"], f">={major}.0, <{major + 1}")
    assert vkcap("suite", "bless", manifest, "--results", tmp_path / "res").returncode == 0
    assert f'driver = "<{major}"' in manifest.read_text() and "an old bug" not in manifest.read_text()



def test_retries_make_a_passing_retry_flaky(tmp_path: Path) -> None:
    """The judging of retries (no device here: a worker that answers from a list)."""
    from replay.suite import _replay_one, judge

    class Scripted:
        def __init__(self, outcomes: list[str]) -> None:
            self.outcomes, self.device, self.driver, self.host = outcomes, "llvmpipe", "Mesa 22.3.6", ""

        def start(self) -> str:
            return self.device

        def replay(self, trace: Path, flags: tuple[str, ...] = (), pages: Path | None = None) -> dict[str, object]:
            outcome = self.outcomes.pop(0)
            seen = {"first_divergence": 1, "beyond_tolerance": 12, "max_ulp": 40} if outcome == "diverged" else {}
            return {"outcome": outcome, "device": "llvmpipe", "frames": 3, **seen}

    trace = SuiteTrace(tmp_path / "t.vkt")
    flaky = _replay_one(Scripted(["diverged", "identical"]), trace, 2)  # type: ignore[arg-type]
    assert (flaky.status, flaky.attempts) == ("flaky", 2)
    assert flaky.spread == [{"outcome": "diverged", "first_divergence": 1, "beyond_tolerance": 12, "max_ulp": 40},
                            {"outcome": "identical"}]
    assert flaky.detail == "attempt 1: diverged from frame 1 (12 beyond tolerance, up to 40 ULP); attempt 2: identical"
    failed = _replay_one(Scripted(["diverged", "crash", "diverged"]), trace, 2)  # type: ignore[arg-type]
    assert (failed.status, failed.attempts, failed.outcome) == ("fail", 3, "diverged")
    assert _replay_one(Scripted(["diverged"]), trace, 0).status == "fail"  # type: ignore[arg-type]
    from replay.suite import Expectation

    assert judge("diverged", Expectation("*", "diverged")) == "expected"
    assert judge("identical", Expectation("*", "diverged")) == "fixed"
    assert judge("crash", Expectation("*", "diverged")) == "fail"


@pytest.mark.slow
@pytest.mark.device
def test_shards_merge_into_one_report_and_devices_each_get_workers(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """Two shards write their result files; ``suite merge`` combines them into the report one run would
    give. Two device selectors (the same device twice here) give every trace a result for each."""
    for k in range(4):
        record(builder, tmp_path, 2, f"t{k}")
    folder = tmp_path / "traces"
    for i in (1, 2):
        proc = vkcap("suite", "run", folder, "--shard", f"{i}/2", "--results", tmp_path / f"shard{i}")
        assert proc.returncode == 0, proc.stderr
    merged = vkcap("suite", "merge", tmp_path / "shard1", tmp_path / "shard2", "--json", tmp_path / "m.json",
                   "--junit", tmp_path / "m.xml", "--html", tmp_path / "m.html")
    assert merged.returncode == 0, merged.stderr
    from tests.test_reports import Dom, chromium

    dom = chromium("--dump-dom", (tmp_path / "m.html").as_uri())
    assert dom.returncode == 0 and not [line for line in dom.stderr.splitlines() if ":CONSOLE" in line]
    page = Dom()
    page.feed(dom.stdout)
    # one cell per trace x device, linking to the page its replay wrote beside its result file (a link
    # relative to the report, which still works when the folders move together); the details list them too
    cells = [href for href, _ in page.links]
    assert sorted(Path(h).parent.name for h in cells[:4]) == ["shard1", "shard1", "shard2", "shard2"]
    assert sorted(Path(h).name.split(".vkt.")[0] for h in cells[:4]) == [f"t{k}" for k in range(4)]
    assert cells[4:] == cells[:4] and sum(r == ["passexpected passidentical"] for r in page.rows) == 4  # status, expected, actual
    assert sum(r == ["pass"] for r in page.rows) == 4  # each result's status in its details
    replay_page = chromium("--dump-dom", (tmp_path / cells[0]).resolve().as_uri())
    assert replay_page.returncode == 0 and "<title>vkcap replay: " in replay_page.stdout
    assert str(folder / "t0.vkt") in replay_page.stdout or str(folder / "t1.vkt") in replay_page.stdout
    rows = json.loads((tmp_path / "m.json").read_text())["results"]
    assert [(Path(r["trace"]).name, r["status"]) for r in rows] == [(f"t{k}.vkt", "pass") for k in range(4)]
    both = vkcap("suite", "run", folder, "--device", "0", "--device", "0", "--json", tmp_path / "d.json")
    assert both.returncode == 0, both.stderr
    rows = json.loads((tmp_path / "d.json").read_text())["results"]
    assert [Path(r["trace"]).name for r in rows] == [f"t{k}.vkt" for k in range(4) for _ in range(2)]


@pytest.mark.slow
@pytest.mark.device
def test_a_manifest_gives_a_trace_its_own_tolerance(builder: ScenarioBuilder, tmp_path: Path) -> None:
    trace = record(builder, tmp_path, 2, "t")
    manifest = trace.parent / "suite.toml"
    manifest.write_text('[[traces]]\npath = "t.vkt"\ntolerance = {ulp = 4, atol = 0.5}\n')
    assert load_suite([manifest])[0].flags == ("--atol", "0.5", "--ulp", "4")
    assert vkcap("suite", "run", manifest).returncode == 0
    manifest.write_text('[[traces]]\npath = "t.vkt"\ntolerance = "numpy"\n')
    with pytest.raises(UsageError, match=r"traces\[0\].tolerance: unknown tolerance preset 'numpy'"):
        load_suite([manifest])


@pytest.mark.slow
@pytest.mark.device
def test_bless_takes_the_results_as_expectations(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """A crash that failed becomes an expected crash at its frame; a divergence that was fixed loses its
    label; bless prints the manifest's diff, and the next run passes. A run that agrees changes nothing."""
    for name, frames in (("long", 4), ("fixed", 2)):
        record(builder, tmp_path, frames, name)
    manifest = tmp_path / "traces" / "suite.toml"
    kept = ('# nightly suite: owners gpu-team\n\n[[traces]]  # the long one\npath = "long.vkt"\n'
            '# why fixed.vkt diverged: see the driver bug\n\n')
    manifest.write_text(kept + '[[traces]]\npath = "fixed.vkt"\n[[traces.expect]]\n'
                        'device = "*"\nstatus = "diverged"\n# trailing comment\n')
    crash = {"VKCAP_TEST_CRASH_AT_FRAME": "2"}
    first = vkcap("suite", "run", manifest, "--results", tmp_path / "r1", env=crash)
    assert first.returncode == 1, first.stderr
    blessed = vkcap("suite", "bless", manifest, "--results", tmp_path / "r1")
    assert blessed.returncode == 0, blessed.stderr
    assert '+status = "crash"' in blessed.stdout and "+frame = 2" in blessed.stdout
    assert '-status = "diverged"' in blessed.stdout
    text = manifest.read_text()  # only the expectations change; every comment stays, the header's own too
    assert text.startswith('# nightly suite: owners gpu-team\n\n[[traces]]  # the long one\npath = "long.vkt"\n\n'
                           '[[traces.expect]]\n'), text
    assert text.endswith('# why fixed.vkt diverged: see the driver bug\n\n[[traces]]\npath = "fixed.vkt"\n# trailing comment\n'), text
    second = vkcap("suite", "run", manifest, "--json", tmp_path / "r2.json", "--results", tmp_path / "r2", env=crash)
    assert second.returncode == 0, second.stderr
    rows = {Path(r["trace"]).name: r["status"] for r in json.loads((tmp_path / "r2.json").read_text())["results"]}
    assert rows == {"fixed.vkt": "pass", "long.vkt": "expected"}
    text = manifest.read_text()
    again = vkcap("suite", "bless", manifest, "--results", tmp_path / "r2")
    assert (again.returncode, again.stdout, manifest.read_text()) == (0, "", text)
    moved = vkcap("suite", "run", manifest, "--json", tmp_path / "r3.json", env={"VKCAP_TEST_CRASH_AT_FRAME": "3"})
    assert moved.returncode == 1  # it still crashes, but in another frame: not the expected crash


@pytest.mark.slow
@pytest.mark.device
def test_the_projects_golden_traces_replay_as_a_suite(tmp_path: Path) -> None:
    """traces/suite.toml: the examples recorded on lavapipe, replayed here as a suite: all pass on
    lavapipe; on NVIDIA's driver (measured on the H200, typed comparisons) add, heat and graph_custom
    pass within the tolerances the manifest states for them, fragment and blur diverge as it expects,
    and conv2d and tensor_op pass."""
    manifest = Path(__file__).resolve().parent.parent / "traces" / "suite.toml"
    proc = vkcap("suite", "run", manifest, "--json", tmp_path / "golden.json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads((tmp_path / "golden.json").read_text())["results"]
    nvidia = rows[0]["device"].startswith("NVIDIA")
    expected = {"add.vkt": 4, "blur.vkt": 1, "conv2d.vkt": 1, "fragment.vkt": 1, "graph_custom.vkt": 1, "heat.vkt": 100,
                "tensor_op.vkt": 1}
    assert [(Path(r["trace"]).name, r["frames"]) for r in rows] == list(expected.items())
    assert [r["status"] for r in rows] == (["pass", "expected", "pass", "expected", "pass", "pass", "pass"] if nvidia
                                           else ["pass"] * 7)


@pytest.mark.slow
@pytest.mark.device
def test_the_pytest_plugin_runs_a_suite_and_gives_a_fixture(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """pytest itself, in a subprocess (the plugin comes from the ``pytest11`` entry point): each trace of
    a suite is an item (a failure, an expected divergence, a skip are judged as ``suite run`` judges them),
    and a project's test uses the ``vkcap_replay`` fixture; the same under pytest-xdist."""
    import subprocess
    import sys

    for name in ("a", "b", "c"):
        record(builder, tmp_path, 2, name)
    manifest = tmp_path / "traces" / "suite.toml"
    manifest.write_text('[[traces]]\npath = "a.vkt"\n\n[[traces]]\npath = "b.vkt"\n[[traces.expect]]\ndevice = "*"\n'
                        'status = "skip"\nreason = "not here"\n\n[[traces]]\npath = "c.vkt"\n')
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_mine.py").write_text(
        "def test_a(vkcap_replay):\n"
        f"    report = vkcap_replay({str(tmp_path / 'traces' / 'a.vkt')!r}, ulp=2)\n"
        "    assert not report.diverged and len(report.frames) == 2\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                           "--vkcap-suite", str(manifest), "test_mine.py"],
                          cwd=project, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "3 passed, 1 skipped" in proc.stdout and ": not here" in proc.stdout, proc.stdout
    # and under pytest-xdist: the same items, shared out between two worker processes
    spread = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-rs", "-n", "2",
                             "--vkcap-suite", str(manifest), "test_mine.py"],
                            cwd=project, capture_output=True, text=True, timeout=300)
    assert spread.returncode == 0, spread.stdout[-3000:] + spread.stderr[-2000:]
    assert "3 passed, 1 skipped" in spread.stdout and ": not here" in spread.stdout, spread.stdout
    ran = {line.split()[-1].split("::")[-1]: line.split()[0] for line in spread.stdout.splitlines() if line.startswith("[gw")}
    assert sorted(ran) == ["test_a", "vkcap[a.vkt]", "vkcap[b.vkt]", "vkcap[c.vkt]"], spread.stdout
    assert set(ran.values()) == {"[gw0]", "[gw1]"}, spread.stdout


@pytest.mark.slow
@pytest.mark.device
def test_progress_on_a_terminal(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """With stderr a terminal (a pseudo-terminal here) the suite draws rich progress (at once, with no
    delay: these replays are fast): traces done of all and the failures so far; the run's result is the same."""
    from tests.terminal import on_pty

    for k in range(3):
        record(builder, tmp_path, 2, f"t{k}")
    code, _, text = on_pty("suite", "run", tmp_path / "traces", "--json", tmp_path / "r.json",
                           env={"COLUMNS": "120", "VKCAP_PROGRESS_DELAY_S": "0"})
    assert code == 0
    assert "replaying trace" in text and "3/3" in text and "0 failure(s)" in text, text[-2000:]
    assert [r["status"] for r in json.loads((tmp_path / "r.json").read_text())["results"]] == ["pass"] * 3


@pytest.mark.slow
@pytest.mark.device
def test_a_divergence_is_reported_with_its_first_resource(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """A trace replayed by a real worker with a changed shader (the trace's own flags, as a manifest's
    tolerance is passed): ``fail``, with the frame and the replay's line for the first diverged resource;
    with a retry, the spread of both attempts (the same divergence twice: not flaky)."""
    from replay.suite import run_suite
    from vkcap.compare_flags import suite_replay_options

    trace = record(builder, tmp_path, 2, "t")
    changed = tmp_path / "changed.comp"
    changed.write_text(ADD_FLOAT.replace("a[i] + b[i]", "a[i] + b[i] * 2.0"))
    suite = [SuiteTrace(trace, flags=("--replace-shader", f"add={changed}"))]
    (result,) = run_suite(suite, options_for=suite_replay_options, retries=1)
    assert (result.status, result.outcome, result.first_divergence, result.attempts) == ("fail", "diverged", 0, 2)
    # c = a + 2b instead of a + b (b all ones): compared in the shader's view (float c[]), all 16 of c's
    # values differ, in each of the two frames
    seen = {"outcome": "diverged", "first_divergence": 0, "beyond_tolerance": 32}
    assert [{k: a[k] for k in seen} for a in result.spread] == [seen, seen]
    assert result.spread[0]["detail"].startswith("frame 0: c: DIVERGED: 16/16 float32 elements differ (100.00%); max abs 1;")
    assert result.detail == ("attempt 1: diverged from frame 0 (32 beyond tolerance, up to 8388608 ULP); "
                             "attempt 2: diverged from frame 0 (32 beyond tolerance, up to 8388608 ULP)")
