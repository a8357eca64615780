"""Suites that speak dtypes and explain themselves (#34 item 4, #36 items 3 and 4).

- a manifest entry's ``resources.UID = {dtype, atol, rtol, ulp}`` (and ``UID.FIELD``) reaches the worker
  and judges as ``vkcap replay`` would; malformed ones are one line naming the key;
- a ``ulp`` or ``rtol`` meeting a bytes comparison: an error naming the key in a manifest, a warning
  (once per resource) for ``suite run``'s, ``replay``'s and ``diff``'s flags;
- each verdict says what it compared and what was expected against what happened, in text, JSON,
  JUnit and result files (round trip through ``suite merge``), and ``suite bless --dry-run`` writes
  nothing;
- every argument (``--device``, ``--dtype``, ``--tolerance``) is checked before any worker starts;
  retries keep each attempt's cause; result names and JUnit take hostile strings.

Replays run in real worker processes on lavapipe (a shader replaced through the trace's own flags,
as test_suite does); the rest in-process or through the real command line.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import time
import tomllib
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from replay.suite import SuiteTrace, TraceResult, load_suite, read_results, result_stem, run_suite, write_junit, write_results
from vkcap.compare_flags import suite_replay_options
from tests.builders import ScenarioBuilder, vkcap
from tests.test_typed_verdicts import ADD, MOVED, N, PARTICLES
from tests.test_untrusted_manifests import snapshot
from vkcore.errors import UsageError


def record(builder: ScenarioBuilder, folder: Path, shader: str, buffers: dict[str, Any], out: list[str],
           unbound: str = "") -> Path:
    """A one-frame trace of ``shader`` over ``buffers`` (arrays or sizes) in ``folder/t.vkt``; ``unbound``:
    one more buffer that no shader binds (compared as raw bytes), snapshotted too."""
    builder.shader("s", shader)
    for uid, data in buffers.items():
        builder.buffer(uid, data if isinstance(data, int) else data.nbytes, None if isinstance(data, int) else data)
    if unbound:
        builder.buffer(unbound, 64, np.arange(16, dtype=np.uint32))
    builder.dispatch("s", [(0, i, uid) for i, uid in enumerate(buffers)], [N // 64, 1, 1])
    builder.boundary([*out, *([unbound] if unbound else [])], 0)
    folder.mkdir(parents=True, exist_ok=True)
    trace = folder / "t.vkt"
    done = vkcap("record", builder.save(), "-o", trace)
    assert done.returncode == 0, done.stderr
    return trace


def add_trace(builder: ScenarioBuilder, folder: Path, unbound: str = "") -> Path:
    rng = np.random.default_rng(7)
    a, b = rng.uniform(1, 2, N).astype(np.float32), rng.uniform(1, 2, N).astype(np.float32)
    return record(builder, folder, ADD % "", {"a": a, "b": b, "out": 4 * N}, ["out"], unbound)


def one_line(proc: Any) -> tuple[int, str]:
    return proc.returncode, proc.stderr.strip()


# --------------------------------------------------------------------------------------------------
# the manifest's resources: parsed, carried, refused


def test_a_manifests_resources_become_the_workers_flags(tmp_path: Path) -> None:
    (tmp_path / "t.vkt").write_bytes(b"")
    manifest = tmp_path / "suite.toml"
    manifest.write_text('[[traces]]\npath = "t.vkt"\ntolerance = { ulp = 4 }\n'
                        'resources.out = { dtype = "float32", atol = 2e-6 }\nresources."parts.pos" = { ulp = 1 }\n')
    (trace,) = load_suite([manifest])
    assert trace.flags == ("--ulp", "4", "--dtype", "out=float32", "--resource-tolerances",
                           '{"out": {"atol": 2e-06}, "parts.pos": {"ulp": 1}}')
    assert trace.tolerance is not None and trace.tolerance.setter("out", "ulp") == "traces[0].tolerance.ulp"
    assert trace.tolerance.setter("parts.pos", "ulp") == 'traces[0].resources."parts.pos".ulp'
    assert trace.tolerance.setter("out", "rtol") is None
    # the worker's policy from those flags: replay's parser, the same checks
    from vkcap.cli import build_parser
    from vkcap.compare_flags import tolerance_policy

    args = build_parser().parse_args(["replay", "t.vkt", "--atol", "1", *trace.flags])
    policy = tolerance_policy(args)
    assert policy.dtypes == {"out": "float32"} and policy.per_resource == {"out": {"atol": 2e-6}, "parts.pos": {"ulp": 1}}
    assert policy.for_resource("out", "float32").ulp == 4 and policy.for_resource("out", "float32").atol == 2e-6


BAD_RESOURCES = [
    ("resources = 3", "traces[0].resources: must be a table of resource uids, got 3"),
    ("resources.out = 3", "traces[0].resources.out: must be a table of atol, rtol, ulp, dtype, got 3"),
    ("resources.out = {}", "traces[0].resources.out: must be a table of atol, rtol, ulp, dtype, got {}"),
    ("resources.out = { ulps = 4 }", "traces[0].resources.out.ulps: unknown key 'ulps' (known: atol, rtol, ulp, dtype)"),
    ('resources.out = { dtype = "float33" }', "traces[0].resources.out.dtype: must be a type name (one of: "),
    ("resources.out = { dtype = 4 }", "traces[0].resources.out.dtype: must be a type name (one of: "),
    ("resources.out = { atol = nan }", "traces[0].resources.out.atol: must be a finite number >= 0, got nan"),
    ("resources.out = { rtol = -1.0 }", "traces[0].resources.out.rtol: must be a finite number >= 0, got -1.0"),
    ("resources.out = { ulp = 1.5 }", "traces[0].resources.out.ulp: must be a whole number >= 0 and below 2**63, got 1.5"),
    ('resources."a b" = { ulp = true }', 'traces[0].resources."a b".ulp: must be a whole number >= 0 and below 2**63, got True'),
    ("tolerance = { ulp = inf }", "traces[0].tolerance.ulp: must be a whole number >= 0 and below 2**63, got inf"),
]


@pytest.mark.parametrize("line,message", BAD_RESOURCES)
def test_malformed_resource_tables_are_one_line_naming_the_key(tmp_path: Path, line: str, message: str) -> None:
    (tmp_path / "t.vkt").write_bytes(b"")
    manifest = tmp_path / "suite.toml"
    manifest.write_text(f'[[traces]]\npath = "t.vkt"\n{line}\n')
    with pytest.raises(UsageError) as exc:
        load_suite([manifest])
    assert str(exc.value).startswith(f"{manifest}: {message}")
    assert "\n" not in str(exc.value)


# --------------------------------------------------------------------------------------------------
# verdicts that explain themselves, from real workers


MANIFEST = '''# nightly: typed verdicts
[[traces]]
path = "within.vkt"
tolerance = { ulp = 4 }

[[traces]]
path = "beyond.vkt"
tolerance = { ulp = 4 }
resources.out = { ulp = 1 }

[[traces]]
path = "frame.vkt"
resources.out = { ulp = 1 }
[[traces.expect]]
device = "*"   # every device
status = "diverged"
frame = 1
reason = "a human reason"

[[traces]]
path = "other.vkt"
resources.out = { ulp = 1 }
[[traces.expect]]
device = "*"
status = "diverged"
resources = ["a"]
'''


@pytest.mark.slow
@pytest.mark.device
def test_verdicts_say_what_they_compared_and_what_was_expected(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """The sum moved by 0-2 ULP (a third of the values by 2): ``ulp = 4`` passes it with no dtype, a
    resource's ``ulp = 1`` fails exactly the 2-ULP third, an expectation of frame 1 or of resource ``a``
    names both sides; text, JSON, JUnit and result files say so; bless --dry-run writes nothing, bless
    keeps the reason and the glob."""
    folder = tmp_path / "suite"
    trace = add_trace(builder, folder)
    for name in ("within", "beyond", "frame", "other"):
        shutil.copy(trace, folder / f"{name}.vkt")
    trace.unlink()
    manifest = folder / "suite.toml"
    manifest.write_text(MANIFEST)
    moved = tmp_path / "moved.comp"
    moved.write_text(MOVED)
    traces = [replace(t, flags=(*t.flags, "--replace-shader", f"s={moved}")) for t in load_suite([manifest])]
    results = {Path(r.trace).stem: r for r in run_suite(traces, options_for=suite_replay_options, jobs=2)}
    device = results["within"].device
    assert {n: (r.status, r.outcome) for n, r in results.items()} == {
        "beyond": ("fail", "diverged"), "frame": ("fail", "diverged"), "other": ("fail", "diverged"),
        "within": ("pass", "within")}
    within = results["within"].resources
    assert [(v["uid"], v["dtype"], v["tolerance"], v["status"], v["differing"], v["beyond_tolerance"], v["max_ulp"])
            for v in within] == [("out", "float32", "ulp 4", "within tolerance", 2 * N // 3, 0, 2)]
    max_abs = within[0]["max_abs"]
    assert 0 < max_abs < 1e-6
    assert results["within"].verdict == f"within tolerance: out (float32): {2 * N // 3} differ, within ulp 4, up to 2 ULP ({max_abs:.3g} abs)"
    what = f"out (float32): {N // 3} beyond ulp 1, up to 2 ULP ({max_abs:.3g} abs)"
    assert results["beyond"].verdict == f"diverged from frame 0 in out: {what}"
    assert results["frame"].verdict == f"expected divergence from frame 1, diverged from frame 0 in out: {what}"
    assert (results["frame"].expected_frame, results["frame"].reason) == (1, "a human reason")
    assert results["other"].verdict == f"expected divergence in a, diverged from frame 0 in out: {what}"
    assert results["other"].expected_resources == ["a"]
    # JSON (as suite run --json writes it), JUnit, result files read back by suite merge
    rows = {Path(r["trace"]).stem: r for r in json.loads(json.dumps([r.as_dict() for r in results.values()]))}
    assert rows["beyond"]["resources"][0]["beyond_tolerance"] == N // 3 and rows["frame"]["expected_frame"] == 1
    junit = tmp_path / "j.xml"
    write_junit(junit, list(results.values()))
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    failure = cases["frame.vkt"].find("failure")
    assert failure is not None and failure.get("message") == f"fail: {results['frame'].verdict}"
    assert (failure.text or "").splitlines()[0] == what and "reason: a human reason" in (failure.text or "")
    out = cases["within.vkt"].find("system-out")
    assert out is not None and (out.text or "").startswith("pass: within tolerance: out (float32)")
    written = tmp_path / "results"
    written.mkdir()
    write_results(written, list(results.values()))
    merged = {Path(r.trace).stem: r for r in read_results([written])}
    assert {n: (r.verdict, r.resources, r.expected_frame, r.expected_resources) for n, r in merged.items()} == \
        {n: (r.verdict, r.resources, r.expected_frame, r.expected_resources) for n, r in results.items()}
    # the table of the real command: suite merge prints each verdict
    proc = vkcap("suite", "merge", written)
    assert proc.returncode == 1 and "expected divergence from frame 1, diverged from frame 0 in out" in " ".join(proc.stdout.split())
    # bless --dry-run: the diff, nothing written
    before = snapshot(tmp_path)
    dry = vkcap("suite", "bless", manifest, "--results", written, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert snapshot(tmp_path) == before
    assert "-frame = 1\n+frame = 0\n" in dry.stdout and '+resources = ["out"]' in dry.stdout
    blessed = vkcap("suite", "bless", manifest, "--results", written)
    assert blessed.returncode == 0 and blessed.stdout == dry.stdout
    doc = tomllib.loads(manifest.read_text())
    entries = {e["path"]: e for e in doc["traces"]}
    on = f" (on {device}, driver {results['frame'].driver})"
    assert entries["frame.vkt"]["expect"] == [{"device": "*", "status": "diverged", "frame": 0, "reason": "a human reason",
                                                "resources": ["out"], "measured": f"from frame 0: {what}{on}"}]
    assert entries["other.vkt"]["expect"] == [{"device": "*", "status": "diverged", "resources": ["out"], "frame": 0,
                                                "measured": f"from frame 0: {what}{on}"}]
    assert entries["beyond.vkt"]["expect"] == [{"device": device, "status": "diverged", "frame": 0, "resources": ["out"],
                                                 "measured": f"from frame 0: {what}{on}"}]
    text = manifest.read_text()
    assert text.startswith("# nightly: typed verdicts\n") and 'device = "*"   # every device\n' in text
    # and the blessed manifest judges the same replays as expected
    again = run_suite([replace(t, flags=(*t.flags, "--replace-shader", f"s={moved}")) for t in load_suite([manifest])],
                      options_for=suite_replay_options)
    assert sorted(r.status for r in again) == ["expected", "expected", "expected", "pass"]


@pytest.mark.slow
@pytest.mark.device
def test_a_struct_field_takes_its_own_tolerance_from_a_manifest(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """``parts.id`` within ``atol = 1`` and ``pos`` within the entry's ``ulp = 4``: the trace passes, its
    verdict naming both fields; a field the view lacks, or a dtype given to a field, is refused before
    any worker starts (the real CLI: exit 2, one line, nothing written)."""
    folder = tmp_path / "suite"
    trace = record(builder, folder, PARTICLES % "", {"parts": 16 * N}, ["parts"])
    changed = tmp_path / "changed.comp"
    changed.write_text((PARTICLES % " + int(i == 41u)").replace(
        "parts[i].pos = vec2(float(i) * 0.5 + 1.0, float(i) + 2.0);",
        "parts[i].pos = vec2(float(i) * 0.5 + 1.0, uintBitsToFloat(floatBitsToUint(float(i) + 2.0) + uint(i == 7u)));"))
    manifest = folder / "suite.toml"
    manifest.write_text('[[traces]]\npath = "t.vkt"\ntolerance = { ulp = 4 }\nresources."parts.id" = { atol = 1 }\n')
    (suite_trace,) = load_suite([manifest])
    (result,) = run_suite([replace(suite_trace, flags=(*suite_trace.flags, "--replace-shader", f"s={changed}"))],
                          options_for=suite_replay_options)
    assert (result.status, result.outcome) == ("pass", "within")
    assert result.verdict == ("within tolerance: parts.pos (float32): 1 differ, within ulp 4, up to 1 ULP (9.54e-07 abs); "
                              "parts.id (int32): 1 differ, within atol 1, up to 1 apart")
    cases = [('resources."parts.nope" = { ulp = 1 }',
              f'{manifest}: traces[0].resources."parts.nope": in t.vkt: \'parts\' has no field \'nope\' (it is read as '
              "struct{pos: float32[2], id: int32, mass: float32}[]; its fields: pos, id, mass)"),
             ('resources."parts.pos" = { dtype = "float64" }',
              f'{manifest}: traces[0].resources."parts.pos".dtype: in t.vkt: a field is read in its view\'s type; a dtype '
              "is for a whole resource"),
             ("resources.nope = { ulp = 1 }",
              f"{manifest}: traces[0].resources.nope: in t.vkt: the trace has no resource 'nope' (it has: parts)"),]
    for line, message in cases:
        manifest.write_text(f'[[traces]]\npath = "t.vkt"\n{line}\n')
        before = snapshot(tmp_path)
        proc = vkcap("suite", "run", manifest, "--json", tmp_path / "r.json")
        assert one_line(proc) == (2, f"vkcap: error: {message}")
        assert snapshot(tmp_path) == before
    assert trace.exists()


# --------------------------------------------------------------------------------------------------
# a tolerance that would judge nothing


@pytest.mark.slow
@pytest.mark.device
def test_a_ulp_meeting_a_bytes_comparison_is_an_error_in_a_manifest_and_a_warning_elsewhere(
        builder: ScenarioBuilder, tmp_path: Path) -> None:
    """``raw`` is bound by no shader: compared as bytes, where ULP and relative tolerances mean nothing.
    A manifest's ``ulp`` (the entry's or the resource's) is an error naming the key before any worker
    starts, and nothing is written; suite run's, replay's and diff's ``--ulp``/``--rtol`` a warning, once
    per resource; a dtype for it (the manifest's, or suite run --dtype) makes the tolerance apply."""
    folder = tmp_path / "suite"
    trace = add_trace(builder, folder, unbound="raw")
    manifest = folder / "suite.toml"
    said = "does not apply to 'raw' of t.vkt: it is compared as bytes (no shader view, no dtype)"
    for table, key in (("tolerance = { ulp = 4 }", "traces[0].tolerance.ulp"),
                       ("tolerance = { ulp = 4 }\nresources.raw = { rtol = 0.5 }", "traces[0].resources.raw.rtol")):
        manifest.write_text(f'[[traces]]\npath = "t.vkt"\n{table}\n')
        before = snapshot(tmp_path)
        proc = vkcap("suite", "run", manifest, "--json", tmp_path / "r.json", "--results", tmp_path / "res")
        value = "ulp 4" if key.endswith("ulp") else "rtol 0.5"
        assert one_line(proc) == (2, f"vkcap: error: {manifest}: {key}: {value} {said}; give it a dtype "
                                     "(traces[0].resources.raw.dtype)")
        assert snapshot(tmp_path) == before
    # a dtype for it, in the manifest or on the command line: the tolerance applies, the suite passes
    manifest.write_text('[[traces]]\npath = "t.vkt"\ntolerance = { ulp = 4 }\nresources.raw = { dtype = "uint32" }\n')
    assert one_line(vkcap("suite", "run", manifest)) [0] == 0
    manifest.write_text('[[traces]]\npath = "t.vkt"\ntolerance = { ulp = 4 }\n')
    proc = vkcap("suite", "run", manifest, "--dtype", "raw=uint32", "--json", tmp_path / "d.json")
    assert proc.returncode == 0 and "does not apply" not in proc.stderr, proc.stderr
    # the suite's own flags: a warning, once for the resource
    manifest.unlink()
    proc = vkcap("suite", "run", folder, "--ulp", "4", "--rtol", "0.1")
    assert proc.returncode == 0, proc.stderr
    warned = [line for line in proc.stderr.splitlines() if "does not apply" in line]
    assert [w.split("vkcap: ", 1)[-1] for w in warned] == [
        f"--rtol: rtol 0.1 {said}; give it a dtype (a manifest's resources.raw.dtype, or --dtype)",
        f"--ulp: ulp 4 {said}; give it a dtype (a manifest's resources.raw.dtype, or --dtype)"], proc.stderr
    for command in (("replay", trace), ("diff", trace, trace), ("bisect", trace)):
        proc = vkcap(*command, "--ulp", "4")
        assert proc.returncode == 0, proc.stderr
        warned = [line for line in proc.stderr.splitlines() if "does not apply" in line]
        assert len(warned) == 1 and warned[0].endswith(f"{trace}: raw: ulp 4 does not apply: compared as bytes (no shader "
                                                       "view, no dtype); --dtype raw=TYPE reads it typed"), proc.stderr
        quiet = vkcap(*command, "--ulp", "4", "--dtype", "raw=uint32")
        assert quiet.returncode == 0 and "does not apply" not in quiet.stderr
    explicit = vkcap("replay", trace, "--ulp", "4", "--dtype", "raw=bytes")
    assert explicit.returncode == 0 and explicit.stderr.count("raw: ulp 4 does not apply: compared as bytes (its dtype is "
                                                              "bytes); --dtype raw=TYPE reads it typed") == 1


# --------------------------------------------------------------------------------------------------
# arguments checked before any worker starts; retries; hostile strings


@pytest.mark.slow
@pytest.mark.device
def test_every_argument_is_checked_before_any_worker_starts(builder: ScenarioBuilder, tmp_path: Path) -> None:
    folder = tmp_path / "suite"
    add_trace(builder, folder)
    before = snapshot(tmp_path)
    start = time.monotonic()
    proc = vkcap("suite", "run", folder, "--device", "99", "--retries", "5", "--json", tmp_path / "r.json")
    code, line = one_line(proc)
    assert code == 2 and line.startswith("vkcap: error: no device matches --device '99' (devices: 0: ") and "\n" not in line
    assert time.monotonic() - start < 10  # no worker, no retry: the device list and one line
    for args, message in (
            (("--dtype", "out"), "--dtype: expected UID=TYPE, got 'out'"),
            (("--dtype", "out=float33"), "--dtype out=float33: unknown type 'float33' (known: bytes, "),
            (("--dtype", "nope=float32"), "--dtype nope=float32: no trace of the suite has a resource 'nope'"),
            (("--dtype", "out=float64", "--dtype", "a=uint8"), None),
            (("--tolerance", "preset:nope"), "--tolerance preset:nope: unknown tolerance preset 'nope' (known: torch, strict)")):
        proc = vkcap("suite", "run", folder, *args)
        if message is None:
            assert proc.returncode == 0, proc.stderr
            continue
        assert proc.returncode == 2 and proc.stderr.strip().startswith(f"vkcap: error: {message}"), proc.stderr
    assert snapshot(tmp_path) == before


@pytest.mark.slow
@pytest.mark.device
def test_a_worker_without_its_device_answers_each_attempt_at_once(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """A worker whose device cannot be opened (what suite run's own check refuses first) says why, at
    once, for every attempt: no replay is tried, no time goes by."""
    trace = add_trace(builder, tmp_path / "suite")
    start = time.monotonic()
    (result,) = run_suite([SuiteTrace(trace)], options_for=suite_replay_options, retries=3, devices=["99"])
    assert time.monotonic() - start < 15
    assert (result.status, result.outcome, result.attempts) == ("fail", "error", 4)
    assert [a["detail"].startswith("no device matches --device '99'") for a in result.spread] == [True] * 4
    assert result.verdict.startswith("not replayed: attempt 1: error (no device matches --device '99'")


def test_retries_keep_each_attempts_cause(tmp_path: Path) -> None:
    from replay.suite import _replay_one

    class Scripted:
        def __init__(self, answers: list[dict[str, Any]]) -> None:
            self.answers, self.device, self.driver, self.host = answers, "GPU", "1.0", ""

        def start(self) -> str:
            return self.device

        def replay(self, trace: Path, flags: tuple[str, ...] = (), pages: Path | None = None) -> dict[str, Any]:
            return self.answers.pop(0)

    answers = [{"outcome": "error", "detail": "t.vkt: no device matches --device '1'"},
               {"outcome": "crash", "first_divergence": 2, "detail": "the replay died in frame 2: SIGSEGV"},
               {"outcome": "identical", "frames": 3}]
    result = _replay_one(Scripted(answers), SuiteTrace(tmp_path / "t.vkt"), 2)  # type: ignore[arg-type]
    assert (result.status, result.attempts) == ("flaky", 3)
    assert result.detail == ("attempt 1: error (t.vkt: no device matches --device '1'); attempt 2: crash in frame 2 "
                             "(the replay died in frame 2: SIGSEGV); attempt 3: identical")
    assert result.verdict == f"identical ({result.detail})"


def test_result_names_and_junit_take_hostile_strings(tmp_path: Path) -> None:
    """A trace name that is not UTF-8 and a device of any text give a result file name inside the folder;
    JUnit escapes control characters and lone surrogates; a result file's https page stays a URL; the
    table takes a result whose trace is not a string."""
    from vkcap.commands_suite import _report

    name = os.fsdecode(b"t\xff\x1b[31m.vkt")
    stem = result_stem(str(tmp_path / name), "GPU \x1b]0;x\x07 \udc80")
    assert "/" not in stem and stem.isascii() and stem.isprintable() and not stem.startswith(".")
    assert result_stem(str(tmp_path / name), "a") != result_stem(str(tmp_path / name), "b")
    hostile = TraceResult(str(tmp_path / name), "GPU \x1b[2J\udc80", "fail", "diverged", "pass", detail="\x00\x1b[31m x",
                          reason="r\x07", verdict="v \udcff\x1b", resources=[{"uid": "o\x1b", "status": "DIVERGED"}])
    junit = tmp_path / "j.xml"
    write_junit(junit, [hostile, replace(hostile, status="skip")])
    raw = junit.read_bytes()
    assert b"\x1b" not in raw and b"\x00" not in raw and b"\x07" not in raw
    cases = list(ET.parse(junit).getroot().iter("testcase"))
    assert len(cases) == 2 and cases[0].find("failure") is not None
    results = tmp_path / "results"
    results.mkdir()
    good = {"trace": "t.vkt", "device": "GPU", "status": "pass", "outcome": "identical", "expected": "pass",
            "page": "https://ci.example.com/run/1/page.html", "verdict": "identical",
            "resources": [{"uid": "out", "dtype": "float32", "status": "identical", "max_abs": 0.0,
                           "fields": [{"name": "pos", "status": "identical"}]}]}
    (results / "r.json").write_text(json.dumps(good))
    (merged,) = read_results([results])
    assert merged.page == good["page"] and merged.resources == good["resources"]
    for key, value, message in (("resources", [{"uid": 1}], "resources[0]: must be an object with a uid, got {'uid': 1}"),
                                ("resources", [{"uid": "o", "status": "bad"}], "resources[0].status: must be one of"),
                                ("resources", [{"uid": "o", "max_abs": -1}], "resources[0].max_abs: must be a finite number >= 0"),
                                ("expected_frame", -1, "expected_frame: must be a whole number >= 0"),
                                ("expected_resources", "out", "expected_resources: must be a list of at most 4096 strings")):
        (results / "r.json").write_text(json.dumps({**good, key: value}))
        with pytest.raises(UsageError) as exc:
            read_results([results])
        assert str(exc.value).startswith(f"{results / 'r.json'}: {message}")
    args = argparse.Namespace(json=None, junit=None, html=None, results=None)
    assert _report(args, [replace(hostile, trace=Path(tmp_path / "t.vkt"))]) == 1  # type: ignore[arg-type]
