"""A shader's ``build_options``: an allow-list of what may reach the compiler.

The specification calls ``build_options`` the options used to compile a GLSL shader; ARM's reference
runner reads it as preprocessor definitions (anything else fails there as a bad ``#define``). A scenario,
and a trace's stored copy of one, is input: an option such as ``--depfile PATH`` or ``-o PATH`` would make
the compiler write any file, and a bare word would be read as one more input file. So only these are
accepted, and the compiler is given them rewritten in one canonical spelling each:

- ``-DNAME``, ``-DNAME=VALUE``, ``-D NAME[=VALUE]``, ``--define-macro NAME[=VALUE]``, ``--D NAME[=VALUE]``:
  a macro definition (NAME an identifier; VALUE without NUL or line breaks), given as ``-DNAME[=VALUE]``;
- ``-UNAME``, ``-U NAME``, ``--undef-macro NAME``, ``--U NAME``: given as ``-UNAME``;
- flags that name no file and change only code generation or messages: see :data:`ALLOWED_FLAGS`.

Anything else, and text that does not split as shell words (an unclosed quote, a NUL), is refused with
:class:`BuildOptionsError`, whose message names the option.
"""
from __future__ import annotations

import re
import shlex

#: Flags passed through as they are: debug information, optimisation, warnings. None takes an argument.
ALLOWED_FLAGS = frozenset({"-g", "-g0", "-gV", "-gVS", "-Od", "-Os", "-w", "--suppress-warnings", "--nan-clamp",
                           "--keep-uncalled", "--ku", "--enhanced-msgs"})
DEFINE_FLAGS = ("-D", "--define-macro", "--D")
UNDEFINE_FLAGS = ("-U", "--undef-macro", "--U")
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: A definition's value: anything but NUL and line breaks (a value is one argument, never split again).
VALUE = re.compile(r"[^\0\r\n]*")


class BuildOptionsError(ValueError):
    """``build_options`` holds something outside the allow-list; the message says what."""


def _show(text: str, limit: int = 40) -> str:
    shown = repr(text)
    return shown if len(shown) <= limit else shown[: limit - 4] + "...'"


def _definition(text: str, original: str) -> str:
    name, eq, value = text.partition("=")
    if not IDENTIFIER.fullmatch(name):
        raise BuildOptionsError(f"{_show(original)}: a macro name must be an identifier (letters, digits, '_')")
    if eq and not VALUE.fullmatch(value):
        raise BuildOptionsError(f"{_show(original)}: a macro's value may not hold a NUL or a line break")
    return f"-D{name}{eq}{value}"


def _undefinition(text: str, original: str) -> str:
    if not IDENTIFIER.fullmatch(text):
        raise BuildOptionsError(f"{_show(original)}: a macro name must be an identifier (letters, digits, '_')")
    return f"-U{text}"


def parse_build_options(text: str) -> tuple[str, ...]:
    """The compiler arguments ``text`` allows, canonically spelled (see the module docstring); raises
    :class:`BuildOptionsError` for anything else."""
    if "\0" in text:
        raise BuildOptionsError("holds a NUL character")
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise BuildOptionsError(f"does not split into options: {exc}") from None
    out: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word in DEFINE_FLAGS or word in UNDEFINE_FLAGS:
            if i + 1 >= len(words):
                raise BuildOptionsError(f"{_show(word)} needs a macro name after it")
            argument = words[i + 1]
            out.append(_definition(argument, f"{word} {argument}") if word in DEFINE_FLAGS
                       else _undefinition(argument, f"{word} {argument}"))
            i += 2
            continue
        if word.startswith("-D") and not word.startswith("--"):
            out.append(_definition(word[2:], word))
        elif word.startswith("-U") and not word.startswith("--"):
            out.append(_undefinition(word[2:], word))
        elif word in ALLOWED_FLAGS:
            out.append(word)
        else:
            allowed = ", ".join(sorted(ALLOWED_FLAGS))
            raise BuildOptionsError(f"{_show(word)} is not allowed: only -DNAME[=VALUE], -UNAME and {allowed}")
        i += 1
    return tuple(out)


def build_options_problem(text: object) -> str | None:
    """Why ``text`` is not acceptable as ``build_options``, or None (for validation)."""
    if not isinstance(text, str):
        return None  # the schema's to report
    try:
        parse_build_options(text)
    except BuildOptionsError as exc:
        return str(exc)
    return None
