"""Text from a trace, scenario, manifest or result file is data, never markup (issue #33, item 7).

Uids, file names, fingerprints and result-file fields that are HTML, rich markup, Jinja syntax, terminal
escape sequences, bidirectional overrides or lone surrogates are shown as text: every HTML page (replay,
diff, bisect, suite run, suite merge) parses to the templates' own elements and attributes only, in
html.parser and in headless Chromium; a link from a result file is written only to http(s) or a relative
path; the terminal gets the escaped form (``\\x1b``, ``\\u202e``, ``\\udc80``) and never a raw ESC byte from
the data, with the right exit code and no internal error, on a pipe and on a terminal.
"""
from __future__ import annotations

import hashlib
import io
import json
import logging
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.html import MAX_FIGURES, safe_href, write_html, write_suite_html
from replay.report import comparison_line, print_frames, write_junit
from replay.results import DIVERGED, Comparison, FrameResult
from replay.suite import TraceResult
from tests.builders import REPO, ScenarioBuilder, vkcap, with_repo_path
from tests.terminal import on_pty
from vkcap.log_format import ShownFormatter
from vkcore.safe_text import UNSAFE, shown, shown_lines

#: Uids a scenario can hold (each one is recorded into a real trace).
RECORDED = ["<img src=x onerror=alert(1)>", '"><script>alert(1)</script>', "javascript:alert(1)", "{{7*7}}", "[/x]",
            "[red]red", "\x1b]0;pwned\x07", "\x1b[2J", "\u202eevil", ":smile:"]
#: What no trace can hold (its records are strict UTF-8), but a scenario's JSON, a result file or a file
#: name can: checked in-process for the replay, diff and bisect pages, and through suite merge.
SURROGATE = "x\udc80"
PAYLOADS = [*RECORDED, SURROGATE]

#: What the templates write: any other element or attribute came from the data.
TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "table", "tr", "th", "td", "p", "span",
        "div", "a", "section", "figure", "img", "figcaption", "svg", "rect", "text", "tbody"}
ATTRIBUTES = {"lang", "charset", "name", "content", "class", "href", "title", "id", "src", "alt", "data-kind", "xmlns", "width", "height", "colspan",
              "role", "aria-label", "x", "y", "fill", "font-size", "text-anchor"}
SGR = re.compile(r"\x1b\[[0-9;]*m")  # rich's own colours on a terminal


