"""Vulkan instance and device: discovery, choice, creation, and the device fingerprint.

:class:`VulkanContext` owns one instance, one logical device and one compute queue. It loads ARM's
emulation layers only when the scenario needs tensors or graphs and the chosen device lacks them
natively (the layers interpose on every call and rewrite every shader, so a buffer-only scenario runs
faster without them); ``emulation="off"`` never loads them, ``emulation="always"`` always does.
"""
from __future__ import annotations

import atexit
import functools
import os
import signal
import threading
from dataclasses import dataclass, field
from typing import Any, Literal

import vulkan as vk

from ..errors import DeviceError, UnsupportedDeviceFeature, UsageError
from . import lifetime, native_support, validation
from .layers import EmulationLayersUnavailable, prepare_emulation_layers

TENSORS_EXT = "VK_ARM_tensors"
GRAPH_EXT = "VK_ARM_data_graph"
OPTICAL_FLOW_EXT = "VK_ARM_data_graph_optical_flow"  # ARM's Graph emulation layer 0.11 has it too
FRAME_BOUNDARY_EXT = "VK_EXT_frame_boundary"
CUSTOM_BORDER_EXT = "VK_EXT_custom_border_color"
PCI_BUS_EXT = "VK_EXT_pci_bus_info"  # optional: where the driver has it, the device's PCI address
API_VERSION = vk.VK_MAKE_VERSION(1, 3, 0)  # the tensor layer crashes in descriptor updates with 1.1

DEVICE_TYPE_NAMES = {
    vk.VK_PHYSICAL_DEVICE_TYPE_OTHER: "other",
    vk.VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: "integrated GPU",
    vk.VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: "discrete GPU",
    vk.VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: "virtual GPU",
    vk.VK_PHYSICAL_DEVICE_TYPE_CPU: "CPU",
}
# Lower is preferred: discrete, then integrated, then virtual, then CPU.
DEVICE_TYPE_RANK = {
    vk.VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: 0,
    vk.VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: 1,
    vk.VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: 2,
    vk.VK_PHYSICAL_DEVICE_TYPE_CPU: 3,
    vk.VK_PHYSICAL_DEVICE_TYPE_OTHER: 4,
}
Support = Literal["native", "emulated", "unavailable"]
EmulationMode = Literal["auto", "off", "always"]


def version_string(v: int) -> str:
    return f"{vk.VK_VERSION_MAJOR(v)}.{vk.VK_VERSION_MINOR(v)}.{vk.VK_VERSION_PATCH(v)}"


def _cstr(raw: Any) -> str:
    return vk.ffi.string(raw).decode("utf8", "replace") if not isinstance(raw, str) else raw


@dataclass(frozen=True)
class DeviceInfo:
    """What ``vkcap devices`` shows and what a trace stores as the device fingerprint."""

    index: int
    name: str
    type: str
    vendor_id: int
    device_id: int
    driver_name: str
    driver_info: str
    driver_version: str
    api_version: str
    pipeline_cache_uuid: str
    extensions: frozenset[str] = field(repr=False)
    tensors: Support = "unavailable"
    graphs: Support = "unavailable"
    optical_flow: Support = "unavailable"
    device_uuid: str = ""  # VkPhysicalDeviceIDProperties, 32 hex digits: tells identical GPUs apart
    driver_uuid: str = ""
    pci_bus: str = ""  # "domain:bus:device.function" (VK_EXT_pci_bus_info), "" where the driver lacks it

    @property
    def short_uuid(self) -> str:
        """The first 8 hex digits of the deviceUUID: what tables show beside the name."""
        return self.device_uuid[:8]

    @property
    def label(self) -> str:
        """``NAME [UUID8]``: the device as reports name it (the name alone where it has no UUID)."""
        return f"{self.name} [{self.short_uuid}]" if self.device_uuid else self.name

    def fingerprint(self) -> dict[str, Any]:
        """The device as a trace and a replay report name it. The identity keys (``device_index``,
        ``device_uuid``, ``driver_uuid``, ``pci_bus``) were added later: a reader of older traces
        finds them absent."""
        return {
            "device_name": self.name,
            "device_type": self.type,
            "vendor_id": self.vendor_id,
            "device_id": self.device_id,
            "driver_name": self.driver_name,
            "driver_info": self.driver_info,
            "driver_version": self.driver_version,
            "api_version": self.api_version,
            "pipeline_cache_uuid": self.pipeline_cache_uuid,
            "device_index": self.index,
            "device_uuid": self.device_uuid,
            "driver_uuid": self.driver_uuid,
            **({"pci_bus": self.pci_bus} if self.pci_bus else {}),
        }


