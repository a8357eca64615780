"""Progress on a terminal (issue #36, item 6): every long command says what it is doing and how far.

Guarantees tested here: progress is drawn on stderr only when stderr is a terminal (a real pty), and
only after the work has run a while (``VKCAP_PROGRESS_DELAY_S``, 1 s by default; the subprocess tests
set it to 0 so that a fast lavapipe run is "long"); it names the work ("replaying heat.vkt: frame 37",
"bisect: probe 4, frames 48-55", "replaying trace 3/7", "recording frame 37/100", "trim: writing frames
40-50", "starting Ray (local)..."), shows a trace's name as text (never markup, never an escape), is
erased when the work ends, and lets log lines through above it. Through pipes nothing of it appears:
the output is what it was before this display existed. Ctrl-C while it is drawn exits 130 with the
cursor restored and one ``vkcap: interrupted`` line.
"""
from __future__ import annotations

import io
import logging
import os
import re
import shutil
import sys
import time
from pathlib import Path

import pytest

from tests.needs import module
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.text import Text

from tests.builders import REPO, vkcap
from tests.terminal import on_pty
from vkcap.progress import Activity, SuiteProgress
from vkcore.safe_text import shown

HEAT = REPO / "traces" / "heat.vkt"
CSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # rich's colours and cursor moves
SPINNER = re.compile("[\u2800-\u28ff]")  # rich's dots spinner
PROGRESS_WORDS = ("replaying heat", "replaying trace", "bisect: probe", "recording frame", "trim: writing",
                  "starting Ray", "stopping Ray", "diff: ")
NOW = {"VKCAP_PROGRESS_DELAY_S": "0"}  # a lavapipe run is fast: show progress from the start


class FakeTerminal(io.StringIO):
    """A stderr that says it is a terminal: what rich draws there stays readable for the test."""

    def isatty(self) -> bool:
        return True


def with_tmp(args: list[str | Path], tmp_path: Path) -> list[str]:
    """``{tmp}`` in ``args`` is ``tmp_path``, where ``suite/`` holds a two-trace suite (heat and add) and
    ``heat/`` a copy of examples/heat (a recording writes the scenario's outputs beside it)."""
    shutil.copytree(REPO / "examples" / "heat", tmp_path / "heat")
    (tmp_path / "suite").mkdir()
    for name in ("heat.vkt", "add.vkt"):
        shutil.copyfile(REPO / "traces" / name, tmp_path / "suite" / name)
    return [str(a).replace("{tmp}", str(tmp_path)) for a in args]


def plain(terminal: str) -> str:
    return CSI.sub("", terminal)


# ---- the display itself, in this process --------------------------------------------------------------

def fake_terminal(monkeypatch: pytest.MonkeyPatch) -> FakeTerminal:
    """Called in the test itself: pytest's capture sets sys.stderr again after fixtures are set up."""
    fake = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", fake)
    return fake


def wait_until_shown(activity: Activity) -> None:
    deadline = time.monotonic() + 5
    while not activity.shown:
        assert time.monotonic() < deadline, "the display never came"
        time.sleep(0.01)


@pytest.mark.slow
def test_fast_work_draws_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = fake_terminal(monkeypatch)
    with Activity("quick", 10, delay_s=0.5) as activity:
        activity.advance(description="still quick")
    time.sleep(0.6)  # past the delay: the cancelled timer must not draw afterwards
    assert terminal.getvalue() == "" and not activity.shown


def test_off_a_terminal_nothing_is_drawn_however_long(monkeypatch: pytest.MonkeyPatch) -> None:
    pipe = io.StringIO()
    monkeypatch.setattr(sys, "stderr", pipe)
    with Activity("long", 3, delay_s=0) as activity:
        time.sleep(0.2)
        activity.advance()
        assert not activity.shown
    assert pipe.getvalue() == ""