class Page(HTMLParser):
    """Every element, attribute and text run of a page."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def hrefs(self) -> list[str]:
        return [a["href"] for tag, a in self.tags if tag == "a"]


def check_page(text: str, shown_texts: list[str]) -> Page:
    """The page holds only the templates' elements and attributes, links only to safe targets, images
    only as PNG data, and shows each of ``shown_texts`` as text."""
    page = Page(text)
    assert {tag for tag, _ in page.tags} <= TAGS, {tag for tag, _ in page.tags} - TAGS
    assert {name for _, a in page.tags for name in a} <= ATTRIBUTES
    assert all(safe_href(href) == href for href in page.hrefs()), page.hrefs()
    assert all(a["src"].startswith("data:image/png;base64,") for tag, a in page.tags if tag == "img")
    body = "".join(page.text)
    for expected in shown_texts:
        assert expected in body, expected
    return page


def chromium_dom(page: Path) -> str:
    """The DOM headless Chromium builds from ``page`` (scripts on): an injected element would be in it."""
    exe = shutil.which("chromium")
    if exe is None:
        pytest.fail("chromium is not installed (make setup installs it)")
    proc = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
                           "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not [line for line in proc.stderr.splitlines() if ":CONSOLE" in line], proc.stderr  # no script ran
    return proc.stdout


def snapshot(folder: Path) -> dict[str, tuple[int, int, str]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(folder.rglob("*")) if p.is_file()}


def assert_terminal_safe(proc: subprocess.CompletedProcess[str], code: int) -> str:
    out = proc.stdout + proc.stderr
    assert proc.returncode == code, out
    assert "\x1b" not in out and "\u202e" not in out and "Traceback" not in out and "internal error" not in out, out
    return out


# --- the helpers, in-process -------------------------------------------------------------------------------

@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=40))
def test_shown_is_one_printable_line_that_encodes(text: str) -> None:
    """Any text, surrogates included: no unsafe character left, UTF-8 encodable, one line, idempotent;
    text without unsafe characters is unchanged."""
    out = shown(text)
    assert not UNSAFE.search(out) and "\n" not in out and "\r" not in out
    out.encode("utf-8")
    assert shown(out) == out
    if not UNSAFE.search(text):
        assert out == text
    assert "\n" not in shown_lines(text).replace("\n", "") and not UNSAFE.search(shown_lines(text).replace("\n", ""))


def test_shown_escapes_as_python_does() -> None:
    assert [shown(p) for p in ("\x1b]0;pwned\x07", "\x1b[2J", "\u202eevil", SURROGATE, "a\r\nb", "\x9b", "日本 ok")] == [
        "\\x1b]0;pwned\\x07", "\\x1b[2J", "\\u202eevil", "x\\udc80", "a\\x0d\\x0ab", "\\x9b", "日本 ok"]


LINKS = [  # target, what safe_href returns
    ("shard1/t0.vkt.7e75c8de.html", "shard1/t0.vkt.7e75c8de.html"), ("#r0-1", "#r0-1"), ("../pages/a.html", "../pages/a.html"),
    ("https://ci.example.com/r/1.html", "https://ci.example.com/r/1.html"), ("http://h/x", "http://h/x"),
    ("javascript:alert(1)", None), ("JavaScript:alert(1)", None), (" javascript:alert(1)", None), ("java\tscript:x", None),
    ("java\nscript:x", None), ("\x01javascript:x", None), ("data:text/html,<script>", None), ("vbscript:x", None),
    ("file:///etc/passwd", None), ("//evil.example.com/x", None), ("\\\\evil.example.com\\x", None), ("/\\evil", None),
    ("https:evil", None), ("https://[::1", None), ("http://[x]/", None), ("http:///x", None), ("a:b/c.html", None), ("x\udc80.html", None), ("\u202ex.html", None), ("", None),
]


@pytest.mark.parametrize("target, expected", LINKS)
def test_safe_href_allows_http_and_relative_links_only(target: str, expected: str | None) -> None:
    assert safe_href(target) == expected


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=30), st.builds(lambda s, t: s + ":" + t, st.sampled_from(
    ["javascript", "JAVASCRIPT", "data", "vbscript", "file", "http", "https", "x", " javascript", "java\tscript"]),
    st.text(max_size=20))))
def test_safe_href_never_lets_another_scheme_through(target: str) -> None:
    """Whatever the target, what is written is absent, http(s) with a host, or has no scheme at all (as a
    browser would read it: no control character, space or backslash; no colon before the first slash)."""
    href = safe_href(target)
    if href is None:
        return
    assert href == target and not UNSAFE.search(href) and not re.search(r"[\s\\]", href)
    head = href.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    assert re.match(r"(?i)https?://[^/]", href) or (":" not in head and not href.startswith("//"))


def comparison(uid: str, extras: dict[str, Any] | None = None) -> Comparison:
    c = Comparison(uid=uid, dtype="float32", status=DIVERGED, count=16, differing=4, beyond_tolerance=4, max_abs=1.5,
                   max_rel=0.5, max_ulp=7, first_index=(3,), first_recorded=1.0, first_live=2.5)
    c.statistics = {"all": {"ulp_histogram": {"0": 12, "1": 0, uid: 4}}, "beyond": {"abs": {"mean": 1.0, "p99": 1.5}}}
    c.extras = dict(extras or {})
    return c


def report_page(path: Path, uids: list[str], kind: str, maps: dict[str, str]) -> None:
    """A replay, diff or bisect page whose every string field is hostile."""
    frames = [FrameResult(0, 0, [comparison(u, maps) for u in uids], [(1, comparison(u)) for u in uids[:2]])]
    hostile = " ".join(uids)
    fingerprint = {"device_name": hostile, "driver_name": uids[0], "driver_version": uids[-1], "driver_info": hostile,
                   "api_version": uids[0], "layers": uids}
    bisect = ({"frame": 0, "command": 1, "command_name": hostile, "segment": 2, "module": hostile,
               "probes": [{"frames": [0, uids[0]], "diverged": hostile}]} if kind == "bisect" else None)
    write_html(path, title=f"vkcap {kind}: {hostile}", fingerprints=[(uids[0], fingerprint), ("live", {"layers": hostile})],
               tolerance=hostile, frames=frames, crashed=0 if kind == "bisect" else None, bisect=bisect)


@pytest.fixture(scope="module")
def value_maps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    from PIL import Image

    folder = tmp_path_factory.mktemp("maps")
    maps = {}
    for key in ("recorded_map", "live_map", "heatmap"):
        maps[key] = str(folder / f"{key}.png")
        Image.fromarray(np.full((8, 8, 3), 200, np.uint8), "RGB").save(maps[key])
    return maps


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["replay", "diff", "bisect"])
def test_report_pages_show_every_payload_as_text(kind: str, tmp_path: Path, value_maps: dict[str, str]) -> None:
    """Each payload, the lone surrogate included, is a uid, a device, a driver, a layer, the tolerance,
    the title, the bisect command and probe, and a histogram label: the page has the templates'
    elements only, shows each payload escaped, and Chromium builds no element from it and runs nothing."""
    page = tmp_path / f"{kind}.html"
    report_page(page, PAYLOADS, kind, value_maps)
    text = page.read_text(encoding="utf-8")
    parsed = check_page(text, [shown(p) for p in PAYLOADS])
    figures = [a for tag, a in parsed.tags if tag == "img"]
    assert len(figures) == 3 * len(PAYLOADS)  # each resource's three images, alt holding the uid
    histograms = [a for tag, a in parsed.tags if tag == "svg" and a.get("aria-label") == "ULP histogram"]
    assert len(histograms) == MAX_FIGURES  # the histograms of the first comparisons
    check_page(chromium_dom(page), [shown(p) for p in PAYLOADS])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(codec=None, exclude_categories=()), min_size=1, max_size=16),
                min_size=1, max_size=4, unique=True))
def test_generated_hostile_strings_never_become_markup(tmp_path_factory: pytest.TempPathFactory,
                                                       strings: list[str]) -> None:
    """Generated strings (any code point, surrogates included) as uids and as every suite field: both
    page kinds parse to the templates' elements and attributes only and show each string escaped."""
    folder = tmp_path_factory.mktemp("generated")
    report_page(folder / "r.html", strings, "bisect", {})
    check_page((folder / "r.html").read_text(encoding="utf-8"), [shown(s) for s in strings])
    results = [TraceResult(trace=f"/t/{s}.vkt", device=s, status="fail", outcome=s, expected="pass", detail=s, reason=s,
                           page=s, driver=s) for s in strings]
    write_suite_html(folder / "s.html", results)
    check_page((folder / "s.html").read_text(encoding="utf-8"), [shown(s) for s in strings])


