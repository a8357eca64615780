"""The worker protocol (:mod:`replay.worker_protocol`): every message survives a round trip, and any line
that is not a message expected there (not JSON, another type, a field of the wrong type or unknown, a
huge number, deep nesting) is one :class:`ProtocolError` line, never a traceback; a replay's options
travel as their own dict (:meth:`replay.options.ReplayOptions.to_dict`) and read back equal."""
from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replay.options import ReplayOptions
from replay.results import Tolerance
from replay.tolerances import TolerancePolicy
from replay.worker import serve
from replay.worker_protocol import (MESSAGES, CaptureRequest, Captured, Done, Failed, Hello, Probed, ProbeRequest,
                                    ProtocolError, ReplayRequest, decode, encode)

FAST = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))
ALL = tuple(MESSAGES.values())
TEXT = st.text(max_size=20)
NAMES = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)
FINITE = st.floats(allow_nan=False, allow_infinity=False, width=64)


def test_every_message_type_survives_a_round_trip() -> None:
    options = ReplayOptions(Path("t.vkt"), first=1, last=3, device="0").to_dict()
    messages = [Hello(), Hello("llvmpipe", "0.0.1", "ab" * 16, 0, "0000:00:02.0"), Hello(error="no device"),
                ReplayRequest(options), ReplayRequest(options, "p.html", ["vkcap", "replay", "t.vkt", "--ulp", "4"]),
                Done({"outcome": "identical", "frames": 2, "first_divergence": None, "resources": []}),
                Failed("t.vkt: not a trace"), Failed("frame 2 did not finish", 1),
                ReplayRequest(options, report=True, auto_tolerance=True), ProbeRequest(options, 4, 7, 3),
                Probed([]), Probed([{"seq": 4, "diverged": False, "comparisons": []}]),
                CaptureRequest("t.vkt", 2, "probe.vkt"), CaptureRequest("t.vkt", 2, "probe.vkt", "0", True),
                Captured(), Captured(found=False)]
    assert {type(m) for m in messages} == set(ALL)
    for message in messages:
        line = encode(message)
        assert line.endswith("\n") and line.count("\n") == 1
        assert json.loads(line)["type"] == message.type and next(iter(json.loads(line))) == "type"
        assert decode(line, *ALL) == message
        assert decode(line, type(message)) == message


@FAST
@given(device=TEXT, driver=TEXT, index=st.none() | st.integers(-2**63, 2**63), error=TEXT,
       result=st.dictionaries(TEXT, st.none() | st.booleans() | st.integers() | TEXT | FINITE, max_size=5),
       exit_code=st.integers(0, 255))
def test_messages_of_any_values_survive_a_round_trip(device: str, driver: str, index: int | None, error: str,
                                                     result: dict[str, Any], exit_code: int) -> None:
    frame = -1 if index is None else index
    for message in (Hello(device, driver, device, index, driver, error), Done(result), Failed(error, exit_code),
                    ProbeRequest(result, frame, exit_code, frame), Probed([result, result]),
                    CaptureRequest(device, frame, driver, error, bool(exit_code % 2)), Captured(bool(exit_code % 2)),
                    ReplayRequest(result, device, [driver, error], bool(exit_code % 2), bool(exit_code % 3))):
        assert decode(encode(message), type(message)) == message


HOSTILE = [
    ("not json at all\n", "is not JSON"),
    ("", "is not JSON"),
    ("[1, 2]\n", "is not a JSON object"),
    ('"hello"\n', "is not a JSON object"),
    ('{"device": "D"}\n', "is not a hello message"),
    ('{"type": "nonsense"}\n', "is not a hello message"),
    ('{"type": ["hello"]}\n', "is not a hello message"),
    ('{"type": "done", "result": {}}\n', "is not a hello message"),
    ('{"type": "hello", "device": 3}\n', "'device' is not a str"),
    ('{"type": "hello", "device_index": "0"}\n', "'device_index' is not a int | None"),
    ('{"type": "hello", "device_index": true}\n', "'device_index' is not a int | None"),
    ('{"type": "hello", "device_index": 1.5}\n', "'device_index' is not a int | None"),
    ('{"type": "hello", "device_index": 1e999}\n', "'device_index' is not a int | None"),
    ('{"type": "hello", "device_index": ' + "9" * 5000 + "}\n", "is not JSON"),
    ('{"type": "hello", "shell": "rm -rf /"}\n', "unknown field 'shell'"),
    ('{"type": "hello", "device": "D", "pid": 12}\n', "unknown field 'pid'"),
    ("[" * 100_000 + "]" * 100_000 + "\n", "is not"),
]


