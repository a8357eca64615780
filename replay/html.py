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
"""
from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any, Iterable

from vkcore.outputs import write_atomic

from .results import DIVERGED, IDENTICAL, WITHIN, Comparison

MAX_IMAGE_SIDE = 256
MAX_FIGURES = 12  # comparisons shown with images (the first ones): the page stays small for long traces
STATUS_CLASS = {IDENTICAL: "identical", WITHIN: "within", DIVERGED: "diverged"}
STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#1d1d1d}
h1{font-size:20px;margin:0 0 8px} h2{font-size:16px;margin:24px 0 8px}
table{border-collapse:collapse;margin:8px 0} td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}
th{background:#f2f2f2} td.num{text-align:right;font-variant-numeric:tabular-nums}
.strip{display:flex;flex-wrap:wrap;gap:2px;margin:8px 0}
.strip a{display:block;width:14px;height:22px;border-radius:2px}
.identical{background:#3aa655} .within{background:#e5b710} .diverged{background:#d33a2c} .crashed{background:#111}
.legend span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:middle}
.images{display:flex;gap:16px;flex-wrap:wrap} figure{margin:0} figcaption{font-size:12px;color:#555}
img{image-rendering:pixelated;max-width:256px;border:1px solid #ccc}
"""


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
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode("ascii")


