"""``#include`` in GLSL from a trace: checked before the compiler reads anything.

glslang resolves includes itself (the including file's folder first, then each ``-I`` folder), so a
trace's shader could name ``../../etc/passwd`` and have the compiler read, and quote in its messages, a
host file. :func:`check_includes` reads every ``#include`` directive the way the preprocessor sees it
(backslash-newline continuations spliced, comments removed) and requires each to be a plain
``"name"`` or ``<name>`` whose name is a relative path without ``..`` (:func:`vkcore.scenario.confine.path_problem`);
the files it reaches inside the folder are checked the same way, recursively. With the include folders
themselves confined to the folder (the caller passes only such folders), the compiler then cannot reach a
file outside it.
"""
from __future__ import annotations

import re
from pathlib import Path

from ..errors import ScenarioError
from ..paths import read_regular
from ..scenario.confine import path_problem

#: The largest shader source or include file read.
SOURCE_LIMIT = 64 << 20

_CONTINUATION = re.compile(rb"\\\n")
_COMMENT = re.compile(rb"/\*.*?(?:\*/|\Z)|//[^\n]*", re.DOTALL)
_DIRECTIVE = re.compile(rb"^[ \t\f\v]*#[ \t\f\v]*include\b(.*)$", re.MULTILINE)
_PLAIN = re.compile(rb'[ \t\f\v]*(?:"([^"\n]*)"|<([^>\n]*)>)[ \t\f\v]*')


def include_names(source: bytes) -> list[bytes | None]:
    """The name of every ``#include`` in ``source`` as the preprocessor reads it; None for a directive
    that is not a plain ``"name"`` or ``<name>`` (a macro, an unclosed quote...)."""
    text = source.replace(b"\r\n", b"\n").replace(b"\r", b"\n")  # the preprocessor ends a line at a lone CR too
    text = _CONTINUATION.sub(b"", text)
    text = _COMMENT.sub(lambda m: b" " + b"\n" * m.group().count(b"\n"), text)
    names: list[bytes | None] = []
    for match in _DIRECTIVE.finditer(text):
        plain = _PLAIN.fullmatch(match.group(1))
        names.append(None if plain is None else (plain.group(1) if plain.group(1) is not None else plain.group(2)))
    return names


def check_includes(source: Path, text: bytes, folder: Path | None, include_dirs: list[Path], *, file: Path | None,
                   place: str, shown: str) -> None:
    """Raise :class:`ScenarioError` (``file``, ``place``) unless every ``#include`` reachable from
    ``source`` (holding ``text``) names a file that can only be inside ``folder``; ``shown`` names the
    shader in the message (its uid). With ``folder`` None (a user's own scenario) any name is allowed,
    but every file an include can reach must still be a regular file (a FIFO would hang the compiler)."""
    root = folder.resolve() if folder is not None else None
    seen: set[Path] = set()
    pending = [(source, text)]
    while pending:
        current, content = pending.pop()
        for raw in include_names(content):
            if raw is None:
                raise ScenarioError(f"shader {shown}: an #include that is not a plain \"name\" or <name> "
                                    "(a trace's shader may include only its own files)", file=file, place=place)
            try:
                name = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise ScenarioError(f"shader {shown}: an #include name that is not UTF-8", file=file, place=place) from None
            problem = "is empty" if not name else path_problem(name) if root is not None else None
            if problem is not None:
                raise ScenarioError(f"shader {shown}: #include {name!r} {problem}", file=file, place=place)
            for base in [current.parent, *include_dirs]:
                try:
                    candidate = (base / name).resolve()
                except (OSError, ValueError, RuntimeError):
                    continue  # the compiler will not find it either, and says so
                if root is not None and not candidate.is_relative_to(root):
                    raise ScenarioError(f"shader {shown}: #include {name!r} leaves the trace's folder", file=file, place=place)
                if candidate in seen or not candidate.exists() or candidate.is_dir():
                    continue
                seen.add(candidate)
                try:
                    pending.append((candidate, read_regular(candidate, SOURCE_LIMIT)))
                except OSError as exc:
                    raise ScenarioError(f"shader {shown}: #include {name!r}: cannot read: {exc.strerror or exc}",
                                        file=file, place=place) from None
