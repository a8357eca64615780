"""``--html FILE``: one self-contained page for replay, diff and bisect results, and one for a suite.

Everything is inline (CSS, SVG, PNG data URIs): the page needs no network and reads the same with
JavaScript off (it has none). A replay, diff or bisect page holds, in order:

- a summary a driver engineer reads first: the command line, each side's device and driver, the
  tolerance in force, the replaced shaders and drivers (ICDs), the first divergent frame (linked) and
  dispatch, the counts (frames compared, diverged, within tolerance; comparisons beyond the tolerance),
  and, where images were left out, how many and why;
- a per-frame chart (:mod:`replay.frame_chart`): each frame's largest ULP distance on a log scale over
  the share of its values beyond the tolerance, numbered axes, each frame linking to its section;
- the fingerprints compared (device, driver, Vulkan, layers) and, for bisect, its probes and the first
  divergent dispatch (words, never Python's ``True``/``None``);
- per frame, a table of every comparison (counts, the statistics beyond the tolerance, the first
  offending value, named ``[41].pos[1]`` in a struct), a struct's per-field table under its row, and
  for resources of two or more dimensions the recorded, live and difference images side by side
  (:func:`replay.heatmap.draw_comparison`: true colour for RGB/RGBA data, false colour with its scale
  for single channels), with each comparison's ULP histogram as an SVG bar chart. Images are at most
  :data:`MAX_IMAGE_SIDE` pixels a side and drawn for the first :data:`MAX_FIGURES` comparisons that are
  not identical; the rest keep their table rows and a note says how many were left out, so the page of
  a 100-frame trace of 4 MiB resources stays far below 10 MB.

The suite page is a matrix of traces x devices, each cell naming its status, the expected and the
actual outcome with their first frames ("expected diverged from frame 1", "diverged from frame 0"),
then each result's details. Colours come from :data:`PALETTE` (text on cells at least 4.5:1, marks on
white at least 3:1); links on coloured cells take the cell's text colour.

Pages are rendered from the Jinja2 templates in ``replay/templates`` with autoescaping on: every string,
whatever trace, scenario, manifest or result file it came from, is HTML-escaped, and first shown with its
control characters, bidirectional overrides and lone surrogates escaped (:func:`vkcore.safe_text.shown`).
A link target from such data is written only when :func:`safe_href` allows it (http(s), or a relative
path or fragment); otherwise its text is shown unlinked.
"""
from __future__ import annotations

import base64
import io
import math
import os
import re
import shlex
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Sequence
from urllib.parse import urlsplit

from jinja2 import Environment, PackageLoader, StrictUndefined

from vkcore.outputs import write_atomic
from vkcore.safe_text import UNSAFE, shown

from .frame_chart import FramePoint, chart
from .results import DIVERGED, IDENTICAL, WITHIN, Comparison

MAX_IMAGE_SIDE = 256
MAX_FIGURES = 12  # comparisons shown with images (the first ones): the page stays small for long traces
STATUS_CLASS = {IDENTICAL: "identical", WITHIN: "within", DIVERGED: "diverged"}
#: Each state's colours: ``cell`` (background, text) of a table cell, ``mark`` a swatch or chart bar on
#: white. Text on its cell has a contrast of at least 4.5:1, a mark on white at least 3:1 (WCAG 2.1 AA).
PALETTE = {
    "identical": {"cell": ("#e3f4e6", "#14532d"), "mark": "#2e7d32"},
    "within": {"cell": ("#fff4cc", "#5c4300"), "mark": "#b07800"},
    "diverged": {"cell": ("#fde2e0", "#8b1a10"), "mark": "#c62828"},
    "crashed": {"cell": ("#e0e0e0", "#111111"), "mark": "#111111"},
    "skip": {"cell": ("#f0f0f0", "#3a3a3a"), "mark": "#757575"},
}
SUITE_COLOUR = {"pass": "identical", "expected": "within", "fixed": "within", "flaky": "within", "fail": "diverged",
                "skip": "skip"}
SUITE_STATUSES = ("pass", "expected", "fixed", "flaky", "fail", "skip")
PNG_DATA_URI = "data:image/png;base64,"
HISTOGRAM_HEIGHT, HISTOGRAM_BAR = 90, 44  # the bars' area and each bar's width, in pixels (the template's SVG is 300 x 120)
LINK_SCHEMES = ("http", "https")
# What a browser may read as a scheme, or as a host (a backslash is a slash to it), or strips from a URL.
_NOT_IN_LINKS = re.compile(r"[\\\s]")


