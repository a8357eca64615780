"""Suite manifests, result files, tolerance files and numeric flags are untrusted input (#33).

Each class of hostile input is refused in one line naming the file and the key, exit 2, and changes
nothing around it (a snapshot of the folder before and after: names, sizes, modes, mtimes, contents):

- numbers (:data:`vkcore.bounded_numbers.BOUNDS`): NaN, infinities, huge, negative, fractional and
  non-numbers, generated, in flags, manifests, tolerance files and result files;
- manifest paths stay in the manifest's folder, and the refusal reads the same whether the outside path
  exists or not;
- malformed manifests and result files (enumerated);
- result files' ``page`` links: only relative paths inside the folder and http(s) URLs survive;
- ``suite bless`` writes TOML that reads back (generated Unicode text, non-BMP included), keeps comments,
  symbolic links and modes.

Most cases run in-process (the parsers, or :func:`vkcap.cli.main`); every command that reads such input
is also run once through the real command line.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import stat
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replay.suite import TraceResult, load_suite, read_results
from replay.suite_bless import bless, write_manifest
from tests.builders import vkcap
from vkcap.cli import main
from vkcore.bounded_numbers import BOUNDS, check_number, parse_number
from vkcore.errors import UsageError

FAST = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))
OUTSIDE = "leads outside the manifest's folder; --allow-outside-manifest allows it"


def snapshot(folder: Path) -> dict[str, tuple[Any, ...]]:
    """Everything under ``folder``: each entry's kind, size, mode, mtime and content hash (links: target)."""
    out: dict[str, tuple[Any, ...]] = {}
    for path in sorted(folder.rglob("*")):
        st_ = path.lstat()
        rel = str(path.relative_to(folder))
        if stat.S_ISLNK(st_.st_mode):
            out[rel] = ("link", os.readlink(path))
        elif stat.S_ISREG(st_.st_mode):
            out[rel] = ("file", st_.st_size, st_.st_mode, st_.st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest())
        else:
            out[rel] = ("other", st_.st_mode, st_.st_mtime_ns)
    return out


def error(exc: pytest.ExceptionInfo[UsageError]) -> str:
    return str(exc.value)


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    """A suite folder (``tmp_path/suite``) holding ``t.vkt`` (its content is never read here: every
    refusal comes before a replay) and, beside the folder, a secret file."""
    folder = tmp_path / "suite"
    folder.mkdir()
    (folder / "t.vkt").write_bytes(b"VKCAPTRC" + bytes(200))
    (tmp_path / "secret").write_text("the secret text\n")
    return folder


def manifest_in(folder: Path, text: str) -> Path:
    manifest = folder / "suite.toml"
    manifest.write_text(text)
    return manifest


def refused(paths: list[Path], **kw: Any) -> str:
    with pytest.raises(UsageError) as exc:
        load_suite(paths, **kw)
    assert exc.value.exit_code == 2
    assert "\n" not in str(exc.value)
    return str(exc.value)


# --------------------------------------------------------------------------------------------------
# numbers: the one table, the one validator


def test_the_bounds_table_is_data_with_a_reason_and_a_range_for_every_key() -> None:
    for key, bound in BOUNDS.items():
        assert bound.reason and bound.wanted and bound.low < bound.high, key
        inside = bound.low + (1 if bound.whole else 0.5) if bound.low_open else bound.low
        assert check_number(key, int(inside) if bound.whole else float(inside)) == inside, key
        above = bound.high + 1 if bound.whole else bound.high * 2  # a float's largest doubled: infinity
        for outside in (bound.low - 1, above, *([bound.high] if bound.high_open else []),
                        *([bound.low] if bound.low_open else [])):
            with pytest.raises(UsageError, match=rf"^{key}: must be "):
                check_number(key, int(outside) if bound.whole else float(outside))


HOSTILE = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 2**63, 2**64, -(2**63), 10**400, -1, 0, 1, 0.5, 1e308, -0.0]),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.text(max_size=8), st.booleans(), st.none(), st.lists(st.integers(), max_size=2),
)


@FAST
@given(key=st.sampled_from(sorted(BOUNDS)), value=HOSTILE)
def test_check_number_accepts_only_finite_numbers_of_the_right_kind_in_range(key: str, value: Any) -> None:
    bound = BOUNDS[key]
    try:
        got = check_number(key, value, file="f.toml", place=f"x.{key}")
    except UsageError as exc:
        assert str(exc).startswith(f"f.toml: x.{key}: must be {bound.wanted}, got ") and len(str(exc)) < 200
        assert exc.exit_code == 2
        return
    assert not isinstance(value, bool) and isinstance(got, int if bound.whole else float)
    assert math.isfinite(got) and bound.holds(got) and got == value


@FAST
@given(text=st.one_of(st.sampled_from(["nan", "inf", "-inf", "1e999", "2**63", "9" * 5000, "", " ", "0x10", "1_0"]),
                      st.text(max_size=12)))
def test_a_number_on_the_command_line_is_parsed_then_bounded(text: str) -> None:
    for key in ("atol", "jobs", "timeout", "ulp"):
        try:
            got = parse_number(key, text, f"--{key}")
        except UsageError as exc:
            assert str(exc).startswith(f"--{key}: must be {BOUNDS[key].wanted}, got ") and len(str(exc)) < 200
            continue
        assert math.isfinite(got) and BOUNDS[key].holds(got)


