"""A trace is self-contained and confined (#33, item 1 and parts of 6 and 8).

A forged trace (a real recording whose stored portable scenario or embedded files are rewritten with
capture's writer) must never make vkcap read a host path, pass an option to the compiler outside the
allow-list, include a host file, follow or create a symbolic link, or fill TMPDIR; each refusal is one
line naming the trace and the JSON path, exit 2, and nothing around the trace changes. Special files
(FIFOs, devices, /proc files) are refused wherever a user names one.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from capture.reader import TraceReader
from capture.writer import TraceWriter
from tests.builders import ScenarioBuilder, vkcap
from vkcore.errors import ScenarioError
from vkcore.paths import FileTooLarge, NotARegularFile, check_regular, read_regular
from vkcore.scenario.confine import check_confined, path_problem
from vkcore.scenario.build_options import ALLOWED_FLAGS, BuildOptionsError, parse_build_options
from vkcore.shaders.includes import check_includes, include_names

SHADER = """#version 450
#extension GL_GOOGLE_include_directive : require
#include "inc.glsl"
layout(local_size_x = 1) in;
layout(push_constant) uniform P { float k; };
layout(set = 0, binding = 0) buffer C { float c[]; };
void main() { c[gl_GlobalInvocationID.x] += k + ONE; }
"""
PC = 2  # resources[2] is the raw_data push constants


def make_scenario(root: Path) -> Path:
    b = ScenarioBuilder(root)
    b.file("inc.glsl", "#define ONE 1.0\n")
    b.shader("acc", SHADER, push_constants_size=4, build_options="-DTWO=2")
    b.buffer("buf", 16, np.zeros(4, np.float32))
    b.raw("pc", np.array([2.0], np.float32))
    for f in range(3):
        b.dispatch("acc", [(0, 0, "buf")], [4, 1, 1], push_data_ref="pc")
        b.boundary(["buf"], f)
    return b.save()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("confine")
    scenario = make_scenario(root / "scenario")
    trace = root / "base.vkt"
    proc = vkcap("record", scenario, "-o", trace)
    assert proc.returncode == 0, proc.stderr
    return trace


def forge(source: Path, target: Path, *, document: Callable[[dict[str, Any]], None] | None = None,
          drop_spirv: bool = False, files: dict[str, bytes] | None = None,
          extra_files: list[tuple[str, str]] = ()) -> Path:
    """Copy ``source`` to ``target`` record by record: ``document`` edits the portable scenario, ``files``
    replaces embedded files' contents by name, ``extra_files`` adds entries ``(name, existing name)``
    sharing an existing file's blob, ``drop_spirv`` leaves out the recorded SPIR-V (so GLSL is compiled)."""
    with TraceReader(source) as reader, TraceWriter(target) as writer:
        for key in reader.blob_keys():
            writer.write_prepared(reader.read_prepared(key))
        file_bodies: dict[str, dict[str, Any]] = {}
        for _, body in reader.metas():
            kind = body.pop("kind")
            if kind == "spirv" and drop_spirv:
                continue
            if kind == "scenario" and document is not None:
                doc = json.loads(body["portable"])
                document(doc)
                body["portable"] = json.dumps(doc)
            if kind == "file":
                file_bodies[body["name"]] = dict(body)
                if files and body["name"] in files:
                    data = files[body["name"]]
                    body.pop("npy_header", None)
                    body["blob"], body["size"] = writer.put_blob(data), len(data)
            writer.add_meta(kind, body)
        for name, like in extra_files:
            writer.add_meta("file", {**file_bodies[like], "name": name})
    return target


