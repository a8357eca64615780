"""Driver crashes are findings: with ``--isolate`` (the default for bisect) the device work runs in a child
process, and a crash is reported with the frame, the signal and the last log lines.

The crash is a real fatal signal delivered to the child when it starts the chosen frame
(``VKCAP_TEST_CRASH_AT_FRAME``): the process dies exactly as it does when a driver segfaults. (lavapipe
checks buffer bounds and fails bad SPIR-V cleanly, so a shader cannot make it crash on demand.)
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.needs import missing

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


@pytest.mark.slow
@pytest.mark.device
def test_isolated_replay_reports_a_crash_as_a_finding(trace: Path, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    proc = vkcap("replay", trace, "--isolate", "--json", report, env={"VKCAP_TEST_CRASH_AT_FRAME": "9"})
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith(
        "vkcap: frame 9 crashed the driver (SIGSEGV, exit code -11); last log lines: ")
    doc = json.loads(report.read_text())
    assert (doc["crashed"], doc["frame"], doc["how"], doc["diverged"]) == (True, 9, "SIGSEGV", True)


@pytest.mark.slow
@pytest.mark.device
def test_isolated_replay_without_a_crash_is_a_normal_replay(trace: Path, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    proc = vkcap("replay", trace, "--isolate", "--json", report)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(report.read_text())
    assert not doc["diverged"] and len(doc["frames"]) == 24


@pytest.mark.slow
@pytest.mark.device
def test_bisect_counts_a_crash_as_a_divergence_and_finds_it(trace: Path, tmp_path: Path) -> None:
    report = tmp_path / "b.json"
    proc = vkcap("bisect", trace, "--json", report, env={"VKCAP_TEST_CRASH_AT_FRAME": "13"})
    assert proc.returncode == 1, proc.stderr
    assert "first divergence: frame 13 crashed the driver (SIGSEGV, exit code -11)" in proc.stdout
    doc = json.loads(report.read_text())
    assert (doc["crashed"], doc["frame"]) == (True, 13)
    assert any(p["diverged"] for p in doc["probes"])


# 524280 invocations, of which the first 16 count; fast as recorded
WIDE = """#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer A { uint a[]; };
void main() { uint i = gl_GlobalInvocationID.x + 65535u * gl_GlobalInvocationID.y; if (i < 16u) a[i] += 1u; }
"""
# The same, but every invocation that sees a[0] >= 3 first runs rounds of a hash: seconds for lavapipe (which
# ends a loop after 65535 rounds in all) and for a GPU (2000 x 65000 rounds); the result stays the one recorded.
# Invocation 0 raises a[0] to 3 in frame 2, so that frame is slow. Bounded: on NVIDIA's H100 work abandoned by
# a killed child keeps running, and a shader of minutes left every later vkCmdBlitImage of other processes
# hanging (measured), so a test must not leave one behind.
SLOW_FROM_A0_3 = """#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer A { uint a[]; };
void main() {
    uint i = gl_GlobalInvocationID.x + 65535u * gl_GlobalInvocationID.y;
    uint x = a[0];
    if (x >= 3u) {
        for (uint j = 0u; j < 2000u; j++) { for (uint k = 0u; k < 65000u; k++) { x = x * 1664525u + 1013904223u; x ^= x >> 13; } }
    }
    if (i < 16u) a[i] += 1u;
    if (x == 12345u) a[i % 16u] = 7u;  // keeps the loop's result live
}
"""
TIMEOUT_LINE = ("frame 2 failed in the isolated child: frame 2 did not finish within 1 s (--timeout): a hung or very "
                "slow shader; the frames before it completed (exit code 1)")


@pytest.mark.slow
@pytest.mark.device
def test_a_frame_timeout_in_the_child_names_the_frame_running_and_the_childs_error(tmp_path: Path) -> None:
    """The child times out on frame 2 while frame 3 is already submitted (two frames in flight): the frame
    named is the one the device was running (the oldest not finished; it used to be the last submitted),
    and the line quotes the child's own error instead of calling it a driver crash. Bisect counts it as
    the divergence."""
    b = ScenarioBuilder(tmp_path / "scenario")
    b.shader("acc", WIDE).buffer("a", 64)
    for f in range(6):
        b.dispatch("acc", [(0, 0, "a")], [65535, 8]).boundary(["a"], f)
    trace = tmp_path / "wide.vkt"
    assert vkcap("record", b.save(), "-o", trace).returncode == 0
    slow = tmp_path / "slow.comp"
    slow.write_text(SLOW_FROM_A0_3)
    report = tmp_path / "r.json"
    proc = vkcap("replay", trace, "--isolate", "--timeout", "1", "--replace-shader", f"acc={slow}", "--json", report,
                 timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines() == [f"vkcap: {TIMEOUT_LINE}"]  # the child's error is not echoed apart
    doc = json.loads(report.read_text())
    assert (doc["crashed"], doc["frame"], doc["how"], doc["crash"]) == (True, 2, "exit 1", TIMEOUT_LINE)
    proc = vkcap("bisect", trace, "--timeout", "1", "--replace-shader", f"acc={slow}", "--json", report, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert f"first divergence: {TIMEOUT_LINE}" in proc.stdout
    doc = json.loads(report.read_text())
    assert (doc["crashed"], doc["frame"]) == (True, 2)


@pytest.mark.slow
@pytest.mark.device
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


@pytest.mark.slow
@pytest.mark.device
def test_isolated_bisect_without_a_crash_uses_one_child_for_all_probes(trace: Path, tmp_path: Path) -> None:
    report = tmp_path / "b.json"
    proc = vkcap("bisect", trace, "--json", report)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(report.read_text())
    # the search (three last frames alone), then the scan (six segments whole)
    assert not doc["diverged"] and doc["child_processes"] == 1 and doc["replays"] == 3 + 6


@pytest.mark.slow
@pytest.mark.device
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


def junit_cases(path: Path) -> tuple[dict[str, str], list[tuple[str | None, str | None, str | None]]]:
    """A JUnit report's suite counts, and (classname, name, failure message or None) per test case; a
    ``driver crash`` failure carries its line as its text too."""
    suite = ET.parse(path).getroot().find("testsuite")
    assert suite is not None
    cases = []
    for case in suite:
        failure = case.find("failure")
        if failure is not None and case.get("name") == "driver crash":
            assert failure.text == failure.get("message")
        cases.append((case.get("classname"), case.get("name"), None if failure is None else failure.get("message")))
    return {"tests": suite.get("tests", ""), "failures": suite.get("failures", "")}, cases


def bad_input(root: Path, case: str) -> tuple[list[str], str]:
    """The flags of one kind of bad input, and what its error line says."""
    good = root / "good.comp"
    good.write_text(ACC)
    if case == "missing shader":
        return ["--replace-shader", f"acc={root / 'missing.comp'}"], f"--replace-shader acc={root / 'missing.comp'}: no such file"
    if case == "unknown uid":
        return ["--replace-shader", f"nope={good}"], "the trace has no shader 'nope' (it has: acc)"
    if case == "uncompilable shader":
        (root / "broken.comp").write_text(ACC.replace("main() {", "main() {{"))
        return ["--replace-shader", f"acc={root / 'broken.comp'}"], "shader compilation failed"
    if case == "garbage spv":
        (root / "garbage.spv").write_bytes(b"not SPIR-V at all")
        return ["--replace-shader", f"acc={root / 'garbage.spv'}"], "not a SPIR-V binary"
    assert case == "unknown device"
    return ["--device", "no-such-gpu"], "no device matches --device 'no-such-gpu'"


def masked(line: str) -> str:
    """``line`` with the random part of replay's temporary folders hidden (they differ between runs)."""
    return re.sub(r"vkcap-replay-\w+", "vkcap-replay-*", line)


