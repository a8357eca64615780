"""A fleet node's trace cache (replay/fleet_cache.py): fetched once, marked used, pruned least recently
used first down to its limit, never an entry used recently, never half-deleted."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from replay.fleet_cache import cached_trace, prune
from vkcap.cli import main

MiB = 1 << 20


def entry(root: Path, digest: str, size: int, used_ago_s: float) -> Path:
    path = root / digest / "t.vkt"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"x" * size)
    when = time.time() - used_ago_s
    os.utime(path.parent, (when, when))
    return path


def test_a_trace_is_fetched_once_and_marked_used(tmp_path: Path) -> None:
    fetches: list[str] = []

    def fetch() -> bytes:
        fetches.append("once")
        return b"trace bytes"

    first = cached_trace(tmp_path, "abc", "t.vkt", fetch)
    os.utime(first.parent, (1, 1))
    again = cached_trace(tmp_path, "abc", "t.vkt", fetch)
    assert first == again == tmp_path / "abc" / "t.vkt" and first.read_bytes() == b"trace bytes"
    assert fetches == ["once"]
    assert time.time() - first.parent.stat().st_mtime < 60  # used just now: a prune spares it


def test_prune_removes_the_least_recently_used_down_to_the_limit_and_spares_recent_ones(tmp_path: Path) -> None:
    entry(tmp_path, "oldest", 3 * MiB, 3600 * 5)
    entry(tmp_path, "old", 3 * MiB, 3600 * 4)
    entry(tmp_path, "older-but-small", 1 * MiB, 3600 * 3)
    entry(tmp_path, "recent", 4 * MiB, 60)
    # 11 MiB held, 5 allowed: the two oldest go, and then 5 remain (the recent one is never a candidate)
    assert prune(tmp_path, 5 * MiB, keep_recent_s=600) == ["oldest", "old"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["older-but-small", "recent"]
    # a limit below what recent entries take: everything else goes, the recent one stays
    assert prune(tmp_path, 1, keep_recent_s=600) == ["older-but-small"]
    assert [p.name for p in tmp_path.iterdir()] == ["recent"]
    assert prune(tmp_path / "missing", 1) == []


def test_a_fetch_prunes_the_cache_it_grows(tmp_path: Path) -> None:
    entry(tmp_path, "stale", 2 * MiB, 3600)
    path = cached_trace(tmp_path, "new", "t.vkt", lambda: b"y" * (2 * MiB), limit_bytes=3 * MiB)
    assert path.is_file() and not (tmp_path / "stale").exists()
    assert not any(p.name.startswith(".trash") for p in tmp_path.iterdir())


def test_a_bad_cache_limit_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["suite", "run", str(tmp_path), "--ray", "local", "--ray-cache-limit", "0"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == ["vkcap: error: --ray-cache-limit: must be a number of GiB > 0 and at most 1048576 (1 PiB), got 0.0"]
