"""A reproducer reproduces (#36 item 2): from a one-constant edit of the heat example's shader and a trace
recorded WITHOUT --dispatch-level, ``bisect --replace-shader --extract bug/`` writes a folder whose
``check.sh`` fails (exit 1, naming the file) on the candidate and passes (exit 0) on the recorded shader,
with vkcap and, where installed, ARM's runner; ``vkcap reproduce`` reads the folder as untrusted input."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import REPO, vkcap

pytestmark = pytest.mark.device

HEAT = REPO / "examples" / "heat"
EDIT = ("0.2 *", "0.2001 *")  # one constant of examples/heat/step.comp


def snapshot(folder: Path) -> dict[str, tuple[int, int, str]]:
    """Every file under ``folder``: size, mtime and content hash (what must not change)."""
    return {p.relative_to(folder).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns,
                                               hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(folder.rglob("*")) if p.is_file()}


def check(folder: Path, *flags: str, tmp: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``bash FOLDER/check.sh FLAGS`` as a driver engineer runs it, with this checkout's vkcap; its
    temporary folders go under ``tmp`` (to see that none is left)."""
    tmp.mkdir(exist_ok=True)
    environment = {**{k: v for k, v in os.environ.items() if k != "VKCAP_RUNNER"}, "VKCAP": f"{sys.executable} -m vkcap",
                   "PYTHONPATH": str(REPO), "TMPDIR": str(tmp), **(env or {})}
    return subprocess.run(["bash", str(folder / "check.sh"), *flags], capture_output=True, text=True, env=environment,
                          timeout=300)


