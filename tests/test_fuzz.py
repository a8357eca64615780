"""Fuzzing with hypothesis: scenarios and traces built from valid ones by random mutations.

Every input must end in success or one clear error (exit 2 on the command line), never a traceback, an
internal error or a hang. Budgets are fixed for CI (2,000 scenarios validated, 120 executed on the
device, 300 traces read) and scale with ``VKCAP_FUZZ_SCALE`` (e.g. 10) for longer runs on demand.
"""
from __future__ import annotations

import copy
import io
import json
import os
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.needs import missing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import ADD_FLOAT, ScenarioBuilder
from vkcap.cli import main
from vkcore.errors import ScenarioError
from vkcore.scenario.load import load_scenario

SCALE = max(1, int(os.environ.get("VKCAP_FUZZ_SCALE", "1")))
FUZZ = settings(deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))

PUSH = """#version 450
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const float K = 1.0;
layout(push_constant) uniform P { float s; } pc;
layout(set = 0, binding = 0) buffer A { float a[]; };
layout(set = 0, binding = 1) buffer B { float b[]; };
void main() { uint i = gl_GlobalInvocationID.x; if (i < a.length()) b[i] = a[i] * pc.s + K; }
"""


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A valid scenario using most of the format: shaders, raw data, buffers in a memory group,
    barriers of each buffer kind, frames."""
    b = ScenarioBuilder(tmp_path_factory.mktemp("fuzz") / "scenario")
    b.shader("push", PUSH, push_constants_size=4, specialization_constants=[{"id": 0, "value": 4}, {"id": 1, "value": 0.5}])
    b.shader("add", ADD_FLOAT)
    b.raw("pc", np.array([2.0], np.float32))
    b.buffer("a", 64, np.arange(16, dtype=np.float32), shader_access="readonly")
    b.buffer("b", 64, dst="b.npy", memory_group={"id": "g"})
    b.buffer("c", 64, memory_group={"id": "g"})
    b.resource("memory_barrier", uid="mb", src_access="ACCESS_MEMORY_WRITE", dst_access="ACCESS_MEMORY_READ", src_stage=["ALL"], dst_stage=["ALL"])
    b.resource("buffer_barrier", uid="bb", buffer_resource="b", size=64, src_access="ACCESS_COMPUTE_SHADER_WRITE",
               dst_access="ACCESS_COMPUTE_SHADER_READ", src_stage=["COMPUTE"], dst_stage=["COMPUTE"])
    b.dispatch("push", [(0, 0, "a"), (0, 1, "b")], [4], push_data_ref="pc", implicit_barrier=False)
    b.barrier(memory_barrier_refs=["mb"], buffer_barrier_refs=["bb"])
    b.boundary(["b"], 0)
    b.dispatch("add", [(0, 0, "a"), (0, 1, "b"), (0, 2, "c")], [16])
    b.boundary(["c"], 1)
    return b.root, b.document()


LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**64), 2**64), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.sampled_from(["a", "b", "c", "add", "push", "pc", "mb", "bb", "", "../x", "VK_FORMAT_R32_SFLOAT"]),
)
VALUES = st.recursive(LEAVES, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)), max_leaves=6)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, prefix + (i,))
    return out


@st.composite
def mutated(draw: Any, document: dict[str, Any]) -> dict[str, Any]:
    """Up to four mutations: replace a value, delete a key or item, duplicate an item, add a key."""
    doc = copy.deepcopy(document)
    for _ in range(draw(st.integers(1, 4))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        if not path:
            continue
        parent = doc
        for p in path[:-1]:
            parent = parent[p]
        key = path[-1]
        action = draw(st.sampled_from(["replace", "delete", "duplicate", "add"]))
        if action == "replace":
            parent[key] = draw(VALUES)
        elif action == "delete":
            del parent[key]
        elif action == "duplicate" and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[key]))
        elif action == "add" and isinstance(parent[key], dict):
            parent[key][draw(st.text(max_size=8))] = draw(VALUES)
    return doc


@pytest.mark.slow
def test_fuzzed_scenarios_validate_or_fail_clearly(base: tuple[Path, dict[str, Any]]) -> None:
    root, document = base
    target = root / "fuzz.json"

    @settings(FUZZ, max_examples=2000 * SCALE)
    @given(mutated(document))
    def check(doc: dict[str, Any]) -> None:
        target.write_text(json.dumps(doc, allow_nan=True))
        try:
            load_scenario(target)
        except ScenarioError as exc:
            assert "\n" not in exc.render()

    check()


def _cli(*args: str) -> tuple[int, str]:
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        code = main(list(args))
    return code, err.getvalue()


VALIDATION_LAYER = Path("/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json")


@pytest.mark.slow
@pytest.mark.device
def test_fuzzed_scenarios_run_or_fail_clearly(base: tuple[Path, dict[str, Any]], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    """Mutations of values that validation may accept, executed on the device through the CLI, under
    Khronos' validation layer: whatever vkcap lets through must be valid Vulkan usage."""
    root, document = base
    if not VALIDATION_LAYER.is_file():
        missing("Khronos' validation layer is not installed (apt-get install vulkan-validationlayers)")
    monkeypatch.setenv("VK_INSTANCE_LAYERS", "VK_LAYER_KHRONOS_validation")
    target = root / "run.json"
    numbers = st.one_of(st.integers(-3, 70000), st.sampled_from([0, 1, 3, 4, 63, 64, 65, 4096, 2**31]))

    @settings(FUZZ, max_examples=120 * SCALE)
    @given(st.lists(st.tuples(st.sampled_from(_numeric_paths(document)), numbers), min_size=1, max_size=3))
    def check(changes: list[tuple[tuple[Any, ...], int]]) -> None:
        doc = copy.deepcopy(document)
        for path, value in changes:
            parent = doc
            for p in path[:-1]:
                parent = parent[p]
            parent[path[-1]] = value
        target.write_text(json.dumps(doc))
        code, err = _cli("run", str(target), "--output", str(tmp_path), "--log-level", "error", "--timeout", "20")
        assert code in (0, 2), err
        assert "Traceback" not in err and "internal error" not in err, err
        if code == 2:
            assert err.count("\n") == 1 and err.startswith("vkcap: error: "), err
        layer_output = capfd.readouterr().out
        assert "Validation Error" not in layer_output, layer_output[:3000]

    check()


