"""Reports a team acts on: counts that respect the tolerance in the text, the table, the JSON and the
JUnit report, and tables printed whole when stdout is not a terminal (every CI log)."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from tests.builders import ScenarioBuilder, vkcap

pytestmark = pytest.mark.device

N = 4096
SCALE = """#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer A { float a[]; };
layout(set = 0, binding = 1) buffer C { float c[]; };
void main() { uint i = gl_GlobalInvocationID.x; c[i] = a[i] * 1.5 EXTRA; }
"""
# Every 8th element one ULP up (within --ulp 4); elements 1000 and 3000 far off.
NUDGED = "+ ((i % 8u == 0u) ? a[i] * 1.5 * 1.2e-7 : 0.0) + ((i == 1000u || i == 3000u) ? 0.123456789 : 0.0)"


def recorded_trace(builder: ScenarioBuilder, tmp_path: Path) -> tuple[Path, Path, np.ndarray]:
    a = (np.random.default_rng(7).random(N) + 1).astype(np.float32)
    builder.shader("scale", SCALE.replace("EXTRA", ""))
    builder.buffer("a", N * 4, a, shader_access="readonly").buffer("c", N * 4)
    builder.dispatch("scale", [(0, 0, "a"), (0, 1, "c")], [N // 64, 1, 1]).boundary(["c"], 0)
    trace = tmp_path / "t.vkt"
    proc = vkcap("record", builder.save(), "-o", trace, "--output", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    changed = builder.file("nudged.comp", SCALE.replace("EXTRA", NUDGED))
    return trace, changed, a


def outputs(builder: ScenarioBuilder, folder: Path, shader: str) -> np.ndarray:
    """``c`` as ``vkcap run`` computes it with ``shader`` on this device."""
    builder.file("scale.comp", shader)
    doc = json.loads((builder.root / "scenario.json").read_text())
    doc["resources"][2]["buffer"]["dst"] = "c.npy"
    scenario = builder.file("outputs.json", json.dumps(doc))
    proc = vkcap("run", scenario, "--output", folder)
    assert proc.returncode == 0, proc.stderr
    return np.load(folder / "c.npy").view(np.float32)


def ulps32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    def ordered(x: np.ndarray) -> np.ndarray:
        i = x.view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)
    return np.abs(ordered(a) - ordered(b))


@pytest.mark.slow
def test_counts_beyond_the_tolerance_everywhere(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """Under --ulp 4 the JSON, the text, the table and JUnit say how many elements differ at all and how
    many are beyond the tolerance, as numpy counts them; the first index is the first one beyond it."""
    trace, changed, a = recorded_trace(builder, tmp_path)
    proc = vkcap("replay", trace, "--replace-shader", f"scale={changed}", "--ulp", "4", "--dtype", "c=float32",
                 "--json", tmp_path / "r.json", "--junit", tmp_path / "r.xml")
    assert proc.returncode == 1, proc.stderr
    c = json.loads((tmp_path / "r.json").read_text())["frames"][0]["resources"][0]
    # What each shader writes on this device (FMA contraction differs between drivers), counted by numpy.
    recorded, live = (outputs(builder, tmp_path / side, shader) for side, shader in
                      (("recorded", SCALE.replace("EXTRA", "")), ("live", SCALE.replace("EXTRA", NUDGED))))
    differing = int((live != recorded).sum())
    assert int((ulps32(recorded, live) > 4).sum()) == 2
    assert (c["differing"], c["beyond_tolerance"], c["count"]) == (differing, 2, N)
    assert c["beyond_share"] == 2 / N and c["first_index"] == [1000] and c["status"] == "DIVERGED"
    assert c["beyond_max_abs"] == float(np.abs(live[[1000, 3000]].astype(np.float64) - recorded[[1000, 3000]]).max())
    assert f"{differing}/{N} float32 elements differ ({differing / N:.2%}), 2 beyond the tolerance (0.05%)" in proc.stderr
    assert re.search(rf"│ c\s+│ DIVERGED\s+│ {differing}/{N}\s+│ 2/{N}\s+│", proc.stdout), proc.stdout
    failure = ET.parse(tmp_path / "r.xml").getroot().find(".//failure")
    assert failure is not None and "2 beyond the tolerance" in failure.get("message", "")
    assert json.loads(failure.text or "{}")["beyond_tolerance"] == 2


@pytest.mark.slow
def test_tables_are_whole_when_stdout_is_a_pipe(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """Off a terminal nothing is cut: every column of the replay table, in full, and no ellipsis, however
    wide (the first-difference cell alone is longer than 80 columns here)."""
    trace, changed, _ = recorded_trace(builder, tmp_path)
    proc = vkcap("replay", trace, "--replace-shader", f"scale={changed}", "--dtype", "c=float32",
                 "--json", tmp_path / "r.json")
    assert proc.returncode == 1, proc.stderr
    c = json.loads((tmp_path / "r.json").read_text())["frames"][0]["resources"][0]
    assert "…" not in proc.stdout
    row = next(line for line in proc.stdout.splitlines() if line.startswith("│ 0 "))
    cells = [cell.strip() for cell in row.strip("│").split("│")]
    assert cells[:5] == ["0", "c", "DIVERGED", f"{c['differing']}/{N}", f"{c['beyond_tolerance']}/{N}"]
    assert cells[5] == f"{c['max_abs']:.3g}" and cells[7] == str(c["max_ulp"])
    assert cells[8] == f"[0] {c['first_recorded']!r} -> {c['first_live']!r}"
    devices = vkcap("devices")
    assert devices.returncode == 0 and "…" not in devices.stdout and "optical flow" in devices.stdout


@pytest.mark.slow
def test_diff_reports_dispatches_and_indices_as_replay_does(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """Two dispatch-level recordings (the second with the nudged shader): diff fills ``dispatches`` and
    gives the first index in the resource's shape (``--shape``), exactly as replay of the first with the
    nudged shader does."""
    a = (np.random.default_rng(7).random(N) + 1).astype(np.float32)
    builder.shader("scale", SCALE.replace("EXTRA", ""))
    builder.buffer("a", N * 4, a, shader_access="readonly").buffer("c", N * 4)
    builder.dispatch("scale", [(0, 0, "a"), (0, 1, "c")], [N // 64, 1, 1]).boundary(["c"], 0)
    scenario = builder.save()
    first, second = tmp_path / "a.vkt", tmp_path / "b.vkt"
    assert vkcap("record", scenario, "-o", first, "--output", tmp_path / "o1", "--dispatch-level").returncode == 0
    builder.file("scale.comp", SCALE.replace("EXTRA", NUDGED))
    assert vkcap("record", scenario, "-o", second, "--output", tmp_path / "o2", "--dispatch-level").returncode == 0
    flags = ["--ulp", "4", "--dtype", "c=float32", "--shape", "c=64x64"]
    diff = vkcap("diff", first, second, *flags, "--json", tmp_path / "d.json")
    assert diff.returncode == 1, diff.stderr
    replay = vkcap("replay", first, "--replace-shader", f"scale={builder.root / 'scale.comp'}", *flags,
                   "--json", tmp_path / "r.json")
    assert replay.returncode == 1, replay.stderr
    d = json.loads((tmp_path / "d.json").read_text())["frames"][0]
    r = json.loads((tmp_path / "r.json").read_text())["frames"][0]
    keys = ("uid", "status", "differing", "beyond_tolerance", "first_index", "max_abs", "max_ulp")
    for got, want in ((d["resources"], r["resources"]), (d["dispatches"], r["dispatches"])):
        assert [{k: c[k] for k in keys} for c in got] == [{k: c[k] for k in keys} for c in want]
    assert d["dispatches"][0]["command"] == 0 and d["dispatches"][0]["first_index"] == [1000 // 64, 1000 % 64]


class Dom(HTMLParser):
    """What the tests read of a page as the browser serialised it: links, table rows, images, SVGs."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self.rows: list[list[str]] = []
        self.images: list[tuple[str, str]] = []
        self.svgs = 0
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "a":
            self.links.append((a.get("href", ""), a.get("class", "")))
        elif tag == "tr":
            self.rows.append([])
        elif tag == "td":
            self._cell = []
        elif tag == "img":
            self.images.append((a.get("data-kind", ""), a.get("src", "")))
        elif tag == "svg":
            self.svgs += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def chromium(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("chromium")
    if exe is None:
        pytest.fail("chromium is not installed (make setup installs it)")
    return subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
                           *args], capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_html_report_in_a_real_browser(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """``--html``: one self-contained page, rendered by headless Chromium with no console message; its DOM
    holds the timeline, the statistics row of the diverged buffer (shaped 64x64) and its recorded, live
    and difference images and ULP histogram; the screenshot is not blank and shows the heatmap's colours.
    """
    a = (np.random.default_rng(7).random(N) + 1).astype(np.float32)
    builder.shader("scale", SCALE.replace("EXTRA", ""))
    builder.buffer("a", N * 4, a, shader_access="readonly").buffer("c", N * 4)
    for k in range(3):
        builder.dispatch("scale", [(0, 0, "a"), (0, 1, "c")], [N // 64, 1, 1]).boundary(["c"], k)
    trace = tmp_path / "t.vkt"
    assert vkcap("record", builder.save(), "-o", trace, "--output", tmp_path / "out").returncode == 0
    changed = builder.file("nudged.comp", SCALE.replace("EXTRA", NUDGED))
    page = tmp_path / "report.html"
    proc = vkcap("replay", trace, "--replace-shader", f"scale={changed}", "--ulp", "4", "--dtype", "c=float32",
                 "--shape", "c=64x64", "--html", page)
    assert proc.returncode == 1, proc.stderr
    text = page.read_text()
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in text
    assert "<script" not in text and page.stat().st_size < 10 * 2**20
    dom = chromium("--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert not [line for line in dom.stderr.splitlines() if ":CONSOLE" in line], dom.stderr
    found = Dom()
    found.feed(dom.stdout)
    assert [cls for href, cls in found.links if href.startswith("#frame-") and cls] == ["diverged"] * 3  # the chart's columns
    frame_rows = [r for r in found.rows if r and r[0] == "c"]
    assert len(frame_rows) == 3 and all(r[2] == f"512/{N}" and r[3] == f"2/{N}" for r in frame_rows)
    assert all(r[9].startswith("[15, 40] ") for r in frame_rows)  # element 1000 of 64x64
    assert [kind for kind, _ in found.images] == ["recorded", "live", "|difference|"] * 3
    assert all(src.startswith("data:image/png;base64,") for _, src in found.images)
    assert found.svgs == 4  # the per-frame chart and each comparison's ULP histogram
    shot = tmp_path / "shot.png"
    proc = chromium(f"--screenshot={shot}", "--window-size=1280,1400", page.as_uri())
    assert proc.returncode == 0 and shot.is_file(), proc.stderr[-2000:]
    from PIL import Image

    pixels = np.asarray(Image.open(shot).convert("RGB")).astype(np.int32)
    assert pixels.std() > 20  # not blank
    yellow = (np.abs(pixels - np.array([253, 231, 37])).sum(axis=2) < 30).sum()  # the top of the heatmap's ramp
    assert yellow > 20, yellow  # docs/html-report.png: tests/test_report_pages.py makes it


@pytest.mark.slow
def test_bisect_and_diff_pages(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """bisect's page names the first divergent frame and command and lists its probes; diff's page has
    both traces' fingerprints and its frames; both render in Chromium without a console message."""
    a = (np.random.default_rng(7).random(N) + 1).astype(np.float32)
    builder.shader("scale", SCALE.replace("EXTRA", ""))
    builder.buffer("a", N * 4, a, shader_access="readonly").buffer("c", N * 4)
    for k in range(4):
        builder.dispatch("scale", [(0, 0, "a"), (0, 1, "c")], [N // 64, 1, 1]).boundary(["c"], k)
    scenario = builder.save()
    first, second = tmp_path / "a.vkt", tmp_path / "b.vkt"
    assert vkcap("record", scenario, "-o", first, "--output", tmp_path / "o1", "--dispatch-level").returncode == 0
    builder.file("scale.comp", SCALE.replace("EXTRA", NUDGED))
    assert vkcap("record", scenario, "-o", second, "--output", tmp_path / "o2", "--dispatch-level").returncode == 0
    pages = {"bisect": tmp_path / "bisect.html", "diff": tmp_path / "diff.html"}
    assert vkcap("bisect", first, "--replace-shader", f"scale={builder.root / 'scale.comp'}",
                 "--html", pages["bisect"]).returncode == 1
    assert vkcap("diff", first, second, "--dtype", "c=float32", "--html", pages["diff"]).returncode == 1
    for kind, page in pages.items():
        dom = chromium("--dump-dom", page.as_uri())
        assert dom.returncode == 0 and not [line for line in dom.stderr.splitlines() if ":CONSOLE" in line]
        found = Dom()
        found.feed(dom.stdout)
        if kind == "bisect":
            assert ["0"] in found.rows and ["commands[0] scale"] in found.rows  # first divergent frame, command 0 (shader)
            assert ["0", "0-3", "the initial state", "diverged"] in found.rows, found.rows  # one probe: frames 0-3, diverged
        else:
            assert [cls for href, cls in found.links if href.startswith("#frame-") and cls] == ["diverged"] * 4
            assert sum(1 for r in found.rows if r and (r[0] == "c" or r[0].startswith("c after command "))) == 8