def _driver_version_string(vendor_id: int, v: int) -> str:
    if vendor_id == 0x10DE:  # NVIDIA packs 10.8.8.6 bits
        return f"{(v >> 22) & 0x3FF}.{(v >> 14) & 0xFF}.{(v >> 6) & 0xFF}.{v & 0x3F}"
    return version_string(v)


def _describe(index: int, physical: Any, emulation_available: bool) -> DeviceInfo:
    exts = frozenset(_cstr(e.extensionName) for e in vk.vkEnumerateDeviceExtensionProperties(physical, None))
    pci = None
    if PCI_BUS_EXT in exts:
        pci = vk.VkPhysicalDevicePCIBusInfoPropertiesEXT(sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PCI_BUS_INFO_PROPERTIES_EXT)
    ids = vk.VkPhysicalDeviceIDProperties(sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES,
                                          pNext=pci if pci is not None else vk.ffi.NULL)
    driver = vk.VkPhysicalDeviceDriverProperties(sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES, pNext=ids)
    props2 = vk.VkPhysicalDeviceProperties2(sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, pNext=driver)
    vk.vkGetPhysicalDeviceProperties2(physical, props2)
    p = props2.properties

    def support(ext: str) -> Support:
        if ext in exts:
            return "native"
        return "emulated" if emulation_available else "unavailable"

    return DeviceInfo(
        index=index,
        name=_cstr(p.deviceName),
        type=DEVICE_TYPE_NAMES.get(p.deviceType, "other"),
        vendor_id=p.vendorID,
        device_id=p.deviceID,
        driver_name=_cstr(driver.driverName),
        driver_info=_cstr(driver.driverInfo),
        driver_version=_driver_version_string(p.vendorID, p.driverVersion),
        api_version=version_string(p.apiVersion),
        pipeline_cache_uuid=bytes(p.pipelineCacheUUID).hex(),
        extensions=exts,
        tensors=support(TENSORS_EXT),
        graphs=support(GRAPH_EXT),
        optical_flow=support(OPTICAL_FLOW_EXT),
        device_uuid=bytes(vk.ffi.buffer(ids.deviceUUID)).hex(),
        driver_uuid=bytes(vk.ffi.buffer(ids.driverUUID)).hex(),
        pci_bus=(f"{pci.pciDomain:04x}:{pci.pciBus:02x}:{pci.pciDevice:02x}.{pci.pciFunction:x}"
                 if pci is not None else ""),
    )


# Instances given back, by what they were made with (layers, validation, the loader's environment), to
# be handed out again: NVIDIA's 580 driver refuses the 31st vkCreateInstance of a process (even when
# each was destroyed before), and a long-lived process (tests, suites) opens many contexts.
_idle_instances: dict[tuple[Any, ...], list[Any]] = {}
_instance_keys: dict[Any, tuple[Any, ...]] = {}
_idle_lock = threading.Lock()


@functools.lru_cache(maxsize=1)
def _debug_utils() -> tuple[str, ...]:
    """VK_EXT_debug_utils when the loader offers it (it implements the extension itself)."""
    try:
        names = {e.extensionName for e in vk.vkEnumerateInstanceExtensionProperties(None)}
    except (vk.VkError, OSError):
        return ()
    return ("VK_EXT_debug_utils",) if "VK_EXT_debug_utils" in names else ()


