"""The documentation stays true: docs/cli.md is what the parsers generate today, the runnable blocks of
README.md and docs/*.md run as printed (and print what the page shows), and every relative link resolves."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.builders import with_repo_path

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


# --- docs that run ---------------------------------------------------------------------------------------
# A fenced block whose info string is `sh run` (optionally `exit=N`, `needs=TOOL`) is executed with bash -e,
# the blocks of one page in order, in one temporary folder holding a copy of examples/ and traces/, with the
# virtualenv's bin/ first on the PATH. A `text expect` block right after it lists lines its output must
# hold, in order. A `yaml ci` block is a CI job: its `vkcap ...` commands run, in order. CONTRIBUTING.md
# ("Documentation") documents the markers.

PAGES = sorted([REPO / "README.md", REPO / "CONTRIBUTING.md", REPO / "CHANGELOG.md", *DOCS.glob("*.md")])
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+)(?P<info>[^`]*)$")
RUN_INFO = re.compile(r"^sh run(?P<options>(?: +\w+=[\w.-]+)*)$")


@dataclass
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    info: str
    text: str


def fenced_blocks(page: Path) -> list[Block]:
    """The page's fenced code blocks, in order (blocks indented under list items included)."""
    blocks: list[Block] = []
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if not opened:
            i += 1
            continue
        indent, fence = len(opened["indent"]), opened["fence"]
        body: list[str] = []
        j = i + 1
        while j < len(lines) and lines[j].strip() != fence:
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
            j += 1
        blocks.append(Block(page, i + 1, opened["info"].strip(), "\n".join(body) + "\n"))
        i = j + 1
    return blocks


@dataclass
class Step:
    """One thing to run: a shell script, the exit code it must give, the lines its output must hold."""

    block: Block
    script: str
    exit_code: int = 0
    needs: str | None = None
    expect: list[str] = field(default_factory=list)


def ci_commands(block: Block) -> list[str]:
    """The `vkcap ...` commands of a CI job's shell steps (GitHub Actions `run:`, GitLab CI `script:`)."""
    out = []
    for line in block.text.splitlines():
        command = line.strip().removeprefix("- ").removeprefix("run: ").strip()
        if command.startswith("vkcap "):
            out.append(command)
    return out


def steps_of(page: Path) -> list[Step]:
    steps: list[Step] = []
    previous_ran = False
    for block in fenced_blocks(page):
        run = RUN_INFO.match(block.info)
        if run:
            options = dict(item.split("=", 1) for item in run["options"].split())
            unknown = set(options) - {"exit", "needs"}
            assert not unknown, f"{page.name}:{block.line}: unknown option(s) {sorted(unknown)} in ```{block.info}"
            steps.append(Step(block, block.text, int(options.get("exit", 0)), options.get("needs")))
        elif block.info == "text expect":
            assert previous_ran, f"{page.name}:{block.line}: a `text expect` block must follow a `sh run` block"
            steps[-1].expect = [line.strip() for line in block.text.splitlines() if line.strip()]
        elif block.info == "yaml ci":
            commands = ci_commands(block)
            assert commands, f"{page.name}:{block.line}: a `yaml ci` block without vkcap commands"
            # A command an earlier block of the page already ran, in the same folder, is not run again.
            ran = {line.strip() for step in steps for line in step.script.splitlines()}
            fresh = [command for command in commands if command not in ran]
            if fresh:
                steps.append(Step(block, "\n".join(fresh) + "\n"))
        previous_ran = bool(run)
    return steps


RUNNABLE_PAGES = [page for page in PAGES if steps_of(page)]


