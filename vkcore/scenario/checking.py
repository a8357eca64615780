"""What the semantic checks of a scenario share: the document's entries, what checks learn on the way, the
order in which checks run, and the words of their messages.

A kind's checks live in a light module of :mod:`vkcore.scenario.checks` that its model class names
(``CHECKS``); :mod:`vkcore.scenario.validate` runs them. A check is a function of ``(CheckContext, Entry)``
that yields :data:`Problem` pairs ``(JSON path, message)`` for one resource or command of its kind; the
validator reports the first one. Checks run phase by phase (:data:`PHASES`), and within a phase over the
resources then the commands in file order, so that a scenario with several problems always gets the same
one reported. A check may assume that every earlier phase passed for the whole document (a reference
names a resource of the kind allowed, a ``.npy`` ``src`` has its header in :attr:`CheckContext.npy`).

Nothing here imports Vulkan, or a kind's device-side module.
"""
from __future__ import annotations

import difflib
import importlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from ..errors import json_path
from . import reference_phrases as phrases
from .npyio import NpyFormatError, NpyHeader, read_header

#: ``(JSON path, message)``: one thing wrong with a scenario.
Problem = tuple[str, str]

#: The phases of the semantic checks, in the order they run (the first problem found is the one reported).
#: ``uids``, ``memory_groups``, ``references``, ``shader_stages`` and the ``src`` part of ``paths`` and
#: ``files`` are the validator's own (they span kinds); the others are the kinds'. ``bindings`` is the
#: static part of :mod:`vkcore.scenario.checks.bindings`. A new kind puts its checks in the phase whose
#: assumptions it needs, usually one of the last two.
PHASES = ("uids", "deprecated", "memory_groups", "references", "bindings", "fields", "paths", "build_options",
          "files", "payloads", "push_constants", "shader_stages", "fragment_targets", "spirv_graphs",
          "graph_constants", "optical_flow", "barrier_ranges", "resources", "commands")


@dataclass(frozen=True)
class Entry:
    """One resource or command of the document: its section (``resources`` or ``commands``), position,
    JSON key as written (``key``), the kind that key names (``kind``: an alias resolved), its model class
    (:mod:`vkcore.scenario.model`) and its body."""

    section: str
    index: int
    key: str
    kind: str
    model: type
    body: dict[str, Any]

    def place(self, *parts: str | int) -> str:
        """The JSON path of this entry, or of ``parts`` inside its body."""
        return json_path(self.section, self.index, self.key, *parts)


@dataclass
class CheckContext:
    """What the checks of one document share: its path, entries, resources by uid, .npy headers of the
    ``src`` files read so far (uid -> header)."""

    path: Path
    resources: list[Entry]
    commands: list[Entry]
    by_uid: dict[str, Entry] = field(default_factory=dict)
    npy: dict[str, NpyHeader] = field(default_factory=dict)
    _headers: dict[Path, NpyHeader] = field(default_factory=dict)

    def header(self, path: Path) -> NpyHeader:
        """The .npy header of ``path``, read once per validation however many resources name the file."""
        if path not in self._headers:
            self._headers[path] = read_header(path)
        return self._headers[path]

    def resolve(self, relative: str) -> Path:
        """Resolve a ``src``-like path: absolute as is, else against the scenario's folder."""
        p = Path(relative)
        return p if p.is_absolute() else self.path.parent / p

    def target(self, uid: str) -> dict[str, Any]:
        """The body of the resource ``uid`` (a reference the ``references`` phase has checked)."""
        return self.by_uid[uid].body


Check = Callable[[CheckContext, Entry], Iterator[Problem]]
_loaded: dict[str, Mapping[str, Check]] = {}


def checks_of(model: type) -> Mapping[str, Check]:
    """The checks of a kind by phase: the ``CHECKS`` table of the module its model class names."""
    name = getattr(model, "CHECKS", "")
    if not name:
        return {}
    if name not in _loaded:
        _loaded[name] = importlib.import_module(f"{__package__}.checks.{name}").CHECKS
    return _loaded[name]


# ---------------------------------------------------------------------------------------------------------
# Words of the messages
# ---------------------------------------------------------------------------------------------------------

def quote(text: str) -> str:
    """``'text'`` with control characters escaped, so a message stays one line."""
    return "'" + "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text) + "'"


def hint(word: str, candidates: Sequence[str], *, listed: bool) -> str:
    """``; did you mean 'x'?`` (or ``(did you mean 'x'?)``) when ``word`` is close to a candidate."""
    prefix = os.path.commonprefix(list(candidates)) if len(candidates) > 1 else ""
    if not word.startswith(prefix):
        prefix = ""
    by_rest = {c[len(prefix):]: c for c in candidates}  # compare what differs: "R32_SFLOAT", not "VK_FORMAT_..."
    close = [by_rest[c] for c in difflib.get_close_matches(word[len(prefix):], list(by_rest), n=1, cutoff=0.6)]
    if not close:
        close = [c for c in candidates if c.lower() == word.lower()]
    if not close:
        return ""
    if listed:
        return f"; did you mean {quote(close[0])}?"
    return f" (did you mean {quote(close[0])}?)"


def noun(kind: str) -> str:
    """``a buffer``, ``an image``."""
    return ("an " if kind[0] in "aeiou" else "a ") + kind


# ---------------------------------------------------------------------------------------------------------
# Files a scenario names
# ---------------------------------------------------------------------------------------------------------

def src_problems(ctx: CheckContext, entry: Entry, *, cannot_open: str = phrases.CANNOT_OPEN,
                 missing: Callable[[str], bool] | None = None) -> Iterator[Problem]:
    """The ``files`` phase of a resource whose model has a ``SRC``: its ``src`` exists (a .npy one is
    read, its header kept in :attr:`CheckContext.npy`). ``cannot_open`` starts the message of a file that
    cannot be opened; ``missing(problem)`` may excuse one (returns True: not a problem)."""
    src = entry.body.get("src", "")
    if not src:
        return
    resolved = ctx.resolve(src)
    problem = file_problem(resolved)
    if problem and not (missing is not None and missing(problem)):
        yield entry.place("src"), f"{cannot_open}: {problem}"
    if entry.model.SRC == "npy":
        try:
            ctx.npy[entry.body["uid"]] = ctx.header(resolved)
        except NpyFormatError as exc:
            yield entry.place("src"), f"cannot read {resolved} as .npy: {exc}"
        except OSError as exc:
            yield entry.place("src"), f"cannot read {resolved}: {exc.strerror or exc}"


def file_problem(path: Path) -> str | None:
    """Why ``path`` cannot be read as an input file, or None."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return f"file not found: {path}"
    except (OSError, ValueError) as exc:
        return f"cannot open {path}: {getattr(exc, 'strerror', None) or exc}"
    if stat.S_ISDIR(st.st_mode):
        return f"is a folder, not a file: {path}"
    if not stat.S_ISREG(st.st_mode):
        return f"not a regular file: {path}"
    return None


def is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False