@pytest.mark.slow
@pytest.mark.device
@pytest.mark.parametrize("case", ["missing shader", "unknown uid", "uncompilable shader", "garbage spv", "unknown device"])
def test_bad_input_to_an_isolated_child_is_an_error_not_a_crash(trace: Path, tmp_path: Path, case: str) -> None:
    """A child that refuses its input (exit 2) ends an isolated bisect or replay as the same input ends
    the command without isolation: that one error line, once, exit 2, and no report written."""
    flags, says = bad_input(tmp_path, case)
    plain = vkcap("bisect", trace, "--no-isolate", *flags)
    assert plain.returncode == 2, plain.stderr
    line = masked(plain.stderr.splitlines()[-1])
    assert line.startswith("vkcap: error: ") and says in line
    report, junit = tmp_path / "r.json", tmp_path / "r.xml"
    report.write_text('{"generator": "vkcap", "stale": true}')  # earlier reports, which a report may replace
    junit.write_text("<!-- generator: vkcap --><stale/>")
    commands: list[list[str | Path]] = [["bisect", trace], ["replay", trace, "--isolate"]]
    for command in commands:
        proc = vkcap(*command, *flags, "--json", report, "--junit", junit)
        assert proc.returncode == 2, proc.stderr
        assert [masked(ln) for ln in proc.stderr.splitlines() if ln.startswith("vkcap: error: ")] == [line]
        assert masked(proc.stderr.splitlines()[-1]) == line
        assert "crashed" not in proc.stdout + proc.stderr and "first divergence" not in proc.stdout
        assert (report.read_text(), junit.read_text()) == ('{"generator": "vkcap", "stale": true}', "<!-- generator: vkcap --><stale/>")