@pytest.fixture(scope="module")
def heat_bug(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The issue's recipe, once for the module: the heat example, its step shader with one constant
    edited, a trace recorded without --dispatch-level, and bisect --replace-shader --extract bug/."""
    work = tmp_path_factory.mktemp("heat-bug")
    shutil.copytree(HEAT, work / "heat")
    edited = work / "edited.comp"
    source = (HEAT / "step.comp").read_text()
    assert source.count(EDIT[0]) == 1
    edited.write_text(source.replace(*EDIT))
    trace = work / "heat.vkt"
    proc = vkcap("record", work / "heat" / "scenario.json", "--output", work / "out", "-o", trace)
    assert proc.returncode == 0, proc.stderr
    bug = work / "bug"
    report = work / "bisect.json"
    proc = vkcap("bisect", trace, "--replace-shader", f"step={edited}", "--extract", bug, "--json", report)
    assert proc.returncode == 1, proc.stderr
    return {"work": work, "trace": trace, "edited": edited, "bug": bug, "report": report, "stdout": proc.stdout}


@pytest.mark.slow
def test_the_recipe_names_the_dispatch_and_check_sh_fails_on_the_candidate_and_passes_on_the_recorded(
        heat_bug: dict[str, Any], tmp_path: Path) -> None:
    """The issue's "Done when": bisect names commands[0] (step) from a frame-level trace by itself, and the
    extract's check.sh exits 1 on the candidate, naming expected/b.npy, and 0 with the recorded shader;
    nothing in the folder changes and no temporary folder is left."""
    bug = heat_bug["bug"]
    lines = heat_bug["stdout"].splitlines()
    assert ("first divergent dispatch: commands[0] (step), found by replaying frame 0 with the recorded shaders "
            "and with the replacement") in lines
    doc = json.loads(heat_bug["report"].read_text())
    assert (doc["frame"], doc["command"], doc["dispatch"]) == (0, 0, "step")
    assert doc["found_by"] == "replaying frame 0 with the recorded shaders and with the replacement"
    before = snapshot(bug)
    proc = check(bug, tmp=tmp_path / "tmp")
    assert proc.returncode == 1, proc.stderr
    err = proc.stderr.splitlines()
    assert any(line.startswith(f"vkcap: {bug}/expected/b.npy: b: DIVERGED: ") and "float32 elements differ" in line
               for line in err), proc.stderr
    assert err[-1] == "vkcap: reproduced: 1 of 2 output(s) of scenario.json (vkcap run) diverge from expected/"
    assert "Traceback" not in proc.stderr
    proc = check(bug, "--recorded", tmp=tmp_path / "tmp")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[-1] == "vkcap: 2 output(s) of scenario.recorded.json (vkcap run) match expected/"
    assert snapshot(bug) == before
    assert list((tmp_path / "tmp").iterdir()) == []


@pytest.mark.slow
@pytest.mark.reference
def test_check_sh_runs_arms_runner_with_its_layers(heat_bug: dict[str, Any], tmp_path: Path) -> None:
    """--runner reference and VKCAP_RUNNER=reference run ARM's scenario-runner (its emulation layers set
    up by vkcap), with the same verdicts."""
    bug = heat_bug["bug"]
    proc = check(bug, "--runner", "reference", tmp=tmp_path / "tmp")
    assert proc.returncode == 1, proc.stderr
    assert "(ARM's scenario-runner) diverge from expected/" in proc.stderr.splitlines()[-1]
    proc = check(bug, "--recorded", tmp=tmp_path / "tmp", env={"VKCAP_RUNNER": "reference"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[-1] == \
        "vkcap: 2 output(s) of scenario.recorded.json (ARM's scenario-runner) match expected/"


def test_the_folder_holds_both_shaders_both_scenarios_and_says_what_diverged(heat_bug: dict[str, Any]) -> None:
    bug = heat_bug["bug"]
    files = sorted(p.relative_to(bug).as_posix() for p in bug.rglob("*") if p.is_file())
    assert files == [".vkcap-extract", "README.md", "check.sh", "expected/a.npy", "expected/b.npy", "inputs/a.npy",
                     "inputs/b.npy", "scenario.json", "scenario.recorded.json", "shaders/source/edited.comp",
                     "shaders/source/step.comp", "shaders/step.candidate.spv", "shaders/step.spv", "vkcap.json"]
    assert os.access(bug / "check.sh", os.X_OK)
    shader_src = {name: next(r["shader"]["src"] for r in json.loads((bug / name).read_text())["resources"] if "shader" in r)
                  for name in ("scenario.json", "scenario.recorded.json")}
    assert shader_src == {"scenario.json": "shaders/step.candidate.spv", "scenario.recorded.json": "shaders/step.spv"}
    assert (bug / "shaders" / "source" / "edited.comp").read_text() == heat_bug["edited"].read_text()
    meta = json.loads((bug / "vkcap.json").read_text())
    assert meta["expected"]["b"] == ("bisect's reference side (the recorded shaders on this device), "
                                     "right after commands[0]")
    assert meta["candidate_shaders"]["step"]["spirv"] == "shaders/step.candidate.spv"
    assert meta["compare"]["b"] == {"dtype": None, "tolerance": {"atol": 0.0, "rtol": 0.0, "ulp": 0}}
    readme = (bug / "README.md").read_text()
    device = meta["extract_device"]["device_name"]
    assert "## The divergence" in readme and f"`step` replaced by `{heat_bug['edited']}`" in readme
    assert "b: DIVERGED: 60/4096 float32 elements differ" in readme and device in readme
    assert f"bash {bug}/check.sh --recorded" in readme


@pytest.mark.slow
def test_check_sh_compares_with_the_tolerance_of_the_replay(heat_bug: dict[str, Any], tmp_path: Path) -> None:
    """vkcap.json's compare tolerance decides: a copy of the folder with atol 0.05 (beyond the edit's
    largest error, 0.02) passes; the shader's view reads b as float32 (no --dtype was given)."""
    copy = tmp_path / "bug"
    shutil.copytree(heat_bug["bug"], copy)
    meta = json.loads((copy / "vkcap.json").read_text())
    meta["compare"]["b"]["tolerance"]["atol"] = 0.05
    (copy / "vkcap.json").write_text(json.dumps(meta))
    proc = check(copy, tmp=tmp_path / "tmp")
    assert proc.returncode == 0, proc.stderr
    assert "b: WITHIN" in proc.stderr or "within" in proc.stderr.lower(), proc.stderr