# Flags of every command that takes bounded numbers, each refused before any work (in-process).
BAD_FLAGS = [
    (["suite", "run", "{suite}", "--atol", "nan"], "--atol: must be a finite number >= 0, got nan"),
    (["suite", "run", "{suite}", "--rtol", "inf"], "--rtol: must be a finite number >= 0, got inf"),
    (["suite", "run", "{suite}", "--ulp", "-1"], "--ulp: must be a whole number >= 0 and below 2**63, got -1"),
    (["suite", "run", "{suite}", "-j", "100000000"], "-j/--jobs: must be a whole number from 1 to 256, got 100000000"),
    (["suite", "run", "{suite}", "--retries", "11"], "--retries: must be a whole number from 0 to 10, got 11"),
    (["suite", "run", "{suite}", "--shard", "1/999999999999"],
     "--shard: must be a whole number from 1 to 10000, got 999999999999"),
    (["suite", "run", "{suite}", "--shard", "0/3"], "--shard 0/3: expected I/N with 1 <= I <= N"),
    (["suite", "run", "{suite}", "--ray-cache-limit", "nan"],
     "--ray-cache-limit: must be a number of GiB > 0 and at most 1048576 (1 PiB), got nan"),
    (["run", "{suite}/s.json", "--repeat", str(2**63)],
     f"--repeat: must be a whole number from 1 to 1000000, got {2**63}"),
    (["run", "{suite}/s.json", "--timeout", "nan"],
     "--timeout: must be a number of seconds > 0 and at most 604800 (7 days), got nan"),
    (["record", "{suite}/s.json", "--timeout", "1e9", "-o", "{suite}/o.vkt"],
     "--timeout: must be a number of seconds > 0 and at most 604800 (7 days), got 1000000000.0"),
    (["record", "{suite}/s.json", "--checkpoint-every", str(10**23), "-o", "{suite}/o.vkt"],
     f"--checkpoint-every: must be a whole number >= 0 and below 2**31, got {10**23}"),
    (["record", "{suite}/s.json", "--compression-threads", "1000000000", "-o", "{suite}/o.vkt"],
     "--compression-threads: must be -1 (one per core), 0 (none) or a whole number up to 256, got 1000000000"),
    (["replay", "{suite}/t.vkt", "--top", "0"], "--top: must be a whole number from 1 to 1000000, got 0"),
    (["diff", "{suite}/t.vkt", "{suite}/t.vkt", "--atol=-inf"], "--atol: must be a finite number >= 0, got -inf"),
    (["bisect", "{suite}/t.vkt", "--timeout", "inf"],
     "--timeout: must be a number of seconds > 0 and at most 604800 (7 days), got inf"),
]


@pytest.mark.parametrize("argv, message", BAD_FLAGS, ids=[" ".join(a[:2] + a[3:4]) for a, _ in BAD_FLAGS])
def test_bad_numeric_flags_are_one_line(argv: list[str], message: str, suite: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(suite.parent)
    assert main([a.replace("{suite}", str(suite)) for a in argv]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"vkcap: error: {message}"]
    assert snapshot(suite.parent) == before


def test_frame_flags_are_bounded() -> None:
    """``--frame``/``--frames`` (checked once the trace is open, so in-process here): frame numbers."""
    import argparse

    from vkcap.compare_flags import frame_range

    for frame, frames, message in [
        (2**40, None, f"--frame: must be a whole number >= 0 and below 2**31, got {2**40}"),
        (None, "0-" + "9" * 5000, f"--frames '0-{'9' * 5000}': expected A-B with 0 <= A <= B"),
        (None, "0-\u00b2", "--frames '0-\u00b2': expected A-B with 0 <= A <= B"),
        (None, f"0-{2**31}", f"--frames: must be a whole number >= 0 and below 2**31, got {2**31}"),
    ]:
        with pytest.raises(UsageError) as exc:
            frame_range(argparse.Namespace(frame=frame, frames=frames))
        assert error(exc) == message
    assert frame_range(argparse.Namespace(frame=None, frames=f"3-{2**31 - 1}")) == (3, 2**31 - 1)


@pytest.mark.slow
def test_numeric_flags_through_the_real_command_line(suite: Path) -> None:
    """One refusal per command through ``python -m vkcap``: suite run, replay, diff, bisect, run."""
    before = snapshot(suite.parent)
    trace = suite / "t.vkt"
    for args, message in [
        (("suite", "run", suite, "--atol", "nan"), "--atol: must be a finite number >= 0, got nan"),
        (("replay", trace, "--atol", "nan"), "--atol: must be a finite number >= 0, got nan"),
        (("diff", trace, trace, "--ulp", "1.5"), "--ulp: must be a finite number >= 0"),  # argparse: not an int
        (("bisect", trace, "--timeout", "nan"), "--timeout: must be a number of seconds > 0 and at most 604800 (7 days), got nan"),
        (("run", suite / "s.json", "--repeat", "2**63"), "--repeat: must be a whole number from 1 to 1000000, got '2**63'"),
    ]:
        proc = vkcap(*args)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, (args, proc.stderr)
        if args[0] != "diff":
            assert lines == [f"vkcap: error: {message}"], args
        else:  # diff's --ulp is an argparse int: its own one line
            assert lines[0].startswith("vkcap: error: argument --ulp: invalid int value: '1.5'"), lines
    assert snapshot(suite.parent) == before


# --------------------------------------------------------------------------------------------------
# manifests: numbers


TOML_HOSTILE = st.one_of(
    st.sampled_from(["nan", "inf", "-inf", "+inf", "-nan", "-1", "-0.5", "1e400", "9223372036854775807",
                     "18446744073709551616", "1.5", "true", '"1"', "[1]", "{ a = 1 }", "2147483648", "0x7fffffff"]),
    st.integers(min_value=-(2**66), max_value=2**66).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
)


@FAST
@given(key=st.sampled_from(["atol", "rtol", "ulp", "frame"]), value=TOML_HOSTILE)
def test_numbers_in_a_manifest_are_checked_by_the_table(tmp_path_factory: pytest.TempPathFactory, key: str,
                                                        value: str) -> None:
    folder = tmp_path_factory.mktemp("m")
    (folder / "t.vkt").write_bytes(b"x")
    if key == "frame":
        text, place = (f'[[traces]]\npath = "t.vkt"\n[[traces.expect]]\ndevice = "*"\nstatus = "crash"\nframe = {value}\n',
                       "traces[0].expect[0].frame")
    else:
        text, place = f'[[traces]]\npath = "t.vkt"\ntolerance = {{ {key} = {value} }}\n', f"traces[0].tolerance.{key}"
    manifest = manifest_in(folder, text)
    parsed = tomllib.loads(text)
    given_value = (parsed["traces"][0]["expect"][0] if key == "frame" else parsed["traces"][0]["tolerance"])[key]
    try:
        (trace,) = load_suite([manifest])
    except UsageError as exc:
        assert str(exc).startswith(f"{manifest}: {place}: must be {BOUNDS[key].wanted}, got ")
        return
    number = check_number(key, given_value)  # accepted: it is in the table's range
    if key == "frame":
        assert trace.expectations[0].frame == number
    else:
        assert trace.flags == (f"--{key}", repr(number))


def test_a_tolerance_file_with_hostile_numbers_is_refused(tmp_path: Path) -> None:
    from replay.tolerances import load_tolerance_file

    for text, message in [("[default]\natol = nan\n", "default.atol: must be a finite number >= 0, got nan"),
                          ("[resources.c]\nrtol = inf\n", "resources.c.rtol: must be a finite number >= 0, got inf"),
                          ("[default]\nulp = -1\n", "default.ulp: must be a whole number >= 0 and below 2**63, got -1")]:
        path = tmp_path / "tol.toml"
        path.write_text(text)
        with pytest.raises(UsageError) as exc:
            load_tolerance_file(path)
        assert error(exc) == f"{path}: {message}"
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match=r"fifo.toml: is not a regular file \(a FIFO, device or socket\), not a tolerance file$"):
        load_tolerance_file(fifo)  # and it does not block