@pytest.fixture(scope="module")
def crashing_icd(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Vulkan driver manifest whose library kills the process with SIGSEGV as the loader loads it: a
    driver that crashes during setup, before any frame."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        missing("no C compiler to build a driver library that crashes as it loads")
    root = tmp_path_factory.mktemp("crash-icd")
    (root / "crash.c").write_text("#include <signal.h>\n"
                                  "__attribute__((constructor)) static void crash(void) { raise(SIGSEGV); }\n")
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(root / "libcrash.so"), str(root / "crash.c")], check=True)
    manifest = root / "crash.json"
    manifest.write_text(json.dumps({"file_format_version": "1.0.0",
                                    "ICD": {"library_path": str(root / "libcrash.so"), "api_version": "1.3.0"}}))
    return manifest


@pytest.mark.slow
@pytest.mark.device
def test_a_driver_crash_during_setup_is_named_as_such(trace: Path, tmp_path: Path, crashing_icd: Path) -> None:
    """No frame started: the line says the driver crashed during setup, before the first frame the child
    was to run (not that this frame crashed it), and the reports say so too."""
    report, junit = tmp_path / "b.json", tmp_path / "b.xml"
    proc = vkcap("bisect", trace, "--icd", crashing_icd, "--json", report, "--junit", junit)
    assert proc.returncode == 1, proc.stderr
    line = proc.stdout.splitlines()[0].removeprefix("first divergence: ")
    assert line.startswith("the driver crashed during setup, before frame 0 (SIGSEGV, exit code -11); last log lines: ")
    doc = json.loads(report.read_text())
    assert (doc["crashed"], doc["frame"], doc["crash"], doc["diverged"]) == (True, None, line, True)
    assert junit_cases(junit) == ({"tests": "1", "failures": "1"}, [("vkcap.bisect.setup", "driver crash", line)])

    proc = vkcap("replay", trace, "--isolate", "--icd", crashing_icd, "--json", report, "--junit", junit)
    assert proc.returncode == 1, proc.stderr
    line = proc.stderr.splitlines()[-1].removeprefix("vkcap: ")
    assert line.startswith("the driver crashed during setup, before its first frame (SIGSEGV, exit code -11); ")
    assert json.loads(report.read_text())["crash"] == line
    assert junit_cases(junit) == ({"tests": "1", "failures": "1"}, [("vkcap.replay.setup", "driver crash", line)])


@pytest.mark.slow
@pytest.mark.device
def test_a_crash_is_a_junit_failure_and_every_report_is_written(trace: Path, tmp_path: Path) -> None:
    """A crashed frame is a failing ``driver crash`` test case carrying the crash line, in bisect's JUnit
    report and in an isolated replay's, which replaces whatever report was there before."""
    report, junit = tmp_path / "b.json", tmp_path / "b.xml"
    proc = vkcap("bisect", trace, "--json", report, "--junit", junit, env={"VKCAP_TEST_CRASH_AT_FRAME": "13"})
    assert proc.returncode == 1, proc.stderr
    line = json.loads(report.read_text())["crash"]
    assert line.startswith("frame 13 crashed the driver (SIGSEGV, exit code -11); last log lines: ")
    assert proc.stdout.splitlines()[0] == f"first divergence: {line}"
    assert junit_cases(junit) == ({"tests": "1", "failures": "1"}, [("vkcap.bisect.frame13", "driver crash", line)])

    report.write_text('{"generator": "vkcap", "diverged": false}')
    junit.write_text('<testsuites><testsuite name="stale" tests="24" failures="0"/></testsuites>')
    proc = vkcap("replay", trace, "--isolate", "--json", report, "--junit", junit, env={"VKCAP_TEST_CRASH_AT_FRAME": "9"})
    assert proc.returncode == 1, proc.stderr
    line = proc.stderr.splitlines()[-1].removeprefix("vkcap: ")
    assert line.startswith("frame 9 crashed the driver (SIGSEGV, exit code -11); last log lines: ")
    doc = json.loads(report.read_text())
    assert (doc["crashed"], doc["frame"], doc["crash"], doc["diverged"]) == (True, 9, line, True)
    assert junit_cases(junit) == ({"tests": "1", "failures": "1"}, [("vkcap.replay.frame9", "driver crash", line)])


