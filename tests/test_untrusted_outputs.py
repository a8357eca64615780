"""Issue #33, "a user's files are sacred": no command deletes or overwrites what vkcap did not write, names
derived from a trace stay inside the output folder, no output is an input, temporary folders go on every
exit path, and the partial file of a killed trim is dealt with by the next one.

Every refusal is asserted as its exact line and exit 2, with the surrounding folder (names, sizes,
mtimes, sha256) identical before and after."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import ADD_FLOAT, REPO, ScenarioBuilder, vkcap, with_repo_path
from vkcore.output_folders import MARKER, SafeNames, confined, safe_stem, unique_stem

TRACES = REPO / "traces"


def snapshot(folder: Path) -> dict[str, tuple[str, int, int, str]]:
    """Every entry under ``folder``: kind, size, mtime and the sha256 of a file's content."""
    found = {}
    for path in sorted(folder.rglob("*")):
        st_ = path.lstat()
        kind = "link" if path.is_symlink() else "dir" if path.is_dir() else "file"
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if kind == "file" else ""
        found[path.relative_to(folder).as_posix()] = (kind, st_.st_size if kind == "file" else 0, st_.st_mtime_ns, digest)
    return found


def run(*args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``vkcap ARGS``, this checkout's, also from another current folder."""
    return vkcap(*args, cwd=cwd, env={"PYTHONPATH": with_repo_path(), **(env or {})})


def in_process(args: list[str | Path], capsys: pytest.CaptureFixture[str], cwd: Path | None = None) -> tuple[int, str]:
    """``vkcap ARGS`` through :func:`vkcap.cli.main` in this process (from ``cwd``): exit code, stderr."""
    from vkcap.cli import main

    capsys.readouterr()
    here = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        code = main([str(a) for a in args])
    finally:
        os.chdir(here)
    return code, capsys.readouterr().err


def refused(args: list[str | Path], line: str, around: Path, cwd: Path | None = None,
            capsys: pytest.CaptureFixture[str] | None = None) -> None:
    """``vkcap ARGS`` exits 2 with exactly ``vkcap: error: LINE`` and changes nothing under ``around``;
    through the real CLI, or in this process when given ``capsys``."""
    before = snapshot(around)
    if capsys is None:
        proc = run(*args, cwd=cwd)
        code, err = proc.returncode, proc.stderr
    else:
        code, err = in_process(args, capsys, cwd)
    assert (code, err.strip()) == (2, f"vkcap: error: {line}"), err
    assert "Traceback" not in err
    assert snapshot(around) == before


# -- 1. extract never writes into a folder that holds anything ---------------------------------------------


@pytest.mark.slow
@pytest.mark.device
def test_extract_refuses_a_folder_that_holds_anything(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's case (``-o`` the folder holding the trace: it used to be emptied), ``-o .`` there, a
    folder of the user's notes, a file, ``--force`` on a folder vkcap did not write, ``extract --segment``
    and ``bisect --extract``: one line each, exit 2, nothing changed."""
    mine = tmp_path / "mytraces"
    mine.mkdir()
    trace = mine / "add.vkt"
    shutil.copy(TRACES / "add.vkt", trace)
    (mine / "notes.txt").write_text("mine")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("keep")
    outside = tmp_path / "add.vkt"
    shutil.copy(TRACES / "add.vkt", outside)
    graph = tmp_path / "graph.vkt"
    shutil.copy(TRACES / "graph_custom.vkt", graph)
    extract = ["extract", "--frame", "0", "--command", "0"]
    refused([*extract[:1], trace, *extract[1:], "-o", mine], f"{mine}: -o: holds {trace}, an input of this command: "
            "write the extract elsewhere", tmp_path)
    refused([*extract[:1], "add.vkt", *extract[1:], "-o", "."], ".: -o: holds add.vkt, an input of this command: "
            "write the extract elsewhere", tmp_path, cwd=mine, capsys=capsys)
    refused([*extract[:1], outside, *extract[1:], "-o", notes], f"{notes}: -o: is a folder that is not empty: refusing "
            "to write into it (choose a new or empty folder)", tmp_path, capsys=capsys)
    refused([*extract[:1], outside, *extract[1:], "-o", notes, "--force"], f"{notes}: -o: is not empty and holds no "
            f"{MARKER} (vkcap did not write it): refusing to replace it", tmp_path, capsys=capsys)
    refused([*extract[:1], outside, *extract[1:], "-o", notes / "todo.txt"], f"{notes / 'todo.txt'}: -o: exists and "
            "is not a folder: refusing to replace it", tmp_path, capsys=capsys)
    refused([*extract[:1], "../add.vkt", *extract[1:], "-o", "."], ".: -o: is a folder that is not empty: refusing "
            "to write into it (choose a new or empty folder)", tmp_path, cwd=notes, capsys=capsys)
    refused(["extract", graph, "--frame", "0", "--command", "0", "--segment", "1", "-o", notes],
            f"{notes}: -o: is a folder that is not empty: refusing to write into it (choose a new or empty folder)",
            tmp_path)
    refused(["bisect", outside, "--extract", notes], f"{notes}: --extract: is a folder that is not empty: refusing to "
            "write into it (choose a new or empty folder)", tmp_path)
    refused(["bisect", trace, "--extract", mine], f"{mine}: --extract: holds {trace}, an input of this command: "
            "write the extract elsewhere", tmp_path, capsys=capsys)


@pytest.mark.slow
@pytest.mark.device
def test_an_empty_folder_or_an_earlier_extract_may_be_used(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``-o .`` into an empty current folder writes there (the folder stays the same folder) with a
    marker listing every entry; again, without ``--force``, it is refused with the hint; ``--force``
    refuses while anything else is in it, and replaces it once it holds only what vkcap wrote."""
    here = tmp_path / "here"
    here.mkdir()
    inode = here.stat().st_ino
    args = ["extract", TRACES / "add.vkt", "--frame", "0", "--command", "0", "-o", "."]
    proc = run(*args, cwd=here)
    assert proc.returncode == 0, proc.stderr
    assert here.stat().st_ino == inode
    marker = json.loads((here / MARKER).read_text())
    assert (marker["tool"], marker["what"]) == ("vkcap", "extract")
    assert sorted(marker["entries"]) == sorted(p.relative_to(here).as_posix() for p in here.rglob("*")
                                               if p.name != MARKER)
    assert [p.name for p in tmp_path.iterdir()] == ["here"]  # no staging folder left beside it
    refused(args, ".: -o: is a folder that is not empty: refusing to write into it (it holds an earlier extract: "
            "--force replaces it)", tmp_path, cwd=here, capsys=capsys)
    refused(["bisect", TRACES / "add.vkt", "--extract", "."], ".: --extract: is a folder that is not empty: refusing "
            "to write into it (it holds an earlier extract: --force replaces it)", tmp_path, cwd=here, capsys=capsys)
    # no divergence on any device within the tolerance measured across drivers (lavapipe to NVIDIA: 1.43e-6)
    assert in_process(["bisect", TRACES / "add.vkt", "--extract", ".", "--force", "--atol", "2e-6"], capsys, here)[0] == 0
    (here / "inputs" / "mine.txt").write_text("mine")
    refused([*args, "--force"], ".: -o: holds 'inputs/mine.txt', which vkcap did not write: refusing to replace it",
            tmp_path, cwd=here, capsys=capsys)
    (here / "inputs" / "mine.txt").unlink()
    os.symlink("/etc", here / "link")
    refused([*args, "--force"], ".: -o: holds 'link', which vkcap did not write: refusing to replace it",
            tmp_path, cwd=here, capsys=capsys)
    (here / "link").unlink()
    (here / "scenario.json").write_text("{}")  # a listed entry, changed: still vkcap's to replace
    code, err = in_process([*args, "--force"], capsys, here)
    assert code == 0, err
    assert here.stat().st_ino == inode and json.loads((here / "scenario.json").read_text())["commands"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["here"]


@pytest.mark.slow
@pytest.mark.device
def test_the_staging_folder_of_a_killed_extract_is_named(tmp_path: Path) -> None:
    """``kill -9`` during an extract leaves its staging folder ``.NAME.vkcap-PID-XXXX`` beside the target;
    the next extract there names it in one warning (the process is gone) and removes nothing; a staging
    folder whose process runs (PID 1) is not named."""
    gone = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)
    left = tmp_path / f".x.vkcap-{gone}-a1b2c3"
    (left / "content" / "inputs").mkdir(parents=True)
    (tmp_path / ".x.vkcap-1-a1b2c3").mkdir()
    proc = vkcap("extract", TRACES / "add.vkt", "--frame", "0", "--command", "0", "-o", tmp_path / "x")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[0] == f"vkcap: a partial folder from an interrupted command: {left}; delete it"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([left.name, ".x.vkcap-1-a1b2c3", "x"])


# -- 2. names derived from a trace ------------------------------------------------------------------------

HOSTILE = ["../../somewhere/NAME", "..\\..\\somewhere\\NAME", "/etc/passwd", ".bashrc", "..", "CON", "nul.txt",
           "a\nb\x01c", "x" * 300, "Same", "same", "[red]bold[/red]", "<img src=x onerror=alert(1)>"]


def hostile_trace(root: Path) -> tuple[Path, list[str]]:
    """A trace whose shader and buffers have the HOSTILE uids (recorded through the real recorder: the
    schema takes any non-empty string as a uid); the dispatch reads the first two and writes the third."""
    b = ScenarioBuilder(root / "scenario")
    shader, a, bb, c = "../../evil/shader", *HOSTILE[:3]
    b.shader(shader, ADD_FLOAT, file="add.comp")
    n = 16
    for uid, values in ((a, np.arange(n, dtype=np.float32)), (bb, np.full(n, 2, np.float32)), (c, None)):
        body = {"uid": uid, "size": n * 4, "shader_access": "readwrite"}
        if values is not None:
            body["src"] = b.npy(f"in{len(b.resources)}.npy", values)
        b.resource("buffer", **body)
    for uid in HOSTILE[3:]:
        b.resource("buffer", uid=uid, size=64, shader_access="readwrite")
    b.dispatch(shader, [(0, 0, a), (0, 1, bb), (0, 2, c)], [n, 1, 1])
    b.dispatch(shader, [(0, 0, HOSTILE[3]), (0, 1, HOSTILE[4]), (0, 2, HOSTILE[5])], [16, 1, 1])
    b.dispatch(shader, [(0, 0, HOSTILE[6]), (0, 1, HOSTILE[7]), (0, 2, HOSTILE[8])], [16, 1, 1])
    b.dispatch(shader, [(0, 0, HOSTILE[9]), (0, 1, HOSTILE[10]), (0, 2, HOSTILE[11])], [16, 1, 1])
    b.dispatch(shader, [(0, 0, HOSTILE[12]), (0, 1, HOSTILE[9]), (0, 2, HOSTILE[10])], [16, 1, 1])
    b.boundary([c], 0)
    trace = root / "hostile.vkt"
    proc = vkcap("record", b.save(), "-o", trace, "--dispatch-level")
    assert proc.returncode == 0, proc.stderr
    return trace, [a, bb, c]


@pytest.mark.slow
@pytest.mark.device
def test_names_from_a_trace_stay_inside_the_extract(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Uids such as ``../../somewhere/NAME``, ``/etc/passwd``, ``CON``, control characters, 300
    characters, two that differ in case only, two that sanitise alike: every extract of the trace's
    dispatches writes only inside its folder, each file named safely and distinctly, and the extract of
    the first dispatch still runs and gives the recorded output."""
    trace, _ = hostile_trace(tmp_path)
    before = snapshot(tmp_path)
    for command in range(5):
        out = tmp_path / "deep" / "er" / f"x{command}"
        args = ["extract", trace, "--frame", "0", "--command", str(command), "-o", out]
        if command == 0:
            proc = vkcap(*args)
            assert proc.returncode == 0, proc.stderr
        else:
            code, err = in_process(args, capsys)
            assert code == 0, err
        for path in out.rglob("*"):
            assert Path(os.path.realpath(path)).is_relative_to(os.path.realpath(out))
            assert not path.name.startswith(".") or path.name == MARKER
            assert len(path.name.encode()) <= 255 and path.name.isprintable() and "\\" not in path.name
        names = [p.name.casefold() for p in (out / "inputs").iterdir()]
        assert len(names) == len(set(names)) == 3
        scenario = json.loads((out / "scenario.json").read_text())
        for resource in scenario["resources"]:
            body = next(iter(resource.values()))
            for key in ("src", "dst"):
                if key in body:
                    assert (out / body[key]).resolve().parent.is_relative_to(out.resolve())
    after = snapshot(tmp_path)
    created = {k for k in after if k not in before}
    assert all(k.startswith("deep") for k in created)  # nothing outside the output folders
    assert {k for k in before} <= set(after)
    first = tmp_path / "deep" / "er" / "x0"
    expected = {p.name: p.read_bytes() for p in (first / "expected").iterdir()}
    assert len(expected) == 3  # every buffer is readwrite: each an output
    ran = tmp_path / "ran"
    proc = vkcap("run", first / "scenario.json", "--output", ran)
    assert proc.returncode == 0, proc.stderr
    assert {p.name: p.read_bytes() for p in ran.iterdir()} == expected


hostile_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=300) | \
    st.sampled_from(["..", ".", "/", "a/../../b", "CON", "con.txt", "LPT9", "\x00", "x" * 400, ".hidden", "a."]) | \
    st.text(alphabet="./\\aA\x00\n~_", min_size=1, max_size=12)


@settings(max_examples=250, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(st.lists(hostile_text, min_size=1, max_size=12), st.sampled_from(["", ".npy", ".spv", ".dds"]))
def test_safe_names_are_confined_distinct_and_stable(raws: list[str], suffix: str) -> None:
    """Any uids (generated: any Unicode text, path-like, reserved, NUL, long): each gets a name that is
    a plain file name inside the folder, distinct from the others (also ignoring case), the same when
    asked again."""
    names = SafeNames()
    given_ = [names.name("data", raw, suffix) for raw in raws]
    folder = Path("/nonexistent-out")
    for raw, name in zip(raws, given_):
        assert names.name("data", raw, suffix) == name
        assert confined(folder, name).parent == folder
        assert name.endswith(suffix) and not name.startswith(".") and len(name.encode()) <= 255
        assert all(c.isascii() and (c.isalnum() or c in "._+-~") for c in name), name
        assert safe_stem(raw).upper().split(".")[0] not in {"CON", "PRN", "AUX", "NUL"}
    assert len({n.casefold() for n in given_}) == len(set(raws))


@settings(max_examples=250, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(st.lists(hostile_text, min_size=2, max_size=8, unique=True))
def test_unique_stems_need_no_state(raws: list[str]) -> None:
    """The heatmaps' names (one file at a time, no shared state): distinct uids, distinct safe names."""
    from replay.heatmap import heatmap_name

    stems = [unique_stem(raw) for raw in raws]
    assert len(set(stems)) == len(raws)
    for raw, stem in zip(raws, stems):
        assert stem == safe_stem(raw) or "~" in stem
        assert confined(Path("/out"), heatmap_name(7, raw)).parent == Path("/out")


@pytest.mark.slow
@pytest.mark.device
@settings(max_examples=200, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(st.lists(hostile_text, min_size=3, max_size=10, unique=True), hostile_text, hostile_text)
def test_an_extracted_scenario_names_only_files_inside_its_folder(uids: list[str], shader_src: str, raw_src: str) -> None:
    """The extracted scenario of resources with generated uids and ``src`` paths (a shader, raw data,
    buffers the command reads and writes): every ``src`` lies inside the folder, every ``dst`` is a
    plain name, distinct from the others, and names the same file as the resource's input."""
    from replay.extract import _scenario

    shader, raw, *buffers = uids
    resources = {shader: {"shader": {"uid": shader, "src": shader_src, "type": "GLSL", "build_options": "-x"}},
                 raw: {"raw_data": {"uid": raw, "src": raw_src}},
                 **{u: {"buffer": {"uid": u, "size": 4, "src": f"../{u}", "dst": "/etc/passwd"}} for u in buffers}}
    meta = {u: {"kind": "buffer"} for u in buffers}
    document = _scenario({"dispatch_compute": {"shader_ref": shader}}, resources, uids, buffers, buffers[::2], meta,
                         SafeNames())
    dsts = []
    for resource in document["resources"]:
        (kind, body), = resource.items()
        assert confined(Path("/out"), body["src"]).is_relative_to("/out")
        if "dst" in body:
            assert body["src"] == f"inputs/{body['dst']}" and confined(Path("/out"), body["dst"]).parent == Path("/out")
            dsts.append(body["dst"].casefold())
        assert "build_options" not in body
    assert len(dsts) == len(set(dsts)) == len(buffers[::2])


@pytest.mark.device
def test_names_of_a_segment_extract_are_safe() -> None:
    """What ``extract --segment`` names after the graph's file and the VGF's module names (the trace's
    content: a VGF module may be called anything) goes through the extract's SafeNames."""
    from replay.extract import embedded_file, shader_file, source_file

    names = SafeNames()
    given_ = [source_file(names, "g::../../m", "../../m.comp"), source_file(names, "g::/etc/m", "/etc/m.comp"),
              source_file(names, "../x/m.comp"), embedded_file(names, "../../../g.segment1.vgf"),
              embedded_file(names, "..\\g.segment1.vgf"), shader_file(names, "../../s"), shader_file(names, "/s")]
    for name in given_:
        assert confined(Path("/out"), name).is_relative_to("/out")
        assert ".." not in Path(name).parts and not Path(name).name.startswith(".")
    assert len(set(given_)) == len(given_)


@pytest.mark.parametrize("relative", ["", "../x", "/etc/passwd", "a/../../x", "x\x00y", "."])
def test_confined_refuses_what_would_leave_the_folder(relative: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        confined(tmp_path, relative)


# -- 3. trim onto a file that is not a trace, and 4. no output is an input ---------------------------------


@pytest.mark.device
def test_trim_replaces_only_a_trace_and_never_its_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    trace = tmp_path / "add.vkt"
    shutil.copy(TRACES / "add.vkt", trace)
    refused(["trim", trace, "--frames", "1-", "-o", notes], f"{notes}: -o: exists and is not a vkcap trace: refusing "
            "to replace it (delete it, or choose another name)", tmp_path)
    refused(["trim", trace, "--frames", "1-", "-o", trace], f"{trace}: -o: is the trace being trimmed ({trace}): write "
            "the trimmed trace to another file", tmp_path, capsys=capsys)
    os.link(trace, tmp_path / "hard.vkt")
    refused(["trim", trace, "--frames", "1-", "-o", tmp_path / "hard.vkt"], f"{tmp_path / 'hard.vkt'}: -o: is the "
            f"trace being trimmed ({trace}): write the trimmed trace to another file", tmp_path, capsys=capsys)


INCLUDING = """#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer C { float c[]; };
void main() { c[gl_GlobalInvocationID.x] = SCALE; }
"""


@pytest.mark.device
def test_run_refuses_a_dst_that_is_an_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A ``dst`` naming the scenario, a shader source, a file it includes, a ``src`` or another ``dst``."""
    b = ScenarioBuilder(tmp_path)
    b.file("common.glsl", "#define SCALE 2.0\n")
    b.shader("s", INCLUDING)
    b.buffer("a", 64, np.zeros(16, np.float32))
    b.buffer("c", 64, dst="c.npy")
    b.buffer("d", 64, dst="d.npy")
    b.dispatch("s", [(0, 0, "c")], [16, 1, 1])
    scenario = b.save()
    assert in_process(["run", scenario, "--output", tmp_path / "ok"], capsys)[0] == 0
    shutil.rmtree(tmp_path / "ok")
    cases = [("scenario.json", "the scenario itself"), ("s.comp", "resources[0].shader.src, a file the scenario reads"),
             ("common.glsl", "a file resources[0].shader.src includes"),
             ("a.npy", "resources[1].buffer.src, a file the scenario reads"),
             ("d.npy", "resources[2].buffer.dst too")]
    for dst, what in cases:
        document = json.loads(scenario.read_text())
        document["resources"][3 if dst == "d.npy" else 2]["buffer"]["dst"] = dst
        if dst == "d.npy":
            document["resources"][2]["buffer"]["dst"] = "d.npy"
        scenario.write_text(json.dumps(document))
        place = "resources[3].buffer.dst" if dst == "d.npy" else "resources[2].buffer.dst"
        refused(["run", scenario], f"{scenario}: {place}: {tmp_path / dst}: is {what}: refusing to overwrite it",
                tmp_path, capsys=None if dst == "scenario.json" else capsys)


def test_suite_run_refuses_an_output_that_is_an_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(TRACES / "add.vkt", suite / "add.vkt")
    manifest = suite / "suite.toml"
    manifest.write_text('[[traces]]\npath = "add.vkt"\n')
    refused(["suite", "run", manifest, "--json", manifest], f"{manifest}: --json: is the suite's manifest, an input "
            "of this command: refusing to overwrite it", tmp_path)
    refused(["suite", "run", manifest, "--html", suite / "add.vkt"], f"{suite / 'add.vkt'}: --html: is one of the "
            "suite's traces, an input of this command: refusing to overwrite it", tmp_path, capsys=capsys)
    refused(["suite", "run", suite, "--junit", suite / "add.vkt"], f"{suite / 'add.vkt'}: --junit: is one of the "
            "suite's traces, an input of this command: refusing to overwrite it", tmp_path, capsys=capsys)
    refused(["suite", "run", manifest, "--json", tmp_path / "r", "--html", tmp_path / "r"],
            f"{tmp_path / 'r'}: --html: is also --json: name two different files", tmp_path, capsys=capsys)


# -- 5. temporary folders ---------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.device
def test_temporary_folders_go_on_every_exit_path(tmp_path: Path) -> None:
    """With TMPDIR a fresh folder, it is empty after each command: replay --html (passing, refused,
    interrupted), suite run --html with two workers, extract (done, refused), trim."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {"TMPDIR": str(tmp)}
    work = tmp_path / "work"
    work.mkdir()
    notes = work / "notes.vkt"
    notes.write_text("not a trace")
    # add.vkt within the tolerance measured across drivers (lavapipe to NVIDIA: 1.43e-6), so every device passes
    (work / "suite.toml").write_text("".join(f'[[traces]]\npath = "{TRACES / "add.vkt"}"\nresources.out = {{ atol = 2e-6 }}\n'
                                             for _ in range(2)))
    commands = [
        (0, ["replay", TRACES / "add.vkt", "--html", work / "r.html", "--atol", "2e-6"]),
        (2, ["replay", notes, "--html", work / "r2.html"]),
        (2, ["replay", TRACES / "add.vkt", "--html", work / "r3.html", "--top", "x"]),
        (0, ["suite", "run", work / "suite.toml", "--html", work / "s.html", "-j", "2", "--allow-outside-manifest"]),
        (0, ["extract", TRACES / "add.vkt", "--frame", "0", "--command", "0", "-o", work / "x"]),
        (2, ["extract", TRACES / "add.vkt", "--frame", "0", "--command", "1", "-o", work / "y"]),
        (0, ["trim", TRACES / "add.vkt", "--frames", "0-1", "-o", work / "t.vkt"]),  # copied: no replay, any device
    ]
    for code, args in commands:
        proc = vkcap(*args, env=env)
        assert proc.returncode == code, (args, proc.stderr)
        assert list(tmp.iterdir()) == [], args
    # interrupted: Ctrl-C (SIGINT to vkcap alone) once a temporary folder exists: replaying the 100-frame
    # trace with --html; a suite run with --html and two workers, each replaying (their own folders too)
    for args, folders in ((["replay", TRACES / "heat.vkt", "--html", work / "i.html"], 1),
                          (["suite", "run", work / "suite.toml", "--html", work / "j.html", "-j", "2",
                            "--allow-outside-manifest"], 3)):
        proc = subprocess.Popen([sys.executable, "-m", "vkcap", *map(str, args)], env={**os.environ, **env},
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while len(list(tmp.iterdir())) < folders and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        proc.send_signal(signal.SIGINT)
        err = proc.communicate(timeout=60)[1]
        assert proc.returncode == 0 or (proc.returncode, err.strip().splitlines()[-1]) == (130, "vkcap: interrupted"), err
        assert list(tmp.iterdir()) == [], args


# -- 6. the partial file of a killed trim ------------------------------------------------------------------


def big_trace(root: Path) -> Path:
    """A trace holding 32 MiB of incompressible data, for a trim that takes long enough to be killed."""
    b = ScenarioBuilder(root / "big")
    n = 8 << 20
    b.file("touch.comp", "#version 450\nlayout(local_size_x = 1) in;\n"
           "layout(set = 0, binding = 0) buffer B { uint b[]; };\nvoid main() { b[0] += 1u; }\n")
    b.resources.append({"shader": {"uid": "touch", "src": "touch.comp", "type": "GLSL"}})
    b.buffer("big", n * 4, np.random.default_rng(1).integers(0, 2**32, size=n, dtype=np.uint32))
    for k in range(3):
        b.dispatch("touch", [(0, 0, "big")], [1, 1, 1])
        b.boundary(["big"], k)
    trace = root / "big.vkt"
    proc = vkcap("record", b.save(), "-o", trace)
    assert proc.returncode == 0, proc.stderr
    return trace


@pytest.mark.slow
@pytest.mark.device
def test_a_killed_trim_leaves_a_partial_file_the_next_trim_removes(tmp_path: Path) -> None:
    """``kill -9`` during a trim leaves its ``.NAME.PID.RANDOM.partial``; the next trim to the same
    ``-o`` removes it (its name, a trace that says it was trimmed, the PID gone) and says so. Named in
    one warning and left as they are: a trim's partial whose PID runs (PID 1), a killed recording's
    partial (its frames are recoverable) whose PID is gone; a file of another target's pattern is not
    touched."""
    trace = big_trace(tmp_path)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "t.vkt"
    proc = subprocess.Popen([sys.executable, "-m", "vkcap", "trim", str(trace), "--frames", "1-", "-o", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    partial: list[Path] = []
    while time.monotonic() < deadline and proc.poll() is None:
        partial = [p for p in out_dir.iterdir() if p.name.endswith(".partial") and p.stat().st_size > (1 << 20)]
        if partial:
            break
        time.sleep(0.002)
    assert partial, "the trim ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert [p.name for p in out_dir.iterdir()] == [partial[0].name] and partial[0].name.startswith(f".t.vkt.{proc.pid}.")
    running = out_dir / ".t.vkt.1.0123456789ab.partial"
    shutil.copy(partial[0], running)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    recording = out_dir / f".t.vkt.{int(gone.stdout)}.0123456789ab.partial"
    shutil.copy(TRACES / "add.vkt", recording)
    other = out_dir / ".other.vkt.99999999.0123456789ab.partial"
    other.write_bytes(b"VKCAPTRC")
    kept = {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in (running, recording, other)}
    done = vkcap("trim", trace, "--frames", "2", "-o", out)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert f"vkcap: a partial file from an interrupted command: {running}; delete it (unless process 1 still writes it)" \
        in lines
    assert f"vkcap: a partial file from an interrupted command: {recording}; delete it (unless process " \
        f"{int(gone.stdout)} still writes it)" in lines
    assert f"vkcap: removed {partial[0]}: the partial trace of an interrupted command (process {proc.pid}) writing " \
        f"{out}" in lines
    assert sorted(p.name for p in out_dir.iterdir()) == sorted([running.name, recording.name, other.name, "t.vkt"])
    assert {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in (running, recording, other)} == kept
    # record to that -o names them too, and removes nothing
    b = ScenarioBuilder(tmp_path / "small")
    b.shader("add", ADD_FLOAT).buffer("a", 64, np.ones(16, np.float32)).buffer("b", 64, np.ones(16, np.float32))
    b.buffer("c", 64).dispatch("add", [(0, 0, "a"), (0, 1, "b"), (0, 2, "c")], [16, 1, 1])
    recorded = vkcap("record", b.save(), "-o", out)
    assert recorded.returncode == 0, recorded.stderr
    assert f"vkcap: a partial file from an interrupted command: {recording}; delete it (unless process " \
        f"{int(gone.stdout)} still writes it)" in recorded.stderr.splitlines()
    assert sorted(p.name for p in out_dir.iterdir()) == sorted([running.name, recording.name, other.name, "t.vkt"])


@pytest.mark.slow
@pytest.mark.device
def test_a_report_replaces_only_a_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--json, --junit and --html of replay, diff, bisect and suite run refuse an existing file that is not a
    vkcap report (one line, exit 2, the file unchanged); a report of vkcap's, marked or written before the
    mark existed, is replaced; an empty file may be used."""
    work = tmp_path / "work"
    work.mkdir()
    notes = work / "notes.txt"
    notes.write_text("my notes\n")
    add = TRACES / "add.vkt"
    (work / "suite.toml").write_text(f'[[traces]]\npath = "{add}"\nresources.out = {{ atol = 2e-6 }}\n')
    why = "exists and is not a vkcap report: refusing to replace it (delete it, or choose another name)"
    for command in (["replay", add], ["diff", add, add], ["bisect", add],
                    ["suite", "run", work / "suite.toml", "--allow-outside-manifest"]):
        for flag in ("--json", "--junit", "--html"):
            refused([*command, flag, notes], f"{notes}: {flag}: {why}", work, capsys=capsys)
    marked = {flag: work / f"r{flag[2:]}" for flag in ("--json", "--junit", "--html")}
    args = [a for flag, path in marked.items() for a in (flag, path)]
    assert in_process(["replay", add, "--atol", "2e-6", *args], capsys)[0] == 0
    assert json.loads(marked["--json"].read_text())["generator"] == "vkcap"
    assert b"<!-- generator: vkcap -->" in marked["--junit"].read_bytes()
    assert b'<meta name="generator" content="vkcap">' in marked["--html"].read_bytes()
    marked["--json"].write_text('{\n  "trace": "x",\n  "frames": []\n}\n')  # a report from before the mark
    (work / "empty.json").write_text("")
    assert in_process(["replay", add, "--atol", "2e-6", *args, "--json", work / "empty.json"], capsys)[0] == 0
    assert in_process(["suite", "run", work / "suite.toml", "--allow-outside-manifest", *args], capsys)[0] == 0
    assert json.loads(marked["--json"].read_text())["generator"] == "vkcap"
    assert notes.read_text() == "my notes\n"
