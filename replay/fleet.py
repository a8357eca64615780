"""``vkcap suite run --ray ADDRESS``: a suite replayed on a Ray cluster, one actor per Vulkan device of
each node, judged and reported exactly as :func:`replay.suite.run_suite` judges and reports.

**Nodes** advertise their devices as Ray custom resources (``vkcap fleet resources`` prints a node's):
``vulkan_device:<name>`` (how many of that device the node has), ``vulkan_driver:<version>``, and
optionally ``vkcap_node:<name>``, the name results and errors give the node (else its hostname). Names
keep letters, digits and ``._-``, any other run of characters becomes one ``_``
(:func:`replay.fleet_node.resource_name`).

**Actors**: each ``vulkan_device`` unit of each matching node gets one
:class:`replay.fleet_node.DeviceActor`, pinned to its node (hard node affinity) and holding that unit
of the resource. It opens its device once and replays trace after trace through
:func:`replay.worker.handle`, the handler of ``vkcap suite worker``, with the messages of
:mod:`replay.worker_protocol` (the options made by the driver; its Vulkan contexts kept across traces). Actors run with the driver's ``VKCAP_*`` environment variables (validation, caches, fault
injection), and nothing else of it.

**Columns**: every trace is replayed once per device name (a column of the report, as each
``--device`` of a local suite is); the nodes that have that device share its traces, each actor
taking the next one when it is free. ``--device PATTERN`` keeps the devices whose resource name
matches (fnmatch, case-insensitive): ``"NVIDIA*"``; without it, every device of the fleet.

**Traces travel once**: the driver puts a trace's bytes into Ray's object store once, under its
content hash (xxh3-128), when it is first dispatched; an actor that lacks it fetches it once into its
node's cache (``$VKCAP_CACHE_DIR/fleet/<hash>/<name>``), which later replays and the node's other
actors reuse. With ``shared`` (``--ray-shared``) nothing travels: every node reads the traces at the
driver's (absolute) paths.

**Results** stream back to the driver as each replay finishes (``on_result``: the suite's progress),
each judged by :func:`replay.suite._replay_one` against the expectation for the device and driver it
ran on; a result also names its node (``host``).

**Failures**: a driver crash kills the actor's process; a fresh actor replaces it on that node and
reads what its predecessor left (the frame it was running, the fatal signal caught by
:mod:`faulthandler`): the trace is a ``crash`` at that frame, as a dead suite worker's is, and
``--retries`` apply. An actor that ends without a fatal signal (killed, out of memory) or whose node
is lost loses its trace: it is rescheduled once, preferably on another node, and its result says so;
lost a second time, it is a ``crash`` naming both nodes. A node that is gone takes its actors with it;
when a column has no actor left, its remaining traces are ``crash`` results naming the lost node(s).
"""
from __future__ import annotations

import fnmatch
import logging
import os
import secrets
import socket
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import xxhash

from vkcore.device.context import list_devices
from vkcore.errors import UsageError, VkcapError
from vkcore.outputs import write_atomic

from .fleet_node import DEVICE, GPU, NODE, DeviceActor, gpu_key, node_resources, resource_name, split_gpu_key
from .suite import OptionsFor, SuiteTrace, TraceResult, _replay_one, answer_of, request_for, result_stem
from .worker_protocol import Done, Failed, ProtocolError, decode, encode

log = logging.getLogger("vkcap")

INSTALL = "pip install 'vkcap[ray]'"
LOSSES = 1  # how often a trace may be lost with its actor or node and be rescheduled


@dataclass(frozen=True)
class FleetOptions:
    address: str  # "local" (a cluster in this process), "auto" ($RAY_ADDRESS), or HOST:PORT / ray://HOST:PORT
    devices: tuple[str, ...] = ()  # fnmatch patterns of devices' resource names; empty: every device
    shared: bool = False  # the traces are at the driver's paths on every node: nothing is shipped
    cache_limit: int = 20 << 30  # bytes each node's trace cache is pruned to (replay/fleet_cache.py)
    start_timeout_s: float = 120.0  # how long an actor may take to start (a device busy with another run)


