"""The documentation stays true: docs/cli.md is what the parsers generate today."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"


def test_the_cli_reference_is_what_the_parsers_generate() -> None:
    """docs/cli.md equals ``python -m vkcap.cli_reference`` byte for byte, whatever the terminal's width
    (argparse wraps usage lines by COLUMNS; the generator fixes the width)."""
    pages = []
    for columns in ("40", "300"):
        proc = subprocess.run([sys.executable, "-m", "vkcap.cli_reference"], cwd=REPO, capture_output=True, text=True,
                              env={**os.environ, "COLUMNS": columns}, timeout=60)
        assert proc.returncode == 0, proc.stderr
        pages.append(proc.stdout)
    assert pages[0] == pages[1], "the generated page depends on COLUMNS"
    assert (DOCS / "cli.md").read_text() == pages[0], (
        "docs/cli.md is stale: the command line changed. Regenerate it with "
        "`.venv/bin/python -m vkcap.cli_reference > docs/cli.md` and commit it")


def test_the_cli_reference_names_every_command_and_flag() -> None:
    """Every visible command and flag of the parsers has its row, and hidden ones (suite worker) none."""
    import argparse

    from vkcap.cli import build_parser
    from vkcap.cli_reference import _commands

    page = (DOCS / "cli.md").read_text()
    for path, parser, _ in _commands(build_parser()):
        assert f"## vkcap {' '.join(path)}\n" in page
        for action in parser._actions:
            if action.option_strings and action.help != argparse.SUPPRESS and not isinstance(action, argparse._HelpAction):
                assert f"| `{action.option_strings[0]}" in page or f"| `{', '.join(action.option_strings)}" in page
    assert "## vkcap suite worker" not in page