def _create_instance(layers: tuple[str, ...]) -> Any:
    """An instance with ``layers``, and the validation layer when validation is on (see
    :mod:`vkcore.device.validation`): one given back earlier with the same layers and loader environment,
    else a new one. Give it back with :func:`_destroy_instance`."""
    app = vk.VkApplicationInfo(
        pApplicationName="vkcap", applicationVersion=1, pEngineName="vkcap", engineVersion=1, apiVersion=API_VERSION
    )
    checker = validation.current()
    extensions: tuple[str, ...] = _debug_utils()  # for --enable-gpu-debug-markers labels, at no cost otherwise
    if checker is not None:
        layers, requested = validation.instance_request(layers)
        extensions = tuple(dict.fromkeys((*extensions, *requested)))
    key = (tuple(layers), checker is not None, tuple(sorted(_loader_environment().items())))
    with _idle_lock:
        idle = _idle_instances.get(key)
        if idle:
            return idle.pop()
    info = vk.VkInstanceCreateInfo(pNext=checker.create_info() if checker is not None else vk.ffi.NULL,
                                   pApplicationInfo=app, ppEnabledLayerNames=list(layers) or None,
                                   ppEnabledExtensionNames=list(extensions) or None)
    try:
        instance = vk.vkCreateInstance(info, None)
    except vk.VkError as exc:
        raise DeviceError(f"cannot create a Vulkan instance ({type(exc).__name__}); is a Vulkan driver installed?") from None
    except OSError as exc:
        raise DeviceError(f"cannot load the Vulkan loader ({exc}); install libvulkan1") from None
    if checker is not None:
        checker.attach(instance)
    with _idle_lock:
        _instance_keys[instance] = key
    return instance


def _destroy_instance(instance: Any) -> None:
    """Give ``instance`` back (its devices destroyed): the next :func:`_create_instance` with the same
    key takes it; the process's exit destroys what is left."""
    with _idle_lock:
        _idle_instances.setdefault(_instance_keys[instance], []).append(instance)


@atexit.register
def _destroy_idle_instances() -> None:
    _destroy_deferred_devices()
    with _idle_lock:
        idle = [i for instances in _idle_instances.values() for i in instances]
        _idle_instances.clear()
    checker = validation.current()
    for instance in idle:
        if checker is not None:
            checker.detach(instance)
        vk.vkDestroyInstance(instance, None)


def _emulation_available() -> bool:
    try:
        prepare_emulation_layers()
    except EmulationLayersUnavailable:
        return False
    return True


def list_devices(emulation: EmulationMode = "auto") -> list[DeviceInfo]:
    """Every physical device in enumeration order, with native/emulated/unavailable tensor and graph support."""
    instance = _create_instance(())
    try:
        available = emulation != "off" and _emulation_available()
        return [_describe(i, pd, available) for i, pd in enumerate(vk.vkEnumeratePhysicalDevices(instance))]
    finally:
        _destroy_instance(instance)


def choose_device(devices: list[DeviceInfo], selector: str | int | None) -> DeviceInfo:
    """Pick by index, by deviceUUID prefix (hex digits, dashes ignored: ``a1b2c3d4`` or the form
    ``vkcap devices`` prints), or by (case-insensitive substring of) name, tried in that order; by
    default the most capable type. A UUID prefix that several devices share picks the first of them
    (identical UUIDs: the same driver listed twice).

    Raises :class:`DeviceError` when there is no device at all, :class:`UsageError` (bad input) when the
    selector matches none, listing what exists.
    """
    if not devices:
        raise DeviceError("no Vulkan device found (install mesa-vulkan-drivers for a CPU device)")
    if selector is None or selector == "":
        return min(devices, key=lambda d: (_rank_of(d), d.index))
    text = str(selector)
    index = device_index(text)
    if index is not None and index < len(devices):
        return devices[index]
    by_uuid = uuid_matches(devices, text)
    if by_uuid:
        return by_uuid[0]
    matches = [d for d in devices if not text.isdigit() and text.lower() in d.name.lower()]
    if matches:
        return matches[0]
    names = ", ".join(f"{d.index}: {d.label}" for d in devices)
    raise UsageError(f"no device matches --device {_shown_selector(text)} (devices: {names})")  # bad input: exit 2