@pytest.mark.parametrize("line, words", HOSTILE, ids=range(len(HOSTILE)))
def test_a_hostile_line_is_one_protocol_error_line(line: str, words: str) -> None:
    with pytest.raises(ProtocolError) as exc:
        decode(line, Hello)
    assert words in str(exc.value) and "\n" not in str(exc.value) and len(str(exc.value)) < 200


@pytest.mark.parametrize("line, words", [
    ('{"type": "done"}\n', "lacks 'result'"),
    ('{"type": "done", "result": [1]}\n', "'result' is not a dict"),
    ('{"type": "failed", "error": "x", "exit_code": "1"}\n', "'exit_code' is not a int"),
    ('{"type": "failed", "error": null}\n', "'error' is not a str"),
    ('{"type": "replay", "options": {}, "command_line": "vkcap replay"}\n', "is not a done or failed message"),
    ('{"type": "probed", "frames": []}\n', "is not a done or failed message"),
])
def test_an_answer_of_the_wrong_shape_is_refused(line: str, words: str) -> None:
    with pytest.raises(ProtocolError) as exc:
        decode(line, Done, Failed)
    assert words in str(exc.value)


@pytest.mark.parametrize("line, words", [
    ('{"type": "probe", "options": {}, "first": 0, "last": 2}\n', "lacks 'start'"),
    ('{"type": "probe", "options": {}, "first": "0", "last": 2, "start": -1}\n', "'first' is not a int"),
    ('{"type": "probe", "options": {}, "first": true, "last": 2, "start": -1}\n', "'first' is not a int"),
    ('{"type": "probe", "options": [], "first": 0, "last": 2, "start": -1}\n', "'options' is not a dict"),
    ('{"type": "probe", "options": {}, "first": 0, "last": 2, "start": -1, "argv": ["--isolate"]}\n',
     "unknown field 'argv'"),
    ('{"type": "probed", "frames": {"seq": 0}}\n', "'frames' is not a list"),
    ('{"type": "probed", "frames": [{"seq": 0}, 1]}\n', "'frames' is not a list"),
    ('{"type": "probed", "frames": ["0 3 -1"]}\n', "'frames' is not a list"),
    ('{"type": "replay", "options": {}, "report": 1}\n', "'report' is not a bool"),
    ('{"type": "replay", "options": {}, "auto_tolerance": "yes"}\n', "'auto_tolerance' is not a bool"),
    ('{"type": "replay", "options": {}, "command_line": ["vkcap", 1]}\n', "'command_line' is not a list"),
    ('{"type": "capture", "trace": "t.vkt", "seq": 2}\n', "lacks 'out'"),
    ('{"type": "capture", "trace": "t.vkt", "seq": 2.0, "out": "o"}\n', "'seq' is not a int"),
    ('{"type": "capture", "trace": "t.vkt", "seq": 2, "out": "o", "recording_device": 0}\n',
     "'recording_device' is not a bool"),
    ('{"type": "captured", "found": "false"}\n', "'found' is not a bool"),
    ("0 3 -1\n", "is not JSON"),
])
def test_a_probe_or_capture_line_of_the_wrong_shape_is_refused(line: str, words: str) -> None:
    """The old probe lines (``FIRST LAST START``) and any message of the wrong shape are refused, in one
    line; a bool is never taken for a number nor a number for a bool."""
    with pytest.raises(ProtocolError) as exc:
        decode(line, ReplayRequest, ProbeRequest, Probed, CaptureRequest, Captured)
    assert words in str(exc.value) and "\n" not in str(exc.value)


