"""The pages a driver engineer reads first (#36 item 7; #34 item 3: pages compare in the recorded view).

Through the real CLI on lavapipe: the bundled heat example with one constant of its shader changed
(replay: the summary, the per-frame chart, false-colour images, the note where images stop); a vec4
buffer drawn in true colour on the replay, diff and bisect pages alike; a struct buffer's per-field
table; a suite run whose blur trace really diverges (lavapipe's SoA sampling path, GALLIVM_PERF) against
an expectation. In-process: the chart's geometry for generated frames, the pictures of RGBA8 and
16-bit data, the palette's contrast. Every page is checked to leave nothing behind (its scratch folder
is gone) and, for each page kind once, rendered in headless Chromium. With VKCAP_UPDATE_DOCS=1 the
screenshots become docs/html-report.png and docs/html-suite.png (the README and docs show them).
"""
from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay import frame_chart
from replay.frame_chart import MAX_X_LABELS, FramePoint, chart
from replay.heatmap import draw_comparison, image_shape
from replay.html import MAX_FIGURES, PALETTE, expected_text, write_html, write_suite_html
from replay.results import DIVERGED, Comparison, FrameResult
from replay.suite import TraceResult
from tests.builders import REPO, ScenarioBuilder, vkcap, with_repo_path
from tests.test_untrusted_markup import check_page
from vkcore.safe_text import shown

DOCS = REPO / "docs"


# --- reading pages --------------------------------------------------------------------------------------

class Node:
    def __init__(self, tag: str, attrs: dict[str, str], parent: "Node | None") -> None:
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[Node | str] = []

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def all(self, tag: str, **attrs: str) -> list["Node"]:
        found = []
        for c in self.children:
            if isinstance(c, Node):
                if c.tag == tag and all(c.attrs.get(k.rstrip("_")) == v for k, v in attrs.items()):
                    found.append(c)
                found += c.all(tag, **attrs)
        return found


VOID = {"meta", "img", "br", "rect", "input"}