# --------------------------------------------------------------------------------------------------
# manifests: paths stay in the manifest's folder


def test_a_manifest_path_outside_its_folder_is_refused_alike_whether_it_exists_or_not(suite: Path) -> None:
    """``../secret`` exists, ``../nothing`` does not: the same refusal, without reading either; a link in
    the folder that leads out is refused without looking at its target; an absolute glob is one line."""
    root = suite.parent
    (root / "outside").mkdir()
    (root / "outside" / "x.vkt").write_bytes(b"x")
    (suite / "out-link").symlink_to(root / "outside")
    (suite / "gone-link").symlink_to(root / "no-such-folder")
    (suite / "sec.vkt").symlink_to(root / "secret")
    (suite / "nothing.vkt").symlink_to(root / "no-such-file")
    manifest = manifest_in(suite, "")
    before = snapshot(root)
    seen = {}
    for pattern in ("../secret", "../nothing", "../*", "../no*", "sub/../../secret", "out-link/*.vkt", "gone-link/*.vkt",
                    "sec.vkt", "nothing.vkt", "*.vkt"):
        manifest = manifest_in(suite, f'[[traces]]\npath = "{pattern}"\n')
        message = refused([manifest])
        assert message.startswith(f"{manifest}: traces[0].path: {pattern!r} {OUTSIDE.split(';')[0]}"), message
        assert "secret text" not in message and "no-such" not in message and str(root / "outside") not in message
        seen[pattern] = message.replace(repr(pattern), "P")
    # the same words for an outside path that exists and one that does not
    assert seen["../secret"] == seen["../nothing"] and seen["../*"] == seen["../no*"]
    assert seen["out-link/*.vkt"].replace("out-link", "L") == seen["gone-link/*.vkt"].replace("gone-link", "L")
    assert seen["sec.vkt"].replace("sec", "N") == seen["nothing.vkt"].replace("nothing", "N")
    for pattern in ("/etc/*", str(root / "secret"), str(suite / "t.vkt")):
        manifest = manifest_in(suite, f'[[traces]]\npath = "{pattern}"\n')
        assert refused([manifest]) == (f"{manifest}: traces[0].path: {pattern!r} is absolute: a manifest names its "
                                       "traces relative to its own folder (--allow-outside-manifest allows it)")
    after = snapshot(root)
    del before["suite/suite.toml"], after["suite/suite.toml"]
    assert after == before


def test_inside_links_and_globs_are_fine_and_the_flag_allows_outside(suite: Path) -> None:
    root = suite.parent
    (suite / "sub" / "deep").mkdir(parents=True)
    (suite / "sub" / "deep" / "d.vkt").write_bytes(b"x")
    (suite / "alias.vkt").symlink_to(suite / "t.vkt")
    (suite / "loop").symlink_to(suite)  # ** does not follow links: no loop, nothing twice
    (root / "o.vkt").write_bytes(b"x")
    manifest = manifest_in(suite, '[[traces]]\npath = "**/*.vkt"\n[[traces]]\npath = "./sub/deep/d.vkt"\n')
    assert sorted(str(t.path.relative_to(suite)) for t in load_suite([manifest])) == ["sub/deep/d.vkt", "t.vkt"]
    manifest = manifest_in(suite, f'[[traces]]\npath = "../o.vkt"\n[[traces]]\npath = "{root}/*.vkt"\n')
    assert [t.path.name for t in load_suite([manifest], allow_outside=True)] == ["o.vkt"]


