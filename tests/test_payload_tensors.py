"""bfloat16 and float8 tensors: .npy payload bytes preserved, in the reference runner's dtypes,
recorded and replayed bit for bit."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.builders import ScenarioBuilder, vkcap
from tests.reference import assert_same_outputs

pytestmark = pytest.mark.device


@pytest.mark.slow
@pytest.mark.parametrize("fmt, src_dtype, written", [
    ("VK_FORMAT_R16_SFLOAT_FPENCODING_BFLOAT16_ARM", "<f2", "<V2"),
    ("VK_FORMAT_R8_SFLOAT_FPENCODING_FLOAT8E4M3_ARM", "|i1", "<V1"),
    ("VK_FORMAT_R8_SFLOAT_FPENCODING_FLOAT8E5M2_ARM", "|u1", "|u1"),
])
def test_payload_bytes_survive_run_record_and_replay(builder: ScenarioBuilder, tmp_path: Path, fmt: str,
                                                     src_dtype: str, written: str) -> None:
    payload = np.random.default_rng(5).integers(0, 256, 3 * 4 * np.dtype(src_dtype).itemsize, dtype=np.uint8)
    array = payload.view(src_dtype).reshape(3, 4)
    builder.resources.append({"tensor": {"uid": "t", "dims": [3, 4], "format": fmt, "shader_access": "readwrite",
                                         "src": builder.npy("t.npy", array), "dst": "out.npy"}})
    builder.boundary(["t"], 0)
    scenario = builder.save()
    trace = tmp_path / "t.vkt"
    proc = vkcap("record", scenario, "-o", trace, "--output", tmp_path / "ours")
    assert proc.returncode == 0, proc.stderr
    out = np.load(tmp_path / "ours" / "out.npy")
    assert (out.dtype.str if out.dtype.kind != "V" else f"<V{out.dtype.itemsize}", out.shape) == (written, (3, 4))
    assert out.tobytes() == payload.tobytes()
    report = tmp_path / "r.json"
    assert vkcap("replay", trace, "--json", report).returncode == 0
    first = json.loads(report.read_text())["frames"][0]["resources"][0]
    assert (first["uid"], first["differing"]) == ("t", 0)
    assert_same_outputs(scenario, tmp_path / "ours", tmp_path, ["out.npy"])