def snapshot(folder: Path) -> dict[str, tuple[int, int, str]]:
    """Every entry under ``folder``: size, mtime and content hash (what a command must leave as it was)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        st = p.lstat()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() and not p.is_symlink() else ""
        out[str(p.relative_to(folder))] = (st.st_size, st.st_mtime_ns, digest)
    return out


def error_of(proc: Any) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    return lines[0]


def rebuild_error(trace: Path, folder: Path) -> str:
    """The one line :func:`rebuild_scenario` refuses ``trace`` with (in-process: what replay, bisect,
    extract and trim all call, each tested once through the CLI)."""
    from capture.trace import Trace
    from replay.replayer import rebuild_scenario
    from vkcore.errors import TraceError

    with Trace.open(trace) as t, pytest.raises(TraceError) as caught:
        rebuild_scenario(t, folder)
    return caught.value.render()


COMMANDS: dict[str, Callable[[Path, Path], list[Any]]] = {
    "replay": lambda t, out: ["replay", t],
    "bisect": lambda t, out: ["bisect", t, "--no-isolate"],
    "extract": lambda t, out: ["extract", t, "--frame", "1", "--command", "0", "-o", out / "extracted"],
    "trim": lambda t, out: ["trim", t, "--frames", "1-2", "-o", out / "trimmed.vkt"],
}


# ---------------------------------------------------------------------------------------------------------
# 1, 6: no path stored in a trace is opened on the host; the message does not tell whether it exists
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.device
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_absolute_src_is_refused_by_every_command_that_materialises(recorded: Path, tmp_path: Path, command: str) -> None:
    host = tmp_path / "host.npy"
    np.save(host, np.array([1000.0], np.float32))  # would be used as push constants
    trace = forge(recorded, tmp_path / "forged.vkt",
                  document=lambda d: d["resources"][PC]["raw_data"].update(src=str(host)))
    out = tmp_path / "out"
    out.mkdir()
    before = snapshot(tmp_path)
    proc = vkcap(*COMMANDS[command](trace, out), timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert error_of(proc) == (f"vkcap: error: {trace}: resources[{PC}].raw_data.src: is an absolute path; "
                              "a trace's paths are relative to its own files")
    assert snapshot(tmp_path) == before


@pytest.mark.device
def test_diff_compares_without_reading_a_host_path(recorded: Path, tmp_path: Path) -> None:
    """``diff`` compares the recorded data only: a src naming a FIFO neither hangs it nor is opened."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    trace = forge(recorded, tmp_path / "forged.vkt",
                  document=lambda d: d["resources"][PC]["raw_data"].update(src=str(fifo)))
    before = snapshot(tmp_path)
    proc = vkcap("diff", recorded, trace, timeout=60)
    assert proc.returncode in (0, 1, 2) and "Traceback" not in proc.stderr, proc.stderr
    assert snapshot(tmp_path) == before


@pytest.mark.device
def test_the_message_is_the_same_whether_the_host_path_exists(recorded: Path, tmp_path: Path) -> None:
    """Refused from the string alone: the message names no path and is the same for an existing file, a
    missing one and one that cannot be read."""
    def message(src: str) -> str:
        trace = forge(recorded, tmp_path / "forged.vkt", document=lambda d: d["resources"][PC]["raw_data"].update(src=src))
        return rebuild_error(trace, tmp_path / "rebuilt")

    absolute = {message(src) for src in ("/etc/shadow", "/nonexistent/x.npy", "/etc/hostname")}
    up = {message(src) for src in ("../../etc/passwd", "../nonexistent.npy", "a/../../b.npy")}
    assert len(absolute) == len(up) == 1
    assert absolute.pop().endswith(f"resources[{PC}].raw_data.src: is an absolute path; a trace's paths are relative to its own files")
    assert up.pop().endswith(f"resources[{PC}].raw_data.src: goes up with '..'; a trace's paths stay inside its own files")


@pytest.mark.device
@pytest.mark.parametrize("field, value, message", [
    ("include_dirs", ["/etc"], "resources[0].shader.include_dirs[0]: is an absolute path"),
    ("include_dirs", ["../.."], "resources[0].shader.include_dirs[0]: goes up with '..'"),
    ("src", "../buf.npy", "resources[1].buffer.src: goes up with '..'"),
    ("src", "buf.npy\0/x", "resources[1].buffer.src: holds a NUL character"),
    ("src", "x\\..\\y", "resources[1].buffer.src: holds a backslash"),
])
def test_every_path_field_is_confined(recorded: Path, tmp_path: Path, field: str, value: Any, message: str) -> None:
    index = 0 if field == "include_dirs" else 1
    kind = "shader" if index == 0 else "buffer"
    trace = forge(recorded, tmp_path / "forged.vkt", document=lambda d: d["resources"][index][kind].update({field: value}))
    assert rebuild_error(trace, tmp_path / "rebuilt").startswith(f"{trace}: {message}")
    assert not (tmp_path / "rebuilt").exists()  # refused before anything is written