def test_long_work_is_drawn_then_erased_and_log_lines_pass_above(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = fake_terminal(monkeypatch)
    handler = logging.StreamHandler(terminal)
    logging.getLogger().addHandler(handler)
    try:
        with Activity("replaying [red]x[/red]\x1b]0;t\x07.vkt", 4, delay_s=0.05) as activity:
            wait_until_shown(activity)
            activity.advance(description="replaying [red]x[/red]\x1b]0;t\x07.vkt: frame 0")
            assert handler.stream is not terminal  # printed through rich, above the display
            logging.getLogger("vkcap.test").warning("a line from the log")
        assert handler.stream is terminal
    finally:
        logging.getLogger().removeHandler(handler)
    text = terminal.getvalue()
    assert "replaying [red]x[/red]\\x1b]0;t\\x07.vkt" in text and "a line from the log\n" in plain(text)
    assert "\x1b]" not in text
    assert text.endswith("\x1b[?25h") or "\x1b[?25h" in text[-40:]  # the cursor is back


def test_ctrl_c_stops_the_display_and_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = fake_terminal(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        with Activity("bisect: probe 1, frames 0-7", delay_s=0) as activity:
            wait_until_shown(activity)
            raise KeyboardInterrupt
    assert not activity.shown and "\x1b[?25h" in terminal.getvalue()[-40:]


HOSTILE = st.one_of(st.sampled_from(["[red]x[/red]", "[/]", "[link=file:///etc]y[/link]", "\x1b]0;t\x07",
                                     "\x1b[2J", "a\u202eb", "\r\nforged", "\udc80"]), st.text(max_size=30))


@settings(max_examples=60, deadline=None)
@given(name=HOSTILE)
def test_a_trace_name_is_shown_as_written(name: str) -> None:
    """The suite's line about the last trace, as the display's own columns render it: the name's escaped
    form, never markup, never an escape, one line."""
    from rich.progress import Progress

    suite = SuiteProgress(3, logging.getLogger("vkcap"))
    suite.activity.update(description=suite._words(f"{name}: pass"))
    progress = Progress(disable=True)
    progress.add_task(suite.activity.description, total=3)
    rendered = "".join(column.render(progress.tasks[0]).plain for column in suite.activity.columns()[1:2])
    assert rendered == f"replaying trace 1/3, 0 failure(s) (last: {shown(name)}: pass)"
    assert "\x1b" not in rendered and "\n" not in rendered


def test_diff_tells_each_frame() -> None:
    from capture.trace import Trace
    from replay.diff import diff_traces
    from replay.tolerances import TolerancePolicy

    seen: list[tuple[int, int]] = []
    with Trace.open(HEAT) as a, Trace.open(HEAT) as b:
        diff_traces(a, b, TolerancePolicy(), on_frame=lambda seq, total: seen.append((seq, total)))
    assert seen == [(seq, 100) for seq in range(100)]


# ---- the real command line, on a pty and through pipes ------------------------------------------------

@pytest.mark.slow
@pytest.mark.device
def test_replay_on_a_terminal_names_the_trace_as_text_and_counts_frames(tmp_path: Path) -> None:
    hostile = tmp_path / "[red]heat[bold]\x1b]0;owned\x07.vkt"
    shutil.copyfile(HEAT, hostile)
    piped = vkcap("replay", hostile, env=NOW)
    code, out, terminal = on_pty("replay", hostile, env=NOW)
    assert code == piped.returncode == 0
    assert out == piped.stdout  # the table on stdout is the same
    text = plain(terminal)
    assert f"replaying {shown(hostile.name)}: frame " in text and "/100" in text
    assert "\x1b" not in text and "owned\x07" not in text  # the name's escapes stay text
    assert text.rstrip("\r\n").split("\r\n")[-1] == piped.stderr.rstrip("\n").split("\n")[-1]


@pytest.mark.slow
@pytest.mark.device
@pytest.mark.parametrize("args, words", [
    (["bisect", HEAT], "bisect: probe 1, frames "),
    (["replay", HEAT, "--isolate"], "replaying heat.vkt in a child process (--isolate)"),
    (["suite", "run", "{tmp}/suite"], "replaying trace 1/2, 0 failure(s)"),
    (["trim", HEAT, "--frames", "40-50", "-o", "{tmp}/trimmed.vkt"], "trim: writing frames 40-50 of heat.vkt"),
    (["record", "{tmp}/heat/scenario.json", "-o", "{tmp}/heat.vkt"], "recording frame 100/100"),
])
def test_long_commands_show_what_they_do_on_a_terminal(args: list[str | Path], words: str, tmp_path: Path) -> None:
    args = with_tmp(args, tmp_path)
    code, _, terminal = on_pty(*args, env=NOW)
    assert code == 0, terminal
    text = plain(terminal)
    assert words in text and "internal error" not in text, text


@pytest.mark.slow
@pytest.mark.device
@pytest.mark.parametrize("args", [
    ["replay", HEAT], ["bisect", HEAT], ["diff", HEAT, HEAT], ["suite", "run", "{tmp}/suite"],
    ["trim", HEAT, "--frames", "40-50", "-o", "{tmp}/trimmed.vkt"],
    ["record", "{tmp}/heat/scenario.json", "-o", "{tmp}/heat.vkt"],
])
def test_through_pipes_there_is_no_progress(args: list[str | Path], tmp_path: Path) -> None:
    args = with_tmp(args, tmp_path)
    proc = vkcap(*args, env=NOW)
    assert proc.returncode == 0, proc.stderr
    for stream in (proc.stdout, proc.stderr):
        assert "\x1b" not in stream and not SPINNER.search(stream)
        assert not any(word in stream for word in PROGRESS_WORDS), stream
    assert all(line.startswith("vkcap: ") for line in proc.stderr.splitlines()), proc.stderr


@pytest.mark.device
def test_replay_through_pipes_prints_exactly_its_two_lines() -> None:
    proc = vkcap("replay", HEAT, env=NOW)
    assert proc.returncode == 0 and proc.stdout == ""
    assert re.fullmatch(r"vkcap: replayed frames 0-99 from the start of the trace \(checkpoint -1\): ran frames 0-99\n"
                        r"vkcap: 100 frame\(s\) replayed on [^\n]+: all within tolerance\n", proc.stderr), proc.stderr


@pytest.mark.device
def test_ctrl_c_while_progress_is_drawn_exits_130_with_the_cursor_back(tmp_path: Path) -> None:
    code, _, terminal = on_pty("run", "--scenario", REPO / "examples" / "heat" / "scenario.json",
                               "--repeat", "1000000", "--output", tmp_path, env=NOW, interrupt_when=b"/100000000")
    assert code == 130, terminal
    assert terminal.rstrip("\r\n").endswith("vkcap: interrupted")
    assert "\x1b[?25h" in terminal and "Traceback" not in terminal


@pytest.mark.slow
@pytest.mark.device
def test_ray_start_up_is_shown(tmp_path: Path) -> None:
    """With the default delay: Ray's seconds of start-up and shut-down are named, not silent."""
    module("ray", "ray is not installed (the ray extra)")
    shutil.copyfile(REPO / "traces" / "add.vkt", tmp_path / "add.vkt")
    env = {k: v for k, v in os.environ.items() if k != "VKCAP_PROGRESS_DELAY_S"}
    code, _, terminal = on_pty("suite", "run", tmp_path, "--ray", "local", env=env)
    assert code == 0, terminal
    text = plain(terminal)
    assert "starting Ray (local)..." in text and "stopping Ray..." in text
    assert text.rstrip("\r\n").endswith("vkcap: suite: 1 pass")