def _numeric_paths(document: dict[str, Any]) -> list[tuple[Any, ...]]:
    paths = []
    for path in _paths(document):
        node: Any = document
        for p in path:
            node = node[p]
        if isinstance(node, (int, float)) and not isinstance(node, bool):
            paths.append(path)
    return paths


@pytest.mark.slow
@pytest.mark.device
def test_fuzzed_traces_read_or_fail_clearly(base: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    root, document = base
    scenario = root / "trace_source.json"
    scenario.write_text(json.dumps(document))
    trace = tmp_path / "good.vkt"
    code, err = _cli("record", str(scenario), "-o", str(trace), "--output", str(tmp_path), "--checkpoint-every", "1")
    assert code == 0, err
    good = trace.read_bytes()
    bad = tmp_path / "bad.vkt"

    @settings(FUZZ, max_examples=300 * SCALE)
    @given(st.one_of(
        st.tuples(st.just("flip"), st.integers(0, len(good) - 1), st.integers(1, 255)),
        st.tuples(st.just("cut"), st.integers(0, len(good) - 1), st.just(0)),
        st.tuples(st.just("random"), st.integers(0, 4096), st.integers(0, 2**32 - 1)),
    ))
    def check(mutation: tuple[str, int, int]) -> None:
        kind, at, value = mutation
        if kind == "flip":
            data = bytearray(good)
            data[at] ^= value
        elif kind == "cut":
            data = bytearray(good[:at])
        else:
            data = bytearray(np.random.default_rng(value).integers(0, 256, at, dtype=np.uint8).tobytes())
        bad.write_bytes(bytes(data))
        for args in (("info", str(bad), "--json"), ("export", str(bad), "--frame", "1", "--resource", "c", "-o", str(tmp_path / "x.npy"))):
            code, err = _cli(*args)
            assert code in (0, 2), err
            assert "Traceback" not in err and "internal error" not in err, err

    check()


DRIFT = """#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer I { float inc[]; };
layout(set = 0, binding = 1) buffer A { float acc[]; };
void main() { uint i = gl_GlobalInvocationID.x; acc[i] += inc[i]; }
"""


@pytest.mark.slow
@pytest.mark.device
def test_fuzzed_delta_traces_read_or_fail_clearly(tmp_path: Path) -> None:
    """The same for a trace whose snapshots are stored as deltas (codec 3): damage to a delta, to the
    blob it refers to or to the chain's headers gives one clear error, never a traceback."""
    n = 4096
    b = ScenarioBuilder(tmp_path / "drift")
    rng = np.random.default_rng(2)
    b.shader("drift", DRIFT).buffer("inc", 4 * n, rng.uniform(-1e-3, 1e-3, n).astype(np.float32), shader_access="readonly")
    b.buffer("acc", 4 * n, (rng.standard_normal(n) + 10).astype(np.float32))
    for k in range(6):
        b.dispatch("drift", [(0, 0, "inc"), (0, 1, "acc")], [n // 64]).boundary(["acc"], k)
    trace = tmp_path / "good.vkt"
    code, err = _cli("record", str(b.save()), "-o", str(trace), "--checkpoint-every", "4")
    assert code == 0, err
    from capture.reader import TraceReader
    from capture.format.records import Codec

    with TraceReader(trace) as r:
        assert sum(r.blob_info(k).codec == Codec.DELTA for k in r.blob_keys()) >= 4
    good = trace.read_bytes()
    bad = tmp_path / "bad.vkt"

    @settings(FUZZ, max_examples=150 * SCALE)
    @given(st.one_of(
        st.tuples(st.just("flip"), st.integers(0, len(good) - 1), st.integers(1, 255)),
        st.tuples(st.just("cut"), st.integers(0, len(good) - 1), st.just(0)),
    ))
    def check(mutation: tuple[str, int, int]) -> None:
        kind, at, value = mutation
        data = bytearray(good)
        if kind == "flip":
            data[at] ^= value
        else:
            del data[at:]
        bad.write_bytes(bytes(data))
        for args in (("info", str(bad), "--json"),
                     ("export", str(bad), "--frame", "5", "--resource", "acc", "-o", str(tmp_path / "x.npy"))):
            code, err = _cli(*args)
            assert code in (0, 2), err
            assert "Traceback" not in err and "internal error" not in err, err

    check()
