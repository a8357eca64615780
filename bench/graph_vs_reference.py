"""Benchmark: the conv2d model (tests/tosa/conv2d.mlir: 3x3 conv, 20 channels, bias, clamp) through
``dispatch_graph``, vkcap against ARM's reference ``scenario-runner``.

Both tools run the same scenario alternately (median of ``--runs``); each writes its per-dispatch GPU
timestamps (``--profiling-dump-path``), from which the graph dispatch's time is taken, and the child's
wall time is measured. Outputs are checked byte-identical first.

    python bench/graph_vs_reference.py [--runs 5] [--repeat 20] [--json FILE]
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

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.machine import machine_info  # noqa: E402
from tests.reference import reference_env, reference_runner  # noqa: E402
from tests.vkharness import model_converter  # noqa: E402


def build(root: Path, repeat: int) -> Path:
    exe = model_converter()
    if exe is None:
        sys.exit("ai-ml-sdk-model-converter is not installed: nothing to convert the model with")
    subprocess.run([exe, "--input", str(REPO / "tests/tosa/conv2d.mlir"), "--output", str(root / "conv2d.vgf")], check=True,
                   capture_output=True)
    np.save(root / "a.npy", (np.random.default_rng(5).standard_normal((1, 4, 4, 2)) * 2).astype(np.float32))
    commands = []
    for f in range(repeat):
        commands.append({"dispatch_graph": {"graph_ref": "g", "bindings": [
            {"set": 0, "id": 0, "resource_ref": "A"}, {"set": 0, "id": 1, "resource_ref": "O"}]}})
        commands.append({"mark_boundary": {"resources": ["O"], "frame_id": f}})
    doc = {"resources": [
        {"graph": {"uid": "g", "src": "conv2d.vgf"}},
        {"tensor": {"uid": "A", "dims": [1, 4, 4, 2], "format": "VK_FORMAT_R32_SFLOAT", "shader_access": "readonly", "src": "a.npy"}},
        {"tensor": {"uid": "O", "dims": [1, 4, 4, 20], "format": "VK_FORMAT_R32_SFLOAT", "shader_access": "writeonly", "dst": "o.npy"}},
    ], "commands": commands}
    scenario = root / "scenario.json"
    scenario.write_text(json.dumps(doc))
    return scenario


def run(tool: str, scenario: Path, out: Path) -> tuple[float, list[float]]:
    """(wall seconds, graph dispatch times in ms) of one run."""
    prof = out / "prof.json"
    if tool == "vkcap":
        cmd = [sys.executable, "-m", "vkcap", "run", str(scenario), "--output", str(out), "--profiling-dump-path", str(prof),
               "--log-level", "error"]
        env = {**os.environ}
    else:
        cmd = [str(reference_runner()), "--scenario", str(scenario), "--output", str(out), "--profiling-dump-path", str(prof),
               "--log-level", "error"]
        env = {**os.environ, **reference_env()}
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"{tool} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    stamps = json.loads(prof.read_text())["Timestamps"]
    return wall, [s["Time for command [ms]"] for s in stamps if s["Command type"] != "ComputeDispatch"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=20, help="graph dispatches per run (one frame each)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if reference_runner() is None:
        sys.exit("ai-ml-sdk-scenario-runner is not installed: nothing to compare with")
    os.environ.setdefault("VKCAP_CACHE_DIR", tempfile.mkdtemp(prefix="vkcap-bench-cache-"))
    with tempfile.TemporaryDirectory(prefix="vkcap-graph-bench-") as tmp:
        root = Path(tmp)
        scenario = build(root, args.repeat)
        results: dict[str, dict[str, list[float]]] = {t: {"wall": [], "dispatch": []} for t in ("vkcap", "reference")}
        for i in range(args.runs):
            for tool in ("vkcap", "reference"):
                wall, dispatch = run(tool, scenario, root / f"{tool}-{i}")
                results[tool]["wall"].append(wall)
                results[tool]["dispatch"].append(statistics.median(dispatch))
        same = (root / "vkcap-0" / "o.npy").read_bytes() == (root / "reference-0" / "o.npy").read_bytes()
    m = machine_info()
    print(f"machine: {m['cpu']}, {m['cores']} cores; Vulkan: {m['vulkan_device']}")
    print(f"conv2d model (3x3, 20 channels, bias, clamp) x {args.repeat} dispatches; outputs identical: {same}")
    print(f"{'':10} {'vkcap':>12} {'reference':>12} {'ratio':>8}")
    rows = {}
    for key, label, unit in (("dispatch", "dispatch", "ms"), ("wall", "wall", "s")):
        ours, ref = statistics.median(results["vkcap"][key]), statistics.median(results["reference"][key])
        rows[key] = {"vkcap": ours, "reference": ref, "ratio": ours / ref if ref else None}
        print(f"{label:10} {ours:10.3f}{unit:>2} {ref:10.3f}{unit:>2} {ours / ref if ref else float('nan'):7.2f}x")
    if args.json:
        args.json.write_text(json.dumps({"device": m["vulkan_device"], "repeat": args.repeat, "runs": args.runs, "identical": same, **rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
