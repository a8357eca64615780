"""Benchmark: replaying a trace that diverges in every frame, with large resources (the comparison's cost).

    .venv/bin/python bench/diverged_replay.py [--runs 3] [--frames 17] [--mib 48]

The scenario is ``bench/record_overhead.py``'s accumulator (``c += a * b * 0.01``) over ``--mib`` MiB
buffers, capturing ``c`` after each of ``--frames`` frames, recorded with checkpoints every 16 (so its
snapshots are temporal deltas, format 3.0). It is replayed with the shader's constant changed to
0.0101, so every element of every frame diverges, and compared as the replay compares it by default (the
shader's view of ``c``: float32), as float32 named by hand (``--dtype c=float32``) and as raw bytes
(``--dtype c=bytes``). Before timing, each replay is checked to report every frame diverged. Run it in
two trees (``git worktree``) for a before and after.

Prints, per comparison, the median wall time and peak RSS (the child's ``ru_maxrss``) of fresh
``python -m vkcap replay`` processes.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.machine import machine_info  # noqa: E402
from bench.record_overhead import make_scenario  # noqa: E402

MiB = 1 << 20


def timed(argv: list[str], expect_rc: int) -> tuple[float, float, str]:
    """(wall seconds, peak RSS MiB, stderr) of one child; exits if its exit code is not ``expect_rc``."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, for its rusage
    if proc.returncode != expect_rc:
        sys.exit(f"{' '.join(argv)}: exit {proc.returncode}, expected {expect_rc}:\n{err[-2000:]}")
    return wall, usage.ru_maxrss / 1024, err


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--frames", type=int, default=17)
    parser.add_argument("--mib", type=int, default=48)
    args = parser.parse_args()
    python = [sys.executable, "-m", "vkcap"]
    with tempfile.TemporaryDirectory() as work:
        sc = make_scenario(Path(work), "diverged", args.frames, args.mib * MiB, capture=("c",))
        trace, out = Path(work) / "t.vkt", Path(work) / "out"
        timed(python + ["record", str(sc.path), "-o", str(trace), "--output", str(out), "--checkpoint-every", "16"], 0)
        bad = Path(work) / "bad.comp"
        bad.write_text((sc.path.parent / "integrate.comp").read_text().replace("0.01;", "0.0101;"))
        info = machine_info()
        print(f"machine: {info['cpu']}, {info['cores']} cores, {info['vulkan_device']}; {args.frames} frames of "
              f"{args.mib} MiB, every frame diverged; medians of {args.runs} fresh processes")
        print("| compared as | wall | peak RSS |")
        print("| --- | --- | --- |")
        for label, flags in (("default (the shader's view)", []), ("--dtype c=float32", ["--dtype", "c=float32"]),
                             ("--dtype c=bytes", ["--dtype", "c=bytes"])):
            argv = python + ["replay", str(trace), "--replace-shader", f"integrate={bad}", *flags]
            walls, peaks = [], []
            for _ in range(args.runs):
                wall, peak, err = timed(argv, 1)
                if f"{args.frames} of {args.frames} frame(s) diverged" not in err:
                    sys.exit(f"expected every frame to diverge:\n{err[-2000:]}")
                walls.append(wall)
                peaks.append(peak)
            print(f"| {label} | {statistics.median(walls):.2f} s | {max(peaks):.0f} MiB |")


if __name__ == "__main__":
    main()