def test_the_isolated_child_answers_failed_to_a_line_that_is_no_request_and_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """The child of an isolated replay or probe (:mod:`vkcap.replay_child`) answers each request on its
    answer pipe and ends at the first :class:`Failed` with its exit code (its device may be lost)."""
    from vkcap import replay_child

    monkeypatch.setattr(replay_child, "answer", lambda request, probes: Probed([{"seq": request.first}]))
    monkeypatch.setattr("vkcap.vulkan_start.start_vulkan_early", lambda *args, **kwargs: None)
    options = ReplayOptions(Path("t.vkt")).to_dict()
    out = io.StringIO()
    requests = encode(ProbeRequest(options, 3, 3, 2)) + "3 3 2\n" + encode(ProbeRequest(options, 5, 5, 4))
    assert replay_child.serve(io.StringIO(requests), out) == 1
    answers = [decode(line, Probed, Failed) for line in out.getvalue().splitlines()]
    assert answers[0] == Probed([{"seq": 3}]) and len(answers) == 2
    assert isinstance(answers[1], Failed) and "is not JSON" in answers[1].error and answers[1].exit_code == 1


@FAST
@given(line=st.text(max_size=200) | st.builds(json.dumps, st.recursive(
    st.none() | st.booleans() | st.integers() | FINITE | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["type", "device", "result", "error",
                                                                                  "x"]) | TEXT, inner, max_size=4))))
def test_any_line_is_a_message_or_a_protocol_error(line: str) -> None:
    try:
        decode(line, *ALL)
    except ProtocolError as exc:
        assert "\n" not in str(exc)


def test_a_worker_answers_a_line_that_is_no_request_with_failed_and_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    from replay import worker

    monkeypatch.setattr(worker, "device_hello", lambda selector: Hello(device="D"))
    monkeypatch.setattr(worker, "_replay", lambda options, request, contexts: {"outcome": "identical"})
    good = encode(ReplayRequest(ReplayOptions(Path("t.vkt")).to_dict()))
    out = io.StringIO()
    assert serve(None, io.StringIO("garbage\n" + encode(Done({})) + encode(ReplayRequest({"trace": "t"})) + good), out) == 0
    hello, *answers = [decode(line, Hello, Done, Failed) for line in out.getvalue().splitlines()]
    assert hello == Hello(device="D")
    assert [type(a) for a in answers] == [Failed, Failed, Failed, Done]
    assert "is not JSON" in answers[0].error and "is not a replay message" in answers[1].error
    assert answers[2].error.startswith("a replay request's options do not read back: KeyError")


UIDS = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=8)
TOLERANCES = st.builds(Tolerance, FINITE, FINITE, st.integers(0, 2**31))
POLICIES = st.builds(
    TolerancePolicy, default=TOLERANCES,
    per_resource=st.dictionaries(UIDS, TOLERANCES | st.dictionaries(st.sampled_from(["atol", "rtol", "ulp"]),
                                                                     FINITE, max_size=3), max_size=3),
    dtypes=st.dictionaries(UIDS, st.sampled_from(["float32", "int8", "float16"]), max_size=3),
    default_dtype=st.sampled_from(["bytes", "float32"]), top=st.integers(0, 1000),
    preset=st.sampled_from(["", "torch", "strict"]),
    default_keys=st.dictionaries(st.sampled_from(["atol", "rtol", "ulp"]), FINITE, max_size=3))
PATHS = st.builds(Path, NAMES)
FRAMES = st.none() | st.integers(0, 2**40)
OPTIONS = st.builds(
    ReplayOptions, trace=PATHS, first=FRAMES, last=FRAMES, device=st.none() | NAMES, icd=st.none() | PATHS,
    emulation=st.sampled_from(["auto", "off"]), replace_shaders=st.lists(st.tuples(UIDS, PATHS), max_size=3).map(tuple),
    dtypes=st.lists(st.tuples(UIDS, NAMES), max_size=3).map(tuple), tolerances=POLICIES,
    frame_timeout_s=st.none() | st.floats(0.001, 1e6), dispatch_level=st.booleans(),
    shapes=st.lists(st.tuples(UIDS, st.lists(st.integers(1, 4096), min_size=1, max_size=4).map(tuple)),
                    max_size=3).map(tuple),
    heatmap_dir=st.none() | PATHS, value_maps=st.booleans(), progress_file=st.none() | PATHS,
    stop_at_first_divergence=st.booleans())


@pytest.mark.slow
@FAST
@given(options=OPTIONS)
def test_replay_options_read_back_equal_through_a_request_line(options: ReplayOptions) -> None:
    assert ReplayOptions.from_dict(options.to_dict()) == options
    request = decode(encode(ReplayRequest(options.to_dict(), "p.html", ["vkcap"])), ReplayRequest)
    assert ReplayOptions.from_dict(request.options) == options
