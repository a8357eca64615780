"""Replay, diff and bisect results as rich tables, JSON documents and JUnit XML."""
from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import fields
from pathlib import Path
from typing import Any, Iterable

from vkcore.errors import UsageError
from vkcore.outputs import check_output_folder, check_output_target, same_file, write_atomic
from vkcore.paths import open_regular
from vkcore.safe_text import rich_text, shown, shown_lines

from .results import DIVERGED, IDENTICAL, Comparison, FrameResult, from_json_number, json_safe

#: What the two sides of a comparison are called: a replay compares the live run with the recording;
#: a diff compares trace A with trace B.
REPLAY_SIDES = ("recorded", "live")
DIFF_SIDES = ("A", "B")
#: The fields of a :class:`Comparison` that may hold a non-finite float (written as "inf", "nan"...).
FLOAT_FIELDS = frozenset({"max_abs", "max_rel", "first_recorded", "first_live", "beyond_max_abs", "beyond_max_rel"})


def comparison_line(c: Comparison, sides: tuple[str, str] = REPLAY_SIDES) -> str:
    """One human line: status and, when values differ, where and by how much; ``sides`` names the
    values compared (:data:`REPLAY_SIDES`, :data:`DIFF_SIDES`)."""
    if c.status == IDENTICAL:
        return f"{c.uid}: identical ({c.count} elements)"
    if c.size_mismatch:
        return f"{c.uid}: {c.status}: size differs ({c.size_mismatch})"
    counted = f"{c.uid}: {c.status}: {c.differing}/{c.count} {c.dtype} elements differ ({c.share:.2%})"
    if c.beyond_tolerance != c.differing:
        counted += f", {c.beyond_tolerance} beyond the tolerance ({c.beyond_share:.2%})"
    parts = [counted, f"max abs {c.max_abs:.6g}", f"max rel {c.max_rel:.6g}"]
    if c.max_ulp:
        parts.append(f"max {c.max_ulp} ULP")
    if c.nan_mismatches:
        parts.append(f"{c.nan_mismatches} NaN mismatch(es)")
    if c.inf_mismatches:
        parts.append(f"{c.inf_mismatches} Inf mismatch(es)")
    if c.first_index is not None:
        idx = c.extras.get("first_where") or f"[{', '.join(map(str, c.first_index))}]"  # a struct's names the field
        parts.append(f"first at {idx}: {sides[0]} {c.first_recorded!r}, {sides[1]} {c.first_live!r}")
    if len(c.top) > 1:
        which = "beyond the tolerance" if c.beyond_tolerance else "differing"
        listed = ", ".join(t.get("where") or f"[{', '.join(map(str, t['index']))}]" for t in c.top)
        parts.append(f"first {len(c.top)} {which}: {listed}")
    for f in c.extras.get("fields", ()):
        if f["differing"]:
            ulp = f", up to {f['max_ulp']} ULP" if f["max_ulp"] else ""
            parts.append(f"field {f['name']} ({f['dtype']}): {f['differing']} differ, {f['beyond_tolerance']} beyond the tolerance{ulp}")
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


#: Every report vkcap writes carries its generator, so that a later run replaces it and nothing else.
GENERATOR = "vkcap"
JUNIT_MARK = b"<!-- generator: vkcap -->"
_MARKS = (b'"generator": "vkcap"', b'<meta name="generator" content="vkcap">', JUNIT_MARK)
# Reports written before the marks existed, recognised by their start: a replay's or diff's JSON (its
# frames), a suite's (its results), a JUnit file of testsuites, an HTML page titled by vkcap.
_LEGACY = ((b'"frames":',), (b'"results":',), (b"<testsuites", b"<testsuite "), (b"<!DOCTYPE html>", b"<title>vkcap"))
_HEAD = 64 << 10


def is_vkcap_report(path: Path) -> bool:
    """Whether the file at ``path`` is a report vkcap wrote (its first 64 KiB hold vkcap's mark, or an
    older report's shape): the only existing files a report flag may replace."""
    try:
        fd, _ = open_regular(path)
    except OSError:  # a FIFO, a device, a folder, unreadable: no report of ours
        return False
    try:
        head = os.read(fd, _HEAD)
    finally:
        os.close(fd)
    return any(mark in head for mark in _MARKS) or any(all(p in head for p in parts) for parts in _LEGACY)


