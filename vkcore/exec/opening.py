"""One way to open a session: :func:`open_session` builds a scenario's plan, the Vulkan context of the
device it asks for and the :class:`~vkcore.exec.session.Session` on it, and closes what it opened on every
exit path, the session before the context.

``run``, ``record``, ``replay`` and everything that replays (trim, extract, bisect probes, suites, fleets)
open their sessions here, so a device is opened the same way whatever opens it: the scenario's needs
(tensors, graphs, optional extensions) and the :class:`DeviceRequest` (``--device``, the emulation layers,
``--disable-extension``, ``--enable-robustness-features``) are the only inputs.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from .. import reference_log
from ..device.context import CUSTOM_BORDER_EXT, FRAME_BOUNDARY_EXT, OPTICAL_FLOW_EXT, EmulationMode, VulkanContext
from ..commands import kind_of
from ..resources.kinds import CUSTOM_BORDER_COLOR, DATA_GRAPH, OPTICAL_FLOW, TENSORS, resource_kind
from ..scenario.model import Scenario
from .plan import Plan, make_plan
from .session import Session, SessionOptions
from .timing import HostTimer

log = logging.getLogger("vkcap.runner")
NEURAL_STATISTICS_EXT = "VK_ARM_data_graph_neural_accelerator_statistics"

#: Vulkan contexts kept open across sessions (a suite's worker keeps its devices from trace to trace),
#: by what they were opened for; their owner closes them.
ContextPool = dict[Any, VulkanContext]


@dataclass(frozen=True)
class DeviceRequest:
    """How the device is opened, beyond what the scenario needs."""

    device: str | None = None  # --device: an index or a name (None: the first suitable one)
    emulation: EmulationMode = "auto"  # ARM's emulation layers: when needed, never, or always
    disabled_extensions: tuple[str, ...] = ()  # --disable-extension: optional extensions never enabled
    robust: bool = False  # --enable-robustness-features: robust buffer and image access where the device has them
    neural_flags: tuple[str, ...] = ()  # the --neural-* flags given: statistics no device here can give (said once open)


@dataclass(frozen=True)
class OpenOptions:
    """What :func:`open_session` opens: the device, the session's own options, and the plan's."""

    device: DeviceRequest = field(default_factory=DeviceRequest)
    session: SessionOptions = field(default_factory=SessionOptions)
    capture_all: bool = False  # --capture all: every writable resource snapshotted at each boundary
    reference_lines: bool = False  # log the reference runner's "device" line (run and record, as it does)


def scenario_features(scenario: Scenario) -> frozenset[str]:
    """The optional device features (:data:`vkcore.resources.kinds.FEATURES`) the scenario's resources and
    commands need, as their kinds say."""
    return frozenset().union(*(resource_kind(r).needs(r) for r in scenario.resources),
                             *(kind_of(c).features for c in scenario.commands))


def scenario_needs(scenario: Scenario) -> tuple[bool, bool]:
    """(needs VK_ARM_tensors, needs VK_ARM_data_graph) for this scenario."""
    features = scenario_features(scenario)
    graphs = DATA_GRAPH in features
    return TENSORS in features or graphs, graphs


def wanted_extensions(scenario: Scenario) -> tuple[str, ...]:
    """Optional device extensions the scenario can use (enabled when the device has them)."""
    features = scenario_features(scenario)
    return (CUSTOM_BORDER_EXT,) * (CUSTOM_BORDER_COLOR in features) + (OPTICAL_FLOW_EXT,) * (OPTICAL_FLOW in features)


def optional_extensions(scenario: Scenario) -> tuple[str, ...]:
    """Every optional extension a session of ``scenario`` enables where the device has it and the
    request does not disable it: frame boundaries, and :func:`wanted_extensions`."""
    return (FRAME_BOUNDARY_EXT, *wanted_extensions(scenario))


def open_context(scenario: Scenario, request: DeviceRequest) -> VulkanContext:
    """A Vulkan context on the device ``request`` names, with what ``scenario`` needs enabled."""
    need_tensors, need_graphs = scenario_needs(scenario)
    return VulkanContext(device=request.device, need_tensors=need_tensors, need_graphs=need_graphs,
                         emulation=request.emulation, want_extensions=wanted_extensions(scenario),
                         disabled_extensions=request.disabled_extensions, robust=request.robust)


def _say_no_neural_statistics(ctx: VulkanContext, flags: tuple[str, ...]) -> None:
    """The reference's --neural-* flags dump a neural accelerator's debug data and statistics; say
    plainly that nothing is written, and why."""
    why = (f"device '{ctx.info.name}' has no neural accelerator (no {NEURAL_STATISTICS_EXT})"
           if NEURAL_STATISTICS_EXT not in ctx.info.extensions else "vkcap does not collect neural accelerator data")
    log.warning("%s: %s; nothing is written", ", ".join(flags), why)


class SessionScope:
    """The plan, context and session of one scenario, open between entering and leaving: use as
    ``with open_session(...) as opened`` or ``async with open_session(...) as opened``.

    Guarantees: entering builds the plan, opens the context (or takes one from the pool), says the
    reference runner's device line, then builds the session; when any step fails, what was opened
    is closed before the error propagates. Leaving closes the session, then the context (a pooled
    one stays open, in its pool), whatever ended the block. ``async with`` closes each in a worker
    thread, shielded from cancellation: the trio loop stays free meanwhile, and the teardown always
    completes.
    """

    def __init__(self, scenario: Scenario, options: OpenOptions, *, contexts: ContextPool | None = None,
                 timer: HostTimer | None = None) -> None:
        self.scenario = scenario
        self.options = options
        self.contexts = contexts
        self.timer = timer
        self.plan: Plan | None = None
        self.ctx: VulkanContext | None = None
        self.session: Session | None = None

    def _open(self) -> None:
        self.plan = make_plan(self.scenario, capture_all=self.options.capture_all)
        request = self.options.device
        pool_key = (request, scenario_needs(self.scenario), wanted_extensions(self.scenario))
        ctx = self.contexts.get(pool_key) if self.contexts is not None else None
        if ctx is None:
            ctx = open_context(self.scenario, request)
            if self.contexts is not None:
                self.contexts[pool_key] = ctx
        self.ctx = ctx
        try:
            if self.options.reference_lines:
                reference_log.say("device", ctx.info.name, reference_log.DEVICE_TYPES.get(ctx.info.type, "Other"),
                                  ctx.info.vendor_id)
            if request.neural_flags:
                _say_no_neural_statistics(ctx, request.neural_flags)
            self.session = Session(ctx, self.plan, self.options.session, self.timer)
        except BaseException:
            self._release_context()
            raise

    def _release_context(self) -> None:
        ctx, self.ctx = self.ctx, None
        if ctx is not None and self.contexts is None:
            ctx.close()

    def close(self) -> None:
        """Close the session, then the context (each once; a pooled context stays open)."""
        session, self.session = self.session, None
        try:
            if session is not None:
                session.close()
        finally:
            self._release_context()

    def __enter__(self) -> "SessionScope":
        self._open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> "SessionScope":
        self._open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        session, self.session = self.session, None
        try:
            if session is not None:
                await _in_thread(session.close)
        finally:
            ctx, self.ctx = self.ctx, None
            if ctx is not None and self.contexts is None:
                await _in_thread(ctx.close)


def open_session(scenario: Scenario, options: OpenOptions, *, contexts: ContextPool | None = None,
                 timer: HostTimer | None = None) -> SessionScope:
    """The one way to open a session of ``scenario``; see :class:`SessionScope`. ``contexts``: a pool to
    take the context from, and to leave a new one in, instead of opening and closing one; ``timer``:
    where the session's set-up times go (``--perf-counters-dump-path``)."""
    return SessionScope(scenario, options, contexts=contexts, timer=timer)


async def _in_thread(release: Callable[[], None]) -> None:
    """Run a teardown in a worker thread, to completion even when the task is being cancelled."""
    # lazy: vkcap reproduce imports this module, not trio (with attr, attrs, idna, outcome, sniffio, sortedcontainers)
    import trio

    with trio.CancelScope(shield=True):
        await trio.to_thread.run_sync(release)