def device_index(text: str) -> int | None:
    """``text`` as a device index: ASCII digits only (``int`` would take "²" or "٣", and refuse
    thousands of digits with an error of its own), at most 6 of them; None otherwise."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 6 else None


def uuid_matches(devices: list[DeviceInfo], text: str) -> list[DeviceInfo]:
    """The devices whose deviceUUID starts with ``text`` (hex digits, any case, dashes ignored; at
    least 4 digits, so that a short index or word is not taken for one)."""
    digits = text.replace("-", "").lower()
    if len(digits) < 4 or len(digits) > 32 or any(c not in "0123456789abcdef" for c in digits):
        return []
    return [d for d in devices if d.device_uuid and d.device_uuid.startswith(digits)]


def _shown_selector(text: str) -> str:
    shown = repr(text)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def _rank_of(d: DeviceInfo) -> int:
    by_name = {v: k for k, v in DEVICE_TYPE_NAMES.items()}
    return DEVICE_TYPE_RANK.get(by_name.get(d.type, vk.VK_PHYSICAL_DEVICE_TYPE_OTHER), 9)


class signals_deferred:
    """Block SIGINT and SIGTERM while the driver starts: threads it creates inherit the blocked mask
    (so signals always reach the main thread), and a signal that arrives meanwhile is delivered when
    the block is lifted instead of being lost inside the driver's start-up."""

    SIGNALS = {signal.SIGINT, signal.SIGTERM}

    def __enter__(self) -> None:
        self.previous = signal.pthread_sigmask(signal.SIG_BLOCK, self.SIGNALS)

    def __exit__(self, *exc: object) -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, self.previous)


@dataclass
class _OpenDevice:
    """A logical device with one compute queue, and what making it learnt."""

    index: int  # of its physical device
    requested: tuple[str, ...]  # the extensions asked for
    device: Any
    extensions: tuple[str, ...]  # those enabled: the requested ones whose features the device has
    queue_family: int
    timestamp_bits: int
    features: Any
    feature_chain: tuple[Any, ...]  # keeps the structs ``features`` points to alive

    def destroy(self) -> None:
        vk.vkDestroyDevice(self.device, None)


def _queue_family(physical: Any, name: str) -> tuple[int, int]:
    """The compute queue family to use (one that also does graphics, for blits, and timestamps
    when there is one) and its timestamp bits."""
    families = vk.vkGetPhysicalDeviceQueueFamilyProperties(physical)
    best = None
    for i, fam in enumerate(families):
        if fam.queueFlags & vk.VK_QUEUE_COMPUTE_BIT:
            score = (bool(fam.queueFlags & vk.VK_QUEUE_GRAPHICS_BIT), fam.timestampValidBits > 0)
            if best is None or score > best[0]:
                best = (score, i, fam.timestampValidBits)
    if best is None:
        raise DeviceError(f"device '{name}' has no compute queue")
    return best[1], best[2]


# Devices closed while the process ends without destroying them (see lifetime.leave_last_device_to_exit)
_deferred_devices: list[Any] = []
_deferred_lock = threading.Lock()


def _destroy_deferred_devices() -> None:
    with _deferred_lock:
        devices = _deferred_devices[:]
        _deferred_devices.clear()
    for device in devices:
        vk.vkDestroyDevice(device, None)


def _open_device(index: int, physical: Any, name: str, requested: tuple[str, ...], robust: bool = False) -> _OpenDevice:
    """Create the logical device on ``physical`` with the ``requested`` extensions (optional ones whose
    feature the device lacks are dropped) and every core feature shaders may use, robustness off."""
    _destroy_deferred_devices()
    queue_family, timestamp_bits = _queue_family(physical, name)
    extensions = list(requested)
    # Extension feature structs to query and enable, chained after the core ones.
    border = None
    if CUSTOM_BORDER_EXT in extensions:
        border = vk.VkPhysicalDeviceCustomBorderColorFeaturesEXT(
            sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_CUSTOM_BORDER_COLOR_FEATURES_EXT)
    tail = None
    if FRAME_BOUNDARY_EXT in extensions:
        tail = vk.VkPhysicalDeviceFrameBoundaryFeaturesEXT(
            sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FRAME_BOUNDARY_FEATURES_EXT, pNext=border)
    head = tail if tail is not None else border
    f13 = vk.VkPhysicalDeviceVulkan13Features(sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES, pNext=head)
    f12 = vk.VkPhysicalDeviceVulkan12Features(sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES, pNext=f13)
    f11 = vk.VkPhysicalDeviceVulkan11Features(sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES, pNext=f12)
    features = vk.VkPhysicalDeviceFeatures2(sType=vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, pNext=f11)
    vk.vkGetPhysicalDeviceFeatures2(physical, features)
    if not f13.synchronization2:
        raise UnsupportedDeviceFeature(f"device '{name}' lacks synchronization2 (Vulkan 1.3)")
    # Enable what shaders may use; robustness costs speed and is off unless asked for, as in the reference runner.
    features.features.robustBufferAccess = features.features.robustBufferAccess if robust else 0
    f13.robustImageAccess = f13.robustImageAccess if robust else 0
    if tail is not None and not tail.frameBoundary:
        extensions.remove(FRAME_BOUNDARY_EXT)
        f13.pNext = border if border is not None else vk.ffi.NULL
    if border is not None and not border.customBorderColors:
        extensions.remove(CUSTOM_BORDER_EXT)
        if tail is not None and tail.frameBoundary:
            tail.pNext = vk.ffi.NULL
        else:
            f13.pNext = vk.ffi.NULL
    queue_info = vk.VkDeviceQueueCreateInfo(queueFamilyIndex=queue_family, queueCount=1, pQueuePriorities=[1.0])
    info = vk.VkDeviceCreateInfo(
        pNext=features,
        pQueueCreateInfos=[queue_info],
        ppEnabledExtensionNames=extensions or None,
    )
    try:
        device = vk.vkCreateDevice(physical, info, None)
    except vk.VkError as exc:
        raise DeviceError(f"cannot create a device on '{name}' ({type(exc).__name__})") from None
    return _OpenDevice(index, requested, device, tuple(extensions), queue_family, timestamp_bits, features,
                       (f11, f12, f13, tail, border))