def test_terminal_table_junit_and_log_show_payloads_escaped(tmp_path: Path) -> None:
    """In-process, with the lone surrogate no trace can record: the replay table, the comparison line,
    JUnit and the log format each payload as its escaped text."""
    from rich.console import Console

    frames = [FrameResult(0, 0, [comparison(u) for u in PAYLOADS], [])]
    out = io.StringIO()
    print_frames(frames, console=Console(file=out, width=400, force_terminal=True, emoji=False))
    table = SGR.sub("", out.getvalue())
    assert "\x1b" not in table and "\u202e" not in table
    for p in PAYLOADS:
        assert shown(p) in table, p
    write_junit(tmp_path / "r.xml", "vkcap.replay", frames, crash=(0, "crashed: " + " ".join(PAYLOADS)))
    cases = ET.parse(tmp_path / "r.xml").getroot().iter("testcase")
    assert [c.get("name") for c in cases] == [shown(p) for p in PAYLOADS] + ["driver crash"]
    formatter = ShownFormatter()
    for p in PAYLOADS:
        record = logging.LogRecord("vkcap", logging.WARNING, __file__, 1, "first divergence at frame %d: %s", (0, comparison_line(comparison(p))), None)
        line = formatter.format(record)
        assert line.startswith(f"vkcap: first divergence at frame 0: {shown(p)}: DIVERGED") and not UNSAFE.search(line)
        record = logging.LogRecord("vkcap", logging.WARNING, __file__, 1, f"an f-string holding {p}\nand a second line", None, None)
        assert formatter.format(record) == f"vkcap: an f-string holding {shown(p)}\nand a second line"


