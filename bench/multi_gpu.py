"""Multi-GPU suites: one trace corpus replayed on one GPU, pooled over two (each trace once, on whichever
GPU is free), and replicated on both (each trace on each). Prints a table of medians, alternating the
three ways run after run, and says which GPU each pooled trace ran on (by deviceUUID).

    python bench/multi_gpu.py [--traces 64] [--runs 3] [--jobs 2] [--example heat] [--devices 0 1]

Target (issue #41): pooled over two GPUs in at most 0.6x of one GPU's time.
"""
from __future__ import annotations

import argparse
import collections
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def vkcap(*args: str | Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "vkcap", *map(str, args)], capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"vkcap {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return proc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2, help="workers per GPU (suite run -j)")
    parser.add_argument("--example", default="heat")
    parser.add_argument("--devices", nargs=2, default=["0", "1"], help="the two GPUs (index or UUID prefix)")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from bench.machine import machine_info  # type: ignore[import-not-found]

    first, second = args.devices
    ways = {
        "1 GPU": ["--device", first],
        "2 GPUs pooled": ["--device-pool", first, "--device-pool", second],
        "2 GPUs replicated": ["--device", first, "--device", second],
    }
    with tempfile.TemporaryDirectory(prefix="vkcap-multi-gpu-") as tmp:
        folder = Path(tmp) / "traces"
        folder.mkdir()
        trace = folder / "t000.vkt"
        vkcap("record", REPO / "examples" / args.example / "scenario.json", "-o", trace, "--output", Path(tmp) / "out",
              "--device", first)
        for k in range(1, args.traces):
            shutil.copyfile(trace, folder / f"t{k:03d}.vkt")
        times: dict[str, list[float]] = {w: [] for w in ways}
        split: collections.Counter[str] = collections.Counter()
        for _ in range(args.runs):
            for way, flags in ways.items():
                report = Path(tmp) / "r.json"
                start = time.perf_counter()
                vkcap("suite", "run", folder, "-j", str(args.jobs), *flags, "--json", report)
                times[way].append(time.perf_counter() - start)
                if way == "2 GPUs pooled":
                    rows = json.loads(report.read_text())["results"]
                    split = collections.Counter(f"#{r.get('device_index')} {r['device']} [{r.get('device_uuid', '')[:8]}]" for r in rows)
    info = machine_info()
    print(f"machine: {info['cpu']}, {info['cores']} cores, {info['vulkan_device']}, load {info['load_avg_1min_at_start']:.2f}")
    print(f"{args.traces} traces of examples/{args.example}, -j {args.jobs} per GPU, medians of {args.runs} (alternating)")
    base = statistics.median(times["1 GPU"])
    print("| how | replays | wall | ratio to 1 GPU |")
    print("| --- | --- | --- | --- |")
    for way, flags in ways.items():
        replays = args.traces * (2 if way.endswith("replicated") else 1)
        m = statistics.median(times[way])
        print(f"| {way} | {replays} | {m:.2f} s | {m / base:.2f}x |")
    print("pooled split: " + ", ".join(f"{name}: {n}" for name, n in sorted(split.items())))


if __name__ == "__main__":
    main()