def test_suite_run_never_opens_an_outside_path(suite: Path) -> None:
    """The real CLI: the secret's bytes never reach the output; nothing changes around."""
    manifest = manifest_in(suite, '[[traces]]\npath = "../secret"\n')
    before = snapshot(suite.parent)
    proc = vkcap("suite", "run", manifest, "--json", suite.parent / "never.json")
    assert (proc.returncode, proc.stderr.strip().splitlines(), proc.stdout) == (
        2, [f"vkcap: error: {manifest}: traces[0].path: '../secret' {OUTSIDE}"], "")
    assert snapshot(suite.parent) == before


# --------------------------------------------------------------------------------------------------
# manifests: malformed


def malformed_manifests(folder: Path) -> list[tuple[str | bytes, str]]:
    return [
        ("[[traces]\n", "invalid TOML: Expected ']]' at the end of an array declaration (at line 1, column 9)"),
        ('[[traces]]\npath = "t.vkt"\npath = "u.vkt"\n', "invalid TOML: Cannot overwrite a value (at line 3, column 15)"),
        ("[[traces]]\n", "traces[0].path: a trace path or glob is required"),
        ("[[traces]]\npath = 5\n", "traces[0].path: a trace path or glob is required"),
        ('[[traces]]\npath = ""\n', "traces[0].path: must be a trace path or glob (not empty, no NUL)"),
        ('[[traces]]\npath = "t\\u0000.vkt"\n', "traces[0].path: must be a trace path or glob (not empty, no NUL)"),
        ("traces = 5\n", "traces: must be an array of tables ([[traces]]), got 5"),
        ('traces = "t.vkt"\n', "traces: must be an array of tables ([[traces]]), got 't.vkt'"),
        ("traces = [5]\n", "traces[0]: must be a table, got 5"),
        ('[[traces]]\npath = "t.vkt"\nexpect = 3\n', "traces[0].expect: must be an array of tables ([[traces.expect]]), got 3"),
        ('[[traces]]\npath = "t.vkt"\nexpect = [3]\n', "traces[0].expect[0]: must be a table, got 3"),
        ('[[traces]]\npath = "t.vkt"\ntolerance = 3\n', "traces[0].tolerance: a preset name or a table of atol, rtol and ulp"),
        ('[[traces]]\npath = "t.vkt"\ntolerance = { atl = 1 }\n', "traces[0].tolerance.atl: unknown key 'atl' (known: atol, rtol, ulp)"),
        ('[[traces]]\npath = "t.vkt"\ntolerence = { atol = 1 }\n',
         "traces[0].tolerence: unknown key 'tolerence' (known: path, tolerance, resources, expect)"),
        ('title = "nightly"\n[[traces]]\npath = "t.vkt"\n', "title: unknown key 'title' (known: traces)"),
        ('[[traces]]\npath = "t.vkt"\n[[traces.expect]]\ndevice = "*"\nstatus = "crash"\nfrme = 2\n',
         "traces[0].expect[0].frme: unknown key 'frme' (known: device, status, driver, frame, resources, reason, measured, link)"),
        ('[[traces]]\npath = "t.vkt"\n[[traces.expect]]\ndevice = "*"\nstatus = "crash"\nreason = 5\n',
         "traces[0].expect[0].reason: must be a string, got 5"),
        ('[[traces]]\npath = "t.vkt"\n[[traces.expect]]\ndevice = "*"\nstatus = "crash"\nlink = "javascript:alert(1)"\n',
         "traces[0].expect[0].link: must be an http(s) URL, got 'javascript:alert(1)'"),
        ('[[traces]]\npath = "t.vkt"\n[[traces.expect]]\ndevice = 1\nstatus = "crash"\n',
         "traces[0].expect[0]: needs device (a pattern) and status (one of: pass, diverged, flaky, skip, crash)"),
        ("a = " + "[" * 5000 + "]" * 5000 + "\n", "invalid TOML: nested too deeply"),
        ('[[traces]]\npath = "t.vkt"\n[[traces.expect]]\ndevice = "*"\nstatus = "crash"\ndriver = ">=' + "9" * 5000 + '"\n',
         "traces[0].expect[0].driver: a driver-version range such as \">=580.100, <590\", got '>=" + "9" * 55 + "'..."),
        (b"\xff\xfe[[traces]]\n", "not UTF-8 text (byte 0): not a suite manifest"),
        ("#" * (4 << 20) + "\n", "larger than 4 MiB: too large for a suite manifest"),
        ('[[traces]]\npath = "missing*.vkt"\n', "traces[0].path: no trace matches 'missing*.vkt'"),
        ('[[traces]]\npath = "missing.vkt"\n', "traces[0].path: no trace matches 'missing.vkt'"),
        ('[[traces]]\npath = "adir"\n', f"traces[0].path: {folder / 'adir'}: is a folder, not a trace"),
        ('[[traces]]\npath = "fifo.vkt"\n',
         f"traces[0].path: {folder / 'fifo.vkt'}: is not a regular file (a FIFO, device or socket), not a trace"),
    ]


def test_malformed_manifests_are_one_line_naming_the_key(suite: Path) -> None:
    (suite / "adir").mkdir()
    os.mkfifo(suite / "fifo.vkt")
    cases = malformed_manifests(suite)
    for text, message in cases:
        manifest = suite / "suite.toml"
        manifest.write_bytes(text if isinstance(text, bytes) else text.encode())
        assert refused([manifest]) == f"{manifest}: {message}", message
    os.mkfifo(suite / "m.toml")
    assert refused([suite / "m.toml"]) == f"{suite / 'm.toml'}: is not a regular file (a FIFO, device or socket), not a suite manifest"
    assert refused([suite / "none.toml"]) == f"{suite / 'none.toml'}: no such suite folder or manifest"
    assert len(cases) == 27