@pytest.mark.slow
def test_bisect_tolerance_goes_into_the_extract(heat_bug: dict[str, Any], tmp_path: Path) -> None:
    """bisect --atol 0.001 (below the edit's error): still divergent, and the extract compares with atol 0.001."""
    bug = tmp_path / "bug"
    proc = vkcap("bisect", heat_bug["trace"], "--replace-shader", f"step={heat_bug['edited']}", "--atol", "0.001",
                 "--no-isolate", "--extract", bug)
    assert proc.returncode == 1, proc.stderr
    assert json.loads((bug / "vkcap.json").read_text())["compare"]["b"]["tolerance"]["atol"] == 0.001
    assert check(bug, tmp=tmp_path / "tmp").returncode == 1


@pytest.mark.slow
def test_extract_with_a_replaced_shader_makes_a_candidate(heat_bug: dict[str, Any], tmp_path: Path) -> None:
    """vkcap extract --replace-shader: the same two scenarios; frame 50's second step (its inputs replayed,
    b unrecorded there: its expected value from a replay with the recorded shader)."""
    out = tmp_path / "bug50"
    proc = vkcap("extract", heat_bug["trace"], "--frame", "50", "--command", "151", "--replace-shader",
                 f"step={heat_bug['edited']}", "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert (out / "scenario.recorded.json").is_file() and (out / "shaders" / "step.candidate.spv").is_file()
    assert check(out, tmp=tmp_path / "tmp").returncode == 1
    assert check(out, "--recorded", tmp=tmp_path / "tmp").returncode == 0
    proc = vkcap("extract", heat_bug["trace"], "--frame", "50", "--command", "151", "--replace-shader",
                 "nope=x.comp", "-o", tmp_path / "refused")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "--replace-shader nope=x.comp: the trace has no shader 'nope'" in proc.stderr
    assert not (tmp_path / "refused").exists()


# --- the folder is untrusted input ----------------------------------------------------------------------

@pytest.mark.slow
def test_bad_folders_are_one_line(heat_bug: dict[str, Any], tmp_path: Path) -> None:
    """Through the real CLI: no folder, a vkcap.json tolerance that is not finite, a dst that leaves the
    folder, an --output that is not empty: exit 2, one line, nothing changed."""
    copy = tmp_path / "bug"
    shutil.copytree(heat_bug["bug"], copy)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "mine.txt").write_text("keep")
    cases = []
    proc = vkcap("reproduce", tmp_path / "none")
    cases.append((proc, f"vkcap: error: {tmp_path / 'none'}: not a folder"))
    meta_text = (copy / "vkcap.json").read_text()
    (copy / "vkcap.json").write_text(meta_text.replace('"atol": 0.0', '"atol": 1e999', 1))
    proc = vkcap("reproduce", copy)
    cases.append((proc, f"vkcap: error: {copy / 'vkcap.json'}: compare.a.tolerance.atol: must be a finite number"))
    (copy / "vkcap.json").write_text(meta_text)
    scenario_text = (copy / "scenario.json").read_text()
    (copy / "scenario.json").write_text(scenario_text.replace('"dst": "b.npy"', '"dst": "../../b.npy"'))
    proc = vkcap("reproduce", copy)
    cases.append((proc, f"vkcap: error: {copy / 'scenario.json'}: dst: the dst of resource 'b' leaves its folder"))
    (copy / "scenario.json").write_text(scenario_text)
    before = snapshot(tmp_path)
    proc = vkcap("reproduce", copy, "--output", busy)
    cases.append((proc, f"vkcap: error: {busy}"))
    for proc, line in cases:
        assert proc.returncode == 2, (line, proc.stderr)
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(line), (line, proc.stderr)
        assert "Traceback" not in proc.stderr
    assert snapshot(tmp_path) == before


