"""``vkcap suite bless``: a manifest's expectations taken from a run's results, edited the way a person
would, with :mod:`tomlkit`.

Guarantees:

- the manifest is read and checked as ``suite run`` reads it (:func:`replay.suite.manifest_traces`:
  every key, type and number; its paths confined to its folder unless allowed), and the results as
  ``suite merge`` reads them (:mod:`replay.result_files`), before anything is written;
- only the expectations that change are touched: every comment, blank line, key order and quoting
  style elsewhere (inside the edited entries too) is kept, inline tables stay inline; a human
  ``reason`` and the device glob that matched are never replaced (the measurement goes to ``measured``);
- what is written reads back with :mod:`tomllib` as the blessed expectations (checked before writing:
  a document that would not is an error, the file untouched), any Unicode text included;
- :func:`write_manifest` replaces the file atomically, through a symbolic link (the link stays a link,
  its target gets the new text) and with the file's permission bits kept.
"""
from __future__ import annotations

import fnmatch
import os
import stat
import tomllib
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.items import Comment, InlineTable, Whitespace

from vkcore.errors import UsageError
from vkcore.outputs import output_error, replace_file

from .manifest_paths import manifest_matches
from .small_files import read_small_text
from .suite import TraceResult, in_range, manifest_traces
from .verdicts import diverged_uids, resource_line


def bless(manifest: Path, results: list[TraceResult], *, allow_outside: bool = False) -> tuple[str, str]:
    """The manifest's text before and after taking ``results`` as the new expectations, as a careful
    reviewer would (:func:`_bless_entry`): a trace that failed gets its outcome, first divergent frame
    and diverged resources in the expectation that judged it (its device glob, driver range and human
    ``reason`` kept; what was measured beside them, in ``measured``), or in a new one for its exact
    device; one that was ``fixed`` loses the expectations that said it diverges there. Expectations
    whose driver range excludes the result's driver are kept. A glob matching several traces is left
    alone (such a trace needs an entry of its own first)."""
    before = read_small_text(manifest, "suite manifest")
    manifest_traces(manifest, allow_outside=allow_outside)  # every check suite run makes, first
    doc = tomlkit.parse(before)
    by_trace = {(Path(r.trace).resolve(), r.device): r for r in results}
    changed = False
    for index, entry in enumerate(doc.get("traces", [])):
        matches = manifest_matches(manifest, str(entry["path"]), f"traces[{index}].path", allow_outside=allow_outside)
        if len(matches) != 1:
            continue
        trace = matches[0].resolve()
        for (path, device), r in by_trace.items():
            if path == trace and r.status in ("fail", "fixed"):
                changed = _bless_entry(entry, device, r) or changed
    if not changed:
        return before, before
    after = tomlkit.dumps(doc)
    try:
        tomllib.loads(after)
    except tomllib.TOMLDecodeError as exc:  # tomlkit wrote what TOML does not allow: never write it
        raise UsageError(f"the blessed manifest would not read back ({exc}); left unchanged", file=manifest) from None
    return before, after


def measured_text(r: TraceResult) -> str:
    """What a result measured, for an expectation's ``measured`` key: the resources beyond their
    tolerance (``from frame 0: out (float32): 12 beyond ulp 4, up to 9 ULP``), or the crash, on which
    device and driver."""
    lines = [resource_line(v) for v in r.resources if v.get("status") == "DIVERGED"]
    where = "" if r.first_divergence is None else f"{'in' if r.outcome == 'crash' else 'from'} frame {r.first_divergence}: "
    what = "; ".join(lines) if lines else r.detail or r.outcome
    if r.outcome == "crash" or not lines:
        where = ""  # a crash's or an older result's detail names its frame itself
    on = ", ".join(p for p in (r.device, f"driver {r.driver}" if r.driver else "") if p)
    return f"{where}{what}" + (f" (on {on})" if on else "")


