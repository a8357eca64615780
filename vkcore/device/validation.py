"""The Khronos validation layer under vkcap: ``--validate``, and ``VKCAP_VALIDATE`` for whole test runs.

A driver given invalid API usage may crash or compute garbage; the validation layer names the rule
broken (its VUID). When validation is on, every Vulkan instance vkcap creates loads
``VK_LAYER_KHRONOS_validation`` with a ``VK_EXT_debug_utils`` messenger whose callback records each
message of the failing severities with the scenario place vkcap was working on (:meth:`Validation.at`).
The callback cannot raise through the driver, so the executor asks :meth:`Validation.check` at safe
points (after a session is built, after each frame); the command line checks once more before it
exits. The first failing message becomes one error line (exit 1): its VUID, the place, its text.

- ``--validate`` or ``VKCAP_VALIDATE=1``: validation errors fail.
- ``VKCAP_VALIDATE=strict``: errors and warnings fail (what the test suite runs under).
- ``VKCAP_VALIDATION_LOG=FILE``: every failing message is also appended to FILE as one line, from
  every process (isolated children included), so a test runner can fail a test on any of them.

The loader finds the layer through its standard manifest folders; where ``VK_LAYER_PATH`` is set
(ARM's emulation layers set it), that hides them, so the folder holding the layer's manifest is
appended to it. It sits last, between the emulation layers and the driver: above them, the layer
Debian ships (1.3.239, older than VK_ARM_tensors) crashes on their structures. So it judges what
reaches the driver, vkcap's calls and the emulation layers' own; of the latter, those in
:data:`EMULATION_LAYERS_OWN` are not counted against a scenario (vkcap checks the same rule for the
scenario's own values before any Vulkan call).
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from ..errors import DeviceError, UnsupportedDeviceFeature

log = logging.getLogger("vkcap.validation")

LAYER = "VK_LAYER_KHRONOS_validation"
MANIFEST = "VkLayer_khronos_validation.json"
DEBUG_UTILS = "VK_EXT_debug_utils"
ENV = "VKCAP_VALIDATE"
LOG_ENV = "VKCAP_VALIDATION_LOG"
SEVERITY_WARNING = 0x100  # VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT
SEVERITY_ERROR = 0x1000
TYPES = 0x2  # validation only: not the loader's general messages, not performance advice
# The layer Debian ships (1.3.239) predates VK_ARM_tensors and VK_ARM_data_graph: it calls their
# structures, enum values, usage bits and SPIR-V capabilities unknown. Those messages judge the
# layer's age, not vkcap's use of the API. Data: (what the message says, why it is not ours).
LAYER_PREDATES: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(p), why) for p, why in (
    (r"\b1000(460|507|631)\d\d\d\b", "an enum value of VK_ARM_tensors (1000460000 + n), VK_ARM_data_graph (1000507000 + n) or "
                                    "VK_ARM_data_graph_optical_flow (1000631000 + n)"),
    (r"\bVK_ARM_(tensors|data_graph)", "the ARM extensions by name (VK_ARM_data_graph_optical_flow too)"),
    (r"capability operand: 41(7[4-9]|8\d|9[01])\b", "SPIR-V capabilities TensorsARM (4174) .. GraphARM (4191)"),
    (r"not recognized members of VkImageUsageFlagBits", "VK_IMAGE_USAGE_TENSOR_ALIASING_BIT_ARM, vkcap's only usage "
                                                        "bit beyond the layer's"),
))
# What ARM's emulation layers do themselves on lavapipe (their rewritten tensor shaders push 144 bytes of
# constants; lavapipe allows 128): (VUID, why vkcap is not the cause).
EMULATION_LAYERS_OWN: dict[str, str] = {
    "VUID-VkPushConstantRange-size-00298": "vkcap refuses a scenario's push_constants_size beyond the limit itself",
    "VUID-vkCmdPushConstants-size-00371": "vkcap refuses a scenario's push_constants_size beyond the limit itself",
}
MANIFEST_FOLDERS = ("/usr/local/share/vulkan/explicit_layer.d", "/usr/share/vulkan/explicit_layer.d",
                    "/etc/vulkan/explicit_layer.d")


class ValidationFailed(DeviceError):
    """The validation layer reported an error (or, strict, a warning): invalid use of the API."""


@dataclass(frozen=True)
class Message:
    severity: str  # "error" or "warning"
    vuid: str
    text: str
    place: str  # what vkcap was doing: a scenario JSON path, or "" before any

    def line(self) -> str:
        where = f" at {self.place}" if self.place else ""
        return f"validation {self.severity} {self.vuid or '(no VUID)'}{where}: {_short(self.text)}"


def _short(text: str) -> str:
    """The layer's message without its object dump: one line, the rule's own words."""
    text = " ".join(text.split())
    if "| MessageID" in text:  # "Validation Error: [ VUID ] Object 0: ... | MessageID = 0x.. | the text"
        text = text.split("| MessageID", 1)[1].split("|", 1)[-1].strip()
    return text if len(text) <= 600 else text[:597] + "..."


class Validation:
    """Messages of one process's validation layer; see the module notes."""

    def __init__(self, strict: bool) -> None:
        self.strict = strict
        self.messages: list[Message] = []
        self.reported = 0
        self.place = ""
        self.below_emulation = False  # an instance of this process loads ARM's emulation layers above it
        self._warned: set[str] = set()
        self._lock = threading.Lock()
        self._messengers: dict[Any, Any] = {}
        self._callback = self._on_message  # bound once: the create info keeps a pointer to it

    @property
    def severities(self) -> int:
        return SEVERITY_ERROR | (SEVERITY_WARNING if self.strict else 0)

    def _on_message(self, severity: int, types: int, data: Any, user: Any) -> int:
        # lazy: vkcap --help imports this module, not vulkan
        import vulkan as vk

        if not severity & (SEVERITY_ERROR | SEVERITY_WARNING):
            return 0
        vuid = vk.ffi.string(data.pMessageIdName).decode("utf8", "replace") if data.pMessageIdName else ""
        text = vk.ffi.string(data.pMessage).decode("utf8", "replace") if data.pMessage else ""
        if any(pattern.search(text) for pattern, _ in LAYER_PREDATES):
            return 0
        if self.below_emulation and vuid in EMULATION_LAYERS_OWN:
            return 0
        message = Message("error" if severity & SEVERITY_ERROR else "warning", vuid, text, self.place)
        if not severity & self.severities:  # a warning, not failing: into the log, once per rule
            if vuid not in self._warned:
                self._warned.add(vuid)
                log.warning("%s", message.line())
            return 0
        with self._lock:
            self.messages.append(message)
            log_file = os.environ.get(LOG_ENV)
            if log_file:
                with contextlib.suppress(OSError), open(log_file, "a") as f:
                    f.write(f"pid {os.getpid()}: {message.line()}\n")
        return 0  # never abort the call: the driver's own behaviour is what is recorded

    def create_info(self) -> Any:
        # lazy: vkcap --help imports this module, not vulkan
        import vulkan as vk

        return vk.VkDebugUtilsMessengerCreateInfoEXT(messageSeverity=SEVERITY_WARNING | SEVERITY_ERROR,
                                                     messageType=TYPES, pfnUserCallback=self._callback)

    def attach(self, instance: Any) -> None:
        """Create the messenger of ``instance`` (which was created with :meth:`instance_request`)."""
        # lazy: vkcap --help imports this module, not vulkan
        import vulkan as vk

        create = vk.vkGetInstanceProcAddr(instance, "vkCreateDebugUtilsMessengerEXT")
        self._messengers[instance] = create(instance, self.create_info(), None)

    def detach(self, instance: Any) -> None:
        """Destroy the messenger of ``instance``; call before ``vkDestroyInstance``."""
        # lazy: vkcap --help imports this module, not vulkan
        import vulkan as vk

        messenger = self._messengers.pop(instance, None)
        if messenger is not None:
            destroy = vk.vkGetInstanceProcAddr(instance, "vkDestroyDebugUtilsMessengerEXT")
            destroy(instance, messenger, None)

    @contextlib.contextmanager
    def at(self, place: str) -> Iterator[None]:
        """Messages raised inside are attributed to ``place`` (a scenario JSON path)."""
        before, self.place = self.place, place
        try:
            yield
        finally:
            self.place = before

    def check(self) -> None:
        """Raise :class:`ValidationFailed` for the first failing message not yet reported."""
        with self._lock:
            new = self.messages[self.reported:]
            self.reported = len(self.messages)
        if not new:
            return
        for m in new:
            log.debug("%s", m.line())
        more = f" ({len(new) - 1} more: --log-level debug lists them)" if len(new) > 1 else ""
        raise ValidationFailed(new[0].line() + more)