@pytest.mark.device
@pytest.mark.parametrize("dst", ["/tmp/vkcap-never-written.npy", "../../x.npy", "a\0b.npy"])
def test_a_traces_dst_never_reaches_a_path(recorded: Path, tmp_path: Path, dst: str) -> None:
    """A recording keeps the dst its user wrote (absolute ones too); a rebuilt scenario has none."""
    from capture.trace import Trace
    from replay.replayer import rebuild_scenario

    trace = forge(recorded, tmp_path / "forged.vkt", document=lambda d: d["resources"][1]["buffer"].update(dst=dst))
    with Trace.open(trace) as t:
        scenario = rebuild_scenario(t, tmp_path / "rebuilt")
    assert [getattr(r, "dst", "") for r in scenario.resources] == [""] * len(scenario.resources)
    assert not Path("/tmp/vkcap-never-written.npy").exists()


def test_a_nul_in_a_users_dst_is_one_line(tmp_path: Path) -> None:
    scenario = make_scenario(tmp_path / "s")
    doc = json.loads(scenario.read_text())
    doc["resources"][1]["buffer"]["dst"] = "a\0b.npy"
    scenario.write_text(json.dumps(doc))
    proc = vkcap("run", scenario)
    assert proc.returncode == 2 and error_of(proc) == f"vkcap: error: {scenario}: resources[1].buffer.dst: holds a NUL character"


SAFE_PART = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="/\\\0"),
                    min_size=1, max_size=8).filter(lambda s: s not in (".", ".."))


@st.composite
def hostile_paths(draw: Any) -> str:
    parts = draw(st.lists(SAFE_PART, min_size=0, max_size=3))
    kind = draw(st.sampled_from(["absolute", "up", "backslash", "nul", "surrogate"]))
    if kind == "absolute":
        return "/" + "/".join(parts)
    if kind == "up":
        at = draw(st.integers(0, len(parts)))
        return "/".join([*parts[:at], "..", *parts[at:]])
    if kind == "backslash":
        return "\\".join(["", *parts]) or "\\"
    if kind == "nul":
        return "/".join([*parts, "a\0b"])
    return "/".join([*parts, "x\ud800"])


@settings(max_examples=300, deadline=None)
@given(path=hostile_paths(), field=st.sampled_from(["src", "dst", "include_dirs"]))
def test_generated_hostile_paths_are_refused_before_any_file_is_looked_at(path: str, field: str) -> None:
    value: Any = [path] if field == "include_dirs" else path
    document = {"resources": [{"shader": {"uid": "s", field: value}}], "commands": []}
    place = "resources[0].shader." + (f"{field}[0]" if field == "include_dirs" else field)
    with pytest.raises(ScenarioError) as caught:
        check_confined(document, Path("T.vkt"))
    assert caught.value.render().startswith(f"T.vkt: {place}: ")


@settings(max_examples=200, deadline=None)
@given(parts=st.lists(SAFE_PART, min_size=1, max_size=4))
def test_generated_relative_paths_inside_the_folder_are_accepted(parts: list[str]) -> None:
    assert path_problem("/".join(parts)) is None