def test_links_out_of_a_suite_or_results_folder_are_refused_alike_whether_the_target_exists(suite: Path) -> None:
    """A suite folder's ``*.vkt`` or a results folder's ``*.json`` that is a link out of it is never
    opened (its first bytes would reach the report): one line, the same for a target that exists and
    one that does not; the flag lets a suite folder's links out."""
    root = suite.parent
    results = root / "results"
    results.mkdir()
    messages = []
    for target in (root / "secret", root / "no-such-file"):
        for link in (suite / "x.vkt", results / "x.json"):
            link.unlink(missing_ok=True)
            link.symlink_to(target)
        messages.append(refused([suite]))
        with pytest.raises(UsageError) as exc:
            read_results([results])
        messages.append(error(exc))
    assert messages[0] == messages[2] == f"{suite}: 'x.vkt' is a link leading outside the suite folder; --allow-outside-manifest allows it"
    assert messages[1] == messages[3] == f"{results / 'x.json'}: is a link leading outside the results folder: not read"
    (suite / "x.vkt").unlink()
    (suite / "x.vkt").symlink_to(root / "secret")
    assert [t.path.name for t in load_suite([suite], allow_outside=True)] == ["t.vkt", "x.vkt"]
    (suite / "x.vkt").unlink()
    (suite / "inside.vkt").symlink_to("t.vkt")  # a link inside: fine (the same trace as t.vkt: listed once)
    assert [t.path.name for t in load_suite([suite])] == ["inside.vkt"]


def test_a_folder_suite_refuses_a_fifo_trace_and_bless_a_folder_manifest(suite: Path) -> None:
    os.mkfifo(suite / "fifo.vkt")
    assert refused([suite]) == f"{suite}: {suite / 'fifo.vkt'}: is not a regular file (a FIFO, device or socket), not a trace"
    with pytest.raises(UsageError) as exc:
        bless(suite, [])
    assert error(exc) == f"{suite}: is a folder, not a suite manifest"


def test_malformed_manifests_through_the_real_command_line(suite: Path) -> None:
    """suite run and suite bless, each with a manifest of the wrong shape and one with a NaN tolerance:
    one line, exit 2, nothing written."""
    manifest = manifest_in(suite, "")
    results = suite.parent / "results"
    results.mkdir()
    before = snapshot(suite.parent)
    for text, message in [("traces = 5\n", "traces: must be an array of tables ([[traces]]), got 5"),
                          ('[[traces]]\npath = "t.vkt"\ntolerance = { atol = nan }\n',
                           "traces[0].tolerance.atol: must be a finite number >= 0, got nan")]:
        manifest.write_text(text)
        for args in (("suite", "run", manifest, "--results", results), ("suite", "bless", manifest, "--results", results)):
            proc = vkcap(*args)
            assert (proc.returncode, proc.stderr.strip().splitlines()) == (2, [f"vkcap: error: {manifest}: {message}"]), args
    after = snapshot(suite.parent)
    assert after.pop("suite/suite.toml")[4] == hashlib.sha256(text.encode()).hexdigest()  # as written here, not by vkcap
    before.pop("suite/suite.toml")
    assert after == before


# --------------------------------------------------------------------------------------------------
# result files


GOOD = {"trace": "/x/t.vkt", "device": "GPU", "status": "fail", "outcome": "diverged", "expected": "pass", "frames": 2,
        "seconds": 0.5, "attempts": 1, "first_divergence": 1, "detail": "d", "reason": "", "spread": [], "page": "",
        "driver": "1.0", "host": ""}


def malformed_results() -> list[tuple[str | bytes, str]]:
    def doc(**changes: Any) -> str:
        data = {**GOOD, **changes}
        return json.dumps({k: v for k, v in data.items() if v is not ...})

    return [
        ("not json", "not a suite result file: Expecting value: line 1 column 1 (char 0)"),
        ("[]", "not a suite result file: a JSON object is expected, got list"),
        (doc(trace=...), "trace: must be a string, got nothing"),
        (doc(device=5), "device: must be a string, got 5"),
        (doc(status="great"), "status: must be one of pass, expected, fixed, flaky, fail, skip, got 'great'"),
        (doc(outcome=None), "outcome: must be one of identical, within, diverged, crash, error, skipped, got nothing"),
        (doc(expected="fail"), "expected: must be one of pass, diverged, flaky, skip, crash, got 'fail'"),
        (doc(frames=-1), "frames: must be a whole number >= 0 and below 2**31, got -1"),
        (doc(frames=10**30), "frames: must be a whole number >= 0 and below 2**31, got 1000000000000000000000000000000"),
        (doc(frames="2"), "frames: must be a whole number >= 0 and below 2**31, got '2'"),
        (doc(seconds=1e308 * 10), "not a suite result file: Infinity is not a JSON number"),
        (doc().replace('"seconds": 0.5', '"seconds": NaN'), "not a suite result file: NaN is not a JSON number"),
        (doc(attempts=0), "attempts: must be a whole number from 1 to 11, got 0"),
        (doc(first_divergence=1.5), "first_divergence: must be a whole number >= 0 and below 2**31, got 1.5"),
        (doc(spread=5), "spread: must be a list of at most 11 attempts, got 5"),
        (doc(spread=[{"outcome": "x"}]), "spread[0].outcome: must be one of identical, within, diverged, crash, error, skipped, got 'x'"),
        (doc(spread=[{"max_ulp": -5}]), "spread[0].max_ulp: must be a whole number >= 0 and below 2**63, got -5"),
        (doc(detail=["a"]), "detail: must be a string, got ['a']"),
        (doc().replace('"detail": "d"', '"detail": "\\ud83d"'), "detail: must be text (it holds a lone UTF-16 surrogate)"),
        (doc().replace('"frames": 2', '"frames": ' + "9" * 5000),
         "not a suite result file: Exceeds the limit (4300 digits) for integer string conversion: value has 5000 digits; "
         "use sys.set_int_max_str_digits() to increase the limit"),
        ('{"a": ' * 100_000 + "1" + "}" * 100_000, "not a suite result file: nested too deeply"),
        (" " * (4 << 20) + "{}", "larger than 4 MiB: too large for a suite result file"),
        (b"\xff{}", "not UTF-8 text (byte 0): not a suite result file"),
    ]


