"""``vkcore.outputs.write_atomic``: a destination holds its old content or the whole new one, never a part."""
from __future__ import annotations

import ctypes
import errno
import os
import stat
from pathlib import Path
from typing import Iterator

import pytest

from vkcore import outputs
from vkcore.outputs import OutputTargetError, write_atomic


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


class _Exchanges:
    """Stands in for ``renameat2``: records each call, then does what ``result`` says (the real call,
    or a failure with that errno)."""

    def __init__(self, result: int | None = None) -> None:
        self.calls: list[tuple[bytes, bytes, int]] = []
        self.result = result
        self.real = outputs._renameat2()

    def __call__(self, dirfd: int, source: bytes, dirfd2: int, target: bytes, flags: int) -> int:
        self.calls.append((source, target, flags))
        if self.result is None:
            assert self.real is not None
            return self.real(dirfd, source, dirfd2, target, flags)
        ctypes.set_errno(self.result)
        return -1


def _publish(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, result: int | None) -> tuple[Path, _Exchanges]:
    target = tmp_path / "trace.vkt"
    target.write_bytes(b"old trace")
    source = tmp_path / ".trace.vkt.partial"
    source.write_bytes(b"new trace")
    exchanges = _Exchanges(result)
    monkeypatch.setattr(outputs, "_renameat2", lambda: exchanges)
    outputs.replace_file(source, target)
    return target, exchanges


def test_a_file_replaces_another_by_exchanging_them_then_removing_the_old_one(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """On this machine (Linux, glibc, the test folder's file system) the exchange is what runs."""
    assert outputs._renameat2() is not None
    target, exchanges = _publish(tmp_path, monkeypatch, None)
    assert exchanges.calls == [(os.fsencode(tmp_path / ".trace.vkt.partial"), os.fsencode(target), 2)]
    assert target.read_bytes() == b"new trace"
    assert [p.name for p in tmp_path.iterdir()] == ["trace.vkt"]


@pytest.mark.parametrize("unsupported", [errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV])
def test_where_exchanging_is_not_supported_the_file_is_renamed_over_the_old_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unsupported: int) -> None:
    target, exchanges = _publish(tmp_path, monkeypatch, unsupported)
    assert len(exchanges.calls) == 1
    assert target.read_bytes() == b"new trace"
    assert [p.name for p in tmp_path.iterdir()] == ["trace.vkt"]


def test_a_new_path_is_a_plain_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exchanges = _Exchanges()
    monkeypatch.setattr(outputs, "_renameat2", lambda: exchanges)
    source = tmp_path / "partial"
    source.write_bytes(b"new")
    outputs.replace_file(source, tmp_path / "fresh")
    assert exchanges.calls == [] and (tmp_path / "fresh").read_bytes() == b"new" and not source.exists()


def test_a_refused_exchange_fails_the_write_and_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "out.npy"
    target.write_bytes(b"previous")
    refusing = _Exchanges(errno.EACCES)
    monkeypatch.setattr(outputs, "_renameat2", lambda: refusing)
    with pytest.raises(OutputTargetError) as caught:
        write_atomic(target, [b"new"])
    assert str(caught.value) == f"{target}: cannot write: Permission denied"
    assert target.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["out.npy"]


def test_an_old_file_that_cannot_be_removed_is_named_and_the_new_one_stays(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    unlink = os.unlink

    def refuse(path: str | Path, *args: object, **kwargs: object) -> None:
        if Path(path).name == ".trace.vkt.partial":
            raise PermissionError(errno.EACCES, "Permission denied")
        unlink(path)

    monkeypatch.setattr(os, "unlink", refuse)
    target, _ = _publish(tmp_path, monkeypatch, None)
    assert target.read_bytes() == b"new trace"
    assert (tmp_path / ".trace.vkt.partial").read_bytes() == b"old trace"
    assert caplog.messages == [f"{target} is in place; its previous content could not be removed from "
                               f"{tmp_path / '.trace.vkt.partial'} (Permission denied)"]