# ---------------------------------------------------------------------------------------------------------
# 2: #include in a trace's GLSL reaches only the trace's files
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.device
@pytest.mark.parametrize("include, message", [
    ('#include "../../../../../../etc/passwd"', "#include '../../../../../../etc/passwd' goes up with '..'"),
    ('#inc\\\nlude </etc/hostname>', "#include '/etc/hostname' is an absolute path"),
])
def test_a_traces_glsl_includes_no_host_file(recorded: Path, tmp_path: Path, include: str, message: str) -> None:
    source = SHADER.replace('#include "inc.glsl"', include).encode()
    trace = forge(recorded, tmp_path / "forged.vkt", drop_spirv=True, files={"acc.comp": source})
    proc = vkcap("replay", trace, env={"VKCAP_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 2, proc.stderr
    assert error_of(proc).startswith(f"vkcap: error: {trace}: resources[0].shader.src: shader 'acc': {message}")
    assert "root:" not in proc.stderr


def test_an_include_reached_through_an_included_file_is_checked(tmp_path: Path) -> None:
    (tmp_path / "a.glsl").write_text('#include "sub/b.glsl"\n')
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.glsl").write_text('#include "../../x"\n')
    with pytest.raises(ScenarioError, match="goes up with '..'"):
        check_includes(tmp_path / "s.comp", b'#include "a.glsl"\n', tmp_path, [], file=None, place="p", shown="'s'")
    (tmp_path / "sub" / "b.glsl").write_text('#include "c.glsl" // not "../x"\n')
    check_includes(tmp_path / "s.comp", b'#include "a.glsl"\n', tmp_path, [], file=None, place="p", shown="'s'")


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(name=hostile_paths().filter(lambda p: "\0" not in p and '"' not in p and ">" not in p and "\n" not in p),
       form=st.sampled_from(['#include "{}"', "#include <{}>", '  #  include "{}"', '#include \\\n"{}"',
                             '/* x */ #include "{}" // y', '#\\\ninclude <{}>', '\r#include "{}"',
                             '#\\\r\n include "{}"']))
def test_generated_hostile_includes_are_refused(name: str, form: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    folder = tmp_path_factory.getbasetemp()
    text = ("#version 450\n" + form.format(name) + "\nvoid main() {}\n").encode("utf-8", "surrogatepass")
    assert include_names(text)  # the directive is seen however it is spelled
    with pytest.raises(ScenarioError):
        check_includes(folder / "s.comp", text, folder, [], file=None, place="p", shown="'s'")


# ---------------------------------------------------------------------------------------------------------
# 3: build_options only from the allow-list, in traces and in a user's scenario
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.device
def test_a_traces_depfile_option_never_reaches_the_compiler(recorded: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    trace = forge(recorded, tmp_path / "forged.vkt",
                  document=lambda d: d["resources"][0]["shader"].update(build_options=f"--depfile {victim}"))
    shader = tmp_path / "acc.comp"
    shader.write_text(SHADER.replace('#include "inc.glsl"', "#define ONE 1.0"))
    before = snapshot(tmp_path)
    proc = vkcap("replay", trace, "--replace-shader", f"acc={shader}")
    assert proc.returncode == 2
    assert error_of(proc).startswith(f"vkcap: error: {trace}: resources[0].shader.build_options: ")
    assert "'--depfile' is not allowed" in proc.stderr
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("options, message", [
    ("--depfile {victim}", "'--depfile' is not allowed"),
    ("-o {victim}", "'-o' is not allowed"),
    ("-DX='1", "does not split into options: No closing quotation"),
    ("-DX=\0", "holds a NUL character"),
    ("-D X=1 {victim}", "is not allowed"),
    ("-D", "'-D' needs a macro name after it"),
    ("-D1X", "a macro name must be an identifier"),
])
def test_a_users_scenario_with_a_file_naming_option_is_refused(tmp_path: Path, options: str, message: str) -> None:
    """Through the CLI for --depfile (nothing around the scenario changes), in-process for the rest."""
    from vkcore.scenario.load import load_scenario

    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    scenario = make_scenario(tmp_path / "s")
    doc = json.loads(scenario.read_text())
    doc["resources"][0]["shader"]["build_options"] = options.format(victim=victim)
    scenario.write_text(json.dumps(doc))
    before = snapshot(tmp_path)
    if options.startswith("--depfile"):
        proc = vkcap("run", scenario)
        assert proc.returncode == 2
        line = error_of(proc).removeprefix("vkcap: error: ")
    else:
        with pytest.raises(ScenarioError) as caught:
            load_scenario(scenario)
        line = caught.value.render()
    assert line.startswith(f"{scenario}: resources[0].shader.build_options: ") and message in line
    assert snapshot(tmp_path) == before


IDENT = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)
VALUE = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0\r\n"), max_size=8)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.just("D"), IDENT, st.none() | VALUE, st.sampled_from(["-D{}", "-D {}", "--define-macro {}", "--D {}"])),
    st.tuples(st.just("U"), IDENT, st.none(), st.sampled_from(["-U{}", "-U {}", "--undef-macro {}", "--U {}"])),
    st.tuples(st.just("F"), st.sampled_from(sorted(ALLOWED_FLAGS)), st.none(), st.just("{}")),
), max_size=5))
def test_generated_allowed_options_come_out_canonical(items: list[tuple[str, str, str | None, str]]) -> None:
    import shlex

    words, expected = [], []
    for kind, name, value, form in items:
        text = name if value is None else f"{name}={value}"
        words.append(form.replace("{}", shlex.quote(text)) if kind != "F" else name)
        expected.append({"D": f"-D{text}", "U": f"-U{name}", "F": name}[kind])
    assert parse_build_options(" ".join(words)) == tuple(expected)


