"""Bad input to ``vkcap replay`` / ``diff`` / ``bisect``: every case is one line, exit 2, nothing written.

One small scenario, recorded once: ``copy`` copies ``x`` into ``dst`` (three 32-bit words, 12 bytes),
four frames. The replacement ``copy_y`` copies ``y`` instead: word 0 goes from NaN to 1.0, word 1 from
0.0 to 1e-30 (an infinite relative error), word 2 stays 5.0. Commands run in-process through
``vkcap.cli.main``; checks that must come before any replay work make Vulkan and the replay fail if
they are reached.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

from capture.trace import Trace
from tests.builders import ScenarioBuilder
from vkcap.cli import main

FRAMES = 4
COPY = """#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) readonly buffer X { uint x[]; };
layout(set = 0, binding = 1) readonly buffer Y { uint y[]; };
layout(set = 0, binding = 2) buffer D { uint d[]; };
void main() { uint i = gl_GlobalInvocationID.x; d[i] = SOURCE[i]; }
"""
X = np.array([np.nan, 0.0, 5.0], np.float32)
Y = np.array([1.0, 1e-30, 5.0], np.float32)
UIDS = "dst, x, y"


def cli(*args: Any) -> int:
    return main([str(a) for a in args])


def record(folder: Path, source: str, trace: Path) -> Path:
    b = ScenarioBuilder(folder)
    b.shader("copy", COPY.replace("SOURCE", source))
    b.buffer("x", 12, X.view(np.uint32), shader_access="readonly").buffer("y", 12, Y.view(np.uint32), shader_access="readonly")
    b.buffer("dst", 12)
    for k in range(FRAMES):
        b.dispatch("copy", [(0, 0, "x"), (0, 1, "y"), (0, 2, "dst")], [3]).boundary(["dst"], k)
    assert cli("record", b.save(), "-o", trace) == 0
    return trace


def cut(trace: Path, target: Path, frames_left: Callable[[int], bool]) -> Path:
    """A copy of ``trace`` cut short, as by a crash, where the recovered trace holds a number of
    complete frames that ``frames_left`` accepts."""
    data = trace.read_bytes()
    for size in range(len(data) - 1, 64, -8):
        target.write_bytes(data[:size])
        try:
            with Trace.open(target) as t:
                if t.recovered and frames_left(len(t.frames)):
                    return target
        except Exception:
            continue
    raise AssertionError("no cut point found")


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("inputs")
    trace = record(root / "a", "x", root / "a.vkt")
    other = record(root / "b", "y", root / "b.vkt")
    (root / "copy_y.comp").write_text(COPY.replace("SOURCE", "y"))
    (root / "afile").write_text("not a folder")
    (root / "adir").mkdir()
    return {"root": root, "trace": trace, "other": other, "copy_y": root / "copy_y.comp"}


def _boom(*args: Any, **kwargs: Any) -> None:
    raise AssertionError("reached replay work")


@pytest.fixture
def no_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    """Building a replay session (scenario, pipelines, device) fails the test (as an internal error, exit 1)."""
    monkeypatch.setattr("replay.replayer.ReplaySession.__init__", _boom)


@pytest.fixture
def no_vulkan(monkeypatch: pytest.MonkeyPatch, no_replay: None) -> None:
    """Even starting Vulkan fails the test: for the checks that need no trace, made first of all."""
    monkeypatch.setattr("vkcore.device.context.start_instance_early", _boom)


def one_error(capsys: pytest.CaptureFixture[str], *args: Any) -> str:
    """Run a command that must fail with exit 2; return its one line."""
    capsys.readouterr()
    assert cli(*args) == 2, args
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def strict_json(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(f"not strict JSON: {name}")

    return json.loads(text, parse_constant=refuse)


# --------------------------------------------------------------------------------------------------
# 1-3: uids, dtypes and shapes are checked against the trace


@pytest.mark.device
def test_unknown_uids_are_refused_naming_the_flag_or_table(setup: dict[str, Path], tmp_path: Path, no_replay: None,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    trace, y = setup["trace"], f"copy={setup['copy_y']}"
    toml = tmp_path / "tol.toml"
    toml.write_text("[resources.nope]\natol = 100\n")
    out = tmp_path / "r.json"
    cases = [
        (("--dtype", "Dst=float32"), f"--dtype Dst=float32: the trace has no resource 'Dst' (it has: {UIDS})"),
        (("--shape", "nope=3"), f"--shape nope=3: the trace has no resource 'nope' (it has: {UIDS})"),
        (("--tolerance", toml), f"{toml}: resources.nope: the trace has no resource 'nope' (it has: {UIDS})"),
    ]
    for flags, message in cases:
        assert one_error(capsys, "replay", trace, "--replace-shader", y, "--atol", 100, "--json", out, *flags) == f"vkcap: error: {message}"
        assert one_error(capsys, "diff", trace, setup["other"], *flags) == f"vkcap: error: {message}"
    assert not out.exists()


@pytest.mark.device
def test_a_dtype_must_divide_the_resource_and_a_shape_must_match_it(setup: dict[str, Path], tmp_path: Path, no_replay: None,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    trace, heat = setup["trace"], tmp_path / "heat"
    toml = tmp_path / "tol.toml"
    toml.write_text('[resources.dst]\ndtype = "float64"\n')
    cases = [
        (("--dtype", "dst=float64"), "--dtype dst=float64: 'dst' is 12 bytes, not a whole number of float64 elements (8 bytes each)"),
        (("--tolerance", toml), f"{toml}: resources.dst.dtype: 'dst' is 12 bytes, not a whole number of float64 elements (8 bytes each)"),
        (("--dtype", "dst=float32", "--shape", "dst=2x2"), "--shape dst=2x2: 4 elements, but 'dst' (12 bytes read as float32) holds 3"),
        (("--shape", "dst=3x1"), "--shape dst=3x1: 3 elements, but 'dst' (12 bytes read as bytes) holds 12"),
    ]
    for flags, message in cases:
        assert one_error(capsys, "replay", trace, "--heatmap", heat, *flags) == f"vkcap: error: {message}"
    assert not heat.exists()


@pytest.mark.device
def test_a_matching_shape_draws_the_heatmap_and_the_right_uid_finds_nan_versus_one(setup: dict[str, Path], tmp_path: Path) -> None:
    heat = tmp_path / "heat"
    assert cli("replay", setup["trace"], "--frame", 0, "--replace-shader", f"copy={setup['copy_y']}", "--dtype", "dst=float32",
               "--shape", "dst=3x1", "--atol", 100, "--heatmap", heat) == 1  # NaN vs 1.0 passes no tolerance
    assert [p.name for p in heat.iterdir()] == ["frame00000-dst.png"]


# --------------------------------------------------------------------------------------------------
# 4: report paths, numbers and files checked before any replay work


@pytest.mark.device
def test_bad_report_paths_and_numbers_are_refused_before_any_replay_work(setup: dict[str, Path], tmp_path: Path, no_vulkan: None,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    root, trace, other = setup["root"], setup["trace"], setup["other"]
    afile, adir = root / "afile", root / "adir"
    before = trace.read_bytes(), other.read_bytes()
    tomls = {"ulp": "[default]\nulp = 1e30\n", "big": "[default]\nulp = 18446744073709551616\n",
             "dtype": "[resources.dst]\ndtype = [1]\n"}
    for name, text in tomls.items():
        (tmp_path / f"{name}.toml").write_text(text)
    known = "bytes, int8, uint8, int16, uint16, int32, uint32, int64, uint64, float16, bfloat16, float8e4m3, float8e5m2, float32, float64, bool"
    cases = [
        (("replay", trace, "--heatmap", afile), f"{afile}: --heatmap: is a file, not a folder"),
        (("replay", trace, "--heatmap", afile / "sub"), f"{afile / 'sub'}: --heatmap: {afile} is a file, not a folder"),
        (("replay", trace, "--json", adir), f"{adir}: --json: is a folder, not a file"),
        (("replay", trace, "--json", afile / "r.json"), f"{afile / 'r.json'}: --json: {afile} is a file, not a folder"),
        (("replay", trace, "--junit", adir), f"{adir}: --junit: is a folder, not a file"),
        (("replay", trace, "--json", "/proc/r.json"), "/proc/r.json: --json: cannot create files in /proc: No such file or directory"),
        (("replay", trace, "--json", trace), f"{trace}: --json: is a trace this command reads: refusing to overwrite it"),
        (("replay", trace, "--isolate", "--junit", trace), f"{trace}: --junit: is a trace this command reads: refusing to overwrite it"),
        (("replay", trace, "--heatmap", trace), f"{trace}: --heatmap: is a trace this command reads: refusing to overwrite it"),
        (("bisect", trace, "--no-isolate", "--json", trace), f"{trace}: --json: is a trace this command reads: refusing to overwrite it"),
        (("diff", trace, other, "--json", other), f"{other}: --json: is a trace this command reads: refusing to overwrite it"),
        (("diff", trace, other, "--junit", trace), f"{trace}: --junit: is a trace this command reads: refusing to overwrite it"),
        (("replay", trace, "--ulp", 2**64), f"--ulp: must be a whole number >= 0 and below 2**63, got {2**64}"),
        (("replay", trace, "--atol", "nan"), "--atol: must be a finite number >= 0, got nan"),
        (("diff", trace, other, "--rtol", "inf"), "--rtol: must be a finite number >= 0, got inf"),
        (("replay", trace, "--tolerance", tmp_path / "ulp.toml"), f"{tmp_path / 'ulp.toml'}: default.ulp: must be a whole number >= 0 and below 2**63, got 1e+30"),
        (("replay", trace, "--tolerance", tmp_path / "big.toml"), f"{tmp_path / 'big.toml'}: default.ulp: must be a whole number >= 0 and below 2**63, got {2**64}"),
        (("replay", trace, "--tolerance", tmp_path / "dtype.toml"),
         f"{tmp_path / 'dtype.toml'}: resources.dst.dtype: must be a type name (a string), got [1] (known: {known})"),
        (("replay", trace, "--tolerance", adir), f"{adir}: is a folder, not a tolerance file"),
        (("replay", trace, "--timeout", -1), "--timeout: must be a number of seconds > 0 and at most 604800 (7 days), got -1.0"),
        (("replay", trace, "--timeout", "nan"), "--timeout: must be a number of seconds > 0 and at most 604800 (7 days), got nan"),
        (("bisect", trace, "--timeout", "inf"), "--timeout: must be a number of seconds > 0 and at most 604800 (7 days), got inf"),
        (("replay", trace, "--json", tmp_path / "r", "--junit", tmp_path / "r"), f"{tmp_path / 'r'}: --json and --junit name the same file"),
    ]
    for args, message in cases:
        assert one_error(capsys, *args) == f"vkcap: error: {message}", args
    assert (trace.read_bytes(), other.read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.toml", "dtype.toml", "ulp.toml"]
    assert afile.read_text() == "not a folder" and not any(adir.iterdir())


@pytest.mark.device
def test_an_ulp_tolerance_at_the_bound_is_accepted(setup: dict[str, Path]) -> None:
    """Every ULP distance (a uint64) is within 2**63 - 1 but NaN vs 1.0 is not."""
    assert cli("replay", setup["trace"], "--frame", 0, "--replace-shader", f"copy={setup['copy_y']}",
               "--dtype", "dst=float32", "--ulp", 2**63 - 1) == 1


# --------------------------------------------------------------------------------------------------
# 5: reports are strict JSON


@pytest.mark.device
def test_reports_are_strict_json_with_non_finite_numbers_as_strings(setup: dict[str, Path], tmp_path: Path) -> None:
    out, junit = tmp_path / "r.json", tmp_path / "r.xml"
    assert cli("replay", setup["trace"], "--frame", 0, "--replace-shader", f"copy={setup['copy_y']}", "--dtype", "dst=float32",
               "--json", out, "--junit", junit) == 1
    (dst,) = strict_json(out.read_text())["frames"][0]["resources"]
    assert (dst["max_rel"], dst["max_abs"], dst["nan_mismatches"]) == ("inf", float(Y[1]), 1)
    assert (dst["first_index"], dst["first_recorded"], dst["first_live"]) == ([0], "nan", 1.0)
    import xml.etree.ElementTree as ET

    failure = ET.parse(junit).getroot().find("testsuite/testcase/failure")
    assert failure is not None and strict_json(failure.text or "")["max_rel"] == "inf"
    assert "first at [0]: recorded nan, live 1.0" in failure.get("message", "")
    assert cli("diff", setup["trace"], setup["other"], "--dtype", "dst=float32", "--json", out) == 1
    (dst,) = strict_json(out.read_text())["frames"][0]["resources"]
    assert (dst["max_rel"], dst["first_recorded"], dst["first_live"]) == ("inf", "nan", 1.0)


def test_non_finite_values_round_trip_through_an_isolated_childs_report() -> None:
    from replay.report import comparison_line, frames_document, frames_from_document
    from replay.results import DIVERGED, Comparison, FrameResult

    c = Comparison("nan", "float32", DIVERGED, 3, 2, max_abs=1e-30, max_rel=float("inf"), first_index=(0,),
                   first_recorded=float("nan"), first_live=float("-inf"))
    text = json.dumps(frames_document([FrameResult(0, 0, [c])]), allow_nan=False)
    (back,) = frames_from_document(strict_json(text))[0].comparisons
    assert back.uid == "nan" and back.max_rel == float("inf") and back.first_live == float("-inf")
    assert comparison_line(back) == comparison_line(c)


# --------------------------------------------------------------------------------------------------
# 6: driver manifests


@pytest.mark.device
def test_bad_driver_manifests_are_named(setup: dict[str, Path], tmp_path: Path, no_vulkan: None,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    trace = setup["trace"]
    manifests = {
        "garbage.json": "{not json",
        "array.json": "[]",
        "nolib.json": json.dumps({"file_format_version": "1.0.0", "ICD": {"api_version": "1.3.0"}}),
        "missing.json": json.dumps({"file_format_version": "1.0.0", "ICD": {"library_path": "lib/libnope.so"}}),
    }
    for name, text in manifests.items():
        (tmp_path / name).write_text(text)
    p = {name: tmp_path / name for name in manifests}
    cases = [
        (("replay", trace, "--icd", p["garbage.json"]),
         f"--icd {p['garbage.json']}: not a Vulkan driver manifest: invalid JSON "
         "(Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"),
        (("replay", trace, "--icd", p["array.json"]), f"--icd {p['array.json']}: not a Vulkan driver manifest: no \"ICD\" object"),
        (("replay", trace, "--icd", p["nolib.json"]), f"--icd {p['nolib.json']}: ICD.library_path: missing or not a string, got None"),
        (("bisect", trace, "--icd", p["missing.json"]),
         f"--icd {p['missing.json']}: ICD.library_path: no such library: {tmp_path / 'lib/libnope.so'}"),
        (("bisect", trace, "--no-isolate", "--reference-icd", p["missing.json"]),
         f"--reference-icd {p['missing.json']}: ICD.library_path: no such library: {tmp_path / 'lib/libnope.so'}"),
    ]
    for args, message in cases:
        assert one_error(capsys, *args) == f"vkcap: error: {message}", args


def test_a_bare_library_name_is_left_to_the_loader(tmp_path: Path) -> None:
    from vkcore.device.driver import check_manifest

    manifest = tmp_path / "icd.json"
    manifest.write_text(json.dumps({"ICD": {"library_path": "libvulkan_lvp.so"}}))
    assert check_manifest(manifest) == manifest


# --------------------------------------------------------------------------------------------------
# 7: replacement shaders


@pytest.mark.device
def test_replacement_shader_errors_name_the_users_file_and_the_flag(setup: dict[str, Path], tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    broken, garbage = tmp_path / "broken.comp", tmp_path / "garbage.spv"
    broken.write_text("#version 450\nvoid main() {\n")
    garbage.write_bytes(b"\x01\x02\x03\x04" * 8)
    trace, y = setup["trace"], setup["copy_y"]
    line = one_error(capsys, "replay", trace, "--replace-shader", f"copy={broken}")
    assert line.startswith(f"vkcap: error: --replace-shader copy={broken}: shader compilation failed: ERROR: broken.comp:"), line
    assert "vkcap-replay-" not in line
    assert one_error(capsys, "replay", trace, "--replace-shader", f"copy={garbage}") == (
        f"vkcap: error: --replace-shader copy={garbage}: not a SPIR-V binary (bad magic or length)")
    assert one_error(capsys, "bisect", trace, "--no-isolate", "--replace-shader", f"copy={y}", "--replace-shader", f"copy={broken}") == (
        f"vkcap: error: --replace-shader copy={broken}: shader 'copy' is already replaced (by {y}): give each uid once")
    wrong_binding = tmp_path / "wrong_binding.comp"  # compiles, but binds what the dispatch does not provide
    wrong_binding.write_text(COPY.replace("SOURCE", "x").replace("binding = 2", "binding = 7"))
    assert one_error(capsys, "replay", trace, "--replace-shader", f"copy={wrong_binding}") == (
        f"vkcap: error: {trace}: commands[0].dispatch_compute.bindings: with --replace-shader copy={wrong_binding}: "
        "shader 'copy' uses set 0 binding 7, a storage buffer 'D', which this command does not bind (it binds: "
        "set 0 binding 0, set 0 binding 1, set 0 binding 2)")


# --------------------------------------------------------------------------------------------------
# 8: partial and recovered traces


@pytest.mark.device
def test_frames_not_in_the_trace_are_named(setup: dict[str, Path], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="vkcap")
    trace = setup["trace"]
    assert cli("replay", trace, "--frames", "1-99") == 0
    assert (f"{trace}: --frames 1-99: frame(s) 4-99 are not in the trace (it has frames 0-3): "
            "comparing frame(s) 1-3 only") in caplog.messages
    assert "3 frame(s) replayed" in caplog.text


@pytest.mark.device
def test_recovered_traces_say_so_and_one_without_frames_is_refused(setup: dict[str, Path], tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    caplog.set_level(logging.INFO, logger="vkcap")
    partial = cut(setup["trace"], tmp_path / "partial.vkt", lambda n: 0 < n < FRAMES)
    with Trace.open(partial) as t:
        last = t.frames[-1].seq
    warning = f"{partial}: the trace was recovered (its recording was cut short): it holds frames 0-{last} only"
    assert cli("replay", partial) == 0 and warning in caplog.messages
    caplog.clear()
    assert cli("bisect", partial, "--no-isolate") == 0 and warning in caplog.messages
    empty = cut(setup["trace"], tmp_path / "empty.vkt", lambda n: n == 0)
    for command in (("replay", empty), ("bisect", empty, "--no-isolate"), ("bisect", empty)):
        assert one_error(capsys, *command) == f"vkcap: error: {empty}: the trace holds no complete frame", command


# --------------------------------------------------------------------------------------------------
# 9: messages


@pytest.mark.device
def test_a_frame_out_of_range_names_the_trace_and_the_flag(setup: dict[str, Path], no_replay: None,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    trace = setup["trace"]
    assert one_error(capsys, "replay", trace, "--frame", 99) == (
        f"vkcap: error: {trace}: --frame 99: no recorded frame in 99-99 (the trace has frames 0-3)")
    assert one_error(capsys, "replay", trace, "--frames", "7-9") == (
        f"vkcap: error: {trace}: --frames 7-9: no recorded frame in 7-9 (the trace has frames 0-3)")


@pytest.mark.device
def test_diff_names_its_sides_a_and_b(setup: dict[str, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    junit = tmp_path / "d.xml"
    assert cli("diff", setup["trace"], setup["other"], "--dtype", "dst=float32", "--junit", junit) == 1
    assert "first divergence at frame 0: dst: DIVERGED" in caplog.text
    assert "first at [0]: A nan, B 1.0" in caplog.text and "recorded" not in caplog.text
    assert "first at [0]: A nan, B 1.0" in junit.read_text()
