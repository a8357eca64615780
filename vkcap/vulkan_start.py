"""Starting the Vulkan driver early, in a thread, while a command imports and reads its files."""
from __future__ import annotations

import importlib
from pathlib import Path

# C extension modules that commands import while the driver starts in its thread. A process loads
# shared libraries one at a time (glibc's loader lock) and the driver's load is long (LLVM for lavapipe,
# NVIDIA's libraries): imported in that window, ``_queue`` waited 17 ms on lavapipe and 12 ms on NVIDIA's
# driver; imported before the thread starts, each takes under 2 ms.
BEFORE_THE_DRIVER = ("queue",)
TRACE_CODECS = ("xxhash", "zstandard", "msgpack")  # what reading or writing a trace loads


def start_vulkan_early(icd: Path | None = None, device: str | None = None, *, also: tuple[str, ...] = ()) -> None:
    """Choose the driver (``--icd``) and let it start, on the ``--device`` given, while the command
    imports and reads its files (see :func:`vkcore.device.context.start_instance_early`); call once the
    arguments are checked. ``BEFORE_THE_DRIVER`` and ``also`` (module names) are imported first."""
    # lazy: vkcap --help imports this module, not vkcore.device.context, vkcore.device.driver (with vulkan)
    from vkcore.device.context import start_instance_early
    from vkcore.device.driver import use_driver

    for name in (*BEFORE_THE_DRIVER, *also):
        importlib.import_module(name)
    use_driver(icd)
    start_instance_early(device)