def marked_junit(xml: bytes) -> bytes:
    """``xml`` (with its declaration line) with vkcap's mark after the declaration."""
    declaration, newline, rest = xml.partition(b"\n")
    return declaration + newline + JUNIT_MARK + b"\n" + rest if newline else JUNIT_MARK + b"\n" + xml


def write_json(path: Path, document: dict[str, Any]) -> None:
    """Write ``document`` as strict JSON, its first key ``"generator": "vkcap"``: non-finite floats become
    ``"inf"``, ``"-inf"``, ``"nan"`` (:func:`~replay.results.json_safe`), never the bare ``Infinity``/``NaN``
    JSON does not have."""
    marked = {"generator": GENERATOR, **document}
    write_atomic(path, [json.dumps(json_safe(marked), indent=2, default=str, allow_nan=False).encode()])


def check_output(flag: str, path: Path | None, inputs: Iterable[Path], *, folder: bool = False) -> None:
    """Refuse, before any work, a report path given with ``flag`` (``--json``, ``--junit``; ``--heatmap``
    with ``folder``) that must not or cannot be written: one of ``inputs`` (the traces read), a folder
    where a file is wanted or a file where a folder is, a path under a file, a place where no file can
    be created (no permission, a read-only or virtual file system). Raises :class:`UsageError`
    ``PATH: FLAG: why``. Creates nothing that stays (the probe file has no name and is closed at once);
    ``None`` passes."""
    if path is None:
        return

    if any(same_file(path, trace) for trace in inputs):
        raise UsageError("is a trace this command reads: refusing to overwrite it", file=path, place=flag)
    if folder:
        check_output_folder(path, place=flag)
    else:
        check_output_target(path, place=flag)
        if path.is_file() and path.stat().st_size and not is_vkcap_report(path):
            raise UsageError("exists and is not a vkcap report: refusing to replace it (delete it, or choose another "
                             "name)", file=path, place=flag)
    # os.access, which those checks use, passes where creating a file still fails (/proc as root): try.
    start = path if folder else path.parent  # relative paths end at ".", which exists
    nearest = next((p for p in (start, *start.parents) if p.exists()), Path(os.getcwd()))
    try:
        with tempfile.TemporaryFile(dir=nearest):
            pass
    except OSError as exc:
        raise UsageError(f"cannot create files in {nearest}: {exc.strerror or exc}", file=path, place=flag) from None


def write_junit(path: Path, suite: str, frames: Iterable[Any], *, crash: tuple[int | None, str] | None = None,
                sides: tuple[str, str] = REPLAY_SIDES) -> None:
    """One test case per (frame, resource) and per dispatch-level snapshot; a diverged one is a
    failure carrying the comparison line (``sides`` as in :func:`comparison_line`) and its data as
    strict JSON. ``crash`` (frame or None for setup, line): one more test
    case, ``driver crash`` in that frame's class, a failure carrying the crash line."""
    # lazy: vkcap replay imports this module, not xml.etree.ElementTree
    import xml.etree.ElementTree as ET  # here: only --junit needs it, and its parser library is slow to load

    root = ET.Element("testsuites")
    cases = []
    for f in frames:
        rows = [(c.uid, c) for c in f.comparisons] + [(f"{c.uid}@commands[{cmd}]", c) for cmd, c in f.dispatches]
        for name, c in rows:
            case = ET.Element("testcase", classname=f"{shown(suite)}.frame{f.seq}", name=shown(name))
            if c.status == DIVERGED:
                failure = ET.SubElement(case, "failure", message=shown(comparison_line(c, sides)))
                failure.text = json.dumps(c.as_dict(), default=str, allow_nan=False)
            cases.append(case)
    if crash is not None:
        case = ET.Element("testcase", classname=f"{shown(suite)}.{'setup' if crash[0] is None else f'frame{crash[0]}'}",
                          name="driver crash")
        ET.SubElement(case, "failure", message=shown(crash[1])).text = shown_lines(crash[1])
        cases.append(case)
    ts = ET.SubElement(root, "testsuite", name=shown(suite), tests=str(len(cases)),
                       failures=str(sum(1 for c in cases if c.find("failure") is not None)))
    ts.extend(cases)
    write_atomic(path, [marked_junit(ET.tostring(root, encoding="utf-8", xml_declaration=True))])


