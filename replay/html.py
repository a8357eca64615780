"""``--html FILE``: one self-contained page for replay, diff and bisect results.

Everything is inline (CSS, SVG, PNG data URIs): the page needs no network and reads the same with
JavaScript off (it has none). It holds a header with the fingerprints compared and the tolerance; a
timeline strip with one cell per frame, coloured identical / within tolerance / diverged / crashed and
linking to the frame's section; per frame, a table of every comparison (counts, the statistics over the
elements beyond the tolerance, the first offending index), for resources of two or more dimensions the
recorded, live and |difference| images side by side (with ``value_maps``/heatmaps: written by the
replay), and each comparison's ULP histogram as an SVG bar chart; for bisect, its probes and the first
divergent dispatch. Images are at most :data:`MAX_IMAGE_SIDE` pixels a side and drawn for the first
:data:`MAX_FIGURES` comparisons that are not identical (the rest keep their table rows), so the page of
a 100-frame trace of 4 MiB resources stays far below 10 MB.

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
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable
from urllib.parse import urlsplit

from vkcore.outputs import write_atomic
from vkcore.safe_text import UNSAFE, shown

from .results import DIVERGED, IDENTICAL, WITHIN, Comparison

MAX_IMAGE_SIDE = 256
MAX_FIGURES = 12  # comparisons shown with images (the first ones): the page stays small for long traces
STATUS_CLASS = {IDENTICAL: "identical", WITHIN: "within", DIVERGED: "diverged"}
SUITE_COLOUR = {"pass": "identical", "expected": "within", "fixed": "within", "flaky": "within", "fail": "diverged",
                "skip": ""}
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
    from jinja2 import Environment, PackageLoader, StrictUndefined

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


def _row(label: str, c: Comparison) -> dict[str, Any]:
    """One comparison's table row: status, counts, the statistics beyond the tolerance, the first difference."""
    beyond = c.statistics.get("beyond", {}) if c.statistics else {}
    abs_stats = beyond.get("abs", {})
    first = "" if c.first_index is None else f"[{', '.join(map(str, c.first_index))}] {c.first_recorded!r} → {c.first_live!r}"
    cosine = c.statistics.get("cosine_similarity") if c.statistics else None
    return {"label": label, "status_class": STATUS_CLASS.get(c.status, ""), "status": c.status, "first": first,
            "numbers": [f"{c.differing}/{c.count}", f"{c.beyond_tolerance}/{c.count}", _num(c.max_abs),
                        _num(abs_stats.get("mean", 0.0)), _num(abs_stats.get("p99", 0.0)), _num(c.max_ulp),
                        "" if cosine is None else f"{cosine:.9f}"]}


def _figure(label: str, c: Comparison) -> dict[str, Any] | None:
    """A comparison's images (recorded, live, |difference|) and ULP histogram; None when it has neither."""
    images = [{"caption": caption, "uri": _data_uri(c.extras.get(key))} for caption, key in
              (("recorded", "recorded_map"), ("live", "live_map"), ("|difference|", "heatmap"))]
    images = [image for image in images if image["uri"]]
    histogram = (c.statistics or {}).get("all", {}).get("ulp_histogram")
    if not images and not histogram:
        return None
    return {"label": label, "images": images, "histogram": _histogram_bars(histogram) if histogram else None}


def _fingerprint_row(name: str, fp: Any) -> dict[str, Any]:
    fp = fp if isinstance(fp, dict) else {}
    layers = fp.get("layers") or []
    listed = ", ".join(map(str, layers)) if isinstance(layers, (list, tuple)) else str(layers)
    return {"name": name, "device": fp.get("device_name", ""),
            "driver": f"{fp.get('driver_name', '')} {fp.get('driver_version', '')} ({fp.get('driver_info', '')})",
            "vulkan": fp.get("api_version", ""), "layers": listed or "none"}


def _frame_state(f: Any) -> str:
    if f.diverged:
        return "diverged"
    within = any(c.status == WITHIN for c in f.comparisons) or any(c.status == WITHIN for _, c in f.dispatches)
    return "within" if within else "identical"