# --- through the real command line --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A trace whose buffers are named by the payloads (one dispatch writes each), the same scenario
    recorded with a shader that writes other values (for diff), and that shader (for replay, bisect)."""
    root = tmp_path_factory.mktemp("hostile")
    b = ScenarioBuilder(root / "scenario")
    n = len(RECORDED)
    source = ("#version 450\nlayout(local_size_x = 1) in;\n"
              + "".join(f"layout(set = 0, binding = {i}) buffer B{i} {{ float v{i}[]; }};\n" for i in range(n))
              + "void main() { uint i = gl_GlobalInvocationID.x; "
              + "".join(f"v{i}[i] = float(i) * {i + 1}.0 EXTRA; " for i in range(n)) + "}\n")
    b.file("s.comp", source.replace("EXTRA", ""))
    changed = b.file("changed.comp", source.replace("EXTRA", "+ 0.5"))
    b.resources.append({"shader": {"uid": "s", "src": "s.comp", "type": "GLSL"}})
    for uid in RECORDED:
        b.resources.append({"buffer": {"uid": uid, "size": 64, "shader_access": "readwrite"}})
    b.dispatch("s", [(0, i, uid) for i, uid in enumerate(RECORDED)], [16, 1, 1]).boundary(RECORDED, 0)
    scenario = b.save()
    traces = root / "traces"
    traces.mkdir()
    proc = vkcap("record", scenario, "-o", traces / "t.vkt", "--output", root / "out", "--dispatch-level")
    assert proc.returncode == 0, proc.stderr
    b.file("s.comp", source.replace("EXTRA", "+ 0.5"))
    proc = vkcap("record", scenario, "-o", traces / "u.vkt", "--output", root / "out2", "--dispatch-level")
    assert proc.returncode == 0, proc.stderr
    return {"trace": traces / "t.vkt", "other": traces / "u.vkt", "changed": changed, "traces": traces, "scenario": scenario}


@pytest.mark.slow
@pytest.mark.device
def test_replay_diff_bisect_and_info_escape_hostile_uids(hostile: dict[str, Path], tmp_path: Path) -> None:
    """replay, diff and bisect (each with --html) and info on the trace of hostile uids: the exit code
    of a divergence (1) or of success (0), no internal error, the tables and lines show every uid escaped
    (markup as written, controls as \\x1b...), no raw ESC or bidi override reaches stdout or stderr, the
    pages hold no element or attribute of the data (html.parser; Chromium reads the same page kinds in
    test_report_pages_show_every_payload_as_text), JUnit parses, and the traces' folder is unchanged."""
    before = snapshot(hostile["traces"])
    trace, changed = hostile["trace"], f"s={hostile['changed']}"
    shown_uids = [shown(u) for u in RECORDED]
    replay = assert_terminal_safe(vkcap("replay", trace, "--replace-shader", changed, "--html", tmp_path / "replay.html",
                                        "--junit", tmp_path / "r.xml"), 1)
    diff = assert_terminal_safe(vkcap("diff", trace, hostile["other"], "--html", tmp_path / "diff.html"), 1)
    for out in (replay, diff):
        for uid in shown_uids:
            assert f"│ {uid} " in out, (uid, out)
    assert f"vkcap: first divergence at frame 0 (frame_id 0): {RECORDED[0]}: DIVERGED" in replay
    bisect = assert_terminal_safe(vkcap("bisect", trace, "--replace-shader", changed, "--html", tmp_path / "bisect.html"), 1)
    assert "first divergent frame: 0" in bisect and "first divergent dispatch: commands[0] (s)" in bisect
    assert f"\n{RECORDED[0]}: DIVERGED: " in bisect
    info = assert_terminal_safe(vkcap("info", trace), 0)
    assert all(f"│ {uid} " in info for uid in shown_uids) and f"storage_buffer {shown(RECORDED[6])}" in info
    names = [c.get("name") for c in ET.parse(tmp_path / "r.xml").getroot().iter("testcase")]
    assert names == shown_uids + [f"{uid}@commands[0]" for uid in shown_uids]
    for kind in ("replay", "diff", "bisect"):  # Chromium reads these page kinds in the in-process test
        check_page((tmp_path / f"{kind}.html").read_text(encoding="utf-8"), shown_uids)
    assert snapshot(hostile["traces"]) == before