def _device_requests(info: DeviceInfo, want_extensions: tuple[str, ...], needed: list[str],
                     disabled: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The extensions to ask ``info``'s device for: frame boundaries and the scenario's optional ones
    where it has them and they are not ``disabled`` (``--disable-extension``), and the tensor/graph ones
    the scenario needs."""
    enable = [e for e in (FRAME_BOUNDARY_EXT, *want_extensions) if e in info.extensions and e not in disabled]
    return tuple(enable + [e for e in needed if e not in enable])


@dataclass
class _Early:
    """What the early start made: the instance (owned by whoever takes it), its physical devices,
    and perhaps the logical device a scenario without optional extensions or tensors would get."""

    instance: Any
    physicals: list[Any]
    opened: _OpenDevice | None = None
    selector: str | None = None  # the --device the logical device was chosen by

    def destroy(self) -> None:
        if self.opened is not None:
            self.opened.destroy()
        _destroy_instance(self.instance)


class _InstanceStart:
    """A plain instance (no layers) and its physical devices, made in a background thread from the
    moment :func:`start_instance_early` is called; see there. On a GPU the thread also opens the
    logical device a plain scenario gets (``vkCreateDevice`` takes 60-80 ms on NVIDIA's driver); on a
    CPU driver it is quick, and describing the devices (mostly Python) would only compete with the
    caller's imports for the interpreter, so the caller does it."""

    def __init__(self, selector: str | None, open_device: bool | None) -> None:
        self.environment = _loader_environment()
        self.selector = selector
        self.open_device = open_device
        self.found: _Early | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._start, name="vkcap-vulkan-start", daemon=True)
        with signals_deferred():  # the driver's own threads inherit the blocked signals
            self.thread.start()
        atexit.register(self.discard)

    def _start(self) -> None:
        try:
            instance = _create_instance(())
        except BaseException as exc:
            self.error = exc
            return
        try:
            self.found = _Early(instance, vk.vkEnumeratePhysicalDevices(instance))
        except BaseException as exc:
            _destroy_instance(instance)
            self.error = exc
            return
        try:
            self.found.opened = self._open_plain_device(self.found.physicals)
            self.found.selector = self.selector
        except Exception:  # the caller makes the device itself, and meets the error there if it persists
            pass

    def _open_plain_device(self, physicals: list[Any]) -> _OpenDevice | None:
        if self.open_device is None:  # auto: only when a GPU is there to be chosen
            types = [vk.vkGetPhysicalDeviceProperties(pd).deviceType for pd in physicals]
            if all(t == vk.VK_PHYSICAL_DEVICE_TYPE_CPU for t in types):
                return None
        elif not self.open_device:
            return None
        chosen = choose_device([_describe(i, pd, False) for i, pd in enumerate(physicals)], self.selector)
        return _open_device(chosen.index, physicals[chosen.index], chosen.name, _device_requests(chosen, (), []))

    def take(self) -> _Early | None:
        """What the thread made (the caller owns it), or None when the loader's environment changed
        since (another driver, layers)."""
        self.thread.join()
        if _loader_environment() != self.environment:
            self.discard()
            return None
        if self.error is not None:
            raise self.error
        found, self.found = self.found, None
        return found

    def discard(self) -> None:
        self.thread.join()
        if self.found is not None:
            self.found.destroy()
            self.found = None


_early: _InstanceStart | None = None


def _loader_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith("VK_")}


