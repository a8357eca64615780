"""ARM's ML emulation layers (VK_ARM_tensors, VK_ARM_data_graph on any Vulkan device).

The layers must stack as app -> Graph layer -> Tensor layer -> driver. The Vulkan loader shipped with
Debian 12 orders explicit layers by where it finds their manifests, and the manifests the package ships
name their libraries by relative path. :func:`prepare_emulation_layers` therefore writes one manifest per
folder with an absolute ``library_path`` and returns the folders in stack order (Graph first); the
caller puts them at the front of ``VK_LAYER_PATH`` before the Vulkan instance exists.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..outputs import write_atomic
from ..paths import cache_root

GRAPH_LAYER = "VK_LAYER_ML_Graph_Emulation"
TENSOR_LAYER = "VK_LAYER_ML_Tensor_Emulation"
# Stack order, outermost first; (layer name, manifest file, library file).
STACK: tuple[tuple[str, str, str], ...] = (
    (GRAPH_LAYER, "VkLayer_Graph.json", "libVkLayer_Graph.so"),
    (TENSOR_LAYER, "VkLayer_Tensor.json", "libVkLayer_Tensor.so"),
)


class EmulationLayersUnavailable(RuntimeError):
    """The emulation layer package is missing or incomplete; the message says what is missing."""


@dataclass(frozen=True)
class EmulationLayers:
    """Prepared layer manifests: the folders to prepend to VK_LAYER_PATH and the layer names, in order."""

    folders: tuple[Path, ...]
    names: tuple[str, ...]

    def apply_to_environment(self) -> None:
        """Put the manifest folders first in ``VK_LAYER_PATH``. Must run before the instance is created."""
        current = [p for p in os.environ.get("VK_LAYER_PATH", "").split(os.pathsep) if p]
        ours = [str(f) for f in self.folders]
        os.environ["VK_LAYER_PATH"] = os.pathsep.join(ours + [p for p in current if p not in ours])


def _deploy_dir() -> Path:
    try:
        # lazy: vkcap run imports this module, not emulation_layer
        import emulation_layer  # the ai-ml-emulation-layer-for-vulkan package
    except ImportError:
        raise EmulationLayersUnavailable(
            "the package ai-ml-emulation-layer-for-vulkan is not installed (pip install ai-ml-emulation-layer-for-vulkan)"
        ) from None
    return Path(emulation_layer.__file__).parent / "deploy"


def prepare_emulation_layers() -> EmulationLayers:
    """Write (once, cached by content) manifests with absolute library paths and return them in stack order.

    Raises :class:`EmulationLayersUnavailable` naming the missing file when the package is incomplete.
    """
    deploy = _deploy_dir()
    manifest_dir = deploy / "share" / "vulkan" / "explicit_layer.d"
    folders: list[Path] = []
    names: list[str] = []
    for name, manifest_name, library_name in STACK:
        library = next((d / library_name for d in (deploy / "lib64", deploy / "lib") if (d / library_name).is_file()), None)
        manifest_path = manifest_dir / manifest_name
        if library is None:
            raise EmulationLayersUnavailable(f"emulation layer library {library_name} not found under {deploy}")
        if not manifest_path.is_file():
            raise EmulationLayersUnavailable(f"emulation layer manifest {manifest_path} not found")
        manifest = json.loads(manifest_path.read_text())
        manifest["layer"]["library_path"] = str(library.resolve())
        text = json.dumps(manifest, indent=1, sort_keys=True)
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        folder = cache_root() / "layers" / f"{name}-{digest}"
        target = folder / manifest_name
        if not target.is_file():
            write_atomic(target, [text.encode()])
        folders.append(folder)
        names.append(name)
    return EmulationLayers(tuple(folders), tuple(names))
