"""Replay, diff and bisect results as rich tables, JSON documents and JUnit XML."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from vkcore.npyio import write_atomic

from .results import DIVERGED, IDENTICAL, Comparison, FrameResult


def comparison_line(c: Comparison) -> str:
    """One human line: status and, when values differ, where and by how much."""
    if c.status == IDENTICAL:
        return f"{c.uid}: identical ({c.count} elements)"
    if c.size_mismatch:
        return f"{c.uid}: {c.status}: size differs ({c.size_mismatch})"
    parts = [
        f"{c.uid}: {c.status}: {c.differing}/{c.count} {c.dtype} elements differ ({c.share:.2%})",
        f"max abs {c.max_abs:.6g}", f"max rel {c.max_rel:.6g}",
    ]
    if c.max_ulp:
        parts.append(f"max {c.max_ulp} ULP")
    if c.nan_mismatches:
        parts.append(f"{c.nan_mismatches} NaN mismatch(es)")
    if c.inf_mismatches:
        parts.append(f"{c.inf_mismatches} Inf mismatch(es)")
    if c.first_index is not None:
        idx = ", ".join(map(str, c.first_index))
        parts.append(f"first at [{idx}]: recorded {c.first_recorded!r}, live {c.first_live!r}")
    if c.extras.get("heatmap"):
        parts.append(f"heatmap {c.extras['heatmap']}")
    return "; ".join(parts)


def frames_document(frames: Iterable[Any]) -> list[dict[str, Any]]:
    out = []
    for f in frames:
        out.append(
            {
                "frame": f.seq,
                "frame_id": f.frame_id,
                "diverged": f.diverged,
                "resources": [c.as_dict() for c in f.comparisons],
                "dispatches": [{"command": cmd, **c.as_dict()} for cmd, c in f.dispatches],
            }
        )
    return out


def write_json(path: Path, document: dict[str, Any]) -> None:
    write_atomic(path, [json.dumps(document, indent=2, default=str).encode()])


def write_junit(path: Path, suite: str, frames: Iterable[Any]) -> None:
    """One test case per (frame, resource) and per dispatch-level snapshot; a diverged one is a
    failure carrying the comparison line."""
    import xml.etree.ElementTree as ET  # here: only --junit needs it, and its parser library is slow to load

    root = ET.Element("testsuites")
    cases = []
    for f in frames:
        rows = [(c.uid, c) for c in f.comparisons] + [(f"{c.uid}@commands[{cmd}]", c) for cmd, c in f.dispatches]
        for name, c in rows:
            case = ET.Element("testcase", classname=f"{suite}.frame{f.seq}", name=name)
            if c.status == DIVERGED:
                failure = ET.SubElement(case, "failure", message=comparison_line(c))
                failure.text = json.dumps(c.as_dict(), default=str)
            cases.append(case)
    ts = ET.SubElement(root, "testsuite", name=suite, tests=str(len(cases)),
                       failures=str(sum(1 for c in cases if c.find("failure") is not None)))
    ts.extend(cases)
    write_atomic(path, [ET.tostring(root, encoding="utf-8", xml_declaration=True)])


def print_frames(frames: list[Any], *, show_identical: bool = False, console: Any = None) -> None:
    """A table of the comparisons worth showing (all of them with ``show_identical``, else those of
    frames that diverged or are only within tolerance); nothing, and rich not even loaded, when none is."""
    rows = []
    for f in frames:
        for cmd, c in [(None, c) for c in f.comparisons] + list(f.dispatches):
            if c.status == IDENTICAL and not show_identical and not f.diverged:
                continue
            style = "red" if c.status == DIVERGED else ("yellow" if c.status != IDENTICAL else "green")
            where = "" if c.first_index is None else f"[{', '.join(map(str, c.first_index))}] {c.first_recorded!r} -> {c.first_live!r}"
            label = c.uid if cmd is None else f"{c.uid} (after command {cmd})"
            rows.append((str(f.seq), label, f"[{style}]{c.status}[/{style}]", f"{c.differing}/{c.count}",
                         f"{c.max_abs:.3g}", f"{c.max_rel:.3g}", str(c.max_ulp), where))
    if not rows:
        return
    from rich.console import Console  # 40 ms of imports: only when there is something to show
    from rich.table import Table

    table = Table(title="replay")
    for col in ("frame", "resource", "status", "differ", "max abs", "max rel", "max ULP", "first difference"):
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    (console or Console()).print(table)


def frames_from_document(frames: list[dict[str, Any]]) -> list[Any]:
    """FrameResults back from :func:`frames_document` output (an isolated child's report)."""
    from dataclasses import fields

    names = {f.name for f in fields(Comparison)}

    def comparison(d: dict[str, Any]) -> Comparison:
        c = Comparison(**{k: v for k, v in d.items() if k in names and k != "extras"})
        if c.first_index is not None:
            c.first_index = tuple(c.first_index)
        c.extras = {k: v for k, v in d.items() if k not in names and k not in ("share", "command")}
        return c

    return [
        FrameResult(f["frame"], f["frame_id"], [comparison(c) for c in f["resources"]],
                    [(d["command"], comparison(d)) for d in f["dispatches"]])
        for f in frames
    ]
