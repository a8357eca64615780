"""What runs on a fleet's nodes (see :mod:`replay.fleet`): the custom resources a node advertises, and
the :class:`DeviceActor` that replays traces on one of its Vulkan devices."""
from __future__ import annotations

import faulthandler
import os
import re
import shutil
import socket
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable

from vkcore.device.context import list_devices
from vkcore.errors import VkcapError
from vkcore.paths import cache_root

from .fleet_cache import DEFAULT_LIMIT_BYTES, cached_trace
from .options import ReplayOptions
from .progress_file import frame_running
from .suite import driver_of
from .worker import handle
from .worker_protocol import Failed, ProtocolError, ReplayRequest, decode, encode

DEVICE = "vulkan_device:"  # + a device's resource name: how many of that device the node has
DRIVER = "vulkan_driver:"  # + a driver version's resource name: how many devices run it
NODE = "vkcap_node:"  # + the node's name in results and errors (optional: else its hostname)
GPU = "vulkan_gpu:"  # + a device's UUID, ":", its resource name: pins an actor to that one GPU
FATAL = {"Segmentation fault": "SIGSEGV", "Aborted": "SIGABRT", "Bus error": "SIGBUS",
         "Floating point exception": "SIGFPE", "Illegal instruction": "SIGILL"}  # faulthandler's words


def resource_name(text: str, keep: str = "") -> str:
    """``"llvmpipe (LLVM 15.0.6, 256 bits)"`` -> ``"llvmpipe_LLVM_15.0.6_256_bits"``: letters, digits,
    ``._-`` (and the characters of ``keep``) stay; any other run becomes one ``_``, none at the ends."""
    allowed = re.escape("._-" + keep)
    return re.sub(rf"[^A-Za-z0-9{allowed}]+", "_", text).strip("_")


def node_resources(devices: Iterable[Any], name: str | None = None) -> dict[str, int]:
    """The custom resources a node with ``devices`` (:func:`vkcore.device.context.list_devices`)
    advertises: ``vulkan_device:<name>`` and ``vulkan_driver:<version>`` counts, ``vulkan_gpu:<uuid>:<name>``
    for each device (a count above 1 only where devices report the same UUID, as one ICD listed twice
    does), and ``vkcap_node:<name>``."""
    out: dict[str, int] = {}
    for d in devices:
        keys = [DEVICE + resource_name(d.name), DRIVER + resource_name(driver_of(d.fingerprint()))]
        if d.device_uuid:
            keys.append(gpu_key(d.device_uuid, resource_name(d.name)))
        for key in keys:
            out[key] = out.get(key, 0) + 1
    if name:
        out[NODE + resource_name(name)] = 1
    return out


def gpu_key(uuid: str, resource: str) -> str:
    """The ``vulkan_gpu`` resource of the device with ``uuid`` (hex) and resource name ``resource``."""
    return f"{GPU}{resource_name(uuid)}:{resource}"


def split_gpu_key(key: str) -> tuple[str, str]:
    """(uuid, resource name) of a ``vulkan_gpu`` resource key."""
    uuid, _, resource = key[len(GPU):].partition(":")
    return uuid, resource