class Tree(HTMLParser):
    """A page as a tree of elements (enough to query the templates' own markup)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.root = self.at = Node("#root", {}, None)
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs}, self.at)
        self.at.children.append(node)
        if tag not in VOID:
            self.at = node

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.at.children.append(Node(tag, {k: v or "" for k, v in attrs}, self.at))

    def handle_endtag(self, tag: str) -> None:
        node = self.at
        while node.parent is not None and node.tag != tag:
            node = node.parent
        if node.parent is not None:
            self.at = node.parent

    def handle_data(self, data: str) -> None:
        self.at.children.append(data)


def summary(tree: Tree) -> dict[str, tuple[str, str | None]]:
    """The summary table: label -> (text, link)."""
    table = tree.root.all("table", class_="summary")[0]
    out = {}
    for row in table.all("tr"):
        th, td = row.all("th")[0], row.all("td")[0]
        links = td.all("a")
        out[th.text()] = (td.text(), links[0].attrs["href"] if links else None)
    return out


def chart_columns(tree: Tree) -> list[Node]:
    svg = tree.root.all("svg", class_="chart")[0]
    return svg.all("a")


def png(uri: str) -> np.ndarray:
    from PIL import Image

    assert uri.startswith("data:image/png;base64,")
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1]))).convert("RGB"))


def snapshot(folder: Path) -> dict[str, tuple[int, int, str]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(folder.rglob("*")) if p.is_file()}


def chromium(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("chromium")
    if exe is None:
        pytest.fail("chromium is not installed (make setup installs it)")
    return subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
                           "--hide-scrollbars", *args], capture_output=True, text=True, timeout=120)


def screenshot(page: Path, shot: Path, height: int) -> np.ndarray:
    """The page as headless Chromium draws it (no console message: nothing ran), as RGB pixels."""
    from PIL import Image

    proc = chromium(f"--screenshot={shot}", f"--window-size=1280,{height}", page.as_uri())
    assert proc.returncode == 0 and shot.is_file(), proc.stderr[-2000:]
    assert not [line for line in proc.stderr.splitlines() if ":CONSOLE" in line], proc.stderr
    return np.asarray(Image.open(shot).convert("RGB")).astype(np.int32)


def near(pixels: np.ndarray, colour: str, within: int = 12) -> int:
    rgb = np.array([int(colour[i: i + 2], 16) for i in (1, 3, 5)])
    return int((np.abs(pixels - rgb).sum(axis=2) <= within).sum())


def update_docs(shot: Path, name: str) -> None:
    if os.environ.get("VKCAP_UPDATE_DOCS") == "1":
        shutil.copyfile(shot, DOCS / name)


# --- replay: heat with one constant changed -------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.device
def test_replay_page_heat_with_a_changed_constant(tmp_path: Path) -> None:
    """examples/heat recorded, then replayed with 0.2 -> 0.2001 in its shader: the summary names the
    command, both devices, the tolerance, the replaced shader, the first divergent frame (linked), why
    no dispatch is named, the counts and the 88 comparisons whose images were left out; the chart has
    100 numbered columns, one link each, whose tooltips hold the JSON's numbers and whose bars grow
    with the ULP; the first 12 frames have false-colour images (the scale's top is the frame's largest
    difference), the others a note; nothing is left in TMPDIR and only the reports appear beside them."""
    work = tmp_path / "work"
    shutil.copytree(REPO / "examples" / "heat", work / "heat")
    trace = work / "heat.vkt"
    assert vkcap("record", work / "heat" / "scenario.json", "-o", trace, "--output", work / "out").returncode == 0
    changed = work / "step_new.comp"
    changed.write_text((work / "heat" / "step.comp").read_text().replace("0.2 * (around", "0.2001 * (around"))
    reports = tmp_path / "reports"
    reports.mkdir()
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    before = snapshot(work)
    args = ["replay", "work/heat.vkt", "--replace-shader", "step=work/step_new.comp", "--dtype", "a=float32", "--shape",
            "a=64x64", "--ulp", "4", "--html", "reports/heat.html", "--json", "reports/heat.json"]  # relative: the docs' picture
    proc = vkcap(*args, cwd=tmp_path, env={"TMPDIR": str(scratch), "PYTHONPATH": with_repo_path()})  # this checkout's vkcap
    assert proc.returncode == 1, proc.stderr
    assert snapshot(work) == before and sorted(p.name for p in reports.iterdir()) == ["heat.html", "heat.json"]
    assert list(scratch.iterdir()) == []  # the pictures' scratch folder is gone
    frames = json.loads((reports / "heat.json").read_text())["frames"]
    assert len(frames) == 100 and all(f["diverged"] for f in frames)
    assert not any(key in c for f in frames for c in f["resources"] for key in ("heatmap", "recorded_map"))  # removed files
    text = (reports / "heat.html").read_text(encoding="utf-8")
    tree = Tree(text)
    head = summary(tree)
    assert head["command"] == (shlex.join(["vkcap", *args]), None)
    assert re.fullmatch(r"llvmpipe .*, driver .+", head["recorded device"][0]) and head["live device"][0] == head["recorded device"][0]
    assert head["tolerance"][0] and "4" in head["tolerance"][0]
    assert head["replaced"] == ("shader step → work/step_new.comp", None)
    assert head["first divergent frame"] == ("frame 0 (id 0)", "#frame-0")
    assert head["first divergent dispatch"][0].startswith("not recorded (record with --dispatch-level")
    assert head["frames"][0] == "100 compared, 100 diverged, 0 within tolerance, 0 identical"
    assert head["beyond the tolerance"][0] == "100 of 100 comparisons, of 1 resource(s)"
    assert f"{100 - MAX_FIGURES} more left out" in head["images"][0]
    # the chart: a column per frame, linked, its tooltip the frame's numbers; bars ordered as the ULPs
    columns = chart_columns(tree)
    assert [c.attrs["href"] for c in columns] == [f"#frame-{k}" for k in range(100)]
    assert {c.attrs["class"] for c in columns} == {"diverged"}
    for column, f in zip(columns, frames):
        a = f["resources"][0]
        assert column.all("title")[0].text() == (f"frame {f['frame']}: diverged, max {a['max_ulp']} ULP, {a['beyond_tolerance']} of "
                                                 f"{a['count']} values beyond the tolerance ({frame_chart.percent(a['beyond_share'])})")
    heights = [float(c.all("rect", class_="bar")[0].attrs["height"]) for c in columns]
    ulps = [f["resources"][0]["max_ulp"] for f in frames]
    assert all((h1 < h2) == (u1 < u2) for h1, h2, u1, u2 in zip(heights, heights[1:], ulps, ulps[1:]))
    labels = [t.text() for t in tree.root.all("svg", class_="chart")[0].all("text")]
    assert {"0", "1", "10", "100", "1k", "0%", "frame"} <= set(labels) and {str(k) for k in range(0, 100, 10)} <= set(labels)
    # images: the first 12 frames, false colour with their scale; a note in each frame after
    sections = tree.root.all("section")
    for k, section in enumerate(sections):
        kinds = [img.attrs["data-kind"] for img in section.all("img")]
        notes = [p.text() for p in section.all("p", class_="note")]
        if k < MAX_FIGURES:
            assert kinds == ["recorded", "live", "|difference|"] and not notes
            captions = [c.text() for c in section.all("figcaption")]
            assert captions[0] == "recorded (false colour, mean over channels)"
            top = section.all("div", class_="ramp")[0].text()
            assert top == f"0{frames[k]['resources'][0]['max_abs']:.4g}"
        else:
            assert kinds == [] and notes == [f"Images of 1 more comparison(s) of this frame left out: the page draws the "
                                             f"first {MAX_FIGURES} that are not identical, to stay small. Their numbers are "
                                             "in the table above."]
    pixels = screenshot(reports / "heat.html", tmp_path / "heat.png", 1500)
    assert near(pixels, PALETTE["diverged"]["mark"]) > 5000  # the chart's bars
    assert near(pixels, "#fde725", 40) > 20  # the top of the false-colour ramp: the images
    update_docs(tmp_path / "heat.png", "html-report.png")


# --- true colour on replay, diff and bisect -------------------------------------------------------------

SIDE = 16
COLOURS = f"""#version 450
layout(local_size_x = {SIDE}, local_size_y = 1) in;
layout(set = 0, binding = 0) buffer Px {{ vec4 px[]; }};
void main() {{
    uint x = gl_GlobalInvocationID.x, y = gl_GlobalInvocationID.y;
    vec4 c = vec4(float(x) / {SIDE - 1}.0, float(y) / {SIDE - 1}.0, 0.5, 1.0);
    CHANGE
    px[y * {SIDE}u + x] = c;
}}
"""
SWAPPED = "if (x >= 8u && y < 4u) c.rg = c.gr;"  # a block of pixels with red and green swapped


def expected_rgb(swapped: bool) -> np.ndarray:
    y, x = np.mgrid[0:SIDE, 0:SIDE].astype(np.float32)
    r, g = x / np.float32(SIDE - 1), y / np.float32(SIDE - 1)
    if swapped:
        block = (x >= 8) & (y < 4)
        r, g = np.where(block, g, r), np.where(block, r, g)
    rgb = np.stack([r, g, np.full_like(r, 0.5)], axis=2)
    return np.rint(rgb * 255).astype(np.int32)


def colour_images(section: Node) -> dict[str, tuple[np.ndarray, str]]:
    images = {}
    for figure in section.all("figure"):
        img = figure.all("img")
        if img:
            images[img[0].attrs["data-kind"]] = (png(img[0].attrs["src"]), figure.all("figcaption")[0].text())
    return images


@pytest.mark.slow
@pytest.mark.device
def test_rgba_data_in_true_colour_on_replay_diff_and_bisect(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """A vec4 buffer (16 x 16 RGBA float32, --shape 16x16x4) whose replacement swaps red and green in a
    block: the replay, diff and bisect (isolated: its probe child draws) pages each show the recorded and
    live pixels in true colour, exactly the shader's colours (x 255, rounded), and a difference that is
    non-zero exactly in the block, amplified to full intensity; bisect's page says its probes in words."""
    builder.shader("paint", COLOURS.replace("CHANGE", ""))
    builder.buffer("px", SIDE * SIDE * 16)
    builder.dispatch("paint", [(0, 0, "px")], [1, SIDE, 1]).boundary(["px"], 0)
    scenario = builder.save()
    first, second = tmp_path / "a.vkt", tmp_path / "b.vkt"
    assert vkcap("record", scenario, "-o", first, "--output", tmp_path / "o1", "--dispatch-level").returncode == 0
    changed = builder.file("paint.comp", COLOURS.replace("CHANGE", SWAPPED))
    assert vkcap("record", scenario, "-o", second, "--output", tmp_path / "o2", "--dispatch-level").returncode == 0
    view = ["--dtype", "px=float32", "--shape", f"px={SIDE}x{SIDE}x4"]
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    pages = {"replay": tmp_path / "replay.html", "diff": tmp_path / "diff.html", "bisect": tmp_path / "bisect.html"}
    runs = {"replay": ("replay", first, "--replace-shader", f"paint={changed}"), "diff": ("diff", first, second),
            "bisect": ("bisect", first, "--replace-shader", f"paint={changed}")}
    for kind, run in runs.items():
        proc = vkcap(*run, *view, "--html", pages[kind], env={"TMPDIR": str(scratch)})
        assert proc.returncode == 1, proc.stderr
    assert list(scratch.iterdir()) == []
    block = np.zeros((SIDE, SIDE), bool)
    block[:4, 8:] = True
    block &= np.arange(SIDE)[None, :] != np.arange(SIDE)[:, None]  # r == g on the diagonal: no change there
    for kind, page in pages.items():
        text = page.read_text(encoding="utf-8")
        assert "True" not in text and "None" not in text, kind
        tree = Tree(text)
        section = tree.root.all("section", id="frame-0")[0]
        images = colour_images(section)
        assert list(images) == ["recorded", "live", "|difference|"], kind
        (recorded, rec_caption), (live, _), (difference, diff_caption) = images.values()
        assert rec_caption == "recorded (RGBA, true colour, alpha not drawn)"
        assert diff_caption == "|difference| per channel (R, G, B)"  # the largest is 255 already: not amplified
        assert recorded.shape == (128, 128, 3)  # 16 x 16 drawn 8x
        np.testing.assert_array_equal(recorded[::8, ::8], expected_rgb(False))
        np.testing.assert_array_equal(live[::8, ::8], expected_rgb(True))
        moved = difference[::8, ::8].any(axis=2)
        np.testing.assert_array_equal(moved, block)
        assert difference.max() == 255 and not section.all("div", class_="ramp")  # no false-colour scale
        head = summary(tree)
        if kind == "diff":
            assert head["A and B differ in"] == ("embedded file: paint.comp", None)
            assert head["first divergent dispatch"] == ("commands[0]: px", None)
        else:
            assert head["replaced"] == (f"shader paint → {changed}", None)
        if kind == "bisect":
            table = next(t for t in tree.root.all("table") if t.all("th") and t.all("th")[0].text() == "probe")
            probes = [[td.text() for td in row.all("td")] for row in table.all("tr")[1:]]
            assert probes == [["0", "0-0", "the initial state", "diverged"]], probes
            assert summary(tree)["first divergent dispatch"][0] == "commands[0] paint"
    dom = chromium("--dump-dom", pages["bisect"].as_uri())
    assert dom.returncode == 0 and not [line for line in dom.stderr.splitlines() if ":CONSOLE" in line]
    assert len(Tree(dom.stdout).root.all("img")) == 3 * 2  # the frame's resource and its dispatch snapshot


