"""Benchmark: ``vkcap run`` against ARM's reference ``scenario-runner`` on the same scenarios.

    .venv/bin/python bench/run_vs_reference.py [--runs 5] [--large] [--json results.json]

Scenarios are generated into a temporary folder (inputs shared by both tools):
  tiny    c = a + b on 10 floats
  medium  c = a + b on 16M floats (three 64 MiB buffers)
  frames  100 frames, each c += a on 1 MiB buffers, then mark_boundary
  large   c = a + b on 64M floats (three 256 MiB buffers), with --large only

For each scenario one untimed warm-up run of each tool writes outputs that are compared byte for byte
(and against numpy); then the tools alternate (vkcap, reference, vkcap, ...) ``--runs`` times each.
Each run is a fresh child process writing into a fresh output folder that is deleted afterwards.
Wall time is measured around the child; peak memory is the child's ``ru_maxrss`` from ``wait4``,
taken by a small intermediate process (GNU time, or a ``python -S`` launcher; see :func:`measured`).
vkcap runs as ``python -m vkcap run`` with this interpreter and its own cache folder (warm after the
warm-up run, as on a user's machine); the reference runs with ARM's emulation layers set up the way
vkcap does it (:func:`vkcore.device.layers.prepare_emulation_layers`).
"""
from __future__ import annotations

import argparse
import filecmp
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.machine import machine_info  # noqa: E402

MiB = 1 << 20

# 2D dispatch: lavapipe (and many GPUs) cap a dimension at 65535 workgroups, 64M / 256 is more.
ADD_2D = """#version 450
layout(local_size_x = 256) in;
layout(set = 0, binding = 0) readonly buffer A { float a[]; };
layout(set = 0, binding = 1) readonly buffer B { float b[]; };
layout(set = 0, binding = 2) writeonly buffer C { float c[]; };
void main() {
    uint i = gl_GlobalInvocationID.y * (gl_NumWorkGroups.x * gl_WorkGroupSize.x) + gl_GlobalInvocationID.x;
    if (i < uint(c.length())) c[i] = a[i] + b[i];
}
"""
ACCUMULATE = """#version 450
layout(local_size_x = 256) in;
layout(set = 0, binding = 0) readonly buffer A { float a[]; };
layout(set = 0, binding = 1) buffer C { float c[]; };
void main() { uint i = gl_GlobalInvocationID.x; if (i < uint(c.length())) c[i] += a[i]; }
"""


# ------------------------------------------------------------------------------------------ scenarios


@dataclass
class Scenario:
    name: str
    description: str
    path: Path
    expected: dict[str, np.ndarray]  # dst -> what the output must hold (as float32)


