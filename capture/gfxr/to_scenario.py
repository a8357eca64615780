"""A scenario folder written from a :class:`~.model.Model`: ``scenario.json`` in vkcap's scenario format,
each shader as ``shaderN.spv``, each buffer's initial contents and each distinct push-constant block as
``.npy`` (flat uint8, the bytes as the application left them).

Guarantees: every file name is made here from counters (nothing from the capture names a file); the
folder must be new or empty (nothing of the user's is overwritten); resources that share memory and overlap
become one ``memory_group``; an output read back by the application gets ``dst: <uid>.npy``, and when it
read nothing back, every buffer a dispatch wrote does (said in the summary); a range the host rewrote
between frames is one resource per version, each with its own ``src``, and each frame's ``frame_boundary``
captures the outputs current in that frame.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vkcore.errors import ScenarioError
from vkcore.resources.formats import format_info

from .model import Boundary, Dispatch, Model, Resource


@dataclass(frozen=True)
class Summary:
    dispatches: int
    frames: int
    buffers: int
    images: int
    shaders: int
    outputs: list[str]
    guessed_outputs: bool
    unsupported: list[str]

    def lines(self) -> list[str]:
        outputs = ", ".join(self.outputs) or "none"
        how = " (the application read nothing back: every buffer a dispatch wrote)" if self.guessed_outputs else ""
        images = f"{self.images} image(s), " if self.images else ""
        return [f"imported {self.dispatches} dispatch(es) in {self.frames} frame(s): {self.buffers} buffer(s), "
                f"{images}{self.shaders} shader(s); outputs: {outputs}{how}", *self.unsupported]


def _npy(path: Path, raw: bytes) -> None:
    np.save(path, np.frombuffer(raw, dtype=np.uint8), allow_pickle=False)


def _groups(resources: list[Resource]) -> dict[str, tuple[str, int]]:
    """uid -> (memory group id, offset in it) for resources that overlap another in the same memory."""
    out: dict[str, tuple[str, int]] = {}
    by_memory: dict[int, list[Resource]] = {}
    lineages: dict[str, int] = {}
    for r in resources:
        lineages[r.lineage] = lineages.get(r.lineage, 0) + 1
    for r in resources:
        if lineages[r.lineage] == 1 and r.image is None:  # versions of one range never overlap another (the model refuses that)
            by_memory.setdefault(r.memory, []).append(r)
    for memory, members in by_memory.items():
        members.sort(key=lambda r: r.offset)
        clusters: list[list[Resource]] = []
        end = -1
        for r in members:
            if clusters and r.offset < end:
                clusters[-1].append(r)
                end = max(end, r.offset + r.size)
            else:
                clusters.append([r])
                end = r.offset + r.size
        for k, cluster in enumerate(c for c in clusters if len(c) > 1):
            base = cluster[0].offset
            for r in cluster:
                out[r.uid] = (f"memory{memory}_{k}", r.offset - base)
    return out


def _image(folder: Path, r: Resource, output: bool) -> dict[str, Any]:
    """An image resource: ``dims`` [1, W, H, 1], its texels as an NHWC ``.npy``, its output as DDS."""
    image = r.image
    assert image is not None
    info = format_info(image.format)
    # what the shaders do with it, as their decorations say: ARM's runner crashes (SIGSEGV, 0.11) on an
    # image written as "readwrite" that the shader declares writeonly
    access = ("readwrite" if r.read else "writeonly") if r.written else "image_read"
    body: dict[str, Any] = {"uid": r.uid, "dims": [1, image.width, image.height, 1], "format": image.format,
                            "shader_access": access, "tiling": image.tiling}
    if r.initial is not None and any(r.initial):
        texels = np.frombuffer(r.initial, dtype=info.dtype).reshape(1, image.height, image.width, -1)
        np.save(folder / f"{r.uid}_in.npy", texels, allow_pickle=False)
        body["src"] = f"{r.uid}_in.npy"
    if output:
        body["dst"] = f"{r.uid}.dds"
    return body


def write_scenario(model: Model, folder: Path) -> Summary:
    dispatches = [c for c in model.commands if isinstance(c, Dispatch)]
    if not dispatches:
        said = "; ".join(model.unsupported.lines())
        raise ScenarioError("the capture holds no compute dispatch vkcap can import" + (f" ({said})" if said else ""))
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ScenarioError(f"{folder}: exists and is not an empty folder (vkcap import never overwrites)")
    folder.mkdir(parents=True, exist_ok=True)
    used = {uid for d in dispatches for _, _, uid in d.bindings}
    resources = [r for r in model.versions if r.uid in used]
    guessed = not any(r.output for r in resources)
    outputs = [r for r in resources if (r.written if guessed else r.output)]
    items: list[dict[str, Any]] = []
    for uid, (code, entry, constants, push) in model.shader_code.items():
        (folder / f"{uid}.spv").write_bytes(code)
        body: dict[str, Any] = {"uid": uid, "src": f"{uid}.spv", "type": "SPIR-V", "entry": entry}
        if push:
            body["push_constants_size"] = push
        if constants:
            body["specialization_constants"] = [{"id": i, "value": v} for i, v in constants]
        items.append({"shader": body})
    pushes: dict[bytes, str] = {}
    for d in dispatches:
        if d.push and d.push not in pushes:
            pushes[d.push] = f"push{len(pushes)}"
            _npy(folder / f"{pushes[d.push]}.npy", d.push)
            items.append({"raw_data": {"uid": pushes[d.push], "src": f"{pushes[d.push]}.npy"}})
    groups = _groups(resources)
    for r in resources:
        if r.image is not None:
            items.append({"image": _image(folder, r, r in outputs)})
            continue
        body = {"uid": r.uid, "size": r.size, "shader_access": "readwrite"}
        if r.initial is not None and any(r.initial):
            _npy(folder / f"{r.uid}_in.npy", r.initial)
            body["src"] = f"{r.uid}_in.npy"
        if r in outputs:
            body["dst"] = f"{r.uid}.npy"
        if r.uid in groups:
            body["memory_group"] = {"id": groups[r.uid][0], "offset": groups[r.uid][1]}
        items.append({"buffer": body})
    commands: list[dict[str, Any]] = []
    frames = 1
    for c in model.commands:
        if isinstance(c, Dispatch):
            body = {"shader_ref": c.shader, "rangeND": list(c.groups),
                    "bindings": [{"set": s, "id": b, "resource_ref": uid} for s, b, uid in c.bindings]}
            if c.push:
                body["push_data_ref"] = pushes[c.push]
            commands.append({"dispatch_compute": body})
        elif isinstance(c, Boundary) and commands and "frame_boundary" not in commands[-1]:
            live = set(c.live)
            commands.append({"frame_boundary": {"resources": [r.uid for r in outputs if r.uid in live]}})
            frames += 1
    if commands and "frame_boundary" in commands[-1]:
        frames -= 1
    (folder / "scenario.json").write_text(json.dumps({"resources": items, "commands": commands}, indent=2) + "\n")
    images = sum(r.image is not None for r in resources)
    return Summary(len(dispatches), frames, len(resources) - images, images, len(model.shader_code), [r.uid for r in outputs], guessed,
                   model.unsupported.lines())
