"""``--validate``: the Khronos validation layer under run, record, replay and bisect; a validation error
is one line naming its VUID and the scenario command it came from (exit 1); a missing layer is one
line (exit 2)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import vulkan as vk

from tests.builders import ADD_FLOAT, ScenarioBuilder, load_output, vkcap
from vkcap.cli import main
from vkcore.device import validation
from vkcore.exec.session import Session

NO_ENVIRONMENT = {validation.ENV: "", validation.LOG_ENV: ""}  # only the flag turns validation on


def add_scenario(b: ScenarioBuilder, frames: int = 2) -> Path:
    b.shader("add", ADD_FLOAT)
    b.buffer("a", 16, np.arange(4, dtype=np.float32)).buffer("b", 16, np.ones(4, dtype=np.float32))
    b.buffer("c", 16, dst="c.npy")
    for k in range(frames):
        b.dispatch("add", [(0, 0, "a"), (0, 1, "b"), (0, 2, "c")], [4, 1, 1]).boundary(["c"], k)
    return b.save()


@pytest.mark.slow
@pytest.mark.device
def test_every_command_that_executes_runs_clean_under_the_layer(builder: ScenarioBuilder, tmp_path: Path) -> None:
    scenario = add_scenario(builder)
    trace = tmp_path / "t.vkt"
    for argv in (["run", scenario, "--output", tmp_path], ["record", scenario, "-o", trace, "--output", tmp_path],
                 ["replay", trace], ["bisect", trace]):
        proc = vkcap(*argv, "--validate", env=NO_ENVIRONMENT)
        assert proc.returncode == 0, (argv[0], proc.stderr)
        assert "validation" not in proc.stderr, proc.stderr
    np.testing.assert_array_equal(load_output(tmp_path / "c.npy", np.float32), np.arange(4) + 1)


@pytest.mark.device
@pytest.mark.invalid_api_use
def test_a_validation_error_is_one_line_with_its_vuid_and_command(builder: ScenarioBuilder, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A session that makes one invalid call (a zero-sized buffer) while preparing commands[0]: the
    command fails with exit 1 and the layer's rule, attributed to the command."""
    original = Session._create_query_pool

    def invalid_call(self: Session) -> None:
        with validation.at("commands[0].dispatch_compute"):
            handle = vk.vkCreateBuffer(self.ctx.device, vk.VkBufferCreateInfo(size=0, usage=vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT), None)
        vk.vkDestroyBuffer(self.ctx.device, handle, None)
        original(self)

    monkeypatch.setattr(Session, "_create_query_pool", invalid_call)
    code = main(["run", str(add_scenario(builder)), "--output", str(tmp_path), "--validate"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert lines[-1].startswith(
        "vkcap: error: validation error VUID-VkBufferCreateInfo-size-00912 at commands[0].dispatch_compute: "
        "vkCreateBuffer: parameter pCreateInfo->size (= 0) is not greater than 0 The Vulkan spec states: size must be "
        "greater than 0"), lines
    assert not (tmp_path / "c.npy").exists()  # nothing written: the session never ran


def test_without_the_layer_installed(builder: ScenarioBuilder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(validation, "MANIFEST_FOLDERS", ())
    monkeypatch.delenv("VK_LAYER_PATH", raising=False)
    monkeypatch.setenv("XDG_DATA_DIRS", str(tmp_path / "nothing"))
    code = main(["run", str(add_scenario(builder)), "--output", str(tmp_path), "--validate"])
    assert (code, capsys.readouterr().err.strip().splitlines()[-1]) == (2, (
        "vkcap: error: --validate needs the Khronos validation layer (VK_LAYER_KHRONOS_validation), which is not "
        "installed (apt-get install vulkan-validationlayers)"))


def test_messages_the_layer_cannot_judge_are_not_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The layer Debian ships predates VK_ARM_tensors: its complaints about their enum values are dropped,
    any other message is kept with the place it came from."""
    monkeypatch.delenv(validation.LOG_ENV)  # these messages are made up: not the test run's to count
    checker = validation.Validation(strict=True)

    class Data:
        def __init__(self, vuid: str, text: str) -> None:
            self.pMessageIdName = vk.ffi.new("char[]", vuid.encode())
            self.pMessage = vk.ffi.new("char[]", text.encode())

    def message(vuid: str, text: str) -> Any:
        return checker._on_message(validation.SEVERITY_ERROR, 2, Data(vuid, text), None)

    message("VUID-VkFormatProperties2-pNext-pNext", "chain includes a structure with unknown VkStructureType (1000460005)")
    with checker.at("commands[2].dispatch_compute"):
        message("VUID-X", "Validation Error: [ VUID-X ] Object 0: handle = 0x1 | MessageID = 0x2 | the rule's words")
    assert [m.line() for m in checker.messages] == ["validation error VUID-X at commands[2].dispatch_compute: the rule's words"]
    with pytest.raises(validation.ValidationFailed) as err:
        checker.check()
    assert err.value.exit_code == 1
    checker.check()  # reported once


def test_warnings_are_logged_once_and_fail_only_when_strict(monkeypatch: pytest.MonkeyPatch,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv(validation.LOG_ENV)  # made-up messages: not the test run's to count

    class Data:
        pMessageIdName = vk.ffi.new("char[]", b"VUID-W")
        pMessage = vk.ffi.new("char[]", b"a warning")

    lenient, strict = validation.Validation(strict=False), validation.Validation(strict=True)
    for checker in (lenient, strict):
        checker._on_message(validation.SEVERITY_WARNING, 2, Data(), None)
        checker._on_message(validation.SEVERITY_WARNING, 2, Data(), None)
    lenient.check()
    assert [r.getMessage() for r in caplog.records] == ["validation warning VUID-W: a warning"]
    with pytest.raises(validation.ValidationFailed, match=r"^validation warning VUID-W: a warning \(1 more"):
        strict.check()