def _workspace(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    for name in ("examples", "traces"):
        shutil.copytree(REPO / name, work / name)
    return work


def _environment() -> dict[str, str]:
    venv_bin = str(Path(sys.executable).parent)
    # PYTHONPATH: this checkout's packages, also where the virtualenv's vkcap is installed from another one.
    return {**os.environ, "PATH": venv_bin + os.pathsep + os.environ.get("PATH", ""), "PYTHONPATH": with_repo_path(),
            "COLUMNS": "200"}


@pytest.mark.slow
@pytest.mark.device
@pytest.mark.parametrize("page", RUNNABLE_PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_the_runnable_blocks_of_a_page_run_as_printed(page: Path, tmp_path: Path) -> None:
    """Every `sh run` block (and every CI job's vkcap commands) of the page exits as it says, in order, and
    prints the lines of the `text expect` block after it."""
    work, env = _workspace(tmp_path), _environment()
    for step in steps_of(page):
        where = f"{page.relative_to(REPO)}:{step.block.line}"
        if step.needs and shutil.which(step.needs, path=env["PATH"]) is None:
            continue  # e.g. ARM's reference runner, which ships for Python 3.11 only
        proc = subprocess.run(["bash", "-e", "-c", step.script], cwd=work, env=env, capture_output=True, text=True,
                              timeout=240)
        output = proc.stdout + proc.stderr
        assert proc.returncode == step.exit_code, (
            f"{where}: exit {proc.returncode}, the page says {step.exit_code}:\n{step.script}\n{output[-3000:]}")
        position = 0
        for line in step.expect:
            found = output.find(line, position)
            assert found >= 0, f"{where}: the output lacks {line!r} (in order):\n{output[-3000:]}"
            position = found + len(line)


def test_the_first_steps_are_marked_runnable() -> None:
    """The commands a first user needs are among the runnable blocks: record, info, replay, diff, bisect,
    extract, trim, suite run, suite merge, suite bless, and the reference runner beside vkcap."""
    scripts = "\n".join(step.script for page in PAGES for step in steps_of(page))
    for command in ("vkcap record", "vkcap info", "vkcap replay", "vkcap diff", "vkcap bisect", "vkcap extract",
                    "vkcap trim", "vkcap suite run", "vkcap suite merge", "vkcap suite bless", "scenario_runner",
                    "vkcap run", "vkcap --scenario"):
        assert command in scripts, f"no runnable block runs {command!r}"
    ci = [block for page in PAGES for block in fenced_blocks(page) if block.info == "yaml ci"]
    assert len(ci) == 2, "docs/suites.md shows a GitHub Actions and a GitLab CI job"


# --- links -----------------------------------------------------------------------------------------------
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _prose(page: Path) -> str:
    """The page without its fenced blocks and inline code, where links are not links."""
    lines, inside, fence = [], False, ""
    for line in page.read_text().splitlines():
        opened = FENCE.match(line)
        if not inside and opened:
            inside, fence = True, opened["fence"]
            continue
        if inside:
            inside = line.strip() != fence
            continue
        lines.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(lines)


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation but - and _ removed, spaces
    as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = text.replace("`", "").replace("*", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in _prose(page).splitlines():
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        slug = github_slug(heading[1])
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def test_github_slugs() -> None:
    assert github_slug("Run ARM's runner beside vkcap") == "run-arms-runner-beside-vkcap"
    assert github_slug("1. Record each scenario once") == "1-record-each-scenario-once"
    assert github_slug("CI: GitHub Actions and GitLab CI") == "ci-github-actions-and-gitlab-ci"
    assert github_slug("vkcap suite run") == "vkcap-suite-run"
    assert github_slug("Fleets: the `--ray` flag") == "fleets-the---ray-flag"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    """Every relative link and image of the page names a file of the repository, and its #anchor a heading
    of that file."""
    broken = []
    for match in LINK.finditer(_prose(page)):
        target = match["target"]
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        file = (page.parent / path_part).resolve() if path_part else page
        if not file.exists() or REPO not in (file, *file.parents):
            broken.append(f"{target}: no such file")
        elif anchor and (file.suffix != ".md" or anchor not in anchors(file)):
            broken.append(f"{target}: no heading #{anchor} in {file.relative_to(REPO)}")
    assert not broken, f"{page.relative_to(REPO)}: " + "; ".join(broken)


def test_the_readme_is_a_landing_page() -> None:
    """At most 200 lines, the set-up commands on the first screen, and a link to every page of docs/."""
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    first_screen = "\n".join(readme.splitlines()[:40])
    assert "make demo" in first_screen and "make test" in first_screen
    for page in DOCS.glob("*.md"):
        assert f"(docs/{page.name}" in readme, f"README.md does not link docs/{page.name}"