def test_malformed_result_files_are_one_line_naming_the_file_and_key(tmp_path: Path) -> None:
    folder = tmp_path / "results"
    folder.mkdir()
    cases = malformed_results()
    for text, message in cases:
        path = folder / "r.json"
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        with pytest.raises(UsageError) as exc:
            read_results([folder])
        assert error(exc) == f"{path}: {message}", message
    path.unlink()
    os.mkfifo(folder / "f.json")
    with pytest.raises(UsageError) as exc:
        read_results([folder])  # and it does not block
    assert error(exc) == f"{folder / 'f.json'}: is not a regular file (a FIFO, device or socket), not a suite result file"
    assert len(cases) == 23


@pytest.mark.slow
@FAST
@given(key=st.sampled_from(["frames", "seconds", "attempts", "first_divergence", "spread.max_ulp", "spread.first_divergence"]),
       value=st.one_of(st.integers(min_value=-(2**70), max_value=2**70), st.floats(allow_nan=False, allow_infinity=False),
                       st.text(max_size=4), st.booleans(), st.lists(st.integers(), max_size=2)))
def test_numbers_in_result_files_are_checked_by_the_table(tmp_path_factory: pytest.TempPathFactory, key: str, value: Any) -> None:
    folder = tmp_path_factory.mktemp("r")
    data = dict(GOOD)
    if key.startswith("spread."):
        data["spread"] = [{"outcome": "diverged", key.split(".")[1]: value}]
    else:
        data[key] = value
    (folder / "r.json").write_text(json.dumps(data))
    bound = {"frames": "frames", "seconds": "seconds", "attempts": "attempts", "first_divergence": "frame",
             "spread.max_ulp": "count", "spread.first_divergence": "frame"}[key]
    try:
        (result,) = read_results([folder])
    except UsageError as exc:
        place = "spread[0]." + key.split(".")[1] if key.startswith("spread.") else key
        assert str(exc).startswith(f"{folder / 'r.json'}: {place}: must be {BOUNDS[bound].wanted}, got ")
        return
    got = result.spread[0][key.split(".")[1]] if key.startswith("spread.") else getattr(result, key)
    assert got == check_number(bound, value)


SAFE_PAGES = ["t.vkt.1a2b3c4d.html", "\u00e9t\u00e9.vkt.1a2b3c4d.html", "sub/t.html", "https://ci.example.com/job/1/page.html", "http://h/x"]
UNSAFE_PAGES = ["javascript:alert(1)", "JavaScript:alert(1)", " javascript:alert(1)", "data:text/html,<b>", "/etc/passwd",
                "../up.html", "sub/../../up.html", "file:///etc/passwd", "//evil.example.com/x", "https://", "vbscript:x",
                "a:b.html", "\\\\host\\share", "t.html\njavascript:x", "https://h/\u202ex", "ftp://h/x", ".", "x/./y"]


@FAST
@given(page=st.one_of(st.sampled_from(SAFE_PAGES + UNSAFE_PAGES), st.text(max_size=20)))
def test_only_relative_pages_inside_the_folder_and_web_urls_survive(tmp_path_factory: pytest.TempPathFactory, page: str,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    from replay.result_files import is_web_url

    folder = tmp_path_factory.mktemp("p")
    path = folder / "r.json"
    path.write_text(json.dumps({**GOOD, "page": page}))
    with caplog.at_level(logging.WARNING, logger="vkcap"):
        caplog.clear()
        try:
            (result,) = read_results([folder])
        except UsageError as exc:  # a page with a lone surrogate: not text at all
            assert str(exc) == f"{path}: page: must be text (it holds a lone UTF-16 surrogate)"
            return
    kept = result.page
    if page in SAFE_PAGES:
        assert kept in (page, str(folder / page))
    if page in UNSAFE_PAGES:
        assert kept == ""
    if kept and not is_web_url(kept):  # a path: inside the results folder
        assert os.path.realpath(kept).startswith(str(folder.resolve()) + os.sep) and ":" not in kept.removeprefix(str(folder))
    if kept:
        assert is_web_url(kept) or kept == str(folder / page)
    dropped = [r.getMessage() for r in caplog.records if "page: dropped" in r.getMessage()]
    assert bool(dropped) == (bool(page) and not kept)
    assert all(m.startswith(f"{path}: page: dropped ") and "\n" not in m for m in dropped)


def test_merge_of_hostile_result_files_through_the_real_command_line(tmp_path: Path) -> None:
    """A javascript: page is dropped with a warning (exit 1: the result failed) and never reaches the
    merged page; a malformed file is one line, exit 2, and nothing is written."""
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "a.json").write_text(json.dumps({**GOOD, "page": "javascript:alert(1)"}))
    before = snapshot(folder)
    proc = vkcap("suite", "merge", folder, "--html", tmp_path / "m.html", "--json", tmp_path / "m.json")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert (f"vkcap: {folder / 'a.json'}: page: dropped 'javascript:alert(1)': neither a relative path inside the results "
            "folder nor an http(s) URL") in proc.stderr.splitlines()
    assert "javascript" not in (tmp_path / "m.html").read_text().lower()
    assert json.loads((tmp_path / "m.json").read_text())["results"][0]["page"] == ""
    (folder / "a.json").unlink()
    (folder / "b.json").write_text(json.dumps({**GOOD, "trace": "/x/u.vkt", "seconds": 1e999}).replace("Infinity", "1e999"))
    before = snapshot(tmp_path)
    proc = vkcap("suite", "merge", folder, "--json", tmp_path / "n.json")
    assert (proc.returncode, proc.stderr.strip().splitlines()) == (
        2, [f"vkcap: error: {folder / 'b.json'}: seconds: must be a finite number of seconds >= 0 and at most 1e9, got inf"])
    assert snapshot(tmp_path) == before