def import_ray() -> Any:
    """The ``ray`` module; a one-line :class:`UsageError` saying how to install it when it is missing."""
    try:
        # lazy: Ray is optional (vkcap[fleet]) and slow to import; only --ray and vkcap fleet load it
        import ray
    except ImportError:
        raise UsageError(f"--ray needs Ray, an optional dependency: {INSTALL}") from None
    return ray


def _address(text: str) -> str:
    """The address ``ray.init`` is given for ``--ray TEXT``; a :class:`UsageError` when no cluster can
    answer there (checked with one TCP connection: ``ray.init`` itself waits minutes for a dead one)."""
    if text == "local":
        return "local"
    if text == "auto":
        text = os.environ.get("RAY_ADDRESS", "")
        if not text:
            raise UsageError("--ray auto: joins the cluster in RAY_ADDRESS, which is not set")
    hostport = text.split("://", 1)[-1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"--ray {text}: expected local, auto, HOST:PORT or ray://HOST:PORT")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
    except OSError as exc:
        raise UsageError(f"--ray {text}: no Ray cluster answers there ({exc.strerror or exc})") from None
    return text


def _quiet_driver_messages(ray: Any) -> None:
    """Ray's driver prints its cluster's error messages ("a worker died ...") to stdout, where the
    suite's table goes; the suite reports those deaths itself, so they go to the debug log instead."""
    worker = getattr(getattr(ray, "_private", None), "worker", None)
    if worker is not None and hasattr(worker, "print_to_stdstream"):
        worker.print_to_stdstream = lambda data, ignore_prefix=False: log.debug(
            "ray: %s", " ".join(str(line) for line in data.get("lines", ())))


@dataclass(frozen=True)
class _Place:
    node_id: str
    host: str  # the node's name: its vkcap_node resource, else its hostname
    resource: str  # the vulkan_device resource's name, without the prefix
    ordinal: int  # which of the node's devices of that name (and UUID)
    uuid: str = ""  # the device's UUID where the node advertises it (vulkan_gpu): the actor is pinned to it


class Lost(Exception):
    """An actor ended without a fatal signal (killed, out of memory), or its node is gone (``gone``):
    the trace it was replaying was not judged."""

    def __init__(self, host: str, why: str, gone: bool) -> None:
        super().__init__(f"{host}: {why}")
        self.host, self.why, self.gone = host, why, gone


