"""``vkcore.outputs.write_atomic``: a destination holds its old content or the whole new one, never a part."""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Iterator

import pytest

from vkcore.outputs import write_atomic


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "out.npy"
    target.write_bytes(b"previous")

    def chunks() -> Iterator[bytes]:
        yield b"x" * 4096
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        write_atomic(target, chunks())
    assert target.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["out.npy"]


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_the_new_file_has_the_mode_the_umask_gives(tmp_path: Path, umask: int, mode: int) -> None:
    target = tmp_path / "deep" / "out.bin"
    old = os.umask(umask)
    try:
        write_atomic(target, [b"abc", memoryview(b"def")])
    finally:
        os.umask(old)
    assert target.read_bytes() == b"abcdef"
    assert stat.S_IMODE(target.stat().st_mode) == mode
    assert [p.name for p in target.parent.iterdir()] == ["out.bin"]
