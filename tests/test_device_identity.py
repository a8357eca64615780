"""Every device is named exactly: its deviceUUID and driverUUID (VkPhysicalDeviceIDProperties) and PCI
bus where the driver gives it, in ``vkcap devices``, a trace's fingerprint and ``vkcap info``;
``--device`` takes a UUID prefix; suite results carry the UUID (and a result file's is checked)."""
from __future__ import annotations

import json
import re
import string
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.html import _fingerprint_row
from replay.suite import TraceResult, device_labels, write_results
from tests.builders import ScenarioBuilder, vkcap
from tests.test_suite import record
from vkcore.device.context import choose_device, list_devices, uuid_matches
from vkcore.errors import UsageError

HEX32 = re.compile(r"[0-9a-f]{32}")


@pytest.fixture(scope="module")
def here() -> list:
    return list_devices("off")


@pytest.mark.device
def test_devices_name_their_uuids(here: list) -> None:
    """``vkcap devices --json``: each device's index, 32-hex-digit deviceUUID and driverUUID, PCI bus
    (null where the driver lacks VK_EXT_pci_bus_info, as lavapipe does); the table shows the short UUID."""
    proc = vkcap("devices", "--json")
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(proc.stdout)
    assert [d["index"] for d in listed] == list(range(len(listed))) and listed
    for d in listed:
        assert HEX32.fullmatch(d["device_uuid"]) and HEX32.fullmatch(d["driver_uuid"])
        assert d["device_index"] == d["index"]
        assert d["pci_bus"] is None or re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", d["pci_bus"])
    table = vkcap("devices")
    assert table.returncode == 0 and "UUID" in table.stdout and listed[0]["device_uuid"][:8] in table.stdout


@pytest.mark.slow
@pytest.mark.device
def test_a_trace_names_the_device_it_was_recorded_on(builder: ScenarioBuilder, tmp_path: Path, here: list) -> None:
    """Recorded with ``--device UUIDPREFIX`` (the dashed, upper-case form too): the trace's fingerprint
    holds the device's index, deviceUUID and driverUUID, and ``vkcap info`` prints them; a trace
    recorded before these keys existed still reads (the stored golden trace, unchanged)."""
    uuid = here[0].device_uuid
    dashed = f"{uuid[:8]}-{uuid[8:12]}".upper()
    trace = record(builder, tmp_path, 1, "one")  # the default device
    again = tmp_path / "again.vkt"
    scenario = builder.root.parent / "scenario-one" / "scenario.json"
    proc = vkcap("record", scenario, "-o", again, "--device", dashed, "--output", tmp_path / "out2")
    assert proc.returncode == 0, proc.stderr
    for t in (trace, again):
        fp = json.loads(vkcap("info", t, "--json").stdout)["fingerprint"]
        assert (fp["device_index"], fp["device_uuid"], fp["driver_uuid"]) == (0, uuid, here[0].driver_uuid)
    shown = vkcap("info", again)
    assert shown.returncode == 0 and f"deviceUUID {uuid}" in shown.stdout and "device #0" in shown.stdout
    replayed = vkcap("replay", again, "--device", uuid[:6])
    assert replayed.returncode == 0, replayed.stderr
    assert f"replayed on {here[0].name} [{uuid[:8]}]: all within tolerance" in replayed.stderr
    old = Path(__file__).parent / "data" / "depth_storage" / "recorded_on_h100.vkt"
    before = old.read_bytes()
    info = vkcap("info", old, "--json")
    assert info.returncode == 0 and "device_uuid" not in json.loads(info.stdout)["fingerprint"]
    assert "deviceUUID" not in vkcap("info", old).stdout and old.read_bytes() == before


@pytest.mark.slow
@pytest.mark.device
def test_an_unknown_uuid_prefix_is_bad_input(builder: ScenarioBuilder, tmp_path: Path, here: list) -> None:
    """``--device`` with a UUID prefix no device has: one line, exit 2, listing the devices by name and
    short UUID; no trace is written."""
    missing = "f" * 8 if not here[0].device_uuid.startswith("f") else "0" * 8
    trace = record(builder, tmp_path, 1, "one")
    scenario = builder.root.parent / "scenario-one" / "scenario.json"
    proc = vkcap("record", scenario, "-o", tmp_path / "t.vkt", "--device", missing, "--output", tmp_path / "o")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert f"no device matches --device '{missing}' (devices: 0: {here[0].name} [{here[0].short_uuid}]" in proc.stderr
    assert not (tmp_path / "t.vkt").exists() and trace.exists()