class ActorProxy:
    """The driver's side of one :class:`DeviceActor`: what :func:`replay.suite._replay_one` replays
    through (``start``, ``replay``, ``device``, ``driver``, ``host``), replacing the actor when it dies."""

    def __init__(self, fleet: "Fleet", place: _Place) -> None:
        self.fleet, self.place = fleet, place
        self.host = place.host
        self.device = self.driver = ""
        self.actor: Any = None

    def spawn(self) -> Any:
        """A new actor on the place's node and the reference of its :meth:`DeviceActor.ready`."""
        # lazy: Ray is optional (vkcap[fleet]) and slow to import; only --ray and vkcap fleet load it
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        p, fleet = self.place, self.fleet
        self.actor = fleet.actor_class.options(
            num_cpus=0, resources={DEVICE + p.resource: 1, **({gpu_key(p.uuid, p.resource): 1} if p.uuid else {})},
            max_restarts=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(p.node_id, soft=False),
            runtime_env={"env_vars": fleet.env},
        ).remote(p.resource, p.ordinal, f"{fleet.run_id}/{p.node_id[:16]}-{p.resource}-{p.uuid[:8]}-{p.ordinal}", p.uuid)
        return self.actor.ready.remote()

    def started(self, ref: Any, timeout: float) -> dict[str, Any]:
        """The actor's :meth:`DeviceActor.ready`, once it has started; :class:`Lost` (gone) when it
        cannot start on its node in ``timeout`` seconds, or its device cannot be opened there."""
        ray = self.fleet.ray
        try:
            hello = ray.get(ref, timeout=timeout)
        except Exception as exc:  # ray.exceptions: the node is gone, the actor died starting, the wait timed out
            why = "it did not start in time" if isinstance(exc, ray.exceptions.GetTimeoutError) else _first_line(exc)
            self.stop()
            raise Lost(self.host, why, gone=True) from None
        if hello.get("error"):
            self.stop()
            raise Lost(self.host, hello["error"], gone=True)
        self.device, self.driver = hello["device"], hello["driver"]
        self.device_uuid, self.device_index = str(hello.get("device_uuid", "")), hello.get("device_index")
        self.pci_bus = str(hello.get("pci_bus", ""))
        return dict(hello)

    def start(self) -> str:
        if self.actor is None:
            self.started(self.spawn(), self.fleet.options.start_timeout_s)
        return self.device

    def replay(self, trace: Path, flags: tuple[str, ...] = (), pages: Path | None = None) -> dict[str, Any]:
        """The actor's answer for one trace; a ``crash`` (frame, signal) when a fatal signal killed it;
        :class:`Lost` when it ended otherwise or its node went."""
        ray = self.fleet.ray
        self.start()
        page = "" if pages is None else str(pages / f"{result_stem(str(trace), self.device)}.html")
        try:
            request, blobs = self.fleet.shipment(trace)
        except (OSError, ray.exceptions.RayError) as exc:  # unreadable, or the object store refuses it
            return {"outcome": "error", "device": self.device, "detail": f"{trace}: {_first_line(exc)}"}
        flags = [*self.fleet.flags, *flags]
        assert self.fleet.options_for is not None, "Fleet.run sets it"
        asked = request_for(self.fleet.options_for, trace, flags)
        if isinstance(asked, dict):
            return {"device": self.device, **asked}
        asked = replace(asked, page=page, command_line=["vkcap", "replay", str(trace), *flags])
        try:
            line, html = ray.get(self.actor.replay.remote(request, encode(asked), blobs))
        except ray.exceptions.RayActorError:
            return self._died()
        except ray.exceptions.RayError as exc:  # the actor's method raised: vkcap's own failure, not the trace's
            return {"outcome": "error", "device": self.device, "detail": f"internal error on {self.host}: {_first_line(exc)}"}
        try:
            answer = answer_of(decode(line, Done, Failed))
        except ProtocolError as exc:
            return {"outcome": "error", "device": self.device, "detail": f"{self.host}: {exc}"}
        answer = {"device": self.device, **answer}
        if page and answer.get("outcome") != "error":
            if html is not None:
                write_atomic(page, [html.encode()])
            answer["page"] = page
        return answer

    def _died(self) -> dict[str, Any]:
        """After the actor's death: a replacement on the same node says what its predecessor left."""
        self.stop()
        try:
            hello = self.started(self.spawn(), self.fleet.options.start_timeout_s)
        except Lost as lost:
            alive = any(n.get("NodeID") == self.place.node_id and n.get("Alive") for n in self.fleet.ray.nodes())
            raise Lost(self.host, f"its actor died and no other starts there: {lost.why}" if alive else "node lost",
                       gone=True) from None
        previous = hello.get("previous") or {}
        if not previous.get("signal"):
            raise Lost(self.host, "its actor ended without a fatal signal: killed, or out of memory", gone=False)
        frame = previous.get("frame")
        where = "during set-up" if frame is None else f"in frame {frame}"
        return {"outcome": "crash", "device": self.device, "first_divergence": frame,
                "detail": f"the replay died {where}: {previous['signal']}"}

    def stop(self) -> None:
        if self.actor is not None:
            try:
                self.fleet.ray.kill(self.actor)
            except Exception:  # already gone
                pass
            self.actor = None

    def close(self) -> None:
        if self.actor is not None:
            try:
                self.fleet.ray.get(self.actor.close.remote(), timeout=30)
            except Exception:  # it died meanwhile: nothing left to close
                pass
            self.stop()


class _Dead:
    """A replayer whose every replay is a ``crash`` with ``detail``: how a trace that could not be
    replayed (lost twice, no actor left) is judged, by the same :func:`_replay_one`."""

    def __init__(self, like: ActorProxy, detail: str) -> None:
        self.device, self.driver, self.host, self.detail = like.device, like.driver, like.host, detail
        self.device_uuid = getattr(like, "device_uuid", "")
        self.device_index, self.pci_bus = getattr(like, "device_index", None), getattr(like, "pci_bus", "")

    def start(self) -> str:
        return self.device

    def replay(self, trace: Path, flags: tuple[str, ...] = (), pages: Path | None = None) -> dict[str, Any]:
        return {"outcome": "crash", "device": self.device, "detail": self.detail}