PAINT_IMAGE = f"""#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0, rgba8) uniform writeonly image2D img;
void main() {{
    uint x = gl_GlobalInvocationID.x, y = gl_GlobalInvocationID.y;
    vec4 c = vec4(float(x) / {SIDE - 1}.0, float(y) / {SIDE - 1}.0, 0.5, 1.0);
    CHANGE
    imageStore(img, ivec2(x, y), c);
}}
"""


@pytest.mark.slow
@pytest.mark.device
def test_rgba8_image_in_true_colour(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """An RGBA8 storage image (no --dtype, no --shape: its format and extent say both): the replay page
    draws its recorded and live texels as they are, the difference exactly in the changed block."""
    builder.shader("paint", PAINT_IMAGE.replace("CHANGE", ""))
    builder.resources.append({"image": {"uid": "img", "dims": [1, SIDE, SIDE, 1], "format": "VK_FORMAT_R8G8B8A8_UNORM",
                                        "shader_access": "writeonly"}})
    builder.dispatch("paint", [(0, 0, "img")], [SIDE, SIDE, 1]).boundary(["img"], 0)
    trace = tmp_path / "t.vkt"
    assert vkcap("record", builder.save(), "-o", trace).returncode == 0
    changed = builder.file("changed.comp", PAINT_IMAGE.replace("CHANGE", SWAPPED))
    proc = vkcap("replay", trace, "--replace-shader", f"paint={changed}", "--html", tmp_path / "p.html")
    assert proc.returncode == 1, proc.stderr
    images = colour_images(Tree((tmp_path / "p.html").read_text(encoding="utf-8")).root.all("section", id="frame-0")[0])
    (recorded, caption), (live, _), (difference, _) = images.values()
    assert caption == "recorded (RGBA, true colour, alpha not drawn)"
    for drawn, swapped in ((recorded, False), (live, True)):
        texels = drawn[::8, ::8].astype(np.int32)
        want = expected_rgb(swapped)
        np.testing.assert_array_equal(texels[..., :2], want[..., :2])
        assert np.abs(texels[..., 2] - want[..., 2]).max() <= 1  # 0.5 to 8 bits: 127 or 128, as the driver rounds
    block = np.zeros((SIDE, SIDE), bool)
    block[:4, 8:] = True
    block &= np.arange(SIDE)[None, :] != np.arange(SIDE)[:, None]
    np.testing.assert_array_equal(difference[::8, ::8].any(axis=2), block)


def test_heatmap_file_labels_fit(tmp_path: Path) -> None:
    """--heatmap files: the title and the scale's labels lie inside the canvas, however long the title
    or small the map (the last columns and rows are background)."""
    from PIL import Image, ImageDraw, ImageFont

    from replay.heatmap import write_heatmap

    title = "frame 12, command 3, segment 2, resource 'a_rather_long_resource_name_that_goes_on'"
    for side in (2, 16, 300):
        err = np.random.default_rng(side).random((side, side)) * 1e-7
        with Image.open(write_heatmap(tmp_path / f"h{side}.png", err, title)) as image:
            pixels = np.asarray(image.convert("RGB"))
        width = ImageDraw.Draw(Image.new("RGB", (1, 1))).textlength(title, font=ImageFont.load_default(size=12))
        assert pixels.shape[1] >= width + 4 and (pixels[:, -2:] == 255).all() and (pixels[-2:] == 255).all()


# --- a struct, field by field ---------------------------------------------------------------------------

from tests.test_typed_verdicts import PARTICLES  # noqa: E402  (its %s is where the id changes)


@pytest.mark.slow
@pytest.mark.device
def test_struct_buffer_has_a_table_of_its_fields(builder: ScenarioBuilder, tmp_path: Path) -> None:
    """A struct buffer whose id of element 41 moves by 1: its row says what it was compared as (the
    shader's view), its first difference is named [41].id, and a table under it gives each field's
    dtype, shape, status, counts, max abs and max ULP, as the JSON has them."""
    n = 1024
    builder.shader("s", PARTICLES % "")
    builder.buffer("parts", n * 16)
    builder.dispatch("s", [(0, 0, "parts")], [n // 64, 1, 1]).boundary(["parts"], 0)
    trace = tmp_path / "t.vkt"
    assert vkcap("record", builder.save(), "-o", trace).returncode == 0
    changed = builder.file("changed.comp", PARTICLES % " + (i == 41u ? 1 : 0)")
    proc = vkcap("replay", trace, "--replace-shader", f"s={changed}", "--html", tmp_path / "p.html", "--json", tmp_path / "p.json")
    assert proc.returncode == 1, proc.stderr
    entry = json.loads((tmp_path / "p.json").read_text())["frames"][0]["resources"][0]
    tree = Tree((tmp_path / "p.html").read_text(encoding="utf-8"))
    section = tree.root.all("section", id="frame-0")[0]
    main_rows = [[td.text() for td in row.all("td")] for row in section.all("tr") if row.parent is not None
                 and row.attrs.get("class") != "fields" and row.all("td") and row.all("td")[0].text() == "parts"]
    row = main_rows[0]
    assert row[-1] == entry["view"] and row[-2].startswith("[41].id 41 → 42")
    fields = [[td.text().strip() for td in r.all("td")] for r in section.all("table", class_="fields")[0].all("tr")[1:]]
    want = [[f["name"], f["dtype"], f"[{', '.join(map(str, f['shape']))}]" if f["shape"] else "scalar", f["status"],
             f"{f['differing']}/{f['count']}", f"{f['beyond_tolerance']}/{f['count']}",
             f"{f['max_abs']:.4g}" if isinstance(f["max_abs"], float) else str(f["max_abs"]), str(f["max_ulp"])]
            for f in entry["fields"]]
    assert fields == want
    assert [f[0] for f in fields] == ["pos", "id", "mass"] and fields[1][4:6] == [f"1/{n}", f"1/{n}"]
    assert fields[0][2] == "[2]" and fields[0][4] == f"0/{2 * n}"


# --- the suite matrix -----------------------------------------------------------------------------------

SUITE = """
[[traces]]
path = "blur.vkt"
[[traces.expect]]
device = "llvmpipe*"
status = "diverged"
frame = 1
reason = "lavapipe's SoA sampling path keeps the filtered texels in float"

[[traces]]
path = "heat.vkt"
[[traces.expect]]
device = "llvmpipe*"
status = "diverged"
reason = "a bug that is now fixed"

[[traces]]
path = "add.vkt"
"""


@pytest.mark.slow
@pytest.mark.device
def test_suite_matrix_names_expected_and_actual_frames(tmp_path: Path) -> None:
    """A suite run of three golden traces with lavapipe's SoA sampling path (GALLIVM_PERF=no_aos_sampling):
    blur really diverges from frame 0, against an expectation of frame 1: its cell says fail, what was
    expected and what happened from which frame; heat is fixed, add passes. Cells are dark text on light
    colours, links in the cell's colour (no default blue on a coloured cell)."""
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in ("blur", "heat", "add"):
        shutil.copyfile(REPO / "traces" / f"{name}.vkt", suite / f"{name}.vkt")
    (suite / "suite.toml").write_text(SUITE)
    page = tmp_path / "suite.html"
    proc = vkcap("suite", "run", "suite/suite.toml", "--html", "suite.html", "--results", "results", cwd=tmp_path,
                 env={"GALLIVM_PERF": "no_aos_sampling", "PYTHONPATH": with_repo_path()})  # relative: the docs' picture
    assert proc.returncode == 1, proc.stderr
    tree = Tree(page.read_text(encoding="utf-8"))
    cells = {row.all("th")[0].text(): row.all("td")[0] for row in tree.root.all("table")[0].all("tr")[1:]}
    said = {name: [cell.all("a")[0].text(), *(d.text() for d in cell.all("div"))] for name, cell in cells.items()}
    assert said["blur.vkt"][0] == "fail" and said["blur.vkt"][2] == "diverged from frame 0"
    assert said["blur.vkt"][1] in ("expected diverged", "expected diverged from frame 1")  # see expected_text
    assert said["heat.vkt"] == ["fixed", "expected diverged", "identical"]
    assert said["add.vkt"] == ["pass", "expected pass", "identical"]
    assert {name: cell.attrs["class"] for name, cell in cells.items()} == {
        "blur.vkt": "cell diverged", "heat.vkt": "cell within", "add.vkt": "cell identical"}
    blur_page = next((tmp_path / "results").glob("blur.vkt.*.html"))  # the replay's own page, from its worker
    head = summary(Tree(blur_page.read_text(encoding="utf-8")))
    assert head["command"][0].startswith("vkcap replay ") and head["first divergent frame"] == ("frame 0 (id 0)", "#frame-0")
    pixels = screenshot(page, tmp_path / "suite.png", 900)
    assert near(pixels, PALETTE["diverged"]["cell"][0], 2) > 2000 and near(pixels, PALETTE["identical"]["cell"][0], 2) > 2000
    assert near(pixels[:400], "#0000ee", 60) == 0  # no default blue link in the matrix
    update_docs(tmp_path / "suite.png", "html-suite.png")


def test_suite_cells_with_the_expected_frame(tmp_path: Path) -> None:
    """Where a result carries the expectation's frame (``expected_frame``), its cell and details name
    it: "expected diverged from frame 1", "diverged from frame 0"; a crash names its frame too."""
    results = [TraceResult("/t/blur.vkt", "gpu", "fail", "diverged", "diverged", frames=1, first_divergence=0),
               TraceResult("/t/heat.vkt", "gpu", "expected", "crash", "crash", frames=3, first_divergence=2)]
    results[0].expected_frame = 1  # type: ignore[attr-defined]
    write_suite_html(tmp_path / "s.html", results)
    tree = Tree((tmp_path / "s.html").read_text(encoding="utf-8"))
    cells = [[d.text() for d in td.all("div")] for td in tree.root.all("table")[0].all("td")]
    assert cells == [["expected diverged from frame 1", "diverged from frame 0"], ["expected crash", "crash from frame 2"]]


def contrast(a: str, b: str) -> float:
    """The WCAG 2.1 contrast ratio of two #rrggbb colours."""
    def luminance(colour: str) -> float:
        channels = [int(colour[i: i + 2], 16) / 255 for i in (1, 3, 5)]
        r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
        return 0.2126 * r + 0.7152 * g + 0.0722 * b
    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


@pytest.mark.parametrize("state", sorted(PALETTE))
def test_palette_contrast(state: str, tmp_path: Path) -> None:
    """Text on each state's cell at least 4.5:1, its mark on white at least 3:1 (WCAG 2.1 AA), and a
    link on the cell takes the cell's text colour (the pages' CSS says so)."""
    background, text = PALETTE[state]["cell"]
    assert contrast(background, text) >= 4.5 and contrast(PALETTE[state]["mark"], "#ffffff") >= 3.0
    write_suite_html(tmp_path / "s.html", [])
    assert f"td.{state} a,h2.{state} a{{color:inherit" in (tmp_path / "s.html").read_text()


text = st.text(alphabet=st.characters(codec=None, exclude_categories=()), min_size=1, max_size=12)


@settings(max_examples=40, deadline=None)
@given(st.lists(text, min_size=3, max_size=3, unique=True))
def test_new_fields_of_a_page_are_text(tmp_path_factory: pytest.TempPathFactory, names: list[str]) -> None:
    """What the new parts show from a trace or a result file, generated (any code point, surrogates
    included): a struct's field names and dtypes, its view, the first value's name, the command line, a
    replaced shader, a diff's differing file, a suite result's verdict: each page parses to the
    templates' elements only and shows each string escaped."""
    folder = tmp_path_factory.mktemp("fields")
    field = {"name": names[0], "dtype": names[1], "shape": [2], "status": DIVERGED, "count": 8, "differing": 1,
             "beyond_tolerance": 1, "max_abs": 1.0, "max_rel": 1.0, "max_ulp": 3, "statistics": {}}
    c = Comparison(uid=names[2], dtype="struct", status=DIVERGED, count=8, differing=1, beyond_tolerance=1,
                   first_index=(1,), first_recorded=0, first_live=1,
                   extras={"view": names[1], "fields": [field], "first_where": names[0], "colour": names[2],
                           "difference_gain": float("nan"), "error_max": names[0]})
    for label in ("replaced", "A and B differ in"):
        write_html(folder / "p.html", title=names[2], fingerprints=[("recorded", {"device_name": names[0]})],
                   tolerance=names[1], frames=[FrameResult(0, 0, [c], [(1, c)])], command_line=["vkcap", *names],
                   replaced=[(names[0], names[1])], replaced_label=label)
        check_page((folder / "p.html").read_text(encoding="utf-8"), [shown(n) for n in names])
    result = TraceResult(f"/t/{names[0]}.vkt", names[1], "fail", "diverged", names[2], first_divergence=0)
    result.verdict = names[0]  # type: ignore[attr-defined]
    result.expected_frame = names[1]  # type: ignore[attr-defined]  # not a frame number: not shown as one
    write_suite_html(folder / "s.html", [result])
    check_page((folder / "s.html").read_text(encoding="utf-8"), [shown(n) for n in names])
    assert expected_text(result) == f"expected {names[2]}"


# --- in-process: the chart and the pictures -------------------------------------------------------------

points = st.lists(st.tuples(st.sampled_from(["identical", "within", "diverged"]), st.integers(0, 2**63 - 1),
                            st.integers(0, 10**9), st.integers(1, 10**9)), min_size=1, max_size=400)


@settings(max_examples=150, deadline=None)
@given(points, st.integers(0, 10**6))
def test_chart_geometry(generated: list[tuple[str, int, int, int]], first: int) -> None:
    """Any frames (1 to 400, ULPs up to 2**63, shares 0 to 100%): every column and bar inside its panel,
    taller bars for larger ULPs and shares, axes numbered in increasing order, at most 16 frame labels
    (all of them when there are at most 16 frames), each a frame's number under its column."""
    pts = [FramePoint(first + k, state, ulp, min(beyond, count), count) for k, (state, ulp, beyond, count) in enumerate(generated)]
    c = chart(pts)
    left, right = c["left"], c["left"] + c["plot_width"]
    for col, p in zip(c["columns"], pts):
        assert left <= col["x"] and col["x"] + col["width"] <= right + 0.01 and col["bar_width"] <= col["width"] + 0.01
        assert c["ulp_top"] - 0.01 <= col["ulp_y"] and col["ulp_y"] + col["ulp_height"] <= c["ulp_bottom"] + 0.01
        assert c["share_top"] - 0.01 <= col["share_y"] and col["share_y"] + col["share_height"] <= c["share_bottom"] + 0.01
        assert (col["ulp_height"] > 0) == (p.max_ulp > 0) and (col["share_height"] > 0) == (p.beyond > 0)
    by_ulp = sorted(zip(pts, c["columns"]), key=lambda pc: pc[0].max_ulp)
    assert all(a[1]["ulp_height"] <= b[1]["ulp_height"] for a, b in zip(by_ulp, by_ulp[1:]))
    by_share = sorted(zip(pts, c["columns"]), key=lambda pc: pc[0].share)
    assert all(a[1]["share_height"] <= b[1]["share_height"] + 1.5 for a, b in zip(by_share, by_share[1:]))
    ys = [t["y"] for t in c["ulp_ticks"]]
    assert ys == sorted(ys, reverse=True) and c["ulp_ticks"][0]["label"] == "0" and c["ulp_ticks"][1]["label"] == "1"
    assert [t["y"] for t in c["share_ticks"]] == sorted((t["y"] for t in c["share_ticks"]), reverse=True)
    assert c["share_ticks"][0]["label"] == "0%" and all(t["label"].endswith("%") for t in c["share_ticks"])
    middles = {col["middle"]: str(col["seq"]) for col in c["columns"]}
    assert all(middles[t["x"]] == t["label"] for t in c["x_ticks"])
    assert len(c["x_ticks"]) <= MAX_X_LABELS + 1 and (len(pts) > MAX_X_LABELS or len(c["x_ticks"]) == len(pts))


def test_rgba8_and_16_bit_pictures(tmp_path: Path) -> None:
    """An RGBA8 image's pixels as they are (alpha left out, its change said), 16-bit unsigned channels
    scaled together to 8 bits, a single channel in false colour with the error's top; a struct gets none."""
    from PIL import Image

    rng = np.random.default_rng(3)
    a = rng.integers(0, 256, (8, 8, 4), dtype=np.uint8)
    b = a.copy()
    b[2, 5, 0] ^= 0x40
    b[7, 7, 3] ^= 1  # alpha only
    out = draw_comparison(tmp_path, "frame00000-img.png", a.tobytes(), b.tobytes(), "uint8", (8, 8, 4), "frame 0, 'img'", sides=True)
    assert (out["colour"], out["alpha_differs"], out["difference_gain"]) == ("RGBA", True, 255 / 0x40)
    recorded = np.asarray(Image.open(out["recorded_map"]).convert("RGB"))
    np.testing.assert_array_equal(recorded[::16, ::16], a[..., :3])  # 8 x 8 drawn 16x
    difference = np.asarray(Image.open(out["difference_map"]).convert("RGB"))[::16, ::16]
    assert difference[2, 5].tolist() == [255, 0, 0] and int(difference.sum()) == 255
    wide = rng.integers(0, 65536, (4, 4, 4), dtype=np.uint16)
    out = draw_comparison(tmp_path, "frame00000-w.png", wide.tobytes(), (wide // 2).tobytes(), "uint16", (4, 4, 4), "w", sides=True)
    live = np.asarray(Image.open(out["live_map"]).convert("RGB"))
    assert out["colour"] == "RGBA" and live.max() <= 128 and np.asarray(Image.open(out["recorded_map"])).max() == 255
    single = np.linspace(0, 1, 64, dtype=np.float32)
    out = draw_comparison(tmp_path, "frame00000-s.png", single.tobytes(), (single * 1.5).tobytes(), "float32", (8, 8), "s", sides=True)
    assert "colour" not in out and out["error_max"] == pytest.approx(0.5) and Path(out["difference_map"]).is_file()
    assert draw_comparison(tmp_path, "x.png", single.tobytes(), single.tobytes(), "struct", (8, 8), "x") == {}
    assert draw_comparison(tmp_path, "x.png", single.tobytes(), single.tobytes(), "float32", (64,), "x") == {}


@pytest.mark.parametrize("shape, values, drawn", [
    ((32, 32), 4096, (32, 32, 4)), ((32, 32), 3072, (32, 32, 3)), ((32, 32), 1024, (32, 32)),
    ((4, 32, 32, 4), 16384, (4, 32, 32, 4)), ((8, 8, 4), 256 + 64, (8, 8, 4)),  # an image and its mip levels
    ((32, 32), 2048, None), ((1024,), 1024, None), (None, 16, None), ((0, 4), 0, None), ((32, 32), 100, None)])
def test_image_shape(shape: tuple[int, ...] | None, values: int, drawn: tuple[int, ...] | None) -> None:
    """A shape that counts pixels of 3 or 4 values is drawn with its channels; one with fewer than two
    dimensions, or that fits the values neither way, is not drawn."""
    assert image_shape(shape, values) == drawn