@pytest.mark.device
def test_choose_by_uuid_prefix(here: list) -> None:
    """Index first, then UUID prefix (at least 4 hex digits, dashes ignored, any case), then name."""
    d = here[0]
    assert choose_device(here, d.device_uuid[:4]).device_uuid == d.device_uuid
    assert choose_device(here, d.device_uuid.upper()).device_uuid == d.device_uuid
    assert choose_device(here, "0") is here[0]
    with pytest.raises(UsageError, match=r"no device matches --device 'zz' \(devices: 0: .* \[[0-9a-f]{8}\]"):
        choose_device(here, "zz")


@pytest.mark.slow
@pytest.mark.device
@settings(max_examples=200, deadline=None)
@given(uuids=st.lists(st.text("0123456789abcdef", min_size=32, max_size=32), min_size=1, max_size=4),
       prefix=st.text(string.hexdigits + "-xyz \0é²٣", max_size=40) | st.text("0123456789", min_size=4300, max_size=5000))
def test_generated_uuid_prefixes(here: list, uuids: list[str], prefix: str) -> None:
    """Generated devices' UUIDs and selectors (hex of any case and length, dashes, other characters):
    a selector picks the devices whose UUID starts with its hex digits (4 to 32 of them, nothing
    else), and choose_device either picks one of the devices or says UsageError, never another error."""
    devices = [replace(here[0], index=i, name=f"gpu{i}", device_uuid=u) for i, u in enumerate(uuids)]
    digits = prefix.replace("-", "").lower()
    expect = [d for d in devices if 4 <= len(digits) <= 32 and all(c in string.hexdigits.lower() for c in digits)
              and d.device_uuid.startswith(digits)]
    assert uuid_matches(devices, prefix) == expect
    try:
        chosen = choose_device(devices, prefix)
    except UsageError as exc:
        assert "\n" not in str(exc)
    else:
        assert chosen in devices


def test_labels_tell_identical_gpus_apart() -> None:
    """Two GPUs of one name: told apart by the short UUID; of one name and UUID (one driver listed
    twice): by their index too. A result without a UUID (an older vkcap's) is named as before."""
    a = TraceResult("t.vkt", "NVIDIA H200", "pass", "identical", "pass", device_uuid="a" * 32, device_index=0)
    b = replace(a, device_uuid="b" * 32, device_index=1)
    c = replace(a, device_uuid="a" * 32, device_index=1)
    old = TraceResult("t.vkt", "NVIDIA H200", "pass", "identical", "pass")
    assert set(device_labels([a, b]).values()) == {"NVIDIA H200 [aaaaaaaa]", "NVIDIA H200 [bbbbbbbb]"}
    assert set(device_labels([a, c]).values()) == {"NVIDIA H200 [aaaaaaaa] #0", "NVIDIA H200 [aaaaaaaa] #1"}
    assert device_labels([old]) == {old.device_key: "NVIDIA H200"}


@pytest.mark.slow
@pytest.mark.parametrize("field, value, message", [
    ("device_uuid", "../../etc/passwd", "device_uuid: must be at most 32 hex digits"),
    ("device_uuid", "A" * 33, "device_uuid: must be at most 32 hex digits"),
    ("device_uuid", 7, "device_uuid: must be a string"),
    ("device_index", -1, "device_index: "),
    ("device_index", 1e300, "device_index: "),
    ("device_index", "0", "device_index: "),
])
def test_a_forged_result_identity_is_bad_input(tmp_path: Path, field: str, value: object, message: str) -> None:
    """``suite merge`` of a result file whose device_uuid or device_index is not one vkcap writes:
    one line naming the file and the key, exit 2; a good one merges, the UUID in the table and JSON."""
    folder = tmp_path / "results"
    folder.mkdir()
    good = TraceResult("t.vkt", "gpu", "pass", "identical", "pass", device_uuid="ab" * 16, device_index=3)
    write_results(folder, [good])
    (path,) = folder.glob("*.json")
    merged = vkcap("suite", "merge", folder, "--json", tmp_path / "m.json")
    assert merged.returncode == 0, merged.stderr
    assert "gpu [abababab]" in merged.stdout
    (row,) = json.loads((tmp_path / "m.json").read_text())["results"]
    assert (row["device_uuid"], row["device_index"]) == ("ab" * 16, 3)
    data = json.loads(path.read_text())
    data[field] = value
    path.write_text(json.dumps(data))
    proc = vkcap("suite", "merge", folder)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert f"{path}: {message}" in proc.stderr


def test_a_replay_page_names_the_device_by_uuid() -> None:
    """A replay page's fingerprint rows: the device's name and short UUID; a trace without one (older),
    or with one that is not text, names it as before or as the text of what it holds (escaped by the
    template, as every string is)."""
    assert _fingerprint_row("live", {"device_name": "gpu", "device_uuid": "ab" * 16})["device"] == "gpu [abababab]"
    assert _fingerprint_row("recorded", {"device_name": "gpu"})["device"] == "gpu"
    assert _fingerprint_row("recorded", {"device_name": "gpu", "device_uuid": ["<b>"]})["device"] == "gpu [['<b>']]"
