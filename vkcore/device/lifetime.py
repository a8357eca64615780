"""Whether this process ends as soon as its work is done, so that Vulkan devices may be left to its exit.

Kept apart from :mod:`vkcore.device.context` so that the console script can say so before it knows
whether the command uses Vulkan at all, without importing the Vulkan bindings.
"""
from __future__ import annotations

import os

exits_after_work = False

#: environment variables through which a user asks the Vulkan loader for layers of their own.
LAYER_REQUESTS = ("VK_INSTANCE_LAYERS", "VK_LOADER_LAYERS_ENABLE")


def leave_last_device_to_exit() -> bool:
    """Let this process end with its last closed device still alive, and say whether it does: the
    caller then exits (``os._exit``) once its work is done, and the kernel driver frees what the process
    held. A closed device is destroyed when the next one is created, so at most one is ever left; with
    validation on every device is destroyed on close, as the layer checks then that nothing leaked.
    ``vkDestroyDevice`` joins the driver's threads: 23 ms on NVIDIA's 580 driver, at the end of every
    command.

    Not where the environment asks the loader for layers: a capture layer (GFXReconstruct, RenderDoc)
    writes the end of its file as the instance is destroyed, so such a process destroys everything and
    ends with the interpreter's own exit."""
    global exits_after_work
    exits_after_work = not any(os.environ.get(name, "").strip() for name in LAYER_REQUESTS)
    return exits_after_work
