"""Recording the examples today gives the golden traces in traces/ record for record.

This is the check behind every behaviour-preserving change of the writer, the recorder or the
executor: each example is recorded again exactly as ``make golden`` recorded it (same arguments, same
lavapipe device, the golden's creation time through ``SOURCE_DATE_EPOCH``), and the new trace must hold
the same records in the same order: every META equal (the header's host, platform and Python aside,
which name the machine that ran ``make golden``) and every BLOB equal in codec and stored bytes.
"""
from __future__ import annotations

import datetime
import os
from pathlib import Path
from typing import Any

import pytest

from capture.reader import TraceReader

from .builders import vkcap
from .needs import LAVAPIPE, missing

pytestmark = pytest.mark.device

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = ["add", "heat", "fragment", "blur", "conv2d", "tensor_op", "graph_custom"]
MACHINE_FIELDS = ("host", "platform", "python")


def lavapipe_is_offered() -> bool:
    """Whether the loader offers lavapipe here: the goldens were recorded on it (``make golden``)."""
    chosen = os.environ.get("VK_DRIVER_FILES") or os.environ.get("VK_ICD_FILENAMES")
    return LAVAPIPE.is_file() and (not chosen or "lvp_icd" in chosen)


def records(path: Path) -> tuple[list[dict[str, Any]], list[tuple[str, Any, bytes]]]:
    """The trace's META bodies in file order (machine fields dropped from the header) and its blobs
    as (key, info, stored bytes) in file order."""
    with TraceReader(str(path)) as reader:
        metas = []
        for offset, _kind in reader.meta_index():
            body = reader.read_meta(offset)
            if body.get("kind") == "header":
                body = {k: v for k, v in body.items() if k not in MACHINE_FIELDS}
            metas.append(body)
        keys = sorted(reader.blob_keys(), key=reader.blob_offset)
        blobs = [(k, reader.blob_info(k), reader.read_stored(k)) for k in keys]
        return metas, blobs


@pytest.mark.slow
@pytest.mark.parametrize("name", EXAMPLES)
def test_recording_an_example_gives_its_golden_trace(name: str, tmp_path: Path) -> None:
    if not lavapipe_is_offered():
        missing("lavapipe (mesa-vulkan-drivers), on which the golden traces were recorded, is not offered here")
    golden = REPO / "traces" / f"{name}.vkt"
    golden_metas, golden_blobs = records(golden)
    created = datetime.datetime.fromisoformat(golden_metas[0]["created"])
    (tmp_path / "examples").symlink_to(REPO / "examples")
    (tmp_path / "traces").mkdir()
    done = vkcap("record", f"examples/{name}/scenario.json", "--output", f"build/golden/{name}",
                 "-o", f"traces/{name}.vkt", "--device", "llvmpipe", cwd=tmp_path,
                 env={"SOURCE_DATE_EPOCH": str(int(created.timestamp()))})
    assert done.returncode == 0, done.stderr
    metas, blobs = records(tmp_path / "traces" / f"{name}.vkt")
    assert [m.get("kind") for m in metas] == [m.get("kind") for m in golden_metas]
    for mine, theirs in zip(metas, golden_metas):
        assert mine == theirs, mine.get("kind")
    assert [(k, info) for k, info, _ in blobs] == [(k, info) for k, info, _ in golden_blobs]
    assert [data for *_, data in blobs] == [data for *_, data in golden_blobs]
