"""What commands whose layouts the shaders decide (compute and fragment) share: reflecting a shader and
checking it against the device, checking bindings against the resources, descriptor pools and sets."""
from __future__ import annotations

import logging
from typing import Any

import vulkan as vk

from ..device import validation
from ..errors import ScenarioError, UnsupportedDeviceFeature
from ..scenario.model import Shader
from ..shaders.bindings import LayoutBinding
from ..shaders.pipelines import check_specialization
from ..shaders.spirv import CAPABILITY_FEATURES, Reflection, SpirvError, reflect
from .context import CommandContext

log = logging.getLogger("vkcap.descriptors")
#: Capabilities whose missing feature the reference runner does not check and the drivers tried serve anyway
#: (lavapipe reads a storage image without a format as its view's format): a warning, not a refusal, unless
#: validation is on (the layer would report the shader: VUID-VkShaderModuleCreateInfo-pCode-08740).
RUN_WITHOUT_FEATURE = frozenset({55, 56})  # StorageImageReadWithoutFormat, StorageImageWriteWithoutFormat


def create_pool(session: CommandContext, commands: list[Any]) -> Any:
    """One descriptor pool sized for every set of ``commands`` (by their resolved layouts), owned by the
    session (``session.descriptor_pools``); ``None`` when they bind nothing."""
    counts: dict[int, int] = {}
    total_sets = 0
    for cmd in commands:
        total_sets += len({b.set for b in cmd.bindings})
        for lb in session.layouts[cmd.index]:
            counts[lb.descriptor_type] = counts.get(lb.descriptor_type, 0) + 1
    if not total_sets:
        return None
    sizes = [vk.VkDescriptorPoolSize(type=t, descriptorCount=n) for t, n in counts.items()]
    pool = vk.vkCreateDescriptorPool(session.ctx.device, vk.VkDescriptorPoolCreateInfo(maxSets=total_sets, pPoolSizes=sizes),
                                     None)
    session.descriptor_pools.append(pool)
    return pool


def allocate_sets(session: CommandContext, pool: Any, cmd: Any, set_layouts: dict[int, Any],
                  layout: tuple[LayoutBinding, ...]) -> dict[int, Any]:
    """The sets ``cmd`` binds, allocated from ``pool`` and written with its resolved ``layout``."""
    used = sorted({b.set for b in cmd.bindings})
    if not used:
        return {}
    assert session.resources is not None
    handles = vk.vkAllocateDescriptorSets(session.ctx.device, vk.VkDescriptorSetAllocateInfo(
        descriptorPool=pool, pSetLayouts=[set_layouts[s] for s in used]))
    sets = dict(zip(used, handles))
    parts = [session.resources[b.resource].descriptor(sets[b.set], b.binding, b.lod, b.descriptor_type) for b in layout]
    writes = [p.write for p in parts]
    vk.vkUpdateDescriptorSets(session.ctx.device, len(writes), writes, 0, None)
    return sets


def reflect_shader(session: CommandContext, spec: Shader) -> Reflection | None:
    """The reflection of shader ``spec``, its entry point (of the shader's stage) and the capabilities
    it declares checked against the device; ``None`` when its SPIR-V cannot be read (then only the
    scenario decides, and the driver reports the rest). Records what it cannot write."""
    check_specialization(spec, session.module(spec).code)  # typed values first: sizes below are computed from them
    try:
        r = reflect(session.module(spec).code, {c.id: c.value for c in spec.specialization_constants})
    except SpirvError:
        return None
    ctx, path = session.ctx, session.scenario.path
    session.read_only_bindings[spec.uid] = r.read_only
    if r.entry_points and r.entry_points.get(spec.entry) != spec.stage:
        found = ", ".join(f"'{n}' ({m})" for n, m in sorted(r.entry_points.items()))
        raise ScenarioError(f"shader '{spec.uid}' has no {spec.stage} entry point '{spec.entry}' (it has {found})",
                            file=path, place=f"{spec.place}.entry")
    for capability in sorted(r.capabilities & CAPABILITY_FEATURES.keys()):
        name, feature = CAPABILITY_FEATURES[capability]
        if not getattr(ctx.features.features, feature):
            if capability in RUN_WITHOUT_FEATURE and validation.current() is None:
                if (spec.uid, feature) not in session.warned_features:
                    session.warned_features.add((spec.uid, feature))
                    log.warning("%s: %s: shader %s declares the SPIR-V capability %s, which needs %s, a feature device "
                                "%s lacks: run anyway, as the reference runner does (--validate refuses it)",
                                path, spec.place, repr(spec.uid), name, feature, repr(ctx.info.name))
                continue
            raise UnsupportedDeviceFeature(
                f"shader '{spec.uid}' declares the SPIR-V capability {name}, which needs {feature}, a feature device "
                f"'{ctx.info.name}' lacks", file=path, place=spec.place,
            )
    return r


def check_bindings(session: CommandContext, layout: tuple[LayoutBinding, ...]) -> None:
    """Each resource asked whether it can serve its binding on this device (errors name the scenario file)."""
    assert session.resources is not None
    for lb in layout:
        try:
            session.resources[lb.resource].check_binding(lb)
        except (ScenarioError, UnsupportedDeviceFeature) as exc:
            exc.file = exc.file or str(session.scenario.path)
            raise
