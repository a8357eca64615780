"""``vkcap reproduce DIR``: run an extract's scenario and compare its outputs with its ``expected/``.

This is what the ``check.sh`` of a folder written by ``vkcap extract`` or ``bisect --extract`` runs: one
command for a driver engineer, exit 0 when every output matches ``expected/``, 1 when one diverges (its
``expected/`` file named, with how much it differs), 2 for bad input.

Guarantees:

- **The same judgement as the replay.** Each output is compared as the command that wrote the folder
  compared it (``vkcap.json``: ``compare``: the element type given or the format's, and the tolerance);
  an output with no type given is read in its shader's view, derived from the folder's scenario and its
  SPIR-V as a replay derives it from a trace (:func:`capture.views.derive_views`), else as bytes.
- **Either runner.** ``vkcap`` runs ``vkcap run`` in a child process; ``reference`` runs ARM's
  ``scenario-runner`` (from the ``ai-ml-sdk-scenario-runner`` package) with vkcap's emulation layer
  manifests stacked as docs/reference-runner.md shows. ``--recorded`` runs ``scenario.recorded.json`` (the
  shaders as recorded), where the folder has one.
- **The folder is untrusted** (it came from someone else): ``vkcap.json`` and the scenario are read with a
  size bound and strict JSON (no NaN); every name in them is confined to the folder
  (:func:`vkcore.output_folders.confined`); tolerances are checked as every tolerance vkcap reads
  (:func:`vkcore.bounded_numbers.check_number`); a bad value is one line naming the file and the key (exit 2). Nothing in the folder is written.
- **The outputs** go to a temporary folder removed on every exit path, or to ``--output``, a new or empty
  folder (:func:`vkcore.output_folders.check_folder_target`).
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

from capture.views import derive_views
from vkcore.bounded_numbers import check_number
from vkcore.device.driver import check_manifest
from vkcore.device.layers import prepare_emulation_layers
from vkcore.errors import DeviceError, UsageError
from vkcore.output_folders import check_folder_target, confined
from vkcore.safe_text import shown
from vkcore.scenario.npyio import NpyFormatError, read_header

from .extract import RECORDED_SCENARIO, SCENARIO
from .report import comparison_line
from .results import DIVERGED, DTYPES, Comparison, Tolerance
from .tolerances import TolerancePolicy
from .typed import compare_as

log = logging.getLogger("vkcap")

MAX_JSON_BYTES = 64 << 20  # a scenario or vkcap.json larger than this is no extract's
INSTALL_REFERENCE = "pip install ai-ml-sdk-scenario-runner (Python 3.11)"


def reproduce(folder: Path, *, recorded: bool = False, runner: str = "vkcap", output: Path | None = None,
              device: str | None = None, icd: Path | None = None, emulation: str = "auto",
              validate: bool = False) -> int:
    """Run the folder's scenario with ``runner`` and compare each output with ``expected/`` (see the
    module docstring); the exit status: 0 every output matches, 1 one diverges."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UsageError("not a folder (give the folder extract or bisect --extract wrote)", file=folder)
    name = SCENARIO
    if recorded:
        if (folder / RECORDED_SCENARIO).is_file():
            name = RECORDED_SCENARIO
        else:
            log.info("no shader was replaced in this extract: %s runs the recorded shaders", SCENARIO)
    scenario_path = folder / name
    scenario = read_json(scenario_path, "the scenario")
    meta = read_json(folder / "vkcap.json", "the extract's description") if (folder / "vkcap.json").is_file() else {}
    outputs = scenario_outputs(scenario, scenario_path)
    expected = {uid: (dst, confined_path(folder / "expected", dst, scenario_path, uid)) for uid, dst in outputs.items()}
    expected = {uid: (dst, path) for uid, (dst, path) in expected.items() if path.is_file()}
    if not expected:
        raise UsageError("nothing to compare: expected/ holds none of the scenario's outputs", file=folder)
    policy, dtypes = compare_policy(meta, folder / "vkcap.json")
    views = _views(folder, scenario, scenario_path) if len(dtypes) < len(expected) else {}
    with output_folder(output, folder) as out:
        ran = run_scenario(runner, scenario_path, out, device=device, icd=icd, emulation=emulation, validate=validate)
        results = []
        for uid, (dst, expected_path) in expected.items():
            live_path = confined_path(out, dst, scenario_path, uid)
            how = dtypes.get(uid) or views.get(uid) or "bytes"
            results.append((expected_path, compare_files(uid, expected_path, live_path, how, policy)))
    return report(results, name, ran)