def _histogram_svg(histogram: dict[str, int]) -> str:
    """An inline SVG bar chart of a ULP histogram (bar heights on a log scale, counts printed)."""
    import math

    width, height, bar = 300, 90, 44
    top = max(histogram.values(), default=0)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 30}" role="img" '
             'aria-label="ULP histogram">']
    for i, (label, count) in enumerate(histogram.items()):
        h = 0 if count == 0 else max(2, int(height * math.log1p(count) / math.log1p(top)))
        x = 4 + i * (bar + 4)
        parts.append(f'<rect x="{x}" y="{height - h}" width="{bar}" height="{h}" fill="#5470c6"/>')
        parts.append(f'<text x="{x + bar / 2}" y="{height + 12}" font-size="10" text-anchor="middle">{label}</text>')
        parts.append(f'<text x="{x + bar / 2}" y="{height + 26}" font-size="10" text-anchor="middle">{count}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _e(value: Any) -> str:
    return html.escape(str(value))


def _num(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else _e(value)


def _comparison_rows(seq: int, label: str, c: Comparison) -> str:
    beyond = c.statistics.get("beyond", {}) if c.statistics else {}
    abs_stats = beyond.get("abs", {})
    first = "" if c.first_index is None else f"[{', '.join(map(str, c.first_index))}] {c.first_recorded!r} → {c.first_live!r}"
    cosine = c.statistics.get("cosine_similarity") if c.statistics else None
    cells = [label, f'<span class="{STATUS_CLASS.get(c.status, "")}">&nbsp;</span> {_e(c.status)}',
             f"{c.differing}/{c.count}", f"{c.beyond_tolerance}/{c.count}", _num(c.max_abs), _num(abs_stats.get("mean", 0.0)),
             _num(abs_stats.get("p99", 0.0)), _num(c.max_ulp), "" if cosine is None else f"{cosine:.9f}", _e(first)]
    row = "<tr>" + "".join(f"<td>{cell}</td>" if i in (0, 1, 9) else f'<td class="num">{cell}</td>'
                           for i, cell in enumerate(cells)) + "</tr>"
    return row


def _figures(seq: int, label: str, c: Comparison) -> str:
    images = [(caption, _data_uri(c.extras.get(key))) for caption, key in
              (("recorded", "recorded_map"), ("live", "live_map"), ("|difference|", "heatmap"))]
    shown = [(caption, uri) for caption, uri in images if uri]
    histogram = (c.statistics or {}).get("all", {}).get("ulp_histogram")
    if not shown and not histogram:
        return ""
    out = [f'<h3>{_e(label)}</h3><div class="images">']
    for caption, uri in shown:
        out.append(f'<figure><img src="{uri}" alt="{_e(label)}: {caption}" data-kind="{caption}">'
                   f"<figcaption>{caption}</figcaption></figure>")
    if histogram:
        out.append(f"<figure>{_histogram_svg(histogram)}<figcaption>ULP distances, all elements</figcaption></figure>")
    out.append("</div>")
    return "".join(out)


def write_html(path: Path, *, title: str, fingerprints: Iterable[tuple[str, dict[str, Any]]], tolerance: str,
               frames: list[Any], crashed: int | None = None, bisect: dict[str, Any] | None = None) -> None:
    """Write the page (atomically). ``frames`` are :class:`~replay.results.FrameResult`; ``crashed`` the
    frame a driver crash ended the run in; ``bisect`` the bisection's report (probes, first divergence)."""
    body: list[str] = [f"<h1>{_e(title)}</h1>"]
    body.append("<table><tr><th></th><th>device</th><th>driver</th><th>Vulkan</th><th>layers</th></tr>")
    for name, fp in fingerprints:
        body.append(f"<tr><th>{_e(name)}</th><td>{_e(fp.get('device_name', ''))}</td><td>{_e(fp.get('driver_name', ''))} "
                    f"{_e(fp.get('driver_version', ''))} ({_e(fp.get('driver_info', ''))})</td>"
                    f"<td>{_e(fp.get('api_version', ''))}</td><td>{_e(', '.join(fp.get('layers') or []) or 'none')}</td></tr>")
    body.append(f"</table><p>tolerance: {_e(tolerance)}</p>")
    body.append('<p class="legend">frames:<span class="identical"></span>identical<span class="within"></span>within '
                'tolerance<span class="diverged"></span>diverged<span class="crashed"></span>crashed</p><div class="strip">')
    for f in frames:
        state = ("diverged" if f.diverged else
                 "within" if any(c.status == WITHIN for c in f.comparisons) or any(c.status == WITHIN for _, c in f.dispatches)
                 else "identical")
        body.append(f'<a href="#frame-{f.seq}" class="{state}" title="frame {f.seq}: {state}"></a>')
    if crashed is not None:
        body.append(f'<a href="#crash" class="crashed" title="frame {crashed}: crashed"></a>')
    body.append("</div>")
    if bisect:
        segment = (f", segment {bisect['segment']} (module {bisect.get('module', '')})"
                   if bisect.get("segment") is not None else "")
        body.append("<h2>bisect</h2><table><tr><th>first divergent frame</th><td>"
                    f"{_e(bisect.get('frame'))}</td></tr><tr><th>command</th><td>{_e(bisect.get('command'))} "
                    f"{_e(bisect.get('command_name', ''))}{_e(segment)}</td></tr></table>")
        probes = bisect.get("probes") or []
        if probes:
            body.append("<table><tr><th>probe</th><th>frames</th><th>diverged</th></tr>")
            for i, p in enumerate(probes):
                frames_text = "-".join(map(str, p.get("frames") or []))
                body.append(f"<tr><td>{i}</td><td>{_e(frames_text)}</td><td>{_e(p.get('diverged', ''))}</td></tr>")
            body.append("</table>")
    header = ("<tr><th>resource</th><th>status</th><th>differ</th><th>beyond tol.</th><th>max abs</th>"
              "<th>mean abs (beyond)</th><th>p99 abs (beyond)</th><th>max ULP</th><th>cosine</th><th>first difference</th></tr>")
    figures = 0
    for f in frames:
        body.append(f'<section id="frame-{f.seq}"><h2>frame {f.seq} (id {f.frame_id})</h2><table>{header}')
        rows = [(c.uid, c) for c in f.comparisons] + [(f"{c.uid} after command {cmd}", c) for cmd, c in f.dispatches]
        body.extend(_comparison_rows(f.seq, label, c) for label, c in rows)
        body.append("</table>")
        for label, c in rows:
            if c.status != IDENTICAL and figures < MAX_FIGURES:
                figures += 1
                body.append(_figures(f.seq, label, c))
        body.append("</section>")
    if crashed is not None:
        body.append(f'<section id="crash"><h2>frame {crashed}: the driver crashed</h2></section>')
    page = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f"<style>{STYLE}</style></head><body>{''.join(body)}</body></html>")
    write_atomic(path, [page.encode("utf-8")])


def write_suite_html(path: Path, results: list[Any]) -> None:
    """One page for a suite (:class:`replay.suite.TraceResult` s): a matrix of traces x devices, each cell
    coloured by status and linking to that replay's own page where it wrote one (``r.page``, linked
    relative to ``path``), else to that result's details below (outcome, expectation, frames, the first
    divergent frame, the reason or the crash, the attempts of a retried trace)."""
    import os

    def link(r: Any, n: int, m: int) -> str:
        return os.path.relpath(r.page, path.parent) if r.page else f"#r{n}-{m}"

    devices = sorted({r.device for r in results})
    traces = sorted({r.trace for r in results})
    by_key = {(r.trace, r.device): r for r in results}
    colour = {"pass": "identical", "expected": "within", "fixed": "within", "flaky": "within", "fail": "diverged",
              "skip": ""}
    body = ["<h1>vkcap suite</h1><p>" + ", ".join(
        f"{sum(r.status == s for r in results)} {s}" for s in ("pass", "expected", "fixed", "flaky", "fail", "skip")) + "</p>",
        "<table><tr><th>trace</th>" + "".join(f"<th>{_e(d or 'unknown device')}</th>" for d in devices) + "</tr>"]
    for n, trace in enumerate(traces):
        cells = []
        for m, device in enumerate(devices):
            r = by_key.get((trace, device))
            cells.append("<td></td>" if r is None else
                         f'<td class="{colour.get(r.status, "")}"><a href="{_e(link(r, n, m))}">{_e(r.status)}</a></td>')
        body.append(f"<tr><th>{_e(Path(trace).name)}</th>{''.join(cells)}</tr>")
    body.append("</table>")
    for n, trace in enumerate(traces):
        for m, device in enumerate(devices):
            r = by_key.get((trace, device))
            if r is None:
                continue
            rows = [("trace", r.trace), ("device", r.device), ("driver", r.driver), ("status", r.status), ("outcome", r.outcome),
                    ("expected", r.expected), ("frames", r.frames), ("first divergent frame", r.first_divergence),
                    ("seconds", r.seconds), ("attempts", r.attempts), ("reason", r.reason), ("detail", r.detail)]
            page = f'<p><a href="{_e(link(r, n, m))}">the replay\'s page</a></p>' if r.page else ""
            body.append(f'<section id="r{n}-{m}"><h2>{_e(Path(trace).name)} on {_e(device or "unknown device")}</h2>'
                        "<table>" + "".join(f"<tr><th>{k}</th><td>{_e('' if v is None else v)}</td></tr>" for k, v in rows)
                        + f"</table>{page}</section>")
    page = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>vkcap suite</title>'
            f"<style>{STYLE}</style></head><body>{''.join(body)}</body></html>")
    write_atomic(path, [page.encode("utf-8")])