@settings(max_examples=300, deadline=None)
@given(word=st.text(min_size=1, max_size=12).filter(
    lambda w: not w.startswith(("-D", "-U")) and w not in ALLOWED_FLAGS and w.strip() == w and w),
    before=st.sampled_from(["", "-DA=1 ", "-g "]))
def test_generated_other_words_are_refused(word: str, before: str) -> None:
    import shlex

    with pytest.raises(BuildOptionsError):
        parse_build_options(before + shlex.quote(word))


# ---------------------------------------------------------------------------------------------------------
# 4: the compiler runs under a time limit
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.device
def test_a_compiler_over_its_time_limit_is_one_line(tmp_path: Path) -> None:
    scenario = make_scenario(tmp_path / "s")
    proc = vkcap("run", scenario, env={"VKCAP_CACHE_DIR": str(tmp_path / "cache"), "VKCAP_COMPILER_TIMEOUT": "0.001"})
    assert proc.returncode == 2
    assert error_of(proc) == (f"vkcap: error: {scenario}: resources[0].shader.src: shader compilation took longer "
                              "than 0.001 s and was stopped (VKCAP_COMPILER_TIMEOUT sets the limit)")


# ---------------------------------------------------------------------------------------------------------
# 5: special files are refused, never waited on or read without end
# ---------------------------------------------------------------------------------------------------------

