"""Text from a trace, scenario, manifest or result file, made safe to show on a terminal or a page.

Such text is untrusted: a uid may hold terminal escape sequences (``"\\x1b]0;title\\x07"``, ``"\\x1b[2J"``),
carriage returns and newlines that forge or hide lines, bidirectional overrides (U+202E) that make text
read other than it is, or lone surrogates that no UTF-8 stream can encode. :func:`shown` replaces each
such character with its Python escape (``\\x1b``, ``\\u202e``, ``\\udc80``): the result is printable,
encodes as UTF-8, and is one line. Printable text, any script included, is kept as it is; a backslash is
kept too, so showing shown text again changes nothing (the escapes are printable).

Markup is the printer's business: rich markup is escaped by :func:`rich_text` (for strings given to
``console.print`` and table cells), HTML by the autoescaping templates of :mod:`replay.html`.
"""
from __future__ import annotations

import re

#: C0 and C1 controls and DEL, lone surrogates, the line and paragraph separators, and the bidirectional
#: marks, embeddings, overrides and isolates (the "Trojan Source" characters).
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
UNSAFE_BUT_NEWLINE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(text: object) -> str:
    """``str(text)`` with every unsafe character (see :data:`UNSAFE`) written as its escape: one
    printable line that encodes as UTF-8. Idempotent."""
    return UNSAFE.sub(_escape, str(text))


def shown_lines(text: object) -> str:
    """As :func:`shown`, but newlines are kept: for text of several lines that vkcap itself composed
    (a log record, a diff), whose untrusted parts went through :func:`shown` already."""
    return UNSAFE_BUT_NEWLINE.sub(_escape, str(text))


def rich_text(text: object) -> str:
    """:func:`shown`, with rich markup escaped: a uid ``[red]`` or ``[/x]`` is printed as written."""
    # lazy: vkcap --help imports this module, not rich.markup
    from rich.markup import escape

    return escape(shown(text))
