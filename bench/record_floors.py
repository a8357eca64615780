"""Floors of ``vkcap record``: what recording costs next to a run when it does only the first part of
its work on each frame, so that what remains of the allowance (1.25x, 1.1x on a GPU) can be read off.

    python bench/record_floors.py [--rounds 9]

For bench/record_overhead.py's (a) scenarios (100 frames x 1 MiB, 20 frames x 16 MiB, and the 1 MiB one
capturing nothing with ``--checkpoint-every 0``), every round runs, one fresh process each:

- ``run``;
- ``record`` as it is;
- ``record``, each frame's snapshots *planned*: copied to the host, hashed, and their residuals against
  the previous snapshots computed (the in-order step a delta needs), then dropped: nothing compressed,
  no frame written;
- ``record``, each frame's snapshots *hashed* only (copied to the host and hashed), then dropped.

Both cut-down records keep everything else: the executor and its staging copies, the preamble (header,
scenario, embedded files, the initial state compressed as usual), the writer thread and the closing of
the trace. A cut-down record is not a usable trace; it measures what a recorder that stores frames
cannot go below: storing a frame needs its bytes on the host, hashed (for deduplication and the
content keys the records name), and, for a delta, its residual.

Each child is this script with ``--child MODE`` and vkcap's arguments: it replaces
``TraceRecorder.consume`` once ``capture.recorder`` is imported (an import hook, so the command keeps its
own import order), then runs vkcap as ``python -m vkcap`` would. The run and the full record go
through the same launcher. Prints medians of wall and CPU time (user + system, every thread) and the
median of each round's ratio to the run.
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
from types import ModuleType
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.import_hook import Around, AroundImport, run_vkcap  # noqa: E402

#: (label, child mode) in the order each round runs them; mode "" changes nothing
VARIANTS = (("run", ""), ("record", ""), ("record, planned only", "planned"), ("record, hashed only", "hashed"))


# ------------------------------------------------------------------------------------------- the child

def _planned_only(self: Any, snapshot: Any) -> None:
    """The recorder's in-order step alone: hash each snapshot and compute its residual, store nothing."""
    views = [snapshot.slot.view(i) for i in snapshot.layout.items]
    for plan in self.plan_blobs(snapshot.layout.items, views, self.is_checkpoint(snapshot.seq)):
        if plan.residual is not None:
            plan.residual.done()


def _hashed_only(self: Any, snapshot: Any) -> None:
    """Hash each snapshot (its content key), store nothing."""
    from capture.format import records

    for item in snapshot.layout.items:
        records.content_key(snapshot.slot.view(item))


CONSUMERS = {"planned": _planned_only, "hashed": _hashed_only}


def _patch_consume(consume: Any) -> Around:
    def around(name: str, module: ModuleType, execute: Callable[[ModuleType], None]) -> None:
        execute(module)
        module.TraceRecorder.consume = consume
    return around


def child(mode: str, argv: list[str]) -> None:
    """``vkcap ARGV`` with the recorder's ``consume`` cut down to ``mode`` (none for "")."""
    if mode:
        sys.meta_path.insert(0, AroundImport(lambda name: name == "capture.recorder", _patch_consume(CONSUMERS[mode])))
    run_vkcap(argv)


# ------------------------------------------------------------------------------------------ the parent

def timed(argv: list[str]) -> tuple[float, float]:
    """Wall and CPU time (user + system, all threads) of one child."""
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status) != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(argv)} failed:\n{err.read().decode(errors='replace')}")
    return wall, usage.ru_utime + usage.ru_stime


def main() -> None:
    if sys.argv[1:2] == ["--child"]:  # before argparse: the rest are vkcap's arguments
        child("" if sys.argv[2] == "full" else sys.argv[2], sys.argv[3:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    from bench.machine import machine_info
    from bench.record_overhead import overhead_scenarios

    work = Path(tempfile.mkdtemp(prefix="vkcap-floors-"))
    scenarios = overhead_scenarios(work)
    me = [sys.executable, str(Path(__file__).resolve())]
    info = machine_info()
    print(f"machine: {info['cpu']}, {info['cores']} cores, {info['vulkan_device']}, Python {info['python']}; "
          f"{args.rounds} rounds, every process alternating\n")
    print("| scenario | command | wall s | CPU s | / run (median of the rounds) |\n| --- | --- | --- | --- | --- |")
    for name, (path, extra) in scenarios.items():
        commands = []
        for label, mode in VARIANTS:
            if mode and name.endswith("capturing nothing"):
                continue  # no frame to cut down
            vkcap = (["run", str(path), "--output", str(work / "out")] if label == "run" else
                     ["record", str(path), "--output", str(work / "out"), "-o", str(work / "t.vkt"), *extra])
            commands.append((label, [*me, "--child", mode or "full", *vkcap]))
        for _, argv in commands:  # warm-up: shader cache, page cache, bytecode
            timed(argv)
        samples: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in commands}
        for _ in range(args.rounds):
            for label, argv in commands:
                samples[label].append(timed(argv))
        runs = [wall for wall, _ in samples["run"]]
        for label, got in samples.items():
            walls, cpus = [w for w, _ in got], [c for _, c in got]
            ratio = statistics.median(w / r for w, r in zip(walls, runs))
            print(f"| {name} | {label} | {statistics.median(walls):.3f} | {statistics.median(cpus):.3f} | "
                  f"{'-' if label == 'run' else f'{ratio:.2f}x'} |")


if __name__ == "__main__":
    main()
