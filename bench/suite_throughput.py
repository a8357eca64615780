"""Suite throughput: N small traces replayed as one ``vkcap suite run`` against N separate ``vkcap replay``
processes, and the suite's scaling with ``-j``. Prints a table of medians (target: the suite at most 0.25x
of the separate replays on the 2-core machine).

    python bench/suite_throughput.py [--traces 40] [--runs 3] [--jobs 1 2 4] [--example heat]

``--example`` picks the example recorded (default ``add``: 4 small frames, start-up dominates; ``heat``:
100 frames, enough work per trace for ``-j`` to scale).
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def vkcap(*args: str | Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "vkcap", *map(str, args)], capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"vkcap {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")


def timed(action) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=40)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--example", default="add", help="the example of examples/ to record (default add)")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from bench.machine import machine_info  # type: ignore[import-not-found]

    with tempfile.TemporaryDirectory(prefix="vkcap-suite-bench-") as tmp:
        folder = Path(tmp) / "traces"
        folder.mkdir()
        first = folder / "t000.vkt"
        vkcap("record", REPO / "examples" / args.example / "scenario.json", "-o", first, "--output", Path(tmp) / "out")
        for k in range(1, args.traces):
            shutil.copyfile(first, folder / f"t{k:03d}.vkt")
        traces = sorted(folder.glob("*.vkt"))
        separate = [timed(lambda: [vkcap("replay", t) for t in traces]) for _ in range(args.runs)]
        suites = {j: [timed(lambda: vkcap("suite", "run", folder, "-j", str(j))) for _ in range(args.runs)]
                  for j in args.jobs}
    base = statistics.median(separate)
    info = machine_info()
    print(f"machine: {info['cpu']}, {info['cores']} cores, {info['vulkan_device']}, load {info['load_avg_1min_at_start']:.2f}")
    import json

    frames = sum(1 for c in json.loads((REPO / "examples" / args.example / "scenario.json").read_text())["commands"]
                 if "frame_boundary" in c or "mark_boundary" in c)
    print(f"{args.traces} traces of examples/{args.example} ({frames} frames each), medians of {args.runs}")
    print(f"| how | wall | ratio to separate replays |")
    print(f"| --- | --- | --- |")
    print(f"| {args.traces} x `vkcap replay` | {base:.2f} s | 1.00x |")
    for j, times in suites.items():
        m = statistics.median(times)
        print(f"| `vkcap suite run -j {j}` | {m:.2f} s | {m / base:.2f}x |")


if __name__ == "__main__":
    main()