def test_read_regular_refuses_special_files(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero"), Path("/dev/null")):
        with pytest.raises(NotARegularFile):
            read_regular(path, 1 << 20)
        with pytest.raises(NotARegularFile):
            check_regular(path)
    with pytest.raises(NotARegularFile, match="holds more than its size says"):
        read_regular("/proc/self/status", 1 << 20)
    with pytest.raises(IsADirectoryError):
        read_regular(tmp_path, 10)
    big = tmp_path / "big"
    big.write_bytes(b"x" * 101)
    with pytest.raises(FileTooLarge):
        read_regular(big, 100)
    assert read_regular(big, 101) == b"x" * 101
    link = tmp_path / "link"
    link.symlink_to(big)
    with pytest.raises(NotARegularFile, match="symbolic link"):
        read_regular(link, 1000, follow_symlinks=False)
    assert read_regular(link, 1000) == b"x" * 101


@pytest.mark.slow
@pytest.mark.device
def test_run_and_replace_shader_refuse_special_files(recorded: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    proc = vkcap("run", fifo, timeout=30)
    assert proc.returncode == 2 and error_of(proc) == f"vkcap: error: {fifo}: cannot read: a FIFO: not a regular file"
    proc = vkcap("run", "/dev/zero", timeout=30)
    assert proc.returncode == 2 and error_of(proc) == "vkcap: error: /dev/zero: cannot read: a character device: not a regular file"
    proc = vkcap("replay", recorded, "--replace-shader", f"acc={fifo}", timeout=30)
    assert proc.returncode == 2
    assert error_of(proc) == f"vkcap: error: --replace-shader acc={fifo}: cannot read: a FIFO: not a regular file"


@pytest.mark.slow
@pytest.mark.device
def test_a_src_or_include_that_is_a_fifo_is_refused(tmp_path: Path) -> None:
    scenario = make_scenario(tmp_path / "s")
    (tmp_path / "s" / "inc.glsl").unlink()
    os.mkfifo(tmp_path / "s" / "inc.glsl")
    proc = vkcap("run", scenario, env={"VKCAP_CACHE_DIR": str(tmp_path / "cache")}, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    (tmp_path / "s" / "pc.npy").unlink()
    os.mkfifo(tmp_path / "s" / "pc.npy")
    proc = vkcap("run", scenario, timeout=60)
    assert proc.returncode == 2 and error_of(proc).endswith("not a regular file: " + str(tmp_path / "s" / "pc.npy"))


# ---------------------------------------------------------------------------------------------------------
# 7, 8: what a replay writes into TMPDIR is bounded; clashing names are one line
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.device
def test_shared_blob_entries_are_counted_against_the_cap(recorded: Path, tmp_path: Path) -> None:
    trace = forge(recorded, tmp_path / "forged.vkt", extra_files=[(f"copy{n}.bin", "acc.comp") for n in range(4)])
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = vkcap("replay", trace, env={"VKCAP_MATERIALISE_LIMIT": "1000", "TMPDIR": str(tmp)})
    assert proc.returncode == 2
    assert re.fullmatch(rf"vkcap: error: {re.escape(str(trace))}: its embedded files would take \d+ bytes in the "
                        r"temporary folder, more than the 1000 allowed \(set VKCAP_MATERIALISE_LIMIT to allow more\)",
                        error_of(proc))
    assert list(tmp.iterdir()) == []
    proc = vkcap("replay", trace, env={"TMPDIR": str(tmp)})
    assert proc.returncode == 0, proc.stderr
    assert list(tmp.iterdir()) == []


@pytest.mark.device
def test_out_of_space_is_one_line_exit_1_and_the_folder_is_removed(recorded: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    from capture.trace import Trace
    from replay import materialise
    from replay.options import ReplayOptions
    from replay.replayer import ReplaySession

    def full(fd: int, data: Any) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setattr(materialise.os, "write", full)
    with Trace.open(recorded) as trace, pytest.raises(materialise.OutOfSpace) as caught:
        ReplaySession(trace, ReplayOptions(trace=recorded))
    assert caught.value.exit_code == 1
    assert caught.value.render() == (f"{recorded}: no space left in the temporary folder ({tmp}, TMPDIR) while "
                                     "writing its embedded files: No space left on device")
    assert list(tmp.iterdir()) == []


@pytest.mark.slow
@pytest.mark.device
@pytest.mark.parametrize("extra, expected", [
    ([("acc.comp/x", "acc.comp")], "embedded files 'acc.comp' and 'acc.comp/x' clash: 'acc.comp' would be both a "
                                   "file and a folder"),
    ([("spirv", "acc.comp"), ("scenario.json", "inc.glsl"), ("replaced/0/acc.comp", "acc.comp")], None),
])
def test_names_that_clash(recorded: Path, tmp_path: Path, extra: list[tuple[str, str]], expected: str | None) -> None:
    trace = forge(recorded, tmp_path / "forged.vkt", extra_files=extra)
    shader = tmp_path / "acc.comp"
    shader.write_text(SHADER.replace('#include "inc.glsl"', "#define ONE 1.0"))
    proc = vkcap("replay", trace, "--replace-shader", f"acc={shader}", env={"VKCAP_CACHE_DIR": str(tmp_path / "cache")})
    if expected is None:  # vkcap's own files go under other names: the trace replays
        assert proc.returncode == 0, proc.stderr
    else:
        assert proc.returncode == 2 and error_of(proc) == f"vkcap: error: {trace}: {expected}"


@pytest.mark.slow
@pytest.mark.device
def test_lone_surrogates_and_non_utf8_glsl_are_one_line(recorded: Path, tmp_path: Path) -> None:
    trace = forge(recorded, tmp_path / "forged.vkt",
                  document=lambda d: d.update(json.loads(json.dumps(d).replace('"pc"', '"p\\ud800"'))))
    proc = vkcap("replay", trace)
    assert proc.returncode == 2
    assert error_of(proc) == (f"vkcap: error: {trace}: resources[{PC}].raw_data.uid: the trace's scenario does not "
                              "load: holds a lone surrogate (\\ud800-\\udfff without its pair): not a character")
    shader = tmp_path / "bad.comp"
    shader.write_bytes(b"#version 450\n\xff\xfe void main() {}\n")
    proc = vkcap("replay", recorded, "--replace-shader", f"acc={shader}", env={"VKCAP_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 2 and error_of(proc).startswith(f"vkcap: error: --replace-shader acc={shader}: shader compilation failed")


@pytest.mark.device
def test_materialising_never_follows_or_creates_a_link(recorded: Path, tmp_path: Path) -> None:
    from capture.trace import Trace
    from replay.replayer import rebuild_scenario

    rebuilt = tmp_path / "rebuilt"
    with Trace.open(recorded) as t:
        rebuild_scenario(t, rebuilt)
    assert [p for p in rebuilt.rglob("*") if p.is_symlink()] == []
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / "acc.comp").symlink_to(victim)
    before = snapshot(tmp_path)
    assert rebuild_error(recorded, planted) == f"{recorded}: unsafe file name in trace (escapes its folder): 'acc.comp'"
    assert snapshot(tmp_path) == before


NAME_PART = st.sampled_from(["x", "y", "spirv", "scenario.json", "a.npy"])


@settings(max_examples=200, deadline=None)
@given(names=st.lists(st.lists(NAME_PART, min_size=1, max_size=3).map("/".join), min_size=1, max_size=6, unique=True))
def test_generated_name_sets_are_written_whole_or_refused_before_writing(names: list[str],
                                                                        tmp_path_factory: pytest.TempPathFactory) -> None:
    """Names one of which is a folder of another are refused up front; any other set is created whole,
    and vkcap's own names (spirv, scenario.json) are then free."""
    from replay.materialise import check_name_clashes, create_file, fresh_name
    from vkcore.errors import TraceError

    clash = any(b.startswith(a + "/") for a in names for b in names)
    folder = tmp_path_factory.mktemp("names")
    if clash:
        with pytest.raises(TraceError, match="clash"):
            check_name_clashes(names)
        return
    check_name_clashes(names)
    for name in names:
        os.close(create_file(folder, name)[1])
    for own in ("spirv", "scenario.json", "replaced"):
        free = fresh_name(own, names)
        assert not (folder / free).exists() and free.endswith(own)


@pytest.mark.device
def test_too_little_free_space_is_refused_before_writing(recorded: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from capture.trace import Trace
    from replay import materialise
    from replay.replayer import rebuild_scenario

    real = os.statvfs(tmp_path)

    class Full:
        f_bavail, f_frsize, f_flag = 0, real.f_frsize, real.f_flag

    monkeypatch.setattr(materialise.os, "statvfs", lambda path: Full())
    with Trace.open(recorded) as trace, pytest.raises(materialise.OutOfSpace, match=r"has \d+ bytes free"):
        rebuild_scenario(trace, tmp_path / "rebuilt")
    assert list((tmp_path / "rebuilt").iterdir()) == []


@pytest.mark.slow
@pytest.mark.device
def test_a_recording_with_absolute_paths_replays_confined(tmp_path: Path) -> None:
    """What a user's scenario may legitimately hold (an absolute dst, an unused shader whose absolute src
    is missing, an absolute include folder) is recorded as names inside the trace: its replay is not refused."""
    scenario = make_scenario(tmp_path / "s")
    doc = json.loads(scenario.read_text())
    doc["resources"][1]["buffer"]["dst"] = str(tmp_path / "out" / "buf.npy")
    doc["resources"].append({"shader": {"uid": "unused", "src": str(tmp_path / "gone" / "u.comp"), "type": "GLSL",
                                        "include_dirs": [str(tmp_path / "s")]}})
    scenario.write_text(json.dumps(doc))
    (tmp_path / "out").mkdir()
    trace = tmp_path / "t.vkt"
    assert vkcap("record", scenario, "-o", trace).returncode == 0
    before = snapshot(tmp_path)
    proc = vkcap("replay", trace)
    assert proc.returncode == 0, proc.stderr
    assert snapshot(tmp_path) == before


@pytest.mark.slow
@pytest.mark.device
def test_an_include_inside_a_traces_include_and_non_utf8_glsl(recorded: Path, tmp_path: Path) -> None:
    env = {"VKCAP_CACHE_DIR": str(tmp_path / "cache")}
    trace = forge(recorded, tmp_path / "nested.vkt", drop_spirv=True, files={"inc.glsl": b'#include "../../../etc/passwd"\n'})
    proc = vkcap("replay", trace, env=env)
    assert proc.returncode == 2
    assert error_of(proc) == (f"vkcap: error: {trace}: resources[0].shader.src: shader 'acc': #include "
                              "'../../../etc/passwd' goes up with '..'; a trace's paths stay inside its own files")
    trace = forge(recorded, tmp_path / "bytes.vkt", drop_spirv=True,
                  files={"acc.comp": SHADER.encode().replace(b"void main", b"\xff\xfe void main")})
    proc = vkcap("replay", trace, env=env)
    assert proc.returncode == 2
    assert error_of(proc).startswith(f"vkcap: error: {trace}: resources[0].shader.src: shader compilation failed: ERROR: acc.comp:7:")
