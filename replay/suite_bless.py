"""``vkcap suite bless``: a manifest's expectations taken from a run's results, edited the way a person
would, with :mod:`tomlkit`.

Guarantees:

- the manifest is read and checked as ``suite run`` reads it (:func:`replay.suite.manifest_traces`:
  every key, type and number; its paths confined to its folder unless allowed), and the results as
  ``suite merge`` reads them (:mod:`replay.result_files`), before anything is written;
- only the expectations that change are touched: every comment, blank line, key order and quoting
  style elsewhere (inside the edited entries too) is kept, inline tables stay inline;
- what is written reads back with :mod:`tomllib` as the blessed expectations (checked before writing:
  a document that would not is an error, the file untouched), any Unicode text included;
- :func:`write_manifest` replaces the file atomically, through a symbolic link (the link stays a link,
  its target gets the new text) and with the file's permission bits kept.
"""
from __future__ import annotations

import fnmatch
import os
import stat
from pathlib import Path
from typing import Any

from vkcore.errors import UsageError

from .suite import TraceResult, in_range, manifest_traces


def bless(manifest: Path, results: list[TraceResult], *, allow_outside: bool = False) -> tuple[str, str]:
    """The manifest's text before and after taking ``results`` as the new expectations: a trace that
    failed gets an expectation for its device (its outcome and first divergent frame, an exact device
    name); one that was ``fixed`` loses the expectation that said it diverges there. Expectations for
    this device whose driver range excludes the result's driver are kept. A glob matching several
    traces is left alone (such a trace needs an entry of its own first)."""
    import tomllib

    import tomlkit

    from .manifest_paths import manifest_matches
    from .small_files import read_small_text

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


def _bless_entry(entry: Any, device: str, r: TraceResult) -> bool:
    """Edit one manifest entry (a tomlkit table or inline table) for result ``r`` on ``device``; whether
    it changed. Comments after an entry's last table introduce what follows it: they stay last."""
    import tomlkit
    from tomlkit.items import InlineTable

    expect = entry.get("expect")
    stale = [i for i, e in enumerate(expect or ())
             if fnmatch.fnmatch(device, str(e["device"])) and in_range(r.driver, str(e.get("driver", "")))]
    closing: list[Any] = []  # the comments after the last expectation, when it goes
    if stale and stale[-1] == len(expect) - 1 and not isinstance(expect[-1], InlineTable):
        closing = _trailing_trivia(expect[-1])
    for i in reversed(stale):  # the others stay, those of other drivers too
        del expect[i]
    added = r.status == "fail" and r.outcome in ("diverged", "crash")
    if added:
        values: dict[str, Any] = {"device": device, "status": r.outcome, "reason": "blessed: " + (r.detail or r.outcome)}
        if r.first_divergence is not None:
            values["frame"] = r.first_divergence
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
    if expect is not None and len(expect) == 0:
        del entry["expect"]
    for item in closing:
        (expect[-1] if expect else entry).value.append(None, item)
    return bool(stale) or added


def _trailing_trivia(table: Any) -> list[Any]:
    """The comments and blank lines that end a tomlkit table's body (after its last key)."""
    from tomlkit.items import Comment, Whitespace

    body = table.value.body
    start = len(body)
    while start and body[start - 1][0] is None and isinstance(body[start - 1][1], (Comment, Whitespace)):
        start -= 1
    return [item for _, item in body[start:]]


def _add_before_trailing_trivia(table: Any, key: str, item: Any) -> None:
    """Add ``key`` to a tomlkit table after its last key and a blank line, before the comments that end
    it (they introduce the next entry)."""
    from tomlkit.items import Whitespace

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
    from vkcore.outputs import output_error, replace_file

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