@pytest.mark.slow
@pytest.mark.device
def test_isolated_replay_writes_the_reports_an_in_process_replay_writes(trace: Path, tmp_path: Path) -> None:
    """The parent writes ``--json`` and ``--junit`` from its child's report: byte for byte what the same
    replay writes without isolation."""
    shader = tmp_path / "acc2.comp"
    shader.write_text(ACC.replace("+= 1u", "+= 2u"))
    for name, isolate in (("plain", []), ("isolated", ["--isolate"])):
        proc = vkcap("replay", trace, "--replace-shader", f"acc={shader}", *isolate,
                     "--json", tmp_path / f"{name}.json", "--junit", tmp_path / f"{name}.xml")
        assert proc.returncode == 1, proc.stderr
    for suffix in (".json", ".xml"):
        assert (tmp_path / f"isolated{suffix}").read_bytes() == (tmp_path / f"plain{suffix}").read_bytes()
    counts, cases = junit_cases(tmp_path / "isolated.xml")
    assert counts == {"tests": "24", "failures": "24"} and cases[0][:2] == ("vkcap.replay.frame0", "a")


def test_the_isolated_child_gets_the_parsed_options_and_nothing_of_the_parents(trace: Path) -> None:
    """Whatever spelling the parent accepted (here abbreviations, allowed for the test, and ``=``), the
    child is sent the options the parent parsed (a :class:`~replay.worker_protocol.ReplayRequest`, never
    a command line), and nothing that is the parent's own: no isolation, no reports."""
    import argparse

    from replay.options import ReplayOptions
    from replay.worker_protocol import ReplayRequest, decode, encode
    from vkcap.cli import build_parser
    from vkcap.compare_flags import replay_options

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    sub["replay"].allow_abbrev = True
    args = parser.parse_args(["replay", str(trace), "--iso", "--frames", "2-5", "--json", "r.json", "--junit", "r.xml",
                              "--dty", "a=float32", "--time=2.5", "--device=-x", "--no-emul", "--ulp", "3"])
    options = replay_options(args)
    sent = ReplayOptions.from_dict(decode(encode(ReplayRequest(options.to_dict(), report=True)), ReplayRequest).options)
    assert sent == options
    assert (sent.first, sent.last, sent.dtypes, sent.frame_timeout_s, sent.device, sent.emulation,
            sent.tolerances.default.ulp) == (2, 5, (("a", "float32"),), 2.5, "-x", "off", 3)
    assert not {"isolate", "json", "junit", "html"} & set(options.to_dict())


@pytest.mark.device
def test_a_child_never_isolates_again(trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process marked as an isolated child replays in itself even when asked to isolate (the crash
    injected for frame 3 fires only in an isolated child's frames, so it does not fire here), and
    refuses to start a child at all."""
    from replay.isolate import CHILD_ENV, ProbeServer, run_child
    from replay.options import ReplayOptions

    report = tmp_path / "r.json"
    proc = vkcap("replay", trace, "--isolate", "--json", report, env={CHILD_ENV: "1", "VKCAP_TEST_CRASH_AT_FRAME": "3"})
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(report.read_text())
    assert not doc["diverged"] and "crashed" not in doc and len(doc["frames"]) == 24

    monkeypatch.setenv(CHILD_ENV, "1")
    with pytest.raises(RuntimeError, match="an isolated child must not start another"):
        run_child(ReplayOptions(trace))
    with ProbeServer() as server:
        with pytest.raises(RuntimeError, match="an isolated child must not start another"):
            server.probe(ReplayOptions(trace), 0, 0, -1)
        assert server.children == 0