NUMBERS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-2**70, 2**70), st.text(max_size=5),
                    st.booleans(), st.none(), st.lists(st.integers(), max_size=2))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(["atol", "rtol", "ulp"]), value=NUMBERS, uid=st.text(max_size=8))
def test_a_tolerance_from_the_folder_is_finite_non_negative_and_bounded(key: str, value: object, uid: str) -> None:
    """Any value for a tolerance: accepted only when finite, >= 0, bounded (ULP: an integer below 2**63);
    else a UsageError naming compare.<uid>.tolerance.<key> (the uid escaped), never another exception."""
    from replay.reproduce import compare_policy
    from vkcore.bounded_numbers import BOUNDS
    from vkcore.errors import UsageError
    from vkcore.safe_text import shown

    meta = {"compare": {uid: {"dtype": None, "tolerance": {key: value}}}}
    bound = BOUNDS[key]
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
    ok = number and (isinstance(value, int) or not bound.whole) and bound.holds(value)  # type: ignore[arg-type]
    try:
        policy, _ = compare_policy(meta, Path("vkcap.json"))
    except UsageError as exc:
        assert not ok, value
        assert exc.place == f"compare.{shown(uid)}.tolerance.{key}"
        assert "\n" not in exc.render() and shown(exc.render()) == exc.render()
    else:
        assert ok, value
        assert getattr(policy.for_resource(uid, "float32"), key) == (value if key == "ulp" else float(value))


@settings(max_examples=200, deadline=None)
@given(dst=st.text(min_size=1, max_size=20))
def test_a_dst_from_the_folder_never_leaves_it(dst: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Any dst: a path inside the folder, or a one-line UsageError."""
    from replay.reproduce import confined_path
    from vkcore.errors import UsageError

    folder = Path("/nonexistent-vkcap-folder")
    try:
        path = confined_path(folder, dst, Path("scenario.json"), "b")
    except UsageError as exc:
        assert "leaves its folder" in exc.render()
    else:
        assert folder in path.parents


TEXT = st.text(alphabet=st.characters(blacklist_categories=()), max_size=12)  # lone surrogates and controls too


@settings(max_examples=200, deadline=None)
@given(uid=TEXT, name=TEXT, device=TEXT, trace=TEXT, line=TEXT)
def test_the_readme_of_hostile_trace_text_is_one_printable_line_each(uid: str, name: str, device: str, trace: str,
                                                                     line: str) -> None:
    """A uid, shader name, device name, trace path or divergence line holding lone surrogates, control
    characters or newlines: the README encodes as UTF-8, and each untrusted text stays on its line."""
    from replay.extract import readme

    fp = {"device_name": device, "driver_name": device, "driver_info": device}
    doc = {"trace": trace or "t.vkt", "frame": 1, "frame_id": 1, "command": 2, "kind": "dispatch_compute",
           "name": name, "vkcap": "x", "recorded_device": fp, "extract_device": fp,
           "inputs": {uid: "differs"}, "expected": {uid: f"the boundary of {name}"},
           "candidate_shaders": {uid: {"spirv": f"shaders/{uid}.spv", "source": "s", "from": trace}},
           "divergence": {"line": line, "live": fp, "segment": None, "replaced_shaders": {uid: trace},
                          "found_by": name}}
    text = readme(doc, Path("bug"))
    text.encode("utf-8")
    assert not any(ord(c) < 0x20 and c != "\n" for c in text)
    assert len(text.splitlines()) == len(readme({**doc, "name": "n", "trace": "t.vkt", "inputs": {"u": "differs"},
                                                 "expected": {"u": "e"}, "candidate_shaders": {"u": {
                                                     "spirv": "s", "source": "s", "from": "f"}},
                                                 "recorded_device": {}, "extract_device": {},
                                                 "divergence": {"line": "l", "live": {}, "segment": None,
                                                                "replaced_shaders": {"u": "f"}, "found_by": "n"}},
                                                Path("bug")).splitlines())
