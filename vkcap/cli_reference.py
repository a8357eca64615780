"""docs/cli.md, generated from the argparse parsers: ``python -m vkcap.cli_reference > docs/cli.md``.

The page is a pure function of :func:`vkcap.cli.build_parser`: one section per command (nested ones,
``suite run``, as their own sections), its usage line and every flag with its help and default, in the
order the parsers declare them. Usage lines are wrapped at a fixed width, whatever the terminal's
``COLUMNS``, so the same code always gives the same bytes; ``tests/test_docs.py`` regenerates the page
and fails when docs/cli.md differs from it. Hidden commands and flags (``help=SUPPRESS``) stay hidden.
"""
from __future__ import annotations

import argparse
import re
import sys
from typing import Iterator

from .cli import build_parser

WIDTH = 100  # the usage lines' width, fixed so that the page does not depend on the terminal

HEADER = """\
# Command-line reference

You want to know exactly what a command or a flag does, and its default. Every command and flag of
`vkcap` is below, in the order `--help` lists them. This page is generated from the parsers themselves
(`python -m vkcap.cli_reference > docs/cli.md`; `tests/test_docs.py` fails when it is stale): do not
edit it by hand. For what to run when, start from the [guide](guide.md).

`vkcap --scenario x.json ...` means `vkcap run --scenario x.json ...`, as ARM's `scenario-runner` takes it.
Exit codes: 0 success (replay, diff, bisect: everything within tolerance), 1 a failure while running or a
divergence, 2 invalid input, 130 interrupted.
"""


class _FixedWidthFormatter(argparse.HelpFormatter):
    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=WIDTH, max_help_position=40)


def _visible_subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """The (name, parser) pairs of a parser's sub-commands that ``--help`` shows, in declaration order."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            shown = {choice.dest for choice in action._choices_actions if choice.help != argparse.SUPPRESS}
            for name, sub in action.choices.items():
                if name in shown:
                    yield name, sub


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser, str]]:
    helps = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
    for name, sub in _visible_subcommands(parser):
        yield (*path, name), sub, helps.get(name, "")
        yield from _commands(sub, (*path, name))


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = _FixedWidthFormatter(parser.prog)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups, prefix="")
    return formatter.format_help().strip()


def _flag_name(action: argparse.Action) -> str:
    if not action.option_strings:
        return action.metavar if isinstance(action.metavar, str) else action.dest
    names = ", ".join(action.option_strings)
    if action.nargs == 0:
        return names
    formatter = _FixedWidthFormatter("vkcap")
    return f"{names} {formatter._format_args(action, formatter._get_default_metavar_for_optional(action))}"


def _default(action: argparse.Action) -> str | None:
    """The default worth printing: none for switches, for ``None`` and for empty lists; said once where
    the help text already states it."""
    value = action.default
    if action.nargs == 0 or value is None or value is argparse.SUPPRESS or value == []:
        return None
    if action.help and "default" in action.help:
        return None
    return str(value)


def _escape(text: str) -> str:
    return re.sub(r"([|<>*_])", r"\\\1", text)


def _flags(parser: argparse.ArgumentParser) -> Iterator[str]:
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, (argparse._SubParsersAction, argparse._HelpAction)):
            continue
        help_text = (action.help or "").replace("%(default)s", str(action.default)).replace("%%", "%")
        if action.choices is not None and action.metavar is not None:  # else the flag's name shows them
            choices = ", ".join(map(str, action.choices))
            if choices not in help_text:
                help_text = f"{help_text} (one of: {choices})" if help_text else f"one of: {choices}"
        default = _default(action)
        if default is not None:
            help_text += f" (default: {default})"
        yield f"| `{_flag_name(action).replace('|', chr(92) + '|')}` | {_escape(help_text)} |"


def render(parser: argparse.ArgumentParser | None = None) -> str:
    """The whole page as markdown, ending with one newline."""
    if parser is None:
        parser = build_parser()
    commands = list(_commands(parser))
    out = [HEADER, "## Commands", ""]
    for path, _, help_text in commands:
        title = " ".join(path)
        out.append(f"- [`vkcap {title}`](#vkcap-{'-'.join(path)}): {help_text}")
    out.append("")
    for path, sub, help_text in commands:
        out += [f"## vkcap {' '.join(path)}", "", help_text[:1].upper() + help_text[1:] + ".", ""]
        out += ["```text", _usage(sub), "```", ""]
        rows = list(_flags(sub))
        if rows:
            out += ["| flag | what it does |", "| --- | --- |", *rows, ""]
    return "\n".join(out).rstrip("\n") + "\n"


def main() -> int:
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