@pytest.mark.slow
@pytest.mark.device
def test_suite_run_and_merge_escape_hostile_names_and_links(hostile: dict[str, Path], tmp_path: Path) -> None:
    """suite run over a trace named with an escape sequence, markup and a bidi override; suite merge of
    result files (as a stranger may send them) holding the payloads and links to ``javascript:``, ``data:``
    and ``https:``: exit codes 0, every name shown escaped on the terminal and the pages, the unsafe
    links dropped, the https one kept."""
    suite = tmp_path / "suite"
    suite.mkdir()
    name = "\x1b[2J[red]t\u202e<b>.vkt"
    shutil.copyfile(hostile["trace"], suite / name)
    before = snapshot(suite)
    run = assert_terminal_safe(vkcap("suite", "run", suite, "--html", tmp_path / "run.html", "--results", tmp_path / "res"), 0)
    assert f"│ {shown(name)} " in run and f"vkcap: {shown(name)}: pass" in run
    check_page((tmp_path / "run.html").read_text(encoding="utf-8"), [shown(name)])
    assert snapshot(suite) == before
    forged = tmp_path / "forged"
    forged.mkdir()
    links = ["javascript:alert(1)", "data:text/html,<script>alert(1)</script>", " javascript:alert(1)",
             "https://ci.example.com/r/1.html"]
    for i, page in enumerate(links):  # well-formed result files (a malformed one, a lone surrogate included, is
        payload = RECORDED[i % len(RECORDED)] + RECORDED[-1 - i]  # refused: tests/test_untrusted_manifests.py)
        (forged / f"{i}.json").write_text(json.dumps({
            "trace": f"/elsewhere/{payload}{i}.vkt", "device": PAYLOADS[i], "status": "pass", "outcome": "identical",
            "expected": "pass", "reason": payload, "detail": payload, "driver": payload, "page": page}))
    # the folder given as ".", the page beside the results: a page "javascript:alert(1)" stays that string
    merged = assert_terminal_safe(vkcap("suite", "merge", ".", "--html", "merge.html", cwd=forged,
                                        env={"PYTHONPATH": with_repo_path()}), 0)  # this checkout's vkcap, from there
    names = [shown(Path(json.loads(p.read_text())["trace"]).name) for p in sorted(forged.glob("*.json"))]
    for shown_name in names:
        assert f"│ {shown_name} " in merged, (shown_name, merged)
    text = (forged / "merge.html").read_text(encoding="utf-8")
    for parsed in (check_page(text, names), check_page(chromium_dom(forged / "merge.html"), names)):
        # the unsafe pages were dropped as the result files were read (replay.result_files, a warning each):
        # their cells link to their own rows; the https page is linked from its cell and its details
        assert parsed.hrefs() == ["#r0-0", "#r1-1", "#r2-2", links[3], links[3]]
        assert "".join(parsed.text).count("the replay's page") == 1


