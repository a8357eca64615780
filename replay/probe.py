"""Running one recorded frame dispatch by dispatch, to compare two drivers side by side.

A trace recorded without ``--dispatch-level`` says which frame diverged but not which dispatch. The
probe replays that frame (from its checkpoint) capturing what every dispatch writes, right after it.
The driver under test runs in this process; the reference driver runs in a child process
(``python -m replay.probe``) because the Vulkan loader picks its drivers once per process. The child
writes its captures into a small trace file, which the parent reads back.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from capture.container import TraceReader, TraceWriter
from capture.trace import DispatchSnapshot, FrameRecord, Trace
from vkcore.errors import DeviceError
from vkcore.commands import kind_of

from .options import ReplayOptions
from .reading import reading
from .replayer import Comparer, rebuild_scenario, replay_trace
from .results import IDENTICAL, Comparison, Tolerance
from .tolerances import TolerancePolicy
from .typed import compare_as

Captures = dict[tuple[int, str], bytes | memoryview]  # (command index, uid) -> bytes after that dispatch
PLACEHOLDER = "0" * 32
#: Seconds the reference driver's child may take to replay one frame before it is stopped (a hung or
#: endlessly slow driver must not hang bisect): 600, ``$VKCAP_PROBE_TIMEOUT`` changes it.
PROBE_TIMEOUT_S = 600.0


def probe_timeout() -> float:
    try:
        value = float(os.environ.get("VKCAP_PROBE_TIMEOUT", "") or PROBE_TIMEOUT_S)
    except ValueError:
        value = PROBE_TIMEOUT_S
    return value if 0 < value < 1e6 else PROBE_TIMEOUT_S


class _Capturer(Comparer):
    """Keeps the live bytes instead of comparing them."""

    captured: Captures

    def compare_one(self, uid: str, recorded_key: str, live: memoryview, what: str, command: int | None = None,
                    seq: int = 0) -> Comparison:
        self.captured[(-1 if command is None else command, uid)] = bytes(live)
        return Comparison(uid, "bytes", IDENTICAL, len(live))


def dispatch_targets(trace: Trace, seq: int) -> dict[int, FrameRecord]:
    """A synthetic frame record asking for every dispatch's written resources in frame ``seq``."""
    with tempfile.TemporaryDirectory(prefix="vkcap-probe-") as tmp:
        scenario = rebuild_scenario(trace, Path(tmp))
    from vkcore.exec.plan import make_plan

    plan = make_plan(scenario, capture_all=bool(trace.header.get("capture_all")))
    record = trace.frame(seq)
    frame = plan.frames[record.index]
    wanted = tuple(
        DispatchSnapshot(cmd.index, uid, PLACEHOLDER)
        for cmd in frame.dispatches
        for uid in kind_of(cmd).declared_writes(scenario, cmd)
    )
    return {seq: FrameRecord(seq, record.pass_index, record.index, record.frame_id, {}, wanted)}


async def capture_dispatches(trace: Trace, options: ReplayOptions, seq: int) -> Captures:
    """Replay frame ``seq`` on this process's driver; return what each dispatch wrote."""
    captured: Captures = {}

    class Capturer(_Capturer):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.captured = captured

    from dataclasses import replace

    await replay_trace(trace, replace(options, first=seq, last=seq), comparer_type=Capturer, targets=dispatch_targets(trace, seq))
    return captured


def capture_on_driver(trace_path: Path, seq: int, icd: Path, device: str | None) -> Captures:
    """Run the probe in a child process on driver ``icd`` (no shader replacement: the reference)."""
    with tempfile.TemporaryDirectory(prefix="vkcap-probe-") as tmp:
        out = Path(tmp) / "probe.vkt"
        env = {**os.environ, "VK_DRIVER_FILES": str(icd.resolve()), "VK_ICD_FILENAMES": str(icd.resolve())}
        cmd = [sys.executable, "-m", "replay.probe", str(trace_path), str(seq), str(out)] + (["--device", device] if device else [])
        timeout = probe_timeout()
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, errors="replace", timeout=timeout,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise DeviceError(f"the reference driver {icd} did not finish frame {seq} within {timeout:g} s "
                              "(VKCAP_PROBE_TIMEOUT sets the limit)") from None
        if proc.returncode != 0 or not out.is_file():
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise DeviceError(f"the reference driver {icd} could not run frame {seq} (exit {proc.returncode}: {tail})")
        with TraceReader(out) as reader:
            return {(int(m["command"]), str(m["uid"])): reader.read_blob(m["blob"]) for _, m in reader.metas("probe")}


def first_divergent_dispatch(live: Captures, reference: Captures, trace: Trace,
                             policy: TolerancePolicy) -> tuple[int, Comparison] | None:
    """The first (command, comparison) where the two drivers' dispatch outputs differ, each output read as
    the replay reads it (:func:`replay.reading.reading`: ``--dtype``, else the shader's view)."""
    exact = replace(policy, per_resource={}, default=Tolerance(), preset="", default_keys={})
    for command, uid in sorted(reference):
        if (command, uid) not in live:
            continue
        c = compare_as(uid, reference[(command, uid)], live[(command, uid)], reading(trace, uid, policy), exact)
        if c.status != IDENTICAL:
            return command, c
    return None


def main(argv: list[str] | None = None) -> int:
    """Child entry point: capture frame SEQ of TRACE dispatch by dispatch into OUT (a small trace)."""
    import trio

    parser = argparse.ArgumentParser(prog="python -m replay.probe")
    parser.add_argument("trace", type=Path)
    parser.add_argument("seq", type=int)
    parser.add_argument("out", type=Path)
    parser.add_argument("--device")
    args = parser.parse_args(argv)
    with Trace.open(args.trace) as trace:
        captured = trio.run(capture_dispatches, trace, ReplayOptions(trace=args.trace, device=args.device), args.seq)
    with TraceWriter(args.out) as writer:
        for (command, uid), data in captured.items():
            writer.add_meta("probe", {"command": command, "uid": uid, "blob": writer.put_blob(data)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
