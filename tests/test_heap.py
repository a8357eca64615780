"""The CLI's heap policy (:mod:`vkcap.heap`): multi-MiB buffers freed and allocated again reuse memory
already faulted in, instead of fresh mappings (measured in a child process, by its page faults, since
the policy is process-wide)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.builders import REPO

MiB = 1 << 20
ROUNDS = 20
# What decoding a 4 MiB blob per frame allocates: the stored bytes, four planes, the result (the last
# two results are kept). At most about 19 MiB are alive at once.
PROBE = f"""
import resource, sys
from vkcap.heap import keep_large_buffers
applied = keep_large_buffers() if sys.argv[1] == "policy" else None
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
kept = []
for _ in range({ROUNDS}):
    stored = bytearray(3 * {MiB})  # zero-filled: every page is touched
    planes = [bytearray({MiB}) for _ in range(4)]
    kept.append(bytearray(4 * {MiB}))
    del stored, planes, kept[:-2]
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def page_faults(mode: str) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, cwd=REPO, timeout=60,
                         check=True).stdout.split()
    return out[0], int(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's: elsewhere the policy is a no-op")
def test_large_buffers_are_reused_instead_of_faulted_in_again() -> None:
    applied, with_policy = page_faults("policy")
    _, without = page_faults("default")
    assert applied == "True"
    alive_pages = 19 * MiB // 4096
    assert with_policy < alive_pages * 3 // 2  # about what is alive at once is faulted in, once
    assert without > 2 * with_policy  # glibc's default maps (and faults in) most buffers anew