def start_instance_early(device: str | None = None, *, open_device: bool | None = None) -> None:
    """Begin creating the Vulkan instance in a background thread, so that the driver's start-up
    (about 100 ms on NVIDIA's, where the device list is slow too) overlaps the imports and file
    reading before the first :class:`VulkanContext`, which takes it when it starts without layers.
    With a GPU to choose (``open_device=None``; ``True``/``False`` force it), the thread also opens
    the logical device that ``device`` (a ``--device`` selector) picks for a scenario without optional
    extensions or tensors; a context asking for anything else destroys it and makes its own.
    Call once the loader's environment is final (after ``--icd``); what is never taken, or was
    made for another environment, is destroyed."""
    global _early
    if _early is None:
        _early = _InstanceStart(device, open_device)


def _take_early() -> _Early | None:
    global _early
    early, _early = _early, None
    return early.take() if early is not None else None


def _discard_early() -> None:
    global _early
    early, _early = _early, None
    if early is not None:
        early.discard()


class VulkanContext:
    """One instance, one logical device with a compute queue, and what the executor needs to know of them."""

    def __init__(
        self,
        *,
        device: str | int | None = None,
        need_tensors: bool = False,
        need_graphs: bool = False,
        emulation: EmulationMode = "auto",
        want_extensions: tuple[str, ...] = (),
        disabled_extensions: tuple[str, ...] = (),
        robust: bool = False,
    ) -> None:
        """``disabled_extensions``: optional extensions never enabled (``--disable-extension``);
        ``robust``: robust buffer and image access where the device has them
        (``--enable-robustness-features``)."""
        self.disabled_extensions, self.robust = tuple(disabled_extensions), robust
        with signals_deferred():
            try:
                self._start(device, need_tensors, need_graphs, emulation, want_extensions)
            except BaseException:
                self._drop_early_device()
                self.close()
                raise

    def _start(self, device: str | int | None, need_tensors: bool, need_graphs: bool, emulation: EmulationMode,
               want_extensions: tuple[str, ...]) -> None:
        self.layers: tuple[str, ...] = ()
        self._early_device: _OpenDevice | None = None
        needed = [e for e, need in ((TENSORS_EXT, need_tensors), (GRAPH_EXT, need_graphs)) if need]
        if needed and emulation == "auto" and native_support.known_native(needed) is False:
            # No installed driver provides them (learnt on an earlier run): start with the layers at once.
            _discard_early()
            self.instance = None
            self._restart_with_emulation(0)
            physicals = vk.vkEnumeratePhysicalDevices(self.instance)
            chosen = choose_device([_describe(i, pd, True) for i, pd in enumerate(physicals)], device)
            missing = []
            still = [e for e in needed if e not in chosen.extensions]
            if still:
                raise UnsupportedDeviceFeature(
                    f"device '{chosen.name}' lacks {', '.join(still)} even with ARM's emulation layers loaded"
                )
        else:
            early = _take_early()
            if early is not None:
                self.instance, physicals, self._early_device = early.instance, early.physicals, early.opened
                if early.selector != (None if device is None else str(device)):
                    self._drop_early_device()
            else:
                self.instance = _create_instance(())
                physicals = vk.vkEnumeratePhysicalDevices(self.instance)
            infos = [_describe(i, pd, False) for i, pd in enumerate(physicals)]
            native_support.remember([[e for e in (TENSORS_EXT, GRAPH_EXT) if e in d.extensions] for d in infos])
            chosen = choose_device(infos, device)
            missing = [e for e in needed if e not in chosen.extensions]
        if emulation == "always" and not self.layers or missing:
            self._drop_early_device()  # made on the instance about to be replaced
            if emulation == "off":
                raise UnsupportedDeviceFeature(
                    f"device '{chosen.name}' lacks {', '.join(missing)} and --no-emulation-layers was given"
                )
            self._restart_with_emulation(chosen.index)
            physicals = vk.vkEnumeratePhysicalDevices(self.instance)
            chosen = _describe(chosen.index, physicals[chosen.index], True)
            still = [e for e in needed if e not in chosen.extensions]
            if still:
                raise UnsupportedDeviceFeature(
                    f"device '{chosen.name}' lacks {', '.join(still)} even with ARM's emulation layers loaded"
                )
        self.info = chosen
        self.physical = physicals[chosen.index]
        self.properties = vk.vkGetPhysicalDeviceProperties(self.physical)
        self.limits = self.properties.limits
        self.memory_properties = vk.vkGetPhysicalDeviceMemoryProperties(self.physical)
        requests = _device_requests(chosen, want_extensions, needed, self.disabled_extensions)
        opened = self._early_device
        self._early_device = None
        if opened is not None and (opened.index, opened.requested, False) != (chosen.index, requests, self.robust):
            opened.destroy()
            opened = None
        if opened is None:
            opened = _open_device(chosen.index, self.physical, chosen.name, requests, self.robust)
        self.device, self.extensions = opened.device, opened.extensions
        self.queue_family, self.timestamp_bits = opened.queue_family, opened.timestamp_bits
        self.features, self._feature_chain = opened.features, opened.feature_chain
        self.queue = vk.vkGetDeviceQueue(self.device, self.queue_family, 0)
        self.timestamp_period = float(self.limits.timestampPeriod)

    def _restart_with_emulation(self, index: int) -> None:
        if self.instance is not None:
            _destroy_instance(self.instance)
            self.instance = None  # a failure below must not leave close() a destroyed handle
        try:
            layers = prepare_emulation_layers()
        except EmulationLayersUnavailable as exc:
            raise UnsupportedDeviceFeature(f"the device lacks tensor/graph support and {exc}") from None
        layers.apply_to_environment()
        self.layers = layers.names
        self.instance = _create_instance(layers.names)

    def _drop_early_device(self) -> None:
        """Destroy the logical device the early start made, when it cannot be this context's."""
        opened: _OpenDevice | None = getattr(self, "_early_device", None)
        if opened is not None:
            opened.destroy()
            self._early_device = None

    def has_extension(self, name: str) -> bool:
        return name in self.extensions

    def fingerprint(self) -> dict[str, Any]:
        fp = self.info.fingerprint()
        fp["layers"] = list(self.layers)
        fp["extensions_enabled"] = list(self.extensions)
        fp["robust_buffer_access"] = bool(self.features.features.robustBufferAccess)  # changes out-of-bounds results
        return fp

    def memory_type(self, type_bits: int, required: int, preferred: int = 0) -> int:
        """The index of a memory type allowed by ``type_bits`` with ``required`` flags, best ``preferred``."""
        mp = self.memory_properties
        candidates = [
            i
            for i in range(mp.memoryTypeCount)
            if type_bits & (1 << i) and (mp.memoryTypes[i].propertyFlags & required) == required
        ]
        if not candidates:
            raise DeviceError(f"no memory type with flags {required:#x} on '{self.info.name}'")
        for i in candidates:
            if (mp.memoryTypes[i].propertyFlags & preferred) == preferred:
                return i
        return candidates[0]

    def mark_hung(self) -> None:
        """The GPU did not finish in time: from now on nothing waits for it. Closing then leaves the
        device and its objects to the process's exit (destroying them would wait forever)."""
        self.hung = True

    def close(self) -> None:
        if getattr(self, "hung", False):
            self.device = self.instance = None
            return
        if getattr(self, "device", None) is not None:
            vk.vkDeviceWaitIdle(self.device)
            if lifetime.exits_after_work and validation.current() is None:
                with _deferred_lock:
                    _deferred_devices.append(self.device)
            else:
                vk.vkDestroyDevice(self.device, None)
            self.device = None
        if getattr(self, "instance", None) is not None:
            _destroy_instance(self.instance)
            self.instance = None

    def __enter__(self) -> "VulkanContext":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def env_summary() -> dict[str, str]:
    """The Vulkan-related environment variables in effect (for logs and fingerprints)."""
    keys = ("VK_LAYER_PATH", "VK_INSTANCE_LAYERS", "VK_DRIVER_FILES", "VK_ICD_FILENAMES")
    return {k: os.environ[k] for k in keys if k in os.environ}