def report(results: list[tuple[Path, Comparison]], scenario: str, ran: str) -> int:
    diverged = [(path, c) for path, c in results if c.diverged]
    for path, c in results:
        (log.warning if c.diverged else log.info)("%s: %s", shown(path), shown(comparison_line(c, EXPECTED_SIDES)))
    if diverged:
        log.warning("reproduced: %d of %d output(s) of %s (%s) diverge from expected/", len(diverged), len(results),
                    scenario, ran)
        return 1
    log.info("%d output(s) of %s (%s) match expected/", len(results), scenario, ran)
    return 0


EXPECTED_SIDES = ("expected", "output")


def read_json(path: Path, what: str) -> dict[str, Any]:
    """A JSON object from the untrusted ``path``: bounded in size, strict (no NaN or Infinity)."""
    def no_constants(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    try:
        with open(path, "rb") as f:
            data = f.read(MAX_JSON_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"cannot read {what}: {exc.strerror or exc}", file=path) from None
    if len(data) > MAX_JSON_BYTES:
        raise UsageError(f"{what} is larger than {MAX_JSON_BYTES >> 20} MiB: not an extract's", file=path)
    try:
        doc = json.loads(data, parse_constant=no_constants)
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"{what} is not valid JSON ({shown(exc)})", file=path) from None
    if not isinstance(doc, dict):
        raise UsageError(f"{what} is not a JSON object", file=path)
    return doc


def scenario_outputs(scenario: dict[str, Any], path: Path) -> dict[str, str]:
    """uid -> ``dst`` of every resource of the scenario that has one (a string)."""
    out: dict[str, str] = {}
    resources = scenario.get("resources")
    for k, item in enumerate(resources if isinstance(resources, list) else []):
        if not isinstance(item, dict) or len(item) != 1:
            continue
        (kind, body), = item.items()
        if isinstance(body, dict) and isinstance(body.get("dst"), str) and isinstance(body.get("uid"), str):
            out[body["uid"]] = body["dst"]
    return out


def confined_path(folder: Path, relative: str, scenario: Path, uid: str) -> Path:
    """``folder / relative``, refused (one line naming the scenario and the resource) when it would leave it."""
    try:
        return confined(folder, relative)
    except ValueError:
        raise UsageError(f"the dst of resource '{shown(uid)}' leaves its folder", file=scenario, place="dst") from None


def compare_policy(meta: dict[str, Any], path: Path) -> tuple[TolerancePolicy, dict[str, str]]:
    """The tolerance policy and the given dtypes of ``vkcap.json``'s ``compare`` (checked: a dtype vkcap
    knows; tolerances as :func:`vkcore.bounded_numbers.check_number` bounds them everywhere: finite,
    non-negative, ULP a whole number below 2**63)."""
    spec = meta.get("compare") or {}
    if not isinstance(spec, dict):
        raise UsageError("not an object", file=path, place="compare")
    per_resource: dict[str, Tolerance | dict[str, Any]] = {}
    dtypes: dict[str, str] = {}
    for uid, entry in spec.items():
        place = f"compare.{shown(uid)}"
        if not isinstance(entry, dict):
            raise UsageError("not an object", file=path, place=place)
        dtype = entry.get("dtype")
        if dtype is not None:
            if not isinstance(dtype, str) or dtype not in DTYPES:
                raise UsageError(f"unknown element type {shown(dtype)!r} (known: {', '.join(DTYPES)})", file=path,
                                 place=f"{place}.dtype")
            dtypes[uid] = dtype
        tolerance = entry.get("tolerance") or {}
        if not isinstance(tolerance, dict):
            raise UsageError("not an object", file=path, place=f"{place}.tolerance")
        values = {key: check_number(key, tolerance.get(key, 0), file=str(path), place=f"{place}.tolerance.{key}")
                  for key in ("atol", "rtol", "ulp")}  # the one validator of every tolerance vkcap reads
        per_resource[uid] = Tolerance(float(values["atol"]), float(values["rtol"]), int(values["ulp"]))
    return TolerancePolicy(per_resource=per_resource, dtypes=dtypes), dtypes


