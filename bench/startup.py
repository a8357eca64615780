"""Start-up: where ``vkcap replay TRACE --frame 1`` of a small trace spends its time before and around
the one frame it replays. Prints a table of medians over fresh processes:

- the interpreter alone (``python -c pass``);
- each stage run on its own, in order, in one fresh process: imports (what ``vkcap replay`` imports),
  opening the trace, the Vulkan instance and device, the replay of the frame;
- the real command, whose wall time overlaps the Vulkan start with the imports (see
  ``vkcore.device.context.start_instance_early``);
- the ten slowest imports by ``python -X importtime`` (cumulative), from one run.

    python bench/startup.py [--runs 7] [--trace T.vkt]

Without ``--trace``, ``examples/add`` is recorded first, on this machine: a trace recorded on another
device may diverge here, and a divergence report is not start-up.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

STAGES = r"""
import json, sys, time
t0 = time.perf_counter()
import trio
import vkcap.cli, replay.replayer, capture.trace
from replay.options import ReplayOptions
t1 = time.perf_counter()
trace = capture.trace.Trace.open(sys.argv[1])
t2 = time.perf_counter()
from vkcore.device.context import VulkanContext
ctx = VulkanContext(device=None)
t3 = time.perf_counter()
ctx.close()
report = replay.replayer.replay(ReplayOptions(trace=trace.path, first=1, last=1), opened=trace)
t4 = time.perf_counter()
print(json.dumps({"imports": t1 - t0, "trace open": t2 - t1, "Vulkan instance and device": t3 - t2,
                  "replay of frame 1 (its own device)": t4 - t3}))
"""


def wall(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, cwd=REPO)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--trace", type=Path, help="the trace to replay (default: examples/add, recorded here)")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    python = [sys.executable]
    with tempfile.TemporaryDirectory() as work:
        if args.trace is None:
            args.trace = Path(work) / "add.vkt"
            wall(python + ["-m", "vkcap", "record", str(REPO / "examples" / "add" / "scenario.json"),
                           "-o", str(args.trace), "--output", work])
        measure(args, python)


def measure(args: argparse.Namespace, python: list[str]) -> None:
    from bench.machine import machine_info  # type: ignore[import-not-found]

    wall(python + ["-m", "vkcap", "replay", str(args.trace), "--frame", "1"])  # warm caches (shader cache, page cache)
    floor = statistics.median(wall(python + ["-c", "pass"]) for _ in range(args.runs))
    stages: dict[str, list[float]] = {}
    for _ in range(args.runs):
        out = subprocess.run(python + ["-c", STAGES, str(args.trace)], check=True, capture_output=True, text=True, cwd=REPO)
        for name, seconds in json.loads(out.stdout.strip().splitlines()[-1]).items():
            stages.setdefault(name, []).append(seconds)
    command = statistics.median(wall(python + ["-m", "vkcap", "replay", str(args.trace), "--frame", "1"])
                                for _ in range(args.runs))
    info = machine_info()
    print(f"machine: {info['cpu']}, {info['cores']} cores, {info['vulkan_device']}; medians of {args.runs}")
    print("| stage | seconds |")
    print("| --- | --- |")
    print(f"| interpreter (`python -c pass`) | {floor:.3f} |")
    for name, times in stages.items():
        print(f"| {name} | {statistics.median(times):.3f} |")
    print(f"| **`vkcap replay {args.trace.name} --frame 1`** (wall, Vulkan start overlapping the imports) | **{command:.3f}** |")
    proc = subprocess.run(python + ["-X", "importtime", "-m", "vkcap", "replay", str(args.trace), "--frame", "1"],
                          capture_output=True, text=True, cwd=REPO)
    rows = []
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cumulative, name = (p.strip() for p in line.removeprefix("import time:").split("|"))
            if cumulative.isdigit():
                rows.append((int(cumulative), name))
    print("\nslowest imports (cumulative, one run):")
    for micros, name in sorted(rows, reverse=True)[:10]:
        print(f"  {micros / 1000:7.1f} ms  {name}")


if __name__ == "__main__":
    main()
