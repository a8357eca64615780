"""A resource's bytes (a trace snapshot, a checkpoint) as the file a scenario's ``src`` reads or its
``dst`` writes: buffers as flat int8 ``.npy``, tensors as ``.npy`` typed by their format and shaped by
their dims, images (level 0) as ``.dds``, ``.png`` (R8G8B8A8_UNORM only) or an NHWC ``.npy``; each file is
what the reference runner writes for that resource, written atomically.

``meta`` is a trace's description of the resource (``kind``, ``format``, ``dims``, ``texel_bytes``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import UsageError

#: The suffixes a resource of each kind is written as; the first is what ``dst`` files of that kind are.
SUFFIXES = {"buffer": (".npy",), "tensor": (".npy",), "image": (".dds", ".png", ".npy")}


def write_resource_file(path: Path, meta: dict[str, Any], data: bytes | memoryview) -> None:
    """Write ``data``, the bytes of the resource ``meta`` describes, as ``path`` (its suffix picks the
    file format, see the module docstring); a :class:`UsageError` naming ``path`` when that format cannot
    hold the resource."""
    # lazy: vkcap --help imports this module, not vkcore.scenario.npyio
    from ..scenario.npyio import write_flat_int8, write_typed

    kind = meta.get("kind", "buffer")
    if path.suffix.lower() not in SUFFIXES.get(kind, ()):
        raise UsageError(f"{path}: a {kind} is not written as {path.suffix or 'a file without a suffix'}")
    if kind == "tensor":
        # lazy: vkcap --help imports this module, not vkcore.resources.formats (with vulkan)
        from .formats import tensor_dtype

        write_typed(path, _npy_descr(tensor_dtype(meta["format"])), meta["dims"], data)
    elif kind == "buffer":
        write_flat_int8(path, data)
    else:
        _write_image(path, meta, data)


def _write_image(path: Path, meta: dict[str, Any], data: bytes | memoryview) -> None:
    # lazy: vkcap --help imports this module, not vkcore.resources.formats, vkcore.resources.images, vkcore.scenario.npyio (with numpy, vulkan)
    from ..scenario.npyio import write_typed
    from .formats import format_info
    from .images import write_image_file

    fmt = format_info(meta["format"])
    dims = meta["dims"]
    width, height, texel = int(dims[1]), int(dims[2]), int(meta.get("texel_bytes", fmt.block_bytes))
    level0 = data[: width * height * texel]
    suffix = path.suffix.lower()
    if suffix == ".png" and fmt.name != "VK_FORMAT_R8G8B8A8_UNORM":
        raise UsageError(f"{path}: PNG export supports only VK_FORMAT_R8G8B8A8_UNORM, this image is {fmt.name}")
    if suffix in (".dds", ".png"):
        if suffix == ".dds" and fmt.dxgi_format is None:
            raise UsageError(f"{path}: {fmt.name} has no DDS equivalent; export it as .npy")
        write_image_file(path, fmt, width, height, texel, level0)
    else:
        # lazy: vkcap --help imports this module, not numpy
        import numpy as np

        components = texel // np.dtype(fmt.dtype).itemsize if not fmt.is_packed else 1
        write_typed(path, np.dtype(fmt.dtype).str, (1, height, width, components), level0)


def _npy_descr(dtype: str) -> str:
    """The descr the reference writes: numpy's spelling of ``dtype`` ('|b1' for bool)."""
    # lazy: vkcap --help imports this module, not numpy
    import numpy as np

    return np.dtype(dtype).str