def _views(folder: Path, scenario: dict[str, Any], path: Path) -> dict[str, Any]:
    """Each buffer's shader view, from the folder's scenario and the SPIR-V files it names (those that stay
    inside the folder and are no larger than :data:`MAX_JSON_BYTES`)."""
    spirv: dict[str, bytes] = {}
    for item in scenario.get("resources") if isinstance(scenario.get("resources"), list) else []:
        body = item.get("shader") if isinstance(item, dict) else None
        if not isinstance(body, dict) or not isinstance(body.get("src"), str) or not isinstance(body.get("uid"), str):
            continue
        try:
            src = confined(folder, body["src"])
            if src.is_file() and src.stat().st_size <= MAX_JSON_BYTES:
                spirv[body["uid"]] = src.read_bytes()
        except (ValueError, OSError):
            continue  # compared as bytes; running the scenario reports the file
    return derive_views(scenario, spirv)


def compare_files(uid: str, expected: Path, live: Path, how: Any, policy: TolerancePolicy) -> Comparison:
    """The output file ``live`` against ``expected``: their payloads (a ``.npy`` file's data, any other
    file whole) read as ``how``; an output the run did not write diverges."""
    if not live.is_file():
        return Comparison(uid, "bytes", DIVERGED, 0, size_mismatch=f"the run wrote no {live.name}")
    return compare_as(uid, payload(expected), payload(live), how, policy)


def payload(path: Path) -> bytes:
    data = path.read_bytes()
    if path.suffix == ".npy":
        try:
            header = read_header(path)
        except NpyFormatError as exc:
            raise UsageError(f"not a readable .npy file: {exc}", file=path) from None
        return data[header.data_offset:header.data_offset + header.nbytes]
    return data


@contextlib.contextmanager
def output_folder(output: Path | None, folder: Path) -> Iterator[Path]:
    """``output`` (checked: new or empty, not the extract) or a temporary folder, removed on every exit path."""
    if output is not None:
        target = check_folder_target(output, place="--output", inputs=[folder / SCENARIO], what="output")
        if target == folder.resolve() or folder.resolve() in target.parents:
            raise UsageError("the outputs must not go into the extract itself", file=output, place="--output")
        target.mkdir(parents=True, exist_ok=True)
        yield target
        return
    scratch = Path(tempfile.mkdtemp(prefix="vkcap-reproduce-"))
    try:
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run_scenario(runner: str, scenario: Path, out: Path, *, device: str | None, icd: Path | None, emulation: str,
                 validate: bool) -> str:
    """Run ``scenario`` writing its outputs under ``out``; what ran, in words. A run that fails is one
    line (exit 1) with the runner's last line."""
    env = dict(os.environ)
    if icd is not None:
        check_manifest(icd, "--icd")
        env["VK_DRIVER_FILES"] = env["VK_ICD_FILENAMES"] = str(icd.resolve())
    if runner == "reference":
        if device is not None:
            raise UsageError("ARM's runner picks its own device: give --icd FILE.json to choose the driver",
                             place="--device")
        binary = reference_runner()

        layers = prepare_emulation_layers()
        env["VK_LAYER_PATH"] = os.pathsep.join(map(str, layers.folders))
        env["VK_INSTANCE_LAYERS"] = os.pathsep.join(layers.names)
        command = [str(binary), "--scenario", str(scenario), "--output", str(out)]
        words = "ARM's scenario-runner"
    else:
        command = [sys.executable, "-m", "vkcap", "run", str(scenario), "--output", str(out)]
        command += (["--device", device] if device else []) + (["--no-emulation-layers"] if emulation == "off" else [])
        command += ["--validate"] if validate else []
        words = "vkcap run"
    log.info("running %s: %s", words, " ".join(shown(c) for c in command))
    proc = subprocess.run(command, env=env, capture_output=True, text=True, errors="replace")
    if proc.returncode != 0:
        tail = ((proc.stderr or "").strip().splitlines() or (proc.stdout or "").strip().splitlines() or ["no output"])[-1]
        raise DeviceError(f"{words} failed (exit {proc.returncode}): {shown(tail)}", file=scenario)
    return words


def reference_runner() -> Path:
    """ARM's ``scenario-runner`` binary inside its package (the PATH holds only a wrapper); a one-line
    :class:`UsageError` saying how to install it when it is not."""
    spec = importlib.util.find_spec("scenario_runner")
    if spec is not None and spec.submodule_search_locations:
        path = Path(list(spec.submodule_search_locations)[0]) / "binaries" / "bin" / "scenario-runner"
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise UsageError(f"ARM's scenario-runner is not installed ({INSTALL_REFERENCE})", place="--runner reference")