@pytest.mark.slow
@pytest.mark.device
def test_a_terminal_gets_rich_colours_but_no_escape_from_the_trace(hostile: dict[str, Path], tmp_path: Path) -> None:
    """On a terminal (a pty, FORCE_COLOR=1, COLUMNS=300), where rich draws colours and markup: replay,
    info and diff exit as on a pipe; apart from rich's own colour codes nothing from the trace is an
    escape sequence (no OSC title, no clear-screen, no bidi override), and each uid is shown escaped."""
    env = {"FORCE_COLOR": "1", "COLUMNS": "300", "TERM": "xterm-256color"}
    commands = [(["replay", str(hostile["trace"]), "--replace-shader", f"s={hostile['changed']}"], 1),
                (["info", str(hostile["trace"])], 0), (["diff", str(hostile["trace"]), str(hostile["other"])], 1)]
    for args, code in commands:
        exit_code, _, raw = on_pty(*args, env=env, unset=("NO_COLOR",), stdout_too=True, errors="strict")
        assert exit_code == code
        assert "\x1b[" in raw  # rich did colour: the terminal path was taken
        plain = SGR.sub("", raw)
        assert "\x1b" not in plain and "\u202e" not in plain and "internal error" not in plain, plain
        for uid in RECORDED:
            assert shown(uid) in plain, (uid, plain)


@pytest.mark.slow
@pytest.mark.device
def test_an_error_naming_hostile_text_is_one_escaped_line(hostile: dict[str, Path], tmp_path: Path) -> None:
    """A scenario whose dispatch names a resource by an escape sequence and a lone surrogate: run exits 2
    with one line naming the place, the name shown escaped, no internal error. export of a resource the
    trace lacks: exit 2, one line listing the trace's uids, each shown escaped (they were written raw)."""
    document = json.loads(hostile["scenario"].read_text())
    document["commands"][0]["dispatch_compute"]["bindings"][5]["resource_ref"] = "\x1b]0;pwned\x07\udc80"
    scenario = hostile["scenario"].with_name("bad.json")
    scenario.write_text(json.dumps(document))
    out = assert_terminal_safe(vkcap("run", scenario, "--output", tmp_path / "out"), 2)
    # the lone surrogate is refused at its JSON path before the reference is resolved
    assert out == (f"vkcap: error: {scenario}: commands[0].dispatch_compute.bindings[5].resource_ref: holds a lone "
                   "surrogate (\\ud800-\\udfff without its pair): not a character\n")
    document["commands"][0]["dispatch_compute"]["bindings"][5]["resource_ref"] = "\x1b]0;pwned\x07[red]"
    scenario.write_text(json.dumps(document))
    out = assert_terminal_safe(vkcap("run", scenario, "--output", tmp_path / "out"), 2)
    assert out == (f"vkcap: error: {scenario}: commands[0].dispatch_compute.bindings[5].resource_ref: Memory resource not found: "
                   "unknown resource "
                   "'\\x1b]0;pwned\\x07[red]' (did you mean '\\x1b]0;pwned\\x07'?)\n")
    out = assert_terminal_safe(vkcap("export", hostile["trace"], "--frame", "0", "--resource", "nope", "-o", tmp_path / "x.npy"), 2)
    assert out.count("\n") == 1 and "--resource: 'nope' is not a resource of this trace (its resources: " in out
    assert all(shown(uid) in out for uid in RECORDED) and not (tmp_path / "x.npy").exists()