@dataclass
class _Item:
    index: int  # of the trace
    lost: list[str] = field(default_factory=list)  # "HOST: why", each time it was lost
    avoid: set[str] = field(default_factory=set)  # node ids that lost it


class _Column:
    """One device name's traces and the actors that share them."""

    def __init__(self, device: str, proxies: list[ActorProxy], count: int) -> None:
        self.device = device
        self.live = list(proxies)
        self.pending: deque[_Item] = deque(_Item(i) for i in range(count))
        self.running = 0
        self.aborted = False
        self.cond = threading.Condition()

    def take(self, proxy: ActorProxy) -> _Item | None:
        """The next trace for ``proxy``: one that was lost on its node only when no actor on another
        node remains to take it. None when every trace is done."""
        with self.cond:
            while not self.aborted:
                for item in list(self.pending):
                    elsewhere = any(p.place.node_id not in item.avoid for p in self.live)
                    if proxy.place.node_id not in item.avoid or not elsewhere:
                        self.pending.remove(item)
                        self.running += 1
                        return item
                if not self.pending and not self.running:
                    return None
                self.cond.wait()
            return None

    def finish(self, item: _Item | None = None, again: bool = False) -> None:
        with self.cond:
            self.running -= item is not None
            if again and item is not None:
                self.pending.appendleft(item)
            self.cond.notify_all()

    def leave(self, proxy: ActorProxy) -> list[_Item]:
        """``proxy``'s node is gone: the traces nobody is left to replay (when it was the last)."""
        with self.cond:
            if proxy in self.live:
                self.live.remove(proxy)
            orphans = list(self.pending) if not self.live else []
            if orphans:
                self.pending.clear()
            self.cond.notify_all()
            return orphans

    def abort(self) -> None:
        """Stop handing out traces (the run failed)."""
        with self.cond:
            self.aborted = True
            self.cond.notify_all()


