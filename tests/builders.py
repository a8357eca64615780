"""Build scenario folders for tests: shaders, .npy inputs and the JSON, in a few lines."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent


def with_repo_path(first: "str | Path | None" = None) -> str:
    """A PYTHONPATH whose first entry is ``first`` (default: this checkout, so a child process started from
    another folder runs this checkout's packages), followed by the caller's own PYTHONPATH (where a machine
    keeps vkcap's dependencies, as the GPU machine's does)."""
    return os.pathsep.join(p for p in (str(first or REPO), os.environ.get("PYTHONPATH", "")) if p)


def vkcap(*args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run the real ``vkcap`` command line in a subprocess and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "vkcap", *map(str, args)],
        cwd=cwd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})},
    )


# GLSL compute shaders used across tests.
ADD_FLOAT = """#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) readonly buffer A { float a[]; };
layout(set = 0, binding = 1) readonly buffer B { float b[]; };
layout(set = 0, binding = 2) buffer C { float c[]; };
void main() { uint i = gl_GlobalInvocationID.x; c[i] = a[i] + b[i]; }
"""
ADD_INT = ADD_FLOAT.replace("float", "int")

# Writes (x, y, 10x + y, 1) into every texel of an rgba32f storage image; see image_pattern().
WRITE_PATTERN = """#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0, rgba32f) uniform writeonly image2D img;
void main() {
    ivec2 p = ivec2(gl_GlobalInvocationID.xy);
    imageStore(img, p, vec4(p.x, p.y, p.x * 10 + p.y, 1.0));
}
"""
# Copies a [1, H, W, 4] float tensor into a buffer, texel after texel (build with -DWIDTH=W).
READ_TENSOR = """#version 450
#extension GL_ARM_tensors : require
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) uniform tensorARM<float, 4> T;
layout(set = 0, binding = 1) buffer O { float o[]; };
void main() {
    uint x = gl_GlobalInvocationID.x, y = gl_GlobalInvocationID.y;
    for (uint c = 0; c < 4; c++) { float v; tensorReadARM(T, uint[](0, y, x, c), v); o[(y * WIDTH + x) * 4 + c] = v; }
}
"""


def image_pattern(width: int, height: int) -> np.ndarray:
    """What WRITE_PATTERN leaves in a ``width`` x ``height`` image, as [height, width, 4] float32."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    return np.stack([x, y, x * 10 + y, np.ones_like(x)], axis=-1)


@dataclass
class ScenarioBuilder:
    """Accumulates resources and commands, writes files into ``root``, and saves ``scenario.json``."""

    root: Path
    resources: list[dict[str, Any]] = field(default_factory=list)
    commands: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)

    def file(self, name: str, text: str | bytes) -> Path:
        p = self.root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            p.write_bytes(text)
        else:
            p.write_text(text)
        return p

    def npy(self, name: str, array: np.ndarray) -> str:
        p = self.root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        np.save(p, array)
        return name

    def shader(self, uid: str, source: str, **fields: Any) -> "ScenarioBuilder":
        name = fields.pop("file", f"{uid}.comp")
        self.file(name, source)
        self.resources.append({"shader": {"uid": uid, "src": name, "type": "GLSL", **fields}})
        return self

    def buffer(self, uid: str, size: int, data: np.ndarray | None = None, **fields: Any) -> "ScenarioBuilder":
        body: dict[str, Any] = {"uid": uid, "size": size, "shader_access": fields.pop("shader_access", "readwrite"), **fields}
        if data is not None:
            body["src"] = self.npy(f"{uid}.npy", data)
        self.resources.append({"buffer": body})
        return self

    def raw(self, uid: str, data: np.ndarray) -> "ScenarioBuilder":
        self.resources.append({"raw_data": {"uid": uid, "src": self.npy(f"{uid}.npy", data)}})
        return self

    def resource(self, kind: str, **body: Any) -> "ScenarioBuilder":
        self.resources.append({kind: body})
        return self

    def dispatch(self, shader: str, bindings: list[tuple[int, int, str]], range_nd: list[int], **fields: Any) -> "ScenarioBuilder":
        body = {
            "shader_ref": shader,
            "rangeND": range_nd,
            "bindings": [{"set": s, "id": i, "resource_ref": r} for s, i, r in bindings],
            **fields,
        }
        self.commands.append({"dispatch_compute": body})
        return self

    def barrier(self, **refs: list[str]) -> "ScenarioBuilder":
        self.commands.append({"dispatch_barrier": refs})
        return self

    def boundary(self, resources: list[str], frame_id: int) -> "ScenarioBuilder":
        """A ``frame_boundary``; ``frame_id`` is written only where it differs from the frame's position
        (the reference runner deprecates ids given by hand)."""
        position = sum("frame_boundary" in c or "mark_boundary" in c for c in self.commands)
        body: dict[str, Any] = {"resources": resources}
        if frame_id != position:
            body["frame_id"] = frame_id
        self.commands.append({"frame_boundary": body})
        return self

    def document(self) -> dict[str, Any]:
        return {"resources": self.resources, "commands": self.commands}

    def save(self, name: str = "scenario.json") -> Path:
        p = self.root / name
        p.write_text(json.dumps(self.document(), indent=1))
        return p


def load_output(path: Path, dtype: Any) -> np.ndarray:
    """Read a buffer output (flat int8 .npy, as the reference writes it) as ``dtype``."""
    raw = np.load(path)
    assert raw.dtype == np.int8 and raw.ndim == 1, (raw.dtype, raw.shape)
    return raw.view(dtype)