def safe_href(target: Any) -> str | None:
    """``target`` when it is safe as a link from untrusted data: an ``http://`` or ``https://`` URL with a
    host, or a relative reference without a scheme (a path, ``#fragment``, ``?query``); else None (the
    page shows the text unlinked). Refused: any other scheme (``javascript:``, ``data:``, ``file:``...),
    a network-path reference (``//host``), and anything holding a control character, a space or a
    backslash, which browsers strip or rewrite before they read the scheme."""
    if target is None:
        return None
    text = str(target)
    if not text or UNSAFE.search(text) or _NOT_IN_LINKS.search(text):
        return None
    try:
        parts = urlsplit(text)
    except ValueError:  # a malformed host ("https://[::1")
        return None
    if parts.scheme:
        return text if parts.scheme.lower() in LINK_SCHEMES and parts.netloc else None
    if text.startswith("//") or ":" in text.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]:
        return None  # a network path, or a first segment a browser could read as a scheme
    return text


def _finalize(value: Any) -> Any:
    """Every value a template prints: strings with their unsafe characters escaped (then autoescaped);
    markup the templates made themselves (a macro's output) as it is."""
    return shown(value) if isinstance(value, str) and not hasattr(value, "__html__") else value


@lru_cache(maxsize=1)
def _environment() -> Any:
    env = Environment(loader=PackageLoader("replay", "templates"), autoescape=True, finalize=_finalize,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["safe_href"] = safe_href
    return env


def _render(path: Path, template: str, **context: Any) -> None:
    page = _environment().get_template(template).render(**context)
    write_atomic(path, [page.encode("utf-8")])


def _data_uri(path: str | None) -> str | None:
    """A PNG file as a data URI, shrunk to :data:`MAX_IMAGE_SIDE` pixels a side; None when unreadable."""
    if not path:
        return None
    try:
        # lazy: vkcap replay imports this module, not PIL
        from PIL import Image

        with Image.open(path) as image:
            image.thumbnail((MAX_IMAGE_SIDE, MAX_IMAGE_SIDE), Image.Resampling.NEAREST)
            out = io.BytesIO()
            image.save(out, format="PNG", optimize=True)
    except (OSError, ValueError):
        return None
    return PNG_DATA_URI + base64.b64encode(out.getvalue()).decode("ascii")


def _histogram_bars(histogram: dict[str, int]) -> list[dict[str, Any]]:
    """The bars of a ULP histogram's SVG chart: heights on a log scale, each labelled with its count."""
    counts = {label: count for label, count in histogram.items() if isinstance(count, int) and count >= 0}
    top = max(counts.values(), default=0)
    bars = []
    for i, (label, count) in enumerate(counts.items()):
        height = 0 if count == 0 else max(2, int(HISTOGRAM_HEIGHT * math.log1p(count) / math.log1p(top)))
        x = 4 + i * (HISTOGRAM_BAR + 4)
        bars.append({"x": x, "y": HISTOGRAM_HEIGHT - height, "width": HISTOGRAM_BAR, "height": height,
                     "middle": x + HISTOGRAM_BAR / 2, "label": label, "count": count})
    return bars


def _num(value: Any) -> Any:
    return f"{value:.4g}" if isinstance(value, float) else value


def _index(c: Comparison) -> str:
    """Where the first offending value is: a struct's ``[41].pos[1]``, else ``[15, 40]``."""
    return c.extras.get("first_where") or f"[{', '.join(map(str, c.first_index or ()))}]"


def _field_rows(c: Comparison) -> list[dict[str, Any]]:
    """A struct comparison's per-field rows (typed comparisons: ``extras["fields"]``)."""
    rows = []
    for f in c.extras.get("fields") or ():
        if not isinstance(f, dict):
            continue
        count = f.get("count", "")
        shape = f.get("shape") or []
        rows.append({"name": f.get("name", ""), "dtype": f.get("dtype", ""), "status": f.get("status", ""),
                     "status_class": STATUS_CLASS.get(f.get("status", ""), ""),
                     "shape": f"[{', '.join(map(str, shape))}]" if isinstance(shape, list) and shape else "scalar",
                     "numbers": [f"{f.get('differing', '')}/{count}", f"{f.get('beyond_tolerance', '')}/{count}",
                                 _num(f.get("max_abs", "")), _num(f.get("max_ulp", ""))]})
    return rows


def _row(label: str, c: Comparison) -> dict[str, Any]:
    """One comparison's table row: status, counts, the statistics beyond the tolerance (blank where the
    comparison has none: a struct's are its fields'), the first difference, and a struct's fields."""
    beyond = c.statistics.get("beyond", {}) if c.statistics else {}
    abs_stats = beyond.get("abs", {})
    first = "" if c.first_index is None else f"{_index(c)} {c.first_recorded!r} → {c.first_live!r}"
    cosine = c.statistics.get("cosine_similarity") if c.statistics else None
    view = c.extras.get("view")
    return {"label": label, "status_class": STATUS_CLASS.get(c.status, ""), "status": c.status, "first": first,
            "dtype": view if isinstance(view, str) and view else c.dtype, "fields": _field_rows(c),
            "numbers": [f"{c.differing}/{c.count}", f"{c.beyond_tolerance}/{c.count}", _num(c.max_abs),
                        _num(abs_stats.get("mean", "")), _num(abs_stats.get("p99", "")), _num(c.max_ulp),
                        "" if cosine is None else f"{cosine:.9f}"]}


def _images(c: Comparison) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """A comparison's images (recorded, live, difference) with their captions, and the false-colour
    scale of the difference (None for true colour, or without images)."""
    colour = c.extras.get("colour")
    true_colour = isinstance(colour, str) and colour in ("RGB", "RGBA")
    difference_key = "difference_map" if c.extras.get("difference_map") else "heatmap"  # older reports: the heatmap file
    if true_colour:
        gain = c.extras.get("difference_gain")
        amplified = f", ×{gain:.3g}" if isinstance(gain, (int, float)) and math.isfinite(gain) and gain != 1 else ""
        alpha = ", alpha not drawn" + ("; alpha differs" if c.extras.get("alpha_differs") is True else "")
        captions = (f"recorded ({colour}, true colour{alpha})", f"live ({colour}, true colour{alpha})",
                    f"|difference| per channel (R, G, B{amplified})")
    else:
        captions = ("recorded (false colour, mean over channels)", "live (false colour, same scale)",
                    "|difference| (false colour, largest over channels)")
    images = [{"kind": kind, "caption": caption, "uri": _data_uri(c.extras.get(key))} for kind, caption, key in
              zip(("recorded", "live", "|difference|"), captions, ("recorded_map", "live_map", difference_key))]
    images = [image for image in images if image["uri"]]
    top = c.extras.get("error_max")
    scale = None
    if images and not true_colour and difference_key == "difference_map" and isinstance(top, (int, float)):
        scale = {"low": "0", "high": f"{top:.4g}"}
    return images, scale


def _figure(label: str, c: Comparison) -> dict[str, Any] | None:
    """A comparison's images and ULP histogram; None when it has neither."""
    images, scale = _images(c)
    histogram = (c.statistics or {}).get("all", {}).get("ulp_histogram")
    if not images and not histogram:
        return None
    return {"label": label, "images": images, "scale": scale,
            "histogram": _histogram_bars(histogram) if isinstance(histogram, dict) and histogram else None}


def _device_line(fp: Any) -> str:
    fp = fp if isinstance(fp, dict) else {}
    driver = " ".join(str(fp.get(k, "")) for k in ("driver_name", "driver_version") if fp.get(k))
    info = f" ({fp['driver_info']})" if fp.get("driver_info") else ""
    exact = f" [{str(fp['device_uuid'])[:8]}]" if fp.get("device_uuid") else ""
    return f"{fp.get('device_name') or 'unknown device'}{exact}, driver {driver or 'unknown'}{info}"


def _fingerprint_row(name: str, fp: Any) -> dict[str, Any]:
    fp = fp if isinstance(fp, dict) else {}
    layers = fp.get("layers") or []
    listed = ", ".join(map(str, layers)) if isinstance(layers, (list, tuple)) else str(layers)
    uuid = fp.get("device_uuid")
    exact = f" [{str(uuid)[:8]}]" if uuid else ""  # the short deviceUUID tells identical GPUs apart
    return {"name": name, "device": f"{fp.get('device_name', '')}{exact}",
            "driver": f"{fp.get('driver_name', '')} {fp.get('driver_version', '')} ({fp.get('driver_info', '')})",
            "vulkan": fp.get("api_version", ""), "layers": listed or "none"}


def _frame_state(f: Any) -> str:
    if f.diverged:
        return "diverged"
    within = any(c.status == WITHIN for c in f.comparisons) or any(c.status == WITHIN for _, c in f.dispatches)
    return "within" if within else "identical"


def _frame_point(f: Any) -> FramePoint:
    """A frame's numbers for the chart: the largest ULP of every comparison (dispatch snapshots too),
    the values beyond the tolerance out of those compared at the frame's end (of the dispatch snapshots
    when the frame has no end-of-frame snapshot)."""
    compared = list(f.comparisons) or [c for _, c in f.dispatches]
    every = list(f.comparisons) + [c for _, c in f.dispatches]
    return FramePoint(f.seq, _frame_state(f), max((int(c.max_ulp) for c in every), default=0),
                      sum(c.beyond_tolerance for c in compared), sum(c.count for c in compared))


def _said(value: Any) -> str:
    """A probe's verdict in words: never Python's True, False or None."""
    return {True: "diverged", False: "ok", None: "unknown"}.get(value, value) if isinstance(value, (bool, type(None))) else str(value)


def _dispatch_text(bisect: dict[str, Any]) -> str:
    """Bisect's first divergent dispatch in words."""
    command = bisect.get("command")
    if command is None:
        return f"unknown: {bisect['unnamed']}" if bisect.get("unnamed") else "unknown"
    name = bisect.get("command_name") or bisect.get("dispatch") or ""
    segment = (f", segment {bisect['segment']} (module {bisect.get('module') or 'unknown'})"
               if bisect.get("segment") is not None else "")
    how = f", found by {bisect['found_by']}" if bisect.get("found_by") else ""
    return f"commands[{command}] {name}{segment}".rstrip() + how


def _bisect_view(bisect: dict[str, Any]) -> dict[str, Any]:
    frame = bisect.get("frame")
    probes = []
    for p in bisect.get("probes") or []:
        frames = p.get("frames") or []
        start = p.get("from_state_after")
        probes.append({"frames": "-".join(map(str, frames)) if isinstance(frames, (list, tuple)) else str(frames),
                       "start": ("" if not isinstance(start, int) else "the initial state" if start < 0
                                 else f"the state recorded after frame {start}"),
                       "diverged": _said(p.get("diverged"))})
    return {"frame": "none found" if frame is None else frame, "command": _dispatch_text(bisect), "probes": probes}


def _first_dispatch(frame: Any) -> str | None:
    """The first diverged dispatch snapshot of ``frame``, in words; None when it has none diverged."""
    for command, c in frame.dispatches:
        if c.diverged:
            segment = f", segment {c.extras['segment']}" if c.extras.get("segment") is not None else ""
            return f"commands[{command}]{segment}: {c.uid}"
    return None


def _summary(*, command_line: Sequence[str], fingerprints: list[tuple[str, Any]], tolerance: str,
             replaced: Sequence[tuple[str, str]], replaced_label: str, frames: list[Any], crashed: int | None,
             bisect: dict[str, Any] | None, left_out: int, drawn: int) -> list[dict[str, Any]]:
    """The summary's rows: (label, text, link or None), see the module docstring."""
    rows: list[dict[str, Any]] = []

    def add(label: str, text: Any, link: str | None = None) -> None:
        rows.append({"label": label, "text": text, "link": link})

    if command_line:
        add("command", shlex.join(str(part) for part in command_line))
    for name, fp in fingerprints:
        add(f"{name} device", _device_line(fp))
    add("tolerance", tolerance)
    if replaced_label == "replaced":
        add("replaced", "; ".join(f"{what} → {by}" for what, by in replaced) or "nothing (the recorded shaders, the default driver)")
    else:
        add(replaced_label, "; ".join(f"{what}: {by}" for what, by in replaced) or "nothing but their snapshots")
    first = next((f for f in frames if f.diverged), None)
    if bisect is not None and bisect.get("frame") is not None:
        add("first divergent frame", f"frame {bisect['frame']}", f"#frame-{bisect['frame']}" if first is not None else None)
        add("first divergent dispatch", _dispatch_text(bisect))
    elif first is not None:
        add("first divergent frame", f"frame {first.seq} (id {first.frame_id})", f"#frame-{first.seq}")
        dispatch = _first_dispatch(first)
        add("first divergent dispatch", dispatch or ("none diverged of those recorded" if first.dispatches else
                                                     "not recorded (record with --dispatch-level, or bisect to locate it)"))
    elif crashed is not None:
        add("first divergent frame", f"frame {crashed}: the driver crashed", "#crash")
    else:
        add("first divergent frame", "none: every frame compared is within the tolerance" if frames else "none compared")
    diverged = sum(f.diverged for f in frames)
    within = sum(_frame_state(f) == "within" for f in frames)
    comparisons = [c for f in frames for c in f.comparisons] + [c for f in frames for _, c in f.dispatches]
    beyond = sum(c.beyond_tolerance > 0 for c in comparisons)
    resources = len({c.uid for c in comparisons if c.beyond_tolerance > 0})
    add("frames", f"{len(frames)} compared, {diverged} diverged, {within} within tolerance, "
                  f"{len(frames) - diverged - within} identical" + (f"; frame {crashed} crashed" if crashed is not None else ""))
    add("beyond the tolerance", f"{beyond} of {len(comparisons)} comparisons, of {resources} resource(s)")
    if bisect is not None and bisect.get("replays") is not None:
        add("search", f"{bisect.get('replays')} replay(s), {bisect.get('frames_executed_at_most')} frame(s) at most, "
                      f"over {bisect.get('segments')} segment(s)")
    if left_out:
        add("images", f"drawn for the first {drawn} comparisons that are not identical; {left_out} more left out "
                      f"(at most {MAX_FIGURES} per page, to keep the page small); their rows are in the tables")
    return rows


def write_html(path: Path, *, title: str, fingerprints: Iterable[tuple[str, dict[str, Any]]], tolerance: str,
               frames: list[Any], crashed: int | None = None, bisect: dict[str, Any] | None = None,
               command_line: Sequence[str] = (), replaced: Sequence[tuple[str, str]] = (),
               replaced_label: str = "replaced") -> None:
    """Write the page (atomically). ``frames`` are :class:`~replay.results.FrameResult`; ``crashed`` the
    frame a driver crash ended the run in; ``bisect`` the bisection's report (probes, first divergence);
    ``command_line`` the command that made it; ``replaced`` what the run replaced, as (what, by) pairs
    (``("shader step", "step_new.comp")``, ``("ICD", "path")``), or with another ``replaced_label`` what
    else differs between the sides (a diff: ``("embedded file", "step.comp")``). Every string is escaped
    (see the module's docstring)."""
    sections = []
    drawn = left_out = 0
    for f in frames:
        rows = [(c.uid, c) for c in f.comparisons] + [(f"{c.uid} after command {cmd}", c) for cmd, c in f.dispatches]
        shown_figures, skipped = [], 0
        for label, c in rows:
            if c.status == IDENTICAL:
                continue
            if drawn >= MAX_FIGURES:
                skipped += 1
                continue
            drawn += 1
            figure = _figure(label, c)
            if figure is not None:
                shown_figures.append(figure)
        left_out += skipped
        sections.append({"seq": f.seq, "frame_id": f.frame_id, "state": _frame_state(f),
                         "rows": [_row(label, c) for label, c in rows], "figures": shown_figures, "left_out": skipped})
    fingerprints = list(fingerprints)
    points = [_frame_point(f) for f in frames]
    if crashed is not None:
        points.append(FramePoint(crashed, "crashed", 0, 0, 0))
    _render(path, "report.html.j2", title=title, tolerance=tolerance, crashed=crashed, palette=PALETTE,
            summary=_summary(command_line=command_line, fingerprints=fingerprints, tolerance=tolerance, replaced=replaced,
                             replaced_label=replaced_label, frames=frames, crashed=crashed, bisect=bisect, left_out=left_out, drawn=drawn),
            fingerprints=[_fingerprint_row(name, fp) for name, fp in fingerprints], chart=chart(points),
            max_figures=MAX_FIGURES, bisect=_bisect_view(bisect) if bisect else None, sections=sections)


def _suite_link(page: Any, folder: Path) -> Any:
    """Where a result's own page is, as a link from a page in ``folder``: an http(s) URL as it is, a path
    relative to ``folder`` (:func:`safe_href` then decides whether it is written)."""
    text = str(page)
    if text.lower().startswith(tuple(f"{scheme}://" for scheme in LINK_SCHEMES)):
        return text
    try:
        return os.path.relpath(text, folder)
    except ValueError:  # a path that cannot be made relative (another drive)
        return None


def _from_frame(frame: Any) -> str:
    return f" from frame {frame}" if isinstance(frame, int) and not isinstance(frame, bool) else ""


def expected_text(r: Any) -> str:
    """What a suite result was expected to do, with its first frame where the expectation names one:
    ``expected diverged from frame 1``, ``expected pass``. The frame is read from ``r.expected_frame``
    where the result carries it."""
    return f"expected {r.expected or 'pass'}{_from_frame(getattr(r, 'expected_frame', None))}"


def actual_text(r: Any) -> str:
    """What a suite result's replay did: ``diverged from frame 0``, ``crash from frame 3``, ``identical``."""
    frame = r.first_divergence if r.outcome in ("diverged", "crash") else None
    return f"{r.outcome or 'unknown'}{_from_frame(frame)}"


def write_suite_html(path: Path, results: list[Any]) -> None:
    """One page for a suite (:class:`replay.suite.TraceResult` s): a matrix of traces x devices, each cell
    coloured by status (:data:`PALETTE`), naming the status, the expected and the actual outcome with
    their first frames (:func:`expected_text`, :func:`actual_text`), and linking to that replay's own
    page where it wrote one (``r.page``, linked relative to ``path``; only as :func:`safe_href` allows,
    else shown unlinked), else to that result's details below (outcome, expectation, frames, the first
    divergent frame, the reason or the crash, the attempts of a retried trace). Every string is escaped
    (see the module's docstring)."""
    # lazy: vkcap replay imports this module, not replay.suite
    from .suite import device_labels

    labels = device_labels(results)  # the exact device: name and short UUID
    devices = sorted({r.device_key for r in results}, key=str)
    traces = sorted({r.trace for r in results}, key=str)
    by_key = {(r.trace, r.device_key): r for r in results}
    matrix, details = [], []
    for n, trace in enumerate(traces):
        cells: list[dict[str, Any] | None] = []
        for m, device in enumerate(devices):
            r = by_key.get((trace, device))
            if r is None:
                cells.append(None)
                continue
            page = _suite_link(r.page, path.parent) if r.page else None
            cells.append({"colour": SUITE_COLOUR.get(r.status, ""), "status": r.status, "link": page or f"#r{n}-{m}",
                          "expected": expected_text(r), "actual": actual_text(r)})
            expected_frame = getattr(r, "expected_frame", None)
            rows = [("trace", r.trace), ("device", r.device), ("device UUID", r.device_uuid), ("PCI bus", r.pci_bus),
                    ("driver", r.driver), ("status", r.status),
                    ("verdict", getattr(r, "verdict", None)),  # why the status, where the result says it
                    ("expected", expected_text(r)), ("actual", actual_text(r)), ("outcome", r.outcome),
                    ("expected first divergent frame", expected_frame), ("frames", r.frames),
                    ("first divergent frame", r.first_divergence), ("seconds", r.seconds), ("attempts", r.attempts),
                    ("reason", r.reason), ("detail", r.detail)]
            details.append({"anchor": f"r{n}-{m}", "trace": Path(trace).name, "device": labels[device] or "unknown device",
                            "colour": SUITE_COLOUR.get(r.status, ""),
                            "rows": [(key, value) for key, value in rows if value is not None and value != ""],
                            "page": page if r.page else None})
        matrix.append({"trace": Path(trace).name, "cells": cells})
    counts = ", ".join(f"{sum(r.status == s for r in results)} {s}" for s in SUITE_STATUSES)
    _render(path, "suite.html.j2", title="vkcap suite", counts=counts, palette=PALETTE,
            legend=[(status, SUITE_COLOUR[status]) for status in SUITE_STATUSES],
            devices=[labels[d] or "unknown device" for d in devices], matrix=matrix, details=details)