class DeviceActor:
    """One Vulkan device of one node (made a Ray actor by :class:`replay.fleet.Fleet`): the ``ordinal``-th
    device whose resource name is ``resource`` (and whose UUID is ``uuid``, where the node advertised it). ``slot`` names its folder in the node's temporary folder:
    a replacement started there reads what a dead predecessor left."""

    def __init__(self, resource: str, ordinal: int, slot: str, uuid: str = "") -> None:
        self.workdir = Path(tempfile.gettempdir()) / "vkcap-fleet" / slot
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.previous = self._post_mortem()
        self._fatal = open(self.workdir / "fatal", "w")  # noqa: SIM115 (open for the actor's life)
        faulthandler.enable(file=self._fatal)  # a fatal signal leaves its name here
        self.contexts: dict[Any, Any] = {}
        self.device: str | None = None  # the --device selector of the chosen device (its index)
        self.hello: dict[str, Any] = {"pid": os.getpid(), "previous": self.previous}
        try:
            matching = [d for d in list_devices() if resource_name(d.name) == resource
                        and (not uuid or d.device_uuid == uuid)]
            if ordinal >= len(matching):
                advertised = gpu_key(uuid, resource) if uuid else DEVICE + resource
                raise VkcapError(f"the node advertises {advertised} x{ordinal + 1}, but has {len(matching)} such "
                                 "Vulkan device(s)")
            chosen = matching[ordinal]
            self.device = str(chosen.index)
            self.hello.update(device=chosen.name, driver=driver_of(chosen.fingerprint()), device_uuid=chosen.device_uuid,
                              device_index=chosen.index, pci_bus=chosen.pci_bus)
        except VkcapError as exc:
            self.hello["error"] = str(exc)

    def _post_mortem(self) -> dict[str, Any]:
        """The frame a dead predecessor was running and the fatal signal it got (None: none caught)."""
        try:
            text = (self.workdir / "fatal").read_text(errors="replace")
        except OSError:
            text = ""
        first = next((ln for ln in text.splitlines() if ln.startswith("Fatal Python error:")), "")
        words = first.removeprefix("Fatal Python error:").strip()
        return {"frame": frame_running(self.workdir / "progress") if first else None,
                "signal": FATAL.get(words, words) or None}

    def ready(self) -> dict[str, Any]:
        """The device (``device``, ``driver``), the process, and ``previous``: the post-mortem."""
        return self.hello

    def replay(self, shipment: dict[str, Any], line: str, blobs: list[Any]) -> tuple[str, str | None]:
        """One trace replayed by :func:`replay.worker.handle`, the handler of a suite worker: ``line`` is
        the :class:`~replay.worker_protocol.ReplayRequest` (the driver's options and page command line,
        ``page`` set when the page is wanted); ``shipment`` says where the trace is (its path, or its
        content hash with ``blobs`` holding its object reference, nested so that Ray leaves it unresolved
        until this node needs it). The answer's line (:class:`~replay.worker_protocol.Done` or
        :class:`~replay.worker_protocol.Failed`) and the page's HTML (None without a page)."""
        progress = self.workdir / "progress"
        progress.unlink(missing_ok=True)
        page = self.workdir / "page.html"
        page.unlink(missing_ok=True)
        try:
            request = decode(line, ReplayRequest)
            trace = self._trace(shipment, blobs)
        except (OSError, VkcapError) as exc:  # ProtocolError is one
            return encode(Failed(str(exc))), None
        try:
            options = replace(ReplayOptions.from_dict(request.options), trace=Path(trace), device=self.device,
                              progress_file=progress)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            return encode(Failed(str(ProtocolError(f"a replay request's options do not read back: {exc}")))), None
        here = ["vkcap", "replay", trace, "--device", str(self.device), *request.command_line[3:]]  # this node's names
        answer = handle(replace(request, options=options.to_dict(), page=str(page) if request.page else "",
                                command_line=here), self.contexts)
        progress.unlink(missing_ok=True)  # a death between replays is no frame of this trace's
        return encode(answer), page.read_text() if request.page and page.is_file() else None

    def _trace(self, request: dict[str, Any], blobs: list[Any]) -> str:
        """A path to the trace on this node: the driver's own (shared), or the node's cached copy,
        fetched from the object store the first time this node needs it."""
        if "hash" not in request:
            if not Path(request["trace"]).is_file():
                raise VkcapError(f"{request['trace']}: not on node {socket.gethostname()} (--ray-shared: every node "
                                 "must see the traces at the driver's paths)")
            return str(request["trace"])
        # lazy: Ray is optional (vkcap[fleet]) and slow to import; only a fleet's actors load it
        import ray

        return str(cached_trace(cache_root() / "fleet", request["hash"], request["name"], lambda: ray.get(blobs[0]),
                                limit_bytes=request.get("cache_limit", DEFAULT_LIMIT_BYTES)))

    def close(self) -> None:
        """Close the devices and remove the slot's folder."""
        for ctx in self.contexts.values():
            ctx.close()
        self.contexts.clear()
        self._fatal.close()
        shutil.rmtree(self.workdir, ignore_errors=True)
        for folder in (self.workdir.parent, self.workdir.parent.parent):  # the run's, then vkcap-fleet, once empty
            try:
                folder.rmdir()
            except OSError:
                break