def _write(folder: Path, doc: dict, shaders: dict[str, str], arrays: dict[str, np.ndarray]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in shaders.items():
        (folder / name).write_text(text)
    for name, array in arrays.items():
        np.save(folder / name, array)
    path = folder / "scenario.json"
    path.write_text(json.dumps(doc, indent=1))
    return path


def _size(nbytes: int) -> str:
    return f"{nbytes / MiB:g} MiB" if nbytes >= MiB else f"{nbytes} bytes"


def _values(n: int, rng: np.random.Generator) -> np.ndarray:
    # Multiples of 1/16 in [-256, 256): every sum below is exact in float32.
    return (rng.integers(-4096, 4096, n, dtype=np.int32) / 16).astype(np.float32)


def make_add(folder: Path, name: str, n: int) -> Scenario:
    rng = np.random.default_rng(n)
    a, b = _values(n, rng), _values(n, rng)
    groups = -(-n // 256)
    range_nd = [min(groups, 1024), -(-groups // 1024), 1]
    size = 4 * n
    doc = {
        "resources": [
            {"shader": {"uid": "add", "src": "add.comp", "type": "GLSL", "entry": "main"}},
            {"buffer": {"uid": "a", "size": size, "shader_access": "readonly", "src": "a.npy"}},
            {"buffer": {"uid": "b", "size": size, "shader_access": "readonly", "src": "b.npy"}},
            {"buffer": {"uid": "c", "size": size, "shader_access": "writeonly", "dst": "c.npy"}},
        ],
        "commands": [
            {"dispatch_compute": {
                "shader_ref": "add", "rangeND": range_nd,
                "bindings": [{"set": 0, "id": i, "resource_ref": r} for i, r in enumerate("abc")],
            }},
        ],
    }
    path = _write(folder / name, doc, {"add.comp": ADD_2D}, {"a.npy": a, "b.npy": b})
    return Scenario(name, f"c = a + b, {n:,} floats ({_size(size)} per buffer)", path, {"c.npy": a + b})


def make_frames(folder: Path, name: str = "frames", frames: int = 100, size: int = MiB) -> Scenario:
    n = size // 4
    rng = np.random.default_rng(frames)
    a, c0 = _values(n, rng), _values(n, rng)
    resources = [
        {"shader": {"uid": "accumulate", "src": "acc.comp", "type": "GLSL"}},
        {"buffer": {"uid": "a", "size": size, "shader_access": "readonly", "src": "a.npy"}},
        {"buffer": {"uid": "c", "size": size, "shader_access": "readwrite", "src": "c0.npy", "dst": "c.npy"}},
    ]
    commands: list[dict] = []
    for frame in range(frames):
        commands.append({"dispatch_compute": {
            "shader_ref": "accumulate", "rangeND": [n // 256, 1, 1],
            "bindings": [{"set": 0, "id": 0, "resource_ref": "a"}, {"set": 0, "id": 1, "resource_ref": "c"}],
        }})
        commands.append({"mark_boundary": {"resources": ["c"], "frame_id": frame}})
    path = _write(folder / name, {"resources": resources, "commands": commands}, {"acc.comp": ACCUMULATE}, {"a.npy": a, "c0.npy": c0})
    expected = c0.copy()
    for _ in range(frames):
        expected += a
    return Scenario(name, f"{frames} frames of c += a on {size // MiB} MiB buffers + mark_boundary", path, {"c.npy": expected})


# ------------------------------------------------------------------------------------------- runners


def reference_binary() -> Path | None:
    from tests.reference import reference_runner  # found without importing the 3.11-only package

    return reference_runner()


@dataclass
class Tool:
    name: str
    command: Callable[[Path, Path], list[str]]
    env: dict[str, str]


def make_tools(cache_dir: Path) -> list[Tool]:
    binary = reference_binary()
    if binary is None:
        sys.exit("ai-ml-sdk-scenario-runner is not installed (it ships for Python 3.11 only): nothing to compare with")
    env = {**os.environ, "VKCAP_CACHE_DIR": str(cache_dir)}
    os.environ["VKCAP_CACHE_DIR"] = str(cache_dir)
    from vkcore.device.layers import prepare_emulation_layers

    layers = prepare_emulation_layers()
    ref_env = {
        **os.environ,
        "VK_LAYER_PATH": os.pathsep.join(map(str, layers.folders)),
        "VK_INSTANCE_LAYERS": os.pathsep.join(layers.names),
    }
    return [
        Tool("vkcap", lambda s, o: [sys.executable, "-m", "vkcap", "run", str(s), "--output", str(o)], env),
        Tool("reference", lambda s, o: [str(binary), "--scenario", str(s), "--output", str(o)], ref_env),
    ]


@dataclass
class Sample:
    wall_s: float
    peak_mib: float


# Peak memory must be measured through a small intermediate process: on Linux a child's ru_maxrss starts
# at the RSS of the process it was forked from (exec records the old mm's high-water mark), so wait4 on
# a child of this (large: it holds the inputs) process would report this process's size. GNU time is
# ~2 MiB; the fallback launcher (python -S) ~9 MiB, a floor well below what either tool uses.
GNU_TIME = "/usr/bin/time" if os.access("/usr/bin/time", os.X_OK) else None
LAUNCHER = (
    "import os, sys\n"
    "pid = os.posix_spawnp(sys.argv[2], sys.argv[2:], os.environ)\n"
    "_, status, usage = os.wait4(pid, 0)\n"
    "open(sys.argv[1], 'w').write(str(usage.ru_maxrss))\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n"
)


def measured(command: list[str], rss_file: Path) -> list[str]:
    """``command`` wrapped so that its peak RSS (KiB) is written to ``rss_file``."""
    if GNU_TIME is not None:
        return [GNU_TIME, "-f", "%M", "-o", str(rss_file), *command]
    return [sys.executable, "-I", "-S", "-c", LAUNCHER, str(rss_file), *command]


def run_once(tool: Tool, scenario: Scenario, output: Path, log: Path) -> Sample:
    """One child process: wall time around it, its peak RSS from wait4 in a small intermediate process."""
    output.mkdir(parents=True)  # the reference does not create the output folder's sub-folders
    rss_file = log.with_suffix(".rss")
    rss_file.unlink(missing_ok=True)
    with open(log, "wb") as out:
        t0 = time.perf_counter()
        proc = subprocess.run(measured(tool.command(scenario.path, output), rss_file), stdout=out, stderr=subprocess.STDOUT, env=tool.env, cwd=REPO)
        wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"{tool.name} failed on {scenario.name} (exit {proc.returncode}):\n{log.read_text(errors='replace')[-3000:]}")
    peak_kib = int(rss_file.read_text().split()[-1])  # ru_maxrss is in KiB on Linux
    return Sample(wall, peak_kib / 1024)


def _tree(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def check_outputs(scenario: Scenario, outs: dict[str, Path]) -> str:
    """Both tools wrote the same files, byte-identical, holding what numpy computes."""
    (a_name, a), (b_name, b) = outs.items()
    files_a, files_b = _tree(a), _tree(b)
    if files_a != files_b:
        return f"DIFFERENT FILES: {a_name} {files_a} vs {b_name} {files_b}"
    problems = [f for f in files_a if not filecmp.cmp(a / f, b / f, shallow=False)]
    if problems:
        return f"DIFFERENT BYTES in {problems}"
    for dst, expected in scenario.expected.items():
        got = np.load(a / dst)
        if got.dtype != np.int8 or not np.array_equal(got.view(np.float32), expected):
            return f"identical, but {dst} differs from numpy"
    total = sum((a / f).stat().st_size for f in files_a)
    return f"identical ({len(files_a)} file(s), {total / MiB:.1f} MiB), equal to numpy"


# -------------------------------------------------------------------------------------------- report


@dataclass
class Result:
    scenario: str
    description: str
    check: str
    samples: dict[str, list[Sample]] = field(default_factory=dict)

    def median(self, tool: str, attr: str) -> float:
        return statistics.median(getattr(s, attr) for s in self.samples[tool])


def print_report(machine: dict[str, object], results: list[Result], runs: int) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # plain text
        print(f"machine: {machine}")
        for r in results:
            v, ref = r.median("vkcap", "wall_s"), r.median("reference", "wall_s")
            vm, rm = r.median("vkcap", "peak_mib"), r.median("reference", "peak_mib")
            print(f"{r.scenario:8} vkcap {v:.3f}s {vm:.0f}MiB  reference {ref:.3f}s {rm:.0f}MiB  "
                  f"ratio wall {v / ref:.2f} peak {vm / rm:.2f}  outputs: {r.check}")
        return
    console = Console(width=None if sys.stdout.isatty() else 120)
    console.print(
        f"[bold]machine[/]: {machine['cpu']}, {machine['cores']} cores, {machine['memory_gib']} GiB; "
        f"Vulkan: {machine['vulkan_device']}; Python {machine['python']}"
    )
    table = Table(title=f"vkcap run vs reference scenario-runner (median of {runs} runs, alternating)")
    for col in ("scenario", "vkcap wall s", "ref wall s", "wall ratio", "vkcap peak MiB", "ref peak MiB", "peak ratio"):
        table.add_column(col, justify="left" if col == "scenario" else "right")
    for r in results:
        v, ref = r.median("vkcap", "wall_s"), r.median("reference", "wall_s")
        vm, rm = r.median("vkcap", "peak_mib"), r.median("reference", "peak_mib")
        table.add_row(r.scenario, f"{v:.3f}", f"{ref:.3f}", f"{v / ref:.2f}x", f"{vm:.0f}", f"{rm:.0f}", f"{vm / rm:.2f}x")
    console.print(table)
    for r in results:
        console.print(f"  {r.scenario}: {r.description}; outputs: {r.check}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each tool per scenario (default 5)")
    parser.add_argument("--large", action="store_true", help="also 64M floats (three 256 MiB buffers)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these scenarios (tiny medium frames large)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="save machine info and every sample as JSON")
    parser.add_argument("--workdir", type=Path, help="generate scenarios here instead of a temporary folder (kept)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")

    tmp = Path(tempfile.mkdtemp(prefix="vkcap-bench-")) if args.workdir is None else args.workdir
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        tools = make_tools(tmp / "vkcap-cache")
        builders: list[tuple[str, Callable[[], Scenario]]] = [
            ("tiny", lambda: make_add(tmp, "tiny", 10)),
            ("medium", lambda: make_add(tmp, "medium", 16 * MiB)),
            ("frames", lambda: make_frames(tmp)),
        ]
        if args.large:
            builders.append(("large", lambda: make_add(tmp, "large", 64 * MiB)))
        if args.only:
            builders = [b for b in builders if b[0] in args.only]
        machine = machine_info(tools[0].env)
        results: list[Result] = []
        for name, build in builders:
            scenario = build()
            print(f"{name}: {scenario.description}", file=sys.stderr, flush=True)
            result = Result(name, scenario.description, "", {t.name: [] for t in tools})
            # Warm-up (untimed): both outputs are kept once and compared.
            outs = {t.name: tmp / f"out-{name}-{t.name}-check" for t in tools}
            for t in tools:
                run_once(t, scenario, outs[t.name], tmp / f"{t.name}.log")
            result.check = check_outputs(scenario, outs)
            scenario.expected.clear()  # keep this process small (page cache, memory of the children)
            for out in outs.values():
                shutil.rmtree(out)
            print(f"  outputs: {result.check}", file=sys.stderr, flush=True)
            for i in range(args.runs):
                for t in tools:
                    out = tmp / f"out-{name}-{t.name}"
                    sample = run_once(t, scenario, out, tmp / f"{t.name}.log")
                    shutil.rmtree(out)
                    result.samples[t.name].append(sample)
                    print(f"  run {i + 1}/{args.runs} {t.name:9} {sample.wall_s:7.3f} s {sample.peak_mib:7.0f} MiB", file=sys.stderr, flush=True)
            results.append(result)
            shutil.rmtree(scenario.path.parent)  # inputs of this scenario are no longer needed
        print_report(machine, results, args.runs)
        if args.json:
            doc = {
                "machine": machine,
                "runs": args.runs,
                "scenarios": [
                    {
                        "name": r.scenario,
                        "description": r.description,
                        "outputs": r.check,
                        "median": {
                            t: {"wall_s": r.median(t, "wall_s"), "peak_mib": r.median(t, "peak_mib")} for t in r.samples
                        },
                        "ratio_vkcap_over_reference": {
                            "wall": r.median("vkcap", "wall_s") / r.median("reference", "wall_s"),
                            "peak": r.median("vkcap", "peak_mib") / r.median("reference", "peak_mib"),
                        },
                        "samples": {t: [asdict(s) for s in r.samples[t]] for t in r.samples},
                    }
                    for r in results
                ],
            }
            args.json.write_text(json.dumps(doc, indent=2))
        return 0
    finally:
        if args.workdir is None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
