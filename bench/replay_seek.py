"""Benchmark: seeking in a trace (replay of one late frame vs an early one) and bisect vs a full replay.

    .venv/bin/python bench/replay_seek.py [--runs 5] [--frames 100] [--mib 4] [--bad-from 60] [--json results.json]

The scenario: ``--frames`` frames, each ``step`` (a realistic update of every float of a ``--mib`` MiB
buffer ``x``: ``x = x * 0.999 + 0.001 * sin(...)`` with a few iterations of math per element), then
``count`` (``counter += 1``), then a boundary capturing ``x`` and ``counter``. It is recorded once with
``--checkpoint-every 8`` (a checkpoint holds ``x``, so seeking costs one 4 MiB restore).

(a) seek     ``vkcap replay T --frame 99`` vs ``vkcap replay T --frame 1``: both start from the nearest
             checkpoint (95 and the initial state), so they execute 4 and 2 frames. Target: <= 1.5x.
(b) bisect   ``vkcap bisect T --no-isolate --replace-shader step=BAD`` (and the default, isolated) vs ``vkcap replay T --replace-shader step=BAD``
             (every frame), where BAD adds 1.0 to one element of ``x`` in every frame from ``--bad-from``
             on: a persistent divergence, the case bisect's binary search is made for. Both compare ``x``
             as float32. Target: bisect <= 0.3x the full replay. The floor column is ``replay --frame 1``
             (measured in (a)) over the full replay: a bisection costs at least about that much.

Each measurement is the wall time of a fresh ``python -m vkcap`` child (as a user runs it), median of
``--runs``; the two sides of a comparison alternate (A B, B A, A B, ...). Before timing, the answers are
checked: the seeks replay identical from the right checkpoint, bisect names frame ``--bad-from`` and the
``step`` dispatch, the full replay first diverges there. A warm-up run of each fills the shader cache.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.machine import machine_info  # noqa: E402

MiB = 1 << 20
CHECKPOINT_EVERY = 8
LOCAL = 256

STEP = """#version 450
layout(local_size_x = 256) in;
layout(set = 0, binding = 0) readonly buffer C { uint frame; };
layout(set = 0, binding = 1) buffer X { float x[]; };
void main() {
    uint i = gl_GlobalInvocationID.y * (gl_NumWorkGroups.x * gl_WorkGroupSize.x) + gl_GlobalInvocationID.x;
    if (i >= uint(x.length())) return;
    float phase = float(i) * 0.00037 + float(frame) * 0.1;
    float s = 0.0;
    for (int k = 1; k <= 4; ++k) { s += sin(phase * float(k)) / float(k); }
    x[i] = x[i] * 0.999 + 0.001 * s;
    // BAD
}
"""
COUNT = """#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer C { uint frame; };
void main() { frame += 1u; }
"""


def make_scenario(folder: Path, frames: int, size: int) -> Path:
    n = size // 4
    groups = -(-n // LOCAL)
    range_nd = [min(groups, 65535), -(-groups // 65535), 1]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "step.comp").write_text(STEP)
    (folder / "count.comp").write_text(COUNT)
    rng = np.random.default_rng(7)
    np.save(folder / "x0.npy", (np.sin(np.arange(n, dtype=np.float32) * 0.001) + rng.standard_normal(n, dtype=np.float32) * 0.01).astype(np.float32))
    np.save(folder / "counter0.npy", np.zeros(1, np.uint32))
    resources = [
        {"shader": {"uid": "step", "src": "step.comp", "type": "GLSL"}},
        {"shader": {"uid": "count", "src": "count.comp", "type": "GLSL"}},
        {"buffer": {"uid": "counter", "size": 4, "shader_access": "readwrite", "src": "counter0.npy"}},
        {"buffer": {"uid": "x", "size": size, "shader_access": "readwrite", "src": "x0.npy"}},
    ]
    commands: list[dict[str, Any]] = []
    for k in range(frames):
        commands.append({"dispatch_compute": {"shader_ref": "step", "rangeND": range_nd, "bindings": [
            {"set": 0, "id": 0, "resource_ref": "counter"}, {"set": 0, "id": 1, "resource_ref": "x"}]}})
        commands.append({"dispatch_compute": {"shader_ref": "count", "rangeND": [1], "bindings": [
            {"set": 0, "id": 0, "resource_ref": "counter"}]}})
        commands.append({"mark_boundary": {"resources": ["x", "counter"], "frame_id": k}})
    path = folder / "scenario.json"
    path.write_text(json.dumps({"resources": resources, "commands": commands}, indent=1))
    return path


class Vkcap:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.env = {**os.environ, "VKCAP_CACHE_DIR": str(work / "vkcap-cache")}
        self.env.pop("PYTHONSTARTUP", None)

    def __call__(self, *args: Any, expect: int = 0) -> tuple[float, dict[str, Any] | None]:
        """Run ``python -m vkcap ARGS --json J``; return (wall seconds, the JSON document)."""
        out = self.work / "result.json"
        out.unlink(missing_ok=True)
        json_args = ["--json", str(out)] if args[0] in ("replay", "bisect", "diff") else []
        cmd = [sys.executable, "-m", "vkcap", *map(str, args), *json_args]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=self.env, cwd=REPO)
        wall = time.perf_counter() - t0
        if proc.returncode != expect:
            sys.exit(f"vkcap {' '.join(map(str, args))}: exit {proc.returncode}, expected {expect}\n{proc.stderr[-3000:]}")
        return wall, (json.loads(out.read_text()) if out.exists() else None)


def alternate(runs: int, a: Any, b: Any) -> tuple[list[float], list[float]]:
    """Time a() and b() ``runs`` times each, alternating and swapping the order every round."""
    ta, tb = [], []
    for r in range(runs):
        order = ((ta, a), (tb, b)) if r % 2 == 0 else ((tb, b), (ta, a))
        for times, fn in order:
            times.append(fn())
    return ta, tb


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--frames", type=int, default=100)
    parser.add_argument("--mib", type=int, default=4, help="size of the buffer x, MiB")
    parser.add_argument("--bad-from", type=int, default=60, help="first frame the replaced shader changes")
    parser.add_argument("--json", type=Path, help="write the results as JSON")
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it (default: a temporary one)")
    args = parser.parse_args(argv)
    if not 0 < args.bad_from < args.frames or args.frames < 2:
        parser.error("need 2 <= frames and 0 < bad-from < frames")

    with tempfile.TemporaryDirectory(prefix="vkcap-bench-seek-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        vkcap = Vkcap(work)
        machine = machine_info(vkcap.env)
        scenario = make_scenario(work / "scenario", args.frames, args.mib * MiB)
        trace = work / "seek.vkt"
        t0 = time.perf_counter()
        vkcap("record", scenario, "-o", trace, "--checkpoint-every", CHECKPOINT_EVERY)
        record_s = time.perf_counter() - t0
        bad = work / "step_bad.comp"
        bad.write_text(STEP.replace("// BAD", f"if (frame >= {args.bad_from}u && i == 12345u) x[i] += 1.0;"))
        last, early = args.frames - 1, 1
        dtype = ("--dtype", "x=float32", "--dtype", "counter=uint32")

        # checks (also the warm-up: shader cache filled, files in the page cache)
        _, doc = vkcap("replay", trace, "--frame", last, *dtype)
        assert doc and doc["diverged"] is False and doc["started_from_checkpoint"] == (last // CHECKPOINT_EVERY) * CHECKPOINT_EVERY - 1
        last_executed = doc["frames_executed"]
        _, doc = vkcap("replay", trace, "--frame", early, *dtype)
        assert doc and doc["diverged"] is False and doc["started_from_checkpoint"] == -1
        early_executed = doc["frames_executed"]
        _, bis = vkcap("bisect", trace, "--no-isolate", "--replace-shader", f"step={bad}", *dtype, expect=1)
        assert bis and bis["frame"] == args.bad_from and bis["resource"]["uid"] == "x", bis
        _, iso = vkcap("bisect", trace, "--replace-shader", f"step={bad}", *dtype, expect=1)
        assert iso and iso["frame"] == args.bad_from and iso["child_processes"] == 1, iso
        _, full = vkcap("replay", trace, "--replace-shader", f"step={bad}", *dtype, expect=1)
        assert full and next(f["frame"] for f in full["frames"] if f["diverged"]) == args.bad_from
        assert full["frames_executed"] == args.frames

        seek_last, seek_early = alternate(
            args.runs,
            lambda: vkcap("replay", trace, "--frame", last, *dtype)[0],
            lambda: vkcap("replay", trace, "--frame", early, *dtype)[0],
        )
        bisect_t, full_t = alternate(
            args.runs,
            lambda: vkcap("bisect", trace, "--no-isolate", "--replace-shader", f"step={bad}", *dtype, expect=1)[0],
            lambda: vkcap("replay", trace, "--replace-shader", f"step={bad}", *dtype, expect=1)[0],
        )
        isolated_t, full_iso_t = alternate(
            args.runs,
            lambda: vkcap("bisect", trace, "--replace-shader", f"step={bad}", *dtype, expect=1)[0],
            lambda: vkcap("replay", trace, "--replace-shader", f"step={bad}", *dtype, expect=1)[0],
        )
        trace_mib = trace.stat().st_size / MiB

    med = statistics.median
    rows = [
        {"measure": f"replay --frame {last} vs --frame {early}", "a_s": med(seek_last), "b_s": med(seek_early),
         "ratio": med(seek_last) / med(seek_early), "target": 1.5,
         "detail": f"executed {last_executed} vs {early_executed} frame(s) from checkpoint", "a_runs": seek_last, "b_runs": seek_early},
        {"measure": f"bisect vs full replay (bad from frame {args.bad_from})", "a_s": med(bisect_t), "b_s": med(full_t),
         "ratio": med(bisect_t) / med(full_t), "target": 0.3,
         "detail": f"bisect: {bis['replays']} replay(s), {bis['frames_executed_at_most']} frames at most, over {bis['segments']} segments; full: {args.frames} frames",
         "a_runs": bisect_t, "b_runs": full_t},
        {"measure": "the same, default bisect (isolated: probes in one child)", "a_s": med(isolated_t), "b_s": med(full_iso_t),
         "ratio": med(isolated_t) / med(full_iso_t), "target": 0.3,
         "detail": f"bisect: {iso['replays']} replay(s) in {iso['child_processes']} child process, started first", "a_runs": isolated_t,
         "b_runs": full_iso_t},
    ]
    for r in rows:
        r["met"] = r["ratio"] <= r["target"]
    # A bisection costs at least about a replay of its first frames (start-up, session, a frame or two
    # compared): that replay over the full replay is about the lowest ratio a bisect could reach here.
    for r in rows[1:]:
        r["floor_ratio"] = med(seek_early) / r["b_s"]
    result = {
        "machine": machine, "frames": args.frames, "buffer_mib": args.mib, "checkpoint_every": CHECKPOINT_EVERY,
        "runs": args.runs, "record_s": record_s, "trace_mib": trace_mib, "rows": rows,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    try:
        from rich.console import Console
        from rich.table import Table

        console = Console(width=max(Console().width, 150))
        m = machine
        console.print(f"[bold]machine[/]: {m['host']}: {m['cpu']}, {m['cores']} cores, load {m['load_avg_1min_at_start']:.2f}; "
                      f"Vulkan: {m['vulkan_device']}; Python {m['python']}")
        console.print(f"trace: {args.frames} frames of a {args.mib} MiB buffer, checkpoints every {CHECKPOINT_EVERY}, "
                      f"{trace_mib:.0f} MiB on disk (recorded in {record_s:.2f} s); medians of {args.runs} fresh processes")
        table = Table()
        for col in ("measure", "A (s)", "B (s)", "A/B", "floor", "target", "met", "detail"):
            table.add_column(col)
        for r in rows:
            floor = f"{r['floor_ratio']:.2f}x" if "floor_ratio" in r else "-"
            table.add_row(r["measure"], f"{r['a_s']:.3f}", f"{r['b_s']:.3f}", f"{r['ratio']:.2f}x", floor, f"<= {r['target']}x",
                          "yes" if r["met"] else "[red]no[/]", r["detail"])
        console.print(table)
        console.print(f"floor: replay --frame {early} ({med(seek_early):.3f} s: start-up, the session, {early_executed} frame(s) "
                      "replayed and compared) over the full replay, about the least any bisection could cost")
    except ImportError:  # pragma: no cover
        print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