def _bless_entry(entry: Any, device: str, r: TraceResult) -> bool:
    """Edit one manifest entry (a tomlkit table or inline table) for result ``r`` on ``device``; whether
    it changed. A failure edits the expectation that judged it (the first whose device glob and driver
    range match) in place: its status, frame and resources become the measured ones, ``measured`` says
    what was measured; its device glob, driver range, reason, link and comments stay. With none, a new
    expectation for the exact device comes first. A fixed trace loses the expectations that match it.
    Comments after an entry's last table introduce what follows it: they stay last."""
    expect = entry.get("expect")
    matching = [i for i, e in enumerate(expect or ())
                if fnmatch.fnmatch(device, str(e["device"])) and in_range(r.driver, str(e.get("driver", "")))]
    if r.status == "fixed":
        if not matching:
            return False
        closing: list[Any] = []  # the comments after the last expectation, when it goes
        if matching[-1] == len(expect) - 1 and not isinstance(expect[-1], InlineTable):
            closing = _trailing_trivia(expect[-1])
        for i in reversed(matching):  # the others stay, those of other drivers too
            del expect[i]
        if len(expect) == 0:
            del entry["expect"]
        for item in closing:
            (expect[-1] if len(expect) else entry).value.append(None, item)
        return True
    if not (r.status == "fail" and r.outcome in ("diverged", "crash")):
        return False
    values: dict[str, Any] = {"status": r.outcome}
    if r.first_divergence is not None:
        values["frame"] = r.first_divergence
    uids = diverged_uids(r.resources)
    if r.outcome == "diverged" and uids:
        values["resources"] = uids
    values["measured"] = measured_text(r)
    if matching:
        table = expect[matching[0]]
        if r.first_divergence is None and "frame" in table:
            del table["frame"]
        if r.outcome == "crash" and "resources" in table:
            del table["resources"]
        for key, value in values.items():
            _set_key(table, key, value)
        return True
    values = {"device": device, **values}
    if isinstance(entry, InlineTable):
        table: Any = tomlkit.inline_table()
        table.update(values)
        if expect is None:
            entry["expect"] = tomlkit.array()
            expect = entry["expect"]
    else:
        table = tomlkit.table()
        table.update(values)
        table.add(tomlkit.nl())
        if expect is None:
            _add_before_trailing_trivia(entry, "expect", tomlkit.aot())
            expect = entry["expect"]
    expect.insert(0, table)
    return True


def _set_key(table: Any, key: str, value: Any) -> None:
    """Set ``key`` of a tomlkit table in place: an existing key keeps its place; a new one goes after
    the last key, before the comments that end a table (they introduce what follows)."""
    if key in table or isinstance(table, InlineTable):
        table[key] = value
        return
    container = table.value
    at = len(container.body) - len(_trailing_trivia(table))
    while at and isinstance(container.body[at - 1][1], tomlkit.items.Whitespace):  # a blank line stays after the keys
        at -= 1
    if at < len(container.body):
        container._insert_at(at, key, tomlkit.item(value))
    else:
        container.append(key, tomlkit.item(value))


def _trailing_trivia(table: Any) -> list[Any]:
    """The comments and blank lines that end a tomlkit table's body (after its last key)."""
    body = table.value.body
    start = len(body)
    while start and body[start - 1][0] is None and isinstance(body[start - 1][1], (Comment, Whitespace)):
        start -= 1
    return [item for _, item in body[start:]]


def _add_before_trailing_trivia(table: Any, key: str, item: Any) -> None:
    """Add ``key`` to a tomlkit table after its last key and a blank line, before the comments that end
    it (they introduce the next entry)."""
    container = table.value
    at = len(container.body) - len(_trailing_trivia(table))
    container.body.insert(at, (None, Whitespace("\n")))  # only comments follow: no key's index moves
    if at + 1 < len(container.body):
        container._insert_at(at + 1, key, item)  # before the comments (tomlkit inserts before an item only)
    else:
        container.append(key, item)


def write_manifest(manifest: Path, text: str) -> None:
    """Replace the manifest's content with ``text`` atomically, keeping what the file is: through a
    symbolic link the target is replaced (the link stays), and the permission bits stay as they were
    (the new file has them from its creation: never more open, even for a moment)."""
    target = Path(os.path.realpath(manifest))
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
        tmp = target.parent / f".{target.name}.{os.urandom(6).hex()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    except OSError as exc:
        raise output_error(manifest, exc) from None
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(text.encode("utf-8"))
        replace_file(tmp, target)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise output_error(manifest, exc) from None
        raise