def _bisect_view(bisect: dict[str, Any]) -> dict[str, Any]:
    segment = (f", segment {bisect['segment']} (module {bisect.get('module', '')})"
               if bisect.get("segment") is not None else "")
    return {"frame": bisect.get("frame"), "command": f"{bisect.get('command')} {bisect.get('command_name', '')}{segment}",
            "probes": [{"frames": "-".join(map(str, p.get("frames") or [])), "diverged": p.get("diverged", "")}
                       for p in bisect.get("probes") or []]}


def write_html(path: Path, *, title: str, fingerprints: Iterable[tuple[str, dict[str, Any]]], tolerance: str,
               frames: list[Any], crashed: int | None = None, bisect: dict[str, Any] | None = None) -> None:
    """Write the page (atomically). ``frames`` are :class:`~replay.results.FrameResult`; ``crashed`` the
    frame a driver crash ended the run in; ``bisect`` the bisection's report (probes, first divergence).
    Every string is escaped (see the module's docstring)."""
    sections = []
    figures = 0
    for f in frames:
        rows = [(c.uid, c) for c in f.comparisons] + [(f"{c.uid} after command {cmd}", c) for cmd, c in f.dispatches]
        shown_figures = []
        for label, c in rows:
            if c.status != IDENTICAL and figures < MAX_FIGURES:
                figures += 1
                figure = _figure(label, c)
                if figure is not None:
                    shown_figures.append(figure)
        sections.append({"seq": f.seq, "frame_id": f.frame_id, "rows": [_row(label, c) for label, c in rows],
                         "figures": shown_figures})
    _render(path, "report.html.j2", title=title, tolerance=tolerance, crashed=crashed,
            fingerprints=[_fingerprint_row(name, fp) for name, fp in fingerprints],
            strip=[{"seq": f.seq, "state": _frame_state(f)} for f in frames],
            bisect=_bisect_view(bisect) if bisect else None, sections=sections)


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


def write_suite_html(path: Path, results: list[Any]) -> None:
    """One page for a suite (:class:`replay.suite.TraceResult` s): a matrix of traces x devices, each cell
    coloured by status and linking to that replay's own page where it wrote one (``r.page``, linked
    relative to ``path``; only as :func:`safe_href` allows, else shown unlinked), else to that result's
    details below (outcome, expectation, frames, the first divergent frame, the reason or the crash, the
    attempts of a retried trace). Every string is escaped (see the module's docstring)."""
    devices = sorted({r.device for r in results}, key=str)
    traces = sorted({r.trace for r in results}, key=str)
    by_key = {(r.trace, r.device): r for r in results}
    matrix, details = [], []
    for n, trace in enumerate(traces):
        cells: list[dict[str, Any] | None] = []
        for m, device in enumerate(devices):
            r = by_key.get((trace, device))
            if r is None:
                cells.append(None)
                continue
            page = _suite_link(r.page, path.parent) if r.page else None
            cells.append({"colour": SUITE_COLOUR.get(r.status, ""), "status": r.status, "link": page or f"#r{n}-{m}"})
            rows = [("trace", r.trace), ("device", r.device), ("driver", r.driver), ("status", r.status), ("outcome", r.outcome),
                    ("expected", r.expected), ("frames", r.frames), ("first divergent frame", r.first_divergence),
                    ("seconds", r.seconds), ("attempts", r.attempts), ("reason", r.reason), ("detail", r.detail)]
            details.append({"anchor": f"r{n}-{m}", "trace": Path(trace).name, "device": device or "unknown device",
                            "rows": [(key, "" if value is None else value) for key, value in rows],
                            "page": page if r.page else None})
        matrix.append({"trace": Path(trace).name, "cells": cells})
    counts = ", ".join(f"{sum(r.status == s for r in results)} {s}" for s in SUITE_STATUSES)
    _render(path, "suite.html.j2", title="vkcap suite", counts=counts,
            devices=[d or "unknown device" for d in devices], matrix=matrix, details=details)
