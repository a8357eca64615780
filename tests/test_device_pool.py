"""``suite run --device-pool``: the matched devices are one pool, each trace replayed once on whichever
is free, each result naming the exact device it ran on. Two real lavapipe devices: the loader lists
the lavapipe driver twice when ``VK_DRIVER_FILES`` names two copies of its manifest (one name, one
UUID, two indices)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.needs import LAVAPIPE, missing

from tests.builders import ScenarioBuilder, vkcap
from tests.test_suite import record

pytestmark = pytest.mark.device


@pytest.fixture
def two_lavapipes(tmp_path: Path) -> dict[str, str]:
    if not LAVAPIPE.exists():
        missing("lavapipe's ICD manifest is not installed")
    paths = []
    for name in ("a", "b"):
        (tmp_path / "icd" / name).mkdir(parents=True)
        paths.append(tmp_path / "icd" / name / "lvp.json")
        paths[-1].write_bytes(LAVAPIPE.read_bytes())
    env = {"VK_DRIVER_FILES": os.pathsep.join(map(str, paths))}
    listed = json.loads(vkcap("devices", "--json", env=env).stdout)
    assert [d["index"] for d in listed] == [0, 1]
    assert listed[0]["device_uuid"] == listed[1]["device_uuid"]  # identical devices, told apart by index
    return env


def snapshot(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns, p.read_bytes())
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_a_pool_replays_each_trace_once(builder: ScenarioBuilder, tmp_path: Path, two_lavapipes: dict[str, str]) -> None:
    """Six traces over a pool of two lavapipe devices: six results, each trace once, each naming the
    device (index and UUID) it ran on in the JSON, JUnit and result files; the traces are untouched.
    Without the pool, ``--device 0 --device 1`` replicates: twelve results, the two devices told apart
    by label (``[UUID8] #INDEX``) and by result file."""
    names = [f"t{k}" for k in range(6)]
    traces = [record(builder, tmp_path, 1, n) for n in names]
    folder = traces[0].parent
    before = snapshot(folder)
    proc = vkcap("suite", "run", folder, "--device-pool", "llvmpipe*", "--json", tmp_path / "pool.json",
                 "--junit", tmp_path / "pool.xml", "--results", tmp_path / "pool", env=two_lavapipes)
    assert proc.returncode == 0, proc.stderr
    assert "device pool: 0: llvmpipe" in proc.stderr and "1: llvmpipe" in proc.stderr
    rows = json.loads((tmp_path / "pool.json").read_text())["results"]
    assert sorted(Path(r["trace"]).stem for r in rows) == names
    assert all(r["status"] == "pass" and r["device_index"] in (0, 1) and len(r["device_uuid"]) == 32 for r in rows)
    assert len(list((tmp_path / "pool").glob("*.json"))) == 6
    assert (tmp_path / "pool.xml").read_text().count("<testcase") == 6
    assert snapshot(folder) == before

    proc = vkcap("suite", "run", folder, "--device", "0", "--device", "1", "--json", tmp_path / "both.json",
                 "--results", tmp_path / "both", "--html", tmp_path / "both.html", env=two_lavapipes)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads((tmp_path / "both.json").read_text())["results"]
    assert sorted((Path(r["trace"]).stem, r["device_index"]) for r in rows) == [(n, i) for n in names for i in (0, 1)]
    assert len(list((tmp_path / "both").glob("*.json"))) == 12  # identical devices: a file each
    label = f"[{rows[0]['device_uuid'][:8]}]"
    assert f"{label} #0" in proc.stdout and f"{label} #1" in proc.stdout
    page = (tmp_path / "both.html").read_text()
    assert page.count(f"{label} #0</th>") == 1 and page.count(f"{label} #1</th>") == 1  # two columns of the matrix
    assert snapshot(folder) == before


@pytest.mark.slow
@pytest.mark.parametrize("args, message", [
    (["--device-pool", "no-such-gpu*"], "no device matches --device-pool 'no-such-gpu*'"),
    (["--device-pool", "llvmpipe*", "--device", "0"], "--device-pool: not with --device or --ray"),
    (["--device-pool", "²"], "no device matches --device-pool '²'"),
    (["--device-pool", "9" * 5000], "no device matches --device-pool '99999"),
])
def test_a_bad_pool_is_bad_input(builder: ScenarioBuilder, tmp_path: Path, args: list[str], message: str) -> None:
    """A pool matching no device, or mixed with ``--device``: one line, exit 2, nothing written."""
    trace = record(builder, tmp_path, 1, "t")
    before = snapshot(trace.parent)
    proc = vkcap("suite", "run", trace.parent, *args, "--json", tmp_path / "r.json")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert message in proc.stderr
    assert not (tmp_path / "r.json").exists() and snapshot(trace.parent) == before
