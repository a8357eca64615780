"""A/B of two checkouts: what recording costs next to a run, and the start-up, in this tree and in
another one (a ``git worktree`` of an earlier commit), alternating every process so that both see the
same machine. On hosts whose speed drifts within minutes (the VMs these figures come from), medians of
separate bench runs compare badly; this interleaving is the comparison to trust for a change.

    git worktree add /tmp/before COMMIT && (cd /tmp/before && python -m capture.kernels_build)
    python bench/ab_trees.py /tmp/before [--rounds 9]

Each round runs, for each tree: ``vkcap run`` and ``vkcap record`` of bench/record_overhead.py's (a)
scenarios (100 frames x 1 MiB, 20 frames x 16 MiB), of the 1 MiB one capturing nothing
(``--checkpoint-every 0``), and ``vkcap replay --frame 1`` of the add example recorded here. Prints,
per tree, the medians and the median of each round's record/run ratio. Then the executor's frame loop
without a consumer and with the comparer, in the same alternation: ``vkcap run --repeat 10`` of the
1 MiB scenario (1000 frames: the command, and the frame loop it reports) and ``vkcap replay`` of all
100 frames of its trace, recorded here.
"""
from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.machine import machine_info  # noqa: E402
from bench.record_overhead import overhead_scenarios  # noqa: E402


def timed(argv: list[str], cwd: Path) -> float:
    return timed_loop(argv, cwd)[0]


def timed_loop(argv: list[str], cwd: Path) -> tuple[float, float]:
    """The command's wall time, and the frame loop's that ``vkcap run`` reports (nan for others)."""
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - start
    loop = re.search(r"ran \d+ frame\(s\) on .* in ([0-9.]+) s", done.stderr)
    return wall, float(loop.group(1)) if loop else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other", type=Path, help="the other checkout (its capture/_kernels.so built)")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    trees = {"this tree": REPO, args.other.name or str(args.other): args.other.resolve()}
    python = sys.executable
    work = Path(tempfile.mkdtemp(prefix="vkcap-ab-"))
    scenarios = overhead_scenarios(work)
    add = work / "add.vkt"
    subprocess.run([python, "-m", "vkcap", "record", str(REPO / "examples" / "add" / "scenario.json"), "-o", str(add),
                    "--output", str(work / "out")], cwd=REPO, check=True, capture_output=True)
    times: dict[tuple[str, str, str], list[float]] = {}
    for name, (path, extra) in scenarios.items():
        run = [python, "-m", "vkcap", "run", str(path), "--output", str(work / "out")]
        record = [python, "-m", "vkcap", "record", str(path), "--output", str(work / "out"), "-o", str(work / "t.vkt"), *extra]
        for tree in trees.values():  # warm-up: shader cache, page cache, bytecode
            timed(record, tree)
        for _ in range(args.rounds):
            for label, tree in trees.items():
                for kind, argv in (("run", run), ("record", record)):
                    times.setdefault((name, label, kind), []).append(timed(argv, tree))
    replay = [python, "-m", "vkcap", "replay", str(add), "--frame", "1"]
    for tree in trees.values():
        timed(replay, tree)
    for _ in range(2 * args.rounds):
        for label, tree in trees.items():
            times.setdefault(("start-up", label, "replay"), []).append(timed(replay, tree))

    info = machine_info()
    print(f"machine: {info['cpu']}, {info['cores']} cores, {info['vulkan_device']}; "
          f"{args.rounds} rounds, every process alternating between the trees")
    print("| scenario | tree | run s | record s | record / run (median of the rounds) |")
    print("| --- | --- | --- | --- | --- |")
    for name in scenarios:
        for label in trees:
            run, rec = times[(name, label, "run")], times[(name, label, "record")]
            ratio = statistics.median(r / q for q, r in zip(run, rec))
            print(f"| {name} | {label} | {statistics.median(run):.3f} | {statistics.median(rec):.3f} | {ratio:.2f}x |")
    for label in trees:
        t = times[("start-up", label, "replay")]
        print(f"| `replay add.vkt --frame 1` | {label} | - | - | median {statistics.median(t):.3f} s, "
              f"fastest {min(t):.3f} s |")

    s1 = scenarios["100 x 1 MiB"][0]
    trace = work / "s1.vkt"
    subprocess.run([python, "-m", "vkcap", "record", str(s1), "-o", str(trace), "--output", str(work / "out")],
                   cwd=REPO, check=True, capture_output=True)
    loops = {
        "`run --repeat 10` (1000 x 1 MiB)": [python, "-m", "vkcap", "run", str(s1), "--output", str(work / "out"), "--repeat", "10"],
        "`replay` of its 100 frames": [python, "-m", "vkcap", "replay", str(trace)],
    }
    measured: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for name, argv in loops.items():
        for tree in trees.values():
            timed(argv, tree)
        for _ in range(args.rounds):
            for label, tree in trees.items():
                measured.setdefault((name, label), []).append(timed_loop(argv, tree))
    print()
    print("| frame loop | tree | command s (median, fastest) | frame loop s (as run reports it) |")
    print("| --- | --- | --- | --- |")
    for name in loops:
        for label in trees:
            walls, inner = zip(*measured[(name, label)])
            loop = statistics.median(inner)
            print(f"| {name} | {label} | {statistics.median(walls):.3f}, {min(walls):.3f} | "
                  f"{'-' if loop != loop else f'{loop:.3f}'} |")


if __name__ == "__main__":
    main()