class Fleet:
    """A connection to a Ray cluster and one started actor per matching Vulkan device of its nodes.
    Use as a context manager: :meth:`close` ends the actors and the connection (and a ``local``
    cluster)."""

    def __init__(self, options: FleetOptions) -> None:
        ray = import_ray()
        address = _address(options.address)
        self.ray, self.options = ray, options
        self.flags: list[str] = []
        self.options_for: OptionsFor | None = None  # set by run
        self.env = {k: v for k, v in os.environ.items() if k.startswith("VKCAP_")}
        self.run_id = uuid.uuid4().hex[:12]  # the actors' folders on their nodes are the run's
        self._refs: dict[str, Any] = {}  # content hash -> object reference of the trace's bytes
        self._hashes: dict[Path, str] = {}
        self._uses: dict[str, int] = {}  # content hash -> replays still to judge
        self._lock = threading.Lock()
        if address == "local":
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            if "RAY_AUTH_MODE" not in os.environ and "RAY_AUTH_TOKEN" not in os.environ:
                # the cluster lives as long as this run: a token of its own, not one Ray saves in ~/.ray
                os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
            init: dict[str, Any] = {"resources": node_resources(list_devices()), "include_dashboard": False}
        else:
            init = {}
        try:
            ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False, **init)
        except Exception as exc:  # no cluster there after all, another Ray version, ...
            raise UsageError(f"--ray {options.address}: {_first_line(exc)}") from None
        _quiet_driver_messages(ray)
        self.actor_class = ray.remote(DeviceActor)
        self.proxies: list[ActorProxy] = []
        try:
            self._start(self._places())
        except BaseException:
            self.close()
            raise

    def _places(self) -> list[_Place]:
        """Each unit of each matching ``vulkan_device`` resource of each live node: one per ``vulkan_gpu``
        where the node advertises its devices' UUIDs, so each actor is pinned to one GPU."""
        places, seen = [], set()
        patterns = [resource_name(p, keep="*?[]").lower() for p in self.options.devices]
        for node in self.ray.nodes():
            if not node.get("Alive"):
                continue
            resources: dict[str, float] = node.get("Resources", {})
            names = [k[len(NODE):] for k in resources if k.startswith(NODE)]
            host = names[0] if names else str(node.get("NodeManagerHostname") or node.get("NodeManagerAddress", ""))
            for key, count in sorted(resources.items()):
                if not key.startswith(DEVICE):
                    continue
                seen.add(key[len(DEVICE):])
                if patterns and not any(fnmatch.fnmatchcase(key[len(DEVICE):].lower(), p) for p in patterns):
                    continue
                name = key[len(DEVICE):]
                gpus = sorted((split_gpu_key(k)[0], int(n)) for k, n in resources.items()
                              if k.startswith(GPU) and split_gpu_key(k)[1] == name)
                if sum(n for _, n in gpus) == int(count):
                    places += [_Place(node["NodeID"], host, name, k, uuid) for uuid, n in gpus for k in range(n)]
                else:  # a node that does not advertise its devices' UUIDs: the k-th device of that name
                    places += [_Place(node["NodeID"], host, name, k) for k in range(int(count))]
        if not places:
            which = f" matching --device {' '.join(self.options.devices)}" if self.options.devices else ""
            have = f"; the fleet has: {', '.join(sorted(seen))}" if seen else \
                "; start each node with the resources `vkcap fleet resources` prints (ray start --resources ...)"
            raise UsageError(f"--ray {self.options.address}: no node advertises a Vulkan device{which} "
                             f"({DEVICE}NAME resources){have}")
        return places

    def _start(self, places: list[_Place]) -> None:
        """Start every actor at once; keep those whose device opens (a warning for each other)."""
        proxies = [ActorProxy(self, p) for p in places]
        refs = [p.spawn() for p in proxies]
        deadline = time.monotonic() + self.options.start_timeout_s
        for proxy, ref in zip(proxies, refs):
            try:
                proxy.started(ref, max(0.0, deadline - time.monotonic()))
                self.proxies.append(proxy)
            except Lost as lost:
                log.warning("fleet: no actor for %s%s #%d on %s: %s", DEVICE, proxy.place.resource, proxy.place.ordinal,
                            proxy.host, lost.why)
        if not self.proxies:
            raise VkcapError(f"--ray {self.options.address}: no actor could start on any device of the fleet")
        log.info("fleet: %d actor(s): %s", len(self.proxies),
                 ", ".join(f"{p.device} on {p.host}" for p in self.proxies))

    @property
    def devices(self) -> list[str]:
        """The devices every trace is replayed on (once each), by name."""
        return sorted({p.device for p in self.proxies})

    def shipment(self, trace: Path) -> tuple[dict[str, Any], list[Any]]:
        """How an actor gets ``trace``: its path (shared), or its content hash, file name and object
        reference, the bytes put into the object store the first time any actor needs them."""
        if self.options.shared:
            return {"trace": str(trace.resolve())}, []
        with self._lock:
            digest = self._hashes.get(trace) or self._hash(trace)
            if digest not in self._refs:
                self._refs[digest] = self.ray.put(trace.read_bytes())
            return ({"hash": digest, "name": resource_name(trace.name) or "trace.vkt", "cache_limit": self.options.cache_limit},
                    [self._refs[digest]])

    def _hash(self, trace: Path) -> str:
        h = xxhash.xxh3_128()
        with open(trace, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        self._hashes[trace] = h.hexdigest()
        return self._hashes[trace]

    def _judged(self, trace: Path) -> None:
        """One more replay of ``trace`` judged: its bytes leave the object store after its last."""
        with self._lock:
            digest = self._hashes.get(trace)
            if digest is not None and digest in self._uses:
                self._uses[digest] -= 1
                if self._uses[digest] <= 0:
                    self._refs.pop(digest, None)

    def run(self, traces: list[SuiteTrace], *, options_for: OptionsFor, retries: int = 0, flags: list[str] | None = None,
            on_result: Callable[[TraceResult], None] | None = None, pages: Path | None = None) -> list[TraceResult]:
        """Replay every trace once on each of :attr:`devices` (see :func:`share`), with the suite's
        ``flags`` and ``retries``, each replay's options made here by ``options_for`` (as
        :func:`replay.suite.run_suite` makes them) and sent to the actor; the results by trace, then device."""
        self.flags, self.options_for = list(flags or []), options_for
        if not self.options.shared:
            with self._lock:
                for t in traces:
                    digest = self._hashes.get(t.path) or self._hash(t.path)
                    self._uses[digest] = self._uses.get(digest, 0) + len(self.devices)

        def judged(result: TraceResult) -> None:
            self._judged(Path(result.trace))
            if on_result is not None:
                on_result(result)

        return share(traces, self.proxies, retries=retries, pages=pages, on_result=judged)

    def close(self) -> None:
        for proxy in self.proxies:
            proxy.close()
        self._refs.clear()
        if self.ray.is_initialized():
            self.ray.shutdown()

    def __enter__(self) -> "Fleet":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def share(traces: list[SuiteTrace], proxies: list[ActorProxy], *, retries: int = 0, pages: Path | None = None,
          on_result: Callable[[TraceResult], None] | None = None) -> list[TraceResult]:
    """Every trace judged once per device name of ``proxies``, whose threads share that device's traces:
    each takes the next when it is free. A trace lost with its actor or node (:class:`Lost`) goes back
    for another actor, on another node where one is left (``LOSSES`` times at most), then is a
    ``crash`` naming the nodes; a proxy whose node is gone leaves, and the last to leave a device
    makes its remaining traces ``crash`` results. ``on_result`` sees each result as it comes (under a
    lock); the results are returned by trace, then device (sorted by name)."""
    devices = sorted({p.device for p in proxies})
    columns = [_Column(d, [p for p in proxies if p.device == d], len(traces)) for d in devices]
    results: dict[tuple[int, int], TraceResult] = {}
    lock = threading.Lock()

    def record(i: int, c: int, result: TraceResult) -> None:
        with lock:
            results[(i, c)] = result
            if on_result is not None:
                on_result(result)

    def work(proxy: ActorProxy, c: int) -> None:
        column = columns[c]
        while (item := column.take(proxy)) is not None:
            trace = traces[item.index]
            try:
                result = _replay_one(proxy, trace, retries, pages)
            except Lost as lost:
                item.lost.append(f"{lost.host} ({lost.why})")
                item.avoid.add(proxy.place.node_id)
                if len(item.lost) > LOSSES:
                    record(item.index, c, _replay_one(_Dead(proxy, "lost twice, on " + ", then on ".join(item.lost)), trace, 0))
                    column.finish(item)
                else:
                    log.warning("fleet: %s: lost on %s (%s); rescheduled", trace.path.name, lost.host, lost.why)
                    column.finish(item, again=True)
                if lost.gone:
                    for orphan in column.leave(proxy):
                        losses = dict.fromkeys([*orphan.lost, f"{lost.host} ({lost.why})"])
                        why = "not replayed: no actor left for its device after losing " + ", then ".join(losses)
                        record(orphan.index, c, _replay_one(_Dead(proxy, why), traces[orphan.index], 0))
                    return
                continue
            if item.lost:
                note = f"replayed again after it was lost on {', '.join(item.lost)}"
                result.detail = f"{result.detail}; {note}" if result.detail else note
            record(item.index, c, result)
            column.finish(item)

    failures: list[BaseException] = []

    def guarded(proxy: ActorProxy, c: int) -> None:
        try:
            work(proxy, c)
        except BaseException as exc:  # vkcap's own failure: the run reports it once every thread is done
            failures.append(exc)
            for column in columns:
                column.abort()

    threads = [threading.Thread(target=guarded, args=(p, c), name=f"vkcap-fleet-{p.host}-{p.place.ordinal}")
               for c, column in enumerate(columns) for p in column.live]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return [results[(i, c)] for i in range(len(traces)) for c in range(len(columns))]


def _first_line(exc: BaseException) -> str:
    """An exception's message as one line (Ray's run to pages)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[0] if lines else type(exc).__name__