_current: Validation | None = None


def enable(strict: bool = False) -> Validation:
    """Turn validation on for every Vulkan instance this process creates from now on."""
    global _current
    if _current is None:
        _current = Validation(strict)
    _current.strict = _current.strict or strict
    return _current


def current() -> Validation | None:
    """The process's validation, when on (``--validate`` or ``VKCAP_VALIDATE``), else ``None``."""
    mode = os.environ.get(ENV, "").strip().lower()
    if _current is None and mode not in ("", "0", "off", "no"):
        enable(strict=mode == "strict")
    return _current


def check() -> None:
    """:meth:`Validation.check` of the process's validation, when on."""
    v = current()
    if v is not None:
        v.check()


def at(place: str) -> contextlib.AbstractContextManager[None]:
    """:meth:`Validation.at` when validation is on, else nothing."""
    v = current()
    return v.at(place) if v is not None else contextlib.nullcontext()


def layer_folder() -> Path:
    """The folder of the layer's manifest. Raises :class:`UnsupportedDeviceFeature` (exit 2) when the
    layer is not installed."""
    folders = [p for p in os.environ.get("VK_LAYER_PATH", "").split(os.pathsep) if p]
    data_dirs = [p for p in os.environ.get("XDG_DATA_DIRS", "").split(os.pathsep) if p]
    candidates = [*folders, *MANIFEST_FOLDERS, *(f"{d}/vulkan/explicit_layer.d" for d in data_dirs)]
    for folder in candidates:
        if (Path(folder) / MANIFEST).is_file():
            return Path(folder)
    raise UnsupportedDeviceFeature(
        f"--validate needs the Khronos validation layer ({LAYER}), which is not installed "
        "(apt-get install vulkan-validationlayers)"
    )


def instance_request(layers: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Layers and instance extensions to create an instance with, validation added, and make the
    loader able to find the layer (see the module notes)."""
    folder = layer_folder()
    path = [p for p in os.environ.get("VK_LAYER_PATH", "").split(os.pathsep) if p]
    if path and str(folder) not in path:
        os.environ["VK_LAYER_PATH"] = os.pathsep.join([*path, str(folder)])
    if layers:
        checker = current()
        if checker is not None:
            checker.below_emulation = True
    return (*(name for name in layers if name != LAYER), LAYER), (DEBUG_UTILS,)
