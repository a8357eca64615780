"""``dispatch_spirv_graph``: a data graph from a SPIR-V module (``OpGraphARM``) with no VGF around it.

:func:`model_of` describes the command as the one-segment model a VGF would hold, so that
:class:`~vkcore.graphs.dispatch.PreparedGraph` checks and runs it exactly as a VGF's graph segment: every
binding is a model input (a ``readonly`` tensor) or output (any other), in the set and at the binding the
command gives; ``graph_constants`` are the segment's constants, their GraphConstantIDs their positions in
that list; the module's SPIR-V must declare exactly these (the checks refuse anything else, before any
Vulkan call).
"""
from __future__ import annotations

from ..resources.formats import format_info
from ..scenario.npyio import read_header
from ..scenario.model import DispatchGraph, DispatchSpirvGraph, Graph, GraphConstant, Scenario, Shader, Tensor
from ..shaders.compile import SpirvModule
from .vgf import (
    BindingSlot,
    CodeKind,
    Constant,
    ConstantBinding,
    DescriptorBinding,
    DescriptorSet,
    Module,
    ModuleType,
    Resource,
    ResourceCategory,
    Segment,
    SequenceBinding,
    VgfFile,
    VgfVersion,
    _MemorySource,
)

TENSOR_DESCRIPTOR = 1000460000  # VK_DESCRIPTOR_TYPE_TENSOR_ARM


def as_graph_command(cmd: DispatchSpirvGraph) -> DispatchGraph:
    """The command as the graph machinery takes it (bindings and barrier; no push constants)."""
    return DispatchGraph(index=cmd.index, graph_ref=cmd.graph_ref, bindings=cmd.bindings,
                         implicit_barrier=cmd.implicit_barrier, spelled=cmd.KIND)


def model_of(scenario: Scenario, cmd: DispatchSpirvGraph, module: SpirvModule) -> tuple[VgfFile, str, Graph]:
    """The one-segment model of ``cmd`` (see the module notes), how messages name it, and the graph
    resource it stands for."""
    shader = scenario.by_uid[cmd.graph_ref]
    assert isinstance(shader, Shader)
    resources: list[Resource] = []
    inputs: list[SequenceBinding] = []
    outputs: list[SequenceBinding] = []
    sets: dict[int, list[DescriptorBinding]] = {}
    for b in cmd.bindings:
        tensor = scenario.by_uid[b.resource_ref]
        if not isinstance(tensor, Tensor):
            continue  # the graph checks name it: a graph binds tensors
        index = len(resources)
        category = ResourceCategory.INPUT if tensor.shader_access == "readonly" else ResourceCategory.OUTPUT
        resources.append(Resource(index, category, TENSOR_DESCRIPTOR, format_info(tensor.format).vk_value,
                                  tuple(tensor.dims), None, None, None))
        (inputs if category is ResourceCategory.INPUT else outputs).append(SequenceBinding(b.id, index, b.resource_ref))
        sets.setdefault(b.set, []).append(DescriptorBinding(b.id, index, TENSOR_DESCRIPTOR))
    constants: list[Constant] = []
    for k, uid in enumerate(cmd.graph_constants):
        gc = scenario.by_uid[uid]
        assert isinstance(gc, GraphConstant)
        path = scenario.src_path(gc.src)
        header = read_header(path)
        with open(path, "rb") as f:
            f.seek(header.data_offset)
            data = f.read(header.nbytes)
        index = len(resources)
        resources.append(Resource(index, ResourceCategory.CONSTANT, None, format_info(gc.format).vk_value,
                                  tuple(gc.dims), None, None, None))
        constants.append(Constant(k, index, None, len(data), 0, (k,), _MemorySource(data, str(path))))
    segment = Segment(
        0, ModuleType.GRAPH, shader.uid, 0, None,
        tuple(DescriptorSet(s, True, tuple(bs)) for s, bs in sorted(sets.items())), (),
        tuple(BindingSlot(b.binding, b.resource_index) for b in inputs),
        tuple(BindingSlot(b.binding, b.resource_index) for b in outputs),
        tuple(range(len(constants))), tuple(ConstantBinding(k, k) for k in range(len(constants))), True,
    )
    graph_module = Module(0, ModuleType.GRAPH, shader.uid, shader.entry, CodeKind.SPIRV, module.code)
    model = VgfFile(None, len(module.code), VgfVersion(0, 5, 0), 0, (graph_module,), (segment,), tuple(resources),
                    tuple(constants), tuple(inputs), tuple(outputs))
    graph = Graph(uid=shader.uid, index=shader.index, src=shader.src)
    return model, f"{scenario.path}: {cmd.place}", graph
