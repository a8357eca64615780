"""``--capture-frame``: RenderDoc's in-application API, when RenderDoc is loaded in this process (vkcap
started from RenderDoc, or with ``renderdoccmd capture``): each frame of the scenario becomes one
RenderDoc capture, started before its submission and ended after it.

RenderDoc exports ``RENDERDOC_GetAPI`` from ``librenderdoc.so``; the table it returns is
``RENDERDOC_API_1_1_2`` (``renderdoc_app.h``): function pointers in a fixed order, of which vkcap uses
``GetNumCaptures``, ``StartFrameCapture`` and ``EndFrameCapture``. A Vulkan capture names the device by
the instance's dispatch table pointer (``RENDERDOC_DEVICEPOINTER_FROM_VKINSTANCE``: the first pointer of
the dispatchable instance object); there is no window.
"""
from __future__ import annotations

import ctypes
import os
from typing import Any

import vulkan as vk

LIBRARY = "librenderdoc.so"
API_VERSION_1_1_2 = 10102  # eRENDERDOC_API_Version_1_1_2
# Indices of the function pointers vkcap calls in RENDERDOC_API_1_1_2.
GET_NUM_CAPTURES, START_FRAME_CAPTURE, END_FRAME_CAPTURE = 13, 19, 21
TABLE_ENTRIES = 22  # GetAPIVersion .. EndFrameCapture


def loaded_library() -> ctypes.CDLL | None:
    """RenderDoc's library when it is already in this process (never loads it)."""
    try:
        return ctypes.CDLL(LIBRARY, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
    except OSError:
        return None


class RenderDoc:
    """Frame captures through RenderDoc's in-application API for one Vulkan instance."""

    def __init__(self, table: Any, device_pointer: int) -> None:
        fn = ctypes.CFUNCTYPE
        self._start = fn(None, ctypes.c_void_p, ctypes.c_void_p)(table[START_FRAME_CAPTURE])
        self._end = fn(ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p)(table[END_FRAME_CAPTURE])
        self._count = fn(ctypes.c_uint32)(table[GET_NUM_CAPTURES])
        self.device_pointer = device_pointer

    @classmethod
    def attach(cls, instance: Any) -> "RenderDoc | None":
        """The API for ``instance`` (the `vulkan` package's handle), or ``None`` when RenderDoc is not loaded
        or does not give the 1.1.2 API."""
        library = loaded_library()
        if library is None:
            return None
        get_api = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p))(
            ("RENDERDOC_GetAPI", library))
        api = ctypes.c_void_p()
        if get_api(API_VERSION_1_1_2, ctypes.byref(api)) != 1 or not api.value:
            return None
        table = ctypes.cast(api, ctypes.POINTER(ctypes.c_void_p * TABLE_ENTRIES)).contents
        address = int(vk.ffi.cast("uintptr_t", instance))
        return cls(table, ctypes.c_void_p.from_address(address).value or 0)

    def start(self) -> None:
        self._start(self.device_pointer, None)

    def end(self) -> bool:
        """End the capture; whether RenderDoc wrote it."""
        return bool(self._end(self.device_pointer, None))

    @property
    def captures(self) -> int:
        return int(self._count())
