"""ARM's reference ``scenario-runner``, for differential tests and benchmarks.

The reference ships inside the ``ai-ml-sdk-scenario-runner`` wheel (Python 3.11 only). It needs ARM's
emulation layers stacked in the right order (see DESIGN.md, "Platform facts"); :func:`reference_env`
sets that up with vkcap's own :func:`vkcore.device.layers.prepare_emulation_layers`.

Two behaviours differ from vkcap and are handled here, not hidden: the reference does not create
missing ``dst`` sub-folders (``run_reference(..., make_dst_dirs=True)`` creates them first), and it
writes buffer outputs as flat int8 ``.npy`` (as vkcap does).
"""
from __future__ import annotations

import json
import os
import subprocess
from functools import lru_cache
from pathlib import Path

import pytest

from tests.needs import missing

SKIP_REASON = "ai-ml-sdk-scenario-runner is not installed (it ships for Python 3.11 only)"


@lru_cache(maxsize=1)
def reference_runner() -> Path | None:
    """The reference ``scenario-runner`` binary, or ``None`` when the package is not installed."""
    import importlib.util

    # Found without importing: the package's __init__ loads a CPython 3.11-only extension, while
    # the binary itself runs under any Python.
    spec = importlib.util.find_spec("scenario_runner")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "binaries" / "bin" / "scenario-runner"
    return path if path.is_file() and os.access(path, os.X_OK) else None


@lru_cache(maxsize=1)
def _layer_env() -> tuple[tuple[str, str], ...]:
    from vkcore.device.layers import prepare_emulation_layers

    layers = prepare_emulation_layers()
    return (
        ("VK_LAYER_PATH", os.pathsep.join(map(str, layers.folders))),
        ("VK_INSTANCE_LAYERS", os.pathsep.join(layers.names)),
    )


def reference_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with the emulation layers the reference needs."""
    return {**(os.environ if base is None else base), **dict(_layer_env())}


def dst_paths(scenario: Path) -> list[str]:
    """Every ``dst`` named in the scenario (resources of any kind), in file order."""
    doc = json.loads(Path(scenario).read_text())
    out: list[str] = []
    for item in doc.get("resources", []):
        for body in item.values():
            if isinstance(body, dict) and body.get("dst"):
                out.append(body["dst"])
    return out


def reference_command(scenario: Path, output: Path, *extra: str | Path) -> list[str]:
    runner = reference_runner()
    if runner is None:
        raise RuntimeError(SKIP_REASON)
    return [str(runner), "--scenario", str(scenario), "--output", str(output), *map(str, extra)]


def run_reference(
    scenario: Path,
    output: Path,
    *extra: str | Path,
    make_dst_dirs: bool = True,
    timeout: float = 300,
    validate: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run the reference on ``scenario`` writing into ``output`` (created), with the layer environment.

    The reference does not create missing output sub-folders: with ``make_dst_dirs`` (the default)
    the parent folder of every relative ``dst`` is created under ``output`` first. ``validate``: under
    the Khronos validation layer too (below the emulation layers, as vkcap stacks it); its messages
    go to the reference's stdout.
    """
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    if make_dst_dirs:
        for dst in dst_paths(scenario):
            if not Path(dst).is_absolute():
                (output / dst).parent.mkdir(parents=True, exist_ok=True)
    env = reference_env()
    if validate:
        from vkcore.device.validation import LAYER, layer_folder

        env["VK_LAYER_PATH"] += os.pathsep + str(layer_folder())
        env["VK_INSTANCE_LAYERS"] += os.pathsep + LAYER
    return subprocess.run(reference_command(scenario, output, *extra), capture_output=True, text=True, timeout=timeout,
                          env=env)


requires_reference = pytest.mark.reference
"""Mark a test (or ``pytestmark = requires_reference`` a module) that runs the reference runner: tests/conftest.py
sees that it is installed before the test starts (:func:`skip_without_reference`)."""


def skip_without_reference() -> Path:
    """Inside a test or fixture: skip unless the reference is installed; return its path."""
    runner = reference_runner()
    if runner is None:
        missing(SKIP_REASON)
    return runner


def assert_same_outputs(scenario: Path, ours: Path, tmp_path: Path, names: list[str]) -> None:
    """Where the reference is installed: it runs ``scenario`` (exit 0) and writes each of ``names``
    byte-identical to the file of that name under ``ours``."""
    if reference_runner() is None:
        return
    ref = run_reference(scenario, tmp_path / "reference")
    assert ref.returncode == 0, ref.stdout[-2000:] + ref.stderr[-2000:]
    for name in names:
        assert (Path(ours) / name).read_bytes() == (tmp_path / "reference" / name).read_bytes(), name
