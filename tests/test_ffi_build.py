"""The committed out-of-line FFI module is what the declarations in vkcore/device/cdefs/ give."""
from __future__ import annotations

from pathlib import Path


def test_the_compiled_declarations_are_current(tmp_path: Path) -> None:
    from vkcore.device import ffi_build

    fresh = tmp_path / "_arm_cdefs.py"
    ffi_build.emit(fresh)
    assert fresh.read_text() == (ffi_build.HERE / "_arm_cdefs.py").read_text(), (
        "vkcore/device/cdefs/*.h changed: run python -m vkcore.device.ffi_build")


def test_every_declared_type_resolves() -> None:
    """Each struct of the three headers is known to the FFI, and its layout was checked at import."""
    import re

    from vkcore.device import arm_ffi, ffi_build, graph_ffi, optical_flow_ffi  # noqa: F401  (their layout checks)

    names = re.findall(r"typedef struct (\w+) \{", ffi_build.declarations())
    assert len(names) > 40
    assert all(arm_ffi.ffi.sizeof(name) > 0 for name in names)
