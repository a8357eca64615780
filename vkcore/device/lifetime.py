"""Whether this process ends as soon as its work is done, so that Vulkan devices may be left to its exit.

Kept apart from :mod:`vkcore.device.context` so that the console script can say so before it knows
whether the command uses Vulkan at all, without importing the Vulkan bindings.
"""

exits_after_work = False


def leave_last_device_to_exit() -> None:
    """Let this process end with its last closed device still alive: the caller exits (``os._exit``)
    once its work is done, and the kernel driver frees what the process held. A closed device is
    destroyed when the next one is created, so at most one is ever left; with validation on every
    device is destroyed on close, as the layer checks then that nothing leaked. ``vkDestroyDevice``
    joins the driver's threads: 23 ms on NVIDIA's 580 driver, at the end of every command."""
    global exits_after_work
    exits_after_work = True