# --------------------------------------------------------------------------------------------------
# bless: tomlkit, round trips, comments, links, modes


BLESS_MANIFEST = '''# owners: gpu-team  \u00e9\U0001F600
[[traces]]  # the one trace
path = "t.vkt"
tolerance = { ulp = 4 }  # kept as written

# expectations
[[traces.expect]]
device = "Other GPU"
status = "diverged"
reason = """a multi-line reason
[[traces]]
that only looks like a header"""

# closing comment
'''


def failed(suite: Path, device: str, detail: str, outcome: str = "diverged", frame: int | None = 1) -> TraceResult:
    return TraceResult(str(suite / "t.vkt"), device, "fail", outcome, "pass", first_divergence=frame, detail=detail)


TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)  # any Unicode scalar value


@settings(max_examples=60, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(device=TEXT, detail=TEXT)
def test_bless_writes_toml_that_reads_back_any_text(tmp_path_factory: pytest.TempPathFactory, device: str, detail: str) -> None:
    folder = tmp_path_factory.mktemp("b")
    (folder / "t.vkt").write_bytes(b"x")
    manifest = manifest_in(folder, BLESS_MANIFEST)
    before, after = bless(manifest, [failed(folder, device, detail)])
    assert before == BLESS_MANIFEST
    write_manifest(manifest, after)
    doc = tomllib.loads(manifest.read_text(encoding="utf-8"))
    measured = (detail or "diverged") + (f" (on {device})" if device else "")
    human = {"device": "Other GPU", "status": "diverged",
             "reason": "a multi-line reason\n[[traces]]\nthat only looks like a header"}
    if device == "Other GPU":  # the expectation that judged it is edited in place: its reason kept
        assert doc["traces"][0]["expect"] == [{**human, "frame": 1, "measured": measured}]
    else:  # a new one for the exact device, first
        assert doc["traces"][0]["expect"] == [{"device": device, "status": "diverged", "frame": 1, "measured": measured},
                                              human]
    assert doc["traces"][0]["tolerance"] == {"ulp": 4}
    for comment in ("# owners: gpu-team  \u00e9\U0001F600", "[[traces]]  # the one trace", "# kept as written",
                    "# expectations", "# closing comment"):
        assert comment in after
    assert after.rstrip().endswith("# closing comment")
    load_suite([manifest])  # and suite run reads it


def test_bless_keeps_a_symlinked_manifest_a_link_and_its_mode(suite: Path) -> None:
    """The real CLI: a manifest reached through a link, mode 0640, blessed with a non-BMP device name:
    the link stays, its target gets the text, the mode stays, the text reads back; nothing else changes."""
    real = suite / "real"
    real.mkdir()
    manifest_in(real, '# ours\n[[traces]]\npath = "t.vkt"\n')  # its paths: relative to the link's folder
    os.chmod(real / "suite.toml", 0o640)
    (suite / "suite.toml").symlink_to("real/suite.toml")
    results = suite.parent / "results"
    results.mkdir()
    device = "GPU \U0001F600 \"quoted\" \\ [x]"
    (results / "r.json").write_text(json.dumps({**GOOD, "trace": str(suite / "t.vkt"), "device": device,
                                                "detail": "frame 1: c: DIVERGED \U0001F600"}))
    before = snapshot(suite.parent)
    proc = vkcap("suite", "bless", suite / "suite.toml", "--results", results)
    assert proc.returncode == 0, proc.stderr
    after = snapshot(suite.parent)
    assert (suite / "suite.toml").is_symlink() and os.readlink(suite / "suite.toml") == "real/suite.toml"
    assert stat.S_IMODE((real / "suite.toml").stat().st_mode) == 0o640
    text = (real / "suite.toml").read_text(encoding="utf-8")
    assert text.startswith("# ours\n[[traces]]\npath = \"t.vkt\"\n")
    assert tomllib.loads(text)["traces"][0]["expect"] == [
        {"device": device, "status": "diverged", "frame": 1, "measured": f"frame 1: c: DIVERGED \U0001F600 (on {device}, driver 1.0)"}]
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    # the target's folder changed only its mtime: a file in it was replaced
    assert changed == {"suite/real/suite.toml", "suite/real"} and before["suite/real"][:2] == after["suite/real"][:2]
    assert "+frame = 1" in proc.stdout


def test_bless_edits_inline_tables_in_place_and_refuses_outside_paths(suite: Path) -> None:
    manifest = manifest_in(suite, '# c\ntraces = [{ path = "t.vkt", expect = [{ device = "*", status = "crash" }] }]\n')
    _, after = bless(manifest, [failed(suite, "GPU", "d")])
    assert after.startswith("# c\ntraces = [{") and "\n[[" not in after
    assert tomllib.loads(after)["traces"][0]["expect"] == [
        {"device": "*", "status": "diverged", "frame": 1, "measured": "d (on GPU)"}]  # "*" matched GPU: edited, still "*"
    fixed = TraceResult(str(suite / "t.vkt"), "GPU", "fixed", "identical", "crash")
    assert tomllib.loads(bless(manifest, [fixed])[1])["traces"] == [{"path": "t.vkt"}]
    ranged = manifest_in(suite, '[[traces]]\npath = "t.vkt"\n[[traces.expect]]\ndevice = "*"\nstatus = "crash"\ndriver = ">=1"\n')
    huge_driver = TraceResult(str(suite / "t.vkt"), "GPU", "fixed", "identical", "crash", driver="9" * 5000)
    assert bless(ranged, [huge_driver])[1] == ranged.read_text()  # no version in it: the range does not hold
    manifest = manifest_in(suite, '[[traces]]\npath = "../secret"\n')
    with pytest.raises(UsageError) as exc:
        bless(manifest, [failed(suite.parent, "GPU", "d")])
    assert error(exc) == f"{manifest}: traces[0].path: '../secret' {OUTSIDE}"


def test_a_worker_reports_an_unforeseen_exception_as_the_traces_error_not_a_crash(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A replay that raises what no check foresaw (a RecursionError from a hostile trace, say) is the
    trace's ``error``, with its message, and the worker goes on with the next trace: not a ``crash``."""
    import io

    from replay import worker
    from replay.options import ReplayOptions
    from replay.worker_protocol import Done, Failed, Hello, ReplayRequest, decode, encode

    def answer(options: Any, request: Any, contexts: Any) -> dict[str, Any]:
        if str(options.trace) == "deep.vkt":
            raise RecursionError("maximum recursion depth exceeded")
        return {"outcome": "identical"}

    monkeypatch.setattr(worker, "_replay", answer)
    monkeypatch.setattr(worker, "device_hello", lambda selector: Hello(device="D", driver="1"))
    requests = "".join(encode(ReplayRequest(ReplayOptions(Path(name)).to_dict())) for name in ("deep.vkt", "next.vkt"))
    out = io.StringIO()
    assert worker.serve(None, io.StringIO(requests), out) == 0
    hello, *answers = out.getvalue().splitlines()
    assert decode(hello, Hello) == Hello(device="D", driver="1")
    assert [decode(line, Done, Failed) for line in answers] == [
        Failed("deep.vkt: internal error: RecursionError: maximum recursion depth exceeded"),
        Done({"outcome": "identical"})]


# --------------------------------------------------------------------------------------------------
# a manifest entry's resources tables (#34.4) and a result's resource verdicts


UIDS = st.one_of(st.sampled_from(["out", "a.b", "x y", "[red]", "\x1b]0;t\x07", "../x", "\u202e"]), TEXT.filter(bool))


@FAST
@given(uid=UIDS, key=st.sampled_from(["atol", "rtol", "ulp", "dtype", "ulps"]),
       value=st.one_of(TOML_HOSTILE, st.sampled_from(['"float32"', '"float33"', '"bytes"', "true", "[1]", "{}"])))
def test_resource_tables_in_a_manifest_are_checked_key_by_key(tmp_path_factory: pytest.TempPathFactory, uid: str, key: str,
                                                               value: str) -> None:
    """Any uid, any key, any value: accepted as a flag the worker's replay parser reads back to the same
    number or type, or one line naming the manifest and the key."""
    from vkcap.compare_flags import resource_tolerances

    folder = tmp_path_factory.mktemp("r")
    (folder / "t.vkt").write_bytes(b"x")
    quoted = "".join(f"\\u{ord(c):04x}" if ord(c) < 32 or ord(c) == 127 or c in '"\\' else c for c in uid)
    text = f'[[traces]]\npath = "t.vkt"\nresources."{quoted}" = {{ {key} = {value} }}\n'
    manifest = manifest_in(folder, text)
    given_value = tomllib.loads(text)["traces"][0]["resources"][uid][key]
    try:
        (trace,) = load_suite([manifest])
    except UsageError as exc:
        line = str(exc)
        assert line.startswith(f"{manifest}: traces[0].resources.") and "\n" not in line
        assert key in line.split(": ")[1]
        return
    flags = dict(zip(trace.flags[::2], trace.flags[1::2]))
    if key == "dtype":
        assert flags == {"--dtype": f"{uid}={given_value}"}
    else:
        assert resource_tolerances(flags["--resource-tolerances"]) == {uid: {key: check_number(key, given_value)}}


VERDICT_VALUES = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                           st.floats(), TEXT, st.lists(st.integers(), max_size=2))


@FAST
@given(key=st.sampled_from(["uid", "dtype", "tolerance", "status", "first_frame", "frames_beyond", "beyond_tolerance",
                            "differing", "max_abs", "max_ulp", "fields"]), value=VERDICT_VALUES)
def test_resource_verdicts_in_result_files_are_checked(tmp_path_factory: pytest.TempPathFactory, key: str, value: Any) -> None:
    """A result file's ``resources``: every field of its type and in its bound, or one line naming the
    file and the field; what is accepted prints as a verdict line."""
    from replay.verdicts import resource_line

    folder = tmp_path_factory.mktemp("v")
    entry = {"uid": "out", "dtype": "float32", "status": "DIVERGED", key: value}
    (folder / "r.json").write_text(json.dumps({**GOOD, "resources": [entry]}, allow_nan=True))
    try:
        (result,) = read_results([folder])
    except UsageError as exc:
        assert str(exc).startswith(f"{folder / 'r.json'}: ") and "\n" not in str(exc)
        return
    (kept,) = result.resources
    for name, number in kept.items():
        assert not isinstance(number, float) or math.isfinite(number), (name, number)
    assert "\n" not in resource_line(kept)