PIPE_WIDTH = 100_000  # off a terminal: wide enough that no table is ever cut (rich renders tables at their natural width)


def report_console(*, stderr: bool = False) -> Any:
    """A rich console for tables and reports that never cuts a number: off a terminal (a CI log, a pipe)
    as wide as any table needs, without colour codes; on a terminal at its width, with tables made by
    :func:`report_table` folding long cells onto more lines rather than ending them with an ellipsis.
    Emoji codes (``:smile:``) are never replaced: text from a trace is printed as written (its markup
    escaped by :func:`~vkcore.safe_text.rich_text`)."""
    # lazy: vkcap replay imports this module, not rich.console
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr, emoji=False)
    return Console(stderr=stderr, width=PIPE_WIDTH, no_color=True, highlight=False, soft_wrap=True, emoji=False)


def report_table(title: str, columns: Iterable[str], *, right: Iterable[str] = ()) -> Any:
    """A rich table whose cells fold (wrap) rather than being cut with an ellipsis; ``right``: the
    columns aligned right. The title and the column names are vkcap's (markup allowed); cells from a
    trace go through :func:`~vkcore.safe_text.rich_text`."""
    # lazy: vkcap replay imports this module, not rich.table
    from rich.table import Table

    table = Table(title=title)
    aligned = set(right)
    for col in columns:
        table.add_column(col, overflow="fold", justify="right" if col in aligned else "left")
    return table


def print_frames(frames: list[Any], *, show_identical: bool = False, console: Any = None, title: str = "replay") -> None:
    """A table of the comparisons worth showing (all of them with ``show_identical``, else those of
    frames that diverged or are only within tolerance), titled ``title``; nothing, and rich not even
    loaded, when none is."""
    rows = []
    for f in frames:
        for cmd, c in [(None, c) for c in f.comparisons] + list(f.dispatches):
            if c.status == IDENTICAL and not show_identical and not f.diverged:
                continue
            style = "red" if c.status == DIVERGED else ("yellow" if c.status != IDENTICAL else "green")
            at = c.extras.get("first_where") or f"[{', '.join(map(str, c.first_index or ()))}]"
            where = "" if c.first_index is None else f"{at} {c.first_recorded!r} -> {c.first_live!r}"
            label = c.uid if cmd is None else f"{c.uid} (after command {cmd})"
            rows.append((str(f.seq), rich_text(label), f"[{style}]{rich_text(c.status)}[/{style}]", f"{c.differing}/{c.count}",
                         f"{c.beyond_tolerance}/{c.count}", f"{c.max_abs:.3g}", f"{c.max_rel:.3g}", str(c.max_ulp),
                         rich_text(where)))
    if not rows:
        return
    table = report_table(title, ("frame", "resource", "status", "differ", "beyond tol.", "max abs", "max rel",
                                 "max ULP", "first difference"))
    for row in rows:
        table.add_row(*row)
    (console or report_console()).print(table)


def frames_from_document(frames: list[dict[str, Any]]) -> list[Any]:
    """FrameResults back from :func:`frames_document` output (an isolated child's report), non-finite
    numbers (``"inf"``, ``"nan"``...) back to floats."""
    names = {f.name for f in fields(Comparison)}

    def comparison(d: dict[str, Any]) -> Comparison:
        c = Comparison(**{k: from_json_number(v) if k in FLOAT_FIELDS else v
                          for k, v in d.items() if k in names and k != "extras"})
        if c.first_index is not None:
            c.first_index = tuple(c.first_index)
        c.extras = {k: v for k, v in d.items() if k not in names and k not in ("share", "beyond_share", "command")}
        return c

    return [
        FrameResult(f["frame"], f["frame_id"], [comparison(c) for c in f["resources"]],
                    [(d["command"], comparison(d)) for d in f["dispatches"]])
        for f in frames
    ]
