"""Compiles the ARM extensions' C declarations (``cdefs/*.h``: VK_ARM_tensors, VK_ARM_data_graph,
VK_ARM_data_graph_optical_flow) into ``_arm_cdefs.py``, cffi's out-of-line ABI module: the same FFI as
``cffi.FFI().cdef(...)`` of those files, with its types parsed once here instead of by pycparser in
every process (that parse, and the first lookup of each type name, cost vkcap about 0.25 s at start-up).
Nothing is compiled to machine code.

    python -m vkcore.device.ffi_build      # after editing a cdefs/*.h file

tests/test_ffi_build.py checks that the committed module is what these declarations give.
"""
from __future__ import annotations

from pathlib import Path

import cffi

HERE = Path(__file__).resolve().parent
#: In declaration order: each builds on the ones before it.
HEADERS = ("arm_tensors.h", "arm_data_graph.h", "arm_optical_flow.h")
MODULE = "vkcore.device._arm_cdefs"


def declarations() -> str:
    return "\n".join((HERE / "cdefs" / name).read_text() for name in HEADERS)


def emit(target: Path) -> None:
    """Write the out-of-line module for the declarations to ``target``."""
    builder = cffi.FFI()
    builder.cdef(declarations())
    builder.set_source(MODULE, None)
    builder.emit_python_code(str(target))


if __name__ == "__main__":
    emit(HERE / "_arm_cdefs.py")
